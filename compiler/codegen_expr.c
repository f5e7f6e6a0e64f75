/*
 * codegen_expr.c -- expressions and memory accesses to LLVM IR.
 *
 * Index arithmetic is i32 (symbols are i32 and the launcher rejects tensors
 * whose element offsets do not fit); only the final byte offset of a global
 * access is widened, `sext(offset)` scaled by the element size.  Integer
 * division and modulo are floor operations (TileLang semantics): by a
 * power of two a shift and a mask, otherwise truncating ones with a
 * correction, which LLVM reduces to shifts and masks once it knows the
 * operands are non-negative.
 *
 * Memory accesses come in three forms (ir.h, EXPR_LOAD):
 *   scalar      one element;
 *   contiguous  lanes > 1, last index RAMP(base, 1, lanes) along a
 *               dimension of unit stride, other indices lane-invariant:
 *               one `load <V x T>` / store with the alignment vectorize
 *               proved (on a swizzled shared buffer, one per 16-byte
 *               chunk: swizzled_piece_lanes);
 *   gather      anything else lanes wide: one scalar access per lane.
 * A predicate makes an access conditional: a lane-invariant predicate
 * guards the whole access with one branch, a lanes-wide one guards each
 * lane; a masked load yields zero where the predicate is false and never
 * touches memory there (out-of-bounds tile loads read 0, tilekernels-spec
 * 2.4).  A global access under the kernel's load_cache / store_cache hint
 * is emitted by codegen_cache.c instead of as an LLVM load or store.
 */
#include <string.h>

#include "codegen_llvm.h"

LLVMValueRef cg_splat(Codegen *cg, LLVMValueRef scalar, int lanes) {
    if (lanes <= 1) return scalar;
    LLVMTypeRef vector = LLVMVectorType(LLVMTypeOf(scalar), (unsigned)lanes);
    LLVMValueRef one = LLVMBuildInsertElement(cg->builder, LLVMGetPoison(vector),
                                              scalar, cg_i32(cg, 0), "");
    LLVMValueRef mask = LLVMConstNull(
        LLVMVectorType(LLVMInt32TypeInContext(cg->context), (unsigned)lanes));
    return LLVMBuildShuffleVector(cg->builder, one, LLVMGetPoison(vector), mask,
                                  "");
}

static int value_lanes(LLVMValueRef v) {
    LLVMTypeRef t = LLVMTypeOf(v);
    return LLVMGetTypeKind(t) == LLVMVectorTypeKind ? (int)LLVMGetVectorSize(t)
                                                    : 1;
}

/* Lane `lane` of v, or v itself when it is a scalar (lane-invariant). */
static LLVMValueRef lane_of(Codegen *cg, LLVMValueRef v, int lane) {
    if (value_lanes(v) == 1) return v;
    return LLVMBuildExtractElement(cg->builder, v, cg_i32(cg, lane), "");
}

/* Widens a scalar operand to the lanes of the expression. */
static LLVMValueRef to_lanes(Codegen *cg, LLVMValueRef v, int lanes) {
    return value_lanes(v) == lanes ? v : cg_splat(cg, v, lanes);
}

LLVMValueRef cg_to_memory(Codegen *cg, LLVMValueRef v, DType t) {
    if (t != DT_BOOL) return v;
    int lanes = value_lanes(v);
    return LLVMBuildZExt(cg->builder, v, cg_type(cg, DT_I8, lanes), "");
}

LLVMValueRef cg_from_memory(Codegen *cg, LLVMValueRef v, DType t) {
    if (t != DT_BOOL) return v;
    int lanes = value_lanes(v);
    return LLVMBuildICmp(cg->builder, LLVMIntNE, v,
                         LLVMConstNull(cg_type(cg, DT_I8, lanes)), "");
}

/* ---- arithmetic -------------------------------------------------------- */

static bool is_float(DType t) {
    DClass c = ir_dtype_class(t);
    return c == DCLASS_FLOAT || c == DCLASS_FLOAT8;
}

static bool is_signed(DType t) { return ir_dtype_class(t) == DCLASS_SINT; }

static LLVMValueRef contracted(LLVMValueRef v) {
    /* nvcc --fmad=true: a*b+c may become one fma.rn (see codegen_llvm.c) */
    if (LLVMCanValueUseFastMathFlags(v))
        LLVMSetFastMathFlags(v, LLVMFastMathAllowContract);
    return v;
}

static LLVMValueRef min_max(Codegen *cg, const char *name, LLVMValueRef a,
                            LLVMValueRef b) {
    LLVMTypeRef type = LLVMTypeOf(a);
    LLVMValueRef args[2] = {a, b};
    return cg_call_intrinsic(cg, name, &type, 1, args, 2);
}

/* The divisor b when it is a constant 2^n > 0, the same in every lane of
 * a vector; 0 otherwise. */
