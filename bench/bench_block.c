/*
 * bench_block.c -- tkbench rows of the E5M6 casts and the per-block casts
 * (tilekernels-spec.md 6.2-6.5) at TileKernels' benchmark shape, 8001 x
 * 7168 (perf-anchors.md):
 *   per_block_cast bf16 -> e4m3, 128 x 128 blocks, f32 SF, round_sf
 *     (torch.compile 133.5 us, 1289 GB/s);
 *   per_block_cast bf16 -> e2m1, 32 x 32 blocks, packed UE8M0;
 *   per_token_cast bf16 -> e5m6 (one scale per row, round_sf, f32 SF);
 *   cast_back e5m6 -> bf16 of that output;
 *   per_block_cast_lossless, FP4 in (1, 32) blocks with packed scales ->
 *     e4m3 in 128 x 128 blocks.
 * Bytes moved: every input read once and every output written once,
 * scales at their logical size (nbm x nbk f32, or nbm x ceil(nbk/4) i32),
 * as TileKernels' count_bytes counts them.  The output of the warm-up
 * launch is checked bit-exactly (data and every scale) against the CPU
 * references.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "block_cast.h"
#include "e5m6.h"

enum block_entry { BENCH_BLOCK_CAST, BENCH_E5M6_CAST, BENCH_E5M6_BACK, BENCH_LOSSLESS };

typedef struct block_params {
    enum block_entry entry;
    tk_dtype fmt;               /* per_block_cast output format */
    int block_m, block_k;       /* output blocks */
    bool round_sf;
    tk_sf_layout layout;        /* output SF layout */
} block_params;

#define ROWS 8001
#define COLS 7168

typedef struct block_bench {
    const block_params *p;
    void *host_x;               /* the kernel's input data */
    unsigned char *host_sf_in;  /* its input scales (cast_back, lossless) */
    unsigned char *host_out, *host_want, *host_sf, *host_want_sf;
    CUdeviceptr x, sf_in, out, sf;
    size_t x_bytes, sf_in_bytes, out_bytes;
    ref_sf_shape in_shape, out_shape;
} block_bench;

static void block_teardown(const tkb_context *ctx, void *state) {
    block_bench *b = state;
    if (b == NULL)
        return;
    tkb_free(ctx, b->x);
    tkb_free(ctx, b->sf_in);
    tkb_free(ctx, b->out);
    tkb_free(ctx, b->sf);
    free(b->host_x);
    free(b->host_sf_in);
    free(b->host_out);
    free(b->host_want);
    free(b->host_sf);
    free(b->host_want_sf);
    free(b);
}

/* Logical bytes of an SF tensor (what count_bytes sees). */
static double sf_logical_bytes(const ref_sf_shape *shape) {
    return (double)shape->shape[0] * (double)shape->shape[1] * 4.0;
}

