/*
 * moe_fused.h -- CPU references of expand_to_fused, expand_to_fused_with_sf
 * and reduce_fused (tilekernels-spec.md 5.10, 5.11), and the host-side
 * routing they need: TileKernels' MoE test draw (spec 12.1,
 * generate_moe_params / generate_topk_idx) and the fused mapping of
 * get_fused_mapping (spec 5.9).  Used by tests/test_ref_moe_fused.c,
 * tests/test_gpu_moe_fused.c and bench/bench_moe_fused.c.
 *
 * Expansion is data movement and exact.  reduce_fused is exact too: the
 * spec fixes the order of its sum (k = 0 .. K-1) and says every term is one
 * fused multiply-add into an f32 accumulator that starts at +0, which the
 * reference computes with fmaf (correctly rounded, like the GPU's
 * fma.rn.f32).
 */
#ifndef TK_REF_MOE_FUSED_H
#define TK_REF_MOE_FUSED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tk.h"

/* ---- routing ----------------------------------------------------------- */

/* One entry of TileKernels' generate_moe_params: every EP rank sends
 * send_tokens tokens, each routed to topk of total_experts experts; rank 0
 * owns experts [0, total_experts / ep_ranks). */
typedef struct ref_moe_params {
    int64_t send_tokens;
    int topk;
    int total_experts;
    int ep_ranks;
} ref_moe_params;

/* Local experts of rank 0: total_experts / ep_ranks. */
int ref_moe_local_experts(const ref_moe_params *params);

/* generate_topk_idx for rank 0: send_tokens * ep_ranks tokens draw one
 * bf16 score per expert (uniform in [0, 1), rounded to bf16, so ties are
 * common as in the original) and take the topk largest, ties to the
 * smaller index; indices of other ranks' experts become -1 and tokens with
 * no local expert are dropped.  Returns the number of tokens kept (T) and
 * stores their rows (T, topk) in *topk_idx (malloc'd; NULL when T == 0).
 * Reproducible for a seed, whatever the thread count; -1 on allocation
 * failure. */
int64_t ref_moe_draw_topk_idx(const ref_moe_params *params, uint64_t seed,
                              int32_t **topk_idx);

/* get_fused_mapping (spec 5.9) with the capacity trimmed to the aligned
 * counts (the synced form): N = sum over experts of align(count_e,
 * alignment).  Inside an expert's range the (t, k) entries are placed in
 * increasing flat index t * K + k (any deterministic order satisfies the
 * spec).  Arrays are malloc'd by ref_moe_mapping_build. */
typedef struct ref_moe_mapping {
    int64_t tokens;          /* T                                         */
    int topk;                /* K                                         */
    int experts;             /* E                                         */
    int64_t expanded;        /* N                                         */
    int64_t routed;          /* (t, k) with an expert: sum of count_e     */
    int32_t *pos_to_expert;      /* (N), -1 for padding                   */
    int32_t *pos_to_token;       /* (N), -1 for padding                   */
    int32_t *pos_to_token_topk;  /* (N), t * K + k, -1 for padding        */
    int32_t *token_topk_to_pos;  /* (T, K), -1 where topk_idx is -1       */
    int32_t *expert_start;       /* (E)                                   */
    int32_t *expert_end;         /* (E)                                   */
    int32_t *tokens_per_expert;  /* (E), the aligned counts               */
} ref_moe_mapping;

/* False (mapping zeroed) on a bad argument (an index outside [-1, E),
 * alignment < 1) or allocation failure. */
bool ref_moe_mapping_build(const int32_t *topk_idx, int64_t tokens, int topk,
                           int experts, int alignment,
                           ref_moe_mapping *mapping);
void ref_moe_mapping_free(ref_moe_mapping *mapping);

/* ---- expand_to_fused ----------------------------------------------------- */

/* out[p, :] = x[t, :] for every (t, k) with p = token_topk_to_pos[t, k] in
 * [0, expanded), out[p, :] = 0 where pos_to_expert[p] < 0; other rows are
 * left as they are (the kernel leaves them unwritten, spec 15.12).  x has
 * `tokens` rows of `row_bytes` bytes at a stride of `x_stride_bytes`; out
 * is contiguous (expanded, row_bytes). */
void ref_expand_to_fused(const void *x, int64_t tokens, size_t row_bytes,
                         size_t x_stride_bytes,
                         const int32_t *token_topk_to_pos, int topk,
                         const int32_t *pos_to_expert, int64_t expanded,
                         void *out);

/* Scale words per row for expand_to_fused_with_sf: ceil(hidden / npc)
 * f32 scales, or ceil(ceil(hidden / npc) / 4) packed UE8M0 words. */
int64_t ref_expand_sf_words(int64_t hidden, int num_per_channels,
                            tk_sf_layout layout);
/* Index (in 32-bit words) of scale word j of fused row p in an out_sf
 * buffer of `layout` for `expanded` rows: p * words + j row-major,
 * j * align(expanded, 4) + p in the column-major layouts. */
int64_t ref_expand_sf_index(int64_t expanded, int64_t words,
                            tk_sf_layout layout, int64_t p, int64_t j);

/* The scale part of expand_to_fused_with_sf: x_sf (tokens, words) 32-bit
 * words contiguous; out_sf laid out by ref_expand_sf_index.  Padding rows
 * get zero words, referenced rows the token's words; other entries (and
 * the column-major padding) are left as they are. */
void ref_expand_sf(const uint32_t *x_sf, int64_t tokens, int64_t words,
                   const int32_t *token_topk_to_pos, int topk,
                   const int32_t *pos_to_expert, int64_t expanded,
                   tk_sf_layout layout, uint32_t *out_sf);

/* ---- reduce_fused -------------------------------------------------------- */

/* out[t, h] = cvt(scale * acc) with acc = +0 then, for k = 0 .. K-1 with
 * p = token_topk_to_pos[t, k] >= 0: acc = fmaf(x[p, h], s, acc), s =
 * (weights ? weights[t, k] : 1) * (x_sf ? x_sf[p] : 1 -- applied only
 * when x_sf is given); scale applied only when sf != NULL (acc * sf[0]).
 * x (rows, hidden) f32, bf16 or e4m3 with row stride x_stride (elements);
 * out (tokens, hidden) contiguous f32, bf16 or e4m3 (sat_e4m3).  weights
 * (tokens, K), x_sf and sf may be NULL.  False on a bad dtype. */
bool ref_reduce_fused(const void *x, tk_dtype x_dtype, int64_t x_stride,
                      int64_t hidden, const float *weights,
                      const int32_t *token_topk_to_pos, int64_t tokens,
                      int topk, const float *x_sf, const float *sf,
                      tk_dtype out_dtype, void *out);

#endif
