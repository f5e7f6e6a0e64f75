/*
 * lower_call.c -- conversions and calls: `T(x)` conversions, bitcasts,
 * builtin functions and the inlining of fn calls.
 *
 * A call `name(args)` is, in order: a conversion when name is a dtype (or
 * a template dtype parameter), an inlined fn when a fn of that name is
 * visible, else a builtin (math intrinsics on f32, abs, min, max,
 * ceildiv, popcount, shfl_xor, shfl_idx).  Conversions and bitcasts of
 * compile-time constants fold like the operators in lower_expr.c.  An
 * inlined fn is lowered in a fresh scope that sees only its parameters
 * (bound to the already-lowered arguments, copied at each use) and the
 * globals of the file that declares it; LOWER_MAX_INLINE_DEPTH bounds the
 * nesting.  The operators and constant folding this file builds on live in
 * lower_expr.c and are shared through lower.h.
 */
#include <math.h>
#include <string.h>

#include "lower.h"

#define LOWER_MAX_INLINE_DEPTH 64

/* ---- conversions -------------------------------------------------------- */

static Value convert(Lower *lower, Value v, DType to, Loc loc) {
    Expr *e = v.expr;
    if (!e) return NONE;
    DType from = e->dtype;
    if (to == DT_BOOL && from != DT_BOOL) {
        lower_error(lower, loc, "cannot convert %s to bool; compare with 0 "
                    "instead", ir_dtype_name(from));
        return NONE;
    }
    if (from == to) return typed(e);
    if (e->kind == EXPR_INT && is_integer(to))
        return lower_int_constant(lower, to, wrap(to, e->u.int_value), loc, false);
    if (e->kind == EXPR_INT && is_arith_float(to)) {
        double d = is_unsigned(from) && !v.literal ? (double)(uint64_t)e->u.int_value
                                                    : (double)e->u.int_value;
        return lower_float_constant(lower, to, d, loc, false);
    }
    if (e->kind == EXPR_FLOAT && is_arith_float(to))
        return lower_float_constant(lower, to, e->u.float_value, loc, false);
    if (e->kind == EXPR_FLOAT && is_integer(to)) {
        double t = trunc(e->u.float_value);
        if (t >= -9.2e18 && t <= 9.2e18 && fits(to, (int64_t)t))
            return lower_int_constant(lower, to, (int64_t)t, loc, false);
    }
    v = lower_materialize(lower, v, loc);
    if (!v.expr) return NONE;
    if (v.expr->dtype == to) return v;
    return typed(lower_at(ir_cast(lower->kernel, CAST_CONVERT, to, v.expr), loc));
}

Value lower_bitcast(Lower *lower, const AstNode *node) {
    DType to;
    if (!lower_resolve_type(lower, node->type, &to)) return NONE;
    Value v = lower_materialize(lower, lower_expr(lower, node->a), node->loc);
    if (!v.expr) return NONE;
    DType from = v.expr->dtype;
    if (from == DT_BOOL || to == DT_BOOL) {
        lower_error(lower, node->loc, "bitcast cannot take or give a bool");
        return NONE;
    }
    if (ir_dtype_bits(from) != ir_dtype_bits(to)) {
        lower_error(lower, node->loc, "bitcast from %s (%d bits) to %s (%d "
                    "bits) needs equal widths", ir_dtype_name(from),
                    ir_dtype_bits(from), ir_dtype_name(to), ir_dtype_bits(to));
        return NONE;
    }
    if (from == to) return v;
    Expr *e = v.expr;
    if (e->kind == EXPR_INT && is_integer(to))
        return lower_int_constant(lower, to, wrap(to, e->u.int_value), node->loc, false);
    if (e->kind == EXPR_INT && to == DT_F32) {
        uint32_t bits = (uint32_t)e->u.int_value;
        float f;
        memcpy(&f, &bits, sizeof f);
        return lower_float_constant(lower, to, f, node->loc, false);
    }
    if (e->kind == EXPR_FLOAT && from == DT_F32 && is_integer(to)) {
        float f = (float)e->u.float_value;
        uint32_t bits;
        memcpy(&bits, &f, sizeof bits);
        return lower_int_constant(lower, to, wrap(to, bits), node->loc, false);
    }
    return typed(lower_at(ir_cast(lower->kernel, CAST_BITCAST, to, e), node->loc));
}

/* ---- calls -------------------------------------------------------------- */

static bool arg_count(Lower *lower, const AstNode *node, int expected) {
    int count = ast_count(node->list);
    if (count == expected) return true;
    lower_error(lower, node->loc, "'%s' takes %d argument%s, got %d",
                node->name, expected, expected == 1 ? "" : "s", count);
    return false;
}

