/*
 * test_ref_block.c -- CPU tests of the E5M6 and per-block cast references
 * (tests/ref/e5m6.c, tests/ref/block_cast.c) against independent naive
 * formulas and exhaustive encoder tables (tilekernels-spec.md 2.2, 3.2,
 * 3.4, 4.1, 4.2, 6.2-6.5, Appendix A).  No GPU needed.
 *
 * The E5M6 encoder is checked at every boundary of the format: each code's
 * own value, the f32 neighbours of every value, every midpoint between
 * neighbouring codes (the ties) and its neighbours, against round-to-
 * nearest-even computed in double for the f16-normal range, and against
 * an independent statement of TileKernels' rule (truncate to the f16
 * grid, then round on the dropped f32 bits) for f16 subnormals.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "block_cast.h"
#include "e5m6.h"

/* ---- __float2half_rz -------------------------------------------------- */

/* floor(|v| / ulp) on the f16 grid, in double: an independent truncation. */
static uint16_t naive_f16_rz(float v) {
    if (isnan(v))
        return 0x7FFF;
    uint16_t sign = signbit(v) ? 0x8000 : 0;
    double a = fabs((double)v);
    if (isinf(v))
        return sign | 0x7C00;
    if (a >= 65504.0)
        return sign | 0x7BFF;
    if (a < ldexp(1.0, -14))
        return sign | (uint16_t)floor(a * ldexp(1.0, 24));
    int e;
    frexp(a, &e); /* a = f * 2^e, f in [0.5, 1) */
    int exponent = e - 1;
    double mantissa = floor((a / ldexp(1.0, exponent) - 1.0) * 1024.0);
    return sign | (uint16_t)(((exponent + 15) << 10) | (int)mantissa);
}

Test(f16_rz, appendix_a_table) {
    /* tilekernels-spec.md Appendix A, column __float2half_rz */
    cr_assert_eq(ref_f16_rz_bits(0.0f), 0x0000);
    cr_assert_eq(ref_f16_rz_bits(-0.0f), 0x8000);
    cr_assert_eq(ref_f16_rz_bits(-0.1f), 0xAE66);
    cr_assert_eq(ref_f16_rz_bits(-1000.0f), 0xE3D0);
    cr_assert_eq(ref_f16_rz_bits(INFINITY), 0x7C00);
    cr_assert_eq(ref_f16_rz_bits(-INFINITY), 0xFC00);
    cr_assert_eq(ref_f16_rz_bits(NAN), 0x7FFF);
    cr_assert_eq(ref_f16_rz_bits(-NAN), 0x7FFF);
    cr_assert_eq(ref_f16_rz_bits(65504.0f), 0x7BFF);
    cr_assert_eq(ref_f16_rz_bits(65520.0f), 0x7BFF);
    cr_assert_eq(ref_f16_rz_bits(70000.0f), 0x7BFF);
    cr_assert_eq(ref_f16_rz_bits(ldexpf(1.0f, -24)), 0x0001);
    cr_assert_eq(ref_f16_rz_bits(ldexpf(1.0f, -25)), 0x0000);
    cr_assert_eq(ref_f16_rz_bits(ldexpf(1.5f, -24)), 0x0001);
}

Test(f16_rz, every_f16_boundary) {
    /* every f16 value, its f32 neighbours and the f32 values just below
     * the next f16 value, both signs */
    for (uint32_t h = 0; h < 0x7C00; h++) {
        float value = ref_f16_to_f32((uint16_t)h);
        float next = h + 1 < 0x7C00 ? ref_f16_to_f32((uint16_t)(h + 1)) : 65536.0f;
        float probes[] = {value, nextafterf(value, INFINITY), nextafterf(next, 0.0f),
                          (value + next) * 0.5f};
        for (int p = 0; p < 4; p++)
            for (int s = 0; s < 2; s++) {
                float v = s ? -probes[p] : probes[p];
                cr_assert_eq(ref_f16_rz_bits(v), naive_f16_rz(v), "v=%a: 0x%04x vs 0x%04x", v,
                             ref_f16_rz_bits(v), naive_f16_rz(v));
            }
    }
}

