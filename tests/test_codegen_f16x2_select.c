/*
 * test_codegen_f16x2_select.c -- the f16x2 builtins of per_token_requant's
 * NaN flag and folded multiplier (f16x2_max_nan, f16x2_low2 and
 * f16x2_high2) from source to PTX, with no GPU.
 *
 * A small kernel using each goes through the built tkc (TKC_PATH) with
 * --emit=ptx: f16x2_max_nan must be one max.NaN.f16x2 per use, and the
 * half selects a split of their word and a rebuild from one half (the
 * form ptxas folds into a later f16x2 operand as R.H0_H0 / R.H1_H1).  The
 * PTX must assemble with ptxas for sm_90a when ptxas is there, and the
 * wrong argument counts and types must be refused with a located error.
 */
#include "tkc_test_support.h"

static const char SOURCE[] =
    "kernel selects<T: int>(x: tensor<u32>[N], out: tensor<u32>[N], f: u32)\n"
    "  where N % 64 == 0 instances { one: <1> }\n"
    "{\n"
    "  launch (bx) in grid(ceildiv(N, 128)) threads(128) {\n"
    "    parallel (t: 128) {\n"
    "      let w = x[bx * 128 + t];\n"
    "      let p = f16x2_abs(w);\n"
    "      let a = f16x2_fma(p, f16x2_low2(w), f);\n"
    "      let b = f16x2_fma(p, f16x2_high2(w), 0x64026402u);\n"
    "      out[bx * 128 + t] = f16x2_max_nan(a, b);\n"
    "    }\n"
    "  }\n"
    "}\n";

Test(codegen_f16x2_select, each_builtin_is_its_ptx) {
    int status;
    char *ptx = tkc_test_compile(SOURCE, "selects.tk", &status);
    cr_assert_eq(status, 0, "tkc failed: %s", ptx);
    int uses = tkc_test_count(ptx, "max.NaN.f16x2 %r");
    cr_expect_gt(uses, 0, "%s", ptx);
    cr_expect_eq(tkc_test_count(ptx, "fma.rn.f16x2 %r"), 2 * uses, "%s", ptx);
    cr_expect_eq(tkc_test_count(ptx, "{lo, lo}; }"), uses, "%s", ptx);
    cr_expect_eq(tkc_test_count(ptx, "{hi, hi}; }"), uses, "%s", ptx);
    cr_expect_eq(tkc_test_count(ptx, "shr.u32"), 0, "%s", ptx);
    cr_expect(tkc_test_ptxas_accepts(ptx), "ptxas rejected:\n%s", ptx);
    free(ptx);
}

Test(codegen_f16x2_select, wrong_arguments_are_refused) {
    static const struct { const char *call, *message; } cases[] = {
        {"f16x2_max_nan(g, 1u)", "needs a u32 argument"},
        {"f16x2_low2(g)", "needs a u32 argument"},
        {"f16x2_high2(1u, 2u)", "takes 1 argument"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char source[1024];
        snprintf(source, sizeof source,
                 "kernel k<T: int>(out: tensor<u32>[N], g: f32) where N %% 64 == 0\n"
                 "  instances { one: <1> }\n"
                 "{\n"
                 "  launch (bx) in grid(1) threads(128) {\n"
                 "    parallel (t: 128) { out[t] = %s; }\n"
                 "  }\n"
                 "}\n",
                 cases[i].call);
        int status;
        char *out = tkc_test_compile(source, "bad.tk", &status);
        cr_expect_neq(status, 0, "%s compiled", cases[i].call);
        cr_expect(strstr(out, cases[i].message) != NULL, "%s: %s", cases[i].call, out);
        cr_expect(strstr(out, "bad.tk:5:") != NULL, "%s: no location in %s", cases[i].call, out);
        free(out);
    }
}
