/*
 * api_block_cast.c -- tk_per_block_cast, tk_per_block_cast_with_sf_only,
 * tk_per_block_cast_with_precomputed_sf and tk_per_block_cast_lossless
 * (tilekernels-spec.md sections 3.5, 4.1, 4.2, 6.4 and 6.5;
 * kernels/quant_block.tk).
 *
 * One kernel instance per (input dtype, format, block rows) serves every
 * mode: the kernels take the f32 SF tensor, the packed UE8M0 byte view
 * and the precomputed SF as separate arguments, mask every store by its
 * tensor's shape, and get the outputs a call does not want as empty
 * tensors (SF-only: an empty `out`; f32 scales: an empty byte view;
 * packed scales: an empty f32 tensor).  The block's columns (32 or 128)
 * are a run-time argument, lanes_log2 = log2(block_k / 8): the lanes of a
 * 16-lane row segment that share one scale.
 *
 *   per_block_cast__<in>_<e4m3|e2m1>_<bm>        bm 32 or 128
 *   per_block_cast_lossless__b<bm>               bm 1, 32 or 128
 */
#include "tk_internal.h"
#include "tk_kernels.h"

typedef tk_status (*tk__block_launcher)(const tk_tensor *x, const tk_tensor *out,
                                        const tk_tensor *sf, const tk_tensor *sfb,
                                        const tk_tensor *sf_in, int32_t lanes_log2,
                                        int32_t round, int32_t precomputed,
                                        tk_stream stream);

static const struct {
    tk_dtype in, fmt;
    int block_m;
    const char *name;
    tk__block_launcher launcher;
} tk__block_instances[] = {
#define TK_INSTANCE(IN, FMT, bm, label) \
    {IN, FMT, bm, "per_block_cast__" #label, tkl_per_block_cast__##label}
    TK_INSTANCE(TK_BF16, TK_E4M3, 128, bf16_e4m3_128),
    TK_INSTANCE(TK_BF16, TK_E4M3, 32, bf16_e4m3_32),
    TK_INSTANCE(TK_F32, TK_E4M3, 128, f32_e4m3_128),
    TK_INSTANCE(TK_F32, TK_E4M3, 32, f32_e4m3_32),
    TK_INSTANCE(TK_BF16, TK_E2M1, 128, bf16_e2m1_128),
    TK_INSTANCE(TK_BF16, TK_E2M1, 32, bf16_e2m1_32),
    TK_INSTANCE(TK_F32, TK_E2M1, 128, f32_e2m1_128),
    TK_INSTANCE(TK_F32, TK_E2M1, 32, f32_e2m1_32),
#undef TK_INSTANCE
};

#define TK_COUNT(array) ((int)(sizeof(array) / sizeof((array)[0])))

/* The kernels' 16-lane row segments: the x columns they cover per
 * block_k.  lanes_log2 = log2(block_k / 8). */
static int32_t tk__lanes_log2(int block_k) { return block_k == 32 ? 2 : 4; }

/* An empty f32 SF tensor / packed byte view: every store to it is masked. */
static tk_tensor tk__empty_f32(void)
{
    tk_tensor t = {.data = NULL, .dtype = TK_F32, .rank = 2, .shape = {0, 0}, .strides = {1, 1}};
    return t;
}
static tk_tensor tk__empty_bytes(void)
{
    tk_tensor t = {.data = NULL, .dtype = TK_U8, .rank = 3, .shape = {0, 0, 4},
                   .strides = {4, 4, 1}};
    return t;
}

/* out_sf is exactly the descriptor tk_sf_desc gives (size-1 dimensions
 * may have any stride); `scales` receives the layout's own strides. */
static tk_status tk__check_sf_exact(const char *function, const char *argument,
                                    const tk_tensor *out_sf, int64_t rows, int64_t cols,
                                    int block_m, int block_k, tk_sf_layout layout,
                                    tk_tensor *scales)
{
    tk_status status;
    tk_tensor expected;
    if ((status = tk__check_tensor(function, argument, out_sf, 2)))
        return status;
    if (!tk__sf_layout(rows, cols, block_m, block_k, layout, &expected, NULL))
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: x: too large for a scale-factor tensor", function);
    if ((status = tk__check_sf_desc(function, argument, out_sf, &expected, layout,
                                    "ceil(T / block_m)",
                                    layout == TK_SF_PACKED_UE8M0
                                        ? "ceil(ceil(H / block_k) / 4) packed words"
                                        : "ceil(H / block_k)")) ||
        (status = tk__check_storage(function, argument, out_sf)))
        return status;
    *scales = expected;
    scales->data = out_sf->data;
    return TK_SUCCESS;
}

/* Arguments every per_block_cast mode shares: x, fmt and the block. */
static tk_status tk__check_block_input(const char *function, const tk_tensor *x, tk_dtype fmt,
                                       int block_m, int block_k)
{
    static const tk_dtype inputs[] = {TK_F32, TK_BF16};
    tk_status status;
    if ((status = tk__check_tensor(function, "x", x, 2)) ||
        (status = tk__check_dtype(function, "x", x, inputs, 2)))
        return status;
    if (fmt != TK_E4M3 && fmt != TK_E2M1)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: fmt is %s, expected e4m3 (TK_E4M3) or e2m1 (TK_E2M1)",
                        function, tk__dtype_name(fmt));
    if ((block_m != 32 && block_m != 128) || (block_k != 32 && block_k != 128))
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: the block is %d x %d, expected block_m and block_k "
                        "each 32 or 128",
                        function, block_m, block_k);
    if (x->shape[1] % 64 != 0)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: x: shape[1] is %lld, expected a multiple of 64", function,
                        (long long)x->shape[1]);
    if ((status = tk__check_contiguous(function, "x", x)) ||
        (status = tk__check_storage(function, "x", x)))
        return status;
    return TK_SUCCESS;
}

