/*
 * test_gpu_moe_fused.c -- golden tests of tk_expand_to_fused,
 * tk_expand_to_fused_with_sf and tk_reduce_fused: each runs on the GPU over
 * TileKernels' test sweep and is compared byte for byte with the CPU
 * references of tests/ref/moe_fused.c.
 *
 * Without a usable CUDA device every test is skipped.  On the GPU machine:
 *   - routing comes from TileKernels' MoE draw (generate_moe_params and
 *     generate_topk_idx, spec 12.1) and get_fused_mapping's layout built
 *     on the host (alignment 16 for expansion, 1 for reduction);
 *   - outputs and SF buffers are poisoned (0xFF) before every launch and
 *     TAIL_BYTES past their end must stay poisoned; the column-major SF
 *     padding (not written by contract) must stay poisoned too;
 *   - reduce_fused's x has N = T * K rows as in TileKernels' test, only
 *     the routed rows hold data, the others are NaN patterns, so a read of
 *     a wrong row shows;
 *   - the sweep: the base moe params (top-k 2/6/8/9; 72 or 256 experts over
 *     8 or 64 ranks) at every hidden size (576 ... 7168; multiples of 256
 *     for reduce_fused), every dtype and option; reduce_fused's
 *     (weights, x_sf) pair rotates over the four combinations from case to
 *     case so that each combination meets every shape class, and the full
 *     product runs at one shape.  The pressure-mode params (top-k 1 and 7,
 *     288 / 384 experts, 1 / 72 / 256 ranks, zero tokens) run at one hidden
 *     size each, rotating; TK_FULL_TEST=1 runs them at every size.
 *   - strided inputs (rows padded to a 16-byte multiple, and odd strides
 *     for the element-wise instances), and each entry point once inside a
 *     captured CUDA graph.
 * TK_TEST_SEED changes the inputs; TK_REF_THREADS the reference threads.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "moe_fused.h"
#include "reference.h"
#include "tk.h"
#include "tk_internal.h"

#define TAIL_BYTES 256
#define POISON 0xFF

static const int64_t HIDDEN[] = {576, 2048, 2560, 3072, 4096, 6144, 7168};
#define NUM_HIDDEN 7
#define MAX_HIDDEN 7168
#define REDUCE_FIRST_HIDDEN 1 /* HIDDEN[1..] are multiples of 256 */

/* ---- environment and device helpers ----------------------------------------- */

static uint64_t test_seed(void) {
    const char *env = getenv("TK_TEST_SEED");
    return env ? strtoull(env, NULL, 0) : 0;
}

static bool full_test(void) {
    const char *env = getenv("TK_FULL_TEST");
    return env && (!strcmp(env, "1") || !strcmp(env, "true") || !strcmp(env, "True"));
}

static double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static const tk__driver_api *cu;

static void check_cu(CUresult result, const char *what) {
    if (result == CUDA_SUCCESS)
        return;
    const char *message = "?";
    if (cu->cuGetErrorString)
        cu->cuGetErrorString(result, &message);
    cr_assert_fail("%s failed: %d (%s)", what, (int)result, message);
}
#define CU(call) check_cu(cu->call, #call)

static void gpu_begin(void) {
    if (tk_device_check() != TK_SUCCESS)
        cr_skip_test("no usable CUDA device: %s", tk_last_error());
    cr_assert_eq(tk__driver(&cu), TK_SUCCESS, "tk__driver: %s", tk_last_error());
}

static CUdeviceptr device_alloc(size_t bytes) {
    CUdeviceptr ptr = 0;
    CU(cuMemAlloc(&ptr, bytes ? bytes : 1));
    return ptr;
}

static void device_free(CUdeviceptr *ptr) {
    if (*ptr)
        CU(cuMemFree(*ptr));
    *ptr = 0;
}

static void *host_alloc(size_t bytes) {
    void *memory = malloc(bytes ? bytes : 1);
    cr_assert(memory != NULL, "out of host memory (%zu bytes)", bytes);
    return memory;
}

static void upload(CUdeviceptr dst, const void *src, size_t bytes) {
    if (bytes)
        CU(cuMemcpyHtoD(dst, src, bytes));
}

