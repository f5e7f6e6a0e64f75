/*
 * test_ref_channel.c -- CPU tests of the per-channel cast reference
 * (tests/ref/channel_cast.c), the oracle of test_gpu_channel and tkbench.
 *
 * The reference is checked against things written independently of it:
 *   - naive formulas in double precision: sf = max(amax, 1e-4) / 448 and
 *     inv = 448 / max(amax, 1e-4) rounded once to f32, power-of-two scales
 *     from frexp, and an e4m3 encoder that searches the whole code table
 *     for the nearest value (ties to the even code), over every bf16 bit
 *     pattern and over random f32 data;
 *   - the generic block cast of cast.c with (128, 1) and (32, 1) blocks;
 *   - a lossless round trip: e4m3 data whose blocks hold 448 * s with s a
 *     power of two requantises to exactly the same codes, for all codes;
 *   - a materialised gather (zero rows for negative or out-of-range
 *     entries, N not a multiple of 128) and a plain transpose.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "channel_cast.h"
#include "reference.h"

/* ---- independent numerics ----------------------------------------------- */

/* Value of e4m3 code k (0 <= k < 127, positive), by the format's
 * definition (spec 3.1). */
static double naive_e4m3_value(int k) {
    int e = k >> 3, m = k & 7;
    return e == 0 ? m * ldexp(1.0, -9) : (1.0 + m / 8.0) * ldexp(1.0, e - 7);
}

/* Nearest e4m3 code of v by exhaustive search: ties go to the even code
 * (even mantissa), magnitudes from 448 up saturate, NaN -> 0x7F. */
static uint8_t naive_e4m3(float v) {
    if (isnan(v))
        return 0x7F;
    uint8_t sign = signbit(v) ? 0x80 : 0x00;
    double magnitude = fabs((double)v);
    if (magnitude >= 448.0)
        return sign | 0x7E;
    int best = 0;
    double best_distance = INFINITY;
    for (int k = 0; k < 127; k++) {
        double distance = fabs(naive_e4m3_value(k) - magnitude);
        if (distance < best_distance ||
            (distance == best_distance && (k & 1) == 0)) {
            best = k;
            best_distance = distance;
        }
    }
    return sign | (uint8_t)best;
}

/* sf and inv of spec 4.1 in double, rounded once to f32 (double holds
 * the exact quotient of two floats closely enough that rounding it to
 * f32 is the correctly rounded f32 division). */
static void naive_scale(float amax, bool round_sf, float *sf, float *inv) {
    double a = amax > 1e-4f ? (double)amax : (double)1e-4f;
    float plain_sf = (float)(a / 448.0);
    if (!round_sf) {
        *sf = plain_sf;
        *inv = (float)(448.0 / a);
        return;
    }
    /* next power of two >= plain_sf */
    int exponent;
    double mantissa = frexp((double)plain_sf, &exponent); /* [0.5, 1) */
    int e = mantissa == 0.5 ? exponent - 1 : exponent;
    *sf = (float)ldexp(1.0, e);
    *inv = (float)ldexp(1.0, -e);
}

static uint16_t bf16_bits_of(float value) { return ref_bf16_from_f32(value); }

/* ---- helpers -------------------------------------------------------------- */

static void *xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    cr_assert(p != NULL);
    return p;
}

static void fill_random(void *x, tk_dtype dtype, int64_t rows, int64_t stride, uint64_t seed) {
    /* pieces of 32 elements with their own power of two in [-12, 12]:
     * every block mixes magnitudes, so small values round to subnormal
     * e4m3 codes and to zero */
    ref_fill_rand_float(x, dtype, rows * stride / 32, 32, -12, 12, seed);
}

/* Checks every element and scale of a plain (no gather, f32/bf16) cast
 * against the naive formulas. */
