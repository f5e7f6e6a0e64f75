/*
 * api_cast_fp4.c -- the per-token casts of kernels/quant_fp4.tk: FP4
 * (e2m1) output, num_per_channels 16 and H, requantisation
 * (tk_per_token_cast_quantized), tk_per_token_cast_with_sf_only,
 * tk_per_token_cast_with_precomputed_sf, cast_back from packed FP4, and the
 * host helper tk_unpack_e2m1 (tilekernels-spec.md 3.2, 3.5, 4, 6.1, 6.3).
 *
 * The kernels address every SF tensor through a byte view (T, W, 4): an
 * f32 scale at [t, k] is bytes [t, k, 0..3] (strides 4 * the f32 strides),
 * a packed UE8M0 exponent is byte [t, k / 4, k % 4] of the int32 words.
 * Layout, round_sf and mode (cast / SF only / precomputed) are run-time
 * arguments of one instance per input dtype, output format and vector
 * width:
 *
 *   per_token_quant__<in>_<fp4|e4m3>[_16][_any]   npc 16..128
 *   per_token_quant_row__<in>_<fp4|e4m3>[_any]    npc == H <= 8192
 *   per_token_requant__<e4m3|fp4>_<fp4|e4m3>[_16] quantised input
 *   cast_back_fp4__<out>                          packed FP4 input
 *
 * `_16` is FP4 output with npc 16 (two groups per 32-column item); `_any`
 * serves row strides that are not a multiple of the 16-byte vector.
 */
#include <string.h>

#include "cast_fp4.h"
#include "tk_kernels.h"

/* The kernels cover whole 64-column chunks; npc == H up to this width
 * (one row per block, 128 threads). */
#define TK_FP4_COLUMN_MULTIPLE 64
#define TK_ROW_CAST_MAX_HIDDEN 8192

bool tk__is_packed_fp4(tk_dtype dtype)
{
    return dtype == TK_I8 || dtype == TK_U8 || dtype == TK_E2M1;
}

static const char *tk__format_name(tk_dtype format)
{
    return format == TK_E2M1 ? "e2m1" : "e4m3";
}

/* The byte view of a validated SF tensor with the layout's own strides
 * (`expected`, so that size-1 dimensions need no care). */
static tk_tensor tk__sf_bytes(const tk_tensor *sf, const tk_tensor *expected,
                              bool packed)
{
    if (packed)
        return tk__packed_byte_view(sf, expected->strides[1]);
    tk_tensor view = {.data = sf->data, .dtype = TK_U8, .rank = 3,
                      .shape = {expected->shape[0], expected->shape[1], 4},
                      .strides = {4 * expected->strides[0],
                                  4 * expected->strides[1], 1}};
    return view;
}

/* A u8 descriptor of a packed FP4 or e4m3 tensor (the kernels store
 * bytes). */
static tk_tensor tk__as_bytes(const tk_tensor *t)
{
    tk_tensor view = *t;
    view.dtype = TK_U8;
    return view;
}

static int tk__log2(int value)
{
    int log = 0;
    while ((1 << log) < value)
        log++;
    return log;
}

/* x (T, H) f32 / bf16 with contiguous rows, H % 64 == 0. */
static tk_status tk__check_float_input(const char *function, const tk_tensor *x)
{
    static const tk_dtype inputs[] = {TK_F32, TK_BF16};
    tk_status status;
    if ((status = tk__check_tensor(function, "x", x, 2)) ||
        (status = tk__check_dtype(function, "x", x, inputs, 2)))
        return status;
    if (x->shape[1] % TK_FP4_COLUMN_MULTIPLE != 0)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: x: shape[1] is %lld, expected a multiple of %d",
                        function, (long long)x->shape[1],
                        TK_FP4_COLUMN_MULTIPLE);
    return tk__check_rows(function, "x", x);
}

