/*
 * test_gpu_moe_gate.c -- GPU golden tests of the MoE gates and
 * normalize_weight (kernels/moe_gate.tk) against tests/ref/moe_gate.c,
 * over TileKernels' test sweeps (tilekernels-spec.md 5.1-5.3, 5.8, 12).
 *
 * Skipped without a usable CUDA device.  On the GPU machine:
 *   - outputs are poisoned (0xFF) before every launch and TAIL_BYTES past
 *     their end must stay poisoned;
 *   - topk_gate, topk_sum_and_topk_group_idx and normalize_weight are
 *     compared byte for byte (they involve no exp), also on inputs built
 *     to be full of ties;
 *   - top2_sum_gate: indices (topk_idx and unmapped_topk_idx) byte for
 *     byte, weights with the spec's allclose (rtol 1e-5, atol 1e-8): the
 *     GPU's expf is ex2.approx-based and the CPU cannot reproduce it.  As
 *     in TileKernels' tests, the inputs keep selections robust: rows whose
 *     ranked selection scores come closer than GATE_MARGIN (which the
 *     reference reports per token) are redrawn, so an exp difference of a
 *     few ulp can never flip a choice.  Softmax ranks raw logits + bias,
 *     which is exact anyway;
 *   - one test replays every entry point from a captured CUDA graph,
 *     which fails if any of them synchronises the host.
 * Sweep: tokens 0, 4001, 8001 (+10 masked padding tokens for the router),
 * the (E, K), (G, Eg) and (G, KG, R, S, K) configurations of the spec,
 * tp_rank 0/1, shared-as-routed on/off, three scoring functions, fixed
 * routing on/off, a strided unmapped_topk_idx, and a mapping with 3
 * duplicates per expert.  TK_TEST_SEED changes the inputs.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_harness.h"
#include "moe_gate.h"
#include "reference.h"
#include "tk.h"
#include "tk_internal.h"

#define TAIL_BYTES GPU_TAIL_BYTES
#define POISON 0xFF
#define GATE_MARGIN 1e-5f   /* >> the few-ulp GPU/CPU expf difference */
#define MAX_TOKENS 8011

static const int64_t TOKENS[] = {0, 4001, 8001};
#define NUM_TOKENS (sizeof TOKENS / sizeof TOKENS[0])

/* ---- device helpers ---------------------------------------------------------- */

/* Device and host buffers with room for the poisoned tail; this file's
 * poison byte and tail message for the shared harness. */
static CUdeviceptr device_alloc(const gpu *g, size_t bytes)
{
    return gpu_alloc(g, bytes + TAIL_BYTES);
}

static void *host_buffer(size_t bytes)
{
    return host_alloc(bytes + TAIL_BYTES);
}

static void poison(const gpu *g, CUdeviceptr ptr, size_t bytes)
{
    gpu_poison(g, ptr, bytes, POISON);
}

static void download(const gpu *g, void *host, CUdeviceptr src, size_t bytes,
                     const char *what)
{
    gpu_download(g, host, src, bytes, POISON, "", what);
}

static tk_tensor tensor(CUdeviceptr data, tk_dtype dtype, int rank,
                        const int64_t *shape, const int64_t *strides)
{
    tk_tensor t = tk_tensor_contiguous((void *)(uintptr_t)data, dtype, rank, shape);
    if (strides)
        for (int d = 0; d < rank; d++)
            t.strides[d] = strides[d];
    return t;
}

static void expect_same_i64(const int64_t *got, const int64_t *want, int64_t rows,
                            int64_t cols, int64_t got_stride, int64_t want_stride,
                            const char *what)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            if (got[r * got_stride + c] != want[r * want_stride + c])
                cr_assert_fail("%s: [%lld, %lld] is %lld, expected %lld", what,
                               (long long)r, (long long)c,
                               (long long)got[r * got_stride + c],
                               (long long)want[r * want_stride + c]);
}

static void expect_same_bytes(const void *got, const void *want, size_t bytes,
                              const char *what)
{
    size_t first = ref_first_difference(got, want, bytes);
    if (first != SIZE_MAX)
        cr_assert_fail("%s: first difference at byte %zu of %zu", what, first,
                       bytes);
}

/* ---- topk_gate ----------------------------------------------------------------- */

/* Normals, or (ties) a handful of values with some -inf. */
static void fill_scores(float *scores, int64_t count, bool ties, uint64_t seed)
{
    ref_rng rng = ref_rng_seed(seed, 11);
    for (int64_t i = 0; i < count; i++) {
        if (!ties) {
            scores[i] = ref_rng_normal(&rng);
        } else {
            int q = (int)(ref_rng_next(&rng) % 9);
            scores[i] = q == 8 ? -INFINITY : (float)q * 0.5f;
        }
    }
}

