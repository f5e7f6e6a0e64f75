/*
 * test_gpu_block.c -- golden tests of the E5M6 casts and the per-block
 * casts on the GPU, compared byte for byte with the CPU references of
 * tests/ref/e5m6.c and tests/ref/block_cast.c.
 *
 * Without a usable CUDA device every test is skipped (libtk loads libcuda
 * with dlopen, so this binary starts anywhere).  On the GPU machine, as in
 * test_gpu_kernels.c: random inputs (normals times per-row powers of two,
 * never zero) uploaded once per test, outputs and SF buffers poisoned
 * (0xFF) before each launch with TAIL_BYTES past the end that must stay
 * poisoned, data compared over the valid bytes, scales only where a scale
 * lives (padding rows and unused packed bytes are the kernel's).
 * Sweeps (tilekernels-spec.md 6.2-6.5, 12.1): tokens 0, 4001, 8001;
 * hidden 576 ... 7168; bf16 and f32 inputs; the spec's SF modes (F,T,F)
 * and (T,T,T) plus unrounded row-major scales; E5M6 special inputs
 * (2^-20, 2^-14*63/64, 2^-14 with 65024 last), row-strided inputs, an
 * H % 32 != 0 case; per_block_cast e4m3 and e2m1 for blocks 128x128 and
 * 32x32 (and 32x128, 128x32), SF-only and precomputed-SF equalities;
 * lossless from (1, 32) FP4 to (1, 128), (32, 32), (128, 128) in every
 * input/output layout pair, checked exactly and by the equality of the two
 * dequantisations.  Designed to stay under two minutes on 16 cores.
 * TK_TEST_SEED changes the inputs; TK_REF_THREADS the reference threads.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "block_cast.h"
#include "e5m6.h"
#include "gpu_harness.h"
#include "tk.h"
#include "tk_internal.h"

#define TAIL_BYTES GPU_TAIL_BYTES
#define POISON 0xFF
#define MAX_TOKENS 8001
#define MAX_HIDDEN 7168
#define MAX_STRIDE (MAX_HIDDEN + 64)

static const int64_t HIDDEN[] = {576, 2048, 2560, 3072, 4096, 6144, 7168};
#define NUM_HIDDEN (int)(sizeof HIDDEN / sizeof HIDDEN[0])
static const int64_t TOKENS[] = {0, 4001, 8001};

/* ---- device helpers ------------------------------------------------------ */

/* This file's poison byte and tail message for the shared harness. */
static void poison(const gpu *g, CUdeviceptr ptr, size_t bytes) {
    gpu_poison(g, ptr, bytes, POISON);
}

static void download(const gpu *g, void *host, CUdeviceptr device, size_t bytes,
                     const char *what) {
    gpu_download(g, host, device, bytes, POISON, "", what);
}

/* The SF descriptor tk_sf_desc gives, on device memory. */
static tk_tensor sf_tensor(CUdeviceptr data, const ref_sf_shape *shape) {
    tk_tensor t = gpu_tensor2(data, shape->dtype, shape->shape[0], shape->shape[1],
                              shape->strides[0], shape->strides[1]);
    tk_tensor desc;
    size_t bytes = 0;
    cr_assert_eq(tk_sf_desc(shape->rows, shape->cols, shape->block_m, shape->block_k,
                            shape->layout, &desc, &bytes),
                 TK_SUCCESS);
    cr_assert_eq(bytes, shape->bytes, "tk_sf_desc: %zu bytes, reference %zu", bytes, shape->bytes);
    cr_assert(desc.shape[0] == t.shape[0] && desc.shape[1] == t.shape[1] &&
              desc.strides[0] == t.strides[0] && desc.strides[1] == t.strides[1]);
    return t;
}

static void expect_equal(const void *got, const void *want, size_t bytes, size_t element,
                         int64_t cols, const char *what) {
    size_t first = ref_first_difference(got, want, bytes);
    if (first == SIZE_MAX)
        return;
    size_t index = first / element;
    size_t mismatches = 0;
    for (size_t i = index; i < bytes / element; i++)
        mismatches += memcmp((const char *)got + i * element, (const char *)want + i * element,
                             element) != 0;
    uint64_t a = 0, b = 0;
    memcpy(&a, (const char *)got + index * element, element);
    memcpy(&b, (const char *)want + index * element, element);
    cr_assert_fail("%s: first mismatch at [%ld, %ld]: got 0x%llx, expected 0x%llx; %zu of %zu "
                   "elements differ",
                   what, (long)(index / (size_t)cols), (long)(index % (size_t)cols),
                   (unsigned long long)a, (unsigned long long)b, mismatches, bytes / element);
}

static void expect_equal_sf(const ref_sf_shape *shape, const unsigned char *got,
                            const unsigned char *want, const char *what) {
    size_t size = ref_sf_entry_bytes(shape);
    for (int64_t i = 0; i < shape->nbm; i++)
        for (int64_t k = 0; k < shape->nbk; k++) {
            size_t offset = ref_sf_offset(shape, i, k);
            if (memcmp(got + offset, want + offset, size) == 0)
                continue;
            uint32_t a = 0, b = 0;
            memcpy(&a, got + offset, size);
            memcpy(&b, want + offset, size);
            cr_assert_fail("%s: scale of block (%ld, %ld): got 0x%x, expected 0x%x", what,
                           (long)i, (long)k, a, b);
        }
}

