/*
 * tk.h -- public C interface of libtk, the tkc kernel library.
 *
 * libtk embeds the cubin that tkc builds from kernels.tk and exposes one C
 * function per kernel.  Every function takes tensor descriptors (device
 * pointer, dtype, shape, strides in elements) and a CUstream, validates
 * every argument before launching anything, and returns a tk_status.  On
 * failure tk_last_error() names the bad argument.  The library never
 * prints and never exits.  It uses the calling thread's current CUDA
 * context, or makes device 0's primary context current if there is none,
 * and is safe to call from several threads (docs/runtime.md).
 *
 * Tensors are never allocated by the library: the caller passes outputs.
 * tk_sf_desc() computes the shape and strides TileKernels uses for
 * scale-factor buffers, so callers can allocate them.
 */
#ifndef TK_H
#define TK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Exported from libtk.so (built with hidden visibility by default). */
#if defined(__GNUC__)
#define TK_API __attribute__((visibility("default")))
#else
#define TK_API
#endif

/* Opaque so that tk.h does not require cuda.h; pass a CUstream. */
typedef struct CUstream_st *tk_stream;

#define TK_MAX_RANK 6

typedef enum tk_status {
    TK_SUCCESS = 0,
    TK_ERROR_INVALID_ARGUMENT = 1, /* a descriptor or option is wrong     */
    TK_ERROR_UNSUPPORTED = 2,      /* valid, but no kernel instance for it */
    TK_ERROR_NO_DEVICE = 3,        /* no driver, or no CUDA device         */
    TK_ERROR_DRIVER = 4,           /* a CUDA driver call failed            */
    TK_ERROR_LAUNCH = 5            /* the launch itself failed             */
} tk_status;

/* Element types.  Names match the .tk dtypes.  E2M1 data is stored packed,
 * two per byte; TileKernels' tensors for it are I8 with half the columns,
 * and that is what the API takes. */
typedef enum tk_dtype {
    TK_VOID = 0, TK_BOOL, TK_I8, TK_U8, TK_I16, TK_U16, TK_I32, TK_U32,
    TK_I64, TK_U64, TK_F16, TK_BF16, TK_F32, TK_F64, TK_E4M3, TK_E5M2,
    TK_E2M1, TK_UE8M0
} tk_dtype;

typedef struct tk_tensor {
    void *data;                     /* device pointer (a CUdeviceptr) */
    tk_dtype dtype;
    int rank;
    int64_t shape[TK_MAX_RANK];
    int64_t strides[TK_MAX_RANK];   /* in elements */
} tk_tensor;

/* Human-readable name of a status. */
TK_API const char *tk_status_string(tk_status status);
/* Message of the last failed call on this thread ("" if none). */
TK_API const char *tk_last_error(void);
/* Bytes per element (0 for TK_VOID; E2M1 reports 1: packed pairs). */
TK_API size_t tk_dtype_size(tk_dtype dtype);
/* TK_SUCCESS if a CUDA device is usable; loads nothing else. */
TK_API tk_status tk_device_check(void);

/* Convenience: a contiguous descriptor.  A rank outside [0, TK_MAX_RANK]
 * or a NULL shape gives rank -1, which every function rejects. */
TK_API tk_tensor tk_tensor_contiguous(void *data, tk_dtype dtype, int rank,
                                      const int64_t *shape);

/* Scale-factor layouts of tilekernels-spec.md section 3.5. */
typedef enum tk_sf_layout {
    TK_SF_ROW_MAJOR = 0,      /* f32 (nbm, nbk), strides (nbk, 1)         */
    TK_SF_COL_MAJOR = 1,      /* f32 (nbm, nbk), strides (1, align(nbm,4))*/
    TK_SF_PACKED_UE8M0 = 2    /* i32 (nbm, ceil(nbk/4)),
                                 strides (1, align(nbm,4)); byte k%4 of
                                 word [i, k/4] is block (i,k)'s exponent */
} tk_sf_layout;

/* Fills *desc (data NULL) with the dtype, shape and strides of the SF
 * tensor for a (rows, cols) matrix cut into (block_m, block_k) blocks,
 * and *bytes with the allocation it needs (padding included). */
TK_API tk_status tk_sf_desc(int64_t rows, int64_t cols, int block_m,
                            int block_k, tk_sf_layout layout, tk_tensor *desc,
                            size_t *bytes);

/* ---- transpose (tilekernels-spec.md section 7) ----------------------- */

/* out[b, j, i] = x[b, i, j].  x (B, X, Y) of any 1-, 2- or 4-byte dtype
 * but e2m1 (transposition only moves bits) with X % 64 == 0,
 * Y % 64 == 0, stride[2] == 1, stride[1] % 4 == 0, stride[1] >= Y and
 * stride[0] == X * stride[1]; out (B, Y, X) contiguous, same dtype. */
