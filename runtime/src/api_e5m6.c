/*
 * api_e5m6.c -- tk_per_token_cast_e5m6 and tk_cast_back_e5m6
 * (tilekernels-spec.md sections 3.4, 3.5, 6.2 and 6.3;
 * kernels/quant_e5m6.tk).
 *
 * E5M6 has one scale per token: the SF tensor is (T, 1), and all three
 * layouts of tilekernels-spec.md 3.5 put row t's scale in the 32-bit word
 * t of the buffer (row-major strides (1, 1), column-major (1, align(T, 4)),
 * packed int32 (1, align(T, 4)) with the exponent in the low byte).  The
 * kernels therefore see the SF as T contiguous u32 words and a `mode`
 * saying what a word holds, and the packed u8 output (T, 3H/2) as the u32
 * words (T, 3H/8) the encoder produces.
 *
 * Instances (per input dtype): `_4k` and `_8k` keep a row of up to 4096 /
 * 8192 columns in registers with 16-byte accesses (H % 32 == 0, row
 * stride a multiple of the 16-byte vector); `_any` takes up to 16384
 * columns, any H % 8 == 0 and any row stride, with scalar accesses.
 */
#include "tk_internal.h"
#include "tk_kernels.h"

/* Columns the register-resident row can hold (kernels/quant_e5m6.tk). */
#define TK_E5M6_MAX_HIDDEN 16384
#define TK_E5M6_FAST_HIDDEN 8192
#define TK_E5M6_SMALL_HIDDEN 4096

/* Values of the kernels' `mode` argument (stdlib/e5m6.tk E5M6_SF_*). */
enum { TK_E5M6_SF_F32 = 0, TK_E5M6_SF_ROUND = 1, TK_E5M6_SF_UE8M0 = 2 };

typedef tk_status (*tk__e5m6_cast_launcher)(const tk_tensor *x, const tk_tensor *out,
                                            const tk_tensor *sf, int32_t mode,
                                            tk_stream stream);

static const struct {
    tk_dtype in;
    int max_hidden; /* 0: the `_any` instance */
    const char *name;
    tk__e5m6_cast_launcher launcher;
} tk__e5m6_cast_instances[] = {
#define TK_INSTANCE(IN, max, label) \
    {IN, max, "per_token_cast_e5m6__" #label, tkl_per_token_cast_e5m6__##label}
    TK_INSTANCE(TK_BF16, TK_E5M6_SMALL_HIDDEN, bf16_4k),
    TK_INSTANCE(TK_BF16, TK_E5M6_FAST_HIDDEN, bf16_8k),
    TK_INSTANCE(TK_F32, TK_E5M6_SMALL_HIDDEN, f32_4k),
    TK_INSTANCE(TK_F32, TK_E5M6_FAST_HIDDEN, f32_8k),
    TK_INSTANCE(TK_BF16, 0, bf16_any),
    TK_INSTANCE(TK_F32, 0, f32_any),
#undef TK_INSTANCE
};

#define TK_COUNT(array) ((int)(sizeof(array) / sizeof((array)[0])))

/* H: a positive multiple of 8 the kernels can hold in registers. */
static tk_status tk__check_e5m6_hidden(const char *function, const char *argument,
                                       int64_t hidden)
{
    if (hidden <= 0 || hidden % 8 != 0)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: %s: the hidden size is %lld, expected a positive "
                        "multiple of 8",
                        function, argument, (long long)hidden);
    if (hidden > TK_E5M6_MAX_HIDDEN)
        return tk__fail(TK_ERROR_UNSUPPORTED,
                        "%s: %s: the hidden size is %lld; the library ships "
                        "E5M6 casts for up to %d columns",
                        function, argument, (long long)hidden, TK_E5M6_MAX_HIDDEN);
    return TK_SUCCESS;
}