static tk_tensor tensor(CUdeviceptr data, tk_dtype dtype, int rank, int64_t d0, int64_t d1,
                        int64_t s0, int64_t s1) {
    tk_tensor t;
    memset(&t, 0, sizeof t);
    t.data = (void *)(uintptr_t)data;
    t.dtype = dtype;
    t.rank = rank;
    t.shape[0] = d0;
    t.shape[1] = d1;
    t.strides[0] = s0;
    t.strides[1] = s1;
    return t;
}

static void check_status(tk_status status, const char *what) {
    cr_assert_eq(status, TK_SUCCESS, "%s: %s: %s", what, tk_status_string(status),
                 tk_last_error());
}

/* Synchronises, downloads `bytes` plus the tail and checks the tail. */
static void download(void *host, CUdeviceptr device, size_t bytes, const char *what) {
    CU(cuCtxSynchronize());
    CU(cuMemcpyDtoH(host, device, bytes + TAIL_BYTES));
    const unsigned char *tail = (const unsigned char *)host + bytes;
    for (size_t i = 0; i < TAIL_BYTES; i++)
        cr_assert_eq(tail[i], POISON, "%s: wrote past the end of the output (byte %zu after)",
                     what, i);
}

/* Byte-exact comparison of rows x row_bytes; reports the first mismatch. */
static void expect_equal(const void *got, const void *want, int64_t rows, size_t row_bytes,
                         size_t element, const char *what) {
    size_t bytes = (size_t)rows * row_bytes;
    size_t first = ref_first_difference(got, want, bytes);
    if (first == SIZE_MAX)
        return;
    size_t at = first / element * element;
    uint64_t g = 0, w = 0;
    memcpy(&g, (const char *)got + at, element);
    memcpy(&w, (const char *)want + at, element);
    int64_t differing = 0;
    for (size_t i = at; i < bytes; i += element)
        differing += memcmp((const char *)got + i, (const char *)want + i, element) != 0;
    cr_assert_fail("%s: first mismatch at row %zu, byte %zu: got 0x%0*llx, expected 0x%0*llx; "
                   "%ld elements differ",
                   what, at / row_bytes, at % row_bytes, (int)(2 * element),
                   (unsigned long long)g, (int)(2 * element), (unsigned long long)w,
                   (long)differing);
}

/* ---- routing ------------------------------------------------------------------ */

/* generate_moe_params (spec 12.1): base mode, then the pressure-mode
 * additions; total % ranks == 0 only. */
static int moe_params(ref_moe_params *out, bool pressure_only) {
    static const int base_topk[] = {2, 6, 8, 9}, full_topk[] = {1, 2, 6, 7, 8, 9};
    static const int base_total[] = {72, 256}, full_total[] = {72, 256, 288, 384};
    static const int base_ranks[] = {8, 64}, full_ranks[] = {1, 8, 64, 72, 256};
    int count = 0;
    for (int k = 0; k < 6; k++)
        for (int e = 0; e < 4; e++)
            for (int r = 0; r < 5; r++) {
                int topk = full_topk[k], total = full_total[e], ranks = full_ranks[r];
                if (total % ranks != 0)
                    continue;
                bool base = false;
                for (int i = 0; i < 4; i++)
                    base |= base_topk[i] == topk;
                base = base && (total == base_total[0] || total == base_total[1]) &&
                       (ranks == base_ranks[0] || ranks == base_ranks[1]);
                if (base == pressure_only)
                    continue;
                out[count++] = (ref_moe_params){4001, topk, total, ranks};
            }
    return count;
}

typedef struct routing {
    ref_moe_params params;
    int32_t *topk_idx;
    int64_t tokens;
    ref_moe_mapping map;
    CUdeviceptr token_topk_to_pos, pos_to_expert;
    char label[96];
} routing;

static void routing_begin(routing *r, const ref_moe_params *params, int alignment,
                          uint64_t seed) {
    memset(r, 0, sizeof *r);
    r->params = *params;
    r->tokens = ref_moe_draw_topk_idx(params, seed, &r->topk_idx);
    cr_assert(r->tokens >= 0);
    int experts = ref_moe_local_experts(params);
    cr_assert(ref_moe_mapping_build(r->topk_idx, r->tokens, params->topk, experts, alignment,
                                    &r->map));
    snprintf(r->label, sizeof r->label, "topk=%d experts=%d/%d ranks=%d T=%ld N=%ld",
             params->topk, experts, params->total_experts, params->ep_ranks, (long)r->tokens,
             (long)r->map.expanded);
    size_t map_bytes = (size_t)(r->tokens * params->topk) * sizeof(int32_t);
    r->token_topk_to_pos = device_alloc(map_bytes);
    upload(r->token_topk_to_pos, r->map.token_topk_to_pos, map_bytes);
    r->pos_to_expert = device_alloc((size_t)r->map.expanded * sizeof(int32_t));
    upload(r->pos_to_expert, r->map.pos_to_expert, (size_t)r->map.expanded * sizeof(int32_t));
}

