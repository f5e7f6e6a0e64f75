/*
 * test_reference.c -- checks the CPU references (tests/ref) against naive,
 * independently written formulas, with no GPU.
 *
 * The golden GPU tests trust the references bit for bit, so the references
 * get their own oracle here: e4m3 codes checked exhaustively (every code,
 * every midpoint between neighbours), bf16 against a nearest-value search
 * in double precision, sf_and_inv against powf/log2-style formulas, the SF
 * layouts against the formulas of tilekernels-spec.md 3.5 and against
 * libtk's tk_sf_desc, and transpose / cast / cast_back against
 * element-by-element loops that share no code with the references.
 */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "reference.h"
#include "tk.h"

/* ---- naive formulas (double precision, no bit tricks) ----------------- */

/* Value of a non-NaN e4m3 code from the definition in spec 3.1. */
static double naive_e4m3_value(int code) {
    int sign = code >> 7, exponent = (code >> 3) & 15, mantissa = code & 7;
    double magnitude = exponent == 0 ? pow(2.0, -6) * mantissa / 8.0
                                     : pow(2.0, exponent - 7) * (1.0 + mantissa / 8.0);
    return sign ? -magnitude : magnitude;
}

/* Nearest code by search over the grid, ties to the even code, saturating
 * at 448, NaN -> 0x7F. */
static int naive_e4m3_encode(float x) {
    if (isnan(x))
        return 0x7F;
    int sign = signbit(x) ? 0x80 : 0;
    double a = fabs((double)x);
    if (a >= 448.0)
        return sign | 0x7E;
    int low = 0;
    while (low + 1 <= 0x7E && naive_e4m3_value(low + 1) <= a)
        low++;
    double below = a - naive_e4m3_value(low), above = naive_e4m3_value(low + 1) - a;
    int code = below < above ? low : below > above ? low + 1 : ((low & 1) ? low + 1 : low);
    return sign | code;
}

/* Value of a bf16 pattern, reading the all-ones exponent as 2^128 so
 * that overflow decisions fall out of the same comparison. */
static double naive_bf16_value(uint32_t pattern) {
    int exponent = (pattern >> 7) & 0xFF, mantissa = pattern & 0x7F;
    double magnitude = exponent == 0 ? ldexp(mantissa, -133)
                                     : ldexp(128 + mantissa, exponent - 134);
    return (pattern & 0x8000) ? -magnitude : magnitude;
}

static uint16_t naive_bf16_encode(float x) {
    uint32_t bits = ref_f32_bits(x);
    uint32_t low = bits >> 16, high = low + 1; /* truncation and next up */
    double distance_low = fabs((double)x - naive_bf16_value(low));
    double distance_high = fabs(naive_bf16_value(high) - (double)x);
    if (distance_low < distance_high)
        return (uint16_t)low;
    if (distance_low > distance_high)
        return (uint16_t)high;
    return (uint16_t)((low & 1) ? high : low);
}

/* sf_and_inv from its definition: (float)(a / 448) is the correctly
 * rounded f32 quotient (double rounding is innocuous for division). */
static void naive_sf_and_inv(float amax, bool round_sf, float *sf, float *inv,
                             int *ue8m0) {
    double a = amax > 1e-4f ? amax : (double)1e-4f;
    float raw = (float)(a / 448.0);
    if (!round_sf) {
        *sf = raw;
        *inv = (float)(448.0 / a);
        *ue8m0 = -1;
        return;
    }
    int exponent = (int)ceil(log2((double)raw));
    *sf = (float)ldexp(1.0, exponent);
    *inv = (float)ldexp(1.0, -exponent);
    *ue8m0 = exponent + 127;
}

/* ---- e4m3 ---------------------------------------------------------------- */

