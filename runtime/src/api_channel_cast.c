/*
 * api_channel_cast.c -- tk_per_channel_cast, tk_per_channel_cast_fused and
 * tk_per_channel_cast_and_transpose (tilekernels-spec.md sections 3.5,
 * 6.6, 6.7 and 6.8; kernels/quant_channel.tk).
 *
 * Each function validates the TileKernels-level arguments and picks one
 * instance:
 *
 *   per_channel_cast__plain__<in>[_gather][_round]   in = bf16, f32
 *   per_channel_cast__e4m3[_gather][_round]
 *   per_channel_cast_and_transpose__bm<32|128>[_round]
 *
 * The plain kernel (tile in registers) takes float input, the general one
 * quantised e4m3 input with its scales.
 *
 * tk_per_channel_cast is tk_per_channel_cast_fused without a gather or
 * input scales, as in TileKernels.  Both kernels of the fused cast always
 * take the gather tensor; the instances that do not read it get an empty
 * descriptor (no data), which the launchers accept.
 * Scales are f32 (ceil(rows / num_per_tokens), H), contiguous: the
 * TK_SF_ROW_MAJOR layout of (num_per_tokens, 1) blocks (tk_sf_desc).
 */
#include "tk_internal.h"
#include "tk_kernels.h"

/* Rows per scale of per_channel_cast(_fused) (TileKernels asserts 128). */
#define TK_CHANNEL_ROWS 128
/* Columns per input scale of quantised input (TileKernels asserts 128). */
#define TK_CHANNEL_INPUT_GROUP 128
/* H % 64: the kernels read 64-column chunks as TileKernels does. */
#define TK_CHANNEL_COLUMN_MULTIPLE 64
/* With a gather the output row count only has to be a multiple of 16
 * (TileKernels' assert); without one, of the 128-row block. */
#define TK_CHANNEL_GATHER_MULTIPLE 16

typedef tk_status (*tk__channel_launcher)(const tk_tensor *x,
                                          const tk_tensor *sf_in,
                                          const tk_tensor *pos,
                                          const tk_tensor *out,
                                          const tk_tensor *sf,
                                          tk_stream stream);
typedef tk_status (*tk__plain_channel_launcher)(const tk_tensor *x,
                                                const tk_tensor *pos,
                                                const tk_tensor *out,
                                                const tk_tensor *sf,
                                                tk_stream stream);
typedef tk_status (*tk__transpose_cast_launcher)(const tk_tensor *x,
                                                 const tk_tensor *out,
                                                 const tk_tensor *sf,
                                                 tk_stream stream);

