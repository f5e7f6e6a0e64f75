/*
 * numerics.c -- the number formats and the scale computation every
 * reference is built on: e4m3, e2m1 and bf16 conversions, sf_and_inv
 * and the per-format scale (tilekernels-spec.md 2.2, 4.1), UE8M0 bytes
 * (3.3) and the three SF buffer layouts (3.5).
 *
 * The conversions are written on the bit patterns so that they round the
 * way the hardware does (cvt.rn.satfinite.e4m3x2.f32, cvt.rn.bf16.f32)
 * regardless of the host's conversion routines.  Scales are two IEEE f32
 * divisions; the file is compiled without FMA contraction and needs
 * FLT_EVAL_METHOD == 0 (SSE arithmetic, as on every x86-64), so each C
 * operation below is exactly one rounded f32 operation.
 */
#pragma GCC optimize("fp-contract=off")

#include <float.h>
#include <math.h>
#include <string.h>

#include "reference.h"

#if FLT_EVAL_METHOD != 0
#error "the references need f32 arithmetic evaluated in f32 (FLT_EVAL_METHOD 0)"
#endif

uint32_t ref_f32_bits(float value) {
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    return bits;
}

float ref_f32_from_bits(uint32_t bits) {
    float value;
    memcpy(&value, &bits, sizeof value);
    return value;
}

/* e4m3 (fn) has exponent bias 7 and three mantissa bits; the f32 pattern
 * shifted right by 20 keeps the exponent and three mantissa bits, so
 * rounding those 20 dropped bits to nearest-even and rebiasing the
 * exponent (127 -> 7) gives the normal codes, carries included. */
#define E4M3_MIN_NORMAL_BITS 0x3C800000u /* 2^-6 */
#define E4M3_MAX_BITS 0x43E00000u        /* 448  */
#define E4M3_REBIAS (((127 - 7) << 3))

uint8_t ref_e4m3_from_f32(float value) {
    uint32_t bits = ref_f32_bits(value);
    uint8_t sign = (uint8_t)((bits >> 24) & 0x80);
    uint32_t magnitude = bits & 0x7FFFFFFFu;
    if (magnitude > 0x7F800000u)
        return 0x7F; /* NaN, either sign */
    /* satfinite: everything from 448 up (448..464 would round to 448
     * anyway, beyond that the hardware saturates), infinity included */
    if (magnitude >= E4M3_MAX_BITS)
        return sign | 0x7E;
    if (magnitude < E4M3_MIN_NORMAL_BITS) {
        /* subnormal e4m3: multiples of 2^-9.  Scaling by 2^9 is exact,
         * and rintf rounds to nearest-even in the default mode; 8 is the
         * code of 2^-6, the smallest normal, so no special case. */
        float scaled = fabsf(value) * 512.0f;
        return sign | (uint8_t)rintf(scaled);
    }
    uint32_t rounded = magnitude + 0x7FFFFu + ((magnitude >> 20) & 1u);
    return sign | (uint8_t)((rounded >> 20) - E4M3_REBIAS);
}

float ref_e4m3_to_f32(uint8_t code) {
    int exponent = (code >> 3) & 0xF;
    int mantissa = code & 0x7;
    float magnitude;
    if (exponent == 0xF && mantissa == 0x7)
        magnitude = NAN;
    else if (exponent == 0)
        magnitude = ldexpf((float)mantissa, -9);
    else
        magnitude = ldexpf((float)(8 + mantissa), exponent - 10);
    return (code & 0x80) ? -magnitude : magnitude;
}

uint16_t ref_bf16_from_f32(float value) {
    uint32_t bits = ref_f32_bits(value);
    if ((bits & 0x7FFFFFFFu) > 0x7F800000u)
        return (uint16_t)((bits >> 16) | 0x0040u); /* quiet NaN */
    /* add half an ulp minus one, plus the lsb for ties-to-even; a carry
     * out of the mantissa correctly bumps the exponent (up to inf) */
    uint32_t rounded = bits + 0x7FFFu + ((bits >> 16) & 1u);
    return (uint16_t)(rounded >> 16);
}

