/*
 * pipe_buffers.c -- the shared buffers of a software pipeline (see
 * pipe_buffers.h; the pass is pipeline_loops.c).
 *
 * A pipelined loop keeps S iterations of TMA copies in flight, so every
 * shared buffer those copies write needs S slots.  This file finds those
 * buffers (the destinations of the skeleton's pipe copies) and the CTAs
 * the copies multicast to, looks for other uses of the buffers (outside
 * the loop, which the pass rejects, or other writes in the body, which
 * cost the buffers their mbarrier_synchronized mark), and then versions
 * them: every access in a rewritten body gains the stage as its leading
 * index, every pipe copy completes on full[stage], and only then does each
 * buffer gain its leading [S] dimension, because the walkers read index
 * arrays of the old rank.  It requires the copies that lower_tma marked
 * for a pipeline (async_is_pipe_copy); it changes no buffer outside the
 * set it is given.  The rings and the barrier protocol stay in the pass.
 */
#include "pipe_buffers.h"

bool pipe_member(const PtrVec *set, const void *item)
{
    for (int i = 0; i < set->count; i++)
        if (set->items[i] == item)
            return true;
    return false;
}

/* ---- which buffers, and are they used elsewhere ------------------------ */

void pipe_destinations(Kernel *k, const Stmt *s, PtrVec *out)
{
    if (!s)
        return;
    if (s->kind == STMT_SEQ)
        for (int i = 0; i < s->u.seq.count; i++)
            pipe_destinations(k, s->u.seq.items[i], out);
    else if (s->kind == STMT_IF) {
        pipe_destinations(k, s->u.if_.then_body, out);
        pipe_destinations(k, s->u.if_.else_body, out);
    } else if (async_is_pipe_copy(s) && !pipe_member(out, s->u.copy.dst.buffer))
        vec_push(k->arena, out, s->u.copy.dst.buffer);
}

/* The CTAs the pipe copies of a skeleton multicast to (0: none). */
int pipe_multicast(const Stmt *s)
{
    if (!s)
        return 0;
    int most = 0;
    if (s->kind == STMT_SEQ) {
        for (int i = 0; i < s->u.seq.count; i++) {
            int n = pipe_multicast(s->u.seq.items[i]);
            most = n > most ? n : most;
        }
    } else if (s->kind == STMT_IF) {
        int a = pipe_multicast(s->u.if_.then_body);
        int b = pipe_multicast(s->u.if_.else_body);
        most = a > b ? a : b;
    } else if (async_is_pipe_copy(s)) {
        most = s->u.copy.multicast;
    }
    return most;
}

static bool expr_reads(const Expr *e, const PtrVec *set)
{
    if (!e)
        return false;
    switch (e->kind) {
    case EXPR_LOAD:
        if (pipe_member(set, e->u.load.buffer))
            return true;
        for (int d = 0; d < e->u.load.buffer->rank; d++)
            if (expr_reads(e->u.load.indices[d], set))
                return true;
        return expr_reads(e->u.load.predicate, set);
    case EXPR_UNARY: return expr_reads(e->u.unary.operand, set);
    case EXPR_BINARY:
        return expr_reads(e->u.binary.lhs, set) || expr_reads(e->u.binary.rhs, set);
    case EXPR_SELECT:
        return expr_reads(e->u.select.cond, set) ||
               expr_reads(e->u.select.then_value, set) ||
               expr_reads(e->u.select.else_value, set);
    case EXPR_CAST: return expr_reads(e->u.cast.value, set);
    case EXPR_CALL:
        for (int i = 0; i < e->u.call.nargs; i++)
            if (expr_reads(e->u.call.args[i], set))
                return true;
        return false;
    case EXPR_RAMP: return expr_reads(e->u.ramp.base, set);
    case EXPR_BROADCAST: return expr_reads(e->u.broadcast.value, set);
    default: return false;
    }
}

