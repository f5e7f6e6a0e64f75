/*
 * test_gpu_kernels.c -- golden tests: every kernel libtk ships, run on the
 * GPU over TileKernels' own test sweep and compared byte for byte with the
 * CPU references of tests/ref.
 *
 * Without a usable CUDA device every test is skipped (CI has no GPU and no
 * driver; libtk loads libcuda with dlopen, so this binary still starts).
 * On the GPU machine:
 *   - inputs are normals times random powers of two (TileKernels'
 *     generate_rand_float), never zeros, generated once per test at the
 *     largest shape and uploaded once; every case reads a view of them;
 *   - outputs and SF buffers are poisoned (0xFF bytes) before each launch,
 *     and TAIL_BYTES past the end of each output must still be poisoned
 *     afterwards, so unwritten and overwritten elements both fail;
 *   - data is compared with memcmp over the valid region; SF buffers only
 *     at the bytes that hold a scale (padding rows of the TMA-aligned
 *     layouts and unused bytes of packed words are the kernel's to leave);
 *   - the first mismatch is reported with its index, value and expected
 *     value, plus the number of mismatching elements.
 * The sweep (tilekernels-spec.md 6.1, 6.3, 7.1, 12.1): tokens 0, 4001,
 * 8001 (4032, 8064 for transposes); hidden 576 ... 7168; every dtype;
 * batched_transpose with B = 8 and 32 at every hidden size.  The suite
 * must stay under four minutes on the H200 machine (16 cores, --jobs=4);
 * it took 40 s there on 2026-11-29, the longest test being
 * batched_transpose f32 (50 cases, about 50 GB of output checked, 38 s).
 * TK_TEST_SEED changes the inputs; TK_REF_THREADS the reference threads.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu_harness.h"
#include "reference.h"
#include "tk.h"
#include "tk_internal.h"

#define TAIL_BYTES GPU_TAIL_BYTES /* checked-untouched bytes after every output */
#define POISON 0xFF

static const int64_t HIDDEN[] = {576, 2048, 2560, 3072, 4096, 6144, 7168};
#define NUM_HIDDEN (sizeof HIDDEN / sizeof HIDDEN[0])
static const int64_t TOKENS[] = {0, 4001, 8001};
static const int64_t TRANSPOSE_TOKENS[] = {0, 4032, 8064};
#define MAX_HIDDEN 7168
#define MAX_TOKENS 8064

/* ---- device helpers ------------------------------------------------------ */

/* This file's poison byte and tail message for the shared harness. */
static void download_output(const gpu *g, void *host, CUdeviceptr device, size_t bytes,
                            const char *what) {
    gpu_download(g, host, device, bytes, POISON, " of the output", what);
}

typedef struct device_buffer {
    CUdeviceptr ptr;
    size_t bytes;
} device_buffer;

static device_buffer device_alloc(const gpu *g, size_t bytes) {
    device_buffer buffer = {gpu_alloc(g, bytes), bytes};
    return buffer;
}

static void device_free(const gpu *g, device_buffer *buffer) {
    gpu_free(g, &buffer->ptr);
}

static void *device_address(CUdeviceptr ptr) { return (void *)(uintptr_t)ptr; }

static tk_tensor tensor3(CUdeviceptr data, tk_dtype dtype, int64_t d0, int64_t d1,
                         int64_t d2, int64_t s0, int64_t s1, int64_t s2) {
    tk_tensor t = gpu_tensor2(data, dtype, d0, d1, s0, s1);
    t.rank = 3;
    t.shape[2] = d2;
    t.strides[2] = s2;
    return t;
}

/* ---- comparison ------------------------------------------------------------ */

static void print_element(char *text, size_t size, const unsigned char *element,
                          size_t element_size) {
    uint64_t value = 0;
    memcpy(&value, element, element_size < 8 ? element_size : 8);
    snprintf(text, size, "0x%0*llx", (int)(2 * element_size), (unsigned long long)value);
}

