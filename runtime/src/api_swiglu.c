/*
 * api_swiglu.c -- the fused SwiGLU casts (tilekernels-spec.md 6.9, 6.10,
 * 6.11; kernels/swiglu.tk, the backward in kernels/swiglu_backward.tk):
 *
 *   tk_swiglu_forward_and_per_token_cast
 *       swiglu_forward_per_token_cast__<in>[_packed][_count]  npc == 128
 *       swiglu_forward_per_row_cast__<in>             npc == I
 *   tk_swiglu_backward_and_per_token_cast
 *       swiglu_backward_clear_weight_grad__default, then
 *       swiglu_backward_per_token_cast__npc<32|128>[_clamp]
 *   tk_swiglu_forward_and_per_channel_cast_and_transpose
 *       swiglu_forward_per_channel_cast__bm<32|128>[_t]  (_t: tiles of
 *       64 channels, the others 32; x's width % 128 == 0 makes I % 64 == 0)
 *
 * round_sf is a kernel argument, not part of the instance.
 *
 * Each function validates the TileKernels-level arguments, then hands the
 * kernels x as the (rows, 2, I) view of the (rows, 2I) matrix, optional
 * tensors the call does not use as empty tensors (plus a flag), and the
 * packed UE8M0 SF (int32 (N, W), strides (1, TA)) as the byte view
 * (N, W, 4) with strides (4, 4 * TA, 1).
 */
#include <float.h>
#include <string.h>

#include "tk_internal.h"
#include "tk_kernels.h"

#define TK_SWIGLU_COUNT(array) ((int)(sizeof(array) / sizeof((array)[0])))
/* The original sizes its counting grid at 4 CTAs per SM (spec 6.9); the
 * counting instances of swiglu_forward_per_token_cast (96 registers, 128
 * threads) fit 5 per SM, and a grid of that many keeps every SM full while
 * the counts still reach memory through a few thousand atomics. */
#define TK_SWIGLU_COUNT_BLOCKS_PER_SM 5
/* Row and column tile of swiglu_forward_per_token_cast. */
#define TK_SWIGLU_FORWARD_ROWS 4
#define TK_SWIGLU_FORWARD_COLUMNS 512

/* ---- shared helpers ------------------------------------------------------ */

static tk_tensor tk__swiglu_empty(tk_dtype dtype, int rank)
{
    tk_tensor empty;
    memset(&empty, 0, sizeof empty);
    empty.dtype = dtype;
    empty.rank = rank;
    for (int d = 0; d < rank; d++)
        empty.strides[d] = 1;
    return empty;
}

/* The (rows, 2, I) view of a contiguous (rows, 2I) matrix. */
static tk_tensor tk__swiglu_halves(const tk_tensor *x)
{
    int64_t half = x->shape[1] / 2;
    tk_tensor view = {.data = x->data, .dtype = x->dtype, .rank = 3,
                      .shape = {x->shape[0], 2, half},
                      .strides = {2 * half, half, 1}};
    return view;
}

/* A contiguous tensor seen as one dimension. */
static tk_tensor tk__swiglu_flat(const tk_tensor *t)
{
    int64_t count = 1;
    for (int d = 0; d < t->rank; d++)
        count *= t->shape[d];
    tk_tensor view = {.data = t->data, .dtype = t->dtype, .rank = 1,
                      .shape = {count}, .strides = {1}};
    return view;
}

/* Every check a plain contiguous tensor argument needs, in one call. */
static tk_status tk__swiglu_check(const char *function, const char *argument,
                                  const tk_tensor *t, tk_dtype dtype,
                                  int rank, const int64_t *shape,
                                  const char *const *meaning)
{
    tk_status status;
    if ((status = tk__check_tensor(function, argument, t, rank)) ||
        (status = tk__check_dtype(function, argument, t, &dtype, 1)))
        return status;
    for (int d = 0; d < rank; d++)
        if ((status = tk__check_dim(function, argument, t, d, shape[d],
                                    meaning[d])))
            return status;
    if ((status = tk__check_contiguous(function, argument, t)) ||
        (status = tk__check_storage(function, argument, t)))
        return status;
    return TK_SUCCESS;
}

