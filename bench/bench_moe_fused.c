/*
 * bench_moe_fused.c -- tkbench rows for expand_to_fused(_with_sf) and
 * reduce_fused at the perf-anchors.md shapes: TileKernels' MoE draw of 4001
 * tokens sent by each of 8 EP ranks, 256 experts (32 local), top-8, hidden
 * 7168 (about 21.7 k received tokens, 33.5 k routed slots, 33.8 k fused
 * rows at alignment 16; setup prints the exact counts of this draw).
 *
 * Bytes are counted as TileKernels' benchmarks count them: expansion reads
 * x, the scales and both mapping tensors and writes the fused data and
 * scales; reduce_fused counts the routed rows it reads (not the whole
 * (T * K, H) input), token_topk_to_pos, the weights, x_sf and the output.
 * Every row checks the output of its first launch byte for byte against
 * tests/ref/moe_fused.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "moe_fused.h"
#include "reference.h"

#define HIDDEN 7168

typedef enum fused_kind { EXPAND, EXPAND_WITH_SF, REDUCE } fused_kind;

/* One row: which function and its options. */
typedef struct fused_params {
    fused_kind kind;
    tk_dtype in, out;         /* data dtypes (expansion: in == out)       */
    int npc;                  /* expand_to_fused_with_sf                  */
    tk_sf_layout layout;
    bool weights, x_sf, sf;   /* reduce_fused options                     */
} fused_params;

typedef struct fused_state {
    const fused_params *p;
    int32_t *topk_idx;
    int64_t tokens, rows, words;
    ref_moe_mapping map;
    void *x, *got, *want;
    uint32_t *x_sf_words, *got_sf, *want_sf;
    float *weights, *row_scales, scale;
    size_t x_bytes, out_bytes, sf_bytes;
    CUdeviceptr d_x, d_x_sf, d_positions, d_experts, d_out, d_out_sf, d_weights, d_row_scales,
        d_scale;
    tk_tensor x_t, x_sf_t, positions_t, experts_t, out_t, out_sf_t, weights_t, row_scales_t,
        scale_t;
} fused_state;

static void *zalloc(size_t bytes) { return calloc(1, bytes ? bytes : 1); }

