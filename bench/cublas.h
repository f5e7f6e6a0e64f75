/*
 * cublas.h -- the vendor ceiling of tkbench's GEMM rows: cuBLASLt, loaded
 * at run time, never linked (the build machine has no cuBLAS; the GPU
 * machine's PyTorch ships one).
 *
 * tkb_cublas_open looks for the library in this order: $TK_CUBLASLT (a
 * path), dlopen("libcublasLt.so.13") (the loader's own search), then the
 * nvidia/cublas/lib/libcublasLt.so.* and nvidia/cu13/lib/libcublasLt.so.*
 * files of the Python site-packages directories (/usr/lib/python3*,
 * /usr/local/lib/python3*, ~/.local/lib/python3*, dist- and
 * site-packages).  A plan is one cublasLtMatmul for our row-major
 * D[M, N] = A[M, K] * B[N, K]^T: cuBLAS's column-major D^T = B * A^T, the
 * "TN" form, with the heuristic's first algorithm and a 32 MiB workspace.
 * bf16 runs with CUBLAS_COMPUTE_32F; e4m3 x e4m3 -> bf16 with per-tensor
 * f32 scales (the _scaled_mm equivalent) is the fp8 ceiling.
 */
#ifndef TK_BENCH_CUBLAS_H
#define TK_BENCH_CUBLAS_H

#include <stddef.h>
#include <stdint.h>

#include "tk.h"
#include "tk_internal.h"

typedef struct tkb_cublas_plan tkb_cublas_plan;

/* Loads cuBLASLt and creates its handle, once per process (later calls
 * return the first answer).  False when it is not found or does not
 * start; *why then says what was tried ("cuBLAS not found: ..."). */
bool tkb_cublas_available(char *why, size_t size);

/* A plan for d = a * b^T (row-major, contiguous): input TK_BF16 or
 * TK_E4M3, d bf16.  For e4m3, scale_a and scale_b are device pointers
 * to one f32 each (per-tensor scales); ignored for bf16.  NULL with *why
 * set when cuBLAS is unavailable or refuses the problem. */
tkb_cublas_plan *tkb_cublas_plan_create(const tk__driver_api *cu, tk_dtype input, int64_t m,
                                        int64_t n, int64_t k, CUdeviceptr a, CUdeviceptr b,
                                        CUdeviceptr d, CUdeviceptr scale_a,
                                        CUdeviceptr scale_b, char *why, size_t size);

/* Enqueues the planned matmul on the default stream. */
tk_status tkb_cublas_plan_run(tkb_cublas_plan *plan);

/* Frees the plan and its workspace (NULL is fine). */
void tkb_cublas_plan_destroy(tkb_cublas_plan *plan);

#endif