Test(f16_rz, strided_sweep_of_all_f32) {
    /* one f32 bit pattern in 251 (17 million), every exponent */
    for (uint64_t bits = 0; bits < (1ull << 32); bits += 251) {
        float v = ref_f32_from_bits((uint32_t)bits);
        uint16_t got = ref_f16_rz_bits(v), want = naive_f16_rz(v);
        if (got != want)
            cr_assert_fail("bits 0x%08x: 0x%04x vs 0x%04x", (unsigned)bits, got, want);
    }
}

/* ---- E5M6 encoder -------------------------------------------------------- */

/* Round-to-nearest-even of |v| to the e5m6 grid of the f16-normal range,
 * in double (exact: both grids fit), with overflow past the top code
 * giving the infinity code 0x7C0 as the integer rule does. */
static uint16_t naive_e5m6_normal(float v) {
    uint16_t sign = signbit(v) ? 0x800 : 0;
    double a = fabs((double)v);
    int e;
    frexp(a, &e);
    int exponent = e - 1;                      /* a in [2^exponent, 2^(exponent+1)) */
    double steps = a / ldexp(1.0, exponent - 6); /* in [64, 128) */
    double rounded = nearbyint(steps);          /* default mode: ties to even */
    uint32_t code = (uint32_t)(exponent + 15) * 64 + (uint32_t)rounded - 64;
    return sign | (uint16_t)code;
}

/* TileKernels' rule for f16-subnormal results, stated on values: truncate
 * |v| to the f16 grid (multiples of 2^-24), drop to the e5m6 grid
 * (multiples of 2^-20), and add one step when the 17 low f32 mantissa bits
 * plus the code's parity exceed 2^16. */
static uint16_t naive_e5m6_subnormal(float v) {
    uint16_t sign = signbit(v) ? 0x800 : 0;
    double a = fabs((double)v);
    uint32_t code = (uint32_t)floor(a * ldexp(1.0, 20));
    uint32_t low = ref_f32_bits(v) & 0x1FFFF;
    if ((code & 1) + low > 0x10000)
        code++;
    return sign | (uint16_t)code;
}

static void check_e5m6(float v) {
    uint16_t got = ref_e5m6_code(v);
    uint16_t want = fabsf(v) >= ldexpf(1.0f, -14) ? naive_e5m6_normal(v) : naive_e5m6_subnormal(v);
    cr_assert_eq(got, want, "v=%a (bits 0x%08x): code 0x%03x, expected 0x%03x", v,
                 ref_f32_bits(v), got, want);
}

Test(e5m6, every_code_and_tie) {
    /* codes 0..0x7BF: value, neighbours, the tie with the next code and
     * its neighbours, both signs */
    for (uint16_t code = 0; code <= 0x7BF; code++) {
        float value = ref_e5m6_to_f32(code);
        cr_assert_eq(ref_e5m6_code(value), code, "round trip of code 0x%03x", code);
        cr_assert_eq(ref_e5m6_code(-value), code | 0x800, "round trip of -code 0x%03x", code);
        float next = code < 0x7BF ? ref_e5m6_to_f32((uint16_t)(code + 1)) : 65536.0f;
        float tie = (value + next) * 0.5f;
        float probes[] = {value, nextafterf(value, INFINITY), nextafterf(value, 0.0f),
                          tie, nextafterf(tie, INFINITY), nextafterf(tie, 0.0f),
                          nextafterf(next, 0.0f)};
        for (int p = 0; p < 7; p++) {
            check_e5m6(probes[p]);
            check_e5m6(-probes[p]);
        }
    }
}

Test(e5m6, ties_go_to_even_and_overflow) {
    /* 1 + 1/128 lies halfway between codes 0x3C0 (1.0) and 0x3C1: even */
    cr_assert_eq(ref_e5m6_code(1.0f + 1.0f / 128), 0x3C0);
    /* 1 + 3/128: halfway between 0x3C1 and 0x3C2: up to the even code */
    cr_assert_eq(ref_e5m6_code(1.0f + 3.0f / 128), 0x3C2);
    cr_assert_eq(ref_e5m6_code(nextafterf(1.0f + 1.0f / 128, 2.0f)), 0x3C1);
    cr_assert_eq(ref_e5m6_code(65024.0f), 0x7BF);
    /* the tie above the top code rounds up (odd code) to the infinity code */
    cr_assert_eq(ref_e5m6_code(65280.0f), 0x7C0);
    cr_assert_eq(ref_e5m6_code(nextafterf(65280.0f, 0.0f)), 0x7BF);
    /* spec 6.2's special inputs with scale 1: subnormal edges */
    cr_assert_eq(ref_e5m6_code(ldexpf(1.0f, -20)), 0x001);
    cr_assert_eq(ref_e5m6_code(ldexpf(63.0f / 64, -14)), 0x03F);
    cr_assert_eq(ref_e5m6_code(ldexpf(1.0f, -14)), 0x040);
    cr_assert_eq(ref_e5m6_code(-0.0f), 0x800);
}

