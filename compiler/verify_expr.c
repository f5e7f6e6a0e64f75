/*
 * verify_expr.c -- the verifier's rules for expressions and accesses.
 *
 * verify.c walks the kernel and calls verify_expr on every expression it
 * meets; this file checks one expression tree: operand dtypes and lane
 * counts agree (shifts included), comparisons and && || give bool,
 * literals, casts and intrinsic calls (their argument counts and dtypes)
 * are well typed, a variable is in scope and used with the lanes it was
 * bound with, a load names a visible buffer with one integer index per
 * dimension as wide as the access, and a predicate is bool.  Split from
 * verify.c; verify.h is the interface between the two (and
 * verify_hopper.c).
 */
#include "verify.h"

/* Checks e and that it is a scalar of an integer type (indices, bounds). */
static void check_index(Verifier *v, const Expr *e, int lanes, const char *what)
{
    verify_expr(v, e);
    if (!e)
        return;
    if (!verify_is_integer(e->dtype))
        verify_report(v, e->loc, "%s has dtype %s, not an integer", what, dname(e->dtype));
    if (e->lanes != lanes)
        verify_report(v, e->loc, "%s has %d lanes, the access %d", what, e->lanes, lanes);
}

static void check_predicate(Verifier *v, const Expr *predicate, int lanes)
{
    if (!predicate)
        return;
    verify_expr(v, predicate);
    if (predicate->dtype != DT_BOOL)
        verify_report(v, predicate->loc, "predicate has dtype %s, not bool", dname(predicate->dtype));
    if (predicate->lanes != lanes)
        verify_report(v, predicate->loc, "predicate has %d lanes, the access %d", predicate->lanes,
               lanes);
}

void verify_access(Verifier *v, const Buffer *b, Expr *const *indices, int lanes,
                   const Expr *predicate, int align_bytes, Loc loc)
{
    verify_buffer_use(v, b, loc);
    if (!b)
        return;
    if (b->rank > 0 && !indices) {
        verify_report(v, loc, "access to @%s has no indices", buffer_name(b));
        return;
    }
    for (int i = 0; i < b->rank; i++) {
        if (!indices[i])
            verify_report(v, loc, "access to @%s: index %d is missing (rank %d)", buffer_name(b), i,
                   b->rank);
        else
            check_index(v, indices[i], lanes, "index");
    }
    check_predicate(v, predicate, lanes);
    if (align_bytes < 0 || (align_bytes & (align_bytes - 1)) != 0)
        verify_report(v, loc, "access to @%s: align_bytes %d is not a power of two", buffer_name(b),
               align_bytes);
}

static bool binop_is_comparison(BinOp op)
{
    return op == BIN_EQ || op == BIN_NE || op == BIN_LT || op == BIN_LE || op == BIN_GT ||
           op == BIN_GE;
}

/* Which operand dtypes an operator accepts. */
static bool binop_accepts(BinOp op, DType t)
{
    if (!verify_dtype_ok(t))
        return false;
    DClass cls = ir_dtype_class(t);
    bool integer = cls == DCLASS_SINT || cls == DCLASS_UINT;
    switch (op) {
    case BIN_ADD: case BIN_SUB: case BIN_MUL: case BIN_DIV: case BIN_MIN: case BIN_MAX:
    case BIN_LT: case BIN_LE: case BIN_GT: case BIN_GE:
        return integer || cls == DCLASS_FLOAT;
    case BIN_MOD: case BIN_SHL: case BIN_SHR:
        return integer;
    case BIN_AND: case BIN_OR: case BIN_XOR:
        return integer || cls == DCLASS_BOOL;
    case BIN_EQ: case BIN_NE:
        return integer || cls == DCLASS_BOOL || cls == DCLASS_FLOAT;
    case BIN_LAND: case BIN_LOR:
        return cls == DCLASS_BOOL;
    default:
        return false;
    }
}

