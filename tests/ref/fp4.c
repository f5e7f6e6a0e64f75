/*
 * fp4.c -- references for FP4 (e2m1) casts, one-scale-per-token casts,
 * requantisation, precomputed scales and cast_back from packed FP4
 * (tilekernels-spec.md 2.2, 3.2, 4.1-4.3, 6.1, 6.3).
 *
 * The e2m1 encoder (numerics.c) is integer round-to-nearest-even on the
 * f32 pattern with an explicit remainder, the way TileKernels' PyTorch
 * reference does it, and deliberately not the kernels' float trick
 * (stdlib/fp4.tk), so that the GPU tests compare two independent
 * derivations.  Everything else follows cast.c: amax over the valid elements of a group, the two IEEE
 * divisions of sf_and_inv, one multiply by inv, then the conversion.  Work
 * is split over rows, which own disjoint output rows and SF entries.
 */
#pragma GCC optimize("fp-contract=off")

#include <math.h>
#include <string.h>

#include "fp4.h"

ref_scale ref_fp4_scale(float amax, tk_dtype format, bool round_sf) {
    if (format != TK_E2M1)
        return ref_sf_and_inv(amax, round_sf);
    if (!round_sf)
        return ref_quant_scale(amax, REF_E2M1_MAX, REF_E2M1_CLAMP_MIN, false);
    /* next power of two >= sf (the reference's add-and-mask form; unlike
     * ref_quant_scale's it gives inv = +0 for an infinite amax, so it is
     * kept) */
    ref_scale scale;
    float clamped = fmaxf(amax, REF_E2M1_CLAMP_MIN);
    float sf = clamped / REF_E2M1_MAX;
    uint32_t rounded = (ref_f32_bits(sf) + 0x007FFFFFu) & 0x7F800000u;
    scale.sf = ref_f32_from_bits(rounded);
    scale.inv = 1.0f / scale.sf; /* exact for a power of two */
    scale.ue8m0 = (uint8_t)(rounded >> 23);
    return scale;
}

/* ---- per-token cast -------------------------------------------------- */

typedef struct quant_job {
    ref_quant_input x;
    ref_sf_shape in_shape; /* input scales (quantised input only) */
    int64_t rows, cols;
    int npc;
    tk_dtype format;
    bool round_sf;
    ref_sf_shape shape;
    const float *precomputed;
    uint8_t *out;
    void *sf;
    float e4m3[256]; /* ref_e4m3_to_f32 of every code, read once per job */
} quant_job;

static bool is_quantized(tk_dtype dtype) { return dtype == TK_E4M3 || dtype == TK_E2M1; }

/* Element c of row r as data (quantised input: the stored value, not yet
 * scaled). */
static float load_element(const quant_job *job, int64_t r, int64_t c) {
    const ref_quant_input *x = &job->x;
    const unsigned char *row = (const unsigned char *)x->data;
    switch (x->dtype) {
    case TK_F32:
        return ((const float *)x->data)[r * x->row_stride + c];
    case TK_BF16:
        return ref_bf16_to_f32(((const uint16_t *)x->data)[r * x->row_stride + c]);
    case TK_E4M3:
        return job->e4m3[row[r * x->row_stride + c]];
    case TK_E2M1: {
        uint8_t byte = row[r * x->row_stride + c / 2];
        return ref_e2m1_to_f32((uint8_t)(c % 2 ? byte >> 4 : byte & 0xF));
    }
    default:
        return NAN;
    }
}

static float input_scale(const quant_job *job, int64_t r, int64_t c) {
    return ref_sf_load(&job->in_shape, job->x.sf, r / job->x.block_m, c / job->x.block_k);
}

/* The input scale of (r, c), looked up again only when c enters another
 * input block of the row (the lookup dominated the reference's time). */
typedef struct scale_cache {
    int64_t block; /* input block column of `value`, -1: none yet */
    float value;
} scale_cache;

static float cached_input_scale(const quant_job *job, scale_cache *cache, int64_t r,
                                int64_t c) {
    int64_t block = c / job->x.block_k;
    if (block != cache->block) {
        cache->block = block;
        cache->value = input_scale(job, r, c);
    }
    return cache->value;
}