/* Largest SF buffer any case here needs: 8001 rows, one scale per 32
 * columns or per row, column-major padding. */
static size_t max_sf_bytes(void) {
    ref_sf_shape shape;
    ref_sf_shape_of(MAX_TOKENS, MAX_HIDDEN, 1, 32, TK_SF_COL_MAJOR, &shape);
    return shape.bytes;
}

/* Buffers shared by every test: input (host and device), outputs, SF. */
typedef struct state {
    gpu g;
    tk_dtype in_dtype;
    size_t in_size;
    void *input;
    unsigned char *got, *want, *got_sf, *want_sf, *aux;
    CUdeviceptr device_input, device_output, device_sf, device_aux;
    size_t out_bytes, sf_bytes;
    int cases;
} state;

static void state_begin(state *s, tk_dtype in_dtype, uint64_t seed) {
    s->g = gpu_begin();
    s->in_dtype = in_dtype;
    s->in_size = tk_dtype_size(in_dtype);
    s->cases = 0;
    size_t input_bytes = (size_t)MAX_TOKENS * MAX_STRIDE * s->in_size;
    s->out_bytes = (size_t)MAX_TOKENS * MAX_HIDDEN * 4; /* the widest output: f32 */
    s->sf_bytes = max_sf_bytes();
    s->input = host_alloc(input_bytes);
    ref_fill_rand_float(s->input, in_dtype, MAX_TOKENS, MAX_STRIDE, -110, 126,
                        test_seed() + seed + (uint64_t)in_dtype);
    s->got = host_alloc(s->out_bytes + TAIL_BYTES);
    s->want = host_alloc(s->out_bytes + TAIL_BYTES);
    s->aux = host_alloc(s->out_bytes + TAIL_BYTES);
    s->got_sf = host_alloc(s->sf_bytes + TAIL_BYTES);
    s->want_sf = host_alloc(s->sf_bytes + TAIL_BYTES);
    s->device_input = gpu_alloc(&s->g, input_bytes);
    s->device_output = gpu_alloc(&s->g, s->out_bytes + TAIL_BYTES);
    s->device_aux = gpu_alloc(&s->g, s->out_bytes + TAIL_BYTES);
    s->device_sf = gpu_alloc(&s->g, s->sf_bytes + TAIL_BYTES);
    CU(&s->g, cuMemcpyHtoD(s->device_input, s->input, input_bytes));
}

static void state_end(state *s) {
    CU(&s->g, cuMemFree(s->device_input));
    CU(&s->g, cuMemFree(s->device_output));
    CU(&s->g, cuMemFree(s->device_aux));
    CU(&s->g, cuMemFree(s->device_sf));
    free(s->input);
    free(s->got);
    free(s->want);
    free(s->aux);
    free(s->got_sf);
    free(s->want_sf);
}

/* ---- E5M6 ------------------------------------------------------------------ */

static const struct {
    bool round_sf;
    tk_sf_layout layout;
} E5M6_MODES[] = {{true, TK_SF_ROW_MAJOR}, {true, TK_SF_PACKED_UE8M0}, {false, TK_SF_ROW_MAJOR},
                  {true, TK_SF_COL_MAJOR}};

/* cast_back of the reference's own quantisation (uploaded), both output
 * dtypes, compared with ref_cast_back_e5m6. */
static void e5m6_cast_back_case(state *s, int64_t tokens, int64_t hidden,
                                const ref_sf_shape *shape, const char *what) {
    size_t q_bytes = (size_t)(tokens * hidden / 2 * 3);
    CU(&s->g, cuMemcpyHtoD(s->device_aux, s->want, q_bytes + 1));
    CU(&s->g, cuMemcpyHtoD(s->device_sf, s->want_sf, shape->bytes + 1));
    tk_dtype outs[] = {TK_BF16, TK_F32};
    for (int o = 0; o < 2; o++) {
        char back[240];
        snprintf(back, sizeof back, "cast_back_e5m6 ->%s of [%s]", gpu_dtype_name(outs[o]), what);
        size_t out_size = tk_dtype_size(outs[o]), out_bytes = (size_t)(tokens * hidden) * out_size;
        poison(&s->g, s->device_output, out_bytes);
        tk_tensor x = gpu_tensor2(s->device_aux, TK_U8, tokens, hidden / 2 * 3, hidden / 2 * 3, 1);
        tk_tensor sf = sf_tensor(s->device_sf, shape);
        tk_tensor out = gpu_tensor2(s->device_output, outs[o], tokens, hidden, hidden, 1);
        check_status(tk_cast_back_e5m6(&x, &sf, &out, NULL), back);
        download(&s->g, s->got, s->device_output, out_bytes, back);
        cr_assert(ref_cast_back_e5m6(s->want, tokens, hidden, s->want_sf, shape->layout, outs[o],
                                     s->aux));
        expect_equal(s->got, s->aux, out_bytes, out_size, hidden, back);
        s->cases++;
    }
}