Test(e4m3, every_code_round_trips) {
    for (int code = 0; code < 256; code++) {
        float value = ref_e4m3_to_f32((uint8_t)code);
        int expected = (code & 0x7F) == 0x7F ? 0x7F : code;
        if ((code & 0x7F) == 0x7F)
            cr_assert(isnan(value), "code 0x%02X should decode to NaN", code);
        else
            cr_assert_eq((double)value, naive_e4m3_value(code),
                         "code 0x%02X decodes to %a, expected %a", code, value,
                         naive_e4m3_value(code));
        cr_assert_eq(ref_e4m3_from_f32(value), expected,
                     "code 0x%02X re-encodes to 0x%02X", code, ref_e4m3_from_f32(value));
    }
}

Test(e4m3, midpoints_round_to_even) {
    for (int code = 0; code < 0x7E; code++) {
        double low = naive_e4m3_value(code), high = naive_e4m3_value(code + 1);
        float middle = (float)((low + high) / 2); /* exact: 5 significant bits */
        cr_assert_eq((double)middle, (low + high) / 2);
        int even = (code & 1) ? code + 1 : code;
        for (int sign = 0; sign < 2; sign++) {
            float m = sign ? -middle : middle;
            int s = sign ? 0x80 : 0;
            cr_assert_eq(ref_e4m3_from_f32(m), s | even,
                         "midpoint %a of 0x%02X/0x%02X gave 0x%02X", m, code,
                         code + 1, ref_e4m3_from_f32(m));
            float below = nextafterf(m, 0.0f), above = nextafterf(m, sign ? -INFINITY : INFINITY);
            cr_assert_eq(ref_e4m3_from_f32(below), s | code, "just below %a", m);
            cr_assert_eq(ref_e4m3_from_f32(above), s | (code + 1), "just above %a", m);
        }
    }
}

Test(e4m3, saturation_nan_zero_and_probe_values) {
    /* tilekernels-spec.md appendix A, measured on an H200 */
    struct { float in; int out; } cases[] = {
        {0.0f, 0x00}, {-0.0f, 0x80}, {0x1p-10f, 0x00}, {0x1p-9f, 0x01},
        {0x1.8p-9f, 0x02}, {-0.1f, 0x9D}, {0.25f, 0x28}, {0.2500001f, 0x28},
        {448.0f, 0x7E}, {449.0f, 0x7E}, {464.0f, 0x7E}, {464.01f, 0x7E},
        {480.0f, 0x7E}, {1000.0f, 0x7E}, {-1000.0f, 0xFE}, {65504.0f, 0x7E},
        {FLT_MAX, 0x7E}, {-FLT_MAX, 0xFE}, {INFINITY, 0x7E}, {-INFINITY, 0xFE},
        {NAN, 0x7F}, {-NAN, 0x7F}, {0x1p-149f, 0x00}, {-0x1p-149f, 0x80},
        {0x1p-126f, 0x00}, {0x1.fffffep-11f, 0x00}, {0x1.000002p-10f, 0x01},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        cr_assert_eq(ref_e4m3_from_f32(cases[i].in), cases[i].out,
                     "%a -> 0x%02X, expected 0x%02X", cases[i].in,
                     ref_e4m3_from_f32(cases[i].in), cases[i].out);
}

Test(e4m3, random_values_match_grid_search) {
    ref_rng rng = ref_rng_seed(1, 0);
    for (int i = 0; i < 200000; i++) {
        /* random bit patterns over the e4m3 range and around it */
        uint32_t bits = (uint32_t)ref_rng_next(&rng);
        int exponent = 127 - 16 + (int)(ref_rng_next(&rng) % 28);
        bits = (bits & 0x807FFFFFu) | ((uint32_t)exponent << 23);
        float x = ref_f32_from_bits(bits);
        cr_assert_eq(ref_e4m3_from_f32(x), naive_e4m3_encode(x), "%a -> 0x%02X, naive 0x%02X",
                     x, ref_e4m3_from_f32(x), naive_e4m3_encode(x));
    }
}

/* ---- bf16 ---------------------------------------------------------------- */

Test(bf16, rounding_cases) {
    struct { uint32_t in; uint16_t out; } cases[] = {
        {0x3F800000u, 0x3F80}, {0x3F808000u, 0x3F80}, /* tie, even below */
        {0x3F818000u, 0x3F82}, /* tie, even above */
        {0x3F808001u, 0x3F81}, {0x3F807FFFu, 0x3F80},
        {0xBF818000u, 0xBF82}, {0x00008000u, 0x0000}, {0x00018000u, 0x0002},
        {0x7F7FFFFFu, 0x7F80}, /* FLT_MAX overflows to inf */
        {0x7F7F7FFFu, 0x7F7F}, {0x7F7F8000u, 0x7F80}, /* tie at the top: even is inf */
        {0xFF7FFFFFu, 0xFF80}, {0x7F800000u, 0x7F80}, {0xFF800000u, 0xFF80},
        {0x80000000u, 0x8000}, {0x00000000u, 0x0000},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint16_t got = ref_bf16_from_f32(ref_f32_from_bits(cases[i].in));
        cr_assert_eq(got, cases[i].out, "0x%08X -> 0x%04X, expected 0x%04X",
                     cases[i].in, got, cases[i].out);
    }
}

Test(bf16, nan_stays_quiet_nan) {
    uint32_t nans[] = {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFF800001u,
                       0x7FFFFFFFu, 0x7F80FFFFu};
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
        uint16_t got = ref_bf16_from_f32(ref_f32_from_bits(nans[i]));
        cr_assert((got & 0x7F80) == 0x7F80 && (got & 0x7F) != 0,
                  "NaN 0x%08X became 0x%04X", nans[i], got);
        cr_assert(got & 0x40, "NaN 0x%08X is not quiet: 0x%04X", nans[i], got);
        cr_assert_eq(got >> 15, nans[i] >> 31, "sign of NaN 0x%08X lost", nans[i]);
    }
}

