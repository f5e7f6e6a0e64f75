/*
 * test_gpu_channel.c -- the per-channel casts (tk_per_channel_cast,
 * tk_per_channel_cast_fused, tk_per_channel_cast_and_transpose) run on
 * the GPU over TileKernels' test sweep and compared byte for byte with the
 * CPU reference of tests/ref/channel_cast.c; plus their argument checks,
 * which need no GPU.
 *
 * Without a usable CUDA device the GPU tests are skipped.  On the GPU
 * machine (as in test_gpu_kernels.c):
 *   - inputs are normals times powers of two in [2^-6, 2^6], a new power
 *     every 64 elements, so every 128-row block mixes magnitudes (small
 *     values become subnormal codes or zeros);
 *   - out and out_sf are poisoned (0xFF) before each launch and TAIL_BYTES
 *     after each must still be poisoned afterwards; every byte of out and
 *     every scale is compared (out_sf has no padding);
 *   - the first mismatch is reported with its position.
 * The sweep (tilekernels-spec.md 6.6-6.8, 12.1, 12.4): tokens 0, 4096,
 * 8064 (generate_num_tokens aligned to 128, with the pressure-mode 0);
 * hidden 576 ... 7168; round_sf both ways; bf16 and f32 input; a padded
 * row stride; num_per_tokens 32 and 128 for the transposed cast.  The
 * fused cast adds its plain case with e4m3 input and scales (from
 * per_token_cast with unrounded scales, as TileKernels' test makes them),
 * and gathers from MoE routing draws: TileKernels' parameters (top-k 2,
 * 6, 8, 9; 72 or 256 experts over 8 or 64 ranks), the pressure-mode ones
 * (top-k 1 and 7, 288 and 384 experts, 1 and 72 ranks, zero tokens), the
 * 16-row alignment (N % 128 != 0, spec 15.6) and out-of-range entries.
 * TK_TEST_SEED changes the inputs; TK_REF_THREADS the reference threads.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "channel_cast.h"
#include "gpu_harness.h"
#include "reference.h"
#include "tk.h"
#include "tk_internal.h"

#define TAIL_BYTES GPU_TAIL_BYTES
#define POISON 0xFF

static const int64_t HIDDEN[] = {576, 2048, 2560, 3072, 4096, 6144, 7168};
#define NUM_HIDDEN 7
static const int64_t TOKENS[] = {0, 4096, 8064};
#define MAX_HIDDEN 7168
#define MAX_STRIDE (MAX_HIDDEN + 64)

/* ---- device helpers --------------------------------------------------------- */

/* This file's poison byte and tail message for the shared harness. */
static void download_output(const gpu *g, void *host, CUdeviceptr device, size_t bytes,
                            const char *what) {
    gpu_download(g, host, device, bytes, POISON, " of the output", what);
}

/* Byte-exact comparison of a (rows, cols) matrix of element_size. */
static void expect_equal(const void *got, const void *want, int64_t rows, int64_t cols,
                         size_t element_size, const char *what, const char *name) {
    size_t bytes = (size_t)(rows * cols) * element_size;
    size_t first = ref_first_difference(got, want, bytes);
    if (first == SIZE_MAX)
        return;
    int64_t index = (int64_t)(first / element_size), mismatches = 0;
    for (int64_t i = index; i < rows * cols; i++)
        mismatches += memcmp((const char *)got + i * element_size,
                             (const char *)want + i * element_size, element_size) != 0;
    uint64_t got_value = 0, want_value = 0;
    memcpy(&got_value, (const char *)got + index * element_size, element_size);
    memcpy(&want_value, (const char *)want + index * element_size, element_size);
    cr_assert_fail("%s: %s: first mismatch at [%ld, %ld]: got 0x%0*llx, expected 0x%0*llx; "
                   "%ld of %ld elements differ",
                   what, name, (long)(index / cols), (long)(index % cols),
                   (int)(2 * element_size), (unsigned long long)got_value,
                   (int)(2 * element_size), (unsigned long long)want_value, (long)mismatches,
                   (long)(rows * cols));
}

/* ---- the test state ------------------------------------------------------------ */

enum entry { ENTRY_CAST, ENTRY_FUSED, ENTRY_TRANSPOSE };

/* Inputs live on the host and the device for the whole test; one output
 * and one SF buffer of the largest size are reused by every case. */