static int64_t power_of_two_divisor(LLVMValueRef b) {
    LLVMValueRef lane = b;
    if (LLVMGetTypeKind(LLVMTypeOf(b)) == LLVMVectorTypeKind) {
        if (!LLVMIsConstant(b))
            return 0;
        unsigned lanes = LLVMGetVectorSize(LLVMTypeOf(b));
        lane = LLVMGetAggregateElement(b, 0);
        for (unsigned i = 1; i < lanes; i++)
            if (!lane || LLVMGetAggregateElement(b, i) != lane)
                return 0;
    }
    if (!lane || !LLVMIsAConstantInt(lane))
        return 0;
    int64_t divisor = LLVMConstIntGetSExtValue(lane);
    return divisor > 0 && (divisor & (divisor - 1)) == 0 ? divisor : 0;
}

/* The constant `value` of integer or integer-vector type `type`. */
static LLVMValueRef int_constant(LLVMTypeRef type, uint64_t value) {
    if (LLVMGetTypeKind(type) != LLVMVectorTypeKind)
        return LLVMConstInt(type, value, 0);
    unsigned lanes = LLVMGetVectorSize(type);
    LLVMValueRef lane = LLVMConstInt(LLVMGetElementType(type), value, 0);
    LLVMValueRef elements[64];
    if (lanes > sizeof elements / sizeof elements[0])
        return NULL;
    for (unsigned i = 0; i < lanes; i++)
        elements[i] = lane;
    return LLVMConstVector(elements, lanes);
}

/* Floor division and modulo on signed integers: truncating sdiv/srem,
 * corrected by one when the remainder is non-zero and its sign differs
 * from the divisor's.  By a constant 2^n > 0 they are exactly an
 * arithmetic shift right by n and a mask of the low n bits, for every a
 * in two's complement; LLVM cannot see that through the correction when
 * it cannot prove a >= 0 (a pipeline's stage and parity, it % S and
 * it / S % 2 of a loop-carried counter, took ten instructions instead of
 * three). */
static LLVMValueRef floor_div_mod(Codegen *cg, LLVMValueRef a, LLVMValueRef b,
                                  bool want_mod) {
    LLVMBuilderRef bld = cg->builder;
    int64_t divisor = power_of_two_divisor(b);
    if (divisor > 0) {
        unsigned shift = 0;
        while ((INT64_C(1) << shift) != divisor)
            shift++;
        LLVMValueRef operand =
            int_constant(LLVMTypeOf(a), want_mod ? (uint64_t)divisor - 1 : shift);
        if (operand)
            return want_mod ? LLVMBuildAnd(bld, a, operand, "")
                            : LLVMBuildAShr(bld, a, operand, "");
    }
    LLVMValueRef q = LLVMBuildSDiv(bld, a, b, "");
    LLVMValueRef r = LLVMBuildSRem(bld, a, b, "");
    LLVMValueRef zero = LLVMConstNull(LLVMTypeOf(a));
    LLVMValueRef nonzero = LLVMBuildICmp(bld, LLVMIntNE, r, zero, "");
    LLVMValueRef signs = LLVMBuildICmp(bld, LLVMIntSLT,
                                       LLVMBuildXor(bld, r, b, ""), zero, "");
    LLVMValueRef fix = LLVMBuildAnd(bld, nonzero, signs, "");
    if (want_mod)
        return LLVMBuildAdd(bld, r, LLVMBuildSelect(bld, fix, b, zero, ""), "");
    return LLVMBuildSub(bld, q, LLVMBuildZExt(bld, fix, LLVMTypeOf(a), ""), "");
}

static LLVMValueRef emit_float_binary(Codegen *cg, const Expr *e,
                                      LLVMValueRef a, LLVMValueRef b) {
    LLVMBuilderRef bld = cg->builder;
    switch (e->u.binary.op) {
    case BIN_ADD: return contracted(LLVMBuildFAdd(bld, a, b, ""));
    case BIN_SUB: return contracted(LLVMBuildFSub(bld, a, b, ""));
    case BIN_MUL: return contracted(LLVMBuildFMul(bld, a, b, ""));
    case BIN_DIV: return LLVMBuildFDiv(bld, a, b, ""); /* div.rn */
    case BIN_MIN: return min_max(cg, "llvm.minnum", a, b);
    case BIN_MAX: return min_max(cg, "llvm.maxnum", a, b);
    case BIN_EQ: return LLVMBuildFCmp(bld, LLVMRealOEQ, a, b, "");
    case BIN_NE: return LLVMBuildFCmp(bld, LLVMRealUNE, a, b, "");
    case BIN_LT: return LLVMBuildFCmp(bld, LLVMRealOLT, a, b, "");
    case BIN_LE: return LLVMBuildFCmp(bld, LLVMRealOLE, a, b, "");
    case BIN_GT: return LLVMBuildFCmp(bld, LLVMRealOGT, a, b, "");
    case BIN_GE: return LLVMBuildFCmp(bld, LLVMRealOGE, a, b, "");
    default: break;
    }
    cg_error(cg, e->loc, "operator '%s' is not defined on %s",
             ir_binop_name(e->u.binary.op), ir_dtype_name(e->u.binary.lhs->dtype));
    return LLVMGetPoison(LLVMTypeOf(a));
}

