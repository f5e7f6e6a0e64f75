/*
 * test_gpu_moe_fused_expand.c -- golden tests of tk_expand_to_fused and
 * tk_expand_to_fused_with_sf: each runs on the GPU over TileKernels' test
 * sweep and is compared byte for byte with the CPU references of
 * tests/ref/moe_fused.c.  tk_reduce_fused and the CUDA-graph capture of
 * every entry point are tested in test_gpu_moe_fused_reduce.c; the two
 * share tests/moe_fused_test.h.
 *
 * Without a usable CUDA device every GPU test is skipped (the argument
 * validation tests need none).  On the GPU machine:
 *   - routing comes from TileKernels' MoE draw (generate_moe_params and
 *     generate_topk_idx, spec 12.1) and get_fused_mapping's layout built
 *     on the host with alignment 16;
 *   - outputs and SF buffers are poisoned (0xFF) before every launch and
 *     TAIL_BYTES past their end must stay poisoned; the column-major SF
 *     padding (not written by contract) must stay poisoned too;
 *   - the sweep is sized to finish in well under 90 s on a shared 16-core
 *     host: each of the 12 base moe params (top-k 2/6/8/9; 72 or 256
 *     experts over 8 or 64 ranks) runs at one hidden size, rotating so
 *     that every size of 576 ... 7168 meets every dtype, while the dtype
 *     and with_sf option rotate over the routings; TileKernels' benchmark
 *     shape (top-8, 256 experts, 8 ranks, 7168) runs its benchmarked
 *     configurations; the even-numbered of the 66 pressure-mode params
 *     (top-k 1 and 7, 288 / 384 experts, 1 / 72 / 256 ranks) run at small
 *     hidden sizes (the odd ones run reduce_fused), and zero tokens run;
 *   - strided inputs (rows padded to a 16-byte multiple, and odd strides
 *     for the element-wise instances);
 *   - nothing is printed per case; a report hook writes one line with the
 *     sweep's size and the test counts.
 * TK_TEST_SEED changes the inputs; TK_REF_THREADS the reference threads.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "moe_fused_test.h"

/* ---- expand_to_fused ----------------------------------------------------------- */

/* Base routing i: one hidden size (rotating), bf16, one with_sf option
 * (rotating) and one extra (rotating): e4m3 and f32 rows, padded bf16
 * rows, padded e4m3 rows with scales. */
static int expand_base_plan(int i, expand_spec *specs) {
    int64_t h = HIDDEN[i % NUM_HIDDEN];
    int n = 0;
    specs[n++] = plain(TK_BF16, h, h);
    specs[n++] = with_sf(h, h, i);
    switch (i % 4) {
    case 0: specs[n++] = plain(TK_E4M3, h, h); break;
    case 1: specs[n++] = plain(TK_F32, h, h); break;
    case 2: specs[n++] = plain(TK_BF16, h, h + 64); break;
    default: specs[n++] = with_sf(h, h + 16, i + 2); break;
    }
    return n;
}

/* TileKernels' benchmark shape (top-8, 256 experts, 8 ranks, 7168): the
 * bf16 expansion and the two with_sf forms the benchmark times. */
static int expand_anchor_plan(expand_spec *specs) {
    specs[0] = plain(TK_BF16, 7168, 7168);
    specs[1] = with_sf(7168, 7168, 2);
    specs[2] = with_sf(7168, 7168, 3);
    return 3;
}

/* Pressure routing j (the even-numbered pressure params): one call at a
 * small hidden size, bf16 and the with_sf options alternating. */
static int expand_pressure_plan(int j, expand_spec *specs) {
    int64_t h = HIDDEN[j % 3];
    specs[0] = j % 2 ? with_sf(h, h, j / 2) : plain(TK_BF16, h, h);
    return 1;
}

