/*
 * test_gpu_gemm.c -- golden tests of tk_gemm_bf16 and
 * tk_gemm_fp8_blockscaled (kernels/gemm.tk) against the double-precision
 * references of tests/ref/ref_gemm.c, and the differential tests of the
 * Hopper machinery (docs/hopper.md section 9).
 *
 * Criterion: ||out - ref|| / ||ref|| in double below 2e-3, over the whole
 * output and again over its last 128 rows and last 128 columns (where a
 * ragged-edge bug would hide in a whole-matrix norm).  The reference is
 * the exact product rounded once to bf16 (ref_gemm_bf16_output), which is
 * what a perfect kernel writes: against an f32 reference the ~2^-9 bf16
 * rounding of every element alone gave a 3x16 output 2.01e-3.  The
 * gemm_check tests prove the measure still fails a kernel that drops one
 * step of K, and rounds in one step.  Outputs
 * are poisoned with 0xFF bytes (bf16 NaN) with a tail that must stay
 * untouched, and a NaN never passes, so an unwritten element fails.  The
 * fp8 inputs are random bf16 matrices quantised by the cast references
 * (per_token_cast 1 x 128 with column-major scales for A, per_block_cast
 * 128 x 128 for B), the reference dequantises with the same scales.
 * Shapes: aligned to the tiles, ragged in M, N and K, small, empty K, and
 * 1024 x 1024 x 4096, and shapes with more tiles than SMs for the
 * persistent instances.  Differential: the instances with TMA off, with
 * warp specialisation off and the persistent ones (gemm_bf16) run the same
 * wgmma sequence per tile in the same order, so their outputs must equal
 * the default's bit for bit.  One test chains
 * libtk's own casts into the fp8 GEMM.  The argument tests run without a
 * GPU; the others skip there.  TK_TEST_SEED changes the inputs.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api_gemm.h"
#include "gpu_harness.h"
#include "ref_gemm.h"
#include "tk.h"
#include "tk_internal.h"

#define POISON 0xFF
#define TOLERANCE 2e-3
#define EDGE 128

static const tk__gemm_variant VARIANTS[] = {TK__GEMM_DEFAULT, TK__GEMM_TMA_OFF, TK__GEMM_WS_OFF,
                                            TK__GEMM_PERSISTENT, TK__GEMM_PERSISTENT_WS_OFF,
                                            TK__GEMM_PERSISTENT_BAND16,
                                            TK__GEMM_PERSISTENT_STORE,
                                            TK__GEMM_PERSISTENT_STORE_HALF};
/* Indexed like VARIANTS (variant_name). */
static const char *const VARIANT_NAMES[] = {"default", "tma_off", "ws_off", "persistent",
                                            "persistent_ws_off", "persistent_band16",
                                            "persistent_store", "persistent_store_half"};
/* The fp8 GEMM's instances (variants_pick_their_instances); gemm_bf16
 * has the eight of VARIANTS. */
#define FP8_VARIANTS 8
#define BF16_VARIANTS 8

/* A variant's name in the messages. */
static const char *variant_name(tk__gemm_variant variant) {
    for (int v = 0; v < BF16_VARIANTS; v++)
        if (VARIANTS[v] == variant)
            return VARIANT_NAMES[v];
    return "variant";
}

/* One GEMM problem: host operands and reference, device buffers. */
typedef struct problem {
    gpu g;
    tk_dtype input;
    int64_t m, n, k;
    void *a, *b;
    float *sfa, *sfb;
    ref_sf_shape sfa_shape, sfb_shape;
    uint16_t *want;        /* the exact product rounded once to bf16 */
    uint16_t *got, *first; /* this run's output; the default variant's */
    CUdeviceptr da, db, dd, dsfa, dsfb;
    size_t a_bytes, b_bytes, d_bytes;
} problem;

/* Random bf16 (rows, cols), magnitudes 2^-2 .. 2^2 per row. */
static uint16_t *random_bf16(int64_t rows, int64_t cols, uint64_t seed) {
    uint16_t *data = host_alloc((size_t)(rows * cols) * 2);
    ref_fill_rand_float(data, TK_BF16, rows, cols, -2, 2, test_seed() + seed);
    return data;
}

static void problem_upload(problem *p) {
    size_t element = tk_dtype_size(p->input);
    p->a_bytes = (size_t)(p->m * p->k) * element;
    p->b_bytes = (size_t)(p->n * p->k) * element;
    p->d_bytes = (size_t)(p->m * p->n) * 2;
    p->da = gpu_alloc(&p->g, p->a_bytes);
    p->db = gpu_alloc(&p->g, p->b_bytes);
    p->dd = gpu_alloc(&p->g, p->d_bytes + GPU_TAIL_BYTES);
    gpu_upload(&p->g, p->da, p->a, p->a_bytes);
    gpu_upload(&p->g, p->db, p->b, p->b_bytes);
    if (p->input == TK_E4M3) {
        p->dsfa = gpu_alloc(&p->g, p->sfa_shape.bytes);
        p->dsfb = gpu_alloc(&p->g, p->sfb_shape.bytes);
        gpu_upload(&p->g, p->dsfa, p->sfa, p->sfa_shape.bytes);
        gpu_upload(&p->g, p->dsfb, p->sfb, p->sfb_shape.bytes);
    }
    p->got = host_alloc(p->d_bytes + GPU_TAIL_BYTES);
    p->first = host_alloc(p->d_bytes + 1);
    p->want = host_alloc((size_t)(p->m * p->n) * 2);
    ref_gemm_problem r = {.m = p->m, .n = p->n, .k = p->k, .a = p->a, .b = p->b,
                          .sfa = p->sfa, .sfa_shape = p->sfa_shape, .sfb = p->sfb,
                          .sfb_shape = p->sfb_shape};
    cr_assert(ref_gemm_bf16_output(&r, p->input == TK_E4M3, p->want),
              "the reference refused the problem");
}

