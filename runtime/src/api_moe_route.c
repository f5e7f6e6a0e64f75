/*
 * api_moe_route.c -- tk_group_count, tk_aux_fi,
 * tk_inplace_unique_group_indices, tk_mask_indices_by_tp and
 * tk_get_fused_mapping (tilekernels-spec.md 5.4-5.7, 5.9;
 * kernels/moe_route.tk).
 *
 * Every index tensor is contiguous (T, K), as TileKernels requires or
 * assumes, so the kernels see it as one flat vector of T*K entries.  The
 * counting kernels have instances that read two int64 per 16-byte vector
 * (`even`, T*K even) and one at a time (`odd`).  get_fused_mapping is three
 * launches on the caller's stream and never synchronises: the caller sizes
 * the outputs (tk_fused_mapping_capacity gives TileKernels' automatic
 * capacity) and passes a workspace of tk_get_fused_mapping_workspace_size()
 * int32 entries.
 */
#include "tk_internal.h"
#include "tk_kernels.h"

/* kernels/moe_route.tk: MAX_GROUPS, MAP_UNIT, MAP_MAX_EXPERTS,
 * MAP_MAX_CHUNKS, and the row length the unrolled unique kernel takes. */
#define TK_MOE_MAX_GROUPS 4096
#define TK_MAP_UNIT 256
#define TK_MAP_MAX_EXPERTS 1024
#define TK_MAP_MAX_CHUNKS 256
#define TK_UNIQUE_UNROLLED_TOPK 16
/* inplace_unique_group_indices tracks values with two 64-bit masks. */
#define TK_UNIQUE_MAX_GROUPS 128

/* (T, K) contiguous index tensor of one of `allowed` dtypes. */
static tk_status tk__check_index_matrix(const char *function, const char *argument,
                                        const tk_tensor *tensor, const tk_dtype *allowed,
                                        int count)
{
    tk_status status;
    if ((status = tk__check_tensor(function, argument, tensor, 2)) ||
        (status = tk__check_dtype(function, argument, tensor, allowed, count)) ||
        (status = tk__check_contiguous(function, argument, tensor)) ||
        (status = tk__check_storage(function, argument, tensor)))
        return status;
    return TK_SUCCESS;
}

/* A 1-D contiguous output of `dtype` and length `length`. */
static tk_status tk__check_vector(const char *function, const char *argument,
                                  const tk_tensor *tensor, tk_dtype dtype, int64_t length,
                                  const char *meaning)
{
    tk_status status;
    if ((status = tk__check_tensor(function, argument, tensor, 1)) ||
        (status = tk__check_dtype(function, argument, tensor, &dtype, 1)) ||
        (length >= 0 && (status = tk__check_dim(function, argument, tensor, 0, length,
                                                 meaning))) ||
        (status = tk__check_contiguous(function, argument, tensor)) ||
        (status = tk__check_storage(function, argument, tensor)))
        return status;
    return TK_SUCCESS;
}

/* The flat view (T*K) of a contiguous (T, K) tensor. */
static tk_tensor tk__flat(const tk_tensor *matrix)
{
    tk_tensor flat = {.data = matrix->data, .dtype = matrix->dtype, .rank = 1,
                      .shape = {matrix->shape[0] * matrix->shape[1]}, .strides = {1}};
    return flat;
}

/* ---- group_count, aux_fi ------------------------------------------------ */

tk_status tk_group_count(const tk_tensor *group_idx, const tk_tensor *counts,
                         tk_stream stream)
{
    static const char function[] = "tk_group_count";
    static const tk_dtype index[] = {TK_I64};
    tk__set_last_instance(NULL);
    tk_status status;
    if ((status = tk__check_index_matrix(function, "group_idx", group_idx, index, 1)) ||
        (status = tk__check_vector(function, "counts", counts, TK_I32, -1, NULL)))
        return status;
    if (counts->shape[0] < 1 || counts->shape[0] > TK_MOE_MAX_GROUPS)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: counts: shape[0] (num_groups) is %lld, expected 1 .. %d",
                        function, (long long)counts->shape[0], TK_MOE_MAX_GROUPS);
    /* T == 0 still launches: the counts are zeros. */
    tk_tensor flat = tk__flat(group_idx);
    bool even = flat.shape[0] % 2 == 0;
    tk__set_last_instance(even ? "group_count__even" : "group_count__odd");
    return (even ? tkl_group_count__even : tkl_group_count__odd)(&flat, counts, stream);
}