typedef struct channel_state {
    gpu g;
    tk_dtype dtype;        /* of the float source (bf16 or f32)           */
    size_t element_size;
    int64_t source_rows;   /* rows of the source, MAX_STRIDE apart        */
    void *source;          /* float input, rows of MAX_STRIDE elements    */
    uint8_t *quantized;    /* e4m3 data of the current quantised case     */
    float *quantized_sf;
    uint8_t *got, *want;
    float *got_sf, *want_sf;
    CUdeviceptr device_source, device_quantized, device_quantized_sf, device_pos,
        device_out, device_sf;
    size_t out_capacity, sf_capacity;
    int cases;
} channel_state;

static void state_begin(channel_state *s, tk_dtype dtype, int64_t source_rows,
                        int64_t max_out_rows) {
    s->g = gpu_begin();
    s->dtype = dtype;
    s->element_size = tk_dtype_size(dtype);
    s->source_rows = source_rows;
    s->cases = 0;
    size_t source_bytes = (size_t)(source_rows * MAX_STRIDE) * s->element_size;
    s->source = host_alloc(source_bytes);
    /* 64-element pieces, each with its own power of two in [-6, 6] */
    ref_fill_rand_float(s->source, dtype, source_rows * MAX_STRIDE / 64, 64, -6, 6,
                        test_seed() + 5000 + (uint64_t)dtype);
    s->out_capacity = (size_t)(max_out_rows * MAX_HIDDEN);
    s->sf_capacity = (size_t)((max_out_rows + 31) / 32 * MAX_HIDDEN) * 4;
    s->quantized = host_alloc((size_t)(source_rows * MAX_HIDDEN));
    s->quantized_sf = host_alloc((size_t)(source_rows * (MAX_HIDDEN / 128)) * 4);
    s->got = host_alloc(s->out_capacity + TAIL_BYTES);
    s->want = host_alloc(s->out_capacity);
    s->got_sf = host_alloc(s->sf_capacity + TAIL_BYTES);
    s->want_sf = host_alloc(s->sf_capacity);
    s->device_source = gpu_alloc(&s->g, source_bytes);
    s->device_quantized = gpu_alloc(&s->g, (size_t)(source_rows * MAX_HIDDEN));
    s->device_quantized_sf = gpu_alloc(&s->g, (size_t)(source_rows * (MAX_HIDDEN / 128)) * 4);
    s->device_pos = gpu_alloc(&s->g, (size_t)max_out_rows * 4);
    s->device_out = gpu_alloc(&s->g, s->out_capacity + TAIL_BYTES);
    s->device_sf = gpu_alloc(&s->g, s->sf_capacity + TAIL_BYTES);
    CU(&s->g, cuMemcpyHtoD(s->device_source, s->source, source_bytes));
}

static void state_end(channel_state *s) {
    CUdeviceptr buffers[] = {s->device_source, s->device_quantized, s->device_quantized_sf,
                             s->device_pos, s->device_out, s->device_sf};
    for (int i = 0; i < 6; i++)
        CU(&s->g, cuMemFree(buffers[i]));
    free(s->source);
    free(s->quantized);
    free(s->quantized_sf);
    free(s->got);
    free(s->want);
    free(s->got_sf);
    free(s->want_sf);
}

/* Makes the quantised input of a fused case from the source's first
 * `tokens` rows: per_token_cast(x, 'e4m3', 128) with unrounded scales, as
 * TileKernels' test does, and uploads data and scales. */
static void make_quantized(channel_state *s, int64_t tokens, int64_t hidden) {
    cr_assert(ref_per_token_cast_e4m3(s->source, s->dtype, tokens, hidden, MAX_STRIDE, 128,
                                      false, TK_SF_ROW_MAJOR, s->quantized, s->quantized_sf));
    int64_t groups = (hidden + 127) / 128;
    if (tokens == 0)
        return; /* nothing to upload (and a 0-byte copy is not a copy) */
    CU(&s->g, cuMemcpyHtoD(s->device_quantized, s->quantized, (size_t)(tokens * hidden)));
    CU(&s->g, cuMemcpyHtoD(s->device_quantized_sf, s->quantized_sf,
                           (size_t)(tokens * groups) * 4));
}

/* One case.  x is the source viewed (tokens, hidden) with row stride
 * `stride` (float input), or the quantised data made by make_quantized
 * (quantized).  pos (rows entries) selects the gather. */
