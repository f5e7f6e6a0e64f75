/*
 * bench_fp4.c -- tkbench rows of kernels/quant_fp4.tk at TileKernels'
 * benchmark shape 8001 x 7168 (perf-anchors.md): per_token_cast bf16 ->
 * e2m1 with 1 x 32 blocks and packed UE8M0 scales (the peer row:
 * torch.compile 254.3 us, 13 % of copy bandwidth), the one-scale-per-token
 * cast (npc == H) to e2m1 and e4m3, requantisation e4m3 (128 x 128 UE8M0
 * blocks) -> e2m1 1 x 32, and cast_back e2m1 -> bf16 and f32.
 *
 * Bytes moved are TileKernels' count_bytes: every input once (data and
 * input scales) and every output once, scale tensors at their logical
 * size (packed UE8M0: T x ceil(nbk / 4) int32).  Each row is checked bit
 * for bit against tests/ref/fp4.c after its warm-up launch.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "fp4.h"
#include "reference.h"

enum fp4_entry { BENCH_CAST, BENCH_REQUANT, BENCH_CAST_BACK };

typedef struct fp4_params {
    enum fp4_entry entry;
    tk_dtype format;      /* e2m1 or e4m3 (quantised side)              */
    int npc;              /* 0: H                                        */
    tk_sf_layout layout;  /* of the per-token scales                     */
    bool round_sf;
    tk_dtype back;        /* cast_back: bf16 or f32 output               */
} fp4_params;

#define TOKENS 8001
#define HIDDEN 7168

typedef struct fp4_bench {
    const fp4_params *p;
    int npc;
    ref_sf_shape shape, in_shape; /* per-token scales; requant input scales */
    size_t in_bytes, in_sf_bytes, out_bytes, sf_bytes;
    void *host_in, *host_in_sf, *host_out, *host_want, *host_sf, *host_want_sf;
    CUdeviceptr in, in_sf, out, sf;
} fp4_bench;

static void fp4_teardown(const tkb_context *ctx, void *state) {
    fp4_bench *b = state;
    if (b == NULL)
        return;
    tkb_free(ctx, b->in);
    tkb_free(ctx, b->in_sf);
    tkb_free(ctx, b->out);
    tkb_free(ctx, b->sf);
    free(b->host_in);
    free(b->host_in_sf);
    free(b->host_out);
    free(b->host_want);
    free(b->host_sf);
    free(b->host_want_sf);
    free(b);
}

/* Bytes of a tensor at its logical (unpadded) shape. */
static size_t logical_bytes(const ref_sf_shape *shape) {
    return (size_t)(shape->shape[0] * shape->shape[1]) * 4;
}

static size_t quantized_bytes(tk_dtype format) {
    return format == TK_E2M1 ? (size_t)TOKENS * HIDDEN / 2 : (size_t)TOKENS * HIDDEN;
}

