/*
 * test_ref_moe_route.c -- CPU tests of the MoE routing references
 * (tests/ref/moe_route.c) against naive formulations written differently
 * from the references: the GPU golden tests are only as good as these
 * oracles.
 *
 * Covered: group_count and aux_fi against per-group scans; unique against
 * an O(K^2) "seen earlier in the row" definition; mask_indices_by_tp
 * against the owner-GPU formulation (dp * per_gpu + offset) and a
 * hand-worked table; get_fused_mapping's invariants, its ascending order,
 * capacity truncation, and a checker that must reject corrupted mappings;
 * the MoE parameter lists and the top-k generator.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "moe_route.h"
#include "reference.h"

/* Random (rows, k) indices in [lo, hi) with a fixed seed. */
static int64_t *random_indices(int64_t rows, int k, int64_t lo, int64_t hi, uint64_t seed)
{
    int64_t *idx = malloc((size_t)(rows * k > 0 ? rows * k : 1) * sizeof *idx);
    cr_assert(idx != NULL);
    ref_rng rng = ref_rng_seed(seed, 0);
    for (int64_t i = 0; i < rows * k; i++)
        idx[i] = lo + (int64_t)(ref_rng_next(&rng) % (uint64_t)(hi - lo));
    return idx;
}

/* ---- group_count, aux_fi --------------------------------------------------- */

Test(moe_route_ref, group_count_matches_a_scan_per_group) {
    int64_t *idx = random_indices(999, 7, -3, 70, 11); /* includes values >= G */
    int groups = 64;
    int32_t counts[64];
    ref_group_count(idx, 999 * 7, groups, counts);
    int64_t total = 0;
    for (int g = 0; g < groups; g++) {
        int32_t expected = 0;
        for (int64_t i = 0; i < 999 * 7; i++)
            expected += idx[i] == g;
        cr_assert_eq(counts[g], expected, "group %d", g);
        total += counts[g];
    }
    cr_assert(total > 0 && total < 999 * 7, "out-of-range values must be skipped");
    free(idx);
}

Test(moe_route_ref, aux_fi_is_one_division_of_exact_counts) {
    int64_t tokens = 4001;
    int topk = 8, experts = 32;
    int64_t *idx = random_indices(tokens, topk, -1, experts, 12);
    for (int naux = 1; naux <= topk; naux += topk - 1) {
        float fi[32];
        ref_aux_fi(idx, tokens, topk, experts, naux, fi);
        double sum = 0, valid = 0;
        for (int e = 0; e < experts; e++) {
            int64_t count = 0;
            for (int64_t i = 0; i < tokens * topk; i++)
                count += idx[i] == e;
            valid += (double)count;
            float expected = (float)(count * experts) / (float)(tokens * naux);
            cr_assert_eq(ref_f32_bits(fi[e]), ref_f32_bits(expected), "expert %d", e);
            sum += fi[e];
        }
        /* sum_e fi = valid * E / (T * naux), up to f32 rounding */
        double want = valid * experts / ((double)tokens * naux);
        cr_assert(fabs(sum - want) < 1e-5 * want, "sum %g, want %g", sum, want);
    }
    float zeros[4] = {1, 1, 1, 1};
    ref_aux_fi(idx, 0, topk, 4, 1, zeros);
    for (int e = 0; e < 4; e++)
        cr_assert_eq(ref_f32_bits(zeros[e]), 0u, "T == 0 gives +0.0");
    free(idx);
}

/* ---- inplace_unique_group_indices ------------------------------------------ */

Test(moe_route_ref, unique_keeps_the_first_occurrence_only) {
    for (int k = 1; k <= 20; k++) {
        int64_t rows = 300;
        int64_t *idx = random_indices(rows, k, -2, k < 10 ? 6 : 140, 100 + (uint64_t)k);
        int64_t *want = malloc((size_t)(rows * k) * sizeof *want);
        int64_t changed = 0;
        for (int64_t t = 0; t < rows; t++)
            for (int j = 0; j < k; j++) {
                int64_t v = idx[t * k + j];
                bool earlier = false;
                for (int i = 0; i < j; i++)
                    earlier = earlier || idx[t * k + i] == v;
                bool dedup = v >= 0 && v < 128 && earlier;
                want[t * k + j] = dedup ? -1 : v;
                changed += dedup;
            }
        cr_assert_eq(ref_inplace_unique_group_indices(idx, rows, k), changed, "k = %d", k);
        cr_assert(memcmp(idx, want, (size_t)(rows * k) * sizeof *idx) == 0, "k = %d", k);
        if (k >= 3)
            cr_assert(changed > 0, "k = %d: the input must have duplicates", k);
        free(idx);
        free(want);
    }
}

/* ---- mask_indices_by_tp ------------------------------------------------------ */