/* Rows that are not 16-byte multiples: the element-wise instances. */
static int expand_elementwise_plan(expand_spec *specs) {
    int n = 0;
    specs[n++] = plain(TK_BF16, 2050, 2050);
    specs[n++] = plain(TK_BF16, 1000, 1003);
    specs[n++] = plain(TK_F32, 1001, 1001);
    specs[n++] = plain(TK_I8, 1001, 1001);
    specs[n++] = plain(TK_E4M3, 7168, 7169);
    specs[n++] = with_sf(1000, 1000, 0);
    specs[n++] = with_sf(7168, 7169, 3);
    specs[n++] = with_sf(2050, 2051, 4);
    return n;
}

/* tk_expand_to_fused on x viewed as (T, hidden) of `dtype` with a row
 * stride of `stride` elements. */
static void expand_case(expand_state *s, tk_dtype dtype, int64_t hidden, int64_t stride,
                        tk_stream stream) {
    size_t size = tk_dtype_size(dtype), row_bytes = (size_t)hidden * size;
    int64_t n = s->r.map.expanded;
    char what[200];
    snprintf(what, sizeof what, "expand_to_fused %s H=%ld stride=%ld %s", dtype_name(dtype),
             (long)hidden, (long)stride, s->r.label);
    size_t out_bytes = (size_t)n * row_bytes;
    cr_assert(out_bytes <= s->out_capacity && (size_t)stride * size <= s->max_stride);
    CU(&dev, cuMemsetD8(s->device_out, POISON, out_bytes + TAIL_BYTES));
    tk_tensor x = tensor(s->device_x, dtype, 2, s->r.tokens, hidden, stride, 1);
    tk_tensor out = tensor(s->device_out, dtype, 2, n, hidden, hidden, 1);
    tk_tensor positions = routing_positions(&s->r), experts = routing_experts(&s->r);
    check_status(tk_expand_to_fused(&x, &positions, &experts, &out, stream), what);
    download(s->got, s->device_out, out_bytes, what);
    memset(s->want, POISON, out_bytes);
    ref_expand_to_fused(s->x, s->r.tokens, row_bytes, (size_t)stride * size,
                        s->r.map.token_topk_to_pos, s->r.params.topk, s->r.map.pos_to_expert, n,
                        s->want);
    expect_equal(s->got, s->want, n, row_bytes, size, what);
}

/* tk_expand_to_fused_with_sf with e4m3 data (T, hidden), row stride
 * `stride`, and random scale words in `layout`. */
static void expand_sf_case(expand_state *s, int64_t hidden, int64_t stride, int npc,
                           tk_sf_layout layout, tk_stream stream) {
    static const char *layout_names[] = {"row", "col", "packed"};
    int64_t n = s->r.map.expanded, tokens = s->r.tokens;
    int64_t words = ref_expand_sf_words(hidden, npc, layout);
    char what[220];
    snprintf(what, sizeof what, "expand_to_fused_with_sf e4m3 H=%ld stride=%ld npc=%d sf=%s %s",
             (long)hidden, (long)stride, npc, layout_names[layout], s->r.label);
    cr_assert(words <= s->sf_words && (size_t)stride <= s->max_stride);
    /* x_sf is (tokens, words) contiguous: the first tokens * words words */
    gpu_upload(&dev, s->device_x_sf, s->x_sf, (size_t)(tokens * words) * 4);
    tk_tensor out_sf;
    size_t sf_bytes = 0;
    check_status(tk_sf_desc(n, hidden, 1, npc, layout, &out_sf, &sf_bytes), "tk_sf_desc");
    cr_assert(sf_bytes <= s->sf_capacity);
    out_sf.data = (void *)(uintptr_t)s->device_out_sf;
    size_t out_bytes = (size_t)(n * hidden);
    cr_assert(out_bytes <= s->out_capacity);
    CU(&dev, cuMemsetD8(s->device_out, POISON, out_bytes + TAIL_BYTES));
    CU(&dev, cuMemsetD8(s->device_out_sf, POISON, sf_bytes + TAIL_BYTES));
    tk_tensor x = tensor(s->device_x, TK_E4M3, 2, tokens, hidden, stride, 1);
    tk_tensor x_sf = tensor(s->device_x_sf, layout == TK_SF_PACKED_UE8M0 ? TK_I32 : TK_F32, 2,
                            tokens, words, words, 1);
    tk_tensor out = tensor(s->device_out, TK_E4M3, 2, n, hidden, hidden, 1);
    tk_tensor positions = routing_positions(&s->r), experts = routing_experts(&s->r);
    check_status(tk_expand_to_fused_with_sf(&x, &x_sf, npc, &positions, &experts, layout, &out,
                                            &out_sf, stream),
                 what);
    download(s->got, s->device_out, out_bytes, what);
    download(s->got_sf, s->device_out_sf, sf_bytes, what);
    memset(s->want, POISON, out_bytes);
    ref_expand_to_fused(s->x, tokens, (size_t)hidden, (size_t)stride, s->r.map.token_topk_to_pos,
                        s->r.params.topk, s->r.map.pos_to_expert, n, s->want);
    expect_equal(s->got, s->want, n, (size_t)hidden, 1, what);
    /* every word of the buffer: scales where the reference writes them,
     * untouched poison in the column-major padding */
    memset(s->want_sf, POISON, sf_bytes);
    ref_expand_sf(s->x_sf, tokens, words, s->r.map.token_topk_to_pos, s->r.params.topk,
                  s->r.map.pos_to_expert, n, layout, s->want_sf);
    expect_equal(s->got_sf, s->want_sf, 1, sf_bytes, 4, what);
}

