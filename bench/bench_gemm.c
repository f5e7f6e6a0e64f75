/*
 * bench_gemm.c -- tkbench rows of the GEMMs (tk_gemm_bf16,
 * tk_gemm_fp8_blockscaled, and gemm_bf16's persistent instance through
 * api_gemm.h) at the shapes, in TFLOP/s against cuBLASLt run on
 * the same inputs in the same process (bench/cublas.c), into its own
 * output (d_ceiling), so that tkbench can interleave its launches with
 * ours without either overwriting what the other's check reads.
 *
 * Inputs are random bf16 values (TileKernels' generator); the fp8 rows
 * quantise them on the GPU with libtk's own casts, per_token_cast (1 x 128,
 * column-major scales) for A and per_block_cast (128 x 128) for B, exactly
 * the producer-consumer pairing of DeepSeek-V3.  A full CPU reference of
 * 8192^3 is out of reach, so the check reads the whole output (every
 * element finite: an unwritten, poisoned element is NaN) and compares a
 * sample of elements (the corners, the last row and column, 1024 random
 * ones) with double-precision dot products: ||out - ref|| / ||ref|| below
 * 2e-3 over the sample.  The cuBLAS ceiling is checked the same way once
 * (for fp8 against the product with unit scales, which is what the
 * per-tensor-scaled _scaled_mm equivalent computes with scales 1); a
 * ceiling that disagrees is dropped with a warning rather than trusted.
 * When cuBLASLt is not found the rows still report our TFLOP/s.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_gemm.h"
#include "bench.h"
#include "cublas.h"
#include "ref_gemm.h"

#define TOLERANCE 2e-3
#define RANDOM_SAMPLES 1024

typedef struct gemm_params {
    tk_dtype input; /* TK_BF16 or TK_E4M3 (block-scaled) */
    int64_t m, n, k;
    tk__gemm_variant variant; /* the instance (api_gemm.h); rows default */
} gemm_params;

typedef struct gemm_state {
    const gemm_params *p;
    CUdeviceptr a, b, d, sfa, sfb, d_ceiling, unit_scales;
    size_t a_bytes, b_bytes, d_bytes;
    ref_sf_shape sfa_shape, sfb_shape;
    void *host_a, *host_b;
    float *host_sfa, *host_sfb;
    uint16_t *host_d;
    tk_tensor ta, tb, td, tsfa, tsfb;
    tkb_cublas_plan *plan;
} gemm_state;

static const gemm_params BF16_8K = {TK_BF16, 8192, 8192, 8192, TK__GEMM_DEFAULT};
static const gemm_params BF16_MOE = {TK_BF16, 4096, 7168, 2048, TK__GEMM_DEFAULT};
static const gemm_params FP8_8K = {TK_E4M3, 8192, 8192, 8192, TK__GEMM_DEFAULT};
static const gemm_params FP8_MOE = {TK_E4M3, 4096, 7168, 2048, TK__GEMM_DEFAULT};
/* gemm_bf16's persistent instance (kernels/gemm_persistent.tk). */
static const gemm_params BF16_8K_PERSISTENT = {TK_BF16, 8192, 8192, 8192, TK__GEMM_PERSISTENT};
static const gemm_params BF16_MOE_PERSISTENT = {TK_BF16, 4096, 7168, 2048, TK__GEMM_PERSISTENT};
static const gemm_params FP8_8K_WIDE = {TK_E4M3, 8192, 8192, 8192, TK__GEMM_WIDE};
static const gemm_params FP8_MOE_WIDE = {TK_E4M3, 4096, 7168, 2048, TK__GEMM_WIDE};
static const gemm_params BF16_8K_BAND16 = {TK_BF16, 8192, 8192, 8192, TK__GEMM_PERSISTENT_BAND16};
static const gemm_params BF16_MOE_BAND16 = {TK_BF16, 4096, 7168, 2048,
                                            TK__GEMM_PERSISTENT_BAND16};
/* gemm_bf16's persistent instances with the TMA-store epilogue
 * (kernels/gemm_bf16_store.tk): 3 stages + the whole tile, 4 stages + a
 * half tile. */
static const gemm_params BF16_8K_STORE = {TK_BF16, 8192, 8192, 8192, TK__GEMM_PERSISTENT_STORE};
static const gemm_params BF16_MOE_STORE = {TK_BF16, 4096, 7168, 2048, TK__GEMM_PERSISTENT_STORE};
static const gemm_params BF16_8K_STORE_HALF = {TK_BF16, 8192, 8192, 8192,
                                               TK__GEMM_PERSISTENT_STORE_HALF};