static bool fp4_setup(const tkb_context *ctx, const tkb_case *c, void **state, double *bytes) {
    const fp4_params *p = c->params;
    fp4_bench *b = calloc(1, sizeof *b);
    if (b == NULL)
        return false;
    *state = b;
    b->p = p;
    b->npc = p->npc ? p->npc : HIDDEN;
    if (!ref_sf_shape_of(TOKENS, HIDDEN, 1, b->npc, p->layout, &b->shape))
        return false;
    b->sf_bytes = b->shape.bytes;
    /* bf16 source values: normals times a power of two per 64 elements */
    size_t source_bytes = (size_t)TOKENS * HIDDEN * 2;
    void *source = malloc(source_bytes);
    if (source == NULL)
        return false;
    ref_fill_rand_float(source, TK_BF16, (int64_t)TOKENS * HIDDEN / 64, 64, -6, 6, ctx->seed);
    ref_quant_input plain = {source, TK_BF16, HIDDEN, NULL, 0, 0, 0};
    double counted = 0;
    switch (p->entry) {
    case BENCH_CAST:
        b->host_in = source;
        b->in_bytes = source_bytes;
        b->out_bytes = quantized_bytes(p->format);
        counted = (double)(b->in_bytes + b->out_bytes + logical_bytes(&b->shape));
        break;
    case BENCH_REQUANT: {
        /* e4m3 data with (128, 128) packed UE8M0 scales, as torch.cast
         * makes them with round_sf */
        if (!ref_sf_shape_of(TOKENS, HIDDEN, 128, 128, TK_SF_PACKED_UE8M0, &b->in_shape))
            return false;
        b->in_bytes = quantized_bytes(TK_E4M3);
        b->in_sf_bytes = b->in_shape.bytes;
        b->host_in = malloc(b->in_bytes);
        b->host_in_sf = calloc(1, b->in_sf_bytes);
        if (!b->host_in || !b->host_in_sf ||
            !ref_cast_e4m3(source, TK_BF16, TOKENS, HIDDEN, HIDDEN, 128, 128, true,
                           TK_SF_PACKED_UE8M0, b->host_in, b->host_in_sf))
            return false;
        free(source);
        b->out_bytes = quantized_bytes(p->format);
        counted = (double)(b->in_bytes + logical_bytes(&b->in_shape) + b->out_bytes +
                           logical_bytes(&b->shape));
        break;
    }
    default: /* cast_back: packed FP4 data and its scales from the cast */
        b->in_bytes = quantized_bytes(TK_E2M1);
        b->in_sf_bytes = b->shape.bytes;
        b->host_in = malloc(b->in_bytes);
        b->host_in_sf = calloc(1, b->in_sf_bytes);
        if (!b->host_in || !b->host_in_sf ||
            !ref_per_token_quant(&plain, TOKENS, HIDDEN, b->npc, TK_E2M1, p->round_sf,
                                 p->layout, NULL, b->host_in, b->host_in_sf))
            return false;
        free(source);
        b->sf_bytes = 0;
        b->out_bytes = (size_t)TOKENS * HIDDEN * (p->back == TK_F32 ? 4 : 2);
        counted = (double)(b->in_bytes + logical_bytes(&b->shape) + b->out_bytes);
        break;
    }
    b->host_out = malloc(b->out_bytes);
    b->host_want = malloc(b->out_bytes);
    b->host_sf = malloc(b->sf_bytes + 1);
    b->host_want_sf = malloc(b->sf_bytes + 1);
    if (!b->host_out || !b->host_want || !b->host_sf || !b->host_want_sf)
        return false;
    if (!tkb_alloc(ctx, &b->in, b->in_bytes) || !tkb_upload(ctx, b->in, b->host_in, b->in_bytes) ||
        !tkb_alloc(ctx, &b->out, b->out_bytes) || !tkb_poison(ctx, b->out, b->out_bytes))
        return false;
    if (b->in_sf_bytes && (!tkb_alloc(ctx, &b->in_sf, b->in_sf_bytes) ||
                           !tkb_upload(ctx, b->in_sf, b->host_in_sf, b->in_sf_bytes)))
        return false;
    if (b->sf_bytes &&
        (!tkb_alloc(ctx, &b->sf, b->sf_bytes) || !tkb_poison(ctx, b->sf, b->sf_bytes)))
        return false;
    *bytes = counted;
    return true;
}

/* The SF descriptor tk_sf_desc gives, on device memory. */
static tk_tensor sf_tensor(CUdeviceptr data, int block_m, int block_k, tk_sf_layout layout) {
    tk_tensor t;
    tk_sf_desc(TOKENS, HIDDEN, block_m, block_k, layout, &t, NULL);
    t.data = (void *)(uintptr_t)data;
    return t;
}

static tk_status fp4_launch(void *state) {
    const fp4_bench *b = state;
    const fp4_params *p = b->p;
    int64_t x_shape[2] = {TOKENS, HIDDEN}, packed_shape[2] = {TOKENS, HIDDEN / 2};
    tk_tensor out = p->format == TK_E2M1 ? tkb_tensor(b->out, TK_I8, 2, packed_shape, NULL)
                                         : tkb_tensor(b->out, TK_E4M3, 2, x_shape, NULL);
    switch (p->entry) {
    case BENCH_CAST: {
        tk_tensor x = tkb_tensor(b->in, TK_BF16, 2, x_shape, NULL);
        tk_tensor sf = sf_tensor(b->sf, 1, b->npc, p->layout);
        return tk_per_token_cast(&x, b->npc, p->round_sf, p->layout, &out, &sf, NULL);
    }
    case BENCH_REQUANT: {
        tk_tensor x = tkb_tensor(b->in, TK_E4M3, 2, x_shape, NULL);
        tk_tensor x_sf = sf_tensor(b->in_sf, 128, 128, TK_SF_PACKED_UE8M0);
        tk_tensor sf = sf_tensor(b->sf, 1, b->npc, p->layout);
        return tk_per_token_cast_quantized(&x, &x_sf, 128, 128, b->npc, p->round_sf, p->layout,
                                           &out, &sf, NULL);
    }
    default: {
        tk_tensor x = tkb_tensor(b->in, TK_I8, 2, packed_shape, NULL);
        tk_tensor sf = sf_tensor(b->in_sf, 1, b->npc, p->layout);
        tk_tensor back = tkb_tensor(b->out, p->back, 2, x_shape, NULL);
        return tk_per_token_cast_back(&x, &sf, b->npc, &back, NULL);
    }
    }
}