Test(gpu_moe_gate, topk_gate) {
    gpu g = gpu_begin();
    static const int configs[][2] = {{72, 6},  {32, 6},  {64, 6},  {96, 6},
                                     {16, 6},  {36, 6},  {108, 6}, {128, 6},
                                     {144, 6}, {256, 8}, {384, 9}, {512, 8},
                                     {4, 1},   {36, 36}, {256, 1}};
    size_t max_scores = (size_t)MAX_TOKENS * 512 * sizeof(float);
    size_t max_out = (size_t)MAX_TOKENS * 36 * sizeof(int64_t);
    float *scores = host_buffer(max_scores);
    int64_t *got = host_buffer(max_out), *want = host_buffer(max_out);
    CUdeviceptr d_scores = device_alloc(&g, max_scores);
    CUdeviceptr d_out = device_alloc(&g, max_out);
    for (int ties = 0; ties < 2; ties++)
        for (size_t c = 0; c < sizeof configs / sizeof configs[0]; c++)
            for (size_t n = 0; n < NUM_TOKENS; n++) {
                int E = configs[c][0], K = configs[c][1];
                int64_t T = TOKENS[n];
                fill_scores(scores, T * E, ties, test_seed() + c);
                gpu_upload(&g, d_scores, scores, (size_t)(T * E) * sizeof(float));
                size_t out_bytes = (size_t)(T * K) * sizeof(int64_t);
                poison(&g, d_out, out_bytes);
                tk_tensor x = tensor(d_scores, TK_F32, 2, (int64_t[]){T, E}, NULL);
                tk_tensor y = tensor(d_out, TK_I64, 2, (int64_t[]){T, K}, NULL);
                check_status(tk_topk_gate(&x, &y, NULL), "tk_topk_gate");
                download(&g, got, d_out, out_bytes, "topk_gate");
                ref_topk_gate(scores, T, E, K, want);
                char what[96];
                snprintf(what, sizeof what, "topk_gate E %d K %d T %lld ties %d",
                         E, K, (long long)T, ties);
                expect_same_i64(got, want, T, K, K, K, what);
            }
    CU(&g, cuMemFree(d_scores));
    CU(&g, cuMemFree(d_out));
    free(scores);
    free(got);
    free(want);
}

/* ---- topk_sum_and_topk_group_idx --------------------------------------------- */

Test(gpu_moe_gate, topk_sum_and_topk_group_idx) {
    gpu g = gpu_begin();
    static const int experts[] = {72, 256};
    static const int groups[] = {4, 8, 12, 16};
    size_t max_scores = (size_t)MAX_TOKENS * 256 * sizeof(float);
    size_t max_out = (size_t)MAX_TOKENS * 4 * sizeof(int64_t);
    float *scores = host_buffer(max_scores);
    int64_t *got = host_buffer(max_out), *want = host_buffer(max_out);
    CUdeviceptr d_scores = device_alloc(&g, max_scores);
    CUdeviceptr d_out = device_alloc(&g, max_out);
    for (int ties = 0; ties < 2; ties++)
        for (int e = 0; e < 2; e++)
            for (int gi = 0; gi < 4; gi++)
                for (size_t n = 0; n < NUM_TOKENS; n++) {
                    int E = experts[e], G = groups[gi];
                    if (E % G != 0)
                        continue;
                    int Eg = E / G;
                    int64_t T = TOKENS[n];
                    fill_scores(scores, T * E, ties, test_seed() + 100 + e * 4 + gi);
                    gpu_upload(&g, d_scores, scores, (size_t)(T * E) * sizeof(float));
                    for (int nsum = 1; nsum <= 2; nsum++)
                        for (int KG = 2; KG <= 4; KG += 2) {
                            size_t out_bytes = (size_t)(T * KG) * sizeof(int64_t);
                            poison(&g, d_out, out_bytes);
                            tk_tensor x = tensor(d_scores, TK_F32, 3,
                                                 (int64_t[]){T, G, Eg}, NULL);
                            tk_tensor y = tensor(d_out, TK_I64, 2,
                                                 (int64_t[]){T, KG}, NULL);
                            check_status(tk_topk_sum_and_topk_group_idx(&x, nsum, &y,
                                                                        NULL),
                                         "tk_topk_sum_and_topk_group_idx");
                            download(&g, got, d_out, out_bytes, "group_idx");
                            ref_topk_sum_and_topk_group_idx(scores, T, G, Eg, nsum,
                                                            KG, want);
                            char what[112];
                            snprintf(what, sizeof what,
                                     "group_idx E %d G %d nsum %d KG %d T %lld "
                                     "ties %d",
                                     E, G, nsum, KG, (long long)T, ties);
                            expect_same_i64(got, want, T, KG, KG, KG, what);
                        }
                }
    CU(&g, cuMemFree(d_scores));
    CU(&g, cuMemFree(d_out));
    free(scores);
    free(got);
    free(want);
}

