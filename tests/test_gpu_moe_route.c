/*
 * test_gpu_moe_route.c -- golden tests of the MoE routing kernels
 * (group_count, aux_fi, inplace_unique_group_indices, mask_indices_by_tp,
 * get_fused_mapping) on the GPU, byte for byte against tests/ref/moe_route.c,
 * over TileKernels' sweep: every generate_moe_params configuration of the
 * pressure-test mode (topk 1-9, 72-384 experts, 1-256 EP ranks, and the
 * zero-token case), with generate_topk_idx inputs, plus synthetic
 * 4001 / 8001-token inputs with heavy duplicates and out-of-range values.
 *
 * Outputs are poisoned with 0x5A bytes (not 0xFF: -1 is a legitimate
 * output) and TAIL_BYTES after each output must stay poisoned.  The fused
 * mapping is compared exactly (libtk's order is fixed) and also run
 * through the invariant checker TileKernels' test uses.  One test captures
 * every entry point in a CUDA graph (global capture mode: any host
 * synchronisation inside would fail the capture) and replays it.  The
 * argument-validation tests need no GPU.
 *
 * Without a usable CUDA device the GPU tests are skipped.  The whole
 * binary takes a few seconds on the H200 machine (inputs are < 3 MB).
 * TK_TEST_SEED changes the inputs.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_harness.h"
#include "moe_route.h"
#include "reference.h"
#include "tk.h"
#include "tk_internal.h"

#define TAIL_BYTES GPU_TAIL_BYTES
#define POISON 0x5A
#define MAX_PARAMS 128

/* ---- device helpers ------------------------------------------------------ */

/* Device buffer of `bytes` plus the checked tail, poisoned. */
static CUdeviceptr device_alloc(const gpu *g, size_t bytes)
{
    CUdeviceptr ptr = gpu_alloc(g, bytes + TAIL_BYTES);
    gpu_poison(g, ptr, bytes, POISON);
    return ptr;
}

static CUdeviceptr device_upload(const gpu *g, const void *host, size_t bytes)
{
    CUdeviceptr ptr = device_alloc(g, bytes);
    gpu_upload(g, ptr, host, bytes);
    return ptr;
}

static void poison(const gpu *g, CUdeviceptr ptr, size_t bytes)
{
    gpu_poison(g, ptr, bytes, POISON);
}

/* Synchronises, downloads `bytes` (host has no room for the tail), and
 * checks the tail is untouched. */
static void download(const gpu *g, void *host, CUdeviceptr ptr, size_t bytes, const char *what)
{
    unsigned char *buffer = host_alloc(bytes + TAIL_BYTES);
    gpu_download(g, buffer, ptr, bytes, POISON, "", what);
    memcpy(host, buffer, bytes);
    free(buffer);
}

static tk_tensor tensor1(CUdeviceptr data, tk_dtype dtype, int64_t length)
{
    int64_t shape[1] = {length};
    return tk_tensor_contiguous((void *)(uintptr_t)data, dtype, 1, shape);
}

static tk_tensor tensor2(CUdeviceptr data, tk_dtype dtype, int64_t rows, int64_t cols)
{
    int64_t shape[2] = {rows, cols};
    return tk_tensor_contiguous((void *)(uintptr_t)data, dtype, 2, shape);
}

/* Byte comparison of `count` elements, reporting the first mismatch. */
static void expect_same(const void *got, const void *want, int64_t count, size_t size,
                        const char *what)
{
    size_t first = ref_first_difference(got, want, (size_t)count * size);
    if (first == SIZE_MAX)
        return;
    int64_t index = (int64_t)(first / size);
    int64_t a = 0, b = 0;
    memcpy(&a, (const char *)got + index * size, size);
    memcpy(&b, (const char *)want + index * size, size);
    int64_t mismatches = 0;
    for (int64_t i = index; i < count; i++)
        mismatches += memcmp((const char *)got + i * size, (const char *)want + i * size,
                             size) != 0;
    cr_assert_fail("%s: element %lld is 0x%llx, expected 0x%llx; %lld of %lld differ", what,
                   (long long)index, (unsigned long long)a, (unsigned long long)b,
                   (long long)mismatches, (long long)count);
}

/* ---- inputs ------------------------------------------------------------------ */

/* One routing input: (tokens, topk) int64 with values in [-1, experts). */
typedef struct routing {
    char name[96];
    int64_t tokens;
    int topk, experts, total_experts, num_ep_ranks;
    int64_t *idx;
} routing;

/* Every generate_moe_params configuration (full mode) with its
 * generate_topk_idx draw, then synthetic 4001 / 8001-token inputs with
 * duplicates, -1s and values >= experts (counted as out of range). */
