/*
 * test_gpu_swiglu.c -- golden tests of the fused SwiGLU casts
 * (tilekernels-spec.md 6.9, 6.10, 6.11) on the GPU, byte for byte against
 * tests/ref/swiglu.c.
 *
 * Without a usable CUDA device every test is skipped.  On the GPU:
 *   - exp: the references take their expf values from the GPU itself
 *     (kernels/swiglu.tk, swiglu_exp, the same lowering as the kernels):
 *     a table over every bf16 pattern for bf16 inputs, per-element values
 *     for f32 and dequantised e4m3 inputs (docs/kernels.md);
 *   - inputs: normals (TileKernels' randn), MoE routing drawn like
 *     generate_topk_idx + get_fused_mapping (tests/ref/swiglu.c); padding
 *     rows hold random values rather than expand_to_fused's zeros (a
 *     stronger test: with the mask off they are processed with weight 0);
 *     generated once per test at the largest shape, every case a view;
 *   - outputs and SF poisoned (0xFF) before each launch; TAIL_BYTES after
 *     every output must stay poisoned; out / SF compared on the rows and
 *     bytes the function defines (skipped rows and SF padding are not);
 *     weight_grad with TileKernels' rtol = atol = 1e-4; clamp counts
 *     exactly, accumulated onto a non-zero start;
 *   - sweep: TileKernels' options (spec 6.9-6.11) rotated over the hidden
 *     sizes and MoE draws so that every option combination runs once with
 *     data (forward bf16 30 + f32 6, backward 12, per-channel 28 cases,
 *     all of TileKernels' sizes and draws); token count 0 and the
 *     degenerate 1-expert draw of the pressure mode included; inputs are
 *     filled only as far as the largest case reads.  Nothing is printed per
 *     case; each test writes one summary line to stderr.  Designed to stay
 *     well under 90 s on the 16-core H200 machine next to other binaries.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu_harness.h"
#include "reference.h"
#include "swiglu.h"
#include "tk.h"
#include "tk_internal.h"
#include "tk_kernels.h"

#define TAIL_BYTES GPU_TAIL_BYTES
#define POISON 0xFF

/* ---- device helpers ------------------------------------------------------ */

/* This file's poison byte and tail message for the shared harness. */
static void poison(const gpu *g, CUdeviceptr ptr, size_t bytes) {
    gpu_poison(g, ptr, bytes, POISON);
}

static void download(const gpu *g, void *host, CUdeviceptr device, size_t bytes,
                     const char *what) {
    gpu_download(g, host, device, bytes, POISON, "", what);
}

static tk_tensor tensor(CUdeviceptr data, tk_dtype dtype, int rank, int64_t d0, int64_t d1) {
    tk_tensor t;
    memset(&t, 0, sizeof t);
    t.data = (void *)(uintptr_t)data;
    t.dtype = dtype;
    t.rank = rank;
    t.shape[0] = d0;
    t.strides[0] = rank == 2 ? d1 : 1;
    if (rank == 2) {
        t.shape[1] = d1;
        t.strides[1] = 1;
    }
    return t;
}

/* Byte-exact comparison of row r of two (rows, row_bytes) buffers for every
 * row with keep[r] (NULL: all rows). */
static void expect_rows(const unsigned char *got, const unsigned char *want, int64_t rows,
                        size_t row_bytes, const int32_t *keep, const char *what) {
    for (int64_t r = 0; r < rows; r++) {
        if (keep && keep[r] < 0)
            continue;
        size_t at = ref_first_difference(got + r * row_bytes, want + r * row_bytes, row_bytes);
        if (at == SIZE_MAX)
            continue;
        cr_assert_fail("%s: row %ld byte %zu: got 0x%02x, expected 0x%02x", what, (long)r, at,
                       got[r * row_bytes + at], want[r * row_bytes + at]);
    }
}

/* GPU expf of `count` arguments (count % 4 == 0) through swiglu_exp. */
static void gpu_exp(const gpu *g, const float *argument, float *value, int64_t count) {
    if (count == 0)
        return;
    CUdeviceptr in = gpu_alloc(g, (size_t)count * 4), out = gpu_alloc(g, (size_t)count * 4);
    CU(g, cuMemcpyHtoD(in, argument, (size_t)count * 4));
    tk_tensor x = tensor(in, TK_F32, 1, count, 0), y = tensor(out, TK_F32, 1, count, 0);
    check_status(tkl_swiglu_exp__default(&x, &y, NULL), "swiglu_exp");
    CU(g, cuCtxSynchronize());
    CU(g, cuMemcpyDtoH(value, out, (size_t)count * 4));
    CU(g, cuMemFree(in));
    CU(g, cuMemFree(out));
}

/* table[b] = GPU expf(bf16 pattern b). */
static float *gpu_bf16_exp_table(const gpu *g) {
    float *argument = host_alloc(65536 * 4), *table = host_alloc(65536 * 4);
    for (int b = 0; b < 65536; b++)
        argument[b] = ref_bf16_to_f32((uint16_t)b);
    gpu_exp(g, argument, table, 65536);
    free(argument);
    return table;
}

/* ---- MoE draws ------------------------------------------------------------ */

/* TileKernels' generate_moe_params (spec 12.1): 4001 tokens per rank,
 * (top-k, total experts, EP ranks); the last one is the pressure mode's
 * degenerate zero-token draw. */
typedef struct moe_params {
    int64_t sent;
    int topk, total, ranks;
} moe_params;
static const moe_params MOE[] = {
    {4001, 2, 72, 8},  {4001, 6, 256, 8},  {4001, 8, 256, 64}, {4001, 9, 72, 8},
    {4001, 2, 256, 64}, {4001, 8, 256, 8},  {4001, 6, 72, 8},  {4001, 9, 256, 64},
    {4001, 1, 256, 8}, {4001, 7, 288, 72},
};
#define NUM_MOE (sizeof MOE / sizeof MOE[0])
static const moe_params MOE_EMPTY = {0, 1, 1, 1};

static void make_mapping(const moe_params *p, int alignment, ref_swiglu_mapping *m) {
    cr_assert(ref_swiglu_make_mapping(p->sent, p->topk, p->total, p->ranks, alignment,
                                      test_seed() + 77 + (uint64_t)p->topk * 131 +
                                          (uint64_t)p->ranks,
                                      m));
}

/* ---- swiglu_forward_and_per_token_cast ------------------------------------ */

#define FWD_MAX_ROWS 40000
#define FWD_MAX_HALF 3584

typedef struct forward_case {
    int npc_is_half;  /* npc = I instead of 128 */
    int packed;       /* (col, round, packed) = (T, T, T), else (F, T, F) */
    int mask, weights;
    int clamp;        /* 0 none, 1: 10.0, 2: 0.5 */
} forward_case;

/* Case n of the forward sweep: its hidden size and MoE draw.  bf16: case 0
 * is the pressure mode's zero-token draw, then 30 cases, 5 per hidden
 * size, every option combination once (combination 7n mod 30 spreads them
 * over the sizes); the three small hidden sizes take the large draws
 * (24000-36000 rows), the three large ones the small draws (4000-8000
 * rows), which keeps every TileKernels draw and size while bounding the
 * work.  f32: one case per hidden size on the small draws. */
static const int64_t FWD_HALVES[] = {1024, 1280, 1536, 2048, 3072, 3584};
static const int FWD_LARGE_DRAWS[] = {1, 2, 3, 5, 6, 7, 9};
static const int FWD_SMALL_DRAWS[] = {0, 4, 8};

static int forward_cases(bool sweep_all) { return sweep_all ? 31 : 6; }

static void forward_case_shape(bool sweep_all, int n, int64_t *half, const moe_params **p) {
    int h = sweep_all ? (n > 0 ? (n - 1) / 5 : 0) : n;
    *half = FWD_HALVES[h];
    if (sweep_all && n == 0)
        *p = &MOE_EMPTY;
    else if (sweep_all && h < 3)
        *p = &MOE[FWD_LARGE_DRAWS[n % 7]];
    else
        *p = &MOE[FWD_SMALL_DRAWS[n % (sweep_all ? 3 : 2)]];
}