/* out: e4m3 (T, H) or packed FP4 (T, H / 2), contiguous. */
static tk_status tk__check_quant_output(const char *function,
                                        const tk_tensor *out, tk_dtype format,
                                        int64_t tokens, int64_t hidden)
{
    static const tk_dtype e4m3[] = {TK_E4M3};
    static const tk_dtype fp4[] = {TK_I8, TK_U8, TK_E2M1};
    tk_status status;
    if ((status = tk__check_tensor(function, "out", out, 2)))
        return status;
    if (format == TK_E2M1)
        status = tk__check_dtype(function, "out", out, fp4, 3);
    else
        status = tk__check_dtype(function, "out", out, e4m3, 1);
    if (status ||
        (status = tk__check_dim(function, "out", out, 0, tokens,
                                "x's shape[0]")) ||
        (status = tk__check_dim(function, "out", out, 1,
                                format == TK_E2M1 ? hidden / 2 : hidden,
                                format == TK_E2M1
                                    ? "H / 2 (two FP4 values per byte)"
                                    : "x's shape[1]")) ||
        (status = tk__check_contiguous(function, "out", out)))
        return status;
    return TK_SUCCESS;
}

/* ---- instance tables ---------------------------------------------------- */

typedef tk_status (*tk__quant_launcher)(const tk_tensor *, const tk_tensor *,
                                        const tk_tensor *, int32_t, bool, bool,
                                        int32_t, tk_stream);
typedef tk_status (*tk__row_launcher)(const tk_tensor *, const tk_tensor *,
                                      const tk_tensor *, bool, bool,
                                      tk_stream);
typedef tk_status (*tk__requant_launcher)(const tk_tensor *, const tk_tensor *,
                                          const tk_tensor *, const tk_tensor *,
                                          int32_t, int32_t, int32_t, int32_t,
                                          int32_t, bool, bool, bool, tk_stream);