Test(e5m6, strided_sweep_of_the_finite_range) {
    for (uint32_t bits = 0; bits < 0x477F0000u; bits += 101) { /* up to ~65280 */
        float v = ref_f32_from_bits(bits);
        uint16_t got = ref_e5m6_code(v);
        uint16_t want = v >= ldexpf(1.0f, -14) ? naive_e5m6_normal(v) : naive_e5m6_subnormal(v);
        if (got != want)
            cr_assert_fail("bits 0x%08x: 0x%03x vs 0x%03x", bits, got, want);
    }
}

Test(e5m6, pack_bit_layout) {
    /* the big-endian string 123 456 789 ABC DEF 012 345 678 */
    uint16_t codes[8] = {0x123, 0x456, 0x789, 0xABC, 0xDEF, 0x012, 0x345, 0x678};
    uint32_t words[3];
    ref_e5m6_pack(codes, words);
    cr_assert_eq(words[0], 0x12345678u);
    cr_assert_eq(words[1], 0x9ABCDEF0u);
    cr_assert_eq(words[2], 0x12345678u);
    uint16_t patterns[8];
    ref_e5m6_unpack(words, patterns);
    for (int i = 0; i < 8; i++)
        cr_assert_eq(patterns[i], codes[i] << 4, "code %d", i);
}

Test(e5m6, pack_unpack_random) {
    ref_rng rng = ref_rng_seed(7, 0);
    for (int n = 0; n < 100000; n++) {
        uint16_t codes[8], patterns[8];
        uint32_t words[3];
        for (int i = 0; i < 8; i++)
            codes[i] = (uint16_t)(ref_rng_next(&rng) & 0xFFF);
        ref_e5m6_pack(codes, words);
        ref_e5m6_unpack(words, patterns);
        for (int i = 0; i < 8; i++)
            cr_assert_eq(patterns[i], (uint16_t)(codes[i] << 4));
    }
}

/* calc_diff of spec 12.1 */
static double calc_diff(const float *x, const float *y, int64_t n) {
    double xy = 0, xx = 0;
    for (int64_t i = 0; i < n; i++) {
        xy += (double)x[i] * y[i];
        xx += (double)x[i] * x[i] + (double)y[i] * y[i];
    }
    return xx == 0 ? 0 : 1 - 2 * xy / xx;
}