/* ---- normalize_weight ------------------------------------------------------------ */

Test(gpu_moe_gate, normalize_weight) {
    gpu g = gpu_begin();
    static const int64_t tokens[] = {0, 4001, 8001, 21726};
    static const int topks[] = {1, 2, 6, 7, 8, 9};
    size_t max_w = (size_t)21726 * 9 * sizeof(float);
    float *w = host_buffer(max_w), *got = host_buffer(max_w), *want = host_buffer(max_w);
    float *got_den = host_buffer(21726 * 4), *want_den = host_buffer(21726 * 4);
    CUdeviceptr d_w = device_alloc(&g, max_w), d_out = device_alloc(&g, max_w);
    CUdeviceptr d_den = device_alloc(&g, 21726 * 4);
    ref_rng rng = ref_rng_seed(test_seed(), 21);
    for (size_t n = 0; n < sizeof tokens / sizeof tokens[0]; n++)
        for (size_t k = 0; k < sizeof topks / sizeof topks[0]; k++) {
            int64_t T = tokens[n];
            int K = topks[k];
            for (int64_t i = 0; i < T * K; i++)
                w[i] = ref_rng_uniform(&rng) * (i % 5 == 0 ? 1e-3f : 1.0f);
            gpu_upload(&g, d_w, w, (size_t)(T * K) * 4);
            poison(&g, d_out, (size_t)(T * K) * 4);
            poison(&g, d_den, (size_t)T * 4);
            tk_tensor x = tensor(d_w, TK_F32, 2, (int64_t[]){T, K}, NULL);
            tk_tensor den = tensor(d_den, TK_F32, 1, (int64_t[]){T}, NULL);
            tk_tensor y = tensor(d_out, TK_F32, 2, (int64_t[]){T, K}, NULL);
            check_status(tk_normalize_weight(&x, &den, &y, NULL), "tk_normalize_weight");
            download(&g, got, d_out, (size_t)(T * K) * 4, "normalized");
            download(&g, got_den, d_den, (size_t)T * 4, "denominator");
            ref_normalize_weight(w, T, K, want_den, want);
            expect_same_bytes(got_den, want_den, (size_t)T * 4, "denominator");
            expect_same_bytes(got, want, (size_t)(T * K) * 4, "normalized");
        }
    CU(&g, cuMemFree(d_w));
    CU(&g, cuMemFree(d_out));
    CU(&g, cuMemFree(d_den));
    free(w);
    free(got);
    free(want);
    free(got_den);
    free(want_den);
}

/* ---- top2_sum_gate ----------------------------------------------------------------- */

/* (G, KG, R, S, K) of TileKernels' test, plus a wider row. */
static const int TOP2_CONFIGS[][5] = {
    {0, 0, 72, 1, 6},  {0, 0, 32, 2, 6},  {0, 0, 64, 2, 6},  {0, 0, 96, 2, 6},
    {0, 0, 16, 2, 6},  {0, 0, 36, 2, 6},  {0, 0, 108, 2, 6}, {0, 0, 128, 2, 6},
    {0, 0, 144, 2, 6}, {8, 8, 256, 2, 8}, {8, 4, 256, 2, 8}, {16, 4, 384, 2, 8},
};
#define NUM_TOP2_CONFIGS (sizeof TOP2_CONFIGS / sizeof TOP2_CONFIGS[0])
#define EXTRA_EXPERTS 32

/* Everything one top2_sum_gate case needs, host and device. */
typedef struct top2_case {
    ref_top2_args args;
    int64_t tokens;          /* rows, padding included */
    int padded;              /* trailing masked tokens */
    bool fixed, use_map, strided;
    int map_duplicates;      /* logical_count of every expert */
    float *logits, *bias, *margin;
    uint8_t *mask, *fix;
    int32_t *map, *count;
    int64_t *unmapped_init, *unmapped_want, *idx_want;
    float *weights_want;
} top2_case;

typedef struct top2_device {
    CUdeviceptr logits, bias, mask, fix, map, count, unmapped, idx, weights;
} top2_device;

