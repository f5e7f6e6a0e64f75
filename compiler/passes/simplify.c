/*
 * simplify.c -- constant folding and index simplification.
 *
 * lower_parallel and vectorize build index arithmetic mechanically
 * (s * 128 + thread_idx, (c % 128) * 8 + v, guards such as c < 512); this
 * pass turns it into what a person would write, using the Facts of
 * analysis.c to decide divisions, remainders and comparisons.  It runs at
 * any level and twice in the pipeline (before plan_shared and after
 * vectorize).
 *
 * This file is the pass entry and the statement-level rewriting; the
 * expression folding and index algebra live in simplify_expr.c, behind
 * the private header simplify.h.
 *
 * The guard of a global access loses each conjunct `index < dimension`
 * that analysis_bounds.c proves from the launch geometry.
 *
 * Statements: constant IF conditions pick a branch, zero-trip loops
 * vanish, single-trip loops are inlined, nested SEQs are flattened and
 * LETs of pure values nobody reads are dropped.
 *
 * requires: nothing.  guarantees: nothing new (keeps every KSTATE).
 */
#include "simplify.h"

#include <string.h>

static Stmt *simplify_stmt(Simplifier *s, Stmt *st);

/* ------------------------------------------------------------------ */
/* statements                                                          */
/* ------------------------------------------------------------------ */

static bool stmt_uses_var(const Stmt *st, const Var *v);

static bool region_uses_var(const Region *r, const Var *v)
{
    for (int i = 0; r->buffer && i < r->buffer->rank; i++)
        if (ir_expr_uses_var(r->start[i], v)) return true;
    return false;
}

static bool exprs_use_var(Expr **items, int count, const Var *v)
{
    for (int i = 0; i < count; i++)
        if (ir_expr_uses_var(items[i], v)) return true;
    return false;
}

static bool stmt_uses_var(const Stmt *st, const Var *v)
{
    if (!st) return false;
    switch (st->kind) {
    case STMT_SEQ:
        for (int i = 0; i < st->u.seq.count; i++)
            if (stmt_uses_var(st->u.seq.items[i], v)) return true;
        return false;
    case STMT_LET: return ir_expr_uses_var(st->u.let.value, v);
    case STMT_ASSIGN: return st->u.assign.var == v || ir_expr_uses_var(st->u.assign.value, v);
    case STMT_STORE:
        return exprs_use_var(st->u.store.indices, st->u.store.buffer->rank, v) ||
               ir_expr_uses_var(st->u.store.value, v) ||
               ir_expr_uses_var(st->u.store.predicate, v);
    case STMT_FOR:
        return ir_expr_uses_var(st->u.loop.begin, v) || ir_expr_uses_var(st->u.loop.end, v) ||
               stmt_uses_var(st->u.loop.body, v);
    case STMT_PARALLEL: return stmt_uses_var(st->u.parallel.body, v);
    case STMT_IF:
        return ir_expr_uses_var(st->u.if_.cond, v) || stmt_uses_var(st->u.if_.then_body, v) ||
               stmt_uses_var(st->u.if_.else_body, v);
    case STMT_COPY: return region_uses_var(&st->u.copy.src, v) || region_uses_var(&st->u.copy.dst, v);
    case STMT_FILL: return region_uses_var(&st->u.fill.dst, v) || ir_expr_uses_var(st->u.fill.value, v);
    case STMT_ATOMIC:
        return exprs_use_var(st->u.atomic.indices, st->u.atomic.buffer->rank, v) ||
               ir_expr_uses_var(st->u.atomic.value, v);
    case STMT_EVAL: return ir_expr_uses_var(st->u.eval.value, v);
    case STMT_ASSERT: return ir_expr_uses_var(st->u.assert_.cond, v);
    default: return ir_stmt_uses_var(st, v); /* the Hopper statements */
    }
}

