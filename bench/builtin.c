/*
 * builtin.c -- the rows built into tkbench rather than registered by a
 * family file: batched_transpose and transpose, per_token_cast and
 * cast_back at TileKernels' benchmark shapes.  Each row allocates its
 * buffers, fills random inputs (cast_back's are what a block cast of
 * random bf16 values produces), poisons the outputs, launches once, checks
 * the output bit-exactly against the CPU reference (tests/ref) and is then
 * timed by tkbench.c's tkb_time_launches, as a registered memory-bound row
 * is.  tkbench runs them before the registered rows.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reference.h"
#include "tk.h"
#include "tk_internal.h"
#include "tkbench.h"

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

    ok = tkb_time_launches(ctx, launch_builtin, &buf, r);
    free_buffers(ctx, &buf);
    return ok && checked;
}

size_t tkb_builtin_count(void) { return NUM_BENCHES; }

void tkb_builtin_describe(size_t index, result *r) { describe(&BENCHES[index], r); }

bool tkb_builtin_run(bench_context *ctx, size_t index, result *r) {
    return run_bench(ctx, &BENCHES[index], r);
}
