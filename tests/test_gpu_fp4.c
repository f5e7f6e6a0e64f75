/*
 * test_gpu_fp4.c -- golden tests of kernels/quant_fp4.tk on the GPU:
 * per_token_cast to e2m1 (and e4m3 with npc 16 and npc == H), the SF-only
 * and precomputed-SF modes, requantisation of e4m3 / packed FP4 input, and
 * cast_back from packed FP4, compared byte for byte with tests/ref/fp4.c.
 *
 * Without a usable CUDA device every test is skipped.  On the GPU machine
 * the method is test_gpu_kernels.c's: inputs are normals times random
 * powers of two, uploaded once per test; outputs and SF buffers are
 * poisoned (0xFF) before each launch and TAIL_BYTES past each output must
 * stay poisoned; data is compared over the valid bytes, SF buffers only at
 * the bytes that hold a scale.  The sweep (tilekernels-spec.md 6.1, 6.3,
 * 12.1, 12.4): tokens 0 / 4001 / 8001, hidden 576 ... 7168, f32 and bf16,
 * npc 16 / 32 / 64 / 128 / H, SF row-major (round or not), column-major and
 * packed UE8M0, row strides H + 64 and H + 1, quantised inputs with
 * (128, 128) and (32, 32) blocks in every SF layout.  Every shape runs, but
 * the options rotate over the shapes instead of forming their full product
 * (which cost minutes of CPU reference time), so the whole binary stays
 * well under 90 s on the 16-core H200 machine next to the other test
 * binaries.  Nothing is printed per case; each test prints one line with
 * its case count and time.  TK_TEST_SEED changes the inputs;
 * TK_REF_THREADS the reference threads.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fp4.h"
#include "gpu_harness.h"
#include "reference.h"
#include "tk.h"
#include "tk_internal.h"

#define TAIL_BYTES GPU_TAIL_BYTES
#define POISON 0xFF

static const int64_t HIDDEN[] = {576, 2048, 2560, 3072, 4096, 6144, 7168};
#define NUM_HIDDEN (sizeof HIDDEN / sizeof HIDDEN[0])
static const int64_t TOKENS[] = {0, 4001, 8001};
#define MAX_TOKENS 8001
#define MAX_HIDDEN 7168
#define MAX_STRIDE (MAX_HIDDEN + 64)

/* ---- device helpers (as in test_gpu_kernels.c) ----------------------------- */

static gpu dev; /* set by gpu_begin */

/* This file's poison byte and tail message for the shared harness. */
static void poison(CUdeviceptr ptr, size_t bytes) { gpu_poison(&dev, ptr, bytes, POISON); }

static void download(void *host, CUdeviceptr device, size_t bytes, const char *what) {
    gpu_download(&dev, host, device, bytes, POISON, " of the output", what);
}

static void expect_equal(const void *got, const void *want, size_t bytes, int64_t row_bytes,
                         const char *what) {
    size_t first = ref_first_difference(got, want, bytes);
    if (first == SIZE_MAX)
        return;
    size_t count = 0;
    for (size_t i = first; i < bytes; i++)
        count += ((const unsigned char *)got)[i] != ((const unsigned char *)want)[i];
    cr_assert_fail("%s: first mismatch at byte %zu (row %ld, byte %ld): got 0x%02x, expected "
                   "0x%02x; %zu of %zu bytes differ",
                   what, first, (long)(first / (size_t)row_bytes),
                   (long)(first % (size_t)row_bytes), ((const unsigned char *)got)[first],
                   ((const unsigned char *)want)[first], count, bytes);
}

static void expect_equal_sf(const ref_sf_shape *shape, const unsigned char *got,
                            const unsigned char *want, const char *what) {
    size_t size = ref_sf_entry_bytes(shape);
    for (int64_t i = 0; i < shape->nbm; i++)
        for (int64_t k = 0; k < shape->nbk; k++) {
            size_t offset = ref_sf_offset(shape, i, k);
            if (memcmp(got + offset, want + offset, size) != 0)
                cr_assert_fail("%s: scale of block (%ld, %ld) differs (byte offset %zu)", what,
                               (long)i, (long)k, offset);
        }
}

static const char *dtype_name(tk_dtype dtype) {
    return dtype == TK_F32 ? "f32" : dtype == TK_BF16 ? "bf16" : dtype == TK_E4M3 ? "e4m3"
                                                                                 : "e2m1";
}
static const char *layout_name(tk_sf_layout layout) {
    return layout == TK_SF_ROW_MAJOR ? "row" : layout == TK_SF_COL_MAJOR ? "col" : "packed";
}

/* ---- shared state: one random input, output and SF buffers ---------------- */

typedef struct state {
    tk_dtype in_dtype;
    size_t in_size;
    void *input;
    unsigned char *got, *want, *got_sf, *want_sf;
    CUdeviceptr device_input, device_output, device_sf, device_aux;
    size_t sf_bytes;
    int cases;
} state;