static void routing_end(routing *r) {
    device_free(&r->token_topk_to_pos);
    device_free(&r->pos_to_expert);
    ref_moe_mapping_free(&r->map);
    free(r->topk_idx);
}

static tk_tensor routing_positions(const routing *r) {
    return tensor(r->token_topk_to_pos, TK_I32, 2, r->tokens, r->params.topk, r->params.topk, 1);
}

static tk_tensor routing_experts(const routing *r) {
    return tensor(r->pos_to_expert, TK_I32, 1, r->map.expanded, 0, 1, 0);
}

/* ---- expand_to_fused ----------------------------------------------------------- */

/* Host and device buffers of one routing; x holds tokens rows of
 * max_stride bytes, so every (hidden, stride) view fits. */
typedef struct expand_state {
    routing r;
    size_t max_stride;
    unsigned char *x, *got, *want;
    uint32_t *x_sf, *got_sf, *want_sf;
    CUdeviceptr device_x, device_out, device_x_sf, device_out_sf;
    size_t out_capacity, sf_capacity;
    int cases;
} expand_state;

static void expand_begin(expand_state *s, const ref_moe_params *params, uint64_t seed) {
    memset(s, 0, sizeof *s);
    routing_begin(&s->r, params, 16, seed);
    s->max_stride = (MAX_HIDDEN + 64) * 4; /* f32 rows with 64 columns of padding */
    size_t x_bytes = (size_t)s->r.tokens * s->max_stride;
    s->x = host_alloc(x_bytes);
    ref_fill_rand_e4m3(s->x, (int64_t)x_bytes, seed + 1);
    s->device_x = device_alloc(x_bytes);
    upload(s->device_x, s->x, x_bytes);
    s->out_capacity = (size_t)s->r.map.expanded * MAX_HIDDEN * 4;
    s->got = host_alloc(s->out_capacity + TAIL_BYTES);
    s->want = host_alloc(s->out_capacity);
    s->device_out = device_alloc(s->out_capacity + TAIL_BYTES);
    /* scales: at most 7168 / 32 words per row, column-major padded */
    int64_t words = MAX_HIDDEN / 32;
    s->sf_capacity = (size_t)((s->r.map.expanded + 3) / 4 * 4) * (size_t)words * 4;
    s->x_sf = host_alloc((size_t)(s->r.tokens * words) * 4);
    ref_rng rng = ref_rng_seed(seed + 2, 0);
    for (int64_t i = 0; i < s->r.tokens * words; i++)
        s->x_sf[i] = (uint32_t)ref_rng_next(&rng);
    s->device_x_sf = device_alloc((size_t)(s->r.tokens * words) * 4);
    s->got_sf = host_alloc(s->sf_capacity + TAIL_BYTES);
    s->want_sf = host_alloc(s->sf_capacity);
    s->device_out_sf = device_alloc(s->sf_capacity + TAIL_BYTES);
}

static void expand_end(expand_state *s) {
    device_free(&s->device_x);
    device_free(&s->device_out);
    device_free(&s->device_x_sf);
    device_free(&s->device_out_sf);
    free(s->x);
    free(s->got);
    free(s->want);
    free(s->x_sf);
    free(s->got_sf);
    free(s->want_sf);
    routing_end(&s->r);
}

static const char *dtype_name(tk_dtype dtype) {
    switch (dtype) {
    case TK_F32: return "f32";
    case TK_BF16: return "bf16";
    case TK_E4M3: return "e4m3";
    case TK_I8: return "i8";
    default: return "?";
    }
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
    CU(cuMemsetD8(s->device_out, POISON, out_bytes + TAIL_BYTES));
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
    s->cases++;
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
    upload(s->device_x_sf, s->x_sf, (size_t)(tokens * words) * 4);
    tk_tensor out_sf;
    size_t sf_bytes = 0;
    check_status(tk_sf_desc(n, hidden, 1, npc, layout, &out_sf, &sf_bytes), "tk_sf_desc");
    cr_assert(sf_bytes <= s->sf_capacity);
    out_sf.data = (void *)(uintptr_t)s->device_out_sf;
    size_t out_bytes = (size_t)(n * hidden);
    CU(cuMemsetD8(s->device_out, POISON, out_bytes + TAIL_BYTES));
    CU(cuMemsetD8(s->device_out_sf, POISON, sf_bytes + TAIL_BYTES));
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
    s->cases++;
}

