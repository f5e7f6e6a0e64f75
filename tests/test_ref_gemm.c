/*
 * test_ref_gemm.c -- CPU tests of the GEMM references (tests/ref/ref_gemm.c)
 * against naive formulas written here independently: bf16 and e4m3 decoded
 * from their bit fields, products summed in long double, the fp8 scales
 * applied by dequantising each operand first (the reference scales each K
 * block's sum instead; the two agree to rounding).  Also: exact small
 * products, ragged K blocks, every f32 scale layout, scales produced by
 * the per-token and per-block cast references (the layouts the GPU kernel
 * reads), the relative-error measure (NaN never passes) and argument
 * rejection.  No GPU needed.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref_gemm.h"

/* ---- independent decoders ------------------------------------------------ */

static double naive_bf16(uint16_t bits) {
    uint32_t wide = (uint32_t)bits << 16;
    float value;
    memcpy(&value, &wide, 4);
    return value;
}

/* e4m3fn: bias 7, no infinities, S.1111.111 is NaN. */
static double naive_e4m3(uint8_t code) {
    int sign = code >> 7, exponent = (code >> 3) & 15, mantissa = code & 7;
    if (exponent == 15 && mantissa == 7)
        return NAN;
    double magnitude = exponent == 0 ? ldexp(mantissa, -9)
                                     : ldexp(8 + mantissa, exponent - 10);
    return sign ? -magnitude : magnitude;
}

static uint16_t *random_bf16(int64_t rows, int64_t cols, uint64_t seed) {
    uint16_t *data = malloc((size_t)(rows * cols + 1) * 2);
    cr_assert(data);
    ref_fill_rand_float(data, TK_BF16, rows, cols, -3, 3, seed);
    return data;
}

static uint8_t *random_e4m3(int64_t rows, int64_t cols, uint64_t seed) {
    uint8_t *data = malloc((size_t)(rows * cols + 1));
    cr_assert(data);
    ref_fill_rand_e4m3(data, rows * cols, seed);
    return data;
}

/* Random positive scales in every slot of an SF buffer (padding too). */
static float *random_scales(const ref_sf_shape *shape, uint64_t seed) {
    size_t count = shape->bytes / 4;
    float *sf = malloc((count ? count : 1) * 4);
    cr_assert(sf);
    ref_rng rng = ref_rng_seed(seed, 7);
    for (size_t i = 0; i < count; i++)
        sf[i] = ldexpf(1.0f + ref_rng_uniform(&rng), (int)(ref_rng_next(&rng) % 9) - 12);
    return sf;
}

static double naive_bf16_product(const uint16_t *a, const uint16_t *b, int64_t k, int64_t i,
                                 int64_t j) {
    long double sum = 0;
    for (int64_t c = 0; c < k; c++)
        sum += (long double)naive_bf16(a[i * k + c]) * naive_bf16(b[j * k + c]);
    return (double)sum;
}

/* Dequantise both operands with their scales, then the plain product. */
static double naive_fp8_product(const ref_gemm_problem *p, int64_t i, int64_t j) {
    const uint8_t *a = p->a, *b = p->b;
    long double sum = 0;
    for (int64_t c = 0; c < p->k; c++) {
        long double x = naive_e4m3(a[i * p->k + c]) *
                        (long double)ref_sf_load(&p->sfa_shape, p->sfa, i, c / 128);
        long double y = naive_e4m3(b[j * p->k + c]) *
                        (long double)ref_sf_load(&p->sfb_shape, p->sfb, j / 128, c / 128);
        sum += x * y;
    }
    return (double)sum;
}

/* |got - want| within 1e-12 of the row's scale (sum of |terms|). */
static void expect_close(double got, double want, double scale, const char *what, int64_t i,
                         int64_t j) {
    cr_assert(fabs(got - want) <= 1e-12 * scale + 1e-300, "%s [%ld, %ld]: %.17g vs %.17g", what,
              (long)i, (long)j, got, want);
}

/* ---- bf16 ------------------------------------------------------------------ */