static void problem_bf16(problem *p, int64_t m, int64_t n, int64_t k, uint64_t seed) {
    memset(p, 0, sizeof *p);
    p->g = gpu_begin();
    p->input = TK_BF16;
    p->m = m, p->n = n, p->k = k;
    p->a = random_bf16(m, k, seed);
    p->b = random_bf16(n, k, seed + 1);
    problem_upload(p);
}

/* A by per_token_cast (1 x 128, column-major f32 scales), B by
 * per_block_cast (128 x 128, sfb_layout), from random bf16 sources. */
static void problem_fp8(problem *p, int64_t m, int64_t n, int64_t k, tk_sf_layout sfb_layout,
                        uint64_t seed) {
    memset(p, 0, sizeof *p);
    p->g = gpu_begin();
    p->input = TK_E4M3;
    p->m = m, p->n = n, p->k = k;
    cr_assert(ref_sf_shape_of(m, k, 1, 128, TK_SF_COL_MAJOR, &p->sfa_shape));
    cr_assert(ref_sf_shape_of(n, k, 128, 128, sfb_layout, &p->sfb_shape));
    p->sfa = host_alloc(p->sfa_shape.bytes);
    p->sfb = host_alloc(p->sfb_shape.bytes);
    memset(p->sfa, 0, p->sfa_shape.bytes); /* padding rows */
    memset(p->sfb, 0, p->sfb_shape.bytes);
    uint16_t *x = random_bf16(m, k, seed), *w = random_bf16(n, k, seed + 1);
    p->a = host_alloc((size_t)(m * k));
    p->b = host_alloc((size_t)(n * k));
    cr_assert(ref_per_token_cast_e4m3(x, TK_BF16, m, k, k, 128, false, TK_SF_COL_MAJOR, p->a,
                                      p->sfa));
    cr_assert(ref_cast_e4m3(w, TK_BF16, n, k, k, 128, 128, false, sfb_layout, p->b, p->sfb));
    free(x);
    free(w);
    problem_upload(p);
}

static void problem_free(problem *p) {
    gpu_free(&p->g, &p->da);
    gpu_free(&p->g, &p->db);
    gpu_free(&p->g, &p->dd);
    gpu_free(&p->g, &p->dsfa);
    gpu_free(&p->g, &p->dsfb);
    free(p->a), free(p->b), free(p->sfa), free(p->sfb), free(p->want), free(p->got),
        free(p->first);
}

static tk_tensor sf_tensor(CUdeviceptr data, const ref_sf_shape *shape) {
    return gpu_tensor2(data, shape->dtype, shape->shape[0], shape->shape[1], shape->strides[0],
                       shape->strides[1]);
}

/* Poisons d, runs one variant, downloads d into p->got (tail checked). */
static void problem_run(problem *p, tk__gemm_variant variant) {
    gpu_poison(&p->g, p->dd, p->d_bytes, POISON);
    tk_tensor a = gpu_tensor2(p->da, p->input, p->m, p->k, p->k, 1);
    tk_tensor b = gpu_tensor2(p->db, p->input, p->n, p->k, p->k, 1);
    tk_tensor d = gpu_tensor2(p->dd, TK_BF16, p->m, p->n, p->n, 1);
    tk_status status;
    if (p->input == TK_E4M3) {
        tk_tensor sfa = sf_tensor(p->dsfa, &p->sfa_shape);
        tk_tensor sfb = sf_tensor(p->dsfb, &p->sfb_shape);
        status = tk__gemm_fp8_blockscaled_variant(&a, &sfa, &b, &sfb, &d, variant, NULL);
    } else {
        status = tk__gemm_bf16_variant(&a, &b, &d, variant, NULL);
    }
    check_status(status, variant_name(variant));
    gpu_download(&p->g, p->got, p->dd, p->d_bytes, POISON, "", variant_name(variant));
}

/* The relative error over the whole output and its last EDGE rows and
 * columns, each below TOLERANCE. */
static void problem_check(const problem *p, const char *what) {
    int64_t row0 = p->m > EDGE ? p->m - EDGE : 0, col0 = p->n > EDGE ? p->n - EDGE : 0;
    struct {
        const char *name;
        int64_t row, col, rows, cols;
    } regions[] = {{"whole", 0, 0, p->m, p->n},
                   {"last rows", row0, 0, p->m - row0, p->n},
                   {"last columns", 0, col0, p->m, p->n - col0}};
    for (int r = 0; r < 3; r++) {
        int64_t offset = regions[r].row * p->n + regions[r].col;
        double error = ref_gemm_relative_error_bf16(p->got + offset, p->want + offset,
                                                    regions[r].rows, regions[r].cols, p->n);
        cr_assert(error < TOLERANCE, "%s %s %ldx%ldx%ld: %s: relative error %.3g (limit %g)",
                  gpu_dtype_name(p->input), what, (long)p->m, (long)p->n, (long)p->k,
                  regions[r].name, error, TOLERANCE);
    }
}