static void run_forward(tk_dtype dtype, bool sweep_all) {
    gpu g = gpu_begin();
    double start = now_seconds();
    size_t in_size = tk_dtype_size(dtype);
    /* x is read as (rows, 2I) from its start: fill what the largest case reads */
    int64_t x_elements = 2;
    for (int n = 0; n < forward_cases(sweep_all); n++) {
        int64_t half;
        const moe_params *p;
        forward_case_shape(sweep_all, n, &half, &p);
        ref_swiglu_mapping m;
        make_mapping(p, 16, &m);
        cr_assert(m.rows <= FWD_MAX_ROWS, "draw too large: %ld rows", (long)m.rows);
        if (m.rows * 2 * half > x_elements)
            x_elements = m.rows * 2 * half;
        ref_swiglu_free_mapping(&m);
    }
    /* filled as rows of 7168 normals (one row per reference work item) */
    int64_t fill_rows = (x_elements + 7167) / 7168;
    size_t x_bytes = (size_t)fill_rows * 7168 * in_size;
    void *x = host_alloc(x_bytes);
    ref_fill_rand_float(x, dtype, fill_rows, 7168, 0, 0, test_seed() + 11);
    CUdeviceptr d_x = gpu_alloc(&g, x_bytes);
    size_t out_bytes = (size_t)FWD_MAX_ROWS * FWD_MAX_HALF;
    size_t sf_max = (size_t)FWD_MAX_ROWS * (FWD_MAX_HALF / 128) * 4 + 64;
    CUdeviceptr d_out = gpu_alloc(&g, out_bytes + TAIL_BYTES);
    CUdeviceptr d_sf = gpu_alloc(&g, sf_max + TAIL_BYTES);
    CUdeviceptr d_map = gpu_alloc(&g, (size_t)FWD_MAX_ROWS * 4 * 2);
    CUdeviceptr d_weights = gpu_alloc(&g, (size_t)FWD_MAX_ROWS * 9 * 4);
    CUdeviceptr d_counts = gpu_alloc(&g, 3 * 8 + TAIL_BYTES);
    uint8_t *got = host_alloc(out_bytes + TAIL_BYTES), *want = host_alloc(out_bytes + TAIL_BYTES);
    unsigned char *got_sf = host_alloc(sf_max + TAIL_BYTES), *want_sf = host_alloc(sf_max + TAIL_BYTES);
    float *table = gpu_bf16_exp_table(&g);
    float *element_exp = NULL, *argument = NULL;
    if (dtype == TK_F32) {
        element_exp = host_alloc(out_bytes * 4);
        argument = host_alloc(out_bytes * 4);
    }
    /* every valid option combination (spec 6.9 tests): 30 */
    forward_case combos[32];
    int ncombos = 0;
    for (int npc = 0; npc < 2; npc++)
        for (int packed = 0; packed < 2; packed++)
            for (int mask = 0; mask < 2; mask++)
                for (int weights = 0; weights < 2; weights++)
                    for (int clamp = 0; clamp < 3; clamp++) {
                        if (packed && (weights || npc))
                            continue; /* excluded by TileKernels' test */
                        combos[ncombos++] = (forward_case){npc, packed, mask, weights, clamp};
                    }
    cr_assert_eq(ncombos, 30);
    int cases = 0, packed_cases = 0, per_row_cases = 0, counted = 0;
    int64_t elements = 0;
    for (int n = 0; n < forward_cases(sweep_all); n++) {
        {
            /* bf16: combination 7n mod 30 (7 is prime to 30: n = 1..30 run
             * each once); f32: six combinations spread the same way */
            forward_case c = combos[(n * (sweep_all ? 7 : 11) + (sweep_all ? 0 : 3)) % ncombos];
            int64_t half;
            const moe_params *p;
            forward_case_shape(sweep_all, n, &half, &p);
            ref_swiglu_mapping m;
            make_mapping(p, 16, &m);
            int64_t rows = m.rows, width = 2 * half;
            int npc = c.npc_is_half ? (int)half : 128;
            /* beyond TileKernels' (F,T,F) / (T,T,T): every third f32-SF case
             * unrounded, every other npc-128 one column-major */
            tk_sf_layout layout = c.packed ? TK_SF_PACKED_UE8M0
                                  : (!c.npc_is_half && n % 2) ? TK_SF_COL_MAJOR
                                                              : TK_SF_ROW_MAJOR;
            bool round_sf = c.packed || n % 3 != 1;
            float clamp = c.clamp == 1 ? 10.0f : 0.5f;
            bool count = c.clamp && !c.npc_is_half;
            char what[200];
            snprintf(what, sizeof what,
                     "swiglu_forward %s N=%ld I=%ld npc=%d %s round=%d mask=%d weights=%d "
                     "clamp=%s count=%d (topk %d, %d/%d)",
                     dtype == TK_BF16 ? "bf16" : "f32", (long)rows, (long)half, npc,
                     c.packed ? "packed" : layout == TK_SF_COL_MAJOR ? "col" : "row", round_sf,
                     c.mask, c.weights,
                     c.clamp ? (c.clamp == 1 ? "10" : "0.5") : "none", count, p->topk, p->total,
                     p->ranks);
            /* x: the random buffer read as (rows, 2I); padding rows keep
             * random values (TileKernels zeroes them): with the mask off
             * they are processed with weight 0 and counted, on both sides */
            CU(&g, cuMemcpyHtoD(d_x, x, (size_t)(rows * width) * in_size));
            float *weights = host_alloc((size_t)(m.tokens * m.topk + 1) * 4);
            ref_rng rng = ref_rng_seed(test_seed() + 5, (uint64_t)cases);
            for (int64_t k = 0; k < m.tokens * m.topk; k++)
                weights[k] = ref_rng_normal(&rng);
            CU(&g, cuMemcpyHtoD(d_map, m.pos_to_expert, (size_t)rows * 4 + 4));
            CU(&g, cuMemcpyHtoD(d_map + (size_t)FWD_MAX_ROWS * 4, m.pos_to_token_topk,
                                (size_t)rows * 4 + 4));
            CU(&g, cuMemcpyHtoD(d_weights, weights, (size_t)(m.tokens * m.topk) * 4 + 4));
            int64_t start_counts[3] = {3, 1000, 7};
            CU(&g, cuMemsetD8(d_counts, POISON, 24 + TAIL_BYTES));
            CU(&g, cuMemcpyHtoD(d_counts, start_counts, 24));
            ref_sf_shape shape;
            cr_assert(ref_sf_shape_of(rows, half, 1, npc, layout, &shape));
            tk_tensor sf;
            size_t sf_bytes;
            check_status(tk_sf_desc(rows, half, 1, npc, layout, &sf, &sf_bytes), "tk_sf_desc");
            cr_assert_eq(sf_bytes, shape.bytes);
            sf.data = (void *)(uintptr_t)d_sf;
            poison(&g, d_out, (size_t)(rows * half));
            poison(&g, d_sf, shape.bytes);
            tk_tensor tx = tensor(d_x, dtype, 2, rows, width);
            tk_tensor tout = tensor(d_out, TK_E4M3, 2, rows, half);
            tk_tensor tmask = tensor(d_map, TK_I32, 1, rows, 0);
            tk_tensor tindex = tensor(d_map + (size_t)FWD_MAX_ROWS * 4, TK_I32, 1, rows, 0);
            tk_tensor tweights = tensor(d_weights, TK_F32, 2, m.tokens, m.topk);
            tk_tensor tcounts = tensor(d_counts, TK_I64, 1, 3, 0);
            check_status(tk_swiglu_forward_and_per_token_cast(
                             &tx, npc, c.weights ? &tindex : NULL, c.weights ? &tweights : NULL,
                             c.mask ? &tmask : NULL, round_sf, layout, c.clamp ? &clamp : NULL,
                             count ? &tcounts : NULL, NULL, &tout, &sf, NULL),
                         what);
            download(&g, got, d_out, (size_t)(rows * half), what);
            download(&g, got_sf, d_sf, shape.bytes, what);
            int64_t got_counts[3 + TAIL_BYTES / 8];
            download(&g, got_counts, d_counts, 24, what);

            ref_swiglu_forward args = {
                .x = x, .dtype = dtype, .rows = rows, .half = half, .num_per_channels = npc,
                .round_sf = round_sf, .layout = layout,
                .pos_to_token_topk = c.weights ? m.pos_to_token_topk : NULL,
                .topk_weights = c.weights ? weights : NULL, .num_weights = m.tokens * m.topk,
                .pos_to_expert = c.mask ? m.pos_to_expert : NULL, .use_clamp = c.clamp != 0,
                .clamp = clamp};
            ref_swiglu_exp_array array = {element_exp, half};
            if (dtype == TK_BF16) {
                args.exp = ref_swiglu_exp_bf16_table(table);
            } else {
                ref_swiglu_forward_exp_arguments(&args, argument);
                gpu_exp(&g, argument, element_exp, rows * half);
                args.exp = ref_swiglu_exp_elements(&array);
            }
            memcpy(want_sf, got_sf, shape.bytes); /* bytes the reference leaves */
            int64_t want_counts[3] = {3, 1000, 7};
            cr_assert(ref_swiglu_forward_per_token_cast(&args, want, want_sf, want_counts));
            expect_rows(got, want, rows, (size_t)half, c.mask ? m.pos_to_expert : NULL, what);
            for (int64_t r = 0; r < rows; r++) {
                if (c.mask && m.pos_to_expert[r] < 0)
                    continue;
                for (int64_t k = 0; k < shape.nbk; k++) {
                    size_t at = ref_sf_offset(&shape, r, k), size = ref_sf_entry_bytes(&shape);
                    cr_assert(memcmp(got_sf + at, want_sf + at, size) == 0,
                              "%s: scale of row %ld group %ld differs", what, (long)r, (long)k);
                }
            }
            if (count)
                for (int k = 0; k < 3; k++)
                    cr_assert_eq(got_counts[k], want_counts[k], "%s: clamped_count[%d] %ld, "
                                 "expected %ld", what, k, (long)got_counts[k],
                                 (long)want_counts[k]);
            else
                cr_assert(got_counts[0] == 3 && got_counts[1] == 1000 && got_counts[2] == 7,
                          "%s: clamped_count changed without counting", what);
            free(weights);
            ref_swiglu_free_mapping(&m);
            cases++;
            packed_cases += c.packed;
            per_row_cases += c.npc_is_half;
            counted += count;
            elements += rows * half;
        }
    }
    fprintf(stderr, "test_gpu_swiglu: swiglu_forward %s: %d cases (%d packed, %d npc=I, %d "
            "counting), %.1f M elements, I 1024..3584, in %.1f s\n",
            dtype == TK_BF16 ? "bf16" : "f32", cases, packed_cases, per_row_cases, counted,
            (double)elements * 1e-6, now_seconds() - start);
    free(x), free(got), free(want), free(got_sf), free(want_sf), free(table);
    free(element_exp), free(argument);
    CUdeviceptr buffers[] = {d_x, d_out, d_sf, d_map, d_weights, d_counts};
    for (size_t i = 0; i < sizeof buffers / sizeof buffers[0]; i++)
        CU(&g, cuMemFree(buffers[i]));
}