static void check_naive(const void *x, tk_dtype dtype, int64_t rows, int64_t cols,
                        int64_t stride, int npt, bool round_sf, const uint8_t *out,
                        const float *sf) {
    for (int64_t b = 0; b * npt < rows; b++) {
        int64_t r1 = (b + 1) * npt < rows ? (b + 1) * npt : rows;
        for (int64_t c = 0; c < cols; c++) {
            float amax = 0.0f;
            for (int64_t r = b * npt; r < r1; r++) {
                float v = ref_load_f32(x, dtype, r * stride + c);
                if (fabsf(v) > amax)
                    amax = fabsf(v);
            }
            float want_sf, inv;
            naive_scale(amax, round_sf, &want_sf, &inv);
            cr_assert(memcmp(&sf[b * cols + c], &want_sf, 4) == 0,
                      "scale of block (%ld, %ld): got %a, expected %a", (long)b, (long)c,
                      (double)sf[b * cols + c], (double)want_sf);
            for (int64_t r = b * npt; r < r1; r++) {
                float v = ref_load_f32(x, dtype, r * stride + c);
                uint8_t want = naive_e4m3((float)((double)v * (double)inv));
                cr_assert_eq(out[r * cols + c], want,
                             "out[%ld, %ld] (x = %a, inv = %a): got 0x%02x, expected 0x%02x",
                             (long)r, (long)c, (double)v, (double)inv, out[r * cols + c],
                             want);
            }
        }
    }
}

/* ---- naive formulas --------------------------------------------------------- */

/* All 65536 bf16 patterns (non-finite ones replaced by zero), 512 rows of
 * 128 columns, in pattern order and shuffled. */
Test(channel_reference, every_bf16_pattern_against_naive_formulas, .timeout = 600) {
    const int64_t rows = 512, cols = 128;
    uint16_t *x = xmalloc((size_t)(rows * cols) * 2);
    uint8_t *out = xmalloc((size_t)(rows * cols));
    float *sf = xmalloc((size_t)(rows / 128 * cols) * 4);
    for (int shuffled = 0; shuffled < 2; shuffled++) {
        for (int64_t i = 0; i < rows * cols; i++)
            x[i] = (uint16_t)i;
        if (shuffled) {
            ref_rng rng = ref_rng_seed(7, 0);
            for (int64_t i = rows * cols - 1; i > 0; i--) {
                int64_t j = (int64_t)(ref_rng_next(&rng) % (uint64_t)(i + 1));
                uint16_t t = x[i];
                x[i] = x[j];
                x[j] = t;
            }
        }
        for (int64_t i = 0; i < rows * cols; i++)
            if ((x[i] & 0x7F80) == 0x7F80)
                x[i] = 0;
        for (int round_sf = 0; round_sf < 2; round_sf++) {
            ref_channel_input in = ref_channel_float_input(x, TK_BF16, rows, cols, cols);
            cr_assert(ref_per_channel_cast(&in, NULL, rows, 128, round_sf, false, out, sf));
            check_naive(x, TK_BF16, rows, cols, cols, 128, round_sf, out, sf);
        }
    }
    free(x);
    free(out);
    free(sf);
}

/* Random f32 and bf16 with a padded row stride, partial last blocks, 32-
 * and 128-row blocks. */
Test(channel_reference, random_against_naive_formulas, .timeout = 600) {
    const tk_dtype dtypes[] = {TK_F32, TK_BF16};
    const int64_t shapes[][3] = {{256, 128, 128}, {300, 192, 256}, {33, 64, 64}};
    for (int d = 0; d < 2; d++)
        for (int s = 0; s < 3; s++)
            for (int npt = 32; npt <= 128; npt *= 4)
                for (int round_sf = 0; round_sf < 2; round_sf++) {
                    int64_t rows = shapes[s][0], cols = shapes[s][1], stride = shapes[s][2];
                    void *x = xmalloc((size_t)(rows * stride) * 4);
                    uint8_t *out = xmalloc((size_t)(rows * cols));
                    float *sf = xmalloc((size_t)((rows + npt - 1) / npt * cols) * 4);
                    fill_random(x, dtypes[d], rows, stride, 100 + (uint64_t)s);
                    ref_channel_input in = ref_channel_float_input(x, dtypes[d], rows, cols, stride);
                    cr_assert(ref_per_channel_cast(&in, NULL, rows, npt, round_sf, false, out, sf));
                    check_naive(x, dtypes[d], rows, cols, stride, npt, round_sf, out, sf);
                    free(x);
                    free(out);
                    free(sf);
                }
}

/* The requantisation order of spec 6.7: ((f32(x) * s_in) * inv), with
 * scales that are not powers of two, so x * (s_in * inv) would differ. */