TK_API tk_status tk_batched_transpose(const tk_tensor *x,
                                      const tk_tensor *out, tk_stream stream);
/* 2-D form: x (X, Y) with a row stride >= Y, out (Y, X) contiguous. */
TK_API tk_status tk_transpose(const tk_tensor *x, const tk_tensor *out,
                              tk_stream stream);

/* ---- casts (tilekernels-spec.md section 6) --------------------------- */

/* per_token_cast to e4m3: x (T, H) f32 or bf16, row stride any multiple
 * of the 16-byte vector is fast, any other row stride works; H % 64 == 0.
 * One scale per row per num_per_channels (32, 64 or 128) columns.
 * out (T, H) e4m3 contiguous; out_sf as tk_sf_desc(T, H, 1,
 * num_per_channels, sf_layout) describes.  TK_SF_PACKED_UE8M0 requires
 * round_sf. */
TK_API tk_status tk_per_token_cast(const tk_tensor *x, int num_per_channels,
                                   bool round_sf, tk_sf_layout sf_layout,
                                   const tk_tensor *out,
                                   const tk_tensor *out_sf, tk_stream stream);

/* out = to_dtype(f32(x) * sf) with x (T, H) e4m3, H % 64 == 0, sf in any
 * layout of tk_sf_layout for (block_m, block_k) blocks (layout read from
 * its dtype and strides), out (T, H) bf16 or f32 contiguous.  Blocks:
 * 1x32, 1x64, 1x128, 128x128, 128x1, 32x32 (f32 SF); 1x32, 1x64, 1x128,
 * 128x128 (packed); others give TK_ERROR_UNSUPPORTED. */
TK_API tk_status tk_cast_back(const tk_tensor *x, const tk_tensor *sf,
                              int block_m, int block_k, const tk_tensor *out,
                              tk_stream stream);
/* cast_back with (1, num_per_channels) blocks. */
TK_API tk_status tk_per_token_cast_back(const tk_tensor *x,
                                        const tk_tensor *sf,
                                        int num_per_channels,
                                        const tk_tensor *out,
                                        tk_stream stream);

/* ---- per-channel casts (tilekernels-spec.md sections 6.6-6.8) -------- */

/* One e4m3 scale per column per num_per_tokens rows: the |max| runs down
 * the rows.  Scale factors are f32 (ceil(rows / num_per_tokens), H),
 * contiguous: tk_sf_desc(rows, H, num_per_tokens, 1, TK_SF_ROW_MAJOR),
 * i.e. ceil(rows / num_per_tokens) * H * 4 bytes, element [b, h] the
 * dequantisation scale of rows b*num_per_tokens .. +num_per_tokens-1 of
 * column h.  x: H % 64 == 0, rows contiguous, a row stride >= H that is a
 * multiple of 16 bytes (TileKernels takes contiguous x only). */

/* per_channel_cast: x (T, H) f32 or bf16 with T % 128 == 0;
 * num_per_tokens must be 128; out (T, H) e4m3 contiguous; out_sf as
 * above with T rows. */
TK_API tk_status tk_per_channel_cast(const tk_tensor *x, int num_per_tokens,
                                     bool round_sf, const tk_tensor *out,
                                     const tk_tensor *out_sf,
                                     tk_stream stream);

/* per_channel_cast_fused: x (T, H) f32 or bf16 (x_sf NULL,
 * num_per_channels 0), or e4m3 data with x_sf f32 (T, ceil(H / 128)) in
 * any strides and num_per_channels 128: the value quantised is
 * (f32(x) * x_sf[t, h / 128]) * inv.  num_per_tokens must be 128.
 * pos_to_token NULL: N = T rows, T % 128 == 0.  Otherwise i32 (N,)
 * contiguous, N % 16 == 0: output row r reads input row pos_to_token[r],
 * and a negative entry (or one >= T) gives a zero row; rows past N in the
 * last 128-row block do not take part in its |max|.  out (N, H) e4m3
 * contiguous; out_sf as above with N rows. */
TK_API tk_status tk_per_channel_cast_fused(const tk_tensor *x,
                                           const tk_tensor *x_sf,
                                           int num_per_channels,
                                           int num_per_tokens, bool round_sf,
                                           const tk_tensor *pos_to_token,
                                           const tk_tensor *out,
                                           const tk_tensor *out_sf,
                                           tk_stream stream);

/* per_channel_cast_and_transpose: x (T, H) bf16 with T % 128 == 0;
 * num_per_tokens 32 or 128; out (H, T) e4m3 contiguous, out[h, t] the
 * quantised x[t, h]; out_sf as above with T rows. */
TK_API tk_status tk_per_channel_cast_and_transpose(const tk_tensor *x,
                                                   int num_per_tokens,
                                                   bool round_sf,
                                                   const tk_tensor *out,
                                                   const tk_tensor *out_sf,
                                                   tk_stream stream);