static int64_t unmapped_stride(const top2_case *c)
{
    return c->args.num_topk + (c->strided ? 3 : 0);
}

/* Draws logits and bias (when `draw`; otherwise keeps the previous
 * ones, which the option variants of one sweep point share), redraws rows
 * whose selection margin is below GATE_MARGIN, and fills the masks, the
 * map and the reference outputs. */
static void top2_prepare(top2_case *c, uint64_t seed, bool draw)
{
    ref_top2_args *a = &c->args;
    int R = a->routed_experts, K = a->num_topk, slots = K + a->num_shared;
    int64_t T = c->tokens, stride = unmapped_stride(c);
    ref_rng rng = ref_rng_seed(seed, draw ? 31 : 32);
    if (draw) {
        for (int e = 0; e < R; e++)
            c->bias[e] = ref_rng_normal(&rng) * 0.1f;
        for (int64_t i = 0; i < T * R; i++)
            c->logits[i] = ref_rng_normal(&rng);
    }
    for (int64_t t = 0; t < T; t++) {
        c->mask[t] = t < T - c->padded;
        c->fix[t] = c->fixed && ref_rng_next(&rng) % 2;
        for (int64_t k = 0; k < stride; k++)
            c->unmapped_init[t * stride + k] =
                k < K ? (int64_t)(ref_rng_next(&rng) % (uint64_t)R) : 0x77;
    }
    int D = c->use_map ? EXTRA_EXPERTS + 1 : 0;
    a->map_columns = D;
    for (int e = 0; e < R + a->num_shared && c->use_map; e++) {
        c->count[e] = c->map_duplicates;
        for (int d = 0; d < D; d++)
            /* duplicate d of expert e: identity for d == 0, then a rotation
             * through the physical range (R + EXTRA_EXPERTS experts) */
            c->map[e * D + d] = (e + d * 7) % (R + EXTRA_EXPERTS);
    }
    const uint8_t *mask = c->padded ? c->mask : NULL;
    const int32_t *map = c->use_map ? c->map : NULL;
    const int32_t *count = c->use_map ? c->count : NULL;
    for (int round = 0;; round++) {
        memcpy(c->unmapped_want, c->unmapped_init, sizeof(int64_t) * (size_t)(T * stride));
        ref_top2_sum_gate(a, c->logits, c->bias, T, mask, c->fixed ? c->fix : NULL, map,
                          count, c->unmapped_want, stride, c->idx_want, c->weights_want,
                          c->margin);
        int redrawn = 0;
        for (int64_t t = 0; t < T; t++) {
            if (c->margin[t] >= GATE_MARGIN)
                continue;
            for (int e = 0; e < R; e++)
                c->logits[t * R + e] = ref_rng_normal(&rng);
            redrawn++;
        }
        if (redrawn == 0)
            break;
        cr_assert_lt(round, 100, "could not draw robust logits (%d rows left)",
                     redrawn);
    }
    (void)slots;
}

static void top2_upload(const gpu *g, const top2_case *c, const top2_device *d)
{
    int R = c->args.routed_experts;
    int64_t T = c->tokens;
    gpu_upload(g, d->logits, c->logits, (size_t)(T * R) * 4);
    gpu_upload(g, d->bias, c->bias, (size_t)R * 4);
    gpu_upload(g, d->mask, c->mask, (size_t)T);
    gpu_upload(g, d->fix, c->fix, (size_t)T);
    int rows = R + c->args.num_shared;
    gpu_upload(g, d->map, c->map, (size_t)(rows * (EXTRA_EXPERTS + 1)) * 4);
    gpu_upload(g, d->count, c->count, (size_t)rows * 4);
    gpu_upload(g, d->unmapped, c->unmapped_init,
           (size_t)(T * unmapped_stride(c)) * sizeof(int64_t));
    int slots = c->args.num_topk + c->args.num_shared;
    poison(g, d->idx, (size_t)(T * slots) * 8);
    poison(g, d->weights, (size_t)(T * slots) * 4);
}

static tk_top2_sum_gate_options top2_options(const top2_case *c)
{
    const ref_top2_args *a = &c->args;
    tk_top2_sum_gate_options o = {0};
    o.num_topk = a->num_topk;
    o.num_topk_groups = a->num_topk_groups;
    o.num_groups = a->num_groups;
    o.use_shared_as_routed = a->num_shared > 0;
    o.num_shared_experts = a->num_shared;
    o.routed_scaling_factor = a->routed_scaling_factor;
    o.ep_rank = a->ep_rank;
    o.num_ep_ranks = a->num_ep_ranks;
    o.tp_rank = a->tp_rank;
    o.num_tp_ranks = a->num_tp_ranks;
    o.scoring_func = (tk_scoring_func)a->scoring;
    return o;
}