Test(swiglu_forward, bf16_sweep, .timeout = 1800) { run_forward(TK_BF16, true); }
Test(swiglu_forward, f32_inputs, .timeout = 1800) { run_forward(TK_F32, false); }

/* Every bf16 gate pattern, 64 rows x I = 1024, up values normal: zeros,
 * subnormals, tiny and huge gates, NaN (quiet and signalling) and -inf,
 * next to ordinary ones in the same 16-column chunks, so that the kernels'
 * fast IEEE division (kernels/swiglu.tk, swiglu_quotient) meets the edges
 * of its range and its fallback.  Positive gates of 2^100 and above (and
 * +inf) are negated: their products with u would overflow to inf, whose
 * scales the per-token cast does not define.  Variants, by the loop of
 * swiglu_forward_per_token_cast they run:
 *   0 plain, 1 weights, 2 packed UE8M0 scales with a mask (the benchmark's
 *     instance), 3 a clamp of 0.5: the bf16 word path (WORDS);
 *   4 a clamp on f32 inputs (the same values widened): the general loop
 *     of the fragment path;
 *   5, 6 a clamp with counting, bf16 and f32 packed: the COUNT loop.
 * With a clamp every NaN gate acts as 0.5 (the GPU's min drops NaN, spec
 * 2.1) and -0.5 is a bf16, so the exp table still holds every argument;
 * NaN gates are never counted. */