/* Byte-exact comparison of `count` elements of a (batches, rows, cols)
 * tensor (rows = 0 for a plain matrix); fails the test with the first
 * mismatch. */
static void expect_equal(const void *got, const void *want, int64_t count, int64_t rows,
                         int64_t cols, size_t element_size, const char *what) {
    size_t bytes = (size_t)count * element_size;
    size_t first = ref_first_difference(got, want, bytes);
    if (first == SIZE_MAX)
        return;
    int64_t index = (int64_t)(first / element_size);
    int64_t mismatches = 0;
    for (int64_t i = index; i < count; i++)
        mismatches += memcmp((const char *)got + i * element_size,
                             (const char *)want + i * element_size, element_size) != 0;
    char got_text[32], want_text[32];
    print_element(got_text, sizeof got_text, (const unsigned char *)got + index * element_size,
                  element_size);
    print_element(want_text, sizeof want_text,
                  (const unsigned char *)want + index * element_size, element_size);
    char position[64];
    if (rows > 0)
        snprintf(position, sizeof position, "[%ld, %ld, %ld]", (long)(index / (rows * cols)),
                 (long)(index / cols % rows), (long)(index % cols));
    else
        snprintf(position, sizeof position, "[%ld, %ld]", (long)(index / cols),
                 (long)(index % cols));
    cr_assert_fail("%s: first mismatch at %s (element %ld): got %s, expected %s; "
                   "%ld of %ld elements differ",
                   what, position, (long)index, got_text, want_text, (long)mismatches,
                   (long)count);
}

/* Compares the scales of every block; padding is not compared. */
static void expect_equal_sf(const ref_sf_shape *shape, const unsigned char *got,
                            const unsigned char *want, const char *what) {
    size_t size = ref_sf_entry_bytes(shape);
    for (int64_t i = 0; i < shape->nbm; i++)
        for (int64_t k = 0; k < shape->nbk; k++) {
            size_t offset = ref_sf_offset(shape, i, k);
            if (memcmp(got + offset, want + offset, size) == 0)
                continue;
            char got_text[32], want_text[32];
            print_element(got_text, sizeof got_text, got + offset, size);
            print_element(want_text, sizeof want_text, want + offset, size);
            cr_assert_fail("%s: scale of block (%ld, %ld) (byte offset %zu): got %s, "
                           "expected %s",
                           what, (long)i, (long)k, offset, got_text, want_text);
        }
}

/* Random input of `count` elements: normals times powers of two for
 * floats, finite non-zero codes for e4m3. */
static void fill_input(void *host, tk_dtype dtype, size_t count, uint64_t seed) {
    if (dtype == TK_E4M3) {
        ref_fill_rand_e4m3(host, (int64_t)count, seed);
        return;
    }
    /* rows of 4096 elements, each with its own power of two */
    ref_fill_rand_float(host, dtype, (int64_t)((count + 4095) / 4096), 4096, -110, 126, seed);
}

/* ---- transpose ----------------------------------------------------------- */

typedef struct transpose_state {
    gpu g;
    tk_dtype dtype;
    size_t element_size;
    unsigned char *input, *got, *want;
    device_buffer device_input, device_output;
    int cases;
} transpose_state;

static void transpose_begin(transpose_state *s, tk_dtype dtype, size_t max_elements) {
    s->g = gpu_begin();
    s->dtype = dtype;
    s->element_size = tk_dtype_size(dtype);
    s->cases = 0;
    size_t bytes = max_elements * s->element_size;
    /* allocated in whole 4096-element rows, see fill_input */
    size_t input_bytes = (max_elements + 4095) / 4096 * 4096 * s->element_size;
    s->input = host_alloc(input_bytes);
    s->got = host_alloc(bytes + TAIL_BYTES);
    s->want = host_alloc(bytes + TAIL_BYTES);
    fill_input(s->input, dtype, max_elements, test_seed() + 1000 + (uint64_t)dtype);
    s->device_input = device_alloc(&s->g, input_bytes);
    s->device_output = device_alloc(&s->g, bytes + TAIL_BYTES);
    CU(&s->g, cuMemcpyHtoD(s->device_input.ptr, s->input, input_bytes));
}

