/*
 * test_runtime.c -- libtk's public API without (or with) a GPU.
 *
 * Every public function must reject bad descriptors and options with
 * TK_ERROR_INVALID_ARGUMENT (or TK_ERROR_UNSUPPORTED for valid TileKernels
 * options the library does not ship) and a message naming the argument,
 * before it touches the driver.  These tests therefore run anywhere: the
 * invalid calls use made-up, aligned device addresses that are never
 * dereferenced.
 *
 * Valid calls are checked through the instance they pick
 * (tk__last_instance) and their status: TK_ERROR_NO_DEVICE on a machine
 * without a GPU; on a GPU machine they really launch, on buffers
 * suballocated from one device allocation, and must succeed.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "tk.h"
#include "tk_internal.h"

/* ---- device memory (real on a GPU, made-up addresses otherwise) ------- */

#define DEVICE_POOL_BYTES (64u << 20)

static bool gpu_present;
static const tk__driver_api *driver;
static CUdeviceptr pool_base, pool_next;

static void setup(void)
{
    /* Per test process: Criterion forks one per test, and a CUDA context
     * must not cross a fork. */
    gpu_present = tk__driver(&driver) == TK_SUCCESS;
    if (gpu_present) {
        cr_assert_eq(driver->cuMemAlloc(&pool_base, DEVICE_POOL_BYTES),
                     CUDA_SUCCESS);
        pool_next = pool_base;
    } else {
        pool_next = 0x100000000ull; /* never dereferenced */
    }
}

static void *device_memory(size_t bytes)
{
    void *address = (void *)(uintptr_t)pool_next;
    pool_next += (bytes + 255) & ~(size_t)255;
    if (gpu_present)
        cr_assert(pool_next <= pool_base + DEVICE_POOL_BYTES,
                  "test device pool exhausted");
    return address;
}

/* A (rows, cols) matrix whose rows are row_stride elements apart. */
static tk_tensor matrix(tk_dtype dtype, int64_t rows, int64_t cols,
                        int64_t row_stride)
{
    tk_tensor t = {.dtype = dtype, .rank = 2, .shape = {rows, cols},
                   .strides = {row_stride, 1}};
    int64_t elements = rows > 0 ? (rows - 1) * row_stride + cols : 0;
    t.data = device_memory((size_t)elements * tk_dtype_size(dtype));
    return t;
}

/* (batch, rows, cols), batches dense over the row stride. */
static tk_tensor batch(tk_dtype dtype, int64_t batches, int64_t rows,
                       int64_t cols, int64_t row_stride)
{
    tk_tensor t = {.dtype = dtype, .rank = 3,
                   .shape = {batches, rows, cols},
                   .strides = {rows * row_stride, row_stride, 1}};
    t.data = device_memory((size_t)(batches * rows * row_stride) *
                           tk_dtype_size(dtype));
    return t;
}

/* An SF tensor in `layout`, allocated as tk_sf_desc says. */
static tk_tensor scales(int64_t rows, int64_t cols, int block_m, int block_k,
                        tk_sf_layout layout)
{
    tk_tensor t;
    size_t bytes;
    cr_assert_eq(tk_sf_desc(rows, cols, block_m, block_k, layout, &t, &bytes),
                 TK_SUCCESS, "%s", tk_last_error());
    t.data = device_memory(bytes);
    return t;
}

#define EXPECT_STATUS(call, expected, text)                                  \
    do {                                                                     \
        tk_status status_ = (call);                                          \
        cr_assert_eq(status_, (expected), "%s: got %s (%s), expected %s",    \
                     #call, tk_status_string(status_), tk_last_error(),      \
                     tk_status_string(expected));                            \
        cr_assert(strstr(tk_last_error(), (text)) != NULL,                   \
                  "%s: message '%s' lacks '%s'", #call, tk_last_error(),     \
                  (text));                                                   \
    } while (0)
#define EXPECT_INVALID(call, text) \
    EXPECT_STATUS(call, TK_ERROR_INVALID_ARGUMENT, text)
#define EXPECT_UNSUPPORTED(call, text) \
    EXPECT_STATUS(call, TK_ERROR_UNSUPPORTED, text)

/* A valid call: it picks `instance`; then it launches (GPU) or finds no
 * device. */
