/*
 * tensor.c -- tensor descriptors: construction, scale-factor layouts, and
 * the checks every public function shares.
 *
 * The api_*.c files validate TileKernels-level arguments with these
 * helpers before anything touches the driver, so bad input is reported as
 * TK_ERROR_INVALID_ARGUMENT with a message naming the function, the
 * argument and the offending value, on any machine, GPU or not.  The
 * generated launchers check again at the kernel level; they are the safety
 * net, these checks are the messages users should see.
 */
#include <stdint.h>
#include <stdio.h>

#include "tk_internal.h"

/* Kernel index arithmetic is 32-bit (VAR_SYMBOLs are i32 in the IR). */
#define TK_INDEX_MAX INT32_MAX
/* The kernels' widest global access is 16 bytes (LDG.E.128). */
#define TK_DATA_ALIGNMENT 16

tk_tensor tk_tensor_contiguous(void *data, tk_dtype dtype, int rank,
                               const int64_t *shape)
{
    tk_tensor tensor = {0};
    tensor.data = data;
    tensor.dtype = dtype;
    /* A descriptor every function rejects ("rank is -1") rather than a
     * crash or a half-filled one. */
    if (rank < 0 || rank > TK_MAX_RANK || (rank > 0 && shape == NULL)) {
        tensor.rank = -1;
        return tensor;
    }
    tensor.rank = rank;
    int64_t stride = 1;
    for (int d = rank - 1; d >= 0; d--) {
        tensor.shape[d] = shape[d];
        tensor.strides[d] = stride;
        /* Saturate instead of wrapping: tk__check_storage then reports the
         * tensor as too large instead of seeing small bogus strides. */
        int64_t extent = shape[d] > 1 ? shape[d] : 1;
        if (__builtin_mul_overflow(stride, extent, &stride))
            stride = INT64_MAX;
    }
    return tensor;
}

bool tk__tensor_empty(const tk_tensor *tensor)
{
    for (int d = 0; d < tensor->rank; d++)
        if (tensor->shape[d] == 0)
            return true;
    return false;
}

tk_status tk__check_tensor(const char *function, const char *argument,
                           const tk_tensor *tensor, int rank)
{
    if (tensor == NULL)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT, "%s: %s is NULL", function,
                        argument);
    if (tensor->rank != rank)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: %s: rank is %d, expected %d", function, argument,
                        tensor->rank, rank);
    for (int d = 0; d < rank; d++) {
        if (tensor->shape[d] < 0)
            return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                            "%s: %s: shape[%d] is %lld, expected >= 0",
                            function, argument, d,
                            (long long)tensor->shape[d]);
        if (tensor->strides[d] < 0)
            return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                            "%s: %s: strides[%d] is %lld; negative strides "
                            "are not supported",
                            function, argument, d,
                            (long long)tensor->strides[d]);
    }
    return TK_SUCCESS;
}

tk_status tk__check_dtype(const char *function, const char *argument,
                          const tk_tensor *tensor, const tk_dtype *allowed,
                          int count)
{
    for (int i = 0; i < count; i++)
        if (tensor->dtype == allowed[i])
            return TK_SUCCESS;
    /* "expected f32, bf16 or e4m3" */
    char expected[160] = "";
    size_t used = 0;
    for (int i = 0; i < count && used < sizeof expected; i++) {
        const char *separator = i == 0 ? "" : i == count - 1 ? " or " : ", ";
        used += (size_t)snprintf(expected + used, sizeof expected - used,
                                 "%s%s", separator,
                                 tk__dtype_name(allowed[i]));
    }
    return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                    "%s: %s: dtype is %s, expected %s", function, argument,
                    tk__dtype_name(tensor->dtype), expected);
}

tk_status tk__check_dim(const char *function, const char *argument,
                        const tk_tensor *tensor, int dim, int64_t expected,
                        const char *meaning)
{
    if (tensor->shape[dim] == expected)
        return TK_SUCCESS;
    return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                    "%s: %s: shape[%d] is %lld, expected %lld (%s)", function,
                    argument, dim, (long long)tensor->shape[dim],
                    (long long)expected, meaning);
}

tk_status tk__check_contiguous(const char *function, const char *argument,
                               const tk_tensor *tensor)
{
    if (tk__tensor_empty(tensor))
        return TK_SUCCESS; /* no element to be out of place */
    int64_t expected = 1;
    for (int d = tensor->rank - 1; d >= 0; d--) {
        /* A size-1 dimension is never stepped along, so its stride is
         * irrelevant (PyTorch gives such strides freely). */
        if (tensor->shape[d] != 1 && tensor->strides[d] != expected)
            return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                            "%s: %s: not contiguous: strides[%d] is %lld, "
                            "expected %lld",
                            function, argument, d,
                            (long long)tensor->strides[d],
                            (long long)expected);
        if (__builtin_mul_overflow(expected, tensor->shape[d], &expected))
            return TK_SUCCESS; /* tk__check_storage reports the size */
    }
    return TK_SUCCESS;
}