/* One per_token_cast e5m6 case on the device input at `input` (host copy
 * `host`), then its cast_back when `back` is set. */
static void e5m6_case(state *s, CUdeviceptr input, const void *host, int64_t tokens,
                      int64_t hidden, int64_t stride, int mode, bool back, const char *kind) {
    char what[200];
    bool round_sf = E5M6_MODES[mode].round_sf;
    tk_sf_layout layout = E5M6_MODES[mode].layout;
    snprintf(what, sizeof what, "per_token_cast_e5m6 %s %s T=%ld H=%ld stride=%ld round=%d sf=%s",
             kind, gpu_dtype_name(s->in_dtype), (long)tokens, (long)hidden, (long)stride, round_sf,
             gpu_layout_name(layout));
    ref_sf_shape shape;
    cr_assert(ref_sf_shape_of(tokens, hidden, 1, (int)hidden, layout, &shape));
    size_t q_bytes = (size_t)(tokens * hidden / 2 * 3);
    poison(&s->g, s->device_output, q_bytes);
    poison(&s->g, s->device_sf, shape.bytes);
    tk_tensor x = gpu_tensor2(input, s->in_dtype, tokens, hidden, stride, 1);
    tk_tensor out = gpu_tensor2(s->device_output, TK_U8, tokens, hidden / 2 * 3, hidden / 2 * 3, 1);
    tk_tensor sf = sf_tensor(s->device_sf, &shape);
    check_status(tk_per_token_cast_e5m6(&x, round_sf, layout, &out, &sf, NULL), what);
    download(&s->g, s->got, s->device_output, q_bytes, what);
    download(&s->g, s->got_sf, s->device_sf, shape.bytes, what);
    memset(s->want_sf, 0, shape.bytes + 1);
    cr_assert(ref_per_token_cast_e5m6(host, s->in_dtype, tokens, hidden, stride, round_sf, layout,
                                      s->want, s->want_sf));
    expect_equal(s->got, s->want, q_bytes, 1, hidden / 2 * 3, what);
    expect_equal_sf(&shape, s->got_sf, s->want_sf, what);
    s->cases++;
    if (back)
        e5m6_cast_back_case(s, tokens, hidden, &shape, what);
}

static void run_e5m6(tk_dtype in_dtype) {
    state s;
    double start = now_seconds();
    state_begin(&s, in_dtype, 100);
    for (int t = 0; t < 3; t++)
        for (int h = 0; h < NUM_HIDDEN; h++)
            for (int m = 0; m < 4; m++) {
                /* the spec's modes everywhere, the others at 4001 tokens */
                if (m >= 2 && TOKENS[t] != 4001)
                    continue;
                e5m6_case(&s, s.device_input, s.input, TOKENS[t], HIDDEN[h], HIDDEN[h], m,
                          m < 2, "randn");
            }
    /* row strides: a whole number of vectors (fast path) and an odd one;
     * H % 32 != 0 and H > 8192 take the `_any` instance */
    for (int h = 0; h < NUM_HIDDEN; h += 3) {
        e5m6_case(&s, s.device_input, s.input, 4001, HIDDEN[h], HIDDEN[h] + 64, 0, false, "strided");
        e5m6_case(&s, s.device_input, s.input, 4001, HIDDEN[h], HIDDEN[h] + 1, 1, false, "strided");
    }
    e5m6_case(&s, s.device_input, s.input, 4001, 584, 584, 0, true, "H%32!=0");
    e5m6_case(&s, s.device_input, s.input, 1000, 12288, 12288, 1, true, "wide");
    /* special inputs (spec 6.2): constant rows, 65024 in the last column */
    float specials[3] = {ldexpf(1.0f, -20), ldexpf(63.0f / 64, -14), ldexpf(1.0f, -14)};
    void *special = host_alloc((size_t)4001 * MAX_HIDDEN * s.in_size);
    for (int v = 0; v < 3; v++)
        for (int h = 0; h < NUM_HIDDEN; h++) {
            int64_t hidden = HIDDEN[h];
            for (int64_t i = 0; i < 4001 * hidden; i++) {
                float value = i % hidden == hidden - 1 ? 65024.0f : specials[v];
                if (in_dtype == TK_F32)
                    ((float *)special)[i] = value;
                else
                    ((uint16_t *)special)[i] = ref_bf16_from_f32(value);
            }
            CU(&s.g, cuMemcpyHtoD(s.device_aux, special, (size_t)(4001 * hidden) * s.in_size));
            for (int m = 0; m < 2; m++)
                e5m6_case(&s, s.device_aux, special, 4001, hidden, hidden, m, false, "special");
        }
    free(special);
    cr_log_info("per_token_cast_e5m6 / cast_back_e5m6 %s: %d cases in %.1f s",
                gpu_dtype_name(in_dtype), s.cases, now_seconds() - start);
    state_end(&s);
}

Test(e5m6, bf16, .timeout = 1800) { run_e5m6(TK_BF16); }
Test(e5m6, f32, .timeout = 1800) { run_e5m6(TK_F32); }

