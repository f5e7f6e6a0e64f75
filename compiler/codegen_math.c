/*
 * codegen_math.c -- intrinsic calls and value conversions.
 *
 * Everything here reproduces the numerics tilekernels-spec.md sections 2.1
 * and 2.2 fix, instruction for instruction where the spec asks for bit
 * equality with CUDA:
 *   exp      libdevice expf: the three-FMA range reduction around
 *            ex2.approx.ftz (never llvm.exp.f32, which NVPTX cannot lower
 *            and which kills the process through LLVM's error handler)
 *   sigmoid  1 / (1 + expf(-x)) with an IEEE division
 *   log1p    libdevice log1pf (non-FTZ path), operation for operation
 *   sqrt     sqrt.rn.f32;  rsqrt  rsqrt.approx.f32;  exp2  ex2.approx.f32
 *   rcp_approx  rcp.approx.ftz.f32 (MUFU.RCP)
 *   f32 -> e4m3/e5m2   cvt.rn.satfinite.{e4m3,e5m2}x2.f32, two lanes per
 *            instruction (the first operand lands in the high byte)
 *   e4m3/e5m2 -> f32   cvt.rn.f16x2.{e4m3,e5m2}x2, then an exact widening
 *   e2m1     in software on every target (sm_90a has no cvt for it, and
 *            LLVM aborts on the intrinsic there); same results as the
 *            hardware's cvt.rn.satfinite.e2m1x2 on sm_100a
 *   f16 RZ   cvt.rz.f16.f32 (CUDA __float2half_rz)
 * The 8-bit floats are i8 in registers as in memory.
 */
#include <math.h>
#include <string.h>

#include "codegen_llvm.h"

static LLVMTypeRef f32_type(Codegen *cg) {
    return LLVMFloatTypeInContext(cg->context);
}

static LLVMValueRef f32_const(Codegen *cg, float v) {
    return LLVMConstReal(f32_type(cg), v);
}

static LLVMValueRef f32_bits(Codegen *cg, uint32_t bits) {
    float v;
    memcpy(&v, &bits, sizeof v);
    return f32_const(cg, v);
}

static int lanes_of(LLVMValueRef v) {
    LLVMTypeRef t = LLVMTypeOf(v);
    return LLVMGetTypeKind(t) == LLVMVectorTypeKind ? (int)LLVMGetVectorSize(t) : 1;
}

static LLVMValueRef extract(Codegen *cg, LLVMValueRef v, int lane) {
    if (lanes_of(v) == 1) return v;
    return LLVMBuildExtractElement(cg->builder, v, cg_i32(cg, lane), "");
}

/* Builds a vector (or a scalar when lanes is 1) from per-lane values. */
static LLVMValueRef assemble(Codegen *cg, LLVMValueRef *values, int lanes) {
    if (lanes == 1) return values[0];
    LLVMValueRef v = LLVMGetPoison(LLVMVectorType(LLVMTypeOf(values[0]), (unsigned)lanes));
    for (int i = 0; i < lanes; i++)
        v = LLVMBuildInsertElement(cg->builder, v, values[i], cg_i32(cg, i), "");
    return v;
}

LLVMValueRef cg_map_lanes(Codegen *cg, LLVMValueRef v, int lanes,
                          LLVMValueRef (*fn)(Codegen *, LLVMValueRef)) {
    LLVMValueRef out[IR_MAX_LANES] = {0};
    if (lanes > IR_MAX_LANES) ice("%d lanes", lanes);
    for (int i = 0; i < lanes; i++) out[i] = fn(cg, extract(cg, v, i));
    return assemble(cg, out, lanes);
}

static LLVMValueRef call1(Codegen *cg, const char *name, LLVMValueRef a) {
    return cg_call_intrinsic(cg, name, NULL, 0, &a, 1);
}

static LLVMValueRef call3(Codegen *cg, const char *name, LLVMValueRef a,
                          LLVMValueRef b, LLVMValueRef c) {
    LLVMValueRef args[3] = {a, b, c};
    return cg_call_intrinsic(cg, name, NULL, 0, args, 3);
}

/* ---- exp --------------------------------------------------------------- */

/* libdevice expf(a), tilekernels-spec.md 2.1 (constants as bit patterns),
 * up to its last step: returns ex2.approx.ftz of the reduced argument and
 * sets *scale to the power of two 2^n that expf(a) multiplies it by. */
