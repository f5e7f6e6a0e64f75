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
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static char *compile_to_ptx(const char *source, int *status)
{
    char dir[] = "/tmp/tk_log1p_XXXXXX";
    cr_assert(mkdtemp(dir) != NULL);
    char tk_path[96], ptx_path[96], command[512];
    snprintf(tk_path, sizeof tk_path, "%s/k.tk", dir);
    snprintf(ptx_path, sizeof ptx_path, "%s/k.ptx", dir);
    FILE *f = fopen(tk_path, "w");
    cr_assert(f != NULL);
    fputs(source, f);
    fclose(f);
    snprintf(command, sizeof command, "%s %s --emit=ptx -o %s 2>%s/err", TKC_PATH, tk_path,
             ptx_path, dir);
    int rc = system(command);
    *status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    f = fopen(*status == 0 ? ptx_path : (snprintf(tk_path, sizeof tk_path, "%s/err", dir),
                                         tk_path),
              "rb");
    char *text = calloc(1, 1 << 20);
    if (f) {
        size_t got = fread(text, 1, (1 << 20) - 1, f);
        text[got] = 0;
        fclose(f);
    }
    snprintf(command, sizeof command, "rm -rf %s", dir);
    if (system(command) != 0)
        cr_log_warn("could not remove %s", dir);
    return text;
}

static int count(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)) != NULL; p++)
        n++;
    return n;
}

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
    char *ptx = compile_to_ptx(KERNEL, &status);
    cr_assert_eq(status, 0, "tkc failed:\n%s", ptx);
    /* layout inference may give a thread several elements: every one of
     * them gets the whole sequence */
    int calls = count(ptx, "add.rz.f32");
    cr_assert_geq(calls, 1, "a round-toward-zero add per call:\n%s", ptx);
    static const char *const coefficients[] = {
        "0fBD39BF78", "0f3DD80012", "0fBE0778E0", "0f3E146475", "0fBE2A68DD",
        "0f3E4CAF9E", "0fBE800042", "0f3EAAAAE6", "0f3F317218", "0f34000000"};
    for (size_t i = 0; i < sizeof coefficients / sizeof coefficients[0]; i++)
        cr_assert_eq(count(ptx, coefficients[i]), calls, "coefficient %s:\n%s",
                     coefficients[i], ptx);
    /* 8 polynomial steps, fma(p*x, x, x), e*ln2 + p, fma(a, inf, inf), and
     * (4 - e) * 0.25 - 1 */
    cr_assert_eq(count(ptx, "fma.rn.f32"), 12 * calls, "fma count:\n%s", ptx);
    cr_assert_eq(count(ptx, ".approx"), 0, "no approximate instruction:\n%s", ptx);
    cr_assert_eq(count(ptx, "call"), 0, "no call:\n%s", ptx);
    free(ptx);
}

Test(log1p, takes_one_f32) {
    int status;
    char *err = compile_to_ptx(
        "kernel lp(x: tensor<i32>[N], out: tensor<f32>[N]) {\n"
        "  launch (bx) in grid(1) threads(32) {\n"
        "    parallel (i: 32) { out[i] = log1p(x[i]); }\n"
        "  }\n"
        "}\n",
        &status);
    cr_assert_neq(status, 0);
    cr_assert(strstr(err, "log1p") != NULL, "diagnostic names log1p:\n%s", err);
    free(err);
}
