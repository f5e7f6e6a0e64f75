/*
 * e5m6.h -- CPU references for the E5M6 format and its casts
 * (tilekernels-spec.md 2.2, 3.4, 6.2, 6.3): CUDA's __float2half_rz, the
 * 12-bit encoder, the 8-codes-in-3-words packing, per_token_cast to
 * E5M6 (one scale per row) and cast_back from it.
 */
#ifndef TK_REF_E5M6_H
#define TK_REF_E5M6_H

#include "reference.h"

#define REF_E5M6_MAX 65024.0f      /* 2^15 * (1 + 63/64), code 0x7BF */
#define REF_E5M6_CLAMP_MIN 1e-4f

/* CUDA __float2half_rz: truncation toward zero; finite magnitudes from
 * 65504 up give +-65504 (0x7BFF), +-inf 0x7C00 / 0xFC00, NaN 0x7FFF. */
uint16_t ref_f16_rz_bits(float value);
/* The f32 value of an f16 bit pattern (exact). */
float ref_f16_to_f32(uint16_t bits);

/* The 12-bit E5M6 code of v (spec 3.4): h = rz_f16(v), code = h >> 4,
 * +1 when (code & 1) + (bits(v) & 0x1FFFF) > 0x10000, & 0xFFF. */
uint16_t ref_e5m6_code(float value);
/* The f32 value of a code (the f16 pattern code << 4). */
float ref_e5m6_to_f32(uint16_t code);

/* Eight codes -> three words (big-endian bit string c0..c7), and back with
 * the spec's decoding formulas (p_i = c_i << 4). */
void ref_e5m6_pack(const uint16_t codes[8], uint32_t words[3]);
void ref_e5m6_unpack(const uint32_t words[3], uint16_t patterns[8]);

/* per_token_cast(x, 'e5m6', npc = cols) (spec 6.2): x (rows, cols) f32 or
 * bf16 with a row stride, cols % 8 == 0; out (rows, 3 * cols / 2) bytes
 * (the little-endian words); one scale per row (65024 / 1e-4 constants)
 * stored in sf laid out as ref_sf_shape_of(rows, cols, 1, cols, layout).
 * False on a bad argument (packed without round_sf among them). */
bool ref_per_token_cast_e5m6(const void *x, tk_dtype in_dtype, int64_t rows, int64_t cols,
                             int64_t row_stride, bool round_sf, tk_sf_layout layout,
                             uint8_t *out, void *sf);

/* cast_back(..., x_special_fmt='e5m6') (spec 6.3): out = to_dtype(f32 of
 * the code * the row's scale), out f32 or bf16 (rows, cols) contiguous. */
bool ref_cast_back_e5m6(const uint8_t *x, int64_t rows, int64_t cols, const void *sf,
                        tk_sf_layout layout, tk_dtype out_dtype, void *out);

#endif
