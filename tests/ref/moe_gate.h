/*
 * moe_gate.h -- CPU references of the MoE gates and normalize_weight
 * (tilekernels-spec.md 5.1, 5.2, 5.3, 5.8), for tests/test_ref_moe_gate.c,
 * tests/test_gpu_moe_gate.c and bench/bench_moe_gate.c.
 *
 * Selections (top-k, group ranking, masking, mapping) and normalize_weight
 * are exact: they use only comparisons, integer arithmetic, one fp32
 * addition per group score and IEEE divisions, so the GPU must match them
 * byte for byte.  top2_sum_gate's scores go through expf, which the GPU
 * computes with ex2.approx (not reproducible on a CPU): ref_gate_expf is
 * the same range reduction with exp2f in place of ex2.approx, within a few
 * ulp, and the weights are compared with the spec's tolerance (rtol 1e-5,
 * atol 1e-8).  log1pf needs no tolerance of its own: ref_gate_log1pf is
 * libdevice's sequence bit for bit.
 */
#ifndef TK_REF_MOE_GATE_H
#define TK_REF_MOE_GATE_H

#include <stdbool.h>
#include <stdint.h>

/* libdevice expf's range reduction (spec 2.1) with exp2f for ex2.approx. */
float ref_gate_expf(float x);
/* libdevice log1pf, bit for bit (every step is an IEEE operation). */
float ref_gate_log1pf(float x);
/* fp32 a + b rounded toward zero (PTX add.rz.f32). */
float ref_gate_add_rz(float a, float b);

/* topk_gate: out (T, K) int64 = indices of the K largest scores of each
 * row of scores (T, E), descending, ties to the smaller index. */
void ref_topk_gate(const float *scores, int64_t tokens, int experts, int topk,
                   int64_t *out);

/* topk_sum_and_topk_group_idx: scores (T, G, Eg) contiguous; out (T, KG). */
void ref_topk_sum_and_topk_group_idx(const float *scores, int64_t tokens,
                                     int groups, int group_size,
                                     int num_topk_sum, int num_topk_groups,
                                     int64_t *out);

/* normalize_weight: den[t] = 1e-20 + w[t,0] + ... (in order), out = w /
 * den. */
void ref_normalize_weight(const float *weights, int64_t tokens, int topk,
                          float *denominator, float *normalized);

enum { REF_SCORING_SIGMOID = 0, REF_SCORING_SQRTSOFTPLUS = 1,
       REF_SCORING_SOFTMAX = 2 };

/* Everything top2_sum_gate takes besides the tensors. */
typedef struct ref_top2_args {
    int routed_experts;          /* R */
    int num_topk;                /* K */
    int num_groups, num_topk_groups;
    int num_shared;              /* S (0 unless shared-as-routed)       */
    float routed_scaling_factor;
    int ep_rank, num_ep_ranks, tp_rank, num_tp_ranks;
    int scoring;                 /* REF_SCORING_*                       */
    int map_columns;             /* D: 0 without a map                  */
} ref_top2_args;

/* top2_sum_gate for tokens [0, T).  logits (T, R) and bias (R) are
 * contiguous; mask, fix_routing_mask (T bytes, 0 = false), map (rows, D)
 * int32, logical_count (rows) int32 and unmapped (T rows of row stride
 * unmapped_stride) may be NULL.  Outputs topk_idx / topk_weights (T, K+S)
 * contiguous; unmapped is updated as the kernel does.  margin (T floats,
 * may be NULL) receives, per token, the smallest gap between consecutive
 * ranked selection scores that decided the result (positions 0..K of the
 * expert ranking, 0..KG of the group ranking), or +inf when nothing was
 * ranked: the test inputs keep it well above the GPU/CPU expf difference. */
void ref_top2_sum_gate(const ref_top2_args *args, const float *logits,
                       const float *bias, int64_t tokens, const uint8_t *mask,
                       const uint8_t *fix_routing_mask, const int32_t *map,
                       const int32_t *logical_count, int64_t *unmapped,
                       int64_t unmapped_stride, int64_t *topk_idx,
                       float *topk_weights, float *margin);

#endif