/* ---- per_block_cast ----------------------------------------------------------- */

typedef enum block_mode { BLOCK_FULL, BLOCK_SF_ONLY, BLOCK_PRECOMPUTED } block_mode;

static void block_case(state *s, tk_dtype fmt, int64_t tokens, int64_t hidden, int bm, int bk,
                       bool round_sf, tk_sf_layout layout) {
    char what[200];
    snprintf(what, sizeof what, "per_block_cast %s->%s T=%ld H=%ld block=%dx%d round=%d sf=%s",
             gpu_dtype_name(s->in_dtype), gpu_dtype_name(fmt), (long)tokens, (long)hidden, bm, bk,
             round_sf, gpu_layout_name(layout));
    bool fp4 = fmt == TK_E2M1;
    int64_t out_cols = fp4 ? hidden / 2 : hidden;
    size_t out_bytes = (size_t)(tokens * out_cols);
    ref_sf_shape shape;
    cr_assert(ref_sf_shape_of(tokens, hidden, bm, bk, layout, &shape));
    poison(&s->g, s->device_output, out_bytes);
    poison(&s->g, s->device_sf, shape.bytes);
    tk_tensor x = gpu_tensor2(s->device_input, s->in_dtype, tokens, hidden, hidden, 1);
    tk_tensor out =
        gpu_tensor2(s->device_output, fp4 ? TK_I8 : TK_E4M3, tokens, out_cols, out_cols, 1);
    tk_tensor sf = sf_tensor(s->device_sf, &shape);
    check_status(tk_per_block_cast(&x, fmt, bm, bk, round_sf, layout, &out, &sf, NULL), what);
    download(&s->g, s->got, s->device_output, out_bytes, what);
    download(&s->g, s->got_sf, s->device_sf, shape.bytes, what);
    /* the reference reads the same contiguous view of the input */
    memset(s->want, 0, out_bytes + 1);
    memset(s->want_sf, 0, shape.bytes + 1);
    cr_assert(ref_per_block_cast(s->input, s->in_dtype, tokens, hidden, hidden, fmt, bm, bk,
                                 round_sf, layout, s->want, s->want_sf, NULL));
    expect_equal(s->got, s->want, out_bytes, 1, out_cols, what);
    expect_equal_sf(&shape, s->got_sf, s->want_sf, what);
    s->cases++;
}

/* SF-only must give per_block_cast's scales; precomputed scales (the
 * reference's row-major ones, rounded or not) must give the reference's
 * data with 1 / sf. */
static void block_modes_case(state *s, tk_dtype fmt, int64_t tokens, int64_t hidden, int bm,
                             int bk, bool round_sf) {
    char what[200];
    snprintf(what, sizeof what, "per_block_cast modes %s->%s T=%ld H=%ld block=%dx%d round=%d",
             gpu_dtype_name(s->in_dtype), gpu_dtype_name(fmt), (long)tokens, (long)hidden, bm, bk,
             round_sf);
    bool fp4 = fmt == TK_E2M1;
    int64_t out_cols = fp4 ? hidden / 2 : hidden;
    size_t out_bytes = (size_t)(tokens * out_cols);
    tk_tensor x = gpu_tensor2(s->device_input, s->in_dtype, tokens, hidden, hidden, 1);
    tk_sf_layout layouts[] = {TK_SF_ROW_MAJOR, TK_SF_PACKED_UE8M0};
    for (int l = 0; l < (round_sf ? 2 : 1); l++) {
        ref_sf_shape shape;
        cr_assert(ref_sf_shape_of(tokens, hidden, bm, bk, layouts[l], &shape));
        poison(&s->g, s->device_sf, shape.bytes);
        tk_tensor sf = sf_tensor(s->device_sf, &shape);
        check_status(tk_per_block_cast_with_sf_only(&x, fmt, bm, bk, round_sf, layouts[l], &sf,
                                                    NULL),
                     what);
        download(&s->g, s->got_sf, s->device_sf, shape.bytes, what);
        memset(s->want_sf, 0, shape.bytes + 1);
        cr_assert(ref_per_block_cast(s->input, s->in_dtype, tokens, hidden, hidden, fmt, bm, bk,
                                     round_sf, layouts[l], NULL, s->want_sf, NULL));
        expect_equal_sf(&shape, s->got_sf, s->want_sf, what);
        s->cases++;
    }
    /* precomputed: row-major f32 scales of the reference */
    ref_sf_shape row;
    cr_assert(ref_sf_shape_of(tokens, hidden, bm, bk, TK_SF_ROW_MAJOR, &row));
    memset(s->want_sf, 0, row.bytes + 1);
    cr_assert(ref_per_block_cast(s->input, s->in_dtype, tokens, hidden, hidden, fmt, bm, bk,
                                 round_sf, TK_SF_ROW_MAJOR, NULL, s->want_sf, NULL));
    CU(&s->g, cuMemcpyHtoD(s->device_sf, s->want_sf, row.bytes + 1));
    poison(&s->g, s->device_output, out_bytes);
    tk_tensor sf = sf_tensor(s->device_sf, &row);
    tk_tensor out =
        gpu_tensor2(s->device_output, fp4 ? TK_I8 : TK_E4M3, tokens, out_cols, out_cols, 1);
    check_status(tk_per_block_cast_with_precomputed_sf(&x, fmt, bm, bk, &sf, &out, NULL), what);
    download(&s->g, s->got, s->device_output, out_bytes, what);
    cr_assert(ref_per_block_cast(s->input, s->in_dtype, tokens, hidden, hidden, fmt, bm, bk,
                                 false, TK_SF_ROW_MAJOR, s->want, NULL, (const float *)s->want_sf));
    expect_equal(s->got, s->want, out_bytes, 1, out_cols, what);
    s->cases++;
}