/* An optional clamp value: NULL, or a number >= 0 (a negative clamp makes
 * max(min(u, c), -c) meaningless, and the kernels rely on c >= 0 to never
 * count the zeros they read past the edges). */
static tk_status tk__swiglu_check_clamp(const char *function,
                                        const float *clamp)
{
    if (clamp && !(*clamp >= 0.0f))
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: swiglu_clamp_value is %g, expected a number "
                        ">= 0 (or NULL for no clamp)",
                        function, (double)*clamp);
    return TK_SUCCESS;
}

/* f32 -> bf16 -> f32, round to nearest even (the per-channel kernel's
 * clamp constant, spec 15.14). */
static float tk__swiglu_round_bf16(float value)
{
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    if ((bits & 0x7FFFFFFFu) > 0x7F800000u)
        return value;
    bits = (bits + 0x7FFFu + ((bits >> 16) & 1u)) & 0xFFFF0000u;
    memcpy(&value, &bits, sizeof value);
    return value;
}

/* ---- swiglu_forward_and_per_token_cast ----------------------------------- */

typedef tk_status (*tk__swiglu_block_launcher)(
    const tk_tensor *x, const tk_tensor *pos_to_expert,
    const tk_tensor *pos_to_token_topk, const tk_tensor *topk_weights,
    const tk_tensor *clamped_count, const tk_tensor *out, const tk_tensor *sf,
    const tk_tensor *sf_bytes, bool use_mask, bool use_weights, bool use_clamp,
    float clamp, float sf_floor, bool round_sf, int32_t tiles, tk_stream stream);
typedef tk_status (*tk__swiglu_row_launcher)(
    const tk_tensor *x, const tk_tensor *pos_to_expert,
    const tk_tensor *pos_to_token_topk, const tk_tensor *topk_weights,
    const tk_tensor *clamped_count, const tk_tensor *out, const tk_tensor *sf,
    bool use_mask, bool use_weights, bool use_clamp, float clamp, bool count,
    float sf_floor, bool round_sf, tk_stream stream);