tk_status tk_aux_fi(const tk_tensor *topk_idx, int num_aux_topk, const tk_tensor *fi,
                    tk_stream stream)
{
    static const char function[] = "tk_aux_fi";
    static const tk_dtype index[] = {TK_I64};
    tk__set_last_instance(NULL);
    tk_status status;
    if ((status = tk__check_index_matrix(function, "topk_idx", topk_idx, index, 1)) ||
        (status = tk__check_vector(function, "fi", fi, TK_F32, -1, NULL)))
        return status;
    if (fi->shape[0] < 1 || fi->shape[0] > TK_MOE_MAX_GROUPS)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: fi: shape[0] (num_experts) is %lld, expected 1 .. %d", function,
                        (long long)fi->shape[0], TK_MOE_MAX_GROUPS);
    if (num_aux_topk < 1)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT, "%s: num_aux_topk is %d, expected >= 1",
                        function, num_aux_topk);
    /* f32(T * num_aux_topk), exactly as the reference forms it; T == 0
     * gives zeros (0 / 1). */
    int64_t product = topk_idx->shape[0] * (int64_t)num_aux_topk;
    float denominator = product == 0 ? 1.0f : (float)product;
    tk_tensor flat = tk__flat(topk_idx);
    bool even = flat.shape[0] % 2 == 0;
    tk__set_last_instance(even ? "aux_fi__even" : "aux_fi__odd");
    return (even ? tkl_aux_fi__even : tkl_aux_fi__odd)(&flat, fi, denominator, stream);
}

/* ---- inplace_unique_group_indices ---------------------------------------- */

tk_status tk_inplace_unique_group_indices(const tk_tensor *group_indices, int num_groups,
                                          tk_stream stream)
{
    static const char function[] = "tk_inplace_unique_group_indices";
    static const tk_dtype index[] = {TK_I64};
    tk__set_last_instance(NULL);
    tk_status status;
    if ((status = tk__check_index_matrix(function, "group_indices", group_indices, index, 1)))
        return status;
    if (num_groups < 1 || num_groups > TK_UNIQUE_MAX_GROUPS)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT, "%s: num_groups is %d, expected 1 .. %d",
                        function, num_groups, TK_UNIQUE_MAX_GROUPS);
    if (tk__tensor_empty(group_indices))
        return TK_SUCCESS;
    if (group_indices->shape[1] <= TK_UNIQUE_UNROLLED_TOPK) {
        tk__set_last_instance("inplace_unique_group_indices__k16");
        return tkl_inplace_unique_group_indices__k16(group_indices, stream);
    }
    tk__set_last_instance("inplace_unique_group_indices_long__default");
    return tkl_inplace_unique_group_indices_long__default(group_indices, stream);
}

/* ---- mask_indices_by_tp -------------------------------------------------- */