Test(ref_gemm_bf16, exact_small_product) {
    /* a = [[1, 2], [3, 4], [-1, 0.5]], b = [[1, 0], [0, 1], [2, -2]] */
    const float av[] = {1, 2, 3, 4, -1, 0.5f}, bv[] = {1, 0, 0, 1, 2, -2};
    const float want[] = {1, 2, -2, 3, 4, -2, -1, 0.5f, -3};
    uint16_t a[6], b[6];
    for (int i = 0; i < 6; i++) {
        a[i] = ref_bf16_from_f32(av[i]);
        b[i] = ref_bf16_from_f32(bv[i]);
    }
    ref_gemm_problem p = {.m = 3, .n = 3, .k = 2, .a = a, .b = b};
    float out[9];
    cr_assert(ref_gemm(&p, false, out));
    for (int i = 0; i < 9; i++)
        cr_assert_eq(out[i], want[i], "element %d: %g, expected %g", i, out[i], want[i]);
    cr_assert_eq(ref_gemm_bf16_element(&p, 2, 1), 0.5);
}

static void check_bf16_shape(int64_t m, int64_t n, int64_t k, int64_t stride, uint64_t seed) {
    uint16_t *a = random_bf16(m, k, seed), *b = random_bf16(n, k, seed + 1);
    float *out = malloc((size_t)(m * n + 1) * 4);
    cr_assert(out);
    ref_gemm_problem p = {.m = m, .n = n, .k = k, .a = a, .b = b};
    cr_assert(ref_gemm(&p, false, out));
    for (int64_t i = 0; i < m; i += stride)
        for (int64_t j = 0; j < n; j += stride) {
            double want = naive_bf16_product(a, b, k, i, j);
            double scale = 0;
            for (int64_t c = 0; c < k; c++)
                scale += fabs(naive_bf16(a[i * k + c]) * naive_bf16(b[j * k + c]));
            /* out is the double rounded to f32 once */
            cr_assert_eq(out[i * n + j], (float)ref_gemm_bf16_element(&p, i, j));
            expect_close(ref_gemm_bf16_element(&p, i, j), want, scale, "bf16", i, j);
            cr_assert(fabs((double)out[i * n + j] - want) <= 0x1p-24 * fabs(want) + 1e-12 * scale);
        }
    free(a);
    free(b);
    free(out);
}

Test(ref_gemm_bf16, against_naive_small_and_ragged) {
    check_bf16_shape(37, 45, 100, 1, 1);
    check_bf16_shape(200, 328, 1000, 7, 2);
    check_bf16_shape(1, 1, 1, 1, 3);
}

Test(ref_gemm_bf16, against_naive_aligned) {
    check_bf16_shape(256, 512, 1024, 31, 4);
}

Test(ref_gemm_bf16, empty_k_gives_zeros) {
    uint16_t a[1] = {0}, b[1] = {0};
    ref_gemm_problem p = {.m = 2, .n = 3, .k = 0, .a = a, .b = b};
    float out[6];
    memset(out, 0xFF, sizeof out);
    cr_assert(ref_gemm(&p, false, out));
    for (int i = 0; i < 6; i++)
        cr_assert_eq(out[i], 0.0f);
}

/* ---- fp8 block-scaled ---------------------------------------------------- */

static void check_fp8_shape(int64_t m, int64_t n, int64_t k, tk_sf_layout sfa_layout,
                            tk_sf_layout sfb_layout, uint64_t seed) {
    uint8_t *a = random_e4m3(m, k, seed), *b = random_e4m3(n, k, seed + 1);
    ref_gemm_problem p = {.m = m, .n = n, .k = k, .a = a, .b = b};
    cr_assert(ref_sf_shape_of(m, k, 1, 128, sfa_layout, &p.sfa_shape));
    cr_assert(ref_sf_shape_of(n, k, 128, 128, sfb_layout, &p.sfb_shape));
    float *sfa = random_scales(&p.sfa_shape, seed + 2);
    float *sfb = random_scales(&p.sfb_shape, seed + 3);
    p.sfa = sfa;
    p.sfb = sfb;
    float *out = malloc((size_t)(m * n) * 4);
    cr_assert(out);
    cr_assert(ref_gemm(&p, true, out));
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double want = naive_fp8_product(&p, i, j);
            double scale = 0;
            for (int64_t c = 0; c < k; c++)
                scale += fabs(naive_e4m3(a[i * k + c]) * naive_e4m3(b[j * k + c]) *
                              ref_sf_load(&p.sfa_shape, sfa, i, c / 128) *
                              ref_sf_load(&p.sfb_shape, sfb, j / 128, c / 128));
            double element = ref_gemm_fp8_element(&p, i, j);
            expect_close(element, want, scale, "fp8", i, j);
            cr_assert_eq(out[i * n + j], (float)element);
        }
    free(a);
    free(b);
    free(sfa);
    free(sfb);
    free(out);
}

