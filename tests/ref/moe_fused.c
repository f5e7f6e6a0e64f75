/*
 * moe_fused.c -- references for expand_to_fused(_with_sf) and reduce_fused
 * (tilekernels-spec.md 5.10, 5.11) and the routing the tests feed them:
 * TileKernels' MoE draw (spec 12.1) and get_fused_mapping's layout (5.9).
 *
 * The golden tests run these over tens of thousands of 7168-wide rows per
 * case, so the row loops are spread over threads with ref_parallel_for.
 * Work is split so that threads write disjoint memory: expansion by token
 * (the mapping sends each fused row at most one token) and the zero fill
 * by fused row; reduction by token.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "moe_fused.h"
#include "reference.h"

/* ---- routing --------------------------------------------------------------- */

int ref_moe_local_experts(const ref_moe_params *params) {
    return params->total_experts / params->ep_ranks;
}

typedef struct draw_job {
    const ref_moe_params *params;
    uint64_t seed;
    int local;          /* experts of rank 0                             */
    int32_t *rows;      /* (sent, topk) before dropping                  */
    uint8_t *keep;      /* per sent token: some index is local           */
} draw_job;

/* Each sent token has its own random stream, so the draw does not depend
 * on how the tokens are split over threads. */
static void draw_tokens(void *context, int64_t begin, int64_t end) {
    const draw_job *job = context;
    int topk = job->params->topk, experts = job->params->total_experts;
    float best_score[64];
    int best_index[64];
    for (int64_t t = begin; t < end; t++) {
        ref_rng rng = ref_rng_seed(job->seed, (uint64_t)t);
        int held = 0;
        for (int e = 0; e < experts; e++) {
            float score = ref_bf16_to_f32(ref_bf16_from_f32(ref_rng_uniform(&rng)));
            /* insertion into the descending list; an equal score keeps
             * the earlier (smaller) index ahead */
            if (held == topk && score <= best_score[topk - 1])
                continue;
            int slot = held < topk ? held++ : topk - 1;
            while (slot > 0 && best_score[slot - 1] < score) {
                best_score[slot] = best_score[slot - 1];
                best_index[slot] = best_index[slot - 1];
                slot--;
            }
            best_score[slot] = score;
            best_index[slot] = e;
        }
        bool any = false;
        for (int k = 0; k < topk; k++) {
            bool local = best_index[k] < job->local;
            job->rows[t * topk + k] = local ? best_index[k] : -1;
            any |= local;
        }
        job->keep[t] = any;
    }
}

int64_t ref_moe_draw_topk_idx(const ref_moe_params *params, uint64_t seed,
                              int32_t **topk_idx) {
    *topk_idx = NULL;
    int64_t sent = params->send_tokens * params->ep_ranks;
    int topk = params->topk;
    if (sent <= 0 || topk < 1 || topk > 64 || topk > params->total_experts ||
        params->ep_ranks < 1 || params->total_experts % params->ep_ranks != 0)
        return 0;
    draw_job job = {params, seed, ref_moe_local_experts(params),
                    malloc((size_t)(sent * topk) * sizeof(int32_t)),
                    malloc((size_t)sent)};
    if (!job.rows || !job.keep) {
        free(job.rows);
        free(job.keep);
        return -1;
    }
    ref_parallel_for(sent, 4096, draw_tokens, &job);
    int64_t kept = 0;
    for (int64_t t = 0; t < sent; t++)
        if (job.keep[t]) {
            memmove(job.rows + kept * topk, job.rows + t * topk,
                    (size_t)topk * sizeof(int32_t));
            kept++;
        }
    free(job.keep);
    if (kept == 0) {
        free(job.rows);
        return 0;
    }
    *topk_idx = job.rows;
    return kept;
}

void ref_moe_mapping_free(ref_moe_mapping *mapping) {
    free(mapping->pos_to_expert);
    free(mapping->pos_to_token);
    free(mapping->pos_to_token_topk);
    free(mapping->token_topk_to_pos);
    free(mapping->expert_start);
    free(mapping->expert_end);
    free(mapping->tokens_per_expert);
    memset(mapping, 0, sizeof *mapping);
}

/* malloc that never returns NULL for a zero size, so that "allocation
 * failed" is unambiguous. */
static void *allocate(size_t bytes) { return malloc(bytes ? bytes : 1); }