/* ---- MoE gating (tilekernels-spec.md sections 5.1-5.3, 5.8) ---------- */

/* topk_gate: topk_idx[t, k] = index of the k-th largest of scores[t, :],
 * descending, ties to the smaller index.  scores f32 (T, E) contiguous,
 * E % 4 == 0, E <= 512; topk_idx i64 (T, K) contiguous, 1 <= K <= E. */
TK_API tk_status tk_topk_gate(const tk_tensor *scores,
                              const tk_tensor *topk_idx, tk_stream stream);

/* topk_sum_and_topk_group_idx: scores f32 (T, G, Eg) contiguous, G <= 32,
 * Eg <= 64 when Eg % 4 == 0, else Eg <= 32; each group scored by its
 * largest value (num_topk_sum 1) or largest + second largest (2, Eg >=
 * 2); group_idx i64 (T, KG) contiguous, 1 <= KG <= G, receives the KG
 * best groups, descending, ties to the smaller group. */
TK_API tk_status tk_topk_sum_and_topk_group_idx(const tk_tensor *scores,
                                                int num_topk_sum,
                                                const tk_tensor *group_idx,
                                                tk_stream stream);

/* Scoring functions (TileKernels' ScoringFunc, same numbering). */
typedef enum tk_scoring_func {
    TK_SCORING_SIGMOID = 0,       /* 1 / (1 + expf(-x))                  */
    TK_SCORING_SQRTSOFTPLUS = 1,  /* sqrt(x > 20 ? x : log1pf(expf(x)))  */
    TK_SCORING_SOFTMAX = 2,       /* expf(x - max) / sum; ranks x + bias */
    TK_SCORING_IDENTITY = 3       /* rejected by tk_top2_sum_gate, as in
                                     TileKernels                         */
} tk_scoring_func;

/* The scalar arguments of top2_sum_gate (spec 5.3). */
typedef struct tk_top2_sum_gate_options {
    int num_topk;                 /* K: 1 ... min(R, 32)                 */
    int num_topk_groups;          /* KG; 0 with num_groups 0             */
    int num_groups;               /* G; G != KG selects by group         */
    bool use_shared_as_routed;    /* false: num_shared_experts ignored   */
    int num_shared_experts;       /* S: 1 or 2                           */
    float routed_scaling_factor;
    int ep_rank, num_ep_ranks;
    int tp_rank, num_tp_ranks;
    tk_scoring_func scoring_func; /* sigmoid, sqrtsoftplus or softmax    */
} tk_top2_sum_gate_options;

/* top2_sum_gate, the MoE router.  logits f32 (T, R) contiguous, R % 4 ==
 * 0, R <= 384; bias f32 (R).  Optional (NULL = absent): mask and
 * fix_routing_mask bool (T); to_physical_map i32 (rows >= R + S, D) with
 * logical_count i32 (rows), both contiguous (D - 1 extra experts, needed
 * for shared experts); unmapped_topk_idx i64 (T, K) with any row stride
 * >= K, read for fixed routing and written with the logical selection
 * (fix_routing_mask requires it).  Outputs topk_idx i64 and topk_weights
 * f32 (T, K + S) contiguous: routed slots in selection order, then the
 * shared experts.  Masked tokens get -1 / 0.  Grouped mode needs G <= 32,
 * R / G <= 32 and K <= KG * R / G.  Every bool tensor, like every tensor,
 * must be 16-byte aligned. */
TK_API tk_status tk_top2_sum_gate(const tk_tensor *logits,
                                  const tk_tensor *bias,
                                  const tk_top2_sum_gate_options *options,
                                  const tk_tensor *mask,
                                  const tk_tensor *fix_routing_mask,
                                  const tk_tensor *to_physical_map,
                                  const tk_tensor *logical_count,
                                  const tk_tensor *unmapped_topk_idx,
                                  const tk_tensor *topk_idx,
                                  const tk_tensor *topk_weights,
                                  tk_stream stream);

/* normalize_weight: denominator[t] = 1e-20 + w[t, 0] + ... + w[t, K-1]
 * (in this order), normalized = w / denominator.  topk_weights f32 (T, K),
 * denominator f32 (T), normalized f32 (T, K), all contiguous. */
TK_API tk_status tk_normalize_weight(const tk_tensor *topk_weights,
                                     const tk_tensor *denominator,
                                     const tk_tensor *normalized,
                                     tk_stream stream);

/* ---- MoE expansion and reduction (tilekernels-spec.md 5.10, 5.11) ----
 * The mapping tensors are get_fused_mapping's (spec 5.9):
 * token_topk_to_pos i32 (T, K), the fused row of token t's k-th expert
 * (-1: none), and pos_to_expert i32 (N), negative for padding rows; both
 * contiguous.  Positions outside [0, N) are never accessed. */