static bool expr_is_pure(const Expr *e)
{
    if (!e) return true;
    switch (e->kind) {
    case EXPR_CALL:
        if (!(ir_intrinsic_flags(e->u.call.op) & INTR_PURE)) return false;
        for (int i = 0; i < e->u.call.nargs; i++)
            if (!expr_is_pure(e->u.call.args[i])) return false;
        return true;
    case EXPR_LOAD:
        for (int i = 0; i < e->u.load.buffer->rank; i++)
            if (!expr_is_pure(e->u.load.indices[i])) return false;
        return expr_is_pure(e->u.load.predicate);
    case EXPR_UNARY: return expr_is_pure(e->u.unary.operand);
    case EXPR_BINARY: return expr_is_pure(e->u.binary.lhs) && expr_is_pure(e->u.binary.rhs);
    case EXPR_SELECT:
        return expr_is_pure(e->u.select.cond) && expr_is_pure(e->u.select.then_value) &&
               expr_is_pure(e->u.select.else_value);
    case EXPR_CAST: return expr_is_pure(e->u.cast.value);
    case EXPR_RAMP: return expr_is_pure(e->u.ramp.base);
    case EXPR_BROADCAST: return expr_is_pure(e->u.broadcast.value);
    default: return true;
    }
}

static void seq_push(Kernel *k, Stmt ***items, int *count, int *capacity, Stmt *st)
{
    if (*count == *capacity) {
        int cap = *capacity ? *capacity * 2 : 8;
        Stmt **n = arena_alloc(k->arena, sizeof(Stmt *) * (size_t)cap);
        if (*count) memcpy(n, *items, sizeof(Stmt *) * (size_t)*count);
        *items = n;
        *capacity = cap;
    }
    (*items)[(*count)++] = st;
}

static void flatten_into(Kernel *k, Stmt *st, Stmt ***items, int *count, int *capacity)
{
    if (!st) return;
    if (st->kind == STMT_SEQ) {
        for (int i = 0; i < st->u.seq.count; i++)
            flatten_into(k, st->u.seq.items[i], items, count, capacity);
        return;
    }
    seq_push(k, items, count, capacity, st);
}

static Stmt *simplify_seq(Simplifier *s, Stmt *st)
{
    Stmt **items = NULL;
    int count = 0, capacity = 0;
    for (int i = 0; i < st->u.seq.count; i++)
        flatten_into(s->k, simplify_stmt(s, st->u.seq.items[i]), &items, &count, &capacity);
    /* drop LETs of pure values that nothing after them reads */
    for (int i = count - 1; i >= 0; i--) {
        Stmt *it = items[i];
        if (it->kind != STMT_LET || it->u.let.var->kind != VAR_LET ||
            !expr_is_pure(it->u.let.value))
            continue;
        bool used = false;
        for (int j = i + 1; j < count && !used; j++)
            used = stmt_uses_var(items[j], it->u.let.var);
        if (!used) {
            memmove(&items[i], &items[i + 1], sizeof(Stmt *) * (size_t)(count - i - 1));
            count--;
        }
    }
    if (count == 0) return NULL;
    st->u.seq.items = items;
    st->u.seq.count = count;
    return st;
}

static void simplify_region(Simplifier *s, Region *r)
{
    for (int i = 0; r->buffer && i < r->buffer->rank; i++)
        r->start[i] = simplify_expr(s, r->start[i]);
}

static Stmt *simplify_for(Simplifier *s, Stmt *st)
{
    int64_t begin, end, lo, hi;
    st->u.loop.begin = simplify_expr(s, st->u.loop.begin);
    st->u.loop.end = simplify_expr(s, st->u.loop.end);
    facts_add_loop(s->facts, st->u.loop.var, st->u.loop.begin, st->u.loop.end,
                   st->u.loop.step);
    bool constant = simplify_is_int_const(st->u.loop.begin, &begin) && simplify_is_int_const(st->u.loop.end, &end);
    if (constant && end <= begin) return NULL;
    if (!constant) {
        Expr *trip = simplify_build_binary(s, BIN_SUB, st->u.loop.end, st->u.loop.begin, st->loc);
        if (simplify_bounds(s, trip, &lo, &hi) && hi <= 0) return NULL;
    }
    if (constant && (end - begin <= st->u.loop.step || end - begin == 1)) {
        Stmt *body = ir_substitute_stmt(s->k, st->u.loop.body, st->u.loop.var,
                                        st->u.loop.begin);
        return simplify_stmt(s, body);
    }
    st->u.loop.body = simplify_stmt(s, st->u.loop.body);
    if (!st->u.loop.body) return NULL;
    return st;
}