static bool fp4_verify(const tkb_context *ctx, void *state, char *detail, size_t size) {
    fp4_bench *b = state;
    const fp4_params *p = b->p;
    if (!tkb_download(ctx, b->host_out, b->out, b->out_bytes) ||
        (b->sf_bytes && !tkb_download(ctx, b->host_sf, b->sf, b->sf_bytes))) {
        snprintf(detail, size, "download failed");
        return false;
    }
    bool ok;
    if (p->entry == BENCH_CAST_BACK) {
        ok = ref_cast_back_e2m1(b->host_in, TOKENS, HIDDEN, b->host_in_sf, p->layout, 1, b->npc,
                                p->back, b->host_want);
    } else {
        ref_quant_input in = {b->host_in, TK_BF16, HIDDEN, NULL, 0, 0, 0};
        if (p->entry == BENCH_REQUANT) {
            in.dtype = TK_E4M3;
            in.sf = b->host_in_sf;
            in.sf_layout = TK_SF_PACKED_UE8M0;
            in.block_m = 128;
            in.block_k = 128;
        }
        memcpy(b->host_want_sf, b->host_sf, b->sf_bytes); /* padding: the kernel's */
        ok = ref_per_token_quant(&in, TOKENS, HIDDEN, b->npc, p->format, p->round_sf, p->layout,
                                 NULL, b->host_want, b->host_want_sf);
    }
    if (!ok) {
        snprintf(detail, size, "reference rejected the case");
        return false;
    }
    const unsigned char *got = b->host_out, *want = b->host_want;
    size_t first = ref_first_difference(got, want, b->out_bytes);
    if (first != SIZE_MAX) {
        snprintf(detail, size, "out byte %zu: got 0x%02x, expected 0x%02x", first, got[first],
                 want[first]);
        return false;
    }
    got = b->host_sf;
    want = b->host_want_sf;
    first = ref_first_difference(got, want, b->sf_bytes);
    if (first != SIZE_MAX) {
        snprintf(detail, size, "out_sf byte %zu: got 0x%02x, expected 0x%02x", first, got[first],
                 want[first]);
        return false;
    }
    return true;
}

/* back is read by the cast_back rows only */
static const fp4_params CAST_1x32_PACKED = {BENCH_CAST, TK_E2M1, 32, TK_SF_PACKED_UE8M0, true,
                                           TK_BF16};
static const fp4_params CAST_1x128_ROW = {BENCH_CAST, TK_E2M1, 128, TK_SF_ROW_MAJOR, true, TK_BF16};
static const fp4_params CAST_TOKEN_FP4 = {BENCH_CAST, TK_E2M1, 0, TK_SF_ROW_MAJOR, true, TK_BF16};
static const fp4_params CAST_TOKEN_E4M3 = {BENCH_CAST, TK_E4M3, 0, TK_SF_PACKED_UE8M0, true,
                                          TK_BF16};
static const fp4_params REQUANT = {BENCH_REQUANT, TK_E2M1, 32, TK_SF_PACKED_UE8M0, true, TK_BF16};
static const fp4_params BACK = {BENCH_CAST_BACK, TK_E2M1, 32, TK_SF_PACKED_UE8M0, true, TK_BF16};
static const fp4_params BACK_F32 = {BENCH_CAST_BACK, TK_E2M1, 32, TK_SF_PACKED_UE8M0, true,
                                    TK_F32};

static const tkb_case FP4_CASES[] = {
    {"per_token_cast", "8001x7168", "bf16->e2m1 1x32 packed ue8m0 (torch.compile 254.3 us)",
     fp4_setup, fp4_launch, fp4_verify, fp4_teardown, &CAST_1x32_PACKED},
    {"per_token_cast", "8001x7168", "bf16->e2m1 1x128 row f32 round", fp4_setup, fp4_launch,
     fp4_verify, fp4_teardown, &CAST_1x128_ROW},
    {"per_token_cast", "8001x7168", "bf16->e2m1 npc==H row f32 round", fp4_setup, fp4_launch,
     fp4_verify, fp4_teardown, &CAST_TOKEN_FP4},
    {"per_token_cast", "8001x7168", "bf16->e4m3 npc==H packed ue8m0", fp4_setup, fp4_launch,
     fp4_verify, fp4_teardown, &CAST_TOKEN_E4M3},
    {"per_token_cast_quantized", "8001x7168",
     "e4m3 (128x128 ue8m0) -> e2m1 1x32 packed ue8m0", fp4_setup, fp4_launch, fp4_verify,
     fp4_teardown, &REQUANT},
    {"per_token_cast_back", "8001x7168", "e2m1 1x32 packed ue8m0 -> bf16", fp4_setup,
     fp4_launch, fp4_verify, fp4_teardown, &BACK},
    {"per_token_cast_back", "8001x7168", "e2m1 1x32 packed ue8m0 -> f32", fp4_setup,
     fp4_launch, fp4_verify, fp4_teardown, &BACK_F32},
};
TKB_REGISTER(FP4_CASES)
