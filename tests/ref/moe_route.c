/*
 * moe_route.c -- CPU references of the MoE routing bookkeeping kernels and
 * TileKernels' MoE input generator (tilekernels-spec.md 5.4-5.7, 5.9, 12.1).
 *
 * The references are written as directly as the spec states them: one
 * pass over the flat entries for counts, a running per-expert cursor for
 * the fused mapping (which is what fixes libtk's ascending order), and the
 * element rule of mask_indices_by_tp in int64 with truncating division.
 * The inputs are a few hundred thousand entries, so nothing here needs
 * threads.
 */
#include "moe_route.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reference.h"

void ref_group_count(const int64_t *idx, int64_t count, int groups, int32_t *counts) {
    memset(counts, 0, (size_t)groups * sizeof *counts);
    for (int64_t i = 0; i < count; i++)
        if (idx[i] >= 0 && idx[i] < groups)
            counts[idx[i]]++;
}

float ref_aux_fi_denominator(int64_t tokens, int num_aux_topk) {
    int64_t product = tokens * (int64_t)num_aux_topk;
    return product == 0 ? 1.0f : (float)product;
}

void ref_aux_fi(const int64_t *idx, int64_t tokens, int topk, int experts, int num_aux_topk,
                float *fi) {
    int32_t *counts = malloc((size_t)experts * sizeof *counts);
    if (!counts)
        abort();
    ref_group_count(idx, tokens * topk, experts, counts);
    float denominator = ref_aux_fi_denominator(tokens, num_aux_topk);
    for (int e = 0; e < experts; e++)
        fi[e] = (float)((int64_t)counts[e] * experts) / denominator;
    free(counts);
}

int64_t ref_inplace_unique_group_indices(int64_t *idx, int64_t tokens, int topk) {
    int64_t changed = 0;
    for (int64_t t = 0; t < tokens; t++) {
        bool seen[128] = {false};
        for (int k = 0; k < topk; k++) {
            int64_t v = idx[t * topk + k];
            if (v < 0 || v >= 128)
                continue;
            if (seen[v]) {
                idx[t * topk + k] = -1;
                changed++;
            } else {
                seen[v] = true;
            }
        }
    }
    return changed;
}

/* The element rule of spec 5.7 with C's truncating division. */
static int64_t mask_one(int64_t v, int64_t per_gpu, int64_t per_dp, int64_t tp_rank,
                        int64_t num_tp_ranks) {
    if (v < 0 || (v / per_gpu) % num_tp_ranks != tp_rank)
        return -1;
    int64_t local = v - tp_rank * per_gpu;
    int64_t dp = local / per_dp;
    int64_t renumbered = local - dp * (per_dp - per_gpu);
    return renumbered >= 0 ? renumbered : -1;
}

bool ref_mask_indices_by_tp(const void *indices, tk_dtype dtype, int64_t count, int64_t n,
                            int num_ep_ranks, int tp_rank, int num_tp_ranks, void *out) {
    if ((dtype != TK_I64 && dtype != TK_I32) || num_ep_ranks < 1 || num_tp_ranks < 1 ||
        tp_rank < 0 || tp_rank >= num_tp_ranks || n / num_ep_ranks < 1)
        return false;
    int64_t per_gpu = n / num_ep_ranks, per_dp = num_tp_ranks * per_gpu;
    for (int64_t i = 0; i < count; i++) {
        if (dtype == TK_I64)
            ((int64_t *)out)[i] = mask_one(((const int64_t *)indices)[i], per_gpu, per_dp,
                                           tp_rank, num_tp_ranks);
        else
            ((int32_t *)out)[i] = (int32_t)mask_one(((const int32_t *)indices)[i], per_gpu,
                                                    per_dp, tp_rank, num_tp_ranks);
    }
    return true;
}

int64_t ref_fused_mapping_capacity(int64_t tokens, int topk, int experts, int alignment) {
    return (tokens * topk + (int64_t)(alignment - 1) * experts) / alignment * alignment;
}

