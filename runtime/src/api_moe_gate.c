/*
 * api_moe_gate.c -- tk_topk_gate, tk_topk_sum_and_topk_group_idx,
 * tk_top2_sum_gate and tk_normalize_weight (tilekernels-spec.md 5.1, 5.2,
 * 5.3, 5.8; kernels/moe_gate.tk).
 *
 * Each function checks TileKernels' host-side asserts (and the implicit
 * ones the original leaves to device asserts, spec 15.9), then picks the
 * instance whose register row is wide enough:
 *
 *   topk_gate__e<128|256|384|512>            E <= 128 ... 512 experts
 *   topk_sum_and_topk_group_idx__eg<N>[_any] group size <= N, _any when
 *                                            the group size is not a
 *                                            multiple of 4 (no vectors)
 *   top2_sum_gate__pair<128|256>             two tokens per warp (16 lanes
 *                                            each): R <= 128 or 256, K + S
 *                                            <= 16, G <= 16 in grouped mode
 *   top2_sum_gate__r<128|256|384>            one token per warp: the rest,
 *                                            R <= 384 (the spec's largest
 *                                            expert count)
 *   normalize_weight__default
 *
 * Optional top2_sum_gate tensors reach the kernel as empty tensors plus a
 * flag, so one instance serves every combination.
 */
#include <math.h>

#include "tk_internal.h"
#include "tk_kernels.h"

#define TK_COUNT(array) ((int)(sizeof(array) / sizeof((array)[0])))

/* Experts one warp holds in registers per vector column (32 lanes x 4). */
#define TK_GATE_EXPERTS_PER_VECTOR 128
/* Widest rows the instances hold: 4 vectors per lane for topk_gate, 3
 * for the (much larger) top2_sum_gate. */
#define TK_GATE_MAX_EXPERTS 512
#define TK_TOP2_MAX_EXPERTS 384
/* One warp per token: ranks and slots live in lanes. */
#define TK_GATE_WARP 32
/* top2_sum_gate's pair instances: a token has 16 lanes (slots and group
 * ranks live in them) and 64 experts per vector column; pair128 holds 2
 * columns, pair256 4, so they step by 128 experts as the others do. */
#define TK_TOP2_PAIR_LANES 16
#define TK_TOP2_PAIR_MAX_EXPERTS 256

typedef tk_status (*tk__gate_launcher)(const tk_tensor *a, const tk_tensor *b,
                                       tk_stream stream);

static const tk__gate_launcher tk__topk_gate_launchers[] = {
    tkl_topk_gate__e128, tkl_topk_gate__e256, tkl_topk_gate__e384,
    tkl_topk_gate__e512};
static const char *const tk__topk_gate_names[] = {
    "topk_gate__e128", "topk_gate__e256", "topk_gate__e384",
    "topk_gate__e512"};

/* A contiguous tensor of `rank` and one of `dtype`. */
static tk_status tk__gate_tensor(const char *function, const char *argument,
                                 const tk_tensor *tensor, int rank,
                                 tk_dtype dtype)
{
    tk_status status;
    if ((status = tk__check_tensor(function, argument, tensor, rank)) ||
        (status = tk__check_dtype(function, argument, tensor, &dtype, 1)) ||
        (status = tk__check_contiguous(function, argument, tensor)))
        return status;
    return TK_SUCCESS;
}

/* ---- topk_gate ------------------------------------------------------------ */