/* ---- the measure itself (no GPU needed) ---------------------------------- */

/* One rounding from double: 1 + 2^-8 + 2^-30 lies above the halfway point
 * between the bf16 values 1 and 1 + 2^-7 but rounds to exactly that point
 * in f32, from where ties-to-even would go down; likewise in the
 * subnormals. */
Test(gemm_check, reference_rounds_once) {
    cr_assert_eq(ref_gemm_bf16_from_double(1.0 + 0x1p-8 + 0x1p-30), 0x3F81);
    cr_assert_eq(ref_gemm_bf16_from_double(-(1.0 + 0x1p-8 + 0x1p-30)), 0xBF81);
    cr_assert_eq(ref_gemm_bf16_from_double(1.0 + 0x1p-8), 0x3F80);          /* tie: even */
    cr_assert_eq(ref_gemm_bf16_from_double(1.0 + 0x1p-7 + 0x1p-8), 0x3F82); /* tie: even */
    cr_assert_eq(ref_gemm_bf16_from_double(0x1p-134 + 0x1p-160), 0x0001);
    cr_assert_eq(ref_gemm_bf16_from_double(0x1p-140), 0x0000);
    cr_assert_eq(ref_gemm_bf16_from_double(1e300), 0x7F80);
    uint16_t nan_bits = ref_gemm_bf16_from_double(NAN);
    cr_assert((nan_bits & 0x7F80) == 0x7F80 && (nan_bits & 0x007F) != 0, "0x%04x", nan_bits);
}

/* The bf16 product of the first k_used columns of a (m, k) and b (n, k):
 * with f32_order, summed in f32 in K order and rounded to bf16 (a faithful
 * kernel), else the exact product rounded once (the reference). */
static uint16_t *product_bf16(const uint16_t *a, const uint16_t *b, int64_t m, int64_t n,
                              int64_t k, int64_t k_used, bool f32_order) {
    uint16_t *d = host_alloc((size_t)(m * n) * 2 + 2);
    if (f32_order) {
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                float sum = 0.0f;
                for (int64_t c = 0; c < k_used; c++)
                    sum = fmaf(ref_bf16_to_f32(a[i * k + c]), ref_bf16_to_f32(b[j * k + c]), sum);
                d[i * n + j] = ref_bf16_from_f32(sum);
            }
        return d;
    }
    uint16_t *a_used = host_alloc((size_t)(m * k_used) * 2 + 2);
    uint16_t *b_used = host_alloc((size_t)(n * k_used) * 2 + 2);
    for (int64_t i = 0; i < m; i++)
        memcpy(a_used + i * k_used, a + i * k, (size_t)k_used * 2);
    for (int64_t j = 0; j < n; j++)
        memcpy(b_used + j * k_used, b + j * k, (size_t)k_used * 2);
    ref_gemm_problem r = {.m = m, .n = n, .k = k_used, .a = a_used, .b = b_used};
    cr_assert(ref_gemm_bf16_output(&r, false, d));
    free(a_used);
    free(b_used);
    return d;
}

/* Against the bf16 reference a faithful f32-accumulating kernel passes
 * with room to spare (it failed 3x16x24 against the f32 reference), and
 * one that drops the last step of K fails by far, on the bf16 shapes of
 * the suite up to 256 x 512 x 1024 with the suite's seeds. */
Test(gemm_check, passes_f32_accumulation_and_fails_a_short_k) {
    static const int64_t cases[][4] = {
        {3, 16, 24, 6}, {130, 264, 72, 3}, {77, 8, 520, 4}, {256, 512, 1024, 1}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int64_t m = cases[c][0], n = cases[c][1], k = cases[c][2];
        uint16_t *a = random_bf16(m, k, (uint64_t)cases[c][3]);
        uint16_t *b = random_bf16(n, k, (uint64_t)cases[c][3] + 1);
        uint16_t *want = product_bf16(a, b, m, n, k, k, false);
        uint16_t *faithful = product_bf16(a, b, m, n, k, k, true);
        uint16_t *short_k = product_bf16(a, b, m, n, k, k - 1, false);
        cr_assert_eq(ref_gemm_relative_error_bf16(want, want, m, n, n), 0.0);
        double error = ref_gemm_relative_error_bf16(faithful, want, m, n, n);
        cr_assert(error < TOLERANCE / 4, "%ldx%ldx%ld: f32 accumulation: %.3g", (long)m,
                  (long)n, (long)k, error);
        error = ref_gemm_relative_error_bf16(short_k, want, m, n, n);
        cr_assert(error > 4 * TOLERANCE, "%ldx%ldx%ld: K - 1 gives only %.3g", (long)m, (long)n,
                  (long)k, error);
        free(a), free(b), free(want), free(faithful), free(short_k);
    }
}