bool ref_moe_mapping_build(const int32_t *topk_idx, int64_t tokens, int topk,
                           int experts, int alignment,
                           ref_moe_mapping *mapping) {
    memset(mapping, 0, sizeof *mapping);
    if (tokens < 0 || topk < 0 || experts < 1 || alignment < 1)
        return false;
    int64_t flat = tokens * topk;
    for (int64_t i = 0; i < flat; i++)
        if (topk_idx[i] < -1 || topk_idx[i] >= experts)
            return false;
    mapping->tokens = tokens;
    mapping->topk = topk;
    mapping->experts = experts;
    mapping->expert_start = allocate((size_t)experts * sizeof(int32_t));
    mapping->expert_end = allocate((size_t)experts * sizeof(int32_t));
    mapping->tokens_per_expert = allocate((size_t)experts * sizeof(int32_t));
    mapping->token_topk_to_pos = allocate((size_t)flat * sizeof(int32_t));
    int64_t *count = calloc((size_t)experts, sizeof(int64_t));
    int64_t *next = calloc((size_t)experts, sizeof(int64_t));
    if (!mapping->expert_start || !mapping->expert_end ||
        !mapping->tokens_per_expert || !mapping->token_topk_to_pos || !count ||
        !next)
        goto fail;

    for (int64_t i = 0; i < flat; i++)
        if (topk_idx[i] >= 0)
            count[topk_idx[i]]++;
    int64_t start = 0;
    for (int e = 0; e < experts; e++) {
        int64_t aligned = (count[e] + alignment - 1) / alignment * alignment;
        mapping->expert_start[e] = (int32_t)start;
        mapping->tokens_per_expert[e] = (int32_t)aligned;
        next[e] = start;
        start += aligned;
        mapping->expert_end[e] = (int32_t)start;
        mapping->routed += count[e];
    }
    mapping->expanded = start;
    size_t map_bytes = (size_t)start * sizeof(int32_t);
    mapping->pos_to_expert = allocate(map_bytes);
    mapping->pos_to_token = allocate(map_bytes);
    mapping->pos_to_token_topk = allocate(map_bytes);
    if (!mapping->pos_to_expert || !mapping->pos_to_token ||
        !mapping->pos_to_token_topk)
        goto fail;
    for (int64_t p = 0; p < start; p++)
        mapping->pos_to_expert[p] = mapping->pos_to_token[p] =
            mapping->pos_to_token_topk[p] = -1;
    for (int64_t i = 0; i < flat; i++) {
        int e = topk_idx[i];
        if (e < 0) {
            mapping->token_topk_to_pos[i] = -1;
            continue;
        }
        int64_t p = next[e]++;
        mapping->token_topk_to_pos[i] = (int32_t)p;
        mapping->pos_to_expert[p] = e;
        mapping->pos_to_token[p] = (int32_t)(i / topk);
        mapping->pos_to_token_topk[p] = (int32_t)i;
    }
    free(count);
    free(next);
    return true;
fail:
    free(count);
    free(next);
    ref_moe_mapping_free(mapping);
    return false;
}

/* ---- expand_to_fused --------------------------------------------------------- */

typedef struct expand_job {
    const unsigned char *x;
    size_t row_bytes, x_stride_bytes;
    const int32_t *token_topk_to_pos;
    int topk;
    const int32_t *pos_to_expert;
    int64_t expanded;
    unsigned char *out;
} expand_job;

static void expand_tokens(void *context, int64_t begin, int64_t end) {
    const expand_job *job = context;
    for (int64_t t = begin; t < end; t++)
        for (int k = 0; k < job->topk; k++) {
            int64_t p = job->token_topk_to_pos[t * job->topk + k];
            if (p >= 0 && p < job->expanded)
                memcpy(job->out + (size_t)p * job->row_bytes,
                       job->x + (size_t)t * job->x_stride_bytes, job->row_bytes);
        }
}

static void zero_padding_rows(void *context, int64_t begin, int64_t end) {
    const expand_job *job = context;
    for (int64_t p = begin; p < end; p++)
        if (job->pos_to_expert[p] < 0)
            memset(job->out + (size_t)p * job->row_bytes, 0, job->row_bytes);
}

void ref_expand_to_fused(const void *x, int64_t tokens, size_t row_bytes,
                         size_t x_stride_bytes,
                         const int32_t *token_topk_to_pos, int topk,
                         const int32_t *pos_to_expert, int64_t expanded,
                         void *out) {
    expand_job job = {x, row_bytes, x_stride_bytes, token_topk_to_pos, topk,
                      pos_to_expert, expanded, out};
    ref_parallel_for(expanded, 256, zero_padding_rows, &job);
    ref_parallel_for(tokens, 256, expand_tokens, &job);
}

int64_t ref_expand_sf_words(int64_t hidden, int num_per_channels,
                            tk_sf_layout layout) {
    int64_t scales = (hidden + num_per_channels - 1) / num_per_channels;
    return layout == TK_SF_PACKED_UE8M0 ? (scales + 3) / 4 : scales;
}

int64_t ref_expand_sf_index(int64_t expanded, int64_t words,
                            tk_sf_layout layout, int64_t p, int64_t j) {
    if (layout == TK_SF_ROW_MAJOR)
        return p * words + j;
    return j * ((expanded + 3) / 4 * 4) + p;
}

