/*
 * launcher_driver.c -- checks the launchers `tkc --emit=header` writes for
 * kernels.tk, without a GPU.
 *
 * test_tkc.c generates tk_kernels.h into a scratch directory and compiles
 * this file against it with the launcher definitions enabled.  The
 * runtime entry points the launchers call (tk__fail, tk__launch,
 * tk__launch_cluster, tk__dtype_name, tk__tensor_map) are replaced here by recorders, so
 * every check can see the status, the message and what would have been
 * launched.  Prints one
 * line per failed expectation and exits with the number of failures.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define TK_LAUNCHERS_IMPLEMENTATION
#include "tk_kernels.h"

static char last_message[1024];
static int launches;
static char launched_name[128];
static uint32_t launched_grid[3], launched_threads, launched_shared;
static CUdeviceptr launched_pointers[2]; /* copied: params point into the launcher's frame */

tk_status tk__fail(tk_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_message, sizeof last_message, fmt, ap);
    va_end(ap);
    return status;
}

const char *tk__dtype_name(tk_dtype dtype) {
    static const char *const names[] = {"void", "bool", "i8",  "u8",  "i16",  "u16",
                                        "i32",  "u32",  "i64", "u64", "f16",  "bf16",
                                        "f32",  "f64",  "e4m3", "e5m2", "e2m1", "ue8m0"};
    return (unsigned)dtype < sizeof names / sizeof names[0] ? names[dtype] : "?";
}

tk_status tk__launch(const char *name, const uint32_t grid[3], uint32_t threads,
                     uint32_t shared_bytes, void **params, tk_stream stream) {
    (void)stream;
    launches++;
    snprintf(launched_name, sizeof launched_name, "%s", name);
    memcpy(launched_grid, grid, sizeof launched_grid);
    launched_threads = threads;
    launched_shared = shared_bytes;
    for (int i = 0; i < 2; i++) launched_pointers[i] = *(CUdeviceptr *)params[i];
    return TK_SUCCESS;
}

/* Launchers of cluster kernels (docs/hopper.md 11) record like
 * tk__launch; the grid they pass is already whole clusters. */
tk_status tk__launch_cluster(const char *name, const uint32_t grid[3], const uint32_t cluster[3],
                             uint32_t threads, uint32_t shared_bytes, void **params,
                             tk_stream stream) {
    for (int d = 0; d < 3; d++)
        if (cluster[d] == 0 || grid[d] % cluster[d] != 0)
            return tk__fail(TK_ERROR_INVALID_ARGUMENT, "%s: grid not whole clusters", name);
    return tk__launch(name, grid, threads, shared_bytes, params, stream);
}

/* Launchers of kernels with TMA copies encode their tensor maps before
 * launching; without a driver the recorder fills a recognisable pattern. */
tk_status tk__tensor_map(const char *kernel, const char *name, const tk_tensor *tensor,
                         int rank, const int64_t *box, int swizzle_bytes, CUtensorMap *out) {
    (void)kernel, (void)name, (void)tensor, (void)rank, (void)box, (void)swizzle_bytes;
    memset(out, 0xA5, sizeof *out);
    return TK_SUCCESS;
}

static int failures;

static void expect(int ok, const char *what, const char *detail) {
    if (!ok) {
        failures++;
        printf("FAILED: %s (%s)\n", what, detail);
    }
}

/* A call must fail with a message containing `fragment`. */
static void expect_error(tk_status status, const char *fragment, const char *what) {
    char detail[1200];
    snprintf(detail, sizeof detail, "status %d, message '%s', expected '%s'", (int)status,
             last_message, fragment);
    expect(status == TK_ERROR_INVALID_ARGUMENT && strstr(last_message, fragment) != NULL,
           what, detail);
}

static tk_tensor tensor(void *data, tk_dtype dtype, int rank, const int64_t *shape) {
    tk_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.dtype = dtype;
    t.rank = rank;
    int64_t stride = 1;
    for (int d = rank - 1; d >= 0; d--) {
        t.shape[d] = shape[d];
        t.strides[d] = stride;
        stride *= shape[d];
    }
    return t;
}

/* Fake, 16-byte aligned device addresses (never dereferenced). */
#define X_DATA ((void *)(uintptr_t)0x100000)
#define OUT_DATA ((void *)(uintptr_t)0x200000)