static const gemm_params BF16_MOE_STORE_HALF = {TK_BF16, 4096, 7168, 2048,
                                                TK__GEMM_PERSISTENT_STORE_HALF};
/* The fp8 cluster instances: two blocks per cluster share one operand
 * tile through TMA multicast (docs/hopper.md 11). */
static const gemm_params FP8_8K_CLUSTER2 = {TK_E4M3, 8192, 8192, 8192, TK__GEMM_CLUSTER2};
static const gemm_params FP8_MOE_CLUSTER2 = {TK_E4M3, 4096, 7168, 2048, TK__GEMM_CLUSTER2};
static const gemm_params FP8_8K_WIDE_CLUSTER2 = {TK_E4M3, 8192, 8192, 8192,
                                                 TK__GEMM_WIDE_CLUSTER2};
static const gemm_params FP8_MOE_WIDE_CLUSTER2 = {TK_E4M3, 4096, 7168, 2048,
                                                  TK__GEMM_WIDE_CLUSTER2};
/* The persistent fp8 instances (kernels/gemm_fp8_persistent.tk): one
 * block per SM walks the tiles, so the pipeline fill and the epilogue of
 * one tile overlap the next tile's loads. */
static const gemm_params FP8_8K_PERSISTENT = {TK_E4M3, 8192, 8192, 8192, TK__GEMM_FP8_PERSISTENT};
static const gemm_params FP8_MOE_PERSISTENT = {TK_E4M3, 4096, 7168, 2048, TK__GEMM_FP8_PERSISTENT};
static const gemm_params FP8_8K_PERSISTENT_BAND16 = {TK_E4M3, 8192, 8192, 8192,
                                                     TK__GEMM_FP8_PERSISTENT_BAND16};
static const gemm_params FP8_MOE_PERSISTENT_BAND16 = {TK_E4M3, 4096, 7168, 2048,
                                                      TK__GEMM_FP8_PERSISTENT_BAND16};
static const gemm_params FP8_8K_PERSISTENT_CLUSTER2 = {TK_E4M3, 8192, 8192, 8192,
                                                       TK__GEMM_FP8_PERSISTENT_CLUSTER2};
static const gemm_params FP8_MOE_PERSISTENT_CLUSTER2 = {TK_E4M3, 4096, 7168, 2048,
                                                        TK__GEMM_FP8_PERSISTENT_CLUSTER2};
static const gemm_params FP8_8K_WIDE_PERSISTENT = {TK_E4M3, 8192, 8192, 8192,
                                                   TK__GEMM_FP8_WIDE_PERSISTENT};
static const gemm_params FP8_MOE_WIDE_PERSISTENT = {TK_E4M3, 4096, 7168, 2048,
                                                    TK__GEMM_FP8_WIDE_PERSISTENT};
static const gemm_params FP8_8K_WIDE_PERSISTENT_CLUSTER2 = {TK_E4M3, 8192, 8192, 8192,
                                                            TK__GEMM_FP8_WIDE_PERSISTENT_CLUSTER2};
static const gemm_params FP8_MOE_WIDE_PERSISTENT_CLUSTER2 = {TK_E4M3, 4096, 7168, 2048,
                                                             TK__GEMM_FP8_WIDE_PERSISTENT_CLUSTER2};
/* The persistent fp8 instances with the TMA-store epilogue
 * (kernels/gemm_fp8_store.tk): 128 x 128 in bands of 16 with 3 stages and
 * a half tile; 256 x 128 with 3 stages and the whole tile. */
static const gemm_params FP8_8K_PERSISTENT_STORE = {TK_E4M3, 8192, 8192, 8192,
                                                    TK__GEMM_FP8_PERSISTENT_STORE};
static const gemm_params FP8_MOE_PERSISTENT_STORE = {TK_E4M3, 4096, 7168, 2048,
                                                     TK__GEMM_FP8_PERSISTENT_STORE};
static const gemm_params FP8_8K_WIDE_PERSISTENT_STORE = {TK_E4M3, 8192, 8192, 8192,
                                                         TK__GEMM_FP8_WIDE_PERSISTENT_STORE};
static const gemm_params FP8_MOE_WIDE_PERSISTENT_STORE = {TK_E4M3, 4096, 7168, 2048,
                                                          TK__GEMM_FP8_WIDE_PERSISTENT_STORE};
/* Experiments on the TMA-store kernels (kernels/gemm_fp8_store.tk): 128 x
 * 128 with the B scales loaded one step ahead, in bands of 16 and of 8;
 * 128 x 192 tiles with one K block per step and 4 stages, with one partial
 * product (promotions in lockstep) or with two column halves (promotions
 * overlapped). */
