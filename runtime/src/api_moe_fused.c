/*
 * api_moe_fused.c -- tk_expand_to_fused, tk_expand_to_fused_with_sf and
 * tk_reduce_fused (tilekernels-spec.md 5.10, 5.11; kernels/moe_fused.tk).
 *
 * Expansion only moves bits, so the functions relabel the descriptors
 * before launching: rows whose byte length and stride are multiples of 16
 * go to the `vec` instances as 32-bit words (four per 16-byte vector),
 * other rows to an `any_*` instance element by element (`any` = bytes for
 * the scaled form, whose `vec` instance takes rows of a multiple of 896
 * words and `vec4` the other 16-byte ones).  Scale factors are copied as
 * 32-bit words too: f32 scales and packed UE8M0 words alike.  reduce_fused picks its instance by
 * (input, output) dtype and by whether H is a multiple of the wide
 * instance's block width; the optional inputs (weights, row scales, output
 * scale) reach the kernel as empty tensors when absent.
 */
#include "tk_internal.h"
#include "tk_kernels.h"

#define TK_FUSED_VECTOR_BYTES 16
/* 32 lanes x 7 vectors x 4 words: the block column of
 * expand_to_fused_with_sf's vec instance (kernels/moe_fused.tk). */
#define TK_EXPAND_SF_WIDE_WORDS 896
/* TileKernels' reduce_fused asserts hidden % 256 == 0. */
#define TK_REDUCE_HIDDEN_MULTIPLE 256

/* A descriptor of the same memory with another dtype and shape; strides
 * in the new element unit.  rank 1 or 2. */
static tk_tensor tk__view(void *data, tk_dtype dtype, int rank, int64_t d0,
                          int64_t d1, int64_t s0, int64_t s1)
{
    tk_tensor view = {.data = data, .dtype = dtype, .rank = rank,
                      .shape = {d0, d1}, .strides = {s0, s1}};
    return view;
}

/* An empty tensor: how an absent optional input reaches a kernel. */
static tk_tensor tk__absent(int rank)
{
    return tk__view(NULL, TK_F32, rank, 0, 0, rank == 2 ? 0 : 1, 1);
}

/* Any 1-, 2- or 4-byte dtype: expansion moves bits. */
static tk_status tk__check_movable(const char *function, const char *argument,
                                   const tk_tensor *x)
{
    size_t size = tk_dtype_size(x->dtype);
    if (x->dtype == TK_E2M1 || (size != 1 && size != 2 && size != 4))
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: %s: dtype is %s, expected a 1-, 2- or 4-byte "
                        "dtype (packed e2m1 data is passed as i8)",
                        function, argument, tk__dtype_name(x->dtype));
    return TK_SUCCESS;
}

/* The mapping of get_fused_mapping: token_topk_to_pos (T, K) and, for
 * the expansions, pos_to_expert (N), both int32 and contiguous. */
static tk_status tk__check_mapping(const char *function, int64_t tokens,
                                   const tk_tensor *token_topk_to_pos,
                                   bool with_experts,
                                   const tk_tensor *pos_to_expert)
{
    static const tk_dtype index[] = {TK_I32};
    tk_status status;
    if ((status = tk__check_tensor(function, "token_topk_to_pos",
                                   token_topk_to_pos, 2)) ||
        (status = tk__check_dtype(function, "token_topk_to_pos",
                                  token_topk_to_pos, index, 1)) ||
        (status = tk__check_dim(function, "token_topk_to_pos",
                                token_topk_to_pos, 0, tokens,
                                "x's shape[0]")) ||
        (status = tk__check_contiguous(function, "token_topk_to_pos",
                                       token_topk_to_pos)))
        return status;
    if (!with_experts)
        return TK_SUCCESS;
    if ((status = tk__check_tensor(function, "pos_to_expert", pos_to_expert,
                                   1)) ||
        (status = tk__check_dtype(function, "pos_to_expert", pos_to_expert,
                                  index, 1)) ||
        (status = tk__check_contiguous(function, "pos_to_expert",
                                       pos_to_expert)))
        return status;
    return TK_SUCCESS;
}