static const tk_sf_layout TK_LAYOUTS[] = {TK_SF_ROW_MAJOR, TK_SF_PACKED_UE8M0, TK_SF_COL_MAJOR};

/* Every case of one routing: TileKernels' bf16 sweep (plus every element
 * size and strides), and the with_sf sweep (npc 32/128 with the (row f32)
 * and (col packed) pairs, plus col f32). */
static void expand_routing(const ref_moe_params *params, uint64_t seed, int hidden_from,
                           int hidden_to, bool extras) {
    expand_state s;
    double start = now_seconds();
    expand_begin(&s, params, seed);
    for (int h = hidden_from; h < hidden_to; h++) {
        int64_t hidden = HIDDEN[h];
        expand_case(&s, TK_BF16, hidden, hidden, NULL);
        for (int n = 0; n < 2; n++)
            for (int l = 0; l < 2; l++)
                expand_sf_case(&s, hidden, hidden, n ? 128 : 32, TK_LAYOUTS[l], NULL);
        if (!extras)
            continue;
        expand_case(&s, TK_E4M3, hidden, hidden, NULL);
        expand_case(&s, TK_F32, hidden, hidden, NULL);
        expand_case(&s, TK_BF16, hidden, hidden + 64, NULL);      /* vec, padded rows */
        expand_sf_case(&s, hidden, hidden, 128, TK_SF_COL_MAJOR, NULL);
    }
    if (extras) {
        /* rows that are not 16-byte multiples: the element-wise instances */
        expand_case(&s, TK_BF16, 2050, 2050, NULL);
        expand_case(&s, TK_BF16, 1000, 1003, NULL);
        expand_case(&s, TK_F32, 1001, 1001, NULL);
        expand_case(&s, TK_I8, 1001, 1001, NULL);
        expand_case(&s, TK_E4M3, 7168, 7169, NULL);
        expand_sf_case(&s, 1000, 1000, 32, TK_SF_ROW_MAJOR, NULL);
        expand_sf_case(&s, 7168, 7169, 128, TK_SF_PACKED_UE8M0, NULL);
    }
    cr_log_info("expand %s: %d cases in %.1f s", s.r.label, s.cases, now_seconds() - start);
    expand_end(&s);
}

static void expand_base(int first, int step) {
    gpu_begin();
    ref_moe_params params[128];
    int count = moe_params(params, false);
    for (int i = first; i < count; i += step)
        expand_routing(&params[i], test_seed() + 100 + (uint64_t)i, 0, NUM_HIDDEN, i < 3);
}

Test(expand_to_fused, base_sweep_0, .timeout = 1800) { expand_base(0, 2); }
Test(expand_to_fused, base_sweep_1, .timeout = 1800) { expand_base(1, 2); }

Test(expand_to_fused, pressure_params, .timeout = 1800) {
    gpu_begin();
    ref_moe_params params[128];
    int count = moe_params(params, true);
    for (int i = 0; i < count; i++) {
        int h = i % NUM_HIDDEN;
        expand_routing(&params[i], test_seed() + 200 + (uint64_t)i, full_test() ? 0 : h,
                       full_test() ? NUM_HIDDEN : h + 1, false);
    }
}

/* The degenerate pressure case: no tokens.  Nothing is launched and the
 * (empty) outputs are not touched. */
Test(expand_to_fused, zero_tokens, .timeout = 600) {
    gpu_begin();
    CUdeviceptr out = device_alloc(TAIL_BYTES);
    CU(cuMemsetD8(out, POISON, TAIL_BYTES));
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
    device_free(&out);
}

/* ---- reduce_fused ---------------------------------------------------------------- */

typedef struct reduce_state {
    routing r;
    int64_t rows;           /* N: x's rows, T * K when int32 offsets allow */
    int64_t routed;         /* rows that hold data: positions < routed    */
    void *x;                /* routed rows of the current dtype, hidden wide */
    float *weights, *x_sf, sf;
    unsigned char *got, *want;
    CUdeviceptr device_x, device_weights, device_x_sf, device_sf, device_out;
    tk_dtype x_dtype;
    int64_t x_hidden, x_stride; /* what device_x holds now */
    int cases;
} reduce_state;