/* out[p, :] = x[t, :] for every p = token_topk_to_pos[t, k] >= 0 and
 * out[p, :] = 0 where pos_to_expert[p] < 0; rows that neither covers are
 * left unwritten (a get_fused_mapping mapping has none).  x (T, H) of any
 * 1-, 2- or 4-byte dtype (bits are copied; packed e2m1 as i8), contiguous
 * rows, any row stride >= H (16-byte multiples are fast); out (N, H) same
 * dtype, contiguous.  T == 0 launches nothing (out is not written). */
TK_API tk_status tk_expand_to_fused(const tk_tensor *x,
                                    const tk_tensor *token_topk_to_pos,
                                    const tk_tensor *pos_to_expert,
                                    const tk_tensor *out, tk_stream stream);

/* expand_to_fused of quantised data and its scales: x (T, H) as for
 * tk_expand_to_fused (e4m3 in TileKernels); num_per_channels 32 or 128;
 * x_sf the token-major scales, contiguous: f32 (T, ceil(H / npc)) for
 * sf_layout TK_SF_ROW_MAJOR or TK_SF_COL_MAJOR, i32 packed UE8M0 words
 * (T, ceil(ceil(H / npc) / 4)) for TK_SF_PACKED_UE8M0.  out (N, H) like
 * x; out_sf exactly tk_sf_desc(N, H, 1, num_per_channels, sf_layout):
 * row-major (N, nbk) or column-major with strides (1, align(N, 4)) in a
 * buffer of tk_sf_desc's bytes.  out_sf[p, :] = x_sf[t, :] (whole words:
 * unused bytes of a packed word are copied too), zero for padding rows;
 * the column-major padding entries are not written. */
TK_API tk_status tk_expand_to_fused_with_sf(
    const tk_tensor *x, const tk_tensor *x_sf, int num_per_channels,
    const tk_tensor *token_topk_to_pos, const tk_tensor *pos_to_expert,
    tk_sf_layout sf_layout, const tk_tensor *out, const tk_tensor *out_sf,
    tk_stream stream);

/* out[t, :] = cvt(scale * acc), acc = +0 then, for k = 0 .. K-1 in this
 * order with p = token_topk_to_pos[t, k] >= 0,
 * acc = fma(f32(x[p, :]), w[t, k] * x_sf[p], acc) -- one rounding per term;
 * w = 1 without topk_weights, the x_sf factor only with x_sf, scale =
 * sf[0] only with sf.  x (N, H) f32, bf16 or e4m3, H % 256 == 0,
 * contiguous rows with a row stride that is a multiple of 16 bytes;
 * x_sf f32 (N) or NULL (TileKernels' QuantTensor input); topk_weights f32
 * (T, K) or NULL; sf f32 (1) or NULL, only with an e4m3 out; out (T, H)
 * contiguous, x's dtype or e4m3 (saturating: |v| > 448 gives +-448).  out
 * is overwritten, never accumulated into. */
TK_API tk_status tk_reduce_fused(const tk_tensor *x, const tk_tensor *x_sf,
                                 const tk_tensor *topk_weights,
                                 const tk_tensor *token_topk_to_pos,
                                 const tk_tensor *sf, const tk_tensor *out,
                                 tk_stream stream);

/* ---- MoE routing (tilekernels-spec.md sections 5.4-5.7, 5.9) -------- */

/* Index tensors are int64 (T, K), contiguous, -1 meaning "no expert".
 * group_count: counts[g] = number of entries equal to g; counts i32 (G),
 * 1 <= G <= 4096 (G is counts' length).  Values outside [0, G) are not
 * counted (TileKernels traps on them).  T == 0 writes zeros.  One launch. */
TK_API tk_status tk_group_count(const tk_tensor *group_idx,
                                const tk_tensor *counts, tk_stream stream);

/* aux_fi: fi[e] = f32(count_e * E) / f32(T * num_aux_topk), integer
 * counts and one IEEE division (deterministic; TileKernels sums float
 * atomics).  fi f32 (E), 1 <= E <= 4096; num_aux_topk >= 1.  T == 0
 * writes zeros.  One launch. */
TK_API tk_status tk_aux_fi(const tk_tensor *topk_idx, int num_aux_topk,
                           const tk_tensor *fi, tk_stream stream);

/* In place: in each row, a value already seen earlier in the row becomes
 * -1 (first occurrence kept).  group_indices int64 (T, K) contiguous;
 * 1 <= num_groups <= 128.  Values in [0, 128) are deduplicated; negative
 * values and values >= 128 are left unchanged.  One launch (none if
 * T == 0). */
TK_API tk_status tk_inplace_unique_group_indices(const tk_tensor *group_indices,
                                                 int num_groups,
                                                 tk_stream stream);

/* out = indices renumbered for TP rank tp_rank or -1 (spec 5.7), with
 * per_gpu = n / num_ep_ranks (>= 1) and per_dp = num_tp_ranks * per_gpu.
 * indices and out (T, K) int64 or int32 (the same), contiguous;
 * 0 <= tp_rank < num_tp_ranks.  One launch (none if T == 0). */