/* Draws one routing and runs its specs. */
static void expand_routing(const ref_moe_params *params, uint64_t seed, const expand_spec *specs,
                           int count) {
    expand_state s;
    expand_begin(&s, params, seed, specs, count);
    for (int i = 0; i < count; i++) {
        if (specs[i].npc)
            expand_sf_case(&s, specs[i].hidden, specs[i].stride, specs[i].npc, specs[i].layout,
                           NULL);
        else
            expand_case(&s, specs[i].dtype, specs[i].hidden, specs[i].stride, NULL);
    }
    expand_end(&s);
}

Test(expand_to_fused, base_params, .timeout = 600) {
    dev = gpu_begin();
    ref_moe_params params[128];
    int count = moe_params(params, false);
    for (int i = 0; i < count; i++) {
        expand_spec specs[MAX_SPECS];
        int n = expand_base_plan(i, specs);
        expand_routing(&params[i], test_seed() + 100 + (uint64_t)i, specs, n);
    }
}

Test(expand_to_fused, anchor_shape, .timeout = 600) {
    dev = gpu_begin();
    ref_moe_params params = base_params(8, 256, 8);
    expand_spec specs[MAX_SPECS];
    int n = expand_anchor_plan(specs);
    expand_routing(&params, test_seed() + 150, specs, n);
}

Test(expand_to_fused, elementwise_rows, .timeout = 600) {
    dev = gpu_begin();
    ref_moe_params params = base_params(2, 72, 8);
    expand_spec specs[MAX_SPECS];
    int n = expand_elementwise_plan(specs);
    expand_routing(&params, test_seed() + 160, specs, n);
}

/* The pressure-mode params are split between the two kernels: the
 * even-numbered ones run here, the odd-numbered ones in reduce_fused. */
Test(expand_to_fused, pressure_params, .timeout = 600) {
    dev = gpu_begin();
    ref_moe_params params[128];
    int count = moe_params(params, true);
    for (int i = 0; i < count; i += 2) {
        expand_spec specs[MAX_SPECS];
        int n = expand_pressure_plan(i / 2, specs);
        expand_routing(&params[i], test_seed() + 200 + (uint64_t)i, specs, n);
    }
}

/* The degenerate pressure case: no tokens.  Nothing is launched and the
 * (empty) outputs are not touched. */