static void run_case(channel_state *s, enum entry entry, bool quantized, int64_t tokens,
                     int64_t hidden, int64_t stride, const int32_t *pos, int64_t rows, int npt,
                     bool round_sf) {
    char what[240];
    tk_dtype in_dtype = quantized ? TK_E4M3 : s->dtype;
    snprintf(what, sizeof what, "%s %s T=%ld H=%ld stride=%ld rows=%ld%s npt=%d round=%d",
             entry == ENTRY_CAST ? "per_channel_cast"
             : entry == ENTRY_FUSED ? "per_channel_cast_fused"
                                    : "per_channel_cast_and_transpose",
             gpu_dtype_name(in_dtype), (long)tokens, (long)hidden, (long)stride, (long)rows,
             pos ? " gather" : "", npt, round_sf);
    int64_t blocks = (rows + npt - 1) / npt;
    size_t out_bytes = (size_t)(rows * hidden), sf_bytes = (size_t)(blocks * hidden) * 4;
    cr_assert(out_bytes <= s->out_capacity && sf_bytes <= s->sf_capacity, "%s: too large", what);
    CU(&s->g, cuMemsetD8(s->device_out, POISON, out_bytes + TAIL_BYTES));
    CU(&s->g, cuMemsetD8(s->device_sf, POISON, sf_bytes + TAIL_BYTES));
    if (pos && rows > 0)
        CU(&s->g, cuMemcpyHtoD(s->device_pos, pos, (size_t)rows * 4));

    tk_tensor x = quantized ? gpu_tensor2(s->device_quantized, TK_E4M3, tokens, hidden, hidden, 1)
                            : gpu_tensor2(s->device_source, s->dtype, tokens, hidden, stride, 1);
    int64_t groups = (hidden + 127) / 128;
    tk_tensor x_sf = gpu_tensor2(s->device_quantized_sf, TK_F32, tokens, groups, groups, 1);
    tk_tensor positions;
    memset(&positions, 0, sizeof positions);
    positions.data = (void *)(uintptr_t)s->device_pos;
    positions.dtype = TK_I32;
    positions.rank = 1;
    positions.shape[0] = rows;
    positions.strides[0] = 1;
    tk_tensor out = entry == ENTRY_TRANSPOSE
                        ? gpu_tensor2(s->device_out, TK_E4M3, hidden, rows, rows, 1)
                        : gpu_tensor2(s->device_out, TK_E4M3, rows, hidden, hidden, 1);
    tk_tensor out_sf = gpu_tensor2(s->device_sf, TK_F32, blocks, hidden, hidden, 1);
    tk_status status;
    if (entry == ENTRY_CAST)
        status = tk_per_channel_cast(&x, npt, round_sf, &out, &out_sf, NULL);
    else if (entry == ENTRY_TRANSPOSE)
        status = tk_per_channel_cast_and_transpose(&x, npt, round_sf, &out, &out_sf, NULL);
    else
        status = tk_per_channel_cast_fused(&x, quantized ? &x_sf : NULL, quantized ? 128 : 0,
                                           npt, round_sf, pos ? &positions : NULL, &out,
                                           &out_sf, NULL);
    cr_assert_eq(status, TK_SUCCESS, "%s: %s: %s", what, tk_status_string(status),
                 tk_last_error());
    download_output(&s->g, s->got, s->device_out, out_bytes, what);
    download_output(&s->g, s->got_sf, s->device_sf, sf_bytes, what);

    ref_channel_input in = quantized
                               ? (ref_channel_input){s->quantized, TK_E4M3, tokens, hidden, hidden,
                                                     s->quantized_sf, {groups, 1}}
                               : ref_channel_float_input(s->source, s->dtype, tokens, hidden,
                                                         stride);
    cr_assert(ref_per_channel_cast(&in, pos, rows, npt, round_sf, entry == ENTRY_TRANSPOSE,
                                   s->want, s->want_sf));
    if (entry == ENTRY_TRANSPOSE)
        expect_equal(s->got, s->want, hidden, rows, 1, what, "out");
    else
        expect_equal(s->got, s->want, rows, hidden, 1, what, "out");
    expect_equal(s->got_sf, s->want_sf, blocks, hidden, 4, what, "out_sf");
    s->cases++;
}

/* ---- per_channel_cast (spec 6.6) ------------------------------------------------ */