tk_status tk_topk_gate(const tk_tensor *scores, const tk_tensor *topk_idx,
                       tk_stream stream)
{
    static const char function[] = "tk_topk_gate";
    tk__set_last_instance(NULL);
    tk_status status;
    if ((status = tk__gate_tensor(function, "scores", scores, 2, TK_F32)) ||
        (status = tk__gate_tensor(function, "topk_idx", topk_idx, 2, TK_I64)))
        return status;
    int64_t tokens = scores->shape[0], experts = scores->shape[1];
    int64_t topk = topk_idx->shape[1];
    if ((status = tk__check_dim(function, "topk_idx", topk_idx, 0, tokens,
                                "scores' shape[0]")))
        return status;
    if (topk < 1 || topk > experts)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: topk_idx: shape[1] (num_topk) is %lld, expected "
                        "1 ... %lld (the number of experts)",
                        function, (long long)topk, (long long)experts);
    if (experts % 4 != 0 || experts > TK_GATE_MAX_EXPERTS)
        return tk__fail(TK_ERROR_UNSUPPORTED,
                        "%s: scores: %lld experts; the library ships multiples "
                        "of 4 up to %d",
                        function, (long long)experts, TK_GATE_MAX_EXPERTS);
    if ((status = tk__check_storage(function, "scores", scores)) ||
        (status = tk__check_storage(function, "topk_idx", topk_idx)))
        return status;
    if (tokens == 0)
        return TK_SUCCESS;
    int which = (int)((experts - 1) / TK_GATE_EXPERTS_PER_VECTOR);
    tk__set_last_instance(tk__topk_gate_names[which]);
    return tk__topk_gate_launchers[which](scores, topk_idx, stream);
}

/* ---- topk_sum_and_topk_group_idx ------------------------------------------ */

typedef tk_status (*tk__group_launcher)(const tk_tensor *scores,
                                        const tk_tensor *group_idx,
                                        int32_t num_topk_sum,
                                        tk_stream stream);

static const struct {
    int max_group_size;
    bool any;
    const char *name;
    tk__group_launcher launcher;
} tk__group_instances[] = {
#define TK_INSTANCE(size, any, label)                                     \
    {size, any, "topk_sum_and_topk_group_idx__" #label,                   \
     tkl_topk_sum_and_topk_group_idx__##label}
    TK_INSTANCE(8, false, eg8),        TK_INSTANCE(16, false, eg16),
    TK_INSTANCE(32, false, eg32),      TK_INSTANCE(64, false, eg64),
    TK_INSTANCE(8, true, eg8_any),     TK_INSTANCE(16, true, eg16_any),
    TK_INSTANCE(32, true, eg32_any),
#undef TK_INSTANCE
};

tk_status tk_topk_sum_and_topk_group_idx(const tk_tensor *scores,
                                         int num_topk_sum,
                                         const tk_tensor *group_idx,
                                         tk_stream stream)
{
    static const char function[] = "tk_topk_sum_and_topk_group_idx";
    tk__set_last_instance(NULL);
    tk_status status;
    if ((status = tk__gate_tensor(function, "scores", scores, 3, TK_F32)) ||
        (status = tk__gate_tensor(function, "group_idx", group_idx, 2, TK_I64)))
        return status;
    int64_t tokens = scores->shape[0], groups = scores->shape[1];
    int64_t group_size = scores->shape[2], keep = group_idx->shape[1];
    if (num_topk_sum != 1 && num_topk_sum != 2)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: num_topk_sum is %d, expected 1 or 2", function,
                        num_topk_sum);
    if (groups < 1 || groups > TK_GATE_WARP)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: scores: shape[1] (groups) is %lld, expected 1 ... "
                        "%d",
                        function, (long long)groups, TK_GATE_WARP);
    if (group_size < num_topk_sum)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: scores: shape[2] (experts per group) is %lld, "
                        "less than num_topk_sum %d",
                        function, (long long)group_size, num_topk_sum);
    if ((status = tk__check_dim(function, "group_idx", group_idx, 0, tokens,
                                "scores' shape[0]")))
        return status;
    if (keep < 1 || keep > groups)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: group_idx: shape[1] (num_topk_groups) is %lld, "
                        "expected 1 ... %lld (the number of groups)",
                        function, (long long)keep, (long long)groups);
    if ((status = tk__check_storage(function, "scores", scores)) ||
        (status = tk__check_storage(function, "group_idx", group_idx)))
        return status;
    bool any = group_size % 4 != 0;
    for (int i = 0; i < TK_COUNT(tk__group_instances); i++) {
        if (tk__group_instances[i].any != any ||
            group_size > tk__group_instances[i].max_group_size)
            continue;
        if (tokens == 0)
            return TK_SUCCESS;
        tk__set_last_instance(tk__group_instances[i].name);
        return tk__group_instances[i].launcher(scores, group_idx,
                                               num_topk_sum, stream);
    }
    return tk__fail(TK_ERROR_UNSUPPORTED,
                    "%s: %lld experts per group; the library ships up to 64 "
                    "(multiples of 4) or 32 (any)",
                    function, (long long)group_size);
}