Test(swiglu_forward, special_gate_values, .timeout = 300) {
    gpu g = gpu_begin();
    const int64_t rows = 64, half = 1024, width = 2 * half;
    uint16_t *x = host_alloc((size_t)(rows * width) * 2);
    uint32_t *x32 = host_alloc((size_t)(rows * width) * 4);
    ref_rng rng = ref_rng_seed(test_seed() + 21, 0);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < half; j++) {
            uint16_t gate = (uint16_t)(r * half + j);
            if (gate < 0x8000 && ((gate >> 7) & 0xFF) >= 127 + 100)
                gate |= 0x8000;
            x[r * width + j] = gate;
            x[r * width + half + j] = ref_bf16_from_f32(ref_rng_normal(&rng));
        }
    for (int64_t i = 0; i < rows * width; i++)
        x32[i] = (uint32_t)x[i] << 16; /* the bf16 value, NaN payloads kept */
    float weights[64];
    int32_t index[64], mask[64];
    for (int r = 0; r < 64; r++) {
        weights[r] = ref_rng_normal(&rng);
        index[r] = 63 - r;
        mask[r] = r % 5 == 2 ? -1 : r % 3;
    }
    /* the row-major f32 scales are the largest of the layouts used */
    size_t out_bytes = (size_t)(rows * half), sf_bytes = (size_t)(rows * (half / 128)) * 4;
    CUdeviceptr d_x = gpu_alloc(&g, (size_t)(rows * width) * 2);
    CUdeviceptr d_x32 = gpu_alloc(&g, (size_t)(rows * width) * 4);
    CUdeviceptr d_out = gpu_alloc(&g, out_bytes + TAIL_BYTES);
    CUdeviceptr d_sf = gpu_alloc(&g, sf_bytes + TAIL_BYTES);
    CUdeviceptr d_weights = gpu_alloc(&g, sizeof weights);
    CUdeviceptr d_index = gpu_alloc(&g, sizeof index);
    CUdeviceptr d_mask = gpu_alloc(&g, sizeof mask);
    CUdeviceptr d_counts = gpu_alloc(&g, 3 * 8 + TAIL_BYTES);
    CU(&g, cuMemcpyHtoD(d_x, x, (size_t)(rows * width) * 2));
    CU(&g, cuMemcpyHtoD(d_x32, x32, (size_t)(rows * width) * 4));
    CU(&g, cuMemcpyHtoD(d_weights, weights, sizeof weights));
    CU(&g, cuMemcpyHtoD(d_index, index, sizeof index));
    CU(&g, cuMemcpyHtoD(d_mask, mask, sizeof mask));
    uint8_t *got = host_alloc(out_bytes + TAIL_BYTES), *want = host_alloc(out_bytes);
    unsigned char *got_sf = host_alloc(sf_bytes + TAIL_BYTES), *want_sf = host_alloc(sf_bytes);
    float *table = gpu_bf16_exp_table(&g);
    const float clamp = 0.5f;
    for (int variant = 0; variant < 7; variant++) {
        bool with_weights = variant == 1, packed = variant == 2 || variant == 6;
        bool clamped = variant >= 3, f32_input = variant == 4 || variant == 6;
        bool counting = variant >= 5;
        tk_sf_layout layout = packed ? TK_SF_PACKED_UE8M0 : TK_SF_ROW_MAJOR;
        char what[120];
        snprintf(what, sizeof what,
                 "swiglu_forward special gate values, %s weights=%d packed=%d clamp=%d count=%d",
                 f32_input ? "f32" : "bf16", with_weights, packed, clamped, counting);
        ref_sf_shape shape;
        cr_assert(ref_sf_shape_of(rows, half, 1, 128, layout, &shape));
        tk_tensor sf;
        size_t bytes;
        check_status(tk_sf_desc(rows, half, 1, 128, layout, &sf, &bytes), "tk_sf_desc");
        cr_assert_eq(bytes, shape.bytes);
        cr_assert(bytes <= sf_bytes);
        sf.data = (void *)(uintptr_t)d_sf;
        poison(&g, d_out, out_bytes);
        poison(&g, d_sf, bytes);
        const int64_t start_counts[3] = {7, 11, 13};
        CU(&g, cuMemsetD8(d_counts, POISON, 24 + TAIL_BYTES));
        CU(&g, cuMemcpyHtoD(d_counts, start_counts, 24));
        tk_tensor tx = f32_input ? tensor(d_x32, TK_F32, 2, rows, width)
                                 : tensor(d_x, TK_BF16, 2, rows, width);
        tk_tensor tout = tensor(d_out, TK_E4M3, 2, rows, half);
        tk_tensor tindex = tensor(d_index, TK_I32, 1, rows, 0);
        tk_tensor tweights = tensor(d_weights, TK_F32, 2, 8, 8);
        tk_tensor tmask = tensor(d_mask, TK_I32, 1, rows, 0);
        tk_tensor tcounts = tensor(d_counts, TK_I64, 1, 3, 0);
        check_status(tk_swiglu_forward_and_per_token_cast(
                         &tx, 128, with_weights ? &tindex : NULL,
                         with_weights ? &tweights : NULL, packed ? &tmask : NULL, true, layout,
                         clamped ? &clamp : NULL, counting ? &tcounts : NULL, NULL, &tout, &sf,
                         NULL),
                     what);
        download(&g, got, d_out, out_bytes, what);
        download(&g, got_sf, d_sf, bytes, what);
        int64_t got_counts[3];
        download(&g, got_counts, d_counts, 24, what);
        ref_swiglu_forward args = {
            .x = f32_input ? (const void *)x32 : (const void *)x,
            .dtype = f32_input ? TK_F32 : TK_BF16, .rows = rows, .half = half,
            .num_per_channels = 128, .round_sf = true, .layout = layout,
            .pos_to_token_topk = with_weights ? index : NULL,
            .topk_weights = with_weights ? weights : NULL, .num_weights = 64,
            .pos_to_expert = packed ? mask : NULL, .use_clamp = clamped, .clamp = clamp,
            .exp = ref_swiglu_exp_bf16_table(table)};
        int64_t want_counts[3] = {7, 11, 13};
        memcpy(want_sf, got_sf, bytes); /* bytes the reference leaves */
        cr_assert(ref_swiglu_forward_per_token_cast(&args, want, want_sf, want_counts));
        expect_rows(got, want, rows, (size_t)half, packed ? mask : NULL, what);
        for (int64_t r = 0; r < rows; r++) {
            if (packed && mask[r] < 0)
                continue;
            for (int64_t k = 0; k < shape.nbk; k++) {
                size_t at = ref_sf_offset(&shape, r, k), size = ref_sf_entry_bytes(&shape);
                cr_assert(memcmp(got_sf + at, want_sf + at, size) == 0,
                          "%s: scale of row %ld group %ld differs", what, (long)r, (long)k);
            }
        }
        for (int k = 0; k < 3; k++)
            cr_assert_eq(got_counts[k], counting ? want_counts[k] : start_counts[k],
                         "%s: clamped_count[%d] %ld, want %ld", what, k, (long)got_counts[k],
                         (long)(counting ? want_counts[k] : start_counts[k]));
    }
    free(x), free(x32), free(got), free(want), free(got_sf), free(want_sf), free(table);
    CUdeviceptr buffers[] = {d_x, d_x32, d_out, d_sf, d_weights, d_index, d_mask, d_counts};
    for (size_t i = 0; i < sizeof buffers / sizeof buffers[0]; i++)
        CU(&g, cuMemFree(buffers[i]));
}

/* ---- swiglu_backward_and_per_token_cast ----------------------------------- */

#define BWD_MAX_ROWS 40000
#define BWD_MAX_HALF 7168

/* Case n of the backward sweep.  Case 0 is the zero-token draw; cases
 * 1..12 run each npc x round x clamp combination once, two per hidden size
 * (both npc at each size), on the small draws (4000-8000 rows), except a
 * large top-6 draw (24000 rows) at I = 2048: the reference costs about
 * 20 times the forward one per element, so the large draws stay few. */
static const int64_t BWD_HALVES[] = {2048, 2560, 3072, 4096, 6144, 7168};

static void backward_case(int n, int64_t *half, int *combo, const moe_params **p) {
    static const int small[] = {8, 4, 8, 0};
    int k = n > 0 ? n - 1 : 0;
    *half = BWD_HALVES[k / 2];
    *combo = k;
    *p = n == 0 ? &MOE_EMPTY : k == 0 ? &MOE[1] : &MOE[small[k % 4]];
}

