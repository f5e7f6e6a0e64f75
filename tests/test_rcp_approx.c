/*
 * test_rcp_approx.c -- the `rcp_approx` builtin (INTR_RCP_APPROX,
 * compiler/codegen_math.c) is one rcp.approx.ftz.f32, the MUFU.RCP seed
 * that kernels/swiglu_backward.tk refines into rcp.rn / div.rn results
 * with explicit FMAs.  The test pins the lowering (no IEEE rcp.rn or
 * div.rn, no libcall) and the front end's typing of the builtin.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

/* Compiles `source` with tkc to PTX; returns the PTX text, or tkc's
 * diagnostics when it fails (status != 0). */
static char *compile_to_ptx(const char *source, int *status)
{
    char dir[] = "/tmp/tk_rcp_XXXXXX";
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
    if (*status != 0)
        snprintf(ptx_path, sizeof ptx_path, "%s/err", dir);
    f = fopen(ptx_path, "rb");
    char *text = calloc(1, 1 << 20);
    cr_assert(text != NULL);
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

Test(rcp_approx, lowers_to_one_mufu_seed) {
    int status;
    char *ptx = compile_to_ptx(
        "kernel rc(x: tensor<f32>[N], out: tensor<f32>[N]) {\n"
        "  launch (bx) in grid(ceildiv(N, 32)) threads(32) {\n"
        "    parallel (i: 32) {\n"
        "      if (bx * 32 + i < N) { out[bx * 32 + i] = rcp_approx(x[bx * 32 + i]); }\n"
        "    }\n"
        "  }\n"
        "}\n",
        &status);
    cr_assert_eq(status, 0, "tkc failed:\n%s", ptx);
    cr_assert_geq(count(ptx, "rcp.approx.ftz.f32"), 1, "the approximate reciprocal:\n%s", ptx);
    cr_assert_eq(count(ptx, "rcp.rn"), 0, "no IEEE reciprocal:\n%s", ptx);
    cr_assert_eq(count(ptx, "div.rn"), 0, "no IEEE division:\n%s", ptx);
    cr_assert_eq(count(ptx, "call"), 0, "no call:\n%s", ptx);
    free(ptx);
}

Test(rcp_approx, takes_one_f32) {
    int status;
    char *err = compile_to_ptx(
        "kernel rc(x: tensor<i32>[N], out: tensor<f32>[N]) {\n"
        "  launch (bx) in grid(1) threads(32) {\n"
        "    parallel (i: 32) { out[i] = rcp_approx(x[i]); }\n"
        "  }\n"
        "}\n",
        &status);
    cr_assert_neq(status, 0);
    cr_assert(strstr(err, "rcp_approx") != NULL, "diagnostic names rcp_approx:\n%s", err);
    free(err);
    err = compile_to_ptx(
        "kernel rc(x: tensor<f32>[N], out: tensor<f32>[N]) {\n"
        "  launch (bx) in grid(1) threads(32) {\n"
        "    parallel (i: 32) { out[i] = rcp_approx(x[i], x[i]); }\n"
        "  }\n"
        "}\n",
        &status);
    cr_assert_neq(status, 0, "two arguments must be rejected");
    free(err);
}