static bool setup(const tkb_context *ctx, const tkb_case *c, void **state_out, double *bytes) {
    const fused_params *p = c->params;
    fused_state *s = zalloc(sizeof *s);
    *state_out = s;
    if (!s)
        return false;
    s->p = p;
    ref_moe_params draw = {4001, 8, 256, 8};
    s->tokens = ref_moe_draw_topk_idx(&draw, ctx->seed, &s->topk_idx);
    int alignment = p->kind == REDUCE ? 1 : 16;
    if (s->tokens <= 0 ||
        !ref_moe_mapping_build(s->topk_idx, s->tokens, 8, 32, alignment, &s->map))
        return false;
    int64_t t = s->tokens, n = s->map.expanded, k = 8;
    printf("%s: %ld tokens, %ld routed slots, %ld fused rows (alignment %d)\n", c->kernel,
           (long)t, (long)s->map.routed, (long)n, alignment);
    size_t in_size = tk_dtype_size(p->in), out_size = tk_dtype_size(p->out);
    const int64_t map_shape[2] = {t, k}, expert_shape[1] = {n};
    bool ok = tkb_alloc(ctx, &s->d_positions, (size_t)(t * k) * 4) &&
              tkb_upload(ctx, s->d_positions, s->map.token_topk_to_pos, (size_t)(t * k) * 4) &&
              tkb_alloc(ctx, &s->d_experts, (size_t)n * 4) &&
              tkb_upload(ctx, s->d_experts, s->map.pos_to_expert, (size_t)n * 4);
    if (!ok)
        return false;
    s->positions_t = tkb_tensor(s->d_positions, TK_I32, 2, map_shape, NULL);
    s->experts_t = tkb_tensor(s->d_experts, TK_I32, 1, expert_shape, NULL);

    if (p->kind != REDUCE) {
        /* x (T, H) random; out (N, H) poisoned */
        s->rows = t;
        s->x_bytes = (size_t)(t * HIDDEN) * in_size;
        s->out_bytes = (size_t)(n * HIDDEN) * in_size;
        s->x = malloc(s->x_bytes);
        s->got = malloc(s->out_bytes);
        s->want = malloc(s->out_bytes);
        if (!s->x || !s->got || !s->want)
            return false;
        if (p->in == TK_E4M3)
            ref_fill_rand_e4m3(s->x, (int64_t)s->x_bytes, ctx->seed + 1);
        else
            ref_fill_rand_float(s->x, p->in, t, HIDDEN, 0, 0, ctx->seed + 1);
        const int64_t x_shape[2] = {t, HIDDEN}, out_shape[2] = {n, HIDDEN};
        ok = tkb_alloc(ctx, &s->d_x, s->x_bytes) && tkb_upload(ctx, s->d_x, s->x, s->x_bytes) &&
             tkb_alloc(ctx, &s->d_out, s->out_bytes) && tkb_poison(ctx, s->d_out, s->out_bytes);
        s->x_t = tkb_tensor(s->d_x, p->in, 2, x_shape, NULL);
        s->out_t = tkb_tensor(s->d_out, p->in, 2, out_shape, NULL);
        *bytes = (double)(s->x_bytes + s->out_bytes) + (double)(t * k + n) * 4;
        if (!ok || p->kind == EXPAND)
            return ok;
        /* scales: random words in the token-major layout */
        s->words = ref_expand_sf_words(HIDDEN, p->npc, p->layout);
        size_t x_sf_bytes = (size_t)(t * s->words) * 4;
        s->x_sf_words = malloc(x_sf_bytes);
        if (!s->x_sf_words || tk_sf_desc(n, HIDDEN, 1, p->npc, p->layout, &s->out_sf_t,
                                         &s->sf_bytes) != TK_SUCCESS)
            return false;
        ref_rng rng = ref_rng_seed(ctx->seed + 2, 0);
        for (int64_t i = 0; i < t * s->words; i++)
            s->x_sf_words[i] = (uint32_t)ref_rng_next(&rng);
        s->got_sf = malloc(s->sf_bytes);
        s->want_sf = malloc(s->sf_bytes);
        const int64_t sf_shape[2] = {t, s->words};
        ok = s->got_sf && s->want_sf && tkb_alloc(ctx, &s->d_x_sf, x_sf_bytes) &&
             tkb_upload(ctx, s->d_x_sf, s->x_sf_words, x_sf_bytes) &&
             tkb_alloc(ctx, &s->d_out_sf, s->sf_bytes) &&
             tkb_poison(ctx, s->d_out_sf, s->sf_bytes);
        s->x_sf_t = tkb_tensor(s->d_x_sf, p->layout == TK_SF_PACKED_UE8M0 ? TK_I32 : TK_F32, 2,
                               sf_shape, NULL);
        s->out_sf_t.data = (void *)(uintptr_t)s->d_out_sf;
        /* out_sf counted at its logical size (N, words), as count_bytes does */
        *bytes += (double)x_sf_bytes + (double)(n * s->words) * 4;
        return ok;
    }

    /* reduce_fused: x (T * K, H) of which the routed rows hold data (the
     * others are never read and stay zero) */
    s->rows = t * k;
    int64_t routed = s->map.routed;
    s->x_bytes = (size_t)(routed * HIDDEN) * in_size;
    s->out_bytes = (size_t)(t * HIDDEN) * out_size;
    s->x = malloc(s->x_bytes);
    s->got = malloc(s->out_bytes);
    s->want = malloc(s->out_bytes);
    s->weights = malloc((size_t)(t * k) * 4);
    s->row_scales = malloc((size_t)s->rows * 4);
    if (!s->x || !s->got || !s->want || !s->weights || !s->row_scales)
        return false;
    ref_fill_rand_float(s->x, p->in, routed, HIDDEN, 0, 0, ctx->seed + 3);
    ref_rng rng = ref_rng_seed(ctx->seed + 4, 0);
    for (int64_t i = 0; i < t * k; i++)
        s->weights[i] = ref_rng_uniform(&rng);
    for (int64_t i = 0; i < s->rows; i++)
        s->row_scales[i] = ref_rng_normal(&rng);
    s->scale = ref_rng_normal(&rng);
    size_t full_x = (size_t)(s->rows * HIDDEN) * in_size;
    const int64_t x_shape[2] = {s->rows, HIDDEN}, out_shape[2] = {t, HIDDEN};
    const int64_t row_shape[1] = {s->rows}, one[1] = {1};
    ok = tkb_alloc(ctx, &s->d_x, full_x) &&
         ctx->cu->cuMemsetD8(s->d_x, 0, full_x) == CUDA_SUCCESS &&
         tkb_upload(ctx, s->d_x, s->x, s->x_bytes) && tkb_alloc(ctx, &s->d_out, s->out_bytes) &&
         tkb_poison(ctx, s->d_out, s->out_bytes) &&
         tkb_alloc(ctx, &s->d_weights, (size_t)(t * k) * 4) &&
         tkb_upload(ctx, s->d_weights, s->weights, (size_t)(t * k) * 4) &&
         tkb_alloc(ctx, &s->d_row_scales, (size_t)s->rows * 4) &&
         tkb_upload(ctx, s->d_row_scales, s->row_scales, (size_t)s->rows * 4) &&
         tkb_alloc(ctx, &s->d_scale, 4) && tkb_upload(ctx, s->d_scale, &s->scale, 4);
    s->x_t = tkb_tensor(s->d_x, p->in, 2, x_shape, NULL);
    s->out_t = tkb_tensor(s->d_out, p->out, 2, out_shape, NULL);
    s->weights_t = tkb_tensor(s->d_weights, TK_F32, 2, map_shape, NULL);
    s->row_scales_t = tkb_tensor(s->d_row_scales, TK_F32, 1, row_shape, NULL);
    s->scale_t = tkb_tensor(s->d_scale, TK_F32, 1, one, NULL);
    *bytes = (double)(t * k) * 4 + (double)s->out_bytes + (double)s->x_bytes +
             (p->weights ? (double)(t * k) * 4 : 0) + (p->x_sf ? (double)s->rows * 4 : 0);
    return ok;
}