static void state_begin(state *s, tk_dtype in_dtype) {
    dev = gpu_begin();
    s->in_dtype = in_dtype;
    s->in_size = tk_dtype_size(in_dtype);
    s->cases = 0;
    size_t input_bytes = (size_t)MAX_TOKENS * MAX_STRIDE * s->in_size;
    size_t out_bytes = (size_t)MAX_TOKENS * MAX_HIDDEN * 4; /* room for f32 cast_back */
    ref_sf_shape largest; /* (1, 16) blocks, column-major */
    ref_sf_shape_of(MAX_TOKENS, MAX_HIDDEN, 1, 16, TK_SF_COL_MAJOR, &largest);
    s->sf_bytes = largest.bytes;
    s->input = host_alloc(input_bytes);
    ref_fill_rand_float(s->input, in_dtype, MAX_TOKENS, MAX_STRIDE, -110, 126,
                        test_seed() + 7000 + (uint64_t)in_dtype);
    s->got = host_alloc(out_bytes + TAIL_BYTES);
    s->want = host_alloc(out_bytes + TAIL_BYTES);
    s->got_sf = host_alloc(s->sf_bytes + TAIL_BYTES);
    s->want_sf = host_alloc(s->sf_bytes + TAIL_BYTES);
    s->device_input = gpu_alloc(&dev, input_bytes);
    s->device_output = gpu_alloc(&dev, out_bytes + TAIL_BYTES);
    s->device_sf = gpu_alloc(&dev, s->sf_bytes + TAIL_BYTES);
    s->device_aux = gpu_alloc(&dev, s->sf_bytes + TAIL_BYTES);
    CU(&dev, cuMemcpyHtoD(s->device_input, s->input, input_bytes));
}

static void state_end(state *s) {
    CU(&dev, cuMemFree(s->device_input));
    CU(&dev, cuMemFree(s->device_output));
    CU(&dev, cuMemFree(s->device_sf));
    CU(&dev, cuMemFree(s->device_aux));
    free(s->input);
    free(s->got);
    free(s->want);
    free(s->got_sf);
    free(s->want_sf);
}

static size_t out_row_bytes(tk_dtype format, int64_t hidden) {
    return (size_t)(format == TK_E2M1 ? hidden / 2 : hidden);
}

/* ---- per_token_cast of float input ---------------------------------------- */

/* One tk_per_token_cast case on the view (tokens, hidden, stride). */
static void cast_case(state *s, tk_dtype format, int64_t tokens, int64_t hidden, int64_t stride,
                      int npc, bool round_sf, tk_sf_layout layout) {
    char what[200];
    snprintf(what, sizeof what, "per_token_cast %s->%s T=%ld H=%ld stride=%ld npc=%d round=%d sf=%s",
             dtype_name(s->in_dtype), dtype_name(format), (long)tokens, (long)hidden,
             (long)stride, npc, round_sf, layout_name(layout));
    ref_sf_shape shape;
    cr_assert(ref_sf_shape_of(tokens, hidden, 1, npc, layout, &shape));
    size_t out_bytes = (size_t)tokens * out_row_bytes(format, hidden);
    poison(s->device_output, out_bytes);
    poison(s->device_sf, shape.bytes);
    tk_tensor sf;
    size_t sf_bytes = 0;
    check_status(tk_sf_desc(tokens, hidden, 1, npc, layout, &sf, &sf_bytes), "tk_sf_desc");
    cr_assert_eq(sf_bytes, shape.bytes);
    sf.data = (void *)(uintptr_t)s->device_sf;
    tk_tensor x = gpu_tensor2(s->device_input, s->in_dtype, tokens, hidden, stride, 1);
    int64_t out_cols = (int64_t)out_row_bytes(format, hidden);
    tk_tensor out = gpu_tensor2(s->device_output, format == TK_E2M1 ? TK_I8 : TK_E4M3, tokens,
                            out_cols, out_cols, 1);
    check_status(tk_per_token_cast(&x, npc, round_sf, layout, &out, &sf, NULL), what);
    download(s->got, s->device_output, out_bytes, what);
    download(s->got_sf, s->device_sf, shape.bytes, what);
    ref_quant_input in = {s->input, s->in_dtype, stride, NULL, 0, 0, 0};
    memset(s->want_sf, POISON, shape.bytes);
    cr_assert(ref_per_token_quant(&in, tokens, hidden, npc, format, round_sf, layout, NULL,
                                  s->want, s->want_sf));
    expect_equal(s->got, s->want, out_bytes, out_cols, what);
    expect_equal_sf(&shape, s->got_sf, s->want_sf, what);
    s->cases++;
}

static const struct {
    bool round_sf;
    tk_sf_layout layout;
} MODES[] = {
    {true, TK_SF_ROW_MAJOR},     /* TileKernels' (F, T, F) */
    {true, TK_SF_PACKED_UE8M0},  /* TileKernels' (T, T, T) */
    {false, TK_SF_ROW_MAJOR},
    {true, TK_SF_COL_MAJOR},
};
#define NUM_MODES 4

/* The one line a test prints (nothing per case): what ran and how long. */
static void summary(const char *what, int cases, double start) {
    fprintf(stderr, "test_gpu_fp4: %s: %d cases in %.1f s\n", what, cases,
            now_seconds() - start);
}

