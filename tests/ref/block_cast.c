/*
 * block_cast.c -- references for the per-block casts: per_block_cast in
 * its three modes, per_block_cast_lossless, and dequantisation of e4m3 /
 * FP4 data (tilekernels-spec.md 3.2, 4.1, 4.2, 6.4, 6.5).
 *
 * The order of operations is the specification: |max| over the valid
 * elements of a block, the two IEEE divisions of the scale (or the
 * power-of-two bit trick), one multiply by inv, then the conversion
 * (e4m3 and e2m1 from numerics.c; the e2m1 encoder is integer RNE on the
 * f32 pattern, a different method from the kernels' bit tricks).  Work is
 * split over block rows, which own disjoint rows of out and of the
 * scales.
 */
#pragma GCC optimize("fp-contract=off")

#include <math.h>
#include <string.h>

#include "block_cast.h"

/* ---- per_block_cast ------------------------------------------------------ */

typedef struct block_job {
    const void *x;
    tk_dtype in_dtype, fmt;
    int64_t rows, cols, row_stride;
    bool round_sf;
    ref_sf_shape sf_shape;
    uint8_t *out;
    void *sf;
    const float *precomputed;
} block_job;

static void block_rows(void *context, int64_t begin, int64_t end) {
    const block_job *job = context;
    const ref_sf_shape *shape = &job->sf_shape;
    bool fp4 = job->fmt == TK_E2M1;
    for (int64_t bi = begin; bi < end; bi++) {
        int64_t r0 = bi * shape->block_m;
        int64_t r1 = r0 + shape->block_m < job->rows ? r0 + shape->block_m : job->rows;
        for (int64_t bk = 0; bk < shape->nbk; bk++) {
            int64_t c0 = bk * shape->block_k;
            int64_t c1 = c0 + shape->block_k < job->cols ? c0 + shape->block_k : job->cols;
            float inv;
            if (job->precomputed) {
                inv = 1.0f / job->precomputed[bi * shape->nbk + bk];
            } else {
                float amax = 0.0f;
                for (int64_t r = r0; r < r1; r++)
                    for (int64_t c = c0; c < c1; c++)
                        amax = fmaxf(amax, fabsf(ref_load_f32(job->x, job->in_dtype,
                                                              r * job->row_stride + c)));
                ref_scale scale = fp4 ? ref_quant_scale(amax, REF_E2M1_MAX,
                                                        REF_E2M1_CLAMP_MIN, job->round_sf)
                                      : ref_quant_scale(amax, REF_E4M3_MAX,
                                                        REF_E4M3_CLAMP_MIN, job->round_sf);
                ref_sf_store(shape, job->sf, bi, bk, scale);
                inv = scale.inv;
            }
            if (!job->out)
                continue;
            for (int64_t r = r0; r < r1; r++)
                for (int64_t c = c0; c < c1; c++) {
                    float scaled = ref_load_f32(job->x, job->in_dtype, r * job->row_stride + c) * inv;
                    if (!fp4) {
                        job->out[r * job->cols + c] = ref_e4m3_from_f32(scaled);
                        continue;
                    }
                    uint8_t *byte = &job->out[r * (job->cols / 2) + c / 2];
                    uint8_t nibble = ref_e2m1_from_f32(scaled);
                    *byte = (c % 2 == 0) ? (uint8_t)((*byte & 0xF0) | nibble)
                                         : (uint8_t)((*byte & 0x0F) | (nibble << 4));
                }
        }
    }
}

bool ref_per_block_cast(const void *x, tk_dtype in_dtype, int64_t rows, int64_t cols,
                        int64_t row_stride, tk_dtype fmt, int block_m, int block_k,
                        bool round_sf, tk_sf_layout layout, uint8_t *out, void *sf,
                        const float *precomputed_sf) {
    block_job job;
    if (in_dtype != TK_F32 && in_dtype != TK_BF16)
        return false;
    if (fmt != TK_E4M3 && fmt != TK_E2M1)
        return false;
    if ((fmt == TK_E2M1 && cols % 2 != 0) || (rows > 1 && row_stride < cols))
        return false;
    if (!precomputed_sf && layout == TK_SF_PACKED_UE8M0 && !round_sf)
        return false;
    if (!ref_sf_shape_of(rows, cols, block_m, block_k,
                         precomputed_sf ? TK_SF_ROW_MAJOR : layout, &job.sf_shape))
        return false;
    job.x = x;
    job.in_dtype = in_dtype;
    job.fmt = fmt;
    job.rows = rows;
    job.cols = cols;
    job.row_stride = row_stride;
    job.round_sf = round_sf;
    job.out = out;
    job.sf = sf;
    job.precomputed = precomputed_sf;
    int64_t block_elements = (int64_t)block_m * (cols > 0 ? cols : 1);
    ref_parallel_for(job.sf_shape.nbm, 1 + (1 << 16) / block_elements, block_rows, &job);
    return true;
}

/* ---- per_block_cast_lossless ------------------------------------------- */

int ref_sf_exponent(const ref_sf_shape *shape, const void *buffer, int64_t i, int64_t k) {
    const unsigned char *at = (const unsigned char *)buffer + ref_sf_offset(shape, i, k);
    if (shape->layout == TK_SF_PACKED_UE8M0)
        return *at;
    uint32_t bits;
    memcpy(&bits, at, 4);
    return (int)((bits >> 23) & 0xFF);
}