/* out: (T, H) e4m3, or (T, H/2) i8 packed FP4, contiguous; `view` is what
 * the kernel takes (the i8 bytes as u8). */
static tk_status tk__check_block_output(const char *function, const tk_tensor *x, tk_dtype fmt,
                                        const tk_tensor *out, tk_tensor *view)
{
    static const tk_dtype e4m3[] = {TK_E4M3};
    static const tk_dtype packed[] = {TK_I8};
    bool fp4 = fmt == TK_E2M1;
    int64_t columns = fp4 ? x->shape[1] / 2 : x->shape[1];
    tk_status status;
    if ((status = tk__check_tensor(function, "out", out, 2)) ||
        (status = tk__check_dtype(function, "out", out, fp4 ? packed : e4m3, 1)) ||
        (status = tk__check_dim(function, "out", out, 0, x->shape[0], "x's shape[0]")) ||
        (status = tk__check_dim(function, "out", out, 1, columns,
                                fp4 ? "H / 2: two FP4 values per byte" : "x's shape[1]")) ||
        (status = tk__check_contiguous(function, "out", out)) ||
        (status = tk__check_storage(function, "out", out)))
        return status;
    *view = *out;
    view->dtype = fp4 ? TK_U8 : TK_E4M3;
    view->strides[0] = columns;
    view->strides[1] = 1;
    return TK_SUCCESS;
}

/* Launches the instance for (x's dtype, fmt, block_m). */
static tk_status tk__launch_block(const char *function, const tk_tensor *x, tk_dtype fmt,
                                  int block_m, int block_k, const tk_tensor *out,
                                  const tk_tensor *sf, const tk_tensor *sfb,
                                  const tk_tensor *sf_in, bool round_sf, bool precomputed,
                                  tk_stream stream)
{
    for (int i = 0; i < TK_COUNT(tk__block_instances); i++) {
        if (tk__block_instances[i].in != x->dtype || tk__block_instances[i].fmt != fmt ||
            tk__block_instances[i].block_m != block_m)
            continue;
        if (x->shape[0] == 0)
            return TK_SUCCESS;
        tk__set_last_instance(tk__block_instances[i].name);
        return tk__block_instances[i].launcher(x, out, sf, sfb, sf_in, tk__lanes_log2(block_k),
                                               round_sf, precomputed, stream);
    }
    return tk__fail(TK_ERROR_UNSUPPORTED, "%s: no instance for %s input", function,
                    tk__dtype_name(x->dtype));
}

