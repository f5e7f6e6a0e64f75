/*
 * bench_moe_gate.c -- tkbench rows for the MoE gates and normalize_weight
 * (kernels/moe_gate.tk), at the shapes of perf-anchors.md.
 *
 * These kernels are latency-bound (a few MB), so a single launch would be
 * dominated by launch overhead.  Each row captures REPLAYS launches of the
 * entry point into a CUDA graph (on a capturing stream, as an application
 * would) and its launch callback replays the graph: the row's time is for
 * REPLAYS launches and its bytes are REPLAYS times one launch's inputs +
 * outputs, so GB/s is per launch and time_us / REPLAYS is the time of one
 * gate.  The check compares the outputs of the replayed launches with the
 * CPU reference: indices exactly, top2_sum_gate's weights with the spec's
 * allclose (rtol 1e-5, atol 1e-8; the GPU's expf differs from the CPU's).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "moe_gate.h"
#include "reference.h"

#define REPLAYS 20

enum gate_kind { GATE_TOPK, GATE_GROUPS, GATE_TOP2, GATE_NORMALIZE };

typedef struct gate_params {
    enum gate_kind kind;
    int64_t tokens;        /* rows, padding included */
    int experts, topk;     /* E / R and K (KG for GATE_GROUPS) */
    int groups, keep;      /* G, KG (top2); G (GATE_GROUPS) */
    int shared, padded, ep_ranks, tp_ranks;
} gate_params;

typedef struct gate_state {
    const tkb_context *ctx;
    const gate_params *p;
    CUstream stream;
    CUgraph graph;
    CUgraphExec exec;
    CUdeviceptr in, bias, mask, map, count, out_idx, out_f32, den;
    float *scores, *bias_host;
    uint8_t *mask_host;
    int32_t *map_host, *count_host;
    ref_top2_args args;
    tk_tensor t_in, t_bias, t_mask, t_map, t_count, t_idx, t_f32, t_den;
} gate_state;

static tk_status gate_call(gate_state *s, tk_stream stream)
{
    const gate_params *p = s->p;
    switch (p->kind) {
    case GATE_TOPK:
        return tk_topk_gate(&s->t_in, &s->t_idx, stream);
    case GATE_GROUPS:
        return tk_topk_sum_and_topk_group_idx(&s->t_in, 2, &s->t_idx, stream);
    case GATE_NORMALIZE:
        return tk_normalize_weight(&s->t_in, &s->t_den, &s->t_f32, stream);
    case GATE_TOP2: {
        tk_top2_sum_gate_options o = {0};
        o.num_topk = p->topk;
        o.num_topk_groups = p->keep;
        o.num_groups = p->groups;
        o.use_shared_as_routed = p->shared > 0;
        o.num_shared_experts = p->shared;
        o.routed_scaling_factor = 1.5f;
        o.num_ep_ranks = p->ep_ranks;
        o.num_tp_ranks = p->tp_ranks;
        o.scoring_func = TK_SCORING_SIGMOID;
        return tk_top2_sum_gate(&s->t_in, &s->t_bias, &o, &s->t_mask, NULL, &s->t_map,
                                &s->t_count, NULL, &s->t_idx, &s->t_f32, stream);
    }
    }
    return TK_ERROR_INVALID_ARGUMENT;
}

/* Robust router inputs (selection margins >= 1e-5, as the golden tests
 * draw them) and their reference. */
static void draw_top2(gate_state *s, int64_t *idx_want, float *w_want)
{
    const gate_params *p = s->p;
    int R = p->experts;
    ref_rng rng = ref_rng_seed(s->ctx->seed, 41);
    float *margin = malloc(sizeof(float) * (size_t)p->tokens);
    for (int e = 0; e < R; e++)
        s->bias_host[e] = ref_rng_normal(&rng) * 0.1f;
    for (int64_t i = 0; i < p->tokens * R; i++)
        s->scores[i] = ref_rng_normal(&rng);
    for (int round = 0; round < 100; round++) {
        ref_top2_sum_gate(&s->args, s->scores, s->bias_host, p->tokens, s->mask_host, NULL,
                          s->map_host, s->count_host, NULL, 0, idx_want, w_want, margin);
        int redrawn = 0;
        for (int64_t t = 0; t < p->tokens; t++)
            if (margin[t] < 1e-5f) {
                for (int e = 0; e < R; e++)
                    s->scores[t * R + e] = ref_rng_normal(&rng);
                redrawn++;
            }
        if (!redrawn)
            break;
    }
    free(margin);
}