static tk_status launch(void *state) {
    fused_state *s = state;
    const fused_params *p = s->p;
    switch (p->kind) {
    case EXPAND:
        return tk_expand_to_fused(&s->x_t, &s->positions_t, &s->experts_t, &s->out_t, NULL);
    case EXPAND_WITH_SF:
        return tk_expand_to_fused_with_sf(&s->x_t, &s->x_sf_t, p->npc, &s->positions_t,
                                          &s->experts_t, p->layout, &s->out_t, &s->out_sf_t,
                                          NULL);
    case REDUCE:
        return tk_reduce_fused(&s->x_t, p->x_sf ? &s->row_scales_t : NULL,
                               p->weights ? &s->weights_t : NULL, &s->positions_t,
                               p->sf ? &s->scale_t : NULL, &s->out_t, NULL);
    }
    return TK_ERROR_INVALID_ARGUMENT;
}

static bool compare(const void *got, const void *want, size_t bytes, const char *what,
                    char *detail, size_t size) {
    size_t first = ref_first_difference(got, want, bytes);
    if (first == SIZE_MAX)
        return true;
    snprintf(detail, size, "%s differs first at byte %zu of %zu", what, first, bytes);
    return false;
}

static bool verify(const tkb_context *ctx, void *state, char *detail, size_t size) {
    fused_state *s = state;
    const fused_params *p = s->p;
    int64_t n = s->map.expanded;
    if (!tkb_download(ctx, s->got, s->d_out, s->out_bytes)) {
        snprintf(detail, size, "download failed");
        return false;
    }
    memset(s->want, 0xFF, s->out_bytes);
    if (p->kind == REDUCE) {
        ref_reduce_fused(s->x, p->in, HIDDEN, HIDDEN, p->weights ? s->weights : NULL,
                         s->map.token_topk_to_pos, s->tokens, 8,
                         p->x_sf ? s->row_scales : NULL, p->sf ? &s->scale : NULL, p->out,
                         s->want);
        return compare(s->got, s->want, s->out_bytes, "out", detail, size);
    }
    size_t row_bytes = (size_t)HIDDEN * tk_dtype_size(p->in);
    ref_expand_to_fused(s->x, s->tokens, row_bytes, row_bytes, s->map.token_topk_to_pos, 8,
                        s->map.pos_to_expert, n, s->want);
    if (!compare(s->got, s->want, s->out_bytes, "out", detail, size))
        return false;
    if (p->kind == EXPAND)
        return true;
    if (!tkb_download(ctx, s->got_sf, s->d_out_sf, s->sf_bytes)) {
        snprintf(detail, size, "download failed");
        return false;
    }
    memset(s->want_sf, 0xFF, s->sf_bytes);
    ref_expand_sf(s->x_sf_words, s->tokens, s->words, s->map.token_topk_to_pos, 8,
                  s->map.pos_to_expert, n, p->layout, s->want_sf);
    return compare(s->got_sf, s->want_sf, s->sf_bytes, "out_sf", detail, size);
}