/* The f32 SF and packed byte view a mode writes (the other one empty). */
static void tk__sf_targets(const tk_tensor *scales, tk_sf_layout layout, tk_tensor *sf,
                           tk_tensor *sfb)
{
    if (layout == TK_SF_PACKED_UE8M0) {
        *sf = tk__empty_f32();
        *sfb = tk__packed_byte_view(scales, scales->strides[1]);
    } else {
        *sf = *scales;
        *sfb = tk__empty_bytes();
    }
}

tk_status tk_per_block_cast(const tk_tensor *x, tk_dtype fmt, int block_m, int block_k,
                            bool round_sf, tk_sf_layout sf_layout, const tk_tensor *out,
                            const tk_tensor *out_sf, tk_stream stream)
{
    static const char function[] = "tk_per_block_cast";
    tk__set_last_instance(NULL);
    tk_status status;
    tk_tensor view, scales, sf, sfb, none = tk__empty_f32();
    if ((status = tk__check_block_input(function, x, fmt, block_m, block_k)) ||
        (status = tk__check_sf_layout(function, sf_layout, round_sf)) ||
        (status = tk__check_block_output(function, x, fmt, out, &view)) ||
        (status = tk__check_sf_exact(function, "out_sf", out_sf, x->shape[0], x->shape[1],
                                     block_m, block_k, sf_layout, &scales)))
        return status;
    tk__sf_targets(&scales, sf_layout, &sf, &sfb);
    return tk__launch_block(function, x, fmt, block_m, block_k, &view, &sf, &sfb, &none,
                            round_sf, false, stream);
}

tk_status tk_per_block_cast_with_sf_only(const tk_tensor *x, tk_dtype fmt, int block_m,
                                         int block_k, bool round_sf, tk_sf_layout sf_layout,
                                         const tk_tensor *out_sf, tk_stream stream)
{
    static const char function[] = "tk_per_block_cast_with_sf_only";
    tk__set_last_instance(NULL);
    tk_status status;
    tk_tensor scales, sf, sfb, none = tk__empty_f32();
    if ((status = tk__check_block_input(function, x, fmt, block_m, block_k)) ||
        (status = tk__check_sf_layout(function, sf_layout, round_sf)) ||
        (status = tk__check_sf_exact(function, "out_sf", out_sf, x->shape[0], x->shape[1],
                                     block_m, block_k, sf_layout, &scales)))
        return status;
    /* no data: an empty output whose stores are all masked */
    bool fp4 = fmt == TK_E2M1;
    tk_tensor nothing = {.data = NULL, .dtype = fp4 ? TK_U8 : TK_E4M3, .rank = 2,
                         .shape = {0, fp4 ? x->shape[1] / 2 : x->shape[1]},
                         .strides = {fp4 ? x->shape[1] / 2 : x->shape[1], 1}};
    tk__sf_targets(&scales, sf_layout, &sf, &sfb);
    return tk__launch_block(function, x, fmt, block_m, block_k, &nothing, &sf, &sfb, &none,
                            round_sf, false, stream);
}