static void run_per_channel_cast(tk_dtype dtype) {
    channel_state s;
    double start = now_seconds();
    state_begin(&s, dtype, 8064, 8064);
    for (int t = 0; t < 3; t++)
        for (int h = 0; h < NUM_HIDDEN; h++)
            for (int round_sf = 0; round_sf < 2; round_sf++)
                run_case(&s, ENTRY_CAST, false, TOKENS[t], HIDDEN[h], HIDDEN[h], NULL,
                         TOKENS[t], 128, round_sf);
    /* a padded row stride (16-byte aligned rows) */
    for (int h = 0; h < NUM_HIDDEN; h++)
        run_case(&s, ENTRY_CAST, false, 4096, HIDDEN[h], HIDDEN[h] + 64, NULL, 4096, 128,
                 h % 2);
    cr_log_info("per_channel_cast %s: %d cases in %.1f s", gpu_dtype_name(dtype), s.cases,
                now_seconds() - start);
    state_end(&s);
}

Test(per_channel_cast, bf16, .timeout = 1800) { run_per_channel_cast(TK_BF16); }
Test(per_channel_cast, f32, .timeout = 1800) { run_per_channel_cast(TK_F32); }

/* ---- per_channel_cast_fused (spec 6.7) ------------------------------------------ */

/* The plain case (no gather): float and quantised input. */
Test(per_channel_cast_fused, plain, .timeout = 1800) {
    channel_state s;
    double start = now_seconds();
    state_begin(&s, TK_BF16, 8064, 8064);
    for (int t = 0; t < 3; t++)
        for (int h = 0; h < NUM_HIDDEN; h++) {
            for (int round_sf = 0; round_sf < 2; round_sf++)
                run_case(&s, ENTRY_FUSED, false, TOKENS[t], HIDDEN[h], HIDDEN[h], NULL,
                         TOKENS[t], 128, round_sf);
            make_quantized(&s, TOKENS[t], HIDDEN[h]);
            for (int round_sf = 0; round_sf < 2; round_sf++)
                run_case(&s, ENTRY_FUSED, true, TOKENS[t], HIDDEN[h], HIDDEN[h], NULL,
                         TOKENS[t], 128, round_sf);
        }
    cr_log_info("per_channel_cast_fused plain: %d cases in %.1f s", s.cases,
                now_seconds() - start);
    state_end(&s);
}

/* MoE routing draws (generate_moe_params, spec 12.1 and 12.4): send
 * tokens per rank, top-k, local experts, ranks, alignment. */
static const struct {
    int64_t send_tokens;
    int topk, local_experts, ranks, alignment;
} MOE[] = {
    {4001, 2, 9, 8, 128},  {4001, 6, 9, 8, 128},  {4001, 8, 9, 8, 128},  {4001, 9, 9, 8, 128},
    {4001, 2, 32, 8, 128}, {4001, 6, 32, 8, 128}, {4001, 8, 32, 8, 128}, {4001, 9, 32, 8, 128},
    {4001, 2, 4, 64, 128}, {4001, 6, 4, 64, 128}, {4001, 8, 4, 64, 128}, {4001, 9, 4, 64, 128},
    /* pressure mode: top-k 1 and 7, 288 / 384 experts, 1 and 72 ranks,
     * and no tokens at all */
    {4001, 1, 32, 8, 128}, {4001, 7, 4, 72, 128},  {4001, 8, 48, 8, 128}, {4001, 6, 288, 1, 128},
    {0, 1, 1, 1, 128},
    /* 16-row alignment: N % 128 != 0, the last block is partial (15.6) */
    {4001, 8, 32, 8, 16},  {4001, 2, 9, 8, 16},
};
#define NUM_MOE (int)(sizeof MOE / sizeof MOE[0])
/* the fused cast's tests use hidden sizes that are multiples of 128 */
static const int64_t HIDDEN128[] = {2048, 2560, 3072, 4096, 6144, 7168};

/* Largest received-token count and row count of the draws (measured by
 * drawing them, so the buffers fit whatever the seed gives). */
static void moe_extent(int64_t *max_tokens, int64_t *max_rows) {
    *max_tokens = 1;
    *max_rows = 128;
    for (int m = 0; m < NUM_MOE; m++) {
        int64_t tokens, rows;
        int32_t *pos = ref_channel_moe_positions(MOE[m].send_tokens, MOE[m].topk,
                                                 MOE[m].local_experts, MOE[m].ranks,
                                                 MOE[m].alignment, test_seed() + (uint64_t)m,
                                                 &tokens, &rows);
        cr_assert(pos != NULL);
        *max_tokens = tokens > *max_tokens ? tokens : *max_tokens;
        *max_rows = rows > *max_rows ? rows : *max_rows;
        free(pos);
    }
}

