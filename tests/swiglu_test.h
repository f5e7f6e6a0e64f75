/*
 * swiglu_test.h -- what the SwiGLU GPU golden tests share
 * (tests/test_gpu_swiglu.c: forward, per-channel and argument checks;
 * tests/test_gpu_swiglu_backward.c: backward): the poison byte and tail,
 * the device helpers, the GPU exp table the references take their expf
 * values from, and the MoE draws.  Everything is static inline so that each
 * test file compiles it without unused-function warnings; the file comment
 * of test_gpu_swiglu.c describes the method.
 */
#ifndef TK_TESTS_SWIGLU_TEST_H
#define TK_TESTS_SWIGLU_TEST_H

#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu_harness.h"
#include "reference.h"
#include "swiglu.h"
#include "tk.h"
#include "tk_internal.h"
#include "tk_kernels.h"


#define TAIL_BYTES GPU_TAIL_BYTES
#define POISON 0xFF

/* ---- device helpers ------------------------------------------------------ */

/* This file's poison byte and tail message for the shared harness. */
static inline void poison(const gpu *g, CUdeviceptr ptr, size_t bytes) {
    gpu_poison(g, ptr, bytes, POISON);
}

static inline void download(const gpu *g, void *host, CUdeviceptr device, size_t bytes,
                     const char *what) {
    gpu_download(g, host, device, bytes, POISON, "", what);
}

static inline tk_tensor tensor(CUdeviceptr data, tk_dtype dtype, int rank, int64_t d0, int64_t d1) {
    tk_tensor t;
    memset(&t, 0, sizeof t);
    t.data = (void *)(uintptr_t)data;
    t.dtype = dtype;
    t.rank = rank;
    t.shape[0] = d0;
    t.strides[0] = rank == 2 ? d1 : 1;
    if (rank == 2) {
        t.shape[1] = d1;
        t.strides[1] = 1;
    }
    return t;
}

/* Byte-exact comparison of row r of two (rows, row_bytes) buffers for every
 * row with keep[r] (NULL: all rows). */
static inline void expect_rows(const unsigned char *got, const unsigned char *want, int64_t rows,
                        size_t row_bytes, const int32_t *keep, const char *what) {
    for (int64_t r = 0; r < rows; r++) {
        if (keep && keep[r] < 0)
            continue;
        size_t at = ref_first_difference(got + r * row_bytes, want + r * row_bytes, row_bytes);
        if (at == SIZE_MAX)
            continue;
        cr_assert_fail("%s: row %ld byte %zu: got 0x%02x, expected 0x%02x", what, (long)r, at,
                       got[r * row_bytes + at], want[r * row_bytes + at]);
    }
}

/* GPU expf of `count` arguments (count % 4 == 0) through swiglu_exp. */
static inline void gpu_exp(const gpu *g, const float *argument, float *value, int64_t count) {
    if (count == 0)
        return;
    CUdeviceptr in = gpu_alloc(g, (size_t)count * 4), out = gpu_alloc(g, (size_t)count * 4);
    CU(g, cuMemcpyHtoD(in, argument, (size_t)count * 4));
    tk_tensor x = tensor(in, TK_F32, 1, count, 0), y = tensor(out, TK_F32, 1, count, 0);
    check_status(tkl_swiglu_exp__default(&x, &y, NULL), "swiglu_exp");
    CU(g, cuCtxSynchronize());
    CU(g, cuMemcpyDtoH(value, out, (size_t)count * 4));
    CU(g, cuMemFree(in));
    CU(g, cuMemFree(out));
}

/* table[b] = GPU expf(bf16 pattern b). */
static inline float *gpu_bf16_exp_table(const gpu *g) {
    float *argument = host_alloc(65536 * 4), *table = host_alloc(65536 * 4);
    for (int b = 0; b < 65536; b++)
        argument[b] = ref_bf16_to_f32((uint16_t)b);
    gpu_exp(g, argument, table, 65536);
    free(argument);
    return table;
}

/* ---- MoE draws ------------------------------------------------------------ */

/* TileKernels' generate_moe_params (spec 12.1): 4001 tokens per rank,
 * (top-k, total experts, EP ranks); the last one is the pressure mode's
 * degenerate zero-token draw. */
typedef struct moe_params {
    int64_t sent;
    int topk, total, ranks;
} moe_params;
static const moe_params MOE[] __attribute__((unused)) = {
    {4001, 2, 72, 8},  {4001, 6, 256, 8},  {4001, 8, 256, 64}, {4001, 9, 72, 8},
    {4001, 2, 256, 64}, {4001, 8, 256, 8},  {4001, 6, 72, 8},  {4001, 9, 256, 64},
    {4001, 1, 256, 8}, {4001, 7, 288, 72},
};
#define NUM_MOE (sizeof MOE / sizeof MOE[0])
static const moe_params MOE_EMPTY __attribute__((unused)) = {0, 1, 1, 1};

static inline void make_mapping(const moe_params *p, int alignment, ref_swiglu_mapping *m) {
    cr_assert(ref_swiglu_make_mapping(p->sent, p->topk, p->total, p->ranks, alignment,
                                      test_seed() + 77 + (uint64_t)p->topk * 131 +
                                          (uint64_t)p->ranks,
                                      m));
}


#endif
