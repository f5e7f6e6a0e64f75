/*
 * bench.h -- how a kernel family plugs its rows into tkbench.
 *
 * tkbench.c owns the method (copy ceiling in the same run, warm-up, L2
 * flush, CUDA events, median; docs/perf.md).  A family file
 * bench/bench_<family>.c describes its rows as tkb_case values and
 * registers them from a constructor, so adding a family never edits a
 * shared file:
 *
 *   static const tkb_case CASES[] = {{"reduce_fused", "21726x7168", "bf16",
 *                                     setup, launch, verify, teardown, &P}};
 *   TKB_REGISTER(CASES)
 *
 * Every callback gets the tkb_context (driver table, helpers) and the
 * case's opaque state.  setup allocates and fills the inputs (random,
 * never zeros), poisons the outputs, and sets *bytes to the bytes moved
 * (every input read once + every output written once).  launch enqueues
 * the kernel(s) on the default stream and returns the libtk status.
 * verify compares the outputs of the last launch bit-exactly (or as the
 * kernel's spec demands) with the CPU reference and writes a short reason
 * into detail on failure.  teardown frees everything.  GEMM rows are
 * also described by a tkb_compute (TKB_REGISTER_COMPUTE): tkbench then
 * prints them in a second table in TFLOP/s against the ceiling measured
 * interleaved with them in the same run.
 */
#ifndef TK_BENCH_H
#define TK_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "flush.h"
#include "tk.h"
#include "tk_internal.h"

typedef struct tkb_context {
    const tk__driver_api *cu;  /* the driver, already initialised */
    uint64_t seed;             /* input seed: reproducible inputs */
    tkb_flush *flush;          /* tkbench's L2 flush (cuBLAS planning uses it) */
} tkb_context;

typedef struct tkb_case tkb_case;
struct tkb_case {
    const char *kernel;  /* libtk entry point family, e.g. "cast_back" */
    const char *shape;   /* e.g. "8001x7168" */
    const char *config;  /* dtypes and options, e.g. "e4m3->bf16 1x128" */
    bool (*setup)(const tkb_context *ctx, const tkb_case *c, void **state,
                  double *bytes);
    tk_status (*launch)(void *state);
    bool (*verify)(const tkb_context *ctx, void *state, char *detail,
                   size_t size);
    void (*teardown)(const tkb_context *ctx, void *state);
    const void *params;  /* the family's own description of the row */
};

/* Adds cases to the run (called from constructors, before main). */
void tkb_register(const tkb_case *cases, int count);

#define TKB_REGISTER(cases)                                              \
    __attribute__((constructor)) static void tkb_register_##cases(void) \
    {                                                                    \
        tkb_register(cases, (int)(sizeof(cases) / sizeof(cases[0])));   \
    }

/* Compute-bound rows (the GEMMs): a registered case's floating-point
 * operations per launch, reported as TFLOP/s, and an optional
 * vendor-library launch on the same state (cuBLAS) as its ceiling.
 * tkbench warms both up equally and times them interleaved, launch by
 * launch, each after its own L2 flush (the clock falls under sustained
 * load, so back-to-back series would favour the first); the ceiling
 * must therefore write its own output, not the case's, and returns
 * TK_ERROR_UNSUPPORTED when the library is missing. */
typedef struct tkb_compute {
    const tkb_case *row;
    double flops;
    tk_status (*ceiling)(void *state);
} tkb_compute;

void tkb_register_compute(const tkb_compute *rows, int count);

#define TKB_REGISTER_COMPUTE(rows)                                              \
    __attribute__((constructor)) static void tkb_register_compute_##rows(void) \
    {                                                                           \
        tkb_register_compute(rows, (int)(sizeof(rows) / sizeof(rows[0])));     \
    }

/* Helpers for family files (tkbench.c). */
/* cuMemAlloc + report; NULL-safe free. */
bool tkb_alloc(const tkb_context *ctx, CUdeviceptr *ptr, size_t bytes);
void tkb_free(const tkb_context *ctx, CUdeviceptr ptr);
bool tkb_upload(const tkb_context *ctx, CUdeviceptr dst, const void *src,
                size_t bytes);
bool tkb_download(const tkb_context *ctx, void *dst, CUdeviceptr src,
                  size_t bytes);
bool tkb_poison(const tkb_context *ctx, CUdeviceptr ptr, size_t bytes);
/* A descriptor with the given shape and strides (NULL = contiguous). */
tk_tensor tkb_tensor(CUdeviceptr data, tk_dtype dtype, int rank,
                     const int64_t *shape, const int64_t *strides);

#endif
