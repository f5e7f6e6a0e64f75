/*
 * packed_emulation.h -- what the CPU emulations of the packed PTX
 * instructions share (tests/test_fp4_packed.c for bf16x2,
 * tests/test_fp4_f16x2.c for f16x2 and e4m3x2, tests/test_fp4_decode.c for
 * the prmt table decoders): f32 bit casts, prmt.b32, and applying a
 * 16-bit lane operation to both halves of a 32-bit word.  Each test
 * replays the kernels' instructions through these and compares with the
 * reference encoders exhaustively, so they must model the hardware, not
 * the code under test.
 */
#ifndef TK_TESTS_PACKED_EMULATION_H
#define TK_TESTS_PACKED_EMULATION_H

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

/* One instruction on 16-bit lanes (a third operand for fma, ignored by
 * the others), applied to the low and the high half of its words. */
typedef uint16_t (*lane_op)(uint16_t, uint16_t, uint16_t);

static inline uint32_t per_lane(lane_op op, uint32_t a, uint32_t b, uint32_t c) {
    uint32_t lo = op((uint16_t)a, (uint16_t)b, (uint16_t)c);
    uint32_t hi = op((uint16_t)(a >> 16), (uint16_t)(b >> 16), (uint16_t)(c >> 16));
    return lo | (hi << 16);
}

#endif