static void transpose_end(transpose_state *s) {
    device_free(&s->g, &s->device_input);
    device_free(&s->g, &s->device_output);
    free(s->input);
    free(s->got);
    free(s->want);
}

/* One case: x (batches, rows, cols) with row stride `stride` (batched, or
 * 2-D when batched is false and batches == 1). */
static void transpose_case(transpose_state *s, bool batched, int64_t batches, int64_t rows,
                           int64_t cols, int64_t stride) {
    char what[160];
    snprintf(what, sizeof what, "%s %s B=%ld X=%ld Y=%ld stride=%ld",
             batched ? "batched_transpose" : "transpose", gpu_dtype_name(s->dtype),
             (long)batches, (long)rows, (long)cols, (long)stride);
    size_t out_bytes = (size_t)(batches * rows * cols) * s->element_size;
    CU(&s->g, cuMemsetD8(s->device_output.ptr, POISON, out_bytes + TAIL_BYTES));
    tk_status status;
    if (batched) {
        tk_tensor x = tensor3(s->device_input.ptr, s->dtype, batches, rows, cols,
                              rows * stride, stride, 1);
        tk_tensor out = tensor3(s->device_output.ptr, s->dtype, batches, cols, rows,
                                cols * rows, rows, 1);
        status = tk_batched_transpose(&x, &out, NULL);
    } else {
        tk_tensor x = gpu_tensor2(s->device_input.ptr, s->dtype, rows, cols, stride, 1);
        tk_tensor out = gpu_tensor2(s->device_output.ptr, s->dtype, cols, rows, rows, 1);
        status = tk_transpose(&x, &out, NULL);
    }
    check_status(status, what);
    download_output(&s->g, s->got, s->device_output.ptr, out_bytes, what);
    ref_batched_transpose(s->input, s->want, s->element_size, batches, rows, cols, stride,
                          rows * stride);
    expect_equal(s->got, s->want, batches * rows * cols, batched ? cols : 0, rows,
                 s->element_size, what);
    s->cases++;
}

static void run_batched_transpose(tk_dtype dtype) {
    transpose_state s;
    double start = now_seconds();
    size_t element_size = tk_dtype_size(dtype);
    /* the largest view: 32 x 8064 x 7168, or 8 x 4032 rows of 7172 */
    transpose_begin(&s, dtype, (size_t)32 * MAX_TOKENS * MAX_HIDDEN);
    int64_t batch_sizes[] = {8, 32};
    for (int b = 0; b < 2; b++)
        for (size_t t = 0; t < 3; t++)
            for (size_t h = 0; h < NUM_HIDDEN; h++)
                transpose_case(&s, true, batch_sizes[b], TRANSPOSE_TOKENS[t], HIDDEN[h],
                               HIDDEN[h]);
    /* row-strided input (the row stride only has to be a multiple of 4) */
    for (size_t h = 0; h < NUM_HIDDEN; h++)
        transpose_case(&s, true, 8, 4032, HIDDEN[h], HIDDEN[h] + 4);
    /* an empty batch launches nothing */
    transpose_case(&s, true, 0, 4032, 576, 576);
    cr_log_info("batched_transpose %s: %d cases in %.1f s (element size %zu)",
                gpu_dtype_name(dtype), s.cases, now_seconds() - start, element_size);
    transpose_end(&s);
}

Test(batched_transpose, f32, .timeout = 1800) { run_batched_transpose(TK_F32); }
Test(batched_transpose, bf16, .timeout = 1800) { run_batched_transpose(TK_BF16); }
Test(batched_transpose, e4m3, .timeout = 1800) { run_batched_transpose(TK_E4M3); }