Test(swiglu_backward, sweep, .timeout = 1800) {
    gpu g = gpu_begin();
    double start = now_seconds();
    /* source and grad are read as (rows, 2I) and (rows, I) from their
     * starts: fill what the largest case reads, as rows of 7168 normals */
    int64_t pairs = 1;
    for (int n = 0; n <= 12; n++) {
        int64_t half;
        int combo;
        const moe_params *p;
        backward_case(n, &half, &combo, &p);
        ref_swiglu_mapping m;
        make_mapping(p, combo % 2 ? 128 : 32, &m);
        cr_assert(m.rows <= BWD_MAX_ROWS);
        if (m.rows * half > pairs)
            pairs = m.rows * half;
        ref_swiglu_free_mapping(&m);
    }
    int64_t fill_rows = (pairs + 7167) / 7168;
    size_t x_bytes = (size_t)BWD_MAX_ROWS * 2 * BWD_MAX_HALF;
    uint16_t *source = host_alloc((size_t)fill_rows * 2 * 7168 * 2);
    uint16_t *grad = host_alloc((size_t)fill_rows * 7168 * 2 + 2); /* uploads read 1 past */
    ref_fill_rand_float(source, TK_BF16, 2 * fill_rows, 7168, 0, 0, test_seed() + 21);
    ref_fill_rand_float(grad, TK_BF16, fill_rows, 7168, 0, 0, test_seed() + 22);
    uint8_t *x = host_alloc(x_bytes);
    float *x_sf = host_alloc(x_bytes / 32 * 4);
    size_t half_elems = (size_t)BWD_MAX_ROWS * BWD_MAX_HALF;
    CUdeviceptr d_x = gpu_alloc(&g, x_bytes), d_x_sf = gpu_alloc(&g, x_bytes / 32 * 4);
    CUdeviceptr d_grad = gpu_alloc(&g, half_elems * 2);
    CUdeviceptr d_small = gpu_alloc(&g, (size_t)BWD_MAX_ROWS * 9 * 4 * 4 + 4 * TAIL_BYTES);
    CUdeviceptr d_out = gpu_alloc(&g, half_elems * 2 + TAIL_BYTES);
    CUdeviceptr d_fp8 = gpu_alloc(&g, x_bytes + TAIL_BYTES);
    CUdeviceptr d_gsf = gpu_alloc(&g, x_bytes / 32 * 4 + TAIL_BYTES);
    CUdeviceptr d_xg = gpu_alloc(&g, x_bytes * 2 + TAIL_BYTES);
    unsigned char *got = host_alloc(x_bytes * 2 + TAIL_BYTES), *want = host_alloc(x_bytes * 2 + TAIL_BYTES);
    float *argument = host_alloc(half_elems * 4), *values = host_alloc(half_elems * 4);
    int cases = 0;
    int64_t elements = 0;
    for (int n = 0; n <= 12; n++) {
        {
            int64_t half;
            int combo;
            const moe_params *p;
            backward_case(n, &half, &combo, &p);
            int npc = combo % 2 ? 128 : 32;
            bool round_sf = (combo / 2) % 2;
            int clamp_kind = combo / 4;
            float clamp = clamp_kind == 1 ? 10.0f : 0.5f;
            int64_t width = 2 * half, groups = width / npc;
            ref_swiglu_mapping m;
            make_mapping(p, npc, &m);
            int64_t rows = m.rows, tk = m.tokens * m.topk;
            cr_assert(rows <= BWD_MAX_ROWS);
            char what[200];
            snprintf(what, sizeof what,
                     "swiglu_backward N=%ld I=%ld npc=%d round=%d clamp=%s (topk %d, %d/%d)",
                     (long)rows, (long)half, npc, round_sf,
                     clamp_kind ? (clamp_kind == 1 ? "10" : "0.5") : "none", p->topk, p->total,
                     p->ranks);
            /* x = per_token_cast(bf16 randn, e4m3, npc); padding rows are
             * random too (weight 0, as in the original) */
            cr_assert(ref_per_token_cast_e4m3(source, TK_BF16, rows, width, width, npc, false,
                                              TK_SF_ROW_MAJOR, x, x_sf));
            float *weight = host_alloc((size_t)(tk + 1) * 4);
            ref_rng rng = ref_rng_seed(test_seed() + 9, (uint64_t)cases);
            for (int64_t k = 0; k < tk; k++)
                weight[k] = ref_rng_uniform(&rng);
            CUdeviceptr d_weight = d_small, d_ptt = d_small + (size_t)BWD_MAX_ROWS * 9 * 4;
            CUdeviceptr d_ttp = d_ptt + (size_t)BWD_MAX_ROWS * 9 * 4;
            CUdeviceptr d_wgrad = d_ttp + (size_t)BWD_MAX_ROWS * 9 * 4 + TAIL_BYTES;
            CU(&g, cuMemcpyHtoD(d_x, x, (size_t)(rows * width) + 1));
            CU(&g, cuMemcpyHtoD(d_x_sf, x_sf, (size_t)(rows * groups) * 4 + 4));
            CU(&g, cuMemcpyHtoD(d_grad, grad, (size_t)(rows * half) * 2 + 2));
            CU(&g, cuMemcpyHtoD(d_weight, weight, (size_t)tk * 4 + 4));
            CU(&g, cuMemcpyHtoD(d_ptt, m.pos_to_token_topk, (size_t)rows * 4 + 4));
            CU(&g, cuMemcpyHtoD(d_ttp, m.token_topk_to_pos, (size_t)tk * 4 + 4));
            poison(&g, d_out, (size_t)(rows * half) * 2);
            poison(&g, d_fp8, (size_t)(rows * width));
            poison(&g, d_gsf, (size_t)(rows * groups) * 4);
            poison(&g, d_xg, (size_t)(rows * width) * 2);
            poison(&g, d_wgrad, (size_t)tk * 4);
            tk_tensor tx = tensor(d_x, TK_E4M3, 2, rows, width);
            tk_tensor tsf = tensor(d_x_sf, TK_F32, 2, rows, groups);
            tk_tensor tgrad = tensor(d_grad, TK_BF16, 2, rows, half);
            tk_tensor tw = tensor(d_weight, TK_F32, 2, m.tokens, m.topk);
            tk_tensor tptt = tensor(d_ptt, TK_I32, 1, rows, 0);
            tk_tensor tttp = tensor(d_ttp, TK_I32, 2, m.tokens, m.topk);
            tk_tensor tout = tensor(d_out, TK_BF16, 2, rows, half);
            tk_tensor tfp8 = tensor(d_fp8, TK_E4M3, 2, rows, width);
            tk_tensor tgsf = tensor(d_gsf, TK_F32, 2, rows, groups);
            tk_tensor txg = tensor(d_xg, TK_BF16, 2, rows, width);
            tk_tensor twg = tensor(d_wgrad, TK_F32, 2, m.tokens, m.topk);
            check_status(tk_swiglu_backward_and_per_token_cast(
                             &tx, &tsf, &tgrad, &tw, &tptt, &tttp, npc, round_sf,
                             clamp_kind ? &clamp : NULL, &tout, &tfp8, &tgsf, &txg, &twg, NULL),
                         what);
            ref_swiglu_backward args = {x, x_sf, grad, weight, m.pos_to_token_topk,
                                        m.token_topk_to_pos, rows, half, m.tokens, m.topk, npc,
                                        round_sf, clamp_kind != 0, clamp, {0}};
            ref_swiglu_backward_exp_arguments(&args, argument);
            gpu_exp(&g, argument, values, rows * half);
            ref_swiglu_exp_array array = {values, half};
            args.exp = ref_swiglu_exp_elements(&array);
            uint16_t *w_out = host_alloc((size_t)(rows * half) * 2 + 2);
            uint8_t *w_fp8 = host_alloc((size_t)(rows * width) + 1);
            float *w_gsf = host_alloc((size_t)(rows * groups) * 4 + 4);
            uint16_t *w_xg = host_alloc((size_t)(rows * width) * 2 + 2);
            float *w_wg = host_alloc((size_t)tk * 4 + 4);
            cr_assert(ref_swiglu_backward_per_token_cast(&args, w_out, w_fp8, w_gsf, w_xg, w_wg));
            download(&g, got, d_out, (size_t)(rows * half) * 2, what);
            expect_rows(got, (unsigned char *)w_out, rows, (size_t)half * 2, NULL, "out");
            download(&g, got, d_xg, (size_t)(rows * width) * 2, what);
            expect_rows(got, (unsigned char *)w_xg, rows, (size_t)width * 2, NULL, "x_grad");
            download(&g, got, d_fp8, (size_t)(rows * width), what);
            expect_rows(got, w_fp8, rows, (size_t)width, NULL, "x_grad_fp8");
            download(&g, got, d_gsf, (size_t)(rows * groups) * 4, what);
            expect_rows(got, (unsigned char *)w_gsf, rows, (size_t)groups * 4, NULL, "x_grad_sf");
            download(&g, got, d_wgrad, (size_t)tk * 4, what);
            for (int64_t k = 0; k < tk; k++) {
                float gw, ww = w_wg[k];
                memcpy(&gw, got + k * 4, 4);
                cr_assert(fabsf(gw - ww) <= 1e-4f + 1e-4f * fabsf(ww),
                          "%s: weight_grad[%ld] %g, expected %g", what, (long)k, (double)gw,
                          (double)ww);
                if (m.token_topk_to_pos[k] < 0)
                    cr_assert(gw == 0.0f, "%s: unmapped weight_grad[%ld] is %g", what, (long)k,
                              (double)gw);
            }
            free(weight), free(w_out), free(w_fp8), free(w_gsf), free(w_xg), free(w_wg);
            ref_swiglu_free_mapping(&m);
            cases++;
            elements += rows * half;
        }
    }
    fprintf(stderr, "test_gpu_swiglu: swiglu_backward: %d cases (npc 32/128 x round x clamp "
            "once each, I 2048..7168), %.1f M elements, in %.1f s\n", cases,
            (double)elements * 1e-6, now_seconds() - start);
    free(source), free(grad), free(x), free(x_sf), free(got), free(want), free(argument), free(values);
    CUdeviceptr buffers[] = {d_x, d_x_sf, d_grad, d_small, d_out, d_fp8, d_gsf, d_xg};
    for (size_t i = 0; i < sizeof buffers / sizeof buffers[0]; i++)
        CU(&g, cuMemFree(buffers[i]));
}

/* Values that leave the backward kernel's fast range (kernels/
 * swiglu_backward.tk: IEEE division unless |gate| <= 87, |scale| >= 2^-90
 * and clamp 0 or >= 2^-90): every non-NaN e4m3 code, zeros of both signs
 * often, scales from 2^-95 to 3 (dequantised gates up to 1344, where
 * 1 / d is subnormal or 0), clamps 0, 1e-35, 0.5 and 10, unmapped rows,
 * a partial row block and a partial block column (I = 640).  The exact
 * outputs are compared byte for byte; weight_grad, whose sum cancels
 * terms up to 1e6 here, within 1e-4 of the sum of |g * x * y| over the
 * row (|act| <= |x * y| since d >= 1). */