Test(expand_to_fused, zero_tokens, .timeout = 600) {
    dev = gpu_begin();
    CUdeviceptr out = gpu_alloc(&dev, TAIL_BYTES);
    CU(&dev, cuMemsetD8(out, POISON, TAIL_BYTES));
    tk_tensor x = tensor(0, TK_BF16, 2, 0, 2048, 2048, 1);
    tk_tensor positions = tensor(0, TK_I32, 2, 0, 1, 1, 1);
    tk_tensor experts = tensor(0, TK_I32, 1, 0, 0, 1, 0);
    tk_tensor empty_out = tensor(out, TK_BF16, 2, 0, 2048, 2048, 1);
    check_status(tk_expand_to_fused(&x, &positions, &experts, &empty_out, NULL), "expand T=0");
    tk_tensor x_fp8 = tensor(0, TK_E4M3, 2, 0, 2048, 2048, 1);
    tk_tensor x_sf = tensor(0, TK_F32, 2, 0, 16, 16, 1);
    tk_tensor out_fp8 = tensor(out, TK_E4M3, 2, 0, 2048, 2048, 1);
    tk_tensor out_sf;
    check_status(tk_sf_desc(0, 2048, 1, 128, TK_SF_ROW_MAJOR, &out_sf, NULL), "tk_sf_desc");
    out_sf.data = (void *)(uintptr_t)out;
    check_status(tk_expand_to_fused_with_sf(&x_fp8, &x_sf, 128, &positions, &experts,
                                            TK_SF_ROW_MAJOR, &out_fp8, &out_sf, NULL),
                 "expand_with_sf T=0");
    unsigned char host[TAIL_BYTES + TAIL_BYTES];
    download(host, out, 0, "expand T=0");
    gpu_free(&dev, &out);
}

/* ---- what ran ----------------------------------------------------------------------- */

/* One line in the log: the sweep's size, from the same plans the tests
 * run, and Criterion's counts. */
ReportHook(POST_ALL)(struct criterion_global_stats *stats) {
    ref_moe_params base[128], pressure[128];
    int bases = moe_params(base, false), pressures = moe_params(pressure, true);
    expand_spec e[MAX_SPECS];
    int calls = expand_anchor_plan(e) + expand_elementwise_plan(e);
    for (int i = 0; i < bases; i++)
        calls += expand_base_plan(i, e);
    for (int i = 0; i < pressures; i += 2)
        calls += expand_pressure_plan(i / 2, e);
    fprintf(stderr,
            "test_gpu_moe_fused_expand: %zu tests: %zu passed, %zu failed, %zu crashed, "
            "%zu skipped; sweep: expand %d calls over %d routings (%d base + %d of %d pressure "
            "moe params, hidden 576..7168, anchor top-8/256/8 x 7168), plus T = 0\n",
            stats->nb_tests, stats->tests_passed, stats->tests_failed, stats->tests_crashed,
            stats->tests_skipped, calls, bases + 2 + (pressures + 1) / 2, bases,
            (pressures + 1) / 2, pressures);
}

/* ---- argument validation (no device needed) ------------------------------------------- */