static LLVMValueRef exp_parts(Codegen *cg, LLVMValueRef a, LLVMValueRef *scale) {
    LLVMBuilderRef bld = cg->builder;
    uint32_t c_hi_bits = 0x3FB8AA3B, c_lo_bits = 0x32A57060, k_bits = 0x4B400000;
    float c_hi, k;
    memcpy(&c_hi, &c_hi_bits, sizeof c_hi);
    memcpy(&k, &k_bits, sizeof k);
    /* folded in f32 exactly as the spec writes them */
    float c_hi_252 = c_hi / 252.0f;
    float j_bias = (k - 126.0f) + 127.0f;
    float n_bias = k + 127.0f;

    LLVMTypeRef f32 = f32_type(cg);
    LLVMValueRef fma_args[3];
    /* t = saturate(fma_rn(a, c_hi / 252, 0.5)) */
    LLVMValueRef t = call3(cg, "llvm.nvvm.fma.rn.sat.f", a, f32_const(cg, c_hi_252),
                           f32_const(cg, 0.5f));
    /* j = fma_rd(t, 252, (K - 126) + 127) */
    LLVMValueRef j = call3(cg, "llvm.nvvm.fma.rm.f", t, f32_const(cg, 252.0f),
                           f32_const(cg, j_bias));
    /* n = j - (K + 127), exact */
    LLVMValueRef n = LLVMBuildFSub(bld, j, f32_const(cg, n_bias), "");
    /* f = fma_rn(a, c_hi, -n); f = fma_rn(a, c_lo, f) */
    fma_args[0] = a;
    fma_args[1] = f32_bits(cg, c_hi_bits);
    fma_args[2] = LLVMBuildFNeg(bld, n, "");
    LLVMValueRef f = cg_call_intrinsic(cg, "llvm.fma", &f32, 1, fma_args, 3);
    fma_args[1] = f32_bits(cg, c_lo_bits);
    fma_args[2] = f;
    f = cg_call_intrinsic(cg, "llvm.fma", &f32, 1, fma_args, 3);
    /* ex2.approx.ftz(f) * 2^n, 2^n built from the bits of j */
    LLVMValueRef e = cg_call_intrinsic(cg, "llvm.nvvm.ex2.approx.ftz", &f32, 1, &f, 1);
    LLVMTypeRef i32 = LLVMInt32TypeInContext(cg->context);
    *scale = LLVMBuildBitCast(
        bld, LLVMBuildShl(bld, LLVMBuildBitCast(bld, j, i32, ""), cg_i32(cg, 23), ""),
        f32, "");
    return e;
}

LLVMValueRef cg_exp(Codegen *cg, LLVMValueRef a) {
    LLVMValueRef scale;
    LLVMValueRef e = exp_parts(cg, a, &scale);
    return LLVMBuildFMul(cg->builder, e, scale, "");
}

/* 1 + expf(a) bit for bit as fma(e, 2^n, 1): e 2^n is exact wherever it is
 * normal (e has 24 bits, 2^n only moves the exponent), where it is
 * subnormal both forms give exactly 1, and where it overflows both give
 * +inf; NaN stays NaN.  One FFMA instead of expf's FMUL and the FADD. */
static LLVMValueRef one_plus_exp(Codegen *cg, LLVMValueRef a) {
    LLVMValueRef scale;
    LLVMValueRef e = exp_parts(cg, a, &scale);
    LLVMTypeRef f32 = f32_type(cg);
    LLVMValueRef args[3] = {e, scale, f32_const(cg, 1.0f)};
    return cg_call_intrinsic(cg, "llvm.fma", &f32, 1, args, 3);
}

static LLVMValueRef sigmoid(Codegen *cg, LLVMValueRef x) {
    LLVMValueRef e = cg_exp(cg, LLVMBuildFNeg(cg->builder, x, ""));
    LLVMValueRef one = f32_const(cg, 1.0f);
    return LLVMBuildFDiv(cg->builder, one, LLVMBuildFAdd(cg->builder, one, e, ""), "");
}

/* libdevice log1pf(a), non-FTZ path (nvvm-reflect-ftz is 0), operation
 * for operation: u = RZ(a + 1) gives the exponent e to strip, a - e + (4e'
 * / 4 - 1) reduces the argument into [-1/4, 1/2), a degree-9 fma.rn
 * polynomial follows, then e * ln2.  Every step is an IEEE operation, so
 * tests/ref/moe_gate.c reproduces it bit for bit on the CPU.  The special
 * path: a >= +inf (bit compare) or a < -1 gives fma(a, inf, inf), i.e. inf
 * or NaN; -0 stays -0. */