static void check_call(Verifier *v, const Expr *e)
{
    Intrinsic op = e->u.call.op;
    if ((unsigned)op >= INTR_COUNT) {
        verify_report(v, e->loc, "unknown intrinsic %d", (int)op);
        return;
    }
    const char *name = ir_intrinsic_name(op);
    int want = ir_intrinsic_nargs(op);
    if (want >= 0 && e->u.call.nargs != want) {
        verify_report(v, e->loc, "%s takes %d arguments, not %d", name, want, e->u.call.nargs);
        return;
    }
    if (e->u.call.nargs > 0 && !e->u.call.args) {
        verify_report(v, e->loc, "%s: missing arguments", name);
        return;
    }
    for (int i = 0; i < e->u.call.nargs; i++) {
        const Expr *arg = e->u.call.args[i];
        verify_expr(v, arg);
        if (arg && arg->lanes != 1 && arg->lanes != e->lanes)
            verify_report(v, e->loc, "%s: argument %d has %d lanes, the call %d", name, i, arg->lanes,
                   e->lanes);
    }
    for (int i = 0; i < e->u.call.nargs; i++)
        if (!e->u.call.args[i])
            return;
    Expr *const *args = e->u.call.args;
    switch (op) {
    case INTR_EXP: case INTR_EXP2: case INTR_RSQRT: case INTR_SQRT: case INTR_SIGMOID:
    case INTR_LOG1P: case INTR_RCP_APPROX: case INTR_ONE_PLUS_EXP:
    case INTR_FMA:
        if (!verify_is_float(e->dtype)) {
            verify_report(v, e->loc, "%s gives %s, not a float", name, dname(e->dtype));
            break;
        }
        for (int i = 0; i < e->u.call.nargs; i++)
            if (args[i]->dtype != e->dtype)
                verify_report(v, e->loc, "%s: argument %d has dtype %s, the call %s", name, i,
                       dname(args[i]->dtype), dname(e->dtype));
        break;
    case INTR_SHFL_XOR: case INTR_SHFL_IDX:
        if (args[0]->dtype != e->dtype)
            verify_report(v, e->loc, "%s: value has dtype %s, the call %s", name,
                   dname(args[0]->dtype), dname(e->dtype));
        if (!verify_is_integer(args[1]->dtype))
            verify_report(v, e->loc, "%s: lane has dtype %s, not an integer", name,
                   dname(args[1]->dtype));
        break;
    case INTR_F16_RZ_BITS: case INTR_E2M1_BITS: case INTR_ISFINITE:
        if (!verify_is_float(args[0]->dtype))
            verify_report(v, e->loc, "%s: argument has dtype %s, not a float", name,
                   dname(args[0]->dtype));
        if (e->dtype != ir_call_default_dtype(op, args, e->u.call.nargs))
            verify_report(v, e->loc, "%s gives %s, not %s", name,
                   dname(ir_call_default_dtype(op, args, e->u.call.nargs)), dname(e->dtype));
        break;
    case INTR_POPCOUNT:
        if (!verify_is_integer(args[0]->dtype))
            verify_report(v, e->loc, "popcount: argument has dtype %s, not an integer",
                   dname(args[0]->dtype));
        if (!verify_is_integer(e->dtype))
            verify_report(v, e->loc, "popcount gives %s, not an integer", dname(e->dtype));
        break;
    default: /* the index intrinsics */
        if (!verify_is_integer(e->dtype))
            verify_report(v, e->loc, "%s gives %s, not an integer", name, dname(e->dtype));
        break;
    }
}

