/*
 * bench_swiglu.c -- tkbench rows of the fused SwiGLU casts
 * (tilekernels-spec.md 6.9-6.11) at TileKernels' benchmark shapes
 * (perf-anchors.md):
 *   swiglu_forward_and_per_token_cast: the MoE draw of 4001 tokens x 8
 *     ranks, 256 experts (32 local), top-8, alignment 16 (about 33760
 *     rows) of x bf16 (N, 7168), pos_to_expert mask, 1 x 128 packed UE8M0
 *     scales (torch.compile 332 us);
 *   swiglu_backward_and_per_token_cast: the same draw at alignment 128
 *     (about 35584 rows), I = 3584, npc 128 (torch.compile 3341 us);
 *   swiglu_forward_and_per_channel_cast_and_transpose: spec 13.2's
 *     T = 4096, I = 2048, 128-row blocks, transposed (the target row;
 *     tiles of 128 tokens x 64 channels), and
 *     the largest shape of the spec's test sweep, T = 8064, I = 7168, where
 *     launch and tail effects weigh little.
 * Bytes moved: every input once and every output once (SF at their
 * logical size).  Each row is checked against tests/ref/swiglu.c after the
 * warm-up launch, with the exp values taken from the GPU (swiglu.h):
 * bit-exact, except weight_grad (rtol = atol = 1e-4, as TileKernels).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "reference.h"
#include "swiglu.h"

/* The test helper kernel of kernels/swiglu.tk (its launcher lives in
 * libtk; tk_kernels.h is not on tkbench's include path). */
tk_status tkl_swiglu_exp__default(const tk_tensor *x, const tk_tensor *out, tk_stream stream);

enum swiglu_entry { BENCH_FORWARD, BENCH_BACKWARD, BENCH_PER_CHANNEL };

typedef struct swiglu_params {
    enum swiglu_entry entry;
    int64_t half;        /* I */
    int64_t tokens;      /* per-channel rows */
    int alignment;       /* MoE draw */
    int num_per;         /* npc or num_per_tokens */
    bool round_sf;
} swiglu_params;

typedef struct swiglu_bench {
    const swiglu_params *p;
    ref_swiglu_mapping m;
    int64_t rows, half, groups;
    void *host[8];           /* inputs and reference outputs            */
    CUdeviceptr dev[16];     /* inputs, outputs                         */
    size_t bytes[16];
    tk_tensor t[16];
} swiglu_bench;

static void swiglu_teardown(const tkb_context *ctx, void *state) {
    swiglu_bench *b = state;
    if (!b)
        return;
    for (int i = 0; i < 16; i++)
        tkb_free(ctx, b->dev[i]);
    for (int i = 0; i < 8; i++)
        free(b->host[i]);
    ref_swiglu_free_mapping(&b->m);
    free(b);
}

/* Device buffer i of `bytes`, filled from host (or poisoned if NULL). */
static bool buffer(const tkb_context *ctx, swiglu_bench *b, int i, const void *host,
                   size_t bytes) {
    b->bytes[i] = bytes;
    if (!tkb_alloc(ctx, &b->dev[i], bytes))
        return false;
    return host ? tkb_upload(ctx, b->dev[i], host, bytes) : tkb_poison(ctx, b->dev[i], bytes);
}

/* GPU expf of `count` arguments (count % 4 == 0). */
static bool gpu_exp(const tkb_context *ctx, const float *argument, float *value, int64_t count) {
    CUdeviceptr in = 0, out = 0;
    bool ok = tkb_alloc(ctx, &in, (size_t)count * 4) && tkb_alloc(ctx, &out, (size_t)count * 4) &&
              tkb_upload(ctx, in, argument, (size_t)count * 4);
    if (ok) {
        int64_t shape[1] = {count};
        tk_tensor x = tkb_tensor(in, TK_F32, 1, shape, NULL), y = tkb_tensor(out, TK_F32, 1, shape, NULL);
        ok = tkl_swiglu_exp__default(&x, &y, NULL) == TK_SUCCESS &&
             ctx->cu->cuCtxSynchronize() == CUDA_SUCCESS &&
             tkb_download(ctx, value, out, (size_t)count * 4);
    }
    tkb_free(ctx, in);
    tkb_free(ctx, out);
    return ok;
}

