/*
 * api_transpose.c -- tk_batched_transpose and tk_transpose
 * (tilekernels-spec.md section 7, kernels/transpose.tk).
 *
 * Transposition only moves bits, so every 1-, 2- and 4-byte dtype is served
 * by the kernel instance of that element size (f32, bf16, e4m3), with the
 * descriptors relabelled.  Each size has a fast instance, which reads rows
 * with 16-byte vectors and so needs a row stride that is a multiple of the
 * vector, and an `_any` instance for the other row strides TileKernels
 * accepts (multiples of 4 elements).
 */
#include "tk_internal.h"
#include "tk_kernels.h"

typedef tk_status (*tk__transpose_launcher)(const tk_tensor *x,
                                            const tk_tensor *out,
                                            tk_stream stream);

/* One row per element size; `align` is the instance's ALIGN parameter:
 * the row stride, in elements, that keeps every row 16-byte aligned. */
static const struct {
    size_t element_size;
    tk_dtype dtype;
    int64_t align;
    const char *name, *any_name;
    tk__transpose_launcher launcher, any_launcher;
} tk__transpose_instances[] = {
    {4, TK_F32, 4, "batched_transpose__f32", "batched_transpose__f32_any",
     tkl_batched_transpose__f32, tkl_batched_transpose__f32_any},
    {2, TK_BF16, 8, "batched_transpose__bf16", "batched_transpose__bf16_any",
     tkl_batched_transpose__bf16, tkl_batched_transpose__bf16_any},
    {1, TK_E4M3, 16, "batched_transpose__e4m3", "batched_transpose__e4m3_any",
     tkl_batched_transpose__e4m3, tkl_batched_transpose__e4m3_any},
};

/* TileKernels' requirement on the row stride (the original reads 4x4
 * patches with 4-element vectors). */
#define TK_TRANSPOSE_STRIDE_MULTIPLE 4
#define TK_TRANSPOSE_SHAPE_MULTIPLE 64

/* Validates x (.., X, Y) and out (.., Y, X) for rank 3 (batched) or 2. */
static tk_status tk__check_transpose(const char *function, const tk_tensor *x,
                                     const tk_tensor *out, int rank)
{
    tk_status status;
    if ((status = tk__check_tensor(function, "x", x, rank)) ||
        (status = tk__check_tensor(function, "out", out, rank)))
        return status;
    size_t element_size = tk_dtype_size(x->dtype);
    if (x->dtype == TK_E2M1 ||
        (element_size != 1 && element_size != 2 && element_size != 4))
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: x: dtype is %s, expected a 1-, 2- or 4-byte "
                        "dtype (packed e2m1 data is transposed as i8)",
                        function, tk__dtype_name(x->dtype));
    if (out->dtype != x->dtype)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: out: dtype is %s, expected %s (x's dtype)",
                        function, tk__dtype_name(out->dtype),
                        tk__dtype_name(x->dtype));

    int row = rank - 2, column = rank - 1;
    int64_t rows = x->shape[row], columns = x->shape[column];
    for (int d = row; d <= column; d++)
        if (x->shape[d] % TK_TRANSPOSE_SHAPE_MULTIPLE != 0)
            return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                            "%s: x: shape[%d] is %lld, expected a multiple "
                            "of %d",
                            function, d, (long long)x->shape[d],
                            TK_TRANSPOSE_SHAPE_MULTIPLE);
    if (columns > 1 && x->strides[column] != 1)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: x: strides[%d] is %lld, expected 1 (rows must "
                        "be contiguous)",
                        function, column, (long long)x->strides[column]);
    int64_t row_stride = x->strides[row];
    if (rows > 1 && row_stride % TK_TRANSPOSE_STRIDE_MULTIPLE != 0)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: x: strides[%d] is %lld, expected a multiple of "
                        "%d",
                        function, row, (long long)row_stride,
                        TK_TRANSPOSE_STRIDE_MULTIPLE);
    if (rows > 1 && row_stride < columns)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: x: strides[%d] is %lld, less than shape[%d] = "
                        "%lld: rows overlap",
                        function, row, (long long)row_stride, column,
                        (long long)columns);
    /* The kernel derives the batch stride from the row stride
     * (spec 7.1, "Pitfall"), so it must be exactly that. */
    if (rank == 3 && x->shape[0] > 1 && rows > 0 &&
        x->strides[0] != rows * row_stride)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: x: strides[0] is %lld, expected shape[1] * "
                        "strides[1] = %lld (batches must be dense over the "
                        "row stride)",
                        function, (long long)x->strides[0],
                        (long long)(rows * row_stride));

    if (rank == 3 &&
        (status = tk__check_dim(function, "out", out, 0, x->shape[0],
                                "x's shape[0]")))
        return status;
    if ((status = tk__check_dim(function, "out", out, row, columns,
                                rank == 3 ? "x's shape[2]" : "x's shape[1]")) ||
        (status = tk__check_dim(function, "out", out, column, rows,
                                rank == 3 ? "x's shape[1]" : "x's shape[0]")) ||
        (status = tk__check_contiguous(function, "out", out)) ||
        (status = tk__check_storage(function, "x", x)) ||
        (status = tk__check_storage(function, "out", out)))
        return status;
    return TK_SUCCESS;
}