Test(bf16, random_values_match_nearest_search) {
    ref_rng rng = ref_rng_seed(2, 0);
    for (int i = 0; i < 500000; i++) {
        uint32_t bits = (uint32_t)ref_rng_next(&rng);
        if ((bits & 0x7F800000u) == 0x7F800000u)
            continue; /* inf and NaN are covered above */
        if (i % 4 == 0)
            bits = (bits & 0xFFFF0000u) | 0x8000u; /* exact ties */
        float x = ref_f32_from_bits(bits);
        cr_assert_eq(ref_bf16_from_f32(x), naive_bf16_encode(x),
                     "0x%08X -> 0x%04X, naive 0x%04X", bits, ref_bf16_from_f32(x),
                     naive_bf16_encode(x));
        cr_assert_eq(ref_f32_bits(ref_bf16_to_f32(ref_bf16_from_f32(x))),
                     (uint32_t)ref_bf16_from_f32(x) << 16);
    }
}

/* ---- scales -------------------------------------------------------------- */

static void check_scale(float amax) {
    for (int round_sf = 0; round_sf < 2; round_sf++) {
        ref_scale got = ref_sf_and_inv(amax, round_sf);
        float sf, inv;
        int ue8m0;
        naive_sf_and_inv(amax, round_sf, &sf, &inv, &ue8m0);
        cr_assert_eq(ref_f32_bits(got.sf), ref_f32_bits(sf),
                     "amax %a round %d: sf %a, naive %a", amax, round_sf, got.sf, sf);
        cr_assert_eq(ref_f32_bits(got.inv), ref_f32_bits(inv),
                     "amax %a round %d: inv %a, naive %a", amax, round_sf, got.inv, inv);
        if (round_sf) {
            cr_assert_eq(got.ue8m0, ue8m0, "amax %a: ue8m0 %d, naive %d", amax,
                         got.ue8m0, ue8m0);
            cr_assert_eq(ref_f32_bits(ref_ue8m0_to_f32(got.ue8m0)), ref_f32_bits(got.sf));
            /* the rounded scale is the next power of two: never below */
            float raw = fmaxf(amax, 1e-4f) / 448.0f;
            cr_assert(got.sf >= raw && got.sf / 2 < raw, "amax %a: %a not next pow2 of %a",
                      amax, got.sf, raw);
        }
    }
}