/* Every variant against the reference; the others equal to the default
 * bit for bit (the persistent and cluster instances visit the tiles in
 * another order, the cluster ones multicast B's tile, but each tile is
 * computed the same way; the 128 x 128 fp8 store kernel loads its B
 * scales a step early, and the 192-row one splits a tile over three
 * warpgroups, but they promote the same products in the same order). */
static void check_all_variants(problem *p) {
    /* the fp8 GEMM's variants: the instances of kernels/gemm.tk, then the
     * persistent store kernels (tk_gemm_fp8_blockscaled runs tall) */
    static const tk__gemm_variant FP8_LIST[] = {
        TK__GEMM_DEFAULT, TK__GEMM_TMA_OFF, TK__GEMM_WS_OFF,
        TK__GEMM_CLUSTER2, TK__GEMM_CLUSTER2_WS_OFF, TK__GEMM_FP8_PERSISTENT_STORE,
        TK__GEMM_FP8_TALL_PERSISTENT_STORE, TK__GEMM_FP8_TALL_PERSISTENT_STORE_BAND16};
    static const char *const FP8_NAMES[] = {
        "default", "tma_off", "ws_off", "cluster2", "cluster2_ws_off", "persistent_store",
        "tall_persistent_store", "tall_persistent_store_band16"};
    _Static_assert(sizeof FP8_LIST / sizeof FP8_LIST[0] == FP8_VARIANTS, "fp8 variants");
    _Static_assert(sizeof FP8_NAMES / sizeof FP8_NAMES[0] == FP8_VARIANTS, "fp8 names");
    bool fp8 = p->input == TK_E4M3;
    int variants = fp8 ? FP8_VARIANTS : BF16_VARIANTS;
    for (int v = 0; v < variants; v++) {
        const char *name = fp8 ? FP8_NAMES[v] : VARIANT_NAMES[v];
        problem_run(p, fp8 ? FP8_LIST[v] : VARIANTS[v]);
        problem_check(p, name);
        if (v == 0) {
            memcpy(p->first, p->got, p->d_bytes);
            continue;
        }
        size_t at = ref_first_difference(p->got, p->first, p->d_bytes);
        cr_assert(at == SIZE_MAX,
                  "%s %ldx%ldx%ld: %s differs from default at [%ld, %ld]: 0x%04x vs 0x%04x",
                  gpu_dtype_name(p->input), (long)p->m, (long)p->n, (long)p->k,
                  name, (long)(at / 2 / (size_t)p->n), (long)(at / 2 % (size_t)p->n),
                  p->got[at / 2], p->first[at / 2]);
    }
}

static void bf16_case(int64_t m, int64_t n, int64_t k, uint64_t seed) {
    problem p;
    problem_bf16(&p, m, n, k, seed);
    check_all_variants(&p);
    problem_free(&p);
}

static void fp8_case(int64_t m, int64_t n, int64_t k, tk_sf_layout sfb_layout, uint64_t seed) {
    problem p;
    problem_fp8(&p, m, n, k, sfb_layout, seed);
    check_all_variants(&p);
    problem_free(&p);
}

/* ---- bf16 ------------------------------------------------------------------ */

Test(gemm_bf16, aligned_to_the_tiles) { bf16_case(256, 512, 1024, 1); }

Test(gemm_bf16, ragged_m_n_k) {
    bf16_case(200, 328, 1000, 2);
    bf16_case(130, 264, 72, 3);
    bf16_case(77, 8, 520, 4);
}

Test(gemm_bf16, tiny) {
    bf16_case(1, 8, 8, 5);
    bf16_case(3, 16, 24, 6);
}

Test(gemm_bf16, large_k, .timeout = 300) { bf16_case(1024, 1024, 4096, 7); }

/* More tiles than SMs, so each block of the persistent instances loops
 * over several tiles and the stage ring runs on across them: 31 x 9 = 279
 * tiles of 128 x 256 in bands of 8 block rows (the last band 7 rows, the
 * edges ragged) with 3 K blocks each (the last 8 deep), so tiles start in
 * the middle of the ring; then 32 x 8 tiles of one K block each. */
Test(gemm_bf16, persistent_many_tiles, .timeout = 300) {
    bf16_case(3900, 2248, 136, 8);
    bf16_case(4096, 2048, 64, 9);
}

/* The TMA-store epilogues (kernels/gemm_bf16_store.tk) write whole 128 x
 * 64 boxes and rely on d's tensor map to clip them: M one row past a
 * tile, N ending 8 columns into the second box of the last tile column
 * (its last two boxes wholly outside), N = 8 (three boxes outside), and,
 * with more tiles than SMs, ragged edges on tiles whose block still has
 * the stores of its previous tile in flight.  The poisoned bytes after d
 * catch a store past its end. */
Test(gemm_bf16, tma_store_edges, .timeout = 300) {
    bf16_case(129, 328, 64, 31);
    bf16_case(257, 8, 128, 32);
    bf16_case(2177, 4360, 72, 33);
}

/* ---- fp8 block-scaled ---------------------------------------------------- */

Test(gemm_fp8_blockscaled, aligned_to_the_tiles) {
    fp8_case(256, 512, 1024, TK_SF_ROW_MAJOR, 11);
}

Test(gemm_fp8_blockscaled, ragged_m_n_k) {
    /* K 1040: eight full scale blocks and a 16-deep one */
    fp8_case(200, 328, 1040, TK_SF_ROW_MAJOR, 12);
    fp8_case(130, 136, 16, TK_SF_ROW_MAJOR, 13);
    fp8_case(1, 8, 144, TK_SF_ROW_MAJOR, 14);
}