static void run_per_block_cast(tk_dtype in_dtype, tk_dtype fmt) {
    state s;
    double start = now_seconds();
    state_begin(&s, in_dtype, 200 + (uint64_t)fmt);
    for (int t = 0; t < 3; t++)
        for (int h = 0; h < NUM_HIDDEN; h++) {
            int64_t tokens = TOKENS[t], hidden = HIDDEN[h];
            /* the spec's (F,T,F) and (T,T,T) for its two blocks */
            block_case(&s, fmt, tokens, hidden, 128, 128, true, TK_SF_ROW_MAJOR);
            block_case(&s, fmt, tokens, hidden, 128, 128, true, TK_SF_PACKED_UE8M0);
            block_case(&s, fmt, tokens, hidden, 32, 32, true, TK_SF_ROW_MAJOR);
            block_case(&s, fmt, tokens, hidden, 32, 32, true, TK_SF_PACKED_UE8M0);
            if (tokens != 4001)
                continue;
            block_case(&s, fmt, tokens, hidden, 128, 128, false, TK_SF_ROW_MAJOR);
            block_case(&s, fmt, tokens, hidden, 32, 32, true, TK_SF_COL_MAJOR);
            block_case(&s, fmt, tokens, hidden, 32, 128, true, TK_SF_PACKED_UE8M0);
            block_case(&s, fmt, tokens, hidden, 128, 32, false, TK_SF_COL_MAJOR);
            block_modes_case(&s, fmt, tokens, hidden, 128, 128, true);
            block_modes_case(&s, fmt, tokens, hidden, 32, 32, false);
        }
    cr_log_info("per_block_cast %s->%s: %d cases in %.1f s", gpu_dtype_name(in_dtype),
                gpu_dtype_name(fmt), s.cases, now_seconds() - start);
    state_end(&s);
}

Test(per_block_cast, bf16_e4m3, .timeout = 1800) { run_per_block_cast(TK_BF16, TK_E4M3); }
Test(per_block_cast, f32_e4m3, .timeout = 1800) { run_per_block_cast(TK_F32, TK_E4M3); }
Test(per_block_cast, bf16_e2m1, .timeout = 1800) { run_per_block_cast(TK_BF16, TK_E2M1); }
Test(per_block_cast, f32_e2m1, .timeout = 1800) { run_per_block_cast(TK_F32, TK_E2M1); }

/* ---- per_block_cast_lossless ------------------------------------------------- */

static void lossless_case(state *s, int64_t tokens, int64_t hidden, tk_sf_layout in_layout,
                          tk_sf_layout out_layout, int bm, int bk, int exponent) {
    char what[200];
    snprintf(what, sizeof what, "per_block_cast_lossless T=%ld H=%ld sf %s -> %s block=%dx%d e=%d",
             (long)tokens, (long)hidden, gpu_layout_name(in_layout), gpu_layout_name(out_layout),
             bm, bk, exponent);
    /* FP4 input as TileKernels' test makes it: (1, 32) blocks, round_sf,
     * a dynamic range of 2^9 around a random exponent */
    float *x = (float *)s->aux;
    ref_fill_rand_float(x, TK_F32, tokens, hidden, exponent, exponent + 9,
                        test_seed() + 300 + (uint64_t)exponent);
    ref_sf_shape in_shape, out_shape;
    cr_assert(ref_sf_shape_of(tokens, hidden, 1, 32, in_layout, &in_shape));
    cr_assert(ref_sf_shape_of(tokens, hidden, bm, bk, out_layout, &out_shape));
    unsigned char *fp4 = host_alloc((size_t)(tokens * hidden / 2) + 1);
    unsigned char *sf_in = calloc(in_shape.bytes + 1, 1);
    cr_assert(ref_per_block_cast(x, TK_F32, tokens, hidden, hidden, TK_E2M1, 1, 32, true,
                                 in_layout, fp4, sf_in, NULL));
    CU(&s->g, cuMemcpyHtoD(s->device_input, fp4, (size_t)(tokens * hidden / 2) + 1));
    CU(&s->g, cuMemcpyHtoD(s->device_aux, sf_in, in_shape.bytes + 1));
    size_t out_bytes = (size_t)(tokens * hidden);
    poison(&s->g, s->device_output, out_bytes);
    poison(&s->g, s->device_sf, out_shape.bytes);
    tk_tensor xt = gpu_tensor2(s->device_input, TK_I8, tokens, hidden / 2, hidden / 2, 1);
    tk_tensor sft = sf_tensor(s->device_aux, &in_shape);
    tk_tensor out = gpu_tensor2(s->device_output, TK_E4M3, tokens, hidden, hidden, 1);
    tk_tensor out_sf = sf_tensor(s->device_sf, &out_shape);
    check_status(tk_per_block_cast_lossless(&xt, &sft, 1, 32, bm, bk, out_layout, &out, &out_sf,
                                            NULL),
                 what);
    download(&s->g, s->got, s->device_output, out_bytes, what);
    download(&s->g, s->got_sf, s->device_sf, out_shape.bytes, what);
    memset(s->want_sf, 0, out_shape.bytes + 1);
    cr_assert(ref_per_block_cast_lossless(fp4, tokens, hidden, sf_in, in_layout, 1, 32, s->want,
                                          s->want_sf, out_layout, bm, bk));
    expect_equal(s->got, s->want, out_bytes, 1, hidden, what);
    expect_equal_sf(&out_shape, s->got_sf, s->want_sf, what);
    /* TileKernels' own check: both dequantisations are bit-identical */
    if (tokens == 4001) {
        float *a = host_alloc(out_bytes * 4), *b = host_alloc(out_bytes * 4);
        cr_assert(ref_dequantize(fp4, TK_E2M1, tokens, hidden, sf_in, in_layout, 1, 32, a));
        cr_assert(ref_dequantize(s->got, TK_E4M3, tokens, hidden, s->got_sf, out_layout, bm, bk,
                                 b));
        expect_equal(b, a, out_bytes * 4, 4, hidden, what);
        free(a);
        free(b);
    }
    free(fp4);
    free(sf_in);
    s->cases++;
}