/* out (N, H): x's dtype, N = pos_to_expert's length, contiguous. */
static tk_status tk__check_expanded(const char *function, const tk_tensor *x,
                                    const tk_tensor *pos_to_expert,
                                    const tk_tensor *out)
{
    tk_status status;
    if ((status = tk__check_tensor(function, "out", out, 2)))
        return status;
    if (out->dtype != x->dtype)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: out: dtype is %s, expected %s (x's dtype)",
                        function, tk__dtype_name(out->dtype),
                        tk__dtype_name(x->dtype));
    if ((status = tk__check_dim(function, "out", out, 0,
                                pos_to_expert->shape[0],
                                "pos_to_expert's shape[0]")) ||
        (status = tk__check_dim(function, "out", out, 1, x->shape[1],
                                "x's shape[1]")) ||
        (status = tk__check_contiguous(function, "out", out)))
        return status;
    return TK_SUCCESS;
}

/* The data part shared by both expansions: x and out relabelled as rows
 * of 32-bit words when every row starts and ends on a 16-byte boundary,
 * else as rows of `any_dtype` elements.  Returns whether the vector form
 * applies. */
static bool tk__expand_views(const tk_tensor *x, const tk_tensor *out,
                             tk_dtype any_dtype, tk_tensor *x_view,
                             tk_tensor *out_view)
{
    int64_t size = (int64_t)tk_dtype_size(x->dtype);
    int64_t tokens = x->shape[0], row_bytes = x->shape[1] * size;
    /* a single row is never stepped over: its stride is free */
    int64_t stride_bytes = tokens > 1 ? x->strides[0] * size : row_bytes;
    bool vector = row_bytes % TK_FUSED_VECTOR_BYTES == 0 &&
                  stride_bytes % TK_FUSED_VECTOR_BYTES == 0;
    int64_t unit = vector ? 4 : (int64_t)tk_dtype_size(any_dtype);
    tk_dtype dtype = vector ? TK_U32 : any_dtype;
    *x_view = tk__view(x->data, dtype, 2, tokens, row_bytes / unit,
                       stride_bytes / unit, 1);
    *out_view = tk__view(out->data, dtype, 2, out->shape[0], row_bytes / unit,
                         row_bytes / unit, 1);
    return vector;
}

/* ---- expand_to_fused ------------------------------------------------------- */

tk_status tk_expand_to_fused(const tk_tensor *x,
                             const tk_tensor *token_topk_to_pos,
                             const tk_tensor *pos_to_expert,
                             const tk_tensor *out, tk_stream stream)
{
    static const char function[] = "tk_expand_to_fused";
    tk__set_last_instance(NULL);
    tk_status status;
    if ((status = tk__check_tensor(function, "x", x, 2)) ||
        (status = tk__check_movable(function, "x", x)) ||
        (status = tk__check_rows(function, "x", x)) ||
        (status = tk__check_mapping(function, x->shape[0], token_topk_to_pos,
                                    true, pos_to_expert)) ||
        (status = tk__check_expanded(function, x, pos_to_expert, out)) ||
        (status = tk__check_storage(function, "x", x)) ||
        (status = tk__check_storage(function, "token_topk_to_pos",
                                    token_topk_to_pos)) ||
        (status = tk__check_storage(function, "pos_to_expert",
                                    pos_to_expert)) ||
        (status = tk__check_storage(function, "out", out)))
        return status;
    /* TileKernels launches nothing without tokens (spec 5: empty inputs),
     * and nothing can be written into an empty out. */
    if (x->shape[0] == 0 || tk__tensor_empty(out))
        return TK_SUCCESS;

    size_t size = tk_dtype_size(x->dtype);
    tk_dtype any_dtype = size == 4 ? TK_U32 : size == 2 ? TK_U16 : TK_U8;
    tk_tensor x_view, out_view;
    bool vector = tk__expand_views(x, out, any_dtype, &x_view, &out_view);
    if (vector) {
        tk__set_last_instance("expand_to_fused__vec");
        return tkl_expand_to_fused__vec(&x_view, token_topk_to_pos,
                                        pos_to_expert, &out_view, stream);
    }
    if (size == 4) {
        tk__set_last_instance("expand_to_fused__any_u32");
        return tkl_expand_to_fused__any_u32(&x_view, token_topk_to_pos,
                                            pos_to_expert, &out_view, stream);
    }
    if (size == 2) {
        tk__set_last_instance("expand_to_fused__any_u16");
        return tkl_expand_to_fused__any_u16(&x_view, token_topk_to_pos,
                                            pos_to_expert, &out_view, stream);
    }
    tk__set_last_instance("expand_to_fused__any_u8");
    return tkl_expand_to_fused__any_u8(&x_view, token_topk_to_pos,
                                       pos_to_expert, &out_view, stream);
}

/* ---- expand_to_fused_with_sf ----------------------------------------------- */

