/*
 * api_gemm.c -- tk_gemm_bf16 and tk_gemm_fp8_blockscaled (kernels/gemm.tk,
 * docs/hopper.md).
 *
 * Both compute D[M, N] = A[M, K] * B[N, K]^T with f32 accumulation and a
 * bf16 D.  The kernels read A and B through TMA tensor maps, which need
 * every row to start on a 16-byte boundary (K % 8 for bf16, K % 16 for
 * e4m3) and dense rows, so the operands must be contiguous; D is stored
 * with predicated stores from the MMA fragment or, in the persistent
 * store kernels that the entry points run, through shared memory and TMA
 * stores clipped by d's tensor map; N % 8 keeps its rows 16-byte
 * aligned for both.
 *
 * The fp8 GEMM takes A's scales exactly as tk_per_token_cast writes them
 * with num_per_channels 128 and TK_SF_COL_MAJOR (f32 (M, ceil(K/128)),
 * strides (1, align(M, 4))): the storage is a row-major (ceil(K/128),
 * align(M, 4)) matrix, one contiguous run of scales per K block, which the
 * kernel takes as it is (a TMA box per tile and K step).  B's scales are
 * tk_per_block_cast's for 128 x 128 blocks in any f32 layout (the kernel
 * reads one per tile and K step).  K == 0 makes D zero without a launch
 * (a tensor map cannot describe an empty matrix); M == 0 or N == 0 does
 * nothing.
 *
 * The cluster instances of the fp8 GEMM (TK__GEMM_CLUSTER2*) run two
 * blocks per cluster that share one B tile through TMA multicast
 * (docs/hopper.md 11); the launchers round the grid up to whole clusters
 * and launch through cuLaunchKernelEx.
 *
 * The persistent instances of gemm_bf16 (kernels/gemm_persistent.tk,
 * gemm_bf16_store.tk) and of the fp8 GEMM (kernels/gemm_fp8_store.tk,
 * gemm_fp8_tall.tk) take the SM count of the current context's device,
 * read once per device through the driver table and cached: the kernel
 * launches min(SMs, tiles) blocks and steps over the tiles by the SM
 * count.
 */
#include "api_gemm.h"
#include "tk_internal.h"
#include "tk_kernels.h"

/* Scale block of the fp8 recipe, along K for both operands and along N
 * for B (the kernels' BK and BN). */
#define TK_GEMM_SCALE_BLOCK 128
/* The column-major scale layout pads A's rows to this many (tk_sf_desc). */
#define TK_GEMM_SFA_ROW_ALIGN 4
/* Devices whose SM count is cached (ordinals beyond ask every time). */
#define TK_GEMM_CACHED_DEVICES 64

typedef tk_status (*tk__gemm_bf16_launcher)(const tk_tensor *a, const tk_tensor *b,
                                            const tk_tensor *d, tk_stream stream);
typedef tk_status (*tk__gemm_bf16_persistent_launcher)(const tk_tensor *a,
                                                       const tk_tensor *b,
                                                       const tk_tensor *d, int32_t sms,
                                                       tk_stream stream);
typedef tk_status (*tk__gemm_fp8_launcher)(const tk_tensor *a, const tk_tensor *sfa,
                                           const tk_tensor *b, const tk_tensor *sfb,
                                           const tk_tensor *d, tk_stream stream);
typedef tk_status (*tk__gemm_fp8_persistent_launcher)(const tk_tensor *a,
                                                      const tk_tensor *sfa,
                                                      const tk_tensor *b,
                                                      const tk_tensor *sfb,
                                                      const tk_tensor *d, int32_t sms,
                                                      tk_stream stream);