/* Launches tk_top2_sum_gate for the case on `stream`. */
static tk_status top2_launch(const top2_case *c, const top2_device *d,
                             tk_stream stream)
{
    int R = c->args.routed_experts, K = c->args.num_topk;
    int slots = K + c->args.num_shared, rows = R + c->args.num_shared;
    int64_t T = c->tokens;
    tk_top2_sum_gate_options o = top2_options(c);
    tk_tensor logits = tensor(d->logits, TK_F32, 2, (int64_t[]){T, R}, NULL);
    tk_tensor bias = tensor(d->bias, TK_F32, 1, (int64_t[]){R}, NULL);
    tk_tensor mask = tensor(d->mask, TK_BOOL, 1, (int64_t[]){T}, NULL);
    tk_tensor fix = tensor(d->fix, TK_BOOL, 1, (int64_t[]){T}, NULL);
    tk_tensor map = tensor(d->map, TK_I32, 2, (int64_t[]){rows, EXTRA_EXPERTS + 1}, NULL);
    tk_tensor count = tensor(d->count, TK_I32, 1, (int64_t[]){rows}, NULL);
    tk_tensor unmapped = tensor(d->unmapped, TK_I64, 2, (int64_t[]){T, K},
                                (int64_t[]){unmapped_stride(c), 1});
    tk_tensor idx = tensor(d->idx, TK_I64, 2, (int64_t[]){T, slots}, NULL);
    tk_tensor weights = tensor(d->weights, TK_F32, 2, (int64_t[]){T, slots}, NULL);
    return tk_top2_sum_gate(&logits, &bias, &o, c->padded ? &mask : NULL,
                            c->fixed ? &fix : NULL, c->use_map ? &map : NULL,
                            c->use_map ? &count : NULL, &unmapped, &idx, &weights,
                            stream);
}

static void top2_check(const gpu *g, const top2_case *c, const top2_device *d,
                       const char *what)
{
    int K = c->args.num_topk, slots = K + c->args.num_shared;
    int64_t T = c->tokens, stride = unmapped_stride(c);
    int64_t *idx = host_buffer((size_t)(T * slots) * 8);
    float *weights = host_buffer((size_t)(T * slots) * 4);
    int64_t *unmapped = malloc(sizeof(int64_t) * (size_t)(T * stride) + 1);
    download(g, idx, d->idx, (size_t)(T * slots) * 8, what);
    download(g, weights, d->weights, (size_t)(T * slots) * 4, what);
    if (T > 0)
        CU(g, cuMemcpyDtoH(unmapped, d->unmapped, sizeof(int64_t) * (size_t)(T * stride)));
    char label[200];
    snprintf(label, sizeof label, "%s: topk_idx", what);
    expect_same_i64(idx, c->idx_want, T, slots, slots, slots, label);
    snprintf(label, sizeof label, "%s: unmapped_topk_idx (with row padding)", what);
    expect_same_i64(unmapped, c->unmapped_want, T, stride, stride, stride, label);
    for (int64_t i = 0; i < T * slots; i++) {
        float want = c->weights_want[i];
        if (!(fabsf(weights[i] - want) <= 1e-8f + 1e-5f * fabsf(want)))
            cr_assert_fail("%s: topk_weights[%lld, %lld] is %.9g, expected %.9g", what,
                           (long long)(i / slots), (long long)(i % slots),
                           (double)weights[i], (double)want);
    }
    free(idx);
    free(weights);
    free(unmapped);
}

static void top2_alloc(const gpu *g, top2_case *c, top2_device *d)
{
    size_t T = MAX_TOKENS, R = 512, rows = R + 2, D = EXTRA_EXPERTS + 1;
    c->logits = host_buffer(T * R * 4);
    c->bias = host_buffer(R * 4);
    c->margin = host_buffer(T * 4);
    c->mask = host_buffer(T);
    c->fix = host_buffer(T);
    c->map = host_buffer(rows * D * 4);
    c->count = host_buffer(rows * 4);
    c->unmapped_init = host_buffer(T * 40 * 8);
    c->unmapped_want = host_buffer(T * 40 * 8);
    c->idx_want = host_buffer(T * 32 * 8);
    c->weights_want = host_buffer(T * 32 * 4);
    d->logits = device_alloc(g, T * R * 4);
    d->bias = device_alloc(g, R * 4);
    d->mask = device_alloc(g, T);
    d->fix = device_alloc(g, T);
    d->map = device_alloc(g, rows * D * 4);
    d->count = device_alloc(g, rows * 4);
    d->unmapped = device_alloc(g, T * 40 * 8);
    d->idx = device_alloc(g, T * 32 * 8);
    d->weights = device_alloc(g, T * 32 * 4);
}