float ref_bf16_to_f32(uint16_t bits) {
    return ref_f32_from_bits((uint32_t)bits << 16);
}

/* m * 2^-shift rounded to nearest, ties to even (shift >= 1). */
static uint32_t round_shift(uint32_t m, int shift) {
    if (shift > 40)
        return 0; /* m < 2^24: far below half of one unit */
    uint64_t wide = m;
    uint64_t q = wide >> shift;
    uint64_t remainder = wide & ((UINT64_C(1) << shift) - 1);
    uint64_t half = UINT64_C(1) << (shift - 1);
    if (remainder > half || (remainder == half && (q & 1)))
        q++;
    return (uint32_t)q;
}

uint8_t ref_e2m1_from_f32(float value) {
    uint32_t bits = ref_f32_bits(value);
    uint8_t sign = (uint8_t)((bits >> 28) & 8u);
    uint32_t magnitude = bits & 0x7FFFFFFFu;
    if (magnitude > 0x7F800000u)
        return 0x7; /* NaN of either sign: +6 */
    if (magnitude >= 0x40C00000u)
        return sign | 0x7; /* 6 and above, infinity included, saturate */
    int exponent = (int)(magnitude >> 23);
    uint32_t mantissa = magnitude & 0x7FFFFFu;
    /* value = m24 * 2^(e - 23) */
    uint32_t m24 = exponent ? (mantissa | 0x800000u) : mantissa;
    int e = exponent ? exponent - 127 : -126;
    uint32_t code;
    if (e >= 0) {
        /* binades 1, 2, 4: one mantissa bit, q = value / 2^(e-1) in 2..4;
         * a carry to 4 is the next binade's first code, as it should be */
        code = (uint32_t)(2 * e) + round_shift(m24, 22);
    } else {
        /* below 1: multiples of 0.5, code = value / 0.5 = m24 * 2^(e-22) */
        code = round_shift(m24, 22 - e);
    }
    return sign | (uint8_t)code;
}