/* The bf16 instances, by variant; one of the launchers is set. */
static const struct {
    tk__gemm_variant variant;
    const char *name;
    tk__gemm_bf16_launcher launcher;
    tk__gemm_bf16_persistent_launcher persistent;
} tk__gemm_bf16_instances[] = {
    {TK__GEMM_DEFAULT, "gemm_bf16__default", tkl_gemm_bf16__default, NULL},
    {TK__GEMM_TMA_OFF, "gemm_bf16__tma_off", tkl_gemm_bf16__tma_off, NULL},
    {TK__GEMM_WS_OFF, "gemm_bf16__ws_off", tkl_gemm_bf16__ws_off, NULL},
    {TK__GEMM_PERSISTENT, "gemm_bf16_persistent__default", NULL,
     tkl_gemm_bf16_persistent__default},
    {TK__GEMM_PERSISTENT_WS_OFF, "gemm_bf16_persistent__ws_off", NULL,
     tkl_gemm_bf16_persistent__ws_off},
    {TK__GEMM_PERSISTENT_BAND16, "gemm_bf16_persistent__band16", NULL,
     tkl_gemm_bf16_persistent__band16},
    {TK__GEMM_PERSISTENT_STORE, "gemm_bf16_persistent_store__default", NULL,
     tkl_gemm_bf16_persistent_store__default},
    {TK__GEMM_PERSISTENT_STORE_HALF, "gemm_bf16_persistent_store_half__default", NULL,
     tkl_gemm_bf16_persistent_store_half__default},
};

/* The fp8 instances, by variant; one of the launchers is set (the
 * persistent ones take the SM count). */
static const struct {
    tk__gemm_variant variant;
    const char *name;
    tk__gemm_fp8_launcher launcher;
    tk__gemm_fp8_persistent_launcher persistent;
} tk__gemm_fp8_instances[] = {
    {TK__GEMM_DEFAULT, "gemm_fp8_blockscaled__default", tkl_gemm_fp8_blockscaled__default, NULL},
    {TK__GEMM_TMA_OFF, "gemm_fp8_blockscaled__tma_off", tkl_gemm_fp8_blockscaled__tma_off, NULL},
    {TK__GEMM_WS_OFF, "gemm_fp8_blockscaled__ws_off", tkl_gemm_fp8_blockscaled__ws_off, NULL},
    {TK__GEMM_CLUSTER2, "gemm_fp8_blockscaled__cluster2", tkl_gemm_fp8_blockscaled__cluster2, NULL},
    {TK__GEMM_CLUSTER2_WS_OFF, "gemm_fp8_blockscaled__cluster2_ws_off",
     tkl_gemm_fp8_blockscaled__cluster2_ws_off, NULL},
    {TK__GEMM_FP8_PERSISTENT_STORE, "gemm_fp8_blockscaled_persistent_store__default", NULL,
     tkl_gemm_fp8_blockscaled_persistent_store__default},
    {TK__GEMM_FP8_TALL_PERSISTENT_STORE, "gemm_fp8_blockscaled_tall_persistent_store__default",
     NULL, tkl_gemm_fp8_blockscaled_tall_persistent_store__default},
    {TK__GEMM_FP8_TALL_PERSISTENT_STORE_BAND16,
     "gemm_fp8_blockscaled_tall_persistent_store__band16", NULL,
     tkl_gemm_fp8_blockscaled_tall_persistent_store__band16},
};

#define TK_COUNT(array) ((int)(sizeof(array) / sizeof((array)[0])))

/* The number of SMs of the current context's device, cached per device
 * ordinal (every thread that races to fill a slot writes the same value). */
static tk_status tk__gemm_sm_count(const char *function, int32_t *sms)
{
    static int cached[TK_GEMM_CACHED_DEVICES];
    const tk__driver_api *api;
    tk_status status = tk__driver(&api);
    if (status != TK_SUCCESS)
        return status;
    CUdevice device;
    CUresult result = api->cuCtxGetDevice(&device);
    if (result != CUDA_SUCCESS)
        return tk__cuda_fail(TK_ERROR_DRIVER, result, "%s: reading the current device",
                             function);
    bool cacheable = device >= 0 && device < TK_GEMM_CACHED_DEVICES;
    int count = cacheable ? __atomic_load_n(&cached[device], __ATOMIC_RELAXED) : 0;
    if (count <= 0) {
        result = api->cuDeviceGetAttribute(&count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                                           device);
        if (result != CUDA_SUCCESS)
            return tk__cuda_fail(TK_ERROR_DRIVER, result, "%s: reading the SM count",
                                 function);
        if (count < 1)
            count = 1;
        if (cacheable)
            __atomic_store_n(&cached[device], count, __ATOMIC_RELAXED);
    }
    *sms = count;
    return TK_SUCCESS;
}

