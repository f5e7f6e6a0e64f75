/*
 * test_codegen_f16x2.c -- the packed f16x2 builtins (f16x2_mul / _fma /
 * _min / _max / _max_xorsign_abs / _abs, e4m3x2_f16x2 and
 * e4m3x2_f16x2_high) from source to PTX, with no GPU.
 *
 * A small kernel using each builtin goes through the built tkc (TKC_PATH)
 * with --emit=ptx; the PTX must hold each instruction once per use and
 * lane on 32-bit registers (the e4m3 conversions on the low and the high
 * half of their word, with no shift), and the PTX must assemble with
 * ptxas for sm_90a when ptxas is there.  The wrong argument types must be
 * refused with a located error.
 */
#include "tkc_test_support.h"

static const char SOURCE[] =
    "kernel packed<T: int>(x: tensor<u32>[N], out: tensor<u32>[N], f: u32)\n"
    "  where N % 64 == 0 instances { one: <1> }\n"
    "{\n"
    "  launch (bx) in grid(ceildiv(N, 128)) threads(128) {\n"
    "    parallel (t: 128) {\n"
    "      let p = e4m3x2_f16x2(x[bx * 128 + t]);\n"
    "      let m = f16x2_mul(p, f);\n"
    "      let a = f16x2_fma(m, p, 0x3C003C00u);\n"
    "      let b = f16x2_min(a, 0x46004600u);\n"
    "      let c = f16x2_max(b, p);\n"
    "      let h = f16x2_max(e4m3x2_f16x2_high(x[bx * 128 + t]), c);\n"
    "      out[bx * 128 + t] = f16x2_max_xorsign_abs(f16x2_abs(h), 0x3C003C00u);\n"
    "    }\n"
    "  }\n"
    "}\n";

Test(codegen_f16x2, each_builtin_is_one_ptx_instruction) {
    int status;
    char *ptx = tkc_test_compile(SOURCE, "packed.tk", &status);
    cr_assert_eq(status, 0, "tkc failed: %s", ptx);
    /* one instruction per use and element (the loop may be vectorised:
     * every builtin then appears once per lane) */
    int uses = tkc_test_count(ptx, "mul.rn.f16x2 %r");
    cr_expect_gt(uses, 0, "%s", ptx);
    cr_expect_eq(tkc_test_count(ptx, "fma.rn.f16x2 %r"), uses);
    cr_expect_eq(tkc_test_count(ptx, "min.f16x2 %r"), uses);
    cr_expect_eq(tkc_test_count(ptx, "max.f16x2 %r"), 2 * uses);
    cr_expect_eq(tkc_test_count(ptx, "max.xorsign.abs.f16x2 %r"), uses);
    cr_expect_eq(tkc_test_count(ptx, "\tabs.f16x2 %r"), uses, "%s", ptx);
    cr_expect_eq(tkc_test_count(ptx, "cvt.rn.f16x2.e4m3x2 %r"), 2 * uses, "%s", ptx);
    /* the low-half converter reads `lo` of the split word, the high-half
     * one `hi`, and neither shifts its word first */
    cr_expect_eq(tkc_test_count(ptx, ", lo; }"), uses, "%s", ptx);
    cr_expect_eq(tkc_test_count(ptx, ", hi; }"), uses, "%s", ptx);
    cr_expect_eq(tkc_test_count(ptx, "shr.u32"), 0, "%s", ptx);
    cr_expect(tkc_test_ptxas_accepts(ptx), "ptxas rejected:\n%s", ptx);
    free(ptx);
}

Test(codegen_f16x2, wrong_argument_types_are_refused) {
    static const struct { const char *call, *message; } cases[] = {
        {"f16x2_mul(g, 1u)", "needs a u32 argument"},
        {"e4m3x2_f16x2(g)", "needs a u32 argument"},
        {"e4m3x2_f16x2_high(g)", "needs a u32 argument"},
        {"f16x2_fma(1u, 2u)", "takes 3 arguments"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char source[1024];
        snprintf(source, sizeof source,
                 "kernel bad<T: int>(x: tensor<u32>[N], out: tensor<u32>[N], g: f32)\n"
                 "  where N %% 64 == 0 instances { one: <1> }\n"
                 "{\n"
                 "  launch (bx) in grid(ceildiv(N, 128)) threads(128) {\n"
                 "    parallel (t: 128) {\n"
                 "      let w = x[bx * 128 + t];\n"
                 "      out[bx * 128 + t] = %s;\n"
                 "    }\n"
                 "  }\n"
                 "}\n",
                 cases[i].call);
        int status;
        char *err = tkc_test_compile(source, "packed.tk", &status);
        cr_expect_neq(status, 0, "%s compiled", cases[i].call);
        cr_expect_not_null(strstr(err, cases[i].message), "%s: %s", cases[i].call, err);
        cr_expect_not_null(strstr(err, "packed.tk:7:"), "%s: no location in %s",
                           cases[i].call, err);
        free(err);
    }
}
