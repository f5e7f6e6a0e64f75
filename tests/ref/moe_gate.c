/*
 * moe_gate.c -- CPU references of topk_gate, topk_sum_and_topk_group_idx,
 * top2_sum_gate and normalize_weight (tilekernels-spec.md 5.1-5.3, 5.8).
 *
 * Written straight from the spec, one token at a time, with none of the
 * kernel's tricks: selections scan experts in increasing order with a
 * strict `>` (so ties go to the smaller index), every fp32 operation is
 * rounded once (the build has no FMA contraction on x86-64), and the
 * duplicate choice of the physical mapping is computed in int64 (spec
 * 15.7).  The large ones split tokens over threads (ref_parallel_for).
 */
#include "moe_gate.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "reference.h"

/* ---- libdevice math ------------------------------------------------------ */

float ref_gate_expf(float a)
{
    const float c_hi = ref_f32_from_bits(0x3FB8AA3B);   /* log2(e)         */
    const float c_lo = ref_f32_from_bits(0x32A57060);   /* its low part    */
    const float k = ref_f32_from_bits(0x4B400000);      /* 1.5 * 2^23      */
    float t = fmaf(a, c_hi / 252.0f, 0.5f);
    t = t < 0.0f ? 0.0f : t > 1.0f ? 1.0f : t;          /* .sat (NaN -> 0) */
    if (isnan(t))
        t = 0.0f;
    /* fma_rd(t, 252, bias): t * 252 + bias is exact in double and lies in
     * [2^23, 2^24), where fp32 steps by 1, so rounding down is floor. */
    float j = (float)floor((double)t * 252.0 + (double)((k - 126.0f) + 127.0f));
    float n = j - (k + 127.0f);
    float f = fmaf(a, c_hi, -n);
    f = fmaf(a, c_lo, f);
    float scale = ref_f32_from_bits(ref_f32_bits(j) << 23);  /* 2^n */
    return exp2f(f) * scale;
}

float ref_gate_add_rz(float a, float b)
{
    float s = a + b;
    if (isinf(s) && isfinite(a) && isfinite(b))
        return copysignf(FLT_MAX, s);   /* rounding toward zero never overflows */
    if (!isfinite(s))
        return s;
    /* TwoSum: the exact error of the rounded sum; a rounding away from
     * zero is undone by one step toward zero. */
    float bv = s - a;
    float err = (a - (s - bv)) + (b - bv);
    if ((s > 0.0f && err < 0.0f) || (s < 0.0f && err > 0.0f))
        s = nextafterf(s, 0.0f);
    return s;
}

float ref_gate_log1pf(float a)
{
    static const uint32_t poly[9] = {0xbd39bf78, 0x3dd80012, 0xbe0778e0,
                                     0x3e146475, 0xbe2a68dd, 0x3e4caf9e,
                                     0xbe800042, 0x3eaaaae6, 0xbf000000};
    uint32_t a_bits = ref_f32_bits(a);
    float u = ref_gate_add_rz(a, 1.0f);
    int32_t e = (int32_t)((ref_f32_bits(u) - 0x3f400000u) & 0xff800000u);
    float m = ref_f32_from_bits(a_bits - (uint32_t)e);
    float s = ref_f32_from_bits(0x40800000u - (uint32_t)e);
    float x = m + fmaf(0.25f, s, -1.0f);
    float scaled_e = (float)e * ref_f32_from_bits(0x34000000);
    float p = fmaf(ref_f32_from_bits(poly[0]), x, ref_f32_from_bits(poly[1]));
    for (int i = 2; i < 9; i++)
        p = fmaf(p, x, ref_f32_from_bits(poly[i]));
    p = p * x;
    p = fmaf(p, x, x);
    float r = fmaf(scaled_e, ref_f32_from_bits(0x3f317218), p);
    if (a_bits >= 0x7f800000u) {           /* +inf, NaN, every negative */
        if ((int32_t)a_bits > (int32_t)0xbf800000u)
            r = fmaf(a, INFINITY, INFINITY);
        if (a == 0.0f)
            r = -0.0f;
    }
    return r;
}

/* ---- topk_gate ------------------------------------------------------------ */

typedef struct topk_job {
    const float *scores;
    int experts, topk;
    int64_t *out;
} topk_job;

static void topk_rows(void *context, int64_t begin, int64_t end)
{
    const topk_job *job = context;
    bool *taken = calloc((size_t)job->experts, 1);
    for (int64_t t = begin; t < end; t++) {
        const float *row = job->scores + t * job->experts;
        memset(taken, 0, (size_t)job->experts);
        for (int k = 0; k < job->topk; k++) {
            int best = -1;
            for (int e = 0; e < job->experts; e++)
                if (!taken[e] && (best < 0 || row[e] > row[best]))
                    best = e;
            taken[best] = true;
            job->out[t * job->topk + k] = best;
        }
    }
    free(taken);
}