static int make_routings(routing *out, int max)
{
    ref_route_params params[MAX_PARAMS];
    int n = ref_route_params_list(true, params, MAX_PARAMS), count = 0;
    for (int i = 0; i < n && count < max; i++) {
        routing *r = &out[count++];
        r->idx = ref_generate_topk_idx(&params[i], test_seed() + (uint64_t)i, &r->tokens);
        cr_assert(r->idx != NULL);
        r->topk = params[i].topk;
        r->experts = params[i].num_experts;
        r->total_experts = params[i].total_experts;
        r->num_ep_ranks = params[i].num_ep_ranks;
        snprintf(r->name, sizeof r->name, "tokens %lld topk %d experts %d/%d ep %d",
                 (long long)r->tokens, r->topk, r->experts, r->total_experts,
                 r->num_ep_ranks);
    }
    static const int64_t synthetic_tokens[] = {4001, 8001};
    static const int synthetic_topk[] = {8, 9};
    for (int s = 0; s < 2 && count < max; s++)
        for (int k = 0; k < 2 && count < max; k++) {
            routing *r = &out[count++];
            r->tokens = synthetic_tokens[s];
            r->topk = synthetic_topk[k];
            r->experts = 256;
            r->total_experts = 256;
            r->num_ep_ranks = 1;
            r->idx = host_alloc((size_t)(r->tokens * r->topk) * 8);
            ref_rng rng = ref_rng_seed(test_seed() + 1000, (uint64_t)(s * 2 + k));
            for (int64_t i = 0; i < r->tokens * r->topk; i++) {
                uint64_t pick = ref_rng_next(&rng) % 300; /* -1, duplicates, >= 256 */
                r->idx[i] = pick < 20 ? -1 : (int64_t)pick - 20;
            }
            snprintf(r->name, sizeof r->name, "synthetic tokens %lld topk %d",
                     (long long)r->tokens, r->topk);
        }
    return count;
}

static void free_routings(routing *r, int count)
{
    for (int i = 0; i < count; i++)
        free(r[i].idx);
}

/* ---- group_count / aux_fi ----------------------------------------------------- */

static void run_group_count(const gpu *g, const int64_t *idx, int64_t tokens, int topk,
                            int groups, const char *what)
{
    size_t in_bytes = (size_t)(tokens * topk) * 8;
    CUdeviceptr d_idx = device_upload(g, idx, in_bytes);
    CUdeviceptr d_counts = device_alloc(g, (size_t)groups * 4);
    tk_tensor t_idx = tensor2(d_idx, TK_I64, tokens, topk);
    tk_tensor t_counts = tensor1(d_counts, TK_I32, groups);
    check_status(tk_group_count(&t_idx, &t_counts, NULL), what);
    int32_t *got = host_alloc((size_t)groups * 4), *want = host_alloc((size_t)groups * 4);
    download(g, got, d_counts, (size_t)groups * 4, what);
    ref_group_count(idx, tokens * topk, groups, want);
    expect_same(got, want, groups, 4, what);
    free(got);
    free(want);
    CU(g, cuMemFree(d_idx));
    CU(g, cuMemFree(d_counts));
}

Test(gpu_moe_route, group_count) {
    gpu g = gpu_begin();
    routing r[MAX_PARAMS];
    int n = make_routings(r, MAX_PARAMS);
    char what[160];
    for (int i = 0; i < n; i++) {
        snprintf(what, sizeof what, "group_count %.96s", r[i].name);
        run_group_count(&g, r[i].idx, r[i].tokens, r[i].topk, r[i].experts, what);
        /* the group view TileKernels also counts: idx // (E_total / G) */
        if (r[i].total_experts % 8 == 0 && r[i].tokens > 0) {
            int64_t *groups = host_alloc((size_t)(r[i].tokens * r[i].topk) * 8);
            int64_t per_group = r[i].total_experts / 8;
            for (int64_t j = 0; j < r[i].tokens * r[i].topk; j++)
                groups[j] = r[i].idx[j] < 0 ? -1 : r[i].idx[j] / per_group;
            snprintf(what, sizeof what, "group_count (8 groups) %.96s", r[i].name);
            run_group_count(&g, groups, r[i].tokens, r[i].topk, 8, what);
            free(groups);
        }
    }
    /* the largest group count the kernel holds */
    int64_t *wide = host_alloc(8001 * 8 * 8);
    ref_rng rng = ref_rng_seed(test_seed() + 7, 0);
    for (int64_t j = 0; j < 8001 * 8; j++)
        wide[j] = (int64_t)(ref_rng_next(&rng) % 4100) - 1;
    run_group_count(&g, wide, 8001, 8, 4096, "group_count 4096 groups");
    free(wide);
    free_routings(r, n);
}