/* a (M, K), b (N, K), d (M, N), all contiguous, of the given dtypes;
 * K a multiple of k_multiple (16-byte rows), N of 8. */
static tk_status tk__check_operands(const char *function, const tk_tensor *a,
                                    const tk_tensor *b, const tk_tensor *d,
                                    tk_dtype input, int64_t k_multiple)
{
    const tk_dtype inputs[] = {input};
    const tk_dtype outputs[] = {TK_BF16};
    tk_status status;
    if ((status = tk__check_tensor(function, "a", a, 2)) ||
        (status = tk__check_tensor(function, "b", b, 2)) ||
        (status = tk__check_tensor(function, "d", d, 2)) ||
        (status = tk__check_dtype(function, "a", a, inputs, 1)) ||
        (status = tk__check_dtype(function, "b", b, inputs, 1)) ||
        (status = tk__check_dtype(function, "d", d, outputs, 1)))
        return status;
    int64_t m = a->shape[0], k = a->shape[1], n = b->shape[0];
    if ((status = tk__check_dim(function, "b", b, 1, k, "a's shape[1] (K)")) ||
        (status = tk__check_dim(function, "d", d, 0, m, "a's shape[0] (M)")) ||
        (status = tk__check_dim(function, "d", d, 1, n, "b's shape[0] (N)")))
        return status;
    if (k % k_multiple != 0)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: a: K (shape[1]) is %lld, expected a multiple of %lld (rows "
                        "of A and B must be 16-byte aligned for TMA)",
                        function, (long long)k, (long long)k_multiple);
    if (n % 8 != 0)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: b: N (shape[0]) is %lld, expected a multiple of 8 (rows of D "
                        "must be 16-byte aligned)",
                        function, (long long)n);
    if ((status = tk__check_contiguous(function, "a", a)) ||
        (status = tk__check_contiguous(function, "b", b)) ||
        (status = tk__check_contiguous(function, "d", d)) ||
        (status = tk__check_storage(function, "a", a)) ||
        (status = tk__check_storage(function, "b", b)) ||
        (status = tk__check_storage(function, "d", d)))
        return status;
    return TK_SUCCESS;
}

/* D = 0 for K == 0: there is no product to launch, and a tensor map of an
 * empty A cannot be encoded.  d is contiguous, so it is one byte range. */
static tk_status tk__gemm_zero(const char *function, const tk_tensor *d, tk_stream stream)
{
    const tk__driver_api *api;
    tk_status status = tk__driver(&api);
    if (status != TK_SUCCESS)
        return status;
    size_t bytes = (size_t)d->shape[0] * (size_t)d->shape[1] * tk_dtype_size(d->dtype);
    CUresult result = api->cuMemsetD8Async((CUdeviceptr)(uintptr_t)d->data, 0, bytes,
                                           (CUstream)stream);
    if (result != CUDA_SUCCESS)
        return tk__cuda_fail(TK_ERROR_LAUNCH, result, "%s: clearing d (K is 0)", function);
    return TK_SUCCESS;
}