/* The sweeps keep TileKernels' shapes (every hidden size at 4001 and 8001
 * tokens, T == 0 once per hidden size) and rotate the options over them:
 * case i of a sweep takes option combination i modulo the number of
 * combinations, so every combination runs at least once at some shape
 * without the full product (whose CPU references took minutes). */

static void run_e2m1_cast(tk_dtype in_dtype) {
    state s;
    double start = now_seconds();
    state_begin(&s, in_dtype);
    static const int NPC[] = {16, 32, 64, 128, 0 /* H */};
    /* 5 npc x 4 modes = 20 combinations over bf16's 28 cases (two per
     * shape); f32, whose kernels differ only in the load, takes one per
     * shape from elsewhere in the cycle (14 combinations) */
    int i = in_dtype == TK_F32 ? 7 : 0;
    int per_shape = in_dtype == TK_F32 ? 1 : 2;
    for (size_t t = 0; t < 3; t++)
        for (size_t h = 0; h < NUM_HIDDEN; h++)
            for (int k = 0; k < (TOKENS[t] ? per_shape : 1); k++, i++) {
                int combo = i % 20;
                int npc = NPC[combo % 5] ? NPC[combo % 5] : (int)HIDDEN[h];
                int m = combo / 5;
                cast_case(&s, TK_E2M1, TOKENS[t], HIDDEN[h], HIDDEN[h], npc,
                          MODES[m].round_sf, MODES[m].layout);
            }
    /* row strides: a multiple of the vector and an odd one (the _any
     * instances), at three sizes */
    for (size_t h = 0; h < NUM_HIDDEN; h += 3)
        for (int odd = 0; odd < 2; odd++) {
            int n = (int)(h / 3 * 2 + (size_t)odd) % 5;
            int npc = NPC[n] ? NPC[n] : (int)HIDDEN[h];
            int m = (int)(h / 3 + (size_t)odd) % NUM_MODES;
            cast_case(&s, TK_E2M1, 4001, HIDDEN[h], HIDDEN[h] + (odd ? 1 : 64), npc,
                      MODES[m].round_sf, MODES[m].layout);
        }
    char what[64];
    snprintf(what, sizeof what, "per_token_cast %s->e2m1", dtype_name(in_dtype));
    summary(what, s.cases, start);
    state_end(&s);
}

Test(per_token_cast_e2m1, bf16, .timeout = 85) { run_e2m1_cast(TK_BF16); }
Test(per_token_cast_e2m1, f32, .timeout = 85) { run_e2m1_cast(TK_F32); }

/* e4m3 with the blockings cast.tk lacks: npc 16 and npc == H. */
Test(per_token_cast_e4m3, npc_16_and_one_scale_per_token, .timeout = 85) {
    tk_dtype dtypes[] = {TK_BF16, TK_F32};
    double start = now_seconds();
    int cases = 0;
    for (int d = 0; d < 2; d++) {
        state s;
        state_begin(&s, dtypes[d]);
        int i = 2 * d;
        for (size_t t = 0; t < 3; t++)
            for (size_t h = 0; h < NUM_HIDDEN; h++, i++) {
                int m = i % NUM_MODES, other = (i + 1) % NUM_MODES;
                cast_case(&s, TK_E4M3, TOKENS[t], HIDDEN[h], HIDDEN[h], 16,
                          MODES[m].round_sf, MODES[m].layout);
                cast_case(&s, TK_E4M3, TOKENS[t], HIDDEN[h], HIDDEN[h], (int)HIDDEN[h],
                          MODES[other].round_sf, MODES[other].layout);
            }
        for (size_t h = 0; h < NUM_HIDDEN; h += 2) {
            cast_case(&s, TK_E4M3, 4001, HIDDEN[h], HIDDEN[h] + 1, (int)HIDDEN[h], true,
                      TK_SF_PACKED_UE8M0);
            cast_case(&s, TK_E4M3, 4001, HIDDEN[h], HIDDEN[h] + 64, 16, true, TK_SF_ROW_MAJOR);
        }
        cases += s.cases;
        state_end(&s);
    }
    summary("per_token_cast bf16/f32->e4m3 npc 16 / H", cases, start);
}

/* ---- SF only and precomputed SF ------------------------------------------- */

/* SF-only == the cast's SF (spec 2.6 (3)): the cast runs first (checked
 * against the reference, which leaves the reference's scales in want_sf),
 * then the SF-only launch's scales are compared with those.  The
 * precomputed cast is checked against the reference reading the same
 * row-major f32 scales. */