/* The first statement outside skip1/skip2 that touches a buffer of set. */
const Stmt *pipe_touching(const Stmt *s, const PtrVec *set, const Stmt *skip1,
                          const Stmt *skip2)
{
    if (!s || s == skip1 || s == skip2)
        return NULL;
    const Stmt *hit = NULL;
    switch (s->kind) {
    case STMT_SEQ:
        for (int i = 0; i < s->u.seq.count && !hit; i++)
            hit = pipe_touching(s->u.seq.items[i], set, skip1, skip2);
        return hit;
    case STMT_FOR:
        return pipe_touching(s->u.loop.body, set, skip1, skip2);
    case STMT_PARALLEL:
        return pipe_touching(s->u.parallel.body, set, skip1, skip2);
    case STMT_IF:
        hit = pipe_touching(s->u.if_.then_body, set, skip1, skip2);
        return hit ? hit : pipe_touching(s->u.if_.else_body, set, skip1, skip2);
    case STMT_LET: return expr_reads(s->u.let.value, set) ? s : NULL;
    case STMT_ASSIGN: return expr_reads(s->u.assign.value, set) ? s : NULL;
    case STMT_STORE:
        return pipe_member(set, s->u.store.buffer) || expr_reads(s->u.store.value, set) ? s : NULL;
    case STMT_ATOMIC:
        return pipe_member(set, s->u.atomic.buffer) ||
               expr_reads(s->u.atomic.value, set) ? s : NULL;
    case STMT_EVAL: return expr_reads(s->u.eval.value, set) ? s : NULL;
    case STMT_COPY:
        return pipe_member(set, s->u.copy.src.buffer) ||
               pipe_member(set, s->u.copy.dst.buffer) ? s : NULL;
    case STMT_FILL: return pipe_member(set, s->u.fill.dst.buffer) ? s : NULL;
    case STMT_GEMM:
        return pipe_member(set, s->u.gemm.a.buffer) ||
               pipe_member(set, s->u.gemm.b.buffer) ? s : NULL;
    case STMT_REDUCE:
        return pipe_member(set, s->u.reduce.src) || pipe_member(set, s->u.reduce.dst) ? s : NULL;
    default:
        return NULL;
    }
}

/* Does the body write a buffer of set other than by pipe copies? */
bool pipe_other_writes(const Stmt *s, const PtrVec *set)
{
    if (!s)
        return false;
    switch (s->kind) {
    case STMT_SEQ:
        for (int i = 0; i < s->u.seq.count; i++)
            if (pipe_other_writes(s->u.seq.items[i], set))
                return true;
        return false;
    case STMT_FOR: return pipe_other_writes(s->u.loop.body, set);
    case STMT_PARALLEL: return pipe_other_writes(s->u.parallel.body, set);
    case STMT_IF:
        return pipe_other_writes(s->u.if_.then_body, set) ||
               pipe_other_writes(s->u.if_.else_body, set);
    case STMT_STORE: return pipe_member(set, s->u.store.buffer);
    case STMT_ATOMIC: return pipe_member(set, s->u.atomic.buffer);
    case STMT_FILL: return pipe_member(set, s->u.fill.dst.buffer);
    case STMT_COPY:
        return !async_is_pipe_copy(s) && pipe_member(set, s->u.copy.dst.buffer);
    default: return false;
    }
}

/* ---- re-indexing with the stage ---------------------------------------- */

typedef struct {
    Kernel *k;
    const PtrVec *versioned;
    Var *stage;
    Buffer *full;        /* pipe copies complete on full[stage] */
} Reindex;

static Expr *stage_load(void *opaque, Expr *e)
{
    Reindex *r = opaque;
    if (e->kind != EXPR_LOAD || !pipe_member(r->versioned, e->u.load.buffer))
        return e;
    int rank = e->u.load.buffer->rank;
    Expr **indices = arena_alloc(r->k->arena, sizeof(Expr *) * (size_t)(rank + 1));
    indices[0] = ir_var(r->k, r->stage);
    for (int d = 0; d < rank; d++)
        indices[d + 1] = e->u.load.indices[d];
    e->u.load.indices = indices;
    return e;
}

static Expr *re_expr(Reindex *r, Expr *e)
{
    return pass_rewrite_expr(e, stage_load, r);
}

static Expr **re_indices(Reindex *r, Buffer *b, Expr **indices)
{
    for (int d = 0; d < b->rank; d++)
        indices[d] = re_expr(r, indices[d]);
    if (!pipe_member(r->versioned, b))
        return indices;
    Expr **out = arena_alloc(r->k->arena, sizeof(Expr *) * (size_t)(b->rank + 1));
    out[0] = ir_var(r->k, r->stage);
    for (int d = 0; d < b->rank; d++)
        out[d + 1] = indices[d];
    return out;
}