static Stmt *simplify_stmt(Simplifier *s, Stmt *st)
{
    if (!st) return NULL;
    bool never;
    int64_t v;
    switch (st->kind) {
    case STMT_SEQ:
        return simplify_seq(s, st);
    case STMT_LET:
        st->u.let.value = simplify_expr(s, st->u.let.value);
        if (st->u.let.var->kind == VAR_LET && st->u.let.value)
            facts_add_let(s->facts, st->u.let.var, st->u.let.value);
        return st;
    case STMT_ASSIGN:
        st->u.assign.value = simplify_expr(s, st->u.assign.value);
        return st;
    case STMT_STORE:
        for (int i = 0; i < st->u.store.buffer->rank; i++)
            st->u.store.indices[i] = simplify_expr(s, st->u.store.indices[i]);
        st->u.store.value = simplify_expr(s, st->u.store.value);
        st->u.store.predicate = simplify_access_predicate(s, st->u.store.predicate,
                                                          st->u.store.buffer, &never);
        return never ? NULL : st;
    case STMT_FOR:
        return simplify_for(s, st);
    case STMT_PARALLEL:
        st->u.parallel.body = simplify_stmt(s, st->u.parallel.body);
        if (!st->u.parallel.body) st->u.parallel.body = ir_seq(s->k, NULL, 0);
        return st;
    case STMT_IF:
        st->u.if_.cond = simplify_expr(s, st->u.if_.cond);
        if (simplify_is_int_const(st->u.if_.cond, &v))
            return simplify_stmt(s, v ? st->u.if_.then_body : st->u.if_.else_body);
        st->u.if_.then_body = simplify_stmt(s, st->u.if_.then_body);
        st->u.if_.else_body = simplify_stmt(s, st->u.if_.else_body);
        if (!st->u.if_.then_body && !st->u.if_.else_body && expr_is_pure(st->u.if_.cond))
            return NULL;
        if (!st->u.if_.then_body) {
            /* if (c) {} else {b}  ->  if (!c) {b} */
            st->u.if_.cond = simplify_expr(s, ir_unary(s->k, UN_LNOT, st->u.if_.cond));
            st->u.if_.then_body = st->u.if_.else_body;
            st->u.if_.else_body = NULL;
        }
        return st;
    case STMT_COPY:
        simplify_region(s, &st->u.copy.src);
        simplify_region(s, &st->u.copy.dst);
        return st;
    case STMT_FILL:
        simplify_region(s, &st->u.fill.dst);
        st->u.fill.value = simplify_expr(s, st->u.fill.value);
        return st;
    case STMT_ATOMIC:
        for (int i = 0; i < st->u.atomic.buffer->rank; i++)
            st->u.atomic.indices[i] = simplify_expr(s, st->u.atomic.indices[i]);
        st->u.atomic.value = simplify_expr(s, st->u.atomic.value);
        return st;
    case STMT_EVAL:
        st->u.eval.value = simplify_expr(s, st->u.eval.value);
        return st;
    case STMT_ASSERT:
        st->u.assert_.cond = simplify_expr(s, st->u.assert_.cond);
        if (simplify_is_int_const(st->u.assert_.cond, &v) && v) return NULL;
        return st;
    default:
        return st;
    }
}

bool pass_simplify(Kernel *k, Diag *diag)
{
    Simplifier s = { k, facts_new(k) };
    (void)diag;
    for (int i = 0; i < 3; i++)
        if (k->grid[i]) k->grid[i] = simplify_expr(&s, k->grid[i]);
    k->body = simplify_stmt(&s, k->body);
    if (!k->body) k->body = ir_seq(k, NULL, 0);
    return true;
}