static const gemm_params FP8_8K_STORE_PREFETCH = {TK_E4M3, 8192, 8192, 8192,
                                                  TK__GEMM_FP8_PERSISTENT_STORE_PREFETCH};
static const gemm_params FP8_MOE_STORE_PREFETCH = {TK_E4M3, 4096, 7168, 2048,
                                                   TK__GEMM_FP8_PERSISTENT_STORE_PREFETCH};
static const gemm_params FP8_8K_STORE_PREFETCH_BAND8 = {
    TK_E4M3, 8192, 8192, 8192, TK__GEMM_FP8_PERSISTENT_STORE_PREFETCH_BAND8};
static const gemm_params FP8_MOE_STORE_PREFETCH_BAND8 = {
    TK_E4M3, 4096, 7168, 2048, TK__GEMM_FP8_PERSISTENT_STORE_PREFETCH_BAND8};
static const gemm_params FP8_8K_STORE_N192 = {TK_E4M3, 8192, 8192, 8192,
                                              TK__GEMM_FP8_PERSISTENT_STORE_N192};
static const gemm_params FP8_MOE_STORE_N192 = {TK_E4M3, 4096, 7168, 2048,
                                               TK__GEMM_FP8_PERSISTENT_STORE_N192};
static const gemm_params FP8_8K_STORE_N192_HALVES = {TK_E4M3, 8192, 8192, 8192,
                                                     TK__GEMM_FP8_PERSISTENT_STORE_N192_HALVES};
static const gemm_params FP8_MOE_STORE_N192_HALVES = {TK_E4M3, 4096, 7168, 2048,
                                                      TK__GEMM_FP8_PERSISTENT_STORE_N192_HALVES};

static void teardown(const tkb_context *ctx, void *opaque) {
    gemm_state *s = opaque;
    tkb_cublas_plan_destroy(s->plan);
    tkb_free(ctx, s->a);
    tkb_free(ctx, s->b);
    tkb_free(ctx, s->d);
    tkb_free(ctx, s->sfa);
    tkb_free(ctx, s->sfb);
    tkb_free(ctx, s->d_ceiling);
    tkb_free(ctx, s->unit_scales);
    free(s->host_a);
    free(s->host_b);
    free(s->host_sfa);
    free(s->host_sfb);
    free(s->host_d);
    free(s);
}

/* a and b as e4m3 with their scales, made on the device by libtk's casts
 * from random bf16 sources, and copied back for the reference. */
static bool quantise_inputs(const tkb_context *ctx, gemm_state *s) {
    const gemm_params *p = s->p;
    size_t sfa_bytes = 0, sfb_bytes = 0;
    tk_tensor sfa_desc, sfb_desc;
    if (tk_sf_desc(p->m, p->k, 1, 128, TK_SF_COL_MAJOR, &sfa_desc, &sfa_bytes) ||
        tk_sf_desc(p->n, p->k, 128, 128, TK_SF_ROW_MAJOR, &sfb_desc, &sfb_bytes) ||
        !ref_sf_shape_of(p->m, p->k, 1, 128, TK_SF_COL_MAJOR, &s->sfa_shape) ||
        !ref_sf_shape_of(p->n, p->k, 128, 128, TK_SF_ROW_MAJOR, &s->sfb_shape))
        return false;
    s->host_sfa = calloc(sfa_bytes / 4 + 1, 4);
    s->host_sfb = calloc(sfb_bytes / 4 + 1, 4);
    uint16_t *source = malloc((size_t)(p->m > p->n ? p->m : p->n) * (size_t)p->k * 2);
    CUdeviceptr device_source = 0;
    bool ok = s->host_sfa && s->host_sfb && source &&
              tkb_alloc(ctx, &s->sfa, sfa_bytes) && tkb_alloc(ctx, &s->sfb, sfb_bytes) &&
              tkb_alloc(ctx, &device_source, (size_t)(p->m > p->n ? p->m : p->n) *
                                                 (size_t)p->k * 2) &&
              tkb_upload(ctx, s->sfa, s->host_sfa, sfa_bytes); /* padding rows: zeros */
    sfa_desc.data = (void *)(uintptr_t)s->sfa;
    sfb_desc.data = (void *)(uintptr_t)s->sfb;
    s->tsfa = sfa_desc;
    s->tsfb = sfb_desc;
    if (ok) {
        int64_t shape[2] = {p->m, p->k};
        ref_fill_rand_float(source, TK_BF16, p->m, p->k, -2, 2, ctx->seed + 1);
        tk_tensor x = tkb_tensor(device_source, TK_BF16, 2, shape, NULL);
        ok = tkb_upload(ctx, device_source, source, (size_t)(p->m * p->k) * 2) &&
             tk_per_token_cast(&x, 128, false, TK_SF_COL_MAJOR, &s->ta, &s->tsfa, NULL) ==
                 TK_SUCCESS;
    }
    if (ok) {
        int64_t shape[2] = {p->n, p->k};
        ref_fill_rand_float(source, TK_BF16, p->n, p->k, -2, 2, ctx->seed + 2);
        tk_tensor w = tkb_tensor(device_source, TK_BF16, 2, shape, NULL);
        ok = tkb_upload(ctx, device_source, source, (size_t)(p->n * p->k) * 2) &&
             tk_per_block_cast(&w, TK_E4M3, 128, 128, false, TK_SF_ROW_MAJOR, &s->tb,
                               &s->tsfb, NULL) == TK_SUCCESS;
    }
    ok = ok && ctx->cu->cuCtxSynchronize() == CUDA_SUCCESS &&
         tkb_download(ctx, s->host_a, s->a, s->a_bytes) &&
         tkb_download(ctx, s->host_b, s->b, s->b_bytes) &&
         tkb_download(ctx, s->host_sfa, s->sfa, sfa_bytes) &&
         tkb_download(ctx, s->host_sfb, s->sfb, sfb_bytes);
    tkb_free(ctx, device_source);
    free(source);
    return ok;
}