#define EXPECT_LAUNCH(call, instance)                                        \
    do {                                                                     \
        tk_status status_ = (call);                                          \
        cr_assert_str_eq(tk__last_instance(), (instance), "%s", #call);      \
        if (gpu_present) {                                                   \
            cr_assert_eq(status_, TK_SUCCESS, "%s: %s", #call,               \
                         tk_last_error());                                   \
            cr_assert_eq(driver->cuCtxSynchronize(), CUDA_SUCCESS);          \
        } else {                                                             \
            cr_assert_eq(status_, TK_ERROR_NO_DEVICE, "%s: got %s (%s)",     \
                         #call, tk_status_string(status_), tk_last_error()); \
        }                                                                    \
    } while (0)

/* A valid call that must do nothing (empty tensors). */
#define EXPECT_NOTHING(call)                                                 \
    do {                                                                     \
        cr_assert_eq((call), TK_SUCCESS, "%s: %s", #call, tk_last_error());  \
        cr_assert_str_eq(tk__last_instance(), "");                           \
    } while (0)

/* ---- errors, dtypes, descriptors -------------------------------------- */

Test(runtime, status_strings)
{
    static const tk_status all[] = {
        TK_SUCCESS, TK_ERROR_INVALID_ARGUMENT, TK_ERROR_UNSUPPORTED,
        TK_ERROR_NO_DEVICE, TK_ERROR_DRIVER, TK_ERROR_LAUNCH};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        cr_assert_str_neq(tk_status_string(all[i]), "unknown status");
        for (size_t j = 0; j < i; j++)
            cr_assert_str_neq(tk_status_string(all[i]),
                              tk_status_string(all[j]));
    }
    cr_assert_str_eq(tk_status_string((tk_status)42), "unknown status");
    cr_assert_str_eq(tk_status_string(TK_SUCCESS), "success");
}

Test(runtime, dtypes)
{
    cr_assert_eq(tk_dtype_size(TK_VOID), 0);
    cr_assert_eq(tk_dtype_size(TK_E4M3), 1);
    cr_assert_eq(tk_dtype_size(TK_E2M1), 1);
    cr_assert_eq(tk_dtype_size(TK_BF16), 2);
    cr_assert_eq(tk_dtype_size(TK_F32), 4);
    cr_assert_eq(tk_dtype_size(TK_I64), 8);
    cr_assert_eq(tk_dtype_size((tk_dtype)-1), 0);
    cr_assert_eq(tk_dtype_size((tk_dtype)99), 0);
    cr_assert_str_eq(tk__dtype_name(TK_BF16), "bf16");
    cr_assert_str_eq(tk__dtype_name(TK_UE8M0), "ue8m0");
    cr_assert_str_eq(tk__dtype_name((tk_dtype)99), "<invalid dtype>");
}

Test(runtime, tensor_contiguous)
{
    int64_t shape[3] = {2, 3, 5};
    tk_tensor t = tk_tensor_contiguous((void *)0x1000, TK_BF16, 3, shape);
    cr_assert_eq(t.rank, 3);
    cr_assert_eq(t.dtype, TK_BF16);
    cr_assert_eq(t.data, (void *)0x1000);
    cr_assert_eq(t.strides[0], 15);
    cr_assert_eq(t.strides[1], 5);
    cr_assert_eq(t.strides[2], 1);
    cr_assert_eq(tk_tensor_contiguous(NULL, TK_F32, 7, shape).rank, -1);
    cr_assert_eq(tk_tensor_contiguous(NULL, TK_F32, -1, shape).rank, -1);
    cr_assert_eq(tk_tensor_contiguous(NULL, TK_F32, 2, NULL).rank, -1);
    cr_assert_eq(tk_tensor_contiguous(NULL, TK_F32, 0, NULL).rank, 0);
    /* Sizes that overflow saturate and are then rejected as too large. */
    int64_t huge[3] = {INT64_MAX / 2, 4, 4};
    tk_tensor big = tk_tensor_contiguous((void *)0x1000, TK_F32, 3, huge);
    cr_assert_eq(big.strides[0], 16);
    int64_t huger[3] = {4, INT64_MAX / 2, 4};
    big = tk_tensor_contiguous((void *)0x1000, TK_F32, 3, huger);
    cr_assert_eq(big.strides[0], INT64_MAX);
}

Test(runtime, sf_desc_layouts)
{
    tk_tensor d;
    size_t bytes;
    /* 4001 tokens x 7168 hidden, (1, 128) blocks: nbm 4001, nbk 56. */
    cr_assert_eq(tk_sf_desc(4001, 7168, 1, 128, TK_SF_ROW_MAJOR, &d, &bytes),
                 TK_SUCCESS);
    cr_assert_eq(d.dtype, TK_F32);
    cr_assert_eq(d.rank, 2);
    cr_assert_eq(d.data, NULL);
    cr_assert_eq(d.shape[0], 4001);
    cr_assert_eq(d.shape[1], 56);
    cr_assert_eq(d.strides[0], 56);
    cr_assert_eq(d.strides[1], 1);
    cr_assert_eq(bytes, 4001u * 56u * 4u);

    cr_assert_eq(tk_sf_desc(4001, 7168, 1, 128, TK_SF_COL_MAJOR, &d, &bytes),
                 TK_SUCCESS);
    cr_assert_eq(d.dtype, TK_F32);
    cr_assert_eq(d.shape[0], 4001);
    cr_assert_eq(d.shape[1], 56);
    cr_assert_eq(d.strides[0], 1);
    cr_assert_eq(d.strides[1], 4004);
    cr_assert_eq(bytes, 56u * 4004u * 4u);

    cr_assert_eq(tk_sf_desc(4001, 7168, 1, 128, TK_SF_PACKED_UE8M0, &d,
                            &bytes),
                 TK_SUCCESS);
    cr_assert_eq(d.dtype, TK_I32);
    cr_assert_eq(d.shape[0], 4001);
    cr_assert_eq(d.shape[1], 14);
    cr_assert_eq(d.strides[0], 1);
    cr_assert_eq(d.strides[1], 4004);
    cr_assert_eq(bytes, 14u * 4004u * 4u);

    /* Partial blocks on both axes: 8001 x 576 in 128 x 128 -> 63 x 5;
     * packed rounds 5 blocks up to 2 words. */
    cr_assert_eq(tk_sf_desc(8001, 576, 128, 128, TK_SF_PACKED_UE8M0, &d,
                            &bytes),
                 TK_SUCCESS);
    cr_assert_eq(d.shape[0], 63);
    cr_assert_eq(d.shape[1], 2);
    cr_assert_eq(d.strides[1], 64);
    cr_assert_eq(bytes, 2u * 64u * 4u);
    cr_assert_eq(tk_sf_desc(8001, 576, 128, 128, TK_SF_COL_MAJOR, &d, NULL),
                 TK_SUCCESS);
    cr_assert_eq(d.shape[1], 5);
    cr_assert_eq(d.strides[1], 64);

    /* Empty matrix: no blocks, no bytes. */
    cr_assert_eq(tk_sf_desc(0, 512, 1, 128, TK_SF_COL_MAJOR, &d, &bytes),
                 TK_SUCCESS);
    cr_assert_eq(d.shape[0], 0);
    cr_assert_eq(d.shape[1], 4);
    cr_assert_eq(bytes, 0);
}

Test(runtime, sf_desc_rejects)
{
    tk_tensor d;
    size_t bytes;
    EXPECT_INVALID(tk_sf_desc(4, 128, 1, 128, TK_SF_ROW_MAJOR, NULL, &bytes),
                   "tk_sf_desc: desc is NULL");
    EXPECT_INVALID(tk_sf_desc(-1, 128, 1, 128, TK_SF_ROW_MAJOR, &d, &bytes),
                   "rows is -1");
    EXPECT_INVALID(tk_sf_desc(4, -5, 1, 128, TK_SF_ROW_MAJOR, &d, &bytes),
                   "cols is -5");
    EXPECT_INVALID(tk_sf_desc(4, 128, 0, 128, TK_SF_ROW_MAJOR, &d, &bytes),
                   "block_m is 0");
    EXPECT_INVALID(tk_sf_desc(4, 128, 1, -2, TK_SF_ROW_MAJOR, &d, &bytes),
                   "block_k is -2");
    EXPECT_INVALID(tk_sf_desc(4, 128, 1, 128, (tk_sf_layout)3, &d, &bytes),
                   "layout is 3");
    EXPECT_INVALID(tk_sf_desc(INT64_MAX, INT64_MAX, 1, 1, TK_SF_ROW_MAJOR, &d,
                              &bytes),
                   "too large");
    EXPECT_INVALID(tk_sf_desc(INT64_MAX, 4, 1, 1, TK_SF_COL_MAJOR, &d, &bytes),
                   "too large");
}

static void *read_last_error(void *result)
{
    snprintf(result, 64, "%s", tk_last_error());
    return NULL;
}

Test(runtime, last_error_is_per_thread)
{
    EXPECT_INVALID(tk_transpose(NULL, NULL, NULL), "tk_transpose: x is NULL");
    /* Another thread starts with an empty message and does not see ours. */
    char seen[64] = "not run";
    pthread_t thread;
    cr_assert_eq(pthread_create(&thread, NULL, read_last_error, seen), 0);
    cr_assert_eq(pthread_join(thread, NULL), 0);
    cr_assert_str_eq(seen, "");
    cr_assert(strstr(tk_last_error(), "x is NULL") != NULL);
}

/* ---- transpose ---------------------------------------------------------- */

Test(transpose, rejects_bad_arguments, .init = setup)
{
    tk_tensor x = batch(TK_BF16, 2, 128, 256, 256);
    tk_tensor out = batch(TK_BF16, 2, 256, 128, 128);
    EXPECT_INVALID(tk_batched_transpose(NULL, &out, NULL),
                   "tk_batched_transpose: x is NULL");
    EXPECT_INVALID(tk_batched_transpose(&x, NULL, NULL), "out is NULL");

    tk_tensor bad = x;
    bad.rank = 2;
    EXPECT_INVALID(tk_batched_transpose(&bad, &out, NULL),
                   "x: rank is 2, expected 3");
    bad = x;
    bad.dtype = TK_F64;
    EXPECT_INVALID(tk_batched_transpose(&bad, &out, NULL),
                   "x: dtype is f64, expected a 1-, 2- or 4-byte dtype");
    bad.dtype = TK_E2M1;
    EXPECT_INVALID(tk_batched_transpose(&bad, &out, NULL), "dtype is e2m1");
    bad.dtype = (tk_dtype)77;
    EXPECT_INVALID(tk_batched_transpose(&bad, &out, NULL),
                   "dtype is <invalid dtype>");
    bad = out;
    bad.dtype = TK_F16;
    EXPECT_INVALID(tk_batched_transpose(&x, &bad, NULL),
                   "out: dtype is f16, expected bf16 (x's dtype)");

    bad = x;
    bad.shape[1] = 100;
    EXPECT_INVALID(tk_batched_transpose(&bad, &out, NULL),
                   "x: shape[1] is 100, expected a multiple of 64");
    bad = x;
    bad.shape[2] = 200;
    EXPECT_INVALID(tk_batched_transpose(&bad, &out, NULL),
                   "x: shape[2] is 200, expected a multiple of 64");
    bad = x;
    bad.shape[0] = -1;
    EXPECT_INVALID(tk_batched_transpose(&bad, &out, NULL),
                   "x: shape[0] is -1, expected >= 0");
    bad = x;
    bad.strides[1] = -256;
    EXPECT_INVALID(tk_batched_transpose(&bad, &out, NULL),
                   "x: strides[1] is -256; negative strides");
    bad = x;
    bad.strides[2] = 2;
    EXPECT_INVALID(tk_batched_transpose(&bad, &out, NULL),
                   "x: strides[2] is 2, expected 1");
    bad = x;
    bad.strides[1] = 258;
    bad.strides[0] = 128 * 258;
    EXPECT_INVALID(tk_batched_transpose(&bad, &out, NULL),
                   "x: strides[1] is 258, expected a multiple of 4");
    bad = x;
    bad.strides[1] = 128;
    bad.strides[0] = 128 * 128;
    EXPECT_INVALID(tk_batched_transpose(&bad, &out, NULL),
                   "x: strides[1] is 128, less than shape[2] = 256");
    bad = x;
    bad.strides[0] = 128 * 256 + 64;
    EXPECT_INVALID(tk_batched_transpose(&bad, &out, NULL),
                   "x: strides[0] is 32832, expected shape[1] * strides[1] = "
                   "32768");

    bad = out;
    bad.shape[0] = 3;
    EXPECT_INVALID(tk_batched_transpose(&x, &bad, NULL),
                   "out: shape[0] is 3, expected 2 (x's shape[0])");
    bad = out;
    bad.shape[1] = 128;
    EXPECT_INVALID(tk_batched_transpose(&x, &bad, NULL),
                   "out: shape[1] is 128, expected 256 (x's shape[2])");
    bad = out;
    bad.shape[2] = 256;
    EXPECT_INVALID(tk_batched_transpose(&x, &bad, NULL),
                   "out: shape[2] is 256, expected 128 (x's shape[1])");
    bad = out;
    bad.strides[1] = 192;
    bad.strides[0] = 192 * 256;
    EXPECT_INVALID(tk_batched_transpose(&x, &bad, NULL),
                   "out: not contiguous: strides[1] is 192, expected 128");

    bad = x;
    bad.data = NULL;
    EXPECT_INVALID(tk_batched_transpose(&bad, &out, NULL), "x: data is NULL");
    bad = x;
    bad.data = (char *)x.data + 2;
    EXPECT_INVALID(tk_batched_transpose(&bad, &out, NULL),
                   "is not 16-byte aligned");
    bad = out;
    bad.data = (char *)out.data + 8;
    EXPECT_INVALID(tk_batched_transpose(&x, &bad, NULL),
                   "out: data 0x");

    /* 2^16 x 2^16 bf16 rows: the largest offset passes 2^31. */
    tk_tensor big_x = {.data = x.data, .dtype = TK_BF16, .rank = 3,
                       .shape = {1, 65536, 65536},
                       .strides = {(int64_t)65536 * 65536, 65536, 1}};
    tk_tensor big_out = big_x;
    big_out.data = out.data;
    EXPECT_INVALID(tk_batched_transpose(&big_x, &big_out, NULL),
                   "x: too large");
    big_x.shape[0] = big_out.shape[0] = (int64_t)1 << 40;
    EXPECT_INVALID(tk_batched_transpose(&big_x, &big_out, NULL),
                   "x: too large: shape[0]");
}

Test(transpose, two_dimensional_rejects, .init = setup)
{
    tk_tensor x = matrix(TK_E4M3, 128, 64, 128);
    tk_tensor out = matrix(TK_E4M3, 64, 128, 128);
    EXPECT_INVALID(tk_transpose(&x, NULL, NULL), "tk_transpose: out is NULL");
    tk_tensor bad = x;
    bad.rank = 3;
    EXPECT_INVALID(tk_transpose(&bad, &out, NULL),
                   "tk_transpose: x: rank is 3, expected 2");
    bad = x;
    bad.shape[0] = 96;
    EXPECT_INVALID(tk_transpose(&bad, &out, NULL),
                   "x: shape[0] is 96, expected a multiple of 64");
    bad = out;
    bad.shape[0] = 128;
    EXPECT_INVALID(tk_transpose(&x, &bad, NULL),
                   "out: shape[0] is 128, expected 64 (x's shape[1])");
    bad = x;
    bad.strides[0] = 66;
    EXPECT_INVALID(tk_transpose(&bad, &out, NULL),
                   "x: strides[0] is 66, expected a multiple of 4");
}

Test(transpose, picks_instances, .init = setup)
{
    /* bf16: rows 16-byte aligned (stride % 8 == 0) -> the fast instance. */
    tk_tensor x = batch(TK_BF16, 2, 128, 256, 256);
    tk_tensor out = batch(TK_BF16, 2, 256, 128, 128);
    EXPECT_LAUNCH(tk_batched_transpose(&x, &out, NULL),
                  "batched_transpose__bf16");
    /* A row stride that is a multiple of 4 but not of 8 -> _any. */
    x = batch(TK_BF16, 2, 128, 256, 260);
    EXPECT_LAUNCH(tk_batched_transpose(&x, &out, NULL),
                  "batched_transpose__bf16_any");
    /* f32's vector is 4 elements: stride 260 is still fast. */
    x = batch(TK_F32, 2, 128, 256, 260);
    out = batch(TK_F32, 2, 256, 128, 128);
    EXPECT_LAUNCH(tk_batched_transpose(&x, &out, NULL),
                  "batched_transpose__f32");
    /* e4m3 needs stride % 16. */
    x = batch(TK_E4M3, 1, 64, 64, 72);
    out = batch(TK_E4M3, 1, 64, 64, 64);
    EXPECT_LAUNCH(tk_batched_transpose(&x, &out, NULL),
                  "batched_transpose__e4m3_any");
    x = batch(TK_E4M3, 1, 64, 64, 80);
    EXPECT_LAUNCH(tk_batched_transpose(&x, &out, NULL),
                  "batched_transpose__e4m3");
    /* Other dtypes ride on the instance of their element size. */
    x = batch(TK_I16, 1, 64, 64, 64);
    out = batch(TK_I16, 1, 64, 64, 64);
    EXPECT_LAUNCH(tk_batched_transpose(&x, &out, NULL),
                  "batched_transpose__bf16");
    x = batch(TK_U8, 1, 64, 128, 128);
    out = batch(TK_U8, 1, 128, 64, 64);
    EXPECT_LAUNCH(tk_batched_transpose(&x, &out, NULL),
                  "batched_transpose__e4m3");
    x = batch(TK_I32, 1, 64, 128, 128);
    out = batch(TK_I32, 1, 128, 64, 64);
    EXPECT_LAUNCH(tk_batched_transpose(&x, &out, NULL),
                  "batched_transpose__f32");

    /* 2-D, row-strided (stride 2Y, as TileKernels tests it). */
    x = matrix(TK_BF16, 128, 64, 128);
    out = matrix(TK_BF16, 64, 128, 128);
    EXPECT_LAUNCH(tk_transpose(&x, &out, NULL), "batched_transpose__bf16");
    x = matrix(TK_E4M3, 128, 64, 68);
    out = matrix(TK_E4M3, 64, 128, 128);
    EXPECT_LAUNCH(tk_transpose(&x, &out, NULL), "batched_transpose__e4m3_any");
}

Test(transpose, empty_launches_nothing, .init = setup)
{
    tk_tensor x = batch(TK_BF16, 0, 128, 256, 256);
    tk_tensor out = batch(TK_BF16, 0, 256, 128, 128);
    x.data = out.data = NULL; /* empty tensors need no storage */
    EXPECT_NOTHING(tk_batched_transpose(&x, &out, NULL));
    x = matrix(TK_F32, 0, 64, 64);
    out = matrix(TK_F32, 64, 0, 1);
    EXPECT_NOTHING(tk_transpose(&x, &out, NULL));
}

/* ---- per_token_cast ---------------------------------------------------- */

Test(per_token_cast, rejects_bad_arguments, .init = setup)
{
    const int64_t T = 40, H = 512;
    tk_tensor x = matrix(TK_BF16, T, H, H);
    tk_tensor out = matrix(TK_E4M3, T, H, H);
    tk_tensor sf = scales(T, H, 1, 128, TK_SF_COL_MAJOR);
    tk_tensor packed = scales(T, H, 1, 128, TK_SF_PACKED_UE8M0);
    tk_tensor bad;

    EXPECT_INVALID(tk_per_token_cast(NULL, 128, true, TK_SF_COL_MAJOR, &out,
                                     &sf, NULL),
                   "tk_per_token_cast: x is NULL");
    EXPECT_INVALID(tk_per_token_cast(&x, 128, true, TK_SF_COL_MAJOR, NULL,
                                     &sf, NULL),
                   "out is NULL");
    EXPECT_INVALID(tk_per_token_cast(&x, 128, true, TK_SF_COL_MAJOR, &out,
                                     NULL, NULL),
                   "out_sf is NULL");
    bad = x;
    bad.dtype = TK_I32;
    EXPECT_INVALID(tk_per_token_cast(&bad, 128, true, TK_SF_COL_MAJOR, &out,
                                     &sf, NULL),
                   "x: dtype is i32, expected f32 or bf16");
    EXPECT_INVALID(tk_per_token_cast(&x, 48, true, TK_SF_COL_MAJOR, &out, &sf,
                                     NULL),
                   "num_per_channels is 48, expected 16, 32, 64, 128 or x's "
                   "shape[1] (512)");
    EXPECT_INVALID(tk_per_token_cast(&x, 0, true, TK_SF_COL_MAJOR, &out, &sf,
                                     NULL),
                   "num_per_channels is 0");
    /* npc 16 and npc == H are supported (api_cast_fp4.c): the SF must
     * then have their shape */
    EXPECT_INVALID(tk_per_token_cast(&x, 16, true, TK_SF_COL_MAJOR, &out,
                                     &sf, NULL),
                   "out_sf: shape[1] is 4, expected 32");
    EXPECT_INVALID(tk_per_token_cast(&x, 512, true, TK_SF_COL_MAJOR, &out,
                                     &sf, NULL),
                   "out_sf: shape[1] is 4, expected 1");
    EXPECT_INVALID(tk_per_token_cast(&x, 1024, true, TK_SF_COL_MAJOR, &out,
                                     &sf, NULL),
                   "num_per_channels is 1024");
    EXPECT_INVALID(tk_per_token_cast(&x, 128, true, (tk_sf_layout)9, &out, &sf,
                                     NULL),
                   "sf_layout is 9");
    EXPECT_INVALID(tk_per_token_cast(&x, 128, false, TK_SF_PACKED_UE8M0, &out,
                                     &packed, NULL),
                   "TK_SF_PACKED_UE8M0 requires round_sf");

    bad = matrix(TK_BF16, T, 500, 512);
    EXPECT_INVALID(tk_per_token_cast(&bad, 128, true, TK_SF_COL_MAJOR, &out,
                                     &sf, NULL),
                   "x: shape[1] is 500, expected a multiple of 64");
    bad = x;
    bad.strides[1] = 2;
    EXPECT_INVALID(tk_per_token_cast(&bad, 128, true, TK_SF_COL_MAJOR, &out,
                                     &sf, NULL),
                   "x: strides[1] is 2, expected 1");
    bad = x;
    bad.strides[0] = 256;
    EXPECT_INVALID(tk_per_token_cast(&bad, 128, true, TK_SF_COL_MAJOR, &out,
                                     &sf, NULL),
                   "x: strides[0] is 256, less than shape[1] = 512");

    bad = out;
    bad.dtype = TK_E5M2;
    EXPECT_INVALID(tk_per_token_cast(&x, 128, true, TK_SF_COL_MAJOR, &bad,
                                     &sf, NULL),
                   "out: dtype is e5m2, expected e4m3");
    bad = out;
    bad.shape[0] = T + 1;
    EXPECT_INVALID(tk_per_token_cast(&x, 128, true, TK_SF_COL_MAJOR, &bad,
                                     &sf, NULL),
                   "out: shape[0] is 41, expected 40 (x's shape[0])");
    bad = out;
    bad.strides[0] = 2 * H;
    EXPECT_INVALID(tk_per_token_cast(&x, 128, true, TK_SF_COL_MAJOR, &bad,
                                     &sf, NULL),
                   "out: not contiguous: strides[0] is 1024, expected 512");

    /* out_sf must be exactly the layout asked for. */
    EXPECT_INVALID(tk_per_token_cast(&x, 128, true, TK_SF_PACKED_UE8M0, &out,
                                     &sf, NULL),
                   "out_sf: dtype is f32, expected i32 for "
                   "TK_SF_PACKED_UE8M0");
    EXPECT_INVALID(tk_per_token_cast(&x, 64, true, TK_SF_COL_MAJOR, &out, &sf,
                                     NULL),
                   "out_sf: shape[1] is 4, expected 8");
    tk_tensor row_major = scales(T, H, 1, 128, TK_SF_ROW_MAJOR);
    EXPECT_INVALID(tk_per_token_cast(&x, 128, true, TK_SF_COL_MAJOR, &out,
                                     &row_major, NULL),
                   "out_sf: strides[0] is 4, expected 1 for TK_SF_COL_MAJOR");
    EXPECT_INVALID(tk_per_token_cast(&x, 128, true, TK_SF_ROW_MAJOR, &out, &sf,
                                     NULL),
                   "out_sf: strides[0] is 1, expected 4 for TK_SF_ROW_MAJOR");
    /* Column-major without the TMA padding of rows to a multiple of 4. */
    bad = sf;
    bad.strides[1] = T + 1;
    tk_tensor odd_x = matrix(TK_BF16, T + 1, H, H);
    tk_tensor odd_out = matrix(TK_E4M3, T + 1, H, H);
    bad.shape[0] = T + 1;
    EXPECT_INVALID(tk_per_token_cast(&odd_x, 128, true, TK_SF_COL_MAJOR,
                                     &odd_out, &bad, NULL),
                   "out_sf: strides[1] is 41, expected 44");

    bad = sf;
    bad.data = (char *)sf.data + 4;
    EXPECT_INVALID(tk_per_token_cast(&x, 128, true, TK_SF_COL_MAJOR, &out,
                                     &bad, NULL),
                   "out_sf: data 0x");
    bad = x;
    bad.data = NULL;
    EXPECT_INVALID(tk_per_token_cast(&bad, 128, true, TK_SF_COL_MAJOR, &out,
                                     &sf, NULL),
                   "x: data is NULL");
    /* A row stride that pushes offsets past 2^31. */
    bad = x;
    bad.strides[0] = (int64_t)1 << 27;
    EXPECT_INVALID(tk_per_token_cast(&bad, 128, true, TK_SF_COL_MAJOR, &out,
                                     &sf, NULL),
                   "x: too large: the largest element offset");
}

Test(per_token_cast, picks_instances, .init = setup)
{
    const int64_t T = 40, H = 512;
    tk_tensor x = matrix(TK_BF16, T, H, H);
    tk_tensor out = matrix(TK_E4M3, T, H, H);
    tk_tensor col = scales(T, H, 1, 128, TK_SF_COL_MAJOR);
    tk_tensor row = scales(T, H, 1, 128, TK_SF_ROW_MAJOR);
    tk_tensor packed = scales(T, H, 1, 128, TK_SF_PACKED_UE8M0);

    EXPECT_LAUNCH(tk_per_token_cast(&x, 128, true, TK_SF_COL_MAJOR, &out, &col,
                                    NULL),
                  "per_token_cast__bf16_128_round");
    EXPECT_LAUNCH(tk_per_token_cast(&x, 128, false, TK_SF_ROW_MAJOR, &out,
                                    &row, NULL),
                  "per_token_cast__bf16_128");
    EXPECT_LAUNCH(tk_per_token_cast(&x, 128, true, TK_SF_PACKED_UE8M0, &out,
                                    &packed, NULL),
                  "per_token_cast_ue8m0__bf16_128");
    /* bf16 rows 8 elements apart modulo 16 bytes: stride 520 is fast,
     * 516 is not. */
    tk_tensor strided = matrix(TK_BF16, T, H, 520);
    EXPECT_LAUNCH(tk_per_token_cast(&strided, 128, true, TK_SF_COL_MAJOR, &out,
                                    &col, NULL),
                  "per_token_cast__bf16_128_round");
    strided = matrix(TK_BF16, T, H, 516);
    EXPECT_LAUNCH(tk_per_token_cast(&strided, 128, true, TK_SF_COL_MAJOR, &out,
                                    &col, NULL),
                  "per_token_cast__bf16_128_round_any");
    EXPECT_LAUNCH(tk_per_token_cast(&strided, 128, true, TK_SF_PACKED_UE8M0,
                                    &out, &packed, NULL),
                  "per_token_cast_ue8m0__bf16_128_any");
    /* f32 input, other group sizes. */
    tk_tensor xf = matrix(TK_F32, T, H, 516);
    tk_tensor row32 = scales(T, H, 1, 32, TK_SF_ROW_MAJOR);
    EXPECT_LAUNCH(tk_per_token_cast(&xf, 32, false, TK_SF_ROW_MAJOR, &out,
                                    &row32, NULL),
                  "per_token_cast__f32_32");
    xf = matrix(TK_F32, T, H, 514);
    tk_tensor packed64 = scales(T, H, 1, 64, TK_SF_PACKED_UE8M0);
    EXPECT_LAUNCH(tk_per_token_cast(&xf, 64, true, TK_SF_PACKED_UE8M0, &out,
                                    &packed64, NULL),
                  "per_token_cast_ue8m0__f32_64_any");
    /* A single row: its stride is irrelevant, so the fast instance runs. */
    tk_tensor one = matrix(TK_BF16, 1, H, H);
    one.strides[0] = 3;
    tk_tensor one_out = matrix(TK_E4M3, 1, H, H);
    tk_tensor one_sf = scales(1, H, 1, 128, TK_SF_COL_MAJOR);
    EXPECT_LAUNCH(tk_per_token_cast(&one, 128, true, TK_SF_COL_MAJOR, &one_out,
                                    &one_sf, NULL),
                  "per_token_cast__bf16_128_round");
}

Test(per_token_cast, no_tokens_launches_nothing, .init = setup)
{
    tk_tensor x = matrix(TK_BF16, 0, 512, 512);
    tk_tensor out = matrix(TK_E4M3, 0, 512, 512);
    tk_tensor sf = scales(0, 512, 1, 128, TK_SF_PACKED_UE8M0);
    x.data = out.data = sf.data = NULL;
    EXPECT_NOTHING(tk_per_token_cast(&x, 128, true, TK_SF_PACKED_UE8M0, &out,
                                     &sf, NULL));
}

/* ---- cast_back ---------------------------------------------------------- */

Test(cast_back, rejects_bad_arguments, .init = setup)
{
    const int64_t T = 40, H = 512;
    tk_tensor x = matrix(TK_E4M3, T, H, H);
    tk_tensor out = matrix(TK_BF16, T, H, H);
    tk_tensor sf = scales(T, H, 1, 128, TK_SF_ROW_MAJOR);
    tk_tensor bad;

    EXPECT_INVALID(tk_cast_back(NULL, &sf, 1, 128, &out, NULL),
                   "tk_cast_back: x is NULL");
    EXPECT_INVALID(tk_cast_back(&x, NULL, 1, 128, &out, NULL), "sf is NULL");
    EXPECT_INVALID(tk_cast_back(&x, &sf, 1, 128, NULL, NULL), "out is NULL");
    bad = x;
    bad.dtype = TK_BF16;
    EXPECT_INVALID(tk_cast_back(&bad, &sf, 1, 128, &out, NULL),
                   "x: dtype is bf16, expected e4m3");
    bad.dtype = TK_I8; /* packed e2m1: (T, 512) bytes hold H = 1024 */
    EXPECT_INVALID(tk_cast_back(&bad, &sf, 1, 128, &out, NULL),
                   "out: shape[1] is 512, expected 1024");
    bad = out;
    bad.dtype = TK_F16;
    EXPECT_INVALID(tk_cast_back(&x, &sf, 1, 128, &bad, NULL),
                   "out: dtype is f16, expected bf16 or f32");
    bad = sf;
    bad.dtype = TK_U8;
    EXPECT_INVALID(tk_cast_back(&x, &bad, 1, 128, &out, NULL),
                   "sf: dtype is u8, expected f32 or i32");
    EXPECT_INVALID(tk_cast_back(&x, &sf, 0, 128, &out, NULL), "block_m is 0");
    EXPECT_INVALID(tk_cast_back(&x, &sf, 1, -128, &out, NULL),
                   "block_k is -128");
    EXPECT_INVALID(tk_per_token_cast_back(&x, &sf, 0, &out, NULL),
                   "tk_per_token_cast_back: num_per_channels is 0");

    bad = matrix(TK_E4M3, T, 100, 100);
    EXPECT_INVALID(tk_cast_back(&bad, &sf, 1, 128, &out, NULL),
                   "x: shape[1] is 100, expected a multiple of 64");
    bad = matrix(TK_E4M3, T, H, 2 * H);
    EXPECT_INVALID(tk_cast_back(&bad, &sf, 1, 128, &out, NULL),
                   "x: not contiguous: strides[0] is 1024, expected 512");
    bad = out;
    bad.shape[1] = 1024;
    EXPECT_INVALID(tk_cast_back(&x, &sf, 1, 128, &bad, NULL),
                   "out: shape[1] is 1024, expected 512 (x's shape[1])");

    tk_tensor packed = scales(T, H, 1, 128, TK_SF_PACKED_UE8M0);
    bad = packed;
    bad.strides[0] = 4;
    bad.strides[1] = 1;
    EXPECT_INVALID(tk_cast_back(&x, &bad, 1, 128, &out, NULL),
                   "sf: strides[0] is 4, expected 1 (an i32 SF is packed");
    bad = sf;
    bad.strides[0] = 8;
    bad.strides[1] = 2;
    EXPECT_INVALID(tk_cast_back(&x, &bad, 1, 128, &out, NULL),
                   "sf: strides are (8, 2)");
    EXPECT_INVALID(tk_cast_back(&x, &sf, 1, 64, &out, NULL),
                   "sf: shape[1] is 4, expected 8");
    EXPECT_INVALID(tk_cast_back(&x, &sf, 32, 128, &out, NULL),
                   "sf: shape[0] is 40, expected 2");
    EXPECT_INVALID(tk_cast_back(&x, &packed, 1, 32, &out, NULL),
                   "sf: shape[1] is 1, expected 4");
    bad = sf;
    bad.data = (char *)sf.data + 1;
    EXPECT_INVALID(tk_cast_back(&x, &bad, 1, 128, &out, NULL),
                   "sf: data 0x");

    /* Valid, but no instance. */
    tk_tensor sf64 = scales(T, H, 64, 64, TK_SF_ROW_MAJOR);
    EXPECT_UNSUPPORTED(tk_cast_back(&x, &sf64, 64, 64, &out, NULL),
                       "64 x 64 blocks with f32 scale factors are not "
                       "supported; supported: 1x32");
    tk_tensor packed128x1 = scales(T, H, 128, 1, TK_SF_PACKED_UE8M0);
    EXPECT_UNSUPPORTED(tk_cast_back(&x, &packed128x1, 128, 1, &out, NULL),
                       "with packed UE8M0 scale factors are not supported");
    tk_tensor sf16 = scales(T, H, 1, 16, TK_SF_ROW_MAJOR);
    EXPECT_UNSUPPORTED(tk_per_token_cast_back(&x, &sf16, 16, &out, NULL),
                       "num_per_channels 16 is not supported");
}

Test(cast_back, picks_instances, .init = setup)
{
    const int64_t T = 40, H = 512;
    tk_tensor x = matrix(TK_E4M3, T, H, H);
    tk_tensor out = matrix(TK_BF16, T, H, H);
    tk_tensor outf = matrix(TK_F32, T, H, H);

    tk_tensor sf = scales(T, H, 1, 128, TK_SF_ROW_MAJOR);
    EXPECT_LAUNCH(tk_cast_back(&x, &sf, 1, 128, &out, NULL),
                  "cast_back__bf16_1x128");
    EXPECT_LAUNCH(tk_per_token_cast_back(&x, &sf, 128, &outf, NULL),
                  "cast_back__f32_1x128");
    sf = scales(T, H, 1, 32, TK_SF_COL_MAJOR);
    EXPECT_LAUNCH(tk_per_token_cast_back(&x, &sf, 32, &out, NULL),
                  "cast_back__bf16_1x32");
    sf = scales(T, H, 128, 128, TK_SF_COL_MAJOR);
    EXPECT_LAUNCH(tk_cast_back(&x, &sf, 128, 128, &outf, NULL),
                  "cast_back__f32_128x128");
    sf = scales(T, H, 128, 1, TK_SF_ROW_MAJOR);
    EXPECT_LAUNCH(tk_cast_back(&x, &sf, 128, 1, &out, NULL),
                  "cast_back__bf16_128x1");
    sf = scales(T, H, 32, 32, TK_SF_ROW_MAJOR);
    EXPECT_LAUNCH(tk_cast_back(&x, &sf, 32, 32, &outf, NULL),
                  "cast_back__f32_32x32");
    sf = scales(T, H, 1, 64, TK_SF_PACKED_UE8M0);
    EXPECT_LAUNCH(tk_per_token_cast_back(&x, &sf, 64, &out, NULL),
                  "cast_back_ue8m0__bf16_1x64");
    sf = scales(T, H, 128, 128, TK_SF_PACKED_UE8M0);
    EXPECT_LAUNCH(tk_cast_back(&x, &sf, 128, 128, &outf, NULL),
                  "cast_back_ue8m0__f32_128x128");
}

Test(cast_back, no_tokens_launches_nothing, .init = setup)
{
    tk_tensor x = matrix(TK_E4M3, 0, 512, 512);
    tk_tensor out = matrix(TK_F32, 0, 512, 512);
    tk_tensor sf = scales(0, 512, 1, 128, TK_SF_COL_MAJOR);
    x.data = out.data = sf.data = NULL;
    EXPECT_NOTHING(tk_cast_back(&x, &sf, 1, 128, &out, NULL));
    EXPECT_NOTHING(tk_per_token_cast_back(&x, &sf, 128, &out, NULL));
}

/* ---- device and threads ----------------------------------------------- */

Test(device, check_reports_no_device, .init = setup)
{
    if (gpu_present)
        cr_skip_test("a GPU is present");
    tk_status status = tk_device_check();
    cr_assert_eq(status, TK_ERROR_NO_DEVICE, "%s", tk_last_error());
    cr_assert(strstr(tk_last_error(), "CUDA driver not found (libcuda.so.1)") ||
                  strstr(tk_last_error(), "no CUDA device") ||
                  strstr(tk_last_error(), "cuInit failed"),
              "unexpected message '%s'", tk_last_error());
    /* The outcome is remembered: same answer, same message. */
    char first[256];
    snprintf(first, sizeof first, "%s", tk_last_error());
    cr_assert_eq(tk_device_check(), TK_ERROR_NO_DEVICE);
    cr_assert_str_eq(tk_last_error(), first);
}

Test(device, check_succeeds_with_gpu, .init = setup)
{
    if (!gpu_present)
        cr_skip_test("no GPU");
    cr_assert_eq(tk_device_check(), TK_SUCCESS);
    CUcontext context = NULL;
    cr_assert_eq(driver->cuCtxGetCurrent(&context), CUDA_SUCCESS);
    cr_assert_neq(context, NULL);
}

/* Each thread fails with its own shape value and must read back its own
 * message, while the other threads overwrite theirs. */
#define THREADS 8
#define ROUNDS 2000

typedef struct {
    int index;
    int failures;
    tk_tensor x, out, sf;
} worker_state;

static void *worker(void *argument)
{
    worker_state *state = argument;
    char expected[96];
    for (int round = 0; round < ROUNDS; round++) {
        tk_tensor bad = state->x;
        bad.shape[1] = 1000 + state->index; /* never a multiple of 64 */
        tk_status status = tk_per_token_cast(&bad, 128, true, TK_SF_COL_MAJOR,
                                             &state->out, &state->sf, NULL);
        snprintf(expected, sizeof expected, "x: shape[1] is %d,",
                 1000 + state->index);
        if (status != TK_ERROR_INVALID_ARGUMENT ||
            strstr(tk_last_error(), expected) == NULL)
            state->failures++;
        tk_tensor out = state->out;
        out.dtype = TK_BF16;
        out.shape[0] = 100 + state->index; /* never 8 */
        status = tk_cast_back(&state->out, &state->sf, 1, 128, &out, NULL);
        snprintf(expected, sizeof expected, "out: shape[0] is %d,",
                 100 + state->index);
        if (status != TK_ERROR_INVALID_ARGUMENT ||
            strstr(tk_last_error(), expected) == NULL)
            state->failures++;
        /* Without a GPU, valid calls race through the driver loading. */
        if (!gpu_present && round % 100 == 0 &&
            tk_device_check() != TK_ERROR_NO_DEVICE)
            state->failures++;
    }
    return NULL;
}

Test(threads, concurrent_validation, .init = setup)
{
    pthread_t threads[THREADS];
    worker_state states[THREADS];
    for (int i = 0; i < THREADS; i++) {
        states[i] = (worker_state){.index = i};
        states[i].x = matrix(TK_BF16, 8, 512, 512);
        states[i].out = matrix(TK_E4M3, 8, 512, 512);
        states[i].sf = scales(8, 512, 1, 128, TK_SF_COL_MAJOR);
        cr_assert_eq(pthread_create(&threads[i], NULL, worker, &states[i]),
                     0);
    }
    for (int i = 0; i < THREADS; i++) {
        cr_assert_eq(pthread_join(threads[i], NULL), 0);
        cr_assert_eq(states[i].failures, 0, "thread %d: %d failures", i,
                     states[i].failures);
    }
}

/* ---- TMA descriptors (tensor_map.c) ------------------------------------ */

static tk_status encode(const tk_tensor *t, int64_t box0, int64_t box1, int swizzle,
                        CUtensorMap *map)
{
    const int64_t box[2] = {box0, box1};
    return tk__tensor_map("gemm", "a", t, 2, box, swizzle, map);
}

Test(tensor_map, rejects_what_tma_cannot_describe, .init = setup)
{
    CUtensorMap map;
    tk_tensor a = matrix(TK_BF16, 256, 512, 512);
    EXPECT_INVALID(tk__tensor_map("gemm", "a", &a, 3, (int64_t[]){1, 64, 64}, 128, &map),
                   "gemm: a: TMA needs rank 1 to 5");
    tk_tensor t = a;
    t.dtype = TK_E2M1;
    EXPECT_INVALID(encode(&t, 64, 64, 128, &map), "gemm: a: TMA cannot copy e2m1");
    EXPECT_INVALID(encode(&a, 0, 64, 128, &map), "gemm: a: TMA box[0] is 0");
    EXPECT_INVALID(encode(&a, 257, 64, 128, &map), "box[0] is 257 (1 to 256)");
    EXPECT_INVALID(encode(&a, 64, 4, 0, &map), "inner extent is 8 bytes, not a multiple of 16");
    EXPECT_INVALID(encode(&a, 64, 128, 128, &map), "(256 bytes) exceeds the 128-byte swizzle");
    EXPECT_INVALID(encode(&a, 64, 64, 96, &map), "swizzle of 96 bytes");
    t = a;
    t.data = (char *)a.data + 2;
    EXPECT_INVALID(encode(&t, 64, 64, 128, &map), "is not 16-byte aligned");
    t = a;
    t.strides[1] = 2;
    EXPECT_INVALID(encode(&t, 64, 64, 128, &map), "strides[1] is 2; TMA needs the last");
    t = matrix(TK_BF16, 256, 500, 500); /* 1000-byte rows */
    EXPECT_INVALID(encode(&t, 64, 64, 128, &map), "strides[0] is 500 elements");
    t = a;
    t.shape[1] = (1ll << 32) + 1;
    EXPECT_INVALID(encode(&t, 64, 64, 128, &map), "shape[1] is 4294967297");
    EXPECT_INVALID(encode(NULL, 64, 64, 128, &map), "gemm: a: no tensor");
}

/* Valid tensors need the driver only to encode: an empty one needs none
 * (an all-zero map), and a size-1 dimension may have any stride. */
Test(tensor_map, encodes_valid_tensors, .init = setup)
{
    CUtensorMap map, again;
    tk_tensor empty = matrix(TK_BF16, 0, 512, 512);
    memset(&map, 0xFF, sizeof map);
    cr_assert_eq(encode(&empty, 64, 64, 128, &map), TK_SUCCESS, "%s", tk_last_error());
    for (int i = 0; i < CU_TENSOR_MAP_NUM_QWORDS; i++) cr_assert_eq(map.opaque[i], 0);

    tk_tensor a = matrix(TK_E4M3, 300, 1000, 1008);
    tk_tensor row = matrix(TK_F32, 1, 64, 3);
    tk_tensor *valid[2] = {&a, &row};
    for (int i = 0; i < 2; i++) {
        tk_status status = encode(valid[i], 1, 32, 128, &map);
        if (!gpu_present) {
            cr_assert_eq(status, TK_ERROR_NO_DEVICE, "%s", tk_last_error());
            continue;
        }
        cr_assert_eq(status, TK_SUCCESS, "%s", tk_last_error());
        /* the second encode comes from the cache, bit for bit */
        cr_assert_eq(encode(valid[i], 1, 32, 128, &again), TK_SUCCESS);
        cr_assert_eq(memcmp(&map, &again, sizeof map), 0);
    }
}