static LLVMValueRef log1p_libdevice(Codegen *cg, LLVMValueRef a) {
    static const uint32_t poly[9] = {0xbd39bf78, 0x3dd80012, 0xbe0778e0, 0x3e146475,
                                     0xbe2a68dd, 0x3e4caf9e, 0xbe800042, 0x3eaaaae6,
                                     0xbf000000 /* -0.5 */};
    LLVMBuilderRef bld = cg->builder;
    LLVMTypeRef f32 = f32_type(cg);
    LLVMTypeRef i32 = LLVMInt32TypeInContext(cg->context);
    LLVMValueRef args[2] = {a, f32_const(cg, 1.0f)};
    LLVMValueRef u = cg_call_intrinsic(cg, "llvm.nvvm.add.rz.f", NULL, 0, args, 2);
    LLVMValueRef a_bits = LLVMBuildBitCast(bld, a, i32, "");
    LLVMValueRef e = LLVMBuildAnd(
        bld, LLVMBuildSub(bld, LLVMBuildBitCast(bld, u, i32, ""), cg_i32(cg, 0x3f400000), ""),
        cg_i32(cg, (int)0xff800000), "");
    LLVMValueRef m = LLVMBuildBitCast(bld, LLVMBuildSub(bld, a_bits, e, ""), f32, "");
    LLVMValueRef s = LLVMBuildBitCast(bld, LLVMBuildSub(bld, cg_i32(cg, 0x40800000), e, ""),
                                      f32, "");
    LLVMValueRef x = LLVMBuildFAdd(
        bld, m, call3(cg, "llvm.nvvm.fma.rn.f", f32_const(cg, 0.25f), s, f32_const(cg, -1.0f)),
        "");
    LLVMValueRef scaled_e = LLVMBuildFMul(bld, LLVMBuildSIToFP(bld, e, f32, ""),
                                          f32_bits(cg, 0x34000000), "");
    LLVMValueRef p = call3(cg, "llvm.nvvm.fma.rn.f", f32_bits(cg, poly[0]), x,
                           f32_bits(cg, poly[1]));
    for (int i = 2; i < 9; i++)
        p = call3(cg, "llvm.nvvm.fma.rn.f", p, x, f32_bits(cg, poly[i]));
    p = LLVMBuildFMul(bld, p, x, "");
    p = call3(cg, "llvm.nvvm.fma.rn.f", p, x, x);
    LLVMValueRef r = call3(cg, "llvm.nvvm.fma.rn.f", scaled_e, f32_bits(cg, 0x3f317218), p);
    /* special inputs, compared on the bits as libdevice does */
    LLVMValueRef inf = f32_bits(cg, 0x7f800000);
    LLVMValueRef special_value = call3(cg, "llvm.nvvm.fma.rn.f", a, inf, inf);
    LLVMValueRef big = LLVMBuildICmp(bld, LLVMIntSGT, a_bits, cg_i32(cg, (int)0xbf800000), "");
    LLVMValueRef r_special = LLVMBuildSelect(bld, big, special_value, r, "");
    LLVMValueRef zero = LLVMBuildFCmp(bld, LLVMRealOEQ, a, f32_const(cg, 0.0f), "");
    r_special = LLVMBuildSelect(bld, zero, f32_const(cg, -0.0f), r_special, "");
    LLVMValueRef special = LLVMBuildICmp(bld, LLVMIntUGE, a_bits, cg_i32(cg, 0x7f800000), "");
    return LLVMBuildSelect(bld, special, r_special, r, "");
}

static LLVMValueRef exp2_approx(Codegen *cg, LLVMValueRef x) {
    LLVMTypeRef f32 = f32_type(cg);
    return cg_call_intrinsic(cg, "llvm.nvvm.ex2.approx", &f32, 1, &x, 1);
}

static LLVMValueRef sqrt_rn(Codegen *cg, LLVMValueRef x) {
    return call1(cg, "llvm.nvvm.sqrt.rn.f", x);
}

static LLVMValueRef rsqrt_approx(Codegen *cg, LLVMValueRef x) {
    return call1(cg, "llvm.nvvm.rsqrt.approx.f", x);
}

/* MUFU.RCP: the seed that rcp.rn.f32 and div.rn.f32 refine with FMAs;
 * kernels that prove their operand range write that refinement out. */
static LLVMValueRef rcp_approx(Codegen *cg, LLVMValueRef x) {
    return call1(cg, "llvm.nvvm.rcp.approx.ftz.f", x);
}

/* f32 -> f16 bits, rounding toward zero. */
static LLVMValueRef f16_rz_bits(Codegen *cg, LLVMValueRef x) {
    LLVMValueRef h = call1(cg, "llvm.nvvm.f2f16.rz", x);
    return LLVMBuildBitCast(cg->builder, h, LLVMInt16TypeInContext(cg->context), "");
}

/* rn_e2m1 (spec 2.2): the nibble of |x| is the number of rounding
 * thresholds it passes (ties to the even code, hence the alternating
 * > / >=), saturating at code 7 (6.0); NaN becomes +6 (0x7); the sign
 * goes to bit 3, also for results of zero. */
static LLVMValueRef e2m1_bits(Codegen *cg, LLVMValueRef x) {
    static const struct { float threshold; bool inclusive; } steps[7] = {
        {0.25f, false}, {0.75f, true}, {1.25f, false}, {1.75f, true},
        {2.5f, false},  {3.5f, true},  {5.0f, false}};
    LLVMBuilderRef bld = cg->builder;
    LLVMTypeRef f32 = f32_type(cg);
    LLVMTypeRef i8 = LLVMInt8TypeInContext(cg->context);
    LLVMTypeRef i32 = LLVMInt32TypeInContext(cg->context);
    LLVMValueRef a = cg_call_intrinsic(cg, "llvm.fabs", &f32, 1, &x, 1);
    LLVMValueRef code = LLVMConstInt(i8, 0, 0);
    for (int i = 0; i < 7; i++) {
        LLVMValueRef passed = LLVMBuildFCmp(bld, steps[i].inclusive ? LLVMRealOGE : LLVMRealOGT,
                                            a, f32_const(cg, steps[i].threshold), "");
        code = LLVMBuildAdd(bld, code, LLVMBuildZExt(bld, passed, i8, ""), "");
    }
    LLVMValueRef sign = LLVMBuildLShr(bld, LLVMBuildBitCast(bld, x, i32, ""),
                                      cg_i32(cg, 31), "");
    sign = LLVMBuildShl(bld, LLVMBuildTrunc(bld, sign, i8, ""), LLVMConstInt(i8, 3, 0), "");
    code = LLVMBuildOr(bld, code, sign, "");
    LLVMValueRef nan = LLVMBuildFCmp(bld, LLVMRealUNO, x, x, "");
    return LLVMBuildSelect(bld, nan, LLVMConstInt(i8, 7, 0), code, "");
}