static LLVMValueRef emit_int_binary(Codegen *cg, const Expr *e, LLVMValueRef a,
                                    LLVMValueRef b) {
    LLVMBuilderRef bld = cg->builder;
    bool s = is_signed(e->u.binary.lhs->dtype);
    switch (e->u.binary.op) {
    case BIN_ADD: return LLVMBuildAdd(bld, a, b, "");
    case BIN_SUB: return LLVMBuildSub(bld, a, b, "");
    case BIN_MUL: return LLVMBuildMul(bld, a, b, "");
    case BIN_DIV:
        return s ? floor_div_mod(cg, a, b, false) : LLVMBuildUDiv(bld, a, b, "");
    case BIN_MOD:
        return s ? floor_div_mod(cg, a, b, true) : LLVMBuildURem(bld, a, b, "");
    case BIN_MIN: return min_max(cg, s ? "llvm.smin" : "llvm.umin", a, b);
    case BIN_MAX: return min_max(cg, s ? "llvm.smax" : "llvm.umax", a, b);
    case BIN_AND: case BIN_LAND: return LLVMBuildAnd(bld, a, b, "");
    case BIN_OR: case BIN_LOR: return LLVMBuildOr(bld, a, b, "");
    case BIN_XOR: return LLVMBuildXor(bld, a, b, "");
    case BIN_SHL: return LLVMBuildShl(bld, a, b, "");
    case BIN_SHR:
        return s ? LLVMBuildAShr(bld, a, b, "") : LLVMBuildLShr(bld, a, b, "");
    case BIN_EQ: return LLVMBuildICmp(bld, LLVMIntEQ, a, b, "");
    case BIN_NE: return LLVMBuildICmp(bld, LLVMIntNE, a, b, "");
    case BIN_LT: return LLVMBuildICmp(bld, s ? LLVMIntSLT : LLVMIntULT, a, b, "");
    case BIN_LE: return LLVMBuildICmp(bld, s ? LLVMIntSLE : LLVMIntULE, a, b, "");
    case BIN_GT: return LLVMBuildICmp(bld, s ? LLVMIntSGT : LLVMIntUGT, a, b, "");
    case BIN_GE: return LLVMBuildICmp(bld, s ? LLVMIntSGE : LLVMIntUGE, a, b, "");
    case BIN_COUNT: break;
    }
    ice("bad binary operator %d", (int)e->u.binary.op);
}

static LLVMValueRef emit_binary(Codegen *cg, const Expr *e) {
    LLVMValueRef a = cg_expr(cg, e->u.binary.lhs);
    LLVMValueRef b = cg_expr(cg, e->u.binary.rhs);
    int lanes = value_lanes(a) > value_lanes(b) ? value_lanes(a) : value_lanes(b);
    a = to_lanes(cg, a, lanes);
    b = to_lanes(cg, b, lanes);
    DType t = e->u.binary.lhs->dtype;
    if (ir_dtype_class(t) == DCLASS_FLOAT8) {
        cg_error(cg, e->loc, "arithmetic on %s: convert to f32 first",
                 ir_dtype_name(t));
        return LLVMGetPoison(cg_type(cg, e->dtype, lanes));
    }
    return is_float(t) ? emit_float_binary(cg, e, a, b)
                       : emit_int_binary(cg, e, a, b);
}

static LLVMValueRef emit_unary(Codegen *cg, const Expr *e) {
    LLVMValueRef a = cg_expr(cg, e->u.unary.operand);
    DType t = e->u.unary.operand->dtype;
    LLVMBuilderRef bld = cg->builder;
    LLVMTypeRef type = LLVMTypeOf(a);
    switch (e->u.unary.op) {
    case UN_NEG:
        return is_float(t) ? LLVMBuildFNeg(bld, a, "") : LLVMBuildNeg(bld, a, "");
    case UN_NOT:
        return LLVMBuildNot(bld, a, "");
    case UN_LNOT:
        if (t == DT_BOOL) return LLVMBuildNot(bld, a, "");
        return is_float(t)
                   ? LLVMBuildFCmp(bld, LLVMRealOEQ, a, LLVMConstNull(type), "")
                   : LLVMBuildICmp(bld, LLVMIntEQ, a, LLVMConstNull(type), "");
    case UN_ABS:
        if (is_float(t)) return cg_call_intrinsic(cg, "llvm.fabs", &type, 1, &a, 1);
        if (!is_signed(t)) return a;
        LLVMValueRef args[2] = {
            a, LLVMConstInt(LLVMInt1TypeInContext(cg->context), 0, 0)};
        return cg_call_intrinsic(cg, "llvm.abs", &type, 1, args, 2);
    case UN_COUNT: break;
    }
    ice("bad unary operator %d", (int)e->u.unary.op);
}

static LLVMValueRef emit_ramp(Codegen *cg, const Expr *e) {
    LLVMValueRef base = cg_expr(cg, e->u.ramp.base);
    LLVMTypeRef type = LLVMTypeOf(base);
    LLVMValueRef steps[IR_MAX_LANES];
    if (e->lanes > IR_MAX_LANES) ice("ramp of %d lanes", e->lanes);
    for (int i = 0; i < e->lanes; i++)
        steps[i] = LLVMConstInt(type, (unsigned long long)(i * e->u.ramp.stride), 1);
    return LLVMBuildAdd(cg->builder, cg_splat(cg, base, e->lanes),
                        LLVMConstVector(steps, (unsigned)e->lanes), "");
}