static const struct {
    tk_dtype in, format;
    bool small_groups, any_stride;
    const char *name;
    tk__quant_launcher launcher;
} tk__quant_instances[] = {
#define TK_INSTANCE(IN, FMT, small, any, label) \
    {IN, FMT, small, any, "per_token_quant__" #label, tkl_per_token_quant__##label}
    TK_INSTANCE(TK_BF16, TK_E2M1, false, false, bf16_fp4),
    TK_INSTANCE(TK_F32, TK_E2M1, false, false, f32_fp4),
    TK_INSTANCE(TK_BF16, TK_E2M1, true, false, bf16_fp4_16),
    TK_INSTANCE(TK_F32, TK_E2M1, true, false, f32_fp4_16),
    TK_INSTANCE(TK_BF16, TK_E4M3, false, false, bf16_e4m3),
    TK_INSTANCE(TK_F32, TK_E4M3, false, false, f32_e4m3),
    TK_INSTANCE(TK_BF16, TK_E2M1, false, true, bf16_fp4_any),
    TK_INSTANCE(TK_F32, TK_E2M1, false, true, f32_fp4_any),
    TK_INSTANCE(TK_BF16, TK_E2M1, true, true, bf16_fp4_16_any),
    TK_INSTANCE(TK_F32, TK_E2M1, true, true, f32_fp4_16_any),
    TK_INSTANCE(TK_BF16, TK_E4M3, false, true, bf16_e4m3_any),
    TK_INSTANCE(TK_F32, TK_E4M3, false, true, f32_e4m3_any),
#undef TK_INSTANCE
};

static const struct {
    tk_dtype in, format;
    bool any_stride;
    const char *name;
    tk__row_launcher launcher;
} tk__row_instances[] = {
#define TK_INSTANCE(IN, FMT, any, label) \
    {IN, FMT, any, "per_token_quant_row__" #label, tkl_per_token_quant_row__##label}
    TK_INSTANCE(TK_BF16, TK_E2M1, false, bf16_fp4),
    TK_INSTANCE(TK_F32, TK_E2M1, false, f32_fp4),
    TK_INSTANCE(TK_BF16, TK_E4M3, false, bf16_e4m3),
    TK_INSTANCE(TK_F32, TK_E4M3, false, f32_e4m3),
    TK_INSTANCE(TK_BF16, TK_E2M1, true, bf16_fp4_any),
    TK_INSTANCE(TK_F32, TK_E2M1, true, f32_fp4_any),
    TK_INSTANCE(TK_BF16, TK_E4M3, true, bf16_e4m3_any),
    TK_INSTANCE(TK_F32, TK_E4M3, true, f32_e4m3_any),
#undef TK_INSTANCE
};

static const struct {
    bool fp4_in;
    tk_dtype format;
    bool small_groups;
    const char *name;
    tk__requant_launcher launcher;
} tk__requant_instances[] = {
#define TK_INSTANCE(fp4_in, FMT, small, label) \
    {fp4_in, FMT, small, "per_token_requant__" #label, tkl_per_token_requant__##label}
    TK_INSTANCE(false, TK_E2M1, false, e4m3_fp4),
    TK_INSTANCE(false, TK_E2M1, true, e4m3_fp4_16),
    TK_INSTANCE(false, TK_E4M3, false, e4m3_e4m3),
    TK_INSTANCE(true, TK_E2M1, false, fp4_fp4),
    TK_INSTANCE(true, TK_E2M1, true, fp4_fp4_16),
    TK_INSTANCE(true, TK_E4M3, false, fp4_e4m3),
#undef TK_INSTANCE
};

#define TK_COUNT(array) ((int)(sizeof(array) / sizeof((array)[0])))

/* ---- per_token_cast of float input ---------------------------------------- */

tk_status tk__per_token_quant(const char *function, const tk_tensor *x,
                              int num_per_channels, bool round_sf,
                              tk_sf_layout sf_layout, tk_dtype format,
                              const tk_tensor *out, const tk_tensor *out_sf,
                              const tk_tensor *precomputed, tk_stream stream)
{
    tk__set_last_instance(NULL);
    tk_status status;
    if ((status = tk__check_float_input(function, x)))
        return status;
    int64_t tokens = x->shape[0], hidden = x->shape[1];
    bool per_token = num_per_channels == hidden && num_per_channels != 16 &&
                     num_per_channels != 32 && num_per_channels != 64 &&
                     num_per_channels != 128;
    if (!per_token && num_per_channels != 16 && num_per_channels != 32 &&
        num_per_channels != 64 && num_per_channels != 128)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: num_per_channels is %d, expected 16, 32, 64, 128 "
                        "or x's shape[1] (%lld)",
                        function, num_per_channels, (long long)hidden);
    if (per_token && (out == NULL || precomputed != NULL))
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: num_per_channels == H (one scale per token) is "
                        "available for tk_per_token_cast only",
                        function);
    if (per_token && hidden > TK_ROW_CAST_MAX_HIDDEN)
        return tk__fail(TK_ERROR_UNSUPPORTED,
                        "%s: num_per_channels == H is supported up to H = %d, "
                        "got %lld",
                        function, TK_ROW_CAST_MAX_HIDDEN, (long long)hidden);
    if (!precomputed && (status = tk__check_sf_layout(function, sf_layout, round_sf)))
        return status;
    if (out && (status = tk__check_quant_output(function, out, format, tokens,
                                                hidden)))
        return status;

    /* the scales: written (out_sf) or read (precomputed), f32 or packed */
    const tk_tensor *scales = precomputed ? precomputed : out_sf;
    const char *scales_name = precomputed ? "sf" : "out_sf";
    tk_tensor expected;
    if ((status = tk__check_tensor(function, scales_name, scales, 2)))
        return status;
    if (!tk__sf_layout(tokens, hidden, 1, num_per_channels,
                       precomputed ? TK_SF_ROW_MAJOR : sf_layout, &expected, NULL))
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: x: too large for a scale-factor tensor", function);
    if (precomputed) {
        /* f32 (T, ceil(H / npc)) in any strides: row- or column-major */
        static const tk_dtype f32[] = {TK_F32};
        if ((status = tk__check_dtype(function, "sf", precomputed, f32, 1)) ||
            (status = tk__check_dim(function, "sf", precomputed, 0, tokens,
                                    "x's shape[0]")) ||
            (status = tk__check_dim(function, "sf", precomputed, 1,
                                    expected.shape[1],
                                    "ceil(H / num_per_channels)")))
            return status;
        for (int d = 0; d < 2; d++)
            if (precomputed->shape[d] > 1)
                expected.strides[d] = precomputed->strides[d];
    } else if ((status = tk__check_sf_output(function, out_sf, &expected,
                                             sf_layout))) {
        return status;
    }
    if ((status = tk__check_storage(function, "x", x)) ||
        (out && (status = tk__check_storage(function, "out", out))) ||
        (status = tk__check_storage(function, scales_name, scales)))
        return status;
    if (tokens == 0)
        return TK_SUCCESS;

    tk_tensor input = *x;
    if (tokens == 1)
        input.strides[0] = hidden; /* never stepped over */
    bool any_stride = input.strides[0] % (16 / (int64_t)tk_dtype_size(x->dtype)) != 0;
    bool packed = !precomputed && sf_layout == TK_SF_PACKED_UE8M0;
    tk_tensor sf_bytes = tk__sf_bytes(scales, &expected, packed);
    /* SF only: an output with no rows, which every store is masked by */
    tk_tensor out_bytes;
    if (out) {
        out_bytes = tk__as_bytes(out);
    } else {
        memset(&out_bytes, 0, sizeof out_bytes);
        out_bytes.dtype = TK_U8;
        out_bytes.rank = 2;
        out_bytes.shape[1] = format == TK_E2M1 ? hidden / 2 : hidden;
        out_bytes.strides[0] = out_bytes.shape[1];
        out_bytes.strides[1] = 1;
    }

    if (per_token) {
        for (int i = 0; i < TK_COUNT(tk__row_instances); i++) {
            if (tk__row_instances[i].in != x->dtype ||
                tk__row_instances[i].format != format ||
                tk__row_instances[i].any_stride != any_stride)
                continue;
            tk__set_last_instance(tk__row_instances[i].name);
            return tk__row_instances[i].launcher(&input, &out_bytes, &sf_bytes,
                                                 round_sf, packed, stream);
        }
    } else {
        bool small = format == TK_E2M1 && num_per_channels == 16;
        int32_t mode = precomputed ? 2 : out ? 0 : 1;
        for (int i = 0; i < TK_COUNT(tk__quant_instances); i++) {
            if (tk__quant_instances[i].in != x->dtype ||
                tk__quant_instances[i].format != format ||
                tk__quant_instances[i].small_groups != small ||
                tk__quant_instances[i].any_stride != any_stride)
                continue;
            tk__set_last_instance(tk__quant_instances[i].name);
            return tk__quant_instances[i].launcher(
                &input, &out_bytes, &sf_bytes, tk__log2(num_per_channels),
                round_sf, packed, mode, stream);
        }
    }
    return tk__fail(TK_ERROR_UNSUPPORTED, "%s: no instance for %s input to %s",
                    function, tk__dtype_name(x->dtype), tk__format_name(format));
}

tk_status tk_per_token_cast_with_sf_only(const tk_tensor *x, tk_dtype format,
                                         int num_per_channels, bool round_sf,
                                         tk_sf_layout sf_layout,
                                         const tk_tensor *out_sf,
                                         tk_stream stream)
{
    static const char function[] = "tk_per_token_cast_with_sf_only";
    tk__set_last_instance(NULL);
    if (format != TK_E4M3 && format != TK_E2M1)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: format is %s, expected TK_E4M3 or TK_E2M1",
                        function, tk__dtype_name(format));
    return tk__per_token_quant(function, x, num_per_channels, round_sf,
                               sf_layout, format, NULL, out_sf, NULL, stream);
}