/* Picks the instance for validated 3-D descriptors and launches it. */
static tk_status tk__launch_transpose(const tk_tensor *x, const tk_tensor *out,
                                      tk_stream stream)
{
    if (tk__tensor_empty(x))
        return TK_SUCCESS;
    size_t element_size = tk_dtype_size(x->dtype);
    for (size_t i = 0; i < sizeof tk__transpose_instances /
                               sizeof tk__transpose_instances[0]; i++) {
        if (tk__transpose_instances[i].element_size != element_size)
            continue;
        tk_tensor input = *x, output = *out;
        input.dtype = output.dtype = tk__transpose_instances[i].dtype;
        /* A single batch is never stepped over; give it the stride the
         * kernel's constraint sb == X * sx expects. */
        if (input.shape[0] == 1)
            input.strides[0] = input.shape[1] * input.strides[1];
        bool fast = input.strides[1] % tk__transpose_instances[i].align == 0;
        tk__set_last_instance(fast ? tk__transpose_instances[i].name
                                   : tk__transpose_instances[i].any_name);
        return (fast ? tk__transpose_instances[i].launcher
                     : tk__transpose_instances[i].any_launcher)(&input, &output,
                                                                stream);
    }
    /* tk__check_transpose admits only sizes 1, 2 and 4. */
    return tk__fail(TK_ERROR_UNSUPPORTED, "no transpose instance for %s",
                    tk__dtype_name(x->dtype));
}

tk_status tk_batched_transpose(const tk_tensor *x, const tk_tensor *out,
                               tk_stream stream)
{
    tk__set_last_instance(NULL);
    tk_status status = tk__check_transpose("tk_batched_transpose", x, out, 3);
    if (status != TK_SUCCESS)
        return status;
    return tk__launch_transpose(x, out, stream);
}

tk_status tk_transpose(const tk_tensor *x, const tk_tensor *out,
                       tk_stream stream)
{
    tk__set_last_instance(NULL);
    tk_status status = tk__check_transpose("tk_transpose", x, out, 2);
    if (status != TK_SUCCESS)
        return status;
    /* A batch of one: (X, Y) strides (sx, 1) -> (1, X, Y). */
    tk_tensor input = {.data = x->data, .dtype = x->dtype, .rank = 3,
                       .shape = {1, x->shape[0], x->shape[1]},
                       .strides = {x->shape[0] * x->strides[0], x->strides[0],
                                   x->strides[1]}};
    tk_tensor output = {.data = out->data, .dtype = out->dtype, .rank = 3,
                        .shape = {1, out->shape[0], out->shape[1]},
                        .strides = {out->shape[0] * out->shape[1], out->shape[1],
                                    1}};
    return tk__launch_transpose(&input, &output, stream);
}
