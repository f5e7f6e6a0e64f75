/*
 * lower_tile_ops.c -- COPY and FILL become loops; global accesses get edge
 * predicates.
 *
 * A tile statement at block level describes work for the whole block, so it
 * becomes a PARALLEL loop over the region's shape (infer_layouts then
 * decides how the iterations are spread over threads and how wide each
 * thread's vector is).  The same statement inside a PARALLEL body is one
 * thread's private work, so it becomes ordinary nested loops: UNROLL for the
 * outer dimensions and VECTORIZED for the innermost one when it fits a
 * vector (vectorize decides later whether it becomes one wide access).
 *
 * Then every load and store of a global tensor, written by the user or made
 * here, is masked as TileLang does (tilekernels-spec.md 2.4): an access
 * outside the tensor reads 0 or is dropped.  The mask is a left-to-right
 * conjunction of `idx < shape` per dimension, preceded by `idx >= 0` for an
 * index not built from non-negative terms.  pass_simplify removes the
 * conjuncts it can prove, and vectorize proves the rest uniform.
 *
 * A COPY that lower_tma made a TMA copy (tensor_map >= 0) becomes one TMA
 * statement instead: the box is the whole region, the coordinates are the
 * global region's starts, and a load completes on the copy's mbarrier.
 * The tensor map's out-of-bounds handling replaces the edge masks.
 *
 * requires: tile level.  maintains: tile level.  COPY and FILL are gone
 * afterwards; REDUCE is left to lower_parallel.
 */
#include <stdlib.h>

#include "tile_util.h"

typedef struct {
    Kernel *k;
    Diag *diag;
    bool ok;
    /* Defining expression of each LET var and begin of each FOR var, by
     * Var.id, so the mask can see that `t` in `let t = by*4 + m` is
     * non-negative. */
    Expr **defs;
    int ndefs;
} LowerCtx;

/* ---- non-negativity ---------------------------------------------------- */

static bool is_nonneg(LowerCtx *ctx, const Expr *e, int depth)
{
    if (depth > 32)
        return false;
    switch (e->kind) {
    case EXPR_INT:
        return e->u.int_value >= 0;
    case EXPR_VAR: {
        const Var *v = e->u.var;
        if (v->kind == VAR_BLOCK || v->kind == VAR_SYMBOL)
            return true;
        if (v->kind != VAR_LOOP && v->kind != VAR_LET)
            return false;
        const Expr *def = v->id < ctx->ndefs ? ctx->defs[v->id] : NULL;
        if (!def)                       /* PARALLEL vars start at 0 */
            return v->kind == VAR_LOOP;
        return is_nonneg(ctx, def, depth + 1);
    }
    case EXPR_CALL:
        switch (e->u.call.op) {
        case INTR_THREAD_IDX: case INTR_BLOCK_IDX_X: case INTR_BLOCK_IDX_Y:
        case INTR_BLOCK_IDX_Z: case INTR_LANE_IDX: case INTR_WARP_IDX:
            return true;
        default:
            return false;
        }
    case EXPR_BINARY: {
        const Expr *a = e->u.binary.lhs, *b = e->u.binary.rhs;
        switch (e->u.binary.op) {
        case BIN_ADD: case BIN_MUL: case BIN_DIV: case BIN_MIN:
            return is_nonneg(ctx, a, depth + 1) && is_nonneg(ctx, b, depth + 1);
        case BIN_MAX:
            return is_nonneg(ctx, a, depth + 1) || is_nonneg(ctx, b, depth + 1);
        case BIN_MOD:   /* floor modulo by a positive number */
            return (b->kind == EXPR_INT && b->u.int_value > 0) ||
                   (is_nonneg(ctx, a, depth + 1) &&
                    is_nonneg(ctx, b, depth + 1));
        default:
            return false;
        }
    }
    default:
        return false;
    }
}