static float *bf16_exp_table(const tkb_context *ctx) {
    float *argument = malloc(65536 * 4), *table = malloc(65536 * 4);
    bool ok = argument && table;
    for (int i = 0; ok && i < 65536; i++)
        argument[i] = ref_bf16_to_f32((uint16_t)i);
    ok = ok && gpu_exp(ctx, argument, table, 65536);
    free(argument);
    if (!ok) {
        free(table);
        return NULL;
    }
    return table;
}

static bool swiglu_setup(const tkb_context *ctx, const tkb_case *c, void **state, double *moved) {
    const swiglu_params *p = c->params;
    swiglu_bench *b = calloc(1, sizeof *b);
    if (!b)
        return false;
    *state = b;
    b->p = p;
    b->half = p->half;
    int64_t half = p->half, width = 2 * half;
    if (p->entry == BENCH_PER_CHANNEL) {
        b->rows = p->tokens;
        size_t x_bytes = (size_t)(b->rows * width) * 2;
        b->host[0] = malloc(x_bytes);
        if (!b->host[0])
            return false;
        ref_fill_rand_float(b->host[0], TK_BF16, b->rows, width, 0, 0, ctx->seed);
        size_t sf_bytes = (size_t)(b->rows / p->num_per * half) * 4;
        if (!buffer(ctx, b, 0, b->host[0], x_bytes) ||
            !buffer(ctx, b, 1, NULL, (size_t)(b->rows * half)) || !buffer(ctx, b, 2, NULL, sf_bytes))
            return false;
        int64_t xs[2] = {b->rows, width}, os[2] = {half, b->rows}, ss[2] = {b->rows / p->num_per, half};
        b->t[0] = tkb_tensor(b->dev[0], TK_BF16, 2, xs, NULL);
        b->t[1] = tkb_tensor(b->dev[1], TK_E4M3, 2, os, NULL);
        b->t[2] = tkb_tensor(b->dev[2], TK_F32, 2, ss, NULL);
        *moved = (double)x_bytes + (double)(b->rows * half) + (double)sf_bytes;
        return true;
    }
    if (!ref_swiglu_make_mapping(4001, 8, 256, 8, p->alignment, ctx->seed, &b->m))
        return false;
    int64_t rows = b->rows = b->m.rows, tk = b->m.tokens * b->m.topk;
    if (p->entry == BENCH_FORWARD) {
        size_t x_bytes = (size_t)(rows * width) * 2;
        b->host[0] = malloc(x_bytes);
        if (!b->host[0])
            return false;
        ref_fill_rand_float(b->host[0], TK_BF16, rows, width, 0, 0, ctx->seed + 1);
        tk_tensor sf;
        size_t sf_bytes;
        if (tk_sf_desc(rows, half, 1, 128, TK_SF_PACKED_UE8M0, &sf, &sf_bytes) != TK_SUCCESS ||
            !buffer(ctx, b, 0, b->host[0], x_bytes) ||
            !buffer(ctx, b, 1, b->m.pos_to_expert, (size_t)rows * 4) ||
            !buffer(ctx, b, 2, NULL, (size_t)(rows * half)) || !buffer(ctx, b, 3, NULL, sf_bytes))
            return false;
        int64_t xs[2] = {rows, width}, os[2] = {rows, half}, ms[1] = {rows};
        b->t[0] = tkb_tensor(b->dev[0], TK_BF16, 2, xs, NULL);
        b->t[1] = tkb_tensor(b->dev[1], TK_I32, 1, ms, NULL);
        b->t[2] = tkb_tensor(b->dev[2], TK_E4M3, 2, os, NULL);
        sf.data = (void *)(uintptr_t)b->dev[3];
        b->t[3] = sf;
        /* logical SF: N x ceil(I / 128 / 4) int32 words */
        *moved = (double)x_bytes + (double)rows * 4 + (double)(rows * half) +
                 (double)(rows * sf.shape[1] * 4);
        return true;
    }
    /* backward: x = per_token_cast(bf16 randn) with npc 128 */
    int npc = p->num_per;
    b->groups = width / npc;
    uint16_t *source = malloc((size_t)(rows * width) * 2);
    b->host[0] = malloc((size_t)(rows * width));               /* x e4m3     */
    b->host[1] = malloc((size_t)(rows * b->groups) * 4);       /* x_sf       */
    b->host[2] = malloc((size_t)(rows * half) * 2);            /* grad_out   */
    b->host[3] = malloc((size_t)(tk + 1) * 4);                 /* weight     */
    if (!source || !b->host[0] || !b->host[1] || !b->host[2] || !b->host[3]) {
        free(source);
        return false;
    }
    ref_fill_rand_float(source, TK_BF16, rows, width, 0, 0, ctx->seed + 2);
    ref_per_token_cast_e4m3(source, TK_BF16, rows, width, width, npc, false, TK_SF_ROW_MAJOR,
                            b->host[0], b->host[1]);
    free(source);
    ref_fill_rand_float(b->host[2], TK_BF16, rows, half, 0, 0, ctx->seed + 3);
    ref_rng rng = ref_rng_seed(ctx->seed, 4);
    for (int64_t i = 0; i < tk; i++)
        ((float *)b->host[3])[i] = ref_rng_uniform(&rng);
    size_t sf_bytes = (size_t)(rows * b->groups) * 4;
    if (!buffer(ctx, b, 0, b->host[0], (size_t)(rows * width)) ||
        !buffer(ctx, b, 1, b->host[1], sf_bytes) ||
        !buffer(ctx, b, 2, b->host[2], (size_t)(rows * half) * 2) ||
        !buffer(ctx, b, 3, b->host[3], (size_t)tk * 4) ||
        !buffer(ctx, b, 4, b->m.pos_to_token_topk, (size_t)rows * 4) ||
        !buffer(ctx, b, 5, b->m.token_topk_to_pos, (size_t)tk * 4) ||
        !buffer(ctx, b, 6, NULL, (size_t)(rows * half) * 2) ||
        !buffer(ctx, b, 7, NULL, (size_t)(rows * width)) || !buffer(ctx, b, 8, NULL, sf_bytes) ||
        !buffer(ctx, b, 9, NULL, (size_t)(rows * width) * 2) ||
        !buffer(ctx, b, 10, NULL, (size_t)tk * 4))
        return false;
    int64_t xs[2] = {rows, width}, ss[2] = {rows, b->groups}, hs[2] = {rows, half};
    int64_t ws[2] = {b->m.tokens, b->m.topk}, rs[1] = {rows};
    b->t[0] = tkb_tensor(b->dev[0], TK_E4M3, 2, xs, NULL);
    b->t[1] = tkb_tensor(b->dev[1], TK_F32, 2, ss, NULL);
    b->t[2] = tkb_tensor(b->dev[2], TK_BF16, 2, hs, NULL);
    b->t[3] = tkb_tensor(b->dev[3], TK_F32, 2, ws, NULL);
    b->t[4] = tkb_tensor(b->dev[4], TK_I32, 1, rs, NULL);
    b->t[5] = tkb_tensor(b->dev[5], TK_I32, 2, ws, NULL);
    b->t[6] = tkb_tensor(b->dev[6], TK_BF16, 2, hs, NULL);
    b->t[7] = tkb_tensor(b->dev[7], TK_E4M3, 2, xs, NULL);
    b->t[8] = tkb_tensor(b->dev[8], TK_F32, 2, ss, NULL);
    b->t[9] = tkb_tensor(b->dev[9], TK_BF16, 2, xs, NULL);
    b->t[10] = tkb_tensor(b->dev[10], TK_F32, 2, ws, NULL);
    *moved = 0;
    for (int i = 0; i <= 10; i++)
        *moved += (double)b->bytes[i];
    return true;
}