Test(scale, sf_and_inv_matches_formula) {
    float fixed[] = {0.0f, 1e-30f, 0x1p-149f, 1e-5f, 9.999e-5f, 1e-4f,
                     nextafterf(1e-4f, 1.0f), nextafterf(1e-4f, 0.0f), 1.0f, 448.0f,
                     nextafterf(448.0f, 0.0f), nextafterf(448.0f, 1e9f), 896.0f,
                     3.0f, 1e10f, FLT_MAX / 8, FLT_MAX / 448};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        check_scale(fixed[i]);
    /* amax = 448 * 2^k makes sf exactly a power of two (no bump), and one
     * ulp either side moves it */
    for (int k = -20; k < 100; k++) {
        float exact = ldexpf(448.0f, k);
        check_scale(exact);
        check_scale(nextafterf(exact, 0.0f));
        check_scale(nextafterf(exact, INFINITY));
    }
    ref_rng rng = ref_rng_seed(3, 0);
    for (int i = 0; i < 200000; i++) {
        int exponent = -140 + (int)(ref_rng_next(&rng) % 260);
        check_scale(ldexpf(1.0f + ref_rng_uniform(&rng), exponent));
    }
}

Test(scale, ue8m0_values) {
    cr_assert_eq(ref_f32_bits(ref_ue8m0_to_f32(0)), 0u, "byte 0 is +0.0");
    cr_assert_eq(ref_ue8m0_to_f32(1), 0x1p-126f);
    cr_assert_eq(ref_ue8m0_to_f32(127), 1.0f);
    cr_assert_eq(ref_ue8m0_to_f32(254), 0x1p127f);
}

/* ---- SF layouts ---------------------------------------------------------- */

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

Test(layout, shapes_match_spec_and_tk_sf_desc) {
    int64_t rows_list[] = {0, 1, 3, 4, 5, 127, 128, 129, 4001};
    int64_t cols_list[] = {64, 576, 2048, 7168};
    int blocks[][2] = {{1, 32}, {1, 64}, {1, 128}, {128, 128}, {128, 1}, {32, 32}, {1, 7168}};
    for (size_t r = 0; r < sizeof rows_list / sizeof *rows_list; r++)
        for (size_t c = 0; c < sizeof cols_list / sizeof *cols_list; c++)
            for (size_t b = 0; b < sizeof blocks / sizeof *blocks; b++)
                for (int layout = 0; layout < 3; layout++) {
                    int64_t rows = rows_list[r], cols = cols_list[c];
                    int bm = blocks[b][0], bk = blocks[b][1];
                    ref_sf_shape s;
                    cr_assert(ref_sf_shape_of(rows, cols, bm, bk, layout, &s));
                    int64_t nbm = cdiv(rows, bm), nbk = cdiv(cols, bk);
                    int64_t padded = cdiv(nbm, 4) * 4;
                    cr_assert_eq(s.nbm, nbm);
                    cr_assert_eq(s.nbk, nbk);
                    if (layout == TK_SF_ROW_MAJOR) {
                        cr_assert(s.dtype == TK_F32 && s.shape[0] == nbm && s.shape[1] == nbk &&
                                  s.strides[0] == nbk && s.strides[1] == 1 &&
                                  s.bytes == (size_t)(nbm * nbk * 4));
                    } else if (layout == TK_SF_COL_MAJOR) {
                        cr_assert(s.dtype == TK_F32 && s.shape[0] == nbm && s.shape[1] == nbk &&
                                  s.strides[0] == 1 && s.strides[1] == padded &&
                                  s.bytes == (size_t)(nbk * padded * 4));
                    } else {
                        cr_assert(s.dtype == TK_I32 && s.shape[0] == nbm &&
                                  s.shape[1] == cdiv(nbk, 4) && s.strides[0] == 1 &&
                                  s.strides[1] == padded &&
                                  s.bytes == (size_t)(cdiv(nbk, 4) * padded * 4));
                    }
                    tk_tensor desc;
                    size_t bytes = 0;
                    memset(&desc, 0x5A, sizeof desc);
                    tk_status status = tk_sf_desc(rows, cols, bm, bk, layout, &desc, &bytes);
                    cr_assert_eq(status, TK_SUCCESS, "tk_sf_desc(%ld, %ld, %d, %d, %d): %s",
                                 (long)rows, (long)cols, bm, bk, layout, tk_last_error());
                    cr_assert(desc.data == NULL && desc.rank == 2 && desc.dtype == s.dtype &&
                                  desc.shape[0] == s.shape[0] && desc.shape[1] == s.shape[1] &&
                                  desc.strides[0] == s.strides[0] &&
                                  desc.strides[1] == s.strides[1] && bytes == s.bytes,
                              "tk_sf_desc(%ld, %ld, %d, %d, layout %d) = dtype %d (%ld, %ld) "
                              "strides (%ld, %ld) %zu bytes; reference dtype %d (%ld, %ld) "
                              "strides (%ld, %ld) %zu bytes",
                              (long)rows, (long)cols, bm, bk, layout, desc.dtype,
                              (long)desc.shape[0], (long)desc.shape[1], (long)desc.strides[0],
                              (long)desc.strides[1], bytes, s.dtype, (long)s.shape[0],
                              (long)s.shape[1], (long)s.strides[0], (long)s.strides[1], s.bytes);
                }
}