void ref_topk_gate(const float *scores, int64_t tokens, int experts, int topk,
                   int64_t *out)
{
    topk_job job = {scores, experts, topk, out};
    ref_parallel_for(tokens, 256, topk_rows, &job);
}

/* ---- group ranking (spec 5.2) ---------------------------------------------- */

/* Top-1 (+ top-2) of values[0..count) with the strict-> update rule. */
static float group_score(const float *values, int count, int num_topk_sum)
{
    float top1 = -INFINITY, top2 = -INFINITY;
    for (int i = 0; i < count; i++) {
        if (values[i] > top1) {
            top2 = top1;
            top1 = values[i];
        } else if (values[i] > top2) {
            top2 = values[i];
        }
    }
    return num_topk_sum == 1 ? top1 : top1 + top2;
}

/* rank of g among scores[0..groups): better scores, or equal ones of a
 * smaller group, come first. */
static int group_rank(const float *scores, int groups, int g)
{
    int rank = 0;
    for (int other = 0; other < groups; other++)
        if (scores[other] > scores[g] ||
            (scores[other] == scores[g] && other < g))
            rank++;
    return rank;
}

void ref_topk_sum_and_topk_group_idx(const float *scores, int64_t tokens,
                                     int groups, int group_size,
                                     int num_topk_sum, int num_topk_groups,
                                     int64_t *out)
{
    float group_scores[32];
    for (int64_t t = 0; t < tokens; t++) {
        for (int g = 0; g < groups; g++)
            group_scores[g] = group_score(
                scores + (t * groups + g) * group_size, group_size,
                num_topk_sum);
        for (int g = 0; g < groups; g++) {
            int rank = group_rank(group_scores, groups, g);
            if (rank < num_topk_groups)
                out[t * num_topk_groups + rank] = g;
        }
    }
}

/* ---- normalize_weight ------------------------------------------------------ */

void ref_normalize_weight(const float *weights, int64_t tokens, int topk,
                          float *denominator, float *normalized)
{
    for (int64_t t = 0; t < tokens; t++) {
        float den = 1e-20f;
        for (int k = 0; k < topk; k++)
            den = den + weights[t * topk + k];
        denominator[t] = den;
        for (int k = 0; k < topk; k++)
            normalized[t * topk + k] = weights[t * topk + k] / den;
    }
}

/* ---- top2_sum_gate ---------------------------------------------------------- */

typedef struct top2_job {
    const ref_top2_args *args;
    const float *logits, *bias;
    const uint8_t *mask, *fix;
    const int32_t *map, *count;
    int64_t *unmapped;
    int64_t unmapped_stride;
    int64_t *topk_idx;
    float *topk_weights, *margin;
} top2_job;

static float min_gap(float current, const float *ranked, int count)
{
    for (int i = 0; i + 1 < count; i++)
        if (ranked[i] - ranked[i + 1] < current)
            current = ranked[i] - ranked[i + 1];
    return current;
}

/* Logical expert -> physical id -> EP/TP-masked id (steps 8 and 9). */
static int64_t route_expert(const top2_job *job, int64_t t, int64_t expert)
{
    const ref_top2_args *a = job->args;
    int extra = a->map_columns > 0 ? a->map_columns - 1 : 0;
    if (job->map != NULL) {
        int64_t count = job->count[expert];
        int64_t dup = ((int64_t)a->ep_rank + t * 23333) % count;
        expert = job->map[expert * a->map_columns + dup];
    }
    int64_t per_rank = (a->routed_experts + extra) / a->num_ep_ranks;
    int64_t per_dp = per_rank * a->num_tp_ranks;
    if ((expert / per_rank) % a->num_tp_ranks != a->tp_rank)
        return -1;
    expert -= a->tp_rank * per_rank;
    int64_t dp = expert / per_dp;
    expert = expert - dp * per_dp + dp * per_rank;
    return expert < 0 ? -1 : expert;
}