Test(gpu_moe_route, aux_fi) {
    gpu g = gpu_begin();
    routing r[MAX_PARAMS];
    int n = make_routings(r, MAX_PARAMS);
    char what[160];
    for (int i = 0; i < n; i++)
        for (int pass = 0; pass < 2; pass++) {
            int naux = pass == 0 ? 1 : r[i].topk;
            snprintf(what, sizeof what, "aux_fi naux %d %.96s", naux, r[i].name);
            size_t in_bytes = (size_t)(r[i].tokens * r[i].topk) * 8;
            CUdeviceptr d_idx = device_upload(&g, r[i].idx, in_bytes);
            CUdeviceptr d_fi = device_alloc(&g, (size_t)r[i].experts * 4);
            tk_tensor t_idx = tensor2(d_idx, TK_I64, r[i].tokens, r[i].topk);
            tk_tensor t_fi = tensor1(d_fi, TK_F32, r[i].experts);
            check_status(tk_aux_fi(&t_idx, naux, &t_fi, NULL), what);
            float *got = host_alloc((size_t)r[i].experts * 4);
            float *want = host_alloc((size_t)r[i].experts * 4);
            download(&g, got, d_fi, (size_t)r[i].experts * 4, what);
            ref_aux_fi(r[i].idx, r[i].tokens, r[i].topk, r[i].experts, naux, want);
            expect_same(got, want, r[i].experts, 4, what);
            free(got);
            free(want);
            CU(&g, cuMemFree(d_idx));
            CU(&g, cuMemFree(d_fi));
        }
    free_routings(r, n);
}

/* ---- inplace_unique_group_indices ----------------------------------------------- */

static void run_unique(const gpu *g, const int64_t *idx, int64_t tokens, int topk,
                       int num_groups, const char *what)
{
    size_t bytes = (size_t)(tokens * topk) * 8;
    CUdeviceptr d_idx = device_upload(g, idx, bytes);
    tk_tensor t_idx = tensor2(d_idx, TK_I64, tokens, topk);
    check_status(tk_inplace_unique_group_indices(&t_idx, num_groups, NULL), what);
    int64_t *got = host_alloc(bytes), *want = host_alloc(bytes);
    download(g, got, d_idx, bytes, what);
    memcpy(want, idx, bytes);
    ref_inplace_unique_group_indices(want, tokens, topk);
    expect_same(got, want, tokens * topk, 8, what);
    free(got);
    free(want);
    CU(g, cuMemFree(d_idx));
}

Test(gpu_moe_route, inplace_unique_group_indices) {
    gpu g = gpu_begin();
    routing r[MAX_PARAMS];
    int n = make_routings(r, MAX_PARAMS);
    static const int group_counts[] = {8, 16, 72};
    char what[160];
    for (int i = 0; i < n; i++)
        for (int c = 0; c < 3; c++) {
            int groups = group_counts[c];
            if (r[i].total_experts % groups != 0)
                continue;
            /* TileKernels' input: topk_idx // (E_total / num_groups) */
            int64_t per_group = r[i].total_experts / groups;
            int64_t *input = host_alloc((size_t)(r[i].tokens * r[i].topk) * 8);
            for (int64_t j = 0; j < r[i].tokens * r[i].topk; j++)
                input[j] = r[i].idx[j] < 0 ? -1 : r[i].idx[j] / per_group;
            snprintf(what, sizeof what, "unique groups %d %.96s", groups, r[i].name);
            run_unique(&g, input, r[i].tokens, r[i].topk, groups, what);
            free(input);
        }
    /* many duplicates per row, both instances (K <= 16 unrolled, K > 16) */
    static const int topks[] = {1, 2, 7, 8, 9, 16, 17, 24};
    for (int k = 0; k < 8; k++) {
        int64_t tokens = 8001;
        int64_t *input = host_alloc((size_t)(tokens * topks[k]) * 8);
        ref_rng rng = ref_rng_seed(test_seed() + 20, (uint64_t)k);
        for (int64_t j = 0; j < tokens * topks[k]; j++)
            input[j] = (int64_t)(ref_rng_next(&rng) % 140) - 4; /* -4 .. 135 */
        snprintf(what, sizeof what, "unique synthetic topk %d", topks[k]);
        run_unique(&g, input, tokens, topks[k], 128, what);
        free(input);
    }
    free_routings(r, n);
}

/* ---- mask_indices_by_tp --------------------------------------------------------- */

