/*
 * lower_expr.c -- expressions: names, typing, operators, constant folding.
 *
 * An AST expression becomes a typed IR Expr (a Value) in the kernel being
 * instantiated.  The rules (docs/language.md, "Types"):
 *
 *  - Literals are untyped until they meet a typed operand: an integer
 *    literal takes the other operand's integer type, a float literal its
 *    float type; alone they default to i32 / f32.  Literal arithmetic is
 *    exact (int64 / double) and range-checked when the literal is typed.
 *  - Otherwise both operands of a binary operator must have the same type;
 *    there are no implicit conversions except that storage-only floats
 *    (f16, bf16, e4m3, e5m2, e2m1) read from buffers are widened to f32
 *    when used in arithmetic or math builtins.
 *  - Template parameters, constants and constant lets are compile-time
 *    values, so folding happens as the tree is built: typed integers wrap
 *    to their width, f32 results round through float, integer '/' and '%'
 *    are floor division and modulo, `c ? a : b` with a constant c is a or b.
 *  - fn calls are inlined: arguments are bound to the parameters and
 *    substituted (copied) at every use.  Calls, conversions and bitcasts
 *    are lowered in lower_call.c.
 *
 * Every error goes through lower_error, which also deduplicates: an error
 * in a fn or a generic kernel is reported once, not once per instance.
 */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "lower.h"

Expr *lower_at(Expr *e, Loc loc) {
    if (e) e->loc = loc;
    return e;
}

/* ---- errors ----------------------------------------------------------- */

void lower_error(Lower *lower, Loc loc, const char *fmt, ...) {
    lower->failed = true;
    char message[1024];
    va_list args;
    va_start(args, fmt);
    vsnprintf(message, sizeof message, fmt, args);
    va_end(args);
    Program *program = lower->program;
    char *key = arena_printf(program->scratch, "%s:%d:%d:%s",
                             loc.file ? loc.file : "", loc.line, loc.col,
                             message);
    for (int i = 0; i < program->reported.count; i++)
        if (strcmp(program->reported.items[i], key) == 0) return;
    vec_push(program->scratch, &program->reported, key);
    diag_error(program->diag, loc, "%s", message);
    if (lower->instance)
        diag_note(program->diag, lower->instance_loc,
                  "in instance '%s' of kernel '%s'", lower->instance,
                  lower->kernel_name);
}

/* The expression as the user wrote it, near enough: fully parenthesised. */
const char *lower_expr_text(Lower *lower, const AstNode *node) {
    char *buffer = NULL;
    size_t size = 0;
    FILE *out = open_memstream(&buffer, &size);
    if (!out) return "?";
    ast_dump_expr(out, node);
    fclose(out);
    const char *text = arena_strdup(lower->program->scratch, buffer);
    free(buffer);
    return text;
}

/* ---- scopes ----------------------------------------------------------- */

void lower_push_scope(Lower *lower) {
    NameScope *scope = arena_alloc(lower->program->scratch, sizeof *scope);
    scope->parent = lower->scope;
    lower->scope = scope;
}

void lower_pop_scope(Lower *lower) {
    if (lower->scope) lower->scope = lower->scope->parent;
}

Binding *lower_define(Lower *lower, const char *name, BindKind kind, Loc loc) {
    Binding *binding = arena_alloc(lower->program->scratch, sizeof *binding);
    binding->name = name;
    binding->kind = kind;
    binding->loc = loc;
    DType dtype;
    if (ir_dtype_from_name(name, &dtype)) {
        lower_error(lower, loc, "'%s' is a type name and cannot be redefined",
                    name);
        return binding;
    }
    NameScope *scope = lower->scope;
    for (int i = 0; i < scope->bindings.count; i++) {
        Binding *other = scope->bindings.items[i];
        if (strcmp(other->name, name) == 0) {
            lower_error(lower, loc, "redefinition of '%s'", name);
            return binding;
        }
    }
    vec_push(lower->program->scratch, &scope->bindings, binding);
    return binding;
}

Binding *lower_find(Lower *lower, const char *name) {
    for (NameScope *scope = lower->scope; scope; scope = scope->parent)
        for (int i = scope->bindings.count - 1; i >= 0; i--) {
            Binding *binding = scope->bindings.items[i];
            if (strcmp(binding->name, name) == 0) return binding;
        }
    return NULL;
}