static bool block_setup(const tkb_context *ctx, const tkb_case *c, void **state, double *bytes) {
    const block_params *p = c->params;
    block_bench *b = calloc(1, sizeof *b);
    if (!b)
        return false;
    *state = b;
    b->p = p;
    int64_t elements = (int64_t)ROWS * COLS;
    uint16_t *source = malloc((size_t)elements * 2); /* bf16 values everything starts from */
    if (!source)
        return false;
    ref_fill_rand_float(source, TK_BF16, ROWS, COLS, -10, 10, ctx->seed);
    bool ok = true;
    switch (p->entry) {
    case BENCH_BLOCK_CAST:
        b->host_x = source;
        source = NULL;
        b->x_bytes = (size_t)elements * 2;
        b->out_bytes = (size_t)(p->fmt == TK_E2M1 ? elements / 2 : elements);
        ok = ref_sf_shape_of(ROWS, COLS, p->block_m, p->block_k, p->layout, &b->out_shape);
        *bytes = (double)b->x_bytes + (double)b->out_bytes + sf_logical_bytes(&b->out_shape);
        break;
    case BENCH_E5M6_CAST:
        b->host_x = source;
        source = NULL;
        b->x_bytes = (size_t)elements * 2;
        b->out_bytes = (size_t)elements / 2 * 3;
        ok = ref_sf_shape_of(ROWS, COLS, 1, COLS, p->layout, &b->out_shape);
        *bytes = (double)b->x_bytes + (double)b->out_bytes + sf_logical_bytes(&b->out_shape);
        break;
    case BENCH_E5M6_BACK:
        /* the input is the E5M6 cast of the random values */
        b->x_bytes = (size_t)elements / 2 * 3;
        b->out_bytes = (size_t)elements * 2;
        ok = ref_sf_shape_of(ROWS, COLS, 1, COLS, p->layout, &b->in_shape);
        b->host_x = malloc(b->x_bytes);
        b->host_sf_in = calloc(b->in_shape.bytes, 1);
        ok = ok && b->host_x && b->host_sf_in &&
             ref_per_token_cast_e5m6(source, TK_BF16, ROWS, COLS, COLS, p->round_sf, p->layout,
                                     b->host_x, b->host_sf_in);
        b->sf_in_bytes = b->in_shape.bytes;
        *bytes = (double)b->x_bytes + sf_logical_bytes(&b->in_shape) + (double)b->out_bytes;
        break;
    case BENCH_LOSSLESS: {
        /* FP4 in (1, 32) blocks with packed scales, as TileKernels' test */
        float *wide = malloc((size_t)elements * 4);
        b->x_bytes = (size_t)elements / 2;
        b->out_bytes = (size_t)elements;
        ok = wide && ref_sf_shape_of(ROWS, COLS, 1, 32, TK_SF_PACKED_UE8M0, &b->in_shape) &&
             ref_sf_shape_of(ROWS, COLS, p->block_m, p->block_k, p->layout, &b->out_shape);
        b->host_x = malloc(b->x_bytes);
        b->host_sf_in = ok ? calloc(b->in_shape.bytes, 1) : NULL;
        if (ok && b->host_x && b->host_sf_in) {
            ref_fill_rand_float(wide, TK_F32, ROWS, COLS, 20, 29, ctx->seed);
            ok = ref_per_block_cast(wide, TK_F32, ROWS, COLS, COLS, TK_E2M1, 1, 32, true,
                                    TK_SF_PACKED_UE8M0, b->host_x, b->host_sf_in, NULL);
        } else {
            ok = false;
        }
        free(wide);
        b->sf_in_bytes = b->in_shape.bytes;
        *bytes = (double)b->x_bytes + sf_logical_bytes(&b->in_shape) + (double)b->out_bytes +
                 sf_logical_bytes(&b->out_shape);
        break;
    }
    }
    free(source);
    if (!ok)
        return false;
    size_t sf_bytes = b->out_shape.bytes ? b->out_shape.bytes : 1;
    b->host_out = malloc(b->out_bytes);
    b->host_want = malloc(b->out_bytes);
    b->host_sf = malloc(sf_bytes);
    b->host_want_sf = calloc(sf_bytes, 1);
    return b->host_out && b->host_want && b->host_sf && b->host_want_sf &&
           tkb_alloc(ctx, &b->x, b->x_bytes) && tkb_upload(ctx, b->x, b->host_x, b->x_bytes) &&
           (b->sf_in_bytes == 0 || (tkb_alloc(ctx, &b->sf_in, b->sf_in_bytes) &&
                                    tkb_upload(ctx, b->sf_in, b->host_sf_in, b->sf_in_bytes))) &&
           tkb_alloc(ctx, &b->out, b->out_bytes) && tkb_poison(ctx, b->out, b->out_bytes) &&
           tkb_alloc(ctx, &b->sf, sf_bytes) && tkb_poison(ctx, b->sf, sf_bytes);
}

static tk_tensor sf_desc(CUdeviceptr data, const ref_sf_shape *shape) {
    return tkb_tensor(data, shape->dtype, 2, shape->shape, shape->strides);
}

static tk_status block_launch(void *state) {
    block_bench *b = state;
    const block_params *p = b->p;
    int64_t xs[2] = {ROWS, COLS};
    switch (p->entry) {
    case BENCH_BLOCK_CAST: {
        int64_t os[2] = {ROWS, p->fmt == TK_E2M1 ? COLS / 2 : COLS};
        tk_tensor x = tkb_tensor(b->x, TK_BF16, 2, xs, NULL);
        tk_tensor out = tkb_tensor(b->out, p->fmt == TK_E2M1 ? TK_I8 : TK_E4M3, 2, os, NULL);
        tk_tensor sf = sf_desc(b->sf, &b->out_shape);
        return tk_per_block_cast(&x, p->fmt, p->block_m, p->block_k, p->round_sf, p->layout, &out,
                                 &sf, NULL);
    }
    case BENCH_E5M6_CAST: {
        int64_t os[2] = {ROWS, COLS / 2 * 3};
        tk_tensor x = tkb_tensor(b->x, TK_BF16, 2, xs, NULL);
        tk_tensor out = tkb_tensor(b->out, TK_U8, 2, os, NULL);
        tk_tensor sf = sf_desc(b->sf, &b->out_shape);
        return tk_per_token_cast_e5m6(&x, p->round_sf, p->layout, &out, &sf, NULL);
    }
    case BENCH_E5M6_BACK: {
        int64_t qs[2] = {ROWS, COLS / 2 * 3};
        tk_tensor x = tkb_tensor(b->x, TK_U8, 2, qs, NULL);
        tk_tensor sf = sf_desc(b->sf_in, &b->in_shape);
        tk_tensor out = tkb_tensor(b->out, TK_BF16, 2, xs, NULL);
        return tk_cast_back_e5m6(&x, &sf, &out, NULL);
    }
    case BENCH_LOSSLESS: {
        int64_t fs[2] = {ROWS, COLS / 2};
        tk_tensor x = tkb_tensor(b->x, TK_I8, 2, fs, NULL);
        tk_tensor sf = sf_desc(b->sf_in, &b->in_shape);
        tk_tensor out = tkb_tensor(b->out, TK_E4M3, 2, xs, NULL);
        tk_tensor out_sf = sf_desc(b->sf, &b->out_shape);
        return tk_per_block_cast_lossless(&x, &sf, 1, 32, p->block_m, p->block_k, p->layout, &out,
                                          &out_sf, NULL);
    }
    }
    return TK_ERROR_INVALID_ARGUMENT;
}