void ref_expand_sf(const uint32_t *x_sf, int64_t tokens, int64_t words,
                   const int32_t *token_topk_to_pos, int topk,
                   const int32_t *pos_to_expert, int64_t expanded,
                   tk_sf_layout layout, uint32_t *out_sf) {
    for (int64_t p = 0; p < expanded; p++)
        if (pos_to_expert[p] < 0)
            for (int64_t j = 0; j < words; j++)
                out_sf[ref_expand_sf_index(expanded, words, layout, p, j)] = 0;
    for (int64_t t = 0; t < tokens; t++)
        for (int k = 0; k < topk; k++) {
            int64_t p = token_topk_to_pos[t * topk + k];
            if (p < 0 || p >= expanded)
                continue;
            for (int64_t j = 0; j < words; j++)
                out_sf[ref_expand_sf_index(expanded, words, layout, p, j)] =
                    x_sf[t * words + j];
        }
}

/* ---- reduce_fused -------------------------------------------------------------- */

typedef struct reduce_job {
    const void *x;
    tk_dtype x_dtype;
    int64_t x_stride, hidden;
    const float *weights;
    const int32_t *token_topk_to_pos;
    int topk;
    const float *x_sf, *sf;
    tk_dtype out_dtype;
    void *out;
} reduce_job;

/* x[p, :] as f32 into row: one dtype switch per row, not per element (the
 * golden tests reduce billions of elements). */
static void load_row(const reduce_job *job, int64_t p, float *row) {
    int64_t first = p * job->x_stride, hidden = job->hidden;
    switch (job->x_dtype) {
    case TK_F32:
        memcpy(row, (const float *)job->x + first, (size_t)hidden * sizeof(float));
        break;
    case TK_BF16: {
        const uint16_t *x = (const uint16_t *)job->x + first;
        for (int64_t h = 0; h < hidden; h++)
            row[h] = ref_bf16_to_f32(x[h]);
        break;
    }
    default: {
        float codes[256];
        for (int c = 0; c < 256; c++)
            codes[c] = ref_e4m3_to_f32((uint8_t)c);
        const uint8_t *x = (const uint8_t *)job->x + first;
        for (int64_t h = 0; h < hidden; h++)
            row[h] = codes[x[h]];
        break;
    }
    }
}

/* acc[h] = fmaf(row[h], s, acc[h]): one rounding per term either way; on
 * x86-64 hosts with FMA the compiler turns the loop into vector FMAs
 * instead of a libm call per element. */
static void fma_row(float *acc, const float *row, float s, int64_t hidden) {
    for (int64_t h = 0; h < hidden; h++)
        acc[h] = fmaf(row[h], s, acc[h]);
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("fma"))) static void fma_row_fma(float *acc, const float *row, float s,
                                                      int64_t hidden) {
    for (int64_t h = 0; h < hidden; h++)
        acc[h] = __builtin_fmaf(row[h], s, acc[h]);
}
#endif

static void accumulate(float *acc, const float *row, float s, int64_t hidden) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("fma")) {
        fma_row_fma(acc, row, s, hidden);
        return;
    }
#endif
    fma_row(acc, row, s, hidden);
}

static void reduce_tokens(void *context, int64_t begin, int64_t end) {
    const reduce_job *job = context;
    int64_t hidden = job->hidden;
    size_t bytes = (size_t)(hidden > 0 ? hidden : 1) * sizeof(float);
    float *acc = malloc(bytes), *row = malloc(bytes);
    if (!acc || !row)
        abort(); /* a reference that silently skipped work would lie */
    for (int64_t t = begin; t < end; t++) {
        for (int64_t h = 0; h < hidden; h++)
            acc[h] = 0.0f;
        for (int k = 0; k < job->topk; k++) {
            int64_t p = job->token_topk_to_pos[t * job->topk + k];
            if (p < 0)
                continue;
            float s = job->weights ? job->weights[t * job->topk + k] : 1.0f;
            if (job->x_sf)
                s = s * job->x_sf[p];
            load_row(job, p, row);
            accumulate(acc, row, s, hidden);
        }
        for (int64_t h = 0; h < hidden; h++) {
            float value = job->sf ? acc[h] * job->sf[0] : acc[h];
            int64_t index = t * hidden + h;
            switch (job->out_dtype) {
            case TK_F32: ((float *)job->out)[index] = value; break;
            case TK_BF16: ((uint16_t *)job->out)[index] = ref_bf16_from_f32(value); break;
            default: ((uint8_t *)job->out)[index] = ref_e4m3_from_f32(value); break;
            }
        }
    }
    free(acc);
    free(row);
}

bool ref_reduce_fused(const void *x, tk_dtype x_dtype, int64_t x_stride,
                      int64_t hidden, const float *weights,
                      const int32_t *token_topk_to_pos, int64_t tokens,
                      int topk, const float *x_sf, const float *sf,
                      tk_dtype out_dtype, void *out) {
    if ((x_dtype != TK_F32 && x_dtype != TK_BF16 && x_dtype != TK_E4M3) ||
        (out_dtype != TK_F32 && out_dtype != TK_BF16 && out_dtype != TK_E4M3) ||
        hidden < 0 || tokens < 0 || topk < 0)
        return false;
    reduce_job job = {x, x_dtype, x_stride, hidden, weights, token_topk_to_pos,
                      topk, x_sf, sf, out_dtype, out};
    ref_parallel_for(tokens, 64, reduce_tokens, &job);
    return true;
}