/* ---- top2_sum_gate ---------------------------------------------------------- */

typedef tk_status (*tk__top2_launcher)(
    const tk_tensor *, const tk_tensor *, const tk_tensor *, const tk_tensor *,
    const tk_tensor *, const tk_tensor *, const tk_tensor *, const tk_tensor *,
    const tk_tensor *, int32_t, int32_t, int32_t, int32_t, int32_t, bool, bool,
    bool, bool, int32_t, int32_t, int32_t, int32_t, int32_t, float, tk_stream);

static const tk__top2_launcher tk__top2_launchers[] = {
    tkl_top2_sum_gate__r128, tkl_top2_sum_gate__r256, tkl_top2_sum_gate__r384};
static const char *const tk__top2_names[] = {
    "top2_sum_gate__r128", "top2_sum_gate__r256", "top2_sum_gate__r384"};
static const tk__top2_launcher tk__top2_pair_launchers[] = {
    tkl_top2_sum_gate__pair128, tkl_top2_sum_gate__pair256};
static const char *const tk__top2_pair_names[] = {
    "top2_sum_gate__pair128", "top2_sum_gate__pair256"};

/* An optional 1-D tensor of `length` elements of `dtype` (NULL = absent);
 * *empty receives the empty stand-in the kernel gets when it is absent. */
static tk_status tk__optional_vector(const char *function, const char *argument,
                                     const tk_tensor *tensor, tk_dtype dtype,
                                     int64_t length, const char *meaning)
{
    if (tensor == NULL)
        return TK_SUCCESS;
    tk_status status;
    if ((status = tk__gate_tensor(function, argument, tensor, 1, dtype)) ||
        (status = tk__check_dim(function, argument, tensor, 0, length,
                                meaning)) ||
        (status = tk__check_storage(function, argument, tensor)))
        return status;
    return TK_SUCCESS;
}

static tk_tensor tk__absent(tk_dtype dtype, int rank)
{
    tk_tensor t = {0};
    t.dtype = dtype;
    t.rank = rank;
    for (int d = 0; d < rank; d++)
        t.strides[d] = 1;
    if (rank == 2)
        t.shape[1] = 1;
    return t;
}