TK_API tk_status tk_mask_indices_by_tp(const tk_tensor *indices, int64_t n,
                                       int num_ep_ranks, int tp_rank,
                                       int num_tp_ranks, const tk_tensor *out,
                                       tk_stream stream);

/* The outputs of get_fused_mapping (spec 5.9), all int32 and contiguous.
 * N, the capacity, is pos_to_expert's length (TileKernels'
 * num_expanded_tokens; tk_fused_mapping_capacity gives its automatic
 * value, which always suffices). */
typedef struct tk_fused_mapping {
    tk_tensor pos_to_expert;         /* (N): expert of a position, or -1   */
    tk_tensor pos_to_token;          /* (N): token t, or -1                */
    tk_tensor pos_to_token_topk;     /* (N): flat t * K + k, or -1         */
    tk_tensor token_topk_to_pos;     /* (T, K): position, or -1            */
    tk_tensor expert_start;          /* (E): first position of expert e    */
    tk_tensor expert_end;            /* (E): start + aligned count         */
    tk_tensor num_tokens_per_expert; /* (E): align(count_e, alignment)     */
} tk_fused_mapping;

/* (T*K + (alignment-1)*E) / alignment * alignment, or -1 for a bad
 * argument. */
TK_API int64_t tk_fused_mapping_capacity(int64_t num_tokens, int num_topk,
                                         int num_experts, int alignment);

/* Number of int32 entries of the workspace tk_get_fused_mapping needs
 * (per-chunk, per-expert counts: at most 256 * num_experts). */
TK_API tk_status tk_get_fused_mapping_workspace_size(int64_t num_tokens,
                                                     int num_topk,
                                                     int num_experts,
                                                     int64_t *elements);

/* Builds the expert-major layout of topk_idx (T, K) int64 for
 * 1 <= num_experts <= 1024 and alignment >= 1, without any host
 * synchronisation (three launches on `stream`; graph-capturable).  Expert
 * e owns positions [expert_start[e], expert_end[e]); its entries fill the
 * first count_e of them in ascending flat index t * K + k (a fixed order,
 * unlike TileKernels', which depends on the SM count), the rest of the
 * range and every position >= expert_end[E-1] hold -1 in the three pos_*
 * outputs.  Entries whose position would be >= N get token_topk_to_pos
 * = -1.  Values outside [-1, E) are treated as -1.  workspace: int32 (W),
 * W >= tk_get_fused_mapping_workspace_size(T, K, E), overwritten.  T == 0
 * still launches: the ranges are zeros and every position -1.  TileKernels'
 * eighth output (the host list of aligned counts) needs a host sync and is
 * not produced: read num_tokens_per_expert. */
TK_API tk_status tk_get_fused_mapping(const tk_tensor *topk_idx,
                                      int num_experts, int alignment,
                                      const tk_fused_mapping *out,
                                      const tk_tensor *workspace,
                                      tk_stream stream);

/* ---- E5M6 casts (tilekernels-spec.md sections 3.4, 6.2, 6.3) -------- */

/* per_token_cast(x, 'e5m6', num_per_channels = H): x (T, H) f32 or bf16,
 * H % 8 == 0 and H <= 16384, strides[1] == 1, any row stride >= H (a
 * multiple of the 16-byte vector with H % 32 == 0 is the fast path).  One
 * scale per row: sf = max(amax, 1e-4) / 65024 (2^ceil(log2 sf) with
 * round_sf).  out (T, 3H/2) u8 contiguous: each 8 values become three
 * little-endian u32 words of 12-bit codes.  out_sf exactly as
 * tk_sf_desc(T, H, 1, H, sf_layout) describes, i.e. a (T, 1) f32 tensor
 * (row-major strides (1, 1), column-major (1, align(T, 4))) or, for
 * TK_SF_PACKED_UE8M0 (requires round_sf), an i32 (T, 1) tensor whose
 * low byte holds the exponent; in every layout row t's scale is the
 * 32-bit word t of the buffer (T * 4 bytes, align(T, 4) * 4 for the
 * column-major ones).  The three high bytes of a packed word get zeros. */
TK_API tk_status tk_per_token_cast_e5m6(const tk_tensor *x, bool round_sf,
                                        tk_sf_layout sf_layout,
                                        const tk_tensor *out,
                                        const tk_tensor *out_sf,
                                        tk_stream stream);

/* cast_back(x, fmt, (1, H), x_special_fmt='e5m6'): x (T, 3H/2) u8
 * contiguous as tk_per_token_cast_e5m6 writes it, sf a (T, 1) f32 tensor
 * (any strides[0]) or the packed i32 (T, 1) tensor (strides[0] == 1),
 * out (T, H) bf16 or f32 contiguous: out = to_dtype(f32(code) * sf[t]). */