/* The cuBLAS plan on d_ceiling; without cuBLAS the row has no ceiling. */
static void plan_ceiling(const tkb_context *ctx, gemm_state *s) {
    static bool reported;
    char why[600] = "";
    const gemm_params *p = s->p;
    if (!tkb_cublas_available(why, sizeof why)) {
        if (!reported)
            printf("%s\n", why);
        reported = true;
        return;
    }
    const float ones[2] = {1.0f, 1.0f};
    if (!tkb_alloc(ctx, &s->d_ceiling, s->d_bytes) || !tkb_alloc(ctx, &s->unit_scales, 8) ||
        !tkb_upload(ctx, s->unit_scales, ones, sizeof ones))
        return;
    s->plan = tkb_cublas_plan_create(ctx->cu, ctx->flush, p->input, p->m, p->n, p->k, s->a,
                                     s->b, s->d_ceiling, s->unit_scales, s->unit_scales + 4,
                                     why, sizeof why);
    if (!s->plan)
        fprintf(stderr, "tkbench: no cuBLAS ceiling for gemm %ldx%ldx%ld: %s\n", (long)p->m,
                (long)p->n, (long)p->k, why);
}

static bool setup(const tkb_context *ctx, const tkb_case *c, void **state, double *bytes) {
    gemm_state *s = calloc(1, sizeof *s);
    if (!s)
        return false;
    *state = s;
    const gemm_params *p = c->params;
    s->p = p;
    size_t element = tk_dtype_size(p->input);
    s->a_bytes = (size_t)(p->m * p->k) * element;
    s->b_bytes = (size_t)(p->n * p->k) * element;
    s->d_bytes = (size_t)(p->m * p->n) * 2;
    s->host_a = malloc(s->a_bytes);
    s->host_b = malloc(s->b_bytes);
    s->host_d = malloc(s->d_bytes);
    if (!s->host_a || !s->host_b || !s->host_d || !tkb_alloc(ctx, &s->a, s->a_bytes) ||
        !tkb_alloc(ctx, &s->b, s->b_bytes) || !tkb_alloc(ctx, &s->d, s->d_bytes) ||
        !tkb_poison(ctx, s->d, s->d_bytes))
        return false;
    int64_t a_shape[2] = {p->m, p->k}, b_shape[2] = {p->n, p->k}, d_shape[2] = {p->m, p->n};
    s->ta = tkb_tensor(s->a, p->input, 2, a_shape, NULL);
    s->tb = tkb_tensor(s->b, p->input, 2, b_shape, NULL);
    s->td = tkb_tensor(s->d, TK_BF16, 2, d_shape, NULL);
    if (p->input == TK_E4M3) {
        if (!quantise_inputs(ctx, s))
            return false;
    } else {
        ref_fill_rand_float(s->host_a, TK_BF16, p->m, p->k, -2, 2, ctx->seed + 1);
        ref_fill_rand_float(s->host_b, TK_BF16, p->n, p->k, -2, 2, ctx->seed + 2);
        if (!tkb_upload(ctx, s->a, s->host_a, s->a_bytes) ||
            !tkb_upload(ctx, s->b, s->host_b, s->b_bytes))
            return false;
    }
    plan_ceiling(ctx, s);
    *bytes = (double)(s->a_bytes + s->b_bytes + s->d_bytes);
    if (p->input == TK_E4M3) /* logical scale sizes */
        *bytes += 4.0 * (double)(s->sfa_shape.nbm * s->sfa_shape.nbk +
                                 s->sfb_shape.nbm * s->sfb_shape.nbk);
    return true;
}