Test(layout, offsets_are_disjoint_and_in_bounds) {
    int64_t rows_list[] = {1, 3, 5, 9};
    for (size_t r = 0; r < 4; r++)
        for (int layout = 0; layout < 3; layout++) {
            ref_sf_shape s;
            cr_assert(ref_sf_shape_of(rows_list[r], 576, 1, 32, layout, &s));
            unsigned char *used = calloc(s.bytes, 1);
            for (int64_t i = 0; i < s.nbm; i++)
                for (int64_t k = 0; k < s.nbk; k++) {
                    size_t offset = ref_sf_offset(&s, i, k);
                    size_t size = ref_sf_entry_bytes(&s);
                    cr_assert(offset + size <= s.bytes);
                    for (size_t b = 0; b < size; b++) {
                        cr_assert_eq(used[offset + b], 0, "overlap at block (%ld, %ld)",
                                     (long)i, (long)k);
                        used[offset + b] = 1;
                    }
                    if (layout == TK_SF_PACKED_UE8M0)
                        cr_assert_eq(offset % 4, (size_t)(k % 4));
                    if (layout == TK_SF_COL_MAJOR)
                        cr_assert_eq(offset, (size_t)(k * cdiv(s.nbm, 4) * 4 + i) * 4);
                }
            free(used);
        }
}

/* ---- transpose ----------------------------------------------------------- */

Test(transpose, matches_naive_for_every_element_size) {
    size_t sizes[] = {1, 2, 3, 4, 8};
    int64_t shapes[][4] = {{1, 1, 1, 1}, {2, 5, 7, 9}, {3, 64, 130, 130}, {2, 70, 65, 128}};
    for (size_t e = 0; e < 5; e++)
        for (size_t s = 0; s < 4; s++) {
            size_t size = sizes[e];
            int64_t batches = shapes[s][0], rows = shapes[s][1], cols = shapes[s][2];
            int64_t stride = shapes[s][3];
            size_t in_bytes = (size_t)(batches * rows * stride) * size;
            size_t out_bytes = (size_t)(batches * rows * cols) * size;
            unsigned char *x = malloc(in_bytes), *out = malloc(out_bytes);
            ref_rng rng = ref_rng_seed(4, s);
            for (size_t i = 0; i < in_bytes; i++)
                x[i] = (unsigned char)ref_rng_next(&rng);
            memset(out, 0xEE, out_bytes);
            ref_batched_transpose(x, out, size, batches, rows, cols, stride, rows * stride);
            for (int64_t b = 0; b < batches; b++)
                for (int64_t i = 0; i < rows; i++)
                    for (int64_t j = 0; j < cols; j++) {
                        size_t got = (size_t)((b * cols + j) * rows + i) * size;
                        size_t want = (size_t)((b * rows + i) * stride + j) * size;
                        cr_assert(memcmp(out + got, x + want, size) == 0,
                                  "size %zu shape %ld x %ld x %ld: out[%ld, %ld, %ld] wrong",
                                  size, (long)batches, (long)rows, (long)cols, (long)b,
                                  (long)j, (long)i);
                    }
            free(x);
            free(out);
        }
}