tk_status tk_per_token_cast_with_precomputed_sf(const tk_tensor *x,
                                                int num_per_channels,
                                                const tk_tensor *sf,
                                                const tk_tensor *out,
                                                tk_stream stream)
{
    static const char function[] = "tk_per_token_cast_with_precomputed_sf";
    tk__set_last_instance(NULL);
    tk_status status;
    if ((status = tk__check_tensor(function, "out", out, 2)))
        return status;
    tk_dtype format = tk__is_packed_fp4(out->dtype) ? TK_E2M1 : TK_E4M3;
    return tk__per_token_quant(function, x, num_per_channels, false,
                               TK_SF_ROW_MAJOR, format, out, NULL, sf, stream);
}

/* ---- requantisation --------------------------------------------------------- */

/* An input SF tensor of (block_m, block_k) blocks of a (T, H) matrix: f32
 * in any strides or packed UE8M0 (i32, column-major), detected as
 * TileKernels does (spec 3.5).  Fills *bytes with its byte view. */
static tk_status tk__input_sf_bytes(const char *function, const char *name,
                                    const tk_tensor *sf, int64_t tokens,
                                    int64_t hidden, int block_m, int block_k,
                                    tk_tensor *bytes, bool *packed)
{
    static const tk_dtype scales[] = {TK_F32, TK_I32};
    tk_status status;
    if ((status = tk__check_tensor(function, name, sf, 2)) ||
        (status = tk__check_dtype(function, name, sf, scales, 2)))
        return status;
    *packed = sf->dtype == TK_I32;
    if (*packed && (status = tk__check_packed_sf(function, name, sf)))
        return status;
    tk_tensor expected;
    if (!tk__sf_layout(tokens, hidden, block_m, block_k,
                       *packed ? TK_SF_PACKED_UE8M0 : TK_SF_ROW_MAJOR, &expected,
                       NULL))
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: x: too large for a scale-factor tensor", function);
    if ((status = tk__check_dim(function, name, sf, 0, expected.shape[0],
                                "ceil(T / block_m)")) ||
        (status = tk__check_dim(function, name, sf, 1, expected.shape[1],
                                *packed ? "ceil(ceil(H / block_k) / 4) packed "
                                          "words"
                                        : "ceil(H / block_k)")) ||
        (status = tk__check_storage(function, name, sf)))
        return status;
    for (int d = 0; d < 2; d++)
        if (sf->shape[d] > 1)
            expected.strides[d] = sf->strides[d];
    *bytes = tk__sf_bytes(sf, &expected, *packed);
    return TK_SUCCESS;
}

