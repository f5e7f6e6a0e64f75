/*
 * test_gpu_moe_fused_reduce.c -- golden tests of tk_reduce_fused, and of
 * every fused-MoE entry point captured in a CUDA graph: each runs on the
 * GPU over TileKernels' test sweep and is compared byte for byte with the
 * CPU references of tests/ref/moe_fused.c.  The expansion sweep is in
 * test_gpu_moe_fused_expand.c; the two share tests/moe_fused_test.h.
 *
 * Without a usable CUDA device every GPU test is skipped (the argument
 * validation test needs none).  On the GPU machine:
 *   - routing comes from TileKernels' MoE draw (generate_moe_params and
 *     generate_topk_idx, spec 12.1) and get_fused_mapping's layout built
 *     on the host with alignment 1;
 *   - outputs are poisoned (0xFF) before every launch and TAIL_BYTES past
 *     their end must stay poisoned;
 *   - x has N = T * K rows as in TileKernels' test (only the routed ones
 *     where that would pass 2 GiB), only the routed rows hold data, the
 *     others are NaN patterns, so a read of a wrong row shows;
 *   - each of the 12 base moe params runs at one hidden size (multiples
 *     of 256 from 2048 to 7168), rotating so that every size meets every
 *     input dtype, while the output and the (weights, x_sf) options rotate
 *     over the routings; TileKernels' benchmark shape (top-8, 256 experts,
 *     8 ranks, 7168) runs its benchmarked configurations; the whole option
 *     product, e4m3 inputs and padded rows run at one shape; the
 *     odd-numbered pressure-mode params run at small hidden sizes, and
 *     zero tokens run;
 *   - each entry point (both expansions and the reduction) once inside a
 *     captured CUDA graph;
 *   - nothing is printed per case; a report hook writes one line with the
 *     sweep's size and the test counts.
 * TK_TEST_SEED changes the inputs; TK_REF_THREADS the reference threads.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "moe_fused_test.h"

#define REDUCE_FIRST_HIDDEN 1 /* HIDDEN[1..] are multiples of 256 */

/* ---- finite test values ---------------------------------------------------------- */

/* reduce_fused needs finite floats, so each row reads a pool of 2^20
 * normals along its own (start, odd step) walk -- rows differ with
 * overwhelming probability, so a kernel that reads a wrong row still
 * shows. */
#define POOL_SIZE (1 << 20)

static void fill_pool_rows(void *context, int64_t begin, int64_t end) {
    const fill_job *job = context;
    size_t size = tk_dtype_size(job->dtype), columns = job->row_bytes;
    for (int64_t r = begin; r < end; r++) {
        uint64_t state = job->seed ^ ((uint64_t)r * 0xD1B54A32D192ED03ull);
        uint64_t start = splitmix64(&state), step = splitmix64(&state) | 1;
        unsigned char *row = job->data + (size_t)r * columns * size;
        const unsigned char *pool = job->pool;
        for (size_t h = 0; h < columns; h++)
            memcpy(row + h * size, pool + ((start + h * step) & (POOL_SIZE - 1)) * size, size);
    }
}

/* rows x columns finite values of dtype (f32 / bf16 normals, or finite
 * non-zero e4m3 codes), drawn from a pool made with the references' RNG. */
static void fill_values(void *data, tk_dtype dtype, int64_t rows, int64_t columns,
                        uint64_t seed) {
    void *pool = host_alloc((size_t)POOL_SIZE * 4);
    if (dtype == TK_E4M3)
        ref_fill_rand_e4m3(pool, POOL_SIZE, seed);
    else
        ref_fill_rand_float(pool, dtype, 1024, POOL_SIZE / 1024, 0, 0, seed);
    fill_job job = {data, (size_t)columns, seed + 1, dtype, pool};
    ref_parallel_for(rows, 64, fill_pool_rows, &job);
    free(pool);
}

/* ---- reduce_fused ---------------------------------------------------------------- */