static tk_status launch(void *opaque) {
    gemm_state *s = opaque;
    /* every row names its instance (the public entry points pick one of
     * them: tk_gemm_bf16 the persistent one with the TMA-store epilogue,
     * tk_gemm_fp8_blockscaled the persistent 128 x 128 one with the
     * TMA-store epilogue) */
    if (s->p->input == TK_E4M3)
        return tk__gemm_fp8_blockscaled_variant(&s->ta, &s->tsfa, &s->tb, &s->tsfb, &s->td,
                                                s->p->variant, NULL);
    return tk__gemm_bf16_variant(&s->ta, &s->tb, &s->td, s->p->variant, NULL);
}

static tk_status ceiling(void *opaque) {
    gemm_state *s = opaque;
    if (!s->plan)
        return tk__fail(TK_ERROR_UNSUPPORTED, "no cuBLAS ceiling");
    return tkb_cublas_plan_run(s->plan);
}

/* Element (i, j) of the exact product; unit_scales: the fp8 product of
 * the codes alone (what the per-tensor-scaled ceiling computes). */
static double reference_element(const gemm_state *s, int64_t i, int64_t j, bool unit_scales,
                                const float *ones, const ref_sf_shape *ones_shape) {
    const gemm_params *p = s->p;
    ref_gemm_problem problem = {.m = p->m, .n = p->n, .k = p->k, .a = s->host_a,
                                .b = s->host_b};
    if (p->input == TK_BF16)
        return ref_gemm_bf16_element(&problem, i, j);
    problem.sfa = unit_scales ? ones : s->host_sfa;
    problem.sfa_shape = unit_scales ? ones_shape[0] : s->sfa_shape;
    problem.sfb = unit_scales ? ones : s->host_sfb;
    problem.sfb_shape = unit_scales ? ones_shape[1] : s->sfb_shape;
    return ref_gemm_fp8_element(&problem, i, j);
}

/* Checks `device` (m x n bf16): every element finite, the sample within
 * TOLERANCE.  Writes the reason into detail on failure. */
static bool check_output(const tkb_context *ctx, gemm_state *s, CUdeviceptr device,
                         bool unit_scales, char *detail, size_t size) {
    const gemm_params *p = s->p;
    if (!tkb_download(ctx, s->host_d, device, s->d_bytes)) {
        snprintf(detail, size, "download failed");
        return false;
    }
    int64_t count = p->m * p->n;
    for (int64_t e = 0; e < count; e++)
        if ((s->host_d[e] & 0x7F80) == 0x7F80) {
            snprintf(detail, size, "element [%ld, %ld] is not finite (0x%04x)",
                     (long)(e / p->n), (long)(e % p->n), s->host_d[e]);
            return false;
        }
    int64_t kb = (p->k + 127) / 128, nb = (p->n + 127) / 128;
    float *ones = malloc((size_t)(p->m > nb ? p->m : nb) * (size_t)kb * 4 + 4);
    ref_sf_shape ones_shape[2];
    if (!ones || !ref_sf_shape_of(p->m, p->k, 1, 128, TK_SF_ROW_MAJOR, &ones_shape[0]) ||
        !ref_sf_shape_of(p->n, p->k, 128, 128, TK_SF_ROW_MAJOR, &ones_shape[1])) {
        free(ones);
        snprintf(detail, size, "out of host memory");
        return false;
    }
    for (int64_t e = 0; e < (p->m > nb ? p->m : nb) * kb; e++)
        ones[e] = 1.0f;
    /* corners, the last row and column, random elements */
    enum { FIXED = 6, SAMPLES = FIXED + RANDOM_SAMPLES };
    int64_t rows[SAMPLES] = {0, 0, p->m - 1, p->m - 1, p->m - 1, p->m / 2};
    int64_t cols[SAMPLES] = {0, p->n - 1, 0, p->n - 1, p->n / 2, p->n - 1};
    ref_rng rng = ref_rng_seed(ctx->seed, 99);
    for (int t = FIXED; t < SAMPLES; t++) {
        rows[t] = (int64_t)(ref_rng_next(&rng) % (uint64_t)p->m);
        cols[t] = (int64_t)(ref_rng_next(&rng) % (uint64_t)p->n);
    }
    uint16_t got[SAMPLES];
    float want[SAMPLES];
    for (int t = 0; t < SAMPLES; t++) {
        got[t] = s->host_d[rows[t] * p->n + cols[t]];
        want[t] = (float)reference_element(s, rows[t], cols[t], unit_scales, ones, ones_shape);
    }
    free(ones);
    double error = ref_gemm_relative_error(got, want, 1, SAMPLES, SAMPLES);
    if (!(error < TOLERANCE)) {
        snprintf(detail, size, "relative error %.3g over %d sampled elements (limit %g)", error,
                 SAMPLES, TOLERANCE);
        return false;
    }
    return true;
}