/* The u32 words (rows, cols) of a contiguous u8 (rows, 4 * cols) tensor. */
static tk_tensor tk__word_view(const tk_tensor *bytes, int64_t rows, int64_t cols)
{
    tk_tensor view = {.data = bytes->data, .dtype = TK_U32, .rank = 2,
                      .shape = {rows, cols}, .strides = {cols, 1}};
    return view;
}

tk_status tk_per_token_cast_e5m6(const tk_tensor *x, bool round_sf, tk_sf_layout sf_layout,
                                 const tk_tensor *out, const tk_tensor *out_sf,
                                 tk_stream stream)
{
    static const char function[] = "tk_per_token_cast_e5m6";
    static const tk_dtype inputs[] = {TK_F32, TK_BF16};
    static const tk_dtype output[] = {TK_U8};
    tk__set_last_instance(NULL);
    tk_status status;
    if ((status = tk__check_tensor(function, "x", x, 2)) ||
        (status = tk__check_tensor(function, "out", out, 2)) ||
        (status = tk__check_tensor(function, "out_sf", out_sf, 2)) ||
        (status = tk__check_dtype(function, "x", x, inputs, 2)))
        return status;
    if ((status = tk__check_sf_layout(function, sf_layout, round_sf)))
        return status;
    int64_t tokens = x->shape[0], hidden = x->shape[1];
    if ((status = tk__check_e5m6_hidden(function, "x", hidden)))
        return status;
    if (x->strides[1] != 1)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: x: strides[1] is %lld, expected 1 (rows must be "
                        "contiguous)",
                        function, (long long)x->strides[1]);
    if (tokens > 1 && x->strides[0] < hidden)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: x: strides[0] is %lld, less than shape[1] = "
                        "%lld: rows overlap",
                        function, (long long)x->strides[0], (long long)hidden);
    if ((status = tk__check_dtype(function, "out", out, output, 1)) ||
        (status = tk__check_dim(function, "out", out, 0, tokens, "x's shape[0]")) ||
        (status = tk__check_dim(function, "out", out, 1, hidden / 2 * 3,
                                "3 * H / 2 bytes: 12 per 8 values")) ||
        (status = tk__check_contiguous(function, "out", out)))
        return status;

    tk_tensor expected;
    if (!tk__sf_layout(tokens, hidden, 1, hidden, sf_layout, &expected, NULL))
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: x: too large for a scale-factor tensor", function);
    if (out_sf->dtype != expected.dtype)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT, "%s: out_sf: dtype is %s, expected %s for %s",
                        function, tk__dtype_name(out_sf->dtype),
                        tk__dtype_name(expected.dtype), tk__sf_layout_name(sf_layout));
    if ((status = tk__check_dim(function, "out_sf", out_sf, 0, tokens, "x's shape[0]")) ||
        (status = tk__check_dim(function, "out_sf", out_sf, 1, 1, "one scale per token")))
        return status;
    if (tokens > 1 && out_sf->strides[0] != 1)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: out_sf: strides[0] is %lld, expected 1 for %s (see "
                        "tk_sf_desc)",
                        function, (long long)out_sf->strides[0],
                        tk__sf_layout_name(sf_layout));
    if ((status = tk__check_storage(function, "x", x)) ||
        (status = tk__check_storage(function, "out", out)) ||
        (status = tk__check_storage(function, "out_sf", out_sf)))
        return status;
    if (tokens == 0)
        return TK_SUCCESS;

    /* A single row is never stepped over: give it the fast stride. */
    tk_tensor input = *x;
    if (tokens == 1)
        input.strides[0] = hidden;
    int64_t vector = 16 / (int64_t)tk_dtype_size(x->dtype);
    bool fast = hidden % 32 == 0 && input.strides[0] % vector == 0 &&
                hidden <= TK_E5M6_FAST_HIDDEN;
    int max_hidden = !fast ? 0
                     : hidden <= TK_E5M6_SMALL_HIDDEN ? TK_E5M6_SMALL_HIDDEN
                                                      : TK_E5M6_FAST_HIDDEN;
    tk_tensor words = tk__word_view(out, tokens, hidden / 8 * 3);
    tk_tensor scales = {.data = out_sf->data, .dtype = TK_U32, .rank = 1,
                        .shape = {tokens}, .strides = {1}};
    int32_t mode = sf_layout == TK_SF_PACKED_UE8M0 ? TK_E5M6_SF_UE8M0
                   : round_sf                     ? TK_E5M6_SF_ROUND
                                                  : TK_E5M6_SF_F32;
    for (int i = 0; i < TK_COUNT(tk__e5m6_cast_instances); i++) {
        if (tk__e5m6_cast_instances[i].in != x->dtype ||
            tk__e5m6_cast_instances[i].max_hidden != max_hidden)
            continue;
        tk__set_last_instance(tk__e5m6_cast_instances[i].name);
        return tk__e5m6_cast_instances[i].launcher(&input, &words, &scales, mode, stream);
    }
    return tk__fail(TK_ERROR_UNSUPPORTED, "%s: no instance for %s input", function,
                    tk__dtype_name(x->dtype));
}

