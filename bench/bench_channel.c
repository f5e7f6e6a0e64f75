/*
 * bench_channel.c -- tkbench rows of the per-channel casts
 * (tilekernels-spec.md 6.6-6.8): per_channel_cast bf16 -> e4m3 at
 * TileKernels' benchmark shape (perf-anchors.md: 8064 x 7168, 128 x 1
 * blocks, f32 scales, round_sf; torch.compile 113.9 us), the fused cast
 * with a pos_to_token gather, and per_channel_cast_and_transpose.
 *
 * The gather row uses TileKernels' MoE draw of perf-anchors.md (4001
 * tokens sent by each of 8 ranks, 256 experts of which 32 local, top-8):
 * about 21700 received tokens of x, expanded to about 35600 output rows
 * at alignment 128.  Bytes moved follow the usual rule, every input once
 * and every output once: x counts once (about 303 MB; the row counts about
 * 553 MB in all) although the gather reads a token once per expert it
 * meets (about 32 000 non-zero rows, 1.5 per token: 460 MB of x reads, 710
 * MB in all).  Were every repeat a DRAM read, the row could reach only
 * about 78 % of copy; the kernel's column-sweep grid
 * (kernels/quant_channel.tk) serves the repeats from L2, so DRAM moves
 * about the counted bytes.
 *
 * The fused row runs the library's instance (stores .cs, x under an L2
 * evict_last policy, pos_to_token plain; kernels/quant_channel.tk).
 *
 * Each row is checked bit-exactly against tests/ref/channel_cast.c after
 * its warm-up launch.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "channel_cast.h"
#include "reference.h"

enum channel_entry { BENCH_CAST, BENCH_FUSED_GATHER, BENCH_TRANSPOSE };

typedef struct channel_params {
    enum channel_entry entry;
    int64_t tokens, hidden; /* x; the gather row draws its token count */
    int num_per_tokens;
    bool round_sf;
} channel_params;

typedef struct channel_bench {
    const channel_params *p;
    int64_t tokens, rows, hidden; /* x rows, output rows, columns */
    void *host_x;
    int32_t *host_pos;
    uint8_t *host_out, *host_want;
    float *host_sf, *host_want_sf;
    CUdeviceptr x, pos, out, sf;
    size_t x_bytes, out_bytes, sf_bytes;
} channel_bench;

static void channel_teardown(const tkb_context *ctx, void *state) {
    channel_bench *b = state;
    if (b == NULL)
        return;
    tkb_free(ctx, b->x);
    tkb_free(ctx, b->pos);
    tkb_free(ctx, b->out);
    tkb_free(ctx, b->sf);
    free(b->host_x);
    free(b->host_pos);
    free(b->host_out);
    free(b->host_want);
    free(b->host_sf);
    free(b->host_want_sf);
    free(b);
}

static bool channel_setup(const tkb_context *ctx, const tkb_case *c, void **state,
                          double *bytes) {
    const channel_params *p = c->params;
    channel_bench *b = calloc(1, sizeof *b);
    if (b == NULL)
        return false;
    *state = b;
    b->p = p;
    b->hidden = p->hidden;
    b->tokens = p->tokens;
    b->rows = p->tokens;
    if (p->entry == BENCH_FUSED_GATHER) {
        b->host_pos = ref_channel_moe_positions(4001, 8, 32, 8, 128, ctx->seed, &b->tokens,
                                                &b->rows);
        if (b->host_pos == NULL)
            return false;
    }
    int64_t blocks = (b->rows + p->num_per_tokens - 1) / p->num_per_tokens;
    b->x_bytes = (size_t)(b->tokens * b->hidden) * 2;
    b->out_bytes = (size_t)(b->rows * b->hidden);
    b->sf_bytes = (size_t)(blocks * b->hidden) * 4;
    b->host_x = malloc(b->x_bytes);
    b->host_out = malloc(b->out_bytes);
    b->host_want = malloc(b->out_bytes);
    b->host_sf = malloc(b->sf_bytes);
    b->host_want_sf = malloc(b->sf_bytes);
    if (!b->host_x || !b->host_out || !b->host_want || !b->host_sf || !b->host_want_sf)
        return false;
    /* normals times a power of two in [2^-6, 2^6] per 64 elements */
    ref_fill_rand_float(b->host_x, TK_BF16, b->tokens * b->hidden / 64, 64, -6, 6, ctx->seed);
    size_t pos_bytes = b->host_pos ? (size_t)b->rows * 4 : 0;
    if (!tkb_alloc(ctx, &b->x, b->x_bytes) || !tkb_alloc(ctx, &b->out, b->out_bytes) ||
        !tkb_alloc(ctx, &b->sf, b->sf_bytes) || !tkb_upload(ctx, b->x, b->host_x, b->x_bytes) ||
        !tkb_poison(ctx, b->out, b->out_bytes) || !tkb_poison(ctx, b->sf, b->sf_bytes))
        return false;
    if (b->host_pos && (!tkb_alloc(ctx, &b->pos, pos_bytes) ||
                        !tkb_upload(ctx, b->pos, b->host_pos, pos_bytes)))
        return false;
    *bytes = (double)(b->x_bytes + pos_bytes + b->out_bytes + b->sf_bytes);
    return true;
}

