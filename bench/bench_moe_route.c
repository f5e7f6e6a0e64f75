/*
 * bench_moe_route.c -- tkbench rows for the MoE routing kernels:
 * group_count, aux_fi, inplace_unique_group_indices, mask_indices_by_tp
 * (8001 tokens x top-8 over 256 experts, the shape) and
 * get_fused_mapping (TileKernels' MoE draw: 4001 tokens from each of 8 EP
 * ranks, 256 experts, 32 local, top-8, alignment 16: about 21726 tokens).
 *
 * These kernels take microseconds, so a host launch would dominate, and so
 * would a graph holding one call (graph-launch overhead: ~16 us measured for
 * ~1 MB of traffic).  Setup captures REPLAYS calls of the entry point into
 * a CUDA graph on a private stream, as bench_moe_gate.c does, and the timed
 * launch is one replay of that graph (cuGraphLaunch on the default stream,
 * between tkbench's events): the row's time is for REPLAYS calls and its
 * bytes are REPLAYS times one call's, so GB/s is per call and time_us /
 * REPLAYS is the time of one call (the config says so).  get_fused_mapping's
 * calls hold three kernels each.  inplace_unique_group_indices rewrites its
 * input, so every call after the first finds no duplicates left to clear
 * (as in TileKernels' benchmark); the row times the read and the checks.
 * Bytes per call: inputs once + outputs once; unique counts the tensor plus
 * 4 bytes per changed entry (spec 5.6), get_fused_mapping topk_idx and its
 * seven outputs (spec 5.9).  verify compares the outputs of the last call
 * bit-exactly with tests/ref/moe_route.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "moe_route.h"
#include "reference.h"

#define REPLAYS 20

typedef enum route_kind {
    ROUTE_GROUP_COUNT,
    ROUTE_AUX_FI,
    ROUTE_UNIQUE,
    ROUTE_MASK,
    ROUTE_MAPPING
} route_kind;

typedef struct route_params {
    route_kind kind;
    ref_route_params draw; /* generate_topk_idx configuration */
    int alignment;
} route_params;

typedef struct route_state {
    const route_params *p;
    const tkb_context *ctx;
    int64_t tokens, entries;
    int topk, experts;
    int64_t *idx;               /* host input */
    CUdeviceptr input, outputs[8];
    size_t output_bytes[8];
    int noutputs;
    CUstream stream;
    CUgraph graph;
    CUgraphExec exec;
} route_state;

static bool ok(const tkb_context *ctx, CUresult r, const char *what)
{
    if (r != CUDA_SUCCESS)
        fprintf(stderr, "bench_moe_route: %s failed (%d)\n", what, (int)r);
    return r == CUDA_SUCCESS;
}

static bool add_output(route_state *s, size_t bytes)
{
    int i = s->noutputs++;
    s->output_bytes[i] = bytes;
    return tkb_alloc(s->ctx, &s->outputs[i], bytes) && tkb_poison(s->ctx, s->outputs[i], bytes);
}

static tk_tensor vec(CUdeviceptr data, tk_dtype dtype, int64_t length)
{
    return tkb_tensor(data, dtype, 1, &length, NULL);
}

static tk_tensor mat(CUdeviceptr data, tk_dtype dtype, int64_t rows, int64_t cols)
{
    int64_t shape[2] = {rows, cols};
    return tkb_tensor(data, dtype, 2, shape, NULL);
}

/* The mapping outputs in the order of route_state.outputs. */
static tk_fused_mapping mapping_of(const route_state *s, int64_t capacity)
{
    tk_fused_mapping m;
    m.pos_to_expert = vec(s->outputs[0], TK_I32, capacity);
    m.pos_to_token = vec(s->outputs[1], TK_I32, capacity);
    m.pos_to_token_topk = vec(s->outputs[2], TK_I32, capacity);
    m.token_topk_to_pos = mat(s->outputs[3], TK_I32, s->tokens, s->topk);
    m.expert_start = vec(s->outputs[4], TK_I32, s->experts);
    m.expert_end = vec(s->outputs[5], TK_I32, s->experts);
    m.num_tokens_per_expert = vec(s->outputs[6], TK_I32, s->experts);
    return m;
}

