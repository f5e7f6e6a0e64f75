/*
 * transpose.c -- reference for batched_transpose and transpose
 * (tilekernels-spec.md 7.1): out[b, j, i] = x[b, i, j], pure data
 * movement, so any element size works and the result is exact.
 *
 * The golden tests transpose up to 32 x 8064 x 7168 elements, so the copy
 * goes tile by tile (both sides stay in cache) and the tiles of all
 * batches are spread over threads.
 */
#include <string.h>

#include "reference.h"

#define TRANSPOSE_TILE 64

typedef struct transpose_job {
    const unsigned char *x;
    unsigned char *out;
    size_t element_size;
    int64_t rows, cols, row_stride, batch_stride;
    int64_t col_tiles; /* tiles along cols per batch */
} transpose_job;

/* One element-size-specialised tile copy, so the compiler sees plain
 * loads and stores instead of memcpy calls of a run-time size. */
#define DEFINE_TILE_COPY(name, type)                                          \
    static void name(const void *x_base, void *out_base, int64_t row_stride,  \
                     int64_t rows, int64_t i0, int64_t i1, int64_t j0,        \
                     int64_t j1) {                                            \
        const type *x = x_base;                                               \
        type *out = out_base;                                                 \
        for (int64_t j = j0; j < j1; j++)                                     \
            for (int64_t i = i0; i < i1; i++)                                 \
                out[j * rows + i] = x[i * row_stride + j];                    \
    }
DEFINE_TILE_COPY(tile_copy_1, uint8_t)
DEFINE_TILE_COPY(tile_copy_2, uint16_t)
DEFINE_TILE_COPY(tile_copy_4, uint32_t)
DEFINE_TILE_COPY(tile_copy_8, uint64_t)

static void tile_copy_any(const transpose_job *job, const unsigned char *x,
                          unsigned char *out, int64_t i0, int64_t i1,
                          int64_t j0, int64_t j1) {
    size_t size = job->element_size;
    for (int64_t j = j0; j < j1; j++)
        for (int64_t i = i0; i < i1; i++)
            memcpy(out + (size_t)(j * job->rows + i) * size,
                   x + (size_t)(i * job->row_stride + j) * size, size);
}

static void transpose_tiles(void *context, int64_t begin, int64_t end) {
    const transpose_job *job = context;
    for (int64_t unit = begin; unit < end; unit++) {
        int64_t batch = unit / job->col_tiles;
        int64_t j0 = (unit % job->col_tiles) * TRANSPOSE_TILE;
        int64_t j1 = j0 + TRANSPOSE_TILE < job->cols ? j0 + TRANSPOSE_TILE : job->cols;
        const unsigned char *x =
            job->x + (size_t)(batch * job->batch_stride) * job->element_size;
        unsigned char *out =
            job->out + (size_t)(batch * job->rows * job->cols) * job->element_size;
        for (int64_t i0 = 0; i0 < job->rows; i0 += TRANSPOSE_TILE) {
            int64_t i1 = i0 + TRANSPOSE_TILE < job->rows ? i0 + TRANSPOSE_TILE : job->rows;
            switch (job->element_size) {
            case 1: tile_copy_1(x, out, job->row_stride, job->rows, i0, i1, j0, j1); break;
            case 2: tile_copy_2(x, out, job->row_stride, job->rows, i0, i1, j0, j1); break;
            case 4: tile_copy_4(x, out, job->row_stride, job->rows, i0, i1, j0, j1); break;
            case 8: tile_copy_8(x, out, job->row_stride, job->rows, i0, i1, j0, j1); break;
            default: tile_copy_any(job, x, out, i0, i1, j0, j1); break;
            }
        }
    }
}

void ref_batched_transpose(const void *x, void *out, size_t element_size,
                           int64_t batches, int64_t rows, int64_t cols,
                           int64_t row_stride, int64_t batch_stride) {
    if (batches <= 0 || rows <= 0 || cols <= 0 || element_size == 0)
        return;
    transpose_job job = {x, out, element_size, rows, cols, row_stride,
                         batch_stride, (cols + TRANSPOSE_TILE - 1) / TRANSPOSE_TILE};
    ref_parallel_for(batches * job.col_tiles, 1, transpose_tiles, &job);
}
