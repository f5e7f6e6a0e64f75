/*
 * test_fp4_packed.c -- proves the packed bf16x2 FP4 encoder of
 * stdlib/fp4.tk (fp4_pack8_bf16x2 and its helpers, used by the bf16 FP4
 * kernels whenever the multiplier is a power of two) bit-exact against the
 * reference encoder, exhaustively, with no GPU.
 *
 * Each PTX instruction the tk code issues is replayed in C on the same
 * 32-bit words: mul/fma.rn.bf16x2 as the exact result rounded to bf16
 * (ties to even, subnormals kept), min/max.bf16x2 dropping a NaN operand,
 * max.xorsign.abs.bf16x2, prmt.b32 with its sign-replicate mode, and the
 * integer steps.  Every bf16 pattern (NaN, infinities, subnormals, -0
 * included) is encoded, in every lane position of the 8-element word and
 * next to every other pattern, with every multiplier 2^k the kernels send
 * this way (fp4_packed_multiplier: k = -126..124), and compared with
 * ref_e2m1_from_f32(f32(x) * 2^k) -- the f32 arithmetic of the reference.
 * The same runs with the bf16 product's input subnormals flushed, which
 * must not change any code (the reason the gate stops at 2^124).  The
 * packed |max| (max and -min of the raw pairs) is checked against fmaxf
 * of fabsf for every pattern.
 */
#pragma GCC optimize("fp-contract=off")

#include <criterion/criterion.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "packed_emulation.h"
#include "reference.h"

static double bf16_value(uint16_t h) { return (double)f32_of((uint32_t)h << 16); }

/* An exact double (at most 53 significant bits, within f32's exponent
 * range or overflowing) rounded to bf16, ties to even, subnormals kept. */
static uint16_t bf16_round(double v) {
    if (isnan(v))
        return 0x7FC0u;
    uint16_t sign = signbit(v) ? 0x8000u : 0;
    double a = fabs(v);
    if (a == 0.0)
        return sign;
    double rounded = packed_round_magnitude(a, -126, 7); /* subnormal spacing 2^-133 */
    if (rounded >= ldexp(1.0, 128))
        return sign | 0x7F80u;         /* overflow to infinity */
    return sign | (uint16_t)(bits_of((float)rounded) >> 16);
}

/* ---- the PTX instructions, one 16-bit lane at a time ------------------- */

static bool flush_inputs; /* replay a hardware that flushes subnormal inputs */
static bool quiet;        /* a mismatch is expected: do not log it */

static double input(uint16_t h) {
    if (flush_inputs && (h & 0x7F80u) == 0)
        return (h & 0x8000u) ? -0.0 : 0.0;
    return bf16_value(h);
}

/* bf16 for the shared emulations: mul and fma read their operands as the
 * replayed hardware does, min and max compare the unflushed values. */
static const packed_format bf16_input_format = {0x7F80u, input, bf16_round};
static const packed_format bf16_format = {0x7F80u, bf16_value, bf16_round};

static uint32_t bf16x2_mul(uint32_t a, uint32_t b) { return packed_mul(&bf16_input_format, a, b); }
static uint32_t bf16x2_fma(uint32_t a, uint32_t b, uint32_t c) {
    return packed_fma(&bf16_input_format, a, b, c);
}

static uint32_t bf16x2_min(uint32_t a, uint32_t b) { return packed_min(&bf16_format, a, b); }
static uint32_t bf16x2_max(uint32_t a, uint32_t b) { return packed_max(&bf16_format, a, b); }
static uint32_t bf16x2_max_xorsign_abs(uint32_t a, uint32_t b) {
    return packed_max_xorsign_abs(&bf16_format, a, b);
}

/* ---- stdlib/fp4.tk, line for line ---------------------------------------- */

static bool fp4_packed_multiplier(float inv) {
    uint32_t bits = bits_of(inv);
    return (bits & 0x007FFFFFu) == 0u && bits - 0x00800000u <= 0x7D000000u;
}

static uint32_t fp4_bf16x2_splat(float inv) { return (bits_of(inv) >> 16) * 0x10001u; }