Test(per_token_cast_modes, sf_only_and_precomputed, .timeout = 85) {
    state s;
    double start = now_seconds();
    state_begin(&s, TK_BF16);
    static const int NPC[] = {16, 32, 64, 128};
    /* per (format, hidden): a row-major mode (round alternating, with the
     * precomputed cast) and a packed or column-major one */
    for (int f = 0; f < 2; f++)
        for (size_t h = 0; h < NUM_HIDDEN; h++)
            for (int k = 0; k < 2; k++) {
                int i = f * (int)NUM_HIDDEN + (int)h;
                int m = k == 0 ? (i % 2 ? 2 : 0) : (i / 2 % 2 ? 3 : 1);
                tk_dtype format = f ? TK_E2M1 : TK_E4M3;
                int64_t tokens = 4001, hidden = HIDDEN[h];
                int npc = NPC[(i + k) % 4];
                char what[200];
                snprintf(what, sizeof what, "sf_only %s H=%ld npc=%d round=%d sf=%s",
                         dtype_name(format), (long)hidden, npc, MODES[m].round_sf,
                         layout_name(MODES[m].layout));
                ref_sf_shape shape;
                cr_assert(ref_sf_shape_of(tokens, hidden, 1, npc, MODES[m].layout, &shape));
                /* the cast, on the GPU and in the reference (want_sf) */
                cast_case(&s, format, tokens, hidden, hidden, npc, MODES[m].round_sf,
                          MODES[m].layout);
                tk_tensor sf;
                check_status(tk_sf_desc(tokens, hidden, 1, npc, MODES[m].layout, &sf, NULL),
                             "tk_sf_desc");
                sf.data = (void *)(uintptr_t)s.device_sf;
                tk_tensor x = gpu_tensor2(s.device_input, TK_BF16, tokens, hidden, hidden, 1);
                poison(s.device_sf, shape.bytes);
                check_status(tk_per_token_cast_with_sf_only(&x, format, npc, MODES[m].round_sf,
                                                            MODES[m].layout, &sf, NULL),
                             what);
                download(s.got_sf, s.device_sf, shape.bytes, what);
                expect_equal_sf(&shape, s.got_sf, s.want_sf, what);
                s.cases++;
                if (MODES[m].layout != TK_SF_ROW_MAJOR)
                    continue;
                /* precomputed: the reference's scales, uploaded */
                snprintf(what, sizeof what, "precomputed %s H=%ld npc=%d round=%d",
                         dtype_name(format), (long)hidden, npc, MODES[m].round_sf);
                gpu_upload(&dev, s.device_aux, s.want_sf, shape.bytes);
                tk_tensor pre = sf;
                pre.data = (void *)(uintptr_t)s.device_aux;
                int64_t out_cols = (int64_t)out_row_bytes(format, hidden);
                size_t out_bytes = (size_t)tokens * (size_t)out_cols;
                tk_tensor out = gpu_tensor2(s.device_output, f ? TK_I8 : TK_E4M3, tokens, out_cols,
                                        out_cols, 1);
                poison(s.device_output, out_bytes);
                check_status(tk_per_token_cast_with_precomputed_sf(&x, npc, &pre, &out, NULL),
                             what);
                download(s.got, s.device_output, out_bytes, what);
                ref_quant_input in = {s.input, TK_BF16, hidden, NULL, 0, 0, 0};
                cr_assert(ref_per_token_quant(&in, tokens, hidden, npc, format, false,
                                              TK_SF_ROW_MAJOR, (const float *)s.want_sf,
                                              s.want, NULL));
                expect_equal(s.got, s.want, out_bytes, out_cols, what);
                s.cases++;
            }
    summary("sf_only / precomputed", s.cases, start);
    state_end(&s);
}

/* ---- requantisation --------------------------------------------------------- */

/* Random power-of-two (or, for f32 layouts, arbitrary positive) input
 * scales for (bm, bk) blocks of (tokens, hidden), written in `layout`. */
static void random_scales(unsigned char *sf, const ref_sf_shape *shape, bool powers_of_two,
                          uint64_t seed) {
    ref_rng rng = ref_rng_seed(seed, 1);
    for (int64_t i = 0; i < shape->nbm; i++)
        for (int64_t k = 0; k < shape->nbk; k++) {
            int e = (int)(ref_rng_next(&rng) % 40) - 20;
            ref_scale scale;
            scale.ue8m0 = (uint8_t)(127 + e);
            scale.sf = ref_ue8m0_to_f32(scale.ue8m0);
            if (!powers_of_two)
                scale.sf *= 1.0f + ref_rng_uniform(&rng);
            scale.inv = 0.0f;
            ref_sf_store(shape, sf, i, k, scale);
        }
}

