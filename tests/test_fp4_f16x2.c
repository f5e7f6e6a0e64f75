/*
 * test_fp4_f16x2.c -- proves the packed f16x2 FP4 encoders of stdlib/fp4.tk
 * (fp4_pack8_f16x2_folded, _fma and _bounded and their helpers, used by
 * per_token_requant from e4m3 data whenever the combined multiplier is a
 * power of two 2^-14..2^15) bit-exact against the reference encoder,
 * exhaustively, with no GPU.
 *
 * Each PTX instruction the tk code issues is replayed in C on the same
 * 32-bit words: cvt.rn.f16x2.e4m3x2 as the exact f16 of each byte,
 * mul/fma.rn.f16x2 as the exact result rounded to f16 (ties to even,
 * subnormals kept, overflow to infinity), min/max.f16x2 dropping a NaN
 * operand, max.xorsign.abs.f16x2, abs.f16x2, prmt.b32 with its sign
 * mode, and the integer steps.  Every e4m3 code of an encoder's domain
 * (products at most 6 in magnitude; NaN too for the bounded encoder) is
 * encoded in every lane position of the 8-element word next to other
 * codes, with every multiplier the encoder's gate admits
 * (fp4_f16_multiplier, fp4_f16_fma_multiplier), and compared with
 * ref_e2m1_from_f32(f32(v) * 2^q) -- the kernel's f32 path.  The same
 * runs with f16 subnormal inputs and results flushed, which must not
 * change any code.  The packed |max| is checked against fmaxf of fabsf
 * for every pair of codes, and the gates for every sign and exponent.
 * The FMA-pipe rounding is also checked for every f16 input on its own,
 * and the NaN flags (the fma chain, and the NaN-propagating maxima
 * per_token_requant takes it from) and the division-free round_sf
 * exponent likewise.  Last, the kernel's thread layout (lane-interleaved
 * chunks, the pair exchange of partial maxima and multipliers) is
 * replayed thread by thread against ref_per_token_quant.
 */
#pragma GCC optimize("fp-contract=off")

#include <criterion/criterion.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "fp4.h"
#include "packed_emulation.h"
#include "reference.h"

static bool flush; /* replay a hardware that flushes f16 subnormals */

/* The value of an f16 pattern (a NaN as NaN). */
static double f16_value(uint16_t h) {
    unsigned exponent = (h >> 10) & 0x1Fu, mantissa = h & 0x3FFu;
    double sign = (h & 0x8000u) ? -1.0 : 1.0;
    if (exponent == 0x1Fu)
        return mantissa ? NAN : sign * INFINITY;
    if (exponent == 0)
        return flush ? sign * 0.0 : sign * ldexp(mantissa, -24);
    return sign * ldexp(1024 + mantissa, (int)exponent - 25);
}

/* An exact double rounded to f16: ties to even, subnormals kept (or
 * flushed to a signed zero), overflow to infinity. */
static uint16_t f16_round(double v) {
    if (isnan(v))
        return 0x7FFFu;
    uint16_t sign = signbit(v) ? 0x8000u : 0;
    double a = fabs(v);
    if (a == 0.0)
        return sign;
    double rounded = packed_round_magnitude(a, -14, 10); /* subnormal spacing 2^-24 */
    if (rounded > 65504.0)
        return sign | 0x7C00u;
    if (rounded < ldexp(1.0, -14))
        return flush ? sign : (uint16_t)(sign | (uint16_t)(rounded / ldexp(1.0, -24)));
    int re;
    frexp(rounded, &re);
    unsigned biased = (unsigned)(re - 1 + 15);
    unsigned mantissa = (unsigned)(ldexp(rounded, -(re - 1)) * 1024.0) - 1024u;
    return (uint16_t)(sign | (biased << 10) | mantissa);
}

/* The exact f16 of an e4m3 code (every e4m3 value is an f16 value). */
static uint16_t f16_of_e4m3(uint8_t code) {
    if ((code & 0x7Fu) == 0x7Fu)
        return 0x7FFFu;
    bool saved = flush;
    flush = false;
    uint16_t h = f16_round((double)ref_e4m3_to_f32(code));
    flush = saved;
    return h;
}

/* f16 for the shared emulations, whose f16_value follows the flush
 * switch. */
static const packed_format f16_format = {0x7C00u, f16_value, f16_round};

static bool f16_is_nan(uint16_t h) { return packed_is_nan(&f16_format, h); }

static uint32_t f16x2_mul(uint32_t a, uint32_t b) { return packed_mul(&f16_format, a, b); }
static uint32_t f16x2_fma(uint32_t a, uint32_t b, uint32_t c) {
    return packed_fma(&f16_format, a, b, c);
}

static uint32_t f16x2_min(uint32_t a, uint32_t b) { return packed_min(&f16_format, a, b); }
static uint32_t f16x2_max(uint32_t a, uint32_t b) { return packed_max(&f16_format, a, b); }
/* max.NaN.f16x2 (f16x2_max_nan): a NaN operand makes the half the
 * canonical NaN, else the NaN-free max. */