Test(transpose, two_d_contiguous_and_strided, .timeout = 1800) {
    tk_dtype dtypes[] = {TK_E4M3, TK_BF16, TK_F32};
    for (int d = 0; d < 3; d++) {
        transpose_state s;
        double start = now_seconds();
        transpose_begin(&s, dtypes[d], (size_t)MAX_TOKENS * 2 * MAX_HIDDEN);
        for (size_t t = 0; t < 3; t++)
            for (size_t h = 0; h < NUM_HIDDEN; h++) {
                transpose_case(&s, false, 1, TRANSPOSE_TOKENS[t], HIDDEN[h], HIDDEN[h]);
                /* a view with row stride 2 * hidden, as TileKernels tests */
                transpose_case(&s, false, 1, TRANSPOSE_TOKENS[t], HIDDEN[h], 2 * HIDDEN[h]);
            }
        cr_log_info("transpose %s: %d cases in %.1f s", gpu_dtype_name(dtypes[d]), s.cases,
                    now_seconds() - start);
        transpose_end(&s);
    }
}

/* ---- per_token_cast ------------------------------------------------------ */

/* Widest row stride any per_token_cast case uses: hidden + 64. */
#define CAST_MAX_STRIDE (MAX_HIDDEN + 64)

typedef struct cast_state {
    gpu g;
    tk_dtype in_dtype;
    size_t in_size;
    void *input;
    uint8_t *got, *want;
    unsigned char *got_sf, *want_sf;
    device_buffer device_input, device_output, device_sf;
    size_t max_sf_bytes;
    int cases;
} cast_state;

static void cast_begin(cast_state *s, tk_dtype in_dtype) {
    s->g = gpu_begin();
    s->in_dtype = in_dtype;
    s->in_size = tk_dtype_size(in_dtype);
    s->cases = 0;
    size_t input_bytes = (size_t)8001 * CAST_MAX_STRIDE * s->in_size;
    size_t out_bytes = (size_t)8001 * MAX_HIDDEN;
    /* the largest SF buffer: 8001 x 7168 in 32-column groups, col-major */
    ref_sf_shape largest;
    ref_sf_shape_of(8001, MAX_HIDDEN, 1, 32, TK_SF_COL_MAJOR, &largest);
    s->max_sf_bytes = largest.bytes;
    s->input = host_alloc(input_bytes);
    ref_fill_rand_float(s->input, in_dtype, 8001, CAST_MAX_STRIDE, -110, 126,
                        test_seed() + 2000 + (uint64_t)in_dtype);
    s->got = host_alloc(out_bytes + TAIL_BYTES);
    s->want = host_alloc(out_bytes + TAIL_BYTES);
    s->got_sf = host_alloc(s->max_sf_bytes + TAIL_BYTES);
    s->want_sf = host_alloc(s->max_sf_bytes + TAIL_BYTES);
    s->device_input = device_alloc(&s->g, input_bytes);
    s->device_output = device_alloc(&s->g, out_bytes + TAIL_BYTES);
    s->device_sf = device_alloc(&s->g, s->max_sf_bytes + TAIL_BYTES);
    CU(&s->g, cuMemcpyHtoD(s->device_input.ptr, s->input, input_bytes));
}

static void cast_end(cast_state *s) {
    device_free(&s->g, &s->device_input);
    device_free(&s->g, &s->device_output);
    device_free(&s->g, &s->device_sf);
    free(s->input);
    free(s->got);
    free(s->want);
    free(s->got_sf);
    free(s->want_sf);
}

/* Runs per_token_cast on the view (tokens, hidden, stride) of the device
 * input at `input` and leaves out / SF in got / got_sf. */
