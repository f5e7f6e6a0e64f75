/*
 * tkbench.c -- times every kernel libtk ships at TileKernels' benchmark
 * shapes and reports achieved bandwidth against the device's own
 * device-to-device copy rate.
 *
 * Method (docs/perf.md): the copy rate is measured in the same run
 * (cuMemcpyDtoD of a 4 GiB buffer, bytes = 2 x size, median of 20).  Each
 * kernel is launched once to warm up, its output checked bit-exactly
 * against the CPU reference (a fast wrong kernel must not pass), then
 * timed --iters times (default 100) with CUDA events around each launch,
 * the L2 flushed before each one outside the timed region (by reading a
 * 256 MiB buffer, bench/flush.c; --flush memset for the older memset
 * flush, which leaves dirty lines the timed kernel must write back); the
 * median is reported.  Bytes moved = every input
 * read once + every output written once (scale factors included, at their
 * logical size, as TileKernels' count_bytes counts them).
 *
 * The built-in rows (transposes, per_token_cast, cast_back) are in
 * bench/builtin.c; kernel families add theirs from bench/bench_<family>.c
 * through bench.h's registry (TKB_REGISTER), timed the same way.
 * Compute-bound rows (the GEMMs) carry their flop count and a vendor
 * ceiling (cuBLAS) timed interleaved with them, launch by launch, after
 * an equal warm-up (the clock falls under sustained GEMM load, so timing
 * one series after the other favours whichever runs first): they get a
 * second table in TFLOP/s, both medians and % of the ceiling, with the
 * SM clock and power read through NVML (bench/clock.c) under load, and
 * more CSV columns.
 *
 * Usage: tkbench [--filter SUBSTR] [--iters N] [--csv FILE] [--flush read|read-last|memset]
 * Exit status: 0 all checks passed, 1 a check or launch failed, 2 no
 * device or a setup error.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "clock.h"
#include "flush.h"
#include "reference.h"
#include "tk.h"
#include "tk_internal.h"
#include "tkbench.h"

#define COPY_RUNS 20
#define DEFAULT_ITERS 100

/* Reports a failed driver call and returns false. */
bool tkb_cu_ok(const bench_context *ctx, CUresult result, const char *what) {
    if (result == CUDA_SUCCESS)
        return true;
    const char *message = "?";
    if (ctx->api->cuGetErrorString)
        ctx->api->cuGetErrorString(result, &message);
    fprintf(stderr, "tkbench: %s failed: %d (%s)\n", what, (int)result, message);
    return false;
}

