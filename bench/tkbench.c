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
 * The rows of this file (transposes, per_token_cast, cast_back) are
 * built in; kernel families add theirs from bench/bench_<family>.c
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

#define COPY_BYTES ((size_t)4 << 30)  /* the copy-rate buffer: 4 GiB      */
#define COPY_RUNS 20
#define DEFAULT_ITERS 100
#define INPUT_SEED 20240601

typedef enum bench_kind { BENCH_TRANSPOSE, BENCH_PER_TOKEN_CAST, BENCH_CAST_BACK } bench_kind;

/* One benchmark row.  For transposes rows x cols is each batch's input;
 * for casts (rows, cols) is (tokens, hidden). */
typedef struct bench {
    const char *name;
    bench_kind kind;
    tk_dtype in_dtype, out_dtype;
    int64_t batches, rows, cols;
    bool batched;
    int block_m, block_k;
    bool round_sf;
    tk_sf_layout layout;
} bench;

/* TileKernels' benchmark shapes (perf-anchors.md); the per_token_cast
 * with packed UE8M0 scales is the headline. */
static const bench BENCHES[] = {
    {"batched_transpose", BENCH_TRANSPOSE, TK_BF16, TK_BF16, 32, 8064, 7168, true, 0, 0, false, 0},
    {"batched_transpose", BENCH_TRANSPOSE, TK_E4M3, TK_E4M3, 32, 8064, 7168, true, 0, 0, false, 0},
    {"batched_transpose", BENCH_TRANSPOSE, TK_F32, TK_F32, 8, 8064, 7168, true, 0, 0, false, 0},
    {"transpose", BENCH_TRANSPOSE, TK_BF16, TK_BF16, 1, 8064, 7168, false, 0, 0, false, 0},
    {"per_token_cast", BENCH_PER_TOKEN_CAST, TK_BF16, TK_E4M3, 1, 8001, 7168, false, 1, 128,
     true, TK_SF_PACKED_UE8M0},
    {"per_token_cast", BENCH_PER_TOKEN_CAST, TK_BF16, TK_E4M3, 1, 8001, 7168, false, 1, 128,
     false, TK_SF_ROW_MAJOR},
    {"per_token_cast", BENCH_PER_TOKEN_CAST, TK_BF16, TK_E4M3, 1, 8001, 7168, false, 1, 32,
     true, TK_SF_PACKED_UE8M0},
    {"per_token_cast", BENCH_PER_TOKEN_CAST, TK_F32, TK_E4M3, 1, 8001, 7168, false, 1, 128,
     true, TK_SF_PACKED_UE8M0},
    {"cast_back", BENCH_CAST_BACK, TK_E4M3, TK_BF16, 1, 8001, 7168, false, 1, 128, true,
     TK_SF_ROW_MAJOR},
    {"cast_back", BENCH_CAST_BACK, TK_E4M3, TK_BF16, 1, 8001, 7168, false, 128, 128, true,
     TK_SF_ROW_MAJOR},
    {"cast_back", BENCH_CAST_BACK, TK_E4M3, TK_BF16, 1, 8001, 7168, false, 1, 128, true,
     TK_SF_PACKED_UE8M0},
    {"cast_back", BENCH_CAST_BACK, TK_E4M3, TK_F32, 1, 8001, 7168, false, 1, 128, true,
     TK_SF_ROW_MAJOR},
};
#define NUM_BENCHES (sizeof BENCHES / sizeof BENCHES[0])

/* Statistics of one series of timed launches, in microseconds. */
typedef struct timing {
    double median_us, min_us, p20_us, p80_us;
} timing;

typedef struct result {
    const char *kernel;
    char label[160]; /* kernel shape config, what --filter matches */
    char shape[48], config[64];
    double bytes;
    timing time;    /* our kernel */
    timing ceiling; /* compute rows: the vendor launches interleaved with ours */
    double gbs, percent_copy;
    /* memory rows: the median time of a device-to-device copy moving the
     * same bytes (bytes / 2 read, bytes / 2 written), timed the same way
     * right after the kernel; 0 = not measured */
    double same_copy_us;
    double tflops, ceiling_tflops; /* compute-bound rows; 0 = none */
    /* compute rows: the SM clock (MHz), board power and what limits the
     * clock, read under load right after the timing; 0 and "" = unknown */
    int sm_clock_mhz;
    double power_w;
    const char *clock_limit;
    const char *check; /* "ok", "FAIL", "error" */
    char detail[200];
} result;