/* Gathers: each draw with bf16 input at one hidden size and quantised
 * input at another; the hidden sizes and round_sf rotate over the draws
 * (every size meets both inputs and both round_sf values) to keep the
 * binary's run time down: the draws are up to 36000 rows each.  The rows
 * of x are MAX_STRIDE apart, a padded view for every hidden size but the
 * largest. */
Test(per_channel_cast_fused, gather, .timeout = 1800) {
    channel_state s;
    double start = now_seconds();
    int64_t max_tokens, max_rows;
    moe_extent(&max_tokens, &max_rows);
    state_begin(&s, TK_BF16, max_tokens, max_rows);
    for (int m = 0; m < NUM_MOE; m++) {
        int64_t tokens, rows;
        int32_t *pos = ref_channel_moe_positions(MOE[m].send_tokens, MOE[m].topk,
                                                 MOE[m].local_experts, MOE[m].ranks,
                                                 MOE[m].alignment, test_seed() + (uint64_t)m,
                                                 &tokens, &rows);
        cr_assert(pos != NULL);
        int64_t float_hidden = HIDDEN128[m % 6], quantized_hidden = HIDDEN128[(m + 3) % 6];
        /* flips every draw and once more every 6 draws: each hidden size
         * meets both round_sf values with both inputs */
        bool round_sf = (m + m / 6) % 2 == 1;
        run_case(&s, ENTRY_FUSED, false, tokens, float_hidden, MAX_STRIDE, pos, rows, 128,
                 round_sf);
        make_quantized(&s, tokens, quantized_hidden);
        run_case(&s, ENTRY_FUSED, true, tokens, quantized_hidden, quantized_hidden, pos, rows,
                 128, !round_sf);
        free(pos);
    }
    cr_log_info("per_channel_cast_fused gather: %d cases in %.1f s", s.cases,
                now_seconds() - start);
    state_end(&s);
}

/* f32 (and bf16) input through the gather, 576 columns (not a multiple of
 * the 128-column tile), and entries that are negative or past the last
 * token (zero rows). */
Test(per_channel_cast_fused, gather_f32_and_out_of_range, .timeout = 1800) {
    channel_state s;
    int64_t tokens, rows;
    int32_t *pos = ref_channel_moe_positions(4001, 6, 32, 8, 16, test_seed() + 77, &tokens,
                                             &rows);
    cr_assert(pos != NULL);
    double start = now_seconds();
    state_begin(&s, TK_F32, tokens, rows);
    for (int64_t r = 0; r < rows; r += 97)
        pos[r] = r % 2 ? (int32_t)(tokens + r) : -1 - (int32_t)r;
    const int64_t hidden[] = {576, 2048, 7168};
    for (int h = 0; h < 3; h++)
        for (int round_sf = 0; round_sf < 2; round_sf++)
            run_case(&s, ENTRY_FUSED, false, tokens, hidden[h], MAX_STRIDE, pos, rows, 128,
                     round_sf);
    int cases = s.cases;
    state_end(&s);
    /* bf16 input at 576 columns (a partial last column tile and row block
     * in the gather's column-sweep grid), then quantised input at 576
     * columns: a partial last input-scale group */
    state_begin(&s, TK_BF16, tokens, rows);
    for (int round_sf = 0; round_sf < 2; round_sf++)
        run_case(&s, ENTRY_FUSED, false, tokens, 576, MAX_STRIDE, pos, rows, 128, round_sf);
    make_quantized(&s, tokens, 576);
    for (int round_sf = 0; round_sf < 2; round_sf++)
        run_case(&s, ENTRY_FUSED, true, tokens, 576, 576, pos, rows, 128, round_sf);
    cases += s.cases;
    state_end(&s);
    free(pos);
    cr_log_info("per_channel_cast_fused gather_f32_and_out_of_range: %d cases in %.1f s", cases,
                now_seconds() - start);
}

/* ---- per_channel_cast_and_transpose (spec 6.8) ------------------------------------ */