tk_status tk_mask_indices_by_tp(const tk_tensor *indices, int64_t n, int num_ep_ranks,
                                int tp_rank, int num_tp_ranks, const tk_tensor *out,
                                tk_stream stream)
{
    static const char function[] = "tk_mask_indices_by_tp";
    static const tk_dtype index[] = {TK_I64, TK_I32};
    tk__set_last_instance(NULL);
    tk_status status;
    if ((status = tk__check_index_matrix(function, "indices", indices, index, 2)) ||
        (status = tk__check_index_matrix(function, "out", out, &indices->dtype, 1)) ||
        (status = tk__check_dim(function, "out", out, 0, indices->shape[0],
                                "indices' shape[0]")) ||
        (status = tk__check_dim(function, "out", out, 1, indices->shape[1],
                                "indices' shape[1]")))
        return status;
    if (num_ep_ranks < 1)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT, "%s: num_ep_ranks is %d, expected >= 1",
                        function, num_ep_ranks);
    if (num_tp_ranks < 1)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT, "%s: num_tp_ranks is %d, expected >= 1",
                        function, num_tp_ranks);
    if (tp_rank < 0 || tp_rank >= num_tp_ranks)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: tp_rank is %d, expected 0 .. num_tp_ranks - 1 = %d", function,
                        tp_rank, num_tp_ranks - 1);
    if (n < num_ep_ranks)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: n is %lld, expected >= num_ep_ranks = %d (n / num_ep_ranks "
                        "experts per GPU must be at least 1)",
                        function, (long long)n, num_ep_ranks);
    int64_t per_gpu = n / num_ep_ranks;
    int64_t per_dp = per_gpu * num_tp_ranks; /* <= n * num_tp_ranks: no overflow */
    if (n > INT64_MAX / num_tp_ranks ||
        (indices->dtype == TK_I32 && per_dp > INT32_MAX))
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: n / num_ep_ranks * num_tp_ranks is too large for %s indices",
                        function, tk__dtype_name(indices->dtype));
    if (tk__tensor_empty(indices))
        return TK_SUCCESS;
    tk_tensor in_flat = tk__flat(indices), out_flat = tk__flat(out);
    int64_t count = in_flat.shape[0];
    if (indices->dtype == TK_I64) {
        bool vector = count % 2 == 0;
        tk__set_last_instance(vector ? "mask_indices_by_tp__i64" : "mask_indices_by_tp__i64_any");
        return (vector ? tkl_mask_indices_by_tp__i64 : tkl_mask_indices_by_tp__i64_any)(
            &in_flat, &out_flat, per_gpu, per_dp, tp_rank, num_tp_ranks, stream);
    }
    bool vector = count % 4 == 0;
    tk__set_last_instance(vector ? "mask_indices_by_tp__i32" : "mask_indices_by_tp__i32_any");
    return (vector ? tkl_mask_indices_by_tp__i32 : tkl_mask_indices_by_tp__i32_any)(
        &in_flat, &out_flat, (int32_t)per_gpu, (int32_t)per_dp, tp_rank, num_tp_ranks, stream);
}

/* ---- get_fused_mapping ---------------------------------------------------- */

/* Chunk size (a multiple of TK_MAP_UNIT) that keeps the chunk count within
 * TK_MAP_MAX_CHUNKS, and that count. */
static void tk__map_chunks(int64_t entries, int64_t *chunk, int64_t *chunks)
{
    int64_t units = tk__ceildiv(entries, TK_MAP_UNIT);
    int64_t per_chunk = tk__max(1, tk__ceildiv(units, TK_MAP_MAX_CHUNKS));
    *chunk = per_chunk * TK_MAP_UNIT;
    *chunks = tk__ceildiv(entries, *chunk);
}

int64_t tk_fused_mapping_capacity(int64_t num_tokens, int num_topk, int num_experts,
                                  int alignment)
{
    if (num_tokens < 0 || num_topk < 1 || num_experts < 1 || alignment < 1)
        return -1;
    return (num_tokens * num_topk + (int64_t)(alignment - 1) * num_experts) / alignment *
           alignment;
}

tk_status tk_get_fused_mapping_workspace_size(int64_t num_tokens, int num_topk,
                                              int num_experts, int64_t *elements)
{
    static const char function[] = "tk_get_fused_mapping_workspace_size";
    if (elements == NULL)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT, "%s: elements is NULL", function);
    if (num_tokens < 0 || num_topk < 1 || num_experts < 1 ||
        num_tokens > (INT32_MAX / 2) / num_topk)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: num_tokens %lld, num_topk %d, num_experts %d: expected "
                        "num_tokens >= 0, num_topk >= 1, num_experts >= 1 and "
                        "num_tokens * num_topk < 2^30",
                        function, (long long)num_tokens, num_topk, num_experts);
    int64_t chunk, chunks;
    tk__map_chunks(num_tokens * num_topk, &chunk, &chunks);
    *elements = chunks * num_experts;
    return TK_SUCCESS;
}