static void record_def(void *opaque, Stmt *s)
{
    LowerCtx *ctx = opaque;
    const Var *v = NULL;
    Expr *def = NULL;
    if (s->kind == STMT_LET && s->u.let.var->kind == VAR_LET) {
        v = s->u.let.var;
        def = s->u.let.value;
    } else if (s->kind == STMT_FOR) {
        v = s->u.loop.var;
        /* a descending loop proves nothing: -1 stands for "unknown" */
        def = s->u.loop.step > 0 ? s->u.loop.begin
                                 : ir_int(ctx->k, v->dtype, -1);
    }
    if (v && v->id >= 0 && v->id < ctx->ndefs)
        ctx->defs[v->id] = def;
}

/* ---- edge masks -------------------------------------------------------- */

static void collect_conjuncts(Expr *e, PtrVec *out, Arena *arena)
{
    if (!e)
        return;
    if (e->kind == EXPR_BINARY && e->u.binary.op == BIN_LAND) {
        collect_conjuncts(e->u.binary.lhs, out, arena);
        collect_conjuncts(e->u.binary.rhs, out, arena);
        return;
    }
    vec_push(arena, out, e);
}

/* existing && (idx_0 >= 0) && (idx_0 < shape_0) && ...; a conjunct the
 * predicate already has is not added again, so masking is idempotent. */
static Expr *edge_mask(LowerCtx *ctx, Buffer *b, Expr **indices,
                       Expr *existing)
{
    Kernel *k = ctx->k;
    PtrVec have = {0};
    collect_conjuncts(existing, &have, k->arena);
    Expr *mask = existing;
    for (int d = 0; d < b->rank; d++) {
        Expr *idx = indices[d];
        Expr *shape = ir_copy_expr(k, b->shape[d]);
        if (shape->dtype != idx->dtype)
            shape = ir_cast(k, CAST_CONVERT, idx->dtype, shape);
        Expr *conds[2];
        int n = 0;
        if (!is_nonneg(ctx, idx, 0))
            conds[n++] = ir_binary(k, BIN_GE, ir_copy_expr(k, idx),
                                   ir_int(k, idx->dtype, 0));
        conds[n++] = ir_binary(k, BIN_LT, ir_copy_expr(k, idx), shape);
        for (int i = 0; i < n; i++) {
            bool dup = false;
            for (int j = 0; j < have.count && !dup; j++)
                dup = ir_expr_equal(have.items[j], conds[i]);
            if (!dup)
                mask = pass_and(k, mask, conds[i]);
        }
    }
    return mask;
}

static Expr *mask_load(void *opaque, Expr *e)
{
    LowerCtx *ctx = opaque;
    if (e->kind == EXPR_LOAD && e->u.load.buffer->scope == SCOPE_GLOBAL)
        e->u.load.predicate = edge_mask(ctx, e->u.load.buffer,
                                        e->u.load.indices,
                                        e->u.load.predicate);
    return e;
}

static Stmt *mask_stmt(LowerCtx *ctx, Stmt *s)
{
    if (!s)
        return NULL;
    pass_rewrite_stmt_exprs(s, false, mask_load, ctx);
    switch (s->kind) {
    case STMT_SEQ:
        for (int i = 0; i < s->u.seq.count; i++)
            s->u.seq.items[i] = mask_stmt(ctx, s->u.seq.items[i]);
        break;
    case STMT_FOR:
        s->u.loop.body = mask_stmt(ctx, s->u.loop.body);
        break;
    case STMT_PARALLEL:
        s->u.parallel.body = mask_stmt(ctx, s->u.parallel.body);
        break;
    case STMT_IF:
        s->u.if_.then_body = mask_stmt(ctx, s->u.if_.then_body);
        s->u.if_.else_body = mask_stmt(ctx, s->u.if_.else_body);
        break;
    case STMT_STORE:
        if (s->u.store.buffer->scope == SCOPE_GLOBAL)
            s->u.store.predicate = edge_mask(ctx, s->u.store.buffer,
                                             s->u.store.indices,
                                             s->u.store.predicate);
        break;
    case STMT_ATOMIC:
        /* atomics have no predicate: guard them with an IF */
        if (s->u.atomic.buffer->scope == SCOPE_GLOBAL) {
            Stmt *guard = ir_new_stmt(ctx->k, STMT_IF, s->loc);
            guard->u.if_.cond = edge_mask(ctx, s->u.atomic.buffer,
                                          s->u.atomic.indices, NULL);
            guard->u.if_.then_body = s;
            return guard;
        }
        break;
    default:
        break;
    }
    return s;
}