static tk_status swiglu_launch(void *state) {
    swiglu_bench *b = state;
    const swiglu_params *p = b->p;
    tk_tensor *t = b->t;
    switch (p->entry) {
    case BENCH_FORWARD:
        return tk_swiglu_forward_and_per_token_cast(&t[0], 128, NULL, NULL, &t[1], true,
                                                    TK_SF_PACKED_UE8M0, NULL, NULL, NULL, &t[2],
                                                    &t[3], NULL);
    case BENCH_BACKWARD:
        return tk_swiglu_backward_and_per_token_cast(&t[0], &t[1], &t[2], &t[3], &t[4], &t[5],
                                                     p->num_per, p->round_sf, NULL, &t[6],
                                                     &t[7], &t[8], &t[9], &t[10], NULL);
    case BENCH_PER_CHANNEL:
        return tk_swiglu_forward_and_per_channel_cast_and_transpose(
            &t[0], p->num_per, p->round_sf, false, NULL, &t[1], &t[2], NULL);
    }
    return TK_ERROR_INVALID_ARGUMENT;
}

/* Downloads device buffer i and compares `bytes` with want. */
static bool same(const tkb_context *ctx, swiglu_bench *b, int i, const void *want, size_t bytes,
                 const char *name, char *detail, size_t size) {
    unsigned char *got = malloc(bytes ? bytes : 1);
    bool ok = got && tkb_download(ctx, got, b->dev[i], bytes);
    size_t at = ok ? ref_first_difference(got, want, bytes) : 0;
    if (ok && at != SIZE_MAX) {
        snprintf(detail, size, "%s: byte %zu differs (0x%02x, expected 0x%02x)", name, at,
                 got[at], ((const unsigned char *)want)[at]);
        ok = false;
    } else if (!ok) {
        snprintf(detail, size, "%s: download failed", name);
    }
    free(got);
    return ok;
}

