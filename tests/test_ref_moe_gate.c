/*
 * test_ref_moe_gate.c -- CPU tests of the MoE gate references
 * (tests/ref/moe_gate.c) against naive formulas: the GPU golden tests are
 * only as good as these oracles.
 *
 * Covered: the libdevice math emulations (log1pf and add.rz against
 * glibc and the FPU's own rounding mode; expf within the ex2.approx error
 * budget), topk_gate and group ranking against a stable sort with heavy
 * ties, normalize_weight's summation order, and top2_sum_gate's masking,
 * shared slots, grouped exclusion, fixed routing, mapping and EP/TP rules
 * on hand-checked cases.
 */
#include <criterion/criterion.h>
#include <fenv.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "moe_gate.h"
#include "reference.h"

static int64_t ulp_distance(float a, float b)
{
    int32_t ia = (int32_t)ref_f32_bits(a), ib = (int32_t)ref_f32_bits(b);
    if (ia < 0) ia = INT32_MIN - ia;
    if (ib < 0) ib = INT32_MIN - ib;
    return llabs((long long)ia - (long long)ib);
}

/* ---- libdevice math ------------------------------------------------------- */

Test(moe_gate_math, add_rz_matches_the_fpu_rounding_mode) {
    ref_rng rng = ref_rng_seed(1, 0);
    for (int i = 0; i < 200000; i++) {
        float a = ref_f32_from_bits((uint32_t)ref_rng_next(&rng));
        float b = i % 2 ? 1.0f : ref_f32_from_bits((uint32_t)ref_rng_next(&rng));
        if (!isfinite(a) || !isfinite(b)) continue;
        volatile float va = a, vb = b;
        fesetround(FE_TOWARDZERO);
        volatile float expected = va + vb;
        fesetround(FE_TONEAREST);
        if (!isfinite(expected)) continue;
        float got = ref_gate_add_rz(a, b);
        cr_assert_eq(ref_f32_bits(got), ref_f32_bits(expected),
                     "add_rz(%a, %a) = %a, expected %a", a, b, got, expected);
    }
}

Test(moe_gate_math, log1pf_is_within_two_ulp_of_glibc) {
    ref_rng rng = ref_rng_seed(2, 0);
    int64_t worst = 0;
    for (int i = 0; i < 400000; i++) {
        /* positive arguments of every magnitude (expf results), plus
         * (-1, 0) */
        float x = i % 4 == 3 ? -ref_rng_uniform(&rng)
                             : ldexpf(ref_rng_uniform(&rng) + 0.5f,
                                      (int)(ref_rng_next(&rng) % 160) - 130);
        int64_t d = ulp_distance(ref_gate_log1pf(x), log1pf(x));
        if (d > worst) worst = d;
    }
    cr_assert_leq(worst, 2, "log1pf emulation is %lld ulp from glibc",
                  (long long)worst);
}

Test(moe_gate_math, log1pf_special_values) {
    cr_assert(isinf(ref_gate_log1pf(INFINITY)) && ref_gate_log1pf(INFINITY) > 0);
    cr_assert(isnan(ref_gate_log1pf(NAN)));
    cr_assert(isnan(ref_gate_log1pf(-2.0f)));
    cr_assert(isnan(ref_gate_log1pf(-INFINITY)));
    cr_assert(isinf(ref_gate_log1pf(-1.0f)) && ref_gate_log1pf(-1.0f) < 0);
    cr_assert_eq(ref_f32_bits(ref_gate_log1pf(-0.0f)), 0x80000000u);
    cr_assert_eq(ref_f32_bits(ref_gate_log1pf(0.0f)), 0u);
    cr_assert_eq(ref_gate_log1pf(1e-30f), 1e-30f);
    cr_assert_eq(ulp_distance(ref_gate_log1pf(1.0f), 0.69314718f) <= 1, true);
}

Test(moe_gate_math, expf_is_within_the_ex2_budget) {
    ref_rng rng = ref_rng_seed(3, 0);
    for (int i = 0; i < 200000; i++) {
        float x = (ref_rng_uniform(&rng) * 2.0f - 1.0f) * 87.0f;
        int64_t d = ulp_distance(ref_gate_expf(x), expf(x));
        cr_assert_leq(d, 3, "expf(%a): %a vs glibc %a", x, ref_gate_expf(x),
                      expf(x));
    }
    cr_assert_eq(ref_gate_expf(0.0f), 1.0f);
    cr_assert_eq(ref_gate_expf(-200.0f), 0.0f);
}