/* Host-side asserts of spec 5.3 on the scalar options. */
static tk_status tk__top2_check_options(const char *function,
                                        const tk_top2_sum_gate_options *o,
                                        int64_t routed, int *shared)
{
    if (o->num_topk < 1 || o->num_topk > routed || o->num_topk > TK_GATE_WARP)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: num_topk is %d, expected 1 ... min(%lld, %d)",
                        function, o->num_topk, (long long)routed, TK_GATE_WARP);
    if ((o->num_groups == 0) != (o->num_topk_groups == 0) ||
        o->num_groups < 0 || o->num_topk_groups < 0 ||
        o->num_topk_groups > o->num_groups)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: num_groups %d and num_topk_groups %d: expected "
                        "both 0, or 1 <= num_topk_groups <= num_groups",
                        function, o->num_groups, o->num_topk_groups);
    if (o->num_groups != 0 && routed % o->num_groups != 0)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: num_groups %d does not divide %lld experts",
                        function, o->num_groups, (long long)routed);
    if (o->num_groups != o->num_topk_groups) {
        int64_t size = routed / o->num_groups;
        if (o->num_groups > TK_GATE_WARP || size > TK_GATE_WARP)
            return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                            "%s: grouped mode needs num_groups <= 32 and "
                            "experts per group <= 32, got %d groups of %lld",
                            function, o->num_groups, (long long)size);
        if (o->num_topk > o->num_topk_groups * size)
            return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                            "%s: num_topk %d exceeds the %lld experts of the "
                            "%d selected groups (spec 15.9)",
                            function, o->num_topk,
                            (long long)(o->num_topk_groups * size),
                            o->num_topk_groups);
    }
    if (o->scoring_func != TK_SCORING_SIGMOID &&
        o->scoring_func != TK_SCORING_SQRTSOFTPLUS &&
        o->scoring_func != TK_SCORING_SOFTMAX)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: scoring_func is %d, expected TK_SCORING_SIGMOID, "
                        "TK_SCORING_SQRTSOFTPLUS or TK_SCORING_SOFTMAX "
                        "(TileKernels rejects identity here)",
                        function, (int)o->scoring_func);
    *shared = 0;
    if (o->use_shared_as_routed) {
        int s = o->num_shared_experts;
        if (s != 1 && s != 2)
            return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                            "%s: num_shared_experts is %d, expected 1 or 2",
                            function, s);
        if (o->num_topk % s != 0 || routed % (o->num_topk / s) != 0)
            return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                            "%s: use_shared_as_routed needs num_topk %% "
                            "num_shared_experts == 0 and experts %% (num_topk "
                            "/ num_shared_experts) == 0 (%d, %d, %lld)",
                            function, o->num_topk, s, (long long)routed);
        *shared = s;
    }
    if (o->num_topk + *shared > TK_GATE_WARP)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: num_topk + num_shared_experts is %d, expected <= "
                        "%d",
                        function, o->num_topk + *shared, TK_GATE_WARP);
    if (o->num_ep_ranks < 1 || o->ep_rank < 0 || o->ep_rank >= o->num_ep_ranks)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: ep_rank %d / num_ep_ranks %d: expected 0 <= "
                        "ep_rank < num_ep_ranks",
                        function, o->ep_rank, o->num_ep_ranks);
    if (o->num_tp_ranks < 1 || o->tp_rank < 0 || o->tp_rank >= o->num_tp_ranks)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: tp_rank %d / num_tp_ranks %d: expected 0 <= "
                        "tp_rank < num_tp_ranks",
                        function, o->tp_rank, o->num_tp_ranks);
    if (isnan(o->routed_scaling_factor))
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: routed_scaling_factor is NaN", function);
    return TK_SUCCESS;
}