static void quant_rows(void *context, int64_t begin, int64_t end) {
    const quant_job *job = context;
    bool quantized = is_quantized(job->x.dtype);
    for (int64_t r = begin; r < end; r++) {
        scale_cache cache = {-1, 0.0f};
        for (int64_t g = 0; g < job->shape.nbk; g++) {
            int64_t c0 = g * job->npc;
            int64_t c1 = c0 + job->npc < job->cols ? c0 + job->npc : job->cols;
            ref_scale scale;
            if (job->precomputed) {
                scale.sf = job->precomputed[r * job->shape.nbk + g];
                scale.inv = 1.0f / scale.sf;
                scale.ue8m0 = 0;
            } else {
                float amax = 0.0f;
                for (int64_t c = c0; c < c1; c++) {
                    float value = fabsf(load_element(job, r, c));
                    if (quantized)
                        value = value * cached_input_scale(job, &cache, r, c);
                    amax = fmaxf(amax, value);
                }
                scale = ref_fp4_scale(amax, job->format, job->round_sf);
                ref_sf_store(&job->shape, job->sf, r, g, scale);
            }
            if (!job->out)
                continue;
            for (int64_t c = c0; c < c1; c++) {
                float multiplier = scale.inv;
                if (quantized)
                    multiplier = cached_input_scale(job, &cache, r, c) * scale.inv;
                float scaled = load_element(job, r, c) * multiplier;
                if (job->format == TK_E4M3) {
                    job->out[r * job->cols + c] = ref_e4m3_from_f32(scaled);
                    continue;
                }
                uint8_t *byte = &job->out[(r * job->cols + c) / 2];
                uint8_t code = ref_e2m1_from_f32(scaled);
                *byte = c % 2 ? (uint8_t)((*byte & 0x0F) | (code << 4))
                              : (uint8_t)((*byte & 0xF0) | code);
            }
        }
    }
}

bool ref_per_token_quant(const ref_quant_input *x, int64_t rows, int64_t cols,
                         int num_per_channels, tk_dtype format, bool round_sf,
                         tk_sf_layout layout, const float *precomputed,
                         uint8_t *out, void *sf) {
    quant_job job;
    memset(&job, 0, sizeof job);
    if (format != TK_E4M3 && format != TK_E2M1)
        return false;
    if (x->dtype != TK_F32 && x->dtype != TK_BF16 && !is_quantized(x->dtype))
        return false;
    if (format == TK_E2M1 && cols % 2 != 0)
        return false;
    if (x->dtype == TK_E2M1 && cols % 2 != 0)
        return false;
    if (layout == TK_SF_PACKED_UE8M0 && !round_sf)
        return false;
    if (!precomputed && !sf)
        return false;
    if (!ref_sf_shape_of(rows, cols, 1, num_per_channels, layout, &job.shape))
        return false;
    if (is_quantized(x->dtype) &&
        !ref_sf_shape_of(rows, cols, x->block_m, x->block_k, x->sf_layout, &job.in_shape))
        return false;
    job.x = *x;
    for (int code = 0; code < 256; code++)
        job.e4m3[code] = ref_e4m3_to_f32((uint8_t)code);
    job.rows = rows;
    job.cols = cols;
    job.npc = num_per_channels;
    job.format = format;
    job.round_sf = round_sf;
    job.precomputed = precomputed;
    job.out = out;
    job.sf = sf;
    ref_parallel_for(rows, 1 + (1 << 15) / (cols > 0 ? cols : 1), quant_rows, &job);
    return true;
}

/* ---- cast_back and unpack ---------------------------------------------- */

typedef struct back_job {
    const uint8_t *x;
    int64_t cols;
    const void *sf;
    ref_sf_shape shape;
    tk_dtype out_dtype;
    void *out;
} back_job;

static void back_rows(void *context, int64_t begin, int64_t end) {
    const back_job *job = context;
    for (int64_t r = begin; r < end; r++)
        for (int64_t c0 = 0; c0 < job->cols; c0 += job->shape.block_k) {
            /* one scale per block of the row */
            float scale = ref_sf_load(&job->shape, job->sf, r / job->shape.block_m,
                                      c0 / job->shape.block_k);
            int64_t c1 = c0 + job->shape.block_k < job->cols ? c0 + job->shape.block_k
                                                             : job->cols;
            for (int64_t c = c0; c < c1; c++) {
                uint8_t byte = job->x[(r * job->cols + c) / 2];
                float value = ref_e2m1_to_f32((uint8_t)(c % 2 ? byte >> 4 : byte & 0xF));
                ref_store_f32(job->out, job->out_dtype, r * job->cols + c, value * scale);
            }
        }
}

bool ref_cast_back_e2m1(const uint8_t *x, int64_t rows, int64_t cols,
                        const void *sf, tk_sf_layout layout, int block_m,
                        int block_k, tk_dtype out_dtype, void *out) {
    back_job job;
    if ((out_dtype != TK_F32 && out_dtype != TK_BF16) || cols % 2 != 0)
        return false;
    if (!ref_sf_shape_of(rows, cols, block_m, block_k, layout, &job.shape))
        return false;
    job.x = x;
    job.cols = cols;
    job.sf = sf;
    job.out_dtype = out_dtype;
    job.out = out;
    ref_parallel_for(rows, 1 + (1 << 15) / (cols > 0 ? cols : 1), back_rows, &job);
    return true;
}

bool ref_unpack_e2m1(const uint8_t *x, int64_t bytes, tk_dtype out_dtype, void *out) {
    if ((out_dtype != TK_F32 && out_dtype != TK_BF16) || bytes < 0)
        return false;
    for (int64_t j = 0; j < bytes; j++) {
        ref_store_f32(out, out_dtype, 2 * j, ref_e2m1_to_f32(x[j] & 0xF));
        ref_store_f32(out, out_dtype, 2 * j + 1, ref_e2m1_to_f32(x[j] >> 4));
    }
    return true;
}