/* ---- casts --------------------------------------------------------------- */

/* Checks ref_cast_e4m3 against a naive block cast, including that the
 * SF padding keeps its poison. */
static void check_cast(tk_dtype in_dtype, int64_t rows, int64_t cols, int64_t stride,
                       int bm, int bk, bool round_sf, tk_sf_layout layout, uint64_t seed) {
    size_t in_size = in_dtype == TK_F32 ? 4 : 2;
    void *x = malloc((size_t)((rows ? rows : 1) * stride) * in_size);
    ref_fill_rand_float(x, in_dtype, rows, stride, -20, 20, seed);
    ref_sf_shape s;
    cr_assert(ref_sf_shape_of(rows, cols, bm, bk, layout, &s));
    uint8_t *out = malloc((size_t)(rows * cols) + 1);
    unsigned char *sf = malloc(s.bytes + 1);
    memset(out, 0xAB, (size_t)(rows * cols) + 1);
    memset(sf, 0xAB, s.bytes + 1);
    cr_assert(ref_cast_e4m3(x, in_dtype, rows, cols, stride, bm, bk, round_sf, layout, out, sf));

    unsigned char *expected_sf = malloc(s.bytes + 1);
    memset(expected_sf, 0xAB, s.bytes + 1);
    for (int64_t i = 0; i < s.nbm; i++)
        for (int64_t k = 0; k < s.nbk; k++) {
            float amax = 0.0f;
            for (int64_t r = i * bm; r < rows && r < (i + 1) * bm; r++)
                for (int64_t c = k * bk; c < cols && c < (k + 1) * bk; c++)
                    amax = fmaxf(amax, fabsf(ref_load_f32(x, in_dtype, r * stride + c)));
            float sf_value, inv;
            int ue8m0;
            naive_sf_and_inv(amax, round_sf, &sf_value, &inv, &ue8m0);
            /* naive offsets straight from the spec's table */
            int64_t padded = cdiv(s.nbm, 4) * 4;
            if (layout == TK_SF_ROW_MAJOR)
                memcpy(expected_sf + (i * s.nbk + k) * 4, &sf_value, 4);
            else if (layout == TK_SF_COL_MAJOR)
                memcpy(expected_sf + (k * padded + i) * 4, &sf_value, 4);
            else
                expected_sf[((k / 4) * padded + i) * 4 + k % 4] = (unsigned char)ue8m0;
            for (int64_t r = i * bm; r < rows && r < (i + 1) * bm; r++)
                for (int64_t c = k * bk; c < cols && c < (k + 1) * bk; c++) {
                    float product = (float)((double)ref_load_f32(x, in_dtype, r * stride + c) * inv);
                    int want = naive_e4m3_encode(product);
                    cr_assert_eq(out[r * cols + c], want,
                                 "cast %ldx%ld block %dx%d round %d layout %d: out[%ld, %ld] "
                                 "= 0x%02X, expected 0x%02X",
                                 (long)rows, (long)cols, bm, bk, round_sf, layout, (long)r,
                                 (long)c, out[r * cols + c], want);
                }
        }
    cr_assert_eq(out[rows * cols], 0xAB, "wrote past the output");
    for (size_t b = 0; b <= s.bytes; b++)
        cr_assert_eq(sf[b], expected_sf[b],
                     "cast %ldx%ld block %dx%d round %d layout %d: SF byte %zu = 0x%02X, "
                     "expected 0x%02X (0xAB = must stay untouched)",
                     (long)rows, (long)cols, bm, bk, round_sf, layout, b, sf[b], expected_sf[b]);
    free(x);
    free(out);
    free(sf);
    free(expected_sf);
}