Test(channel_reference, quantized_input_order_of_operations) {
    const int64_t rows = 256, cols = 256, groups = 2;
    uint8_t *x = xmalloc((size_t)(rows * cols));
    float *x_sf = xmalloc((size_t)(rows * groups) * 4);
    uint8_t *out = xmalloc((size_t)(rows * cols));
    float *sf = xmalloc((size_t)(rows / 128 * cols) * 4);
    ref_fill_rand_e4m3(x, rows * cols, 11);
    ref_rng rng = ref_rng_seed(12, 0);
    for (int64_t i = 0; i < rows * groups; i++)
        x_sf[i] = 0.001f + ref_rng_uniform(&rng) * 3.0f;
    for (int round_sf = 0; round_sf < 2; round_sf++) {
        ref_channel_input in = {x, TK_E4M3, rows, cols, cols, x_sf, {groups, 1}};
        cr_assert(ref_per_channel_cast(&in, NULL, rows, 128, round_sf, false, out, sf));
        /* products where the other association gives another f32: the
         * data tells the orders apart before the (coarse) e4m3 rounding */
        int differs = 0;
        for (int64_t b = 0; b < rows / 128; b++)
            for (int64_t c = 0; c < cols; c++) {
                float amax = 0.0f;
                for (int64_t r = b * 128; r < (b + 1) * 128; r++) {
                    float v = (float)((double)ref_e4m3_to_f32(x[r * cols + c]) *
                                      (double)x_sf[r * groups + c / 128]);
                    amax = fabsf(v) > amax ? fabsf(v) : amax;
                }
                float want_sf, inv;
                naive_scale(amax, round_sf, &want_sf, &inv);
                cr_assert(memcmp(&sf[b * cols + c], &want_sf, 4) == 0);
                for (int64_t r = b * 128; r < (b + 1) * 128; r++) {
                    double code = ref_e4m3_to_f32(x[r * cols + c]);
                    float s_in = x_sf[r * groups + c / 128];
                    float v = (float)(code * (double)s_in);
                    uint8_t want = naive_e4m3((float)((double)v * (double)inv));
                    float other = (float)(code * (double)(float)((double)s_in * inv));
                    differs += (float)((double)v * (double)inv) != other;
                    cr_assert_eq(out[r * cols + c], want, "out[%ld, %ld]", (long)r, (long)c);
                }
            }
        /* the data must be able to tell the two orders apart (a power-of-
         * two inv, round_sf, makes them equal) */
        if (!round_sf)
            cr_assert_gt(differs, 0, "no element depends on the order");
    }
    free(x);
    free(x_sf);
    free(out);
    free(sf);
}

/* e4m3 data in blocks whose |max| is 448 * s with s = 2^k the same for
 * every row of the block requantises losslessly: every finite code comes
 * back unchanged (sf = s, inv = 1 / s exactly, with and without round_sf). */
Test(channel_reference, quantized_input_lossless_for_every_code) {
    const int64_t rows = 512, cols = 256, groups = 2;
    uint8_t *x = xmalloc((size_t)(rows * cols));
    float *x_sf = xmalloc((size_t)(rows * groups) * 4);
    uint8_t *out = xmalloc((size_t)(rows * cols));
    float *sf = xmalloc((size_t)(rows / 128 * cols) * 4);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            /* every code in every column over the 4 blocks, NaN excluded;
             * row 0 of each block holds 448 (0x7E) */
            uint8_t code = (uint8_t)((r * 7 + c) & 0xFF);
            if ((code & 0x7F) == 0x7F)
                code = 0x00;
            x[r * cols + c] = r % 128 == 0 ? 0x7E : code;
        }
    for (int64_t r = 0; r < rows; r++)
        for (int64_t g = 0; g < groups; g++)
            x_sf[r * groups + g] = ldexpf(1.0f, (int)(r / 128 * 9 + g * 5) - 20);
    for (int round_sf = 0; round_sf < 2; round_sf++) {
        ref_channel_input in = {x, TK_E4M3, rows, cols, cols, x_sf, {groups, 1}};
        cr_assert(ref_per_channel_cast(&in, NULL, rows, 128, round_sf, false, out, sf));
        cr_assert(memcmp(out, x, (size_t)(rows * cols)) == 0, "round_sf %d: codes changed",
                  round_sf);
        for (int64_t b = 0; b < rows / 128; b++)
            for (int64_t c = 0; c < cols; c++)
                cr_assert_eq(sf[b * cols + c], x_sf[b * 128 * groups + c / 128]);
    }
    free(x);
    free(x_sf);
    free(out);
    free(sf);
}

/* ---- consistency with the other references -------------------------------- */

/* per_channel_cast is the block cast with (num_per_tokens, 1) blocks and a
 * row-major SF (spec 6.6): ref_cast_e4m3 of cast.c gives the same bytes. */