Test(swiglu_backward, fast_path_boundaries) {
    gpu g = gpu_begin();
    const int64_t rows = 37, half = 640, width = 2 * half;
    static const float scales[] = {0.01f, 1.0f, 0.25f, 0x1p-95f, 0x1p-60f, 2.2321428e-7f,
                                   3.0f, 0.5f, 0x1p-89f, 0.125f};
    static const float clamps[] = {0.0f, 1e-35f, 0.5f, 10.0f};
    uint8_t *x = host_alloc((size_t)(rows * width));
    float *x_sf = host_alloc((size_t)(rows * width / 32) * 4);
    uint16_t *grad = host_alloc((size_t)(rows * half) * 2);
    float *weight = host_alloc((size_t)rows * 4);
    int32_t *map = host_alloc((size_t)rows * 4);
    ref_fill_rand_float(grad, TK_BF16, rows, half, 0, 0, test_seed() + 41);
    ref_rng rng = ref_rng_seed(test_seed() + 42, 0);
    for (int64_t i = 0; i < rows * width; i++) {
        uint8_t code = (uint8_t)ref_rng_next(&rng);
        if ((code & 0x7F) == 0x7F || code % 16 == 3)
            code &= 0x80; /* no NaN; one code in 16 a signed zero */
        x[i] = code;
    }
    for (int64_t r = 0; r < rows; r++) {
        weight[r] = ref_rng_uniform(&rng);
        map[r] = r % 7 == 5 ? -1 : (int32_t)r; /* token r, top-1: its own row */
    }
    size_t x_bytes = (size_t)(rows * width), half_bytes = (size_t)(rows * half) * 2;
    CUdeviceptr d_x = gpu_alloc(&g, x_bytes), d_sf = gpu_alloc(&g, x_bytes / 32 * 4);
    CUdeviceptr d_grad = gpu_alloc(&g, half_bytes), d_weight = gpu_alloc(&g, (size_t)rows * 4);
    /* outputs carry the poisoned tail that download() checks */
    CUdeviceptr d_map = gpu_alloc(&g, (size_t)rows * 4);
    CUdeviceptr d_out = gpu_alloc(&g, half_bytes + TAIL_BYTES);
    CUdeviceptr d_fp8 = gpu_alloc(&g, x_bytes + TAIL_BYTES);
    CUdeviceptr d_gsf = gpu_alloc(&g, x_bytes / 32 * 4 + TAIL_BYTES);
    CUdeviceptr d_xg = gpu_alloc(&g, x_bytes * 2 + TAIL_BYTES);
    CUdeviceptr d_wgrad = gpu_alloc(&g, (size_t)rows * 4 + TAIL_BYTES);
    CU(&g, cuMemcpyHtoD(d_x, x, x_bytes));
    CU(&g, cuMemcpyHtoD(d_grad, grad, half_bytes));
    CU(&g, cuMemcpyHtoD(d_weight, weight, (size_t)rows * 4));
    CU(&g, cuMemcpyHtoD(d_map, map, (size_t)rows * 4));
    uint16_t *w_out = host_alloc(half_bytes), *w_xg = host_alloc(x_bytes * 2);
    uint8_t *w_fp8 = host_alloc(x_bytes), *got = host_alloc(x_bytes * 2 + TAIL_BYTES);
    float *w_gsf = host_alloc(x_bytes / 32 * 4), *w_wg = host_alloc((size_t)rows * 4);
    float *argument = host_alloc(half_bytes * 2), *values = host_alloc(half_bytes * 2);
    double *magnitude = host_alloc((size_t)rows * sizeof(double));
    int cases = 0;
    for (int npc = 32; npc <= 128; npc *= 4)
        for (int round_sf = 0; round_sf < 2; round_sf++)
            for (int c = -1; c < 4; c++) {
                int64_t groups = width / npc;
                float clamp = c >= 0 ? clamps[c] : 0.0f;
                for (int64_t i = 0; i < rows * groups; i++)
                    x_sf[i] = scales[(i + cases) % 10];
                char what[120];
                snprintf(what, sizeof what, "swiglu_backward boundaries npc=%d round=%d clamp=%g%s",
                         npc, round_sf, (double)clamp, c >= 0 ? "" : " (none)");
                CU(&g, cuMemcpyHtoD(d_sf, x_sf, (size_t)(rows * groups) * 4));
                poison(&g, d_out, half_bytes);
                poison(&g, d_fp8, x_bytes);
                poison(&g, d_gsf, (size_t)(rows * groups) * 4);
                poison(&g, d_xg, x_bytes * 2);
                poison(&g, d_wgrad, (size_t)rows * 4);
                tk_tensor tx = tensor(d_x, TK_E4M3, 2, rows, width);
                tk_tensor tsf = tensor(d_sf, TK_F32, 2, rows, groups);
                tk_tensor tgrad = tensor(d_grad, TK_BF16, 2, rows, half);
                tk_tensor tw = tensor(d_weight, TK_F32, 2, rows, 1);
                tk_tensor tmap = tensor(d_map, TK_I32, 1, rows, 0);
                tk_tensor tmap2 = tensor(d_map, TK_I32, 2, rows, 1);
                tk_tensor tout = tensor(d_out, TK_BF16, 2, rows, half);
                tk_tensor tfp8 = tensor(d_fp8, TK_E4M3, 2, rows, width);
                tk_tensor tgsf = tensor(d_gsf, TK_F32, 2, rows, groups);
                tk_tensor txg = tensor(d_xg, TK_BF16, 2, rows, width);
                tk_tensor twg = tensor(d_wgrad, TK_F32, 2, rows, 1);
                check_status(tk_swiglu_backward_and_per_token_cast(
                                 &tx, &tsf, &tgrad, &tw, &tmap, &tmap2, npc, round_sf,
                                 c >= 0 ? &clamp : NULL, &tout, &tfp8, &tgsf, &txg, &twg, NULL),
                             what);
                ref_swiglu_backward args = {x, x_sf, grad, weight, map, map, rows, half, rows,
                                            1, npc, round_sf, c >= 0, clamp, {0}};
                ref_swiglu_backward_exp_arguments(&args, argument);
                gpu_exp(&g, argument, values, rows * half);
                ref_swiglu_exp_array array = {values, half};
                args.exp = ref_swiglu_exp_elements(&array);
                cr_assert(ref_swiglu_backward_per_token_cast(&args, w_out, w_fp8, w_gsf, w_xg,
                                                             w_wg));
                download(&g, got, d_out, half_bytes, what);
                expect_rows(got, (unsigned char *)w_out, rows, (size_t)half * 2, NULL, "out");
                download(&g, got, d_xg, x_bytes * 2, what);
                expect_rows(got, (unsigned char *)w_xg, rows, (size_t)width * 2, NULL, "x_grad");
                download(&g, got, d_fp8, x_bytes, what);
                expect_rows(got, w_fp8, rows, (size_t)width, NULL, "x_grad_fp8");
                download(&g, got, d_gsf, (size_t)(rows * groups) * 4, what);
                expect_rows(got, (unsigned char *)w_gsf, rows, (size_t)groups * 4, NULL,
                            "x_grad_sf");
                for (int64_t r = 0; r < rows; r++) {
                    magnitude[r] = 0.0;
                    for (int64_t j = 0; j < half; j++)
                        magnitude[r] += fabs(ref_bf16_to_f32(grad[r * half + j]) *
                                             ref_e4m3_to_f32(x[r * width + j]) *
                                             x_sf[r * groups + j / npc] *
                                             ref_e4m3_to_f32(x[r * width + half + j]) *
                                             x_sf[r * groups + (half + j) / npc]);
                }
                download(&g, got, d_wgrad, (size_t)rows * 4, what);
                for (int64_t r = 0; r < rows; r++) {
                    float gw;
                    memcpy(&gw, got + r * 4, 4);
                    cr_assert(fabs((double)gw - w_wg[r]) <= 1e-4 + 1e-4 * magnitude[r],
                              "%s: weight_grad[%ld] %g, expected %g", what, (long)r,
                              (double)gw, (double)w_wg[r]);
                }
                cases++;
            }
    fprintf(stderr, "test_gpu_swiglu: swiglu_backward boundaries: %d cases\n", cases);
    free(x), free(x_sf), free(grad), free(weight), free(map), free(w_out), free(w_xg);
    free(w_fp8), free(got), free(w_gsf), free(w_wg), free(argument), free(values), free(magnitude);
    CUdeviceptr buffers[] = {d_x, d_sf, d_grad, d_weight, d_map, d_out, d_fp8, d_gsf, d_xg,
                             d_wgrad};
    for (size_t i = 0; i < sizeof buffers / sizeof buffers[0]; i++)
        CU(&g, cuMemFree(buffers[i]));
}