bool lower_is_type_name(Lower *lower, const char *name, DType *out) {
    if (ir_dtype_from_name(name, out)) return true;
    Binding *binding = lower_find(lower, name);
    if (binding && binding->kind == BIND_DTYPE) {
        *out = binding->dtype;
        return true;
    }
    return false;
}

bool lower_resolve_type(Lower *lower, const AstNode *type, DType *out) {
    if (lower_is_type_name(lower, type->name, out)) return true;
    lower_error(lower, type->loc, "unknown type '%s'", type->name);
    return false;
}

bool lower_is_storage_float(DType t) {
    return t == DT_F16 || t == DT_BF16 || t == DT_E4M3 || t == DT_E5M2 ||
           t == DT_E2M1;
}

/* ---- integer and float constants --------------------------------------- */

static bool is_numeric(DType t) {
    return t != DT_BOOL && t != DT_VOID;
}

static double round_to(DType t, double v) {
    return t == DT_F32 ? (double)(float)v : v;
}

Value lower_int_constant(Lower *lower, DType t, int64_t v, Loc loc,
                bool literal) {
    Expr *e = lower_at(ir_int(lower->kernel, t, v), loc);
    return (Value){e, literal};
}

Value lower_float_constant(Lower *lower, DType t, double v, Loc loc,
                  bool literal) {
    Expr *e = lower_at(ir_float(lower->kernel, t, literal ? v : round_to(t, v)),
                       loc);
    return (Value){e, literal};
}

Value lower_adapt(Lower *lower, Value value, DType to, Loc loc) {
    Expr *e = value.expr;
    if (!e || !value.literal) return value;
    if (e->kind == EXPR_INT && is_integer(to)) {
        if (!fits(to, e->u.int_value)) {
            lower_error(lower, loc, "integer constant %lld does not fit in %s",
                        (long long)e->u.int_value, ir_dtype_name(to));
            return NONE;
        }
        return lower_int_constant(lower, to, e->u.int_value, e->loc, false);
    }
    if (e->kind == EXPR_FLOAT && is_arith_float(to))
        return lower_float_constant(lower, to, e->u.float_value, e->loc, false);
    if (e->kind == EXPR_FLOAT && lower_is_storage_float(to)) {
        Value wide = lower_float_constant(lower, DT_F32, e->u.float_value, e->loc, false);
        return typed(lower_at(ir_cast(lower->kernel, CAST_CONVERT, to,
                                      wide.expr), e->loc));
    }
    return value;
}

Value lower_materialize(Lower *lower, Value value, Loc loc) {
    Expr *e = value.expr;
    if (!e || !value.literal) return value;
    return lower_adapt(lower, value, e->kind == EXPR_INT ? DT_I32 : DT_F32, loc);
}

Value lower_promote(Lower *lower, Value value) {
    Expr *e = value.expr;
    if (!e || !lower_is_storage_float(e->dtype)) return value;
    return typed(lower_at(ir_cast(lower->kernel, CAST_CONVERT, DT_F32, e),
                          e->loc));
}

/* ---- operators -------------------------------------------------------- */

static const char *binop_text(BinOp op) { return ir_binop_name(op); }

static bool is_comparison(BinOp op) {
    return op == BIN_EQ || op == BIN_NE || op == BIN_LT || op == BIN_LE ||
           op == BIN_GT || op == BIN_GE;
}

/* Folds an integer operation; false (after an error) on division by zero
 * or literal overflow. */