/* The cluster instances (cluster2, cluster2_ws_off) pair two vertically
 * adjacent 128-row tiles that share B.  An odd count of tile rows leaves
 * the second block of the last pair with no tile; it must still load its
 * half of the shared box and release its slots, or its partner hangs.
 * K from one ragged block (16) to odd counts of scale blocks (9, 5) and
 * 17 blocks (the ring wraps). */
Test(gemm_fp8_blockscaled, cluster_partner_without_tile, .timeout = 300) {
    fp8_case(264, 136, 1040, TK_SF_ROW_MAJOR, 21);  /* 3 tile rows: no partner tile */
    fp8_case(136, 264, 16, TK_SF_ROW_MAJOR, 22);    /* 2 x 3 tiles, one K block */
    fp8_case(392, 392, 2176, TK_SF_ROW_MAJOR, 23);  /* 4 x 4: every pair whole */
    fp8_case(8, 8, 128, TK_SF_COL_MAJOR, 24);       /* one tile; every partner empty */
    fp8_case(1000, 776, 528, TK_SF_ROW_MAJOR, 25);  /* 8 x 7 tiles, bands cut short */
}

/* More tiles than SMs, so the persistent instances' blocks walk several
 * tiles each (the pipeline's stages and parities carry over from one tile
 * to the next): the 128 x 128 tiles (given below) and the 192 x 128 ones
 * (11 x 17, 12 x 15, 11 x 18) all outnumber 132 blocks; ragged edges, an
 * odd number of K blocks (the last step's zero part1) and a one-step K. */
Test(gemm_fp8_blockscaled, persistent_walks_many_tiles, .timeout = 600) {
    fp8_case(1928, 2056, 400, TK_SF_ROW_MAJOR, 31);  /* 16 x 17 tiles, K blocks 4 */
    fp8_case(2184, 1800, 272, TK_SF_COL_MAJOR, 32);  /* 18 x 15 tiles, K blocks 3 */
    fp8_case(2056, 2184, 16, TK_SF_ROW_MAJOR, 33);   /* 17 x 18 tiles, one K block */
}

/* The TMA-store epilogues of the persistent fp8 kernels
 * (kernels/gemm_fp8_store.tk, gemm_fp8_tall.tk) write whole boxes of 64
 * columns and rely on d's tensor map to clip them: M one row past two
 * 128-row tiles (the 128-row kernel's last tile row holds one row, the
 * 192-row kernel's 65: its third warpgroup's rows all clipped), N ending
 * 8 columns into the second box of the last tile column, N = 8 (every
 * tile's second box wholly outside), K from one and a half scale blocks
 * to three (the last step's zero part1), and, with more tiles than SMs
 * (18 x 35 and 12 x 35 tiles), ragged edges on tiles whose block still
 * has the stores of its previous tile in flight.  The poisoned bytes after d catch a
 * store past its end; every instance must still equal the default bit
 * for bit. */
Test(gemm_fp8_blockscaled, tma_store_edges, .timeout = 300) {
    fp8_case(257, 328, 144, TK_SF_ROW_MAJOR, 41);
    fp8_case(129, 8, 272, TK_SF_COL_MAJOR, 42);
    fp8_case(2177, 4360, 144, TK_SF_ROW_MAJOR, 43);
}

/* persistent_store (the 128 x 128 store kernel) loads the B scales of step
 * kk + 1 during step kk and those of a tile's first step before its K
 * loop, each past KB replaced by 0: 9 K blocks (the last 16 deep, alone
 * in the last step) with N ending 72 columns into the last tile column,
 * and 17 x 22 tiles (more than SMs, so every block restarts the prefetch
 * on several tiles) of 2 K blocks (one step: only the loads before the
 * loop) with column-major B scales.  Every instance equals the default
 * bit for bit. */
Test(gemm_fp8_blockscaled, prefetched_b_scales, .timeout = 300) {
    fp8_case(300, 1352, 1040, TK_SF_ROW_MAJOR, 53);
    fp8_case(2120, 2696, 144, TK_SF_COL_MAJOR, 54);
}

/* The 192-row tiles on three consumer warpgroups (kernels/gemm_fp8_tall.tk):
 * M one row past a tile (the last tile row holds one row: the third
 * warpgroup's rows and most of the second's are clipped by TMA on load
 * and store), M one row short of two tiles, 8 K blocks with the last 16
 * deep; and 23 x 9 tiles (more than SMs, a band of 12 tile rows and one
 * of 11, or 16 and 7) with 3 K blocks and column-major B scales, so every
 * block walks several tiles with its store group in flight.  Every
 * instance equals the default bit for bit. */
Test(gemm_fp8_blockscaled, three_consumer_warpgroups, .timeout = 300) {
    fp8_case(193, 264, 912, TK_SF_ROW_MAJOR, 61);
    fp8_case(383, 136, 16, TK_SF_ROW_MAJOR, 62);
    fp8_case(4400, 1096, 272, TK_SF_COL_MAJOR, 63);
}

Test(gemm_fp8_blockscaled, column_major_sfb) {
    fp8_case(200, 328, 1040, TK_SF_COL_MAJOR, 15);
}

