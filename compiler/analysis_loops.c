/*
 * analysis_loops.c -- which loops vectorize turns into vector code.
 *
 * plan_shared runs before vectorize but must simulate the shared accesses
 * as vectorize will emit them: a VECTORIZED loop is one vector access,
 * and so is an innermost copy-like UNROLL loop (lower_tile_ops makes one
 * for every per-thread copy, such as the transpose's patch rows).  Both
 * passes ask ir_loop_vector_lanes, so they cannot disagree.  The part of
 * analysis.c's banner in ir.h.
 */
#include "ir.h"

#include <string.h>

static bool int_const(const Expr *e, int64_t *out)
{
    if (!e || e->kind != EXPR_INT || e->lanes > 1) return false;
    *out = e->u.int_value;
    return true;
}

/* ------------------------------------------------------------------ */
/* which loops vectorize turns into vector code                        */
/* ------------------------------------------------------------------ */

/* Lets defined in the loop body, so that an index can be followed
 * through them. */
typedef struct { const Var *vars[64]; const Expr *values[64]; int count; } LetTable;

static const Expr *let_lookup(const LetTable *lets, const Var *v)
{
    for (int i = lets->count - 1; i >= 0; i--)
        if (lets->vars[i] == v) return lets->values[i];
    return NULL;
}

static bool uses_var_through(const Expr *e, const Var *v, const LetTable *lets)
{
    if (ir_expr_uses_var(e, v)) return true;
    for (int i = 0; i < lets->count; i++)
        if (ir_expr_uses_var(e, lets->vars[i]) &&
            uses_var_through(lets->values[i], v, lets))
            return true;
    return false;
}

/* Coefficient of v in e when e is affine in v (through lets). */
static bool affine_coeff(const Expr *e, const Var *v, const LetTable *lets,
                         int64_t *coeff)
{
    int64_t k, c1, c2;
    if (!uses_var_through(e, v, lets)) { *coeff = 0; return true; }
    switch (e->kind) {
    case EXPR_VAR: {
        if (e->u.var == v) { *coeff = 1; return true; }
        const Expr *value = let_lookup(lets, e->u.var);
        return value && affine_coeff(value, v, lets, coeff);
    }
    case EXPR_BINARY:
        switch (e->u.binary.op) {
        case BIN_ADD: case BIN_SUB:
            if (!affine_coeff(e->u.binary.lhs, v, lets, &c1) ||
                !affine_coeff(e->u.binary.rhs, v, lets, &c2))
                return false;
            *coeff = e->u.binary.op == BIN_ADD ? c1 + c2 : c1 - c2;
            return true;
        case BIN_MUL:
            if (int_const(e->u.binary.rhs, &k) &&
                affine_coeff(e->u.binary.lhs, v, lets, &c1)) {
                *coeff = c1 * k;
                return true;
            }
            if (int_const(e->u.binary.lhs, &k) &&
                affine_coeff(e->u.binary.rhs, v, lets, &c1)) {
                *coeff = c1 * k;
                return true;
            }
            return false;
        default: return false;
        }
    case EXPR_CAST:
        if (ir_dtype_is_int(e->dtype) && ir_dtype_is_int(e->u.cast.value->dtype) &&
            ir_dtype_bits(e->dtype) >= ir_dtype_bits(e->u.cast.value->dtype))
            return affine_coeff(e->u.cast.value, v, lets, coeff);
        return false;
    default: return false;
    }
}

typedef struct {
    const Var *var;
    LetTable lets;
    bool straight;     /* only LET and STORE, no sync calls */
    bool contiguous;   /* a global/shared access is unit-stride in var */
} CopyScan;

static bool access_contiguous(CopyScan *scan, const Buffer *b, Expr **indices)
{
    if (b->scope != SCOPE_GLOBAL && b->scope != SCOPE_SHARED) return false;
    const Expr *stride = b->strides[b->rank - 1];
    if (b->scope == SCOPE_GLOBAL && stride &&
        !(stride->kind == EXPR_INT && stride->u.int_value == 1))
        return false;
    int64_t c;
    for (int d = 0; d < b->rank - 1; d++)
        if (!affine_coeff(indices[d], scan->var, &scan->lets, &c) || c != 0)
            return false;
    return affine_coeff(indices[b->rank - 1], scan->var, &scan->lets, &c) && c == 1;
}

static void scan_expr(CopyScan *scan, const Expr *e)
{
    if (!e) return;
    switch (e->kind) {
    case EXPR_LOAD:
        if (access_contiguous(scan, e->u.load.buffer, e->u.load.indices))
            scan->contiguous = true;
        for (int d = 0; d < e->u.load.buffer->rank; d++)
            scan_expr(scan, e->u.load.indices[d]);
        scan_expr(scan, e->u.load.predicate);
        return;
    case EXPR_UNARY: scan_expr(scan, e->u.unary.operand); return;
    case EXPR_BINARY:
        scan_expr(scan, e->u.binary.lhs);
        scan_expr(scan, e->u.binary.rhs);
        return;
    case EXPR_SELECT:
        scan_expr(scan, e->u.select.cond);
        scan_expr(scan, e->u.select.then_value);
        scan_expr(scan, e->u.select.else_value);
        return;
    case EXPR_CAST: scan_expr(scan, e->u.cast.value); return;
    case EXPR_CALL:
        if (!(ir_intrinsic_flags(e->u.call.op) & INTR_PURE)) scan->straight = false;
        for (int i = 0; i < e->u.call.nargs; i++) scan_expr(scan, e->u.call.args[i]);
        return;
    default: return;
    }
}

static void scan_stmt(CopyScan *scan, const Stmt *s)
{
    if (!s || !scan->straight) return;
    switch (s->kind) {
    case STMT_SEQ:
        for (int i = 0; i < s->u.seq.count; i++) scan_stmt(scan, s->u.seq.items[i]);
        return;
    case STMT_LET:
        if (s->u.let.var->kind != VAR_LET || !s->u.let.value ||
            scan->lets.count == 64) {
            scan->straight = false;
            return;
        }
        scan_expr(scan, s->u.let.value);
        scan->lets.vars[scan->lets.count] = s->u.let.var;
        scan->lets.values[scan->lets.count++] = s->u.let.value;
        return;
    case STMT_STORE:
        if (access_contiguous(scan, s->u.store.buffer, s->u.store.indices))
            scan->contiguous = true;
        for (int d = 0; d < s->u.store.buffer->rank; d++)
            scan_expr(scan, s->u.store.indices[d]);
        scan_expr(scan, s->u.store.value);
        scan_expr(scan, s->u.store.predicate);
        return;
    default:
        scan->straight = false;
        return;
    }
}

int ir_loop_vector_lanes(const Stmt *loop)
{
    int64_t begin, end;
    if (!loop || loop->kind != STMT_FOR || loop->u.loop.step != 1 ||
        !int_const(loop->u.loop.begin, &begin) || !int_const(loop->u.loop.end, &end))
        return 0;
    int64_t extent = end - begin;
    if (loop->u.loop.kind == LOOP_VECTORIZED)
        return extent >= 1 && extent <= IR_MAX_LANES ? (int)extent : 0;
    if (loop->u.loop.kind != LOOP_UNROLL || extent < 2 || extent > IR_MAX_LANES ||
        (extent & (extent - 1)) != 0)
        return 0;
    CopyScan scan;
    memset(&scan, 0, sizeof scan);
    scan.var = loop->u.loop.var;
    scan.straight = true;
    scan_stmt(&scan, loop->u.loop.body);
    return scan.straight && scan.contiguous ? (int)extent : 0;
}