Test(per_token_cast_quantized, e4m3_and_fp4_input, .timeout = 85) {
    state s;
    double start = now_seconds();
    state_begin(&s, TK_BF16);
    size_t data_bytes = (size_t)MAX_TOKENS * MAX_HIDDEN;
    uint8_t *data = host_alloc(data_bytes);
    unsigned char *in_sf = host_alloc(s.sf_bytes);
    CUdeviceptr device_data = gpu_alloc(&dev, data_bytes);
    static const int BLOCKS[][2] = {{128, 128}, {32, 32}};
    static const tk_sf_layout IN_LAYOUTS[] = {TK_SF_ROW_MAJOR, TK_SF_COL_MAJOR,
                                              TK_SF_PACKED_UE8M0};
    static const int NPC[] = {32, 128, 16, 64};
    for (int kind = 0; kind < 2; kind++) {
        tk_dtype data_dtype = kind ? TK_E2M1 : TK_E4M3;
        if (kind) /* any byte is two valid FP4 codes */
            for (size_t i = 0; i < data_bytes; i++)
                data[i] = (uint8_t)(ref_rng_next(&(ref_rng){test_seed() * 31 + i}) >> 24);
        else
            ref_fill_rand_e4m3(data, (int64_t)data_bytes, test_seed() + 8000);
        gpu_upload(&dev, device_data, data, data_bytes);
        /* 2 formats x 3 input layouts x 2 blocks = 12 combinations, npc
         * rotating on its own cycle, over 29 cases per input kind */
        int i = kind * 5;
        for (size_t t = 0; t < 3; t++)
            for (size_t h = 0; h < NUM_HIDDEN; h++)
                for (int k = 0; k < (TOKENS[t] ? 2 : 1); k++, i++) {
                    if (TOKENS[t] == 0 && h != 0)
                        continue; /* one empty case per kind */
                    int64_t tokens = TOKENS[t], hidden = HIDDEN[h];
                    int f = i % 2, l = i / 2 % 3, b = i / 6 % 2;
                    int npc = NPC[(i + i / 12) % 4];
                    tk_dtype format = f ? TK_E2M1 : TK_E4M3;
                    /* TileKernels' two modes: row f32 round with a row SF
                     * input, packed with packed input; the other input
                     * layouts with row output */
                    tk_sf_layout out_layout = IN_LAYOUTS[l] == TK_SF_PACKED_UE8M0
                                                  ? TK_SF_PACKED_UE8M0
                                                  : TK_SF_ROW_MAJOR;
                    bool round_sf = !(IN_LAYOUTS[l] == TK_SF_COL_MAJOR && npc == 32);
                    char what[220];
                    snprintf(what, sizeof what,
                             "requant %s->%s T=%ld H=%ld block=%dx%d in_sf=%s npc=%d round=%d "
                             "sf=%s",
                             dtype_name(data_dtype), dtype_name(format), (long)tokens,
                             (long)hidden, BLOCKS[b][0], BLOCKS[b][1], layout_name(IN_LAYOUTS[l]),
                             npc, round_sf, layout_name(out_layout));
                    ref_sf_shape in_shape, shape;
                    cr_assert(ref_sf_shape_of(tokens, hidden, BLOCKS[b][0], BLOCKS[b][1],
                                              IN_LAYOUTS[l], &in_shape));
                    cr_assert(ref_sf_shape_of(tokens, hidden, 1, npc, out_layout, &shape));
                    random_scales(in_sf, &in_shape, IN_LAYOUTS[l] != TK_SF_COL_MAJOR,
                                  test_seed() + (uint64_t)(t * 1000 + h * 10 + b));
                    gpu_upload(&dev, s.device_aux, in_sf, in_shape.bytes);
                    tk_tensor x_sf, sf;
                    check_status(tk_sf_desc(tokens, hidden, BLOCKS[b][0], BLOCKS[b][1],
                                            IN_LAYOUTS[l], &x_sf, NULL),
                                 "tk_sf_desc");
                    x_sf.data = (void *)(uintptr_t)s.device_aux;
                    check_status(tk_sf_desc(tokens, hidden, 1, npc, out_layout, &sf, NULL),
                                 "tk_sf_desc");
                    sf.data = (void *)(uintptr_t)s.device_sf;
                    int64_t data_cols = kind ? hidden / 2 : hidden;
                    tk_tensor x = gpu_tensor2(device_data, kind ? TK_I8 : TK_E4M3, tokens,
                                          data_cols, data_cols, 1);
                    int64_t out_cols = (int64_t)out_row_bytes(format, hidden);
                    size_t out_bytes = (size_t)tokens * (size_t)out_cols;
                    tk_tensor out = gpu_tensor2(s.device_output, f ? TK_I8 : TK_E4M3, tokens,
                                            out_cols, out_cols, 1);
                    poison(s.device_output, out_bytes);
                    poison(s.device_sf, shape.bytes);
                    check_status(tk_per_token_cast_quantized(&x, &x_sf, BLOCKS[b][0],
                                                             BLOCKS[b][1], npc, round_sf,
                                                             out_layout, &out, &sf, NULL),
                                 what);
                    download(s.got, s.device_output, out_bytes, what);
                    download(s.got_sf, s.device_sf, shape.bytes, what);
                    ref_quant_input in = {data, data_dtype, data_cols, in_sf,
                                          IN_LAYOUTS[l], BLOCKS[b][0], BLOCKS[b][1]};
                    cr_assert(ref_per_token_quant(&in, tokens, hidden, npc, format, round_sf,
                                                  out_layout, NULL, s.want, s.want_sf));
                    expect_equal(s.got, s.want, out_bytes, out_cols, what);
                    expect_equal_sf(&shape, s.got_sf, s.want_sf, what);
                    s.cases++;
                }
    }
    summary("per_token_cast_quantized", s.cases, start);
    CU(&dev, cuMemFree(device_data));
    free(data);
    free(in_sf);
    state_end(&s);
}

/* ---- cast_back from packed FP4 ---------------------------------------------- */