static void run_transpose(int npt) {
    channel_state s;
    double start = now_seconds();
    state_begin(&s, TK_BF16, 8064, 8064);
    for (int t = 0; t < 3; t++)
        for (int h = 0; h < NUM_HIDDEN; h++)
            for (int round_sf = 0; round_sf < 2; round_sf++)
                run_case(&s, ENTRY_TRANSPOSE, false, TOKENS[t], HIDDEN[h], HIDDEN[h], NULL,
                         TOKENS[t], npt, round_sf);
    for (int h = 0; h < NUM_HIDDEN; h += 3)
        run_case(&s, ENTRY_TRANSPOSE, false, 4096, HIDDEN[h], HIDDEN[h] + 64, NULL, 4096, npt,
                 true);
    cr_log_info("per_channel_cast_and_transpose bm=%d: %d cases in %.1f s", npt, s.cases,
                now_seconds() - start);
    state_end(&s);
}

Test(per_channel_cast_and_transpose, bm128, .timeout = 1800) { run_transpose(128); }
Test(per_channel_cast_and_transpose, bm32, .timeout = 1800) { run_transpose(32); }

/* ---- argument checks (no GPU needed) ---------------------------------------------- */

/* Made-up, 16-byte aligned device addresses: every call below fails
 * validation before anything is dereferenced. */
#define FAKE(n) ((CUdeviceptr)0x100000000ull + (CUdeviceptr)(n) * 0x10000000ull)

