/*
 * test_rcp_approx.c -- the `rcp_approx` builtin (INTR_RCP_APPROX,
 * compiler/codegen_math.c) is one rcp.approx.ftz.f32, the MUFU.RCP seed
 * that kernels/swiglu_backward.tk refines into rcp.rn / div.rn results
 * with explicit FMAs.  The test pins the lowering (no IEEE rcp.rn or
 * div.rn, no libcall) and the front end's typing of the builtin.
 */
#include "tkc_test_support.h"

Test(rcp_approx, lowers_to_one_mufu_seed) {
    int status;
    char *ptx = tkc_test_compile(
        "kernel rc(x: tensor<f32>[N], out: tensor<f32>[N]) {\n"
        "  launch (bx) in grid(ceildiv(N, 32)) threads(32) {\n"
        "    parallel (i: 32) {\n"
        "      if (bx * 32 + i < N) { out[bx * 32 + i] = rcp_approx(x[bx * 32 + i]); }\n"
        "    }\n"
        "  }\n"
        "}\n",
        "k.tk", &status);
    cr_assert_eq(status, 0, "tkc failed:\n%s", ptx);
    cr_assert_geq(tkc_test_count(ptx, "rcp.approx.ftz.f32"), 1,
                  "the approximate reciprocal:\n%s", ptx);
    cr_assert_eq(tkc_test_count(ptx, "rcp.rn"), 0, "no IEEE reciprocal:\n%s", ptx);
    cr_assert_eq(tkc_test_count(ptx, "div.rn"), 0, "no IEEE division:\n%s", ptx);
    cr_assert_eq(tkc_test_count(ptx, "call"), 0, "no call:\n%s", ptx);
    free(ptx);
}

Test(rcp_approx, takes_one_f32) {
    int status;
    char *err = tkc_test_compile(
        "kernel rc(x: tensor<i32>[N], out: tensor<f32>[N]) {\n"
        "  launch (bx) in grid(1) threads(32) {\n"
        "    parallel (i: 32) { out[i] = rcp_approx(x[i]); }\n"
        "  }\n"
        "}\n",
        "k.tk", &status);
    cr_assert_neq(status, 0);
    cr_assert(strstr(err, "rcp_approx") != NULL, "diagnostic names rcp_approx:\n%s", err);
    free(err);
    err = tkc_test_compile(
        "kernel rc(x: tensor<f32>[N], out: tensor<f32>[N]) {\n"
        "  launch (bx) in grid(1) threads(32) {\n"
        "    parallel (i: 32) { out[i] = rcp_approx(x[i], x[i]); }\n"
        "  }\n"
        "}\n",
        "k.tk", &status);
    cr_assert_neq(status, 0, "two arguments must be rejected");
    free(err);
}
