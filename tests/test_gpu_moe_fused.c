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
 *   - reduce_fused's x has N = T * K rows as in TileKernels' test (only
 *     the routed ones where that would pass 2 GiB), only the routed rows
 *     hold data, the others are NaN patterns, so a read of a wrong row
 *     shows;
 *   - the sweep is sized to finish in well under 90 s on a shared 16-core
 *     host (the full product moved ~400 GB through it): each of the 12
 *     base moe params (top-k 2/6/8/9; 72 or 256 experts over 8 or 64
 *     ranks) runs both kernels at one hidden size, rotating so that every
 *     size of 576 ... 7168 (multiples of 256 for reduce_fused) meets every
 *     dtype, while the dtype, with_sf option and (weights, x_sf) options
 *     rotate over the routings; TileKernels' benchmark shape (top-8, 256
 *     experts, 8 ranks, 7168) runs its benchmarked configurations;
 *     reduce_fused's whole option product, e4m3 inputs and padded rows
 *     run at one shape; the 66 pressure-mode params (top-k 1 and 7, 288 /
 *     384 experts, 1 / 72 / 256 ranks) alternate between the two kernels
 *     at small hidden sizes, and zero tokens run for both;
 *   - strided inputs (rows padded to a 16-byte multiple, and odd strides
 *     for the element-wise instances), and each entry point once inside a
 *     captured CUDA graph;
 *   - nothing is printed per case; a report hook writes one line with the
 *     sweep's size and the test counts.
 * TK_TEST_SEED changes the inputs; TK_REF_THREADS the reference threads.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_harness.h"
#include "moe_fused.h"
#include "reference.h"
#include "tk.h"
#include "tk_internal.h"

#define TAIL_BYTES GPU_TAIL_BYTES
#define POISON 0xFF

static const int64_t HIDDEN[] = {576, 2048, 2560, 3072, 4096, 6144, 7168};
#define NUM_HIDDEN 7
#define MAX_HIDDEN 7168
#define REDUCE_FIRST_HIDDEN 1 /* HIDDEN[1..] are multiples of 256 */

/* ---- environment and device helpers ----------------------------------------- */

static gpu dev; /* set by gpu_begin */

/* This file's poison byte and tail message for the shared harness. */
static void download(void *host, CUdeviceptr device, size_t bytes, const char *what) {
    gpu_download(&dev, host, device, bytes, POISON, " of the output", what);
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
    r->token_topk_to_pos = gpu_alloc(&dev, map_bytes);
    gpu_upload(&dev, r->token_topk_to_pos, r->map.token_topk_to_pos, map_bytes);
    r->pos_to_expert = gpu_alloc(&dev, (size_t)r->map.expanded * sizeof(int32_t));
    gpu_upload(&dev, r->pos_to_expert, r->map.pos_to_expert,
               (size_t)r->map.expanded * sizeof(int32_t));
}

static void routing_end(routing *r) {
    gpu_free(&dev, &r->token_topk_to_pos);
    gpu_free(&dev, &r->pos_to_expert);
    ref_moe_mapping_free(&r->map);
    free(r->topk_idx);
}

static tk_tensor routing_positions(const routing *r) {
    return tensor(r->token_topk_to_pos, TK_I32, 2, r->tokens, r->params.topk, r->params.topk, 1);
}

static tk_tensor routing_experts(const routing *r) {
    return tensor(r->pos_to_expert, TK_I32, 1, r->map.expanded, 0, 1, 0);
}

/* ---- fast test data ------------------------------------------------------------- */

/* The sweep moves tens of gigabytes through the host, so the inputs are
 * made at memory speed instead of with the references' per-element RNG
 * (ref_fill_rand_float took ~30 ns per element, most of the old run):
 * expansion moves bits, so its x is splitmix64 output; reduce_fused needs
 * finite floats, so each row reads a pool of 2^20 normals along its own
 * (start, odd step) walk -- rows differ with overwhelming probability, so
 * a kernel that reads a wrong row still shows. */
#define POOL_SIZE (1 << 20)

static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

typedef struct fill_job {
    unsigned char *data;
    size_t row_bytes;   /* bytes per row (fill_bits) or elements (fill_pool) */
    uint64_t seed;
    tk_dtype dtype;
    const void *pool;   /* POOL_SIZE elements of dtype */
} fill_job;

static void fill_bits_rows(void *context, int64_t begin, int64_t end) {
    const fill_job *job = context;
    for (int64_t r = begin; r < end; r++) {
        uint64_t state = job->seed ^ ((uint64_t)r * 0xD1B54A32D192ED03ull);
        unsigned char *row = job->data + (size_t)r * job->row_bytes;
        for (size_t i = 0; i < job->row_bytes; i += 8) {
            uint64_t word = splitmix64(&state);
            memcpy(row + i, &word, job->row_bytes - i < 8 ? job->row_bytes - i : 8);
        }
    }
}

/* rows x row_bytes random bytes. */
static void fill_bits(void *data, int64_t rows, size_t row_bytes, uint64_t seed) {
    fill_job job = {data, row_bytes, seed, TK_U8, NULL};
    ref_parallel_for(rows, 64, fill_bits_rows, &job);
}

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

/* ---- expand_to_fused ----------------------------------------------------------- */

/* One call: tk_expand_to_fused of `dtype` rows (npc == 0), or
 * tk_expand_to_fused_with_sf of e4m3 rows with npc/layout scales. */
typedef struct expand_spec {
    tk_dtype dtype;
    int64_t hidden, stride; /* elements */
    int npc;
    tk_sf_layout layout;
} expand_spec;

#define MAX_SPECS 32

/* TileKernels' with_sf options, (npc) x ((row, f32), (col, packed)), and
 * the column-major f32 layout libtk also writes. */