tk_status tk_expand_to_fused_with_sf(const tk_tensor *x, const tk_tensor *x_sf,
                                     int num_per_channels,
                                     const tk_tensor *token_topk_to_pos,
                                     const tk_tensor *pos_to_expert,
                                     tk_sf_layout sf_layout,
                                     const tk_tensor *out,
                                     const tk_tensor *out_sf, tk_stream stream)
{
    static const char function[] = "tk_expand_to_fused_with_sf";
    tk__set_last_instance(NULL);
    tk_status status;
    if ((status = tk__check_tensor(function, "x", x, 2)) ||
        (status = tk__check_movable(function, "x", x)) ||
        (status = tk__check_rows(function, "x", x)) ||
        (status = tk__check_tensor(function, "x_sf", x_sf, 2)) ||
        (status = tk__check_mapping(function, x->shape[0], token_topk_to_pos,
                                    true, pos_to_expert)) ||
        (status = tk__check_expanded(function, x, pos_to_expert, out)) ||
        (status = tk__check_tensor(function, "out_sf", out_sf, 2)))
        return status;
    if (num_per_channels != 32 && num_per_channels != 128)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: num_per_channels is %d, expected 32 or 128",
                        function, num_per_channels);
    if (sf_layout != TK_SF_ROW_MAJOR && sf_layout != TK_SF_COL_MAJOR &&
        sf_layout != TK_SF_PACKED_UE8M0)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: sf_layout is %d, expected TK_SF_ROW_MAJOR, "
                        "TK_SF_COL_MAJOR or TK_SF_PACKED_UE8M0",
                        function, (int)sf_layout);

    /* x_sf: the token-major scales, contiguous: f32 (T, ceil(H / npc)), or
     * for the packed layout i32 (T, ceil(ceil(H / npc) / 4)). */
    int64_t tokens = x->shape[0], hidden = x->shape[1];
    int64_t expanded = pos_to_expert->shape[0];
    bool packed = sf_layout == TK_SF_PACKED_UE8M0;
    tk_dtype sf_dtype = packed ? TK_I32 : TK_F32;
    if (x_sf->dtype != sf_dtype)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: x_sf: dtype is %s, expected %s for %s", function,
                        tk__dtype_name(x_sf->dtype), tk__dtype_name(sf_dtype),
                        tk__sf_layout_name(sf_layout));
    tk_tensor expected;
    if (!tk__sf_layout(expanded, hidden, 1, num_per_channels, sf_layout,
                       &expected, NULL))
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: out: too large for a scale-factor tensor",
                        function);
    int64_t words = expected.shape[1];
    const char *words_meaning = packed ? "ceil(ceil(H / num_per_channels) "
                                         "/ 4) packed words"
                                       : "ceil(H / num_per_channels)";
    if ((status = tk__check_dim(function, "x_sf", x_sf, 0, tokens,
                                "x's shape[0]")) ||
        (status = tk__check_dim(function, "x_sf", x_sf, 1, words,
                                words_meaning)) ||
        (status = tk__check_contiguous(function, "x_sf", x_sf)))
        return status;

    /* out_sf: exactly tk_sf_desc(N, H, 1, npc, sf_layout). */
    if ((status = tk__check_sf_desc(function, "out_sf", out_sf, &expected,
                                    sf_layout, "pos_to_expert's shape[0]",
                                    words_meaning)) ||
        (status = tk__check_storage(function, "x", x)) ||
        (status = tk__check_storage(function, "x_sf", x_sf)) ||
        (status = tk__check_storage(function, "token_topk_to_pos",
                                    token_topk_to_pos)) ||
        (status = tk__check_storage(function, "pos_to_expert",
                                    pos_to_expert)) ||
        (status = tk__check_storage(function, "out", out)) ||
        (status = tk__check_storage(function, "out_sf", out_sf)))
        return status;
    if (tokens == 0 || expanded == 0 || hidden == 0)
        return TK_SUCCESS;

    tk_tensor x_view, out_view;
    bool vector = tk__expand_views(x, out, TK_U8, &x_view, &out_view);
    tk_tensor scales = tk__view(x_sf->data, TK_U32, 2, tokens, words, words, 1);
    /* the layout's own strides: out_sf's may differ only on size-1
     * dimensions, which are never stepped over */
    tk_tensor out_scales = tk__view(out_sf->data, TK_U32, 2, expanded, words,
                                    expected.strides[0], expected.strides[1]);
    /* vec's block column (TK_EXPAND_SF_WIDE_WORDS words) halves a 7168-byte
     * e4m3 row exactly; a row it does not divide goes to vec4 (512 words),
     * so that fewer lanes of the last block column run empty. */
    if (vector && x_view.shape[1] % TK_EXPAND_SF_WIDE_WORDS == 0) {
        tk__set_last_instance("expand_to_fused_with_sf__vec");
        return tkl_expand_to_fused_with_sf__vec(&x_view, &scales,
                                                token_topk_to_pos,
                                                pos_to_expert, &out_view,
                                                &out_scales, stream);
    }
    if (vector) {
        tk__set_last_instance("expand_to_fused_with_sf__vec4");
        return tkl_expand_to_fused_with_sf__vec4(&x_view, &scales,
                                                 token_topk_to_pos,
                                                 pos_to_expert, &out_view,
                                                 &out_scales, stream);
    }
    tk__set_last_instance("expand_to_fused_with_sf__any");
    return tkl_expand_to_fused_with_sf__any(&x_view, &scales,
                                            token_topk_to_pos, pos_to_expert,
                                            &out_view, &out_scales, stream);
}

