/*
 * test_codegen_min_blocks.c -- the launch's min_blocks hint
 * (docs/language.md) from source to PTX and through ptxas, with no GPU.
 *
 * A kernel without the hint keeps `.reqntid`; with min_blocks = B it gets
 * `.maxntid` and `.minnctapersm B`.  What the hint is for is checked on
 * the library kernel that uses it: ptxas -v must report at most 32
 * registers (8 blocks of 256 threads per SM, or 4 of 512 for the
 * transposed instances' 64-channel tiles; without the hint ptxas took
 * 43-44) and no spills for every instance of
 * swiglu_forward_per_channel_cast.  The diagnostics of bad values are
 * golden files (tests/lang/errors/min_blocks.tk).
 */
#include "tkc_test_support.h"

static const char SOURCE[] =
    "kernel plain(a: tensor<f32>[M])\n"
    "{\n"
    "  launch (block) in grid(M / 256) threads(256) {\n"
    "    parallel (i: 256) { a[block * 256 + i] = 0.0; }\n"
    "  }\n"
    "}\n"
    "\n"
    "kernel occupied<B: int>(a: tensor<f32>[M])\n"
    "  instances { six: <6>, eight: <8> }\n"
    "{\n"
    "  launch (block) in grid(M / 256) threads(256) with(min_blocks = B) {\n"
    "    parallel (i: 256) { a[block * 256 + i] = 0.0; }\n"
    "  }\n"
    "}\n";

Test(codegen_min_blocks, directives) {
    int status;
    char *ptx = tkc_test_compile(SOURCE, "min_blocks.tk", &status);
    cr_assert_eq(status, 0, "%s", ptx);
    char *plain = tkc_test_entry(ptx, "plain__default");
    cr_expect_eq(tkc_test_count(plain, ".reqntid 256"), 1, "%s", plain);
    cr_expect_eq(tkc_test_count(plain, ".minnctapersm"), 0, "%s", plain);
    cr_expect_eq(tkc_test_count(plain, ".maxntid"), 0, "%s", plain);
    static const struct {
        const char *entry, *directive;
    } hinted[] = {{"occupied__six", ".minnctapersm 6"}, {"occupied__eight", ".minnctapersm 8"}};
    for (size_t i = 0; i < sizeof hinted / sizeof hinted[0]; i++) {
        char *text = tkc_test_entry(ptx, hinted[i].entry);
        cr_expect_eq(tkc_test_count(text, hinted[i].directive), 1, "%s", text);
        cr_expect_eq(tkc_test_count(text, ".maxntid 256"), 1, "%s", text);
        cr_expect_eq(tkc_test_count(text, ".reqntid"), 0, "%s", text);
        free(text);
    }
    free(plain);
    free(ptx);
}

/* The registers ptxas -v reports for `entry` (-1 when absent); *spills
 * is set when its stack frame or spills are not zero. */
static int registers_of(const char *report, const char *entry, bool *spills) {
    char header[160];
    snprintf(header, sizeof header, "Function properties for %s\n", entry);
    const char *at = strstr(report, header);
    if (!at)
        return -1;
    at += strlen(header);
    static const char clean[] =
        "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n";
    *spills = strncmp(at, clean, strlen(clean)) != 0;
    const char *used = strstr(at, "Used ");
    return used ? atoi(used + 5) : -1;
}

Test(codegen_min_blocks, swiglu_per_channel_fits_eight_blocks) {
    char dir[] = "/tmp/tkc_min_blocks-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char ptx[160], log[160], command[1024];
    snprintf(ptx, sizeof ptx, "%s/swiglu.ptx", dir);
    snprintf(log, sizeof log, "%s/log", dir);
    snprintf(command, sizeof command,
             "'%s' '%s/kernels/swiglu.tk' -I '%s/stdlib' --emit=ptx -o '%s' && "
             "'%s' -arch=sm_90a -v '%s' -o '%s/swiglu.cubin' > '%s' 2>&1",
             TKC_PATH, TK_SOURCE_DIR, TK_SOURCE_DIR, ptx, TKC_PTXAS, ptx, dir, log);
    int rc = system(command);
    char *report = tkc_test_slurp(log);
    snprintf(command, sizeof command, "rm -rf '%s'", dir);
    cr_assert_eq(system(command), 0);
    cr_assert(WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "tkc or ptxas failed:\n%s", report);
    static const char *const entries[] = {
        "swiglu_forward_per_channel_cast__bm32", "swiglu_forward_per_channel_cast__bm128",
        "swiglu_forward_per_channel_cast__bm32_t", "swiglu_forward_per_channel_cast__bm128_t"};
    for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++) {
        bool spills = true;
        int registers = registers_of(report, entries[i], &spills);
        cr_expect(registers > 0 && registers <= 32, "%s: %d registers", entries[i], registers);
        cr_expect(!spills, "%s spills:\n%s", entries[i], report);
    }
    free(report);
}