LLVMValueRef cg_expr(Codegen *cg, const Expr *e) {
    switch (e->kind) {
    case EXPR_INT:
        if (is_float(e->dtype))
            return cg_convert(cg, LLVMConstReal(LLVMFloatTypeInContext(cg->context),
                                                (double)e->u.int_value),
                              DT_F32, e->dtype, 1, e->loc);
        return cg_splat(cg,
                        LLVMConstInt(cg_scalar_type(cg, e->dtype),
                                     (unsigned long long)(e->dtype == DT_BOOL
                                                              ? e->u.int_value != 0
                                                              : e->u.int_value),
                                     1),
                        e->lanes);
    case EXPR_FLOAT: {
        LLVMValueRef v;
        if (ir_dtype_class(e->dtype) == DCLASS_FLOAT8)
            v = cg_convert(cg, LLVMConstReal(LLVMFloatTypeInContext(cg->context),
                                             e->u.float_value),
                           DT_F32, e->dtype, 1, e->loc);
        else if (ir_dtype_is_float(e->dtype))
            v = LLVMConstReal(cg_scalar_type(cg, e->dtype), e->u.float_value);
        else
            v = LLVMConstInt(cg_scalar_type(cg, e->dtype),
                             (unsigned long long)(int64_t)e->u.float_value, 1);
        return cg_splat(cg, v, e->lanes);
    }
    case EXPR_VAR:
        return to_lanes(cg, cg_var_value(cg, e->u.var, e->loc), e->lanes);
    case EXPR_LOAD: return cg_load(cg, e);
    case EXPR_UNARY: return emit_unary(cg, e);
    case EXPR_BINARY: return emit_binary(cg, e);
    case EXPR_SELECT: {
        LLVMValueRef c = cg_expr(cg, e->u.select.cond);
        LLVMValueRef a = to_lanes(cg, cg_expr(cg, e->u.select.then_value), e->lanes);
        LLVMValueRef b = to_lanes(cg, cg_expr(cg, e->u.select.else_value), e->lanes);
        return LLVMBuildSelect(cg->builder, c, a, b, "");
    }
    case EXPR_CAST: {
        LLVMValueRef v = cg_expr(cg, e->u.cast.value);
        DType from = e->u.cast.value->dtype;
        if (e->u.cast.kind == CAST_CONVERT)
            return cg_convert(cg, v, from, e->dtype, value_lanes(v), e->loc);
        if (ir_dtype_bits(from) != ir_dtype_bits(e->dtype))
            ice("bitcast between %s and %s", ir_dtype_name(from),
                ir_dtype_name(e->dtype));
        return LLVMBuildBitCast(cg->builder, v,
                                cg_type(cg, e->dtype, value_lanes(v)), "");
    }
    case EXPR_CALL: return cg_call(cg, e);
    case EXPR_RAMP: return emit_ramp(cg, e);
    case EXPR_BROADCAST:
        return cg_splat(cg, cg_expr(cg, e->u.broadcast.value), e->lanes);
    case EXPR_COUNT: break;
    }
    ice("bad expression kind %d", (int)e->kind);
}

/* ---- addresses --------------------------------------------------------- */

typedef struct Access {
    const Buffer *buffer;
    Expr *const *indices;
    const Expr *predicate;
    int lanes;
    int align_bytes;
    Loc loc;
} Access;

static int element_bytes(DType t) { return (ir_dtype_bits(t) + 7) / 8; }

/* The i32 element offset of a tensor element: sum of index * stride.  A
 * stride the IR leaves NULL is the contiguous one. */
static LLVMValueRef global_offset(Codegen *cg, const Buffer *b,
                                  LLVMValueRef *index) {
    LLVMBuilderRef bld = cg->builder;
    LLVMValueRef offset = NULL, contiguous = NULL;
    for (int d = b->rank - 1; d >= 0; d--) {
        LLVMValueRef stride;
        if (b->strides[d]) stride = cg_expr(cg, b->strides[d]);
        else stride = contiguous ? contiguous : cg_i32(cg, 1);
        LLVMValueRef term = LLVMBuildMul(bld, index[d], stride, "");
        offset = offset ? LLVMBuildAdd(bld, offset, term, "") : term;
        LLVMValueRef extent = cg_expr(cg, b->shape[d]);
        contiguous = LLVMBuildMul(bld, contiguous ? contiguous : cg_i32(cg, 1),
                                  extent, "");
    }
    return offset ? offset : cg_i32(cg, 0);
}

static int64_t constant_extent(const Buffer *b, int d) {
    const Expr *e = b->shape[d];
    if (!e || e->kind != EXPR_INT) ice("buffer %s: dimension %d not constant",
                                       b->name, d);
    return e->u.int_value;
}

/* Byte offset of a shared element in the block's shared array: ir.h's
 * row/pitch formula (the linear offset), then, when `swizzled`, the XOR
 * swizzle of the 16-byte chunk within its 128-byte line, plus the
 * buffer's planned shared_offset.  The async units want the linear
 * (unswizzled) form of a tile's origin: TMA and wgmma apply the swizzle
 * themselves from the address bits. */