tk_status tk__gemm_bf16_variant(const tk_tensor *a, const tk_tensor *b, const tk_tensor *d,
                                tk__gemm_variant variant, tk_stream stream)
{
    static const char function[] = "tk_gemm_bf16";
    tk__set_last_instance(NULL);
    int index = 0;
    while (index < TK_COUNT(tk__gemm_bf16_instances) &&
           tk__gemm_bf16_instances[index].variant != variant)
        index++;
    if (index == TK_COUNT(tk__gemm_bf16_instances))
        return tk__fail(TK_ERROR_INVALID_ARGUMENT, "%s: unknown instance variant %d",
                        function, (int)variant);
    tk_status status;
    if ((status = tk__check_operands(function, a, b, d, TK_BF16, 8)))
        return status;
    if (tk__tensor_empty(d))
        return TK_SUCCESS;
    if (a->shape[1] == 0)
        return tk__gemm_zero(function, d, stream);
    tk__set_last_instance(tk__gemm_bf16_instances[index].name);
    if (tk__gemm_bf16_instances[index].launcher)
        return tk__gemm_bf16_instances[index].launcher(a, b, d, stream);
    int32_t sms = 1;
    if ((status = tk__gemm_sm_count(function, &sms)))
        return status;
    return tk__gemm_bf16_instances[index].persistent(a, b, d, sms, stream);
}

tk_status tk_gemm_bf16(const tk_tensor *a, const tk_tensor *b, const tk_tensor *d,
                       tk_stream stream)
{
    /* the persistent kernel with the TMA-store epilogue (3 stages + the
     * whole tile) measured fastest at both benchmark shapes (docs/perf.md:
     * 96.4 / 92.3 % of cuBLAS against 91.9 / 80.1 % for the plain
     * persistent one); the others stay reachable for the tests */
    return tk__gemm_bf16_variant(a, b, d, TK__GEMM_PERSISTENT_STORE, stream);
}

/* sfa as tk_sf_desc(M, K, 1, 128, TK_SF_COL_MAJOR) describes it, and its
 * storage view (KB, align(M, 4)) row-major into *storage. */
static tk_status tk__check_sfa(const char *function, const tk_tensor *sfa, int64_t m,
                               int64_t k, tk_tensor *storage)
{
    tk_status status = tk__check_tensor(function, "sfa", sfa, 2);
    if (status != TK_SUCCESS)
        return status;
    if (sfa->dtype == TK_I32)
        return tk__fail(TK_ERROR_UNSUPPORTED,
                        "%s: sfa: packed UE8M0 scales are not supported; pass f32 scales "
                        "in the TK_SF_COL_MAJOR layout",
                        function);
    tk_tensor expected;
    if (!tk__sf_layout(m, k, 1, TK_GEMM_SCALE_BLOCK, TK_SF_COL_MAJOR, &expected, NULL))
        return tk__fail(TK_ERROR_INVALID_ARGUMENT, "%s: a: too large for a scale tensor",
                        function);
    if (sfa->dtype == TK_F32 && m > 1 && expected.shape[1] > 1 && sfa->strides[0] != 1)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT,
                        "%s: sfa: strides are (%lld, %lld), expected (1, %lld): the "
                        "column-major TMA-aligned layout (TK_SF_COL_MAJOR, see tk_sf_desc)",
                        function, (long long)sfa->strides[0], (long long)sfa->strides[1],
                        (long long)expected.strides[1]);
    if ((status = tk__check_sf_desc(function, "sfa", sfa, &expected, TK_SF_COL_MAJOR,
                                    "a's rows (M)", "ceil(K / 128)")))
        return status;
    int64_t padded = (m + TK_GEMM_SFA_ROW_ALIGN - 1) / TK_GEMM_SFA_ROW_ALIGN *
                     TK_GEMM_SFA_ROW_ALIGN;
    tk_tensor view = {.data = sfa->data, .dtype = TK_F32, .rank = 2,
                      .shape = {expected.shape[1], padded}, .strides = {padded, 1}};
    *storage = view;
    return tk__check_storage(function, "sfa", storage);
}