Test(per_block_cast_lossless, sweep, .timeout = 1800) {
    state s;
    double start = now_seconds();
    state_begin(&s, TK_F32, 400);
    tk_sf_layout layouts[] = {TK_SF_ROW_MAJOR, TK_SF_PACKED_UE8M0};
    int blocks[][2] = {{1, 128}, {32, 32}, {128, 128}};
    ref_rng rng = ref_rng_seed(test_seed() + 401, 0);
    for (int t = 0; t < 3; t++)
        for (int h = 0; h < NUM_HIDDEN; h++)
            for (int li = 0; li < 2; li++)
                for (int lo = 0; lo < 2; lo++)
                    for (int b = 0; b < 3; b++) {
                        /* the big sweep at T = 8001 only for matching layouts */
                        if (TOKENS[t] == 8001 && li != lo)
                            continue;
                        int exponent = -110 + (int)(ref_rng_next(&rng) % 227);
                        if (exponent + 9 > 126)
                            exponent = 117;
                        lossless_case(&s, TOKENS[t], HIDDEN[h], layouts[li], layouts[lo],
                                      blocks[b][0], blocks[b][1], exponent);
                    }
    cr_log_info("per_block_cast_lossless: %d cases in %.1f s", s.cases, now_seconds() - start);
    state_end(&s);
}

/* ---- argument checks and instance selection (no GPU needed) -------------- */

/* A fake, aligned device address: the checks below fail before any launch,
 * or (instance selection) run only where there is no device to launch on. */
#define FAKE ((CUdeviceptr)0x100000)

static tk_tensor fake2(tk_dtype dtype, int64_t d0, int64_t d1) {
    return gpu_tensor2(FAKE, dtype, d0, d1, d1, 1);
}

static tk_tensor fake_sf(int64_t rows, int64_t cols, int bm, int bk, tk_sf_layout layout) {
    tk_tensor desc;
    cr_assert_eq(tk_sf_desc(rows, cols, bm, bk, layout, &desc, NULL), TK_SUCCESS);
    desc.data = (void *)(uintptr_t)FAKE;
    return desc;
}

static void expect_status(tk_status got, tk_status want, const char *what) {
    cr_assert_eq(got, want, "%s: got %s (%s), expected %s", what, tk_status_string(got),
                 tk_last_error(), tk_status_string(want));
}