static void run_mask(const gpu *g, const int64_t *idx, int64_t tokens, int topk, tk_dtype dtype,
                     int64_t n, int ep, int tp_rank, int ntp, const char *what)
{
    int64_t count = tokens * topk;
    size_t size = dtype == TK_I64 ? 8 : 4, bytes = (size_t)count * size;
    void *input = host_alloc(bytes);
    for (int64_t j = 0; j < count; j++) {
        if (dtype == TK_I64)
            ((int64_t *)input)[j] = idx[j];
        else
            ((int32_t *)input)[j] = (int32_t)idx[j];
    }
    CUdeviceptr d_in = device_upload(g, input, bytes);
    CUdeviceptr d_out = device_alloc(g, bytes);
    tk_tensor t_in = tensor2(d_in, dtype, tokens, topk);
    tk_tensor t_out = tensor2(d_out, dtype, tokens, topk);
    check_status(tk_mask_indices_by_tp(&t_in, n, ep, tp_rank, ntp, &t_out, NULL), what);
    void *got = host_alloc(bytes), *want = host_alloc(bytes), *unchanged = host_alloc(bytes);
    download(g, got, d_out, bytes, what);
    cr_assert(ref_mask_indices_by_tp(input, dtype, count, n, ep, tp_rank, ntp, want), "%s",
              what);
    expect_same(got, want, count, size, what);
    download(g, unchanged, d_in, bytes, what);
    expect_same(unchanged, input, count, size, "mask_indices_by_tp input must be unchanged");
    free(input);
    free(got);
    free(want);
    free(unchanged);
    CU(g, cuMemFree(d_in));
    CU(g, cuMemFree(d_out));
}

Test(gpu_moe_route, mask_indices_by_tp) {
    gpu g = gpu_begin();
    routing r[MAX_PARAMS];
    int n = make_routings(r, MAX_PARAMS);
    static const int tp_ranks[] = {2, 4, 8};
    char what[200];
    ref_rng pick = ref_rng_seed(test_seed() + 30, 0);
    for (int i = 0; i < n; i++)
        for (int c = 0; c < 3; c++) {
            int ntp = tp_ranks[c], rank = (int)(ref_rng_next(&pick) % (uint64_t)ntp);
            int64_t total = (int64_t)r[i].experts * r[i].num_ep_ranks;
            for (int d = 0; d < 2; d++) {
                tk_dtype dtype = d ? TK_I32 : TK_I64;
                snprintf(what, sizeof what, "mask tp %d/%d %s %.96s", rank, ntp,
                         d ? "i32" : "i64", r[i].name);
                run_mask(&g, r[i].idx, r[i].tokens, r[i].topk, dtype, total, r[i].num_ep_ranks,
                         rank, ntp, what);
            }
            /* global indices over every expert, so every TP rank keeps some */
            if (r[i].tokens > 0) {
                int64_t *global = host_alloc((size_t)(r[i].tokens * r[i].topk) * 8);
                for (int64_t j = 0; j < r[i].tokens * r[i].topk; j++)
                    global[j] = (int64_t)(ref_rng_next(&pick) % (uint64_t)(total + 1)) - 1;
                int ep = r[i].num_ep_ranks % ntp == 0 ? r[i].num_ep_ranks / ntp : 1;
                snprintf(what, sizeof what, "mask global tp %d/%d ep %d %.96s", rank, ntp, ep,
                         r[i].name);
                run_mask(&g, global, r[i].tokens, r[i].topk, TK_I64, total, ep, rank, ntp,
                         what);
                run_mask(&g, global, r[i].tokens, r[i].topk, TK_I32, total, ep, rank, ntp,
                         what);
                free(global);
            }
        }
    free_routings(r, n);
}

/* ---- get_fused_mapping ---------------------------------------------------------- */

/* Device and host copies of the seven outputs plus the workspace. */
typedef struct mapping_run {
    int64_t tokens, capacity;
    int topk, experts;
    CUdeviceptr pos[3], token_pos, ranges[3], workspace;
    tk_fused_mapping out;
    tk_tensor workspace_tensor;
} mapping_run;

static mapping_run mapping_setup(const gpu *g, int64_t tokens, int topk, int experts,
                                 int64_t capacity)
{
    mapping_run m;
    memset(&m, 0, sizeof m);
    m.tokens = tokens;
    m.topk = topk;
    m.experts = experts;
    m.capacity = capacity;
    for (int i = 0; i < 3; i++) {
        m.pos[i] = device_alloc(g, (size_t)capacity * 4);
        m.ranges[i] = device_alloc(g, (size_t)experts * 4);
    }
    m.token_pos = device_alloc(g, (size_t)(tokens * topk) * 4);
    int64_t elements = 0;
    check_status(tk_get_fused_mapping_workspace_size(tokens, topk, experts, &elements),
                 "workspace size");
    cr_assert(elements <= 256 * (int64_t)experts);
    m.workspace = device_alloc(g, (size_t)elements * 4);
    m.out.pos_to_expert = tensor1(m.pos[0], TK_I32, capacity);
    m.out.pos_to_token = tensor1(m.pos[1], TK_I32, capacity);
    m.out.pos_to_token_topk = tensor1(m.pos[2], TK_I32, capacity);
    m.out.token_topk_to_pos = tensor2(m.token_pos, TK_I32, tokens, topk);
    m.out.expert_start = tensor1(m.ranges[0], TK_I32, experts);
    m.out.expert_end = tensor1(m.ranges[1], TK_I32, experts);
    m.out.num_tokens_per_expert = tensor1(m.ranges[2], TK_I32, experts);
    m.workspace_tensor = tensor1(m.workspace, TK_I32, elements);
    return m;
}