/* sfb f32 (ceil(N / 128), ceil(K / 128)), any strides. */
static tk_status tk__check_sfb(const char *function, const tk_tensor *sfb, int64_t n,
                               int64_t k)
{
    const tk_dtype scales[] = {TK_F32};
    tk_status status;
    int64_t blocks_n = (n + TK_GEMM_SCALE_BLOCK - 1) / TK_GEMM_SCALE_BLOCK;
    int64_t blocks_k = (k + TK_GEMM_SCALE_BLOCK - 1) / TK_GEMM_SCALE_BLOCK;
    if ((status = tk__check_tensor(function, "sfb", sfb, 2)) ||
        (status = tk__check_dtype(function, "sfb", sfb, scales, 1)) ||
        (status = tk__check_dim(function, "sfb", sfb, 0, blocks_n,
                                "ceil(N / 128): one scale per 128 x 128 block of b")) ||
        (status = tk__check_dim(function, "sfb", sfb, 1, blocks_k,
                                "ceil(K / 128): one scale per 128 x 128 block of b")) ||
        (status = tk__check_storage(function, "sfb", sfb)))
        return status;
    return TK_SUCCESS;
}

tk_status tk__gemm_fp8_blockscaled_variant(const tk_tensor *a, const tk_tensor *sfa,
                                           const tk_tensor *b, const tk_tensor *sfb,
                                           const tk_tensor *d, tk__gemm_variant variant,
                                           tk_stream stream)
{
    static const char function[] = "tk_gemm_fp8_blockscaled";
    tk__set_last_instance(NULL);
    tk_status status;
    int instance = -1;
    for (int i = 0; i < TK_COUNT(tk__gemm_fp8_instances); i++)
        if (tk__gemm_fp8_instances[i].variant == variant)
            instance = i;
    if (instance < 0)
        return tk__fail(TK_ERROR_INVALID_ARGUMENT, "%s: unknown instance variant %d",
                        function, (int)variant);
    if ((status = tk__check_operands(function, a, b, d, TK_E4M3, 16)))
        return status;
    int64_t m = a->shape[0], k = a->shape[1], n = b->shape[0];
    tk_tensor sfa_storage;
    if ((status = tk__check_sfa(function, sfa, m, k, &sfa_storage)) ||
        (status = tk__check_sfb(function, sfb, n, k)))
        return status;
    if (tk__tensor_empty(d))
        return TK_SUCCESS;
    if (k == 0)
        return tk__gemm_zero(function, d, stream);
    /* a single row or column of scales is never stepped over */
    tk_tensor scales_b = *sfb;
    if (scales_b.shape[0] == 1)
        scales_b.strides[0] = scales_b.shape[1];
    if (scales_b.shape[1] == 1)
        scales_b.strides[1] = 1;
    tk__set_last_instance(tk__gemm_fp8_instances[instance].name);
    if (tk__gemm_fp8_instances[instance].launcher)
        return tk__gemm_fp8_instances[instance].launcher(a, &sfa_storage, b, &scales_b, d,
                                                         stream);
    int32_t sms = 1;
    if ((status = tk__gemm_sm_count(function, &sms)))
        return status;
    return tk__gemm_fp8_instances[instance].persistent(a, &sfa_storage, b, &scales_b, d, sms,
                                                       stream);
}

tk_status tk_gemm_fp8_blockscaled(const tk_tensor *a, const tk_tensor *sfa,
                                  const tk_tensor *b, const tk_tensor *sfb,
                                  const tk_tensor *d, tk_stream stream)
{
    /* 192 x 128 tiles on three consumer warpgroups (kernels/gemm_fp8_tall.tk)
     * in bands of 16 tile rows.  H200, 2026-11-30, 8192^3: 1173-1267 TFLOP/s
     * over nine runs, the bands-of-12 instance 1157-1279 over eight (median
     * of all 17: 1228), both 1020-1042 at 4096 x 7168 x 2048; the 128 x 128
     * two-warpgroup store kernel 1074-1172 (docs/perf.md) */
    return tk__gemm_fp8_blockscaled_variant(a, sfa, b, sfb, d,
                                            TK__GEMM_FP8_TALL_PERSISTENT_STORE_BAND16, stream);
}