Test(ref_gemm_fp8, against_dequantised_naive_every_layout) {
    /* K 400: three full 128-blocks and a partial one; N 300: three
     * 128-row scale blocks of B, the last partial */
    tk_sf_layout layouts[] = {TK_SF_ROW_MAJOR, TK_SF_COL_MAJOR};
    for (int x = 0; x < 2; x++)
        for (int y = 0; y < 2; y++)
            check_fp8_shape(21, 300, 400, layouts[x], layouts[y], 10 + 4 * x + 2 * y);
    check_fp8_shape(5, 129, 128, TK_SF_COL_MAJOR, TK_SF_ROW_MAJOR, 20);
    check_fp8_shape(3, 7, 16, TK_SF_COL_MAJOR, TK_SF_ROW_MAJOR, 21);
}

Test(ref_gemm_fp8, scales_are_applied_per_block) {
    /* all-ones data: d[i, j] = sum over blocks of (block length) * sfa * sfb */
    int64_t m = 2, n = 130, k = 200;
    uint8_t *a = malloc((size_t)(m * k)), *b = malloc((size_t)(n * k));
    cr_assert(a && b);
    memset(a, 0x38, (size_t)(m * k)); /* e4m3 1.0 */
    memset(b, 0x38, (size_t)(n * k));
    ref_gemm_problem p = {.m = m, .n = n, .k = k, .a = a, .b = b};
    cr_assert(ref_sf_shape_of(m, k, 1, 128, TK_SF_COL_MAJOR, &p.sfa_shape));
    cr_assert(ref_sf_shape_of(n, k, 128, 128, TK_SF_ROW_MAJOR, &p.sfb_shape));
    float sfa[8] = {0}, sfb[4] = {0};
    /* sfa column-major (1, 4): block (i, kb) at kb * 4 + i */
    sfa[0] = 1, sfa[1] = 2, sfa[4] = 4, sfa[5] = 8;
    /* sfb row-major (2, 2) */
    sfb[0] = 1, sfb[1] = 0.5f, sfb[2] = 3, sfb[3] = 0.25f;
    p.sfa = sfa;
    p.sfb = sfb;
    float out[2 * 130];
    cr_assert(ref_gemm(&p, true, out));
    cr_assert_eq(out[0], 128 * 1 * 1 + 72 * 4 * 0.5f);
    cr_assert_eq(out[1 * n + 129], 128 * 2 * 3 + 72 * 8 * 0.25f);
    cr_assert_eq(out[1 * n + 127], 128 * 2 * 1 + 72 * 8 * 0.5f);
    free(a);
    free(b);
}