static uint16_t max_nan_lane(const packed_format *format, uint16_t a, uint16_t b, uint16_t c) {
    if (packed_is_nan(format, a) || packed_is_nan(format, b))
        return PACKED_CANONICAL_NAN;
    return packed_max_lane(format, a, b, c);
}
static uint32_t f16x2_max_nan(uint32_t a, uint32_t b) {
    return packed_per_lane(&f16_format, max_nan_lane, a, b, 0);
}
static uint32_t f16x2_max_xorsign_abs(uint32_t a, uint32_t b) {
    return packed_max_xorsign_abs(&f16_format, a, b);
}

/* abs.f16x2 (f16x2_abs) clears the two sign bits. */
static uint32_t f16x2_abs(uint32_t a) { return a & 0x7FFF7FFFu; }

static uint32_t e4m3x2_f16x2(uint32_t pair) {
    uint32_t low = f16_of_e4m3((uint8_t)pair), high = f16_of_e4m3((uint8_t)(pair >> 8));
    return low | (high << 16);
}

/* ---- stdlib/fp4.tk, line for line ---------------------------------------- */

static bool fp4_f16_multiplier(float m) {
    uint32_t bits = bits_of(m);
    return (bits & 0x007FFFFFu) == 0u && bits - 0x38800000u <= 0x0E800000u;
}

static uint32_t fp4_f16x2_splat(float m) { return (((bits_of(m) >> 23) - 112u) << 10) * 0x10001u; }

static float f32_of_f16(uint16_t h) { return (float)f16_value(h); }

static float fp4_f16x2_magnitude_max(uint32_t hi) {
    return fmaxf(f32_of_f16((uint16_t)hi), f32_of_f16((uint16_t)(hi >> 16)));
}

static uint32_t fp4_f16x2_codes_bounded(uint32_t y) {
    uint32_t c = f16x2_min(y, 0x46004600u);
    uint32_t b = f16x2_max_xorsign_abs(c & 0xFC00FC00u, 0x3C003C00u);
    uint32_t s = f16x2_fma(b, 0x60006000u, c);
    return s + (s >> 9);
}

static uint32_t fp4_pack8_f16x2_bounded(uint32_t p0, uint32_t p1, uint32_t p2, uint32_t p3,
                                        uint32_t m) {
    uint32_t u0 = fp4_f16x2_codes_bounded(f16x2_mul(p0, m));
    uint32_t u1 = fp4_f16x2_codes_bounded(f16x2_mul(p1, m));
    uint32_t u2 = fp4_f16x2_codes_bounded(f16x2_mul(p2, m));
    uint32_t u3 = fp4_f16x2_codes_bounded(f16x2_mul(p3, m));
    uint32_t n01 = prmt(u0, u1, 0x6420u) | (prmt(u0, u1, 0xFDB9u) & 0x08080808u);
    uint32_t n23 = prmt(u2, u3, 0x6420u) | (prmt(u2, u3, 0xFDB9u) & 0x08080808u);
    uint32_t even = prmt(n01, n23, 0x6420u);
    uint32_t odd = prmt(n01, n23, 0x7531u);
    return (even & 0x0F0F0F0Fu) | ((odd << 4) & 0xF0F0F0F0u);
}

static uint32_t fp4_f16x2_codes_fma(uint32_t y) {
    uint32_t v = f16x2_abs(y);
    uint32_t c1 = f16x2_fma(v, 0x40004000u, 0x64006400u);
    uint32_t c2 = f16x2_fma(v, 0x3C003C00u, 0x64026402u);
    uint32_t c3 = f16x2_fma(v, 0x38003800u, 0x64046404u);
    return f16x2_min(f16x2_min(c1, c2), c3);
}

static uint32_t fp4_pack8_f16x2_fma(uint32_t p0, uint32_t p1, uint32_t p2, uint32_t p3,
                                    uint32_t m) {
    uint32_t y0 = f16x2_mul(p0, m), y1 = f16x2_mul(p1, m);
    uint32_t y2 = f16x2_mul(p2, m), y3 = f16x2_mul(p3, m);
    uint32_t u0 = fp4_f16x2_codes_fma(y0), u1 = fp4_f16x2_codes_fma(y1);
    uint32_t u2 = fp4_f16x2_codes_fma(y2), u3 = fp4_f16x2_codes_fma(y3);
    uint32_t n01 = prmt(u0, u1, 0x6420u) | (prmt(y0, y1, 0xFDB9u) & 0x08080808u);
    uint32_t n23 = prmt(u2, u3, 0x6420u) | (prmt(y2, y3, 0xFDB9u) & 0x08080808u);
    uint32_t even = prmt(n01, n23, 0x6420u);
    uint32_t odd = prmt(n01, n23, 0x7531u);
    return odd * 16u + even;
}

static uint32_t fp4_f16x2_nan_flag(uint32_t flag, uint32_t pair) {
    return f16x2_fma(pair, 0u, flag);
}

/* The folded encoder: f16x2_low2 / f16x2_high2 pick a half for both. */
static uint32_t f16x2_low2(uint32_t a) { return (a & 0xFFFFu) * 0x10001u; }
static uint32_t f16x2_high2(uint32_t a) { return (a >> 16) * 0x10001u; }

static bool fp4_f16_fma_multiplier(float m) {
    uint32_t bits = bits_of(m);
    return (bits & 0x007FFFFFu) == 0u && bits - 0x39000000u <= 0x0D800000u;
}

