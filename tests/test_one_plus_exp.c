/*
 * test_one_plus_exp.c -- the `one_plus_exp` builtin (INTR_ONE_PLUS_EXP,
 * compiler/codegen_math.c): `1.0 + exp(x)` bit for bit, with expf's last
 * step (ex2 result e times the power of two 2^n) and the add as one
 * fma.rn.f32 e * 2^n + 1.  The test pins the lowering against `1.0 +
 * exp(x)` (the same libdevice sequence, without its mul.rn.f32 and the
 * add.f32 of 1, with an fma of addend 1.0 instead) and checks the identity it rests on
 * in IEEE arithmetic on the CPU: fma(e, 2^n, 1) == (e * 2^n) + 1 for every
 * scale the sequence builds (2^-126 .. 2^126) and e over the ex2 results
 * (0, normal values, +inf, NaN).
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "reference.h"
#include "tkc_test_support.h"

static char *compile_expression(const char *expression) {
    char source[512];
    snprintf(source, sizeof source,
             "kernel k(x: tensor<f32>[N], out: tensor<f32>[N]) {\n"
             "  launch (bx) in grid(1) threads(32) {\n"
             "    parallel (i: 32) { out[i] = %s; }\n"
             "  }\n"
             "}\n",
             expression);
    int status;
    char *ptx = tkc_test_compile(source, "k.tk", &status);
    cr_assert_eq(status, 0, "tkc failed on %s:\n%s", expression, ptx);
    return ptx;
}

Test(one_plus_exp, is_the_exp_sequence_with_one_fma_for_the_tail) {
    char *fused = compile_expression("one_plus_exp(x[i])");
    char *plain = compile_expression("1.0 + exp(x[i])");
    /* 32 threads, one element each: per element counts */
    int ex2 = tkc_test_count(fused, "ex2.approx.ftz.f32");
    cr_assert_geq(ex2, 1, "the libdevice ex2:\n%s", fused);
    cr_assert_eq(ex2, tkc_test_count(plain, "ex2.approx.ftz.f32"));
    cr_assert_eq(tkc_test_count(fused, "fma.rm.f32"), tkc_test_count(plain, "fma.rm.f32"));
    cr_assert_eq(tkc_test_count(fused, "add.rn.f32"), tkc_test_count(plain, "add.rn.f32"),
                 "the range reduction's subtraction stays:\n%s", fused);
    cr_assert_eq(tkc_test_count(plain, "mul.rn.f32"), ex2);
    cr_assert_eq(tkc_test_count(fused, "mul.rn.f32"), 0, "expf's multiply by 2^n is gone:\n%s",
                 fused);
    cr_assert_eq(tkc_test_count(plain, "add.f32"), ex2);
    cr_assert_eq(tkc_test_count(fused, "add.f32"), 0, "the add of 1 is gone:\n%s", fused);
    cr_assert_eq(tkc_test_count(fused, ", 0f3F800000;"), ex2,
                 "one fma with addend 1.0 per exp:\n%s", fused);
    cr_assert_eq(tkc_test_count(fused, "call"), 0, "no call:\n%s", fused);
    free(fused);
    free(plain);
}

Test(one_plus_exp, takes_one_f32) {
    int status;
    char *err = tkc_test_compile(
        "kernel k(x: tensor<i32>[N], out: tensor<f32>[N]) {\n"
        "  launch (bx) in grid(1) threads(32) {\n"
        "    parallel (i: 32) { out[i] = one_plus_exp(x[i]); }\n"
        "  }\n"
        "}\n",
        "k.tk", &status);
    cr_assert_neq(status, 0);
    cr_assert(strstr(err, "one_plus_exp") != NULL, "diagnostic names one_plus_exp:\n%s", err);
    free(err);
}

/* fma(e, 2^n, 1) against the rounded product plus 1 (volatile: no
 * contraction of the reference into an fma). */
static void expect_identity(float e, int n) {
    float scale = ldexpf(1.0f, n);
    volatile float product = e * scale;
    volatile float sum = product + 1.0f;
    float fused = fmaf(e, scale, 1.0f);
    bool same = ref_f32_bits(fused) == ref_f32_bits(sum) || (isnan(fused) && isnan(sum));
    cr_assert(same, "e = %a, n = %d: fma %a, mul+add %a", (double)e, n, (double)fused,
              (double)sum);
}

Test(one_plus_exp, fma_tail_equals_multiply_then_add) {
    static const float specials[] = {0.0f, 1.0f, 0x1.fffffep-1f, 0x1.000002p+0f, 0x1.6a09e6p+0f,
                                     0x1p-126f, 0x1.fffffep+127f, INFINITY, NAN};
    uint32_t state = 12345u;
    for (int n = -126; n <= 126; n++) {
        for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++)
            expect_identity(specials[i], n);
        for (int i = 0; i < 2000; i++) {
            state = state * 1664525u + 1013904223u;
            /* a normal e with a random significand and exponent -40 .. 40
             * (ex2 of the reduced argument lies in [0.5, 2]; wider to
             * reach the overflow and subnormal products at every n) */
            uint32_t exponent = 127u - 40u + (state >> 8) % 81u;
            expect_identity(ref_f32_from_bits(exponent << 23 | (state & 0x7FFFFFu)), n);
        }
    }
}