static void top2_free(const gpu *g, top2_case *c, top2_device *d)
{
    void *host[] = {c->logits, c->bias, c->margin, c->mask, c->fix, c->map, c->count,
                    c->unmapped_init, c->unmapped_want, c->idx_want, c->weights_want};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++)
        free(host[i]);
    CUdeviceptr dev[] = {d->logits, d->bias, d->mask, d->fix, d->map,
                         d->count, d->unmapped, d->idx, d->weights};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        CU(g, cuMemFree(dev[i]));
}

/* One configuration row of the sweep, every option combination. */
static void top2_sweep(const int *config, int scoring)
{
    gpu g = gpu_begin();
    top2_case c;
    top2_device d;
    memset(&c, 0, sizeof c);
    top2_alloc(&g, &c, &d);
    int G = config[0], KG = config[1], R = config[2], S = config[3], K = config[4];
    for (size_t n = 0; n < NUM_TOKENS; n++)
        for (int padded = 0; padded <= 10; padded += 10) {
            bool draw = true;
            for (int shared = 0; shared < 2; shared++)
                for (int fixed = 0; fixed < 2; fixed++)
                    for (int tp = 0; tp < 2; tp++) {
                        /* shared-as-routed only where TileKernels allows it */
                        if (shared && (K % S != 0 || R % (K / S) != 0))
                            continue;
                        c.args = (ref_top2_args){0};
                        c.args.routed_experts = R;
                        c.args.num_topk = K;
                        c.args.num_groups = G;
                        c.args.num_topk_groups = KG;
                        c.args.num_shared = shared ? S : 0;
                        c.args.routed_scaling_factor = 1.5f;
                        c.args.ep_rank = 0;
                        c.args.num_ep_ranks = 4;
                        c.args.tp_rank = tp;
                        c.args.num_tp_ranks = 2;
                        c.args.scoring = scoring;
                        c.tokens = TOKENS[n] + padded;
                        c.padded = padded;
                        c.fixed = fixed;
                        c.use_map = true;
                        c.map_duplicates = 1;
                        c.strided = fixed;
                        top2_prepare(&c, test_seed() + (uint64_t)(n * 7 + scoring),
                                     draw);
                        draw = false;
                        top2_upload(&g, &c, &d);
                        check_status(top2_launch(&c, &d, NULL), "tk_top2_sum_gate");
                        char what[160];
                        snprintf(what, sizeof what,
                                 "top2_sum_gate G %d KG %d R %d S %d K %d scoring %d "
                                 "T %lld fixed %d tp %d",
                                 G, KG, R, c.args.num_shared, K, scoring,
                                 (long long)c.tokens, fixed, tp);
                        top2_check(&g, &c, &d, what);
                    }
        }
    top2_free(&g, &c, &d);
}

Test(gpu_moe_gate, top2_sum_gate_sigmoid) {
    for (size_t i = 0; i < NUM_TOP2_CONFIGS; i++)
        top2_sweep(TOP2_CONFIGS[i], REF_SCORING_SIGMOID);
}

Test(gpu_moe_gate, top2_sum_gate_sqrtsoftplus) {
    for (size_t i = 0; i < NUM_TOP2_CONFIGS; i++)
        top2_sweep(TOP2_CONFIGS[i], REF_SCORING_SQRTSOFTPLUS);
}

Test(gpu_moe_gate, top2_sum_gate_softmax) {
    for (size_t i = 0; i < NUM_TOP2_CONFIGS; i++)
        top2_sweep(TOP2_CONFIGS[i], REF_SCORING_SOFTMAX);
}

/* No map, no mask, EP 1 / TP 1 (the masking is the identity), and a map
 * with three duplicates per expert on EP rank 3 of 8. */