/* (hi and lo never hold a NaN: they start at 0 and max/min drop NaNs) */
static float fp4_bf16x2_amax(uint32_t hi, uint32_t lo) {
    float top = fmaxf(f32_of(hi << 16), f32_of(hi & 0xFFFF0000u));
    float bottom = fminf(f32_of(lo << 16), f32_of(lo & 0xFFFF0000u));
    return fmaxf(top, -bottom);
}

static uint32_t fp4_bf16x2_clamp(uint32_t y) {
    return bf16x2_max(bf16x2_min(y, 0x40C040C0u), 0xC0C0C0C0u);
}

static uint32_t fp4_bf16x2_codes(uint32_t c) {
    uint32_t b = bf16x2_max_xorsign_abs(c & 0xFF80FF80u, 0x3F803F80u);
    uint32_t s = bf16x2_fma(b, 0x42864286u, c);
    return s + (s >> 6);
}

static uint32_t fp4_pack8_bf16x2(uint32_t p0, uint32_t p1, uint32_t p2, uint32_t p3,
                                 uint32_t m) {
    uint32_t u0 = fp4_bf16x2_codes(fp4_bf16x2_clamp(bf16x2_mul(p0, m)));
    uint32_t u1 = fp4_bf16x2_codes(fp4_bf16x2_clamp(bf16x2_mul(p1, m)));
    uint32_t u2 = fp4_bf16x2_codes(fp4_bf16x2_clamp(bf16x2_mul(p2, m)));
    uint32_t u3 = fp4_bf16x2_codes(fp4_bf16x2_clamp(bf16x2_mul(p3, m)));
    uint32_t n01 = prmt(u0, u1, 0x6420u) | (prmt(u0, u1, 0xFDB9u) & 0x08080808u);
    uint32_t n23 = prmt(u2, u3, 0x6420u) | (prmt(u2, u3, 0xFDB9u) & 0x08080808u);
    uint32_t even = prmt(n01, n23, 0x6420u);
    uint32_t odd = prmt(n01, n23, 0x7531u);
    return even ^ ((even ^ (odd << 4)) & 0xF0F0F0F0u);
}

/* ---- the exhaustive comparison ------------------------------------------- */

/* Encodes 8 elements (bf16 bits) with multiplier 2^k both ways; returns
 * the number of mismatching elements and reports the first. */
static int check_word(const uint16_t e[8], int k) {
    float inv = ldexpf(1.0f, k);
    uint32_t p[4];
    for (int j = 0; j < 4; j++)
        p[j] = (uint32_t)e[2 * j] | ((uint32_t)e[2 * j + 1] << 16);
    uint32_t word = fp4_pack8_bf16x2(p[0], p[1], p[2], p[3], fp4_bf16x2_splat(inv));
    int bad = 0;
    for (int i = 0; i < 8; i++) {
        float x = f32_of((uint32_t)e[i] << 16);
        unsigned want = ref_e2m1_from_f32(x * inv);
        unsigned got = (word >> (4 * i)) & 0xFu;
        if (got != want) {
            if (bad == 0 && !quiet)
                cr_log_error("bf16 0x%04x * 2^%d (lane %d, flush %d): packed 0x%x, reference "
                             "0x%x", e[i], k, i, (int)flush_inputs, got, want);
            bad++;
        }
    }
    return bad;
}

/* Every pattern in every lane: element i of word w is pattern
 * (8w + i) * STEP mod 2^16 for one odd STEP per pass, so each pattern
 * meets different neighbours and lane positions from pass to pass. */
static long sweep(int k) {
    static const unsigned steps[3] = {1u, 0x9E37u, 0x2F61u};
    long bad = 0;
    for (int pass = 0; pass < 3; pass++) {
        for (uint32_t base = 0; base < 0x10000u; base += 8) {
            uint16_t e[8];
            for (int i = 0; i < 8; i++)
                e[i] = (uint16_t)((base + (uint32_t)i + (uint32_t)pass) * steps[pass]);
            bad += check_word(e, k);
        }
    }
    return bad;
}

Test(fp4_packed, every_bf16_pattern_and_power_of_two_multiplier) {
    long bad = 0;
    for (int flush = 0; flush <= 1; flush++) {
        flush_inputs = flush != 0;
        for (int k = -126; k <= 124; k++)
            bad += sweep(k);
    }
    flush_inputs = false;
    cr_assert_eq(bad, 0, "%ld packed codes differ from ref_e2m1_from_f32", bad);
}