Test(cast_back_e2m1, every_layout_and_block, .timeout = 85) {
    state s;
    double start = now_seconds();
    state_begin(&s, TK_BF16);
    size_t data_bytes = (size_t)MAX_TOKENS * MAX_HIDDEN / 2;
    uint8_t *data = host_alloc(data_bytes);
    unsigned char *sf = host_alloc(s.sf_bytes);
    CUdeviceptr device_data = gpu_alloc(&dev, data_bytes);
    static const int BLOCKS[][2] = {{1, 128}, {1, 0 /* H */}, {1, 32}, {1, 16},
                                    {128, 128}, {32, 32}};
    static const tk_sf_layout LAYOUTS[] = {TK_SF_ROW_MAJOR, TK_SF_COL_MAJOR, TK_SF_PACKED_UE8M0};
    /* 6 blocks x 3 layouts = 18 combinations (case i = 6q + r takes block
     * r and layout (q + r) % 3) over 29 cases, the output dtype
     * alternating with q so that every block meets both */
    int i = 0;
    for (size_t t = 0; t < 3; t++)
        for (size_t h = 0; h < NUM_HIDDEN; h++)
            for (int k = 0; k < (TOKENS[t] ? 2 : 1); k++, i++) {
                if (TOKENS[t] == 0 && h != 0)
                    continue; /* one empty case */
                int64_t tokens = TOKENS[t], hidden = HIDDEN[h];
                int b = i % 6, l = (i / 6 + i) % 3, o = i / 6 % 2;
                int bm = BLOCKS[b][0], bk = BLOCKS[b][1] ? BLOCKS[b][1] : (int)hidden;
                ref_sf_shape shape;
                cr_assert(ref_sf_shape_of(tokens, hidden, bm, bk, LAYOUTS[l], &shape));
                size_t packed_bytes = (size_t)tokens * (size_t)hidden / 2;
                if (bm == 1) {
                    /* data and scales from the per-token cast, as TileKernels' tests */
                    ref_quant_input in = {s.input, TK_BF16, MAX_STRIDE, NULL, 0, 0, 0};
                    cr_assert(ref_per_token_quant(&in, tokens, hidden, bk, TK_E2M1,
                                                  LAYOUTS[l] != TK_SF_COL_MAJOR, LAYOUTS[l],
                                                  NULL, data, sf));
                } else {
                    for (size_t j = 0; j < packed_bytes; j++)
                        data[j] = (uint8_t)(ref_rng_next(&(ref_rng){j * 7 + 3}) >> 40);
                    random_scales(sf, &shape, LAYOUTS[l] == TK_SF_PACKED_UE8M0, 99 + h);
                }
                /* exactly the bytes each buffer holds (device_data has
                 * data_bytes, room for 8001 x 7168 and no more) */
                gpu_upload(&dev, device_data, data, packed_bytes);
                gpu_upload(&dev, s.device_aux, sf, shape.bytes);
                tk_dtype out_dtype = o ? TK_F32 : TK_BF16;
                char what[200];
                snprintf(what, sizeof what, "cast_back e2m1->%s T=%ld H=%ld block=%dx%d sf=%s",
                         dtype_name(out_dtype), (long)tokens, (long)hidden, bm, bk,
                         layout_name(LAYOUTS[l]));
                tk_tensor sf_desc;
                check_status(tk_sf_desc(tokens, hidden, bm, bk, LAYOUTS[l], &sf_desc, NULL),
                             "tk_sf_desc");
                sf_desc.data = (void *)(uintptr_t)s.device_aux;
                tk_tensor x = gpu_tensor2(device_data, TK_I8, tokens, hidden / 2, hidden / 2, 1);
                size_t out_size = tk_dtype_size(out_dtype);
                size_t out_bytes = (size_t)(tokens * hidden) * out_size;
                tk_tensor out = gpu_tensor2(s.device_output, out_dtype, tokens, hidden, hidden, 1);
                poison(s.device_output, out_bytes);
                tk_status status = bm == 1 ? tk_per_token_cast_back(&x, &sf_desc, bk, &out, NULL)
                                           : tk_cast_back(&x, &sf_desc, bm, bk, &out, NULL);
                check_status(status, what);
                download(s.got, s.device_output, out_bytes, what);
                cr_assert(ref_cast_back_e2m1(data, tokens, hidden, sf, LAYOUTS[l], bm, bk,
                                             out_dtype, s.want));
                expect_equal(s.got, s.want, out_bytes, hidden * (int64_t)out_size, what);
                s.cases++;
            }
    summary("cast_back e2m1", s.cases, start);
    CU(&dev, cuMemFree(device_data));
    free(data);
    free(sf);
    state_end(&s);
}

/* ---- argument validation (no device needed: checks come first) ------------- */