float ref_e2m1_to_f32(uint8_t nibble) {
    static const float magnitude[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    float v = magnitude[nibble & 7];
    return (nibble & 8) ? -v : v;
}

float ref_load_f32(const void *data, tk_dtype dtype, int64_t index) {
    switch (dtype) {
    case TK_F32:
        return ((const float *)data)[index];
    case TK_BF16:
        return ref_bf16_to_f32(((const uint16_t *)data)[index]);
    case TK_E4M3:
        return ref_e4m3_to_f32(((const uint8_t *)data)[index]);
    default:
        return NAN;
    }
}

void ref_store_f32(void *data, tk_dtype dtype, int64_t index, float value) {
    if (dtype == TK_BF16)
        ((uint16_t *)data)[index] = ref_bf16_from_f32(value);
    else
        ((float *)data)[index] = value;
}

ref_scale ref_quant_scale(float amax, float qmax, float clamp_min, bool round_sf) {
    ref_scale scale;
    /* fmaxf ignores a NaN amax, like the GPU's max.f32 */
    float clamped = fmaxf(amax, clamp_min);
    float sf = clamped / qmax;
    if (!round_sf) {
        scale.sf = sf;
        scale.inv = qmax / clamped; /* a second division, not 1/sf */
        scale.ue8m0 = 0;
        return scale;
    }
    /* e = ceil(log2 sf) for a positive normal sf, exactly as the kernel
     * computes it, in 32-bit unsigned arithmetic */
    uint32_t bits = ref_f32_bits(sf);
    int32_t exponent = (int32_t)((bits - 1u) >> 23) + 1 - 127;
    scale.sf = ref_f32_from_bits((uint32_t)(127 + exponent) << 23);
    scale.inv = ref_f32_from_bits((uint32_t)(127 - exponent) << 23);
    scale.ue8m0 = (uint8_t)(127 + exponent);
    return scale;
}

ref_scale ref_sf_and_inv(float amax, bool round_sf) {
    return ref_quant_scale(amax, REF_E4M3_MAX, REF_E4M3_CLAMP_MIN, round_sf);
}

float ref_ue8m0_to_f32(uint8_t biased_exponent) {
    return ref_f32_from_bits((uint32_t)biased_exponent << 23);
}

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
static int64_t align_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

bool ref_sf_shape_of(int64_t rows, int64_t cols, int block_m, int block_k,
                     tk_sf_layout layout, ref_sf_shape *shape) {
    if (rows < 0 || cols < 0 || block_m < 1 || block_k < 1)
        return false;
    ref_sf_shape s;
    memset(&s, 0, sizeof s);
    s.layout = layout;
    s.rows = rows;
    s.cols = cols;
    s.block_m = block_m;
    s.block_k = block_k;
    s.nbm = ceil_div(rows, block_m);
    s.nbk = ceil_div(cols, block_k);
    /* column-major layouts pad the block-row dimension to a multiple of 4
     * so that each column starts 16-byte aligned (TMA) */
    int64_t padded_rows = align_up(s.nbm, 4);
    switch (layout) {
    case TK_SF_ROW_MAJOR:
        s.dtype = TK_F32;
        s.shape[0] = s.nbm;
        s.shape[1] = s.nbk;
        s.strides[0] = s.nbk;
        s.strides[1] = 1;
        s.bytes = (size_t)(s.nbm * s.nbk) * 4;
        break;
    case TK_SF_COL_MAJOR:
        s.dtype = TK_F32;
        s.shape[0] = s.nbm;
        s.shape[1] = s.nbk;
        s.strides[0] = 1;
        s.strides[1] = padded_rows;
        s.bytes = (size_t)(s.nbk * padded_rows) * 4;
        break;
    case TK_SF_PACKED_UE8M0:
        s.dtype = TK_I32;
        s.shape[0] = s.nbm;
        s.shape[1] = ceil_div(s.nbk, 4);
        s.strides[0] = 1;
        s.strides[1] = padded_rows;
        s.bytes = (size_t)(s.shape[1] * padded_rows) * 4;
        break;
    default:
        return false;
    }
    *shape = s;
    return true;
}

size_t ref_sf_offset(const ref_sf_shape *shape, int64_t i, int64_t k) {
    switch (shape->layout) {
    case TK_SF_ROW_MAJOR:
    case TK_SF_COL_MAJOR:
        return (size_t)(i * shape->strides[0] + k * shape->strides[1]) * 4;
    case TK_SF_PACKED_UE8M0:
        /* byte k % 4 (little-endian) of the int32 [i, k / 4] */
        return (size_t)(i * shape->strides[0] + (k / 4) * shape->strides[1]) * 4 +
               (size_t)(k % 4);
    }
    return 0;
}

size_t ref_sf_entry_bytes(const ref_sf_shape *shape) {
    return shape->layout == TK_SF_PACKED_UE8M0 ? 1 : 4;
}

void ref_sf_store(const ref_sf_shape *shape, void *buffer, int64_t i,
                  int64_t k, ref_scale scale) {
    unsigned char *at = (unsigned char *)buffer + ref_sf_offset(shape, i, k);
    if (shape->layout == TK_SF_PACKED_UE8M0)
        *at = scale.ue8m0;
    else
        memcpy(at, &scale.sf, 4);
}

float ref_sf_load(const ref_sf_shape *shape, const void *buffer, int64_t i,
                  int64_t k) {
    const unsigned char *at =
        (const unsigned char *)buffer + ref_sf_offset(shape, i, k);
    if (shape->layout == TK_SF_PACKED_UE8M0)
        return ref_ue8m0_to_f32(*at);
    float value;
    memcpy(&value, at, 4);
    return value;
}