/* The entry point under test, enqueued on `stream`. */
static tk_status call(route_state *s, CUstream stream)
{
    tk_tensor idx = mat(s->input, TK_I64, s->tokens, s->topk);
    tk_stream st = (tk_stream)stream;
    switch (s->p->kind) {
    case ROUTE_GROUP_COUNT: {
        tk_tensor counts = vec(s->outputs[0], TK_I32, s->experts);
        return tk_group_count(&idx, &counts, st);
    }
    case ROUTE_AUX_FI: {
        tk_tensor fi = vec(s->outputs[0], TK_F32, s->experts);
        return tk_aux_fi(&idx, s->topk, &fi, st);
    }
    case ROUTE_UNIQUE:
        return tk_inplace_unique_group_indices(&idx, 8, st);
    case ROUTE_MASK: {
        tk_tensor out = mat(s->outputs[0], TK_I64, s->tokens, s->topk);
        return tk_mask_indices_by_tp(&idx, s->experts, 8, 1, 2, &out, st);
    }
    case ROUTE_MAPPING: {
        int64_t capacity = (int64_t)(s->output_bytes[0] / 4);
        tk_fused_mapping m = mapping_of(s, capacity);
        tk_tensor workspace = vec(s->outputs[7], TK_I32, (int64_t)(s->output_bytes[7] / 4));
        return tk_get_fused_mapping(&idx, s->experts, s->p->alignment, &m, &workspace, st);
    }
    }
    return TK_ERROR_INVALID_ARGUMENT;
}