Test(gpu_moe_gate, top2_sum_gate_without_options_and_with_duplicates) {
    gpu g = gpu_begin();
    top2_case c;
    top2_device d;
    memset(&c, 0, sizeof c);
    top2_alloc(&g, &c, &d);
    for (int variant = 0; variant < 2; variant++) {
        c.args = (ref_top2_args){0};
        c.args.routed_experts = 256;
        c.args.num_topk = 8;
        c.args.num_groups = 8;
        c.args.num_topk_groups = 4;
        c.args.routed_scaling_factor = 2.5f;
        c.args.num_ep_ranks = variant ? 8 : 1;
        c.args.ep_rank = variant ? 3 : 0;
        c.args.num_tp_ranks = 1;
        c.args.num_shared = variant ? 1 : 0;
        c.tokens = 8001;
        c.use_map = variant;
        c.map_duplicates = 3;
        top2_prepare(&c, test_seed() + 77, true);
        top2_upload(&g, &c, &d);
        check_status(top2_launch(&c, &d, NULL), "tk_top2_sum_gate");
        top2_check(&g, &c, &d, variant ? "duplicates" : "no options");
    }
    top2_free(&g, &c, &d);
}

/* Spec 5.3's stability check: all-zero logits and bias (sigmoid) give
 * experts 0, 1, 2, ... in the first min(R / 4, K) slots. */
Test(gpu_moe_gate, top2_sum_gate_all_zero_logits) {
    gpu g = gpu_begin();
    top2_case c;
    top2_device d;
    memset(&c, 0, sizeof c);
    top2_alloc(&g, &c, &d);
    for (size_t i = 0; i < NUM_TOP2_CONFIGS; i++) {
        const int *config = TOP2_CONFIGS[i];
        c.args = (ref_top2_args){.routed_experts = config[2], .num_topk = config[4],
                                 .num_groups = config[0], .num_topk_groups = config[1],
                                 .routed_scaling_factor = 1.0f, .num_ep_ranks = 1,
                                 .num_tp_ranks = 1, .scoring = REF_SCORING_SIGMOID};
        c.tokens = 64;
        int R = config[2], K = config[4];
        memset(c.logits, 0, (size_t)(64 * R) * 4);
        memset(c.bias, 0, (size_t)R * 4);
        gpu_upload(&g, d.logits, c.logits, (size_t)(64 * R) * 4);
        gpu_upload(&g, d.bias, c.bias, (size_t)R * 4);
        poison(&g, d.idx, (size_t)(64 * K) * 8);
        poison(&g, d.weights, (size_t)(64 * K) * 4);
        tk_top2_sum_gate_options o = top2_options(&c);
        tk_tensor logits = tensor(d.logits, TK_F32, 2, (int64_t[]){64, R}, NULL);
        tk_tensor bias = tensor(d.bias, TK_F32, 1, (int64_t[]){R}, NULL);
        tk_tensor idx = tensor(d.idx, TK_I64, 2, (int64_t[]){64, K}, NULL);
        tk_tensor weights = tensor(d.weights, TK_F32, 2, (int64_t[]){64, K}, NULL);
        check_status(tk_top2_sum_gate(&logits, &bias, &o, NULL, NULL, NULL, NULL, NULL,
                                      &idx, &weights, NULL),
                     "tk_top2_sum_gate");
        download(&g, c.idx_want, d.idx, (size_t)(64 * K) * 8, "zeros");
        int first = R / 4 < K ? R / 4 : K;
        for (int t = 0; t < 64; t++)
            for (int k = 0; k < first; k++)
                cr_assert_eq(c.idx_want[t * K + k], k, "R %d token %d slot %d", R, t, k);
    }
    top2_free(&g, &c, &d);
}

/* ---- graph capture: no entry point synchronises the host ------------------------ */