/* One call; flags: 1 topk_weights, 2 x_sf (row scales), 4 sf (output
 * scale, e4m3 outputs only). */
typedef struct reduce_spec {
    tk_dtype in, out;
    int64_t hidden, stride;
    int flags;
} reduce_spec;

enum { WITH_WEIGHTS = 1, WITH_X_SF = 2, WITH_SF = 4 };

/* An e4m3 output takes the output scale, as TileKernels' test passes it. */
static reduce_spec reduce_call(tk_dtype in, tk_dtype out, int64_t hidden, int flags) {
    return (reduce_spec){in, out, hidden, hidden, (flags & 3) | (out == TK_E4M3 ? WITH_SF : 0)};
}

/* Base routing i: f32 inputs on even i, bf16 on odd; one hidden size
 * (every size for each input dtype over the 12 routings); the input-dtype
 * and the e4m3 output, (weights, x_sf) rotating so that each input dtype
 * meets all four combinations with both outputs. */
static int reduce_base_plan(int i, reduce_spec *specs) {
    int j = i / 2, odd = i % 2;
    tk_dtype in = odd ? TK_BF16 : TK_F32;
    int64_t h = HIDDEN[REDUCE_FIRST_HIDDEN + (j + 3 * odd) % (NUM_HIDDEN - REDUCE_FIRST_HIDDEN)];
    specs[0] = reduce_call(in, in, h, j + 2 * odd);
    specs[1] = reduce_call(in, TK_E4M3, h, j + 1 + 2 * odd);
    return 2;
}

/* TileKernels' benchmark shape: top-8 bf16 with weights, and the e4m3
 * output with every option. */
static int reduce_anchor_plan(reduce_spec *specs) {
    specs[0] = reduce_call(TK_BF16, TK_BF16, 7168, WITH_WEIGHTS);
    specs[1] = reduce_call(TK_BF16, TK_E4M3, 7168, WITH_WEIGHTS | WITH_X_SF);
    return 2;
}

/* The whole option product at one shape (every token has 9 routed slots,
 * so the kernel's slots after the first four are always exercised), e4m3
 * inputs, an e4m3 output without output scale, and padded rows. */
static int reduce_product_plan(reduce_spec *specs) {
    static const tk_dtype inputs[] = {TK_F32, TK_BF16};
    int n = 0;
    for (int i = 0; i < 2; i++)
        for (int o = 0; o < 2; o++)
            for (int flags = 0; flags < 4; flags++)
                specs[n++] = reduce_call(inputs[i], o ? TK_E4M3 : inputs[i], 2048, flags);
    for (int flags = 0; flags < 8; flags++)
        specs[n++] = (reduce_spec){TK_E4M3, TK_E4M3, 4096, 4096, flags};
    specs[n++] = (reduce_spec){TK_BF16, TK_E4M3, 2048, 2048, WITH_WEIGHTS};
    specs[n++] = (reduce_spec){TK_BF16, TK_BF16, 2560, 2560 + 64, WITH_WEIGHTS | WITH_X_SF};
    specs[n++] = (reduce_spec){TK_F32, TK_E4M3, 2560, 2560 + 64, WITH_WEIGHTS | WITH_SF};
    return n;
}

/* Pressure routing j (the odd-numbered pressure params): one call at
 * 2048 / 2560 / 3072, input dtype, output and options rotating. */
static int reduce_pressure_plan(int j, reduce_spec *specs) {
    tk_dtype in = j % 2 ? TK_BF16 : TK_F32;
    specs[0] = reduce_call(in, (j / 2) % 2 ? TK_E4M3 : in,
                           HIDDEN[REDUCE_FIRST_HIDDEN + j % 3], j / 4);
    return 1;
}

typedef struct reduce_state {
    routing r;
    int64_t rows;           /* N: x's rows, T * K where the buffer allows */
    int64_t routed;         /* rows that hold data: positions < routed    */
    size_t x_capacity;      /* bytes of device_x                          */
    void *x;                /* routed rows of the current dtype and stride */
    float *weights, *x_sf, sf;
    unsigned char *got, *want;
    CUdeviceptr device_x, device_weights, device_x_sf, device_sf, device_out;
    tk_dtype x_dtype;
    int64_t x_stride; /* what device_x holds now */
} reduce_state;