static uint32_t fp4_f16x2_fold_pair(float m) {
    return ((bits_of(m) >> 23) - 112u) * 0x04000400u + 0x00000400u;
}
static uint32_t fp4_f16x2_fold_half(float m) { return ((bits_of(m) >> 23) - 113u) * 0x04000400u; }

static uint32_t fp4_f16x2_codes_folded(uint32_t p, uint32_t pair, uint32_t half) {
    uint32_t v = f16x2_abs(p);
    uint32_t c1 = f16x2_fma(v, f16x2_low2(pair), 0x64006400u);
    uint32_t c2 = f16x2_fma(v, f16x2_high2(pair), 0x64026402u);
    uint32_t c3 = f16x2_fma(v, half, 0x64046404u);
    return f16x2_min(f16x2_min(c1, c2), c3);
}

static uint32_t fp4_pack8_f16x2_folded(uint32_t p0, uint32_t p1, uint32_t p2, uint32_t p3,
                                       uint32_t pair, uint32_t half) {
    uint32_t u0 = fp4_f16x2_codes_folded(p0, pair, half);
    uint32_t u1 = fp4_f16x2_codes_folded(p1, pair, half);
    uint32_t u2 = fp4_f16x2_codes_folded(p2, pair, half);
    uint32_t u3 = fp4_f16x2_codes_folded(p3, pair, half);
    uint32_t n01 = prmt(u0, u1, 0x6420u) | (prmt(p0, p1, 0xFDB9u) & 0x08080808u);
    uint32_t n23 = prmt(u2, u3, 0x6420u) | (prmt(p2, p3, 0xFDB9u) & 0x08080808u);
    uint32_t even = prmt(n01, n23, 0x6420u);
    uint32_t odd = prmt(n01, n23, 0x7531u);
    return odd * 16u + even;
}

static int32_t fp4_round_exponent(float a) {
    return (int32_t)((bits_of(a) + 0x3FFFFFu) >> 23) - 129;
}

/* ---- the exhaustive comparison ------------------------------------------- */

enum encoder { ENCODER_BOUNDED, ENCODER_FMA, ENCODER_FOLDED };
static const char *const encoder_names[3] = {"bounded: ", "fma: ", "folded: "};

/* Encodes the eight e4m3 codes e[] times 2^q with the given encoder
 * (bounded, finite or folded) and counts the nibbles that
 * differ from the reference, logging the first few. */
static long check_group(const uint8_t e[8], int q, enum encoder encoder, long bad) {
    float m = ldexpf(1.0f, q);
    uint32_t splat = fp4_f16x2_splat(m);
    uint32_t p[4];
    for (int j = 0; j < 4; j++)
        p[j] = e4m3x2_f16x2((uint32_t)e[2 * j] | ((uint32_t)e[2 * j + 1] << 8));
    uint32_t word = encoder == ENCODER_BOUNDED
                        ? fp4_pack8_f16x2_bounded(p[0], p[1], p[2], p[3], splat)
                    : encoder == ENCODER_FMA
                        ? fp4_pack8_f16x2_fma(p[0], p[1], p[2], p[3], splat)
                        : fp4_pack8_f16x2_folded(p[0], p[1], p[2], p[3],
                                                 fp4_f16x2_fold_pair(m), fp4_f16x2_fold_half(m));
    for (int i = 0; i < 8; i++) {
        unsigned want = ref_e2m1_from_f32(ref_e4m3_to_f32(e[i]) * m);
        unsigned got = (word >> (4 * i)) & 0xFu;
        if (got != want && bad++ < 4)
            cr_log_error("%se4m3 0x%02x * 2^%d (lane %d, flush %d): packed 0x%x, "
                         "reference 0x%x", encoder_names[encoder], e[i], q, i, (int)flush,
                         got, want);
    }
    return bad;
}

Test(fp4_f16x2, gate_admits_exactly_the_f16_normal_powers_of_two) {
    for (uint32_t top = 0; top < 0x200u; top++) {
        int exponent = (int)(top & 0xFFu) - 127;
        bool want = top < 0x100u && exponent >= -14 && exponent <= 15;
        cr_assert_eq(fp4_f16_multiplier(f32_of(top << 23)), want, "0x%08x", top << 23);
        cr_assert(!fp4_f16_multiplier(f32_of((top << 23) | 0x200000u)));
        if (want)
            cr_assert_eq(fp4_f16x2_splat(f32_of(top << 23)),
                         (uint32_t)f16_round(ldexp(1.0, exponent)) * 0x10001u);
    }
}

Test(fp4_f16x2, packed_amax_of_every_pair) {
    for (uint32_t a = 0; a < 256u; a++)
        for (uint32_t b = 0; b < 256u; b++) {
            uint32_t pair = e4m3x2_f16x2(a | (b << 8));
            /* per_token_requant's form: the maxima of the magnitudes */
            float got = fp4_f16x2_magnitude_max(f16x2_max(0u, f16x2_abs(pair)));
            float want = fmaxf(fmaxf(0.0f, fabsf(ref_e4m3_to_f32((uint8_t)a))),
                               fabsf(ref_e4m3_to_f32((uint8_t)b)));
            /* the same bits: a zero |max| is +0 both ways */
            cr_assert_eq(bits_of(got), bits_of(want), "e4m3 0x%02x 0x%02x: %a, want %a", a, b,
                         (double)got, (double)want);
        }
}