Test(gemm_fp8_blockscaled, large_k, .timeout = 300) {
    fp8_case(1024, 1024, 4096, TK_SF_ROW_MAJOR, 16);
}

/* libtk's casts on the device produce exactly the operands the host
 * references do, so the GEMM of their output equals the GEMM of the host
 * problem bit for bit. */
Test(gemm_fp8_blockscaled, fed_by_the_library_casts) {
    int64_t m = 200, n = 328, k = 1024;
    problem p;
    problem_fp8(&p, m, n, k, TK_SF_ROW_MAJOR, 21);
    problem_run(&p, TK__GEMM_DEFAULT);
    problem_check(&p, "host-quantised");
    memcpy(p.first, p.got, p.d_bytes);

    uint16_t *x = random_bf16(m, k, 21), *w = random_bf16(n, k, 22);
    CUdeviceptr dx = gpu_alloc(&p.g, (size_t)(m * k) * 2), dw = gpu_alloc(&p.g, (size_t)(n * k) * 2);
    gpu_upload(&p.g, dx, x, (size_t)(m * k) * 2);
    gpu_upload(&p.g, dw, w, (size_t)(n * k) * 2);
    tk_tensor tx = gpu_tensor2(dx, TK_BF16, m, k, k, 1), tw = gpu_tensor2(dw, TK_BF16, n, k, k, 1);
    tk_tensor a = gpu_tensor2(p.da, TK_E4M3, m, k, k, 1), b = gpu_tensor2(p.db, TK_E4M3, n, k, k, 1);
    tk_tensor sfa = sf_tensor(p.dsfa, &p.sfa_shape), sfb = sf_tensor(p.dsfb, &p.sfb_shape);
    /* clear what the casts must rewrite (the buffers have no tail) */
    CU(&p.g, cuMemsetD8(p.da, 0, p.a_bytes));
    CU(&p.g, cuMemsetD8(p.dsfb, 0, p.sfb_shape.bytes));
    check_status(tk_per_token_cast(&tx, 128, false, TK_SF_COL_MAJOR, &a, &sfa, NULL),
                 "tk_per_token_cast");
    check_status(tk_per_block_cast(&tw, TK_E4M3, 128, 128, false, TK_SF_ROW_MAJOR, &b, &sfb, NULL),
                 "tk_per_block_cast");
    problem_run(&p, TK__GEMM_DEFAULT);
    size_t at = ref_first_difference(p.got, p.first, p.d_bytes);
    cr_assert(at == SIZE_MAX, "GEMM of the device casts differs at element %zu", at / 2);
    gpu_free(&p.g, &dx);
    gpu_free(&p.g, &dw);
    free(x);
    free(w);
    problem_free(&p);
}

/* ---- degenerate shapes --------------------------------------------------- */

Test(gemm_bf16, empty_k_writes_zeros) {
    gpu g = gpu_begin();
    CUdeviceptr a = gpu_alloc(&g, 16), b = gpu_alloc(&g, 16), d = gpu_alloc(&g, 64 * 2 + GPU_TAIL_BYTES);
    gpu_poison(&g, d, 64 * 2, POISON);
    tk_tensor ta = gpu_tensor2(a, TK_BF16, 4, 0, 0, 1), tb = gpu_tensor2(b, TK_BF16, 16, 0, 0, 1);
    tk_tensor td = gpu_tensor2(d, TK_BF16, 4, 16, 16, 1);
    check_status(tk_gemm_bf16(&ta, &tb, &td, NULL), "tk_gemm_bf16 K = 0");
    uint16_t got[64 + GPU_TAIL_BYTES / 2];
    gpu_download(&g, got, d, 64 * 2, POISON, "", "K = 0");
    for (int i = 0; i < 64; i++)
        cr_assert_eq(got[i], 0, "element %d is 0x%04x, expected 0", i, got[i]);
    /* M = 0: nothing is written */
    gpu_poison(&g, d, 64 * 2, POISON);
    ta = gpu_tensor2(a, TK_BF16, 0, 8, 8, 1);
    tb = gpu_tensor2(b, TK_BF16, 16, 8, 8, 1);
    td = gpu_tensor2(d, TK_BF16, 0, 16, 16, 1);
    check_status(tk_gemm_bf16(&ta, &tb, &td, NULL), "tk_gemm_bf16 M = 0");
    gpu_download(&g, got, d, 0, POISON, "", "M = 0");
    gpu_free(&g, &a), gpu_free(&g, &b), gpu_free(&g, &d);
}

/* ---- arguments (no GPU needed: every call fails before a launch) -------- */

#define FAKE(offset) ((void *)(uintptr_t)(0x100000 + (offset)))

static tk_tensor fake2(tk_dtype dtype, int64_t d0, int64_t d1, int64_t s0, int64_t s1,
                       int offset) {
    tk_tensor t;
    memset(&t, 0, sizeof t);
    t.data = FAKE(offset);
    t.dtype = dtype;
    t.rank = 2;
    t.shape[0] = d0, t.shape[1] = d1;
    t.strides[0] = s0, t.strides[1] = s1;
    return t;
}