tk_status tk__check_storage(const char *function, const char *argument,
                            const tk_tensor *tensor)
{
    if (tk__tensor_empty(tensor))
        return TK_SUCCESS; /* nothing will be read or written */
    if (tensor->data == NULL)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT, "%s: %s: data is NULL",
                        function, argument);
    if ((uintptr_t)tensor->data % TK_DATA_ALIGNMENT != 0)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: %s: data %p is not %d-byte aligned", function,
                        argument, tensor->data, TK_DATA_ALIGNMENT);
    int64_t largest = 0;
    for (int d = 0; d < tensor->rank; d++) {
        if (tensor->shape[d] > TK_INDEX_MAX || tensor->strides[d] > TK_INDEX_MAX)
            return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                            "%s: %s: too large: shape[%d] is %lld, "
                            "strides[%d] is %lld (the kernels index with "
                            "32-bit integers)",
                            function, argument, d,
                            (long long)tensor->shape[d], d,
                            (long long)tensor->strides[d]);
        /* Both factors are below 2^31, so the product cannot overflow;
         * the sum of up to six of them cannot either. */
        largest += (tensor->shape[d] - 1) * tensor->strides[d];
    }
    if (largest > TK_INDEX_MAX)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: %s: too large: the largest element offset is "
                        "%lld, over 2^31-1 (the kernels index with 32-bit "
                        "integers)",
                        function, argument, (long long)largest);
    return TK_SUCCESS;
}

tk_status tk__check_rows(const char *function, const char *argument,
                         const tk_tensor *x)
{
    if (x->shape[1] > 1 && x->strides[1] != 1)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: %s: strides[1] is %lld, expected 1 (rows must be "
                        "contiguous)",
                        function, argument, (long long)x->strides[1]);
    if (x->shape[0] > 1 && x->strides[0] < x->shape[1])
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: %s: strides[0] is %lld, less than shape[1] = "
                        "%lld: rows overlap",
                        function, argument, (long long)x->strides[0],
                        (long long)x->shape[1]);
    return TK_SUCCESS;
}

/* ---- scale-factor layouts (tilekernels-spec.md section 3.5) ---------- */

bool tk__sf_layout(int64_t rows, int64_t cols, int64_t block_m,
                   int64_t block_k, tk_sf_layout layout, tk_tensor *desc,
                   size_t *bytes)
{
    if (rows < 0 || cols < 0 || block_m < 1 || block_k < 1 ||
        (layout != TK_SF_ROW_MAJOR && layout != TK_SF_COL_MAJOR &&
         layout != TK_SF_PACKED_UE8M0))
        return false;
    int64_t blocks_m = rows / block_m + (rows % block_m != 0);
    int64_t blocks_k = cols / block_k + (cols % block_k != 0);
    /* TMA needs 16-byte aligned rows: the column-major layouts pad each
     * column of nbm 4-byte entries to a multiple of 4 entries. */
    int64_t padded_m;
    if (__builtin_add_overflow(blocks_m, (4 - blocks_m % 4) % 4, &padded_m))
        return false;

    tk_tensor result = {0};
    result.rank = 2;
    result.shape[0] = blocks_m;
    int64_t entries;
    bool overflow;
    switch (layout) {
    case TK_SF_ROW_MAJOR:
        result.dtype = TK_F32;
        result.shape[1] = blocks_k;
        result.strides[0] = blocks_k;
        result.strides[1] = 1;
        overflow = __builtin_mul_overflow(blocks_m, blocks_k, &entries);
        break;
    case TK_SF_COL_MAJOR:
        result.dtype = TK_F32;
        result.shape[1] = blocks_k;
        result.strides[0] = 1;
        result.strides[1] = padded_m;
        overflow = __builtin_mul_overflow(blocks_k, padded_m, &entries);
        break;
    default: /* TK_SF_PACKED_UE8M0: four exponent bytes per int32 */
        result.dtype = TK_I32;
        result.shape[1] = blocks_k / 4 + (blocks_k % 4 != 0);
        result.strides[0] = 1;
        result.strides[1] = padded_m;
        overflow = __builtin_mul_overflow(result.shape[1], padded_m, &entries);
        break;
    }
    int64_t size;
    if (overflow || __builtin_mul_overflow(entries, (int64_t)4, &size) ||
        (uint64_t)size > SIZE_MAX)
        return false;
    if (desc != NULL)
        *desc = result;
    if (bytes != NULL)
        *bytes = (size_t)size;
    return true;
}