Test(ref_gemm_fp8, quantised_by_the_cast_references_approximates_bf16) {
    /* the layouts the kernel reads, made by per_token_cast (1 x 128,
     * column-major) and per_block_cast (128 x 128, row-major) */
    int64_t m = 96, n = 200, k = 384;
    uint16_t *x = random_bf16(m, k, 30), *w = random_bf16(n, k, 31);
    uint8_t *a = malloc((size_t)(m * k)), *b = malloc((size_t)(n * k));
    ref_gemm_problem p = {.m = m, .n = n, .k = k, .a = a, .b = b};
    cr_assert(ref_sf_shape_of(m, k, 1, 128, TK_SF_COL_MAJOR, &p.sfa_shape));
    cr_assert(ref_sf_shape_of(n, k, 128, 128, TK_SF_ROW_MAJOR, &p.sfb_shape));
    float *sfa = calloc(p.sfa_shape.bytes / 4, 4), *sfb = calloc(p.sfb_shape.bytes / 4, 4);
    cr_assert(a && b && sfa && sfb);
    cr_assert(ref_per_token_cast_e4m3(x, TK_BF16, m, k, k, 128, false, TK_SF_COL_MAJOR, a, sfa));
    cr_assert(ref_cast_e4m3(w, TK_BF16, n, k, k, 128, 128, false, TK_SF_ROW_MAJOR, b, sfb));
    p.sfa = sfa;
    p.sfb = sfb;
    float *got = malloc((size_t)(m * n) * 4), *want = malloc((size_t)(m * n) * 4);
    uint16_t *got_bf16 = malloc((size_t)(m * n) * 2);
    cr_assert(got && want && got_bf16);
    cr_assert(ref_gemm(&p, true, got));
    ref_gemm_problem exact = {.m = m, .n = n, .k = k, .a = x, .b = w};
    cr_assert(ref_gemm(&exact, false, want));
    ref_gemm_round_bf16(got, m * n, got_bf16);
    /* e4m3 keeps 3 mantissa bits: a few percent per element */
    double error = ref_gemm_relative_error(got_bf16, want, m, n, n);
    cr_assert(error < 0.08, "fp8 vs bf16 relative error %g", error);
    cr_assert(error > 1e-3, "fp8 vs bf16 relative error %g: quantisation had no effect?", error);
    free(x), free(w), free(a), free(b), free(sfa), free(sfb), free(got), free(want),
        free(got_bf16);
}

/* ---- the comparison and argument checks --------------------------------- */

Test(ref_gemm_error, norms_nan_and_regions) {
    float want[4] = {3, 4, 0, 0};
    uint16_t got[4];
    ref_gemm_round_bf16(want, 4, got);
    cr_assert_eq(ref_gemm_relative_error(got, want, 2, 2, 2), 0.0);
    got[0] = ref_bf16_from_f32(0); /* error 3 of norm 5 */
    cr_assert_float_eq(ref_gemm_relative_error(got, want, 2, 2, 2), 0.6, 1e-15);
    /* the region is the second row only: zero want, zero got */
    cr_assert_eq(ref_gemm_relative_error(got + 2, want + 2, 1, 2, 2), 0.0);
    got[3] = ref_bf16_from_f32(2);
    cr_assert_eq(ref_gemm_relative_error(got + 2, want + 2, 1, 2, 2), 2.0);
    got[1] = 0xFFFF; /* the poison pattern: NaN */
    cr_assert(isinf(ref_gemm_relative_error(got, want, 2, 2, 2)));
    got[1] = 0x7F80; /* +inf */
    cr_assert(isinf(ref_gemm_relative_error(got, want, 2, 2, 2)));
}

Test(ref_gemm_error, rejects_bad_problems) {
    uint16_t a[4] = {0}, b[4] = {0};
    float out[4];
    ref_gemm_problem p = {.m = -1, .n = 2, .k = 2, .a = a, .b = b};
    cr_assert_not(ref_gemm(&p, false, out));
    p.m = 2;
    p.b = NULL;
    cr_assert_not(ref_gemm(&p, false, out));
    p.b = b;
    cr_assert_not(ref_gemm(&p, true, out)); /* no scales */
    float sf[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    p.sfa = sf;
    p.sfb = sf;
    cr_assert(ref_sf_shape_of(2, 2, 1, 128, TK_SF_PACKED_UE8M0, &p.sfa_shape));
    cr_assert(ref_sf_shape_of(2, 2, 128, 128, TK_SF_ROW_MAJOR, &p.sfb_shape));
    cr_assert_not(ref_gemm(&p, true, out)); /* packed scales */
    cr_assert(ref_sf_shape_of(2, 4, 1, 128, TK_SF_COL_MAJOR, &p.sfa_shape));
    cr_assert_not(ref_gemm(&p, true, out)); /* scales of another shape */
    cr_assert(ref_sf_shape_of(2, 2, 1, 128, TK_SF_COL_MAJOR, &p.sfa_shape));
    cr_assert(ref_gemm(&p, true, out));
}