static void expect_rejected(tk_status status, tk_status expected, const char *needle) {
    cr_assert_eq(status, expected, "status %s, expected %s (%s)", tk_status_string(status),
                 tk_status_string(expected), tk_last_error());
    cr_assert(strstr(tk_last_error(), needle), "message '%s' lacks '%s'", tk_last_error(),
              needle);
    cr_assert_str_eq(tk__last_instance(), "");
}

Test(gemm_api, bf16_rejects_bad_arguments) {
    tk_tensor a = fake2(TK_BF16, 64, 128, 128, 1, 0), b = fake2(TK_BF16, 256, 128, 128, 1, 0x1000);
    tk_tensor d = fake2(TK_BF16, 64, 256, 256, 1, 0x2000);
    tk_tensor bad = a;
    bad.dtype = TK_F32;
    expect_rejected(tk_gemm_bf16(&bad, &b, &d, NULL), TK_ERROR_INVALID_ARGUMENT, "a: dtype");
    expect_rejected(tk_gemm_bf16(NULL, &b, &d, NULL), TK_ERROR_INVALID_ARGUMENT, "a is NULL");
    bad = fake2(TK_BF16, 256, 120, 120, 1, 0x1000);
    expect_rejected(tk_gemm_bf16(&a, &bad, &d, NULL), TK_ERROR_INVALID_ARGUMENT, "b: shape[1]");
    bad = fake2(TK_BF16, 64, 200, 200, 1, 0x2000);
    expect_rejected(tk_gemm_bf16(&a, &b, &bad, NULL), TK_ERROR_INVALID_ARGUMENT, "d: shape[1]");
    tk_tensor a_odd = fake2(TK_BF16, 64, 124, 124, 1, 0), b_odd = fake2(TK_BF16, 256, 124, 124, 1, 0);
    expect_rejected(tk_gemm_bf16(&a_odd, &b_odd, &d, NULL), TK_ERROR_INVALID_ARGUMENT,
                    "multiple of 8");
    tk_tensor b_n = fake2(TK_BF16, 252, 128, 128, 1, 0), d_n = fake2(TK_BF16, 64, 252, 252, 1, 0);
    expect_rejected(tk_gemm_bf16(&a, &b_n, &d_n, NULL), TK_ERROR_INVALID_ARGUMENT, "N");
    bad = fake2(TK_BF16, 64, 128, 136, 1, 0); /* padded rows */
    expect_rejected(tk_gemm_bf16(&bad, &b, &d, NULL), TK_ERROR_INVALID_ARGUMENT, "a:");
    bad = a;
    bad.data = FAKE(2);
    expect_rejected(tk_gemm_bf16(&bad, &b, &d, NULL), TK_ERROR_INVALID_ARGUMENT, "aligned");
    expect_rejected(tk__gemm_bf16_variant(&a, &b, &d, (tk__gemm_variant)7, NULL),
                    TK_ERROR_INVALID_ARGUMENT, "variant");
}

Test(gemm_api, fp8_rejects_bad_scales) {
    int64_t m = 200, n = 328, k = 1040;
    tk_tensor a = fake2(TK_E4M3, m, k, k, 1, 0), b = fake2(TK_E4M3, n, k, k, 1, 0x100000);
    tk_tensor d = fake2(TK_BF16, m, n, n, 1, 0x200000);
    tk_tensor sfa, sfb;
    size_t bytes;
    cr_assert_eq(tk_sf_desc(m, k, 1, 128, TK_SF_COL_MAJOR, &sfa, &bytes), TK_SUCCESS);
    cr_assert_eq(tk_sf_desc(n, k, 128, 128, TK_SF_ROW_MAJOR, &sfb, &bytes), TK_SUCCESS);
    sfa.data = FAKE(0x300000);
    sfb.data = FAKE(0x400000);
    tk_tensor row_major;
    cr_assert_eq(tk_sf_desc(m, k, 1, 128, TK_SF_ROW_MAJOR, &row_major, &bytes), TK_SUCCESS);
    row_major.data = sfa.data;
    expect_rejected(tk_gemm_fp8_blockscaled(&a, &row_major, &b, &sfb, &d, NULL),
                    TK_ERROR_INVALID_ARGUMENT, "TK_SF_COL_MAJOR");
    tk_tensor packed;
    cr_assert_eq(tk_sf_desc(m, k, 1, 128, TK_SF_PACKED_UE8M0, &packed, &bytes), TK_SUCCESS);
    packed.data = sfa.data;
    expect_rejected(tk_gemm_fp8_blockscaled(&a, &packed, &b, &sfb, &d, NULL),
                    TK_ERROR_UNSUPPORTED, "packed");
    tk_tensor wrong = sfb;
    wrong.shape[0] = 2;
    expect_rejected(tk_gemm_fp8_blockscaled(&a, &sfa, &b, &wrong, &d, NULL),
                    TK_ERROR_INVALID_ARGUMENT, "sfb: shape[0]");
    wrong = sfb;
    wrong.dtype = TK_BF16;
    expect_rejected(tk_gemm_fp8_blockscaled(&a, &sfa, &b, &wrong, &d, NULL),
                    TK_ERROR_INVALID_ARGUMENT, "sfb: dtype");
    tk_tensor a_k = fake2(TK_E4M3, m, 1032, 1032, 1, 0), b_k = fake2(TK_E4M3, n, 1032, 1032, 1, 0);
    expect_rejected(tk_gemm_fp8_blockscaled(&a_k, &sfa, &b_k, &sfb, &d, NULL),
                    TK_ERROR_INVALID_ARGUMENT, "multiple of 16");
    tk_tensor bf16_a = fake2(TK_BF16, m, k, k, 1, 0);
    expect_rejected(tk_gemm_fp8_blockscaled(&bf16_a, &sfa, &b, &sfb, &d, NULL),
                    TK_ERROR_INVALID_ARGUMENT, "a: dtype");
    /* the retired instance numbers (api_gemm.h) and gemm_bf16's
     * persistent ones name no fp8 kernel */
    static const int unknown[] = {TK__GEMM_PERSISTENT, 6, 9, 10, 11, 12, 13, 14, 15, 27};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++)
        expect_rejected(tk__gemm_fp8_blockscaled_variant(&a, &sfa, &b, &sfb, &d,
                                                         (tk__gemm_variant)unknown[i], NULL),
                        TK_ERROR_INVALID_ARGUMENT, "variant");
}