static int compare_floats(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Sorted sample -> the value at fraction q (nearest rank). */
static double quantile(const float *sorted, int count, double q) {
    int index = (int)(q * (count - 1) + 0.5);
    return sorted[index];
}

/* ---- the copy ceiling ------------------------------------------------------ */

static bool measure_copy(bench_context *ctx) {
    CUdeviceptr source = 0, destination = 0;
    bool ok = CU(ctx, cuMemAlloc(&source, COPY_BYTES)) &&
              CU(ctx, cuMemAlloc(&destination, COPY_BYTES)) &&
              CU(ctx, cuMemsetD32(source, 0x3F800000u, COPY_BYTES / 4)) &&
              CU(ctx, cuMemcpyDtoD(destination, source, COPY_BYTES)) && /* warm-up */
              CU(ctx, cuCtxSynchronize());
    float times[COPY_RUNS];
    for (int i = 0; ok && i < COPY_RUNS; i++)
        ok = CU(ctx, cuEventRecord(ctx->start, NULL)) &&
             CU(ctx, cuMemcpyDtoD(destination, source, COPY_BYTES)) &&
             CU(ctx, cuEventRecord(ctx->stop, NULL)) &&
             CU(ctx, cuEventSynchronize(ctx->stop)) &&
             CU(ctx, cuEventElapsedTime(&times[i], ctx->start, ctx->stop));
    if (source)
        ctx->api->cuMemFree(source);
    if (destination)
        ctx->api->cuMemFree(destination);
    if (!ok)
        return false;
    qsort(times, COPY_RUNS, sizeof times[0], compare_floats);
    double median_ms = quantile(times, COPY_RUNS, 0.5);
    ctx->copy_gbs = 2.0 * (double)COPY_BYTES / (median_ms * 1e-3) / 1e9;
    printf("device-to-device copy, 4 GiB: %.1f us median of %d, %.0f GB/s (read + write)\n",
           median_ms * 1e3, COPY_RUNS, ctx->copy_gbs);
    return true;
}

/* ---- timing a row ------------------------------------------------------------- */

/* One timed launch: the L2 flushed outside the timed region (the start
 * event waits for the memset on the same stream), one event pair around
 * the launch, *ms its time.  False on a failed launch (the reason in
 * detail) or driver call (reported on stderr). */
static bool time_one(bench_context *ctx, launch_fn launch_once, void *state, unsigned pattern,
                     float *ms, char *detail, size_t size) {
    if (!tkb_flush_run(&ctx->flush, pattern) || !CU(ctx, cuEventRecord(ctx->start, NULL)))
        return false;
    tk_status status = launch_once(state);
    if (status != TK_SUCCESS) {
        snprintf(detail, size, "timed launch: %s: %s", tk_status_string(status),
                 tk_last_error());
        return false;
    }
    return CU(ctx, cuEventRecord(ctx->stop, NULL)) && CU(ctx, cuEventSynchronize(ctx->stop)) &&
           CU(ctx, cuEventElapsedTime(ms, ctx->start, ctx->stop));
}

/* Sorts count times (ms) and keeps their median, min, p20 and p80. */
static void summarise(float *times, int count, timing *t) {
    qsort(times, (size_t)count, sizeof *times, compare_floats);
    t->median_us = quantile(times, count, 0.5) * 1e3;
    t->min_us = times[0] * 1e3;
    t->p20_us = quantile(times, count, 0.2) * 1e3;
    t->p80_us = quantile(times, count, 0.8) * 1e3;
}

/* The copy of a same-size row: one cuMemcpyDtoD of bytes / 2. */
typedef struct same_copy {
    bench_context *ctx;
    CUdeviceptr source, destination;
    size_t bytes;
} same_copy;

static tk_status launch_same_copy(void *state) {
    same_copy *c = state;
    return c->ctx->api->cuMemcpyDtoD(c->destination, c->source, c->bytes) == CUDA_SUCCESS
               ? TK_SUCCESS
               : TK_ERROR_LAUNCH;
}

/* The floor of a small problem: the 4 GiB copy rate is a steady state
 * that a kernel of a few microseconds cannot reach (its launch, ramp and
 * tail are a large part of its time), so memory rows also time a copy
 * of the same bytes with the same flush and events.  A failed
 * allocation or copy leaves same_copy_us at 0; the row stands. */
static void time_same_copy(bench_context *ctx, result *r) {
    same_copy c = {ctx, 0, 0, (size_t)(r->bytes / 2) & ~(size_t)255};
    float *times = malloc((size_t)ctx->iters * sizeof *times);
    char detail[200];
    bool ok = times && c.bytes > 0 &&
              ctx->api->cuMemAlloc(&c.source, c.bytes) == CUDA_SUCCESS &&
              ctx->api->cuMemAlloc(&c.destination, c.bytes) == CUDA_SUCCESS &&
              ctx->api->cuMemsetD8(c.source, 0x3C, c.bytes) == CUDA_SUCCESS;
    for (int i = 0; ok && i < ctx->iters; i++)
        ok = time_one(ctx, launch_same_copy, &c, (unsigned)i, &times[i], detail, sizeof detail);
    if (ok) {
        timing t;
        summarise(times, ctx->iters, &t);
        r->same_copy_us = t.median_us;
    }
    if (c.source)
        ctx->api->cuMemFree(c.source);
    if (c.destination)
        ctx->api->cuMemFree(c.destination);
    free(times);
}

bool tkb_time_launches(bench_context *ctx, launch_fn launch_once, void *state, result *r) {
    float *times = malloc((size_t)ctx->iters * sizeof *times);
    bool ok = times != NULL;
    for (int i = 0; ok && i < ctx->iters; i++)
        ok = time_one(ctx, launch_once, state, (unsigned)i, &times[i], r->detail,
                      sizeof r->detail);
    if (ok) {
        summarise(times, ctx->iters, &r->time);
        r->gbs = r->bytes / (r->time.median_us * 1e-6) / 1e9;
        r->percent_copy = ctx->copy_gbs > 0 ? 100.0 * r->gbs / ctx->copy_gbs : 0;
        time_same_copy(ctx, r);
    } else {
        r->check = "error";
    }
    free(times);
    return ok;
}

/* ---- registered cases (bench.h) ------------------------------------------- */

#define MAX_REGISTERED 256
static const tkb_case *registered[MAX_REGISTERED];
static int nregistered;

void tkb_register(const tkb_case *cases, int count)
{
    for (int i = 0; i < count && nregistered < MAX_REGISTERED; i++)
        registered[nregistered++] = &cases[i];
}

static const tkb_compute *compute_rows[MAX_REGISTERED];
static int ncompute;

void tkb_register_compute(const tkb_compute *rows, int count)
{
    for (int i = 0; i < count && ncompute < MAX_REGISTERED; i++)
        compute_rows[ncompute++] = &rows[i];
}

/* The compute description of a case, or NULL for a memory-bound row. */
static const tkb_compute *compute_of(const tkb_case *c)
{
    for (int i = 0; i < ncompute; i++)
        if (compute_rows[i]->row == c)
            return compute_rows[i];
    return NULL;
}

static void describe_case(const tkb_case *c, result *r) {
    snprintf(r->shape, sizeof r->shape, "%s", c->shape);
    snprintf(r->config, sizeof r->config, "%s", c->config);
    snprintf(r->label, sizeof r->label, "%s %s %s", c->kernel, r->shape, r->config);
    r->kernel = c->kernel;
}

bool tkb_alloc(const tkb_context *ctx, CUdeviceptr *ptr, size_t bytes)
{
    *ptr = 0;
    CUresult r = ctx->cu->cuMemAlloc(ptr, bytes ? bytes : 16);
    if (r != CUDA_SUCCESS)
        fprintf(stderr, "tkbench: cuMemAlloc(%zu) failed (%d)\n", bytes, (int)r);
    return r == CUDA_SUCCESS;
}

void tkb_free(const tkb_context *ctx, CUdeviceptr ptr)
{
    if (ptr)
        ctx->cu->cuMemFree(ptr);
}

bool tkb_upload(const tkb_context *ctx, CUdeviceptr dst, const void *src, size_t bytes)
{
    return !bytes || ctx->cu->cuMemcpyHtoD(dst, src, bytes) == CUDA_SUCCESS;
}

bool tkb_download(const tkb_context *ctx, void *dst, CUdeviceptr src, size_t bytes)
{
    return !bytes || ctx->cu->cuMemcpyDtoH(dst, src, bytes) == CUDA_SUCCESS;
}

bool tkb_poison(const tkb_context *ctx, CUdeviceptr ptr, size_t bytes)
{
    return !bytes || ctx->cu->cuMemsetD8(ptr, 0xFF, bytes) == CUDA_SUCCESS;
}

tk_tensor tkb_tensor(CUdeviceptr data, tk_dtype dtype, int rank, const int64_t *shape,
                     const int64_t *strides)
{
    tk_tensor t;
    memset(&t, 0, sizeof t);
    t.data = device_address(data);
    t.dtype = dtype;
    t.rank = rank;
    int64_t stride = 1;
    for (int d = rank - 1; d >= 0; d--) {
        t.shape[d] = shape[d];
        t.strides[d] = strides ? strides[d] : stride;
        stride *= shape[d] > 0 ? shape[d] : 1;
    }
    return t;
}

/* Our kernel's and the ceiling's warm-up launches before a compute row's
 * timing (each side also ran once for the check). */
#define COMPUTE_WARMUP 3

/* Reads the clock while a pair of untimed launches keeps the GPU busy
 * (an idle GPU's clock rises again at once, so a reading after the last
 * synchronisation would flatter it).  Without NVML, or when a launch
 * fails, the row simply has no clock; false only when the device fails. */
static bool sample_clock_under_load(bench_context *ctx, const tkb_case *c,
                                    const tkb_compute *compute, bool with_ceiling, void *state,
                                    result *r) {
    tkb_clock_sample sample;
    if (c->launch(state) == TK_SUCCESS &&
        (!with_ceiling || compute->ceiling(state) == TK_SUCCESS) && tkb_clock_read(&sample)) {
        r->sm_clock_mhz = (int)sample.sm_mhz;
        r->power_w = sample.power_mw / 1000.0;
        r->clock_limit = sample.limit;
    }
    return CU(ctx, cuCtxSynchronize());
}

/* The timed part of a compute row.  The GPU's clock falls under sustained
 * GEMM load (the power limit), so timing one kernel's series after the
 * other's makes whichever runs later look slower.  Here both sides get
 * COMPUTE_WARMUP untimed launches, alternating, then --iters rounds of
 * (flush, ours timed, flush, ceiling timed): both see the same clocks.
 * A ceiling that does not run (no cuBLAS: TK_ERROR_UNSUPPORTED, silently;
 * any other failure with a stderr note) leaves ours timed alone.  Fills
 * r->time, r->ceiling and the throughputs; false (r->check = "error")
 * when our kernel or the driver fails. */
static bool time_compute(bench_context *ctx, const tkb_case *c, const tkb_compute *compute,
                         void *state, result *r) {
    float *ours = malloc((size_t)ctx->iters * sizeof *ours);
    float *theirs = malloc((size_t)ctx->iters * sizeof *theirs);
    bool ok = ours && theirs, with_ceiling = compute->ceiling != NULL;
    char why[200] = "";
    for (int w = 0; ok && w < COMPUTE_WARMUP; w++) {
        tk_status status = c->launch(state);
        if (status != TK_SUCCESS) {
            snprintf(r->detail, sizeof r->detail, "warm-up launch: %s: %s",
                     tk_status_string(status), tk_last_error());
            ok = false;
        } else if (with_ceiling && (status = compute->ceiling(state)) != TK_SUCCESS) {
            if (status != TK_ERROR_UNSUPPORTED)
                fprintf(stderr, "tkbench: %s: no ceiling, its warm-up launch failed: %s\n",
                        r->label, tk_last_error());
            with_ceiling = false;
        }
    }
    ok = ok && CU(ctx, cuCtxSynchronize());
    for (int i = 0; ok && i < ctx->iters; i++) {
        ok = time_one(ctx, c->launch, state, 2u * (unsigned)i, &ours[i], r->detail,
                      sizeof r->detail);
        if (ok && with_ceiling &&
            !time_one(ctx, compute->ceiling, state, 2u * (unsigned)i + 1, &theirs[i], why,
                      sizeof why)) {
            fprintf(stderr, "tkbench: %s: ceiling dropped at timed launch %d: %s\n", r->label,
                    i, why[0] ? why : "a driver call failed");
            with_ceiling = false;
        }
    }
    ok = ok && sample_clock_under_load(ctx, c, compute, with_ceiling, state, r);
    if (ok) {
        summarise(ours, ctx->iters, &r->time);
        r->gbs = r->bytes / (r->time.median_us * 1e-6) / 1e9;
        r->percent_copy = ctx->copy_gbs > 0 ? 100.0 * r->gbs / ctx->copy_gbs : 0;
        r->tflops = compute->flops / (r->time.median_us * 1e-6) / 1e12;
        if (with_ceiling) {
            summarise(theirs, ctx->iters, &r->ceiling);
            r->ceiling_tflops = compute->flops / (r->ceiling.median_us * 1e-6) / 1e12;
        }
    } else {
        r->check = "error";
    }
    free(ours);
    free(theirs);
    return ok;
}

/* Runs a registered case: set up, one launch checked, then timed as
 * builtin.c times its rows (tkb_time_launches), or by time_compute for
 * a compute row. */
static bool run_case(bench_context *ctx, const tkb_case *c, result *r)
{
    tkb_context tctx = {ctx->api, INPUT_SEED, &ctx->flush};
    void *state = NULL;
    r->check = "error";
    r->bytes = 0;
    memset(&r->time, 0, sizeof r->time);
    memset(&r->ceiling, 0, sizeof r->ceiling);
    r->gbs = r->percent_copy = r->same_copy_us = r->tflops = r->ceiling_tflops = r->power_w = 0;
    r->sm_clock_mhz = 0;
    r->clock_limit = "";
    r->detail[0] = 0;
    if (!c->setup(&tctx, c, &state, &r->bytes)) {
        snprintf(r->detail, sizeof r->detail, "setup failed: %s", tk_last_error());
        if (state)
            c->teardown(&tctx, state);
        return false;
    }
    tk_status status = c->launch(state);
    if (status != TK_SUCCESS || !CU(ctx, cuCtxSynchronize())) {
        snprintf(r->detail, sizeof r->detail, "launch: %s: %s", tk_status_string(status),
                 tk_last_error());
        c->teardown(&tctx, state);
        return false;
    }
    bool checked = c->verify(&tctx, state, r->detail, sizeof r->detail);
    r->check = checked ? "ok" : "FAIL";
    const tkb_compute *compute = compute_of(c);
    bool ok = compute && compute->flops > 0 ? time_compute(ctx, c, compute, state, r)
                                            : tkb_time_launches(ctx, c->launch, state, r);
    c->teardown(&tctx, state);
    return ok && checked;
}

/* ---- driver ------------------------------------------------------------------- */

static void usage(FILE *out) {
    fprintf(out, "usage: tkbench [--filter SUBSTR] [--iters N] [--csv FILE] [--flush read|read-last|memset]\n"
                 "  --filter SUBSTR  run only benchmarks whose label contains SUBSTR\n"
                 "  --iters N        timed runs per kernel (default %d, at least 1)\n"
                 "  --csv FILE       also write the results as CSV\n"
                 "  --flush MODE     how the L2 is emptied before each timed launch:\n"
                 "                   read-last (default: evicts evict_last lines too, then\n"
                 "                   reads; clean lines), read (reads only) or memset (dirty lines)\n",
            DEFAULT_ITERS);
}

int main(int argc, char **argv) {
    const char *filter = NULL, *csv_path = NULL;
    tkb_flush_mode flush_mode = TKB_FLUSH_READ_LAST;
    bench_context ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.iters = DEFAULT_ITERS;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--filter") && i + 1 < argc) {
            filter = argv[++i];
        } else if (!strcmp(argv[i], "--iters") && i + 1 < argc) {
            ctx.iters = atoi(argv[++i]);
            if (ctx.iters < 1) {
                fprintf(stderr, "tkbench: --iters needs a positive count\n");
                return 2;
            }
        } else if (!strcmp(argv[i], "--csv") && i + 1 < argc) {
            csv_path = argv[++i];
        } else if (!strcmp(argv[i], "--flush") && i + 1 < argc) {
            const char *mode = argv[++i];
            if (!strcmp(mode, "read")) {
                flush_mode = TKB_FLUSH_READ;
            } else if (!strcmp(mode, "memset")) {
                flush_mode = TKB_FLUSH_MEMSET;
            } else if (!strcmp(mode, "read-last")) {
                flush_mode = TKB_FLUSH_READ_LAST;
            } else {
                fprintf(stderr, "tkbench: --flush takes read, read-last or memset, not '%s'\n",
                        mode);
                return 2;
            }
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (tk_device_check() != TK_SUCCESS || tk__driver(&ctx.api) != TK_SUCCESS) {
        fprintf(stderr, "tkbench: no usable CUDA device: %s\n", tk_last_error());
        return 2;
    }
    CUdevice device = 0;
    char name[128] = "?";
    int sms = 0;
    if (ctx.api->cuCtxGetDevice && ctx.api->cuCtxGetDevice(&device) == CUDA_SUCCESS) {
        ctx.api->cuDeviceGetName(name, sizeof name, device);
        ctx.api->cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device);
    }
    printf("tkbench: %s, %d SMs; %d timed runs per kernel, L2 flushed before each (%s); "
           "reference threads %d\n",
           name, sms, ctx.iters, tkb_flush_name(flush_mode), ref_thread_count());
    tkb_report_clocks(&ctx, device);
    if (!CU(&ctx, cuEventCreate(&ctx.start, CU_EVENT_DEFAULT)) ||
        !CU(&ctx, cuEventCreate(&ctx.stop, CU_EVENT_DEFAULT)) ||
        !tkb_flush_init(&ctx.flush, ctx.api, flush_mode) || !measure_copy(&ctx))
        return 2;

    size_t builtin_count = tkb_builtin_count();
    size_t total = builtin_count + (size_t)nregistered;
    result *results = calloc(total, sizeof *results);
    bool *selected = calloc(total, sizeof *selected);
    if (!results || !selected)
        return 2;
    bool all_ok = true;
    int ran = 0;
    for (size_t i = 0; i < total; i++) {
        if (i < builtin_count)
            tkb_builtin_describe(i, &results[i]);
        else
            describe_case(registered[i - builtin_count], &results[i]);
        selected[i] = !filter || strstr(results[i].label, filter);
        if (!selected[i])
            continue;
        fprintf(stderr, "tkbench: %s ...\n", results[i].label);
        bool ok = i < builtin_count ? tkb_builtin_run(&ctx, i, &results[i])
                                    : run_case(&ctx, registered[i - builtin_count], &results[i]);
        if (!ok)
            all_ok = false;
        ran++;
    }

    tkb_report_memory_table(results, selected, total);
    tkb_report_compute_table(results, selected, total);
    printf("copy ceiling %.0f GB/s; %d kernel(s) run; %s\n", ctx.copy_gbs, ran,
           all_ok ? "all checks passed" : "SOME CHECKS FAILED");

    if (csv_path) {
        FILE *csv = fopen(csv_path, "w");
        if (!csv) {
            fprintf(stderr, "tkbench: cannot write %s\n", csv_path);
            return 2;
        }
        tkb_report_csv(csv, &ctx, results, selected, total);
        fclose(csv);
    }
    free(results);
    free(selected);
    tkb_flush_free(&ctx.flush);
    ctx.api->cuEventDestroy(ctx.start);
    ctx.api->cuEventDestroy(ctx.stop);
    return all_ok ? 0 : 1;
}