/* e2m1 nibble (low 4 bits of an i8) -> f32, exact. */
static LLVMValueRef e2m1_value(Codegen *cg, LLVMValueRef bits) {
    static const float magnitude[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    LLVMBuilderRef bld = cg->builder;
    LLVMTypeRef i8 = LLVMInt8TypeInContext(cg->context);
    LLVMValueRef code = LLVMBuildAnd(bld, bits, LLVMConstInt(i8, 7, 0), "");
    LLVMValueRef v = f32_const(cg, 0.0f);
    for (int i = 1; i < 8; i++)
        v = LLVMBuildSelect(bld,
                            LLVMBuildICmp(bld, LLVMIntEQ, code, LLVMConstInt(i8, (unsigned)i, 0), ""),
                            f32_const(cg, magnitude[i]), v, "");
    LLVMValueRef negative = LLVMBuildICmp(
        bld, LLVMIntNE, LLVMBuildAnd(bld, bits, LLVMConstInt(i8, 8, 0), ""),
        LLVMConstInt(i8, 0, 0), "");
    return LLVMBuildSelect(bld, negative, LLVMBuildFNeg(bld, v, ""), v, "");
}

/* ---- conversions ------------------------------------------------------- */

/* f32 lanes -> e4m3/e5m2 bytes, two per cvt: cvt(b, a) puts a in the low
 * byte and b in the high one, so with an even number of lanes the i16
 * results, bitcast as a whole vector, are the bytes in lane order (the
 * target is little-endian). */
static LLVMValueRef f32_to_fp8(Codegen *cg, LLVMValueRef v, DType to, int lanes) {
    const char *name = to == DT_E4M3 ? "llvm.nvvm.ff.to.e4m3x2.rn"
                                     : "llvm.nvvm.ff.to.e5m2x2.rn";
    LLVMBuilderRef bld = cg->builder;
    LLVMTypeRef i8 = LLVMInt8TypeInContext(cg->context);
    LLVMValueRef pairs[IR_MAX_LANES / 2 + 1] = {0};
    int npairs = 0;
    for (int i = 0; i < lanes; i += 2) {
        LLVMValueRef low = extract(cg, v, i);
        LLVMValueRef high = i + 1 < lanes ? extract(cg, v, i + 1) : f32_const(cg, 0.0f);
        LLVMValueRef args[2] = {high, low};
        pairs[npairs++] = cg_call_intrinsic(cg, name, NULL, 0, args, 2);
    }
    if (lanes == 1) return LLVMBuildTrunc(bld, pairs[0], i8, "");
    if (lanes % 2 == 0)
        return LLVMBuildBitCast(bld, assemble(cg, pairs, npairs),
                                LLVMVectorType(i8, (unsigned)lanes), "");
    LLVMValueRef out[IR_MAX_LANES] = {0};
    for (int i = 0; i < lanes; i++) {
        LLVMValueRef pair = pairs[i / 2];
        if (i % 2) pair = LLVMBuildLShr(bld, pair, LLVMConstInt(LLVMTypeOf(pair), 8, 0), "");
        out[i] = LLVMBuildTrunc(bld, pair, i8, "");
    }
    return assemble(cg, out, lanes);
}

/* e4m3/e5m2 bytes -> f32, two per cvt (low byte -> element 0). */
static LLVMValueRef fp8_to_f32(Codegen *cg, LLVMValueRef v, DType from, int lanes) {
    const char *name = from == DT_E4M3 ? "llvm.nvvm.e4m3x2.to.f16x2.rn"
                                       : "llvm.nvvm.e5m2x2.to.f16x2.rn";
    LLVMBuilderRef bld = cg->builder;
    LLVMTypeRef i16 = LLVMInt16TypeInContext(cg->context);
    /* with an even number of lanes, the byte vector is the pairs' vector */
    LLVMValueRef words = lanes % 2 == 0 && lanes > 1
                             ? LLVMBuildBitCast(bld, v, LLVMVectorType(i16, (unsigned)lanes / 2), "")
                             : NULL;
    LLVMValueRef out[IR_MAX_LANES] = {0};
    for (int i = 0; i < lanes; i += 2) {
        LLVMValueRef pair;
        if (words) {
            pair = extract(cg, words, i / 2);
        } else {
            pair = LLVMBuildZExt(bld, extract(cg, v, i), i16, "");
            if (i + 1 < lanes) {
                LLVMValueRef high = LLVMBuildZExt(bld, extract(cg, v, i + 1), i16, "");
                pair = LLVMBuildOr(bld, pair,
                                   LLVMBuildShl(bld, high, LLVMConstInt(i16, 8, 0), ""), "");
            }
        }
        LLVMValueRef halves = cg_call_intrinsic(cg, name, NULL, 0, &pair, 1);
        for (int h = 0; h < 2 && i + h < lanes; h++)
            out[i + h] = LLVMBuildFPExt(
                bld, LLVMBuildExtractElement(bld, halves, cg_i32(cg, h), ""), f32_type(cg),
                "");
    }
    return assemble(cg, out, lanes);
}

static bool is_fp8(DType t) { return ir_dtype_class(t) == DCLASS_FLOAT8; }
static bool is_real(DType t) { return ir_dtype_class(t) == DCLASS_FLOAT; }
static bool is_integer(DType t) {
    DClass c = ir_dtype_class(t);
    return c == DCLASS_SINT || c == DCLASS_UINT || c == DCLASS_BOOL;
}

LLVMValueRef cg_convert(Codegen *cg, LLVMValueRef v, DType from, DType to,
                        int lanes, Loc loc) {
    if (from == to) return v;
    LLVMBuilderRef bld = cg->builder;
    LLVMTypeRef target = cg_type(cg, to, lanes);
    if (lanes > IR_MAX_LANES) ice("%d lanes", lanes);

    /* storage floats go through f32 */
    if (is_fp8(from)) {
        LLVMValueRef f;
        if (from == DT_E2M1) f = cg_map_lanes(cg, v, lanes, e2m1_value);
        else f = fp8_to_f32(cg, v, from, lanes);
        return cg_convert(cg, f, DT_F32, to, lanes, loc);
    }
    if (is_fp8(to)) {
        LLVMValueRef f = cg_convert(cg, v, from, DT_F32, lanes, loc);
        if (to == DT_E2M1) return cg_map_lanes(cg, f, lanes, e2m1_bits);
        return f32_to_fp8(cg, f, to, lanes);
    }

    if (to == DT_BOOL) {
        LLVMValueRef zero = LLVMConstNull(LLVMTypeOf(v));
        return is_real(from) ? LLVMBuildFCmp(bld, LLVMRealUNE, v, zero, "")
                             : LLVMBuildICmp(bld, LLVMIntNE, v, zero, "");
    }
    bool from_signed = ir_dtype_class(from) == DCLASS_SINT;
    bool to_signed = ir_dtype_class(to) == DCLASS_SINT;
    int from_bits = ir_dtype_bits(from), to_bits = ir_dtype_bits(to);
    if (from == DT_BOOL) from_bits = 1;

    if (is_integer(from) && is_integer(to)) {
        if (to_bits < from_bits) return LLVMBuildTrunc(bld, v, target, "");
        if (to_bits == from_bits) return v; /* same bits, other signedness */
        return from_signed ? LLVMBuildSExt(bld, v, target, "")
                           : LLVMBuildZExt(bld, v, target, "");
    }
    if (is_integer(from) && is_real(to))
        return from_signed ? LLVMBuildSIToFP(bld, v, target, "")
                           : LLVMBuildUIToFP(bld, v, target, "");
    if (is_real(from) && is_integer(to))
        return to_signed ? LLVMBuildFPToSI(bld, v, target, "")
                         : LLVMBuildFPToUI(bld, v, target, "");
    if (is_real(from) && is_real(to)) {
        if (to_bits == from_bits) /* f16 <-> bf16: through f32 */
            return cg_convert(cg, cg_convert(cg, v, from, DT_F32, lanes, loc), DT_F32, to,
                              lanes, loc);
        return to_bits < from_bits ? LLVMBuildFPTrunc(bld, v, target, "")
                                   : LLVMBuildFPExt(bld, v, target, "");
    }
    cg_error(cg, loc, "cannot convert %s to %s", ir_dtype_name(from), ir_dtype_name(to));
    return LLVMGetPoison(target);
}

/* ---- calls ------------------------------------------------------------- */

/* Applies an f32 function to an argument of any float dtype (f64 and the
 * narrow floats go through f32) and returns the result in `t`. */
static LLVMValueRef float_function(Codegen *cg, const Expr *e,
                                   LLVMValueRef (*fn)(Codegen *, LLVMValueRef)) {
    const Expr *arg = e->u.call.args[0];
    LLVMValueRef v = cg_expr(cg, arg);
    int lanes = lanes_of(v);
    v = cg_convert(cg, v, arg->dtype, DT_F32, lanes, e->loc);
    v = cg_map_lanes(cg, v, lanes, fn);
    return cg_convert(cg, v, DT_F32, e->dtype, lanes, e->loc);
}

/* shfl.sync over a 32-bit view of any scalar of up to 32 bits. */
static LLVMValueRef shuffle(Codegen *cg, bool xor_mode, LLVMValueRef value, DType t,
                            LLVMValueRef lane) {
    LLVMBuilderRef bld = cg->builder;
    LLVMTypeRef i32 = LLVMInt32TypeInContext(cg->context);
    const char *name = xor_mode ? "llvm.nvvm.shfl.sync.bfly.i32"
                                : "llvm.nvvm.shfl.sync.idx.i32";
    if (t == DT_F32) name = xor_mode ? "llvm.nvvm.shfl.sync.bfly.f32"
                                     : "llvm.nvvm.shfl.sync.idx.f32";
    int bits = t == DT_BOOL ? 1 : ir_dtype_bits(t);
    if (bits == 64) {
        /* two 32-bit halves */
        LLVMTypeRef i64 = LLVMInt64TypeInContext(cg->context);
        LLVMValueRef whole = LLVMBuildBitCast(bld, value, i64, "");
        LLVMValueRef lo = LLVMBuildTrunc(bld, whole, i32, "");
        LLVMValueRef hi = LLVMBuildTrunc(
            bld, LLVMBuildLShr(bld, whole, LLVMConstInt(i64, 32, 0), ""), i32, "");
        lo = shuffle(cg, xor_mode, lo, DT_U32, lane);
        hi = shuffle(cg, xor_mode, hi, DT_U32, lane);
        whole = LLVMBuildOr(bld, LLVMBuildZExt(bld, lo, i64, ""),
                            LLVMBuildShl(bld, LLVMBuildZExt(bld, hi, i64, ""),
                                         LLVMConstInt(i64, 32, 0), ""),
                            "");
        return LLVMBuildBitCast(bld, whole, LLVMTypeOf(value), "");
    }
    LLVMValueRef word = value;
    if (t != DT_F32) {
        LLVMTypeRef int_type = LLVMIntTypeInContext(cg->context, (unsigned)bits);
        word = LLVMBuildBitCast(bld, value, int_type, "");
        if (bits < 32) word = LLVMBuildZExt(bld, word, i32, "");
    }
    LLVMValueRef args[4] = {cg_i32(cg, -1), word, lane, cg_i32(cg, 0x1f)};
    LLVMValueRef r = cg_call_intrinsic(cg, name, NULL, 0, args, 4);
    if (t == DT_F32) return r;
    if (bits < 32) r = LLVMBuildTrunc(bld, r, LLVMIntTypeInContext(cg->context, (unsigned)bits), "");
    return LLVMBuildBitCast(bld, r, LLVMTypeOf(value), "");
}

static LLVMValueRef sreg(Codegen *cg, const char *name) {
    return cg_call_intrinsic(cg, name, NULL, 0, NULL, 0);
}

static LLVMValueRef thread_index(Codegen *cg) {
    return sreg(cg, "llvm.nvvm.read.ptx.sreg.tid.x");
}

static LLVMValueRef index_value(Codegen *cg, const Expr *e, LLVMValueRef v) {
    return cg_splat(cg, cg_convert(cg, v, DT_I32, e->dtype, 1, e->loc), e->lanes);
}

/* One PTX instruction on 32-bit registers (packed bf16x2 or bytes), lane
 * by lane: `text` names the operands $0 (the result) to $nargs.  Inline
 * asm because LLVM's <2 x bfloat> lowering depends on its version and has
 * no byte permute; no side effects, so calls may be CSE'd. */
static LLVMValueRef b32_asm(Codegen *cg, const Expr *e, const char *text) {
    static const char *const constraints[4] = {"=r", "=r,r", "=r,r,r", "=r,r,r,r"};
    LLVMTypeRef i32 = LLVMInt32TypeInContext(cg->context);
    int nargs = e->u.call.nargs;
    LLVMValueRef v[3];
    int lanes = 1;
    for (int i = 0; i < nargs; i++) {
        v[i] = cg_expr(cg, e->u.call.args[i]);
        v[i] = cg_convert(cg, v[i], e->u.call.args[i]->dtype, DT_U32, lanes_of(v[i]),
                          e->loc);
        if (lanes_of(v[i]) > lanes) lanes = lanes_of(v[i]);
    }
    LLVMTypeRef types[3] = {i32, i32, i32};
    LLVMTypeRef fn = LLVMFunctionType(i32, types, (unsigned)nargs, 0);
    LLVMValueRef code = LLVMGetInlineAsm(fn, (char *)text, strlen(text),
                                         (char *)constraints[nargs],
                                         strlen(constraints[nargs]), 0, 0,
                                         LLVMInlineAsmDialectATT, 0);
    LLVMValueRef out[IR_MAX_LANES] = {0};
    if (lanes > IR_MAX_LANES) ice("%d lanes", lanes);
    for (int lane = 0; lane < lanes; lane++) {
        LLVMValueRef operands[3];
        for (int i = 0; i < nargs; i++) operands[i] = extract(cg, v[i], lane);
        out[lane] = LLVMBuildCall2(cg->builder, fn, code, operands, (unsigned)nargs, "");
    }
    return cg_convert(cg, assemble(cg, out, lanes), DT_U32, e->dtype, lanes, e->loc);
}

LLVMValueRef cg_call(Codegen *cg, const Expr *e) {
    LLVMBuilderRef bld = cg->builder;
    Expr **args = e->u.call.args;
    switch (e->u.call.op) {
    case INTR_THREAD_IDX: return index_value(cg, e, thread_index(cg));
    case INTR_BLOCK_IDX_X:
        return index_value(cg, e, sreg(cg, "llvm.nvvm.read.ptx.sreg.ctaid.x"));
    case INTR_BLOCK_IDX_Y:
        return index_value(cg, e, sreg(cg, "llvm.nvvm.read.ptx.sreg.ctaid.y"));
    case INTR_BLOCK_IDX_Z:
        return index_value(cg, e, sreg(cg, "llvm.nvvm.read.ptx.sreg.ctaid.z"));
    case INTR_LANE_IDX:
        return index_value(cg, e, LLVMBuildAnd(bld, thread_index(cg), cg_i32(cg, 31), ""));
    case INTR_WARP_IDX:
        return index_value(cg, e, LLVMBuildLShr(bld, thread_index(cg), cg_i32(cg, 5), ""));
    case INTR_EXP: return float_function(cg, e, cg_exp);
    case INTR_ONE_PLUS_EXP: return float_function(cg, e, one_plus_exp);
    case INTR_EXP2: return float_function(cg, e, exp2_approx);
    case INTR_RSQRT: return float_function(cg, e, rsqrt_approx);
    case INTR_RCP_APPROX: return float_function(cg, e, rcp_approx);
    case INTR_SQRT:
        if (e->dtype == DT_F64) {
            LLVMValueRef v = cg_expr(cg, args[0]);
            if (lanes_of(v) > 1) break;
            return call1(cg, "llvm.nvvm.sqrt.rn.d", v);
        }
        return float_function(cg, e, sqrt_rn);
    case INTR_SIGMOID: return float_function(cg, e, sigmoid);
    case INTR_LOG1P: return float_function(cg, e, log1p_libdevice);
    case INTR_FMA: {
        LLVMValueRef v[3];
        int lanes = 1;
        for (int i = 0; i < 3; i++) {
            v[i] = cg_expr(cg, args[i]);
            if (lanes_of(v[i]) > lanes) lanes = lanes_of(v[i]);
        }
        for (int i = 0; i < 3; i++)
            if (lanes_of(v[i]) != lanes) v[i] = cg_splat(cg, v[i], lanes);
        LLVMTypeRef type = LLVMTypeOf(v[0]);
        return cg_call_intrinsic(cg, "llvm.fma", &type, 1, v, 3);
    }
    case INTR_SHFL_XOR: case INTR_SHFL_IDX: {
        LLVMValueRef value = cg_expr(cg, args[0]);
        LLVMValueRef lane = cg_expr(cg, args[1]);
        lane = cg_convert(cg, lane, args[1]->dtype, DT_I32, lanes_of(lane), e->loc);
        int lanes = lanes_of(value);
        LLVMValueRef out[IR_MAX_LANES] = {0};
        if (ir_dtype_class(e->dtype) == DCLASS_FLOAT8 && ir_dtype_bits(e->dtype) < 8) break;
        for (int i = 0; i < lanes; i++)
            out[i] = shuffle(cg, e->u.call.op == INTR_SHFL_XOR, extract(cg, value, i),
                             args[0]->dtype, extract(cg, lane, i));
        return assemble(cg, out, lanes);
    }
    case INTR_F16_RZ_BITS: {
        LLVMValueRef v = cg_expr(cg, args[0]);
        int lanes = lanes_of(v);
        v = cg_convert(cg, v, args[0]->dtype, DT_F32, lanes, e->loc);
        v = cg_map_lanes(cg, v, lanes, f16_rz_bits);
        return cg_convert(cg, v, DT_U16, e->dtype, lanes, e->loc);
    }
    case INTR_E2M1_BITS: {
        LLVMValueRef v = cg_expr(cg, args[0]);
        int lanes = lanes_of(v);
        v = cg_convert(cg, v, args[0]->dtype, DT_F32, lanes, e->loc);
        v = cg_map_lanes(cg, v, lanes, e2m1_bits);
        return cg_convert(cg, v, DT_U8, e->dtype, lanes, e->loc);
    }
    case INTR_ISFINITE: {
        LLVMValueRef v = cg_expr(cg, args[0]);
        LLVMTypeRef type = LLVMTypeOf(v);
        LLVMValueRef magnitude = cg_call_intrinsic(cg, "llvm.fabs", &type, 1, &v, 1);
        LLVMTypeRef scalar = LLVMGetTypeKind(type) == LLVMVectorTypeKind
                                 ? LLVMGetElementType(type) : type;
        LLVMValueRef inf = cg_splat(cg, LLVMConstReal(scalar, INFINITY), lanes_of(v));
        return LLVMBuildFCmp(bld, LLVMRealOLT, magnitude, inf, "");
    }
    case INTR_POPCOUNT: {
        LLVMValueRef v = cg_expr(cg, args[0]);
        LLVMTypeRef type = LLVMTypeOf(v);
        LLVMValueRef count = cg_call_intrinsic(cg, "llvm.ctpop", &type, 1, &v, 1);
        return cg_convert(cg, count, args[0]->dtype, e->dtype, lanes_of(v), e->loc);
    }
    case INTR_BF16X2_MUL: return b32_asm(cg, e, "mul.rn.bf16x2 $0, $1, $2;");
    case INTR_BF16X2_FMA: return b32_asm(cg, e, "fma.rn.bf16x2 $0, $1, $2, $3;");
    case INTR_BF16X2_MIN: return b32_asm(cg, e, "min.bf16x2 $0, $1, $2;");
    case INTR_BF16X2_MAX: return b32_asm(cg, e, "max.bf16x2 $0, $1, $2;");
    case INTR_BF16X2_MAX_XORSIGN_ABS:
        return b32_asm(cg, e, "max.xorsign.abs.bf16x2 $0, $1, $2;");
    case INTR_BF16X2: {
        /* a two-lane bfloat vector read as one word: the halves of a
         * loaded register go back together without any instruction */
        LLVMValueRef lo = cg_expr(cg, args[0]), hi = cg_expr(cg, args[1]);
        int lanes = lanes_of(lo) > lanes_of(hi) ? lanes_of(lo) : lanes_of(hi);
        LLVMTypeRef pair = LLVMVectorType(LLVMBFloatTypeInContext(cg->context), 2);
        LLVMTypeRef i32 = LLVMInt32TypeInContext(cg->context);
        LLVMValueRef out[IR_MAX_LANES] = {0};
        if (lanes > IR_MAX_LANES) ice("%d lanes", lanes);
        for (int lane = 0; lane < lanes; lane++) {
            LLVMValueRef v = LLVMGetPoison(pair);
            v = LLVMBuildInsertElement(bld, v, extract(cg, lo, lane), cg_i32(cg, 0), "");
            v = LLVMBuildInsertElement(bld, v, extract(cg, hi, lane), cg_i32(cg, 1), "");
            out[lane] = LLVMBuildBitCast(bld, v, i32, "");
        }
        return cg_convert(cg, assemble(cg, out, lanes), DT_U32, e->dtype, lanes, e->loc);
    }
    case INTR_PRMT: return b32_asm(cg, e, "prmt.b32 $0, $1, $2, $3;");
    case INTR_F16X2_MUL: return b32_asm(cg, e, "mul.rn.f16x2 $0, $1, $2;");
    case INTR_F16X2_FMA: return b32_asm(cg, e, "fma.rn.f16x2 $0, $1, $2, $3;");
    case INTR_F16X2_MIN: return b32_asm(cg, e, "min.f16x2 $0, $1, $2;");
    case INTR_F16X2_MAX: return b32_asm(cg, e, "max.f16x2 $0, $1, $2;");
    /* NaN-propagating: one NaN operand makes the half NaN */
    case INTR_F16X2_MAX_NAN: return b32_asm(cg, e, "max.NaN.f16x2 $0, $1, $2;");
    case INTR_F16X2_LOW2:
        return b32_asm(cg, e, "{ .reg .b16 lo, hi; mov.b32 {lo, hi}, $1; mov.b32 $0, {lo, lo}; }");
    case INTR_F16X2_HIGH2:
        return b32_asm(cg, e, "{ .reg .b16 lo, hi; mov.b32 {lo, hi}, $1; mov.b32 $0, {hi, hi}; }");
    case INTR_F16X2_MAX_XORSIGN_ABS:
        return b32_asm(cg, e, "max.xorsign.abs.f16x2 $0, $1, $2;");
    /* ptxas folds it into a later HFMA2's operand as |R| */
    case INTR_F16X2_ABS: return b32_asm(cg, e, "abs.f16x2 $0, $1;");
    case INTR_E4M3X2_F16X2:
        /* the instruction reads a 16-bit register: the word's low half */
        return b32_asm(cg, e, "{ .reg .b16 lo, hi; mov.b32 {lo, hi}, $1; "
                              "cvt.rn.f16x2.e4m3x2 $0, lo; }");
    case INTR_E4M3X2_F16X2_HIGH:
        /* the high half as the 16-bit register: ptxas reads it as R.H1,
         * where a shift first would cost one instruction */
        return b32_asm(cg, e, "{ .reg .b16 lo, hi; mov.b32 {lo, hi}, $1; "
                              "cvt.rn.f16x2.e4m3x2 $0, hi; }");
    case INTR_COUNT: break;
    }
    cg_error(cg, e->loc, "%s is not supported on %s here", ir_intrinsic_name(e->u.call.op),
             ir_dtype_name(e->dtype));
    return LLVMGetPoison(cg_type(cg, e->dtype, e->lanes));
}