/* ---- COPY and FILL ----------------------------------------------------- */

/* Indices into r's buffer for one element of the region: start + var on a
 * non-singleton dimension, start on a singleton one. */
static Expr **region_indices(Kernel *k, const Region *r, Var **vars)
{
    Expr **idx = arena_alloc(k->arena, sizeof(Expr *) * IR_MAX_RANK);
    int j = 0;
    for (int d = 0; d < r->buffer->rank; d++) {
        Expr *start = r->start[d] ? ir_copy_expr(k, r->start[d])
                                  : pass_index(k, 0);
        idx[d] = r->extent[d] > 0 ? pass_add(k, start, ir_var(k, vars[j++]))
                                  : start;
    }
    return idx;
}

static Stmt *new_store(Kernel *k, Loc loc, const Region *dst, Var **vars,
                       Expr *value)
{
    Stmt *st = ir_new_stmt(k, STMT_STORE, loc);
    st->u.store.buffer = dst->buffer;
    st->u.store.indices = region_indices(k, dst, vars);
    st->u.store.value = pass_convert(k, value, dst->buffer->dtype);
    return st;
}

/* The element statement of a COPY (store dst = load src) or FILL. */
static Stmt *element_stmt(LowerCtx *ctx, Stmt *s, Var **vars)
{
    Kernel *k = ctx->k;
    if (s->kind == STMT_FILL)
        return new_store(k, s->loc, &s->u.fill.dst, vars,
                         ir_copy_expr(k, s->u.fill.value));
    const Region *src = &s->u.copy.src;
    Expr *value = ir_load(k, src->buffer, region_indices(k, src, vars), NULL);
    value->loc = s->loc;
    return new_store(k, s->loc, &s->u.copy.dst, vars, value);
}

/* Shape of the tile statement; false (after a diagnostic) when a COPY's
 * two regions disagree. */
static bool tile_shape(LowerCtx *ctx, Stmt *s, int64_t shape[IR_MAX_RANK],
                       int *rank)
{
    if (s->kind == STMT_FILL) {
        *rank = pass_region_shape(&s->u.fill.dst, shape);
        return true;
    }
    int64_t other[IR_MAX_RANK];
    *rank = pass_region_shape(&s->u.copy.src, shape);
    int n = pass_region_shape(&s->u.copy.dst, other);
    bool same = n == *rank;
    for (int d = 0; same && d < n; d++)
        same = shape[d] == other[d];
    if (!same) {
        Arena *a = ctx->k->arena;
        diag_error(ctx->diag, s->loc,
                   "copy from '%s' %s to '%s' %s: the shapes differ",
                   s->u.copy.src.buffer->name,
                   pass_format_extents(a, shape, *rank),
                   s->u.copy.dst.buffer->name,
                   pass_format_extents(a, other, n));
        ctx->ok = false;
    }
    return same;
}

/* Block level: one PARALLEL over the region shape.  A single-element
 * region still gets a one-iteration loop, so one thread does the store. */
static Stmt *lower_block_tile_op(LowerCtx *ctx, Stmt *s)
{
    Kernel *k = ctx->k;
    int64_t shape[IR_MAX_RANK];
    int rank;
    if (!tile_shape(ctx, s, shape, &rank))
        return s;
    Stmt *loop = ir_new_stmt(k, STMT_PARALLEL, s->loc);
    loop->u.parallel.rank = rank ? rank : 1;
    for (int d = 0; d < loop->u.parallel.rank; d++) {
        loop->u.parallel.vars[d] =
            ir_new_var(k, "i", PASS_INDEX_TYPE, VAR_LOOP);
        loop->u.parallel.extent[d] = rank ? shape[d] : 1;
    }
    loop->u.parallel.body = element_stmt(ctx, s, loop->u.parallel.vars);
    return loop;
}