int main(void) {
    const int64_t xs[3] = {2, 128, 64}, outs[3] = {2, 64, 128};
    tk_tensor x = tensor(X_DATA, TK_F32, 3, xs), out = tensor(OUT_DATA, TK_F32, 3, outs);
    char detail[2048];

    /* a valid call launches batched_transpose__f32 with the tensors first */
    tk_status status = tkl_batched_transpose__f32(&x, &out, NULL);
    snprintf(detail, sizeof detail, "status %d '%s', launched %s grid %u,%u,%u threads %u",
             (int)status, last_message, launched_name, launched_grid[0], launched_grid[1],
             launched_grid[2], launched_threads);
    expect(status == TK_SUCCESS && launches == 1, "valid call launches", detail);
    expect(strcmp(launched_name, "batched_transpose__f32") == 0, "entry name", detail);
    /* grid(ceildiv(Y, 64), ceildiv(X, 64), B) threads(256) */
    expect(launched_grid[0] == 1 && launched_grid[1] == 2 && launched_grid[2] == 2, "grid", detail);
    expect(launched_threads == 256, "threads", detail);
    expect(launched_pointers[0] == (CUdeviceptr)(uintptr_t)X_DATA &&
               launched_pointers[1] == (CUdeviceptr)(uintptr_t)OUT_DATA,
           "tensor pointers lead the parameter block", detail);

    /* every check fails before anything is launched */
    int before = launches;
    expect_error(tkl_batched_transpose__f32(NULL, &out, NULL), "batched_transpose: x: ",
                 "NULL descriptor");
    expect_error(tkl_batched_transpose__f32(NULL, &out, NULL), "NULL", "NULL descriptor text");

    tk_tensor bad = x;
    bad.dtype = TK_BF16;
    expect_error(tkl_batched_transpose__f32(&bad, &out, NULL), "x: dtype is bf16, expected f32",
                 "dtype");
    bad = x;
    bad.rank = 2;
    expect_error(tkl_batched_transpose__f32(&bad, &out, NULL), "x: rank is 2, expected 3", "rank");
    bad = x;
    bad.data = (void *)(uintptr_t)0x100004;
    expect_error(tkl_batched_transpose__f32(&bad, &out, NULL), "not 16-byte aligned", "alignment");
    bad = x;
    bad.data = NULL;
    expect_error(tkl_batched_transpose__f32(&bad, &out, NULL), "x: data is NULL", "NULL data");
    bad = x;
    bad.shape[0] = -1;
    expect_error(tkl_batched_transpose__f32(&bad, &out, NULL), "x: shape[0] is negative",
                 "negative shape");

    /* a shape entry that disagrees with its symbol */
    tk_tensor bad_out = out;
    bad_out.shape[1] = 100;
    expect_error(tkl_batched_transpose__f32(&x, &bad_out, NULL), "out: shape[1] is 100, expected Y = 64",
                 "symbol mismatch");
    /* out's strides are the contiguous ones */
    bad_out = out;
    bad_out.strides[1] = 256;
    expect_error(tkl_batched_transpose__f32(&x, &bad_out, NULL), "out: strides[1] is 256, expected ",
                 "contiguous strides");
    /* x's last stride is the constant 1 */
    bad = x;
    bad.strides[2] = 2;
    bad.strides[1] = 128;
    bad.strides[0] = 128 * 128;
    expect_error(tkl_batched_transpose__f32(&bad, &out, NULL), "x: strides[2] is 2, expected 1",
                 "constant stride");

    /* constraints, quoted with the values of their symbols */
    const int64_t x100[3] = {2, 100, 64}, out100[3] = {2, 64, 100};
    tk_tensor x_odd = tensor(X_DATA, TK_F32, 3, x100), out_odd = tensor(OUT_DATA, TK_F32, 3, out100);
    expect_error(tkl_batched_transpose__f32(&x_odd, &out_odd, NULL),
                 "batched_transpose: constraint 'X % 64 == 0' does not hold (X = 100)", "constraint");
    /* a row stride that is not a multiple of ALIGN = 4 */
    bad = x;
    bad.strides[1] = 66;
    bad.strides[0] = 128 * 66;
    expect_error(tkl_batched_transpose__f32(&bad, &out, NULL), "constraint 'sx % ALIGN == 0'",
                 "stride constraint");
    /* ...is fine for the _any instance */
    status = tkl_batched_transpose__f32_any(&bad, &out, NULL);
    snprintf(detail, sizeof detail, "status %d '%s'", (int)status, last_message);
    expect(status == TK_SUCCESS, "f32_any accepts a row stride of 66", detail);

    /* offsets must fit in int32 */
    bad = x;
    bad.strides[1] = (int64_t)1 << 30;
    bad.strides[0] = ((int64_t)1 << 30) * 128;
    expect_error(tkl_batched_transpose__f32(&bad, &out, NULL), "x: too large", "int32 offsets");
    expect(launches == before + 1, "no launch on invalid arguments", "launch count");

    /* an empty batch succeeds without launching, with NULL data */
    const int64_t x0[3] = {0, 128, 64}, out0[3] = {0, 64, 128};
    tk_tensor x_empty = tensor(NULL, TK_F32, 3, x0), out_empty = tensor(NULL, TK_F32, 3, out0);
    before = launches;
    status = tkl_batched_transpose__f32(&x_empty, &out_empty, NULL);
    snprintf(detail, sizeof detail, "status %d '%s'", (int)status, last_message);
    expect(status == TK_SUCCESS && launches == before, "empty batch: success, no launch", detail);

    /* the table of entry names */
    int found = 0;
    for (int i = 0; i < TKL_KERNEL_COUNT; i++)
        if (strcmp(tkl_kernel_names[i], "batched_transpose__f32") == 0) found = 1;
    expect(found && tkl_kernel_names[TKL_KERNEL_COUNT] == NULL, "kernel name table", "");

    printf("%d failure(s)\n", failures);
    return failures;
}