static void reduce_begin(reduce_state *s, const ref_moe_params *params, uint64_t seed) {
    memset(s, 0, sizeof *s);
    routing_begin(&s->r, params, 1, seed);
    int64_t topk = params->topk;
    s->routed = s->r.map.routed;
    s->rows = s->r.tokens * topk;
    /* 64 columns of row padding for the strided cases */
    if (s->rows * (MAX_HIDDEN + 64) > INT32_MAX)
        s->rows = s->routed; /* positions stay below routed either way */
    size_t x_bytes = (size_t)s->rows * (MAX_HIDDEN + 64) * 4;
    s->device_x = device_alloc(x_bytes);
    s->x = host_alloc((size_t)s->routed * (MAX_HIDDEN + 64) * 4);
    s->weights = host_alloc((size_t)(s->r.tokens * topk) * sizeof(float));
    s->x_sf = host_alloc((size_t)s->rows * sizeof(float));
    ref_rng rng = ref_rng_seed(seed + 3, 0);
    for (int64_t i = 0; i < s->r.tokens * topk; i++)
        s->weights[i] = ref_rng_uniform(&rng);
    for (int64_t i = 0; i < s->rows; i++)
        s->x_sf[i] = ref_rng_normal(&rng);
    s->sf = ref_rng_normal(&rng);
    s->device_weights = device_alloc((size_t)(s->r.tokens * topk) * sizeof(float));
    upload(s->device_weights, s->weights, (size_t)(s->r.tokens * topk) * sizeof(float));
    s->device_x_sf = device_alloc((size_t)s->rows * sizeof(float));
    upload(s->device_x_sf, s->x_sf, (size_t)s->rows * sizeof(float));
    s->device_sf = device_alloc(sizeof(float));
    upload(s->device_sf, &s->sf, sizeof(float));
    size_t out_bytes = (size_t)s->r.tokens * MAX_HIDDEN * 4;
    s->got = host_alloc(out_bytes + TAIL_BYTES);
    s->want = host_alloc(out_bytes);
    s->device_out = device_alloc(out_bytes + TAIL_BYTES);
}

static void reduce_end(reduce_state *s) {
    device_free(&s->device_x);
    device_free(&s->device_weights);
    device_free(&s->device_x_sf);
    device_free(&s->device_sf);
    device_free(&s->device_out);
    free(s->x);
    free(s->weights);
    free(s->x_sf);
    free(s->got);
    free(s->want);
    routing_end(&s->r);
}

/* Fills x (rows, hidden) of dtype with row stride `stride`: routed rows
 * random (normals, or e4m3 codes), the rest NaN patterns. */
static void reduce_input(reduce_state *s, tk_dtype dtype, int64_t hidden, int64_t stride,
                         uint64_t seed) {
    if (s->x_dtype == dtype && s->x_hidden == hidden && s->x_stride == stride)
        return;
    size_t size = tk_dtype_size(dtype);
    size_t routed_bytes = (size_t)(s->routed * stride) * size;
    if (dtype == TK_E4M3)
        ref_fill_rand_e4m3(s->x, (int64_t)routed_bytes, seed);
    else
        ref_fill_rand_float(s->x, dtype, s->routed, stride, 0, 0, seed);
    CU(cuMemsetD8(s->device_x, POISON, (size_t)(s->rows * stride) * size));
    upload(s->device_x, s->x, routed_bytes);
    s->x_dtype = dtype;
    s->x_hidden = hidden;
    s->x_stride = stride;
}