static void cast_launch(cast_state *s, CUdeviceptr input, int64_t tokens, int64_t hidden,
                        int64_t stride, int npc, bool round_sf, tk_sf_layout layout,
                        const ref_sf_shape *shape, const char *what) {
    CU(&s->g, cuMemsetD8(s->device_output.ptr, POISON, (size_t)(tokens * hidden) + TAIL_BYTES));
    CU(&s->g, cuMemsetD8(s->device_sf.ptr, POISON, shape->bytes + TAIL_BYTES));
    tk_tensor sf;
    size_t sf_bytes = 0;
    check_status(tk_sf_desc(tokens, hidden, 1, npc, layout, &sf, &sf_bytes), "tk_sf_desc");
    cr_assert_eq(sf_bytes, shape->bytes, "%s: tk_sf_desc gives %zu bytes, reference %zu", what,
                 sf_bytes, shape->bytes);
    sf.data = device_address(s->device_sf.ptr);
    tk_tensor x = gpu_tensor2(input, s->in_dtype, tokens, hidden, stride, 1);
    tk_tensor out = gpu_tensor2(s->device_output.ptr, TK_E4M3, tokens, hidden, hidden, 1);
    check_status(tk_per_token_cast(&x, npc, round_sf, layout, &out, &sf, NULL), what);
    download_output(&s->g, s->got, s->device_output.ptr, (size_t)(tokens * hidden), what);
    download_output(&s->g, s->got_sf, s->device_sf.ptr, shape->bytes, what);
}

static void cast_case(cast_state *s, int64_t tokens, int64_t hidden, int64_t stride, int npc,
                      bool round_sf, tk_sf_layout layout) {
    char what[200];
    snprintf(what, sizeof what,
             "per_token_cast %s->e4m3 T=%ld H=%ld stride=%ld npc=%d round=%d sf=%s",
             gpu_dtype_name(s->in_dtype), (long)tokens, (long)hidden, (long)stride, npc,
             round_sf, gpu_layout_name(layout));
    ref_sf_shape shape;
    cr_assert(ref_sf_shape_of(tokens, hidden, 1, npc, layout, &shape));
    cast_launch(s, s->device_input.ptr, tokens, hidden, stride, npc, round_sf, layout, &shape,
                what);
    memset(s->want_sf, POISON, shape.bytes);
    cr_assert(ref_per_token_cast_e4m3(s->input, s->in_dtype, tokens, hidden, stride, npc,
                                      round_sf, layout, s->want, s->want_sf));
    expect_equal(s->got, s->want, tokens * hidden, 0, hidden, 1, what);
    expect_equal_sf(&shape, s->got_sf, s->want_sf, what);
    s->cases++;
}

static const struct {
    bool round_sf;
    tk_sf_layout layout;
} CAST_MODES[] = {
    {false, TK_SF_ROW_MAJOR},
    {true, TK_SF_ROW_MAJOR},
    {true, TK_SF_COL_MAJOR},
    {true, TK_SF_PACKED_UE8M0},
};
static const int NPC[] = {32, 64, 128};

static void run_per_token_cast(tk_dtype in_dtype) {
    cast_state s;
    double start = now_seconds();
    cast_begin(&s, in_dtype);
    for (size_t t = 0; t < 3; t++)
        for (size_t h = 0; h < NUM_HIDDEN; h++)
            for (int n = 0; n < 3; n++)
                for (int m = 0; m < 4; m++)
                    cast_case(&s, TOKENS[t], HIDDEN[h], HIDDEN[h], NPC[n],
                              CAST_MODES[m].round_sf, CAST_MODES[m].layout);
    /* padded row strides: a multiple of the vector (fast path) and an odd
     * one (every row misaligned) */
    for (size_t h = 0; h < NUM_HIDDEN; h++)
        for (int n = 0; n < 3; n++)
            for (int m = 0; m < 4; m += 3) {
                cast_case(&s, 4001, HIDDEN[h], HIDDEN[h] + 64, NPC[n], CAST_MODES[m].round_sf,
                          CAST_MODES[m].layout);
                cast_case(&s, 4001, HIDDEN[h], HIDDEN[h] + 1, NPC[n], CAST_MODES[m].round_sf,
                          CAST_MODES[m].layout);
            }
    cr_log_info("per_token_cast %s: %d cases in %.1f s", gpu_dtype_name(in_dtype), s.cases,
                now_seconds() - start);
    cast_end(&s);
}