Test(moe_route_ref, mask_matches_the_owner_gpu_formulation) {
    static const int tp_ranks[] = {1, 2, 4, 8};
    for (int a = 0; a < 4; a++)
        for (int ep = 1; ep <= 64; ep *= 4) {
            int ntp = tp_ranks[a];
            int64_t per_gpu = 9, n = per_gpu * ep * ntp + 3; /* n not a multiple */
            int64_t count = 5000;
            int64_t *idx = random_indices(count, 1, -2, n / ep * ep, 7);
            int64_t *out64 = malloc((size_t)count * sizeof *out64);
            int32_t *in32 = malloc((size_t)count * sizeof *in32);
            int32_t *out32 = malloc((size_t)count * sizeof *out32);
            for (int64_t i = 0; i < count; i++)
                in32[i] = (int32_t)idx[i];
            for (int rank = 0; rank < ntp; rank++) {
                int64_t pg = n / ep;
                cr_assert(ref_mask_indices_by_tp(idx, TK_I64, count, n, ep, rank, ntp, out64));
                cr_assert(ref_mask_indices_by_tp(in32, TK_I32, count, n, ep, rank, ntp, out32));
                for (int64_t i = 0; i < count; i++) {
                    int64_t v = idx[i], want = -1;
                    if (v >= 0 && (v / pg) % ntp == rank)
                        want = (v / pg / ntp) * pg + v % pg;
                    cr_assert_eq(out64[i], want, "v %lld n %lld ep %d tp %d/%d", (long long)v,
                                 (long long)n, ep, rank, ntp);
                    cr_assert_eq(out32[i], (int32_t)want);
                }
            }
            free(idx);
            free(out64);
            free(in32);
            free(out32);
        }
}

Test(moe_route_ref, mask_hand_worked_table) {
    /* n = 16 experts over 4 EP ranks (4 per GPU), TP 2: GPUs 0,2 are TP
     * rank 0 (local 0-3, then 4-7), GPUs 1,3 are TP rank 1. */
    int64_t in[] = {-1, 0, 3, 4, 7, 8, 11, 12, 15};
    int64_t rank0[] = {-1, 0, 3, -1, -1, 4, 7, -1, -1};
    int64_t rank1[] = {-1, -1, -1, 0, 3, -1, -1, 4, 7};
    int64_t out[9];
    cr_assert(ref_mask_indices_by_tp(in, TK_I64, 9, 16, 4, 0, 2, out));
    cr_assert(memcmp(out, rank0, sizeof out) == 0);
    cr_assert(ref_mask_indices_by_tp(in, TK_I64, 9, 16, 4, 1, 2, out));
    cr_assert(memcmp(out, rank1, sizeof out) == 0);
    cr_assert(!ref_mask_indices_by_tp(in, TK_I64, 9, 3, 4, 0, 2, out), "per_gpu 0");
    cr_assert(!ref_mask_indices_by_tp(in, TK_I64, 9, 16, 4, 2, 2, out), "tp_rank range");
}

/* ---- get_fused_mapping -------------------------------------------------------- */

typedef struct mapping_buffers {
    ref_fused_mapping m;
    int32_t *storage;
} mapping_buffers;