/* ---- topk_gate and group ranking -------------------------------------------- */

typedef struct ranked {
    float value;
    int index;
} ranked;

/* descending, ties by index: a stable descending sort */
static int by_value_then_index(const void *a, const void *b)
{
    const ranked *x = a, *y = b;
    if (x->value != y->value) return x->value > y->value ? -1 : 1;
    return x->index - y->index;
}

Test(moe_gate_select, topk_gate_is_a_stable_descending_sort) {
    static const int shapes[][2] = {{72, 6}, {32, 6}, {16, 6}, {256, 8},
                                    {36, 36}, {4, 1}, {512, 9}};
    ref_rng rng = ref_rng_seed(4, 0);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int E = shapes[s][0], K = shapes[s][1], T = 300;
        float *scores = malloc(sizeof(float) * (size_t)(T * E));
        int64_t *out = malloc(sizeof(int64_t) * (size_t)(T * K));
        ranked *row = malloc(sizeof(ranked) * (size_t)E);
        /* few distinct values: most rows have ties, some -inf */
        for (int i = 0; i < T * E; i++) {
            int q = (int)(ref_rng_next(&rng) % 7);
            scores[i] = q == 6 ? -INFINITY : (float)q - 2.5f;
        }
        ref_topk_gate(scores, T, E, K, out);
        for (int t = 0; t < T; t++) {
            for (int e = 0; e < E; e++) row[e] = (ranked){scores[t * E + e], e};
            qsort(row, (size_t)E, sizeof(ranked), by_value_then_index);
            for (int k = 0; k < K; k++)
                cr_assert_eq(out[t * K + k], row[k].index,
                             "E %d K %d token %d slot %d", E, K, t, k);
        }
        free(scores);
        free(out);
        free(row);
    }
}

Test(moe_gate_select, group_ranking_matches_sorted_group_sums) {
    static const int shapes[][2] = {{4, 18}, {8, 9}, {12, 6}, {8, 32}, {16, 16}};
    ref_rng rng = ref_rng_seed(5, 0);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int nsum = 1; nsum <= 2; nsum++) {
            int G = shapes[s][0], Eg = shapes[s][1], T = 200, KG = G / 2;
            float *scores = malloc(sizeof(float) * (size_t)(T * G * Eg));
            int64_t *out = malloc(sizeof(int64_t) * (size_t)(T * KG));
            for (int i = 0; i < T * G * Eg; i++)
                scores[i] = (float)(ref_rng_next(&rng) % 9) * 0.25f;
            ref_topk_sum_and_topk_group_idx(scores, T, G, Eg, nsum, KG, out);
            for (int t = 0; t < T; t++) {
                ranked groups[32];
                for (int g = 0; g < G; g++) {
                    ranked *members = malloc(sizeof(ranked) * (size_t)Eg);
                    for (int j = 0; j < Eg; j++)
                        members[j] = (ranked){scores[(t * G + g) * Eg + j], j};
                    qsort(members, (size_t)Eg, sizeof(ranked), by_value_then_index);
                    float sum = nsum == 1 ? members[0].value
                                          : members[0].value + members[1].value;
                    groups[g] = (ranked){sum, g};
                    free(members);
                }
                qsort(groups, (size_t)G, sizeof(ranked), by_value_then_index);
                for (int k = 0; k < KG; k++)
                    cr_assert_eq(out[t * KG + k], groups[k].index,
                                 "G %d Eg %d nsum %d token %d slot %d", G, Eg,
                                 nsum, t, k);
            }
            free(scores);
            free(out);
        }
}

/* ---- normalize_weight ---------------------------------------------------------- */

Test(moe_gate_normalize, sums_from_1e_20_in_order) {
    /* 1e-20 + 1 + 2^-24 + 2^-24: sequential order keeps 1.0f; any sum that
     * adds the two small terms first gives 1 + 2^-23. */
    float w[3] = {1.0f, 0x1p-24f, 0x1p-24f}, den, out[3];
    ref_normalize_weight(w, 1, 3, &den, out);
    cr_assert_eq(den, 1.0f);
    cr_assert_eq(out[1], 0x1p-24f);
    float zeros[2] = {0.0f, 0.0f};
    ref_normalize_weight(zeros, 1, 2, &den, out);
    cr_assert_eq(den, 1e-20f);
    cr_assert_eq(out[0], 0.0f);
    float one[1] = {3.0f};
    ref_normalize_weight(one, 1, 1, &den, out);
    cr_assert_eq(den, 3.0f);
    cr_assert_eq(out[0], 1.0f);
}

