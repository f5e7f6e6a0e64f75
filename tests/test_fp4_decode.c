/*
 * test_fp4_decode.c -- proves the prmt table decoders of stdlib/fp4.tk
 * (fp4_bf16x2_decode with its mul.rn.bf16x2 scaling, used by cast_back
 * of packed FP4 to bf16, and fp4_e4m3x4, used by per_block_cast_lossless)
 * bit-exact against the C reference, exhaustively, with no GPU.
 *
 * The tk code is replayed in C line for line on the same 32-bit words,
 * with prmt.b32 (default mode and its sign-replicate nibbles) and
 * mul.rn.bf16x2 emulated.  Every 16-bit pattern of four codes is decoded
 * in both halves of the 8-code word (next to a varying other half), and
 * compared with the reference decoding of each code: exactly its bf16
 * value, and for the e4m3 decoder e4m3(value * 2^d) for every d in
 * -5..6.  The bf16 scaling is checked for all 16 codes times every f32
 * power of two the gate fp4_bf16_scale_exact lets through, against
 * bf16(f32(value) * s) -- the reference's arithmetic -- and the gate
 * itself for every sign and exponent.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "packed_emulation.h"
#include "reference.h"

/* mul.rn.bf16x2 on operands whose product has at most 16 significant
 * bits and is a normal f32 (all the gate admits): the f32 product is
 * exact, so rounding it to bf16 is the instruction's single rounding. */
static uint32_t bf16x2_mul(uint32_t a, uint32_t b) {
    uint32_t out = 0;
    for (int half = 0; half < 2; half++) {
        uint16_t x = (uint16_t)(a >> (16 * half)), y = (uint16_t)(b >> (16 * half));
        float product = ref_bf16_to_f32(x) * ref_bf16_to_f32(y);
        out |= (uint32_t)ref_bf16_from_f32(product) << (16 * half);
    }
    return out;
}

/* ---- stdlib/fp4.tk, line for line ---------------------------------------- */

static uint32_t fp4_selectors(uint32_t w, uint32_t half) { return (w >> (16u * half)) & 0x7777u; }

static uint32_t fp4_sign_bytes(uint32_t w, uint32_t half) {
    return prmt(w << 4, w, half == 0u ? 0xD9C8u : 0xFBEAu);
}

static uint32_t fp4_e4m3_table_low(int32_t d) { return 0x3C383000u + (uint32_t)d * 0x08080800u; }
static uint32_t fp4_e4m3_table_high(int32_t d) { return 0x4C484440u + (uint32_t)d * 0x08080808u; }

static uint32_t fp4_e4m3x4(uint32_t w, uint32_t half, uint32_t low, uint32_t high) {
    uint32_t magnitude = prmt(low, high, fp4_selectors(w, half));
    return magnitude | (fp4_sign_bytes(w, half) & 0x80808080u);
}

static uint32_t fp4_bf16x2_decode(uint32_t w, uint32_t j) {
    uint32_t half = j >> 1;
    uint32_t sel = fp4_selectors(w, half);
    uint32_t high = prmt(0x3F3F3F00u, 0x40404040u, sel) | (fp4_sign_bytes(w, half) & 0x80808080u);
    uint32_t low = prmt(0xC0800000u, 0xC0804000u, sel);
    return prmt(low, high, (j & 1u) == 0u ? 0x5140u : 0x7362u);
}

static bool fp4_bf16_scale_exact(float s) {
    uint32_t bits = bits_of(s);
    return (bits & 0x007FFFFFu) == 0u && bits - 0x01000000u <= 0x7D000000u;
}

static uint32_t fp4_bf16x2_splat(float s) { return (bits_of(s) >> 16) * 0x10001u; }

/* ---- the checks ------------------------------------------------------------- */

/* The 8-code words: every 16-bit pattern in each half, the other half a
 * scrambled pattern so that every code meets many neighbours. */
static uint32_t word_of(uint32_t pattern, int half) {
    uint32_t other = (pattern * 0x9E37u + 0x5A3Cu) & 0xFFFFu;
    return half == 0 ? pattern | (other << 16) : other | (pattern << 16);
}