/* Valid calls pick the instance of their variant (set before the launch,
 * so this holds without a device too). */
Test(gemm_api, variants_pick_their_instances) {
    bool device = tk_device_check() == TK_SUCCESS;
    gpu g = {NULL};
    CUdeviceptr memory = 0;
    if (device) {
        g = gpu_begin();
        memory = gpu_alloc(&g, 1 << 20);
        CU(&g, cuMemsetD8(memory, 0, 1 << 20));
    }
    uintptr_t base = device ? (uintptr_t)memory : 0x100000;
    tk_tensor a = fake2(TK_BF16, 64, 128, 128, 1, 0), b = fake2(TK_BF16, 256, 128, 128, 1, 0);
    tk_tensor d = fake2(TK_BF16, 64, 256, 256, 1, 0);
    a.data = (void *)base;
    b.data = (void *)(base + 0x10000);
    d.data = (void *)(base + 0x20000);
    const char *bf16_names[] = {"gemm_bf16__default", "gemm_bf16__tma_off", "gemm_bf16__ws_off",
                                "gemm_bf16_persistent__default",
                                "gemm_bf16_persistent__ws_off",
                                "gemm_bf16_persistent__band16",
                                "gemm_bf16_persistent_store__default",
                                "gemm_bf16_persistent_store_half__default"};
    for (int v = 0; v < BF16_VARIANTS; v++) {
        tk_status status = tk__gemm_bf16_variant(&a, &b, &d, VARIANTS[v], NULL);
        cr_assert(device ? status == TK_SUCCESS : status != TK_SUCCESS, "%s: %s",
                  tk_status_string(status), tk_last_error());
        cr_assert_str_eq(tk__last_instance(), bf16_names[v]);
    }
    tk_tensor a8 = a, b8 = b, sfa, sfb;
    a8.dtype = b8.dtype = TK_E4M3;
    size_t bytes;
    cr_assert_eq(tk_sf_desc(64, 128, 1, 128, TK_SF_COL_MAJOR, &sfa, &bytes), TK_SUCCESS);
    cr_assert_eq(tk_sf_desc(256, 128, 128, 128, TK_SF_ROW_MAJOR, &sfb, &bytes), TK_SUCCESS);
    sfa.data = (void *)(base + 0x30000);
    sfb.data = (void *)(base + 0x40000);
    static const tk__gemm_variant fp8_variants[] = {
        TK__GEMM_DEFAULT, TK__GEMM_TMA_OFF, TK__GEMM_WS_OFF,
        TK__GEMM_CLUSTER2, TK__GEMM_CLUSTER2_WS_OFF, TK__GEMM_FP8_PERSISTENT_STORE,
        TK__GEMM_FP8_TALL_PERSISTENT_STORE, TK__GEMM_FP8_TALL_PERSISTENT_STORE_BAND16};
    const char *fp8_names[] = {"gemm_fp8_blockscaled__default", "gemm_fp8_blockscaled__tma_off",
                               "gemm_fp8_blockscaled__ws_off",
                               "gemm_fp8_blockscaled__cluster2",
                               "gemm_fp8_blockscaled__cluster2_ws_off",
                               "gemm_fp8_blockscaled_persistent_store__default",
                               "gemm_fp8_blockscaled_tall_persistent_store__default",
                               "gemm_fp8_blockscaled_tall_persistent_store__band16"};
    _Static_assert(sizeof fp8_variants / sizeof fp8_variants[0] == FP8_VARIANTS,
                   "one fp8 variant per name");
    _Static_assert(sizeof fp8_names / sizeof fp8_names[0] == FP8_VARIANTS,
                   "one name per fp8 variant");
    for (int v = 0; v < FP8_VARIANTS; v++) {
        tk_status status = tk__gemm_fp8_blockscaled_variant(&a8, &sfa, &b8, &sfb, &d,
                                                            fp8_variants[v], NULL);
        cr_assert(device ? status == TK_SUCCESS : status != TK_SUCCESS, "%s: %s",
                  tk_status_string(status), tk_last_error());
        cr_assert_str_eq(tk__last_instance(), fp8_names[v]);
    }
    if (device) {
        CU(&g, cuCtxSynchronize());
        gpu_free(&g, &memory);
    }
}