Test(channel_reference, equals_block_cast) {
    const tk_dtype dtypes[] = {TK_F32, TK_BF16};
    for (int d = 0; d < 2; d++)
        for (int npt = 32; npt <= 128; npt *= 4)
            for (int round_sf = 0; round_sf < 2; round_sf++) {
                int64_t rows = 1000, cols = 576, stride = 640;
                void *x = xmalloc((size_t)(rows * stride) * 4);
                uint8_t *out = xmalloc((size_t)(rows * cols)), *want = xmalloc((size_t)(rows * cols));
                ref_sf_shape shape;
                cr_assert(ref_sf_shape_of(rows, cols, npt, 1, TK_SF_ROW_MAJOR, &shape));
                float *sf = xmalloc(shape.bytes), *want_sf = xmalloc(shape.bytes);
                fill_random(x, dtypes[d], rows, stride, 200 + (uint64_t)npt);
                ref_channel_input in = ref_channel_float_input(x, dtypes[d], rows, cols, stride);
                cr_assert(ref_per_channel_cast(&in, NULL, rows, npt, round_sf, false, out, sf));
                cr_assert(ref_cast_e4m3(x, dtypes[d], rows, cols, stride, npt, 1, round_sf,
                                        TK_SF_ROW_MAJOR, want, want_sf));
                cr_assert(memcmp(out, want, (size_t)(rows * cols)) == 0);
                cr_assert(memcmp(sf, want_sf, shape.bytes) == 0);
                free(x);
                free(out);
                free(want);
                free(sf);
                free(want_sf);
            }
}

/* The scales' layout is the library's TK_SF_ROW_MAJOR descriptor of
 * (num_per_tokens, 1) blocks. */
Test(channel_reference, scale_layout_is_tk_sf_desc) {
    int64_t shapes[][2] = {{4096, 7168}, {8064, 576}, {336, 128}, {0, 64}};
    for (int s = 0; s < 4; s++)
        for (int npt = 32; npt <= 128; npt *= 4) {
            tk_tensor desc;
            size_t bytes = 0;
            cr_assert_eq(tk_sf_desc(shapes[s][0], shapes[s][1], npt, 1, TK_SF_ROW_MAJOR, &desc,
                                    &bytes),
                         TK_SUCCESS);
            int64_t blocks = (shapes[s][0] + npt - 1) / npt;
            cr_assert_eq(desc.dtype, TK_F32);
            cr_assert_eq(desc.shape[0], blocks);
            cr_assert_eq(desc.shape[1], shapes[s][1]);
            cr_assert_eq(desc.strides[0], shapes[s][1]);
            cr_assert_eq(desc.strides[1], 1);
            cr_assert_eq(bytes, (size_t)(blocks * shapes[s][1] * 4));
        }
}

/* A gather equals the cast of the materialised gathered matrix: zero rows
 * (data and scale) for negative or out-of-range entries, and a last block
 * of N % 128 rows that sees only its own rows. */