/* Runs the ceiling once and checks it like our output; false (with the
 * reason in why) when it fails or computes something else. */
static bool check_ceiling(const tkb_context *ctx, gemm_state *s, char *why, size_t size) {
    if (tkb_cublas_plan_run(s->plan) != TK_SUCCESS) {
        snprintf(why, size, "%s", tk_last_error());
        return false;
    }
    if (ctx->cu->cuCtxSynchronize() != CUDA_SUCCESS) {
        snprintf(why, size, "cublasLtMatmul failed on the device");
        return false;
    }
    return check_output(ctx, s, s->d_ceiling, true, why, size);
}

static bool verify(const tkb_context *ctx, void *opaque, char *detail, size_t size) {
    gemm_state *s = opaque;
    if (!check_output(ctx, s, s->d, false, detail, size))
        return false;
    char why[200];
    if (s->plan && !check_ceiling(ctx, s, why, sizeof why)) {
        fprintf(stderr, "tkbench: cuBLAS ceiling dropped for gemm %ldx%ldx%ld: %s\n",
                (long)s->p->m, (long)s->p->n, (long)s->p->k, why);
        tkb_cublas_plan_destroy(s->plan);
        s->plan = NULL;
    }
    return true;
}

#define FLOPS(m, n, k) (2.0 * (double)(m) * (double)(n) * (double)(k))