/* The bounded encoder (per_token_requant's fast path) on its domain: every
 * e4m3 code v with |v| * 2^q <= 6, and NaN, in every lane next to every
 * other such code, for every admitted 2^q, with and without flushing.
 * The finite encoder (its NaN-free items) likewise without the NaNs. */
static long sweep_bounded(int q, enum encoder encoder) {
    static const unsigned strides[3] = {1u, 7u, 13u};
    float m = ldexpf(1.0f, q);
    uint8_t domain[256];
    unsigned n = 0;
    for (unsigned code = 0; code < 256u; code++) {
        float v = ref_e4m3_to_f32((uint8_t)code);
        if (isnan(v) ? encoder == ENCODER_BOUNDED : fabsf(v) * m <= 6.0f)
            domain[n++] = (uint8_t)code;
    }
    long bad = 0;
    for (int pass = 0; pass < 3; pass++)
        for (unsigned base = 0; base < n; base++) {
            uint8_t e[8];
            for (unsigned i = 0; i < 8; i++)
                e[i] = domain[(base + i * strides[pass]) % n];
            bad = check_group(e, q, encoder, bad);
        }
    return bad;
}

Test(fp4_f16x2, bounded_products_match_the_reference) {
    long bad = 0;
    for (int f = 0; f < 2; f++) {
        flush = f == 1;
        for (int q = -14; q <= 15; q++)
            bad += sweep_bounded(q, ENCODER_BOUNDED);
    }
    flush = false;
    cr_assert_eq(bad, 0, "%ld mismatching elements", bad);
}

Test(fp4_f16x2, finite_products_match_the_reference) {
    long bad = 0;
    for (int f = 0; f < 2; f++) {
        flush = f == 1;
        for (int q = -14; q <= 15; q++)
            bad += sweep_bounded(q, ENCODER_FMA);
    }
    flush = false;
    cr_assert_eq(bad, 0, "%ld mismatching elements", bad);
}

/* The folded encoder on its domain (NaN-free items, every product at
 * most 6) for every multiplier its gate admits, with and without
 * flushing; the gate admits exactly the powers of two 2^-13..2^14, and
 * the two multiplier registers hold 2m | m and m / 2 | m / 2. */
Test(fp4_f16x2, folded_multiplier_matches_the_reference) {
    for (uint32_t top = 0; top < 0x200u; top++) {
        int exponent = (int)(top & 0xFFu) - 127;
        bool want = top < 0x100u && exponent >= -13 && exponent <= 14;
        float m = f32_of(top << 23);
        cr_assert_eq(fp4_f16_fma_multiplier(m), want, "0x%08x", top << 23);
        cr_assert(!fp4_f16_fma_multiplier(f32_of((top << 23) | 0x400000u)));
        if (want) {
            uint32_t twice = f16_round(ldexp(1.0, exponent + 1));
            uint32_t once = f16_round(ldexp(1.0, exponent));
            uint32_t half = f16_round(ldexp(1.0, exponent - 1));
            cr_assert_eq(fp4_f16x2_fold_pair(m), twice | (once << 16));
            cr_assert_eq(fp4_f16x2_fold_half(m), half * 0x10001u);
        }
    }
    long bad = 0;
    for (int f = 0; f < 2; f++) {
        flush = f == 1;
        for (int q = -13; q <= 14; q++)
            bad += sweep_bounded(q, ENCODER_FOLDED);
    }
    flush = false;
    cr_assert_eq(bad, 0, "%ld mismatching elements", bad);
}

/* The FMA-pipe rounding of fp4_f16x2_codes_fma for every f16 pattern in
 * either half (the other half another pattern), with and without
 * flushing: inside the kernel's domain (|x| <= 6, not NaN) the half is
 * 0x6400 + the reference's magnitude code and y's bit 15 its sign; for
 * the rest of the patterns the same formula after the clamp min(|x|, 6)
 * (NaN -> +6, no sign) gives the reference's saturation, which checks the
 * formula on every f16 magnitude, not only the e4m3 products. */
Test(fp4_f16x2, fma_rounding_of_every_f16) {
    long bad = 0;
    for (int f = 0; f < 2; f++) {
        flush = f == 1;
        for (uint32_t h = 0; h < 0x10000u; h++) {
            uint32_t partner = (h * 0x9Du + 0x1234u) & 0xFFFFu;
            uint32_t y = h | (partner << 16);
            uint32_t raw = fp4_f16x2_codes_fma(y);
            uint32_t saturated = fp4_f16x2_codes_fma(f16x2_min(f16x2_abs(y), 0x46004600u));
            for (int half = 0; half < 2; half++) {
                uint16_t lane = (uint16_t)(y >> (16 * half));
                flush = false;
                double x = f16_value(lane);
                flush = f == 1;
                bool nan = f16_is_nan(lane), inside = !nan && fabs(x) <= 6.0;
                uint16_t u = (uint16_t)((inside ? raw : saturated) >> (16 * half));
                unsigned got = (u & 7u) | (nan ? 0u : (unsigned)(lane >> 15) << 3);
                unsigned want = ref_e2m1_from_f32((float)x);
                if (((u & 0xFFF8u) != 0x6400u || got != want) && bad++ < 4)
                    cr_log_error("f16 0x%04x (flush %d, %s): half 0x%04x, nibble 0x%x, "
                                 "reference 0x%x", lane, f, inside ? "inside" : "clamped", u,
                                 got, want);
            }
        }
    }
    flush = false;
    cr_assert_eq(bad, 0, "%ld mismatching f16 patterns", bad);
}