/* ---- reduce_fused ---------------------------------------------------------- */

/* Two instances per (input, output) dtype pair (kernels/moe_fused.tk): one
 * whose block covers `columns` columns with several vectors per thread
 * (7168 = TileKernels' hidden size, or half of it), taken when `columns`
 * divides H, and an `_any` one with 2048-column blocks and bounds checks
 * for every other H. */
typedef tk_status (*tk__reduce_fused_launcher)(const tk_tensor *,
                                               const tk_tensor *,
                                               const tk_tensor *,
                                               const tk_tensor *,
                                               const tk_tensor *,
                                               const tk_tensor *, tk_stream);

static const struct {
    tk_dtype in, out;
    int64_t columns;
    const char *name, *any_name;
    tk__reduce_fused_launcher launcher, any_launcher;
} tk__reduce_fused_instances[] = {
    {TK_F32, TK_F32, 3584, "reduce_fused__f32", "reduce_fused__f32_any",
     tkl_reduce_fused__f32, tkl_reduce_fused__f32_any},
    {TK_BF16, TK_BF16, 7168, "reduce_fused__bf16", "reduce_fused__bf16_any",
     tkl_reduce_fused__bf16, tkl_reduce_fused__bf16_any},
    {TK_F32, TK_E4M3, 3584, "reduce_fused__f32_e4m3",
     "reduce_fused__f32_e4m3_any", tkl_reduce_fused__f32_e4m3,
     tkl_reduce_fused__f32_e4m3_any},
    {TK_BF16, TK_E4M3, 7168, "reduce_fused__bf16_e4m3",
     "reduce_fused__bf16_e4m3_any", tkl_reduce_fused__bf16_e4m3,
     tkl_reduce_fused__bf16_e4m3_any},
    {TK_E4M3, TK_E4M3, 7168, "reduce_fused__e4m3", "reduce_fused__e4m3_any",
     tkl_reduce_fused__e4m3, tkl_reduce_fused__e4m3_any},
};

/* An optional f32 input: NULL, or rank `rank`, f32, contiguous, with
 * shape[d] == dims[d]. */
static tk_status tk__check_optional(const char *function, const char *argument,
                                    const tk_tensor *tensor, int rank,
                                    const int64_t *dims, const char *meaning)
{
    static const tk_dtype f32[] = {TK_F32};
    if (tensor == NULL)
        return TK_SUCCESS;
    tk_status status;
    if ((status = tk__check_tensor(function, argument, tensor, rank)) ||
        (status = tk__check_dtype(function, argument, tensor, f32, 1)))
        return status;
    for (int d = 0; d < rank; d++)
        if ((status = tk__check_dim(function, argument, tensor, d, dims[d],
                                    meaning)))
            return status;
    if ((status = tk__check_contiguous(function, argument, tensor)) ||
        (status = tk__check_storage(function, argument, tensor)))
        return status;
    return TK_SUCCESS;
}