void ref_get_fused_mapping(const int64_t *topk_idx, ref_fused_mapping *m) {
    int64_t entries = m->tokens * m->topk;
    int64_t *cursor = calloc((size_t)m->experts + 1, sizeof *cursor);
    if (!cursor)
        abort();
    for (int64_t p = 0; p < m->capacity; p++)
        m->pos_to_expert[p] = m->pos_to_token[p] = m->pos_to_token_topk[p] = -1;
    for (int64_t e = 0; e < m->experts; e++)
        m->num_tokens_per_expert[e] = 0;
    for (int64_t i = 0; i < entries; i++)
        if (topk_idx[i] >= 0 && topk_idx[i] < m->experts)
            m->num_tokens_per_expert[topk_idx[i]]++;
    int64_t start = 0;
    for (int64_t e = 0; e < m->experts; e++) {
        int64_t count = m->num_tokens_per_expert[e];
        int64_t aligned = (count + m->alignment - 1) / m->alignment * m->alignment;
        m->expert_start[e] = (int32_t)start;
        m->expert_end[e] = (int32_t)(start + aligned);
        m->num_tokens_per_expert[e] = (int32_t)aligned;
        cursor[e] = start;
        start += aligned;
    }
    for (int64_t i = 0; i < entries; i++) {
        int64_t e = topk_idx[i];
        m->token_topk_to_pos[i] = -1;
        if (e < 0 || e >= m->experts)
            continue;
        int64_t p = cursor[e]++;
        if (p >= m->capacity)
            continue;
        m->token_topk_to_pos[i] = (int32_t)p;
        m->pos_to_expert[p] = (int32_t)e;
        m->pos_to_token[p] = (int32_t)(i / m->topk);
        m->pos_to_token_topk[p] = (int32_t)i;
    }
    free(cursor);
}

#define FAIL(...)                                       \
    do {                                                \
        snprintf(why, why_size, __VA_ARGS__);           \
        free(count);                                    \
        return false;                                   \
    } while (0)

bool ref_check_fused_mapping(const int64_t *topk_idx, const ref_fused_mapping *m, char *why,
                             size_t why_size) {
    int64_t entries = m->tokens * m->topk;
    int64_t *count = calloc((size_t)m->experts + 1, sizeof *count);
    if (!count)
        abort();
    for (int64_t i = 0; i < entries; i++)
        if (topk_idx[i] >= 0 && topk_idx[i] < m->experts)
            count[topk_idx[i]]++;
    int64_t start = 0;
    for (int64_t e = 0; e < m->experts; e++) {
        int64_t aligned = (count[e] + m->alignment - 1) / m->alignment * m->alignment;
        if (m->num_tokens_per_expert[e] != aligned)
            FAIL("num_tokens_per_expert[%lld] is %d, expected align(%lld, %d) = %lld",
                 (long long)e, m->num_tokens_per_expert[e], (long long)count[e], m->alignment,
                 (long long)aligned);
        if (m->expert_start[e] != start || m->expert_end[e] != start + aligned)
            FAIL("expert %lld: range [%d, %d), expected [%lld, %lld)", (long long)e,
                 m->expert_start[e], m->expert_end[e], (long long)start,
                 (long long)(start + aligned));
        /* inside the range: exactly count_e e's, first, then -1 padding */
        for (int64_t p = start; p < start + aligned && p < m->capacity; p++) {
            int32_t want = p < start + count[e] ? (int32_t)e : -1;
            if (m->pos_to_expert[p] != want)
                FAIL("pos_to_expert[%lld] is %d, expected %d (expert %lld, count %lld)",
                     (long long)p, m->pos_to_expert[p], want, (long long)e,
                     (long long)count[e]);
        }
        start += aligned;
    }
    for (int64_t p = start; p < m->capacity; p++)
        if (m->pos_to_expert[p] != -1)
            FAIL("pos_to_expert[%lld] is %d past the last expert's end %lld", (long long)p,
                 m->pos_to_expert[p], (long long)start);
    /* round trips: (t,k) -> p -> (t,k), and p -> (t,k) -> p */
    for (int64_t i = 0; i < entries; i++) {
        int64_t e = topk_idx[i];
        int32_t p = m->token_topk_to_pos[i];
        bool routed = e >= 0 && e < m->experts;
        if (!routed || p < 0) {
            if (p != -1 || (routed && m->expert_start[e] + count[e] <= m->capacity))
                FAIL("token_topk_to_pos[%lld] is %d for expert %lld", (long long)i, p,
                     (long long)e);
            continue;
        }
        if (p >= m->capacity || m->pos_to_expert[p] != e || m->pos_to_token_topk[p] != i ||
            m->pos_to_token[p] != i / m->topk)
            FAIL("entry %lld (expert %lld) -> position %d does not map back", (long long)i,
                 (long long)e, p);
    }
    for (int64_t p = 0; p < m->capacity; p++) {
        bool used = m->pos_to_expert[p] >= 0;
        if (!used) {
            if (m->pos_to_token[p] != -1 || m->pos_to_token_topk[p] != -1)
                FAIL("padding position %lld holds token %d, token_topk %d", (long long)p,
                     m->pos_to_token[p], m->pos_to_token_topk[p]);
            continue;
        }
        int32_t i = m->pos_to_token_topk[p];
        if (i < 0 || i >= entries || m->token_topk_to_pos[i] != p)
            FAIL("position %lld -> entry %d does not map back", (long long)p, i);
    }
    free(count);
    return true;
}

