/*
 * test_codegen_f16x2.c -- the packed f16x2 builtins (f16x2_mul / _fma /
 * _min / _max / _max_xorsign_abs, e4m3x2_f16x2) from source to PTX, with
 * no GPU.
 *
 * A small kernel using each builtin goes through the built tkc (TKC_PATH)
 * with --emit=ptx; the PTX must hold each instruction once per use and
 * lane on 32-bit registers (the e4m3 conversion on the low half of its
 * word), and
 * the PTX must assemble with ptxas for sm_90a when ptxas is there.  The
 * wrong argument types must be refused with a located error.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
    "      out[bx * 128 + t] = f16x2_max_xorsign_abs(c, 0x3C003C00u);\n"
    "    }\n"
    "  }\n"
    "}\n";

/* Compiles `source` with tkc --emit=ptx; returns the PTX (or NULL) and
 * the compiler's stderr in *err. */
static char *compile(const char *source, char **err) {
    char dir[] = "/tmp/test_codegen_f16x2-XXXXXX";
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

Test(codegen_f16x2, each_builtin_is_one_ptx_instruction) {
    char *err;
    char *ptx = compile(SOURCE, &err);
    cr_assert_not_null(ptx, "tkc failed: %s", err);
    /* one instruction per use and element (the loop may be vectorised:
     * every builtin then appears once per lane) */
    int uses = count(ptx, "mul.rn.f16x2 %r");
    cr_expect_gt(uses, 0, "%s", ptx);
    cr_expect_eq(count(ptx, "fma.rn.f16x2 %r"), uses);
    cr_expect_eq(count(ptx, "min.f16x2 %r"), uses);
    cr_expect_eq(count(ptx, "max.f16x2 %r"), uses);
    cr_expect_eq(count(ptx, "max.xorsign.abs.f16x2 %r"), uses);
    cr_expect_eq(count(ptx, "cvt.rn.f16x2.e4m3x2 %r"), uses, "%s", ptx);
    /* ptxas accepts the inline assembly (its scoped .b16 registers) */
    if (access("/usr/local/cuda/bin/ptxas", X_OK) == 0) {
        char dir[] = "/tmp/test_codegen_f16x2-ptxas-XXXXXX";
        cr_assert_not_null(mkdtemp(dir));
        char path[128], cubin[128], command[512];
        snprintf(path, sizeof path, "%s/packed.ptx", dir);
        snprintf(cubin, sizeof cubin, "%s/packed.cubin", dir);
        FILE *f = fopen(path, "w");
        cr_assert_not_null(f);
        fputs(ptx, f);
        fclose(f);
        snprintf(command, sizeof command,
                 "/usr/local/cuda/bin/ptxas -arch=sm_90a '%s' -o '%s' 2>/dev/null", path, cubin);
        cr_expect_eq(system(command), 0, "ptxas rejected:\n%s", ptx);
        remove(path);
        remove(cubin);
        rmdir(dir);
    }
    free(ptx);
    free(err);
}

Test(codegen_f16x2, wrong_argument_types_are_refused) {
    static const struct { const char *call, *message; } cases[] = {
        {"f16x2_mul(g, 1u)", "needs a u32 argument"},
        {"e4m3x2_f16x2(g)", "needs a u32 argument"},
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
        char *err;
        char *ptx = compile(source, &err);
        cr_expect_null(ptx, "%s compiled", cases[i].call);
        cr_expect_not_null(strstr(err, cases[i].message), "%s: %s", cases[i].call, err);
        cr_expect_not_null(strstr(err, "packed.tk:7:"), "%s: no location in %s",
                           cases[i].call, err);
        free(ptx);
        free(err);
    }
}
