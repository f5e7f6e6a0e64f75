/*
 * api_cast.c -- tk_per_token_cast, tk_cast_back and tk_per_token_cast_back
 * (tilekernels-spec.md sections 3.5, 6.1 and 6.3; kernels/cast.tk).
 * FP4 (e2m1) output or input, num_per_channels 16 and num_per_channels ==
 * H go on to api_cast_fp4.c (kernels/quant_fp4.tk).
 *
 * Each function validates the TileKernels-level arguments, works out the
 * scale-factor layout, and picks one instance of kernels/cast.tk:
 *
 *   per_token_cast__<in>_<npc>[_round][_any]   f32 SF, row- or column-major
 *   per_token_cast_ue8m0__<in>_<npc>[_any]     packed UE8M0 SF
 *   cast_back__<out>_<bm>x<bk>                 f32 SF, any strides
 *   cast_back_ue8m0__<out>_<bm>x<bk>           packed UE8M0 SF
 *
 * `_any` instances read x one element at a time and serve row strides that
 * are not a multiple of the 16-byte vector.  The packed int32 SF tensor
 * (T, W) with strides (1, TA) reaches the kernels as the byte view
 * (T, W, 4) with strides (4, 4 * TA, 1): byte k % 4 of word k / 4.
 */
#include "cast_fp4.h"
#include "tk_internal.h"
#include "tk_kernels.h"

/* The cast kernels read whole 64-column chunks (H % 64 == 0 in cast.tk). */
#define TK_CAST_COLUMN_MULTIPLE 64

typedef tk_status (*tk__cast_launcher)(const tk_tensor *a, const tk_tensor *b,
                                       const tk_tensor *c, tk_stream stream);

/* ---- instance tables ---------------------------------------------------- */