/* The shift that maps an index below `extent` to its block of `block`
 * (index / block), or -1 where only a division does: log2 of a
 * power-of-two block, and for a block spanning the whole extent any
 * shift with 2^shift >= extent (every index maps to block 0). */
static int tk__block_shift(int block, int64_t extent)
{
    if (block >= extent) {
        int shift = 0;
        while (shift < 30 && (INT64_C(1) << shift) < extent)
            shift++;
        return (INT64_C(1) << shift) >= extent ? shift : -1;
    }
    if ((block & (block - 1)) != 0)
        return -1;
    return tk__log2(block);
}

tk_status tk_per_token_cast_quantized(const tk_tensor *x, const tk_tensor *x_sf,
                                      int x_block_m, int x_block_k,
                                      int num_per_channels, bool round_sf,
                                      tk_sf_layout sf_layout,
                                      const tk_tensor *out,
                                      const tk_tensor *out_sf, tk_stream stream)
{
    static const char function[] = "tk_per_token_cast_quantized";
    static const tk_dtype inputs[] = {TK_E4M3, TK_I8, TK_U8, TK_E2M1};
    static const tk_dtype outputs[] = {TK_E4M3, TK_I8, TK_U8, TK_E2M1};
    tk__set_last_instance(NULL);
    tk_status status;
    if ((status = tk__check_tensor(function, "x", x, 2)) ||
        (status = tk__check_dtype(function, "x", x, inputs, 4)) ||
        (status = tk__check_tensor(function, "out", out, 2)) ||
        (status = tk__check_dtype(function, "out", out, outputs, 4)) ||
        (status = tk__check_tensor(function, "out_sf", out_sf, 2)) ||
        (status = tk__check_contiguous(function, "x", x)) ||
        (status = tk__check_sf_layout(function, sf_layout, round_sf)))
        return status;
    bool fp4_in = tk__is_packed_fp4(x->dtype);
    tk_dtype format = tk__is_packed_fp4(out->dtype) ? TK_E2M1 : TK_E4M3;
    int64_t tokens = x->shape[0], hidden = x->shape[1] * (fp4_in ? 2 : 1);
    if (hidden % TK_FP4_COLUMN_MULTIPLE != 0)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: x: H is %lld, expected a multiple of %d", function,
                        (long long)hidden, TK_FP4_COLUMN_MULTIPLE);
    if (x_block_m < 1 || x_block_k < 1)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: %s is %d, expected >= 1", function,
                        x_block_m < 1 ? "x_block_m" : "x_block_k",
                        x_block_m < 1 ? x_block_m : x_block_k);
    if (num_per_channels != 16 && num_per_channels != 32 &&
        num_per_channels != 64 && num_per_channels != 128) {
        if (num_per_channels > 0 && num_per_channels == hidden)
            return tk__fail(TK_ERROR_UNSUPPORTED,
                            "%s: num_per_channels == H is not available with "
                            "quantised input (TileKernels' tests use 32 and "
                            "128)",
                            function);
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: num_per_channels is %d, expected 16, 32, 64 or 128",
                        function, num_per_channels);
    }
    /* one input scale per item of 32 (FP4 out) or 16 (e4m3 out) columns */
    int item = format == TK_E2M1 ? 32 : 16;
    if (x_block_k % item != 0)
        return tk__fail(TK_ERROR_UNSUPPORTED,
                        "%s: x_block_k %d is not supported for %s output: it "
                        "must be a multiple of %d",
                        function, x_block_k, tk__format_name(format), item);
    tk_tensor x_sf_bytes;
    bool x_packed;
    if ((status = tk__input_sf_bytes(function, "x_sf", x_sf, tokens, hidden,
                                     x_block_m, x_block_k, &x_sf_bytes,
                                     &x_packed)) ||
        (status = tk__check_quant_output(function, out, format, tokens, hidden)))
        return status;
    tk_tensor expected;
    if (!tk__sf_layout(tokens, hidden, 1, num_per_channels, sf_layout, &expected,
                       NULL))
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: x: too large for a scale-factor tensor", function);
    if ((status = tk__check_sf_output(function, out_sf, &expected, sf_layout)) ||
        (status = tk__check_storage(function, "x", x)) ||
        (status = tk__check_storage(function, "out", out)) ||
        (status = tk__check_storage(function, "out_sf", out_sf)))
        return status;
    if (tokens == 0)
        return TK_SUCCESS;

    bool packed = sf_layout == TK_SF_PACKED_UE8M0;
    tk_tensor input = fp4_in ? tk__as_bytes(x) : *x;
    tk_tensor out_bytes = tk__as_bytes(out);
    tk_tensor sf_bytes = tk__sf_bytes(out_sf, &expected, packed);
    bool small = format == TK_E2M1 && num_per_channels == 16;
    for (int i = 0; i < TK_COUNT(tk__requant_instances); i++) {
        if (tk__requant_instances[i].fp4_in != fp4_in ||
            tk__requant_instances[i].format != format ||
            tk__requant_instances[i].small_groups != small)
            continue;
        tk__set_last_instance(tk__requant_instances[i].name);
        return tk__requant_instances[i].launcher(
            &input, &x_sf_bytes, &out_bytes, &sf_bytes,
            tk__log2(num_per_channels), x_block_m, x_block_k,
            tk__block_shift(x_block_m, tokens), tk__block_shift(x_block_k, hidden),
            x_packed, round_sf, packed, stream);
    }
    return tk__fail(TK_ERROR_UNSUPPORTED, "%s: no instance for %s input to %s",
                    function, fp4_in ? "e2m1" : "e4m3", tk__format_name(format));
}