Test(channel_reference, gather_equals_materialised_rows) {
    const int64_t rows = 300, cols = 256, groups = 2, out_rows = 336; /* 336 % 128 = 80 */
    int32_t *pos = xmalloc((size_t)out_rows * 4);
    ref_rng rng = ref_rng_seed(21, 0);
    for (int64_t r = 0; r < out_rows; r++) {
        uint64_t pick = ref_rng_next(&rng) % 10;
        pos[r] = pick == 0 ? -1 : pick == 1 ? (int32_t)(rows + r) /* out of range */
                                            : (int32_t)(ref_rng_next(&rng) % (uint64_t)rows);
    }
    const tk_dtype dtypes[] = {TK_BF16, TK_F32, TK_E4M3};
    for (int d = 0; d < 3; d++)
        for (int round_sf = 0; round_sf < 2; round_sf++) {
            size_t element = dtypes[d] == TK_F32 ? 4 : dtypes[d] == TK_BF16 ? 2 : 1;
            unsigned char *x = xmalloc((size_t)(rows * cols) * element);
            unsigned char *gathered = xmalloc((size_t)(out_rows * cols) * element);
            float *x_sf = xmalloc((size_t)(rows * groups) * 4);
            float *gathered_sf = xmalloc((size_t)(out_rows * groups) * 4);
            if (dtypes[d] == TK_E4M3) {
                ref_fill_rand_e4m3(x, rows * cols, 22);
                for (int64_t i = 0; i < rows * groups; i++)
                    x_sf[i] = ldexpf(1.0f + ref_rng_uniform(&rng), (int)(i % 9) - 4);
            } else {
                fill_random(x, dtypes[d], rows, cols, 23);
            }
            for (int64_t r = 0; r < out_rows; r++) {
                bool valid = pos[r] >= 0 && pos[r] < rows;
                if (valid)
                    memcpy(gathered + (size_t)(r * cols) * element,
                           x + (size_t)(pos[r] * cols) * element, (size_t)cols * element);
                else
                    memset(gathered + (size_t)(r * cols) * element, 0, (size_t)cols * element);
                for (int64_t g = 0; g < groups; g++)
                    gathered_sf[r * groups + g] = valid ? x_sf[pos[r] * groups + g] : 0.0f;
            }
            bool quantized = dtypes[d] == TK_E4M3;
            ref_channel_input in = {x, dtypes[d], rows, cols, cols, quantized ? x_sf : NULL,
                                    {groups, 1}};
            ref_channel_input flat = {gathered, dtypes[d], out_rows, cols, cols,
                                      quantized ? gathered_sf : NULL, {groups, 1}};
            int64_t nb = (out_rows + 127) / 128;
            uint8_t *out = xmalloc((size_t)(out_rows * cols)), *want = xmalloc((size_t)(out_rows * cols));
            float *sf = xmalloc((size_t)(nb * cols) * 4), *want_sf = xmalloc((size_t)(nb * cols) * 4);
            cr_assert(ref_per_channel_cast(&in, pos, out_rows, 128, round_sf, false, out, sf));
            cr_assert(ref_per_channel_cast(&flat, NULL, out_rows, 128, round_sf, false, want,
                                           want_sf));
            cr_assert(memcmp(out, want, (size_t)(out_rows * cols)) == 0, "dtype %d", d);
            cr_assert(memcmp(sf, want_sf, (size_t)(nb * cols) * 4) == 0, "dtype %d", d);
            /* float input: also the generic block cast of the gathered rows */
            if (!quantized) {
                cr_assert(ref_cast_e4m3(gathered, dtypes[d], out_rows, cols, cols, 128, 1,
                                        round_sf, TK_SF_ROW_MAJOR, want, want_sf));
                cr_assert(memcmp(out, want, (size_t)(out_rows * cols)) == 0);
                cr_assert(memcmp(sf, want_sf, (size_t)(nb * cols) * 4) == 0);
            }
            free(x);
            free(gathered);
            free(x_sf);
            free(gathered_sf);
            free(out);
            free(want);
            free(sf);
            free(want_sf);
        }
    free(pos);
}

/* per_channel_cast_and_transpose writes the transpose of the row-major
 * result, with the same scales. */
Test(channel_reference, transposed_equals_transpose_of_plain) {
    const int64_t rows = 384, cols = 192;
    uint16_t *x = xmalloc((size_t)(rows * cols) * 2);
    uint8_t *plain = xmalloc((size_t)(rows * cols)), *transposed = xmalloc((size_t)(rows * cols));
    float *sf = xmalloc((size_t)(rows / 32 * cols) * 4), *sf_t = xmalloc((size_t)(rows / 32 * cols) * 4);
    fill_random(x, TK_BF16, rows, cols, 31);
    for (int npt = 32; npt <= 128; npt *= 4)
        for (int round_sf = 0; round_sf < 2; round_sf++) {
            ref_channel_input in = ref_channel_float_input(x, TK_BF16, rows, cols, cols);
            cr_assert(ref_per_channel_cast(&in, NULL, rows, npt, round_sf, false, plain, sf));
            cr_assert(ref_per_channel_cast(&in, NULL, rows, npt, round_sf, true, transposed, sf_t));
            for (int64_t r = 0; r < rows; r++)
                for (int64_t c = 0; c < cols; c++)
                    cr_assert_eq(transposed[c * rows + r], plain[r * cols + c]);
            cr_assert(memcmp(sf, sf_t, (size_t)(rows / npt * cols) * 4) == 0);
        }
    free(x);
    free(plain);
    free(transposed);
    free(sf);
    free(sf_t);
}