static bool gate_setup(const tkb_context *ctx, const tkb_case *c, void **state, double *bytes)
{
    const gate_params *p = c->params;
    gate_state *s = calloc(1, sizeof *s);
    *state = s;
    if (!s)
        return false;
    s->ctx = ctx;
    s->p = p;
    int64_t T = p->tokens;
    int64_t width = p->kind == GATE_TOP2 || p->kind == GATE_TOPK ? p->experts
                    : p->kind == GATE_GROUPS                     ? p->experts
                                                                 : p->topk;
    int slots = p->topk + p->shared;
    size_t in_bytes = (size_t)(T * width) * 4;
    s->scores = malloc(in_bytes + 16);
    s->bias_host = malloc(sizeof(float) * (size_t)p->experts + 16);
    s->mask_host = malloc((size_t)T + 16);
    int rows = p->experts + p->shared, D = 33;
    s->map_host = malloc(sizeof(int32_t) * (size_t)(rows * D) + 16);
    s->count_host = malloc(sizeof(int32_t) * (size_t)rows + 16);
    if (!s->scores || !s->bias_host || !s->mask_host || !s->map_host || !s->count_host)
        return false;
    for (int64_t t = 0; t < T; t++)
        s->mask_host[t] = t < T - p->padded;
    for (int e = 0; e < rows; e++) {
        s->count_host[e] = 1;
        for (int d = 0; d < D; d++)
            s->map_host[e * D + d] = e;
    }
    ref_rng rng = ref_rng_seed(ctx->seed, 40);
    for (int64_t i = 0; i < T * width; i++)
        s->scores[i] = p->kind == GATE_NORMALIZE ? ref_rng_uniform(&rng) + 1e-3f
                                                 : ref_rng_normal(&rng);
    s->args = (ref_top2_args){.routed_experts = p->experts, .num_topk = p->topk,
                              .num_groups = p->groups, .num_topk_groups = p->keep,
                              .num_shared = p->shared, .routed_scaling_factor = 1.5f,
                              .num_ep_ranks = p->ep_ranks, .num_tp_ranks = p->tp_ranks,
                              .scoring = REF_SCORING_SIGMOID, .map_columns = D};
    if (p->kind == GATE_TOP2) {
        int64_t *idx = malloc(sizeof(int64_t) * (size_t)(T * slots));
        float *w = malloc(sizeof(float) * (size_t)(T * slots));
        draw_top2(s, idx, w);
        free(idx);
        free(w);
    }
    size_t idx_bytes = (size_t)(T * (p->kind == GATE_GROUPS ? p->keep : slots)) * 8;
    size_t f32_bytes = (size_t)(T * slots) * 4;
    /* + 16: no zero-byte allocations (normalize_weight has no bias/map) */
    if (!tkb_alloc(ctx, &s->in, in_bytes + 16) ||
        !tkb_alloc(ctx, &s->bias, (size_t)p->experts * 4 + 16) ||
        !tkb_alloc(ctx, &s->mask, (size_t)T + 16) ||
        !tkb_alloc(ctx, &s->map, sizeof(int32_t) * (size_t)(rows * D) + 16) ||
        !tkb_alloc(ctx, &s->count, sizeof(int32_t) * (size_t)rows + 16) ||
        !tkb_alloc(ctx, &s->out_idx, idx_bytes + 16) ||
        !tkb_alloc(ctx, &s->out_f32, f32_bytes + 16) ||
        !tkb_alloc(ctx, &s->den, (size_t)T * 4 + 16) ||
        !tkb_upload(ctx, s->in, s->scores, in_bytes) ||
        !tkb_upload(ctx, s->bias, s->bias_host, (size_t)p->experts * 4) ||
        !tkb_upload(ctx, s->mask, s->mask_host, (size_t)T) ||
        !tkb_upload(ctx, s->map, s->map_host, sizeof(int32_t) * (size_t)(rows * D)) ||
        !tkb_upload(ctx, s->count, s->count_host, sizeof(int32_t) * (size_t)rows) ||
        !tkb_poison(ctx, s->out_idx, idx_bytes) || !tkb_poison(ctx, s->out_f32, f32_bytes))
        return false;

    s->t_in = p->kind == GATE_GROUPS
                  ? tkb_tensor(s->in, TK_F32, 3,
                               (int64_t[]){T, p->groups, p->experts / p->groups}, NULL)
                  : tkb_tensor(s->in, TK_F32, 2, (int64_t[]){T, width}, NULL);
    s->t_bias = tkb_tensor(s->bias, TK_F32, 1, (int64_t[]){p->experts}, NULL);
    s->t_mask = tkb_tensor(s->mask, TK_BOOL, 1, (int64_t[]){T}, NULL);
    s->t_map = tkb_tensor(s->map, TK_I32, 2, (int64_t[]){rows, D}, NULL);
    s->t_count = tkb_tensor(s->count, TK_I32, 1, (int64_t[]){rows}, NULL);
    s->t_idx = tkb_tensor(s->out_idx, TK_I64, 2,
                          (int64_t[]){T, p->kind == GATE_GROUPS ? p->keep : slots}, NULL);
    s->t_f32 = tkb_tensor(s->out_f32, TK_F32, 2, (int64_t[]){T, slots}, NULL);
    s->t_den = tkb_tensor(s->den, TK_F32, 1, (int64_t[]){T}, NULL);

    switch (p->kind) {
    case GATE_TOPK: *bytes = (double)(in_bytes + idx_bytes); break;
    case GATE_GROUPS: *bytes = (double)(in_bytes + idx_bytes); break;
    case GATE_NORMALIZE: *bytes = (double)(in_bytes + f32_bytes + (size_t)T * 4); break;
    case GATE_TOP2:
        *bytes = (double)(in_bytes + (size_t)p->experts * 4 + (size_t)T + idx_bytes + f32_bytes);
        break;
    }
    *bytes *= REPLAYS;

    /* REPLAYS launches, captured once */
    const tk__driver_api *cu = ctx->cu;
    if (cu->cuStreamCreate(&s->stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS ||
        cu->cuStreamBeginCapture(s->stream, CU_STREAM_CAPTURE_MODE_GLOBAL) != CUDA_SUCCESS)
        return false;
    tk_status status = TK_SUCCESS;
    for (int i = 0; i < REPLAYS && status == TK_SUCCESS; i++)
        status = gate_call(s, (tk_stream)s->stream);
    if (cu->cuStreamEndCapture(s->stream, &s->graph) != CUDA_SUCCESS || status != TK_SUCCESS)
        return false;
    return cu->cuGraphInstantiateWithFlags(&s->exec, s->graph, 0) == CUDA_SUCCESS;
}

static tk_status gate_launch(void *state)
{
    gate_state *s = state;
    if (s->ctx->cu->cuGraphLaunch(s->exec, NULL) != CUDA_SUCCESS)
        return tk__fail(TK_ERROR_LAUNCH, "bench_moe_gate: cuGraphLaunch failed");
    return TK_SUCCESS;
}

static bool gate_verify(const tkb_context *ctx, void *state, char *detail, size_t size)
{
    gate_state *s = state;
    const gate_params *p = s->p;
    int64_t T = p->tokens;
    int slots = p->topk + p->shared;
    int cols = p->kind == GATE_GROUPS ? p->keep : slots;
    int64_t *idx = malloc(sizeof(int64_t) * (size_t)(T * cols));
    int64_t *idx_want = malloc(sizeof(int64_t) * (size_t)(T * cols));
    float *f = malloc(sizeof(float) * (size_t)(T * slots));
    float *f_want = malloc(sizeof(float) * (size_t)(T * slots));
    float *den = malloc(sizeof(float) * (size_t)T), *den_want = malloc(sizeof(float) * (size_t)T);
    bool ok = idx && idx_want && f && f_want && den && den_want;
    if (ok && p->kind != GATE_NORMALIZE)
        ok = tkb_download(ctx, idx, s->out_idx, sizeof(int64_t) * (size_t)(T * cols));
    if (ok && (p->kind == GATE_TOP2 || p->kind == GATE_NORMALIZE))
        ok = tkb_download(ctx, f, s->out_f32, sizeof(float) * (size_t)(T * slots));
    if (ok && p->kind == GATE_NORMALIZE)
        ok = tkb_download(ctx, den, s->den, sizeof(float) * (size_t)T);
    if (!ok) {
        snprintf(detail, size, "download failed");
    } else if (p->kind == GATE_TOPK) {
        ref_topk_gate(s->scores, T, p->experts, p->topk, idx_want);
        ok = memcmp(idx, idx_want, sizeof(int64_t) * (size_t)(T * cols)) == 0;
    } else if (p->kind == GATE_GROUPS) {
        ref_topk_sum_and_topk_group_idx(s->scores, T, p->groups, p->experts / p->groups, 2,
                                        p->keep, idx_want);
        ok = memcmp(idx, idx_want, sizeof(int64_t) * (size_t)(T * cols)) == 0;
    } else if (p->kind == GATE_NORMALIZE) {
        ref_normalize_weight(s->scores, T, p->topk, den_want, f_want);
        ok = memcmp(f, f_want, sizeof(float) * (size_t)(T * slots)) == 0 &&
             memcmp(den, den_want, sizeof(float) * (size_t)T) == 0;
    } else {
        ref_top2_sum_gate(&s->args, s->scores, s->bias_host, T, s->mask_host, NULL,
                          s->map_host, s->count_host, NULL, 0, idx_want, f_want, NULL);
        ok = memcmp(idx, idx_want, sizeof(int64_t) * (size_t)(T * cols)) == 0;
        for (int64_t i = 0; ok && i < T * slots; i++)
            ok = fabsf(f[i] - f_want[i]) <= 1e-8f + 1e-5f * fabsf(f_want[i]);
    }
    if (!ok && detail[0] == 0)
        snprintf(detail, size, "output differs from the CPU reference");
    free(idx);
    free(idx_want);
    free(f);
    free(f_want);
    free(den);
    free(den_want);
    return ok;
}

static void gate_teardown(const tkb_context *ctx, void *state)
{
    gate_state *s = state;
    if (!s)
        return;
    if (s->exec)
        ctx->cu->cuGraphExecDestroy(s->exec);
    if (s->graph)
        ctx->cu->cuGraphDestroy(s->graph);
    if (s->stream)
        ctx->cu->cuStreamDestroy(s->stream);
    CUdeviceptr buffers[] = {s->in, s->bias, s->mask, s->map, s->count, s->out_idx,
                             s->out_f32, s->den};
    for (size_t i = 0; i < sizeof buffers / sizeof buffers[0]; i++)
        tkb_free(ctx, buffers[i]);
    free(s->scores);
    free(s->bias_host);
    free(s->mask_host);
    free(s->map_host);
    free(s->count_host);
    free(s);
}

static const gate_params TOPK_8001 = {GATE_TOPK, 8001, 256, 8, 0, 0, 0, 0, 1, 1};
static const gate_params GROUPS_8001 = {GATE_GROUPS, 8001, 256, 4, 8, 4, 0, 0, 1, 1};
/* sigmoid, 8 groups keep 4, top-8 + 2 shared, EP4 TP2, 10 masked tokens */
static const gate_params TOP2_8011 = {GATE_TOP2, 8011, 256, 8, 8, 4, 2, 10, 4, 2};
/* TileKernels' own benchmark size: 32 tokens + 4 masked */
static const gate_params TOP2_36 = {GATE_TOP2, 36, 256, 8, 8, 4, 2, 4, 4, 2};
static const gate_params NORMALIZE_21726 = {GATE_NORMALIZE, 21726, 0, 8, 0, 0, 0, 0, 1, 1};

#define GATE_CASE(name, shape, config, params)                                          \
    {name, shape, config " (graph of 20: time_us/20 per launch)", gate_setup,           \
     gate_launch, gate_verify, gate_teardown, &params}

static const tkb_case MOE_GATE_CASES[] = {
    GATE_CASE("topk_gate", "8001x256", "fp32->int64 top-8", TOPK_8001),
    GATE_CASE("topk_sum_and_topk_group_idx", "8001x8x32", "fp32 top-2 sum, keep 4",
              GROUPS_8001),
    GATE_CASE("top2_sum_gate", "8011x256", "sigmoid G8 KG4 top-8+2 EP4 TP2 10 masked",
              TOP2_8011),
    GATE_CASE("top2_sum_gate", "36x256", "sigmoid G8 KG4 top-8+2 EP4 TP2 4 masked",
              TOP2_36),
    GATE_CASE("normalize_weight", "21726x8", "fp32", NORMALIZE_21726),
};
TKB_REGISTER(MOE_GATE_CASES)
