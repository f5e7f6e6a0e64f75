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
 * rows, which own disjoint output rows and SF entries.  The block cast
 * itself is per_block_cast's e4m3 mode (block_cast.c).
 */
#pragma GCC optimize("fp-contract=off")

#include <math.h>

#include "block_cast.h"

bool ref_cast_e4m3(const void *x, tk_dtype in_dtype, int64_t rows,
                   int64_t cols, int64_t row_stride, int block_m, int block_k,
                   bool round_sf, tk_sf_layout layout, uint8_t *out, void *sf) {
    /* per_block_cast's e4m3 mode is this cast: same argument checks (a
     * UE8M0 byte only holds a power-of-two scale, spec 15.4), same amax,
     * ref_quant_scale with the e4m3 constants (= ref_sf_and_inv), same
     * work split */
    return ref_per_block_cast(x, in_dtype, rows, cols, row_stride, TK_E4M3, block_m, block_k,
                              round_sf, layout, out, sf, NULL);
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
                ref_store_f32(job->out, job->out_dtype, index, decoded[job->x[index]] * scale);
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