static void reduce_begin(reduce_state *s, const ref_moe_params *params, uint64_t seed,
                         const reduce_spec *specs, int count) {
    memset(s, 0, sizeof *s);
    routing_begin(&s->r, params, 1, seed);
    int64_t topk = params->topk;
    size_t max_row = 0, max_out = 0;
    for (int i = 0; i < count; i++) {
        size_t row = (size_t)specs[i].stride * tk_dtype_size(specs[i].in);
        size_t out = (size_t)specs[i].hidden * tk_dtype_size(specs[i].out);
        max_row = row > max_row ? row : max_row;
        max_out = out > max_out ? out : max_out;
    }
    s->routed = s->r.map.routed;
    /* TileKernels' x has T * K rows, the unrouted ones NaN patterns here;
     * beyond 2 GiB (the largest routings at 7168) only the routed rows,
     * which are all any position names either way */
    s->rows = s->r.tokens * topk;
    if ((size_t)s->rows * max_row > ((size_t)2 << 30))
        s->rows = s->routed;
    s->x_capacity = (size_t)s->rows * max_row;
    s->device_x = gpu_alloc(&dev, s->x_capacity);
    s->x = host_alloc((size_t)s->routed * max_row);
    s->weights = host_alloc((size_t)(s->r.tokens * topk) * sizeof(float));
    s->x_sf = host_alloc((size_t)s->rows * sizeof(float));
    ref_rng rng = ref_rng_seed(seed + 3, 0);
    for (int64_t i = 0; i < s->r.tokens * topk; i++)
        s->weights[i] = ref_rng_uniform(&rng);
    for (int64_t i = 0; i < s->rows; i++)
        s->x_sf[i] = ref_rng_normal(&rng);
    s->sf = ref_rng_normal(&rng);
    s->device_weights = gpu_alloc(&dev, (size_t)(s->r.tokens * topk) * sizeof(float));
    gpu_upload(&dev, s->device_weights, s->weights, (size_t)(s->r.tokens * topk) * sizeof(float));
    s->device_x_sf = gpu_alloc(&dev, (size_t)s->rows * sizeof(float));
    gpu_upload(&dev, s->device_x_sf, s->x_sf, (size_t)s->rows * sizeof(float));
    s->device_sf = gpu_alloc(&dev, sizeof(float));
    gpu_upload(&dev, s->device_sf, &s->sf, sizeof(float));
    size_t out_bytes = (size_t)s->r.tokens * max_out;
    s->got = host_alloc(out_bytes + TAIL_BYTES);
    s->want = host_alloc(out_bytes);
    s->device_out = gpu_alloc(&dev, out_bytes + TAIL_BYTES);
}

static void reduce_end(reduce_state *s) {
    gpu_free(&dev, &s->device_x);
    gpu_free(&dev, &s->device_weights);
    gpu_free(&dev, &s->device_x_sf);
    gpu_free(&dev, &s->device_sf);
    gpu_free(&dev, &s->device_out);
    free(s->x);
    free(s->weights);
    free(s->x_sf);
    free(s->got);
    free(s->want);
    routing_end(&s->r);
}

/* Fills x (rows, stride) of dtype: routed rows with finite values, the
 * rest NaN patterns (0xFF bytes).  A fill serves every hidden size up to
 * the stride, so it is redone only when the dtype or the stride changes. */
static void reduce_input(reduce_state *s, tk_dtype dtype, int64_t stride, uint64_t seed) {
    if (s->x_dtype == dtype && s->x_stride == stride)
        return;
    size_t size = tk_dtype_size(dtype);
    size_t routed_bytes = (size_t)(s->routed * stride) * size;
    size_t x_bytes = (size_t)(s->rows * stride) * size;
    cr_assert(x_bytes <= s->x_capacity);
    fill_values(s->x, dtype, s->routed, stride, seed);
    CU(&dev, cuMemsetD8(s->device_x, POISON, x_bytes));
    gpu_upload(&dev, s->device_x, s->x, routed_bytes);
    s->x_dtype = dtype;
    s->x_stride = stride;
}