/* ---- top2_sum_gate --------------------------------------------------------------- */

static ref_top2_args base_args(int R, int K)
{
    ref_top2_args a = {0};
    a.routed_experts = R;
    a.num_topk = K;
    a.routed_scaling_factor = 1.5f;
    a.num_ep_ranks = 1;
    a.num_tp_ranks = 1;
    a.scoring = REF_SCORING_SIGMOID;
    return a;
}

Test(moe_gate_top2, all_zero_logits_pick_the_first_experts) {
    enum { R = 64, K = 6 };
    float logits[R] = {0}, bias[R] = {0}, weights[K], margin;
    int64_t idx[K];
    ref_top2_args a = base_args(R, K);
    ref_top2_sum_gate(&a, logits, bias, 1, NULL, NULL, NULL, NULL, NULL, 0, idx,
                      weights, &margin);
    for (int k = 0; k < K; k++) {
        cr_assert_eq(idx[k], k);
        /* sigmoid(0) = 0.5 each: (0.5 / (1e-20 + 3.0)) * 1.5 */
        cr_assert_eq(weights[k], 0.5f / (1e-20f + 3.0f) * 1.5f);
    }
    cr_assert_eq(margin, 0.0f, "equal scores leave no margin");
}

Test(moe_gate_top2, softmax_ranks_biased_logits_and_weights_unbiased_scores) {
    enum { R = 8, K = 2 };
    float logits[R] = {3, 2, 1, 0, 0, 0, 0, 0};
    float bias[R] = {0, 0, 5, 0, 0, 0, 0, 0};
    float weights[K];
    int64_t idx[K];
    ref_top2_args a = base_args(R, K);
    a.scoring = REF_SCORING_SOFTMAX;
    a.routed_scaling_factor = 1.0f;
    ref_top2_sum_gate(&a, logits, bias, 1, NULL, NULL, NULL, NULL, NULL, 0, idx,
                      weights, NULL);
    cr_assert_eq(idx[0], 2); /* 1 + 5 beats 3 */
    cr_assert_eq(idx[1], 0);
    /* unbiased softmax: e^1 / (e^1 + e^3) for slot 0, after renormalising */
    cr_assert_float_eq(weights[0], (float)(exp(1) / (exp(1) + exp(3))), 1e-6);
    cr_assert_float_eq(weights[1], (float)(exp(3) / (exp(1) + exp(3))), 1e-6);
}

Test(moe_gate_top2, grouped_mode_excludes_unselected_groups) {
    enum { R = 16, K = 2 };
    /* 4 groups of 4; group 3 holds the single best expert (15) but group
     * 1's top-2 sum is larger, and group 0 second: KG = 2 keeps 0 and 1 */
    float logits[R] = {1.0f, 0.9f, -3, -3, 1.2f, 1.1f, -3, -3,
                       -3,   -3,   -3, -3, -3,   -3,   -3, 2.0f};
    float bias[R] = {0}, weights[K];
    int64_t idx[K];
    ref_top2_args a = base_args(R, K);
    a.num_groups = 4;
    a.num_topk_groups = 2;
    ref_top2_sum_gate(&a, logits, bias, 1, NULL, NULL, NULL, NULL, NULL, 0, idx,
                      weights, NULL);
    cr_assert_eq(idx[0], 4);
    cr_assert_eq(idx[1], 5);
}