/* The NaN flag is 0 after a pair exactly when neither code is a NaN, a
 * set flag stays set whatever follows, and two flags combine the same
 * way (with and without flushing: a subnormal times 0 is a zero either
 * way). */
Test(fp4_f16x2, nan_flag_of_every_pair) {
    for (int f = 0; f < 2; f++) {
        flush = f == 1;
        uint32_t set = fp4_f16x2_nan_flag(0u, e4m3x2_f16x2(0x7Fu));
        cr_assert_neq(set, 0u);
        for (uint32_t a = 0; a < 256u; a++)
            for (uint32_t b = 0; b < 256u; b++) {
                uint32_t pair = e4m3x2_f16x2(a | (b << 8));
                bool nan = (a & 0x7Fu) == 0x7Fu || (b & 0x7Fu) == 0x7Fu;
                uint32_t flag = fp4_f16x2_nan_flag(0u, pair);
                cr_assert_eq(flag != 0u, nan, "e4m3 0x%02x 0x%02x: flag 0x%08x", a, b, flag);
                cr_assert_neq(fp4_f16x2_nan_flag(set, pair), 0u, "0x%02x 0x%02x", a, b);
                cr_assert_eq(fp4_f16x2_nan_flag(flag, set) != 0u, true);
                cr_assert_eq(fp4_f16x2_nan_flag(flag, 0u) != 0u, nan);
            }
    }
    flush = false;
}

/* per_token_requant's NaN flag: the NaN-propagating maxima of the
 * magnitudes (f16x2_max_nan), their max, and fp4_f16x2_nan_flag(0, .) of
 * it, for every pair of e4m3 codes next to every other pair's maximum:
 * the flag is set exactly when a code is a NaN, and a NaN-free maximum is
 * the NaN-dropping one, so the |max| of a NaN-free item is unchanged. */
Test(fp4_f16x2, nan_propagating_maxima_flag_every_nan) {
    for (int f = 0; f < 2; f++) {
        flush = f == 1;
        for (uint32_t a = 0; a < 256u; a++)
            for (uint32_t b = 0; b < 256u; b++) {
                uint32_t pair = f16x2_abs(e4m3x2_f16x2(a | (b << 8)));
                bool nan = (a & 0x7Fu) == 0x7Fu || (b & 0x7Fu) == 0x7Fu;
                uint32_t hi = f16x2_max_nan(0u, pair);
                cr_assert_eq(fp4_f16x2_nan_flag(0u, hi) != 0u, nan, "0x%02x 0x%02x", a, b);
                if (!nan)
                    cr_assert_eq(hi, f16x2_max(0u, pair), "0x%02x 0x%02x", a, b);
                /* next to another chunk's maximum, either way round */
                uint32_t other = f16x2_abs(e4m3x2_f16x2(((a * 37u + 11u) & 0xFFu) |
                                                        (((b * 59u + 3u) & 0xFFu) << 8)));
                bool other_nan = fp4_f16x2_nan_flag(0u, other) != 0u;
                uint32_t both = f16x2_max_nan(hi, other);
                cr_assert_eq(fp4_f16x2_nan_flag(0u, both) != 0u, nan || other_nan);
                cr_assert_eq(fp4_f16x2_nan_flag(0u, f16x2_max_nan(other, hi)) != 0u,
                             nan || other_nan);
            }
    }
    flush = false;
}

/* fp4_round_exponent is pow2_exponent(a / 6) (stdlib/quant.tk) for every
 * finite a >= FP4_CLAMP_MIN. */
Test(fp4_f16x2, round_exponent_matches_the_division) {
    long bad = 0;
    for (uint32_t bits = 0x01C00000u; bits < 0x7F800000u; bits++) {
        float sf = f32_of(bits) / 6.0f;
        int32_t want = (int32_t)((bits_of(sf) - 1u) >> 23) + 1 - 127;
        int32_t got = fp4_round_exponent(f32_of(bits));
        if (got != want && bad++ < 4)
            cr_log_error("a = %a: %d, division %d", (double)f32_of(bits), got, want);
    }
    cr_assert_eq(bad, 0, "%ld mismatching exponents", bad);
}

/* ---- per_token_requant's e4m3 -> FP4 path, thread by thread --------------
 *
 * kernels/quant_fp4.tk gives each thread four lane-interleaved chunks of
 * 16 columns (lane c of a row's 16: columns c * 16 + 256 k of the block's
 * 1024) and splits a pair's four groups of 32 between its two lanes,
 * with shuffles each way; npc 16 makes every chunk a group.  This replay
 * follows those steps (the chunk loads with zeros past the row, the input
 * scale of each computed chunk (junk past the row: the kernel may read a
 * packed word's padding), the pair exchange, the butterfly over 2 and 4,
 * the division-free round_sf, the store condition, the exchange back, the
 * gate and the three encoders) and compares the output bytes and scales
 * with ref_per_token_quant, each scale stored exactly once. */