Test(fp4_packed, gate_takes_exactly_the_exact_multipliers) {
    for (int k = -149; k <= 127; k++) {
        bool want = k >= -126 && k <= 124;
        cr_assert_eq(fp4_packed_multiplier(ldexpf(1.0f, k)), want, "2^%d", k);
        cr_assert(!fp4_packed_multiplier(-ldexpf(1.0f, k)), "-2^%d", k);
    }
    cr_assert(!fp4_packed_multiplier(0.0f));
    cr_assert(!fp4_packed_multiplier(-0.0f));
    cr_assert(!fp4_packed_multiplier(INFINITY));
    cr_assert(!fp4_packed_multiplier(-INFINITY));
    cr_assert(!fp4_packed_multiplier(NAN));
    cr_assert(!fp4_packed_multiplier(1.5f));
    cr_assert(!fp4_packed_multiplier(6.0f / 5.0f));
    /* beyond the gate a flushed subnormal input would change the code:
     * 2^-127 * 2^126 = 0.5 encodes as 1, the flushed product as 0 */
    flush_inputs = true;
    quiet = true;
    uint16_t e[8] = {0x0040u, 0, 0, 0, 0, 0, 0, 0};
    cr_assert_gt(check_word(e, 126), 0);
    flush_inputs = false;
    quiet = false;
    cr_assert_eq(check_word(e, 126), 0);
}

/* The reference's |max| step, fmaxf(amax, |x|), spelled out: a NaN x
 * leaves amax alone. */
static float amax_step(float amax, float x) {
    float a = fabsf(x);
    return isnan(a) || a <= amax ? amax : a;
}

Test(fp4_packed, packed_amax_matches_the_reference_for_every_pattern) {
    /* one element per group against 0: the kernels' starting value */
    for (uint32_t h = 0; h < 0x10000u; h++) {
        uint32_t pair = h | (h << 16);
        float got = fp4_bf16x2_amax(bf16x2_max(0u, pair), bf16x2_min(0u, pair));
        float want = amax_step(0.0f, f32_of(h << 16));
        cr_assert(got == want, "bf16 0x%04x: %a, want %a", h, (double)got, (double)want);
    }
    /* groups of 16 elements (8 pairs) over every pattern */
    for (uint32_t base = 0; base < 0x10000u; base += 16) {
        uint32_t hi = 0, lo = 0;
        float want = 0.0f;
        for (uint32_t i = 0; i < 16; i += 2) {
            uint16_t a = (uint16_t)((base + i) * 0x9E37u);
            uint16_t b = (uint16_t)((base + i + 1) * 0x9E37u);
            uint32_t pair = a | ((uint32_t)b << 16);
            hi = bf16x2_max(hi, pair);
            lo = bf16x2_min(lo, pair);
            want = amax_step(want, f32_of((uint32_t)a << 16));
            want = amax_step(want, f32_of((uint32_t)b << 16));
        }
        float got = fp4_bf16x2_amax(hi, lo);
        cr_assert(got == want, "group at %u: %a, want %a", base, (double)got, (double)want);
    }
}

Test(fp4_packed, emulated_instructions_agree_with_f32_arithmetic) {
    /* the replay itself: bf16 products of normal results equal the f32
     * ones, and prmt's sign mode replicates bit 7 */
    cr_assert_eq(bf16x2_mul(0x3FC0BFC0u, 0x40004000u), 0x4040C040u);
    cr_assert_eq(bf16_round(1.0 + ldexp(1.0, -8)), 0x3F80u);          /* tie to even */
    cr_assert_eq(bf16_round(1.0 + 3 * ldexp(1.0, -8)), 0x3F82u);
    cr_assert_eq(bf16_round(ldexp(1.0, -133)), 0x0001u);               /* subnormal */
    cr_assert_eq(prmt(0x00008000u, 0x80000000u, 0xFDB9u), 0xFF0000FFu);
    cr_assert_eq(prmt(0x44332211u, 0x88776655u, 0x6420u), 0x77553311u);
    cr_assert_eq(bf16x2_min(0x7FC00000u, 0x40C0FFC0u), 0x40C00000u);  /* NaN dropped */
}