LLVMValueRef cg_shared_offset(Codegen *cg, const Buffer *b, LLVMValueRef *index,
                              bool swizzled) {
    LLVMBuilderRef bld = cg->builder;
    LLVMValueRef row = cg_i32(cg, 0);
    for (int d = 0; d + 1 < b->rank; d++)
        row = LLVMBuildAdd(bld, LLVMBuildMul(bld, row, cg_i32(cg, constant_extent(b, d)), ""),
                           index[d], "");
    int64_t pitch = b->pitch > 0 ? b->pitch : constant_extent(b, b->rank - 1);
    LLVMValueRef element =
        b->rank > 1 ? LLVMBuildAdd(bld, LLVMBuildMul(bld, row, cg_i32(cg, pitch), ""),
                                   index[b->rank - 1], "")
                    : index[0];
    LLVMValueRef off =
        LLVMBuildMul(bld, element, cg_i32(cg, element_bytes(b->dtype)), "");
    if (swizzled && b->swizzle_shift >= 0) {
        LLVMValueRef bits = LLVMBuildLShr(bld, off, cg_i32(cg, 7 + b->swizzle_shift), "");
        bits = LLVMBuildShl(bld, LLVMBuildAnd(bld, bits, cg_i32(cg, 7), ""),
                            cg_i32(cg, 4), "");
        off = LLVMBuildXor(bld, off, bits, "");
    }
    if (b->shared_offset < 0)
        ice("shared buffer %s has no planned offset", b->name);
    return LLVMBuildAdd(bld, off, cg_i32(cg, b->shared_offset), "");
}

LLVMValueRef cg_shared_pointer(Codegen *cg, LLVMValueRef offset) {
    return LLVMBuildGEP2(cg->builder, LLVMInt8TypeInContext(cg->context), cg->shared,
                         &offset, 1, "");
}

/* Shared element address (physical: swizzled). */
static LLVMValueRef shared_address(Codegen *cg, const Buffer *b,
                                   LLVMValueRef *index) {
    return cg_shared_pointer(cg, cg_shared_offset(cg, b, index, true));
}

/* Address of the element at scalar indices index[0..rank). */
static LLVMValueRef element_address(Codegen *cg, const Buffer *b,
                                    LLVMValueRef *index) {
    LLVMBuilderRef bld = cg->builder;
    LLVMTypeRef element = cg_memory_type(cg, b->dtype);
    switch (b->scope) {
    case SCOPE_GLOBAL: {
        CodegenBuffer *storage = cg_buffer(cg, b);
        LLVMValueRef offset = LLVMBuildSExt(bld, global_offset(cg, b, index),
                                            LLVMInt64TypeInContext(cg->context), "");
        return LLVMBuildGEP2(bld, element, storage->base, &offset, 1, "");
    }
    case SCOPE_SHARED:
        return shared_address(cg, b, index);
    case SCOPE_LOCAL: case SCOPE_FRAGMENT: {
        CodegenBuffer *storage = cg_buffer(cg, b);
        LLVMValueRef flat = cg_i32(cg, 0);
        for (int d = 0; d < b->rank; d++)
            flat = LLVMBuildAdd(bld, LLVMBuildMul(bld, flat,
                                                  cg_i32(cg, constant_extent(b, d)), ""),
                                index[d], "");
        LLVMValueRef idx[2] = {cg_i32(cg, 0), flat};
        return LLVMBuildInBoundsGEP2(bld, storage->array_type, storage->base, idx, 2, "");
    }
    }
    ice("bad scope");
}

/* Index values of an access: lanes-wide vectors or scalars. */
static void access_indices(Codegen *cg, const Access *a, LLVMValueRef *out) {
    for (int d = 0; d < a->buffer->rank; d++) {
        LLVMValueRef v = cg_expr(cg, a->indices[d]);
        /* indices are i32 (symbols are i32); widen or narrow others */
        DType t = a->indices[d]->dtype;
        if (t != DT_I32)
            v = cg_convert(cg, v, t, DT_I32, value_lanes(v), a->loc);
        out[d] = v;
    }
}

void cg_region_start(Codegen *cg, const Region *r, LLVMValueRef *out) {
    for (int d = 0; d < r->buffer->rank; d++) {
        const Expr *e = r->start[d];
        if (!e) {
            out[d] = cg_i32(cg, 0);
            continue;
        }
        if (e->lanes != 1) ice("vector region start on %s", r->buffer->name);
        LLVMValueRef v = cg_expr(cg, e);
        out[d] = e->dtype == DT_I32 ? v : cg_convert(cg, v, e->dtype, DT_I32, 1, e->loc);
    }
}

static bool is_lane_invariant(const Expr *e) {
    return e->lanes == 1 || e->kind == EXPR_BROADCAST;
}

/* Contiguous vector form: every index but the last is lane-invariant and
 * the last is a unit-stride ramp.  Fills scalar indices of lane 0. */