static void reduce_case(reduce_state *s, const reduce_spec *spec, tk_stream stream) {
    int64_t tokens = s->r.tokens, hidden = spec->hidden, stride = spec->stride;
    int topk = s->r.params.topk;
    bool with_weights = spec->flags & WITH_WEIGHTS, with_x_sf = spec->flags & WITH_X_SF;
    bool with_sf = spec->flags & WITH_SF;
    char what[220];
    snprintf(what, sizeof what,
             "reduce_fused %s->%s H=%ld stride=%ld weights=%d x_sf=%d sf=%d N=%ld %s",
             dtype_name(spec->in), dtype_name(spec->out), (long)hidden, (long)stride,
             with_weights, with_x_sf, with_sf, (long)s->rows, s->r.label);
    reduce_input(s, spec->in, stride, test_seed() + 500 + (uint64_t)stride + (uint64_t)spec->in);
    size_t out_size = tk_dtype_size(spec->out);
    size_t out_bytes = (size_t)(tokens * hidden) * out_size;
    CU(&dev, cuMemsetD8(s->device_out, POISON, out_bytes + TAIL_BYTES));
    tk_tensor x = tensor(s->device_x, spec->in, 2, s->rows, hidden, stride, 1);
    tk_tensor weights = tensor(s->device_weights, TK_F32, 2, tokens, topk, topk, 1);
    tk_tensor x_sf = tensor(s->device_x_sf, TK_F32, 1, s->rows, 0, 1, 0);
    tk_tensor sf = tensor(s->device_sf, TK_F32, 1, 1, 0, 1, 0);
    tk_tensor positions = routing_positions(&s->r);
    tk_tensor out = tensor(s->device_out, spec->out, 2, tokens, hidden, hidden, 1);
    check_status(tk_reduce_fused(&x, with_x_sf ? &x_sf : NULL, with_weights ? &weights : NULL,
                                 &positions, with_sf ? &sf : NULL, &out, stream),
                 what);
    download(s->got, s->device_out, out_bytes, what);
    cr_assert(ref_reduce_fused(s->x, spec->in, stride, hidden, with_weights ? s->weights : NULL,
                               s->r.map.token_topk_to_pos, tokens, topk,
                               with_x_sf ? s->x_sf : NULL, with_sf ? &s->sf : NULL, spec->out,
                               s->want));
    expect_equal(s->got, s->want, tokens, (size_t)hidden * out_size, out_size, what);
}

static void reduce_routing(const ref_moe_params *params, uint64_t seed, const reduce_spec *specs,
                           int count) {
    reduce_state s;
    reduce_begin(&s, params, seed, specs, count);
    for (int i = 0; i < count; i++)
        reduce_case(&s, &specs[i], NULL);
    reduce_end(&s);
}

Test(reduce_fused, base_params, .timeout = 600) {
    dev = gpu_begin();
    ref_moe_params params[128];
    int count = moe_params(params, false);
    for (int i = 0; i < count; i++) {
        reduce_spec specs[MAX_SPECS];
        int n = reduce_base_plan(i, specs);
        reduce_routing(&params[i], test_seed() + 300 + (uint64_t)i, specs, n);
    }
}

Test(reduce_fused, anchor_shape, .timeout = 600) {
    dev = gpu_begin();
    ref_moe_params params = base_params(8, 256, 8);
    reduce_spec specs[MAX_SPECS];
    int n = reduce_anchor_plan(specs);
    reduce_routing(&params, test_seed() + 350, specs, n);
}

/* Pressure-mode params with one rank: every token keeps all nine slots. */
static const ref_moe_params PRODUCT_PARAMS = {4001, 9, 72, 1};