static const tkb_case CASES[] = {
    {"gemm_bf16", "8192x8192x8192", "bf16 f32-acc ->bf16, tile per block", setup, launch,
     verify, teardown, &BF16_8K},
    {"gemm_bf16", "4096x7168x2048", "bf16 f32-acc ->bf16, tile per block", setup, launch,
     verify, teardown, &BF16_MOE},
    {"gemm_fp8_blockscaled", "8192x8192x8192", "e4m3 1x128,128x128 ->bf16", setup, launch,
     verify, teardown, &FP8_8K},
    {"gemm_fp8_blockscaled", "4096x7168x2048", "e4m3 1x128,128x128 ->bf16", setup, launch,
     verify, teardown, &FP8_MOE},
    {"gemm_bf16_persistent", "8192x8192x8192", "bf16 bands of 8", setup, launch,
     verify, teardown, &BF16_8K_PERSISTENT},
    {"gemm_bf16_persistent", "4096x7168x2048", "bf16 bands of 8", setup, launch,
     verify, teardown, &BF16_MOE_PERSISTENT},
    {"gemm_fp8_blockscaled", "8192x8192x8192", "e4m3 256x128 tiles", setup, launch, verify,
     teardown, &FP8_8K_WIDE},
    {"gemm_fp8_blockscaled", "4096x7168x2048", "e4m3 256x128 tiles", setup, launch, verify,
     teardown, &FP8_MOE_WIDE},
    {"gemm_bf16_persistent", "8192x8192x8192", "bf16 bands of 16", setup, launch, verify,
     teardown, &BF16_8K_BAND16},
    {"gemm_bf16_persistent", "4096x7168x2048", "bf16 bands of 16", setup, launch, verify,
     teardown, &BF16_MOE_BAND16},
    {"gemm_bf16_persistent", "8192x8192x8192", "bf16 (tk_gemm_bf16) TMA-store epilogue, 3 stages + tile",
     setup, launch, verify, teardown, &BF16_8K_STORE},
    {"gemm_bf16_persistent", "4096x7168x2048", "bf16 (tk_gemm_bf16) TMA-store epilogue, 3 stages + tile",
     setup, launch, verify, teardown, &BF16_MOE_STORE},
    {"gemm_bf16_persistent", "8192x8192x8192", "bf16 TMA-store epilogue, 4 stages + half tile",
     setup, launch, verify, teardown, &BF16_8K_STORE_HALF},
    {"gemm_bf16_persistent", "4096x7168x2048", "bf16 TMA-store epilogue, 4 stages + half tile",
     setup, launch, verify, teardown, &BF16_MOE_STORE_HALF},
    {"gemm_fp8_blockscaled", "8192x8192x8192", "e4m3 128x128 cluster 2, B multicast", setup,
     launch, verify, teardown, &FP8_8K_CLUSTER2},
    {"gemm_fp8_blockscaled", "4096x7168x2048", "e4m3 128x128 cluster 2, B multicast", setup,
     launch, verify, teardown, &FP8_MOE_CLUSTER2},
    {"gemm_fp8_blockscaled", "8192x8192x8192", "e4m3 256x128 cluster 2, A multicast", setup,
     launch, verify, teardown, &FP8_8K_WIDE_CLUSTER2},
    {"gemm_fp8_blockscaled", "4096x7168x2048", "e4m3 256x128 cluster 2, A multicast", setup,
     launch, verify, teardown, &FP8_MOE_WIDE_CLUSTER2},
    {"gemm_fp8_blockscaled", "8192x8192x8192", "e4m3 128x128 persistent, bands of 8", setup,
     launch, verify, teardown, &FP8_8K_PERSISTENT},
    {"gemm_fp8_blockscaled", "4096x7168x2048", "e4m3 128x128 persistent, bands of 8", setup,
     launch, verify, teardown, &FP8_MOE_PERSISTENT},
    {"gemm_fp8_blockscaled", "8192x8192x8192", "e4m3 128x128 persistent, bands of 16", setup,
     launch, verify, teardown, &FP8_8K_PERSISTENT_BAND16},
    {"gemm_fp8_blockscaled", "4096x7168x2048", "e4m3 128x128 persistent, bands of 16", setup,
     launch, verify, teardown, &FP8_MOE_PERSISTENT_BAND16},
    {"gemm_fp8_blockscaled", "8192x8192x8192", "e4m3 128x128 persistent, B multicast", setup,
     launch, verify, teardown, &FP8_8K_PERSISTENT_CLUSTER2},
    {"gemm_fp8_blockscaled", "4096x7168x2048", "e4m3 128x128 persistent, B multicast", setup,
     launch, verify, teardown, &FP8_MOE_PERSISTENT_CLUSTER2},
    {"gemm_fp8_blockscaled", "8192x8192x8192", "e4m3 256x128 persistent, bands of 8", setup,
     launch, verify, teardown, &FP8_8K_WIDE_PERSISTENT},
    {"gemm_fp8_blockscaled", "4096x7168x2048", "e4m3 256x128 persistent, bands of 8", setup,
     launch, verify, teardown, &FP8_MOE_WIDE_PERSISTENT},
    {"gemm_fp8_blockscaled", "8192x8192x8192", "e4m3 256x128 persistent, A multicast", setup,
     launch, verify, teardown, &FP8_8K_WIDE_PERSISTENT_CLUSTER2},
    {"gemm_fp8_blockscaled", "4096x7168x2048", "e4m3 256x128 persistent, A multicast", setup,
     launch, verify, teardown, &FP8_MOE_WIDE_PERSISTENT_CLUSTER2},
    {"gemm_fp8_blockscaled", "8192x8192x8192",
     "e4m3 (tk_gemm_fp8_blockscaled) 128x128 persistent, TMA-store epilogue", setup,
     launch, verify, teardown, &FP8_8K_PERSISTENT_STORE},
    {"gemm_fp8_blockscaled", "4096x7168x2048",
     "e4m3 (tk_gemm_fp8_blockscaled) 128x128 persistent, TMA-store epilogue", setup,
     launch, verify, teardown, &FP8_MOE_PERSISTENT_STORE},
    {"gemm_fp8_blockscaled", "8192x8192x8192",
     "e4m3 128x192 persistent, TMA-store epilogue, 1 K block x 4 stages", setup,
     launch, verify, teardown, &FP8_8K_STORE_N192},
    {"gemm_fp8_blockscaled", "4096x7168x2048",
     "e4m3 128x192 persistent, TMA-store epilogue, 1 K block x 4 stages", setup,
     launch, verify, teardown, &FP8_MOE_STORE_N192},
    {"gemm_fp8_blockscaled", "8192x8192x8192",
     "e4m3 128x192 persistent, TMA-store epilogue, column halves overlapped", setup,
     launch, verify, teardown, &FP8_8K_STORE_N192_HALVES},
    {"gemm_fp8_blockscaled", "4096x7168x2048",
     "e4m3 128x192 persistent, TMA-store epilogue, column halves overlapped", setup,
     launch, verify, teardown, &FP8_MOE_STORE_N192_HALVES},
    {"gemm_fp8_blockscaled", "8192x8192x8192",
     "e4m3 128x128 persistent, TMA-store epilogue, B scales prefetched", setup,
     launch, verify, teardown, &FP8_8K_STORE_PREFETCH},
    {"gemm_fp8_blockscaled", "4096x7168x2048",
     "e4m3 128x128 persistent, TMA-store epilogue, B scales prefetched", setup,
     launch, verify, teardown, &FP8_MOE_STORE_PREFETCH},
    {"gemm_fp8_blockscaled", "8192x8192x8192",
     "e4m3 128x128 persistent, TMA-store epilogue, B scales prefetched, bands of 8", setup,
     launch, verify, teardown, &FP8_8K_STORE_PREFETCH_BAND8},
    {"gemm_fp8_blockscaled", "4096x7168x2048",
     "e4m3 128x128 persistent, TMA-store epilogue, B scales prefetched, bands of 8", setup,
     launch, verify, teardown, &FP8_MOE_STORE_PREFETCH_BAND8},
    {"gemm_fp8_blockscaled", "8192x8192x8192",
     "e4m3 256x128 persistent, TMA-store epilogue", setup,
     launch, verify, teardown, &FP8_8K_WIDE_PERSISTENT_STORE},
    {"gemm_fp8_blockscaled", "4096x7168x2048",
     "e4m3 256x128 persistent, TMA-store epilogue", setup,
     launch, verify, teardown, &FP8_MOE_WIDE_PERSISTENT_STORE},
};
TKB_REGISTER(CASES)