enum { REQUANT_BK = 1024, REQUANT_LANES = 16, REQUANT_CHUNK = 16 };

typedef struct requant_problem {
    int64_t rows, cols;
    int npc, bm_in, bk_in;
    tk_sf_layout in_layout, out_layout;
    bool round;
    const uint8_t *x;
    const unsigned char *sf_in;
    const ref_sf_shape *in_shape, *out_shape;
    uint8_t *out;
    unsigned char *sf;
    int *stores; /* per (row, group): how many lanes stored its scale */
    long *paths; /* threads per encoder: finite, bounded, f32, folded */
} requant_problem;

/* One thread's state between the steps that exchange values. */
typedef struct requant_lane {
    uint32_t pr[32];
    uint32_t nan_flag;
    float chunk_max[4], s_in[4], part[4], mult[4], chunk_mult[4];
    int64_t first[4];
} requant_lane;

/* One row t of tile bx: the row's 16 lanes, as the kernel runs them. */
static void requant_row(const requant_problem *p, int64_t t, int64_t bx) {
    const int g2 = p->npc == 16, ns = g2 ? 4 : 2;
    int npc_log2 = 0;
    while ((1 << npc_log2) < p->npc)
        npc_log2++;
    const int lanes_log2 = npc_log2 - 4 > 0 ? npc_log2 - 4 : 0;
    const int64_t groups = (p->cols + p->npc - 1) / p->npc;
    const float clamp_min = f32_of(0x01C00000u);
    requant_lane lane[REQUANT_LANES];
    for (int c = 0; c < REQUANT_LANES; c++) {
        requant_lane *l = &lane[c];
        const int64_t col = bx * REQUANT_BK + c * REQUANT_CHUNK;
        const bool odd = !g2 && (c & 1);
        uint8_t xe[64];
        for (int k = 0; k < 4; k++)
            for (int i = 0; i < REQUANT_CHUNK; i++) {
                int64_t h = col + k * 256 + i;
                xe[k * REQUANT_CHUNK + i] = h < p->cols ? p->x[t * p->cols + h] : 0;
            }
        for (int j = 0; j < ns; j++) {
            l->first[j] = col + (g2 ? j : (odd ? 2 + j : j)) * 256;
            l->s_in[j] = l->first[j] < p->cols
                             ? ref_sf_load(p->in_shape, p->sf_in, t / p->bm_in,
                                           l->first[j] / p->bk_in)
                             : INFINITY;
        }
        for (int i = 0; i < 16; i++) {
            uint32_t word = (uint32_t)xe[4 * i] | ((uint32_t)xe[4 * i + 1] << 8) |
                            ((uint32_t)xe[4 * i + 2] << 16) | ((uint32_t)xe[4 * i + 3] << 24);
            l->pr[2 * i] = e4m3x2_f16x2(word & 0xFFFFu);
            l->pr[2 * i + 1] = e4m3x2_f16x2(word >> 16);
        }
        /* NaN-propagating chunk maxima, the NaN flag from their max, and
         * the NaN-dropping maxima again for an item holding a NaN */
        uint32_t raw_max[4];
        for (int k = 0; k < 4; k++) {
            uint32_t hi = 0u;
            for (int i = 0; i < 8; i++)
                hi = f16x2_max_nan(hi, f16x2_abs(l->pr[8 * k + i]));
            raw_max[k] = hi;
        }
        uint32_t all = raw_max[0];
        for (int k = 1; k < 4; k++)
            all = f16x2_max_nan(all, raw_max[k]);
        l->nan_flag = fp4_f16x2_nan_flag(0u, all);
        bool has_nan = false;
        for (int i = 0; i < 64; i++)
            has_nan = has_nan || (xe[i] & 0x7Fu) == 0x7Fu;
        cr_assert_eq(l->nan_flag != 0u, has_nan, "row %lld lane %d: NaN flag 0x%08x",
                     (long long)t, c, l->nan_flag);
        if (l->nan_flag != 0u)
            for (int k = 0; k < 4; k++) {
                uint32_t hi = 0u;
                for (int i = 0; i < 8; i++)
                    hi = f16x2_max(hi, f16x2_abs(l->pr[8 * k + i]));
                raw_max[k] = hi;
            }
        for (int k = 0; k < 4; k++)
            l->chunk_max[k] = fp4_f16x2_magnitude_max(raw_max[k]);
    }
    /* the pair exchange: what each lane sends is read by its partner */
    for (int c = 0; c < REQUANT_LANES; c++)
        for (int j = 0; j < ns; j++) {
            const requant_lane *l = &lane[c], *partner = &lane[c ^ 1];
            const bool odd = c & 1, partner_odd = !odd;
            if (g2) {
                lane[c].part[j] = l->chunk_max[j] * l->s_in[j];
            } else {
                float mine = odd ? l->chunk_max[2 + j] : l->chunk_max[j];
                float other = partner_odd ? partner->chunk_max[j] : partner->chunk_max[2 + j];
                lane[c].part[j] = fmaxf(mine, other) * l->s_in[j];
            }
        }
    for (int mask = 4; mask >= 2; mask /= 2) {
        if (lanes_log2 < (mask == 4 ? 3 : 2))
            continue;
        float before[REQUANT_LANES][4];
        for (int c = 0; c < REQUANT_LANES; c++)
            memcpy(before[c], lane[c].part, sizeof before[c]);
        for (int c = 0; c < REQUANT_LANES; c++)
            for (int j = 0; j < ns; j++)
                lane[c].part[j] = fmaxf(before[c][j], before[c ^ mask][j]);
    }
    for (int c = 0; c < REQUANT_LANES; c++) {
        requant_lane *l = &lane[c];
        for (int j = 0; j < ns; j++) {
            float a = l->part[j], inv, sf;
            float clamped = fmaxf(a, clamp_min);
            if (p->round && bits_of(clamped) < 0x7F800000u) {
                int32_t n = fp4_round_exponent(clamped);
                inv = f32_of((uint32_t)(127 - n) << 23);
                sf = f32_of((uint32_t)(127 + n) << 23);
            } else {
                ref_scale s = ref_quant_scale(a, 6.0f, clamp_min, p->round);
                inv = s.inv;
                sf = s.sf;
            }
            l->mult[j] = l->s_in[j] * inv;
            int64_t group = l->first[j] >> npc_log2;
            if ((l->first[j] & (p->npc - 1)) < 32 && group < groups) {
                ref_scale stored = {sf, inv, (uint8_t)(bits_of(sf) >> 23)};
                ref_sf_store(p->out_shape, p->sf, t, group, stored);
                p->stores[t * groups + group]++;
            }
        }
    }
    for (int c = 0; c < REQUANT_LANES; c++) {
        requant_lane *l = &lane[c];
        const bool odd = !g2 && (c & 1);
        for (int j = 0; j < ns; j++) {
            if (g2) {
                l->chunk_mult[j] = l->mult[j];
            } else {
                float back = lane[c ^ 1].mult[j];
                l->chunk_mult[j] = odd ? back : l->mult[j];
                l->chunk_mult[2 + j] = odd ? l->mult[j] : back;
            }
        }
    }
    for (int c = 0; c < REQUANT_LANES; c++) {
        const requant_lane *l = &lane[c];
        const int64_t col = bx * REQUANT_BK + c * REQUANT_CHUNK;
        bool fast = true, folded = l->nan_flag == 0u;
        for (int k = 0; k < 4; k++) {
            fast = fast && fp4_f16_multiplier(l->chunk_mult[k]);
            folded = folded && fp4_f16_fma_multiplier(l->chunk_mult[k]);
        }
        uint32_t q[8];
        for (int i = 0; i < 8; i++) {
            const uint32_t *pr = &l->pr[4 * i];
            float m = l->chunk_mult[i / 2];
            if (i == 0)
                p->paths[folded ? 3 : fast ? (l->nan_flag == 0u ? 0 : 1) : 2]++;
            if (folded) {
                q[i] = fp4_pack8_f16x2_folded(pr[0], pr[1], pr[2], pr[3], fp4_f16x2_fold_pair(m),
                                              fp4_f16x2_fold_half(m));
            } else if (fast && l->nan_flag == 0u) {
                q[i] = fp4_pack8_f16x2_fma(pr[0], pr[1], pr[2], pr[3], fp4_f16x2_splat(m));
            } else if (fast) {
                q[i] = fp4_pack8_f16x2_bounded(pr[0], pr[1], pr[2], pr[3], fp4_f16x2_splat(m));
            } else {
                q[i] = 0u;
                for (int b = 0; b < 4; b++) {
                    float low = f32_of_f16((uint16_t)pr[b]) * m;
                    float high = f32_of_f16((uint16_t)(pr[b] >> 16)) * m;
                    q[i] |= (uint32_t)(ref_e2m1_from_f32(low) | (ref_e2m1_from_f32(high) << 4))
                            << (8 * b);
                }
            }
        }
        for (int k = 0; k < 4; k++) {
            int64_t h = col + k * 256;
            if (h >= p->cols)
                continue;
            for (int b = 0; b < 8; b++)
                p->out[t * (p->cols / 2) + h / 2 + b] =
                    (uint8_t)(q[2 * k + b / 4] >> (8 * (b % 4)));
        }
    }
}