/* ---- swiglu_forward_and_per_channel_cast_and_transpose -------------------- */

Test(swiglu_per_channel, sweep, .timeout = 1800) {
    gpu g = gpu_begin();
    double start = now_seconds();
    static const int64_t hidden[] = {576, 2048, 2560, 3072, 4096, 6144, 7168};
    static const int64_t tokens_list[] = {0, 4096, 8064};
    const int64_t max_tokens = 8064, max_half = 7168;
    size_t x_bytes = (size_t)max_tokens * 2 * max_half * 2;
    uint16_t *x = host_alloc(x_bytes + 16); /* uploads copy 2 bytes past the view */
    ref_fill_rand_float(x, TK_BF16, max_tokens, 2 * max_half, 0, 0, test_seed() + 31);
    CUdeviceptr d_x = gpu_alloc(&g, x_bytes + 16);
    size_t out_bytes = (size_t)max_tokens * max_half, sf_bytes = out_bytes / 32 * 4;
    CUdeviceptr d_out = gpu_alloc(&g, out_bytes + TAIL_BYTES);
    CUdeviceptr d_sf = gpu_alloc(&g, sf_bytes + TAIL_BYTES);
    uint8_t *got = host_alloc(out_bytes + TAIL_BYTES), *want = host_alloc(out_bytes + TAIL_BYTES);
    float *got_sf = host_alloc(sf_bytes + TAIL_BYTES), *want_sf = host_alloc(sf_bytes + TAIL_BYTES);
    float *table = gpu_bf16_exp_table(&g);
    int cases = 0, combo = 0;
    int64_t elements = 0;
    for (int t = 0; t < 3; t++)
        for (int h = 0; h < 7; h++) {
            int64_t tokens = tokens_list[t], half = hidden[h];
            /* bm x transpose x round x clamp = 24 combinations, 2 per
             * (T, I) of TileKernels' 14: each at least once with data
             * (T = 0 cases do not advance the rotation) */
            for (int i = 0; i < (tokens ? 2 : 1); i++, combo += tokens != 0) {
                int bm = combo % 2 ? 128 : 32;
                bool transpose = (combo / 2) % 2;
                bool round_sf = (combo / 4) % 2;
                int clamp_kind = (combo / 8) % 3;
                float clamp = clamp_kind == 1 ? 10.0f : 0.5f;
                char what[160];
                snprintf(what, sizeof what,
                         "swiglu_per_channel T=%ld I=%ld bm=%d transpose=%d round=%d clamp=%s",
                         (long)tokens, (long)half, bm, transpose, round_sf,
                         clamp_kind ? (clamp_kind == 1 ? "10" : "0.5") : "none");
                CU(&g, cuMemcpyHtoD(d_x, x, (size_t)(tokens * 2 * half) * 2 + 2));
                poison(&g, d_out, (size_t)(tokens * half));
                poison(&g, d_sf, (size_t)(tokens / bm * half) * 4);
                tk_tensor tx = tensor(d_x, TK_BF16, 2, tokens, 2 * half);
                tk_tensor tout = transpose ? tensor(d_out, TK_E4M3, 2, half, tokens)
                                           : tensor(d_out, TK_E4M3, 2, tokens, half);
                tk_tensor tsf = tensor(d_sf, TK_F32, 2, tokens / bm, half);
                check_status(tk_swiglu_forward_and_per_channel_cast_and_transpose(
                                 &tx, bm, round_sf, !transpose, clamp_kind ? &clamp : NULL,
                                 &tout, &tsf, NULL),
                             what);
                download(&g, got, d_out, (size_t)(tokens * half), what);
                download(&g, got_sf, d_sf, (size_t)(tokens / bm * half) * 4, what);
                cr_assert(ref_swiglu_forward_per_channel_cast(
                    x, tokens, half, bm, round_sf, transpose, clamp_kind != 0, clamp,
                    ref_swiglu_exp_bf16_table(table), want, want_sf));
                expect_rows(got, want, 1, (size_t)(tokens * half), NULL, what);
                expect_rows((unsigned char *)got_sf, (unsigned char *)want_sf, 1,
                            (size_t)(tokens / bm * half) * 4, NULL, what);
                cases++;
                elements += tokens * half;
            }
        }
    fprintf(stderr, "test_gpu_swiglu: swiglu_per_channel: %d cases (%d with T = 0; T 4096/8064 "
            "x I 576..7168 x 2 of the 24 options), %.1f M elements, in %.1f s\n", cases, 7,
            (double)elements * 1e-6, now_seconds() - start);
    free(x), free(got), free(want), free(got_sf), free(want_sf), free(table);
    CU(&g, cuMemFree(d_x));
    CU(&g, cuMemFree(d_out));
    CU(&g, cuMemFree(d_sf));
}

/* Every bf16 gate pattern (zeros, subnormals, huge values, infinities,
 * NaNs) in each of the 24 options: threads holding a gate outside
 * swiglu_quotient's exact range take the IEEE slow path, which random
 * data seldom reaches.  I = 320 is 10 column tiles, so the last block of
 * the 4-tile loop has two tiles to skip.  Positive gates of 2^100 and
 * above become negative, as in special_gate_values above (their
 * activations would overflow every scale of their channel). */
Test(swiglu_per_channel, special_gate_values, .timeout = 300) {
    gpu g = gpu_begin();
    const int64_t tokens = 256, half = 320, width = 2 * half;
    uint16_t *x = host_alloc((size_t)(tokens * width) * 2 + 16);
    ref_rng rng = ref_rng_seed(test_seed() + 37, 0);
    for (int64_t r = 0; r < tokens; r++)
        for (int64_t j = 0; j < half; j++) {
            uint16_t gate = (uint16_t)(r * half + j);
            if (gate < 0x8000 && ((gate >> 7) & 0xFF) >= 127 + 100)
                gate |= 0x8000;
            x[r * width + j] = gate;
            x[r * width + half + j] = ref_bf16_from_f32(ref_rng_normal(&rng));
        }
    size_t out_bytes = (size_t)(tokens * half), sf_bytes = (size_t)(tokens / 32 * half) * 4;
    CUdeviceptr d_x = gpu_alloc(&g, (size_t)(tokens * width) * 2 + 16);
    CUdeviceptr d_out = gpu_alloc(&g, out_bytes + TAIL_BYTES);
    CUdeviceptr d_sf = gpu_alloc(&g, sf_bytes + TAIL_BYTES);
    uint8_t *got = host_alloc(out_bytes + TAIL_BYTES), *want = host_alloc(out_bytes + TAIL_BYTES);
    float *got_sf = host_alloc(sf_bytes + TAIL_BYTES), *want_sf = host_alloc(sf_bytes + TAIL_BYTES);
    float *table = gpu_bf16_exp_table(&g);
    CU(&g, cuMemcpyHtoD(d_x, x, (size_t)(tokens * width) * 2));
    for (int combo = 0; combo < 24; combo++) {
        int bm = combo % 2 ? 128 : 32;
        bool transpose = (combo / 2) % 2;
        bool round_sf = (combo / 4) % 2;
        int clamp_kind = combo / 8;
        float clamp = clamp_kind == 1 ? 10.0f : 0.5f;
        char what[160];
        snprintf(what, sizeof what,
                 "swiglu_per_channel special gates bm=%d transpose=%d round=%d clamp=%s", bm,
                 transpose, round_sf, clamp_kind ? (clamp_kind == 1 ? "10" : "0.5") : "none");
        poison(&g, d_out, out_bytes);
        poison(&g, d_sf, (size_t)(tokens / bm * half) * 4);
        tk_tensor tx = tensor(d_x, TK_BF16, 2, tokens, width);
        tk_tensor tout = transpose ? tensor(d_out, TK_E4M3, 2, half, tokens)
                                   : tensor(d_out, TK_E4M3, 2, tokens, half);
        tk_tensor tsf = tensor(d_sf, TK_F32, 2, tokens / bm, half);
        check_status(tk_swiglu_forward_and_per_channel_cast_and_transpose(
                         &tx, bm, round_sf, !transpose, clamp_kind ? &clamp : NULL, &tout,
                         &tsf, NULL),
                     what);
        download(&g, got, d_out, out_bytes, what);
        download(&g, got_sf, d_sf, (size_t)(tokens / bm * half) * 4, what);
        cr_assert(ref_swiglu_forward_per_channel_cast(
            x, tokens, half, bm, round_sf, transpose, clamp_kind != 0, clamp,
            ref_swiglu_exp_bf16_table(table), want, want_sf));
        expect_rows(got, want, 1, out_bytes, NULL, what);
        expect_rows((unsigned char *)got_sf, (unsigned char *)want_sf, 1,
                    (size_t)(tokens / bm * half) * 4, NULL, what);
    }
    free(x), free(got), free(want), free(got_sf), free(want_sf), free(table);
    CU(&g, cuMemFree(d_x));
    CU(&g, cuMemFree(d_out));
    CU(&g, cuMemFree(d_sf));
}

