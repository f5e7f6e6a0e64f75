/*
 * fp4.h -- CPU references for the per-token cast family beyond
 * reference.h's e4m3 block cast: FP4 (e2m1) output packed two per byte,
 * one scale per token (npc == H), requantisation of e4m3 or packed FP4
 * input, precomputed scales, and cast_back from packed FP4
 * (tilekernels-spec.md sections 2.2, 3.2, 4.1-4.3, 6.1, 6.3).
 *
 * Conventions as in reference.h: host memory, row strides in elements,
 * SF buffers laid out as ref_sf_shape_of() says, only the bytes that hold
 * a scale are written.  Packed FP4 rows hold element 2j in the low nibble
 * of byte j and element 2j+1 in its high nibble; a "logical" width counts
 * FP4 elements (twice the bytes).
 */
#ifndef TK_REF_FP4_H
#define TK_REF_FP4_H

#include "reference.h"

/* The e2m1 encoder and decoder (ref_e2m1_from_f32 / ref_e2m1_to_f32) and
 * the e2m1 scale constants (REF_E2M1_MAX, REF_E2M1_CLAMP_MIN) live in
 * numerics.c (reference.h). */

/* sf_and_inv (spec 4.1) for output format `format` (TK_E4M3 or
 * TK_E2M1): QMAX 448 / 6, CLAMP_MIN 1e-4 / 6 * 2^-126. */
ref_scale ref_fp4_scale(float amax, tk_dtype format, bool round_sf);

/* The input of a per-token cast: either floats, or quantised data with
 * its block scales (spec 6.1 (b)). */
typedef struct ref_quant_input {
    const void *data;     /* f32, bf16, e4m3, or packed FP4 bytes        */
    tk_dtype dtype;       /* TK_F32, TK_BF16, TK_E4M3, or TK_E2M1 packed  */
    int64_t row_stride;   /* elements (bytes for e4m3 and packed FP4)    */
    /* quantised input only: scales of (block_m, block_k) blocks         */
    const void *sf;
    tk_sf_layout sf_layout;
    int block_m, block_k;
} ref_quant_input;

/* per_token_cast (spec 6.1): rows x cols logical elements, one scale per
 * row per num_per_channels columns (any npc >= 1, npc == cols included),
 * output e4m3 (out: rows x cols bytes) or e2m1 (out: rows x cols / 2
 * packed bytes, cols even), scales into `sf` in `layout`.  Quantised
 * input uses the kernel's association f32(data) * (s_in * inv) (spec
 * 15.5).  With `precomputed` (row-major f32, rows x ceil(cols / npc)) the
 * scales are read from it, inv = 1 / sf, and `sf` is not written (may be
 * NULL); with out == NULL only the scales are computed (SF-only mode).
 * False, writing nothing, on a bad argument. */
bool ref_per_token_quant(const ref_quant_input *x, int64_t rows, int64_t cols,
                         int num_per_channels, tk_dtype format, bool round_sf,
                         tk_sf_layout layout, const float *precomputed,
                         uint8_t *out, void *sf);

/* cast_back from packed FP4 (spec 4.3, 6.3): x (rows, cols / 2) packed
 * bytes, contiguous; out (rows, cols) f32 or bf16 = to_dtype(value * s),
 * s the scale of the element's (block_m, block_k) block in `layout`. */
bool ref_cast_back_e2m1(const uint8_t *x, int64_t rows, int64_t cols,
                        const void *sf, tk_sf_layout layout, int block_m,
                        int block_k, tk_dtype out_dtype, void *out);

/* unpack_from_e2m1fn_x2 (spec 3.2): bytes -> 2 * bytes values (f32 or
 * bf16), element 2j from the low nibble of byte j. */
bool ref_unpack_e2m1(const uint8_t *x, int64_t bytes, tk_dtype out_dtype,
                     void *out);

#endif