Test(reduce_fused, option_product, .timeout = 600) {
    dev = gpu_begin();
    reduce_spec specs[MAX_SPECS];
    int n = reduce_product_plan(specs);
    reduce_routing(&PRODUCT_PARAMS, test_seed() + 360, specs, n);
}

Test(reduce_fused, pressure_params, .timeout = 600) {
    dev = gpu_begin();
    ref_moe_params params[128];
    int count = moe_params(params, true);
    for (int i = 1; i < count; i += 2) {
        reduce_spec specs[MAX_SPECS];
        int n = reduce_pressure_plan(i / 2, specs);
        reduce_routing(&params[i], test_seed() + 400 + (uint64_t)i, specs, n);
    }
}

Test(reduce_fused, zero_tokens, .timeout = 600) {
    dev = gpu_begin();
    CUdeviceptr out = gpu_alloc(&dev, TAIL_BYTES);
    CU(&dev, cuMemsetD8(out, POISON, TAIL_BYTES));
    tk_tensor x = tensor(0, TK_BF16, 2, 0, 2048, 2048, 1);
    tk_tensor positions = tensor(0, TK_I32, 2, 0, 1, 1, 1);
    tk_tensor empty_out = tensor(out, TK_BF16, 2, 0, 2048, 2048, 1);
    check_status(tk_reduce_fused(&x, NULL, NULL, &positions, NULL, &empty_out, NULL),
                 "reduce T=0");
    unsigned char host[TAIL_BYTES + TAIL_BYTES];
    download(host, out, 0, "reduce T=0");
    gpu_free(&dev, &out);
}

/* ---- what ran ----------------------------------------------------------------------- */

/* One line in the log: the sweep's size, from the same plans the tests
 * run, and Criterion's counts. */
ReportHook(POST_ALL)(struct criterion_global_stats *stats) {
    ref_moe_params base[128], pressure[128];
    int bases = moe_params(base, false), pressures = moe_params(pressure, true);
    reduce_spec r[MAX_SPECS];
    int calls = reduce_anchor_plan(r) + reduce_product_plan(r);
    for (int i = 0; i < bases; i++)
        calls += reduce_base_plan(i, r);
    for (int i = 1; i < pressures; i += 2)
        calls += reduce_pressure_plan(i / 2, r);
    fprintf(stderr,
            "test_gpu_moe_fused_reduce: %zu tests: %zu passed, %zu failed, %zu crashed, "
            "%zu skipped; sweep: reduce %d calls over %d routings (%d base + %d of %d pressure "
            "moe params, hidden 2048..7168, anchor top-8/256/8 x 7168), plus T = 0 and CUDA "
            "graph tests\n",
            stats->nb_tests, stats->tests_passed, stats->tests_failed, stats->tests_crashed,
            stats->tests_skipped, calls, bases + 2 + pressures / 2, bases, pressures / 2,
            pressures);
}

/* ---- CUDA graphs --------------------------------------------------------------------- */

/* A fresh stream in global capture mode; graph_replay ends the capture,
 * launches the graph once and waits for it. */
typedef struct graph {
    CUstream stream;
    CUgraph graph;
    CUgraphExec exec;
} graph;