Test(moe_gate_top2, masks_shared_slots_mapping_and_ep_tp) {
    enum { R = 8, K = 2, S = 2, D = 3, T = 3 };
    float logits[T * R], bias[R] = {0};
    for (int i = 0; i < T * R; i++) logits[i] = (float)(i % R) * 0.5f;
    /* map: logical e -> physical 10 + e, or 20 + e for duplicate 1 */
    int32_t map[(R + S) * D], count[R + S];
    for (int e = 0; e < R + S; e++) {
        map[e * D + 0] = 10 + e;
        map[e * D + 1] = 20 + e;
        map[e * D + 2] = 0;
        count[e] = 2;
    }
    uint8_t mask[T] = {1, 0, 1};
    int64_t unmapped[T * 4];
    memset(unmapped, 0x55, sizeof unmapped);
    int64_t idx[T * (K + S)];
    float weights[T * (K + S)];
    ref_top2_args a = base_args(R, K);
    a.num_shared = S;
    a.map_columns = D;
    a.ep_rank = 1;
    a.num_ep_ranks = 2;   /* per_rank = (8 + 2) / 2 = 5 */
    a.num_tp_ranks = 1;
    ref_top2_sum_gate(&a, logits, bias, T, mask, NULL, map, count, unmapped, 4,
                      idx, weights, NULL);
    /* token 0: experts 7, 6; dup = (1 + 0) % 2 = 1 -> 27, 26; shared 8, 9
     * -> 28, 29 */
    cr_assert_eq(idx[0], 27);
    cr_assert_eq(idx[1], 26);
    cr_assert_eq(idx[2], 28);
    cr_assert_eq(idx[3], 29);
    cr_assert_eq(weights[2], 1.0f);
    cr_assert_eq(unmapped[0], 7);
    cr_assert_eq(unmapped[1], 6);
    cr_assert_eq(unmapped[2], 0x5555555555555555);  /* stride padding kept */
    /* token 1 is masked */
    for (int k = 0; k < K + S; k++) {
        cr_assert_eq(idx[4 + k], -1);
        cr_assert_eq(weights[4 + k], 0.0f);
    }
    cr_assert_eq(unmapped[4], -1);
    cr_assert_eq(unmapped[5], -1);
    /* token 2: dup = (1 + 2 * 23333) % 2 = 1 again */
    cr_assert_eq(idx[8], 27);

    /* TP: per_rank 5, two TP ranks, tp_rank 1: 27 / 5 = 5, 5 % 2 = 1 keeps
     * it: 27 - 5 = 22, dp = 22 / 10 = 2, 22 - 20 + 10 = 12; 26 -> 5 % 2 = 1
     * keeps it -> 11; 28 -> 13; 29 -> 14 */
    a.num_tp_ranks = 2;
    a.tp_rank = 1;
    ref_top2_sum_gate(&a, logits, bias, 1, mask, NULL, map, count, NULL, 0, idx,
                      weights, NULL);
    cr_assert_eq(idx[0], 12);
    cr_assert_eq(idx[1], 11);
    cr_assert_eq(idx[2], 13);
    cr_assert_eq(idx[3], 14);
    a.tp_rank = 0;  /* the same experts belong to the other TP rank */
    ref_top2_sum_gate(&a, logits, bias, 1, mask, NULL, map, count, NULL, 0, idx,
                      weights, NULL);
    for (int k = 0; k < K + S; k++) cr_assert_eq(idx[k], -1);
    cr_assert_neq(weights[0], 0.0f, "masked slots keep their weights");
}

Test(moe_gate_top2, fixed_routing_uses_the_given_experts) {
    enum { R = 8, K = 3 };
    float logits[R] = {0, 1, 2, 3, 4, 5, 6, 7}, bias[R] = {0}, weights[K];
    int64_t unmapped[K] = {0, 2, 1}, idx[K];
    uint8_t fix[1] = {1};
    ref_top2_args a = base_args(R, K);
    a.routed_scaling_factor = 1.0f;
    ref_top2_sum_gate(&a, logits, bias, 1, NULL, fix, NULL, NULL, unmapped, K,
                      idx, weights, NULL);
    cr_assert_eq(idx[0], 0);
    cr_assert_eq(idx[1], 2);
    cr_assert_eq(idx[2], 1);
    float s0 = 0.5f, s1 = 1.0f / (1.0f + ref_gate_expf(-1.0f)),
          s2 = 1.0f / (1.0f + ref_gate_expf(-2.0f));
    float den = 1e-20f + s0 + s2 + s1;
    cr_assert_eq(weights[1], s2 / den);
}

Test(moe_gate_top2, sqrtsoftplus_switches_to_the_identity_above_20) {
    enum { R = 4, K = 2 };
    float logits[R] = {25.0f, 19.0f, -1.0f, -2.0f}, bias[R] = {0}, weights[K];
    int64_t idx[K];
    ref_top2_args a = base_args(R, K);
    a.scoring = REF_SCORING_SQRTSOFTPLUS;
    a.routed_scaling_factor = 1.0f;
    ref_top2_sum_gate(&a, logits, bias, 1, NULL, NULL, NULL, NULL, NULL, 0, idx,
                      weights, NULL);
    float s0 = sqrtf(25.0f), s1 = sqrtf(ref_gate_log1pf(ref_gate_expf(19.0f)));
    cr_assert_eq(idx[0], 0);
    cr_assert_eq(idx[1], 1);
    cr_assert_eq(weights[0], s0 / (1e-20f + s0 + s1));
}