tk_status tk_cast_back_e5m6(const tk_tensor *x, const tk_tensor *sf, const tk_tensor *out,
                            tk_stream stream)
{
    static const char function[] = "tk_cast_back_e5m6";
    static const tk_dtype inputs[] = {TK_U8};
    static const tk_dtype outputs[] = {TK_BF16, TK_F32};
    static const tk_dtype scale_types[] = {TK_F32, TK_I32};
    tk__set_last_instance(NULL);
    tk_status status;
    if ((status = tk__check_tensor(function, "x", x, 2)) ||
        (status = tk__check_tensor(function, "sf", sf, 2)) ||
        (status = tk__check_tensor(function, "out", out, 2)) ||
        (status = tk__check_dtype(function, "x", x, inputs, 1)) ||
        (status = tk__check_dtype(function, "sf", sf, scale_types, 2)) ||
        (status = tk__check_dtype(function, "out", out, outputs, 2)))
        return status;
    int64_t tokens = out->shape[0], hidden = out->shape[1];
    if ((status = tk__check_e5m6_hidden(function, "out", hidden)) ||
        (status = tk__check_dim(function, "x", x, 0, tokens, "out's shape[0]")) ||
        (status = tk__check_dim(function, "x", x, 1, hidden / 2 * 3,
                                "3 * H / 2 bytes for out's H")) ||
        (status = tk__check_contiguous(function, "x", x)) ||
        (status = tk__check_contiguous(function, "out", out)) ||
        (status = tk__check_dim(function, "sf", sf, 0, tokens, "out's shape[0]")) ||
        (status = tk__check_dim(function, "sf", sf, 1, 1, "one scale per token")))
        return status;
    bool packed = sf->dtype == TK_I32;
    /* TileKernels reads an int32 SF as packed UE8M0, which is column-major */
    if (packed && tokens > 1 && sf->strides[0] != 1)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: sf: strides[0] is %lld, expected 1 (an i32 SF is "
                        "packed UE8M0, which is column-major)",
                        function, (long long)sf->strides[0]);
    if ((status = tk__check_storage(function, "x", x)) ||
        (status = tk__check_storage(function, "sf", sf)) ||
        (status = tk__check_storage(function, "out", out)))
        return status;
    if (tokens == 0)
        return TK_SUCCESS;
    tk_tensor words = tk__word_view(x, tokens, hidden / 8 * 3);
    tk_tensor scales = {.data = sf->data, .dtype = TK_U32, .rank = 1, .shape = {tokens},
                        .strides = {tokens > 1 ? sf->strides[0] : 1}};
    if (out->dtype == TK_BF16) {
        tk__set_last_instance("cast_back_e5m6__bf16");
        return tkl_cast_back_e5m6__bf16(&words, &scales, out, packed, stream);
    }
    tk__set_last_instance("cast_back_e5m6__f32");
    return tkl_cast_back_e5m6__f32(&words, &scales, out, packed, stream);
}
