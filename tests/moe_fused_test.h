/*
 * moe_fused_test.h -- what the two halves of the fused-MoE golden tests
 * share (test_gpu_moe_fused_expand.c, test_gpu_moe_fused_reduce.c): the
 * device handle and the poisoned download, tensor descriptors, the
 * byte-exact comparison, TileKernels' MoE routing draw (generate_moe_params
 * and get_fused_mapping, spec 12.1) uploaded to the device, fast random
 * rows, the expansion buffers (the reduce file's CUDA-graph test replays
 * expansions too) and the argument-validation checks.  Every failure is a
 * Criterion assertion, so these functions may only be called from inside
 * a test.  They are static inline so that each binary takes only what it
 * uses.
 */
#ifndef TK_TESTS_MOE_FUSED_TEST_H
#define TK_TESTS_MOE_FUSED_TEST_H

#include <criterion/criterion.h>
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

/* ---- environment and device helpers ----------------------------------------- */

static gpu dev; /* set by gpu_begin */

/* This file's poison byte and tail message for the shared harness. */
static inline void download(void *host, CUdeviceptr device, size_t bytes, const char *what) {
    gpu_download(&dev, host, device, bytes, POISON, " of the output", what);
}

static inline tk_tensor tensor(CUdeviceptr data, tk_dtype dtype, int rank, int64_t d0,
                               int64_t d1, int64_t s0, int64_t s1) {
    /* rank 1 uses only d0 and s0: the second entries stay as given, unused */
    tk_tensor t = gpu_tensor2(data, dtype, d0, d1, s0, s1);
    t.rank = rank;
    return t;
}

/* Byte-exact comparison of rows x row_bytes; reports the first mismatch. */
static inline void expect_equal(const void *got, const void *want, int64_t rows, size_t row_bytes,
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
static inline int moe_params(ref_moe_params *out, bool pressure_only) {
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

static inline void routing_begin(routing *r, const ref_moe_params *params, int alignment,
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

static inline void routing_end(routing *r) {
    gpu_free(&dev, &r->token_topk_to_pos);
    gpu_free(&dev, &r->pos_to_expert);
    ref_moe_mapping_free(&r->map);
    free(r->topk_idx);
}

static inline tk_tensor routing_positions(const routing *r) {
    return tensor(r->token_topk_to_pos, TK_I32, 2, r->tokens, r->params.topk, r->params.topk, 1);
}

static inline tk_tensor routing_experts(const routing *r) {
    return tensor(r->pos_to_expert, TK_I32, 1, r->map.expanded, 0, 1, 0);
}

/* generate_moe_params' base entry (top-k, total experts, ranks). */
static inline ref_moe_params base_params(int topk, int total, int ranks) {
    ref_moe_params params[128];
    int count = moe_params(params, false);
    for (int i = 0; i < count; i++)
        if (params[i].topk == topk && params[i].total_experts == total &&
            params[i].ep_ranks == ranks)
            return params[i];
    cr_assert_fail("no base moe params (%d, %d, %d)", topk, total, ranks);
    return params[0];
}

/* ---- fast test data ------------------------------------------------------------- */

/* The sweep moves tens of gigabytes through the host, so the inputs are
 * made at memory speed instead of with the references' per-element RNG
 * (ref_fill_rand_float took ~30 ns per element, most of the old run):
 * expansion moves bits, so its x is splitmix64 output (reduce_fused's
 * finite floats are made in its own file from the same generator). */

static inline uint64_t splitmix64(uint64_t *state) {
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

static inline void fill_bits_rows(void *context, int64_t begin, int64_t end) {
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
static inline void fill_bits(void *data, int64_t rows, size_t row_bytes, uint64_t seed) {
    fill_job job = {data, row_bytes, seed, TK_U8, NULL};
    ref_parallel_for(rows, 64, fill_bits_rows, &job);
}

/* ---- expansion specs and buffers ----------------------------------------------------------- */

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

static inline expand_spec plain(tk_dtype dtype, int64_t hidden, int64_t stride) {
    return (expand_spec){dtype, hidden, stride, 0, TK_SF_ROW_MAJOR};
}

static inline expand_spec with_sf(int64_t hidden, int64_t stride, int option) {
    option %= NUM_SF_OPTIONS;
    return (expand_spec){TK_E4M3, hidden, stride, SF_OPTIONS[option].npc,
                         SF_OPTIONS[option].layout};
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

static inline void expand_begin(expand_state *s, const ref_moe_params *params, uint64_t seed,
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

static inline void expand_end(expand_state *s) {
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

static inline const char *dtype_name(tk_dtype dtype) {
    switch (dtype) {
    case TK_F32: return "f32";
    case TK_BF16: return "bf16";
    case TK_E4M3: return "e4m3";
    case TK_I8: return "i8";
    default: return "?";
    }
}

/* ---- argument validation checks ------------------------------------------- */

/* Descriptors with fake, aligned device addresses: validation never
 * dereferences them.  A call that passes validation reaches the driver,
 * so these tests skip where a device exists (the fake pointers would be
 * launched); without one the call ends in TK_ERROR_NO_DEVICE after picking
 * its instance. */
#define FAKE(n) ((CUdeviceptr)(0x100000 * (n)))

static inline void expect_rejected(tk_status status, tk_status want, const char *needle) {
    cr_assert_eq(status, want, "got %s (%s), expected %s", tk_status_string(status),
                 tk_last_error(), tk_status_string(want));
    cr_assert(strstr(tk_last_error(), needle) != NULL, "message '%s' lacks '%s'",
              tk_last_error(), needle);
}

static inline void expect_instance(tk_status status, const char *instance) {
    cr_assert(status == TK_ERROR_NO_DEVICE || status == TK_ERROR_DRIVER, "got %s: %s",
              tk_status_string(status), tk_last_error());
    cr_assert_str_eq(tk__last_instance(), instance);
}

#endif