static void re_region(Reindex *r, Region *g)
{
    if (!g->buffer)
        return;
    for (int d = 0; d < g->buffer->rank; d++)
        g->start[d] = re_expr(r, g->start[d]);
    if (!pipe_member(r->versioned, g->buffer))
        return;
    for (int d = g->buffer->rank; d > 0; d--) {
        g->start[d] = g->start[d - 1];
        g->extent[d] = g->extent[d - 1];
    }
    g->start[0] = ir_var(r->k, r->stage);
    g->extent[0] = 0;
}

static void reindex(Reindex *r, Stmt *s)
{
    if (!s)
        return;
    switch (s->kind) {
    case STMT_SEQ:
        for (int i = 0; i < s->u.seq.count; i++)
            reindex(r, s->u.seq.items[i]);
        return;
    case STMT_LET: s->u.let.value = re_expr(r, s->u.let.value); return;
    case STMT_ASSIGN: s->u.assign.value = re_expr(r, s->u.assign.value); return;
    case STMT_STORE:
        s->u.store.value = re_expr(r, s->u.store.value);
        s->u.store.predicate = re_expr(r, s->u.store.predicate);
        s->u.store.indices = re_indices(r, s->u.store.buffer, s->u.store.indices);
        return;
    case STMT_ATOMIC:
        s->u.atomic.value = re_expr(r, s->u.atomic.value);
        s->u.atomic.indices = re_indices(r, s->u.atomic.buffer, s->u.atomic.indices);
        return;
    case STMT_FOR:
        s->u.loop.begin = re_expr(r, s->u.loop.begin);
        s->u.loop.end = re_expr(r, s->u.loop.end);
        reindex(r, s->u.loop.body);
        return;
    case STMT_PARALLEL: reindex(r, s->u.parallel.body); return;
    case STMT_IF:
        s->u.if_.cond = re_expr(r, s->u.if_.cond);
        reindex(r, s->u.if_.then_body);
        reindex(r, s->u.if_.else_body);
        return;
    case STMT_COPY:
        if (async_is_pipe_copy(s) && r->full) {
            Region *bar = &s->u.copy.barrier;
            bar->buffer = r->full;
            bar->start[0] = ir_var(r->k, r->stage);
            bar->extent[0] = 0;
        }
        re_region(r, &s->u.copy.src);
        re_region(r, &s->u.copy.dst);
        return;
    case STMT_FILL:
        s->u.fill.value = re_expr(r, s->u.fill.value);
        re_region(r, &s->u.fill.dst);
        return;
    case STMT_GEMM:
        re_region(r, &s->u.gemm.a);
        re_region(r, &s->u.gemm.b);
        return;
    case STMT_EVAL: s->u.eval.value = re_expr(r, s->u.eval.value); return;
    case STMT_ASSERT: s->u.assert_.cond = re_expr(r, s->u.assert_.cond); return;
    case STMT_MBARRIER:
        s->u.mbarrier.value = re_expr(r, s->u.mbarrier.value);
        re_region(r, &s->u.mbarrier.bar);
        return;
    default: /* no tile-level access to a shared buffer in the others */
        return;
    }
}

void pipe_reindex(Kernel *k, const PtrVec *versioned, Var *stage, Buffer *full,
                  Stmt *s)
{
    Reindex r = {.k = k, .versioned = versioned, .stage = stage, .full = full};
    reindex(&r, s);
}

/* Adds the stage dimension to every versioned buffer (after re-indexing:
 * the walkers read index arrays of the old rank). */
void pipe_add_stage_dims(Kernel *k, const PtrVec *versioned, int64_t stages,
                         bool synchronized)
{
    for (int i = 0; i < versioned->count; i++) {
        Buffer *b = versioned->items[i];
        for (int d = b->rank; d > 0; d--)
            b->shape[d] = b->shape[d - 1];
        b->shape[0] = pass_index(k, stages);
        b->rank++;
        b->mbarrier_synchronized = synchronized;
    }
}