static void graph_begin(graph *g) {
    CU(&dev, cuStreamCreate(&g->stream, CU_STREAM_NON_BLOCKING));
    CU(&dev, cuStreamBeginCapture(g->stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
}

static void graph_replay(graph *g) {
    CU(&dev, cuStreamEndCapture(g->stream, &g->graph));
    CU(&dev, cuGraphInstantiateWithFlags(&g->exec, g->graph, 0));
    CU(&dev, cuGraphLaunch(g->exec, g->stream));
    CU(&dev, cuStreamSynchronize(g->stream));
    CU(&dev, cuGraphExecDestroy(g->exec));
    CU(&dev, cuGraphDestroy(g->graph));
    CU(&dev, cuStreamDestroy(g->stream));
}

/* Each entry point captured alone on a non-blocking stream, replayed, and
 * compared with the reference: the functions must neither synchronise nor
 * touch the legacy stream.  A small routing: capture does not depend on
 * the shape. */
Test(graph, every_entry_point_replays_exactly, .timeout = 600) {
    dev = gpu_begin();
    ref_moe_params params = base_params(2, 72, 8);
    int topk = params.topk;
    int64_t hidden = 7168;
    expand_spec specs[2] = {plain(TK_BF16, hidden, hidden), with_sf(hidden, hidden, 3)};
    expand_state e;
    expand_begin(&e, &params, test_seed() + 600, specs, 2);
    int64_t n = e.r.map.expanded, tokens = e.r.tokens;
    tk_tensor positions = routing_positions(&e.r), experts = routing_experts(&e.r);

    /* expand_to_fused, bf16; one eager call first loads the module, so
     * that the capture sees only the launch */
    size_t out_bytes = (size_t)(n * hidden) * 2;
    tk_tensor x = tensor(e.device_x, TK_BF16, 2, tokens, hidden, hidden, 1);
    tk_tensor out = tensor(e.device_out, TK_BF16, 2, n, hidden, hidden, 1);
    check_status(tk_expand_to_fused(&x, &positions, &experts, &out, NULL), "warm-up");
    CU(&dev, cuCtxSynchronize());
    CU(&dev, cuMemsetD8(e.device_out, POISON, out_bytes + TAIL_BYTES));
    graph g;
    graph_begin(&g);
    check_status(tk_expand_to_fused(&x, &positions, &experts, &out, g.stream), "graph expand");
    graph_replay(&g);
    download(e.got, e.device_out, out_bytes, "graph expand");
    memset(e.want, POISON, out_bytes);
    ref_expand_to_fused(e.x, tokens, (size_t)hidden * 2, (size_t)hidden * 2,
                        e.r.map.token_topk_to_pos, topk, e.r.map.pos_to_expert, n, e.want);
    expect_equal(e.got, e.want, n, (size_t)hidden * 2, 2, "graph expand");

    /* expand_to_fused_with_sf, packed UE8M0 */
    int64_t words = ref_expand_sf_words(hidden, 128, TK_SF_PACKED_UE8M0);
    gpu_upload(&dev, e.device_x_sf, e.x_sf, (size_t)(tokens * words) * 4);
    tk_tensor out_sf;
    size_t sf_bytes = 0;
    check_status(tk_sf_desc(n, hidden, 1, 128, TK_SF_PACKED_UE8M0, &out_sf, &sf_bytes), "desc");
    out_sf.data = (void *)(uintptr_t)e.device_out_sf;
    tk_tensor x8 = tensor(e.device_x, TK_E4M3, 2, tokens, hidden, hidden, 1);
    tk_tensor x_sf = tensor(e.device_x_sf, TK_I32, 2, tokens, words, words, 1);
    tk_tensor out8 = tensor(e.device_out, TK_E4M3, 2, n, hidden, hidden, 1);
    check_status(tk_expand_to_fused_with_sf(&x8, &x_sf, 128, &positions, &experts,
                                            TK_SF_PACKED_UE8M0, &out8, &out_sf, NULL),
                 "warm-up");
    CU(&dev, cuCtxSynchronize());
    CU(&dev, cuMemsetD8(e.device_out, POISON, (size_t)(n * hidden) + TAIL_BYTES));
    CU(&dev, cuMemsetD8(e.device_out_sf, POISON, sf_bytes + TAIL_BYTES));
    graph_begin(&g);
    check_status(tk_expand_to_fused_with_sf(&x8, &x_sf, 128, &positions, &experts,
                                            TK_SF_PACKED_UE8M0, &out8, &out_sf, g.stream),
                 "graph expand_with_sf");
    graph_replay(&g);
    download(e.got, e.device_out, (size_t)(n * hidden), "graph expand_with_sf");
    download(e.got_sf, e.device_out_sf, sf_bytes, "graph expand_with_sf");
    memset(e.want, POISON, (size_t)(n * hidden));
    ref_expand_to_fused(e.x, tokens, (size_t)hidden, (size_t)hidden, e.r.map.token_topk_to_pos,
                        topk, e.r.map.pos_to_expert, n, e.want);
    expect_equal(e.got, e.want, n, (size_t)hidden, 1, "graph expand_with_sf");
    memset(e.want_sf, POISON, sf_bytes);
    ref_expand_sf(e.x_sf, tokens, words, e.r.map.token_topk_to_pos, topk, e.r.map.pos_to_expert,
                  n, TK_SF_PACKED_UE8M0, e.want_sf);
    expect_equal(e.got_sf, e.want_sf, 1, sf_bytes, 4, "graph expand_with_sf sf");
    expand_end(&e);

    /* reduce_fused, bf16 -> e4m3 with every option */
    reduce_spec spec = {TK_BF16, TK_E4M3, hidden, hidden, WITH_WEIGHTS | WITH_X_SF | WITH_SF};
    reduce_state r;
    reduce_begin(&r, &params, test_seed() + 601, &spec, 1);
    reduce_input(&r, TK_BF16, hidden, test_seed() + 602);
    tokens = r.r.tokens;
    size_t reduce_bytes = (size_t)(tokens * hidden);
    tk_tensor rx = tensor(r.device_x, TK_BF16, 2, r.rows, hidden, hidden, 1);
    tk_tensor weights = tensor(r.device_weights, TK_F32, 2, tokens, topk, topk, 1);
    tk_tensor row_sf = tensor(r.device_x_sf, TK_F32, 1, r.rows, 0, 1, 0);
    tk_tensor sf = tensor(r.device_sf, TK_F32, 1, 1, 0, 1, 0);
    tk_tensor reduce_positions = routing_positions(&r.r);
    tk_tensor rout = tensor(r.device_out, TK_E4M3, 2, tokens, hidden, hidden, 1);
    check_status(tk_reduce_fused(&rx, &row_sf, &weights, &reduce_positions, &sf, &rout, NULL),
                 "warm-up");
    CU(&dev, cuCtxSynchronize());
    CU(&dev, cuMemsetD8(r.device_out, POISON, reduce_bytes + TAIL_BYTES));
    graph_begin(&g);
    check_status(tk_reduce_fused(&rx, &row_sf, &weights, &reduce_positions, &sf, &rout, g.stream),
                 "graph reduce");
    graph_replay(&g);
    download(r.got, r.device_out, reduce_bytes, "graph reduce");
    cr_assert(ref_reduce_fused(r.x, TK_BF16, hidden, hidden, r.weights, r.r.map.token_topk_to_pos,
                               tokens, topk, r.x_sf, &r.sf, TK_E4M3, r.want));
    expect_equal(r.got, r.want, tokens, (size_t)hidden, 1, "graph reduce");
    reduce_end(&r);
}

/* ---- argument validation (no device needed) ------------------------------------------- */

Test(api, reduce_fused_arguments) {
    if (tk_device_check() == TK_SUCCESS)
        cr_skip_test("a device exists: fake pointers must not be launched");
    tk_tensor x = tensor(FAKE(1), TK_BF16, 2, 800, 7168, 7168, 1);
    tk_tensor x_sf = tensor(FAKE(2), TK_F32, 1, 800, 0, 1, 0);
    tk_tensor weights = tensor(FAKE(3), TK_F32, 2, 100, 8, 8, 1);
    tk_tensor pos = tensor(FAKE(4), TK_I32, 2, 100, 8, 8, 1);
    tk_tensor sf = tensor(FAKE(5), TK_F32, 1, 1, 0, 1, 0);
    tk_tensor out = tensor(FAKE(6), TK_BF16, 2, 100, 7168, 7168, 1);
    tk_tensor out8 = tensor(FAKE(6), TK_E4M3, 2, 100, 7168, 7168, 1);
    expect_instance(tk_reduce_fused(&x, NULL, NULL, &pos, NULL, &out, NULL),
                    "reduce_fused__bf16");
    expect_instance(tk_reduce_fused(&x, &x_sf, &weights, &pos, &sf, &out8, NULL),
                    "reduce_fused__bf16_e4m3");
    tk_tensor x32 = tensor(FAKE(1), TK_F32, 2, 800, 7168, 7168 + 4, 1);
    tk_tensor out32 = tensor(FAKE(6), TK_F32, 2, 100, 7168, 7168, 1);
    expect_instance(tk_reduce_fused(&x32, NULL, &weights, &pos, NULL, &out32, NULL),
                    "reduce_fused__f32");
    tk_tensor x8 = tensor(FAKE(1), TK_E4M3, 2, 800, 7168, 7168, 1);
    expect_instance(tk_reduce_fused(&x8, &x_sf, NULL, &pos, &sf, &out8, NULL),
                    "reduce_fused__e4m3");

    tk_tensor narrow = tensor(FAKE(1), TK_BF16, 2, 800, 2000, 2000, 1);
    tk_tensor narrow_out = tensor(FAKE(6), TK_BF16, 2, 100, 2000, 2000, 1);
    expect_rejected(tk_reduce_fused(&narrow, NULL, NULL, &pos, NULL, &narrow_out, NULL),
                    TK_ERROR_INVALID_ARGUMENT, "multiple of 256");
    expect_rejected(tk_reduce_fused(&x, NULL, NULL, &pos, &sf, &out, NULL),
                    TK_ERROR_INVALID_ARGUMENT, "only an e4m3 output");
    expect_rejected(tk_reduce_fused(&x, NULL, NULL, &pos, NULL, &out32, NULL),
                    TK_ERROR_INVALID_ARGUMENT, "out: dtype");
    tk_tensor short_sf = tensor(FAKE(2), TK_F32, 1, 799, 0, 1, 0);
    expect_rejected(tk_reduce_fused(&x, &short_sf, NULL, &pos, NULL, &out, NULL),
                    TK_ERROR_INVALID_ARGUMENT, "x_sf: shape[0]");
    tk_tensor wide_weights = tensor(FAKE(3), TK_F32, 2, 100, 9, 9, 1);
    expect_rejected(tk_reduce_fused(&x, NULL, &wide_weights, &pos, NULL, &out, NULL),
                    TK_ERROR_INVALID_ARGUMENT, "topk_weights: shape[1]");
    tk_tensor two_scales = tensor(FAKE(5), TK_F32, 1, 2, 0, 1, 0);
    expect_rejected(tk_reduce_fused(&x, NULL, NULL, &pos, &two_scales, &out8, NULL),
                    TK_ERROR_INVALID_ARGUMENT, "sf: shape[0]");
    tk_tensor odd_stride = tensor(FAKE(1), TK_BF16, 2, 800, 7168, 7169, 1);
    expect_rejected(tk_reduce_fused(&odd_stride, NULL, NULL, &pos, NULL, &out, NULL),
                    TK_ERROR_UNSUPPORTED, "16 bytes");
    tk_tensor i8 = tensor(FAKE(1), TK_I8, 2, 800, 7168, 7168, 1);
    expect_rejected(tk_reduce_fused(&i8, NULL, NULL, &pos, NULL, &out, NULL),
                    TK_ERROR_INVALID_ARGUMENT, "x: dtype");
    expect_rejected(tk_reduce_fused(&x, NULL, NULL, NULL, NULL, &out, NULL),
                    TK_ERROR_INVALID_ARGUMENT, "token_topk_to_pos is NULL");
    tk_tensor no_tokens = tensor(0, TK_I32, 2, 0, 8, 8, 1);
    tk_tensor no_out = tensor(0, TK_BF16, 2, 0, 7168, 7168, 1);
    cr_assert_eq(tk_reduce_fused(&x, NULL, NULL, &no_tokens, NULL, &no_out, NULL), TK_SUCCESS);
}