static const struct {
    int npc;
    tk_sf_layout layout;
} SF_OPTIONS[] = {{32, TK_SF_ROW_MAJOR},
                  {32, TK_SF_PACKED_UE8M0},
                  {128, TK_SF_ROW_MAJOR},
                  {128, TK_SF_PACKED_UE8M0},
                  {128, TK_SF_COL_MAJOR}};
#define NUM_SF_OPTIONS 5

static expand_spec plain(tk_dtype dtype, int64_t hidden, int64_t stride) {
    return (expand_spec){dtype, hidden, stride, 0, TK_SF_ROW_MAJOR};
}

static expand_spec with_sf(int64_t hidden, int64_t stride, int option) {
    option %= NUM_SF_OPTIONS;
    return (expand_spec){TK_E4M3, hidden, stride, SF_OPTIONS[option].npc,
                         SF_OPTIONS[option].layout};
}

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

/* Host and device buffers of one routing, sized for its specs: x holds
 * tokens rows of max_stride bytes, so every (hidden, stride) view fits. */
typedef struct expand_state {
    routing r;
    size_t max_stride;
    unsigned char *x, *got, *want;
    uint32_t *x_sf, *got_sf, *want_sf;
    CUdeviceptr device_x, device_out, device_x_sf, device_out_sf;
    size_t out_capacity, sf_capacity;
    int64_t sf_words; /* scale words per token row in x_sf */
} expand_state;

static void expand_begin(expand_state *s, const ref_moe_params *params, uint64_t seed,
                         const expand_spec *specs, int count) {
    memset(s, 0, sizeof *s);
    routing_begin(&s->r, params, 16, seed);
    size_t max_row = 0;
    int64_t words = 1;
    for (int i = 0; i < count; i++) {
        size_t size = tk_dtype_size(specs[i].dtype);
        if ((size_t)specs[i].stride * size > s->max_stride)
            s->max_stride = (size_t)specs[i].stride * size;
        if ((size_t)specs[i].hidden * size > max_row)
            max_row = (size_t)specs[i].hidden * size;
        if (specs[i].npc) {
            int64_t w = ref_expand_sf_words(specs[i].hidden, specs[i].npc, specs[i].layout);
            words = w > words ? w : words;
        }
    }
    size_t x_bytes = (size_t)s->r.tokens * s->max_stride;
    s->x = host_alloc(x_bytes);
    fill_bits(s->x, s->r.tokens, s->max_stride, seed + 1);
    s->device_x = gpu_alloc(&dev, x_bytes);
    gpu_upload(&dev, s->device_x, s->x, x_bytes);
    s->out_capacity = (size_t)s->r.map.expanded * max_row;
    s->got = host_alloc(s->out_capacity + TAIL_BYTES);
    s->want = host_alloc(s->out_capacity);
    s->device_out = gpu_alloc(&dev, s->out_capacity + TAIL_BYTES);
    /* scales: column-major buffers pad the rows to a multiple of 4 */
    s->sf_words = words;
    s->sf_capacity = (size_t)((s->r.map.expanded + 3) / 4 * 4) * (size_t)words * 4;
    s->x_sf = host_alloc((size_t)(s->r.tokens * words) * 4);
    fill_bits(s->x_sf, s->r.tokens, (size_t)words * 4, seed + 2);
    s->device_x_sf = gpu_alloc(&dev, (size_t)(s->r.tokens * words) * 4);
    s->got_sf = host_alloc(s->sf_capacity + TAIL_BYTES);
    s->want_sf = host_alloc(s->sf_capacity);
    s->device_out_sf = gpu_alloc(&dev, s->sf_capacity + TAIL_BYTES);
}

static void expand_end(expand_state *s) {
    gpu_free(&dev, &s->device_x);
    gpu_free(&dev, &s->device_out);
    gpu_free(&dev, &s->device_x_sf);
    gpu_free(&dev, &s->device_out_sf);
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

/* generate_moe_params' base entry (top-k, total experts, ranks). */
static ref_moe_params base_params(int topk, int total, int ranks) {
    ref_moe_params params[128];
    int count = moe_params(params, false);
    for (int i = 0; i < count; i++)
        if (params[i].topk == topk && params[i].total_experts == total &&
            params[i].ep_ranks == ranks)
            return params[i];
    cr_assert_fail("no base moe params (%d, %d, %d)", topk, total, ranks);
    return params[0];
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
    expand_spec e[MAX_SPECS];
    reduce_spec r[MAX_SPECS];
    int expand_calls = expand_anchor_plan(e) + expand_elementwise_plan(e);
    int reduce_calls = reduce_anchor_plan(r) + reduce_product_plan(r);
    for (int i = 0; i < bases; i++) {
        expand_calls += expand_base_plan(i, e);
        reduce_calls += reduce_base_plan(i, r);
    }
    for (int i = 0; i < pressures; i++) {
        if (i % 2 == 0)
            expand_calls += expand_pressure_plan(i / 2, e);
        else
            reduce_calls += reduce_pressure_plan(i / 2, r);
    }
    fprintf(stderr,
            "test_gpu_moe_fused: %zu tests: %zu passed, %zu failed, %zu crashed, %zu skipped; "
            "sweep: expand %d calls over %d routings, reduce %d calls over %d routings "
            "(%d base + %d pressure moe params, hidden 576..7168, anchor top-8/256/8 x 7168), "
            "plus T = 0 and CUDA graph tests\n",
            stats->nb_tests, stats->tests_passed, stats->tests_failed, stats->tests_crashed,
            stats->tests_skipped, expand_calls, bases + 2 + (pressures + 1) / 2, reduce_calls,
            bases + 2 + pressures / 2, bases, pressures);
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