tk_status tk_per_block_cast_with_precomputed_sf(const tk_tensor *x, tk_dtype fmt, int block_m,
                                                int block_k, const tk_tensor *sf,
                                                const tk_tensor *out, tk_stream stream)
{
    static const char function[] = "tk_per_block_cast_with_precomputed_sf";
    static const tk_dtype scale_types[] = {TK_F32};
    tk__set_last_instance(NULL);
    tk_status status;
    tk_tensor view, expected, no_sf = tk__empty_f32(), no_bytes = tk__empty_bytes();
    if ((status = tk__check_block_input(function, x, fmt, block_m, block_k)) ||
        (status = tk__check_block_output(function, x, fmt, out, &view)) ||
        (status = tk__check_tensor(function, "sf", sf, 2)) ||
        (status = tk__check_dtype(function, "sf", sf, scale_types, 1)))
        return status;
    if (!tk__sf_layout(x->shape[0], x->shape[1], block_m, block_k, TK_SF_ROW_MAJOR, &expected,
                       NULL))
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: x: too large for a scale-factor tensor", function);
    if ((status = tk__check_dim(function, "sf", sf, 0, expected.shape[0], "ceil(T / block_m)")) ||
        (status = tk__check_dim(function, "sf", sf, 1, expected.shape[1], "ceil(H / block_k)")))
        return status;
    if (sf->shape[1] > 1 && sf->strides[1] != 1)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: sf: strides[1] is %lld, expected 1 (precomputed scales "
                        "must be row-major)",
                        function, (long long)sf->strides[1]);
    if ((status = tk__check_contiguous(function, "sf", sf)) ||
        (status = tk__check_storage(function, "sf", sf)))
        return status;
    tk_tensor scales = expected;
    scales.data = sf->data;
    return tk__launch_block(function, x, fmt, block_m, block_k, &view, &no_sf, &no_bytes,
                            &scales, false, true, stream);
}

/* ---- per_block_cast_lossless ---------------------------------------------- */

typedef tk_status (*tk__lossless_launcher)(const tk_tensor *x, const tk_tensor *sf_in,
                                           const tk_tensor *sfb_in, const tk_tensor *out,
                                           const tk_tensor *sf, const tk_tensor *sfb,
                                           int32_t packed_in, int32_t lbm, int32_t lbk,
                                           int32_t lanes_log2, tk_stream stream);

static const struct {
    int block_m;
    const char *name;
    tk__lossless_launcher launcher;
} tk__lossless_instances[] = {
    {1, "per_block_cast_lossless__b1", tkl_per_block_cast_lossless__b1},
    {32, "per_block_cast_lossless__b32", tkl_per_block_cast_lossless__b32},
    {128, "per_block_cast_lossless__b128", tkl_per_block_cast_lossless__b128},
};

static int tk__log2_exact(int64_t value)
{
    if (value < 1 || (value & (value - 1)) != 0)
        return -1;
    int log = 0;
    while ((INT64_C(1) << log) < value)
        log++;
    return log;
}

