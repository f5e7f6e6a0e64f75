/*
 * test_log1p.c -- the `log1p` builtin (INTR_LOG1P, compiler/codegen_math.c)
 * lowers to libdevice log1pf's exact operation sequence.
 *
 * The sequence uses only IEEE operations, so tests/ref/moe_gate.c
 * reproduces it bit for bit on the CPU (test_ref_moe_gate checks that
 * emulation against glibc); this test pins the GPU side: tkc must emit the
 * round-toward-zero add, the eight polynomial fma.rn with libdevice's
 * coefficients, ln 2 and the 2^-23 exponent scale, and no approximate
 * instruction (lg2.approx) or libcall.  It also checks the front end's
 * typing of the builtin.
 */
#include "tkc_test_support.h"

static const char KERNEL[] =
    "kernel lp(x: tensor<f32>[N], out: tensor<f32>[N]) {\n"
    "  launch (bx) in grid(ceildiv(N, 32)) threads(32) {\n"
    "    parallel (i: 32) {\n"
    "      if (bx * 32 + i < N) { out[bx * 32 + i] = log1p(x[bx * 32 + i]); }\n"
    "    }\n"
    "  }\n"
    "}\n";

Test(log1p, lowers_to_the_libdevice_sequence) {
    int status;
    char *ptx = tkc_test_compile(KERNEL, "k.tk", &status);
    cr_assert_eq(status, 0, "tkc failed:\n%s", ptx);
    /* layout inference may give a thread several elements: every one of
     * them gets the whole sequence */
    int calls = tkc_test_count(ptx, "add.rz.f32");
    cr_assert_geq(calls, 1, "a round-toward-zero add per call:\n%s", ptx);
    static const char *const coefficients[] = {
        "0fBD39BF78", "0f3DD80012", "0fBE0778E0", "0f3E146475", "0fBE2A68DD",
        "0f3E4CAF9E", "0fBE800042", "0f3EAAAAE6", "0f3F317218", "0f34000000"};
    for (size_t i = 0; i < sizeof coefficients / sizeof coefficients[0]; i++)
        cr_assert_eq(tkc_test_count(ptx, coefficients[i]), calls, "coefficient %s:\n%s",
                     coefficients[i], ptx);
    /* 8 polynomial steps, fma(p*x, x, x), e*ln2 + p, fma(a, inf, inf), and
     * (4 - e) * 0.25 - 1 */
    cr_assert_eq(tkc_test_count(ptx, "fma.rn.f32"), 12 * calls, "fma count:\n%s", ptx);
    cr_assert_eq(tkc_test_count(ptx, ".approx"), 0, "no approximate instruction:\n%s", ptx);
    cr_assert_eq(tkc_test_count(ptx, "call"), 0, "no call:\n%s", ptx);
    free(ptx);
}

Test(log1p, takes_one_f32) {
    int status;
    char *err = tkc_test_compile(
        "kernel lp(x: tensor<i32>[N], out: tensor<f32>[N]) {\n"
        "  launch (bx) in grid(1) threads(32) {\n"
        "    parallel (i: 32) { out[i] = log1p(x[i]); }\n"
        "  }\n"
        "}\n",
        "k.tk", &status);
    cr_assert_neq(status, 0);
    cr_assert(strstr(err, "log1p") != NULL, "diagnostic names log1p:\n%s", err);
    free(err);
}