TK_API tk_status tk_cast_back_e5m6(const tk_tensor *x, const tk_tensor *sf,
                                   const tk_tensor *out, tk_stream stream);

/* ---- per-block casts (tilekernels-spec.md sections 4.2, 6.4, 6.5) ------ */

/* per_block_cast: x (T, H) f32 or bf16 contiguous, H % 64 == 0; one
 * scale per (block_m, block_k) block, block_m and block_k each 32 or 128,
 * amax over the block's valid elements.  fmt TK_E4M3: out (T, H) e4m3;
 * fmt TK_E2M1: out (T, H/2) i8, two FP4 values per byte (element 2j in
 * the low nibble).  out_sf exactly as tk_sf_desc(T, H, block_m, block_k,
 * sf_layout) describes; TK_SF_PACKED_UE8M0 requires round_sf.  Padding
 * rows of the column-major layouts and unused bytes of packed words are
 * left untouched. */
TK_API tk_status tk_per_block_cast(const tk_tensor *x, tk_dtype fmt,
                                   int block_m, int block_k, bool round_sf,
                                   tk_sf_layout sf_layout,
                                   const tk_tensor *out,
                                   const tk_tensor *out_sf, tk_stream stream);
/* The scales tk_per_block_cast would write, and nothing else. */
TK_API tk_status tk_per_block_cast_with_sf_only(const tk_tensor *x,
                                                tk_dtype fmt, int block_m,
                                                int block_k, bool round_sf,
                                                tk_sf_layout sf_layout,
                                                const tk_tensor *out_sf,
                                                tk_stream stream);
/* The data of tk_per_block_cast with the caller's scales: sf f32
 * (ceil(T/block_m), ceil(H/block_k)) row-major contiguous (the only
 * layout TileKernels accepts here), multiplier 1 / sf (IEEE). */
TK_API tk_status tk_per_block_cast_with_precomputed_sf(
    const tk_tensor *x, tk_dtype fmt, int block_m, int block_k,
    const tk_tensor *sf, const tk_tensor *out, tk_stream stream);

/* per_block_cast_lossless: x (T, H/2) i8 packed FP4 contiguous, H % 32 ==
 * 0, with power-of-two scales sf in (x_block_m, x_block_k) blocks (f32
 * row- or column-major, or packed i32; only exponent bits are read),
 * x_block_m a power of two, x_block_k a power of two >= 8.  Output blocks
 * (block_m, block_k): block_m 1, 32 or 128 and a multiple of x_block_m,
 * block_k 32 or 128 and a multiple of x_block_k.  out (T, H) e4m3
 * contiguous holds fp4 * 2^(E_in - E_out) exactly, with E_out = max(max
 * E_in - 6, 0) over the block; out_sf as tk_sf_desc(T, H, block_m,
 * block_k, sf_layout) describes holds 2^(E_out - 127) (the f32 with bits
 * E_out << 23, or the byte E_out).  Scales are powers of two by
 * construction, so TileKernels' round_sf flag has no counterpart. */
TK_API tk_status tk_per_block_cast_lossless(
    const tk_tensor *x, const tk_tensor *sf, int x_block_m, int x_block_k,
    int block_m, int block_k, tk_sf_layout sf_layout, const tk_tensor *out,
    const tk_tensor *out_sf, tk_stream stream);

/* ---- fused SwiGLU casts (tilekernels-spec.md 6.9-6.11) ------------------
 * SwiGLU of a (rows, 2I) matrix x, left half the gate l, right half the up
 * value u: act = (l / (1 + expf(-l))) * u in f32, expf the libdevice
 * sequence (spec 2.1).  An optional clamp c (a pointer, NULL for none,
 * *c >= 0) applies l = min(l, c), u = max(min(u, c), -c) first.  Scales
 * follow spec 4.1 with e4m3 (amax floor 1e-4, QMAX 448). */

/* swiglu_forward_and_per_token_cast (spec 6.9): x (N, 2I) f32 or bf16
 * contiguous, I % 128 == 0; out (N, I) e4m3 contiguous = e4m3(a * inv)
 * with a = act * w, one scale per row per num_per_channels columns
 * (128, or I for one scale per row).  out_sf is exactly
 * tk_sf_desc(N, I, 1, num_per_channels, sf_layout): with 128, any layout
 * (TK_SF_PACKED_UE8M0 requires round_sf; its i32 words hold 4 exponent
 * bytes, the high bytes of the last word when (I/128) % 4 != 0 and the
 * padding rows of the column-major layouts are not written); with I,
 * TK_SF_ROW_MAJOR (N, 1) only.
 * Optional (NULL = absent): pos_to_token_topk i32 (N,) with topk_weights
 * f32 (T, K), both contiguous: w = topk_weights.flat[pos_to_token_topk[r]],
 * 0 for a negative index, 1 without weights; pos_to_expert i32 (N,): rows
 * with a negative value are skipped (out and out_sf rows not written);
 * clamped_count i64 (3,) (needs the clamp): += the processed elements
 * with l > c, u > c, u < -c (pre-clamp values), accumulated in place;
 * sf_clamp_min replaces the 1e-4 amax floor (finite, >= 448 * FLT_MIN). */