Test(api, e5m6_rejects_bad_arguments) {
    tk_tensor x = fake2(TK_BF16, 16, 576), out = fake2(TK_U8, 16, 864);
    tk_tensor sf = fake_sf(16, 576, 1, 576, TK_SF_ROW_MAJOR);
    tk_tensor packed = fake_sf(16, 576, 1, 576, TK_SF_PACKED_UE8M0);
    expect_status(tk_per_token_cast_e5m6(NULL, true, TK_SF_ROW_MAJOR, &out, &sf, NULL),
                  TK_ERROR_INVALID_ARGUMENT, "NULL x");
    tk_tensor e4 = fake2(TK_E4M3, 16, 576);
    expect_status(tk_per_token_cast_e5m6(&e4, true, TK_SF_ROW_MAJOR, &out, &sf, NULL),
                  TK_ERROR_INVALID_ARGUMENT, "e4m3 input");
    expect_status(tk_per_token_cast_e5m6(&x, false, TK_SF_PACKED_UE8M0, &out, &packed, NULL),
                  TK_ERROR_INVALID_ARGUMENT, "packed without round_sf");
    expect_status(tk_per_token_cast_e5m6(&x, true, TK_SF_ROW_MAJOR, &out, &packed, NULL),
                  TK_ERROR_INVALID_ARGUMENT, "i32 SF for a row-major layout");
    tk_tensor odd = fake2(TK_BF16, 16, 580), short_out = fake2(TK_U8, 16, 863);
    expect_status(tk_per_token_cast_e5m6(&odd, true, TK_SF_ROW_MAJOR, &out, &sf, NULL),
                  TK_ERROR_INVALID_ARGUMENT, "H % 8 != 0");
    expect_status(tk_per_token_cast_e5m6(&x, true, TK_SF_ROW_MAJOR, &short_out, &sf, NULL),
                  TK_ERROR_INVALID_ARGUMENT, "out columns");
    tk_tensor huge = fake2(TK_BF16, 16, 16392), huge_out = fake2(TK_U8, 16, 24588);
    tk_tensor huge_sf = fake_sf(16, 16392, 1, 16392, TK_SF_ROW_MAJOR);
    expect_status(tk_per_token_cast_e5m6(&huge, true, TK_SF_ROW_MAJOR, &huge_out, &huge_sf, NULL),
                  TK_ERROR_UNSUPPORTED, "H > 16384");
    tk_tensor misaligned = x;
    misaligned.data = (void *)(uintptr_t)(FAKE + 2);
    expect_status(tk_per_token_cast_e5m6(&misaligned, true, TK_SF_ROW_MAJOR, &out, &sf, NULL),
                  TK_ERROR_INVALID_ARGUMENT, "misaligned x");
    tk_tensor empty = fake2(TK_BF16, 0, 576), empty_out = fake2(TK_U8, 0, 864);
    tk_tensor empty_sf = fake_sf(0, 576, 1, 576, TK_SF_ROW_MAJOR);
    expect_status(tk_per_token_cast_e5m6(&empty, true, TK_SF_ROW_MAJOR, &empty_out, &empty_sf,
                                         NULL),
                  TK_SUCCESS, "T == 0");
    tk_tensor back = fake2(TK_F32, 16, 576), col = fake_sf(16, 576, 1, 576, TK_SF_COL_MAJOR);
    col.strides[0] = 2;
    col.dtype = TK_I32;
    expect_status(tk_cast_back_e5m6(&out, &col, &back, NULL), TK_ERROR_INVALID_ARGUMENT,
                  "packed SF with stride 2");
    expect_status(tk_cast_back_e5m6(&x, &sf, &back, NULL), TK_ERROR_INVALID_ARGUMENT,
                  "bf16 data");
}

Test(api, block_rejects_bad_arguments) {
    tk_tensor x = fake2(TK_BF16, 100, 576), out = fake2(TK_E4M3, 100, 576);
    tk_tensor sf = fake_sf(100, 576, 128, 128, TK_SF_ROW_MAJOR);
    expect_status(tk_per_block_cast(&x, TK_E4M3, 64, 128, true, TK_SF_ROW_MAJOR, &out, &sf, NULL),
                  TK_ERROR_INVALID_ARGUMENT, "block 64");
    expect_status(tk_per_block_cast(&x, TK_BF16, 128, 128, true, TK_SF_ROW_MAJOR, &out, &sf, NULL),
                  TK_ERROR_INVALID_ARGUMENT, "fmt bf16");
    tk_tensor fp4_out = fake2(TK_I8, 100, 576);
    expect_status(tk_per_block_cast(&x, TK_E2M1, 128, 128, true, TK_SF_ROW_MAJOR, &fp4_out, &sf,
                                    NULL),
                  TK_ERROR_INVALID_ARGUMENT, "e2m1 out with H columns");
    tk_tensor col = fake_sf(100, 576, 128, 128, TK_SF_COL_MAJOR);
    expect_status(tk_per_block_cast(&x, TK_E4M3, 128, 128, true, TK_SF_ROW_MAJOR, &out, &col, NULL),
                  TK_ERROR_INVALID_ARGUMENT, "column-major SF for a row-major layout");
    tk_tensor packed = fake_sf(100, 576, 128, 128, TK_SF_PACKED_UE8M0);
    expect_status(tk_per_block_cast(&x, TK_E4M3, 128, 128, false, TK_SF_PACKED_UE8M0, &out,
                                    &packed, NULL),
                  TK_ERROR_INVALID_ARGUMENT, "packed without round_sf");
    tk_tensor strided = x;
    strided.strides[0] = 640;
    expect_status(tk_per_block_cast(&strided, TK_E4M3, 128, 128, true, TK_SF_ROW_MAJOR, &out, &sf,
                                    NULL),
                  TK_ERROR_INVALID_ARGUMENT, "strided x");
    tk_tensor narrow = fake2(TK_BF16, 100, 608);
    expect_status(tk_per_block_cast_with_sf_only(&narrow, TK_E4M3, 128, 128, true,
                                                 TK_SF_ROW_MAJOR, &sf, NULL),
                  TK_ERROR_INVALID_ARGUMENT, "H % 64 != 0");
    expect_status(tk_per_block_cast_with_precomputed_sf(&x, TK_E4M3, 128, 128, &col, &out, NULL),
                  TK_ERROR_INVALID_ARGUMENT, "column-major precomputed SF");
    tk_tensor fp4 = fake2(TK_I8, 100, 288), lossless_out = fake2(TK_E4M3, 100, 576);
    tk_tensor in_sf = fake_sf(100, 576, 1, 32, TK_SF_ROW_MAJOR);
    tk_tensor out_sf = fake_sf(100, 576, 32, 32, TK_SF_ROW_MAJOR);
    expect_status(tk_per_block_cast_lossless(&fp4, &in_sf, 1, 32, 32, 16, TK_SF_ROW_MAJOR,
                                             &lossless_out, &out_sf, NULL),
                  TK_ERROR_UNSUPPORTED, "output block 32x16");
    expect_status(tk_per_block_cast_lossless(&fp4, &in_sf, 1, 4, 32, 32, TK_SF_ROW_MAJOR,
                                             &lossless_out, &out_sf, NULL),
                  TK_ERROR_INVALID_ARGUMENT, "input block 1x4");
    expect_status(tk_per_block_cast_lossless(&fp4, &in_sf, 3, 32, 32, 32, TK_SF_ROW_MAJOR,
                                             &lossless_out, &out_sf, NULL),
                  TK_ERROR_INVALID_ARGUMENT, "input block 3x32");
    expect_status(tk_per_block_cast_lossless(&fp4, &out_sf, 1, 32, 32, 32, TK_SF_ROW_MAJOR,
                                             &lossless_out, &out_sf, NULL),
                  TK_ERROR_INVALID_ARGUMENT, "input SF of the wrong shape");
}