/* Inside a PARALLEL body: nested per-thread loops. */
static Stmt *lower_thread_tile_op(LowerCtx *ctx, Stmt *s)
{
    Kernel *k = ctx->k;
    int64_t shape[IR_MAX_RANK];
    int rank;
    if (!tile_shape(ctx, s, shape, &rank))
        return s;
    Var *vars[IR_MAX_RANK];
    for (int d = 0; d < rank; d++)
        vars[d] = ir_new_var(k, "e", PASS_INDEX_TYPE, VAR_LOOP);
    Stmt *body = element_stmt(ctx, s, vars);
    for (int d = rank - 1; d >= 0; d--) {
        Stmt *loop = ir_new_stmt(k, STMT_FOR, s->loc);
        loop->u.loop.var = vars[d];
        loop->u.loop.begin = pass_index(k, 0);
        loop->u.loop.end = pass_index(k, shape[d]);
        loop->u.loop.step = 1;
        loop->u.loop.kind = (d == rank - 1 && shape[d] <= IR_MAX_LANES)
                                ? LOOP_VECTORIZED
                                : LOOP_UNROLL;
        loop->u.loop.body = body;
        body = loop;
    }
    return body;
}

/* One cp.async.bulk.tensor for a TMA copy (docs/hopper.md 2). */
static Stmt *lower_tma_copy(LowerCtx *ctx, Stmt *s)
{
    Kernel *k = ctx->k;
    bool store = s->u.copy.dst.buffer->scope == SCOPE_GLOBAL;
    const Region *global = store ? &s->u.copy.dst : &s->u.copy.src;
    Stmt *t = ir_new_stmt(k, STMT_TMA, s->loc);
    t->u.tma.store = store;
    t->u.tma.smem = store ? s->u.copy.src : s->u.copy.dst;
    t->u.tma.tensor_map = s->u.copy.tensor_map;
    t->u.tma.multicast = s->u.copy.multicast;
    t->u.tma.multicast_dim = s->u.copy.multicast_dim;
    for (int d = 0; d < global->buffer->rank; d++)
        t->u.tma.coords[d] = global->start[d] ? global->start[d] : pass_index(k, 0);
    if (!store)
        t->u.tma.bar = s->u.copy.barrier;
    return t;
}

static Stmt *lower_stmt(LowerCtx *ctx, Stmt *s, bool in_parallel)
{
    if (!s)
        return NULL;
    switch (s->kind) {
    case STMT_SEQ:
        for (int i = 0; i < s->u.seq.count; i++)
            s->u.seq.items[i] = lower_stmt(ctx, s->u.seq.items[i], in_parallel);
        return s;
    case STMT_FOR:
        s->u.loop.body = lower_stmt(ctx, s->u.loop.body, in_parallel);
        return s;
    case STMT_IF:
        s->u.if_.then_body = lower_stmt(ctx, s->u.if_.then_body, in_parallel);
        s->u.if_.else_body = lower_stmt(ctx, s->u.if_.else_body, in_parallel);
        return s;
    case STMT_PARALLEL:
        if (in_parallel) {
            diag_error(ctx->diag, s->loc,
                       "parallel loop nested in a parallel loop");
            ctx->ok = false;
        }
        s->u.parallel.body = lower_stmt(ctx, s->u.parallel.body, true);
        return s;
    case STMT_COPY:
        if (s->u.copy.tensor_map >= 0 && !in_parallel)
            return lower_tma_copy(ctx, s);
        return in_parallel ? lower_thread_tile_op(ctx, s)
                           : lower_block_tile_op(ctx, s);
    case STMT_FILL:
        return in_parallel ? lower_thread_tile_op(ctx, s)
                           : lower_block_tile_op(ctx, s);
    default:
        return s;
    }
}

bool pass_lower_tile_ops(Kernel *k, Diag *diag)
{
    LowerCtx ctx = {.k = k, .diag = diag, .ok = true};
    k->body = lower_stmt(&ctx, k->body, false);
    /* defs are recorded after lowering: the fresh loop vars start at 0 */
    ctx.ndefs = k->nvars;
    ctx.defs = arena_alloc(k->arena, sizeof(Expr *) * (size_t)(k->nvars + 1));
    pass_visit_stmts(k->body, record_def, &ctx);
    k->body = mask_stmt(&ctx, k->body);
    return ctx.ok;
}