static const struct {
    tk_dtype in;
    bool packed;
    bool count;
    const char *name;
    tk__swiglu_block_launcher launcher;
} tk__swiglu_block_instances[] = {
#define TK_INSTANCE(IN, packed, count, label)                          \
    {IN, packed, count, "swiglu_forward_per_token_cast__" #label,      \
     tkl_swiglu_forward_per_token_cast__##label}
    TK_INSTANCE(TK_BF16, false, false, bf16),
    TK_INSTANCE(TK_BF16, true, false, bf16_packed),
    TK_INSTANCE(TK_F32, false, false, f32),
    TK_INSTANCE(TK_F32, true, false, f32_packed),
    TK_INSTANCE(TK_BF16, false, true, bf16_count),
    TK_INSTANCE(TK_BF16, true, true, bf16_packed_count),
    TK_INSTANCE(TK_F32, false, true, f32_count),
    TK_INSTANCE(TK_F32, true, true, f32_packed_count),
#undef TK_INSTANCE
};

static const struct {
    tk_dtype in;
    const char *name;
    tk__swiglu_row_launcher launcher;
} tk__swiglu_row_instances[] = {
#define TK_INSTANCE(IN, label)                                         \
    {IN, "swiglu_forward_per_row_cast__" #label,                       \
     tkl_swiglu_forward_per_row_cast__##label}
    TK_INSTANCE(TK_BF16, bf16),
    TK_INSTANCE(TK_F32, f32),
#undef TK_INSTANCE
};

/* Row tiles per block when counting: about TK_SWIGLU_COUNT_BLOCKS_PER_SM
 * blocks per SM in all. */
static tk_status tk__swiglu_count_tiles(int64_t row_tiles, int64_t column_tiles,
                                        int32_t *tiles)
{
    const tk__driver_api *api;
    tk_status status = tk__driver(&api);
    if (status != TK_SUCCESS)
        return status;
    CUdevice device;
    int sms = 0;
    CUresult result = api->cuCtxGetDevice(&device);
    if (result == CUDA_SUCCESS)
        result = api->cuDeviceGetAttribute(
            &sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device);
    if (result != CUDA_SUCCESS)
        return tk__cuda_fail(TK_ERROR_DRIVER, result,
                             "tk_swiglu_forward_and_per_token_cast: reading "
                             "the SM count");
    int64_t blocks = (int64_t)(sms > 0 ? sms : 1) * TK_SWIGLU_COUNT_BLOCKS_PER_SM;
    int64_t per_column = blocks / column_tiles;
    if (per_column < 1)
        per_column = 1;
    *tiles = (int32_t)tk__ceildiv(row_tiles, per_column);
    if (*tiles < 1)
        *tiles = 1;
    return TK_SUCCESS;
}

tk_status tk_swiglu_forward_and_per_token_cast(
    const tk_tensor *x, int num_per_channels,
    const tk_tensor *pos_to_token_topk, const tk_tensor *topk_weights,
    const tk_tensor *pos_to_expert, bool round_sf, tk_sf_layout sf_layout,
    const float *swiglu_clamp_value, const tk_tensor *clamped_count,
    const float *sf_clamp_min, const tk_tensor *out, const tk_tensor *out_sf,
    tk_stream stream)
{
    static const char function[] = "tk_swiglu_forward_and_per_token_cast";
    static const tk_dtype inputs[] = {TK_F32, TK_BF16};
    tk__set_last_instance(NULL);
    tk_status status;
    if ((status = tk__check_tensor(function, "x", x, 2)) ||
        (status = tk__check_dtype(function, "x", x, inputs, 2)) ||
        (status = tk__check_contiguous(function, "x", x)))
        return status;
    int64_t rows = x->shape[0], width = x->shape[1];
    if (width % 256 != 0)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: x: shape[1] is %lld, expected 2 * I with I a "
                        "multiple of 128",
                        function, (long long)width);
    int64_t half = width / 2;
    if (num_per_channels != 128 && num_per_channels != half)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: num_per_channels is %d, expected 128 or I = %lld",
                        function, num_per_channels, (long long)half);
    bool per_row = num_per_channels != 128;
    if (sf_layout != TK_SF_ROW_MAJOR && sf_layout != TK_SF_COL_MAJOR &&
        sf_layout != TK_SF_PACKED_UE8M0)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: sf_layout is %d, expected TK_SF_ROW_MAJOR, "
                        "TK_SF_COL_MAJOR or TK_SF_PACKED_UE8M0",
                        function, (int)sf_layout);
    if (per_row && sf_layout != TK_SF_ROW_MAJOR)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: sf_layout: column-major and packed scales need "
                        "num_per_channels == 128 (got %d)",
                        function, num_per_channels);
    if (sf_layout == TK_SF_PACKED_UE8M0 && !round_sf)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: sf_layout TK_SF_PACKED_UE8M0 requires round_sf "
                        "(UE8M0 holds powers of two only)",
                        function);

    /* optional inputs */
    if ((pos_to_token_topk == NULL) != (topk_weights == NULL))
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: %s is NULL but %s is not: weights need both",
                        function,
                        pos_to_token_topk ? "topk_weights" : "pos_to_token_topk",
                        pos_to_token_topk ? "pos_to_token_topk" : "topk_weights");
    const char *const row_meaning[] = {"x's shape[0]"};
    if (pos_to_token_topk) {
        if ((status = tk__swiglu_check(function, "pos_to_token_topk",
                                       pos_to_token_topk, TK_I32, 1, &rows,
                                       row_meaning)) ||
            (status = tk__check_tensor(function, "topk_weights", topk_weights,
                                       2)))
            return status;
        const char *const weight_meaning[] = {"T", "K"};
        if ((status = tk__swiglu_check(function, "topk_weights", topk_weights,
                                       TK_F32, 2, topk_weights->shape,
                                       weight_meaning)))
            return status;
    }
    if (pos_to_expert &&
        (status = tk__swiglu_check(function, "pos_to_expert", pos_to_expert,
                                   TK_I32, 1, &rows, row_meaning)))
        return status;
    if ((status = tk__swiglu_check_clamp(function, swiglu_clamp_value)))
        return status;
    if (clamped_count) {
        if (!swiglu_clamp_value)
            return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                            "%s: clamped_count needs swiglu_clamp_value",
                            function);
        const int64_t three = 3;
        const char *const count_meaning[] = {"3 counters"};
        if ((status = tk__swiglu_check(function, "clamped_count",
                                       clamped_count, TK_I64, 1, &three,
                                       count_meaning)))
            return status;
    }
    float floor = 1e-4f;
    if (sf_clamp_min) {
        /* the scale floor / 448 must be a positive normal f32 (4.1) */
        if (!(*sf_clamp_min <= FLT_MAX) || !(*sf_clamp_min / 448.0f >= FLT_MIN))
            return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                            "%s: sf_clamp_min is %g, expected a finite value "
                            ">= 448 * FLT_MIN",
                            function, (double)*sf_clamp_min);
        floor = *sf_clamp_min;
    }

    /* outputs */
    const int64_t out_shape[2] = {rows, half};
    const char *const out_meaning[] = {"x's shape[0]", "I = x's shape[1] / 2"};
    if ((status = tk__swiglu_check(function, "out", out, TK_E4M3, 2, out_shape,
                                   out_meaning)) ||
        (status = tk__check_tensor(function, "out_sf", out_sf, 2)))
        return status;
    tk_tensor expected;
    if (!tk__sf_layout(rows, half, 1, num_per_channels, sf_layout, &expected,
                       NULL))
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: x: too large for a scale-factor tensor", function);
    if (out_sf->dtype != expected.dtype)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: out_sf: dtype is %s, expected %s", function,
                        tk__dtype_name(out_sf->dtype),
                        tk__dtype_name(expected.dtype));
    for (int d = 0; d < 2; d++) {
        if ((status = tk__check_dim(function, "out_sf", out_sf, d,
                                    expected.shape[d],
                                    "tk_sf_desc(N, I, 1, num_per_channels, "
                                    "sf_layout)")))
            return status;
        if (out_sf->shape[d] > 1 && out_sf->strides[d] != expected.strides[d])
            return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                            "%s: out_sf: strides[%d] is %lld, expected %lld "
                            "(see tk_sf_desc)",
                            function, d, (long long)out_sf->strides[d],
                            (long long)expected.strides[d]);
    }
    if ((status = tk__check_storage(function, "x", x)) ||
        (status = tk__check_storage(function, "out_sf", out_sf)))
        return status;
    if (rows == 0)
        return TK_SUCCESS;

    tk_tensor halves = tk__swiglu_halves(x);
    tk_tensor mask = pos_to_expert ? *pos_to_expert : tk__swiglu_empty(TK_I32, 1);
    tk_tensor index = pos_to_token_topk ? *pos_to_token_topk
                                        : tk__swiglu_empty(TK_I32, 1);
    tk_tensor weights = topk_weights ? tk__swiglu_flat(topk_weights)
                                     : tk__swiglu_empty(TK_F32, 1);
    tk_tensor counts = clamped_count ? *clamped_count : tk__swiglu_empty(TK_I64, 1);
    tk_tensor scales = expected;
    scales.data = out_sf->data;
    bool use_clamp = swiglu_clamp_value != NULL;
    float clamp = use_clamp ? *swiglu_clamp_value : 0.0f;
    bool count = clamped_count != NULL;

    if (per_row) {
        for (int i = 0; i < TK_SWIGLU_COUNT(tk__swiglu_row_instances); i++) {
            if (tk__swiglu_row_instances[i].in != x->dtype)
                continue;
            tk__set_last_instance(tk__swiglu_row_instances[i].name);
            return tk__swiglu_row_instances[i].launcher(
                &halves, &mask, &index, &weights, &counts, out, &scales,
                pos_to_expert != NULL, topk_weights != NULL, use_clamp, clamp,
                count, floor, round_sf, stream);
        }
    } else {
        bool packed = sf_layout == TK_SF_PACKED_UE8M0;
        tk_tensor f32_scales = packed ? tk__swiglu_empty(TK_F32, 2) : scales;
        /* The unused byte view is empty but keeps the shape[2] == 4 and
         * strides[0] == 4 the kernel signature fixes: the launcher checks
         * literal dimensions even of empty tensors. */
        tk_tensor byte_scales = tk__swiglu_empty(TK_U8, 3);
        byte_scales.shape[2] = 4;
        byte_scales.strides[0] = 4;
        if (packed) {
            byte_scales = tk__packed_byte_view(&scales, scales.strides[1]);
        }
        int32_t tiles = 1;
        if (count &&
            (status = tk__swiglu_count_tiles(
                 tk__ceildiv(rows, TK_SWIGLU_FORWARD_ROWS),
                 tk__ceildiv(half, TK_SWIGLU_FORWARD_COLUMNS), &tiles)))
            return status;
        for (int i = 0; i < TK_SWIGLU_COUNT(tk__swiglu_block_instances); i++) {
            if (tk__swiglu_block_instances[i].in != x->dtype ||
                tk__swiglu_block_instances[i].packed != packed ||
                tk__swiglu_block_instances[i].count != count)
                continue;
            tk__set_last_instance(tk__swiglu_block_instances[i].name);
            return tk__swiglu_block_instances[i].launcher(
                &halves, &mask, &index, &weights, &counts, out, &f32_scales,
                &byte_scales, pos_to_expert != NULL, topk_weights != NULL,
                use_clamp, clamp, floor, round_sf, tiles, stream);
        }
    }
    /* Every combination admitted above has an instance. */
    return tk__fail(TK_ERROR_UNSUPPORTED, "%s: no instance for %s input",
                    function, tk__dtype_name(x->dtype));
}