tk_status tk_get_fused_mapping(const tk_tensor *topk_idx, int num_experts, int alignment,
                               const tk_fused_mapping *out, const tk_tensor *workspace,
                               tk_stream stream)
{
    static const char function[] = "tk_get_fused_mapping";
    static const tk_dtype index[] = {TK_I64};
    tk__set_last_instance(NULL);
    tk_status status;
    if ((status = tk__check_index_matrix(function, "topk_idx", topk_idx, index, 1)))
        return status;
    if (out == NULL)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT, "%s: out is NULL", function);
    if (num_experts < 1 || num_experts > TK_MAP_MAX_EXPERTS)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT, "%s: num_experts is %d, expected 1 .. %d",
                        function, num_experts, TK_MAP_MAX_EXPERTS);
    if (alignment < 1)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT, "%s: alignment is %d, expected >= 1",
                        function, alignment);
    int64_t tokens = topk_idx->shape[0], topk = topk_idx->shape[1];
    if (topk < 1)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: topk_idx: shape[1] (num_topk) is 0, expected >= 1", function);
    /* Positions are int32: the aligned ranges must end below 2^31. */
    if (tokens * topk + (int64_t)(alignment - 1) * num_experts > INT32_MAX)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: alignment is %d: T*K + (alignment-1)*num_experts = %lld "
                        "positions do not fit int32",
                        function, alignment,
                        (long long)(tokens * topk + (int64_t)(alignment - 1) * num_experts));
    static const tk_dtype position[] = {TK_I32};
    if ((status = tk__check_vector(function, "out->pos_to_expert", &out->pos_to_expert, TK_I32,
                                   -1, NULL)))
        return status;
    int64_t capacity = out->pos_to_expert.shape[0];
    if ((status = tk__check_vector(function, "out->pos_to_token", &out->pos_to_token, TK_I32,
                                   capacity, "pos_to_expert's length")) ||
        (status = tk__check_vector(function, "out->pos_to_token_topk", &out->pos_to_token_topk,
                                   TK_I32, capacity, "pos_to_expert's length")) ||
        (status = tk__check_index_matrix(function, "out->token_topk_to_pos",
                                         &out->token_topk_to_pos, position, 1)) ||
        (status = tk__check_dim(function, "out->token_topk_to_pos", &out->token_topk_to_pos, 0,
                                tokens, "topk_idx's shape[0]")) ||
        (status = tk__check_dim(function, "out->token_topk_to_pos", &out->token_topk_to_pos, 1,
                                topk, "topk_idx's shape[1]")) ||
        (status = tk__check_vector(function, "out->expert_start", &out->expert_start, TK_I32,
                                   num_experts, "num_experts")) ||
        (status = tk__check_vector(function, "out->expert_end", &out->expert_end, TK_I32,
                                   num_experts, "num_experts")) ||
        (status = tk__check_vector(function, "out->num_tokens_per_expert",
                                   &out->num_tokens_per_expert, TK_I32, num_experts,
                                   "num_experts")))
        return status;
    int64_t needed;
    if ((status = tk_get_fused_mapping_workspace_size(tokens, (int)topk, num_experts, &needed)))
        return tk__fail(status, "%s: topk_idx: (%lld, %lld) entries do not fit int32 indices",
                        function, (long long)tokens, (long long)topk);
    if ((status = tk__check_vector(function, "workspace", workspace, TK_I32, -1, NULL)))
        return status;
    if (workspace->shape[0] < needed)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: workspace: shape[0] is %lld, expected at least %lld "
                        "(tk_get_fused_mapping_workspace_size)",
                        function, (long long)workspace->shape[0], (long long)needed);

    int64_t chunk, chunks;
    tk__map_chunks(tokens * topk, &chunk, &chunks);
    tk_tensor flat_idx = tk__flat(topk_idx), flat_pos = tk__flat(&out->token_topk_to_pos);
    tk_tensor table = {.data = workspace->data, .dtype = TK_I32, .rank = 2,
                       .shape = {chunks, num_experts}, .strides = {num_experts, 1}};
    /* 1. per-chunk counts, and -1 in every position; 2. the scan (always:
     * the expert ranges are outputs even for T == 0); 3. the positions. */
    tk__set_last_instance("fused_mapping_count__default");
    if ((status = tkl_fused_mapping_count__default(&flat_idx, &table, &out->pos_to_expert,
                                                   &out->pos_to_token, &out->pos_to_token_topk,
                                                   (int32_t)chunk, stream)))
        return status;
    tk__set_last_instance("fused_mapping_scan__default");
    if ((status = tkl_fused_mapping_scan__default(&table, &out->expert_start, &out->expert_end,
                                                  &out->num_tokens_per_expert, alignment,
                                                  stream)))
        return status;
    tk__set_last_instance("fused_mapping_assign__default");
    return tkl_fused_mapping_assign__default(&flat_idx, &table, &out->expert_start,
                                             &out->pos_to_expert, &out->pos_to_token,
                                             &out->pos_to_token_topk, &flat_pos, (int32_t)topk,
                                             (int32_t)chunk, stream);
}