/* ---- argument validation (no launch needed) -------------------------------- */

Test(swiglu_api, rejects_bad_arguments) {
    /* descriptors with fake device pointers: validation fails before any
     * launch, so no device is needed */
    CUdeviceptr fake = 0x100000;
    tk_tensor x = tensor(fake, TK_BF16, 2, 64, 512);
    tk_tensor out = tensor(fake, TK_E4M3, 2, 64, 256);
    tk_tensor sf = tensor(fake, TK_F32, 2, 64, 2);
    float negative = -1.0f;
    cr_assert_eq(tk_swiglu_forward_and_per_token_cast(NULL, 128, NULL, NULL, NULL, true,
                                                      TK_SF_ROW_MAJOR, NULL, NULL, NULL, &out,
                                                      &sf, NULL),
                 TK_ERROR_INVALID_ARGUMENT);
    cr_assert_eq(tk_swiglu_forward_and_per_token_cast(&x, 64, NULL, NULL, NULL, true,
                                                      TK_SF_ROW_MAJOR, NULL, NULL, NULL, &out,
                                                      &sf, NULL),
                 TK_ERROR_INVALID_ARGUMENT);
    cr_assert(strstr(tk_last_error(), "num_per_channels") != NULL);
    cr_assert_eq(tk_swiglu_forward_and_per_token_cast(&x, 128, NULL, NULL, NULL, true,
                                                      TK_SF_ROW_MAJOR, &negative, NULL, NULL,
                                                      &out, &sf, NULL),
                 TK_ERROR_INVALID_ARGUMENT);
    cr_assert(strstr(tk_last_error(), "swiglu_clamp_value") != NULL);
    tk_tensor counts = tensor(fake, TK_I64, 1, 3, 0);
    cr_assert_eq(tk_swiglu_forward_and_per_token_cast(&x, 128, NULL, NULL, NULL, true,
                                                      TK_SF_ROW_MAJOR, NULL, &counts, NULL,
                                                      &out, &sf, NULL),
                 TK_ERROR_INVALID_ARGUMENT);
    cr_assert(strstr(tk_last_error(), "clamped_count") != NULL);
    cr_assert_eq(tk_swiglu_forward_and_per_token_cast(&x, 128, NULL, NULL, NULL, false,
                                                      TK_SF_PACKED_UE8M0, NULL, NULL, NULL,
                                                      &out, &sf, NULL),
                 TK_ERROR_INVALID_ARGUMENT);
    tk_tensor strided = x;
    strided.strides[0] = 1024;
    cr_assert_eq(tk_swiglu_forward_and_per_token_cast(&strided, 128, NULL, NULL, NULL, true,
                                                      TK_SF_ROW_MAJOR, NULL, NULL, NULL, &out,
                                                      &sf, NULL),
                 TK_ERROR_INVALID_ARGUMENT);
    cr_assert(strstr(tk_last_error(), "x") != NULL);
    /* backward: missing pos_to_token_topk */
    tk_tensor xq = tensor(fake, TK_E4M3, 2, 64, 512), xs = tensor(fake, TK_F32, 2, 64, 4);
    tk_tensor g = tensor(fake, TK_BF16, 2, 64, 256), w = tensor(fake, TK_F32, 2, 8, 4);
    tk_tensor ttp = tensor(fake, TK_I32, 2, 8, 4), bo = tensor(fake, TK_BF16, 2, 64, 256);
    tk_tensor xg = tensor(fake, TK_BF16, 2, 64, 512);
    cr_assert_eq(tk_swiglu_backward_and_per_token_cast(&xq, &xs, &g, &w, NULL, &ttp, 128, false,
                                                       NULL, &bo, &xq, &xs, &xg, &w, NULL),
                 TK_ERROR_INVALID_ARGUMENT);
    cr_assert(strstr(tk_last_error(), "pos_to_token_topk") != NULL);
    /* per-channel: T not a multiple of 128 */
    tk_tensor xc = tensor(fake, TK_BF16, 2, 100, 256);
    tk_tensor oc = tensor(fake, TK_E4M3, 2, 128, 100), sc = tensor(fake, TK_F32, 2, 1, 128);
    cr_assert_eq(tk_swiglu_forward_and_per_channel_cast_and_transpose(&xc, 128, false, false,
                                                                      NULL, &oc, &sc, NULL),
                 TK_ERROR_INVALID_ARGUMENT);
    cr_assert(strstr(tk_last_error(), "multiple of 128") != NULL);
}

/* Every layout reaches the generated launcher's checks and passes them:
 * the unused SF view of swiglu_forward_per_token_cast must keep the shape
 * the kernel signature fixes (run 10 failed with "sf_bytes: shape[2] is
 * 0, expected 4" for every unpacked layout).  Only without a device (the
 * descriptors hold fake pointers): the call then stops at the launch with
 * TK_ERROR_NO_DEVICE, after every argument check. */
Test(swiglu_api, launcher_accepts_every_layout) {
    if (tk_device_check() == TK_SUCCESS)
        cr_skip_test("a device is present: this check runs on machines without one");
    CUdeviceptr fake = 0x100000;
    static const tk_sf_layout layouts[] = {TK_SF_ROW_MAJOR, TK_SF_COL_MAJOR,
                                           TK_SF_PACKED_UE8M0};
    for (int d = 0; d < 2; d++)
        for (int l = 0; l < 3; l++)
            for (int per_row = 0; per_row < 2; per_row++) {
                if (per_row && l)
                    continue;
                int64_t rows = 7952, half = 1280;
                tk_dtype dtype = d ? TK_F32 : TK_BF16;
                tk_tensor x = tensor(fake, dtype, 2, rows, 2 * half);
                tk_tensor out = tensor(fake, TK_E4M3, 2, rows, half);
                tk_tensor mask = tensor(fake, TK_I32, 1, rows, 0);
                tk_tensor index = tensor(fake, TK_I32, 1, rows, 0);
                tk_tensor weights = tensor(fake, TK_F32, 2, 1000, 8);
                int npc = per_row ? (int)half : 128;
                tk_tensor sf;
                check_status(tk_sf_desc(rows, half, 1, npc, layouts[l], &sf, NULL), "tk_sf_desc");
                sf.data = (void *)(uintptr_t)fake;
                float clamp = 10.0f;
                bool packed = layouts[l] == TK_SF_PACKED_UE8M0;
                tk_status status = tk_swiglu_forward_and_per_token_cast(
                    &x, npc, packed ? NULL : &index, packed ? NULL : &weights, &mask, true,
                    layouts[l], &clamp, NULL, NULL, &out, &sf, NULL);
                cr_assert_eq(status, TK_ERROR_NO_DEVICE, "dtype %d layout %d npc %d: %s", d, l,
                             npc, tk_last_error());
            }
}
