/*
 * cublas.h -- the vendor ceiling of tkbench's GEMM rows: cuBLASLt, loaded
 * at run time, never linked (the build machine has no cuBLAS; the GPU
 * machine's PyTorch ships one).
 *
 * tkb_cublas_available looks for the library in this order: $TK_CUBLASLT
 * (a path), dlopen("libcublasLt.so.13") (the loader's own search),
 * /usr/local/cuda/lib64/libcublasLt.so.13, the PyTorch venv's
 * /opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib/
 * libcublasLt.so.13, then libcublasLt.so.* under any /usr/local/cuda*,
 * /opt/<name>/.venv and Python site- or dist-packages directory
 * (/usr/lib/python3*, /usr/local/lib/python3*, ~/.local/lib/python3*) in
 * nvidia/cu13/lib or nvidia/cublas/lib; stderr names the file it loaded.
 *
 * A plan is one cublasLtMatmul for our row-major D[M, N] = A[M, K] *
 * B[N, K]^T: cuBLAS's column-major D^T = B * A^T, the "TN" form (the only
 * one FP8 has), C = D with beta 0, a 32 MiB workspace, compute and scale
 * type 32F.  bf16 inputs; or e4m3 x e4m3 -> bf16 with per-tensor f32
 * scales and fast accumulation off (torch._scaled_mm's default).  The
 * algorithm is the fastest of up to 16 heuristic candidates, timed at
 * plan time as tkbench times its rows (L2 flushed, events, median), the
 * candidates' timed launches in round-robin rounds so that none is
 * favoured by running while the GPU is still cool;
 * a stderr note says which index won, and every candidate cuBLAS refuses
 * is reported with its status.
 */
#ifndef TK_BENCH_CUBLAS_H
#define TK_BENCH_CUBLAS_H

#include <stddef.h>
#include <stdint.h>

#include "flush.h"
#include "tk.h"
#include "tk_internal.h"

typedef struct tkb_cublas_plan tkb_cublas_plan;

/* Loads cuBLASLt and creates its handle, once per process (later calls
 * return the first answer).  False when it is not found or does not
 * start; *why then says what was tried ("cuBLAS not found: ..."). */
bool tkb_cublas_available(char *why, size_t size);

/* A plan for d = a * b^T (row-major, contiguous): input TK_BF16 or
 * TK_E4M3, d bf16.  For e4m3, scale_a and scale_b are device pointers
 * to one f32 each (per-tensor scales), read once here: the plan keeps
 * its own 256-byte-aligned copies; ignored for bf16.  Creating the plan
 * runs the matmul (to time the candidates), so a, b and d must be valid
 * device buffers; the candidates are timed after flush (tkbench's L2
 * flush, NULL: warm), as the rows that use the plan are.  NULL with *why set ("cuBLAS: <stage> returned <status>
 * (<name>)") when cuBLAS is unavailable or refuses the problem. */
tkb_cublas_plan *tkb_cublas_plan_create(const tk__driver_api *cu, tkb_flush *flush,
                                        tk_dtype input, int64_t m, int64_t n, int64_t k, CUdeviceptr a, CUdeviceptr b,
                                        CUdeviceptr d, CUdeviceptr scale_a,
                                        CUdeviceptr scale_b, char *why, size_t size);

/* Enqueues the planned matmul on the default stream. */
tk_status tkb_cublas_plan_run(tkb_cublas_plan *plan);

/* Frees the plan and its workspace (NULL is fine). */
void tkb_cublas_plan_destroy(tkb_cublas_plan *plan);

#endif