/* Which instance each call picks; on a machine without a driver the
 * launch then fails with TK_ERROR_NO_DEVICE (with a device these fake
 * pointers must not be launched on: the golden tests cover it there). */
static void expect_instance(tk_status status, const char *instance) {
    expect_status(status, TK_ERROR_NO_DEVICE, instance);
    cr_assert_str_eq(tk__last_instance(), instance);
}

Test(api, instance_selection) {
    if (tk_device_check() == TK_SUCCESS)
        cr_skip_test("a device is present: the golden tests check the instances");
    tk_tensor x = fake2(TK_BF16, 16, 7168), out = fake2(TK_U8, 16, 10752);
    tk_tensor sf = fake_sf(16, 7168, 1, 7168, TK_SF_COL_MAJOR);
    expect_instance(tk_per_token_cast_e5m6(&x, true, TK_SF_COL_MAJOR, &out, &sf, NULL),
                    "per_token_cast_e5m6__bf16_8k");
    tk_tensor small = fake2(TK_F32, 16, 2048), small_out = fake2(TK_U8, 16, 3072);
    tk_tensor small_sf = fake_sf(16, 2048, 1, 2048, TK_SF_ROW_MAJOR);
    expect_instance(tk_per_token_cast_e5m6(&small, false, TK_SF_ROW_MAJOR, &small_out, &small_sf,
                                           NULL),
                    "per_token_cast_e5m6__f32_4k");
    x.strides[0] = 7169;
    expect_instance(tk_per_token_cast_e5m6(&x, true, TK_SF_COL_MAJOR, &out, &sf, NULL),
                    "per_token_cast_e5m6__bf16_any");
    tk_tensor back = fake2(TK_F32, 16, 7168);
    expect_instance(tk_cast_back_e5m6(&out, &sf, &back, NULL), "cast_back_e5m6__f32");
    tk_tensor bx = fake2(TK_F32, 100, 576), bout = fake2(TK_I8, 100, 288);
    tk_tensor bsf = fake_sf(100, 576, 32, 128, TK_SF_PACKED_UE8M0);
    expect_instance(tk_per_block_cast(&bx, TK_E2M1, 32, 128, true, TK_SF_PACKED_UE8M0, &bout, &bsf,
                                      NULL),
                    "per_block_cast__f32_e2m1_32");
    tk_tensor rsf = fake_sf(100, 576, 128, 32, TK_SF_ROW_MAJOR);
    expect_instance(tk_per_block_cast_with_sf_only(&bx, TK_E4M3, 128, 32, false, TK_SF_ROW_MAJOR,
                                                   &rsf, NULL),
                    "per_block_cast__f32_e4m3_128");
    tk_tensor eout = fake2(TK_E4M3, 100, 576);
    expect_instance(tk_per_block_cast_with_precomputed_sf(&bx, TK_E4M3, 128, 32, &rsf, &eout, NULL),
                    "per_block_cast__f32_e4m3_128");
    tk_tensor in_sf = fake_sf(100, 576, 1, 32, TK_SF_PACKED_UE8M0);
    tk_tensor out_sf = fake_sf(100, 576, 1, 128, TK_SF_ROW_MAJOR);
    expect_instance(tk_per_block_cast_lossless(&bout, &in_sf, 1, 32, 1, 128, TK_SF_ROW_MAJOR,
                                               &eout, &out_sf, NULL),
                    "per_block_cast_lossless__b1");
}
