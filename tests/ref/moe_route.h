/*
 * moe_route.h -- CPU references for the MoE routing bookkeeping kernels
 * (tilekernels-spec.md sections 5.4-5.7, 5.9, 12.1): group_count, aux_fi,
 * inplace_unique_group_indices, mask_indices_by_tp, get_fused_mapping,
 * plus TileKernels' MoE input generator and a checker of the fused
 * mapping's invariants.
 *
 * Index tensors are host arrays of int64 in row-major (T, K) order; -1
 * means "no expert".  Everything here is integer arithmetic except aux_fi,
 * which is one IEEE division per expert, so the GPU must match exactly.
 */
#ifndef TK_REF_MOE_ROUTE_H
#define TK_REF_MOE_ROUTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tk.h"

/* counts[g] = #{i < count : idx[i] == g} for g < groups; other values are
 * ignored. */
void ref_group_count(const int64_t *idx, int64_t count, int groups, int32_t *counts);

/* fi[e] = f32(count_e * E) / f32(T * num_aux_topk) with integer products
 * (spec 5.4, the deterministic form of 15.22); the denominator is 1 when
 * T * num_aux_topk is 0, so T == 0 gives zeros. */
float ref_aux_fi_denominator(int64_t tokens, int num_aux_topk);
void ref_aux_fi(const int64_t *idx, int64_t tokens, int topk, int experts, int num_aux_topk,
                float *fi);

/* In place: in each row of K entries, a value in [0, 128) already seen
 * earlier in the row becomes -1 (spec 5.6).  Negative values and values
 * >= 128 are left as they are.  Returns the number of entries changed. */
int64_t ref_inplace_unique_group_indices(int64_t *idx, int64_t tokens, int topk);

/* out[i] per spec 5.7 for `count` entries of dtype TK_I64 or TK_I32.
 * per_gpu = n / num_ep_ranks must be >= 1.  False on a bad argument. */
bool ref_mask_indices_by_tp(const void *indices, tk_dtype dtype, int64_t count, int64_t n,
                            int num_ep_ranks, int tp_rank, int num_tp_ranks, void *out);

/* The seven tensors of get_fused_mapping (spec 5.9), host side.
 * capacity = length of the pos_to_* arrays. */
typedef struct ref_fused_mapping {
    int64_t tokens, topk, experts, capacity;
    int alignment;
    int32_t *pos_to_expert, *pos_to_token, *pos_to_token_topk; /* (capacity) */
    int32_t *token_topk_to_pos;                                /* (T * K)    */
    int32_t *expert_start, *expert_end, *num_tokens_per_expert; /* (E)       */
} ref_fused_mapping;

/* Capacity TileKernels allocates when num_expanded_tokens is 0:
 * (T*K + (alignment-1)*E) div alignment * alignment. */
int64_t ref_fused_mapping_capacity(int64_t tokens, int topk, int experts, int alignment);

/* Fills every array of *m (allocated by the caller to the sizes above).
 * Entries of an expert take positions start_e, start_e + 1, ... in
 * ascending flat index t*K + k (libtk's documented order).  Entries whose
 * position would be >= capacity get token_topk_to_pos = -1 and no pos_*
 * entry; values outside [-1, E) count as -1. */
void ref_get_fused_mapping(const int64_t *topk_idx, ref_fused_mapping *m);

/* Checks the invariants TileKernels' test checks (spec 5.9) for a mapping
 * of topk_idx, without assuming any order inside an expert's range.
 * Returns true, or false with a reason in `why`. */
bool ref_check_fused_mapping(const int64_t *topk_idx, const ref_fused_mapping *m, char *why,
                             size_t why_size);

/* One MoE configuration of generate_moe_params (spec 12.1). */
typedef struct ref_route_params {
    int64_t num_send_tokens; /* tokens each EP rank sends (4001, or 0)   */
    int topk;
    int total_experts;
    int num_ep_ranks;
    int num_experts;         /* total_experts / num_ep_ranks (local)     */
} ref_route_params;

/* The configurations of generate_moe_params: base mode (topk {2,6,8,9},
 * experts {72,256}, ranks {8,64}), or full mode with topk {1,7}, experts
 * {288,384}, ranks {1,72,256} and the degenerate zero-token case.  Only
 * total % ranks == 0 is kept.  Returns the number written (at most max). */
int ref_route_params_list(bool full, ref_route_params *out, int max);

/* generate_topk_idx (spec 12.1): num_send_tokens * num_ep_ranks tokens
 * each pick topk distinct experts of total_experts (uniformly, in random
 * order: the distribution of an unsorted top-k of i.i.d. scores); indices
 * >= num_experts become -1 and all -1 rows are dropped.  Returns a malloc'd
 * (T, topk) array and sets *tokens, or NULL when out of memory (and for
 * T == 0 a 1-element allocation). */
int64_t *ref_generate_topk_idx(const ref_route_params *params, uint64_t seed, int64_t *tokens);

#endif