static void top2_token(const top2_job *job, int64_t t, float *score,
                       float *selection, bool *taken)
{
    const ref_top2_args *a = job->args;
    int R = a->routed_experts, K = a->num_topk, S = a->num_shared;
    int slots = K + S;
    const float *row = job->logits + t * R;
    int64_t *idx_out = job->topk_idx + t * slots;
    float *w_out = job->topk_weights + t * slots;
    int64_t *unmapped = job->unmapped ? job->unmapped + t * job->unmapped_stride
                                      : NULL;
    float margin = INFINITY;

    if (job->mask != NULL && !job->mask[t]) {
        for (int k = 0; k < slots; k++) {
            idx_out[k] = -1;
            w_out[k] = 0.0f;
        }
        if (unmapped)
            for (int k = 0; k < K; k++)
                unmapped[k] = -1;
        if (job->margin)
            job->margin[t] = margin;
        return;
    }
    /* step 3: unbiased scores */
    if (a->scoring == REF_SCORING_SOFTMAX) {
        float m = -INFINITY;
        for (int e = 0; e < R; e++)
            m = fmaxf(m, row[e]);
        float z = 0.0f;
        for (int e = 0; e < R; e++) {
            score[e] = ref_gate_expf(row[e] - m);
            z = z + score[e];
        }
        for (int e = 0; e < R; e++)
            score[e] = score[e] / z;
    } else {
        for (int e = 0; e < R; e++) {
            float l = row[e];
            if (a->scoring == REF_SCORING_SIGMOID) {
                score[e] = 1.0f / (1.0f + ref_gate_expf(-l));
            } else {
                float softplus = l > 20.0f ? l : ref_gate_log1pf(ref_gate_expf(l));
                score[e] = sqrtf(softplus);
            }
        }
    }
    /* step 4: selection scores */
    for (int e = 0; e < R; e++) {
        selection[e] = (a->scoring == REF_SCORING_SOFTMAX ? row[e] : score[e]) +
                       job->bias[e];
        taken[e] = false;
    }

    int selected[32];
    bool fixed = job->fix != NULL && job->fix[t];
    if (fixed) {
        for (int k = 0; k < K; k++)
            selected[k] = (int)unmapped[k];
    } else {
        /* grouped mode: experts outside the KG best groups are excluded */
        if (a->num_groups != a->num_topk_groups) {
            int G = a->num_groups, size = R / G;
            float gs[32], ranked[33];
            for (int g = 0; g < G; g++)
                gs[g] = group_score(selection + g * size, size, 2);
            for (int g = 0; g < G; g++) {
                int rank = group_rank(gs, G, g);
                if (rank <= a->num_topk_groups && rank < G)
                    ranked[rank] = gs[g];
                if (rank >= a->num_topk_groups)
                    for (int e = g * size; e < (g + 1) * size; e++)
                        taken[e] = true;
            }
            int count = a->num_topk_groups + 1 < G ? a->num_topk_groups + 1 : G;
            margin = min_gap(margin, ranked, count);
        }
        float ranked[33];
        int ranked_count = 0;
        for (int k = 0; k <= K; k++) {
            int best = -1;
            for (int e = 0; e < R; e++)
                if (!taken[e] && (best < 0 || selection[e] > selection[best]))
                    best = e;
            if (best < 0)
                break;
            ranked[ranked_count++] = selection[best];
            if (k < K) {
                taken[best] = true;
                selected[k] = best;
            }
        }
        margin = min_gap(margin, ranked, ranked_count);
    }
    /* step 6: normalisation in the kernel's order */
    float den = 1e-20f;
    for (int k = 0; k < K; k++)
        den = den + score[selected[k]];
    for (int k = 0; k < K; k++) {
        w_out[k] = score[selected[k]] / den * a->routed_scaling_factor;
        idx_out[k] = route_expert(job, t, selected[k]);
        if (unmapped)
            unmapped[k] = selected[k];
    }
    /* step 7: shared experts */
    for (int k = K; k < slots; k++) {
        w_out[k] = 1.0f;
        idx_out[k] = route_expert(job, t, R + (k - K));
    }
    if (job->margin)
        job->margin[t] = margin;
}

static void top2_rows(void *context, int64_t begin, int64_t end)
{
    const top2_job *job = context;
    int R = job->args->routed_experts;
    float *score = malloc(sizeof(float) * (size_t)R);
    float *selection = malloc(sizeof(float) * (size_t)R);
    bool *taken = malloc((size_t)R);
    for (int64_t t = begin; t < end; t++)
        top2_token(job, t, score, selection, taken);
    free(score);
    free(selection);
    free(taken);
}

void ref_top2_sum_gate(const ref_top2_args *args, const float *logits,
                       const float *bias, int64_t tokens, const uint8_t *mask,
                       const uint8_t *fix_routing_mask, const int32_t *map,
                       const int32_t *logical_count, int64_t *unmapped,
                       int64_t unmapped_stride, int64_t *topk_idx,
                       float *topk_weights, float *margin)
{
    top2_job job = {args,    logits, bias,   mask,           fix_routing_mask,
                    map,     logical_count, unmapped, unmapped_stride,
                    topk_idx, topk_weights, margin};
    ref_parallel_for(tokens, 256, top2_rows, &job);
}