static uint8_t code_of(uint32_t w, int element) { return (uint8_t)((w >> (4 * element)) & 0xFu); }

Test(fp4_decode, bf16_values_of_every_word) {
    long failures = 0;
    for (uint32_t pattern = 0; pattern < 0x10000u; pattern++)
        for (int half = 0; half < 2; half++) {
            uint32_t w = word_of(pattern, half);
            for (uint32_t j = 0; j < 4; j++) {
                uint32_t got = fp4_bf16x2_decode(w, j);
                for (int lane = 0; lane < 2; lane++) {
                    int element = (int)(2 * j) + lane;
                    uint16_t want = ref_bf16_from_f32(ref_e2m1_to_f32(code_of(w, element)));
                    uint16_t have = (uint16_t)(got >> (16 * lane));
                    if (have != want && failures++ < 8)
                        cr_log_error("word 0x%08x element %d: 0x%04x, want 0x%04x", w, element,
                                     have, want);
                }
            }
        }
    cr_assert_eq(failures, 0, "%ld decoded elements differ", failures);
}

Test(fp4_decode, bf16_scaling_of_every_code_and_power_of_two) {
    long failures = 0, admitted = 0;
    for (uint32_t top = 0; top < 0x200u; top++) {
        float s = f32_of(top << 23);
        bool exact = fp4_bf16_scale_exact(s);
        int exponent = (int)(top & 0xFFu) - 127;
        cr_assert_eq(exact, top < 0x100u && exponent >= -125 && exponent <= 125,
                     "gate of 0x%08x", top << 23);
        /* a mantissa bit always takes the f32 path */
        cr_assert(!fp4_bf16_scale_exact(f32_of((top << 23) | 1u)));
        cr_assert(!fp4_bf16_scale_exact(f32_of((top << 23) | 0x400000u)));
        if (!exact)
            continue;
        admitted++;
        uint32_t scale = fp4_bf16x2_splat(s);
        for (uint8_t code = 0; code < 16; code++) {
            float value = ref_e2m1_to_f32(code);
            uint16_t bits = ref_bf16_from_f32(value);
            uint32_t got = bf16x2_mul(bits | ((uint32_t)bits << 16), scale);
            uint16_t want = ref_bf16_from_f32(value * s);
            if (((uint16_t)got != want || (uint16_t)(got >> 16) != want) && failures++ < 8)
                cr_log_error("code %u times 2^%d: 0x%08x, want 0x%04x", code, exponent, got,
                             want);
        }
    }
    cr_assert_eq(admitted, 251);
    cr_assert_eq(failures, 0, "%ld scaled codes differ", failures);
}

Test(fp4_decode, e4m3_of_every_word_and_relative_exponent) {
    long failures = 0;
    for (int32_t d = -5; d <= 6; d++) {
        uint32_t low = fp4_e4m3_table_low(d), high = fp4_e4m3_table_high(d);
        float relative = ldexpf(1.0f, d);
        uint8_t want[16];
        for (uint8_t code = 0; code < 16; code++)
            want[code] = ref_e4m3_from_f32(ref_e2m1_to_f32(code) * relative);
        for (uint32_t pattern = 0; pattern < 0x10000u; pattern++)
            for (int half = 0; half < 2; half++) {
                uint32_t w = word_of(pattern, half);
                uint32_t got[2] = {fp4_e4m3x4(w, 0, low, high), fp4_e4m3x4(w, 1, low, high)};
                for (int element = 0; element < 8; element++) {
                    uint8_t have = (uint8_t)(got[element / 4] >> (8 * (element % 4)));
                    uint8_t code = code_of(w, element);
                    if (have != want[code] && failures++ < 8)
                        cr_log_error("d %d word 0x%08x element %d: 0x%02x, want 0x%02x", d, w,
                                     element, have, want[code]);
                }
            }
    }
    cr_assert_eq(failures, 0, "%ld e4m3 bytes differ", failures);
}
