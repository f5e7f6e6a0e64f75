/*
 * packed_emulation.h -- what the CPU emulations of the packed PTX
 * instructions share (tests/test_fp4_packed.c for bf16x2,
 * tests/test_fp4_f16x2.c for f16x2 and e4m3x2, tests/test_fp4_decode.c for
 * the prmt table decoders): f32 bit casts, prmt.b32, applying a 16-bit
 * lane operation to both halves of a 32-bit word, and mul, fma, min, max
 * and max.xorsign.abs of one 16-bit float format given by a packed_format
 * (bf16 and f16 differ only in where NaN starts, how a pattern reads as a
 * number and how a number rounds to a pattern, so one emulation serves
 * both).  Each test
 * replays the kernels' instructions through these and compares with the
 * reference encoders exhaustively, so they must model the hardware, not
 * the code under test.
 */
#ifndef TK_TESTS_PACKED_EMULATION_H
#define TK_TESTS_PACKED_EMULATION_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

static inline float f32_of(uint32_t bits) {
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static inline uint32_t bits_of(float f) {
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    return bits;
}

/* prmt.b32 d, a, b, c (default mode): byte i of d is byte (c >> 4i) & 7
 * of b:a, or, with bit 3 of that selector nibble set, that byte's bit 7
 * replicated; bits 16..31 of c are not used. */
static inline uint32_t prmt(uint32_t a, uint32_t b, uint32_t selector) {
    uint64_t bytes = (uint64_t)a | ((uint64_t)b << 32);
    uint32_t d = 0;
    for (int i = 0; i < 4; i++) {
        unsigned nibble = (selector >> (4 * i)) & 0xFu;
        uint32_t byte = (uint32_t)(bytes >> (8 * (nibble & 7u))) & 0xFFu;
        if (nibble & 8u)
            byte = (byte & 0x80u) ? 0xFFu : 0x00u;
        d |= byte << (8 * i);
    }
    return d;
}

/* A 16-bit float format as the emulations see it: the pattern of
 * +infinity (a larger magnitude is a NaN), the value of a pattern and the
 * rounding of an exact double to a pattern (ties to even).  The value is
 * the test's own, so a test that replays input flushing sees it here too. */
typedef struct {
    uint16_t infinity;
    double (*value)(uint16_t);
    uint16_t (*round)(double);
} packed_format;

/* The NaN that the instructions return for NaN operands. */
#define PACKED_CANONICAL_NAN 0x7FFFu

static inline bool packed_is_nan(const packed_format *format, uint16_t h) {
    return (h & 0x7FFFu) > format->infinity;
}

/* A positive exact double rounded to a float format's grid, ties to even:
 * mantissa_bits fraction bits, and below 2^min_exponent the subnormal
 * spacing 2^(min_exponent - mantissa_bits).  Overflow and the encoding
 * are the caller's. */
static inline double packed_round_magnitude(double a, int min_exponent, int mantissa_bits) {
    int e;
    frexp(a, &e);         /* a = m * 2^e, m in [0.5, 1) */
    int exponent = e - 1; /* a in [2^exponent, 2^(exponent+1)) */
    if (exponent < min_exponent)
        exponent = min_exponent;
    double ulp = ldexp(1.0, exponent - mantissa_bits);
    double q = a / ulp; /* exact: a power-of-two scaling */
    double r = floor(q), frac = q - r;
    if (frac > 0.5 || (frac == 0.5 && fmod(r, 2.0) != 0.0))
        r += 1.0;
    return r * ulp;
}

/* One instruction on 16-bit lanes of a format (a third operand for fma,
 * ignored by the others), applied to the low and the high half of its
 * words. */
typedef uint16_t (*packed_lane_op)(const packed_format *, uint16_t, uint16_t, uint16_t);

static inline uint32_t packed_per_lane(const packed_format *format, packed_lane_op op,
                                       uint32_t a, uint32_t b, uint32_t c) {
    uint32_t lo = op(format, (uint16_t)a, (uint16_t)b, (uint16_t)c);
    uint32_t hi = op(format, (uint16_t)(a >> 16), (uint16_t)(b >> 16), (uint16_t)(c >> 16));
    return lo | (hi << 16);
}

/* mul.rn and fma.rn: a NaN operand gives the canonical NaN, else the exact
 * result rounded once.  The tests send small operands, so a * b + c is
 * exact in double and rounding it once is fma's single rounding. */
static inline uint16_t packed_mul_lane(const packed_format *format, uint16_t a, uint16_t b,
                                       uint16_t c) {
    (void)c;
    if (packed_is_nan(format, a) || packed_is_nan(format, b))
        return PACKED_CANONICAL_NAN;
    return format->round(format->value(a) * format->value(b));
}

static inline uint16_t packed_fma_lane(const packed_format *format, uint16_t a, uint16_t b,
                                       uint16_t c) {
    if (packed_is_nan(format, a) || packed_is_nan(format, b) || packed_is_nan(format, c))
        return PACKED_CANONICAL_NAN;
    return format->round(format->value(a) * format->value(b) + format->value(c));
}

/* min/max without .NaN: a NaN operand yields the other one; -0 is below
 * +0, so of two equal values min takes the negative pattern, max the
 * other. */
static inline uint16_t packed_min_or_max_lane(const packed_format *format, uint16_t a,
                                              uint16_t b, bool max) {
    if (packed_is_nan(format, a))
        return packed_is_nan(format, b) ? PACKED_CANONICAL_NAN : b;
    if (packed_is_nan(format, b))
        return a;
    double x = format->value(a), y = format->value(b);
    bool a_is_min = x == y ? (a & 0x8000u) != 0 : x < y;
    return a_is_min != max ? a : b;
}

static inline uint16_t packed_min_lane(const packed_format *format, uint16_t a, uint16_t b,
                                       uint16_t c) {
    (void)c;
    return packed_min_or_max_lane(format, a, b, false);
}

static inline uint16_t packed_max_lane(const packed_format *format, uint16_t a, uint16_t b,
                                       uint16_t c) {
    (void)c;
    return packed_min_or_max_lane(format, a, b, true);
}

/* max.xorsign.abs: the max of the magnitudes, with the sign a ^ b. */
static inline uint16_t packed_max_xorsign_abs_lane(const packed_format *format, uint16_t a,
                                                   uint16_t b, uint16_t c) {
    uint16_t m = packed_max_lane(format, a & 0x7FFFu, b & 0x7FFFu, c);
    return (uint16_t)((m & 0x7FFFu) | ((a ^ b) & 0x8000u));
}

/* The five on both halves of 32-bit words. */
static inline uint32_t packed_mul(const packed_format *format, uint32_t a, uint32_t b) {
    return packed_per_lane(format, packed_mul_lane, a, b, 0);
}

static inline uint32_t packed_fma(const packed_format *format, uint32_t a, uint32_t b,
                                  uint32_t c) {
    return packed_per_lane(format, packed_fma_lane, a, b, c);
}

static inline uint32_t packed_min(const packed_format *format, uint32_t a, uint32_t b) {
    return packed_per_lane(format, packed_min_lane, a, b, 0);
}

static inline uint32_t packed_max(const packed_format *format, uint32_t a, uint32_t b) {
    return packed_per_lane(format, packed_max_lane, a, b, 0);
}

static inline uint32_t packed_max_xorsign_abs(const packed_format *format, uint32_t a,
                                              uint32_t b) {
    return packed_per_lane(format, packed_max_xorsign_abs_lane, a, b, 0);
}

#endif
