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
#include "swiglu_test.h"

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

/* x (rows, 2 * half) bf16: gate j of row r is the bf16 pattern
 * r * half + j (so rows * half >= 65536 covers every pattern once),
 * except that positive gates of 2^100 and above become negative; the up
 * half is random normal, drawn from rng. */
static void fill_special_gates(uint16_t *x, int64_t rows, int64_t half, ref_rng *rng) {
    const int64_t width = 2 * half;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < half; j++) {
            uint16_t gate = (uint16_t)(r * half + j);
            if (gate < 0x8000 && ((gate >> 7) & 0xFF) >= 127 + 100)
                gate |= 0x8000;
            x[r * width + j] = gate;
            x[r * width + half + j] = ref_bf16_from_f32(ref_rng_normal(rng));
        }
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
    fill_special_gates(x, rows, half, &rng);
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
 * data seldom reaches.  I = 320 is 10 strips of 32 channels (5 of the
 * transposed instances' 64).  Positive
 * gates of 2^100 and above become negative, as in special_gate_values
 * above (their activations would overflow every scale of their
 * channel). */
Test(swiglu_per_channel, special_gate_values, .timeout = 300) {
    gpu g = gpu_begin();
    const int64_t tokens = 256, half = 320, width = 2 * half;
    uint16_t *x = host_alloc((size_t)(tokens * width) * 2 + 16);
    ref_rng rng = ref_rng_seed(test_seed() + 37, 0);
    fill_special_gates(x, tokens, half, &rng);
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