/* An f32 argument of a math builtin (storage floats widen, literals
 * adapt). */
static Expr *f32_arg(Lower *lower, const AstNode *call, int i) {
    const AstNode *node = ast_at(call->list, i);
    Value v = lower_promote(lower, lower_expr(lower, node));
    v = lower_adapt(lower, v, DT_F32, node->loc);
    if (!v.expr) return NULL;
    if (v.expr->dtype != DT_F32) {
        lower_error(lower, node->loc, "'%s' needs an f32 argument, got %s",
                    call->name, ir_dtype_name(v.expr->dtype));
        return NULL;
    }
    return v.expr;
}

static Value inline_fn(Lower *lower, Decl *fn, const AstNode *call);

/* A u32 argument of a 32-bit register builtin (bf16x2_*, prmt): packed
 * bits, so no float converts implicitly (literals adapt). */
static Expr *u32_arg(Lower *lower, const AstNode *call, int i) {
    const AstNode *node = ast_at(call->list, i);
    Value v = lower_adapt(lower, lower_promote(lower, lower_expr(lower, node)), DT_U32,
                          node->loc);
    if (!v.expr) return NULL;
    if (v.expr->dtype != DT_U32) {
        lower_error(lower, node->loc, "'%s' needs a u32 argument, got %s",
                    call->name, ir_dtype_name(v.expr->dtype));
        return NULL;
    }
    return v.expr;
}