/* ---- cast_back from packed FP4 ---------------------------------------------- */


tk_status tk__cast_back_fp4(const char *function, const tk_tensor *x,
                            const tk_tensor *sf, bool packed, int block_m,
                            int block_k, const tk_tensor *out, tk_stream stream)
{
    /* each thread item is one 16-byte store: 8 bf16 or 4 f32 values of one
     * scale block */
    int item = out->dtype == TK_BF16 ? 8 : 4;
    if (block_k % item != 0)
        return tk__fail(TK_ERROR_UNSUPPORTED,
                        "%s: block_k %d is not supported for packed e2m1 data "
                        "with %s output: it must be a multiple of %d",
                        function, block_k, tk__dtype_name(out->dtype), item);
    int64_t tokens = x->shape[0], hidden = 2 * x->shape[1];
    if (tokens == 0 || hidden == 0)
        return TK_SUCCESS;
    tk_tensor expected;
    if (!tk__sf_layout(tokens, hidden, block_m, block_k,
                       packed ? TK_SF_PACKED_UE8M0 : TK_SF_ROW_MAJOR, &expected,
                       NULL))
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: x: too large for a scale-factor tensor", function);
    for (int d = 0; d < 2; d++)
        if (sf->shape[d] > 1)
            expected.strides[d] = sf->strides[d];
    tk_tensor sf_bytes = tk__sf_bytes(sf, &expected, packed);
    tk_tensor input = tk__as_bytes(x);
    int lbm = tk__block_shift(block_m, tokens), lbk = tk__block_shift(block_k, hidden);
    if (out->dtype == TK_BF16) {
        tk__set_last_instance("cast_back_fp4__bf16");
        return tkl_cast_back_fp4__bf16(&input, &sf_bytes, out, block_m, block_k, lbm, lbk,
                                       packed, stream);
    }
    tk__set_last_instance("cast_back_fp4__f32");
    return tkl_cast_back_fp4__f32(&input, &sf_bytes, out, block_m, block_k, lbm, lbk,
                                  packed, stream);
}