static bool fold_int(Lower *lower, BinOp op, DType t, bool literal, int64_t a,
                     int64_t b, Loc loc, int64_t *out) {
    bool unsigned_ = !literal && is_unsigned(t);
    uint64_t ua = (uint64_t)a, ub = (uint64_t)b;
    int64_t r = 0;
    bool overflow = false;
    switch (op) {
    case BIN_ADD:
        if (literal) overflow = __builtin_add_overflow(a, b, &r);
        else r = (int64_t)(ua + ub);
        break;
    case BIN_SUB:
        if (literal) overflow = __builtin_sub_overflow(a, b, &r);
        else r = (int64_t)(ua - ub);
        break;
    case BIN_MUL:
        if (literal) overflow = __builtin_mul_overflow(a, b, &r);
        else r = (int64_t)(ua * ub);
        break;
    case BIN_DIV:
    case BIN_MOD:
        if (b == 0) {
            lower_error(lower, loc, "division by zero in a constant expression");
            return false;
        }
        if (unsigned_) {
            r = (int64_t)(op == BIN_DIV ? ua / ub : ua % ub);
        } else if (a == INT64_MIN && b == -1) {
            r = op == BIN_DIV ? INT64_MIN : 0;
            overflow = literal && op == BIN_DIV;
        } else {
            int64_t q = a / b, m = a % b;
            if (m != 0 && ((m < 0) != (b < 0))) {
                q--;
                m += b;
            }
            r = op == BIN_DIV ? q : m;
        }
        break;
    case BIN_MIN: r = unsigned_ ? (int64_t)(ua < ub ? ua : ub) : (a < b ? a : b); break;
    case BIN_MAX: r = unsigned_ ? (int64_t)(ua > ub ? ua : ub) : (a > b ? a : b); break;
    case BIN_AND: r = a & b; break;
    case BIN_OR: r = a | b; break;
    case BIN_XOR: r = a ^ b; break;
    case BIN_SHL:
    case BIN_SHR: {
        int bits = literal ? 64 : ir_dtype_bits(t);
        if (b < 0 || b >= bits) {
            lower_error(lower, loc, "shift by %lld is out of range for %s",
                        (long long)b, literal ? "a constant" : ir_dtype_name(t));
            return false;
        }
        if (op == BIN_SHL) r = (int64_t)(ua << b);
        else r = unsigned_ ? (int64_t)(ua >> b) : a >> b;
        break;
    }
    case BIN_EQ: r = a == b; break;
    case BIN_NE: r = a != b; break;
    case BIN_LT: r = unsigned_ ? ua < ub : a < b; break;
    case BIN_LE: r = unsigned_ ? ua <= ub : a <= b; break;
    case BIN_GT: r = unsigned_ ? ua > ub : a > b; break;
    case BIN_GE: r = unsigned_ ? ua >= ub : a >= b; break;
    case BIN_LAND: r = a && b; break;
    case BIN_LOR: r = a || b; break;
    default: ice("fold_int: operator %d", op);
    }
    if (overflow) {
        lower_error(lower, loc, "integer overflow in a constant expression");
        return false;
    }
    *out = r;
    return true;
}

static Value fold_float(Lower *lower, BinOp op, DType t, bool literal,
                        double a, double b, Loc loc) {
    double r;
    switch (op) {
    case BIN_ADD: r = a + b; break;
    case BIN_SUB: r = a - b; break;
    case BIN_MUL: r = a * b; break;
    case BIN_DIV: r = a / b; break;
    case BIN_MIN: r = fmin(a, b); break;
    case BIN_MAX: r = fmax(a, b); break;
    case BIN_EQ: return lower_int_constant(lower, DT_BOOL, a == b, loc, false);
    case BIN_NE: return lower_int_constant(lower, DT_BOOL, a != b, loc, false);
    case BIN_LT: return lower_int_constant(lower, DT_BOOL, a < b, loc, false);
    case BIN_LE: return lower_int_constant(lower, DT_BOOL, a <= b, loc, false);
    case BIN_GT: return lower_int_constant(lower, DT_BOOL, a > b, loc, false);
    case BIN_GE: return lower_int_constant(lower, DT_BOOL, a >= b, loc, false);
    default: ice("fold_float: operator %d", op);
    }
    return lower_float_constant(lower, t, r, loc, literal);
}

/* Brings two operands to one type: storage floats widen when `widen`,
 * literals adapt to the typed side.  False after reporting a mismatch. */