Test(gpu_moe_gate, every_entry_point_runs_inside_a_captured_graph) {
    gpu g = gpu_begin();
    const tk__driver_api *cu = g.api;
    CUstream stream;
    CU(&g, cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    enum { T = 4001, E = 256, K = 8, G = 8 };
    float *scores = host_buffer((size_t)T * E * 4);
    fill_scores(scores, (int64_t)T * E, false, test_seed() + 5);
    int64_t *want = host_buffer((size_t)T * K * 8), *got = host_buffer((size_t)T * K * 8);
    float *wsrc = host_buffer((size_t)T * K * 4), *wgot = host_buffer((size_t)T * K * 4);
    float *wwant = host_buffer((size_t)T * K * 4), *dwant = host_buffer((size_t)T * 4);
    for (int i = 0; i < T * K; i++)
        wsrc[i] = (float)(i % 13 + 1) * 0.125f;
    CUdeviceptr d_scores = device_alloc(&g, (size_t)T * E * 4);
    CUdeviceptr d_topk = device_alloc(&g, (size_t)T * K * 8);
    CUdeviceptr d_groups = device_alloc(&g, (size_t)T * 4 * 8);
    CUdeviceptr d_w = device_alloc(&g, (size_t)T * K * 4);
    CUdeviceptr d_norm = device_alloc(&g, (size_t)T * K * 4);
    CUdeviceptr d_den = device_alloc(&g, (size_t)T * 4);
    gpu_upload(&g, d_scores, scores, (size_t)T * E * 4);
    gpu_upload(&g, d_w, wsrc, (size_t)T * K * 4);
    poison(&g, d_topk, (size_t)T * K * 8);
    poison(&g, d_groups, (size_t)T * 4 * 8);
    poison(&g, d_norm, (size_t)T * K * 4);
    poison(&g, d_den, (size_t)T * 4);

    top2_case c;
    top2_device d;
    memset(&c, 0, sizeof c);
    top2_alloc(&g, &c, &d);
    c.args = (ref_top2_args){.routed_experts = E, .num_topk = K, .num_groups = G,
                             .num_topk_groups = 4, .num_shared = 2,
                             .routed_scaling_factor = 1.5f, .num_ep_ranks = 4,
                             .num_tp_ranks = 2, .tp_rank = 1,
                             .scoring = REF_SCORING_SQRTSOFTPLUS};
    c.tokens = T + 10;
    c.padded = 10;
    c.fixed = true;
    c.use_map = true;
    c.map_duplicates = 1;
    c.strided = true;
    top2_prepare(&c, test_seed() + 9, true);
    top2_upload(&g, &c, &d);

    tk_tensor x = tensor(d_scores, TK_F32, 2, (int64_t[]){T, E}, NULL);
    tk_tensor topk = tensor(d_topk, TK_I64, 2, (int64_t[]){T, K}, NULL);
    tk_tensor x3 = tensor(d_scores, TK_F32, 3, (int64_t[]){T, G, E / G}, NULL);
    tk_tensor groups = tensor(d_groups, TK_I64, 2, (int64_t[]){T, 4}, NULL);
    tk_tensor w = tensor(d_w, TK_F32, 2, (int64_t[]){T, K}, NULL);
    tk_tensor den = tensor(d_den, TK_F32, 1, (int64_t[]){T}, NULL);
    tk_tensor norm = tensor(d_norm, TK_F32, 2, (int64_t[]){T, K}, NULL);

    CUgraph graph;
    CUgraphExec exec;
    CU(&g, cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
    tk_status s1 = tk_topk_gate(&x, &topk, (tk_stream)stream);
    tk_status s2 = tk_topk_sum_and_topk_group_idx(&x3, 2, &groups, (tk_stream)stream);
    tk_status s3 = top2_launch(&c, &d, (tk_stream)stream);
    tk_status s4 = tk_normalize_weight(&w, &den, &norm, (tk_stream)stream);
    CU(&g, cuStreamEndCapture(stream, &graph));
    check_status(s1, "tk_topk_gate (captured)");
    check_status(s2, "tk_topk_sum_and_topk_group_idx (captured)");
    check_status(s3, "tk_top2_sum_gate (captured)");
    check_status(s4, "tk_normalize_weight (captured)");
    CU(&g, cuGraphInstantiateWithFlags(&exec, graph, 0));
    CU(&g, cuGraphLaunch(exec, stream));
    CU(&g, cuStreamSynchronize(stream));

    download(&g, got, d_topk, (size_t)T * K * 8, "captured topk_gate");
    ref_topk_gate(scores, T, E, K, want);
    expect_same_i64(got, want, T, K, K, K, "captured topk_gate");
    download(&g, got, d_groups, (size_t)T * 4 * 8, "captured group_idx");
    ref_topk_sum_and_topk_group_idx(scores, T, G, E / G, 2, 4, want);
    expect_same_i64(got, want, T, 4, 4, 4, "captured group_idx");
    top2_check(&g, &c, &d, "captured top2_sum_gate");
    download(&g, wgot, d_norm, (size_t)T * K * 4, "captured normalize_weight");
    ref_normalize_weight(wsrc, T, K, dwant, wwant);
    expect_same_bytes(wgot, wwant, (size_t)T * K * 4, "captured normalize_weight");

    CU(&g, cuGraphExecDestroy(exec));
    CU(&g, cuGraphDestroy(graph));
    CU(&g, cuStreamDestroy(stream));
    top2_free(&g, &c, &d);
    CUdeviceptr dev[] = {d_scores, d_topk, d_groups, d_w, d_norm, d_den};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        CU(&g, cuMemFree(dev[i]));
    free(scores);
    free(want);
    free(got);
    free(wsrc);
    free(wgot);
    free(wwant);
    free(dwant);
    (void)cu;
}
