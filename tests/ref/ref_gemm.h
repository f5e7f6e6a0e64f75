/*
 * ref_gemm.h -- CPU references of the library's GEMMs (kernels/gemm.tk):
 * D[M, N] = A[M, K] * B[N, K]^T with bf16 inputs, and the fp8 block-scaled
 * form (A e4m3 with per_token_cast's 1 x 128 scales, B e4m3 with
 * per_block_cast's 128 x 128 scales), and the comparison the GPU tests and
 * tkbench apply to them.
 *
 * The references accumulate in double, so they are the exact product up to
 * one final rounding; the kernels accumulate in f32 in their own order, so
 * outputs are compared by the relative Frobenius error
 * ||out - ref|| / ||ref|| in double (the criterion: below 2e-3),
 * never bit for bit.  Their output is bf16, so the golden reference is
 * the exact product rounded once to bf16, RNE (ref_gemm_bf16_output,
 * compared by ref_gemm_relative_error_bf16): against it a correct kernel
 * is off by at most a rare last-place flip, where an f32 reference would
 * charge it the ~2^-9 rounding of every element.  Same conventions as reference.h: host memory,
 * contiguous row-major matrices unless a layout says otherwise.  A full
 * reference is O(M N K): the tests use shapes up to 1024 x 1024 x 4096;
 * tkbench checks sampled elements with ref_gemm_*_element.
 */
#ifndef TK_REF_GEMM_H
#define TK_REF_GEMM_H

#include "reference.h"

/* The scale block of both fp8 operands along K, and of B along N. */
#define REF_GEMM_SCALE_BLOCK 128

/* The operands of one GEMM; a, b and d are contiguous row-major. */
typedef struct ref_gemm_problem {
    int64_t m, n, k;
    const void *a;      /* (m, k): bf16 bits, or e4m3 codes           */
    const void *b;      /* (n, k): same dtype as a                    */
    /* fp8 only: the scales, laid out as the shapes say (any layout of
     * tk_sf_layout but packed; sfa for (m, k) in (1, 128) blocks, sfb for
     * (n, k) in (128, 128) blocks). */
    const float *sfa;
    ref_sf_shape sfa_shape;
    const float *sfb;
    ref_sf_shape sfb_shape;
} ref_gemm_problem;

/* d[i, j] = sum_k a[i, k] * b[j, k] in double, a and b bf16 bits. */
double ref_gemm_bf16_element(const ref_gemm_problem *p, int64_t i, int64_t j);

/* d[i, j] = sum over K blocks kb of (sum_{k in kb} a[i, k] * b[j, k]) *
 * sfa(i, kb) * sfb(j / 128, kb), every sum in double: the dequantised
 * product with the scales the kernel uses. */
double ref_gemm_fp8_element(const ref_gemm_problem *p, int64_t i, int64_t j);

/* The whole product into out (m, n) f32 (the double result rounded once),
 * over ref_parallel_for's threads.  fp8 selects ref_gemm_fp8_element.
 * False, writing nothing, on a bad shape or a missing operand. */
bool ref_gemm(const ref_gemm_problem *p, bool fp8, float *out);

/* The whole product as a bf16-output kernel should write it: each exact
 * (double) element rounded once to bf16, RNE.  False as ref_gemm. */
bool ref_gemm_bf16_output(const ref_gemm_problem *p, bool fp8, uint16_t *out);

/* value rounded to bf16 bits, RNE, in one rounding (never through an
 * RNE f32, which could round twice); NaN stays NaN. */
uint16_t ref_gemm_bf16_from_double(double value);

/* Rounds out (count f32 values) to bf16 bits, RNE (ref_bf16_from_f32). */
void ref_gemm_round_bf16(const float *values, int64_t count, uint16_t *out);

/* ||got - want|| / ||want|| in double over a (rows, cols) block of two
 * matrices with row stride ld (elements): got bf16 bits, want f32.  Call
 * it on the whole output and on its edge tiles, where a ragged-shape bug
 * would hide in a whole-matrix norm.  A NaN or infinity in got gives
 * +infinity (a NaN never passes a tolerance; poisoned, unwritten bf16
 * outputs are NaN); an all-zero want gives ||got|| (0 when both are
 * zero). */
double ref_gemm_relative_error(const uint16_t *got, const float *want, int64_t rows,
                               int64_t cols, int64_t ld);

/* The same measure against a bf16 reference (want: bf16 bits, as
 * ref_gemm_bf16_output writes them); same NaN and zero rules. */
double ref_gemm_relative_error_bf16(const uint16_t *got, const uint16_t *want, int64_t rows,
                                    int64_t cols, int64_t ld);

#endif