static void reduce_case(reduce_state *s, tk_dtype in, tk_dtype out_dtype, int64_t hidden,
                        int64_t stride, bool with_weights, bool with_x_sf, bool with_sf,
                        tk_stream stream) {
    int64_t tokens = s->r.tokens;
    int topk = s->r.params.topk;
    char what[220];
    snprintf(what, sizeof what,
             "reduce_fused %s->%s H=%ld stride=%ld weights=%d x_sf=%d sf=%d N=%ld %s",
             dtype_name(in), dtype_name(out_dtype), (long)hidden, (long)stride, with_weights,
             with_x_sf, with_sf, (long)s->rows, s->r.label);
    reduce_input(s, in, hidden, stride, test_seed() + 500 + (uint64_t)hidden + (uint64_t)in);
    size_t out_size = tk_dtype_size(out_dtype);
    size_t out_bytes = (size_t)(tokens * hidden) * out_size;
    CU(cuMemsetD8(s->device_out, POISON, out_bytes + TAIL_BYTES));
    tk_tensor x = tensor(s->device_x, in, 2, s->rows, hidden, stride, 1);
    tk_tensor weights = tensor(s->device_weights, TK_F32, 2, tokens, topk, topk, 1);
    tk_tensor x_sf = tensor(s->device_x_sf, TK_F32, 1, s->rows, 0, 1, 0);
    tk_tensor sf = tensor(s->device_sf, TK_F32, 1, 1, 0, 1, 0);
    tk_tensor positions = routing_positions(&s->r);
    tk_tensor out = tensor(s->device_out, out_dtype, 2, tokens, hidden, hidden, 1);
    check_status(tk_reduce_fused(&x, with_x_sf ? &x_sf : NULL, with_weights ? &weights : NULL,
                                 &positions, with_sf ? &sf : NULL, &out, stream),
                 what);
    download(s->got, s->device_out, out_bytes, what);
    cr_assert(ref_reduce_fused(s->x, in, stride, hidden, with_weights ? s->weights : NULL,
                               s->r.map.token_topk_to_pos, tokens, topk,
                               with_x_sf ? s->x_sf : NULL, with_sf ? &s->sf : NULL, out_dtype,
                               s->want));
    expect_equal(s->got, s->want, tokens, (size_t)hidden * out_size, out_size, what);
    s->cases++;
}

/* TileKernels' sweep for one routing: in f32/bf16 x out in/e4m3 at every
 * hidden size (e4m3 outputs with sf, as the original test passes it),
 * (weights, x_sf) rotating; `full` adds the whole flag product at the
 * largest size, e4m3 inputs and strided rows. */
static void reduce_routing(const ref_moe_params *params, uint64_t seed, int hidden_from,
                           int hidden_to, bool full) {
    reduce_state s;
    double start = now_seconds();
    reduce_begin(&s, params, seed);
    static const tk_dtype inputs[] = {TK_F32, TK_BF16};
    int rotation = (int)(seed % 4);
    for (int i = 0; i < 2; i++)
        for (int h = hidden_from; h < hidden_to; h++)
            for (int o = 0; o < 2; o++) {
                tk_dtype out = o ? TK_E4M3 : inputs[i];
                int flags = rotation++ % 4;
                reduce_case(&s, inputs[i], out, HIDDEN[h], HIDDEN[h], flags & 1, flags & 2, o,
                            NULL);
            }
    if (full) {
        for (int i = 0; i < 2; i++)
            for (int o = 0; o < 2; o++)
                for (int flags = 0; flags < 4; flags++) {
                    tk_dtype out = o ? TK_E4M3 : inputs[i];
                    reduce_case(&s, inputs[i], out, MAX_HIDDEN, MAX_HIDDEN, flags & 1, flags & 2,
                                o, NULL);
                }
        /* e4m3 output without an output scale */
        reduce_case(&s, TK_BF16, TK_E4M3, 2048, 2048, true, false, false, NULL);
        /* e4m3 input (QuantTensor with e4m3 data) */
        for (int flags = 0; flags < 8; flags++)
            reduce_case(&s, TK_E4M3, TK_E4M3, 4096, 4096, flags & 1, flags & 2, flags & 4, NULL);
        /* padded rows (16-byte multiples) */
        reduce_case(&s, TK_BF16, TK_BF16, 2560, 2560 + 64, true, true, false, NULL);
        reduce_case(&s, TK_F32, TK_E4M3, 2560, 2560 + 64, true, false, true, NULL);
    }
    cr_log_info("reduce %s: %d cases in %.1f s", s.r.label, s.cases, now_seconds() - start);
    reduce_end(&s);
}

static void reduce_base(int first, int step) {
    gpu_begin();
    ref_moe_params params[128];
    int count = moe_params(params, false);
    for (int i = first; i < count; i += step)
        reduce_routing(&params[i], test_seed() + 300 + (uint64_t)i, REDUCE_FIRST_HIDDEN,
                       NUM_HIDDEN, i < 2);
}

Test(reduce_fused, base_sweep_0, .timeout = 1800) { reduce_base(0, 3); }
Test(reduce_fused, base_sweep_1, .timeout = 1800) { reduce_base(1, 3); }
Test(reduce_fused, base_sweep_2, .timeout = 1800) { reduce_base(2, 3); }

