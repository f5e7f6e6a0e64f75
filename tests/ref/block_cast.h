/*
 * block_cast.h -- CPU references for the per-block casts (per_block_cast,
 * its SF-only and precomputed-SF modes, per_block_cast_lossless) and
 * dequantisation (tilekernels-spec.md 3.2, 3.5, 4.1, 4.2, 6.4, 6.5).  Same conventions as reference.h: host memory, row strides
 * in elements, SF buffers laid out as ref_sf_shape_of() says, only the
 * bytes that hold a scale are written.
 */
#ifndef TK_REF_BLOCK_CAST_H
#define TK_REF_BLOCK_CAST_H

#include "reference.h"

/* The e2m1 format (ref_e2m1_from_f32 / ref_e2m1_to_f32, REF_E2M1_*) and
 * the per-format scale ref_quant_scale live in numerics.c (reference.h). */

/* per_block_cast (spec 4.2, 6.4): x (rows, cols) f32 or bf16 with a row
 * stride; fmt TK_E4M3 (out: rows x cols codes) or TK_E2M1 (out: rows x
 * cols/2 packed bytes, element 2j in the low nibble); one scale per
 * (block_m, block_k) block over its valid elements.  out may be NULL (the
 * SF-only mode).  With precomputed_sf (row-major f32 nbm x nbk) the
 * multiplier is 1 / sf (IEEE), nothing is written to sf, and layout and
 * round_sf are ignored.  False, writing nothing, on a bad argument. */
bool ref_per_block_cast(const void *x, tk_dtype in_dtype, int64_t rows, int64_t cols,
                        int64_t row_stride, tk_dtype fmt, int block_m, int block_k,
                        bool round_sf, tk_sf_layout layout, uint8_t *out, void *sf,
                        const float *precomputed_sf);

/* Biased exponent of a power-of-two scale as stored in an SF buffer:
 * the exponent bits of the f32, or the UE8M0 byte. */
int ref_sf_exponent(const ref_sf_shape *shape, const void *buffer, int64_t i, int64_t k);

/* per_block_cast_lossless (spec 6.5): x packed FP4 (rows, cols/2) with
 * power-of-two scales in (in_bm, in_bk) blocks laid out as in_layout;
 * out e4m3 (rows, cols) and scales in (out_bm, out_bk) blocks laid out as
 * out_layout (f32 2^(E - 127), or the byte E).  E_out = max(max E_in - 6,
 * 0) over the input blocks meeting the output block inside the matrix;
 * out = e4m3(fp4 * 2^(E_in - E_out)). */
bool ref_per_block_cast_lossless(const uint8_t *x, int64_t rows, int64_t cols, const void *sf_in,
                                 tk_sf_layout in_layout, int in_bm, int in_bk, uint8_t *out,
                                 void *sf_out, tk_sf_layout out_layout, int out_bm, int out_bk);

/* Dequantisation to f32 (spec 4.3): out[r, c] = f32(data) * scale of the
 * element's block; data e4m3 (rows x cols) or packed e2m1 (rows x
 * cols/2) per fmt. */
bool ref_dequantize(const uint8_t *data, tk_dtype fmt, int64_t rows, int64_t cols, const void *sf,
                    tk_sf_layout layout, int block_m, int block_k, float *out);

#endif