TK_API tk_status tk_swiglu_forward_and_per_token_cast(
    const tk_tensor *x, int num_per_channels,
    const tk_tensor *pos_to_token_topk, const tk_tensor *topk_weights,
    const tk_tensor *pos_to_expert, bool round_sf, tk_sf_layout sf_layout,
    const float *swiglu_clamp_value, const tk_tensor *clamped_count,
    const float *sf_clamp_min, const tk_tensor *out, const tk_tensor *out_sf,
    tk_stream stream);

/* swiglu_backward_and_per_token_cast (spec 6.10): x (N, 2I) e4m3 with
 * x_sf f32 (N, 2I/npc) row-major (npc = num_per_channels, 32 or 128,
 * I % npc == 0), grad_out bf16 (N, I), weight f32 (T, K),
 * pos_to_token_topk i32 (N,), token_topk_to_pos i32 (T, K), all
 * contiguous.  Writes out bf16 (N, I) = act * w, x_grad bf16 (N, 2I) (the
 * gate and up gradients), x_grad_fp8 e4m3 (N, 2I) with x_grad_sf f32
 * (N, 2I/npc) row-major (the f32 gradients cast per token, left-half
 * groups first), and weight_grad f32 (T, K): sum over the row of
 * grad_out * act for the row (t, k) maps to, 0 where token_topk_to_pos is
 * -1 (f32 atomics: the summation order varies between runs; TileKernels
 * checks it with rtol = atol = 1e-4). */
TK_API tk_status tk_swiglu_backward_and_per_token_cast(
    const tk_tensor *x, const tk_tensor *x_sf, const tk_tensor *grad_out,
    const tk_tensor *weight, const tk_tensor *pos_to_token_topk,
    const tk_tensor *token_topk_to_pos, int num_per_channels, bool round_sf,
    const float *swiglu_clamp_value, const tk_tensor *out,
    const tk_tensor *x_grad_fp8, const tk_tensor *x_grad_sf,
    const tk_tensor *x_grad, const tk_tensor *weight_grad, tk_stream stream);

/* swiglu_forward_and_per_channel_cast_and_transpose (spec 6.11): x (T, 2I)
 * bf16 contiguous, T % 128 == 0, I % 64 == 0; act rounded to bf16, one
 * scale per num_per_tokens (32 or 128) rows per channel: out_sf f32
 * (T / num_per_tokens, I) contiguous; out e4m3 (I, T) contiguous (the
 * transpose), or (T, I) with without_transpose.  The clamp value is
 * rounded to bf16 first, as the original clamps in bf16. */
TK_API tk_status tk_swiglu_forward_and_per_channel_cast_and_transpose(
    const tk_tensor *x, int num_per_tokens, bool round_sf,
    bool without_transpose, const float *swiglu_clamp_value,
    const tk_tensor *out, const tk_tensor *out_sf, tk_stream stream);

/* ---- FP4, one scale per token, requantisation (spec 3.2, 6.1, 6.3) ---
 * tk_per_token_cast also takes: out packed e2m1 (TK_I8, TK_U8 or TK_E2M1;
 * shape (T, H / 2), element 2j in the low nibble of byte j) for
 * per_token_cast(x, 'e2m1') with QMAX 6 and CLAMP_MIN 6 * 2^-126;
 * num_per_channels 16; and num_per_channels == H ("one scale per token",
 * H % 64 == 0, H <= 8192, otherwise TK_ERROR_UNSUPPORTED; out_sf as
 * tk_sf_desc(T, H, 1, H, layout): nbk = 1).  tk_cast_back and
 * tk_per_token_cast_back also take packed e2m1 x (T, H / 2), H % 64 == 0,
 * with block_k a multiple of 8 (bf16 out) or 4 (f32 out), and any block_m.
 * SF buffers: allocate with tk_sf_desc for the logical (T, H). */

/* per_token_cast of quantised input (requantisation): x e4m3 (T, H) or
 * packed e2m1 (T, H / 2) contiguous, H % 64 == 0, with x_sf its scales
 * for (x_block_m, x_block_k) blocks in any layout (f32 row- or
 * column-major, or packed UE8M0 i32; detected from dtype and strides as
 * TileKernels does); x_block_k a multiple of 32 (e2m1 out) or 16 (e4m3
 * out).  The real value f32(data) * s_in is cast per token with
 * num_per_channels 16, 32, 64 or 128 into out (e4m3 (T, H) or packed e2m1
 * (T, H / 2)) and out_sf (tk_sf_desc(T, H, 1, npc, sf_layout)); the
 * quantised value is cvt(f32(data) * (s_in * inv)), the kernel's
 * association (spec 15.5). */