static bool setup(const tkb_context *ctx, const tkb_case *c, void **state, double *bytes)
{
    route_state *s = calloc(1, sizeof *s);
    if (!s)
        return false;
    *state = s;
    s->p = c->params;
    s->ctx = ctx;
    s->topk = s->p->draw.topk;
    s->experts = s->p->draw.num_experts;
    s->idx = ref_generate_topk_idx(&s->p->draw, ctx->seed, &s->tokens);
    if (!s->idx)
        return false;
    s->entries = s->tokens * s->topk;
    size_t in_bytes = (size_t)s->entries * 8;
    if (s->p->kind == ROUTE_UNIQUE) /* group view: experts // 32 (8 groups) */
        for (int64_t i = 0; i < s->entries; i++)
            s->idx[i] = s->idx[i] < 0 ? -1 : s->idx[i] / (s->experts / 8);
    if (!tkb_alloc(ctx, &s->input, in_bytes) || !tkb_upload(ctx, s->input, s->idx, in_bytes))
        return false;
    double moved = (double)in_bytes;
    switch (s->p->kind) {
    case ROUTE_GROUP_COUNT:
    case ROUTE_AUX_FI:
        if (!add_output(s, (size_t)s->experts * 4))
            return false;
        moved += (double)s->experts * 4;
        break;
    case ROUTE_UNIQUE: {
        int64_t *copy = malloc(in_bytes);
        if (!copy)
            return false;
        memcpy(copy, s->idx, in_bytes);
        moved += 4.0 * (double)ref_inplace_unique_group_indices(copy, s->tokens, s->topk);
        free(copy);
        break;
    }
    case ROUTE_MASK:
        if (!add_output(s, in_bytes))
            return false;
        moved += (double)in_bytes;
        break;
    case ROUTE_MAPPING: {
        int64_t capacity = tk_fused_mapping_capacity(s->tokens, s->topk, s->experts,
                                                     s->p->alignment);
        int64_t workspace = 0;
        if (tk_get_fused_mapping_workspace_size(s->tokens, s->topk, s->experts, &workspace))
            return false;
        for (int i = 0; i < 3; i++)
            if (!add_output(s, (size_t)capacity * 4))
                return false;
        if (!add_output(s, (size_t)s->entries * 4))
            return false;
        for (int i = 0; i < 3; i++)
            if (!add_output(s, (size_t)s->experts * 4))
                return false;
        if (!add_output(s, (size_t)workspace * 4)) /* scratch, not counted */
            return false;
        moved += 3.0 * (double)capacity * 4 + (double)s->entries * 4 + 3.0 * s->experts * 4;
        break;
    }
    }
    *bytes = moved * REPLAYS;
    /* REPLAYS calls, captured once, replayed by every timed launch */
    if (!ok(ctx, ctx->cu->cuStreamCreate(&s->stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate"))
        return false;
    if (call(s, s->stream) != TK_SUCCESS) /* warm-up: loads the module */
        return false;
    if (!ok(ctx, ctx->cu->cuStreamSynchronize(s->stream), "warm-up") ||
        !ok(ctx, ctx->cu->cuStreamBeginCapture(s->stream, CU_STREAM_CAPTURE_MODE_GLOBAL),
            "cuStreamBeginCapture"))
        return false;
    tk_status status = TK_SUCCESS;
    for (int i = 0; i < REPLAYS && status == TK_SUCCESS; i++)
        status = call(s, s->stream);
    if (!ok(ctx, ctx->cu->cuStreamEndCapture(s->stream, &s->graph), "cuStreamEndCapture") ||
        status != TK_SUCCESS)
        return false;
    if (!ok(ctx, ctx->cu->cuGraphInstantiateWithFlags(&s->exec, s->graph, 0),
            "cuGraphInstantiateWithFlags"))
        return false;
    /* poison again, so verify sees only what the replays wrote */
    for (int i = 0; i < s->noutputs; i++)
        if (!tkb_poison(ctx, s->outputs[i], s->output_bytes[i]))
            return false;
    return tkb_upload(ctx, s->input, s->idx, in_bytes);
}

static tk_status launch(void *state)
{
    route_state *s = state;
    CUresult r = s->ctx->cu->cuGraphLaunch(s->exec, NULL);
    if (r != CUDA_SUCCESS)
        return tk__cuda_fail(TK_ERROR_LAUNCH, r, "cuGraphLaunch");
    return TK_SUCCESS;
}

static bool compare(const void *got, const void *want, size_t bytes, const char *name,
                    char *detail, size_t size)
{
    size_t first = ref_first_difference(got, want, bytes);
    if (first == SIZE_MAX)
        return true;
    snprintf(detail, size, "%s differs at byte %zu", name, first);
    return false;
}

static bool verify(const tkb_context *ctx, void *state, char *detail, size_t size)
{
    route_state *s = state;
    size_t in_bytes = (size_t)s->entries * 8;
    bool good = true;
    switch (s->p->kind) {
    case ROUTE_GROUP_COUNT:
    case ROUTE_AUX_FI: {
        int32_t got[4096], want[4096];
        if (!tkb_download(ctx, got, s->outputs[0], s->output_bytes[0]))
            return false;
        if (s->p->kind == ROUTE_GROUP_COUNT)
            ref_group_count(s->idx, s->entries, s->experts, want);
        else
            ref_aux_fi(s->idx, s->tokens, s->topk, s->experts, s->topk, (float *)want);
        return compare(got, want, s->output_bytes[0], "output", detail, size);
    }
    case ROUTE_UNIQUE:
    case ROUTE_MASK: {
        int64_t *got = malloc(in_bytes), *want = malloc(in_bytes);
        good = got && want;
        if (good && s->p->kind == ROUTE_UNIQUE) {
            memcpy(want, s->idx, in_bytes);
            ref_inplace_unique_group_indices(want, s->tokens, s->topk);
            good = tkb_download(ctx, got, s->input, in_bytes);
        } else if (good) {
            good = ref_mask_indices_by_tp(s->idx, TK_I64, s->entries, s->experts, 8, 1, 2,
                                          want) &&
                   tkb_download(ctx, got, s->outputs[0], in_bytes);
        }
        good = good && compare(got, want, in_bytes, "indices", detail, size);
        free(got);
        free(want);
        return good;
    }
    case ROUTE_MAPPING: {
        int64_t capacity = (int64_t)(s->output_bytes[0] / 4);
        ref_fused_mapping got = {s->tokens, s->topk, s->experts, capacity, s->p->alignment,
                                 NULL, NULL, NULL, NULL, NULL, NULL, NULL};
        ref_fused_mapping want = got;
        int32_t *g[7], *w[7];
        for (int i = 0; i < 7; i++) {
            g[i] = malloc(s->output_bytes[i] + 4);
            w[i] = malloc(s->output_bytes[i] + 4);
            good = good && g[i] && w[i] && tkb_download(ctx, g[i], s->outputs[i],
                                                        s->output_bytes[i]);
        }
        if (good) {
            got.pos_to_expert = g[0], got.pos_to_token = g[1], got.pos_to_token_topk = g[2];
            got.token_topk_to_pos = g[3], got.expert_start = g[4], got.expert_end = g[5];
            got.num_tokens_per_expert = g[6];
            want.pos_to_expert = w[0], want.pos_to_token = w[1], want.pos_to_token_topk = w[2];
            want.token_topk_to_pos = w[3], want.expert_start = w[4], want.expert_end = w[5];
            want.num_tokens_per_expert = w[6];
            ref_get_fused_mapping(s->idx, &want);
            static const char *names[7] = {"pos_to_expert", "pos_to_token",
                                           "pos_to_token_topk", "token_topk_to_pos",
                                           "expert_start", "expert_end",
                                           "num_tokens_per_expert"};
            for (int i = 0; i < 7 && good; i++)
                good = compare(g[i], w[i], s->output_bytes[i], names[i], detail, size);
            if (good && !ref_check_fused_mapping(s->idx, &got, detail, size))
                good = false;
        }
        for (int i = 0; i < 7; i++) {
            free(g[i]);
            free(w[i]);
        }
        return good;
    }
    }
    return false;
}

static void teardown(const tkb_context *ctx, void *state)
{
    route_state *s = state;
    if (s->exec)
        ctx->cu->cuGraphExecDestroy(s->exec);
    if (s->graph)
        ctx->cu->cuGraphDestroy(s->graph);
    if (s->stream)
        ctx->cu->cuStreamDestroy(s->stream);
    tkb_free(ctx, s->input);
    for (int i = 0; i < s->noutputs; i++)
        tkb_free(ctx, s->outputs[i]);
    free(s->idx);
    free(s);
}

/* 8001 tokens, top-8 of 256 experts on one rank (every token kept); the
 * fused mapping uses TileKernels' 8-rank draw. */
static const route_params GROUP_COUNT = {ROUTE_GROUP_COUNT, {8001, 8, 256, 1, 256}, 0};
static const route_params AUX_FI = {ROUTE_AUX_FI, {8001, 8, 256, 1, 256}, 0};
static const route_params UNIQUE = {ROUTE_UNIQUE, {8001, 8, 256, 1, 256}, 0};
static const route_params MASK = {ROUTE_MASK, {8001, 8, 256, 1, 256}, 0};
static const route_params MAPPING = {ROUTE_MAPPING, {4001, 8, 256, 8, 32}, 16};

/* tkbench keeps 63 characters of a config: the suffix takes 32 of them */
#define ROUTE_CASE(name, shape, config, params) \
    {name, shape, config " (graph of 20, us/20 per call)", setup, launch, verify, teardown, \
     &params}

static const tkb_case ROUTE_CASES[] = {
    ROUTE_CASE("group_count", "8001x8", "i64, 256 groups", GROUP_COUNT),
    ROUTE_CASE("aux_fi", "8001x8", "i64, 256 experts, naux 8", AUX_FI),
    ROUTE_CASE("inplace_unique_group", "8001x8", "i64, 8 groups", UNIQUE),
    ROUTE_CASE("mask_indices_by_tp", "8001x8", "i64, n 256, ep 8, tp 1/2", MASK),
    ROUTE_CASE("get_fused_mapping", "4001x8 ep8", "256 exp (32 local), align 16", MAPPING),
};
TKB_REGISTER(ROUTE_CASES)