static Value builtin_call(Lower *lower, const AstNode *node, bool *found) {
    static const struct { const char *name; Intrinsic op; int nargs; DType result; }
    math[] = {
        {"exp", INTR_EXP, 1, DT_F32},         {"exp2", INTR_EXP2, 1, DT_F32},
        {"rsqrt", INTR_RSQRT, 1, DT_F32},     {"sqrt", INTR_SQRT, 1, DT_F32},
        {"sigmoid", INTR_SIGMOID, 1, DT_F32}, {"fma", INTR_FMA, 3, DT_F32},
        {"isfinite", INTR_ISFINITE, 1, DT_BOOL},
        {"log1p", INTR_LOG1P, 1, DT_F32},
        {"one_plus_exp", INTR_ONE_PLUS_EXP, 1, DT_F32},
        {"rcp_approx", INTR_RCP_APPROX, 1, DT_F32},
        {"f16_rz_bits", INTR_F16_RZ_BITS, 1, DT_U16},
        {"e2m1_bits", INTR_E2M1_BITS, 1, DT_U8},
    };
    static const struct { const char *name; Intrinsic op; int nargs; }
    b32[] = {
        {"bf16x2_mul", INTR_BF16X2_MUL, 2}, {"bf16x2_fma", INTR_BF16X2_FMA, 3},
        {"bf16x2_min", INTR_BF16X2_MIN, 2}, {"bf16x2_max", INTR_BF16X2_MAX, 2},
        {"bf16x2_max_xorsign_abs", INTR_BF16X2_MAX_XORSIGN_ABS, 2},
        {"prmt", INTR_PRMT, 3},
        {"f16x2_mul", INTR_F16X2_MUL, 2}, {"f16x2_fma", INTR_F16X2_FMA, 3},
        {"f16x2_min", INTR_F16X2_MIN, 2}, {"f16x2_max", INTR_F16X2_MAX, 2},
        {"f16x2_max_nan", INTR_F16X2_MAX_NAN, 2},
        {"f16x2_low2", INTR_F16X2_LOW2, 1}, {"f16x2_high2", INTR_F16X2_HIGH2, 1},
        {"f16x2_max_xorsign_abs", INTR_F16X2_MAX_XORSIGN_ABS, 2},
        {"f16x2_abs", INTR_F16X2_ABS, 1},
        {"e4m3x2_f16x2", INTR_E4M3X2_F16X2, 1},
        {"e4m3x2_f16x2_high", INTR_E4M3X2_F16X2_HIGH, 1},
    };
    const char *name = node->name;
    Kernel *k = lower->kernel;
    *found = true;
    for (size_t i = 0; i < sizeof b32 / sizeof b32[0]; i++) {
        if (strcmp(b32[i].name, name) != 0) continue;
        if (!arg_count(lower, node, b32[i].nargs)) return NONE;
        Expr *args[3];
        bool ok = true;
        for (int j = 0; j < b32[i].nargs; j++)
            if (!(args[j] = u32_arg(lower, node, j))) ok = false;
        if (!ok) return NONE;
        return typed(lower_at(ir_call(k, b32[i].op, DT_U32, args, b32[i].nargs),
                              node->loc));
    }
    for (size_t i = 0; i < sizeof math / sizeof math[0]; i++) {
        if (strcmp(math[i].name, name) != 0) continue;
        if (!arg_count(lower, node, math[i].nargs)) return NONE;
        Expr *args[3];
        bool ok = true;
        for (int j = 0; j < math[i].nargs; j++)
            if (!(args[j] = f32_arg(lower, node, j))) ok = false;
        if (!ok) return NONE;
        return typed(lower_at(ir_call(k, math[i].op, math[i].result, args,
                                      math[i].nargs), node->loc));
    }
    if (strcmp(name, "bf16x2") == 0) {
        /* two bf16 values (storage reads, not widened) -> their word */
        if (!arg_count(lower, node, 2)) return NONE;
        Expr *args[2];
        for (int j = 0; j < 2; j++) {
            const AstNode *arg = ast_at(node->list, j);
            Value v = lower_materialize(lower, lower_expr(lower, arg), arg->loc);
            if (!v.expr) return NONE;
            if (v.expr->dtype != DT_BF16) {
                lower_error(lower, arg->loc, "'bf16x2' needs bf16 arguments, got %s",
                            ir_dtype_name(v.expr->dtype));
                return NONE;
            }
            args[j] = v.expr;
        }
        return typed(lower_at(ir_call(k, INTR_BF16X2, DT_U32, args, 2), node->loc));
    }
    if (strcmp(name, "abs") == 0) {
        if (!arg_count(lower, node, 1)) return NONE;
        return lower_unary_op(lower, UN_ABS, lower_expr(lower, ast_at(node->list, 0)),
                     node->loc);
    }
    if (strcmp(name, "min") == 0 || strcmp(name, "max") == 0 ||
        strcmp(name, "ceildiv") == 0) {
        if (!arg_count(lower, node, 2)) return NONE;
        Value a = lower_expr(lower, ast_at(node->list, 0));
        Value b = lower_expr(lower, ast_at(node->list, 1));
        if (name[0] == 'm')
            return lower_binary_op(lower, name[1] == 'i' ? BIN_MIN : BIN_MAX, a, b,
                          node->loc);
        if (!a.expr || !b.expr) return NONE;
        if (!lower_unify(lower, &a, &b, false, "ceildiv", node->loc)) return NONE;
        if (!is_integer(a.expr->dtype)) {
            lower_error(lower, node->loc, "'ceildiv' needs integer operands, "
                        "got %s", ir_dtype_name(a.expr->dtype));
            return NONE;
        }
        /* (a + b - 1) / b, with '/' the floor division */
        Value b2 = lower_copy_value(lower, b, node->loc, false);
        Value one = lower_int_constant(lower, DT_I32, 1, node->loc, true);
        Value sum = lower_binary_op(lower, BIN_ADD, a, b, node->loc);
        return lower_binary_op(lower, BIN_DIV, lower_binary_op(lower, BIN_SUB, sum, one, node->loc),
                      b2, node->loc);
    }
    if (strcmp(name, "popcount") == 0) {
        if (!arg_count(lower, node, 1)) return NONE;
        const AstNode *arg = ast_at(node->list, 0);
        Value v = lower_materialize(lower, lower_expr(lower, arg), arg->loc);
        if (!v.expr) return NONE;
        if (!is_integer(v.expr->dtype) || ir_dtype_bits(v.expr->dtype) < 32) {
            lower_error(lower, arg->loc, "'popcount' needs a 32- or 64-bit "
                        "integer, got %s", ir_dtype_name(v.expr->dtype));
            return NONE;
        }
        return typed(lower_at(ir_call(k, INTR_POPCOUNT, DT_I32, &v.expr, 1),
                              node->loc));
    }
    if (strcmp(name, "shfl_xor") == 0 || strcmp(name, "shfl_idx") == 0) {
        if (!arg_count(lower, node, 2)) return NONE;
        const AstNode *arg0 = ast_at(node->list, 0);
        Value v = lower_promote(lower, lower_expr(lower, arg0));
        v = lower_materialize(lower, v, arg0->loc);
        Value lane = lower_int_index(lower, ast_at(node->list, 1));
        if (!v.expr || !lane.expr) return NONE;
        DType t = v.expr->dtype;
        if (t != DT_I32 && t != DT_U32 && t != DT_F32) {
            lower_error(lower, arg0->loc, "'%s' moves i32, u32 or f32 values, "
                        "got %s", name, ir_dtype_name(t));
            return NONE;
        }
        Expr *args[2] = {v.expr, lane.expr};
        return typed(lower_at(ir_call(k, name[5] == 'x' ? INTR_SHFL_XOR
                                                         : INTR_SHFL_IDX,
                                      t, args, 2), node->loc));
    }
    *found = false;
    return NONE;
}