Test(fp4_f16x2, requant_lane_layout_replay_matches_the_reference) {
    enum { ROWS = 5, MAX_COLS = 2112 };
    static const int64_t COLS[] = {1088, 2112, 1024};
    static const int NPC[] = {16, 32, 64, 128};
    static const int BLOCKS[][2] = {{128, 128}, {2, 32}, {1, 64}};
    static const tk_sf_layout IN_LAYOUTS[] = {TK_SF_PACKED_UE8M0, TK_SF_ROW_MAJOR,
                                              TK_SF_COL_MAJOR};
    static uint8_t x[ROWS * MAX_COLS], got[ROWS * MAX_COLS / 2], want[ROWS * MAX_COLS / 2];
    static unsigned char sf_in[1 << 16], got_sf[1 << 16], want_sf[1 << 16];
    static int stores[ROWS * MAX_COLS / 16];
    long cases = 0, paths[4] = {0, 0, 0, 0};
    for (size_t ci = 0; ci < sizeof COLS / sizeof COLS[0]; ci++)
        for (size_t ni = 0; ni < 4; ni++)
            for (size_t bi = 0; bi < 3; bi++)
                for (size_t li = 0; li < 3; li++)
                    for (int round = 0; round < 2; round++) {
                        int64_t cols = COLS[ci];
                        int npc = NPC[ni];
                        uint64_t seed = 77 + cases;
                        ref_fill_rand_e4m3(x, ROWS * cols, seed);
                        /* a few NaNs (the bounded encoder) and zero runs */
                        ref_rng rng = ref_rng_seed(seed, 3);
                        for (int i = 0; i < 6; i++)
                            x[ref_rng_next(&rng) % (uint64_t)(ROWS * cols)] =
                                (i & 1) ? 0xFFu : 0x7Fu;
                        memset(x + cols + 64, 0, 96);
                        ref_sf_shape in_shape, out_shape;
                        tk_sf_layout out_layout = IN_LAYOUTS[li] == TK_SF_PACKED_UE8M0 && round
                                                      ? TK_SF_PACKED_UE8M0
                                                      : TK_SF_ROW_MAJOR;
                        cr_assert(ref_sf_shape_of(ROWS, cols, BLOCKS[bi][0], BLOCKS[bi][1],
                                                  IN_LAYOUTS[li], &in_shape));
                        cr_assert(ref_sf_shape_of(ROWS, cols, 1, npc, out_layout, &out_shape));
                        cr_assert(in_shape.bytes <= sizeof sf_in &&
                                  out_shape.bytes <= sizeof got_sf);
                        memset(sf_in, 0, in_shape.bytes);
                        for (int64_t i = 0; i < in_shape.nbm; i++)
                            for (int64_t k = 0; k < in_shape.nbk; k++) {
                                /* powers of two 2^-20..2^19 (the f16 path, or
                                 * past it), and other f32 scales (the f32
                                 * path) in the column-major layout */
                                int e = (int)(ref_rng_next(&rng) % 40) - 20;
                                ref_scale s = {ldexpf(1.0f, e), 0.0f, (uint8_t)(127 + e)};
                                if (IN_LAYOUTS[li] == TK_SF_COL_MAJOR)
                                    s.sf *= 1.0f + ref_rng_uniform(&rng);
                                ref_sf_store(&in_shape, sf_in, i, k, s);
                            }
                        memset(got, 0xA5, (size_t)(ROWS * cols / 2));
                        memset(got_sf, 0xA5, out_shape.bytes);
                        memset(want_sf, 0xA5, out_shape.bytes);
                        int64_t groups = (cols + npc - 1) / npc;
                        memset(stores, 0, sizeof stores);
                        requant_problem p = {ROWS, cols, npc, BLOCKS[bi][0], BLOCKS[bi][1],
                                             IN_LAYOUTS[li], out_layout, round, x, sf_in,
                                             &in_shape, &out_shape, got, got_sf, stores, paths};
                        for (int64_t t = 0; t < ROWS; t++)
                            for (int64_t bx = 0; bx * REQUANT_BK < cols; bx++)
                                requant_row(&p, t, bx);
                        ref_quant_input in = {x, TK_E4M3, cols, sf_in, IN_LAYOUTS[li],
                                              BLOCKS[bi][0], BLOCKS[bi][1]};
                        cr_assert(ref_per_token_quant(&in, ROWS, cols, npc, TK_E2M1, round,
                                                      out_layout, NULL, want, want_sf));
                        for (int64_t i = 0; i < ROWS * groups; i++)
                            cr_assert_eq(stores[i], 1, "cols %ld npc %d: group %ld stored %d times",
                                         (long)cols, npc, (long)i, stores[i]);
                        for (int64_t i = 0; i < ROWS * cols / 2; i++)
                            cr_assert_eq(got[i], want[i],
                                         "cols %ld npc %d block %dx%d layout %d round %d: "
                                         "byte %ld 0x%02x, reference 0x%02x",
                                         (long)cols, npc, BLOCKS[bi][0], BLOCKS[bi][1], (int)li,
                                         round, (long)i, got[i], want[i]);
                        for (int64_t t = 0; t < ROWS; t++)
                            for (int64_t g = 0; g < groups; g++) {
                                size_t at = ref_sf_offset(&out_shape, t, g);
                                cr_assert_eq(memcmp(got_sf + at, want_sf + at,
                                                    ref_sf_entry_bytes(&out_shape)),
                                             0, "cols %ld npc %d: scale (%ld, %ld)", (long)cols,
                                             npc, (long)t, (long)g);
                            }
                        cases++;
                    }
    cr_assert_eq(cases, 3 * 4 * 3 * 3 * 2);
    /* every encoder ran */
    cr_assert(paths[1] > 0 && paths[2] > 0 && paths[3] > 0, "paths %ld %ld %ld %ld",
              paths[0], paths[1], paths[2], paths[3]);
}
