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
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* Compiles `source` with tkc --emit=ptx; returns the PTX (or NULL) and
 * the compiler's stderr in *err. */
static char *compile(const char *source, char **err) {
    char dir[] = "/tmp/test_codegen_bf16x2-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char path[128], ptx[128], log[128], command[512];
    snprintf(path, sizeof path, "%s/packed.tk", dir);
    snprintf(ptx, sizeof ptx, "%s/packed.ptx", dir);
    snprintf(log, sizeof log, "%s/err.txt", dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(source, f);
    fclose(f);
    snprintf(command, sizeof command, "'%s' '%s' --emit=ptx -o '%s' 2>'%s'", TKC_PATH, path,
             ptx, log);
    int status = system(command);
    char *texts[2] = {NULL, NULL};
    const char *files[2] = {ptx, log};
    for (int i = 0; i < 2; i++) {
        FILE *in = fopen(files[i], "rb");
        if (!in)
            continue;
        fseek(in, 0, SEEK_END);
        long size = ftell(in);
        fseek(in, 0, SEEK_SET);
        texts[i] = calloc((size_t)size + 1, 1);
        cr_assert_not_null(texts[i]);
        cr_assert_eq(fread(texts[i], 1, (size_t)size, in), (size_t)size);
        fclose(in);
        remove(files[i]);
    }
    remove(path);
    rmdir(dir);
    *err = texts[1] ? texts[1] : calloc(1, 1);
    if (status != 0) {
        free(texts[0]);
        return NULL;
    }
    return texts[0];
}

static int count(const char *text, const char *needle) {
    int n = 0;
    for (const char *p = strstr(text, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

Test(codegen_bf16x2, each_builtin_is_one_ptx_instruction) {
    char *err;
    char *ptx = compile(SOURCE, &err);
    cr_assert_not_null(ptx, "tkc failed: %s", err);
    cr_expect_eq(count(ptx, "mul.rn.bf16x2 %r"), 1, "%s", ptx);
    cr_expect_eq(count(ptx, "fma.rn.bf16x2 %r"), 1);
    cr_expect_eq(count(ptx, "min.bf16x2 %r"), 1);
    cr_expect_eq(count(ptx, "max.bf16x2 %r"), 1);
    cr_expect_eq(count(ptx, "max.xorsign.abs.bf16x2 %r"), 1);
    cr_expect_eq(count(ptx, "prmt.b32 %r"), 1);
    /* the pairs come straight from the 16-byte load: no half-by-half
     * rebuilding of the words */
    cr_expect_eq(count(ptx, "cvt.u32.u16"), 0, "%s", ptx);
    cr_expect_eq(count(ptx, "ld.global.nc.v4.b32"), 1, "%s", ptx);
    free(ptx);
    free(err);
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
        char *err;
        char *ptx = compile(source, &err);
        cr_expect_null(ptx, "%s compiled", cases[i].call);
        cr_expect_not_null(strstr(err, cases[i].message), "%s: %s", cases[i].call, err);
        cr_expect_not_null(strstr(err, "packed.tk:8:"), "%s: no location in %s",
                           cases[i].call, err);
        free(ptx);
        free(err);
    }
}