static mapping_buffers mapping_alloc(int64_t tokens, int topk, int experts, int alignment,
                                     int64_t capacity)
{
    mapping_buffers b;
    b.m = (ref_fused_mapping){tokens, topk, experts, capacity, alignment,
                              NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    size_t total = (size_t)(3 * capacity + tokens * topk + 3 * experts) + 1;
    b.storage = malloc(total * sizeof *b.storage);
    cr_assert(b.storage != NULL);
    int32_t *p = b.storage;
    b.m.pos_to_expert = p, p += capacity;
    b.m.pos_to_token = p, p += capacity;
    b.m.pos_to_token_topk = p, p += capacity;
    b.m.token_topk_to_pos = p, p += tokens * topk;
    b.m.expert_start = p, p += experts;
    b.m.expert_end = p, p += experts;
    b.m.num_tokens_per_expert = p;
    return b;
}

Test(moe_route_ref, fused_mapping_satisfies_the_invariants_in_ascending_order) {
    static const int alignments[] = {1, 16, 64, 128};
    char why[256];
    for (int a = 0; a < 4; a++) {
        int64_t tokens = 3001;
        int topk = 6, experts = 40, alignment = alignments[a];
        int64_t *idx = random_indices(tokens, topk, -1, experts, 31);
        int64_t capacity = ref_fused_mapping_capacity(tokens, topk, experts, alignment);
        mapping_buffers b = mapping_alloc(tokens, topk, experts, alignment, capacity);
        ref_get_fused_mapping(idx, &b.m);
        cr_assert(ref_check_fused_mapping(idx, &b.m, why, sizeof why), "%s", why);
        for (int e = 0; e < experts; e++) {
            cr_assert_eq(b.m.expert_start[e] % alignment, 0);
            for (int32_t p = b.m.expert_start[e] + 1; p < b.m.expert_end[e]; p++)
                if (b.m.pos_to_expert[p] == e)
                    cr_assert(b.m.pos_to_token_topk[p] > b.m.pos_to_token_topk[p - 1],
                              "ascending flat order at position %d", p);
        }
        cr_assert(b.m.expert_end[experts - 1] <= capacity);
        free(b.storage);
        free(idx);
    }
}

Test(moe_route_ref, fused_mapping_checker_rejects_corruption) {
    int64_t tokens = 500;
    int topk = 4, experts = 16, alignment = 8;
    int64_t *idx = random_indices(tokens, topk, -1, experts, 32);
    int64_t capacity = ref_fused_mapping_capacity(tokens, topk, experts, alignment);
    char why[256];
    for (int corruption = 0; corruption < 6; corruption++) {
        mapping_buffers b = mapping_alloc(tokens, topk, experts, alignment, capacity);
        ref_get_fused_mapping(idx, &b.m);
        int32_t p = b.m.token_topk_to_pos[5] >= 0 ? b.m.token_topk_to_pos[5]
                                                  : b.m.token_topk_to_pos[6];
        switch (corruption) {
        case 0: b.m.pos_to_token[p] ^= 1; break;
        case 1: b.m.pos_to_token_topk[p] += 1; break;
        case 2: b.m.expert_end[3] += 1; break;
        case 3: b.m.num_tokens_per_expert[0] += alignment; break;
        case 4: b.m.pos_to_expert[capacity - 1] = 0; break;
        case 5: b.m.pos_to_token[b.m.expert_end[0] - 1] = 7; break; /* padding */
        }
        bool ok = ref_check_fused_mapping(idx, &b.m, why, sizeof why);
        cr_assert(!ok, "corruption %d was not detected", corruption);
        free(b.storage);
    }
    free(idx);
}

Test(moe_route_ref, fused_mapping_truncates_at_the_capacity_and_handles_no_tokens) {
    int64_t tokens = 200;
    int topk = 3, experts = 8, alignment = 4;
    int64_t *idx = random_indices(tokens, topk, -1, experts, 33);
    mapping_buffers b = mapping_alloc(tokens, topk, experts, alignment, 100);
    ref_get_fused_mapping(idx, &b.m);
    char why[256];
    cr_assert(ref_check_fused_mapping(idx, &b.m, why, sizeof why), "%s", why);
    int64_t dropped = 0;
    for (int64_t i = 0; i < tokens * topk; i++)
        dropped += idx[i] >= 0 && b.m.token_topk_to_pos[i] == -1;
    cr_assert(dropped > 0, "a capacity of 100 must drop entries");
    free(b.storage);

    mapping_buffers empty = mapping_alloc(0, 1, 1, 16, 15);
    ref_get_fused_mapping(idx, &empty.m);
    cr_assert(ref_check_fused_mapping(idx, &empty.m, why, sizeof why), "%s", why);
    cr_assert_eq(empty.m.expert_end[0], 0);
    cr_assert_eq(ref_fused_mapping_capacity(0, 1, 1, 16), 0);
    cr_assert_eq(ref_fused_mapping_capacity(10, 2, 3, 16), 64);
    free(empty.storage);
    free(idx);
}

/* ---- generators ---------------------------------------------------------------- */

Test(moe_route_ref, parameter_lists_and_generated_indices) {
    ref_route_params params[128];
    cr_assert_eq(ref_route_params_list(false, params, 128), 12);
    int n = ref_route_params_list(true, params, 128);
    cr_assert_eq(n, 79);
    cr_assert_eq(params[0].num_send_tokens, 0);
    for (int i = 0; i < n; i += 7) {
        int64_t tokens = 0;
        int64_t *idx = ref_generate_topk_idx(&params[i], 5, &tokens);
        cr_assert(idx != NULL);
        cr_assert(tokens <= params[i].num_send_tokens * params[i].num_ep_ranks);
        if (params[i].num_ep_ranks == 1)
            cr_assert_eq(tokens, params[i].num_send_tokens, "one rank keeps every token");
        for (int64_t t = 0; t < tokens; t++) {
            bool local = false;
            for (int k = 0; k < params[i].topk; k++) {
                int64_t v = idx[t * params[i].topk + k];
                cr_assert(v >= -1 && v < params[i].num_experts);
                local = local || v >= 0;
                for (int j = 0; j < k && v >= 0; j++)
                    cr_assert_neq(idx[t * params[i].topk + j], v, "distinct experts");
            }
            cr_assert(local, "all -1 rows are dropped");
        }
        free(idx);
    }
}