typedef struct lossless_job {
    const uint8_t *x;
    int64_t rows, cols;
    const void *sf_in;
    ref_sf_shape in_shape, out_shape;
    uint8_t *out;
    void *sf_out;
} lossless_job;

static void lossless_rows(void *context, int64_t begin, int64_t end) {
    const lossless_job *job = context;
    const ref_sf_shape *in = &job->in_shape, *outs = &job->out_shape;
    for (int64_t bi = begin; bi < end; bi++) {
        int64_t r0 = bi * outs->block_m;
        int64_t r1 = r0 + outs->block_m < job->rows ? r0 + outs->block_m : job->rows;
        for (int64_t bk = 0; bk < outs->nbk; bk++) {
            int64_t c0 = bk * outs->block_k;
            int64_t c1 = c0 + outs->block_k < job->cols ? c0 + outs->block_k : job->cols;
            /* the input blocks that meet the valid part of this block */
            int e_max = 0;
            for (int64_t ib = r0 / in->block_m; ib <= (r1 - 1) / in->block_m; ib++)
                for (int64_t kb = c0 / in->block_k; kb <= (c1 - 1) / in->block_k; kb++) {
                    int e = ref_sf_exponent(in, job->sf_in, ib, kb);
                    e_max = e > e_max ? e : e_max;
                }
            int e_out = e_max - 6 > 0 ? e_max - 6 : 0;
            ref_scale scale = {ref_f32_from_bits((uint32_t)e_out << 23), 0.0f, (uint8_t)e_out};
            ref_sf_store(outs, job->sf_out, bi, bk, scale);
            for (int64_t r = r0; r < r1; r++)
                for (int64_t c = c0; c < c1; c++) {
                    int e_in = ref_sf_exponent(in, job->sf_in, r / in->block_m, c / in->block_k);
                    uint8_t byte = job->x[r * (job->cols / 2) + c / 2];
                    float value = ref_e2m1_to_f32((uint8_t)(c % 2 ? byte >> 4 : byte & 0xF));
                    float relative = ldexpf(1.0f, e_in - e_out);
                    job->out[r * job->cols + c] = ref_e4m3_from_f32(value * relative);
                }
        }
    }
}

bool ref_per_block_cast_lossless(const uint8_t *x, int64_t rows, int64_t cols, const void *sf_in,
                                 tk_sf_layout in_layout, int in_bm, int in_bk, uint8_t *out,
                                 void *sf_out, tk_sf_layout out_layout, int out_bm, int out_bk) {
    lossless_job job;
    if (cols % 2 != 0 || in_bm < 1 || in_bk < 1 || out_bm % in_bm != 0 || out_bk % in_bk != 0)
        return false;
    if (!ref_sf_shape_of(rows, cols, in_bm, in_bk, in_layout, &job.in_shape) ||
        !ref_sf_shape_of(rows, cols, out_bm, out_bk, out_layout, &job.out_shape))
        return false;
    job.x = x;
    job.rows = rows;
    job.cols = cols;
    job.sf_in = sf_in;
    job.out = out;
    job.sf_out = sf_out;
    int64_t block_elements = (int64_t)out_bm * (cols > 0 ? cols : 1);
    ref_parallel_for(job.out_shape.nbm, 1 + (1 << 16) / block_elements, lossless_rows, &job);
    return true;
}

/* ---- dequantisation ---------------------------------------------------- */

typedef struct dequant_job {
    const uint8_t *data;
    bool fp4;
    int64_t cols;
    const void *sf;
    ref_sf_shape shape;
    float *out;
} dequant_job;

static void dequant_rows(void *context, int64_t begin, int64_t end) {
    const dequant_job *job = context;
    for (int64_t r = begin; r < end; r++)
        for (int64_t c = 0; c < job->cols; c++) {
            float value;
            if (job->fp4) {
                uint8_t byte = job->data[r * (job->cols / 2) + c / 2];
                value = ref_e2m1_to_f32((uint8_t)(c % 2 ? byte >> 4 : byte & 0xF));
            } else {
                value = ref_e4m3_to_f32(job->data[r * job->cols + c]);
            }
            float scale = ref_sf_load(&job->shape, job->sf, r / job->shape.block_m,
                                      c / job->shape.block_k);
            job->out[r * job->cols + c] = value * scale;
        }
}

bool ref_dequantize(const uint8_t *data, tk_dtype fmt, int64_t rows, int64_t cols, const void *sf,
                    tk_sf_layout layout, int block_m, int block_k, float *out) {
    dequant_job job;
    if ((fmt != TK_E4M3 && fmt != TK_E2M1) || (fmt == TK_E2M1 && cols % 2 != 0))
        return false;
    if (!ref_sf_shape_of(rows, cols, block_m, block_k, layout, &job.shape))
        return false;
    job.data = data;
    job.fp4 = fmt == TK_E2M1;
    job.cols = cols;
    job.sf = sf;
    job.out = out;
    ref_parallel_for(rows, 1 + (1 << 16) / (cols > 0 ? cols : 1), dequant_rows, &job);
    return true;
}