/* ---- swiglu_backward_and_per_token_cast ---------------------------------- */

typedef tk_status (*tk__swiglu_backward_launcher)(
    const tk_tensor *x, const tk_tensor *x_sf, const tk_tensor *grad_out,
    const tk_tensor *weight, const tk_tensor *pos_to_token_topk,
    const tk_tensor *out, const tk_tensor *x_grad_fp8,
    const tk_tensor *x_grad_sf, const tk_tensor *x_grad,
    const tk_tensor *weight_grad, float clamp, bool round_sf,
    tk_stream stream);

/* The clamp is an instance property: without it the kernel has no clamp
 * selects at all (kernels/swiglu_backward.tk). */
static const struct {
    int num_per_channels;
    bool clamp;
    const char *name;
    tk__swiglu_backward_launcher launcher;
} tk__swiglu_backward_instances[] = {
#define TK_INSTANCE(npc, clamp, label)                                 \
    {npc, clamp, "swiglu_backward_per_token_cast__" #label,            \
     tkl_swiglu_backward_per_token_cast__##label}
    TK_INSTANCE(32, false, npc32),
    TK_INSTANCE(128, false, npc128),
    TK_INSTANCE(32, true, npc32_clamp),
    TK_INSTANCE(128, true, npc128_clamp),
#undef TK_INSTANCE
};

tk_status tk_swiglu_backward_and_per_token_cast(
    const tk_tensor *x, const tk_tensor *x_sf, const tk_tensor *grad_out,
    const tk_tensor *weight, const tk_tensor *pos_to_token_topk,
    const tk_tensor *token_topk_to_pos, int num_per_channels, bool round_sf,
    const float *swiglu_clamp_value, const tk_tensor *out,
    const tk_tensor *x_grad_fp8, const tk_tensor *x_grad_sf,
    const tk_tensor *x_grad, const tk_tensor *weight_grad, tk_stream stream)
{
    static const char function[] = "tk_swiglu_backward_and_per_token_cast";
    tk__set_last_instance(NULL);
    tk_status status;
    if ((status = tk__check_tensor(function, "x", x, 2)) ||
        (status = tk__check_tensor(function, "weight", weight, 2)))
        return status;
    if (num_per_channels != 32 && num_per_channels != 128)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: num_per_channels is %d, expected 32 or 128",
                        function, num_per_channels);
    int64_t rows = x->shape[0], width = x->shape[1];
    if (width % (2 * num_per_channels) != 0)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: x: shape[1] is %lld, expected a multiple of "
                        "2 * num_per_channels = %d",
                        function, (long long)width, 2 * num_per_channels);
    int64_t half = width / 2, groups = width / num_per_channels;
    int64_t tokens = weight->shape[0], topk = weight->shape[1];
    const int64_t x_shape[2] = {rows, width};
    const int64_t sf_shape[2] = {rows, groups};
    const int64_t half_shape[2] = {rows, half};
    const int64_t weight_shape[2] = {tokens, topk};
    const char *const x_meaning[] = {"N", "2I"};
    const char *const sf_meaning[] = {"x's shape[0]",
                                      "x's shape[1] / num_per_channels"};
    const char *const half_meaning[] = {"x's shape[0]", "I = x's shape[1] / 2"};
    const char *const weight_meaning[] = {"weight's shape[0]",
                                          "weight's shape[1]"};
    const char *const row_meaning[] = {"x's shape[0]"};
    if ((status = tk__swiglu_check(function, "x", x, TK_E4M3, 2, x_shape,
                                   x_meaning)) ||
        (status = tk__swiglu_check(function, "x_sf", x_sf, TK_F32, 2, sf_shape,
                                   sf_meaning)) ||
        (status = tk__swiglu_check(function, "grad_out", grad_out, TK_BF16, 2,
                                   half_shape, half_meaning)) ||
        (status = tk__swiglu_check(function, "weight", weight, TK_F32, 2,
                                   weight_shape, weight_meaning)) ||
        (status = tk__swiglu_check(function, "pos_to_token_topk",
                                   pos_to_token_topk, TK_I32, 1, &rows,
                                   row_meaning)) ||
        (status = tk__swiglu_check(function, "token_topk_to_pos",
                                   token_topk_to_pos, TK_I32, 2, weight_shape,
                                   weight_meaning)) ||
        (status = tk__swiglu_check_clamp(function, swiglu_clamp_value)) ||
        (status = tk__swiglu_check(function, "out", out, TK_BF16, 2, half_shape,
                                   half_meaning)) ||
        (status = tk__swiglu_check(function, "x_grad_fp8", x_grad_fp8, TK_E4M3,
                                   2, x_shape, x_meaning)) ||
        (status = tk__swiglu_check(function, "x_grad_sf", x_grad_sf, TK_F32, 2,
                                   sf_shape, sf_meaning)) ||
        (status = tk__swiglu_check(function, "x_grad", x_grad, TK_BF16, 2,
                                   x_shape, x_meaning)) ||
        (status = tk__swiglu_check(function, "weight_grad", weight_grad,
                                   TK_F32, 2, weight_shape, weight_meaning)))
        return status;

    bool use_clamp = swiglu_clamp_value != NULL;
    int instance = -1;
    for (int i = 0; i < TK_SWIGLU_COUNT(tk__swiglu_backward_instances); i++)
        if (tk__swiglu_backward_instances[i].num_per_channels ==
                num_per_channels &&
            tk__swiglu_backward_instances[i].clamp == use_clamp)
            instance = i;
    /* weight_grad is zeroed, then every row adds its sum into its entry;
     * entries no row maps to (token_topk_to_pos == -1) stay 0. */
    tk_tensor weight_grad_flat = tk__swiglu_flat(weight_grad);
    if (tokens * topk > 0) {
        tk__set_last_instance("swiglu_backward_clear_weight_grad__default");
        if ((status = tkl_swiglu_backward_clear_weight_grad__default(
                 &weight_grad_flat, stream)))
            return status;
    }
    if (rows == 0 || half == 0)
        return TK_SUCCESS;
    tk_tensor x_halves = tk__swiglu_halves(x);
    tk_tensor grad_halves = tk__swiglu_halves(x_grad_fp8);
    tk_tensor x_grad_halves = tk__swiglu_halves(x_grad);
    tk_tensor sf_halves = tk__swiglu_halves(x_sf);
    tk_tensor grad_sf_halves = tk__swiglu_halves(x_grad_sf);
    tk_tensor weight_flat = tk__swiglu_flat(weight);
    tk__set_last_instance(tk__swiglu_backward_instances[instance].name);
    return tk__swiglu_backward_instances[instance].launcher(
        &x_halves, &sf_halves, grad_out, &weight_flat, pos_to_token_topk, out,
        &grad_halves, &grad_sf_halves, &x_grad_halves, &weight_grad_flat,
        use_clamp ? *swiglu_clamp_value : 0.0f, round_sf, stream);
}