/* Quantised (e4m3) input. */
static const struct {
    bool gather, round_sf;
    const char *name;
    tk__channel_launcher launcher;
} tk__channel_instances[] = {
#define TK_INSTANCE(gather, round, label) \
    {gather, round, "per_channel_cast__" #label, tkl_per_channel_cast__##label}
    TK_INSTANCE(false, false, e4m3),
    TK_INSTANCE(false, true, e4m3_round),
    TK_INSTANCE(true, false, e4m3_gather),
    TK_INSTANCE(true, true, e4m3_gather_round),
#undef TK_INSTANCE
};

/* Float input. */
static const struct {
    tk_dtype in;
    bool gather, round_sf;
    const char *name;
    tk__plain_channel_launcher launcher;
} tk__plain_channel_instances[] = {
#define TK_INSTANCE(IN, gather, round, label)                            \
    {IN, gather, round, "per_channel_cast__plain__" #label,              \
     tkl_per_channel_cast__plain__##label}
    TK_INSTANCE(TK_BF16, false, false, bf16),
    TK_INSTANCE(TK_BF16, false, true, bf16_round),
    TK_INSTANCE(TK_BF16, true, false, bf16_gather),
    TK_INSTANCE(TK_BF16, true, true, bf16_gather_round),
    TK_INSTANCE(TK_F32, false, false, f32),
    TK_INSTANCE(TK_F32, false, true, f32_round),
    TK_INSTANCE(TK_F32, true, false, f32_gather),
    TK_INSTANCE(TK_F32, true, true, f32_gather_round),
#undef TK_INSTANCE
};

static const struct {
    int num_per_tokens;
    bool round_sf;
    const char *name;
    tk__transpose_cast_launcher launcher;
} tk__transpose_cast_instances[] = {
#define TK_INSTANCE(bm, round, label)                                    \
    {bm, round, "per_channel_cast_and_transpose__" #label,               \
     tkl_per_channel_cast_and_transpose__##label}
    TK_INSTANCE(128, false, bm128),
    TK_INSTANCE(128, true, bm128_round),
    TK_INSTANCE(32, false, bm32),
    TK_INSTANCE(32, true, bm32_round),
#undef TK_INSTANCE
};

#define TK_COUNT(array) ((int)(sizeof(array) / sizeof((array)[0])))

/* x (T, H): rows of contiguous elements, H % 64 == 0, a row stride >= H
 * that keeps every row 16-byte aligned (the tile copy reads 16-byte
 * vectors; TileKernels itself requires a contiguous x). */
static tk_status tk__check_channel_input(const char *function,
                                         const tk_tensor *x)
{
    int64_t tokens = x->shape[0], hidden = x->shape[1];
    int64_t vector = 16 / (int64_t)tk_dtype_size(x->dtype);
    if (hidden % TK_CHANNEL_COLUMN_MULTIPLE != 0)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: x: shape[1] is %lld, expected a multiple of %d",
                        function, (long long)hidden,
                        TK_CHANNEL_COLUMN_MULTIPLE);
    tk_status status;
    if ((status = tk__check_rows(function, "x", x)))
        return status;
    if (tokens > 1 && x->strides[0] % vector != 0)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: x: strides[0] is %lld, expected a multiple of "
                        "%lld (16-byte aligned rows)",
                        function, (long long)x->strides[0], (long long)vector);
    return TK_SUCCESS;
}

/* out (rows, cols) e4m3 contiguous. */
static tk_status tk__check_channel_output(const char *function,
                                          const tk_tensor *out, int64_t rows,
                                          const char *rows_meaning,
                                          int64_t cols,
                                          const char *cols_meaning)
{
    static const tk_dtype output[] = {TK_E4M3};
    tk_status status;
    if ((status = tk__check_dtype(function, "out", out, output, 1)) ||
        (status = tk__check_dim(function, "out", out, 0, rows,
                                rows_meaning)) ||
        (status = tk__check_dim(function, "out", out, 1, cols,
                                cols_meaning)) ||
        (status = tk__check_contiguous(function, "out", out)))
        return status;
    return TK_SUCCESS;
}

/* out_sf: f32 (ceil(rows / num_per_tokens), H) contiguous, i.e.
 * tk_sf_desc(rows, H, num_per_tokens, 1, TK_SF_ROW_MAJOR). */
static tk_status tk__check_channel_sf(const char *function,
                                      const tk_tensor *out_sf, int64_t rows,
                                      int64_t hidden, int num_per_tokens)
{
    static const tk_dtype scales[] = {TK_F32};
    tk_tensor expected;
    if (!tk__sf_layout(rows, hidden, num_per_tokens, 1, TK_SF_ROW_MAJOR,
                       &expected, NULL))
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: x: too large for a scale-factor tensor",
                        function);
    tk_status status;
    if ((status = tk__check_dtype(function, "out_sf", out_sf, scales, 1)) ||
        (status = tk__check_dim(function, "out_sf", out_sf, 0,
                                expected.shape[0],
                                num_per_tokens == TK_CHANNEL_ROWS
                                    ? "ceil(rows / 128)"
                                    : "rows / num_per_tokens")) ||
        (status = tk__check_dim(function, "out_sf", out_sf, 1,
                                expected.shape[1], "x's shape[1]")) ||
        (status = tk__check_contiguous(function, "out_sf", out_sf)))
        return status;
    return TK_SUCCESS;
}

/* An empty descriptor for a kernel operand an instance never reads. */
static tk_tensor tk__unused_operand(tk_dtype dtype, int rank)
{
    tk_tensor unused = {.data = NULL, .dtype = dtype, .rank = rank};
    for (int d = 0; d < rank; d++)
        unused.strides[d] = 1; /* shape 0: nothing is ever addressed */
    return unused;
}

