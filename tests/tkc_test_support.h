/*
 * tkc_test_support.h -- running the tkc driver on a .tk source from a
 * CPU test and inspecting its PTX.  The builtin tests (test_log1p.c,
 * test_rcp_approx.c, test_codegen_bf16x2.c, test_codegen_f16x2.c) check
 * which PTX instructions a builtin lowers to and which diagnostics its
 * misuse gets; the codegen tests (test_codegen_cache_hints.c,
 * test_codegen_min_blocks.c, test_codegen_hopper.c) read one entry's PTX;
 * several also hand PTX to ptxas (its report, or just its verdict).
 * TKC_PATH is the tkc binary the build passes in.
 */
#ifndef TK_TESTS_TKC_TEST_SUPPORT_H
#define TK_TESTS_TKC_TEST_SUPPORT_H

#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Reads a whole file into a NUL-terminated heap string ("" if missing). */
static inline char *tkc_test_slurp(const char *path) {
    FILE *in = fopen(path, "rb");
    if (!in)
        return calloc(1, 1);
    fseek(in, 0, SEEK_END);
    long size = ftell(in);
    fseek(in, 0, SEEK_SET);
    char *text = calloc((size_t)size + 1, 1);
    cr_assert_not_null(text);
    cr_assert_eq(fread(text, 1, (size_t)size, in), (size_t)size);
    fclose(in);
    return text;
}

/* Writes `source` to a scratch directory as `file_name` (diagnostics name
 * it), runs `tkc --emit=ptx` on it, and returns the PTX when tkc exits 0,
 * else its stderr; *status is tkc's exit status.  The caller frees the
 * text. */
static inline char *tkc_test_compile(const char *source, const char *file_name, int *status) {
    char dir[] = "/tmp/tkc_test-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char path[160], ptx[160], log[160], command[640];
    snprintf(path, sizeof path, "%s/%s", dir, file_name);
    snprintf(ptx, sizeof ptx, "%s/out.ptx", dir);
    snprintf(log, sizeof log, "%s/err.txt", dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(source, f);
    fclose(f);
    snprintf(command, sizeof command, "'%s' '%s' --emit=ptx -o '%s' 2>'%s'", TKC_PATH, path,
             ptx, log);
    int rc = system(command);
    *status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    char *text = tkc_test_slurp(*status == 0 ? ptx : log);
    remove(path);
    remove(ptx);
    remove(log);
    rmdir(dir);
    return text;
}

/* The PTX of entry `name` (up to the next .entry), as a heap string the
 * caller frees. */
static inline char *tkc_test_entry(const char *ptx, const char *name) {
    char header[256];
    snprintf(header, sizeof header, ".entry %s(", name);
    const char *start = strstr(ptx, header);
    cr_assert_not_null(start, "no entry %s in %s", name, ptx);
    const char *end = strstr(start + 1, ".entry ");
    size_t length = end ? (size_t)(end - start) : strlen(start);
    char *text = calloc(length + 1, 1);
    cr_assert_not_null(text);
    memcpy(text, start, length);
    return text;
}

/* Occurrences of `needle` in `text`, overlapping ones included. */
static inline int tkc_test_count(const char *text, const char *needle) {
    int n = 0;
    for (const char *p = strstr(text, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

/* ptxas -v's report (stdout and stderr) on `ptx`, assembled whole-program
 * for sm_90a at -O3 as tkc does; *status is ptxas's exit status.  The
 * caller frees the text. */
static inline char *tkc_test_ptxas_report(const char *ptx, int *status) {
    char dir[] = "/tmp/tkc_test_ptxas-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char ptx_path[128], log_path[128], command[1024];
    snprintf(ptx_path, sizeof ptx_path, "%s/k.ptx", dir);
    snprintf(log_path, sizeof log_path, "%s/log", dir);
    FILE *f = fopen(ptx_path, "w");
    cr_assert_not_null(f);
    fputs(ptx, f);
    fclose(f);
    snprintf(command, sizeof command, "'%s' -arch=sm_90a -O3 -v '%s' -o '%s/k.cubin' > '%s' 2>&1",
             TKC_PTXAS, ptx_path, dir, log_path);
    *status = system(command);
    char *log = tkc_test_slurp(log_path);
    snprintf(command, sizeof command, "rm -rf '%s'", dir);
    cr_assert_eq(system(command), 0);
    return log;
}

/* ptxas -v's report on `ptx`, which ptxas must accept (the test fails
 * with the report otherwise).  The caller frees the text. */
static inline char *tkc_test_ptxas_report_ok(const char *ptx) {
    int status;
    char *log = tkc_test_ptxas_report(ptx, &status);
    cr_assert_eq(status, 0, "ptxas failed:\n%s", log);
    return log;
}

/* Whether ptxas accepts `ptx` (the inline assembly of the packed
 * builtins uses scoped .b16 registers, which only ptxas checks). */
static inline bool tkc_test_ptxas_accepts(const char *ptx) {
    int status;
    free(tkc_test_ptxas_report(ptx, &status));
    return status == 0;
}

#endif