const char *tk__sf_layout_name(tk_sf_layout layout)
{
    switch (layout) {
    case TK_SF_ROW_MAJOR: return "TK_SF_ROW_MAJOR";
    case TK_SF_COL_MAJOR: return "TK_SF_COL_MAJOR";
    case TK_SF_PACKED_UE8M0: return "TK_SF_PACKED_UE8M0";
    }
    return "<invalid layout>";
}

tk_status tk__check_sf_layout(const char *function, tk_sf_layout layout,
                              bool round_sf)
{
    if (layout != TK_SF_ROW_MAJOR && layout != TK_SF_COL_MAJOR &&
        layout != TK_SF_PACKED_UE8M0)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: sf_layout is %d, expected TK_SF_ROW_MAJOR, "
                        "TK_SF_COL_MAJOR or TK_SF_PACKED_UE8M0",
                        function, (int)layout);
    if (layout == TK_SF_PACKED_UE8M0 && !round_sf)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: sf_layout TK_SF_PACKED_UE8M0 requires round_sf "
                        "(UE8M0 holds powers of two only)",
                        function);
    return TK_SUCCESS;
}

tk_status tk__check_sf_desc(const char *function, const char *argument,
                            const tk_tensor *sf, const tk_tensor *expected,
                            tk_sf_layout layout, const char *rows_meaning,
                            const char *cols_meaning)
{
    const char *layout_name = tk__sf_layout_name(layout);
    if (sf->dtype != expected->dtype)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: %s: dtype is %s, expected %s for %s", function,
                        argument, tk__dtype_name(sf->dtype),
                        tk__dtype_name(expected->dtype), layout_name);
    tk_status status;
    if ((status = tk__check_dim(function, argument, sf, 0, expected->shape[0],
                                rows_meaning)) ||
        (status = tk__check_dim(function, argument, sf, 1, expected->shape[1],
                                cols_meaning)))
        return status;
    for (int d = 0; d < 2; d++)
        if (sf->shape[d] > 1 && sf->strides[d] != expected->strides[d])
            return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                            "%s: %s: strides[%d] is %lld, expected %lld "
                            "for %s (see tk_sf_desc)",
                            function, argument, d, (long long)sf->strides[d],
                            (long long)expected->strides[d], layout_name);
    return TK_SUCCESS;
}

tk_status tk__check_packed_sf(const char *function, const char *argument,
                              const tk_tensor *sf)
{
    if (sf->shape[0] > 1 && sf->strides[0] != 1)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: %s: strides[0] is %lld, expected 1 (an i32 SF is "
                        "packed UE8M0, which is column-major)",
                        function, argument, (long long)sf->strides[0]);
    return TK_SUCCESS;
}

tk_tensor tk__packed_byte_view(const tk_tensor *sf, int64_t word_stride)
{
    tk_tensor view = {.data = sf->data, .dtype = TK_U8, .rank = 3,
                      .shape = {sf->shape[0], sf->shape[1], 4},
                      .strides = {4, 4 * word_stride, 1}};
    return view;
}

tk_status tk_sf_desc(int64_t rows, int64_t cols, int block_m, int block_k,
                     tk_sf_layout layout, tk_tensor *desc, size_t *bytes)
{
    static const char function[] = "tk_sf_desc";
    if (desc == NULL)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT, "%s: desc is NULL",
                        function);
    if (rows < 0 || cols < 0)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: %s is %lld, expected >= 0", function,
                        rows < 0 ? "rows" : "cols",
                        (long long)(rows < 0 ? rows : cols));
    if (block_m < 1 || block_k < 1)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: %s is %d, expected >= 1", function,
                        block_m < 1 ? "block_m" : "block_k",
                        block_m < 1 ? block_m : block_k);
    if (layout != TK_SF_ROW_MAJOR && layout != TK_SF_COL_MAJOR &&
        layout != TK_SF_PACKED_UE8M0)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: layout is %d, expected TK_SF_ROW_MAJOR, "
                        "TK_SF_COL_MAJOR or TK_SF_PACKED_UE8M0",
                        function, (int)layout);
    if (!tk__sf_layout(rows, cols, block_m, block_k, layout, desc, bytes))
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: too large: a %lld x %lld matrix in %d x %d "
                        "blocks overflows the size computation",
                        function, (long long)rows, (long long)cols, block_m,
                        block_k);
    return TK_SUCCESS;
}