static bool contiguous_indices(Codegen *cg, const Access *a, LLVMValueRef *out) {
    int last = a->buffer->rank - 1;
    const Expr *tail = a->indices[last];
    if (a->lanes <= 1 || tail->kind != EXPR_RAMP || tail->u.ramp.stride != 1)
        return false;
    /* a unit ramp of indices is contiguous in memory only along a
     * unit-stride dimension (a tensor's last stride may be a run-time
     * symbol, as in cast_back's scales: then the access is a gather) */
    const Expr *stride = a->buffer->strides[last];
    if (a->buffer->scope == SCOPE_GLOBAL && stride &&
        !(stride->kind == EXPR_INT && stride->u.int_value == 1))
        return false;
    for (int d = 0; d < last; d++)
        if (!is_lane_invariant(a->indices[d])) return false;
    for (int d = 0; d <= last; d++) {
        const Expr *e = a->indices[d];
        if (d == last) e = e->u.ramp.base;
        else if (e->kind == EXPR_BROADCAST) e = e->u.broadcast.value;
        LLVMValueRef v = cg_expr(cg, e);
        if (e->dtype != DT_I32) v = cg_convert(cg, v, e->dtype, DT_I32, 1, a->loc);
        out[d] = v;
    }
    return true;
}

static bool check_dtype(Codegen *cg, const Access *a) {
    if (a->buffer->dtype == DT_E2M1) {
        cg_error(cg, a->loc, "e2m1 loads/stores are not supported yet");
        return false;
    }
    if (a->buffer->rank < 1 || a->buffer->rank > IR_MAX_RANK)
        ice("buffer %s has rank %d", a->buffer->name, a->buffer->rank);
    return true;
}

static unsigned access_alignment(const Access *a) {
    int natural = element_bytes(a->buffer->dtype);
    return (unsigned)(a->align_bytes > natural ? a->align_bytes : natural);
}

/* A contiguous access to a swizzled shared buffer is contiguous in memory
 * only within one 16-byte chunk: the XOR swizzle moves each chunk of a
 * row on its own (ir_shared_swizzle).  Wider accesses, e.g. 16 bf16 read
 * by one thread, are split into pieces of at most 16 bytes and at most
 * the proven alignment (so that no piece straddles a chunk), each
 * addressed through the swizzle; the result is the lanes of a piece per
 * piece (plan_shared costs such accesses as these pieces already).
 * Returns the lanes of one piece, or a->lanes when no split is needed. */
static int swizzled_piece_lanes(const Access *a) {
    const Buffer *b = a->buffer;
    if (b->scope != SCOPE_SHARED || b->swizzle_shift < 0) return a->lanes;
    int bytes = element_bytes(b->dtype);
    int piece_bytes = (int)access_alignment(a);
    if (piece_bytes > 16) piece_bytes = 16;
    int piece = piece_bytes / bytes;
    if (piece < 1) piece = 1;
    while (piece > 1 && a->lanes % piece != 0) piece /= 2;
    return piece < a->lanes ? piece : a->lanes;
}

/* Scalar indices of the lane `first` of a contiguous access whose lane-0
 * indices are `index`: the last index advances by `first`. */
static void piece_indices(Codegen *cg, const Access *a, LLVMValueRef *index, int first,
                          LLVMValueRef *out) {
    int last = a->buffer->rank - 1;
    for (int d = 0; d < last; d++) out[d] = index[d];
    out[last] = first ? LLVMBuildAdd(cg->builder, index[last], cg_i32(cg, first), "")
                      : index[last];
}

/* ---- loads ------------------------------------------------------------- */

/* Emits `produce` under the condition `cond`, yielding zero otherwise. */
typedef LLVMValueRef (*Producer)(Codegen *cg, void *state);

static LLVMValueRef guarded(Codegen *cg, LLVMValueRef cond, LLVMTypeRef type,
                            Producer produce, void *state) {
    if (!cond) return produce(cg, state);
    LLVMBasicBlockRef before = LLVMGetInsertBlock(cg->builder);
    LLVMBasicBlockRef then_block = cg_new_block(cg, "masked");
    LLVMBasicBlockRef done = cg_new_block(cg, "masked.end");
    LLVMBuildCondBr(cg->builder, cond, then_block, done);
    LLVMPositionBuilderAtEnd(cg->builder, then_block);
    LLVMValueRef value = produce(cg, state);
    LLVMBasicBlockRef then_end = LLVMGetInsertBlock(cg->builder);
    LLVMBuildBr(cg->builder, done);
    LLVMPositionBuilderAtEnd(cg->builder, done);
    if (!type) return NULL;
    LLVMValueRef phi = LLVMBuildPhi(cg->builder, type, "");
    LLVMValueRef incoming[2] = {value, LLVMConstNull(type)};
    LLVMBasicBlockRef from[2] = {then_end, before};
    LLVMAddIncoming(phi, incoming, from, 2);
    return phi;
}

typedef struct LoadState {
    const Access *access;
    LLVMValueRef *index; /* per dim: scalar or lanes-wide */
    int lane;            /* -1: the whole contiguous vector */
} LoadState;