Value lower_call(Lower *lower, const AstNode *node) {
    const char *name = node->name;
    Binding *binding = lower_find(lower, name);
    DType dtype;
    if (binding && binding->kind != BIND_DTYPE) {
        lower_error(lower, node->loc, "'%s' is not a function", name);
        return NONE;
    }
    if (lower_is_type_name(lower, name, &dtype)) {
        if (!arg_count(lower, node, 1)) return NONE;
        return convert(lower, lower_expr(lower, ast_at(node->list, 0)), dtype,
                       node->loc);
    }
    Decl *decl = program_lookup(lower->file, name);
    if (decl && decl->kind == DECL_FN) return inline_fn(lower, decl, node);
    if (decl) {
        lower_error(lower, node->loc, "'%s' is a %s and cannot be called", name,
                    decl->kind == DECL_CONST ? "constant" : "kernel");
        return NONE;
    }
    bool found;
    Value result = builtin_call(lower, node, &found);
    if (!found) lower_error(lower, node->loc, "unknown function '%s'", name);
    return result;
}

/* Lowers a fn's lets and return value in a fresh scope whose only names
 * are the fn's parameters (bound by the caller) and its file's globals. */
Value lower_fn_body(Lower *lower, Decl *fn) {
    const AstNode *node = fn->node;
    for (int i = 0; i < ast_count(node->list2); i++) {
        const AstNode *let = ast_at(node->list2, i);
        if (let->kind != AST_LET) continue;
        Value v = lower_materialize(lower, lower_expr(lower, let->a), let->loc);
        Binding *binding = lower_define(lower, let->name, BIND_EXPR, let->loc);
        binding->value = v;
        if (!v.expr) return NONE;
    }
    DType result_type;
    DType declared = DT_VOID;
    if (!lower_resolve_type(lower, node->type, &declared)) return NONE;
    Value v = lower_adapt(lower, lower_expr(lower, node->a), declared,
                          node->a->loc);
    if (!v.expr) return NONE;
    if (declared == DT_F32) v = lower_promote(lower, v);
    result_type = v.expr->dtype;
    if (result_type != declared) {
        lower_error(lower, node->a->loc, "fn '%s' returns %s but its value "
                    "is %s", fn->name, ir_dtype_name(declared),
                    ir_dtype_name(result_type));
        return NONE;
    }
    return v;
}

static Value inline_fn(Lower *lower, Decl *fn, const AstNode *call_node) {
    if (fn->bad) {
        lower->failed = true;
        return NONE;
    }
    const AstNode *node = fn->node;
    int nparams = ast_count(node->list);
    if (!arg_count(lower, call_node, nparams)) return NONE;
    if (lower->inline_depth >= LOWER_MAX_INLINE_DEPTH) {
        lower_error(lower, call_node->loc, "fn calls nest too deeply");
        return NONE;
    }
    Value args[64];
    if (nparams > 64) {
        lower_error(lower, call_node->loc, "too many arguments");
        return NONE;
    }
    bool ok = true;
    for (int i = 0; i < nparams; i++) {
        const AstNode *param = ast_at(node->list, i);
        const AstNode *arg = ast_at(call_node->list, i);
        DType type;
        if (!ir_dtype_from_name(param->type->name, &type)) return NONE;
        Value v = lower_adapt(lower, lower_expr(lower, arg), type, arg->loc);
        if (type == DT_F32) v = lower_promote(lower, v);
        if (v.expr && v.expr->dtype != type) {
            lower_error(lower, arg->loc, "argument %d of '%s' must be %s, "
                        "got %s", i + 1, fn->name, ir_dtype_name(type),
                        ir_dtype_name(v.expr->dtype));
            v = NONE;
        }
        if (!v.expr) ok = false;
        args[i] = v;
    }
    if (!ok) return NONE;

    NameScope *saved_scope = lower->scope;
    SourceFile *saved_file = lower->file;
    bool saved_symbols = lower->make_symbols;
    lower->scope = NULL;
    lower->file = fn->file;
    lower->make_symbols = false;
    lower->inline_depth++;
    lower_push_scope(lower);
    for (int i = 0; i < nparams; i++) {
        const AstNode *param = ast_at(node->list, i);
        Binding *binding = lower_define(lower, param->name, BIND_EXPR, param->loc);
        binding->value = args[i];
    }
    Value result = lower_fn_body(lower, fn);
    lower->inline_depth--;
    lower->scope = saved_scope;
    lower->file = saved_file;
    lower->make_symbols = saved_symbols;
    if (result.expr) result.expr->loc = call_node->loc;
    return result;
}