static void mapping_poison(const gpu *g, const mapping_run *m)
{
    for (int i = 0; i < 3; i++) {
        poison(g, m->pos[i], (size_t)m->capacity * 4);
        poison(g, m->ranges[i], (size_t)m->experts * 4);
    }
    poison(g, m->token_pos, (size_t)(m->tokens * m->topk) * 4);
    poison(g, m->workspace, (size_t)m->workspace_tensor.shape[0] * 4);
}

static void mapping_free(const gpu *g, mapping_run *m)
{
    for (int i = 0; i < 3; i++) {
        CU(g, cuMemFree(m->pos[i]));
        CU(g, cuMemFree(m->ranges[i]));
    }
    CU(g, cuMemFree(m->token_pos));
    CU(g, cuMemFree(m->workspace));
}

/* Downloads the outputs of the last run and compares them with the
 * reference (exactly) and with the invariants. */
static void mapping_check(const gpu *g, const mapping_run *m, const int64_t *idx, int alignment,
                          const char *what)
{
    ref_fused_mapping got = {m->tokens, m->topk, m->experts, m->capacity, alignment,
                             NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    ref_fused_mapping want = got;
    int32_t *got_pos[3], *want_pos[3], *got_ranges[3], *want_ranges[3];
    int64_t entries = m->tokens * m->topk;
    for (int i = 0; i < 3; i++) {
        got_pos[i] = host_alloc((size_t)m->capacity * 4);
        want_pos[i] = host_alloc((size_t)m->capacity * 4);
        got_ranges[i] = host_alloc((size_t)m->experts * 4);
        want_ranges[i] = host_alloc((size_t)m->experts * 4);
        download(g, got_pos[i], m->pos[i], (size_t)m->capacity * 4, what);
        download(g, got_ranges[i], m->ranges[i], (size_t)m->experts * 4, what);
    }
    int32_t *got_token = host_alloc((size_t)entries * 4), *want_token = host_alloc((size_t)entries * 4);
    download(g, got_token, m->token_pos, (size_t)entries * 4, what);
    got.pos_to_expert = got_pos[0], got.pos_to_token = got_pos[1];
    got.pos_to_token_topk = got_pos[2], got.token_topk_to_pos = got_token;
    got.expert_start = got_ranges[0], got.expert_end = got_ranges[1];
    got.num_tokens_per_expert = got_ranges[2];
    want.pos_to_expert = want_pos[0], want.pos_to_token = want_pos[1];
    want.pos_to_token_topk = want_pos[2], want.token_topk_to_pos = want_token;
    want.expert_start = want_ranges[0], want.expert_end = want_ranges[1];
    want.num_tokens_per_expert = want_ranges[2];
    ref_get_fused_mapping(idx, &want);

    static const char *names[] = {"pos_to_expert", "pos_to_token", "pos_to_token_topk",
                                  "expert_start", "expert_end", "num_tokens_per_expert"};
    char label[256];
    for (int i = 0; i < 3; i++) {
        snprintf(label, sizeof label, "%s: %s", what, names[i]);
        expect_same(got_pos[i], want_pos[i], m->capacity, 4, label);
        snprintf(label, sizeof label, "%s: %s", what, names[3 + i]);
        expect_same(got_ranges[i], want_ranges[i], m->experts, 4, label);
    }
    snprintf(label, sizeof label, "%s: token_topk_to_pos", what);
    expect_same(got_token, want_token, entries, 4, label);
    char why[256];
    cr_assert(ref_check_fused_mapping(idx, &got, why, sizeof why), "%s: %s", what, why);
    for (int i = 0; i < 3; i++) {
        free(got_pos[i]);
        free(want_pos[i]);
        free(got_ranges[i]);
        free(want_ranges[i]);
    }
    free(got_token);
    free(want_token);
}

static void run_mapping(const gpu *g, const int64_t *idx, int64_t tokens, int topk, int experts,
                        int alignment, int64_t capacity, const char *what)
{
    CUdeviceptr d_idx = device_upload(g, idx, (size_t)(tokens * topk) * 8);
    tk_tensor t_idx = tensor2(d_idx, TK_I64, tokens, topk);
    mapping_run m = mapping_setup(g, tokens, topk, experts, capacity);
    check_status(tk_get_fused_mapping(&t_idx, experts, alignment, &m.out, &m.workspace_tensor,
                                      NULL),
                 what);
    mapping_check(g, &m, idx, alignment, what);
    mapping_free(g, &m);
    CU(g, cuMemFree(d_idx));
}

Test(gpu_moe_route, get_fused_mapping) {
    gpu g = gpu_begin();
    routing r[MAX_PARAMS];
    int n = make_routings(r, MAX_PARAMS);
    static const int alignments[] = {16, 64, 128};
    char what[200];
    for (int i = 0; i < n; i++)
        for (int a = 0; a < 3; a++) {
            int experts = r[i].experts;
            int64_t capacity = tk_fused_mapping_capacity(r[i].tokens, r[i].topk, experts,
                                                         alignments[a]);
            snprintf(what, sizeof what, "get_fused_mapping alignment %d %.96s", alignments[a],
                     r[i].name);
            run_mapping(&g, r[i].idx, r[i].tokens, r[i].topk, experts, alignments[a], capacity,
                        what);
        }
    /* capacities: too small (entries dropped), larger than needed, and
     * alignment 1; 1024 experts (the maximum) */
    routing *big = &r[n - 1];
    int64_t auto_capacity = tk_fused_mapping_capacity(big->tokens, big->topk, 256, 16);
    run_mapping(&g, big->idx, big->tokens, big->topk, 256, 16, auto_capacity / 3,
                "get_fused_mapping capacity / 3");
    run_mapping(&g, big->idx, big->tokens, big->topk, 256, 16, auto_capacity + 1000,
                "get_fused_mapping capacity + 1000");
    run_mapping(&g, big->idx, big->tokens, big->topk, 256, 1,
                tk_fused_mapping_capacity(big->tokens, big->topk, 256, 1),
                "get_fused_mapping alignment 1");
    int64_t tokens = 8001;
    int64_t *wide = host_alloc((size_t)tokens * 9 * 8);
    ref_rng rng = ref_rng_seed(test_seed() + 40, 0);
    for (int64_t j = 0; j < tokens * 9; j++)
        wide[j] = (int64_t)(ref_rng_next(&rng) % 1025) - 1;
    run_mapping(&g, wide, tokens, 9, 1024, 128, tk_fused_mapping_capacity(tokens, 9, 1024, 128),
                "get_fused_mapping 1024 experts");
    /* more entries than 256 chunks of 512: chunks grow */
    int64_t many = 40000;
    int64_t *large = host_alloc((size_t)many * 9 * 8);
    for (int64_t j = 0; j < many * 9; j++)
        large[j] = (int64_t)(ref_rng_next(&rng) % 33) - 1;
    run_mapping(&g, large, many, 9, 32, 16, tk_fused_mapping_capacity(many, 9, 32, 16),
                "get_fused_mapping 360000 entries");
    free(wide);
    free(large);
    free_routings(r, n);
}

/* ---- every entry point inside one captured CUDA graph --------------------------- */

Test(gpu_moe_route, graph_capture_of_every_entry_point) {
    gpu g = gpu_begin();
    ref_route_params params = {4001, 8, 256, 8, 32};
    int64_t tokens;
    int64_t *idx = ref_generate_topk_idx(&params, test_seed() + 50, &tokens);
    int topk = 8, experts = 32, alignment = 16;
    int64_t entries = tokens * topk;
    size_t bytes = (size_t)entries * 8;
    int64_t *unique_input = host_alloc(bytes);
    for (int64_t j = 0; j < entries; j++)
        unique_input[j] = idx[j] < 0 ? -1 : idx[j] / 4;
    CUdeviceptr d_idx = device_upload(&g, idx, bytes);
    CUdeviceptr d_unique = device_alloc(&g, bytes);
    CUdeviceptr d_counts = device_alloc(&g, (size_t)experts * 4);
    CUdeviceptr d_fi = device_alloc(&g, (size_t)experts * 4);
    CUdeviceptr d_masked = device_alloc(&g, bytes);
    tk_tensor t_idx = tensor2(d_idx, TK_I64, tokens, topk);
    tk_tensor t_unique = tensor2(d_unique, TK_I64, tokens, topk);
    tk_tensor t_counts = tensor1(d_counts, TK_I32, experts);
    tk_tensor t_fi = tensor1(d_fi, TK_F32, experts);
    tk_tensor t_masked = tensor2(d_masked, TK_I64, tokens, topk);
    mapping_run m = mapping_setup(&g, tokens, topk, experts,
                                  tk_fused_mapping_capacity(tokens, topk, experts, alignment));
    CUstream stream;
    CU(&g, cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    tk_stream s = (tk_stream)stream;

    /* a warm-up run loads the module outside the capture */
    check_status(tk_group_count(&t_idx, &t_counts, s), "warm-up");
    CU(&g, cuStreamSynchronize(stream));

    CUgraph graph;
    CUgraphExec exec;
    CU(&g, cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
    tk_status st[5];
    st[0] = tk_group_count(&t_idx, &t_counts, s);
    st[1] = tk_aux_fi(&t_idx, topk, &t_fi, s);
    st[2] = tk_inplace_unique_group_indices(&t_unique, 8, s);
    st[3] = tk_mask_indices_by_tp(&t_idx, 256, 8, 1, 2, &t_masked, s);
    st[4] = tk_get_fused_mapping(&t_idx, experts, alignment, &m.out, &m.workspace_tensor, s);
    CU(&g, cuStreamEndCapture(stream, &graph));
    for (int i = 0; i < 5; i++)
        check_status(st[i], "captured call");
    CU(&g, cuGraphInstantiateWithFlags(&exec, graph, 0));

    /* replay twice on fresh poison: the graph must not depend on state
     * the first run left behind (the workspace is re-derived each time) */
    for (int replay = 0; replay < 2; replay++) {
        poison(&g, d_counts, (size_t)experts * 4);
        poison(&g, d_fi, (size_t)experts * 4);
        poison(&g, d_masked, bytes);
        CU(&g, cuMemcpyHtoD(d_unique, unique_input, bytes));
        mapping_poison(&g, &m);
        CU(&g, cuGraphLaunch(exec, stream));
        CU(&g, cuStreamSynchronize(stream));

        int32_t counts[32], want_counts[32];
        download(&g, counts, d_counts, sizeof counts, "captured group_count");
        ref_group_count(idx, entries, experts, want_counts);
        expect_same(counts, want_counts, experts, 4, "captured group_count");
        float fi[32], want_fi[32];
        download(&g, fi, d_fi, sizeof fi, "captured aux_fi");
        ref_aux_fi(idx, tokens, topk, experts, topk, want_fi);
        expect_same(fi, want_fi, experts, 4, "captured aux_fi");
        int64_t *got = host_alloc(bytes), *want = host_alloc(bytes);
        download(&g, got, d_unique, bytes, "captured unique");
        memcpy(want, unique_input, bytes);
        ref_inplace_unique_group_indices(want, tokens, topk);
        expect_same(got, want, entries, 8, "captured inplace_unique_group_indices");
        download(&g, got, d_masked, bytes, "captured mask");
        ref_mask_indices_by_tp(idx, TK_I64, entries, 256, 8, 1, 2, want);
        expect_same(got, want, entries, 8, "captured mask_indices_by_tp");
        free(got);
        free(want);
        mapping_check(&g, &m, idx, alignment, "captured get_fused_mapping");
    }
    CU(&g, cuGraphExecDestroy(exec));
    CU(&g, cuGraphDestroy(graph));
    CU(&g, cuStreamDestroy(stream));
    mapping_free(&g, &m);
    CU(&g, cuMemFree(d_idx));
    CU(&g, cuMemFree(d_unique));
    CU(&g, cuMemFree(d_counts));
    CU(&g, cuMemFree(d_fi));
    CU(&g, cuMemFree(d_masked));
    free(unique_input);
    free(idx);
}

/* ---- argument validation (no GPU needed) ----------------------------------------- */

static void expect_invalid(tk_status status, const char *needle, const char *what)
{
    cr_assert_eq(status, TK_ERROR_INVALID_ARGUMENT, "%s: got %s", what,
                 tk_status_string(status));
    cr_assert(strstr(tk_last_error(), needle) != NULL, "%s: message '%s' lacks '%s'", what,
              tk_last_error(), needle);
}

Test(moe_route_api, bad_arguments_are_rejected_before_any_launch) {
    /* fake, aligned, never dereferenced device addresses */
    void *p = (void *)(uintptr_t)0x10000;
    int64_t s2[2] = {100, 8}, s1[1] = {32};
    tk_tensor idx = tk_tensor_contiguous(p, TK_I64, 2, s2);
    tk_tensor counts = tk_tensor_contiguous(p, TK_I32, 1, s1);
    tk_tensor fi = tk_tensor_contiguous(p, TK_F32, 1, s1);
    tk_tensor f32_idx = tk_tensor_contiguous(p, TK_F32, 2, s2);
    tk_tensor strided = idx;
    strided.strides[0] = 16;

    expect_invalid(tk_group_count(NULL, &counts, NULL), "group_idx", "NULL idx");
    expect_invalid(tk_group_count(&f32_idx, &counts, NULL), "dtype", "f32 idx");
    expect_invalid(tk_group_count(&strided, &counts, NULL), "group_idx", "strided idx");
    expect_invalid(tk_group_count(&idx, &fi, NULL), "counts", "f32 counts");
    tk_tensor huge = counts;
    huge.shape[0] = 5000;
    expect_invalid(tk_group_count(&idx, &huge, NULL), "num_groups", "5000 groups");
    tk_tensor none = counts;
    none.shape[0] = 0;
    expect_invalid(tk_group_count(&idx, &none, NULL), "num_groups", "0 groups");

    expect_invalid(tk_aux_fi(&idx, 0, &fi, NULL), "num_aux_topk", "num_aux_topk 0");
    expect_invalid(tk_aux_fi(&idx, 1, &counts, NULL), "fi", "i32 fi");

    expect_invalid(tk_inplace_unique_group_indices(&idx, 129, NULL), "num_groups", "129");
    expect_invalid(tk_inplace_unique_group_indices(&idx, 0, NULL), "num_groups", "0");
    expect_invalid(tk_inplace_unique_group_indices(&strided, 8, NULL), "group_indices",
                   "strided");

    tk_tensor out32 = tk_tensor_contiguous(p, TK_I32, 2, s2);
    expect_invalid(tk_mask_indices_by_tp(&idx, 256, 8, 0, 2, &out32, NULL), "out",
                   "dtype mismatch");
    expect_invalid(tk_mask_indices_by_tp(&idx, 256, 0, 0, 2, &idx, NULL), "num_ep_ranks",
                   "0 ranks");
    expect_invalid(tk_mask_indices_by_tp(&idx, 256, 8, 2, 2, &idx, NULL), "tp_rank",
                   "tp_rank 2 of 2");
    expect_invalid(tk_mask_indices_by_tp(&idx, 4, 8, 0, 2, &idx, NULL), "n is 4",
                   "per_gpu 0");
    expect_invalid(tk_mask_indices_by_tp(&idx, 256, 8, 0, 0, &idx, NULL), "num_tp_ranks",
                   "0 tp ranks");
    int64_t other[2] = {100, 9};
    tk_tensor wrong_shape = tk_tensor_contiguous(p, TK_I64, 2, other);
    expect_invalid(tk_mask_indices_by_tp(&idx, 256, 8, 0, 2, &wrong_shape, NULL), "out",
                   "shape mismatch");

    int64_t elements = 0;
    cr_assert_eq(tk_get_fused_mapping_workspace_size(100, 8, 32, &elements), TK_SUCCESS);
    cr_assert_eq(elements, 4 * 32, "800 entries are four chunks of 256");
    cr_assert_eq(tk_get_fused_mapping_workspace_size(0, 8, 32, &elements), TK_SUCCESS);
    cr_assert_eq(elements, 0);
    expect_invalid(tk_get_fused_mapping_workspace_size(-1, 8, 32, &elements), "num_tokens",
                   "negative tokens");
    cr_assert_eq(tk_fused_mapping_capacity(4001, 8, 32, 16), (4001 * 8 + 15 * 32) / 16 * 16);
    cr_assert_eq(tk_fused_mapping_capacity(1, 0, 1, 1), -1);

    int64_t n_cap[1] = {1024}, n_e[1] = {32}, n_w[1] = {128};
    tk_fused_mapping m;
    m.pos_to_expert = tk_tensor_contiguous(p, TK_I32, 1, n_cap);
    m.pos_to_token = m.pos_to_expert;
    m.pos_to_token_topk = m.pos_to_expert;
    m.token_topk_to_pos = tk_tensor_contiguous(p, TK_I32, 2, s2);
    m.expert_start = tk_tensor_contiguous(p, TK_I32, 1, n_e);
    m.expert_end = m.expert_start;
    m.num_tokens_per_expert = m.expert_start;
    tk_tensor workspace = tk_tensor_contiguous(p, TK_I32, 1, n_w);
    expect_invalid(tk_get_fused_mapping(&idx, 32, 16, NULL, &workspace, NULL), "out",
                   "NULL out");
    expect_invalid(tk_get_fused_mapping(&idx, 1025, 16, &m, &workspace, NULL), "num_experts",
                   "1025 experts");
    expect_invalid(tk_get_fused_mapping(&idx, 32, 0, &m, &workspace, NULL), "alignment",
                   "alignment 0");
    expect_invalid(tk_get_fused_mapping(&idx, 16, 16, &m, &workspace, NULL), "expert_start",
                   "E mismatch");
    tk_fused_mapping bad = m;
    bad.pos_to_token.shape[0] = 1000;
    expect_invalid(tk_get_fused_mapping(&idx, 32, 16, &bad, &workspace, NULL), "pos_to_token",
                   "capacity mismatch");
    bad = m;
    bad.token_topk_to_pos.dtype = TK_I64;
    expect_invalid(tk_get_fused_mapping(&idx, 32, 16, &bad, &workspace, NULL),
                   "token_topk_to_pos", "i64 token_topk_to_pos");
    tk_tensor small = workspace;
    small.shape[0] = 127;
    expect_invalid(tk_get_fused_mapping(&idx, 32, 16, &m, &small, NULL), "workspace",
                   "workspace too small");
    expect_invalid(tk_get_fused_mapping(&idx, 32, 16, &m, NULL, NULL), "workspace",
                   "NULL workspace");
}
