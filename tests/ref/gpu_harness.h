/*
 * gpu_harness.h -- the device harness shared by the GPU golden tests
 * (tests/test_gpu_*.c): driver setup that skips the test without a usable
 * CUDA device, driver-call checking with a message, device allocation,
 * upload, poisoning and download with the check that the poisoned tail
 * after an output is untouched, plus the small environment helpers
 * (TK_TEST_SEED, a monotonic clock).  Every failure is a Criterion
 * assertion, so these functions may only be called from inside a test.
 * Comparisons stay in the test files: each reports mismatches its own way.
 */
#ifndef TK_TESTS_GPU_HARNESS_H
#define TK_TESTS_GPU_HARNESS_H

#include <stddef.h>
#include <stdint.h>

#include "tk.h"
#include "tk_internal.h"

/* Checked-untouched bytes after every output buffer. */
#define GPU_TAIL_BYTES 256

typedef struct gpu {
    const tk__driver_api *api;
} gpu;

/* TK_TEST_SEED (any strtoull base), 0 when unset. */
uint64_t test_seed(void);

/* CLOCK_MONOTONIC in seconds. */
double now_seconds(void);

/* Fails the test with "<what> failed: <code> (<message>)" unless `result`
 * is CUDA_SUCCESS. */
void gpu_check_cu(const gpu *g, CUresult result, const char *what);
#define CU(g, call) gpu_check_cu((g), (g)->api->call, #call)

/* Skips the test without a usable device; otherwise returns the driver
 * (with a current context). */
gpu gpu_begin(void);

/* Fails the test unless `status` is TK_SUCCESS, naming `what`. */
void check_status(tk_status status, const char *what);

/* malloc of `bytes` (at least 1); fails the test when out of memory. */
void *host_alloc(size_t bytes);

/* cuMemAlloc of exactly `bytes` (at least 1). */
CUdeviceptr gpu_alloc(const gpu *g, size_t bytes);

/* Frees *ptr when non-zero and zeroes it. */
void gpu_free(const gpu *g, CUdeviceptr *ptr);

/* Copies `bytes` host bytes to `dst`; nothing for 0 bytes. */
void gpu_upload(const gpu *g, CUdeviceptr dst, const void *src, size_t bytes);

/* Sets `bytes` + GPU_TAIL_BYTES device bytes to `value`. */
void gpu_poison(const gpu *g, CUdeviceptr ptr, size_t bytes, unsigned char value);

/* Synchronises (so that asynchronous faults surface here), downloads
 * `bytes` plus GPU_TAIL_BYTES into `host` (which must have room for both)
 * and fails the test unless the tail still holds `value`:
 * "<what>: wrote past the end<where> (byte <i> after)". */
void gpu_download(const gpu *g, void *host, CUdeviceptr device, size_t bytes,
                  unsigned char value, const char *where, const char *what);

/* A rank-2 tensor descriptor of device memory with explicit strides. */
tk_tensor gpu_tensor2(CUdeviceptr data, tk_dtype dtype, int64_t d0, int64_t d1, int64_t s0,
                      int64_t s1);

/* Short names for case descriptions: "f32", "bf16", "e4m3", "e2m1", else "?";
 * "row", "col", "packed", else "?". */
const char *gpu_dtype_name(tk_dtype dtype);
const char *gpu_layout_name(tk_sf_layout layout);

#endif