Test(fp4_api, rejects_bad_arguments_before_launching) {
    int64_t shape[2] = {4, 128};
    tk_tensor x = tk_tensor_contiguous((void *)(uintptr_t)256, TK_BF16, 2, shape);
    int64_t half[2] = {4, 64};
    tk_tensor out = tk_tensor_contiguous((void *)(uintptr_t)512, TK_I8, 2, half);
    tk_tensor sf;
    cr_assert_eq(tk_sf_desc(4, 128, 1, 32, TK_SF_ROW_MAJOR, &sf, NULL), TK_SUCCESS);
    sf.data = (void *)(uintptr_t)1024;
    cr_assert_eq(tk_per_token_cast(&x, 48, true, TK_SF_ROW_MAJOR, &out, &sf, NULL),
                 TK_ERROR_INVALID_ARGUMENT);
    cr_assert(strstr(tk_last_error(), "num_per_channels"), "%s", tk_last_error());
    cr_assert_eq(tk_per_token_cast(&x, 32, false, TK_SF_PACKED_UE8M0, &out, &sf, NULL),
                 TK_ERROR_INVALID_ARGUMENT);
    tk_tensor wrong = out;
    wrong.shape[1] = 128; /* e2m1 out must have H / 2 columns */
    cr_assert_eq(tk_per_token_cast(&x, 32, true, TK_SF_ROW_MAJOR, &wrong, &sf, NULL),
                 TK_ERROR_INVALID_ARGUMENT);
    cr_assert(strstr(tk_last_error(), "out"), "%s", tk_last_error());
    cr_assert_eq(tk_per_token_cast(&x, 32, true, TK_SF_ROW_MAJOR, &out, NULL, NULL),
                 TK_ERROR_INVALID_ARGUMENT);
    cr_assert_eq(tk_per_token_cast_with_sf_only(&x, TK_BF16, 32, true, TK_SF_ROW_MAJOR, &sf,
                                                NULL),
                 TK_ERROR_INVALID_ARGUMENT);
    cr_assert(strstr(tk_last_error(), "format"), "%s", tk_last_error());
    cr_assert_eq(tk_per_token_cast_with_sf_only(&x, TK_E2M1, 128, true, TK_SF_ROW_MAJOR, &sf,
                                                NULL),
                 TK_ERROR_INVALID_ARGUMENT); /* sf has 4 columns, not 1 */
    cr_assert_eq(tk_per_token_cast_with_precomputed_sf(&x, 32, NULL, &out, NULL),
                 TK_ERROR_INVALID_ARGUMENT);
    /* requantisation: unsupported block width, npc == H */
    int64_t e4m3_shape[2] = {4, 128};
    tk_tensor q = tk_tensor_contiguous((void *)(uintptr_t)256, TK_E4M3, 2, e4m3_shape);
    tk_tensor q_sf;
    cr_assert_eq(tk_sf_desc(4, 128, 1, 8, TK_SF_ROW_MAJOR, &q_sf, NULL), TK_SUCCESS);
    q_sf.data = (void *)(uintptr_t)2048;
    cr_assert_eq(tk_per_token_cast_quantized(&q, &q_sf, 1, 8, 32, true, TK_SF_ROW_MAJOR, &out,
                                             &sf, NULL),
                 TK_ERROR_UNSUPPORTED);
    cr_assert_eq(tk_per_token_cast_quantized(&q, &q_sf, 1, 8, 128, true, TK_SF_ROW_MAJOR, &out,
                                             &sf, NULL),
                 TK_ERROR_UNSUPPORTED);
    cr_assert_eq(tk_per_token_cast_quantized(NULL, &q_sf, 1, 8, 32, true, TK_SF_ROW_MAJOR, &out,
                                             &sf, NULL),
                 TK_ERROR_INVALID_ARGUMENT);
    /* cast_back of packed FP4: block_k must cover a 16-byte store */
    tk_tensor back = tk_tensor_contiguous((void *)(uintptr_t)4096, TK_BF16, 2, shape);
    tk_tensor b_sf;
    cr_assert_eq(tk_sf_desc(4, 128, 128, 1, TK_SF_ROW_MAJOR, &b_sf, NULL), TK_SUCCESS);
    b_sf.data = (void *)(uintptr_t)1024;
    cr_assert_eq(tk_cast_back(&out, &b_sf, 128, 1, &back, NULL), TK_ERROR_UNSUPPORTED);
    /* T == 0: success without a launch (no device needed) */
    tk_tensor empty_x = x, empty_out = out, empty_sf;
    empty_x.shape[0] = 0;
    empty_out.shape[0] = 0;
    cr_assert_eq(tk_sf_desc(0, 128, 1, 32, TK_SF_PACKED_UE8M0, &empty_sf, NULL), TK_SUCCESS);
    empty_sf.data = NULL;
    cr_assert_eq(tk_per_token_cast(&empty_x, 32, true, TK_SF_PACKED_UE8M0, &empty_out,
                                   &empty_sf, NULL),
                 TK_SUCCESS, "%s", tk_last_error());
}

/* ---- instance selection (runs with or without a device) -------------------- */

static bool have_device;
static CUdeviceptr allocations[32];
static int allocation_count;

/* Device memory on the GPU machine, an aligned placeholder without one
 * (the launch then fails with TK_ERROR_NO_DEVICE after picking). */
static void *memory(size_t bytes) {
    if (!have_device)
        return (void *)(uintptr_t)(4096 * (1 + allocation_count++));
    CUdeviceptr ptr = gpu_alloc(&dev, bytes);
    allocations[allocation_count++] = ptr;
    return (void *)(uintptr_t)ptr;
}