bool lower_unify(Lower *lower, Value *a, Value *b, bool widen, const char *op,
           Loc loc) {
    if (widen) {
        *a = lower_promote(lower, *a);
        *b = lower_promote(lower, *b);
    }
    if (a->literal && !b->literal) *a = lower_adapt(lower, *a, b->expr->dtype, loc);
    else if (b->literal && !a->literal) *b = lower_adapt(lower, *b, a->expr->dtype, loc);
    if (!a->expr || !b->expr) return false;
    DType ta = a->expr->dtype, tb = b->expr->dtype;
    if (ta == tb) return true;
    if (!widen && (lower_is_storage_float(ta) || lower_is_storage_float(tb)))
        return lower_unify(lower, a, b, true, op, loc);
    lower_error(lower, loc, "mismatched operand types %s and %s in '%s'; use a "
                "conversion", ir_dtype_name(ta), ir_dtype_name(tb), op);
    return false;
}

Value lower_binary_op(Lower *lower, BinOp op, Value a, Value b, Loc loc) {
    if (!a.expr || !b.expr) return NONE;
    bool logical = op == BIN_LAND || op == BIN_LOR;
    if (!lower_unify(lower, &a, &b, !logical && op != BIN_EQ && op != BIN_NE,
               binop_text(op), loc))
        return NONE;
    DType t = a.expr->dtype;
    const char *need = NULL;
    if (logical) {
        if (t != DT_BOOL) need = "bool";
    } else if (op == BIN_MOD || op == BIN_AND || op == BIN_OR ||
               op == BIN_XOR || op == BIN_SHL || op == BIN_SHR) {
        if (!is_integer(t)) need = "integer";
    } else if (!is_comparison(op) || (op != BIN_EQ && op != BIN_NE)) {
        if (!is_numeric(t)) need = "numeric";
    }
    if (need) {
        lower_error(lower, loc, "'%s' needs %s operands, got %s", binop_text(op),
                    need, ir_dtype_name(t));
        return NONE;
    }
    Expr *x = a.expr, *y = b.expr;
    bool literal = a.literal && b.literal;
    if (x->kind == EXPR_INT && y->kind == EXPR_INT) {
        int64_t r;
        if (!fold_int(lower, op, t, literal, x->u.int_value, y->u.int_value,
                      loc, &r))
            return NONE;
        if (is_comparison(op) || logical)
            return lower_int_constant(lower, DT_BOOL, r, loc, false);
        return lower_int_constant(lower, t, literal ? r : wrap(t, r), loc, literal);
    }
    if (x->kind == EXPR_FLOAT && y->kind == EXPR_FLOAT && op != BIN_MOD)
        return fold_float(lower, op, t, literal, x->u.float_value,
                          y->u.float_value, loc);
    if (literal) {
        /* a literal op something non-constant cannot happen: literals
         * are constants, so both sides were folded above */
        a = lower_materialize(lower, a, loc);
        b = lower_materialize(lower, b, loc);
        if (!a.expr || !b.expr) return NONE;
        x = a.expr;
        y = b.expr;
    }
    if (op == BIN_MOD && !is_integer(t)) {
        lower_error(lower, loc, "'%%' needs integer operands, got %s",
                    ir_dtype_name(t));
        return NONE;
    }
    return typed(lower_at(ir_binary(lower->kernel, op, x, y), loc));
}

Value lower_binary(Lower *lower, BinOp op, Value a, Value b, Loc loc) {
    return lower_binary_op(lower, op, a, b, loc);
}

Value lower_unary_op(Lower *lower, UnOp op, Value a, Loc loc) {
    if (!a.expr) return NONE;
    if (op != UN_LNOT) a = lower_promote(lower, a);
    Expr *x = a.expr;
    DType t = x->dtype;
    const char *need = NULL;
    if (op == UN_LNOT && t != DT_BOOL) need = "a bool";
    if (op == UN_NOT && !is_integer(t)) need = "an integer";
    if ((op == UN_NEG || op == UN_ABS) && !is_numeric(t)) need = "a numeric";
    if (need) {
        lower_error(lower, loc, "'%s' needs %s operand, got %s",
                    op == UN_LNOT ? "!" : op == UN_NOT ? "~" : ir_unop_name(op),
                    need, ir_dtype_name(t));
        return NONE;
    }
    if (x->kind == EXPR_INT) {
        int64_t v = x->u.int_value, r;
        switch (op) {
        case UN_NEG:
            if (a.literal && v == INT64_MIN) {
                lower_error(lower, loc, "integer overflow in a constant expression");
                return NONE;
            }
            r = (int64_t)(0 - (uint64_t)v);
            break;
        case UN_NOT: r = ~v; break;
        case UN_LNOT: r = !v; break;
        default: r = is_unsigned(t) || v >= 0 ? v : (int64_t)(0 - (uint64_t)v); break;
        }
        return lower_int_constant(lower, t, a.literal ? r : wrap(t, r), loc, a.literal);
    }
    if (x->kind == EXPR_FLOAT) {
        double v = x->u.float_value;
        return lower_float_constant(lower, t, op == UN_NEG ? -v : fabs(v), loc, a.literal);
    }
    return typed(lower_at(ir_unary(lower->kernel, op, x), loc));
}