Test(cast, block_cast_matches_naive) {
    int64_t shapes[][3] = {{0, 64, 64}, {1, 64, 64}, {3, 576, 600}, {5, 192, 192}, {130, 128, 131}};
    int blocks[][2] = {{1, 32}, {1, 64}, {1, 128}, {128, 128}, {128, 1}, {32, 32}};
    uint64_t seed = 10;
    for (size_t s = 0; s < 5; s++)
        for (size_t b = 0; b < 6; b++)
            for (int in = 0; in < 2; in++)
                for (int layout = 0; layout < 3; layout++)
                    for (int round_sf = 0; round_sf < 2; round_sf++) {
                        if (layout == TK_SF_PACKED_UE8M0 && !round_sf)
                            continue;
                        check_cast(in ? TK_BF16 : TK_F32, shapes[s][0], shapes[s][1],
                                   shapes[s][2], blocks[b][0], blocks[b][1], round_sf,
                                   layout, seed++);
                    }
}

Test(cast, rejects_bad_arguments) {
    float x[64] = {1};
    uint8_t out[64];
    uint32_t sf[4];
    cr_assert(!ref_per_token_cast_e4m3(x, TK_F32, 1, 64, 64, 32, false,
                                       TK_SF_PACKED_UE8M0, out, sf),
              "packed UE8M0 needs round_sf");
    cr_assert(!ref_per_token_cast_e4m3(x, TK_E4M3, 1, 64, 64, 32, true, TK_SF_ROW_MAJOR, out, sf));
    cr_assert(!ref_per_token_cast_e4m3(x, TK_F32, 1, 64, 64, 0, true, TK_SF_ROW_MAJOR, out, sf));
    cr_assert(!ref_cast_back_e4m3(out, 1, 64, sf, TK_SF_ROW_MAJOR, 1, 32, TK_E4M3, x));
}

Test(cast, results_do_not_depend_on_thread_count) {
    int64_t rows = 301, cols = 2048;
    uint16_t *x = malloc((size_t)(rows * cols) * 2);
    ref_fill_rand_float(x, TK_BF16, rows, cols, -110, 126, 77);
    ref_sf_shape s;
    ref_sf_shape_of(rows, cols, 1, 128, TK_SF_PACKED_UE8M0, &s);
    uint8_t *out[2], *sf[2];
    for (int run = 0; run < 2; run++) {
        setenv("TK_REF_THREADS", run ? "7" : "1", 1);
        out[run] = calloc((size_t)(rows * cols), 1);
        sf[run] = calloc(s.bytes, 1);
        cr_assert(ref_per_token_cast_e4m3(x, TK_BF16, rows, cols, cols, 128, true,
                                          TK_SF_PACKED_UE8M0, out[run], sf[run]));
    }
    cr_assert(memcmp(out[0], out[1], (size_t)(rows * cols)) == 0);
    cr_assert(memcmp(sf[0], sf[1], s.bytes) == 0);
    /* the generator too: same seed, other thread count, same bits */
    uint16_t *again = malloc((size_t)(rows * cols) * 2);
    setenv("TK_REF_THREADS", "1", 1);
    ref_fill_rand_float(again, TK_BF16, rows, cols, -110, 126, 77);
    cr_assert(memcmp(x, again, (size_t)(rows * cols) * 2) == 0);
    for (int64_t i = 0; i < rows * cols; i++)
        cr_assert((x[i] & 0x7FFF) != 0 && (x[i] & 0x7F80) != 0x7F80,
                  "generator produced 0x%04X at %ld", x[i], (long)i);
    free(x);
    free(again);
    for (int run = 0; run < 2; run++) {
        free(out[run]);
        free(sf[run]);
    }
}

