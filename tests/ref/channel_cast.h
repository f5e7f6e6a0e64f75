/*
 * channel_cast.h -- CPU reference of the per-channel casts to e4m3
 * (tilekernels-spec.md 6.6 per_channel_cast, 6.7 per_channel_cast_fused,
 * 6.8 per_channel_cast_and_transpose).
 *
 * One function covers the three: output row r takes input row src(r)
 * (pos_to_token[r] with a gather, else r); its real value is f32(x) or,
 * for quantised e4m3 input, f32(x) * x_sf[src, c / 128]; every block of
 * num_per_tokens output rows and one column gets amax = max |value| over
 * its valid rows, (sf, inv) = sf_and_inv(amax) (spec 4.1), and
 * out = sat_e4m3(value * inv), in that order: ((x * s_in) * inv).
 * The result is written row-major (out_rows, cols), or transposed
 * (cols, out_rows) for per_channel_cast_and_transpose; the scales always
 * go to a contiguous f32 (ceil(out_rows / num_per_tokens), cols) buffer,
 * the TK_SF_ROW_MAJOR layout of (num_per_tokens, 1) blocks.
 *
 * Decisions (docs/kernels.md, spec 15.6): a gather entry that is
 * negative or not below `rows` gives a zero row (value +0, which cannot
 * raise a |max|), and rows past out_rows in the last block are absent,
 * not zero-valued rows of the input (TileKernels' kernel would read input
 * row 0 there; its reference, like this one, ignores them).
 */
#ifndef TK_REF_CHANNEL_CAST_H
#define TK_REF_CHANNEL_CAST_H

#include "reference.h"

/* Columns per input scale of a quantised (e4m3) input (spec 6.7). */
#define REF_CHANNEL_INPUT_GROUP 128

/* The matrix a per-channel cast reads. */
typedef struct ref_channel_input {
    const void *x;            /* (rows, cols): f32, bf16 or e4m3 codes     */
    tk_dtype dtype;           /* TK_F32, TK_BF16 or TK_E4M3                */
    int64_t rows, cols;
    int64_t row_stride;       /* elements between rows, >= cols            */
    /* e4m3 input only: f32 (rows, ceil(cols / 128)) scales, element
     * [r, g] at x_sf[r * x_sf_strides[0] + g * x_sf_strides[1]]. */
    const float *x_sf;
    int64_t x_sf_strides[2];
} ref_channel_input;

/* The cast described above.  pos_to_token (out_rows entries) may be
 * NULL, and then out_rows must equal in->rows.  Writes every output byte
 * and every scale.  False, writing nothing, on a bad argument: unknown
 * dtype, e4m3 without x_sf (or a scale with x_sf), a row stride below
 * cols, num_per_tokens < 1, negative sizes. */
bool ref_per_channel_cast(const ref_channel_input *in,
                          const int32_t *pos_to_token, int64_t out_rows,
                          int num_per_tokens, bool round_sf, bool transposed,
                          uint8_t *out, float *out_sf);

/* Convenience: a float (f32 / bf16) input without input scales. */
ref_channel_input ref_channel_float_input(const void *x, tk_dtype dtype,
                                          int64_t rows, int64_t cols,
                                          int64_t row_stride);

/* Inputs for the gather: a TileKernels-style MoE routing draw
 * (generate_topk_idx, spec 12.1) turned into the pos_to_token table of
 * get_fused_mapping (spec 5.9).  send_tokens * num_ranks tokens each pick
 * num_topk distinct experts out of local_experts * num_ranks (a uniform
 * subset, which is what top-k of i.i.d. random scores gives); picks of
 * other ranks' experts are dropped, and so are tokens left with none.
 * The remaining tokens are the received ones, numbered from 0
 * (*num_tokens).  Expert e owns align(count_e, alignment) consecutive
 * rows: its entries in increasing (token, k) order, then -1 padding
 * (*num_rows rows in all).  Returns the malloc'd table (free it), or NULL
 * on a bad argument or out of memory. */
int32_t *ref_channel_moe_positions(int64_t send_tokens, int num_topk,
                                   int local_experts, int num_ranks,
                                   int alignment, uint64_t seed,
                                   int64_t *num_tokens, int64_t *num_rows);

#endif