static Value ternary(Lower *lower, const AstNode *node) {
    Value cond = lower_expr(lower, node->a);
    Value a = lower_expr(lower, node->b);
    Value b = lower_expr(lower, node->c);
    if (!cond.expr || !a.expr || !b.expr) return NONE;
    if (cond.expr->dtype != DT_BOOL) {
        lower_error(lower, node->a->loc, "condition must be bool, got %s",
                    ir_dtype_name(cond.expr->dtype));
        return NONE;
    }
    if (!lower_unify(lower, &a, &b, false, "?:", node->loc)) return NONE;
    if (cond.expr->kind == EXPR_INT) return cond.expr->u.int_value ? a : b;
    a = lower_materialize(lower, a, node->loc);
    b = lower_materialize(lower, b, node->loc);
    if (!a.expr || !b.expr) return NONE;
    return typed(lower_at(ir_select(lower->kernel, cond.expr, a.expr, b.expr),
                          node->loc));
}

/* ---- names ------------------------------------------------------------ */

Value lower_copy_value(Lower *lower, Value value, Loc loc, bool relocate) {
    Expr *e = ir_copy_expr(lower->kernel, value.expr);
    if (relocate) e->loc = loc;
    return (Value){e, value.literal};
}

static Var *make_symbol(Lower *lower, const char *name, Loc loc) {
    Var *var = ir_new_var(lower->kernel, name, DT_I32, VAR_SYMBOL);
    Binding *binding = lower_define(lower, name, BIND_VAR, loc);
    binding->var = var;
    vec_push(lower->program->arena, lower->symbols, var);
    return var;
}

static Value identifier(Lower *lower, const AstNode *node) {
    const char *name = node->name;
    Kernel *k = lower->kernel;
    Binding *binding = lower_find(lower, name);
    if (binding && !binding->value.expr && !binding->var && !binding->buffer &&
        binding->kind != BIND_DTYPE) {
        lower->failed = true; /* its definition failed and was reported */
        return NONE;
    }
    if (binding) {
        switch (binding->kind) {
        case BIND_CONST: return lower_copy_value(lower, binding->value, node->loc, true);
        case BIND_EXPR: return lower_copy_value(lower, binding->value, node->loc, false);
        case BIND_VAR: return typed(lower_at(ir_var(k, binding->var), node->loc));
        case BIND_DTYPE:
            lower_error(lower, node->loc, "'%s' is a type, not a value", name);
            return NONE;
        case BIND_BUFFER:
            lower_error(lower, node->loc, "buffer '%s' is used as a value; "
                        "index it", name);
            return NONE;
        }
    }
    Decl *decl = program_lookup(lower->file, name);
    if (decl && decl->kind == DECL_CONST) return lower_const_value(lower, decl, node->loc);
    if (decl) {
        lower_error(lower, node->loc, "'%s' is a %s, not a value", name,
                    decl->kind == DECL_FN ? "fn" : "kernel");
        return NONE;
    }
    static const struct { const char *name; Intrinsic op; } builtins[] = {
        {"thread_idx", INTR_THREAD_IDX}, {"lane_idx", INTR_LANE_IDX},
        {"warp_idx", INTR_WARP_IDX},
    };
    for (size_t i = 0; i < sizeof builtins / sizeof builtins[0]; i++)
        if (strcmp(builtins[i].name, name) == 0)
            return typed(lower_at(ir_call(k, builtins[i].op, DT_I32, NULL, 0),
                                  node->loc));
    DType dtype;
    if (ir_dtype_from_name(name, &dtype)) {
        lower_error(lower, node->loc, "'%s' is a type, not a value", name);
        return NONE;
    }
    if (lower->make_symbols)
        return typed(lower_at(ir_var(k, make_symbol(lower, name, node->loc)),
                              node->loc));
    lower_error(lower, node->loc, "unknown identifier '%s'", name);
    return NONE;
}