Test(cast_back, matches_naive) {
    int64_t shapes[][2] = {{0, 64}, {1, 64}, {3, 576}, {130, 192}};
    int blocks[][2] = {{1, 32}, {1, 64}, {1, 128}, {128, 128}, {128, 1}, {32, 32}};
    for (size_t s = 0; s < 4; s++)
        for (size_t b = 0; b < 6; b++)
            for (int layout = 0; layout < 3; layout++)
                for (int out_bf16 = 0; out_bf16 < 2; out_bf16++) {
                    int64_t rows = shapes[s][0], cols = shapes[s][1];
                    int bm = blocks[b][0], bk = blocks[b][1];
                    ref_sf_shape shape;
                    cr_assert(ref_sf_shape_of(rows, cols, bm, bk, layout, &shape));
                    uint8_t *x = malloc((size_t)(rows * cols) + 1);
                    unsigned char *sf = malloc(shape.bytes + 1);
                    ref_fill_rand_e4m3(x, rows * cols, 20 + s);
                    ref_rng rng = ref_rng_seed(21, b);
                    for (size_t i = 0; i < shape.bytes; i++)
                        sf[i] = (unsigned char)(100 + ref_rng_next(&rng) % 40);
                    if (layout != TK_SF_PACKED_UE8M0) /* f32 scales of any value */
                        for (size_t i = 0; i + 4 <= shape.bytes; i += 4) {
                            float value = ldexpf(1.0f + ref_rng_uniform(&rng),
                                                 -30 + (int)(ref_rng_next(&rng) % 60));
                            memcpy(sf + i, &value, 4);
                        }
                    size_t out_size = out_bf16 ? 2 : 4;
                    unsigned char *out = malloc((size_t)(rows * cols) * out_size + 1);
                    cr_assert(ref_cast_back_e4m3(x, rows, cols, sf, layout, bm, bk,
                                                 out_bf16 ? TK_BF16 : TK_F32, out));
                    int64_t padded = cdiv(cdiv(rows, bm), 4) * 4;
                    for (int64_t r = 0; r < rows; r++)
                        for (int64_t c = 0; c < cols; c++) {
                            int64_t i = r / bm, k = c / bk;
                            double scale;
                            if (layout == TK_SF_PACKED_UE8M0) {
                                int byte = sf[((k / 4) * padded + i) * 4 + k % 4];
                                scale = byte ? ldexp(1.0, byte - 127) : 0.0;
                            } else {
                                float value;
                                int64_t at = layout == TK_SF_ROW_MAJOR ? i * cdiv(cols, bk) + k
                                                                       : k * padded + i;
                                memcpy(&value, sf + at * 4, 4);
                                scale = value;
                            }
                            /* the double product of two floats is exact */
                            float product = (float)(naive_e4m3_value(x[r * cols + c]) * scale);
                            int64_t index = r * cols + c;
                            if (out_bf16) {
                                uint16_t got;
                                memcpy(&got, out + index * 2, 2);
                                cr_assert_eq(got, naive_bf16_encode(product),
                                             "cast_back bf16 %ldx%ld block %dx%d layout %d: "
                                             "out[%ld, %ld] = 0x%04X, expected 0x%04X",
                                             (long)rows, (long)cols, bm, bk, layout, (long)r,
                                             (long)c, got, naive_bf16_encode(product));
                            } else {
                                uint32_t got;
                                memcpy(&got, out + index * 4, 4);
                                cr_assert_eq(got, ref_f32_bits(product),
                                             "cast_back f32 %ldx%ld block %dx%d layout %d: "
                                             "out[%ld, %ld] = 0x%08X, expected 0x%08X",
                                             (long)rows, (long)cols, bm, bk, layout, (long)r,
                                             (long)c, got, ref_f32_bits(product));
                            }
                        }
                    free(x);
                    free(sf);
                    free(out);
                }
}