static tk_tensor matrix(tk_dtype dtype, int64_t rows, int64_t cols, int64_t stride) {
    tk_tensor t = gpu_tensor2(0, dtype, rows, cols, stride, 1);
    t.data = memory((size_t)(rows * stride) * tk_dtype_size(dtype) + 64);
    return t;
}

static tk_tensor scales(int64_t rows, int64_t cols, int bm, int bk, tk_sf_layout layout) {
    tk_tensor t;
    size_t bytes = 0;
    cr_assert_eq(tk_sf_desc(rows, cols, bm, bk, layout, &t, &bytes), TK_SUCCESS);
    t.data = memory(bytes + 64);
    return t;
}

static void expect_pick(tk_status status, const char *instance, const char *what) {
    cr_assert_str_eq(tk__last_instance(), instance, "%s", what);
    if (have_device) {
        cr_assert_eq(status, TK_SUCCESS, "%s: %s", what, tk_last_error());
        CU(&dev, cuCtxSynchronize());
    } else {
        cr_assert_eq(status, TK_ERROR_NO_DEVICE, "%s: got %s (%s)", what,
                     tk_status_string(status), tk_last_error());
    }
}

Test(fp4_api, picks_instances) {
    have_device = tk_device_check() == TK_SUCCESS;
    if (have_device)
        cr_assert_eq(tk__driver(&dev.api), TK_SUCCESS);
    allocation_count = 0;
    const int64_t T = 40, H = 512;
    tk_tensor x = matrix(TK_BF16, T, H, H), xs = matrix(TK_F32, T, H, H + 1);
    tk_tensor fp4 = matrix(TK_I8, T, H / 2, H / 2), e4m3 = matrix(TK_E4M3, T, H, H);
    tk_tensor packed32 = scales(T, H, 1, 32, TK_SF_PACKED_UE8M0);
    tk_tensor row16 = scales(T, H, 1, 16, TK_SF_ROW_MAJOR);
    tk_tensor col128 = scales(T, H, 1, 128, TK_SF_COL_MAJOR);
    tk_tensor token = scales(T, H, 1, (int)H, TK_SF_ROW_MAJOR);
    expect_pick(tk_per_token_cast(&x, 32, true, TK_SF_PACKED_UE8M0, &fp4, &packed32, NULL),
                "per_token_quant__bf16_fp4", "e2m1 1x32 packed");
    expect_pick(tk_per_token_cast(&x, 16, false, TK_SF_ROW_MAJOR, &fp4, &row16, NULL),
                "per_token_quant__bf16_fp4_16", "e2m1 1x16");
    expect_pick(tk_per_token_cast(&xs, 128, true, TK_SF_COL_MAJOR, &fp4, &col128, NULL),
                "per_token_quant__f32_fp4_any", "e2m1 odd stride");
    expect_pick(tk_per_token_cast(&x, 16, true, TK_SF_ROW_MAJOR, &e4m3, &row16, NULL),
                "per_token_quant__bf16_e4m3", "e4m3 1x16");
    expect_pick(tk_per_token_cast(&x, (int)H, true, TK_SF_ROW_MAJOR, &e4m3, &token, NULL),
                "per_token_quant_row__bf16_e4m3", "e4m3 npc == H");
    expect_pick(tk_per_token_cast(&xs, (int)H, true, TK_SF_ROW_MAJOR, &fp4, &token, NULL),
                "per_token_quant_row__f32_fp4_any", "e2m1 npc == H, odd stride");
    expect_pick(tk_per_token_cast_with_sf_only(&x, TK_E2M1, 32, true, TK_SF_PACKED_UE8M0,
                                               &packed32, NULL),
                "per_token_quant__bf16_fp4", "sf only");
    expect_pick(tk_per_token_cast_with_precomputed_sf(&x, 16, &row16, &e4m3, NULL),
                "per_token_quant__bf16_e4m3", "precomputed");
    tk_tensor in_sf = scales(T, H, 128, 128, TK_SF_PACKED_UE8M0);
    expect_pick(tk_per_token_cast_quantized(&e4m3, &in_sf, 128, 128, 32, true,
                                            TK_SF_PACKED_UE8M0, &fp4, &packed32, NULL),
                "per_token_requant__e4m3_fp4", "requant e4m3 -> e2m1");
    tk_tensor e4m3_out = matrix(TK_E4M3, T, H, H);
    expect_pick(tk_per_token_cast_quantized(&fp4, &in_sf, 128, 128, 16, true,
                                            TK_SF_ROW_MAJOR, &e4m3_out, &row16, NULL),
                "per_token_requant__fp4_e4m3", "requant e2m1 -> e4m3");
    tk_tensor back = matrix(TK_F32, T, H, H);
    expect_pick(tk_per_token_cast_back(&fp4, &packed32, 32, &back, NULL), "cast_back_fp4__f32",
                "cast_back e2m1 -> f32");
    for (int i = 0; have_device && i < allocation_count; i++)
        CU(&dev, cuMemFree(allocations[i]));
}