Test(api, expand_to_fused_arguments) {
    if (tk_device_check() == TK_SUCCESS)
        cr_skip_test("a device exists: fake pointers must not be launched");
    tk_tensor x = tensor(FAKE(1), TK_BF16, 2, 100, 7168, 7168, 1);
    tk_tensor pos = tensor(FAKE(2), TK_I32, 2, 100, 8, 8, 1);
    tk_tensor experts = tensor(FAKE(3), TK_I32, 1, 300, 0, 1, 0);
    tk_tensor out = tensor(FAKE(4), TK_BF16, 2, 300, 7168, 7168, 1);
    expect_instance(tk_expand_to_fused(&x, &pos, &experts, &out, NULL), "expand_to_fused__vec");
    tk_tensor odd = tensor(FAKE(1), TK_BF16, 2, 100, 1001, 1001, 1);
    tk_tensor odd_out = tensor(FAKE(4), TK_BF16, 2, 300, 1001, 1001, 1);
    expect_instance(tk_expand_to_fused(&odd, &pos, &experts, &odd_out, NULL),
                    "expand_to_fused__any_u16");
    tk_tensor padded = tensor(FAKE(1), TK_BF16, 2, 100, 7168, 7170, 1);
    expect_instance(tk_expand_to_fused(&padded, &pos, &experts, &out, NULL),
                    "expand_to_fused__any_u16");

    expect_rejected(tk_expand_to_fused(NULL, &pos, &experts, &out, NULL),
                    TK_ERROR_INVALID_ARGUMENT, "x is NULL");
    expect_rejected(tk_expand_to_fused(&x, &pos, NULL, &out, NULL), TK_ERROR_INVALID_ARGUMENT,
                    "pos_to_expert is NULL");
    tk_tensor f64 = x;
    f64.dtype = TK_F64;
    expect_rejected(tk_expand_to_fused(&f64, &pos, &experts, &out, NULL),
                    TK_ERROR_INVALID_ARGUMENT, "1-, 2- or 4-byte");
    tk_tensor pos64 = pos;
    pos64.dtype = TK_I64;
    expect_rejected(tk_expand_to_fused(&x, &pos64, &experts, &out, NULL),
                    TK_ERROR_INVALID_ARGUMENT, "token_topk_to_pos: dtype");
    tk_tensor short_pos = tensor(FAKE(2), TK_I32, 2, 99, 8, 8, 1);
    expect_rejected(tk_expand_to_fused(&x, &short_pos, &experts, &out, NULL),
                    TK_ERROR_INVALID_ARGUMENT, "token_topk_to_pos: shape[0]");
    tk_tensor wrong_out = tensor(FAKE(4), TK_BF16, 2, 299, 7168, 7168, 1);
    expect_rejected(tk_expand_to_fused(&x, &pos, &experts, &wrong_out, NULL),
                    TK_ERROR_INVALID_ARGUMENT, "out: shape[0]");
    tk_tensor f32_out = tensor(FAKE(4), TK_F32, 2, 300, 7168, 7168, 1);
    expect_rejected(tk_expand_to_fused(&x, &pos, &experts, &f32_out, NULL),
                    TK_ERROR_INVALID_ARGUMENT, "out: dtype");
    tk_tensor overlapping = tensor(FAKE(1), TK_BF16, 2, 100, 7168, 7000, 1);
    expect_rejected(tk_expand_to_fused(&overlapping, &pos, &experts, &out, NULL),
                    TK_ERROR_INVALID_ARGUMENT, "rows overlap");
    tk_tensor misaligned = x;
    misaligned.data = (void *)(uintptr_t)(FAKE(1) + 8);
    expect_rejected(tk_expand_to_fused(&misaligned, &pos, &experts, &out, NULL),
                    TK_ERROR_INVALID_ARGUMENT, "aligned");
    tk_tensor strided_pos = tensor(FAKE(2), TK_I32, 2, 100, 8, 16, 1);
    expect_rejected(tk_expand_to_fused(&x, &strided_pos, &experts, &out, NULL),
                    TK_ERROR_INVALID_ARGUMENT, "not contiguous");
    /* no tokens: success without touching the driver */
    tk_tensor none = tensor(0, TK_BF16, 2, 0, 7168, 7168, 1);
    tk_tensor no_pos = tensor(0, TK_I32, 2, 0, 8, 8, 1);
    cr_assert_eq(tk_expand_to_fused(&none, &no_pos, &experts, &out, NULL), TK_SUCCESS);
}