static LLVMValueRef produce_load(Codegen *cg, void *opaque) {
    LoadState *st = opaque;
    const Access *a = st->access;
    LLVMTypeRef element = cg_memory_type(cg, a->buffer->dtype);
    int piece = st->lane < 0 ? swizzled_piece_lanes(a) : a->lanes;
    if (piece < a->lanes) {
        /* one load per swizzle chunk, each at its own swizzled address */
        LLVMValueRef result = LLVMGetPoison(LLVMVectorType(element, (unsigned)a->lanes));
        for (int first = 0; first < a->lanes; first += piece) {
            LLVMValueRef index[IR_MAX_RANK];
            piece_indices(cg, a, st->index, first, index);
            LLVMValueRef address = element_address(cg, a->buffer, index);
            LLVMTypeRef type = piece > 1 ? LLVMVectorType(element, (unsigned)piece) : element;
            LLVMValueRef v = LLVMBuildLoad2(cg->builder, type, address, "");
            LLVMSetAlignment(v, (unsigned)(piece * element_bytes(a->buffer->dtype)));
            for (int lane = 0; lane < piece; lane++)
                result = LLVMBuildInsertElement(cg->builder, result, lane_of(cg, v, lane),
                                                cg_i32(cg, first + lane), "");
        }
        return result;
    }
    LLVMValueRef scalar_index[IR_MAX_RANK];
    for (int d = 0; d < a->buffer->rank; d++)
        scalar_index[d] = st->lane < 0 ? st->index[d] : lane_of(cg, st->index[d], st->lane);
    LLVMValueRef address = element_address(cg, a->buffer, scalar_index);
    LLVMTypeRef type = st->lane < 0 ? LLVMVectorType(element, (unsigned)a->lanes) : element;
    unsigned alignment = st->lane < 0 ? access_alignment(a)
                                      : (unsigned)element_bytes(a->buffer->dtype);
    LLVMValueRef v = cg_cached_load(cg, a->buffer, type, address, alignment);
    if (v) return v;
    v = LLVMBuildLoad2(cg->builder, type, address, "");
    LLVMSetAlignment(v, alignment);
    return v;
}

typedef struct GatherState {
    const Access *access;
    LLVMValueRef *index;
    LLVMValueRef lane_pred; /* lanes-wide predicate, or NULL */
    LLVMTypeRef vector_type;
} GatherState;

/* One scalar load per lane, each under its own predicate lane if any. */
static LLVMValueRef produce_gather(Codegen *cg, void *opaque) {
    GatherState *g = opaque;
    LLVMTypeRef element = cg_memory_type(cg, g->access->buffer->dtype);
    LLVMValueRef result = LLVMGetPoison(g->vector_type);
    for (int lane = 0; lane < g->access->lanes; lane++) {
        LoadState st = {g->access, g->index, lane};
        LLVMValueRef v = guarded(cg, g->lane_pred ? lane_of(cg, g->lane_pred, lane) : NULL,
                                 element, produce_load, &st);
        result = LLVMBuildInsertElement(cg->builder, result, v, cg_i32(cg, lane), "");
    }
    return result;
}

LLVMValueRef cg_load(Codegen *cg, const Expr *e) {
    Access a = {e->u.load.buffer, e->u.load.indices, e->u.load.predicate,
                e->lanes, e->u.load.align_bytes, e->loc};
    LLVMTypeRef element = cg_memory_type(cg, a.buffer->dtype);
    LLVMTypeRef vector_type = a.lanes > 1 ? LLVMVectorType(element, (unsigned)a.lanes)
                                          : element;
    if (!check_dtype(cg, &a)) return LLVMConstNull(cg_type(cg, e->dtype, e->lanes));

    LLVMValueRef pred = a.predicate ? cg_expr(cg, a.predicate) : NULL;
    bool uniform_pred = !pred || is_lane_invariant(a.predicate);
    if (pred && uniform_pred) pred = lane_of(cg, pred, 0);

    LLVMValueRef index[IR_MAX_RANK];
    LLVMValueRef result;
    if (a.lanes <= 1 || (uniform_pred && contiguous_indices(cg, &a, index))) {
        if (a.lanes <= 1) access_indices(cg, &a, index);
        LoadState st = {&a, index, a.lanes > 1 ? -1 : 0};
        result = guarded(cg, pred, vector_type, produce_load, &st);
    } else {
        /* gather, or a contiguous access with a per-lane predicate */
        access_indices(cg, &a, index);
        GatherState g = {&a, index, uniform_pred ? NULL : pred, vector_type};
        result = guarded(cg, uniform_pred ? pred : NULL, vector_type,
                         produce_gather, &g);
    }
    return cg_from_memory(cg, result, a.buffer->dtype);
}

/* ---- stores ------------------------------------------------------------ */

typedef struct StoreState {
    const Access *access;
    LLVMValueRef *index;
    LLVMValueRef value;  /* memory form, lanes wide or scalar */
    int lane;            /* -1: the whole contiguous vector */
} StoreState;