static bool block_verify(const tkb_context *ctx, void *state, char *detail, size_t size) {
    block_bench *b = state;
    const block_params *p = b->p;
    if (!tkb_download(ctx, b->host_out, b->out, b->out_bytes) ||
        (b->out_shape.bytes && !tkb_download(ctx, b->host_sf, b->sf, b->out_shape.bytes))) {
        snprintf(detail, size, "download failed");
        return false;
    }
    bool ok;
    switch (p->entry) {
    case BENCH_BLOCK_CAST:
        ok = ref_per_block_cast(b->host_x, TK_BF16, ROWS, COLS, COLS, p->fmt, p->block_m,
                                p->block_k, p->round_sf, p->layout, b->host_want, b->host_want_sf,
                                NULL);
        break;
    case BENCH_E5M6_CAST:
        ok = ref_per_token_cast_e5m6(b->host_x, TK_BF16, ROWS, COLS, COLS, p->round_sf, p->layout,
                                     b->host_want, b->host_want_sf);
        break;
    case BENCH_E5M6_BACK:
        ok = ref_cast_back_e5m6(b->host_x, ROWS, COLS, b->host_sf_in, p->layout, TK_BF16,
                                b->host_want);
        break;
    default:
        ok = ref_per_block_cast_lossless(b->host_x, ROWS, COLS, b->host_sf_in, TK_SF_PACKED_UE8M0,
                                         1, 32, b->host_want, b->host_want_sf, p->layout,
                                         p->block_m, p->block_k);
        break;
    }
    if (!ok) {
        snprintf(detail, size, "the reference rejected the arguments");
        return false;
    }
    size_t first = ref_first_difference(b->host_out, b->host_want, b->out_bytes);
    if (first != SIZE_MAX) {
        snprintf(detail, size, "output differs from the reference at byte %zu", first);
        return false;
    }
    const ref_sf_shape *shape = &b->out_shape;
    if (shape->bytes == 0)
        return true;
    size_t entry = ref_sf_entry_bytes(shape);
    for (int64_t i = 0; i < shape->nbm; i++)
        for (int64_t k = 0; k < shape->nbk; k++) {
            size_t offset = ref_sf_offset(shape, i, k);
            if (memcmp(b->host_sf + offset, b->host_want_sf + offset, entry) != 0) {
                snprintf(detail, size, "scale of block (%ld, %ld) differs", (long)i, (long)k);
                return false;
            }
        }
    return true;
}

static const block_params BLOCK_E4M3 = {BENCH_BLOCK_CAST, TK_E4M3, 128, 128, true, TK_SF_ROW_MAJOR};
static const block_params BLOCK_E2M1 = {BENCH_BLOCK_CAST, TK_E2M1, 32, 32, true,
                                        TK_SF_PACKED_UE8M0};
static const block_params E5M6_CAST = {BENCH_E5M6_CAST, TK_VOID, 1, COLS, true, TK_SF_ROW_MAJOR};
static const block_params E5M6_BACK = {BENCH_E5M6_BACK, TK_VOID, 1, COLS, true, TK_SF_ROW_MAJOR};
static const block_params LOSSLESS = {BENCH_LOSSLESS, TK_E4M3, 128, 128, true,
                                      TK_SF_PACKED_UE8M0};

static const tkb_case BLOCK_CASES[] = {
    {"per_block_cast", "8001x7168", "bf16->e4m3 128x128 row f32 round", block_setup,
     block_launch, block_verify, block_teardown, &BLOCK_E4M3},
    {"per_block_cast", "8001x7168", "bf16->e2m1 32x32 packed ue8m0", block_setup, block_launch,
     block_verify, block_teardown, &BLOCK_E2M1},
    {"per_token_cast_e5m6", "8001x7168", "bf16->e5m6 1x7168 row f32 round", block_setup,
     block_launch, block_verify, block_teardown, &E5M6_CAST},
    {"cast_back_e5m6", "8001x7168", "e5m6->bf16 1x7168 row f32", block_setup, block_launch,
     block_verify, block_teardown, &E5M6_BACK},
    {"per_block_cast_lossless", "8001x7168", "e2m1 1x32 packed->e4m3 128x128 packed",
     block_setup, block_launch, block_verify, block_teardown, &LOSSLESS},
};
TKB_REGISTER(BLOCK_CASES)