tk_status tk_top2_sum_gate(const tk_tensor *logits, const tk_tensor *bias,
                           const tk_top2_sum_gate_options *options,
                           const tk_tensor *mask,
                           const tk_tensor *fix_routing_mask,
                           const tk_tensor *to_physical_map,
                           const tk_tensor *logical_count,
                           const tk_tensor *unmapped_topk_idx,
                           const tk_tensor *topk_idx,
                           const tk_tensor *topk_weights, tk_stream stream)
{
    static const char function[] = "tk_top2_sum_gate";
    tk__set_last_instance(NULL);
    tk_status status;
    if (options == NULL)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT, "%s: options is NULL",
                        function);
    if ((status = tk__gate_tensor(function, "logits", logits, 2, TK_F32)))
        return status;
    int64_t tokens = logits->shape[0], routed = logits->shape[1];
    if (routed < 1 || routed % 4 != 0)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: logits: shape[1] (experts) is %lld, expected a "
                        "positive multiple of 4",
                        function, (long long)routed);
    int shared = 0;
    if ((status = tk__top2_check_options(function, options, routed, &shared)))
        return status;
    int topk = options->num_topk, slots = topk + shared;
    if ((status = tk__gate_tensor(function, "bias", bias, 1, TK_F32)) ||
        (status = tk__check_dim(function, "bias", bias, 0, routed,
                                "logits' shape[1]")) ||
        (status = tk__optional_vector(function, "mask", mask, TK_BOOL, tokens,
                                      "logits' shape[0]")) ||
        (status = tk__optional_vector(function, "fix_routing_mask",
                                      fix_routing_mask, TK_BOOL, tokens,
                                      "logits' shape[0]")))
        return status;
    if ((to_physical_map == NULL) != (logical_count == NULL))
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: to_physical_map and logical_count come together "
                        "(one is NULL, the other is not)",
                        function);
    if (fix_routing_mask != NULL && unmapped_topk_idx == NULL)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: fix_routing_mask requires unmapped_topk_idx",
                        function);
    int64_t extra = 0;
    if (to_physical_map != NULL) {
        if ((status = tk__gate_tensor(function, "to_physical_map",
                                      to_physical_map, 2, TK_I32)))
            return status;
        int64_t rows = to_physical_map->shape[0];
        if (rows < routed + shared || to_physical_map->shape[1] < 1)
            return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                            "%s: to_physical_map: shape is (%lld, %lld), "
                            "expected at least %lld rows (experts + shared) "
                            "and 1 column",
                            function, (long long)rows,
                            (long long)to_physical_map->shape[1],
                            (long long)(routed + shared));
        extra = to_physical_map->shape[1] - 1;
        if ((status = tk__optional_vector(function, "logical_count",
                                          logical_count, TK_I32, rows,
                                          "to_physical_map's shape[0]")) ||
            (status = tk__check_storage(function, "to_physical_map",
                                        to_physical_map)))
            return status;
    }
    if (shared > extra)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: %d shared experts need a to_physical_map with at "
                        "least %d extra columns, it has %lld",
                        function, shared, shared, (long long)extra);
    int64_t per_rank = (routed + extra) / options->num_ep_ranks;
    if (per_rank < 1 || per_rank * options->num_tp_ranks > INT32_MAX)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: num_ep_ranks %d leaves %lld experts per rank",
                        function, options->num_ep_ranks, (long long)per_rank);
    if (unmapped_topk_idx != NULL) {
        if ((status = tk__check_tensor(function, "unmapped_topk_idx",
                                       unmapped_topk_idx, 2)) ||
            (status = tk__check_dtype(function, "unmapped_topk_idx",
                                      unmapped_topk_idx,
                                      (const tk_dtype[]){TK_I64}, 1)) ||
            (status = tk__check_dim(function, "unmapped_topk_idx",
                                    unmapped_topk_idx, 0, tokens,
                                    "logits' shape[0]")) ||
            (status = tk__check_dim(function, "unmapped_topk_idx",
                                    unmapped_topk_idx, 1, topk, "num_topk")))
            return status;
        if (topk > 1 && unmapped_topk_idx->strides[1] != 1)
            return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                            "%s: unmapped_topk_idx: strides[1] is %lld, "
                            "expected 1",
                            function, (long long)unmapped_topk_idx->strides[1]);
        if (tokens > 1 && unmapped_topk_idx->strides[0] < topk)
            return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                            "%s: unmapped_topk_idx: strides[0] is %lld, less "
                            "than num_topk %d: rows overlap",
                            function, (long long)unmapped_topk_idx->strides[0],
                            topk);
    }
    if ((status = tk__gate_tensor(function, "topk_idx", topk_idx, 2, TK_I64)) ||
        (status = tk__check_dim(function, "topk_idx", topk_idx, 0, tokens,
                                "logits' shape[0]")) ||
        (status = tk__check_dim(function, "topk_idx", topk_idx, 1, slots,
                                "num_topk + shared experts")) ||
        (status = tk__gate_tensor(function, "topk_weights", topk_weights, 2,
                                  TK_F32)) ||
        (status = tk__check_dim(function, "topk_weights", topk_weights, 0,
                                tokens, "logits' shape[0]")) ||
        (status = tk__check_dim(function, "topk_weights", topk_weights, 1,
                                slots, "num_topk + shared experts")) ||
        (status = tk__check_storage(function, "logits", logits)) ||
        (status = tk__check_storage(function, "bias", bias)) ||
        (status = tk__check_storage(function, "topk_idx", topk_idx)) ||
        (status = tk__check_storage(function, "topk_weights", topk_weights)))
        return status;
    if (unmapped_topk_idx != NULL &&
        (status = tk__check_storage(function, "unmapped_topk_idx",
                                    unmapped_topk_idx)))
        return status;
    if (routed > TK_TOP2_MAX_EXPERTS)
        return tk__fail(TK_ERROR_UNSUPPORTED,
                        "%s: %lld experts; the library ships up to %d",
                        function, (long long)routed, TK_TOP2_MAX_EXPERTS);
    if (tokens == 0)
        return TK_SUCCESS;

    tk_tensor no_mask = tk__absent(TK_BOOL, 1), no_fix = tk__absent(TK_BOOL, 1);
    tk_tensor no_map = tk__absent(TK_I32, 2), no_count = tk__absent(TK_I32, 1);
    tk_tensor no_unmapped = tk__absent(TK_I64, 2);
    no_unmapped.shape[1] = topk;
    /* A single row or column is never stepped over: give the kernel the
     * contiguous strides its constraints expect. */
    tk_tensor unmapped = unmapped_topk_idx ? *unmapped_topk_idx : no_unmapped;
    if (tokens == 1)
        unmapped.strides[0] = topk;
    unmapped.strides[1] = 1;
    /* Two tokens per warp where a token's slots and group ranks fit in 16
     * lanes (the per-token butterflies, group ranking and epilogue are
     * then shared by two tokens); one per warp otherwise. */
    bool grouped = options->num_groups != options->num_topk_groups;
    int32_t group_size = grouped ? (int32_t)(routed / options->num_groups) : 0;
    tk__top2_launcher launcher;
    if (routed <= TK_TOP2_PAIR_MAX_EXPERTS && slots <= TK_TOP2_PAIR_LANES &&
        (!grouped || options->num_groups <= TK_TOP2_PAIR_LANES)) {
        int which = (int)((routed - 1) / TK_GATE_EXPERTS_PER_VECTOR);
        tk__set_last_instance(tk__top2_pair_names[which]);
        launcher = tk__top2_pair_launchers[which];
    } else {
        int which = (int)((routed - 1) / TK_GATE_EXPERTS_PER_VECTOR);
        tk__set_last_instance(tk__top2_names[which]);
        launcher = tk__top2_launchers[which];
    }
    return launcher(
        logits, bias, mask ? mask : &no_mask,
        fix_routing_mask ? fix_routing_mask : &no_fix,
        to_physical_map ? to_physical_map : &no_map,
        logical_count ? logical_count : &no_count, &unmapped, topk_idx,
        topk_weights, topk, options->num_groups, options->num_topk_groups,
        group_size, (int32_t)options->scoring_func, mask != NULL,
        fix_routing_mask != NULL,
        to_physical_map != NULL, unmapped_topk_idx != NULL, options->ep_rank,
        options->tp_rank, options->num_tp_ranks, (int32_t)per_rank,
        (int32_t)(per_rank * options->num_tp_ranks),
        options->routed_scaling_factor, stream);
}