Test(api, expand_to_fused_with_sf_arguments) {
    if (tk_device_check() == TK_SUCCESS)
        cr_skip_test("a device exists: fake pointers must not be launched");
    tk_tensor x = tensor(FAKE(1), TK_E4M3, 2, 100, 7168, 7168, 1);
    tk_tensor x_sf = tensor(FAKE(5), TK_F32, 2, 100, 56, 56, 1);
    tk_tensor packed_sf = tensor(FAKE(5), TK_I32, 2, 100, 14, 14, 1);
    tk_tensor pos = tensor(FAKE(2), TK_I32, 2, 100, 8, 8, 1);
    tk_tensor experts = tensor(FAKE(3), TK_I32, 1, 301, 0, 1, 0);
    tk_tensor out = tensor(FAKE(4), TK_E4M3, 2, 301, 7168, 7168, 1);
    tk_tensor row, col, packed;
    check_status(tk_sf_desc(301, 7168, 1, 128, TK_SF_ROW_MAJOR, &row, NULL), "desc");
    check_status(tk_sf_desc(301, 7168, 1, 128, TK_SF_COL_MAJOR, &col, NULL), "desc");
    check_status(tk_sf_desc(301, 7168, 1, 128, TK_SF_PACKED_UE8M0, &packed, NULL), "desc");
    row.data = col.data = packed.data = (void *)(uintptr_t)FAKE(6);
    cr_assert_eq(col.strides[1], 304);
    expect_instance(tk_expand_to_fused_with_sf(&x, &x_sf, 128, &pos, &experts, TK_SF_ROW_MAJOR,
                                               &out, &row, NULL),
                    "expand_to_fused_with_sf__vec");
    expect_instance(tk_expand_to_fused_with_sf(&x, &x_sf, 128, &pos, &experts, TK_SF_COL_MAJOR,
                                               &out, &col, NULL),
                    "expand_to_fused_with_sf__vec");
    expect_instance(tk_expand_to_fused_with_sf(&x, &packed_sf, 128, &pos, &experts,
                                               TK_SF_PACKED_UE8M0, &out, &packed, NULL),
                    "expand_to_fused_with_sf__vec");
    tk_tensor strided = tensor(FAKE(1), TK_E4M3, 2, 100, 7168, 7169, 1);
    expect_instance(tk_expand_to_fused_with_sf(&strided, &x_sf, 128, &pos, &experts,
                                               TK_SF_ROW_MAJOR, &out, &row, NULL),
                    "expand_to_fused_with_sf__any");

    expect_rejected(tk_expand_to_fused_with_sf(&x, &x_sf, 64, &pos, &experts, TK_SF_ROW_MAJOR,
                                               &out, &row, NULL),
                    TK_ERROR_INVALID_ARGUMENT, "num_per_channels");
    expect_rejected(tk_expand_to_fused_with_sf(&x, &x_sf, 128, &pos, &experts, (tk_sf_layout)7,
                                               &out, &row, NULL),
                    TK_ERROR_INVALID_ARGUMENT, "sf_layout");
    expect_rejected(tk_expand_to_fused_with_sf(&x, &x_sf, 128, &pos, &experts,
                                               TK_SF_PACKED_UE8M0, &out, &packed, NULL),
                    TK_ERROR_INVALID_ARGUMENT, "x_sf: dtype");
    expect_rejected(tk_expand_to_fused_with_sf(&x, &x_sf, 32, &pos, &experts, TK_SF_ROW_MAJOR,
                                               &out, &row, NULL),
                    TK_ERROR_INVALID_ARGUMENT, "x_sf: shape[1]");
    expect_rejected(tk_expand_to_fused_with_sf(&x, &x_sf, 128, &pos, &experts, TK_SF_ROW_MAJOR,
                                               &out, &col, NULL),
                    TK_ERROR_INVALID_ARGUMENT, "out_sf: strides");
    expect_rejected(tk_expand_to_fused_with_sf(&x, &x_sf, 128, &pos, &experts, TK_SF_ROW_MAJOR,
                                               &out, NULL, NULL),
                    TK_ERROR_INVALID_ARGUMENT, "out_sf is NULL");
    tk_tensor strided_sf = tensor(FAKE(5), TK_F32, 2, 100, 56, 64, 1);
    expect_rejected(tk_expand_to_fused_with_sf(&x, &strided_sf, 128, &pos, &experts,
                                               TK_SF_ROW_MAJOR, &out, &row, NULL),
                    TK_ERROR_INVALID_ARGUMENT, "x_sf: not contiguous");
}
