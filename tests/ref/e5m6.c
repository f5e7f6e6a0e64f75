/*
 * e5m6.c -- references for the E5M6 format (tilekernels-spec.md 3.4) and
 * its two kernels, per_token_cast to E5M6 (6.2) and cast_back (6.3).
 *
 * __float2half_rz is written on the bit pattern (truncating the mantissa,
 * denormalising below 2^-14), with CUDA's overflow behaviour (finite
 * values saturate to 65504; TileKernels' own reference overflows to
 * infinity, which no scaled value can reach).  The encoder is the spec's
 * integer rule, bit for bit.  Scales come from ref_quant_scale with the
 * E5M6 constants.
 */
#pragma GCC optimize("fp-contract=off")

#include <math.h>
#include <string.h>

#include "block_cast.h"
#include "e5m6.h"

uint16_t ref_f16_rz_bits(float value) {
    uint32_t bits = ref_f32_bits(value);
    uint16_t sign = (uint16_t)((bits >> 16) & 0x8000u);
    uint32_t magnitude = bits & 0x7FFFFFFFu;
    if (magnitude > 0x7F800000u)
        return 0x7FFF;
    if (magnitude == 0x7F800000u)
        return sign | 0x7C00;
    int exponent = (int)(magnitude >> 23) - 127;
    if (exponent >= 16 || magnitude >= 0x477FE000u) /* >= 65504: saturate */
        return sign | 0x7BFF;
    if (exponent >= -14) /* f16 normal: keep 10 of the 23 mantissa bits */
        return sign | (uint16_t)(((exponent + 15) << 10) | ((magnitude >> 13) & 0x3FF));
    if ((magnitude >> 23) == 0) /* f32 subnormal: far below 2^-24 */
        return sign;
    /* f16 subnormal: floor(|v| * 2^24) = M * 2^(exponent + 1) with M the
     * 24-bit significand; exponent + 1 < 0 here */
    uint32_t significand = (magnitude & 0x7FFFFFu) | 0x800000u;
    int shift = -(exponent + 1);
    return sign | (uint16_t)(shift >= 32 ? 0 : significand >> shift);
}

float ref_f16_to_f32(uint16_t bits) {
    int exponent = (bits >> 10) & 0x1F;
    int mantissa = bits & 0x3FF;
    float magnitude;
    if (exponent == 0x1F)
        magnitude = mantissa ? NAN : INFINITY;
    else if (exponent == 0)
        magnitude = ldexpf((float)mantissa, -24);
    else
        magnitude = ldexpf((float)(1024 + mantissa), exponent - 25);
    return (bits & 0x8000) ? -magnitude : magnitude;
}

uint16_t ref_e5m6_code(float value) {
    uint32_t code = (uint32_t)ref_f16_rz_bits(value) >> 4;
    uint32_t rem = ref_f32_bits(value) & 0x1FFFFu;
    if ((code & 1u) + rem > 0x10000u)
        code++;
    return (uint16_t)(code & 0xFFFu);
}

float ref_e5m6_to_f32(uint16_t code) {
    return ref_f16_to_f32((uint16_t)(code << 4));
}

void ref_e5m6_pack(const uint16_t c[8], uint32_t w[3]) {
    w[0] = (uint32_t)c[0] << 20 | (uint32_t)c[1] << 8 | (uint32_t)c[2] >> 4;
    w[1] = ((uint32_t)c[2] & 0xF) << 28 | (uint32_t)c[3] << 16 | (uint32_t)c[4] << 4 |
           (uint32_t)c[5] >> 8;
    w[2] = ((uint32_t)c[5] & 0xFF) << 24 | (uint32_t)c[6] << 12 | (uint32_t)c[7];
}

void ref_e5m6_unpack(const uint32_t w[3], uint16_t p[8]) {
    p[0] = (uint16_t)((w[0] >> 16) & 0xFFF0);
    p[1] = (uint16_t)((w[0] >> 4) & 0xFFF0);
    p[2] = (uint16_t)(((w[0] << 8) | (w[1] >> 24)) & 0xFFF0);
    p[3] = (uint16_t)((w[1] >> 12) & 0xFFF0);
    p[4] = (uint16_t)(w[1] & 0xFFF0);
    p[5] = (uint16_t)(((w[1] << 12) | (w[2] >> 20)) & 0xFFF0);
    p[6] = (uint16_t)((w[2] >> 8) & 0xFFF0);
    p[7] = (uint16_t)((w[2] << 4) & 0xFFF0);
}

