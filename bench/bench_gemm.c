/*
 * bench_gemm.c -- tkbench rows of the GEMMs (tk_gemm_bf16,
 * tk_gemm_fp8_blockscaled, and their other instances through api_gemm.h:
 * one table, each instance at both of the shapes), in TFLOP/s
 * against cuBLASLt run on the same inputs in the same process
 * (bench/cublas.c), into its own output (d_ceiling), so that tkbench can
 * interleave its launches with ours without either overwriting what the
 * other's check reads.
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
    tk__gemm_variant variant; /* the instance (api_gemm.h) */
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
     * tk_gemm_fp8_blockscaled the persistent 192 x 128 one on three
     * consumer warpgroups) */
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

/* The instances benchmarked, each at every shape of SHAPES; the labels
 * are what docs/perf.md and --filter name, so a kept row keeps its label
 * word for word.  The public entry points: tk_gemm_bf16 runs
 * TK__GEMM_PERSISTENT_STORE, tk_gemm_fp8_blockscaled
 * TK__GEMM_FP8_TALL_PERSISTENT_STORE_BAND16 (their labels say so). */
static const struct {
    const char *kernel;
    tk_dtype input;
    tk__gemm_variant variant;
    const char *config;
} INSTANCES[] = {
    {"gemm_bf16", TK_BF16, TK__GEMM_DEFAULT, "bf16 f32-acc ->bf16, tile per block"},
    {"gemm_fp8_blockscaled", TK_E4M3, TK__GEMM_DEFAULT, "e4m3 1x128,128x128 ->bf16"},
    /* gemm_bf16's persistent instances (kernels/gemm_persistent.tk) */
    {"gemm_bf16_persistent", TK_BF16, TK__GEMM_PERSISTENT, "bf16 bands of 8"},
    {"gemm_bf16_persistent", TK_BF16, TK__GEMM_PERSISTENT_BAND16, "bf16 bands of 16"},
    /* ... with the TMA-store epilogue (kernels/gemm_bf16_store.tk) */
    {"gemm_bf16_persistent", TK_BF16, TK__GEMM_PERSISTENT_STORE,
     "bf16 (tk_gemm_bf16) TMA-store epilogue, 3 stages + tile"},
    {"gemm_bf16_persistent", TK_BF16, TK__GEMM_PERSISTENT_STORE_HALF,
     "bf16 TMA-store epilogue, 4 stages + half tile"},
    /* two blocks per cluster share B's tile through TMA multicast
     * (docs/hopper.md 11) */
    {"gemm_fp8_blockscaled", TK_E4M3, TK__GEMM_CLUSTER2, "e4m3 128x128 cluster 2, B multicast"},
    /* one block per SM walks the tiles, TMA-store epilogue: 128 x 128
     * tiles on two consumer warpgroups (kernels/gemm_fp8_store.tk) */
    {"gemm_fp8_blockscaled", TK_E4M3, TK__GEMM_FP8_PERSISTENT_STORE,
     "e4m3 128x128 persistent, TMA-store epilogue"},
    /* 192 x 128 tiles on three consumer warpgroups (kernels/gemm_fp8_tall.tk) */
    {"gemm_fp8_blockscaled", TK_E4M3, TK__GEMM_FP8_TALL_PERSISTENT_STORE,
     "e4m3 192x128 3 WGs, bands of 12, TMA-store epilogue"},
    {"gemm_fp8_blockscaled", TK_E4M3, TK__GEMM_FP8_TALL_PERSISTENT_STORE_BAND16,
     "e4m3 (tk_gemm_fp8_blockscaled) 192x128 3 WGs, bands of 16, TMA-store epilogue"},
};

/* The shapes: a square one and a MoE expert's. */
static const struct {
    const char *name;
    int64_t m, n, k;
} SHAPES[] = {{"8192x8192x8192", 8192, 8192, 8192}, {"4096x7168x2048", 4096, 7168, 2048}};

#define INSTANCE_COUNT (sizeof INSTANCES / sizeof INSTANCES[0])
#define SHAPE_COUNT (sizeof SHAPES / sizeof SHAPES[0])
#define ROW_COUNT (INSTANCE_COUNT * SHAPE_COUNT)

/* Filled before main (tkbench keeps pointers to them), instance by
 * instance, each at every shape. */
static gemm_params params[ROW_COUNT];
static tkb_case cases[ROW_COUNT];
static tkb_compute compute[ROW_COUNT];

__attribute__((constructor)) static void register_rows(void) {
    size_t row = 0;
    for (size_t i = 0; i < INSTANCE_COUNT; i++)
        for (size_t shape = 0; shape < SHAPE_COUNT; shape++, row++) {
            params[row] = (gemm_params){INSTANCES[i].input, SHAPES[shape].m, SHAPES[shape].n,
                                        SHAPES[shape].k, INSTANCES[i].variant};
            cases[row] = (tkb_case){INSTANCES[i].kernel, SHAPES[shape].name,
                                    INSTANCES[i].config, setup, launch, verify, teardown,
                                    &params[row]};
            compute[row] = (tkb_compute){&cases[row],
                                         2.0 * (double)SHAPES[shape].m *
                                             (double)SHAPES[shape].n * (double)SHAPES[shape].k,
                                         ceiling};
        }
    tkb_register(cases, (int)ROW_COUNT);
    tkb_register_compute(compute, (int)ROW_COUNT);
}