tk_status tk_per_channel_cast_fused(const tk_tensor *x, const tk_tensor *x_sf,
                                    int num_per_channels, int num_per_tokens,
                                    bool round_sf,
                                    const tk_tensor *pos_to_token,
                                    const tk_tensor *out,
                                    const tk_tensor *out_sf, tk_stream stream)
{
    static const char function[] = "tk_per_channel_cast_fused";
    static const tk_dtype inputs[] = {TK_F32, TK_BF16, TK_E4M3};
    static const tk_dtype scale_types[] = {TK_F32};
    static const tk_dtype positions[] = {TK_I32};
    tk__set_last_instance(NULL);
    tk_status status;
    if ((status = tk__check_tensor(function, "x", x, 2)) ||
        (status = tk__check_tensor(function, "out", out, 2)) ||
        (status = tk__check_tensor(function, "out_sf", out_sf, 2)) ||
        (status = tk__check_dtype(function, "x", x, inputs, 3)))
        return status;
    if (num_per_tokens != TK_CHANNEL_ROWS)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: num_per_tokens is %d, expected %d", function,
                        num_per_tokens, TK_CHANNEL_ROWS);
    /* quantised input: e4m3 data with one f32 scale per row per 128
     * columns; float input: no scales (num_per_channels None = 0) */
    bool quantized = x->dtype == TK_E4M3;
    if (quantized && x_sf == NULL)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: x_sf is NULL, but x is e4m3 (quantised input "
                        "needs its scales)",
                        function);
    if (!quantized && x_sf != NULL)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: x_sf given, but x is %s (only e4m3 input has "
                        "scales)",
                        function, tk__dtype_name(x->dtype));
    if (quantized && num_per_channels != TK_CHANNEL_INPUT_GROUP)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: num_per_channels is %d, expected %d for e4m3 "
                        "input",
                        function, num_per_channels, TK_CHANNEL_INPUT_GROUP);
    if (!quantized && num_per_channels != 0)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: num_per_channels is %d, expected 0 (none) for "
                        "%s input",
                        function, num_per_channels,
                        tk__dtype_name(x->dtype));
    if ((status = tk__check_channel_input(function, x)))
        return status;
    int64_t tokens = x->shape[0], hidden = x->shape[1];

    if (quantized) {
        if ((status = tk__check_tensor(function, "x_sf", x_sf, 2)) ||
            (status = tk__check_dtype(function, "x_sf", x_sf, scale_types,
                                      1)) ||
            (status = tk__check_dim(function, "x_sf", x_sf, 0, tokens,
                                    "x's shape[0]")) ||
            (status = tk__check_dim(
                 function, "x_sf", x_sf, 1,
                 (hidden + TK_CHANNEL_INPUT_GROUP - 1) / TK_CHANNEL_INPUT_GROUP,
                 "ceil(x's shape[1] / 128)")))
            return status;
    }

    int64_t rows = tokens; /* output rows */
    if (pos_to_token != NULL) {
        if ((status = tk__check_tensor(function, "pos_to_token", pos_to_token,
                                       1)) ||
            (status = tk__check_dtype(function, "pos_to_token", pos_to_token,
                                      positions, 1)) ||
            (status = tk__check_contiguous(function, "pos_to_token",
                                           pos_to_token)))
            return status;
        rows = pos_to_token->shape[0];
        if (rows % TK_CHANNEL_GATHER_MULTIPLE != 0)
            return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                            "%s: pos_to_token: shape[0] is %lld, expected a "
                            "multiple of %d",
                            function, (long long)rows,
                            TK_CHANNEL_GATHER_MULTIPLE);
    } else if (tokens % TK_CHANNEL_ROWS != 0) {
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: x: shape[0] is %lld, expected a multiple of %d "
                        "(without pos_to_token)",
                        function, (long long)tokens, TK_CHANNEL_ROWS);
    }
    if ((status = tk__check_channel_output(
             function, out, rows,
             pos_to_token ? "pos_to_token's shape[0]" : "x's shape[0]", hidden,
             "x's shape[1]")) ||
        (status = tk__check_channel_sf(function, out_sf, rows, hidden,
                                       TK_CHANNEL_ROWS)) ||
        (status = tk__check_storage(function, "x", x)) ||
        (quantized && (status = tk__check_storage(function, "x_sf", x_sf))) ||
        (pos_to_token &&
         (status = tk__check_storage(function, "pos_to_token", pos_to_token))) ||
        (status = tk__check_storage(function, "out", out)) ||
        (status = tk__check_storage(function, "out_sf", out_sf)))
        return status;
    if (rows == 0 || hidden == 0)
        return TK_SUCCESS;

    /* A single row is never stepped over; give it the stride the
     * kernel's constraints (sx >= H, sx % V == 0) accept. */
    tk_tensor input = *x;
    if (tokens <= 1)
        input.strides[0] = hidden;
    tk_tensor positions_in =
        pos_to_token ? *pos_to_token : tk__unused_operand(TK_I32, 1);
    bool gather = pos_to_token != NULL;
    for (int i = 0; !quantized && i < TK_COUNT(tk__plain_channel_instances);
         i++) {
        if (tk__plain_channel_instances[i].in != x->dtype ||
            tk__plain_channel_instances[i].gather != gather ||
            tk__plain_channel_instances[i].round_sf != round_sf)
            continue;
        tk__set_last_instance(tk__plain_channel_instances[i].name);
        return tk__plain_channel_instances[i].launcher(&input, &positions_in,
                                                       out, out_sf, stream);
    }
    for (int i = 0; quantized && i < TK_COUNT(tk__channel_instances); i++) {
        if (tk__channel_instances[i].gather != gather ||
            tk__channel_instances[i].round_sf != round_sf)
            continue;
        tk__set_last_instance(tk__channel_instances[i].name);
        return tk__channel_instances[i].launcher(&input, x_sf, &positions_in,
                                                 out, out_sf, stream);
    }
    /* Every combination admitted above has an instance. */
    return tk__fail(TK_ERROR_UNSUPPORTED, "%s: no instance for %s input",
                    function, tk__dtype_name(x->dtype));
}