Test(per_token_cast, f32, .timeout = 1800) { run_per_token_cast(TK_F32); }
Test(per_token_cast, bf16, .timeout = 1800) { run_per_token_cast(TK_BF16); }

/* tilekernels-spec.md 2.6 (4): a row-strided input gives exactly the
 * result of its contiguous copy. */
Test(per_token_cast, strided_equals_contiguous, .timeout = 1800) {
    tk_dtype dtypes[] = {TK_BF16, TK_F32};
    for (int d = 0; d < 2; d++) {
        cast_state s;
        cast_begin(&s, dtypes[d]);
        int64_t shapes[][2] = {{4001, 576}, {4001, 7168}, {8001, 2560}};
        for (int i = 0; i < 3; i++)
            for (int extra = 1; extra <= 64; extra += 63)
                for (int m = 0; m < 4; m += 3) {
                    int64_t tokens = shapes[i][0], hidden = shapes[i][1];
                    int64_t stride = hidden + extra;
                    char what[200];
                    snprintf(what, sizeof what,
                             "per_token_cast %s T=%ld H=%ld stride %ld vs contiguous sf=%s",
                             gpu_dtype_name(dtypes[d]), (long)tokens, (long)hidden, (long)stride,
                             gpu_layout_name(CAST_MODES[m].layout));
                    /* the contiguous copy of the strided view */
                    unsigned char *contiguous = host_alloc((size_t)(tokens * hidden) * s.in_size);
                    for (int64_t r = 0; r < tokens; r++)
                        memcpy(contiguous + (size_t)(r * hidden) * s.in_size,
                               (unsigned char *)s.input + (size_t)(r * stride) * s.in_size,
                               (size_t)hidden * s.in_size);
                    device_buffer copy = device_alloc(&s.g, (size_t)(tokens * hidden) * s.in_size);
                    CU(&s.g, cuMemcpyHtoD(copy.ptr, contiguous, copy.bytes));
                    ref_sf_shape shape;
                    ref_sf_shape_of(tokens, hidden, 1, 128, CAST_MODES[m].layout, &shape);
                    cast_launch(&s, s.device_input.ptr, tokens, hidden, stride, 128,
                                CAST_MODES[m].round_sf, CAST_MODES[m].layout, &shape, what);
                    memcpy(s.want, s.got, (size_t)(tokens * hidden));
                    memcpy(s.want_sf, s.got_sf, shape.bytes);
                    cast_launch(&s, copy.ptr, tokens, hidden, hidden, 128,
                                CAST_MODES[m].round_sf, CAST_MODES[m].layout, &shape, what);
                    expect_equal(s.got, s.want, tokens * hidden, 0, hidden, 1, what);
                    expect_equal_sf(&shape, s.got_sf, s.want_sf, what);
                    device_free(&s.g, &copy);
                    free(contiguous);
                }
        cast_end(&s);
    }
}

/* ---- cast_back ------------------------------------------------------------ */

static const int CAST_BACK_BLOCKS[][2] = {{1, 128}, {1, 64}, {1, 32},
                                          {128, 128}, {128, 1}, {32, 32}};

typedef struct cast_back_state {
    gpu g;
    tk_dtype out_dtype;
    size_t out_size;
    uint16_t *source;   /* bf16 values the quantised inputs are made from */
    uint8_t *quantized; /* e4m3 data of the current case */
    unsigned char *sf, *sf_other;
    unsigned char *got, *want;
    device_buffer device_x, device_sf, device_output;
    int cases;
} cast_back_state;