/* An index: any integer type, used as i32 (the IR indexes with i32). */
Value lower_int_index(Lower *lower, const AstNode *node) {
    Value v = lower_materialize(lower, lower_expr(lower, node), node->loc);
    if (!v.expr) return NONE;
    DType t = v.expr->dtype;
    if (!is_integer(t)) {
        lower_error(lower, node->loc, "index must be an integer, got %s",
                    ir_dtype_name(t));
        return NONE;
    }
    if (t != DT_I32)
        v = typed(lower_at(ir_cast(lower->kernel, CAST_CONVERT, DT_I32, v.expr),
                           node->loc));
    return v;
}

static Value load(Lower *lower, const AstNode *node) {
    Binding *binding = lower_find(lower, node->name);
    if (!binding || binding->kind != BIND_BUFFER) {
        if (!binding && !program_lookup(lower->file, node->name))
            lower_error(lower, node->loc, "unknown buffer '%s'", node->name);
        else
            lower_error(lower, node->loc, "'%s' is not a buffer and cannot be "
                        "indexed", node->name);
        return NONE;
    }
    Buffer *buffer = binding->buffer;
    if (!buffer) {
        lower->failed = true;
        return NONE;
    }
    int count = ast_count(node->list);
    if (count != buffer->rank) {
        lower_error(lower, node->loc, "buffer '%s' has rank %d but %d "
                    "ind%s given", node->name, buffer->rank, count,
                    count == 1 ? "ex is" : "ices are");
        return NONE;
    }
    Expr *indices[IR_MAX_RANK];
    bool ok = true;
    for (int i = 0; i < count; i++) {
        indices[i] = lower_int_index(lower, ast_at(node->list, i)).expr;
        if (!indices[i]) ok = false;
    }
    if (!ok) return NONE;
    return typed(lower_at(ir_load(lower->kernel, buffer, indices, NULL),
                          node->loc));
}

/* ---- entry points ------------------------------------------------------- */

Value lower_expr(Lower *lower, const AstNode *node) {
    if (!node) return NONE;
    switch (node->kind) {
    case AST_INT:
        if (node->flag) {
            if (!fits(DT_U32, node->int_value)) {
                lower_error(lower, node->loc, "integer constant %lld does not "
                            "fit in u32", (long long)node->int_value);
                return NONE;
            }
            return lower_int_constant(lower, DT_U32, node->int_value, node->loc, false);
        }
        return lower_int_constant(lower, DT_I32, node->int_value, node->loc, true);
    case AST_FLOAT:
        return lower_float_constant(lower, DT_F32, node->float_value, node->loc,
                           !node->flag);
    case AST_BOOL: return lower_int_constant(lower, DT_BOOL, node->flag, node->loc, false);
    case AST_IDENT: return identifier(lower, node);
    case AST_INDEX: return load(lower, node);
    case AST_CALL: return lower_call(lower, node);
    case AST_BITCAST: return lower_bitcast(lower, node);
    case AST_UNARY:
        return lower_unary_op(lower, (UnOp)node->op, lower_expr(lower, node->a), node->loc);
    case AST_BINARY: {
        Value a = lower_expr(lower, node->a);
        Value b = lower_expr(lower, node->b);
        return lower_binary_op(lower, (BinOp)node->op, a, b, node->loc);
    }
    case AST_TERNARY: return ternary(lower, node);
    case AST_ERROR: lower->failed = true; return NONE;
    default:
        lower_error(lower, node->loc, "expected an expression");
        return NONE;
    }
}

