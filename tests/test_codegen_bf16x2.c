/*
 * test_codegen_bf16x2.c -- the packed 32-bit register builtins (bf16x2,
 * bf16x2_mul / _fma / _min / _max / _max_xorsign_abs, prmt) from source
 * to PTX, with no GPU.
 *
 * A small kernel using each builtin goes through the built tkc (TKC_PATH)
 * with --emit=ptx; the PTX must hold each instruction once per use, with
 * the packed operands in 32-bit registers, and the bf16x2 builtin must
 * join the halves of a loaded word without any conversion.  The wrong
 * argument types must be refused with a located error.
 */
#include "tkc_test_support.h"

static const char SOURCE[] =
    "kernel packed<T: int>(x: tensor<bf16>[N], out: tensor<u32>[N / 2], f: f32)\n"
    "  where N % 64 == 0 instances { one: <1> }\n"
    "{\n"
    "  launch (bx) in grid(ceildiv(N, 1024)) threads(128) {\n"
    "    parallel (t: 128) {\n"
    "      local w: bf16[8];\n"
    "      copy(x[bx * 1024 + t * 8 : +8], w);\n"
    "      let p = bf16x2(w[0], w[1]);\n"
    "      let q = bf16x2(w[2], w[3]);\n"
    "      let m = bf16x2_mul(p, (bitcast<u32>(f) >> 16) * 0x10001u);\n"
    "      let a = bf16x2_fma(m, q, 0x3F803F80u);\n"
    "      let b = bf16x2_min(a, 0x40C040C0u);\n"
    "      let c = bf16x2_max(b, q);\n"
    "      let d = bf16x2_max_xorsign_abs(c, 0x3F803F80u);\n"
    "      out[bx * 512 + t] = prmt(d, p, 0x6420u);\n"
    "    }\n"
    "  }\n"
    "}\n";

Test(codegen_bf16x2, each_builtin_is_one_ptx_instruction) {
    int status;
    char *ptx = tkc_test_compile(SOURCE, "packed.tk", &status);
    cr_assert_eq(status, 0, "tkc failed: %s", ptx);
    cr_expect_eq(tkc_test_count(ptx, "mul.rn.bf16x2 %r"), 1, "%s", ptx);
    cr_expect_eq(tkc_test_count(ptx, "fma.rn.bf16x2 %r"), 1);
    cr_expect_eq(tkc_test_count(ptx, "min.bf16x2 %r"), 1);
    cr_expect_eq(tkc_test_count(ptx, "max.bf16x2 %r"), 1);
    cr_expect_eq(tkc_test_count(ptx, "max.xorsign.abs.bf16x2 %r"), 1);
    cr_expect_eq(tkc_test_count(ptx, "prmt.b32 %r"), 1);
    /* the pairs come straight from the 16-byte load: no half-by-half
     * rebuilding of the words */
    cr_expect_eq(tkc_test_count(ptx, "cvt.u32.u16"), 0, "%s", ptx);
    cr_expect_eq(tkc_test_count(ptx, "ld.global.nc.v4.b32"), 1, "%s", ptx);
    free(ptx);
}

Test(codegen_bf16x2, wrong_argument_types_are_refused) {
    static const struct { const char *call, *message; } cases[] = {
        {"bf16x2_mul(f, 1u)", "needs a u32 argument"},
        {"bf16x2(f, w[1])", "needs bf16 arguments"},
        {"prmt(1u, 2u)", "takes 3 arguments"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char source[1024];
        snprintf(source, sizeof source,
                 "kernel bad<T: int>(x: tensor<bf16>[N], out: tensor<u32>[N], f: f32)\n"
                 "  where N %% 64 == 0 instances { one: <1> }\n"
                 "{\n"
                 "  launch (bx) in grid(ceildiv(N, 128)) threads(128) {\n"
                 "    parallel (t: 128) {\n"
                 "      local w: bf16[2];\n"
                 "      copy(x[bx * 128 + t : +2], w);\n"
                 "      out[bx * 128 + t] = %s;\n"
                 "    }\n"
                 "  }\n"
                 "}\n",
                 cases[i].call);
        int status;
        char *err = tkc_test_compile(source, "packed.tk", &status);
        cr_expect_neq(status, 0, "%s compiled", cases[i].call);
        cr_expect_not_null(strstr(err, cases[i].message), "%s: %s", cases[i].call, err);
        cr_expect_not_null(strstr(err, "packed.tk:8:"), "%s: no location in %s",
                           cases[i].call, err);
        free(err);
    }
}