static bool swiglu_verify(const tkb_context *ctx, void *state, char *detail, size_t size) {
    swiglu_bench *b = state;
    const swiglu_params *p = b->p;
    int64_t rows = b->rows, half = b->half, width = 2 * half;
    bool ok = false;
    if (p->entry != BENCH_BACKWARD) {
        float *table = bf16_exp_table(ctx);
        uint8_t *want = malloc((size_t)(rows * half) + 1);
        if (!table || !want) {
            free(table), free(want);
            snprintf(detail, size, "exp table or memory");
            return false;
        }
        if (p->entry == BENCH_PER_CHANNEL) {
            float *want_sf = malloc((size_t)(rows / p->num_per * half) * 4 + 4);
            ok = want_sf &&
                 ref_swiglu_forward_per_channel_cast(b->host[0], rows, half, p->num_per,
                                                     p->round_sf, true, false, 0.0f,
                                                     ref_swiglu_exp_bf16_table(table), want,
                                                     want_sf) &&
                 same(ctx, b, 1, want, (size_t)(rows * half), "out", detail, size) &&
                 same(ctx, b, 2, want_sf, (size_t)(rows / p->num_per * half) * 4, "out_sf",
                      detail, size);
            free(want_sf);
        } else {
            /* compare the processed rows only, the packed SF bytes in use */
            ref_sf_shape shape;
            ref_sf_shape_of(rows, half, 1, 128, TK_SF_PACKED_UE8M0, &shape);
            unsigned char *got = malloc(shape.bytes), *got_out = malloc((size_t)(rows * half));
            ok = got && got_out && tkb_download(ctx, got, b->dev[3], shape.bytes) &&
                 tkb_download(ctx, got_out, b->dev[2], (size_t)(rows * half));
            unsigned char *want_sf = ok ? malloc(shape.bytes) : NULL;
            ok = ok && want_sf;
            if (ok) {
                memcpy(want_sf, got, shape.bytes);
                memcpy(want, got_out, (size_t)(rows * half)); /* skipped rows */
                ref_swiglu_forward args = {.x = b->host[0], .dtype = TK_BF16, .rows = rows,
                                           .half = half, .num_per_channels = 128,
                                           .round_sf = true, .layout = TK_SF_PACKED_UE8M0,
                                           .pos_to_expert = b->m.pos_to_expert,
                                           .exp = ref_swiglu_exp_bf16_table(table)};
                ok = ref_swiglu_forward_per_token_cast(&args, want, want_sf, NULL);
                size_t at = ref_first_difference(got_out, want, (size_t)(rows * half));
                size_t at_sf = ref_first_difference(got, want_sf, shape.bytes);
                if (at != SIZE_MAX || at_sf != SIZE_MAX) {
                    snprintf(detail, size, "%s differs at byte %zu", at != SIZE_MAX ? "out" : "out_sf",
                             at != SIZE_MAX ? at : at_sf);
                    ok = false;
                }
            }
            free(got), free(got_out), free(want_sf);
        }
        free(table), free(want);
        return ok;
    }
    /* backward: per-element GPU exp of the dequantised gate */
    int64_t tk = b->m.tokens * b->m.topk;
    ref_swiglu_backward args = {b->host[0], b->host[1], b->host[2], b->host[3],
                                b->m.pos_to_token_topk, b->m.token_topk_to_pos, rows, half,
                                b->m.tokens, b->m.topk, p->num_per, p->round_sf, false, 0.0f,
                                {0}};
    float *argument = malloc((size_t)(rows * half) * 4 + 4), *values = malloc((size_t)(rows * half) * 4 + 4);
    uint16_t *out = malloc((size_t)(rows * half) * 2 + 2), *x_grad = malloc((size_t)(rows * width) * 2 + 2);
    uint8_t *fp8 = malloc((size_t)(rows * width) + 1);
    float *gsf = malloc((size_t)(rows * b->groups) * 4 + 4), *wg = malloc((size_t)tk * 4 + 4);
    float *got_wg = malloc((size_t)tk * 4 + 4);
    ok = argument && values && out && x_grad && fp8 && gsf && wg && got_wg;
    if (ok) {
        ref_swiglu_backward_exp_arguments(&args, argument);
        ok = gpu_exp(ctx, argument, values, rows * half);
    }
    ref_swiglu_exp_array array = {values, half};
    args.exp = ref_swiglu_exp_elements(&array);
    ok = ok && ref_swiglu_backward_per_token_cast(&args, out, fp8, gsf, x_grad, wg) &&
         same(ctx, b, 6, out, (size_t)(rows * half) * 2, "out", detail, size) &&
         same(ctx, b, 7, fp8, (size_t)(rows * width), "x_grad_fp8", detail, size) &&
         same(ctx, b, 8, gsf, (size_t)(rows * b->groups) * 4, "x_grad_sf", detail, size) &&
         same(ctx, b, 9, x_grad, (size_t)(rows * width) * 2, "x_grad", detail, size) &&
         tkb_download(ctx, got_wg, b->dev[10], (size_t)tk * 4);
    for (int64_t i = 0; ok && i < tk; i++)
        if (!(fabsf(got_wg[i] - wg[i]) <= 1e-4f + 1e-4f * fabsf(wg[i]))) {
            snprintf(detail, size, "weight_grad[%ld] %g, expected %g", (long)i, (double)got_wg[i],
                     (double)wg[i]);
            ok = false;
        }
    free(argument), free(values), free(out), free(x_grad), free(fp8), free(gsf), free(wg);
    free(got_wg);
    return ok;
}