static void cast_back_case(cast_back_state *s, int64_t tokens, int64_t hidden, int bm, int bk,
                           tk_sf_layout layout, const unsigned char *sf, bool per_token_entry) {
    char what[200];
    snprintf(what, sizeof what, "%s e4m3->%s T=%ld H=%ld block=%dx%d sf=%s",
             per_token_entry ? "per_token_cast_back" : "cast_back", gpu_dtype_name(s->out_dtype),
             (long)tokens, (long)hidden, bm, bk, gpu_layout_name(layout));
    ref_sf_shape shape;
    cr_assert(ref_sf_shape_of(tokens, hidden, bm, bk, layout, &shape));
    CU(&s->g, cuMemcpyHtoD(s->device_sf.ptr, sf, shape.bytes ? shape.bytes : 1));
    size_t out_bytes = (size_t)(tokens * hidden) * s->out_size;
    CU(&s->g, cuMemsetD8(s->device_output.ptr, POISON, out_bytes + TAIL_BYTES));
    tk_tensor sf_desc;
    size_t sf_bytes = 0;
    check_status(tk_sf_desc(tokens, hidden, bm, bk, layout, &sf_desc, &sf_bytes), "tk_sf_desc");
    sf_desc.data = device_address(s->device_sf.ptr);
    tk_tensor x = gpu_tensor2(s->device_x.ptr, TK_E4M3, tokens, hidden, hidden, 1);
    tk_tensor out = gpu_tensor2(s->device_output.ptr, s->out_dtype, tokens, hidden, hidden, 1);
    tk_status status = per_token_entry ? tk_per_token_cast_back(&x, &sf_desc, bk, &out, NULL)
                                       : tk_cast_back(&x, &sf_desc, bm, bk, &out, NULL);
    check_status(status, what);
    download_output(&s->g, s->got, s->device_output.ptr, out_bytes, what);
    cr_assert(ref_cast_back_e4m3(s->quantized, tokens, hidden, sf, layout, bm, bk,
                                 s->out_dtype, s->want));
    expect_equal(s->got, s->want, tokens * hidden, 0, hidden, s->out_size, what);
    s->cases++;
}

/* Quantises the source with (bm, bk) blocks as TileKernels' tests do
 * (torch.cast), uploads the data, then dequantises on the GPU with every
 * SF layout that applies. */
static void cast_back_shape(cast_back_state *s, int64_t tokens, int64_t hidden, int bm, int bk) {
    ref_sf_shape row, col, packed;
    ref_sf_shape_of(tokens, hidden, bm, bk, TK_SF_ROW_MAJOR, &row);
    ref_sf_shape_of(tokens, hidden, bm, bk, TK_SF_COL_MAJOR, &col);
    ref_sf_shape_of(tokens, hidden, bm, bk, TK_SF_PACKED_UE8M0, &packed);

    /* f32 scales without rounding, in the row- and column-major layouts */
    memset(s->sf, 0, row.bytes);
    cr_assert(ref_cast_e4m3(s->source, TK_BF16, tokens, hidden, MAX_HIDDEN, bm, bk, false,
                            TK_SF_ROW_MAJOR, s->quantized, s->sf));
    memset(s->sf_other, 0, col.bytes);
    for (int64_t i = 0; i < row.nbm; i++)
        for (int64_t k = 0; k < row.nbk; k++) {
            ref_scale scale = {ref_sf_load(&row, s->sf, i, k), 0.0f, 0};
            ref_sf_store(&col, s->sf_other, i, k, scale);
        }
    CU(&s->g, cuMemcpyHtoD(s->device_x.ptr, s->quantized, (size_t)(tokens * hidden) + 1));
    cast_back_case(s, tokens, hidden, bm, bk, TK_SF_ROW_MAJOR, s->sf, false);
    cast_back_case(s, tokens, hidden, bm, bk, TK_SF_COL_MAJOR, s->sf_other, false);
    if (bm == 1) {
        cast_back_case(s, tokens, hidden, bm, bk, TK_SF_ROW_MAJOR, s->sf, true);
        cast_back_case(s, tokens, hidden, bm, bk, TK_SF_COL_MAJOR, s->sf_other, true);
    }

    /* packed UE8M0 (power-of-two scales) for (1, *) and (128, 128) */
    if (bm == 1 || (bm == 128 && bk == 128)) {
        memset(s->sf, 0, packed.bytes);
        cr_assert(ref_cast_e4m3(s->source, TK_BF16, tokens, hidden, MAX_HIDDEN, bm, bk, true,
                                TK_SF_PACKED_UE8M0, s->quantized, s->sf));
        CU(&s->g, cuMemcpyHtoD(s->device_x.ptr, s->quantized, (size_t)(tokens * hidden) + 1));
        cast_back_case(s, tokens, hidden, bm, bk, TK_SF_PACKED_UE8M0, s->sf, false);
        if (bm == 1)
            cast_back_case(s, tokens, hidden, bm, bk, TK_SF_PACKED_UE8M0, s->sf, true);
    }
}