/* ---- host helper -------------------------------------------------------------- */

tk_status tk_unpack_e2m1(const void *x, int64_t bytes, tk_dtype out_dtype,
                         void *out)
{
    static const char function[] = "tk_unpack_e2m1";
    /* the 16 codes as f32 bit patterns: 0, .5, 1, 1.5, 2, 3, 4, 6, then
     * the same with the sign bit (code 8 is -0.0) */
    static const uint32_t values[16] = {
        0x00000000u, 0x3F000000u, 0x3F800000u, 0x3FC00000u,
        0x40000000u, 0x40400000u, 0x40800000u, 0x40C00000u,
        0x80000000u, 0xBF000000u, 0xBF800000u, 0xBFC00000u,
        0xC0000000u, 0xC0400000u, 0xC0800000u, 0xC0C00000u};
    tk__set_last_instance(NULL);
    if (bytes < 0)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT, "%s: bytes is %lld, expected >= 0",
                        function, (long long)bytes);
    if (out_dtype != TK_F32 && out_dtype != TK_BF16)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: out_dtype is %s, expected TK_F32 or TK_BF16",
                        function, tk__dtype_name(out_dtype));
    if (bytes == 0)
        return TK_SUCCESS;
    if (x == NULL || out == NULL)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT, "%s: %s is NULL", function,
                        x == NULL ? "x" : "out");
    const uint8_t *in = x;
    for (int64_t j = 0; j < bytes; j++) {
        uint32_t low = values[in[j] & 0xF], high = values[in[j] >> 4];
        if (out_dtype == TK_F32) {
            memcpy((uint32_t *)out + 2 * j, &low, 4);
            memcpy((uint32_t *)out + 2 * j + 1, &high, 4);
        } else {
            /* exact in bf16: every value has one mantissa bit at most */
            ((uint16_t *)out)[2 * j] = (uint16_t)(low >> 16);
            ((uint16_t *)out)[2 * j + 1] = (uint16_t)(high >> 16);
        }
    }
    return TK_SUCCESS;
}