static const swiglu_params FORWARD = {BENCH_FORWARD, 3584, 0, 16, 128, true};
static const swiglu_params BACKWARD = {BENCH_BACKWARD, 3584, 0, 128, 128, false};
static const swiglu_params PER_CHANNEL = {BENCH_PER_CHANNEL, 2048, 4096, 0, 128, true};
static const swiglu_params PER_CHANNEL_LARGE = {BENCH_PER_CHANNEL, 7168, 8064, 0, 128, true};

static const tkb_case SWIGLU_CASES[] = {
    {"swiglu_forward_and_per_token_cast", "33760x7168", "bf16->e4m3 1x128 packed ue8m0, mask",
     swiglu_setup, swiglu_launch, swiglu_verify, swiglu_teardown, &FORWARD},
    {"swiglu_backward_and_per_token_cast", "35584x7168", "e4m3+bf16 npc 128",
     swiglu_setup, swiglu_launch, swiglu_verify, swiglu_teardown, &BACKWARD},
    {"swiglu_forward_and_per_channel_cast_and_transpose", "4096x4096", "bf16->e4m3 128x1 round, T",
     swiglu_setup, swiglu_launch, swiglu_verify, swiglu_teardown, &PER_CHANNEL},
    {"swiglu_forward_and_per_channel_cast_and_transpose", "8064x14336", "bf16->e4m3 128x1 round, T",
     swiglu_setup, swiglu_launch, swiglu_verify, swiglu_teardown, &PER_CHANNEL_LARGE},
};
TKB_REGISTER(SWIGLU_CASES)