/* Everything one run needs; passed around instead of globals. */
typedef struct bench_context {
    const tk__driver_api *api;
    tkb_flush flush;
    CUevent start, stop;
    int iters;
    double copy_gbs;
} bench_context;

static const char *dtype_name(tk_dtype dtype) {
    switch (dtype) {
    case TK_F32: return "f32";
    case TK_BF16: return "bf16";
    case TK_E4M3: return "e4m3";
    default: return "?";
    }
}

static const char *layout_name(tk_sf_layout layout) {
    switch (layout) {
    case TK_SF_ROW_MAJOR: return "row f32";
    case TK_SF_COL_MAJOR: return "col f32";
    case TK_SF_PACKED_UE8M0: return "packed ue8m0";
    }
    return "?";
}

/* Reports a failed driver call and returns false. */
static bool cu_ok(const bench_context *ctx, CUresult result, const char *what) {
    if (result == CUDA_SUCCESS)
        return true;
    const char *message = "?";
    if (ctx->api->cuGetErrorString)
        ctx->api->cuGetErrorString(result, &message);
    fprintf(stderr, "tkbench: %s failed: %d (%s)\n", what, (int)result, message);
    return false;
}
#define CU(ctx, call) cu_ok((ctx), (ctx)->api->call, #call)

static int compare_floats(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Sorted sample -> the value at fraction q (nearest rank). */
static double quantile(const float *sorted, int count, double q) {
    int index = (int)(q * (count - 1) + 0.5);
    return sorted[index];
}

static void *device_address(CUdeviceptr ptr) { return (void *)(uintptr_t)ptr; }

static tk_tensor tensor_nd(CUdeviceptr data, tk_dtype dtype, int rank, const int64_t *shape,
                           const int64_t *strides) {
    tk_tensor t;
    memset(&t, 0, sizeof t);
    t.data = device_address(data);
    t.dtype = dtype;
    t.rank = rank;
    for (int i = 0; i < rank; i++) {
        t.shape[i] = shape[i];
        t.strides[i] = strides[i];
    }
    return t;
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

/* ---- one benchmark ------------------------------------------------------------ */

/* Device and host buffers of one benchmark; launch() reads them. */
typedef struct bench_buffers {
    const bench *b;
    CUdeviceptr x, sf, out;
    size_t x_bytes, sf_bytes, out_bytes;
    void *host_x, *host_sf, *host_out, *host_want;
    ref_sf_shape sf_shape;
} bench_buffers;

static tk_status launch(const bench_buffers *buf) {
    const bench *b = buf->b;
    if (b->kind == BENCH_TRANSPOSE) {
        if (b->batched) {
            int64_t xs[3] = {b->batches, b->rows, b->cols};
            int64_t xt[3] = {b->rows * b->cols, b->cols, 1};
            int64_t os[3] = {b->batches, b->cols, b->rows};
            int64_t ot[3] = {b->rows * b->cols, b->rows, 1};
            tk_tensor x = tensor_nd(buf->x, b->in_dtype, 3, xs, xt);
            tk_tensor out = tensor_nd(buf->out, b->out_dtype, 3, os, ot);
            return tk_batched_transpose(&x, &out, NULL);
        }
        int64_t xs[2] = {b->rows, b->cols}, xt[2] = {b->cols, 1};
        int64_t os[2] = {b->cols, b->rows}, ot[2] = {b->rows, 1};
        tk_tensor x = tensor_nd(buf->x, b->in_dtype, 2, xs, xt);
        tk_tensor out = tensor_nd(buf->out, b->out_dtype, 2, os, ot);
        return tk_transpose(&x, &out, NULL);
    }
    int64_t shape[2] = {b->rows, b->cols}, strides[2] = {b->cols, 1};
    tk_tensor sf;
    size_t sf_bytes;
    tk_status status = tk_sf_desc(b->rows, b->cols, b->block_m, b->block_k, b->layout, &sf,
                                  &sf_bytes);
    if (status != TK_SUCCESS)
        return status;
    sf.data = device_address(buf->sf);
    tk_tensor x = tensor_nd(buf->x, b->in_dtype, 2, shape, strides);
    tk_tensor out = tensor_nd(buf->out, b->out_dtype, 2, shape, strides);
    if (b->kind == BENCH_PER_TOKEN_CAST)
        return tk_per_token_cast(&x, b->block_k, b->round_sf, b->layout, &out, &sf, NULL);
    return tk_cast_back(&x, &sf, b->block_m, b->block_k, &out, NULL);
}

/* Bytes one call moves: inputs read once, outputs written once, scale
 * factors at their logical size (nbm x nbk f32, or nbm x ceil(nbk/4) i32). */
static double bytes_moved(const bench_buffers *buf) {
    const bench *b = buf->b;
    double elements = (double)b->batches * (double)b->rows * (double)b->cols;
    double sf = 0;
    if (b->kind != BENCH_TRANSPOSE)
        sf = (double)buf->sf_shape.shape[0] * (double)buf->sf_shape.shape[1] * 4.0;
    return elements * (double)(tk_dtype_size(b->in_dtype) + tk_dtype_size(b->out_dtype)) + sf;
}

/* Fills the host inputs (and, for cast_back, quantises them first). */
static bool make_inputs(bench_buffers *buf) {
    const bench *b = buf->b;
    int64_t elements = b->batches * b->rows * b->cols;
    if (b->kind == BENCH_TRANSPOSE) {
        if (b->in_dtype == TK_E4M3)
            ref_fill_rand_e4m3(buf->host_x, elements, INPUT_SEED);
        else
            ref_fill_rand_float(buf->host_x, b->in_dtype, b->batches * b->rows, b->cols, -10, 10,
                                INPUT_SEED);
        return true;
    }
    if (b->kind == BENCH_PER_TOKEN_CAST) {
        ref_fill_rand_float(buf->host_x, b->in_dtype, b->rows, b->cols, -10, 10, INPUT_SEED);
        return true;
    }
    /* cast_back reads what a block cast of random bf16 values produces */
    uint16_t *source = malloc((size_t)elements * 2);
    if (!source)
        return false;
    ref_fill_rand_float(source, TK_BF16, b->rows, b->cols, -10, 10, INPUT_SEED);
    memset(buf->host_sf, 0, buf->sf_bytes);
    bool ok = ref_cast_e4m3(source, TK_BF16, b->rows, b->cols, b->cols, b->block_m, b->block_k,
                            b->round_sf, b->layout, buf->host_x, buf->host_sf);
    free(source);
    return ok;
}

/* The reference output, into host_want (and, for per_token_cast, the
 * scales into a second buffer after it). */
static bool compute_reference(const bench_buffers *buf, void *want_sf) {
    const bench *b = buf->b;
    switch (b->kind) {
    case BENCH_TRANSPOSE:
        ref_batched_transpose(buf->host_x, buf->host_want, tk_dtype_size(b->in_dtype),
                              b->batches, b->rows, b->cols, b->cols, b->rows * b->cols);
        return true;
    case BENCH_PER_TOKEN_CAST:
        return ref_per_token_cast_e4m3(buf->host_x, b->in_dtype, b->rows, b->cols, b->cols,
                                       b->block_k, b->round_sf, b->layout, buf->host_want,
                                       want_sf);
    case BENCH_CAST_BACK:
        return ref_cast_back_e4m3(buf->host_x, b->rows, b->cols, buf->host_sf, b->layout,
                                  b->block_m, b->block_k, b->out_dtype, buf->host_want);
    }
    return false;
}

/* Downloads the kernel's output and compares it with the reference;
 * writes a description of the first mismatch into detail. */
static bool verify(const bench_context *ctx, bench_buffers *buf, char *detail, size_t size) {
    const bench *b = buf->b;
    unsigned char *want_sf = NULL, *got_sf = NULL;
    bool ok = CU(ctx, cuMemcpyDtoH(buf->host_out, buf->out, buf->out_bytes));
    if (ok && b->kind == BENCH_PER_TOKEN_CAST) {
        want_sf = calloc(buf->sf_bytes ? buf->sf_bytes : 1, 1);
        got_sf = malloc(buf->sf_bytes ? buf->sf_bytes : 1);
        ok = want_sf && got_sf && CU(ctx, cuMemcpyDtoH(got_sf, buf->sf, buf->sf_bytes));
    }
    if (ok && !compute_reference(buf, want_sf)) {
        snprintf(detail, size, "the reference rejected the arguments");
        ok = false;
    }
    if (ok) {
        size_t first = ref_first_difference(buf->host_out, buf->host_want, buf->out_bytes);
        if (first != SIZE_MAX) {
            size_t element_size = tk_dtype_size(b->out_dtype);
            snprintf(detail, size, "output differs from the reference at element %zu",
                     first / element_size);
            ok = false;
        }
    }
    if (ok && want_sf) {
        /* only the bytes that hold a scale; padding is the kernel's */
        const ref_sf_shape *shape = &buf->sf_shape;
        size_t entry = ref_sf_entry_bytes(shape);
        for (int64_t i = 0; ok && i < shape->nbm; i++)
            for (int64_t k = 0; ok && k < shape->nbk; k++) {
                size_t offset = ref_sf_offset(shape, i, k);
                if (memcmp(got_sf + offset, want_sf + offset, entry) != 0) {
                    snprintf(detail, size, "scale of block (%ld, %ld) differs", (long)i,
                             (long)k);
                    ok = false;
                }
            }
    }
    free(want_sf);
    free(got_sf);
    return ok;
}

static void describe(const bench *b, result *r) {
    if (b->kind == BENCH_TRANSPOSE) {
        if (b->batched)
            snprintf(r->shape, sizeof r->shape, "%ldx%ldx%ld", (long)b->batches, (long)b->rows,
                     (long)b->cols);
        else
            snprintf(r->shape, sizeof r->shape, "%ldx%ld", (long)b->rows, (long)b->cols);
        snprintf(r->config, sizeof r->config, "%s", dtype_name(b->in_dtype));
    } else {
        snprintf(r->shape, sizeof r->shape, "%ldx%ld", (long)b->rows, (long)b->cols);
        snprintf(r->config, sizeof r->config, "%s->%s %dx%d %s%s", dtype_name(b->in_dtype),
                 dtype_name(b->out_dtype), b->block_m, b->block_k, layout_name(b->layout),
                 b->round_sf ? " round" : "");
    }
    snprintf(r->label, sizeof r->label, "%s %s %s", b->name, r->shape, r->config);
    r->kernel = b->name;
}

static void describe_case(const tkb_case *c, result *r) {
    snprintf(r->shape, sizeof r->shape, "%s", c->shape);
    snprintf(r->config, sizeof r->config, "%s", c->config);
    snprintf(r->label, sizeof r->label, "%s %s %s", c->kernel, r->shape, r->config);
    r->kernel = c->kernel;
}

static bool alloc_buffers(const bench_context *ctx, bench_buffers *buf) {
    const bench *b = buf->b;
    int64_t elements = b->batches * b->rows * b->cols;
    buf->x_bytes = (size_t)elements * tk_dtype_size(b->in_dtype);
    buf->out_bytes = (size_t)elements * tk_dtype_size(b->out_dtype);
    buf->sf_bytes = 0;
    if (b->kind != BENCH_TRANSPOSE) {
        if (!ref_sf_shape_of(b->rows, b->cols, b->block_m, b->block_k, b->layout, &buf->sf_shape))
            return false;
        buf->sf_bytes = buf->sf_shape.bytes;
    }
    buf->host_x = malloc(buf->x_bytes);
    buf->host_out = malloc(buf->out_bytes);
    buf->host_want = malloc(buf->out_bytes);
    buf->host_sf = malloc(buf->sf_bytes ? buf->sf_bytes : 1);
    if (!buf->host_x || !buf->host_out || !buf->host_want || !buf->host_sf) {
        fprintf(stderr, "tkbench: out of host memory\n");
        return false;
    }
    return CU(ctx, cuMemAlloc(&buf->x, buf->x_bytes)) &&
           CU(ctx, cuMemAlloc(&buf->out, buf->out_bytes)) &&
           CU(ctx, cuMemAlloc(&buf->sf, buf->sf_bytes ? buf->sf_bytes : 4));
}

static void free_buffers(const bench_context *ctx, bench_buffers *buf) {
    if (buf->x)
        ctx->api->cuMemFree(buf->x);
    if (buf->out)
        ctx->api->cuMemFree(buf->out);
    if (buf->sf)
        ctx->api->cuMemFree(buf->sf);
    free(buf->host_x);
    free(buf->host_out);
    free(buf->host_want);
    free(buf->host_sf);
}

typedef tk_status (*launch_fn)(void *state);

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

/* The timed part of a memory-bound row: --iters launches, each through
 * time_one; fills r's statistics.  Returns false (r->check = "error") on
 * failure. */
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

static bool time_launches(bench_context *ctx, launch_fn launch_once, void *state,
                          result *r) {
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

static tk_status launch_builtin(void *state) { return launch(state); }

/* Runs one benchmark; false means the check or a launch failed. */
static bool run_bench(bench_context *ctx, const bench *b, result *r) {
    bench_buffers buf;
    memset(&buf, 0, sizeof buf);
    buf.b = b;
    r->check = "error";
    r->bytes = 0;
    memset(&r->time, 0, sizeof r->time);
    r->gbs = r->percent_copy = r->same_copy_us = 0;
    r->detail[0] = 0;
    bool ok = alloc_buffers(ctx, &buf) && make_inputs(&buf) &&
              CU(ctx, cuMemcpyHtoD(buf.x, buf.host_x, buf.x_bytes));
    if (ok && b->kind == BENCH_CAST_BACK)
        ok = CU(ctx, cuMemcpyHtoD(buf.sf, buf.host_sf, buf.sf_bytes ? buf.sf_bytes : 1));
    /* poison the outputs so an unwritten element fails the check */
    if (ok)
        ok = CU(ctx, cuMemsetD8(buf.out, 0xFF, buf.out_bytes));
    if (ok && b->kind == BENCH_PER_TOKEN_CAST)
        ok = CU(ctx, cuMemsetD8(buf.sf, 0xFF, buf.sf_bytes ? buf.sf_bytes : 4));
    if (!ok) {
        snprintf(r->detail, sizeof r->detail, "setup failed");
        free_buffers(ctx, &buf);
        return false;
    }
    r->bytes = bytes_moved(&buf);

    /* warm-up, which is also the launch that gets checked */
    tk_status status = launch(&buf);
    if (status != TK_SUCCESS || !CU(ctx, cuCtxSynchronize())) {
        snprintf(r->detail, sizeof r->detail, "launch: %s: %s", tk_status_string(status),
                 tk_last_error());
        free_buffers(ctx, &buf);
        return false;
    }
    bool checked = verify(ctx, &buf, r->detail, sizeof r->detail);
    r->check = checked ? "ok" : "FAIL";

    ok = time_launches(ctx, launch_builtin, &buf, r);
    free_buffers(ctx, &buf);
    return ok && checked;
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
 * run_bench times the built-in rows, or by time_compute for a compute
 * row. */
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
                                            : time_launches(ctx, c->launch, state, r);
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

/* The second table: compute rows in TFLOP/s, ours and the ceiling timed
 * interleaved (time_compute), with the clock read under load after. */
static void print_compute_table(const result *results, const bool *selected, size_t total) {
    bool any_compute = false;
    for (size_t i = 0; i < total; i++)
        any_compute |= selected[i] && results[i].tflops > 0;
    if (!any_compute)
        return;
    printf("\n%-22s %-14s %-38s %10s %8s %10s %8s %9s %7s %5s %-8s  %s\n", "kernel", "shape",
           "config", "time us", "TFLOP/s", "cuBLAS us", "cuBLAS", "% cuBLAS", "SM MHz", "W",
           "limit", "check");
    for (size_t i = 0; i < total; i++) {
        const result *r = &results[i];
        if (!selected[i] || r->tflops <= 0)
            continue;
        char ceiling_us[16] = "-", ceiling[16] = "-", percent[16] = "-";
        char clock[16] = "-", power[16] = "-";
        if (r->ceiling_tflops > 0) {
            snprintf(ceiling_us, sizeof ceiling_us, "%.2f", r->ceiling.median_us);
            snprintf(ceiling, sizeof ceiling, "%.1f", r->ceiling_tflops);
            snprintf(percent, sizeof percent, "%.1f", 100.0 * r->tflops / r->ceiling_tflops);
        }
        if (r->sm_clock_mhz > 0)
            snprintf(clock, sizeof clock, "%d", r->sm_clock_mhz);
        if (r->power_w > 0)
            snprintf(power, sizeof power, "%.0f", r->power_w);
        const char *limit = r->clock_limit && r->clock_limit[0] ? r->clock_limit : "-";
        printf("%-22s %-14s %-38s %10.2f %8.1f %10s %8s %9s %7s %5s %-8s  %s\n", r->kernel,
               r->shape, r->config, r->time.median_us, r->tflops, ceiling_us, ceiling, percent,
               clock, power, limit, r->check);
    }
    printf("(compute rows: ours and cuBLAS timed interleaved, medians; SM MHz, W and limit "
           "read under load after the timing)\n");
}

/* The CSV: one row per benchmark that ran.  The first 14 columns are
 * those of earlier runs; compute rows add the interleaved ceiling's
 * statistics and the clock read under load after their timing; the
 * last, memory rows' same-size copy time. */
static void write_csv(FILE *out, const bench_context *ctx, const result *results,
                      const bool *selected, size_t total) {
    fprintf(out, "kernel,shape,config,bytes,time_us,min_us,p20_us,p80_us,gbs,pct_copy,check,"
                 "tflops,ceiling_tflops,pct_ceiling,ceiling_us,ceiling_min_us,ceiling_p20_us,"
                 "ceiling_p80_us,sm_mhz,power_w,clock_limit,same_copy_us\n");
    fprintf(out, "d2d_copy,4GiB,,%.0f,%.2f,,,,%.1f,100.0,ok,,,,,,,,,,,\n",
            2.0 * (double)COPY_BYTES, 2.0 * (double)COPY_BYTES / (ctx->copy_gbs * 1e9) * 1e6,
            ctx->copy_gbs);
    for (size_t i = 0; i < total; i++) {
        if (!selected[i])
            continue;
        const result *r = &results[i];
        const timing *t = &r->time, *ceiling = &r->ceiling;
        /* labels may hold commas: quote the text fields (RFC 4180) */
        fprintf(out, "%s,\"%s\",\"%s\",%.0f,%.2f,%.2f,%.2f,%.2f,%.1f,%.1f,%s", r->kernel,
                r->shape, r->config, r->bytes, t->median_us, t->min_us, t->p20_us, t->p80_us,
                r->gbs, r->percent_copy, r->check);
        if (r->tflops > 0 && r->ceiling_tflops > 0)
            fprintf(out, ",%.1f,%.1f,%.1f,%.2f,%.2f,%.2f,%.2f", r->tflops, r->ceiling_tflops,
                    100.0 * r->tflops / r->ceiling_tflops, ceiling->median_us,
                    ceiling->min_us, ceiling->p20_us, ceiling->p80_us);
        else if (r->tflops > 0)
            fprintf(out, ",%.1f,,,,,,", r->tflops);
        else
            fprintf(out, ",,,,,,,");
        if (r->sm_clock_mhz > 0)
            fprintf(out, ",%d,%.0f,%s", r->sm_clock_mhz, r->power_w,
                    r->clock_limit ? r->clock_limit : "");
        else
            fprintf(out, ",,,");
        if (r->same_copy_us > 0)
            fprintf(out, ",%.2f\n", r->same_copy_us);
        else
            fprintf(out, ",\n");
    }
}

/* The SM clock line of the header: the device's maximum (the driver's
 * CLOCK_RATE attribute) and, through NVML, the clock and power now. */
static void print_clocks(const bench_context *ctx, CUdevice device) {
    int max_khz = 0;
    char why[200] = "";
    tkb_clock_sample now;
    if (ctx->api->cuDeviceGetAttribute(&max_khz, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, device) !=
        CUDA_SUCCESS)
        max_khz = 0;
    printf("SM clock: max %d MHz; ", max_khz / 1000);
    if (tkb_clock_open(ctx->api, why, sizeof why) && tkb_clock_read(&now))
        printf("now %u MHz, %.0f W (NVML)\n", now.sm_mhz, now.power_mw / 1000.0);
    else
        printf("no live clock: %s\n", why[0] ? why : "NVML query failed");
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
    print_clocks(&ctx, device);
    if (!CU(&ctx, cuEventCreate(&ctx.start, CU_EVENT_DEFAULT)) ||
        !CU(&ctx, cuEventCreate(&ctx.stop, CU_EVENT_DEFAULT)) ||
        !tkb_flush_init(&ctx.flush, ctx.api, flush_mode) || !measure_copy(&ctx))
        return 2;

    size_t total = NUM_BENCHES + (size_t)nregistered;
    result *results = calloc(total, sizeof *results);
    bool *selected = calloc(total, sizeof *selected);
    if (!results || !selected)
        return 2;
    bool all_ok = true;
    int ran = 0;
    for (size_t i = 0; i < total; i++) {
        if (i < NUM_BENCHES)
            describe(&BENCHES[i], &results[i]);
        else
            describe_case(registered[i - NUM_BENCHES], &results[i]);
        selected[i] = !filter || strstr(results[i].label, filter);
        if (!selected[i])
            continue;
        fprintf(stderr, "tkbench: %s ...\n", results[i].label);
        bool ok = i < NUM_BENCHES ? run_bench(&ctx, &BENCHES[i], &results[i])
                                  : run_case(&ctx, registered[i - NUM_BENCHES], &results[i]);
        if (!ok)
            all_ok = false;
        ran++;
    }

    printf("\n%-22s %-14s %-38s %10s %9s %7s %9s  %s\n", "kernel", "shape", "config",
           "time us", "GB/s", "% copy", "% same", "check");
    for (size_t i = 0; i < total; i++) {
        if (!selected[i])
            continue;
        const result *r = &results[i];
        char same[16] = "-";
        if (r->same_copy_us > 0 && r->time.median_us > 0)
            snprintf(same, sizeof same, "%.1f", 100.0 * r->same_copy_us / r->time.median_us);
        printf("%-22s %-14s %-38s %10.2f %9.1f %7.1f %9s  %s%s%s\n", r->kernel, r->shape,
               r->config, r->time.median_us, r->gbs, r->percent_copy, same, r->check,
               r->detail[0] ? ": " : "", r->detail);
    }
    printf("(%% same: a device-to-device copy of the row's bytes, timed the same way, over "
           "the kernel's time)\n");
    print_compute_table(results, selected, total);
    printf("copy ceiling %.0f GB/s; %d kernel(s) run; %s\n", ctx.copy_gbs, ran,
           all_ok ? "all checks passed" : "SOME CHECKS FAILED");

    if (csv_path) {
        FILE *csv = fopen(csv_path, "w");
        if (!csv) {
            fprintf(stderr, "tkbench: cannot write %s\n", csv_path);
            return 2;
        }
        write_csv(csv, &ctx, results, selected, total);
        fclose(csv);
    }
    free(results);
    free(selected);
    tkb_flush_free(&ctx.flush);
    ctx.api->cuEventDestroy(ctx.start);
    ctx.api->cuEventDestroy(ctx.stop);
    return all_ok ? 0 : 1;
}