void verify_expr(Verifier *v, const Expr *e)
{
    if (!e) {
        verify_report(v, v->stmt_loc, "missing expression");
        return;
    }
    if (!verify_dtype_ok(e->dtype)) {
        verify_report(v, e->loc, "%s has bad dtype %d", ir_expr_name(e->kind), (int)e->dtype);
        return;
    }
    if (e->lanes < 1 || e->lanes > IR_MAX_LANES)
        verify_report(v, e->loc, "%s has %d lanes", ir_expr_name(e->kind), e->lanes);
    else if (e->lanes > 1 && !(v->k->state & KSTATE_VECTOR))
        verify_report(v, e->loc, "%s has %d lanes before vectorize", ir_expr_name(e->kind), e->lanes);
    switch (e->kind) {
    case EXPR_INT:
        if (!verify_is_integer(e->dtype) && e->dtype != DT_BOOL)
            verify_report(v, e->loc, "integer literal of dtype %s", dname(e->dtype));
        break;
    case EXPR_FLOAT:
        if (!ir_dtype_is_float(e->dtype))
            verify_report(v, e->loc, "float literal of dtype %s", dname(e->dtype));
        break;
    case EXPR_VAR: {
        const Var *var = e->u.var;
        if (!verify_var_known(v, var, e->loc))
            break;
        if (!v->in_scope[var->id])
            verify_report(v, e->loc, "%%%s is used outside its scope", verify_var_name(var));
        else if (e->lanes != v->lanes[var->id])
            verify_report(v, e->loc, "%%%s holds %d lanes but is used with %d", verify_var_name(var),
                   v->lanes[var->id], e->lanes);
        if (e->dtype != var->dtype)
            verify_report(v, e->loc, "use of %%%s has dtype %s, the variable %s", verify_var_name(var),
                   dname(e->dtype), dname(var->dtype));
        break;
    }
    case EXPR_LOAD: {
        const Buffer *b = e->u.load.buffer;
        verify_access(v, b, e->u.load.indices, e->lanes, e->u.load.predicate,
                     e->u.load.align_bytes, e->loc);
        if (b && e->dtype != b->dtype)
            verify_report(v, e->loc, "load of @%s has dtype %s, the buffer %s", buffer_name(b),
                   dname(e->dtype), dname(b->dtype));
        break;
    }
    case EXPR_UNARY: {
        const Expr *a = e->u.unary.operand;
        verify_expr(v, a);
        if (!a)
            break;
        UnOp op = e->u.unary.op;
        if ((unsigned)op >= UN_COUNT) {
            verify_report(v, e->loc, "unknown unary op %d", (int)op);
            break;
        }
        if (a->lanes != e->lanes)
            verify_report(v, e->loc, "%s: operand has %d lanes, the result %d", ir_unop_name(op),
                   a->lanes, e->lanes);
        bool ok = op == UN_LNOT ? a->dtype == DT_BOOL && e->dtype == DT_BOOL
                  : op == UN_NOT ? (verify_is_integer(a->dtype) || a->dtype == DT_BOOL) &&
                                   e->dtype == a->dtype
                                 : (verify_is_integer(a->dtype) || verify_is_float(a->dtype)) &&
                                   e->dtype == a->dtype;
        if (!ok)
            verify_report(v, e->loc, "%s of %s giving %s", ir_unop_name(op), dname(a->dtype),
                   dname(e->dtype));
        break;
    }
    case EXPR_BINARY: {
        const Expr *a = e->u.binary.lhs, *b = e->u.binary.rhs;
        BinOp op = e->u.binary.op;
        verify_expr(v, a);
        verify_expr(v, b);
        if (!a || !b)
            break;
        if ((unsigned)op >= BIN_COUNT) {
            verify_report(v, e->loc, "unknown binary op %d", (int)op);
            break;
        }
        const char *name = ir_binop_name(op);
        if (a->dtype != b->dtype)
            verify_report(v, e->loc, "operands of '%s' have dtypes %s and %s", name, dname(a->dtype),
                   dname(b->dtype));
        else if (!binop_accepts(op, a->dtype))
            verify_report(v, e->loc, "'%s' does not apply to %s", name, dname(a->dtype));
        if (a->lanes != b->lanes || a->lanes != e->lanes)
            verify_report(v, e->loc, "lanes of '%s': %d and %d, result %d", name, a->lanes, b->lanes,
                   e->lanes);
        DType want = binop_is_comparison(op) || op == BIN_LAND || op == BIN_LOR ? DT_BOOL
                                                                                : a->dtype;
        if (e->dtype != want)
            verify_report(v, e->loc, "'%s' gives %s, not %s", name, dname(want), dname(e->dtype));
        break;
    }
    case EXPR_SELECT: {
        const Expr *c = e->u.select.cond, *a = e->u.select.then_value,
                   *b = e->u.select.else_value;
        verify_expr(v, c);
        verify_expr(v, a);
        verify_expr(v, b);
        if (!c || !a || !b)
            break;
        if (c->dtype != DT_BOOL)
            verify_report(v, e->loc, "select condition has dtype %s, not bool", dname(c->dtype));
        if (a->dtype != b->dtype || e->dtype != a->dtype)
            verify_report(v, e->loc, "select of %s and %s giving %s", dname(a->dtype),
                   dname(b->dtype), dname(e->dtype));
        if (a->lanes != e->lanes || b->lanes != e->lanes ||
            (c->lanes != 1 && c->lanes != e->lanes))
            verify_report(v, e->loc, "select lanes: condition %d, values %d and %d, result %d",
                   c->lanes, a->lanes, b->lanes, e->lanes);
        break;
    }
    case EXPR_CAST: {
        const Expr *a = e->u.cast.value;
        verify_expr(v, a);
        if (!a)
            break;
        if (a->lanes != e->lanes)
            verify_report(v, e->loc, "cast: value has %d lanes, the result %d", a->lanes, e->lanes);
        if (e->dtype == DT_VOID || a->dtype == DT_VOID)
            verify_report(v, e->loc, "cast from %s to %s", dname(a->dtype), dname(e->dtype));
        else if (e->u.cast.kind == CAST_BITCAST &&
                 ir_dtype_bits(a->dtype) != ir_dtype_bits(e->dtype))
            verify_report(v, e->loc, "bitcast from %s to %s changes the width", dname(a->dtype),
                   dname(e->dtype));
        else if (e->u.cast.kind != CAST_BITCAST && e->u.cast.kind != CAST_CONVERT)
            verify_report(v, e->loc, "unknown cast kind %d", (int)e->u.cast.kind);
        break;
    }
    case EXPR_CALL:
        check_call(v, e);
        break;
    case EXPR_RAMP: {
        const Expr *base = e->u.ramp.base;
        verify_expr(v, base);
        if (!base)
            break;
        if (!verify_is_integer(base->dtype) || e->dtype != base->dtype)
            verify_report(v, e->loc, "ramp of %s giving %s", dname(base->dtype), dname(e->dtype));
        if (base->lanes != 1)
            verify_report(v, e->loc, "ramp base has %d lanes", base->lanes);
        break;
    }
    case EXPR_BROADCAST: {
        const Expr *value = e->u.broadcast.value;
        verify_expr(v, value);
        if (!value)
            break;
        if (e->dtype != value->dtype)
            verify_report(v, e->loc, "broadcast of %s giving %s", dname(value->dtype), dname(e->dtype));
        if (value->lanes != 1)
            verify_report(v, e->loc, "broadcast of a %d-lane value", value->lanes);
        break;
    }
    default:
        verify_report(v, e->loc, "unknown expression kind %d", (int)e->kind);
        break;
    }
}

/* e must be a scalar of dtype want (DT_VOID: any integer). */
void verify_scalar(Verifier *v, const Expr *e, DType want, const char *what)
{
    verify_expr(v, e);
    if (!e)
        return;
    if (want == DT_VOID ? !verify_is_integer(e->dtype) : e->dtype != want)
        verify_report(v, e->loc, "%s has dtype %s, not %s", what, dname(e->dtype),
               want == DT_VOID ? "an integer" : dname(want));
    if (e->lanes != 1)
        verify_report(v, e->loc, "%s has %d lanes", what, e->lanes);
}