Test(reduce_fused, pressure_params, .timeout = 1800) {
    gpu_begin();
    ref_moe_params params[128];
    int count = moe_params(params, true);
    int span = NUM_HIDDEN - REDUCE_FIRST_HIDDEN;
    for (int i = 0; i < count; i++) {
        int h = REDUCE_FIRST_HIDDEN + i % span;
        reduce_routing(&params[i], test_seed() + 400 + (uint64_t)i,
                       full_test() ? REDUCE_FIRST_HIDDEN : h, full_test() ? NUM_HIDDEN : h + 1,
                       false);
    }
}

Test(reduce_fused, zero_tokens, .timeout = 600) {
    gpu_begin();
    CUdeviceptr out = device_alloc(TAIL_BYTES);
    CU(cuMemsetD8(out, POISON, TAIL_BYTES));
    tk_tensor x = tensor(0, TK_BF16, 2, 0, 2048, 2048, 1);
    tk_tensor positions = tensor(0, TK_I32, 2, 0, 1, 1, 1);
    tk_tensor empty_out = tensor(out, TK_BF16, 2, 0, 2048, 2048, 1);
    check_status(tk_reduce_fused(&x, NULL, NULL, &positions, NULL, &empty_out, NULL),
                 "reduce T=0");
    unsigned char host[TAIL_BYTES + TAIL_BYTES];
    download(host, out, 0, "reduce T=0");
    device_free(&out);
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
    CU(cuStreamCreate(&g->stream, CU_STREAM_NON_BLOCKING));
    CU(cuStreamBeginCapture(g->stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
}

static void graph_replay(graph *g) {
    CU(cuStreamEndCapture(g->stream, &g->graph));
    CU(cuGraphInstantiateWithFlags(&g->exec, g->graph, 0));
    CU(cuGraphLaunch(g->exec, g->stream));
    CU(cuStreamSynchronize(g->stream));
    CU(cuGraphExecDestroy(g->exec));
    CU(cuGraphDestroy(g->graph));
    CU(cuStreamDestroy(g->stream));
}

/* Each entry point captured alone on a non-blocking stream, replayed, and
 * compared with the reference: the functions must neither synchronise nor
 * touch the legacy stream. */
Test(graph, every_entry_point_replays_exactly, .timeout = 600) {
    gpu_begin();
    ref_moe_params params = {4001, 8, 256, 8};
    expand_state e;
    expand_begin(&e, &params, test_seed() + 600);
    int64_t n = e.r.map.expanded, tokens = e.r.tokens, hidden = 7168;
    tk_tensor positions = routing_positions(&e.r), experts = routing_experts(&e.r);

    /* expand_to_fused, bf16; one eager call first loads the module, so
     * that the capture sees only the launch */
    size_t out_bytes = (size_t)(n * hidden) * 2;
    tk_tensor x = tensor(e.device_x, TK_BF16, 2, tokens, hidden, hidden, 1);
    tk_tensor out = tensor(e.device_out, TK_BF16, 2, n, hidden, hidden, 1);
    check_status(tk_expand_to_fused(&x, &positions, &experts, &out, NULL), "warm-up");
    CU(cuCtxSynchronize());
    CU(cuMemsetD8(e.device_out, POISON, out_bytes + TAIL_BYTES));
    graph g;
    graph_begin(&g);
    check_status(tk_expand_to_fused(&x, &positions, &experts, &out, g.stream), "graph expand");
    graph_replay(&g);
    download(e.got, e.device_out, out_bytes, "graph expand");
    memset(e.want, POISON, out_bytes);
    ref_expand_to_fused(e.x, tokens, (size_t)hidden * 2, (size_t)hidden * 2,
                        e.r.map.token_topk_to_pos, 8, e.r.map.pos_to_expert, n, e.want);
    expect_equal(e.got, e.want, n, (size_t)hidden * 2, 2, "graph expand");

    /* expand_to_fused_with_sf, packed UE8M0 */
    int64_t words = ref_expand_sf_words(hidden, 128, TK_SF_PACKED_UE8M0);
    upload(e.device_x_sf, e.x_sf, (size_t)(tokens * words) * 4);
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
    CU(cuCtxSynchronize());
    CU(cuMemsetD8(e.device_out, POISON, (size_t)(n * hidden) + TAIL_BYTES));
    CU(cuMemsetD8(e.device_out_sf, POISON, sf_bytes + TAIL_BYTES));
    graph_begin(&g);
    check_status(tk_expand_to_fused_with_sf(&x8, &x_sf, 128, &positions, &experts,
                                            TK_SF_PACKED_UE8M0, &out8, &out_sf, g.stream),
                 "graph expand_with_sf");
    graph_replay(&g);
    download(e.got, e.device_out, (size_t)(n * hidden), "graph expand_with_sf");
    download(e.got_sf, e.device_out_sf, sf_bytes, "graph expand_with_sf");
    memset(e.want, POISON, (size_t)(n * hidden));
    ref_expand_to_fused(e.x, tokens, (size_t)hidden, (size_t)hidden, e.r.map.token_topk_to_pos,
                        8, e.r.map.pos_to_expert, n, e.want);
    expect_equal(e.got, e.want, n, (size_t)hidden, 1, "graph expand_with_sf");
    memset(e.want_sf, POISON, sf_bytes);
    ref_expand_sf(e.x_sf, tokens, words, e.r.map.token_topk_to_pos, 8, e.r.map.pos_to_expert,
                  n, TK_SF_PACKED_UE8M0, e.want_sf);
    expect_equal(e.got_sf, e.want_sf, 1, sf_bytes, 4, "graph expand_with_sf sf");
    expand_end(&e);

    /* reduce_fused, bf16 -> e4m3 with every option */
    reduce_state r;
    reduce_begin(&r, &params, test_seed() + 601);
    reduce_input(&r, TK_BF16, hidden, hidden, test_seed() + 602);
    tokens = r.r.tokens;
    size_t reduce_bytes = (size_t)(tokens * hidden);
    tk_tensor rx = tensor(r.device_x, TK_BF16, 2, r.rows, hidden, hidden, 1);
    tk_tensor weights = tensor(r.device_weights, TK_F32, 2, tokens, 8, 8, 1);
    tk_tensor row_sf = tensor(r.device_x_sf, TK_F32, 1, r.rows, 0, 1, 0);
    tk_tensor sf = tensor(r.device_sf, TK_F32, 1, 1, 0, 1, 0);
    tk_tensor reduce_positions = routing_positions(&r.r);
    tk_tensor rout = tensor(r.device_out, TK_E4M3, 2, tokens, hidden, hidden, 1);
    check_status(tk_reduce_fused(&rx, &row_sf, &weights, &reduce_positions, &sf, &rout, NULL),
                 "warm-up");
    CU(cuCtxSynchronize());
    CU(cuMemsetD8(r.device_out, POISON, reduce_bytes + TAIL_BYTES));
    graph_begin(&g);
    check_status(tk_reduce_fused(&rx, &row_sf, &weights, &reduce_positions, &sf, &rout, g.stream),
                 "graph reduce");
    graph_replay(&g);
    download(r.got, r.device_out, reduce_bytes, "graph reduce");
    cr_assert(ref_reduce_fused(r.x, TK_BF16, hidden, hidden, r.weights, r.r.map.token_topk_to_pos,
                               tokens, 8, r.x_sf, &r.sf, TK_E4M3, r.want));
    expect_equal(r.got, r.want, tokens, (size_t)hidden, 1, "graph reduce");
    reduce_end(&r);
}

/* ---- argument validation (no device needed) ------------------------------------------- */

/* Descriptors with fake, aligned device addresses: validation never
 * dereferences them.  A call that passes validation reaches the driver,
 * so these tests skip where a device exists (the fake pointers would be
 * launched); without one the call ends in TK_ERROR_NO_DEVICE after picking
 * its instance. */
#define FAKE(n) ((CUdeviceptr)(0x100000 * (n)))

static void expect_rejected(tk_status status, tk_status want, const char *needle) {
    cr_assert_eq(status, want, "got %s (%s), expected %s", tk_status_string(status),
                 tk_last_error(), tk_status_string(want));
    cr_assert(strstr(tk_last_error(), needle) != NULL, "message '%s' lacks '%s'",
              tk_last_error(), needle);
}

static void expect_instance(tk_status status, const char *instance) {
    cr_assert(status == TK_ERROR_NO_DEVICE || status == TK_ERROR_DRIVER, "got %s: %s",
              tk_status_string(status), tk_last_error());
    cr_assert_str_eq(tk__last_instance(), instance);
}

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
