/*
 * test_codegen_floor_div.c -- the PTX of signed floor division and
 * modulo (TileLang semantics, compiler/codegen_expr.c), without a GPU.
 *
 * By a constant power of two 2^n they are an arithmetic shift right by n
 * and a mask of the low n bits, exactly, for negative dividends too (two's
 * complement: floor(-5 / 4) = -2 = -5 >> 2, -5 mod 4 = 3 = -5 & 3), so
 * codegen emits just those, in scalar and vectorised code: a pipeline's
 * stage and parity (it % S, it / S % 2 of a counter LLVM cannot prove
 * non-negative) were ten instructions through the truncating division and
 * its correction.  Any other divisor keeps the general form.  The GPU
 * golden tests check the arithmetic of every kernel.
 */
#include "tkc_test_support.h"

/* s - i may be negative: nothing lets LLVM assume a >= 0.  The parallel
 * loop is vectorised (a divisor vector), the serial one is not. */
static const char SOURCE[] =
    "kernel floor_pow2(q: tensor<i32>[M], r: tensor<i32>[M], s: i32)\n"
    "{\n"
    "  launch (block) in grid(1) threads(32) {\n"
    "    parallel (i: 32) {\n"
    "      q[i] = (s - i) / 8;\n"
    "      r[i] = (s - i) % 8;\n"
    "    }\n"
    "  }\n"
    "}\n"
    "\n"
    "kernel floor_pow2_serial(q: tensor<i32>[M], s: i32)\n"
    "{\n"
    "  launch (block) in grid(1) threads(1) {\n"
    "    for j in serial(0, M) {\n"
    "      q[j] = (s - j) / 4 % 2 + (s - j) % 4;\n"
    "    }\n"
    "  }\n"
    "}\n"
    "\n"
    "kernel floor_six(q: tensor<i32>[M], r: tensor<i32>[M], s: i32)\n"
    "{\n"
    "  launch (block) in grid(1) threads(32) {\n"
    "    parallel (i: 32) {\n"
    "      q[i] = (s - i) / 6;\n"
    "      r[i] = (s - i) % 6;\n"
    "    }\n"
    "  }\n"
    "}\n";

/* Lines of `text` that contain `op` and end with `tail`. */
static int lines_with(const char *text, const char *op, const char *tail) {
    int count = 0;
    size_t tail_length = strlen(tail);
    for (const char *line = text; *line;) {
        const char *end = strchr(line, '\n');
        size_t length = end ? (size_t)(end - line) : strlen(line);
        const char *found = strstr(line, op);
        if (found && found < line + length && length >= tail_length &&
            memcmp(line + length - tail_length, tail, tail_length) == 0)
            count++;
        line += length + (end != NULL);
    }
    return count;
}

Test(codegen_floor_div, power_of_two_is_shift_and_mask) {
    int status;
    char *ptx = tkc_test_compile(SOURCE, "floor_div.tk", &status);
    cr_assert_eq(status, 0, "%s", ptx);
    /* four lanes per thread: four shifts and four masks, and none of the
     * truncating division's sign fix-up (a >> 31, then >>> 29 as the
     * rounding bias) */
    char *vector = tkc_test_entry(ptx, "floor_pow2__default");
    cr_expect_eq(lines_with(vector, "shr.s32", ", 3;"), 4, "%s", vector);
    cr_expect_eq(lines_with(vector, "and.b32", ", 7;"), 4, "%s", vector);
    cr_expect_eq(tkc_test_count(vector, ", 31;"), 0, "%s", vector);
    cr_expect_eq(tkc_test_count(vector, ", 29;"), 0, "%s", vector);
    cr_expect_eq(tkc_test_count(vector, "div."), 0, "%s", vector);
    cr_expect_eq(tkc_test_count(vector, "rem."), 0, "%s", vector);
    /* (s - j) / 4 % 2 is bit 2 of s - j, (s - j) % 4 its low two bits */
    char *serial = tkc_test_entry(ptx, "floor_pow2_serial__default");
    cr_expect_eq(tkc_test_count(serial, ", 31;"), 0, "%s", serial);
    cr_expect_eq(tkc_test_count(serial, ", 30;"), 0, "%s", serial);
    cr_expect_eq(tkc_test_count(serial, "div."), 0, "%s", serial);
    cr_expect_eq(tkc_test_count(serial, "rem."), 0, "%s", serial);
    /* 6 keeps the truncating division (LLVM's multiply by a magic
     * number) and its correction */
    char *six = tkc_test_entry(ptx, "floor_six__default");
    cr_expect_gt(tkc_test_count(six, "mul.hi.s32"), 0, "%s", six);
    cr_expect_gt(tkc_test_count(six, ", 31;"), 0, "%s", six);
    free(vector);
    free(serial);
    free(six);
    free(ptx);
}

/* The pipeline of the fp8 GEMM on three consumer warpgroups: each K
 * block's stage (it % 4) and barrier parity (it / 4 % 2) are a mask and
 * a bit-field extract of the counter, in the producer's loop and in the
 * consumers' (before, the consumers' took the signed division's bias
 * and correction: 153 SASS instructions per K block and warp, now 148). */
Test(codegen_floor_div, pipeline_stage_and_parity) {
    char command[1024];
    char dir[] = "/tmp/test_codegen_floor_div-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    snprintf(command, sizeof command,
             "'%s' '%s/kernels/gemm_fp8_tall.tk' -I '%s' -o '%s/k.ptx' --emit=ptx > '%s/log' 2>&1",
             TKC_PATH, TK_SOURCE_DIR, TK_SOURCE_DIR, dir, dir);
    cr_assert_eq(system(command), 0, "tkc failed on kernels/gemm_fp8_tall.tk");
    snprintf(command, sizeof command, "%s/k.ptx", dir);
    char *ptx = tkc_test_slurp(command);
    snprintf(command, sizeof command, "rm -rf '%s'", dir);
    cr_assert_eq(system(command), 0);
    char *entry = tkc_test_entry(ptx, "gemm_fp8_blockscaled_tall_persistent_store__default");
    /* the parities: bit 2 of each loop's counter */
    cr_expect_eq(tkc_test_count(entry, ", 2, 1;"), 2, "%s", entry);
    /* no rounding bias of a signed division by 4 (a >> 31 >>> 30) */
    cr_expect_eq(tkc_test_count(entry, ", 30;"), 0, "%s", entry);
    free(entry);
    free(ptx);
}