#define EXPECT_INVALID(call, fragment)                                               \
    do {                                                                             \
        tk_status status_ = (call);                                                  \
        cr_assert_eq(status_, TK_ERROR_INVALID_ARGUMENT, "%s: got %s (%s)", #call,   \
                     tk_status_string(status_), tk_last_error());                    \
        cr_assert(strstr(tk_last_error(), (fragment)) != NULL,                       \
                  "%s: message '%s' lacks '%s'", #call, tk_last_error(), (fragment)); \
        cr_assert_str_eq(tk__last_instance(), "");                                   \
    } while (0)

Test(channel_api, per_channel_cast_rejects_bad_arguments) {
    tk_tensor x = gpu_tensor2(FAKE(1), TK_BF16, 256, 576, 576, 1);
    tk_tensor out = gpu_tensor2(FAKE(2), TK_E4M3, 256, 576, 576, 1);
    tk_tensor sf = gpu_tensor2(FAKE(3), TK_F32, 2, 576, 576, 1);
    EXPECT_INVALID(tk_per_channel_cast(NULL, 128, false, &out, &sf, NULL), "x is NULL");
    EXPECT_INVALID(tk_per_channel_cast(&x, 128, false, NULL, &sf, NULL), "out is NULL");
    EXPECT_INVALID(tk_per_channel_cast(&x, 128, false, &out, NULL, NULL), "out_sf is NULL");
    EXPECT_INVALID(tk_per_channel_cast(&x, 64, false, &out, &sf, NULL), "num_per_tokens");
    tk_tensor bad = x;
    bad.dtype = TK_E4M3;
    EXPECT_INVALID(tk_per_channel_cast(&bad, 128, false, &out, &sf, NULL), "x: dtype");
    bad = x;
    bad.shape[0] = 200;
    EXPECT_INVALID(tk_per_channel_cast(&bad, 128, false, &out, &sf, NULL), "multiple of 128");
    bad = x;
    bad.shape[1] = 600;
    EXPECT_INVALID(tk_per_channel_cast(&bad, 128, false, &out, &sf, NULL), "multiple of 64");
    bad = x;
    bad.strides[0] = 580; /* not 16-byte aligned rows */
    EXPECT_INVALID(tk_per_channel_cast(&bad, 128, false, &out, &sf, NULL), "strides[0]");
    bad = x;
    bad.strides[1] = 2;
    EXPECT_INVALID(tk_per_channel_cast(&bad, 128, false, &out, &sf, NULL), "strides[1]");
    bad = x;
    bad.rank = 3;
    EXPECT_INVALID(tk_per_channel_cast(&bad, 128, false, &out, &sf, NULL), "rank");
    bad = out;
    bad.shape[0] = 128;
    EXPECT_INVALID(tk_per_channel_cast(&x, 128, false, &bad, &sf, NULL), "out: shape[0]");
    bad = out;
    bad.dtype = TK_BF16;
    EXPECT_INVALID(tk_per_channel_cast(&x, 128, false, &bad, &sf, NULL), "out: dtype");
    bad = out;
    bad.strides[0] = 640;
    EXPECT_INVALID(tk_per_channel_cast(&x, 128, false, &bad, &sf, NULL), "not contiguous");
    bad = sf;
    bad.shape[0] = 256;
    EXPECT_INVALID(tk_per_channel_cast(&x, 128, false, &out, &bad, NULL), "out_sf: shape[0]");
    bad = sf;
    bad.strides[0] = 1;
    bad.strides[1] = 2; /* column-major scales are not what TileKernels returns */
    EXPECT_INVALID(tk_per_channel_cast(&x, 128, false, &out, &bad, NULL), "out_sf");
    bad = sf;
    bad.dtype = TK_I32;
    EXPECT_INVALID(tk_per_channel_cast(&x, 128, false, &out, &bad, NULL), "out_sf: dtype");
    bad = x;
    bad.data = (void *)(uintptr_t)(FAKE(1) + 8);
    EXPECT_INVALID(tk_per_channel_cast(&bad, 128, false, &out, &sf, NULL), "aligned");
    bad = x;
    bad.data = NULL;
    EXPECT_INVALID(tk_per_channel_cast(&bad, 128, false, &out, &sf, NULL), "data is NULL");
}

Test(channel_api, fused_rejects_bad_arguments) {
    tk_tensor x = gpu_tensor2(FAKE(1), TK_E4M3, 300, 576, 576, 1);
    tk_tensor x_sf = gpu_tensor2(FAKE(2), TK_F32, 300, 5, 5, 1);
    tk_tensor pos = {.data = (void *)(uintptr_t)FAKE(3), .dtype = TK_I32, .rank = 1,
                     .shape = {336}, .strides = {1}};
    tk_tensor out = gpu_tensor2(FAKE(4), TK_E4M3, 336, 576, 576, 1);
    tk_tensor sf = gpu_tensor2(FAKE(5), TK_F32, 3, 576, 576, 1);
    EXPECT_INVALID(tk_per_channel_cast_fused(&x, NULL, 128, 128, false, &pos, &out, &sf, NULL),
                   "x_sf is NULL");
    EXPECT_INVALID(tk_per_channel_cast_fused(&x, &x_sf, 64, 128, false, &pos, &out, &sf, NULL),
                   "num_per_channels");
    EXPECT_INVALID(tk_per_channel_cast_fused(&x, &x_sf, 128, 32, false, &pos, &out, &sf, NULL),
                   "num_per_tokens");
    tk_tensor bad = x_sf;
    bad.shape[1] = 4;
    EXPECT_INVALID(tk_per_channel_cast_fused(&x, &bad, 128, 128, false, &pos, &out, &sf, NULL),
                   "x_sf: shape[1]");
    bad = x_sf;
    bad.dtype = TK_I32;
    EXPECT_INVALID(tk_per_channel_cast_fused(&x, &bad, 128, 128, false, &pos, &out, &sf, NULL),
                   "x_sf: dtype");
    bad = pos;
    bad.shape[0] = 330;
    EXPECT_INVALID(tk_per_channel_cast_fused(&x, &x_sf, 128, 128, false, &bad, &out, &sf, NULL),
                   "multiple of 16");
    bad = pos;
    bad.dtype = TK_I64;
    EXPECT_INVALID(tk_per_channel_cast_fused(&x, &x_sf, 128, 128, false, &bad, &out, &sf, NULL),
                   "pos_to_token: dtype");
    bad = pos;
    bad.strides[0] = 2;
    EXPECT_INVALID(tk_per_channel_cast_fused(&x, &x_sf, 128, 128, false, &bad, &out, &sf, NULL),
                   "not contiguous");
    /* without a gather, T must be a multiple of 128 (300 is not) */
    EXPECT_INVALID(tk_per_channel_cast_fused(&x, &x_sf, 128, 128, false, NULL, &out, &sf, NULL),
                   "multiple of 128");
    tk_tensor float_x = x;
    float_x.dtype = TK_BF16;
    EXPECT_INVALID(
        tk_per_channel_cast_fused(&float_x, &x_sf, 128, 128, false, &pos, &out, &sf, NULL),
        "x_sf given");
    EXPECT_INVALID(
        tk_per_channel_cast_fused(&float_x, NULL, 128, 128, false, &pos, &out, &sf, NULL),
        "num_per_channels");
    bad = x;
    bad.dtype = TK_I8; /* packed FP4 data: TileKernels takes e4m3 only */
    EXPECT_INVALID(tk_per_channel_cast_fused(&bad, &x_sf, 128, 128, false, &pos, &out, &sf, NULL),
                   "x: dtype");
    bad = out;
    bad.shape[0] = 300;
    EXPECT_INVALID(tk_per_channel_cast_fused(&x, &x_sf, 128, 128, false, &pos, &bad, &sf, NULL),
                   "out: shape[0]");
    bad = sf;
    bad.shape[0] = 2;
    EXPECT_INVALID(tk_per_channel_cast_fused(&x, &x_sf, 128, 128, false, &pos, &out, &bad, NULL),
                   "out_sf: shape[0]");
}

Test(channel_api, transpose_rejects_bad_arguments) {
    tk_tensor x = gpu_tensor2(FAKE(1), TK_BF16, 256, 576, 576, 1);
    tk_tensor out = gpu_tensor2(FAKE(2), TK_E4M3, 576, 256, 256, 1);
    tk_tensor sf = gpu_tensor2(FAKE(3), TK_F32, 8, 576, 576, 1);
    EXPECT_INVALID(tk_per_channel_cast_and_transpose(&x, 64, false, &out, &sf, NULL),
                   "num_per_tokens");
    tk_tensor bad = x;
    bad.dtype = TK_F32;
    EXPECT_INVALID(tk_per_channel_cast_and_transpose(&bad, 32, false, &out, &sf, NULL),
                   "x: dtype");
    bad = out;
    bad.shape[0] = 256;
    bad.shape[1] = 576;
    bad.strides[0] = 576;
    EXPECT_INVALID(tk_per_channel_cast_and_transpose(&x, 32, false, &bad, &sf, NULL),
                   "out: shape[0]");
    bad = x;
    bad.shape[0] = 192;
    EXPECT_INVALID(tk_per_channel_cast_and_transpose(&bad, 32, false, &out, &sf, NULL),
                   "multiple of 128");
    /* 128-row scales need 2 rows of scales, not 8 */
    EXPECT_INVALID(tk_per_channel_cast_and_transpose(&x, 128, false, &out, &sf, NULL),
                   "out_sf: shape[0]");
}

/* Valid calls pick their instance; T == 0 succeeds without a launch. */
Test(channel_api, instance_selection_and_empty_input) {
    bool have_gpu = tk_device_check() == TK_SUCCESS;
    tk_tensor x = gpu_tensor2(FAKE(1), TK_BF16, 0, 576, 576, 1);
    tk_tensor out = gpu_tensor2(FAKE(2), TK_E4M3, 0, 576, 576, 1);
    tk_tensor sf = gpu_tensor2(FAKE(3), TK_F32, 0, 576, 576, 1);
    cr_assert_eq(tk_per_channel_cast(&x, 128, true, &out, &sf, NULL), TK_SUCCESS);
    cr_assert_str_eq(tk__last_instance(), "");
    tk_tensor out_t = gpu_tensor2(FAKE(2), TK_E4M3, 576, 0, 1, 1);
    cr_assert_eq(tk_per_channel_cast_and_transpose(&x, 32, false, &out_t, &sf, NULL), TK_SUCCESS);
    if (have_gpu)
        return; /* the calls below would launch on made-up addresses */
    x.shape[0] = out.shape[0] = 256;
    sf.shape[0] = 2;
    tk_status status = tk_per_channel_cast(&x, 128, true, &out, &sf, NULL);
    cr_assert_eq(status, TK_ERROR_NO_DEVICE, "%s", tk_last_error());
    cr_assert_str_eq(tk__last_instance(), "per_channel_cast__plain__bf16_round");
    tk_tensor pos = {.data = (void *)(uintptr_t)FAKE(4), .dtype = TK_I32, .rank = 1,
                     .shape = {256}, .strides = {1}};
    x.dtype = TK_F32;
    tk_per_channel_cast_fused(&x, NULL, 0, 128, false, &pos, &out, &sf, NULL);
    cr_assert_str_eq(tk__last_instance(), "per_channel_cast__plain__f32_gather");
    x.dtype = TK_E4M3;
    tk_tensor x_sf = gpu_tensor2(FAKE(5), TK_F32, 256, 5, 1, 256); /* column-major works */
    tk_per_channel_cast_fused(&x, &x_sf, 128, 128, true, NULL, &out, &sf, NULL);
    cr_assert_str_eq(tk__last_instance(), "per_channel_cast__e4m3_round");
    x.dtype = TK_BF16;
    out_t.shape[1] = 256;
    out_t.strides[0] = 256;
    sf.shape[0] = 8;
    tk_per_channel_cast_and_transpose(&x, 32, true, &out_t, &sf, NULL);
    cr_assert_str_eq(tk__last_instance(), "per_channel_cast_and_transpose__bm32_round");
}