TK_API tk_status tk_per_token_cast_quantized(
    const tk_tensor *x, const tk_tensor *x_sf, int x_block_m, int x_block_k,
    int num_per_channels, bool round_sf, tk_sf_layout sf_layout,
    const tk_tensor *out, const tk_tensor *out_sf, tk_stream stream);

/* The scales per_token_cast would write, without the data: x f32 / bf16
 * as for tk_per_token_cast, format TK_E4M3 or TK_E2M1, num_per_channels
 * 16, 32, 64 or 128 (not H), out_sf as tk_sf_desc describes.  Equal,
 * bit for bit, to tk_per_token_cast's out_sf. */
TK_API tk_status tk_per_token_cast_with_sf_only(const tk_tensor *x,
                                                tk_dtype format,
                                                int num_per_channels,
                                                bool round_sf,
                                                tk_sf_layout sf_layout,
                                                const tk_tensor *out_sf,
                                                tk_stream stream);

/* per_token_cast with the caller's scales: sf f32 (T, ceil(H / npc)),
 * row-major (as TileKernels' tests use it) or any other strides, read
 * only; inv = 1 / sf (IEEE division); out e4m3 (T, H) or packed e2m1
 * (T, H / 2) selects the format.  num_per_channels 16, 32, 64 or 128. */
TK_API tk_status tk_per_token_cast_with_precomputed_sf(const tk_tensor *x,
                                                       int num_per_channels,
                                                       const tk_tensor *sf,
                                                       const tk_tensor *out,
                                                       tk_stream stream);

/* ---- GEMM (kernels/gemm.tk, docs/hopper.md) ---------------------------
 * d[M, N] = a[M, K] * b[N, K]^T: b holds the rows of B^T (the weight
 * layout "N x K", K-major, of DeepSeek-V3's linear layers).  Accumulation
 * in f32, d rounded to bf16 (RNE).  a, b and d contiguous and 16-byte
 * aligned; N % 8 == 0.  M, N and K need not be multiples of any tile.
 * M == 0 or N == 0 does nothing; K == 0 sets d to zero.  Results are not
 * bit-reproducible against other libraries (the f32 summation order is
 * the kernel's); tests hold them to ||d - ref|| / ||ref|| < 2e-3. */

/* a bf16 (M, K), b bf16 (N, K), d bf16 (M, N), K % 8 == 0.  Runs the
 * persistent kernel: one block per SM walks the output tiles. */
TK_API tk_status tk_gemm_bf16(const tk_tensor *a, const tk_tensor *b,
                              const tk_tensor *d, tk_stream stream);

/* The fp8 block-scaled GEMM of DeepSeek-V3:
 *   d[i, j] = sum over K blocks kb of
 *             (sum_{k in kb} f32(a[i, k]) * f32(b[j, k]))
 *             * sfa[i, kb] * sfb[j / 128, kb]
 * with K blocks of 128 (the last may be partial), the inner sums in f32
 * from the tensor cores and promoted to the f32 accumulator per block.
 * a e4m3 (M, K), b e4m3 (N, K), K % 16 == 0, d bf16 (M, N).
 * sfa: f32 (M, ceil(K/128)), exactly as tk_per_token_cast(a's source,
 * 128, ..., TK_SF_COL_MAJOR) writes it: strides (1, align(M, 4)), the
 * buffer of tk_sf_desc(M, K, 1, 128, TK_SF_COL_MAJOR) (all of it is
 * read; the padding rows do not affect d).  Row-major and packed UE8M0 scales are
 * refused (TK_ERROR_INVALID_ARGUMENT / TK_ERROR_UNSUPPORTED): the kernel
 * loads each K block's scales with one TMA box.
 * sfb: f32 (ceil(N/128), ceil(K/128)), one scale per 128 x 128 block of
 * b as tk_per_block_cast(..., 128, 128, ...) writes it, any strides
 * (row- or column-major).  Every scale tensor 16-byte aligned.  Runs
 * the persistent 192 x 128-tile kernel on three consumer warpgroups
 * (kernels/gemm_fp8_tall.tk). */
TK_API tk_status tk_gemm_fp8_blockscaled(const tk_tensor *a,
                                         const tk_tensor *sfa,
                                         const tk_tensor *b,
                                         const tk_tensor *sfb,
                                         const tk_tensor *d, tk_stream stream);

/* unpack_from_e2m1fn_x2 on host memory (no GPU): `bytes` packed bytes at x
 * become 2 * bytes values at out (TK_F32 or TK_BF16): element 2j from the
 * low nibble of byte j, 2j+1 from the high one; code 8 is -0.0. */
TK_API tk_status tk_unpack_e2m1(const void *x, int64_t bytes,
                                tk_dtype out_dtype, void *out);

#ifdef __cplusplus
}
#endif
#endif