int ref_route_params_list(bool full, ref_route_params *out, int max) {
    static const int base_topk[] = {2, 6, 8, 9}, full_topk[] = {1, 2, 6, 7, 8, 9};
    static const int base_experts[] = {72, 256}, full_experts[] = {72, 256, 288, 384};
    static const int base_ranks[] = {8, 64}, full_ranks[] = {1, 8, 64, 72, 256};
    const int *topks = full ? full_topk : base_topk, *experts = full ? full_experts : base_experts;
    const int *ranks = full ? full_ranks : base_ranks;
    int ntopk = full ? 6 : 4, nexperts = full ? 4 : 2, nranks = full ? 5 : 2;
    int n = 0;
    if (full && n < max)
        out[n++] = (ref_route_params){0, 1, 1, 1, 1};
    for (int a = 0; a < ntopk; a++)
        for (int b = 0; b < nexperts; b++)
            for (int c = 0; c < nranks; c++) {
                if (experts[b] % ranks[c] != 0 || n >= max)
                    continue;
                out[n++] = (ref_route_params){4001, topks[a], experts[b], ranks[c],
                                            experts[b] / ranks[c]};
            }
    return n;
}

int64_t *ref_generate_topk_idx(const ref_route_params *params, uint64_t seed, int64_t *tokens) {
    int64_t senders = params->num_send_tokens * params->num_ep_ranks;
    int topk = params->topk;
    int64_t *idx = malloc((size_t)(senders > 0 ? senders : 1) * (size_t)topk * sizeof *idx);
    if (!idx)
        return NULL;
    int64_t kept = 0;
    for (int64_t s = 0; s < senders; s++) {
        ref_rng rng = ref_rng_seed(seed, (uint64_t)s);
        int64_t *row = idx + kept * topk;
        bool local = false;
        /* distinct experts (rejection, topk << total_experts); remote
         * ones become -1 */
        ref_rng_distinct(&rng, (uint64_t)params->total_experts, topk, row);
        for (int k = 0; k < topk; k++) {
            local = local || row[k] < params->num_experts;
            if (row[k] >= params->num_experts)
                row[k] = -1;
        }
        if (local)
            kept++;
    }
    *tokens = kept;
    return idx;
}