typedef struct e5m6_job {
    const void *x;
    tk_dtype in_dtype;
    int64_t cols, row_stride;
    bool round_sf;
    ref_sf_shape shape;
    uint8_t *out;
    void *sf;
} e5m6_job;

static void e5m6_rows(void *context, int64_t begin, int64_t end) {
    const e5m6_job *job = context;
    for (int64_t r = begin; r < end; r++) {
        float amax = 0.0f;
        for (int64_t c = 0; c < job->cols; c++)
            amax = fmaxf(amax, fabsf(ref_load_f32(job->x, job->in_dtype, r * job->row_stride + c)));
        ref_scale scale = ref_quant_scale(amax, REF_E5M6_MAX, REF_E5M6_CLAMP_MIN, job->round_sf);
        ref_sf_store(&job->shape, job->sf, r, 0, scale);
        for (int64_t g = 0; g < job->cols / 8; g++) {
            uint16_t codes[8];
            for (int i = 0; i < 8; i++)
                codes[i] = ref_e5m6_code(
                    ref_load_f32(job->x, job->in_dtype, r * job->row_stride + g * 8 + i) * scale.inv);
            uint32_t words[3];
            ref_e5m6_pack(codes, words);
            uint8_t *at = job->out + r * (job->cols / 8 * 12) + g * 12;
            for (int w = 0; w < 3; w++) /* little-endian words */
                for (int b = 0; b < 4; b++)
                    at[w * 4 + b] = (uint8_t)(words[w] >> (8 * b));
        }
    }
}

bool ref_per_token_cast_e5m6(const void *x, tk_dtype in_dtype, int64_t rows, int64_t cols,
                             int64_t row_stride, bool round_sf, tk_sf_layout layout,
                             uint8_t *out, void *sf) {
    e5m6_job job;
    if ((in_dtype != TK_F32 && in_dtype != TK_BF16) || cols % 8 != 0 || cols < 8)
        return false;
    if ((rows > 1 && row_stride < cols) || (layout == TK_SF_PACKED_UE8M0 && !round_sf))
        return false;
    if (!ref_sf_shape_of(rows, cols, 1, (int)cols, layout, &job.shape))
        return false;
    job.x = x;
    job.in_dtype = in_dtype;
    job.cols = cols;
    job.row_stride = row_stride;
    job.round_sf = round_sf;
    job.out = out;
    job.sf = sf;
    ref_parallel_for(rows, 1 + (1 << 16) / cols, e5m6_rows, &job);
    return true;
}

typedef struct e5m6_back_job {
    const uint8_t *x;
    int64_t cols;
    const void *sf;
    ref_sf_shape shape;
    tk_dtype out_dtype;
    void *out;
} e5m6_back_job;

static void e5m6_back_rows(void *context, int64_t begin, int64_t end) {
    const e5m6_back_job *job = context;
    for (int64_t r = begin; r < end; r++) {
        float scale = ref_sf_load(&job->shape, job->sf, r, 0);
        for (int64_t g = 0; g < job->cols / 8; g++) {
            const uint8_t *at = job->x + r * (job->cols / 8 * 12) + g * 12;
            uint32_t words[3];
            for (int w = 0; w < 3; w++)
                words[w] = (uint32_t)at[w * 4] | (uint32_t)at[w * 4 + 1] << 8 |
                           (uint32_t)at[w * 4 + 2] << 16 | (uint32_t)at[w * 4 + 3] << 24;
            uint16_t patterns[8];
            ref_e5m6_unpack(words, patterns);
            for (int i = 0; i < 8; i++) {
                float value = ref_f16_to_f32(patterns[i]) * scale;
                ref_store_f32(job->out, job->out_dtype, r * job->cols + g * 8 + i, value);
            }
        }
    }
}

bool ref_cast_back_e5m6(const uint8_t *x, int64_t rows, int64_t cols, const void *sf,
                        tk_sf_layout layout, tk_dtype out_dtype, void *out) {
    e5m6_back_job job;
    if ((out_dtype != TK_F32 && out_dtype != TK_BF16) || cols % 8 != 0 || cols < 8)
        return false;
    if (!ref_sf_shape_of(rows, cols, 1, (int)cols, layout, &job.shape))
        return false;
    job.x = x;
    job.cols = cols;
    job.sf = sf;
    job.out_dtype = out_dtype;
    job.out = out;
    ref_parallel_for(rows, 1 + (1 << 16) / cols, e5m6_back_rows, &job);
    return true;
}