/* Zeros quantise to +0 and a zero block gets the floor scale 1e-4 / 448. */
Test(channel_reference, zero_block_uses_the_clamp) {
    float x[128 * 64] = {0};
    uint8_t out[128 * 64];
    float sf[64];
    x[5 * 64 + 3] = -0.0f;
    ref_channel_input in = ref_channel_float_input(x, TK_F32, 128, 64, 64);
    cr_assert(ref_per_channel_cast(&in, NULL, 128, 128, false, false, out, sf));
    for (int c = 0; c < 64; c++)
        cr_assert_eq(sf[c], 1e-4f / 448.0f);
    cr_assert_eq(out[5 * 64 + 3], 0x80); /* the sign of zero is kept */
    cr_assert_eq(out[0], 0x00);
    (void)bf16_bits_of;
}

Test(channel_reference, rejects_bad_arguments) {
    float x[64 * 64] = {0}, x_sf[64] = {0};
    uint8_t out[64 * 64];
    float sf[64];
    int32_t pos[16] = {0};
    ref_channel_input good = ref_channel_float_input(x, TK_F32, 64, 64, 64);
    cr_assert(ref_per_channel_cast(&good, NULL, 64, 128, false, false, out, sf));
    ref_channel_input bad = good;
    bad.dtype = TK_I8;
    cr_assert_not(ref_per_channel_cast(&bad, NULL, 64, 128, false, false, out, sf));
    bad = good;
    bad.x_sf = x_sf; /* scales with float input */
    cr_assert_not(ref_per_channel_cast(&bad, NULL, 64, 128, false, false, out, sf));
    bad = good;
    bad.dtype = TK_E4M3; /* quantised input without scales */
    cr_assert_not(ref_per_channel_cast(&bad, NULL, 64, 128, false, false, out, sf));
    bad = good;
    bad.row_stride = 32;
    cr_assert_not(ref_per_channel_cast(&bad, NULL, 64, 128, false, false, out, sf));
    cr_assert_not(ref_per_channel_cast(&good, NULL, 64, 0, false, false, out, sf));
    cr_assert_not(ref_per_channel_cast(&good, NULL, 16, 128, false, false, out, sf));
    cr_assert_not(ref_per_channel_cast(NULL, NULL, 64, 128, false, false, out, sf));
    cr_assert(ref_per_channel_cast(&good, pos, 16, 128, false, false, out, sf));
    cr_assert(ref_per_channel_cast(&good, pos, 0, 128, false, false, out, sf));
}

/* The gather table follows get_fused_mapping's invariants (spec 5.9):
 * each expert's range is its entries, in token order, then -1 padding up
 * to a multiple of the alignment; every received token appears. */
Test(channel_reference, moe_positions_follow_the_mapping_invariants) {
    const int params[][4] = {{8, 32, 8, 128}, {2, 9, 8, 16}, {1, 1, 1, 128}, {9, 4, 64, 128}};
    for (int i = 0; i < 4; i++) {
        int64_t tokens = -1, rows = -1;
        int32_t *pos = ref_channel_moe_positions(500, params[i][0], params[i][1], params[i][2],
                                                 params[i][3], 5, &tokens, &rows);
        cr_assert(pos != NULL);
        cr_assert_eq(rows % params[i][3], 0);
        cr_assert_gt(tokens, 0);
        bool *seen = calloc((size_t)tokens, 1);
        int64_t entries = 0;
        for (int64_t p = 0; p < rows; p++) {
            cr_assert(pos[p] >= -1 && pos[p] < tokens, "pos[%ld] = %d", (long)p, pos[p]);
            if (pos[p] < 0)
                continue;
            seen[pos[p]] = true;
            entries++;
            /* inside a range, entries precede padding and tokens ascend
             * (a token meets an expert at most once) */
            if (p % params[i][3] != 0 && pos[p - 1] >= 0)
                cr_assert_lt(pos[p - 1], pos[p]);
        }
        for (int64_t t = 0; t < tokens; t++)
            cr_assert(seen[t], "token %ld never routed", (long)t);
        /* with one rank every pick is local */
        if (params[i][2] == 1)
            cr_assert_eq(entries, 500 * params[i][0]);
        free(seen);
        free(pos);
    }
    int64_t tokens, rows;
    cr_assert_null(ref_channel_moe_positions(10, 5, 2, 2, 128, 1, &tokens, &rows));
    int32_t *empty = ref_channel_moe_positions(0, 1, 1, 1, 128, 1, &tokens, &rows);
    cr_assert(empty != NULL);
    cr_assert_eq(tokens, 0);
    cr_assert_eq(rows, 0);
    free(empty);
}