tk_status tk_per_channel_cast(const tk_tensor *x, int num_per_tokens,
                              bool round_sf, const tk_tensor *out,
                              const tk_tensor *out_sf, tk_stream stream)
{
    static const char function[] = "tk_per_channel_cast";
    static const tk_dtype inputs[] = {TK_F32, TK_BF16};
    tk__set_last_instance(NULL);
    tk_status status;
    /* per_channel_cast is the plain case of the fused cast; its own
     * checks first, so that the messages name this function */
    if ((status = tk__check_tensor(function, "x", x, 2)) ||
        (status = tk__check_dtype(function, "x", x, inputs, 2)))
        return status;
    if (num_per_tokens != TK_CHANNEL_ROWS)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: num_per_tokens is %d, expected %d", function,
                        num_per_tokens, TK_CHANNEL_ROWS);
    if (x->shape[0] % TK_CHANNEL_ROWS != 0)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: x: shape[0] is %lld, expected a multiple of %d",
                        function, (long long)x->shape[0], TK_CHANNEL_ROWS);
    return tk_per_channel_cast_fused(x, NULL, 0, num_per_tokens, round_sf,
                                     NULL, out, out_sf, stream);
}

tk_status tk_per_channel_cast_and_transpose(const tk_tensor *x,
                                            int num_per_tokens, bool round_sf,
                                            const tk_tensor *out,
                                            const tk_tensor *out_sf,
                                            tk_stream stream)
{
    static const char function[] = "tk_per_channel_cast_and_transpose";
    static const tk_dtype inputs[] = {TK_BF16};
    tk__set_last_instance(NULL);
    tk_status status;
    if ((status = tk__check_tensor(function, "x", x, 2)) ||
        (status = tk__check_tensor(function, "out", out, 2)) ||
        (status = tk__check_tensor(function, "out_sf", out_sf, 2)) ||
        (status = tk__check_dtype(function, "x", x, inputs, 1)))
        return status;
    if (num_per_tokens != 32 && num_per_tokens != 128)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: num_per_tokens is %d, expected 32 or 128",
                        function, num_per_tokens);
    if ((status = tk__check_channel_input(function, x)))
        return status;
    int64_t tokens = x->shape[0], hidden = x->shape[1];
    if (tokens % TK_CHANNEL_ROWS != 0)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: x: shape[0] is %lld, expected a multiple of %d",
                        function, (long long)tokens, TK_CHANNEL_ROWS);
    if ((status = tk__check_channel_output(function, out, hidden,
                                           "x's shape[1]", tokens,
                                           "x's shape[0]")) ||
        (status = tk__check_channel_sf(function, out_sf, tokens, hidden,
                                       num_per_tokens)) ||
        (status = tk__check_storage(function, "x", x)) ||
        (status = tk__check_storage(function, "out", out)) ||
        (status = tk__check_storage(function, "out_sf", out_sf)))
        return status;
    if (tokens == 0 || hidden == 0)
        return TK_SUCCESS;

    tk_tensor input = *x;
    if (tokens <= 1)
        input.strides[0] = hidden;
    for (int i = 0; i < TK_COUNT(tk__transpose_cast_instances); i++) {
        if (tk__transpose_cast_instances[i].num_per_tokens != num_per_tokens ||
            tk__transpose_cast_instances[i].round_sf != round_sf)
            continue;
        tk__set_last_instance(tk__transpose_cast_instances[i].name);
        return tk__transpose_cast_instances[i].launcher(&input, out, out_sf,
                                                        stream);
    }
    return tk__fail(TK_ERROR_UNSUPPORTED,
                    "%s: no instance for num_per_tokens %d", function,
                    num_per_tokens);
}
