/*
 * cast.c -- references for the e4m3 casts: the block cast that
 * per_token_cast (tilekernels-spec.md 6.1) and the per-block / per-channel
 * casts are special cases of (4.2), and cast_back / per_token_cast_back
 * (4.3, 6.3).
 *
 * The order of operations is the specification: amax over the valid
 * elements of a block, the two divisions of sf_and_inv, one multiply by
 * inv (never a division by sf), then the saturating e4m3 conversion.
 * Dequantisation is one f32 multiply of the exact e4m3 value by the
 * block's scale, then RNE to bf16 if asked.  Work is split over block
 * rows, which own disjoint output rows and SF entries.
 */
#pragma GCC optimize("fp-contract=off")

#include <math.h>

#include "reference.h"

typedef struct cast_job {
    const void *x;
    tk_dtype in_dtype;
    int64_t rows, cols, row_stride;
    bool round_sf;
    ref_sf_shape sf_shape;
    uint8_t *out;
    void *sf;
} cast_job;

static inline float load_input(const void *x, tk_dtype dtype, int64_t index) {
    if (dtype == TK_BF16)
        return ref_bf16_to_f32(((const uint16_t *)x)[index]);
    return ((const float *)x)[index];
}

static void cast_block_rows(void *context, int64_t begin, int64_t end) {
    const cast_job *job = context;
    const ref_sf_shape *shape = &job->sf_shape;
    for (int64_t block_row = begin; block_row < end; block_row++) {
        int64_t r0 = block_row * shape->block_m;
        int64_t r1 = r0 + shape->block_m < job->rows ? r0 + shape->block_m : job->rows;
        for (int64_t block_col = 0; block_col < shape->nbk; block_col++) {
            int64_t c0 = block_col * shape->block_k;
            int64_t c1 = c0 + shape->block_k < job->cols ? c0 + shape->block_k : job->cols;
            /* |max| over the valid part of the block only */
            float amax = 0.0f;
            for (int64_t r = r0; r < r1; r++)
                for (int64_t c = c0; c < c1; c++)
                    amax = fmaxf(amax, fabsf(load_input(job->x, job->in_dtype,
                                                        r * job->row_stride + c)));
            ref_scale scale = ref_sf_and_inv(amax, job->round_sf);
            ref_sf_store(shape, job->sf, block_row, block_col, scale);
            for (int64_t r = r0; r < r1; r++)
                for (int64_t c = c0; c < c1; c++) {
                    float value = load_input(job->x, job->in_dtype, r * job->row_stride + c);
                    float scaled = value * scale.inv;
                    job->out[r * job->cols + c] = ref_e4m3_from_f32(scaled);
                }
        }
    }
}

bool ref_cast_e4m3(const void *x, tk_dtype in_dtype, int64_t rows,
                   int64_t cols, int64_t row_stride, int block_m, int block_k,
                   bool round_sf, tk_sf_layout layout, uint8_t *out, void *sf) {
    cast_job job;
    if (in_dtype != TK_F32 && in_dtype != TK_BF16)
        return false;
    if (row_stride < cols && rows > 1)
        return false;
    /* a UE8M0 byte can only hold a power-of-two scale (spec 15.4) */
    if (layout == TK_SF_PACKED_UE8M0 && !round_sf)
        return false;
    if (!ref_sf_shape_of(rows, cols, block_m, block_k, layout, &job.sf_shape))
        return false;
    job.x = x;
    job.in_dtype = in_dtype;
    job.rows = rows;
    job.cols = cols;
    job.row_stride = row_stride;
    job.round_sf = round_sf;
    job.out = out;
    job.sf = sf;
    int64_t block_elements = (int64_t)block_m * (cols > 0 ? cols : 1);
    ref_parallel_for(job.sf_shape.nbm, 1 + (1 << 16) / block_elements,
                     cast_block_rows, &job);
    return true;
}

bool ref_per_token_cast_e4m3(const void *x, tk_dtype in_dtype, int64_t rows,
                             int64_t cols, int64_t row_stride,
                             int num_per_channels, bool round_sf,
                             tk_sf_layout layout, uint8_t *out, void *sf) {
    return ref_cast_e4m3(x, in_dtype, rows, cols, row_stride, 1,
                         num_per_channels, round_sf, layout, out, sf);
}

typedef struct cast_back_job {
    const uint8_t *x;
    int64_t rows, cols;
    const void *sf;
    ref_sf_shape sf_shape;
    tk_dtype out_dtype;
    void *out;
} cast_back_job;

static void cast_back_rows(void *context, int64_t begin, int64_t end) {
    const cast_back_job *job = context;
    const ref_sf_shape *shape = &job->sf_shape;
    float decoded[256]; /* every e4m3 code, decoded once per chunk */
    for (int code = 0; code < 256; code++)
        decoded[code] = ref_e4m3_to_f32((uint8_t)code);
    for (int64_t r = begin; r < end; r++) {
        int64_t block_row = r / shape->block_m;
        for (int64_t block_col = 0; block_col < shape->nbk; block_col++) {
            float scale = ref_sf_load(shape, job->sf, block_row, block_col);
            int64_t c0 = block_col * shape->block_k;
            int64_t c1 = c0 + shape->block_k < job->cols ? c0 + shape->block_k : job->cols;
            for (int64_t c = c0; c < c1; c++) {
                int64_t index = r * job->cols + c;
                float value = decoded[job->x[index]] * scale;
                if (job->out_dtype == TK_BF16)
                    ((uint16_t *)job->out)[index] = ref_bf16_from_f32(value);
                else
                    ((float *)job->out)[index] = value;
            }
        }
    }
}

bool ref_cast_back_e4m3(const uint8_t *x, int64_t rows, int64_t cols,
                        const void *sf, tk_sf_layout layout, int block_m,
                        int block_k, tk_dtype out_dtype, void *out) {
    cast_back_job job;
    if (out_dtype != TK_F32 && out_dtype != TK_BF16)
        return false;
    if (!ref_sf_shape_of(rows, cols, block_m, block_k, layout, &job.sf_shape))
        return false;
    job.x = x;
    job.rows = rows;
    job.cols = cols;
    job.sf = sf;
    job.out_dtype = out_dtype;
    job.out = out;
    ref_parallel_for(rows, 1 + (1 << 16) / (cols > 0 ? cols : 1), cast_back_rows, &job);
    return true;
}