tk_status tk_per_block_cast_lossless(const tk_tensor *x, const tk_tensor *sf, int x_block_m,
                                     int x_block_k, int block_m, int block_k,
                                     tk_sf_layout sf_layout, const tk_tensor *out,
                                     const tk_tensor *out_sf, tk_stream stream)
{
    static const char function[] = "tk_per_block_cast_lossless";
    static const tk_dtype inputs[] = {TK_I8};
    static const tk_dtype outputs[] = {TK_E4M3};
    static const tk_dtype scale_types[] = {TK_F32, TK_I32};
    tk__set_last_instance(NULL);
    tk_status status;
    if ((status = tk__check_tensor(function, "x", x, 2)) ||
        (status = tk__check_tensor(function, "sf", sf, 2)) ||
        (status = tk__check_tensor(function, "out", out, 2)) ||
        (status = tk__check_dtype(function, "x", x, inputs, 1)) ||
        (status = tk__check_dtype(function, "sf", sf, scale_types, 2)) ||
        (status = tk__check_dtype(function, "out", out, outputs, 1)) ||
        (status = tk__check_sf_layout(function, sf_layout, true)))
        return status;
    int lbm = tk__log2_exact(x_block_m), lbk = tk__log2_exact(x_block_k);
    if (lbm < 0 || lbk < 3)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: the input block is %d x %d, expected powers of two with "
                        "x_block_k >= 8",
                        function, x_block_m, x_block_k);
    if ((block_m != 1 && block_m != 32 && block_m != 128) || (block_k != 32 && block_k != 128))
        return tk__fail(TK_ERROR_UNSUPPORTED,
                        "%s: the output block is %d x %d; supported: block_m 1, 32 "
                        "or 128 and block_k 32 or 128",
                        function, block_m, block_k);
    if (block_m % x_block_m != 0 || block_k % x_block_k != 0)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: the output block %d x %d is not a multiple of the "
                        "input block %d x %d",
                        function, block_m, block_k, x_block_m, x_block_k);
    int64_t tokens = out->shape[0], hidden = out->shape[1];
    if (hidden % 32 != 0)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: out: shape[1] is %lld, expected a multiple of 32", function,
                        (long long)hidden);
    if ((status = tk__check_dim(function, "x", x, 0, tokens, "out's shape[0]")) ||
        (status = tk__check_dim(function, "x", x, 1, hidden / 2,
                                "H / 2: two FP4 values per byte")) ||
        (status = tk__check_contiguous(function, "x", x)) ||
        (status = tk__check_contiguous(function, "out", out)) ||
        (status = tk__check_storage(function, "x", x)) ||
        (status = tk__check_storage(function, "out", out)))
        return status;

    /* input scales: layout detection as TileKernels does it (spec 3.5) */
    bool packed_in = sf->dtype == TK_I32;
    tk_tensor in_expected;
    if (!tk__sf_layout(tokens, hidden, x_block_m, x_block_k,
                       packed_in ? TK_SF_PACKED_UE8M0 : TK_SF_ROW_MAJOR, &in_expected, NULL))
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: x: too large for a scale-factor tensor", function);
    if ((status = tk__check_dim(function, "sf", sf, 0, in_expected.shape[0],
                                "ceil(T / x_block_m)")) ||
        (status = tk__check_dim(function, "sf", sf, 1, in_expected.shape[1],
                                packed_in ? "ceil(ceil(H / x_block_k) / 4) packed words"
                                          : "ceil(H / x_block_k)")))
        return status;
    if (packed_in && (status = tk__check_packed_sf(function, "sf", sf)))
        return status;
    if (!packed_in && sf->shape[0] > 1 && sf->strides[0] != 1 && sf->shape[1] > 1 &&
        sf->strides[1] != 1)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: sf: strides are (%lld, %lld), expected strides[0] == 1 "
                        "(column-major) or strides[1] == 1 (row-major)",
                        function, (long long)sf->strides[0], (long long)sf->strides[1]);
    if ((status = tk__check_storage(function, "sf", sf)))
        return status;

    tk_tensor scales, out_f32, out_bytes;
    if ((status = tk__check_sf_exact(function, "out_sf", out_sf, tokens, hidden, block_m,
                                     block_k, sf_layout, &scales)))
        return status;
    tk__sf_targets(&scales, sf_layout, &out_f32, &out_bytes);
    tk_tensor in_f32 = tk__empty_f32(), in_bytes = tk__empty_bytes();
    if (packed_in) {
        int64_t word_stride = sf->shape[1] > 1 ? sf->strides[1] : in_expected.strides[1];
        in_bytes = tk__packed_byte_view(sf, word_stride);
    } else {
        in_f32 = *sf;
    }
    tk_tensor bytes = *x;
    bytes.dtype = TK_U8;
    for (int i = 0; i < TK_COUNT(tk__lossless_instances); i++) {
        if (tk__lossless_instances[i].block_m != block_m)
            continue;
        if (tokens == 0)
            return TK_SUCCESS;
        tk__set_last_instance(tk__lossless_instances[i].name);
        return tk__lossless_instances[i].launcher(&bytes, &in_f32, &in_bytes, out, &out_f32,
                                                  &out_bytes, packed_in, lbm, lbk,
                                                  tk__lanes_log2(block_k), stream);
    }
    return tk__fail(TK_ERROR_UNSUPPORTED, "%s: no instance for block_m %d", function, block_m);
}