/* ---- normalize_weight ------------------------------------------------------ */

tk_status tk_normalize_weight(const tk_tensor *topk_weights,
                              const tk_tensor *denominator,
                              const tk_tensor *normalized, tk_stream stream)
{
    static const char function[] = "tk_normalize_weight";
    tk__set_last_instance(NULL);
    tk_status status;
    if ((status = tk__gate_tensor(function, "topk_weights", topk_weights, 2,
                                  TK_F32)) ||
        (status = tk__gate_tensor(function, "denominator", denominator, 1,
                                  TK_F32)) ||
        (status = tk__gate_tensor(function, "normalized", normalized, 2,
                                  TK_F32)))
        return status;
    int64_t tokens = topk_weights->shape[0], topk = topk_weights->shape[1];
    if ((status = tk__check_dim(function, "denominator", denominator, 0,
                                tokens, "topk_weights' shape[0]")) ||
        (status = tk__check_dim(function, "normalized", normalized, 0, tokens,
                                "topk_weights' shape[0]")) ||
        (status = tk__check_dim(function, "normalized", normalized, 1, topk,
                                "topk_weights' shape[1]")) ||
        (status = tk__check_storage(function, "topk_weights", topk_weights)) ||
        (status = tk__check_storage(function, "denominator", denominator)) ||
        (status = tk__check_storage(function, "normalized", normalized)))
        return status;
    if (tokens == 0)
        return TK_SUCCESS;
    tk__set_last_instance("normalize_weight__default");
    return tkl_normalize_weight__default(topk_weights, denominator, normalized,
                                         stream);
}