Test(e5m6, cast_and_back_round_trip) {
    int64_t rows = 64, cols = 576;
    float *x = malloc(sizeof(float) * rows * cols), *back = malloc(sizeof(float) * rows * cols);
    uint8_t *q = malloc((size_t)(rows * cols / 2 * 3));
    float sf[64];
    ref_fill_rand_float(x, TK_F32, rows, cols, 0, 0, 3);
    for (int round = 0; round < 2; round++) {
        cr_assert(ref_per_token_cast_e5m6(x, TK_F32, rows, cols, cols, round, TK_SF_ROW_MAJOR, q,
                                          sf));
        cr_assert(ref_cast_back_e5m6(q, rows, cols, sf, TK_SF_ROW_MAJOR, TK_F32, back));
        cr_assert_lt(calc_diff(x, back, rows * cols), 1e-4);
        /* naive: the row's scale and the first value's code */
        float amax = 0;
        for (int64_t c = 0; c < cols; c++)
            amax = fmaxf(amax, fabsf(x[c]));
        float a = fmaxf(amax, 1e-4f);
        float inv = round ? ldexpf(1.0f, -(int)ceil(log2((double)a / 65024.0f)))
                          : 65024.0f / a;
        uint16_t c0 = (uint16_t)(q[0] << 4 | q[1] >> 4) >> 0; /* high 12 bits of w0 */
        uint32_t w0 = (uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 |
                      (uint32_t)q[3] << 24;
        c0 = (uint16_t)(w0 >> 20);
        cr_assert_eq(c0, ref_e5m6_code(x[0] * inv));
    }
    /* special inputs of spec 6.2: constant rows with 65024 last, scale 1 */
    float specials[3] = {ldexpf(1.0f, -20), ldexpf(63.0f / 64, -14), ldexpf(1.0f, -14)};
    for (int s = 0; s < 3; s++) {
        for (int64_t i = 0; i < rows * cols; i++)
            x[i] = (i % cols == cols - 1) ? 65024.0f : specials[s];
        cr_assert(ref_per_token_cast_e5m6(x, TK_F32, rows, cols, cols, true, TK_SF_ROW_MAJOR, q,
                                          sf));
        cr_assert_eq(sf[0], 1.0f);
        cr_assert(ref_cast_back_e5m6(q, rows, cols, sf, TK_SF_ROW_MAJOR, TK_F32, back));
        for (int64_t i = 0; i < rows * cols; i++)
            cr_assert_eq(back[i], x[i], "special %d element %ld", s, (long)i);
    }
    free(x);
    free(back);
    free(q);
}

/* ---- FP4 ------------------------------------------------------------------ */

Test(e2m1, appendix_a_table) {
    struct { float v; uint8_t code; } table[] = {
        {0.0f, 0x0}, {-0.0f, 0x8}, {ldexpf(1, -10), 0x0}, {-0.1f, 0x8}, {0.25f, 0x0},
        {0.2500001f, 0x1}, {0.75f, 0x2}, {1.25f, 0x2}, {1.75f, 0x4}, {2.5f, 0x4}, {3.5f, 0x6},
        {5.0f, 0x6}, {5.0001f, 0x7}, {6.5f, 0x7}, {7.0f, 0x7}, {100.0f, 0x7}, {448.0f, 0x7},
        {-1000.0f, 0xF}, {INFINITY, 0x7}, {-INFINITY, 0xF}, {NAN, 0x7}, {-NAN, 0x7}};
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        cr_assert_eq(ref_e2m1_from_f32(table[i].v), table[i].code, "%a", table[i].v);
}

Test(e2m1, every_threshold) {
    /* the midpoints and their neighbours: below rounds down, above up, the
     * midpoint to the even code */
    static const float grid[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
    for (int code = 0; code < 8; code++) {
        cr_assert_eq(ref_e2m1_from_f32(grid[code]), code);
        cr_assert_eq(ref_e2m1_from_f32(-grid[code]), code | 8);
        cr_assert_eq(ref_e2m1_to_f32((uint8_t)code), grid[code]);
        if (code == 7)
            continue;
        float mid = (grid[code] + grid[code + 1]) / 2;
        cr_assert_eq(ref_e2m1_from_f32(nextafterf(mid, 0)), code);
        cr_assert_eq(ref_e2m1_from_f32(nextafterf(mid, 10)), code + 1);
        cr_assert_eq(ref_e2m1_from_f32(mid), code % 2 == 0 ? code : code + 1);
    }
    cr_assert(signbit(ref_e2m1_to_f32(8)));
}

/* ---- per_block_cast --------------------------------------------------------- */

/* Naive per-element statement of spec 4.1/4.2 (double-checked scale). */
static void check_block_cast(tk_dtype in_dtype, tk_dtype fmt, int bm, int bk, bool round,
                             tk_sf_layout layout) {
    int64_t rows = 77, cols = 320, stride = 336;
    size_t in_size = in_dtype == TK_F32 ? 4 : 2;
    void *x = malloc((size_t)(rows * stride) * in_size);
    ref_fill_rand_float(x, in_dtype, rows, stride, -20, 20, 11 + bm + bk);
    int64_t out_cols = fmt == TK_E2M1 ? cols / 2 : cols;
    uint8_t *out = malloc((size_t)(rows * out_cols)), *out2 = malloc((size_t)(rows * out_cols));
    ref_sf_shape shape, row_shape;
    cr_assert(ref_sf_shape_of(rows, cols, bm, bk, layout, &shape));
    cr_assert(ref_sf_shape_of(rows, cols, bm, bk, TK_SF_ROW_MAJOR, &row_shape));
    unsigned char *sf = calloc(shape.bytes, 1), *sf2 = calloc(shape.bytes, 1);
    float *row_sf = calloc(row_shape.bytes, 1);
    cr_assert(ref_per_block_cast(x, in_dtype, rows, cols, stride, fmt, bm, bk, round, layout, out,
                                 sf, NULL));
    float qmax = fmt == TK_E2M1 ? 6.0f : 448.0f;
    float cmin = fmt == TK_E2M1 ? ldexpf(6.0f, -126) : 1e-4f;
    for (int64_t i = 0; i < shape.nbm; i++)
        for (int64_t k = 0; k < shape.nbk; k++) {
            float amax = 0;
            for (int64_t r = i * bm; r < rows && r < (i + 1) * bm; r++)
                for (int64_t c = k * bk; c < cols && c < (k + 1) * bk; c++)
                    amax = fmaxf(amax, fabsf(ref_load_f32(x, in_dtype, r * stride + c)));
            float a = fmaxf(amax, cmin);
            float want_sf = a / qmax, inv = qmax / a;
            if (round) {
                int e = (int)ceil(log2((double)want_sf));
                want_sf = ldexpf(1.0f, e);
                inv = ldexpf(1.0f, -e);
            }
            cr_assert_eq(ref_sf_load(&shape, sf, i, k), want_sf, "block (%ld, %ld)", (long)i,
                         (long)k);
            ref_scale s = {want_sf, inv, 0};
            ref_sf_store(&row_shape, row_sf, i, k, s);
            for (int64_t r = i * bm; r < rows && r < (i + 1) * bm; r++)
                for (int64_t c = k * bk; c < cols && c < (k + 1) * bk; c++) {
                    float v = ref_load_f32(x, in_dtype, r * stride + c) * inv;
                    if (fmt == TK_E4M3) {
                        /* RNE + saturation via the decoded neighbours */
                        uint8_t code = out[r * cols + c];
                        float got = ref_e4m3_to_f32(code);
                        float clamped = fminf(fmaxf(v, -448.0f), 448.0f);
                        cr_assert_eq(signbit(got), signbit(v));
                        /* nearer than both neighbours of the same sign,
                         * the even code on a tie */
                        for (int step = -1; step <= 1; step += 2) {
                            int other = (code & 0x7F) + step;
                            if (other < 0 || other > 0x7E)
                                continue;
                            float d_got = fabsf(got - clamped);
                            float d_other = fabsf(ref_e4m3_to_f32((uint8_t)((code & 0x80) | other)) - clamped);
                            cr_assert(d_got < d_other || (d_got == d_other && code % 2 == 0),
                                      "v=%a code 0x%02x", v, code);
                        }
                    } else {
                        uint8_t byte = out[r * out_cols + c / 2];
                        uint8_t nibble = c % 2 ? byte >> 4 : byte & 0xF;
                        cr_assert_eq(nibble, ref_e2m1_from_f32(v));
                    }
                }
        }
    /* SF-only writes the same scales; precomputed reproduces the data with
     * the row-major scales when they are powers of two (1 / sf exact) */
    cr_assert(ref_per_block_cast(x, in_dtype, rows, cols, stride, fmt, bm, bk, round, layout, NULL,
                                 sf2, NULL));
    for (int64_t i = 0; i < shape.nbm; i++)
        for (int64_t k = 0; k < shape.nbk; k++)
            cr_assert_eq(ref_sf_load(&shape, sf2, i, k), ref_sf_load(&shape, sf, i, k));
    if (round) {
        cr_assert(ref_per_block_cast(x, in_dtype, rows, cols, stride, fmt, bm, bk, false,
                                     TK_SF_ROW_MAJOR, out2, NULL, row_sf));
        cr_assert_eq(memcmp(out, out2, (size_t)(rows * out_cols)), 0);
    }
    free(x);
    free(out);
    free(out2);
    free(sf);
    free(sf2);
    free(row_sf);
}

Test(per_block_cast, naive_formulas) {
    tk_dtype dtypes[] = {TK_F32, TK_BF16}, fmts[] = {TK_E4M3, TK_E2M1};
    int blocks[][2] = {{128, 128}, {32, 32}, {32, 128}, {128, 32}};
    for (int d = 0; d < 2; d++)
        for (int f = 0; f < 2; f++)
            for (int b = 0; b < 4; b++) {
                check_block_cast(dtypes[d], fmts[f], blocks[b][0], blocks[b][1], false,
                                 TK_SF_ROW_MAJOR);
                check_block_cast(dtypes[d], fmts[f], blocks[b][0], blocks[b][1], true,
                                 TK_SF_COL_MAJOR);
                check_block_cast(dtypes[d], fmts[f], blocks[b][0], blocks[b][1], true,
                                 TK_SF_PACKED_UE8M0);
            }
}

Test(per_block_cast, rejects_bad_arguments) {
    float x[64] = {0};
    uint8_t out[64];
    float sf[4];
    cr_assert_not(ref_per_block_cast(x, TK_E4M3, 1, 64, 64, TK_E4M3, 32, 32, true,
                                     TK_SF_ROW_MAJOR, out, sf, NULL));
    cr_assert_not(ref_per_block_cast(x, TK_F32, 1, 64, 64, TK_BF16, 32, 32, true,
                                     TK_SF_ROW_MAJOR, out, sf, NULL));
    cr_assert_not(ref_per_block_cast(x, TK_F32, 1, 64, 64, TK_E4M3, 32, 32, false,
                                     TK_SF_PACKED_UE8M0, out, sf, NULL));
}

/* ---- per_block_cast_lossless ----------------------------------------------------- */

/* TileKernels' test: FP4 with (1, 32) power-of-two scales, re-quantised
 * without rounding: both dequantisations are bit-identical. */
Test(per_block_cast_lossless, dequantisations_equal) {
    int64_t rows = 200, cols = 576;
    float *x = malloc(sizeof(float) * rows * cols);
    uint8_t *fp4 = malloc((size_t)(rows * cols / 2)), *e4m3 = malloc((size_t)(rows * cols));
    float *a = malloc(sizeof(float) * rows * cols), *b = malloc(sizeof(float) * rows * cols);
    int out_blocks[][2] = {{1, 128}, {32, 32}, {128, 128}, {32, 128}};
    tk_sf_layout layouts[] = {TK_SF_ROW_MAJOR, TK_SF_PACKED_UE8M0};
    for (int li = 0; li < 2; li++)
        for (int lo = 0; lo < 2; lo++)
            for (int ob = 0; ob < 4; ob++) {
                /* a dynamic range of 2^9 around a random exponent */
                ref_fill_rand_float(x, TK_F32, rows, cols, -40 + 13 * ob, -31 + 13 * ob, 5 + ob);
                ref_sf_shape in_shape, out_shape;
                cr_assert(ref_sf_shape_of(rows, cols, 1, 32, layouts[li], &in_shape));
                cr_assert(ref_sf_shape_of(rows, cols, out_blocks[ob][0], out_blocks[ob][1],
                                          layouts[lo], &out_shape));
                unsigned char *sf_in = calloc(in_shape.bytes, 1);
                unsigned char *sf_out = calloc(out_shape.bytes, 1);
                cr_assert(ref_per_block_cast(x, TK_F32, rows, cols, cols, TK_E2M1, 1, 32, true,
                                             layouts[li], fp4, sf_in, NULL));
                cr_assert(ref_per_block_cast_lossless(fp4, rows, cols, sf_in, layouts[li], 1, 32,
                                                      e4m3, sf_out, layouts[lo], out_blocks[ob][0],
                                                      out_blocks[ob][1]));
                cr_assert(ref_dequantize(fp4, TK_E2M1, rows, cols, sf_in, layouts[li], 1, 32, a));
                cr_assert(ref_dequantize(e4m3, TK_E4M3, rows, cols, sf_out, layouts[lo],
                                         out_blocks[ob][0], out_blocks[ob][1], b));
                cr_assert_eq(memcmp(a, b, sizeof(float) * rows * cols), 0,
                             "layouts %d -> %d, block %dx%d", li, lo, out_blocks[ob][0],
                             out_blocks[ob][1]);
                /* E_out = max E_in - 6 for the first block, naively */
                int e_max = 0;
                for (int64_t r = 0; r < out_blocks[ob][0]; r++)
                    for (int64_t k = 0; k < out_blocks[ob][1] / 32; k++) {
                        int e = ref_sf_exponent(&in_shape, sf_in, r, k);
                        e_max = e > e_max ? e : e_max;
                    }
                cr_assert_eq(ref_sf_exponent(&out_shape, sf_out, 0, 0), e_max - 6);
                free(sf_in);
                free(sf_out);
            }
    free(x);
    free(fp4);
    free(e4m3);
    free(a);
    free(b);
}