static void teardown(const tkb_context *ctx, void *state) {
    fused_state *s = state;
    CUdeviceptr buffers[] = {s->d_x, s->d_x_sf, s->d_positions, s->d_experts, s->d_out,
                             s->d_out_sf, s->d_weights, s->d_row_scales, s->d_scale};
    for (size_t i = 0; i < sizeof buffers / sizeof buffers[0]; i++)
        tkb_free(ctx, buffers[i]);
    free(s->x);
    free(s->got);
    free(s->want);
    free(s->x_sf_words);
    free(s->got_sf);
    free(s->want_sf);
    free(s->weights);
    free(s->row_scales);
    free(s->topk_idx);
    ref_moe_mapping_free(&s->map);
    free(s);
}

static const fused_params EXPAND_BF16 = {EXPAND, TK_BF16, TK_BF16, 0, 0, false, false, false};
static const fused_params EXPAND_SF_ROW = {EXPAND_WITH_SF, TK_E4M3, TK_E4M3, 128,
                                           TK_SF_ROW_MAJOR, false, false, false};
static const fused_params EXPAND_SF_PACKED = {EXPAND_WITH_SF, TK_E4M3, TK_E4M3, 128,
                                              TK_SF_PACKED_UE8M0, false, false, false};
static const fused_params REDUCE_BF16 = {REDUCE, TK_BF16, TK_BF16, 0, 0, true, false, false};
static const fused_params REDUCE_F32 = {REDUCE, TK_F32, TK_F32, 0, 0, true, false, false};
static const fused_params REDUCE_E4M3 = {REDUCE, TK_BF16, TK_E4M3, 0, 0, true, true, true};

static const tkb_case MOE_FUSED_CASES[] = {
    {"expand_to_fused", "T x 7168 -> N, top-8", "bf16", setup, launch, verify, teardown,
     &EXPAND_BF16},
    {"expand_to_fused_with_sf", "T x 7168 -> N, top-8", "e4m3 1x128 row f32 sf", setup, launch,
     verify, teardown, &EXPAND_SF_ROW},
    {"expand_to_fused_with_sf", "T x 7168 -> N, top-8", "e4m3 1x128 packed ue8m0 col", setup,
     launch, verify, teardown, &EXPAND_SF_PACKED},
    {"reduce_fused", "routed rows -> T x 7168, top-8", "bf16->bf16 weights", setup, launch,
     verify, teardown, &REDUCE_BF16},
    {"reduce_fused", "routed rows -> T x 7168, top-8", "f32->f32 weights", setup, launch, verify,
     teardown, &REDUCE_F32},
    {"reduce_fused", "routed rows -> T x 7168, top-8", "bf16->e4m3 weights x_sf sf", setup,
     launch, verify, teardown, &REDUCE_E4M3},
};
TKB_REGISTER(MOE_FUSED_CASES)