static tk_status channel_launch(void *state) {
    const channel_bench *b = state;
    const channel_params *p = b->p;
    int64_t blocks = (b->rows + p->num_per_tokens - 1) / p->num_per_tokens;
    int64_t x_shape[2] = {b->tokens, b->hidden}, sf_shape[2] = {blocks, b->hidden};
    int64_t out_shape[2] = {b->rows, b->hidden}, out_t_shape[2] = {b->hidden, b->rows};
    tk_tensor x = tkb_tensor(b->x, TK_BF16, 2, x_shape, NULL);
    tk_tensor sf = tkb_tensor(b->sf, TK_F32, 2, sf_shape, NULL);
    switch (p->entry) {
    case BENCH_CAST: {
        tk_tensor out = tkb_tensor(b->out, TK_E4M3, 2, out_shape, NULL);
        return tk_per_channel_cast(&x, p->num_per_tokens, p->round_sf, &out, &sf, NULL);
    }
    case BENCH_FUSED_GATHER: {
        tk_tensor out = tkb_tensor(b->out, TK_E4M3, 2, out_shape, NULL);
        int64_t pos_shape[1] = {b->rows};
        tk_tensor pos = tkb_tensor(b->pos, TK_I32, 1, pos_shape, NULL);
        return tk_per_channel_cast_fused(&x, NULL, 0, p->num_per_tokens, p->round_sf, &pos,
                                         &out, &sf, NULL);
    }
    default: {
        tk_tensor out = tkb_tensor(b->out, TK_E4M3, 2, out_t_shape, NULL);
        return tk_per_channel_cast_and_transpose(&x, p->num_per_tokens, p->round_sf, &out, &sf,
                                                 NULL);
    }
    }
}

static bool channel_verify(const tkb_context *ctx, void *state, char *detail, size_t size) {
    channel_bench *b = state;
    const channel_params *p = b->p;
    if (!tkb_download(ctx, b->host_out, b->out, b->out_bytes) ||
        !tkb_download(ctx, b->host_sf, b->sf, b->sf_bytes)) {
        snprintf(detail, size, "download failed");
        return false;
    }
    ref_channel_input in = ref_channel_float_input(b->host_x, TK_BF16, b->tokens, b->hidden,
                                                   b->hidden);
    if (!ref_per_channel_cast(&in, b->host_pos, b->rows, p->num_per_tokens, p->round_sf,
                              p->entry == BENCH_TRANSPOSE, b->host_want, b->host_want_sf)) {
        snprintf(detail, size, "reference rejected the case");
        return false;
    }
    size_t first = ref_first_difference(b->host_out, b->host_want, b->out_bytes);
    if (first != SIZE_MAX) {
        snprintf(detail, size, "out byte %zu: got 0x%02x, expected 0x%02x", first,
                 b->host_out[first], b->host_want[first]);
        return false;
    }
    first = ref_first_difference(b->host_sf, b->host_want_sf, b->sf_bytes);
    if (first != SIZE_MAX) {
        snprintf(detail, size, "out_sf entry %zu: got %a, expected %a", first / 4,
                 (double)b->host_sf[first / 4], (double)b->host_want_sf[first / 4]);
        return false;
    }
    return true;
}

static const channel_params CAST_ROUND = {BENCH_CAST, 8064, 7168, 128, true};
static const channel_params CAST_PLAIN = {BENCH_CAST, 8064, 7168, 128, false};
static const channel_params FUSED_GATHER = {BENCH_FUSED_GATHER, 0, 7168, 128, true};
static const channel_params TRANSPOSE_128 = {BENCH_TRANSPOSE, 8064, 7168, 128, true};
static const channel_params TRANSPOSE_32 = {BENCH_TRANSPOSE, 8064, 7168, 32, true};

static const tkb_case CHANNEL_CASES[] = {
    {"per_channel_cast", "8064x7168", "bf16->e4m3 128x1 row f32 round", channel_setup,
     channel_launch, channel_verify, channel_teardown, &CAST_ROUND},
    {"per_channel_cast", "8064x7168", "bf16->e4m3 128x1 row f32", channel_setup,
     channel_launch, channel_verify, channel_teardown, &CAST_PLAIN},
    {"per_channel_cast_fused", "moe 8 ranks top-8 x7168",
     "bf16->e4m3 128x1 round pos_to_token (align 128)", channel_setup, channel_launch,
     channel_verify, channel_teardown, &FUSED_GATHER},
    {"per_channel_cast_and_transpose", "8064x7168", "bf16->e4m3 128x1 round, out (H, T)",
     channel_setup, channel_launch, channel_verify, channel_teardown, &TRANSPOSE_128},
    {"per_channel_cast_and_transpose", "8064x7168", "bf16->e4m3 32x1 round, out (H, T)",
     channel_setup, channel_launch, channel_verify, channel_teardown, &TRANSPOSE_32},
};
TKB_REGISTER(CHANNEL_CASES)