static void run_cast_back(tk_dtype out_dtype) {
    cast_back_state s;
    double start = now_seconds();
    s.g = gpu_begin();
    s.out_dtype = out_dtype;
    s.out_size = tk_dtype_size(out_dtype);
    s.cases = 0;
    size_t elements = (size_t)8001 * MAX_HIDDEN;
    ref_sf_shape largest; /* (128, 1) blocks in the padded col-major layout */
    ref_sf_shape_of(8001, MAX_HIDDEN, 128, 1, TK_SF_COL_MAJOR, &largest);
    ref_sf_shape largest_row; /* (1, 32) blocks */
    ref_sf_shape_of(8001, MAX_HIDDEN, 1, 32, TK_SF_COL_MAJOR, &largest_row);
    size_t sf_bytes = largest.bytes > largest_row.bytes ? largest.bytes : largest_row.bytes;
    s.source = host_alloc(elements * 2);
    ref_fill_rand_float(s.source, TK_BF16, 8001, MAX_HIDDEN, -110, 126,
                        test_seed() + 3000 + (uint64_t)out_dtype);
    s.quantized = host_alloc(elements + 1);
    s.sf = host_alloc(sf_bytes);
    s.sf_other = host_alloc(sf_bytes);
    s.got = host_alloc(elements * s.out_size + TAIL_BYTES);
    s.want = host_alloc(elements * s.out_size);
    s.device_x = device_alloc(&s.g, elements + 1);
    s.device_sf = device_alloc(&s.g, sf_bytes);
    s.device_output = device_alloc(&s.g, elements * s.out_size + TAIL_BYTES);
    for (size_t t = 0; t < 3; t++)
        for (size_t h = 0; h < NUM_HIDDEN; h++)
            for (int b = 0; b < 6; b++)
                cast_back_shape(&s, TOKENS[t], HIDDEN[h], CAST_BACK_BLOCKS[b][0],
                                CAST_BACK_BLOCKS[b][1]);
    cr_log_info("cast_back e4m3->%s: %d cases in %.1f s", gpu_dtype_name(out_dtype), s.cases,
                now_seconds() - start);
    device_free(&s.g, &s.device_x);
    device_free(&s.g, &s.device_sf);
    device_free(&s.g, &s.device_output);
    free(s.source);
    free(s.quantized);
    free(s.sf);
    free(s.sf_other);
    free(s.got);
    free(s.want);
}

Test(cast_back, to_bf16, .timeout = 1800) { run_cast_back(TK_BF16); }
Test(cast_back, to_f32, .timeout = 1800) { run_cast_back(TK_F32); }