static const tkb_compute COMPUTE[] = {
    {&CASES[0], FLOPS(8192, 8192, 8192), ceiling},
    {&CASES[1], FLOPS(4096, 7168, 2048), ceiling},
    {&CASES[2], FLOPS(8192, 8192, 8192), ceiling},
    {&CASES[3], FLOPS(4096, 7168, 2048), ceiling},
    {&CASES[4], FLOPS(8192, 8192, 8192), ceiling},
    {&CASES[5], FLOPS(4096, 7168, 2048), ceiling},
    {&CASES[6], FLOPS(8192, 8192, 8192), ceiling},
    {&CASES[7], FLOPS(4096, 7168, 2048), ceiling},
    {&CASES[8], FLOPS(8192, 8192, 8192), ceiling},
    {&CASES[9], FLOPS(4096, 7168, 2048), ceiling},
    {&CASES[10], FLOPS(8192, 8192, 8192), ceiling},
    {&CASES[11], FLOPS(4096, 7168, 2048), ceiling},
    {&CASES[12], FLOPS(8192, 8192, 8192), ceiling},
    {&CASES[13], FLOPS(4096, 7168, 2048), ceiling},
    {&CASES[14], FLOPS(8192, 8192, 8192), ceiling},
    {&CASES[15], FLOPS(4096, 7168, 2048), ceiling},
    {&CASES[16], FLOPS(8192, 8192, 8192), ceiling},
    {&CASES[17], FLOPS(4096, 7168, 2048), ceiling},
    {&CASES[18], FLOPS(8192, 8192, 8192), ceiling},
    {&CASES[19], FLOPS(4096, 7168, 2048), ceiling},
    {&CASES[20], FLOPS(8192, 8192, 8192), ceiling},
    {&CASES[21], FLOPS(4096, 7168, 2048), ceiling},
    {&CASES[22], FLOPS(8192, 8192, 8192), ceiling},
    {&CASES[23], FLOPS(4096, 7168, 2048), ceiling},
    {&CASES[24], FLOPS(8192, 8192, 8192), ceiling},
    {&CASES[25], FLOPS(4096, 7168, 2048), ceiling},
    {&CASES[26], FLOPS(8192, 8192, 8192), ceiling},
    {&CASES[27], FLOPS(4096, 7168, 2048), ceiling},
    {&CASES[28], FLOPS(8192, 8192, 8192), ceiling},
    {&CASES[29], FLOPS(4096, 7168, 2048), ceiling},
    {&CASES[30], FLOPS(8192, 8192, 8192), ceiling},
    {&CASES[31], FLOPS(4096, 7168, 2048), ceiling},
    {&CASES[32], FLOPS(8192, 8192, 8192), ceiling},
    {&CASES[33], FLOPS(4096, 7168, 2048), ceiling},
    {&CASES[34], FLOPS(8192, 8192, 8192), ceiling},
    {&CASES[35], FLOPS(4096, 7168, 2048), ceiling},
    {&CASES[36], FLOPS(8192, 8192, 8192), ceiling},
    {&CASES[37], FLOPS(4096, 7168, 2048), ceiling},
    {&CASES[38], FLOPS(8192, 8192, 8192), ceiling},
    {&CASES[39], FLOPS(4096, 7168, 2048), ceiling},
};
TKB_REGISTER_COMPUTE(COMPUTE)