/* ---- swiglu_forward_and_per_channel_cast_and_transpose ------------------- */

typedef tk_status (*tk__swiglu_channel_launcher)(const tk_tensor *x,
                                                 const tk_tensor *out,
                                                 const tk_tensor *sf,
                                                 bool use_clamp, float clamp,
                                                 bool round_sf,
                                                 tk_stream stream);

static const struct {
    int num_per_tokens;
    bool transpose;
    const char *name;
    tk__swiglu_channel_launcher launcher;
} tk__swiglu_channel_instances[] = {
#define TK_INSTANCE(bm, transpose, label)                              \
    {bm, transpose, "swiglu_forward_per_channel_cast__" #label,        \
     tkl_swiglu_forward_per_channel_cast__##label}
    TK_INSTANCE(32, false, bm32),
    TK_INSTANCE(128, false, bm128),
    TK_INSTANCE(32, true, bm32_t),
    TK_INSTANCE(128, true, bm128_t),
#undef TK_INSTANCE
};

tk_status tk_swiglu_forward_and_per_channel_cast_and_transpose(
    const tk_tensor *x, int num_per_tokens, bool round_sf,
    bool without_transpose, const float *swiglu_clamp_value,
    const tk_tensor *out, const tk_tensor *out_sf, tk_stream stream)
{
    static const char function[] =
        "tk_swiglu_forward_and_per_channel_cast_and_transpose";
    tk__set_last_instance(NULL);
    tk_status status;
    if ((status = tk__check_tensor(function, "x", x, 2)))
        return status;
    if (num_per_tokens != 32 && num_per_tokens != 128)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: num_per_tokens is %d, expected 32 or 128",
                        function, num_per_tokens);
    int64_t tokens = x->shape[0], width = x->shape[1];
    if (tokens % 128 != 0)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: x: shape[0] is %lld, expected a multiple of 128",
                        function, (long long)tokens);
    /* also what the transposed instances' 64-channel tiles need: I % 64 */
    if (width % 128 != 0)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: x: shape[1] is %lld, expected 2 * I, a multiple "
                        "of 128",
                        function, (long long)width);
    int64_t half = width / 2;
    const int64_t x_shape[2] = {tokens, width};
    const int64_t out_shape[2] = {without_transpose ? tokens : half,
                                  without_transpose ? half : tokens};
    const int64_t sf_shape[2] = {tokens / num_per_tokens, half};
    const char *const x_meaning[] = {"T", "2I"};
    const char *const out_meaning[] = {
        without_transpose ? "x's shape[0]" : "I = x's shape[1] / 2",
        without_transpose ? "I = x's shape[1] / 2" : "x's shape[0]"};
    const char *const sf_meaning[] = {"x's shape[0] / num_per_tokens",
                                      "I = x's shape[1] / 2"};
    if ((status = tk__swiglu_check(function, "x", x, TK_BF16, 2, x_shape,
                                   x_meaning)) ||
        (status = tk__swiglu_check_clamp(function, swiglu_clamp_value)) ||
        (status = tk__swiglu_check(function, "out", out, TK_E4M3, 2, out_shape,
                                   out_meaning)) ||
        (status = tk__swiglu_check(function, "out_sf", out_sf, TK_F32, 2,
                                   sf_shape, sf_meaning)))
        return status;
    if (tokens == 0 || half == 0)
        return TK_SUCCESS;
    tk_tensor halves = tk__swiglu_halves(x);
    bool use_clamp = swiglu_clamp_value != NULL;
    float clamp = use_clamp ? tk__swiglu_round_bf16(*swiglu_clamp_value) : 0.0f;
    for (int i = 0; i < TK_SWIGLU_COUNT(tk__swiglu_channel_instances); i++) {
        if (tk__swiglu_channel_instances[i].num_per_tokens != num_per_tokens ||
            tk__swiglu_channel_instances[i].transpose == without_transpose)
            continue;
        tk__set_last_instance(tk__swiglu_channel_instances[i].name);
        return tk__swiglu_channel_instances[i].launcher(&halves, out, out_sf,
                                                        use_clamp, clamp,
                                                        round_sf, stream);
    }
    return tk__fail(TK_ERROR_UNSUPPORTED, "%s: no instance", function);
}
