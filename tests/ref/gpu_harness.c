/*
 * gpu_harness.c -- the device harness of the GPU golden tests
 * (tests/test_gpu_*.c): driver setup and skipping without a device,
 * checked driver calls, device memory, upload, poisoning, and downloads
 * that check the poisoned tail.  See gpu_harness.h.
 */
#include "gpu_harness.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

uint64_t test_seed(void) {
    const char *env = getenv("TK_TEST_SEED");
    return env ? strtoull(env, NULL, 0) : 0;
}

double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

void gpu_check_cu(const gpu *g, CUresult result, const char *what) {
    if (result == CUDA_SUCCESS)
        return;
    const char *message = "?";
    if (g->api->cuGetErrorString)
        g->api->cuGetErrorString(result, &message);
    cr_assert_fail("%s failed: %d (%s)", what, (int)result, message);
}

gpu gpu_begin(void) {
    gpu g;
    if (tk_device_check() != TK_SUCCESS)
        cr_skip_test("no usable CUDA device: %s", tk_last_error());
    tk_status status = tk__driver(&g.api);
    cr_assert_eq(status, TK_SUCCESS, "tk__driver: %s", tk_last_error());
    return g;
}

void check_status(tk_status status, const char *what) {
    cr_assert_eq(status, TK_SUCCESS, "%s: %s: %s", what, tk_status_string(status),
                 tk_last_error());
}

void *host_alloc(size_t bytes) {
    void *memory = malloc(bytes ? bytes : 1);
    cr_assert(memory != NULL, "out of host memory (%zu bytes)", bytes);
    return memory;
}

CUdeviceptr gpu_alloc(const gpu *g, size_t bytes) {
    CUdeviceptr ptr = 0;
    CU(g, cuMemAlloc(&ptr, bytes ? bytes : 1));
    return ptr;
}

void gpu_free(const gpu *g, CUdeviceptr *ptr) {
    if (*ptr)
        CU(g, cuMemFree(*ptr));
    *ptr = 0;
}

void gpu_upload(const gpu *g, CUdeviceptr dst, const void *src, size_t bytes) {
    if (bytes)
        CU(g, cuMemcpyHtoD(dst, src, bytes));
}

void gpu_poison(const gpu *g, CUdeviceptr ptr, size_t bytes, unsigned char value) {
    CU(g, cuMemsetD8(ptr, value, bytes + GPU_TAIL_BYTES));
}

void gpu_download(const gpu *g, void *host, CUdeviceptr device, size_t bytes,
                  unsigned char value, const char *where, const char *what) {
    CU(g, cuCtxSynchronize());
    CU(g, cuMemcpyDtoH(host, device, bytes + GPU_TAIL_BYTES));
    const unsigned char *tail = (const unsigned char *)host + bytes;
    for (size_t i = 0; i < GPU_TAIL_BYTES; i++)
        cr_assert_eq(tail[i], value, "%s: wrote past the end%s (byte %zu after)", what, where,
                     i);
}

tk_tensor gpu_tensor2(CUdeviceptr data, tk_dtype dtype, int64_t d0, int64_t d1, int64_t s0,
                      int64_t s1) {
    tk_tensor t;
    memset(&t, 0, sizeof t);
    t.data = (void *)(uintptr_t)data;
    t.dtype = dtype;
    t.rank = 2;
    t.shape[0] = d0;
    t.shape[1] = d1;
    t.strides[0] = s0;
    t.strides[1] = s1;
    return t;
}

const char *gpu_dtype_name(tk_dtype dtype) {
    switch (dtype) {
    case TK_F32: return "f32";
    case TK_BF16: return "bf16";
    case TK_E4M3: return "e4m3";
    case TK_E2M1: return "e2m1";
    default: return "?";
    }
}

const char *gpu_layout_name(tk_sf_layout layout) {
    switch (layout) {
    case TK_SF_ROW_MAJOR: return "row";
    case TK_SF_COL_MAJOR: return "col";
    case TK_SF_PACKED_UE8M0: return "packed";
    }
    return "?";
}