tk_status tk_reduce_fused(const tk_tensor *x, const tk_tensor *x_sf,
                          const tk_tensor *topk_weights,
                          const tk_tensor *token_topk_to_pos,
                          const tk_tensor *sf, const tk_tensor *out,
                          tk_stream stream)
{
    static const char function[] = "tk_reduce_fused";
    static const tk_dtype inputs[] = {TK_F32, TK_BF16, TK_E4M3};
    tk__set_last_instance(NULL);
    tk_status status;
    if ((status = tk__check_tensor(function, "x", x, 2)) ||
        (status = tk__check_dtype(function, "x", x, inputs, 3)) ||
        (status = tk__check_rows(function, "x", x)) ||
        (status = tk__check_tensor(function, "token_topk_to_pos",
                                   token_topk_to_pos, 2)) ||
        (status = tk__check_tensor(function, "out", out, 2)))
        return status;
    int64_t rows = x->shape[0], hidden = x->shape[1];
    int64_t tokens = token_topk_to_pos->shape[0];
    int64_t topk = token_topk_to_pos->shape[1];
    if (hidden % TK_REDUCE_HIDDEN_MULTIPLE != 0)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: x: shape[1] is %lld, expected a multiple of %d",
                        function, (long long)hidden, TK_REDUCE_HIDDEN_MULTIPLE);
    /* The kernel reads whole 16-byte vectors of every row. */
    int64_t size = (int64_t)tk_dtype_size(x->dtype);
    if (rows > 1 && x->strides[0] * size % TK_FUSED_VECTOR_BYTES != 0)
        return tk__fail(TK_ERROR_UNSUPPORTED,
                        "%s: x: strides[0] is %lld: row strides that are not "
                        "a multiple of 16 bytes are not supported",
                        function, (long long)x->strides[0]);
    if ((status = tk__check_mapping(function, tokens, token_topk_to_pos,
                                    false, NULL)))
        return status;

    /* The output is x's dtype, or e4m3 (TileKernels' fp8_format 'e4m3'). */
    if (out->dtype != x->dtype && out->dtype != TK_E4M3)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: out: dtype is %s, expected %s (x's dtype) or "
                        "e4m3",
                        function, tk__dtype_name(out->dtype),
                        tk__dtype_name(x->dtype));
    if ((status = tk__check_dim(function, "out", out, 0, tokens,
                                "token_topk_to_pos's shape[0]")) ||
        (status = tk__check_dim(function, "out", out, 1, hidden,
                                "x's shape[1]")) ||
        (status = tk__check_contiguous(function, "out", out)))
        return status;
    if (sf != NULL && out->dtype != TK_E4M3)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: sf: only an e4m3 output takes an output scale "
                        "(out is %s)",
                        function, tk__dtype_name(out->dtype));
    const int64_t weight_dims[2] = {tokens, topk}, row_dims[1] = {rows};
    const int64_t scalar_dims[1] = {1};
    if ((status = tk__check_optional(function, "topk_weights", topk_weights,
                                     2, weight_dims,
                                     "token_topk_to_pos's shape")) ||
        (status = tk__check_optional(function, "x_sf", x_sf, 1, row_dims,
                                     "x's shape[0]")) ||
        (status = tk__check_optional(function, "sf", sf, 1, scalar_dims,
                                     "one output scale")) ||
        (status = tk__check_storage(function, "x", x)) ||
        (status = tk__check_storage(function, "token_topk_to_pos",
                                    token_topk_to_pos)) ||
        (status = tk__check_storage(function, "out", out)))
        return status;
    if (tokens == 0 || hidden == 0)
        return TK_SUCCESS;

    /* Absent inputs are empty tensors; an empty present one (K == 0 or
     * N == 0) reads the same, since nothing would be read from it. */
    tk_tensor no_weights = tk__absent(2), no_row_scales = tk__absent(1);
    tk_tensor no_scale = tk__absent(1);
    /* a single row is never stepped over: give it a stride that keeps
     * the vector alignment */
    tk_tensor input = *x;
    if (rows <= 1)
        input.strides[0] = hidden;
    for (size_t i = 0; i < sizeof tk__reduce_fused_instances /
                               sizeof tk__reduce_fused_instances[0];
         i++) {
        if (tk__reduce_fused_instances[i].in != x->dtype ||
            tk__reduce_fused_instances[i].out != out->dtype)
            continue;
        bool whole = hidden % tk__reduce_fused_instances[i].columns == 0;
        tk__set_last_instance(whole ? tk__reduce_fused_instances[i].name
                                    : tk__reduce_fused_instances[i].any_name);
        tk__reduce_fused_launcher launcher =
            whole ? tk__reduce_fused_instances[i].launcher
                  : tk__reduce_fused_instances[i].any_launcher;
        return launcher(&input, topk_weights ? topk_weights : &no_weights,
                        token_topk_to_pos, x_sf ? x_sf : &no_row_scales,
                        sf ? sf : &no_scale, out, stream);
    }
    return tk__fail(TK_ERROR_UNSUPPORTED,
                    "%s: no instance for %s input and %s output (shipped: "
                    "f32 -> f32 / e4m3, bf16 -> bf16 / e4m3, e4m3 -> e4m3)",
                    function, tk__dtype_name(x->dtype),
                    tk__dtype_name(out->dtype));
}