static LLVMValueRef produce_store(Codegen *cg, void *opaque) {
    StoreState *st = opaque;
    const Access *a = st->access;
    int piece = st->lane < 0 ? swizzled_piece_lanes(a) : a->lanes;
    if (piece < a->lanes) {
        /* one store per swizzle chunk, each at its own swizzled address */
        LLVMTypeRef i32 = LLVMInt32TypeInContext(cg->context);
        for (int first = 0; first < a->lanes; first += piece) {
            LLVMValueRef index[IR_MAX_RANK];
            piece_indices(cg, a, st->index, first, index);
            LLVMValueRef v;
            if (piece > 1) {
                LLVMValueRef mask[16];
                for (int lane = 0; lane < piece; lane++)
                    mask[lane] = LLVMConstInt(i32, (unsigned long long)(first + lane), 0);
                v = LLVMBuildShuffleVector(cg->builder, st->value,
                                           LLVMGetPoison(LLVMTypeOf(st->value)),
                                           LLVMConstVector(mask, (unsigned)piece), "");
            } else {
                v = lane_of(cg, st->value, first);
            }
            LLVMValueRef store = LLVMBuildStore(cg->builder, v,
                                                element_address(cg, a->buffer, index));
            LLVMSetAlignment(store, (unsigned)(piece * element_bytes(a->buffer->dtype)));
        }
        return NULL;
    }
    LLVMValueRef scalar_index[IR_MAX_RANK];
    for (int d = 0; d < a->buffer->rank; d++)
        scalar_index[d] = st->lane < 0 ? st->index[d] : lane_of(cg, st->index[d], st->lane);
    LLVMValueRef address = element_address(cg, a->buffer, scalar_index);
    LLVMValueRef v = st->lane < 0 ? st->value : lane_of(cg, st->value, st->lane);
    unsigned alignment = st->lane < 0 ? access_alignment(a)
                                      : (unsigned)element_bytes(a->buffer->dtype);
    if (cg_cached_store(cg, a->buffer, v, address, alignment)) return NULL;
    LLVMValueRef store = LLVMBuildStore(cg->builder, v, address);
    LLVMSetAlignment(store, alignment);
    return NULL;
}

typedef struct ScatterState {
    const Access *access;
    LLVMValueRef *index;
    LLVMValueRef value;
    LLVMValueRef lane_pred; /* lanes-wide predicate, or NULL */
} ScatterState;

static LLVMValueRef produce_scatter(Codegen *cg, void *opaque) {
    ScatterState *sc = opaque;
    for (int lane = 0; lane < sc->access->lanes; lane++) {
        StoreState st = {sc->access, sc->index, sc->value, lane};
        guarded(cg, sc->lane_pred ? lane_of(cg, sc->lane_pred, lane) : NULL, NULL,
                produce_store, &st);
    }
    return NULL;
}

void cg_store(Codegen *cg, const Stmt *s) {
    int lanes = s->u.store.value->lanes;
    Access a = {s->u.store.buffer, s->u.store.indices, s->u.store.predicate,
                lanes, s->u.store.align_bytes, s->loc};
    if (!check_dtype(cg, &a)) return;
    LLVMValueRef value = cg_expr(cg, s->u.store.value);
    if (value_lanes(value) != lanes) value = to_lanes(cg, value, lanes);
    value = cg_to_memory(cg, value, a.buffer->dtype);

    LLVMValueRef pred = a.predicate ? cg_expr(cg, a.predicate) : NULL;
    bool uniform_pred = !pred || is_lane_invariant(a.predicate);
    if (pred && uniform_pred) pred = lane_of(cg, pred, 0);

    LLVMValueRef index[IR_MAX_RANK];
    if (lanes <= 1 || (uniform_pred && contiguous_indices(cg, &a, index))) {
        if (lanes <= 1) access_indices(cg, &a, index);
        StoreState st = {&a, index, value, lanes > 1 ? -1 : 0};
        guarded(cg, pred, NULL, produce_store, &st);
        return;
    }
    access_indices(cg, &a, index);
    ScatterState sc = {&a, index, value, uniform_pred ? NULL : pred};
    guarded(cg, uniform_pred ? pred : NULL, NULL, produce_scatter, &sc);
}

void cg_atomic(Codegen *cg, const Stmt *s) {
    const Buffer *b = s->u.atomic.buffer;
    Access a = {b, s->u.atomic.indices, NULL, 1, 0, s->loc};
    if (!check_dtype(cg, &a)) return;
    if (s->u.atomic.value->lanes > 1) ice("vector atomic in %s", cg->kernel->name);
    LLVMValueRef index[IR_MAX_RANK];
    access_indices(cg, &a, index);
    LLVMValueRef address = element_address(cg, b, index);
    LLVMValueRef value = cg_expr(cg, s->u.atomic.value);
    bool f = is_float(b->dtype), sgn = is_signed(b->dtype);
    if (ir_dtype_class(b->dtype) == DCLASS_FLOAT8 || b->dtype == DT_BOOL) {
        cg_error(cg, s->loc, "atomics on %s are not supported", ir_dtype_name(b->dtype));
        return;
    }
    LLVMAtomicRMWBinOp op = LLVMAtomicRMWBinOpAdd;
    switch (s->u.atomic.op) {
    case ATOMIC_ADD: op = f ? LLVMAtomicRMWBinOpFAdd : LLVMAtomicRMWBinOpAdd; break;
    case ATOMIC_MAX:
        op = f ? LLVMAtomicRMWBinOpFMax : sgn ? LLVMAtomicRMWBinOpMax : LLVMAtomicRMWBinOpUMax;
        break;
    case ATOMIC_MIN:
        op = f ? LLVMAtomicRMWBinOpFMin : sgn ? LLVMAtomicRMWBinOpMin : LLVMAtomicRMWBinOpUMin;
        break;
    case ATOMIC_COUNT: ice("bad atomic");
    }
    /* CUDA's atomicAdd/atomicMax are relaxed (monotonic) device-scope ops */
    LLVMBuildAtomicRMW(cg->builder, op, address, value, LLVMAtomicOrderingMonotonic, 0);
}