static const struct {
    tk_dtype in;
    int num_per_channels;
    bool round_sf, any_stride;
    const char *name;
    tk__cast_launcher launcher;
} tk__per_token_cast_instances[] = {
#define TK_INSTANCE(IN, npc, round, any, label) \
    {IN, npc, round, any, "per_token_cast__" #label, tkl_per_token_cast__##label}
    TK_INSTANCE(TK_BF16, 32, false, false, bf16_32),
    TK_INSTANCE(TK_BF16, 32, true, false, bf16_32_round),
    TK_INSTANCE(TK_BF16, 64, false, false, bf16_64),
    TK_INSTANCE(TK_BF16, 64, true, false, bf16_64_round),
    TK_INSTANCE(TK_BF16, 128, false, false, bf16_128),
    TK_INSTANCE(TK_BF16, 128, true, false, bf16_128_round),
    TK_INSTANCE(TK_F32, 32, false, false, f32_32),
    TK_INSTANCE(TK_F32, 32, true, false, f32_32_round),
    TK_INSTANCE(TK_F32, 64, false, false, f32_64),
    TK_INSTANCE(TK_F32, 64, true, false, f32_64_round),
    TK_INSTANCE(TK_F32, 128, false, false, f32_128),
    TK_INSTANCE(TK_F32, 128, true, false, f32_128_round),
    TK_INSTANCE(TK_BF16, 32, false, true, bf16_32_any),
    TK_INSTANCE(TK_BF16, 32, true, true, bf16_32_round_any),
    TK_INSTANCE(TK_BF16, 64, false, true, bf16_64_any),
    TK_INSTANCE(TK_BF16, 64, true, true, bf16_64_round_any),
    TK_INSTANCE(TK_BF16, 128, false, true, bf16_128_any),
    TK_INSTANCE(TK_BF16, 128, true, true, bf16_128_round_any),
    TK_INSTANCE(TK_F32, 32, false, true, f32_32_any),
    TK_INSTANCE(TK_F32, 32, true, true, f32_32_round_any),
    TK_INSTANCE(TK_F32, 64, false, true, f32_64_any),
    TK_INSTANCE(TK_F32, 64, true, true, f32_64_round_any),
    TK_INSTANCE(TK_F32, 128, false, true, f32_128_any),
    TK_INSTANCE(TK_F32, 128, true, true, f32_128_round_any),
#undef TK_INSTANCE
};

/* Packed UE8M0 scales are powers of two: round_sf is implied. */
static const struct {
    tk_dtype in;
    int num_per_channels;
    bool any_stride;
    const char *name;
    tk__cast_launcher launcher;
} tk__per_token_cast_ue8m0_instances[] = {
#define TK_INSTANCE(IN, npc, any, label)                        \
    {IN, npc, any, "per_token_cast_ue8m0__" #label,             \
     tkl_per_token_cast_ue8m0__##label}
    TK_INSTANCE(TK_BF16, 32, false, bf16_32),
    TK_INSTANCE(TK_BF16, 64, false, bf16_64),
    TK_INSTANCE(TK_BF16, 128, false, bf16_128),
    TK_INSTANCE(TK_F32, 32, false, f32_32),
    TK_INSTANCE(TK_F32, 64, false, f32_64),
    TK_INSTANCE(TK_F32, 128, false, f32_128),
    TK_INSTANCE(TK_BF16, 32, true, bf16_32_any),
    TK_INSTANCE(TK_BF16, 64, true, bf16_64_any),
    TK_INSTANCE(TK_BF16, 128, true, bf16_128_any),
    TK_INSTANCE(TK_F32, 32, true, f32_32_any),
    TK_INSTANCE(TK_F32, 64, true, f32_64_any),
    TK_INSTANCE(TK_F32, 128, true, f32_128_any),
#undef TK_INSTANCE
};

static const struct {
    tk_dtype out;
    int block_m, block_k;
    bool packed;
    const char *name;
    tk__cast_launcher launcher;
} tk__cast_back_instances[] = {
#define TK_INSTANCE(OUT, bm, bk, label) \
    {OUT, bm, bk, false, "cast_back__" #label, tkl_cast_back__##label}
    TK_INSTANCE(TK_BF16, 1, 32, bf16_1x32),
    TK_INSTANCE(TK_BF16, 1, 64, bf16_1x64),
    TK_INSTANCE(TK_BF16, 1, 128, bf16_1x128),
    TK_INSTANCE(TK_BF16, 128, 128, bf16_128x128),
    TK_INSTANCE(TK_BF16, 128, 1, bf16_128x1),
    TK_INSTANCE(TK_BF16, 32, 32, bf16_32x32),
    TK_INSTANCE(TK_F32, 1, 32, f32_1x32),
    TK_INSTANCE(TK_F32, 1, 64, f32_1x64),
    TK_INSTANCE(TK_F32, 1, 128, f32_1x128),
    TK_INSTANCE(TK_F32, 128, 128, f32_128x128),
    TK_INSTANCE(TK_F32, 128, 1, f32_128x1),
    TK_INSTANCE(TK_F32, 32, 32, f32_32x32),
#undef TK_INSTANCE
#define TK_INSTANCE(OUT, bm, bk, label) \
    {OUT, bm, bk, true, "cast_back_ue8m0__" #label, tkl_cast_back_ue8m0__##label}
    TK_INSTANCE(TK_BF16, 1, 32, bf16_1x32),
    TK_INSTANCE(TK_BF16, 1, 64, bf16_1x64),
    TK_INSTANCE(TK_BF16, 1, 128, bf16_1x128),
    TK_INSTANCE(TK_BF16, 128, 128, bf16_128x128),
    TK_INSTANCE(TK_F32, 1, 32, f32_1x32),
    TK_INSTANCE(TK_F32, 1, 64, f32_1x64),
    TK_INSTANCE(TK_F32, 1, 128, f32_1x128),
    TK_INSTANCE(TK_F32, 128, 128, f32_128x128),
#undef TK_INSTANCE
};

#define TK_COUNT(array) ((int)(sizeof(array) / sizeof((array)[0])))

/* Elements per 16-byte vector: the row-stride multiple of the fast
 * per_token_cast instances (their VEC parameter). */
static int64_t tk__vector_elements(tk_dtype dtype)
{
    return 16 / (int64_t)tk_dtype_size(dtype);
}

/* x (T, H) with H a multiple of 64 and rows of contiguous elements. */
static tk_status tk__check_matrix_columns(const char *function,
                                          const char *argument,
                                          const tk_tensor *x)
{
    if (x->shape[1] % TK_CAST_COLUMN_MULTIPLE != 0)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: %s: shape[1] is %lld, expected a multiple of %d",
                        function, argument, (long long)x->shape[1],
                        TK_CAST_COLUMN_MULTIPLE);
    return TK_SUCCESS;
}

/* ---- per_token_cast ------------------------------------------------------ */

/* num_per_channels: 16, 32, 64, 128, or H ("one scale per token"); other
 * values are invalid (TileKernels asserts the same set). */
static tk_status tk__check_num_per_channels(const char *function,
                                            int num_per_channels,
                                            int64_t columns)
{
    if (num_per_channels == 16 || num_per_channels == 32 ||
        num_per_channels == 64 || num_per_channels == 128 ||
        (num_per_channels > 0 && num_per_channels == columns))
        return TK_SUCCESS;
    return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                    "%s: num_per_channels is %d, expected 16, 32, 64, 128 or "
                    "x's shape[1] (%lld)",
                    function, num_per_channels, (long long)columns);
}

/* out_sf against the layout tk_sf_desc gives for (T, H) in (1, npc)
 * blocks; a size-1 dimension may have any stride. */
tk_status tk__check_sf_output(const char *function, const tk_tensor *out_sf,
                              const tk_tensor *expected, tk_sf_layout layout)
{
    return tk__check_sf_desc(function, "out_sf", out_sf, expected, layout,
                             "x's shape[0]",
                             layout == TK_SF_PACKED_UE8M0
                                 ? "ceil(ceil(H / num_per_channels) / 4) "
                                   "packed words"
                                 : "ceil(H / num_per_channels)");
}

tk_status tk_per_token_cast(const tk_tensor *x, int num_per_channels,
                            bool round_sf, tk_sf_layout sf_layout,
                            const tk_tensor *out, const tk_tensor *out_sf,
                            tk_stream stream)
{
    static const char function[] = "tk_per_token_cast";
    static const tk_dtype inputs[] = {TK_F32, TK_BF16};
    static const tk_dtype output[] = {TK_E4M3, TK_I8, TK_U8, TK_E2M1};
    tk__set_last_instance(NULL);
    tk_status status;
    if ((status = tk__check_tensor(function, "x", x, 2)) ||
        (status = tk__check_tensor(function, "out", out, 2)) ||
        (status = tk__check_tensor(function, "out_sf", out_sf, 2)) ||
        (status = tk__check_dtype(function, "x", x, inputs, 2)))
        return status;
    int64_t tokens = x->shape[0], hidden = x->shape[1];
    if ((status = tk__check_num_per_channels(function, num_per_channels,
                                             hidden)))
        return status;
    if ((status = tk__check_sf_layout(function, sf_layout, round_sf)))
        return status;

    if ((status = tk__check_matrix_columns(function, "x", x)) ||
        (status = tk__check_rows(function, "x", x)) ||
        (status = tk__check_dtype(function, "out", out, output, 4)))
        return status;
    /* packed FP4 output, and the blockings cast.tk has no instance for,
     * take the per_token_quant kernels */
    if (tk__is_packed_fp4(out->dtype) || num_per_channels == 16 ||
        (num_per_channels != 32 && num_per_channels != 64 &&
         num_per_channels != 128))
        return tk__per_token_quant(function, x, num_per_channels, round_sf,
                                   sf_layout,
                                   tk__is_packed_fp4(out->dtype) ? TK_E2M1
                                                                 : TK_E4M3,
                                   out, out_sf, NULL, stream);
    if ((status = tk__check_dim(function, "out", out, 0, tokens,
                                "x's shape[0]")) ||
        (status = tk__check_dim(function, "out", out, 1, hidden,
                                "x's shape[1]")) ||
        (status = tk__check_contiguous(function, "out", out)))
        return status;

    tk_tensor expected;
    if (!tk__sf_layout(tokens, hidden, 1, num_per_channels, sf_layout,
                       &expected, NULL))
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: x: too large for a scale-factor tensor",
                        function);
    if ((status = tk__check_sf_output(function, out_sf, &expected,
                                      sf_layout)) ||
        (status = tk__check_storage(function, "x", x)) ||
        (status = tk__check_storage(function, "out", out)) ||
        (status = tk__check_storage(function, "out_sf", out_sf)))
        return status;
    if (tokens == 0 || hidden == 0)
        return TK_SUCCESS;

    /* A single row is never stepped over: any stride works, so give it the
     * one that lets the fast instance run. */
    tk_tensor input = *x;
    if (tokens == 1)
        input.strides[0] = hidden;
    bool any_stride = input.strides[0] % tk__vector_elements(x->dtype) != 0;
    /* The kernels receive the layout's own strides; out_sf's can differ
     * only on size-1 dimensions, where they are never used. */
    tk_tensor scales = expected;
    scales.data = out_sf->data;

    if (sf_layout == TK_SF_PACKED_UE8M0) {
        tk_tensor bytes = tk__packed_byte_view(&scales, scales.strides[1]);
        for (int i = 0; i < TK_COUNT(tk__per_token_cast_ue8m0_instances); i++) {
            if (tk__per_token_cast_ue8m0_instances[i].in != x->dtype ||
                tk__per_token_cast_ue8m0_instances[i].num_per_channels !=
                    num_per_channels ||
                tk__per_token_cast_ue8m0_instances[i].any_stride != any_stride)
                continue;
            tk__set_last_instance(tk__per_token_cast_ue8m0_instances[i].name);
            return tk__per_token_cast_ue8m0_instances[i].launcher(
                &input, out, &bytes, stream);
        }
    } else {
        for (int i = 0; i < TK_COUNT(tk__per_token_cast_instances); i++) {
            if (tk__per_token_cast_instances[i].in != x->dtype ||
                tk__per_token_cast_instances[i].num_per_channels !=
                    num_per_channels ||
                tk__per_token_cast_instances[i].round_sf != round_sf ||
                tk__per_token_cast_instances[i].any_stride != any_stride)
                continue;
            tk__set_last_instance(tk__per_token_cast_instances[i].name);
            return tk__per_token_cast_instances[i].launcher(&input, out,
                                                            &scales, stream);
        }
    }
    /* Every combination admitted above has an instance. */
    return tk__fail(TK_ERROR_UNSUPPORTED,
                    "%s: no instance for %s input, num_per_channels %d",
                    function, tk__dtype_name(x->dtype), num_per_channels);
}

/* ---- cast_back ----------------------------------------------------------- */

/* Shared by tk_cast_back and tk_per_token_cast_back; per_token says which
 * one the messages should speak of. */
static tk_status tk__cast_back(const char *function, bool per_token,
                               const tk_tensor *x, const tk_tensor *sf,
                               int block_m, int block_k, const tk_tensor *out,
                               tk_stream stream)
{
    static const tk_dtype inputs[] = {TK_E4M3};
    static const tk_dtype outputs[] = {TK_BF16, TK_F32};
    static const tk_dtype scales[] = {TK_F32, TK_I32};
    tk__set_last_instance(NULL);
    tk_status status;
    if ((status = tk__check_tensor(function, "x", x, 2)) ||
        (status = tk__check_tensor(function, "sf", sf, 2)) ||
        (status = tk__check_tensor(function, "out", out, 2)))
        return status;
    bool fp4 = tk__is_packed_fp4(x->dtype);
    if ((!fp4 && (status = tk__check_dtype(function, "x", x, inputs, 1))) ||
        (status = tk__check_dtype(function, "out", out, outputs, 2)) ||
        (status = tk__check_dtype(function, "sf", sf, scales, 2)))
        return status;
    if (per_token && block_k < 1)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: num_per_channels is %d, expected >= 1", function,
                        block_k);
    if (block_m < 1 || block_k < 1)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: %s is %d, expected >= 1", function,
                        block_m < 1 ? "block_m" : "block_k",
                        block_m < 1 ? block_m : block_k);

    /* packed FP4 holds two elements per byte: H is twice x's columns */
    int64_t tokens = x->shape[0], hidden = x->shape[1] * (fp4 ? 2 : 1);
    if (fp4 && hidden % TK_CAST_COLUMN_MULTIPLE != 0)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: x: shape[1] is %lld packed FP4 bytes, expected "
                        "a multiple of %d (H %% %d == 0)",
                        function, (long long)x->shape[1],
                        TK_CAST_COLUMN_MULTIPLE / 2, TK_CAST_COLUMN_MULTIPLE);
    if ((!fp4 && (status = tk__check_matrix_columns(function, "x", x))) ||
        (status = tk__check_contiguous(function, "x", x)) ||
        (status = tk__check_dim(function, "out", out, 0, tokens,
                                "x's shape[0]")) ||
        (status = tk__check_dim(function, "out", out, 1, hidden,
                                "x's shape[1]")) ||
        (status = tk__check_contiguous(function, "out", out)))
        return status;

    /* Layout detection as TileKernels does it (spec 3.5): stride(0) == 1
     * means column-major, and an int32 column-major SF is packed UE8M0. */
    bool packed = sf->dtype == TK_I32;
    if (packed && (status = tk__check_packed_sf(function, "sf", sf)))
        return status;
    if (!packed && sf->strides[0] != 1 && sf->shape[1] > 1 &&
        sf->strides[1] != 1)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: sf: strides are (%lld, %lld), expected "
                        "strides[0] == 1 (column-major) or strides[1] == 1 "
                        "(row-major)",
                        function, (long long)sf->strides[0],
                        (long long)sf->strides[1]);
    tk_tensor expected;
    if (!tk__sf_layout(tokens, hidden, block_m, block_k,
                       packed ? TK_SF_PACKED_UE8M0 : TK_SF_ROW_MAJOR, &expected,
                       NULL))
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: x: too large for a scale-factor tensor",
                        function);
    if ((status = tk__check_dim(function, "sf", sf, 0, expected.shape[0],
                                "ceil(x's shape[0] / block_m)")) ||
        (status = tk__check_dim(function, "sf", sf, 1, expected.shape[1],
                                packed ? "ceil(ceil(x's shape[1] / block_k) "
                                         "/ 4) packed words"
                                       : "ceil(x's shape[1] / block_k)")) ||
        (status = tk__check_storage(function, "x", x)) ||
        (status = tk__check_storage(function, "sf", sf)) ||
        (status = tk__check_storage(function, "out", out)))
        return status;

    if (fp4)
        return tk__cast_back_fp4(function, x, sf, packed, block_m, block_k,
                                 out, stream);
    for (int i = 0; i < TK_COUNT(tk__cast_back_instances); i++) {
        if (tk__cast_back_instances[i].out != out->dtype ||
            tk__cast_back_instances[i].block_m != block_m ||
            tk__cast_back_instances[i].block_k != block_k ||
            tk__cast_back_instances[i].packed != packed)
            continue;
        if (tokens == 0 || hidden == 0)
            return TK_SUCCESS;
        tk__set_last_instance(tk__cast_back_instances[i].name);
        if (!packed)
            return tk__cast_back_instances[i].launcher(x, sf, out, stream);
        /* A single word column is never stepped over; its stride may be
         * anything, so give the view the layout's. */
        int64_t word_stride =
            sf->shape[1] == 1 ? expected.strides[1] : sf->strides[1];
        tk_tensor bytes = tk__packed_byte_view(sf, word_stride);
        return tk__cast_back_instances[i].launcher(x, &bytes, out, stream);
    }
    if (per_token)
        return tk__fail(TK_ERROR_UNSUPPORTED,
                        "%s: num_per_channels %d is not supported; "
                        "supported: 32, 64, 128",
                        function, block_k);
    return tk__fail(TK_ERROR_UNSUPPORTED,
                    "%s: %d x %d blocks with %s scale factors are not "
                    "supported; supported: 1x32, 1x64, 1x128, 128x128, 128x1, "
                    "32x32 with f32 SF; 1x32, 1x64, 1x128, 128x128 with packed "
                    "UE8M0 (i32) SF",
                    function, block_m, block_k,
                    packed ? "packed UE8M0" : "f32");
}

tk_status tk_cast_back(const tk_tensor *x, const tk_tensor *sf, int block_m,
                       int block_k, const tk_tensor *out, tk_stream stream)
{
    return tk__cast_back("tk_cast_back", false, x, sf, block_m, block_k, out,
                         stream);
}

tk_status tk_per_token_cast_back(const tk_tensor *x, const tk_tensor *sf,
                                 int num_per_channels, const tk_tensor *out,
                                 tk_stream stream)
{
    return tk__cast_back("tk_per_token_cast_back", true, x, sf, 1,
                         num_per_channels, out, stream);
}