bool lower_const_int(Lower *lower, const AstNode *node, const char *what,
                     int64_t *out) {
    Value v = lower_expr(lower, node);
    if (!v.expr) return false;
    if (v.expr->kind != EXPR_INT || !is_integer(v.expr->dtype)) {
        lower_error(lower, node->loc, "%s must be a compile-time constant "
                    "integer; '%s' is not", what, lower_expr_text(lower, node));
        return false;
    }
    *out = v.expr->u.int_value;
    return true;
}

bool lower_const_bool(Lower *lower, const AstNode *node, const char *what,
                      bool *out) {
    Value v = lower_expr(lower, node);
    if (!v.expr) return false;
    if (v.expr->kind != EXPR_INT || v.expr->dtype != DT_BOOL) {
        lower_error(lower, node->loc, "%s must be a compile-time constant "
                    "bool; '%s' is not", what, lower_expr_text(lower, node));
        return false;
    }
    *out = v.expr->u.int_value != 0;
    return true;
}

/* A kernel that only serves as an arena for expressions built while
 * checking constants and fn bodies outside any instance. */
static Kernel *scratch_kernel(Program *program) {
    Kernel *k = arena_alloc(program->scratch, sizeof *k);
    k->arena = program->scratch;
    k->name = "<check>";
    return k;
}

static void evaluate_const(Program *program, Decl *decl) {
    const AstNode *node = decl->node;
    Lower lower = {.program = program, .kernel = scratch_kernel(program),
                   .file = decl->file};
    decl->state = 1;
    DType type;
    if (!ir_dtype_from_name(node->type->name, &type)) {
        decl->state = 3;
        return;
    }
    if (lower_is_storage_float(type) || type == DT_VOID) {
        lower_error(&lower, node->type->loc, "constants must be bool, integers, "
                    "f32 or f64, not %s", ir_dtype_name(type));
        decl->state = 3;
        return;
    }
    Value v = lower_adapt(&lower, lower_expr(&lower, node->a), type, node->a->loc);
    if (!v.expr) {
        decl->state = 3;
        return;
    }
    if (v.expr->dtype != type) {
        lower_error(&lower, node->a->loc, "constant '%s' is declared %s but its "
                    "value is %s", decl->name, ir_dtype_name(type),
                    ir_dtype_name(v.expr->dtype));
        decl->state = 3;
        return;
    }
    if (v.expr->kind != EXPR_INT && v.expr->kind != EXPR_FLOAT) {
        lower_error(&lower, node->a->loc, "the value of constant '%s' is not a "
                    "compile-time constant", decl->name);
        decl->state = 3;
        return;
    }
    decl->const_type = type;
    decl->int_value = v.expr->kind == EXPR_INT ? v.expr->u.int_value : 0;
    decl->float_value = v.expr->kind == EXPR_FLOAT ? v.expr->u.float_value : 0;
    decl->state = 2;
}

void lower_check_const(Program *program, Decl *decl) {
    if (decl->state == 0) evaluate_const(program, decl);
}

Value lower_const_value(Lower *lower, Decl *decl, Loc use) {
    if (decl->bad) {
        lower->failed = true;
        return NONE;
    }
    if (decl->state == 1) {
        lower_error(lower, decl->node->loc, "constant '%s' is defined in terms "
                    "of itself", decl->name);
        decl->state = 3;
        return NONE;
    }
    if (decl->state == 0) evaluate_const(lower->program, decl);
    if (decl->state != 2) {
        lower->failed = true;
        return NONE;
    }
    if (ir_dtype_is_float(decl->const_type))
        return lower_float_constant(lower, decl->const_type, decl->float_value, use, false);
    return lower_int_constant(lower, decl->const_type, decl->int_value, use, false);
}

void lower_check_fn(Program *program, Decl *decl) {
    Lower lower = {.program = program, .kernel = scratch_kernel(program),
                   .file = decl->file};
    lower_push_scope(&lower);
    for (int i = 0; i < ast_count(decl->node->list); i++) {
        const AstNode *param = ast_at(decl->node->list, i);
        DType type;
        if (!ir_dtype_from_name(param->type->name, &type)) return;
        Binding *binding = lower_define(&lower, param->name, BIND_VAR, param->loc);
        binding->var = ir_new_var(lower.kernel, param->name, type, VAR_LET);
    }
    lower_fn_body(&lower, decl);
    if (lower.failed) decl->bad = true;
}
