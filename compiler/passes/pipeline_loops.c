/*
 * pipeline_loops.c -- software pipelines over TMA copies.
 *
 * A pipelined loop with S stages keeps S iterations' worth of TMA copies
 * in flight: every shared buffer its TMA copies write gets a leading stage
 * dimension [S, ...] and every access to it in the loop indexes stage
 * s = i % S.  Two mbarrier rings guard the slots: full[s] completes when
 * the copies of an iteration have landed (one expect_tx by the issuing
 * thread, then the transaction bytes), empty[s] when every consumer thread
 * is done with the slot.  Iteration i waits for phase parity (i / S) % 2
 * of its slot, so the protocol is the same in every iteration and a loop
 * of zero or one iterations never waits for a phase no one completes
 * (docs/hopper.md section 3).
 *
 * Warp-specialised pair (warp_specialize made a producer loop with only the
 * copies and a consumer loop with the rest, sharing a pipe_id):
 *
 *   producer: if i >= S { wait empty[s] = p ^ 1 }; expect_tx full[s] = BYTES;
 *             <copies into stage s, barrier full[s]>
 *   consumer: wait full[s] = p; <body on stage s>; arrive empty[s]
 *
 * Otherwise (role both) thread 0 issues iterations 0 .. min(S, n) - 1
 * before the loop, and in iteration i, after every thread's
 * `wait full[s]; body; arrive empty[s]`, waits empty[s] and issues
 * iteration i + S into the same slot.  The copies are the body's skeleton
 * (async_skeleton): the guards around them stay, and BYTES is a select on
 * the guards, so the barrier traffic happens in every iteration whatever
 * the guards say.  A pipelined loop without TMA copies is a serial loop.
 *
 * A pipelined loop inside another loop (a persistent kernel's loop over
 * tiles) counts its iterations on from one run to the next: a mutable
 * base, zero at the top of the kernel, grows by max(trip count, 0) after
 * each run, so the phases stay in step whatever the trip counts are,
 * zero included.  The producer and the consumer of a pair each keep their
 * own base (they run in different threads) and add the same trip counts,
 * so they agree on every iteration's stage and parity.  With the base, a
 * role-both prologue can reuse a slot of the previous run, so it waits
 * for that slot's empty phase like the refills do; the producer half
 * already does (`i >= S` with the global i).
 *
 * With release_lag 1 the consumer keeps iteration i's stage during
 * iteration i + 1 (a gemm with wait = 1 may still read it): at the end of
 * iteration i >= 1 (the global count, base included) it arrives on
 * empty[stage of i - 1].  The last iteration's stage is released by the
 * next run's first iteration (never, after the last run), so the work of
 * the last iteration that the program completes after the loop (its
 * gemm_wait) is done before the slot can be refilled.  The producer half
 * is unchanged (each use of a slot still gets one arrival per consumer
 * thread, in order, so the parities hold); it runs S - 1 iterations ahead
 * instead of S, hence S >= 2.  A role-both loop refills the slot it just
 * released, with iteration i - 1 + S, after that arrival; its prologue
 * issues S - 1 iterations when a previous run's last slot is still held
 * (base > 0), S otherwise.
 *
 * Barriers are initialised once at the top of the kernel by thread 0,
 * followed by fence mbarrier_init and a block barrier (and, with a
 * cluster, a cluster barrier: a peer's multicast may land here from its
 * first iteration on).
 *
 * When a pipe's copies multicast (lower_tma: each CTA of the cluster
 * loads a slice of a shared box into every CTA), a producer writes every
 * CTA's slot, so the slot is free only when the consumers of every CTA
 * are done with it: each consumer warp releases it with arrive_cluster
 * (one arrival on that slot's empty barrier in every CTA) and empty
 * counts warps x CTAs.  full[s] still expects the whole box: its bytes
 * come from every CTA's slice.  A cluster barrier ends the kernel, so no
 * CTA exits while a peer may still arrive on its barriers
 * (docs/hopper.md 11).
 *
 * requires: lower_tma, warp_specialize.  guarantees: no PIPELINED loop
 * remains; every TMA load has its barrier.
 */
#include "async_util.h"

typedef struct {
    Kernel *k;
    Diag *diag;
    bool ok;
    PtrVec loops;        /* PIPELINED loops, pre-order */
    PtrVec nested;       /* parallel to loops: (void *)1 inside another loop */
    Stmt *prefix;        /* allocs and lets that go before the inits */
    Stmt *inits;         /* thread 0's mbarrier inits */
    PtrVec bound;        /* scratch: vars bound or assigned in a body */
    bool multicast;      /* some pipe multicasts: cluster barriers */
    const Var *loop_var;
} PipeCtx;

/* One ring: a role-both loop, or a producer with its consumer. */
typedef struct {
    Stmt *loop, *consumer;
    int64_t stages;
    Buffer *full, *empty;
    PtrVec versioned;
    int multicast;       /* > 1: its copies multicast to that many CTAs,
                            so every CTA's consumers release the slot in
                            every CTA (arrive_cluster) */
    Var *base;           /* nested loops: iterations of earlier runs */
    Var *consumer_base;  /* the same count, kept by the consumer of a pair */
} Pipe;

static void collect_loops(PipeCtx *c, Stmt *s, bool in_loop)
{
    if (!s)
        return;
    switch (s->kind) {
    case STMT_SEQ:
        for (int i = 0; i < s->u.seq.count; i++)
            collect_loops(c, s->u.seq.items[i], in_loop);
        return;
    case STMT_FOR:
        if (s->u.loop.kind == LOOP_PIPELINED) {
            vec_push(c->k->arena, &c->loops, s);
            vec_push(c->k->arena, &c->nested, in_loop ? (void *)1 : NULL);
        }
        collect_loops(c, s->u.loop.body, true);
        return;
    case STMT_IF:
        collect_loops(c, s->u.if_.then_body, in_loop);
        collect_loops(c, s->u.if_.else_body, in_loop);
        return;
    case STMT_PARALLEL:
        collect_loops(c, s->u.parallel.body, true);
        return;
    default:
        return;
    }
}

static bool member(const PtrVec *set, const void *item)
{
    for (int i = 0; i < set->count; i++)
        if (set->items[i] == item)
            return true;
    return false;
}

/* ---- which buffers, and are they used elsewhere ------------------------ */

static void destinations(Kernel *k, const Stmt *s, PtrVec *out)
{
    if (!s)
        return;
    if (s->kind == STMT_SEQ)
        for (int i = 0; i < s->u.seq.count; i++)
            destinations(k, s->u.seq.items[i], out);
    else if (s->kind == STMT_IF) {
        destinations(k, s->u.if_.then_body, out);
        destinations(k, s->u.if_.else_body, out);
    } else if (async_is_pipe_copy(s) && !member(out, s->u.copy.dst.buffer))
        vec_push(k->arena, out, s->u.copy.dst.buffer);
}

/* The CTAs the pipe copies of a skeleton multicast to (0: none). */
static int skeleton_multicast(const Stmt *s)
{
    if (!s)
        return 0;
    int most = 0;
    if (s->kind == STMT_SEQ) {
        for (int i = 0; i < s->u.seq.count; i++) {
            int n = skeleton_multicast(s->u.seq.items[i]);
            most = n > most ? n : most;
        }
    } else if (s->kind == STMT_IF) {
        int a = skeleton_multicast(s->u.if_.then_body);
        int b = skeleton_multicast(s->u.if_.else_body);
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
        if (member(set, e->u.load.buffer))
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
static const Stmt *touching(const Stmt *s, const PtrVec *set, const Stmt *skip1,
                            const Stmt *skip2)
{
    if (!s || s == skip1 || s == skip2)
        return NULL;
    const Stmt *hit = NULL;
    switch (s->kind) {
    case STMT_SEQ:
        for (int i = 0; i < s->u.seq.count && !hit; i++)
            hit = touching(s->u.seq.items[i], set, skip1, skip2);
        return hit;
    case STMT_FOR:
        return touching(s->u.loop.body, set, skip1, skip2);
    case STMT_PARALLEL:
        return touching(s->u.parallel.body, set, skip1, skip2);
    case STMT_IF:
        hit = touching(s->u.if_.then_body, set, skip1, skip2);
        return hit ? hit : touching(s->u.if_.else_body, set, skip1, skip2);
    case STMT_LET: return expr_reads(s->u.let.value, set) ? s : NULL;
    case STMT_ASSIGN: return expr_reads(s->u.assign.value, set) ? s : NULL;
    case STMT_STORE:
        return member(set, s->u.store.buffer) || expr_reads(s->u.store.value, set) ? s : NULL;
    case STMT_ATOMIC:
        return member(set, s->u.atomic.buffer) || expr_reads(s->u.atomic.value, set) ? s : NULL;
    case STMT_EVAL: return expr_reads(s->u.eval.value, set) ? s : NULL;
    case STMT_COPY:
        return member(set, s->u.copy.src.buffer) || member(set, s->u.copy.dst.buffer) ? s : NULL;
    case STMT_FILL: return member(set, s->u.fill.dst.buffer) ? s : NULL;
    case STMT_GEMM:
        return member(set, s->u.gemm.a.buffer) || member(set, s->u.gemm.b.buffer) ? s : NULL;
    case STMT_REDUCE:
        return member(set, s->u.reduce.src) || member(set, s->u.reduce.dst) ? s : NULL;
    default:
        return NULL;
    }
}

/* Does the body write a buffer of set other than by pipe copies? */
static bool other_writes(const Stmt *s, const PtrVec *set)
{
    if (!s)
        return false;
    switch (s->kind) {
    case STMT_SEQ:
        for (int i = 0; i < s->u.seq.count; i++)
            if (other_writes(s->u.seq.items[i], set))
                return true;
        return false;
    case STMT_FOR: return other_writes(s->u.loop.body, set);
    case STMT_PARALLEL: return other_writes(s->u.parallel.body, set);
    case STMT_IF:
        return other_writes(s->u.if_.then_body, set) ||
               other_writes(s->u.if_.else_body, set);
    case STMT_STORE: return member(set, s->u.store.buffer);
    case STMT_ATOMIC: return member(set, s->u.atomic.buffer);
    case STMT_FILL: return member(set, s->u.fill.dst.buffer);
    case STMT_COPY:
        return !async_is_pipe_copy(s) && member(set, s->u.copy.dst.buffer);
    default: return false;
    }
}

/* Vars bound or assigned inside a body: their values are those of the
 * current iteration, unknown when a later iteration's copies are issued. */
static void bound_vars(void *opaque, Stmt *s)
{
    PipeCtx *c = opaque;
    if (s->kind == STMT_LET)
        vec_push(c->k->arena, &c->bound, s->u.let.var);
    else if (s->kind == STMT_ASSIGN)
        vec_push(c->k->arena, &c->bound, s->u.assign.var);
    else if (s->kind == STMT_FOR)
        vec_push(c->k->arena, &c->bound, s->u.loop.var);
    else if (s->kind == STMT_PARALLEL)
        for (int d = 0; d < s->u.parallel.rank; d++)
            vec_push(c->k->arena, &c->bound, s->u.parallel.vars[d]);
}

static bool known_ahead(void *opaque, const Var *v)
{
    PipeCtx *c = opaque;
    return v == c->loop_var || !member(&c->bound, v);
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
    if (e->kind != EXPR_LOAD || !member(r->versioned, e->u.load.buffer))
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
    if (!member(r->versioned, b))
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
    if (!member(r->versioned, g->buffer))
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

/* ---- building the protocol --------------------------------------------- */

static Stmt *let(Kernel *k, Var *var, Expr *value, Loc loc)
{
    Stmt *s = ir_new_stmt(k, STMT_LET, loc);
    s->u.let.var = var;
    s->u.let.value = value;
    return s;
}

/* a - b, without the `- 0` */
static Expr *minus(Kernel *k, Expr *a, const Expr *b)
{
    if (b->kind == EXPR_INT && b->u.int_value == 0)
        return a;
    return ir_binary(k, BIN_SUB, a, ir_copy_expr(k, b));
}

/* Number of iterations of the loop: ceildiv(end - begin, step). */
static Expr *trip_count(Kernel *k, const Stmt *loop)
{
    Expr *span = minus(k, ir_copy_expr(k, loop->u.loop.end), loop->u.loop.begin);
    int64_t step = loop->u.loop.step;
    if (step == 1)
        return span;
    return pass_div(k, pass_add(k, span, pass_index(k, step - 1)), pass_index(k, step));
}

/* Iteration index of the loop variable's value, counted on from base. */
static Expr *iteration(Kernel *k, const Stmt *loop, Expr *value, Var *base)
{
    Expr *i = minus(k, value, loop->u.loop.begin);
    i = pass_div(k, i, pass_index(k, loop->u.loop.step));
    return base ? pass_add(k, ir_var(k, base), i) : i;
}

/* let it = ...; let stage = it % S; let parity = it / S % 2 (appended). */
static void stage_lets(Kernel *k, Stmt *out, const Pipe *p, Expr *it, Var **stage,
                       Var **parity, Var **iter, Loc loc)
{
    Var *i = ir_new_var(k, "it", PASS_INDEX_TYPE, VAR_LET);
    *stage = ir_new_var(k, "stage", PASS_INDEX_TYPE, VAR_LET);
    ir_seq_append(k, out, let(k, i, it, loc));
    ir_seq_append(k, out, let(k, *stage, pass_mod(k, ir_var(k, i), pass_index(k, p->stages)), loc));
    if (parity) {
        *parity = ir_new_var(k, "parity", PASS_INDEX_TYPE, VAR_LET);
        Expr *round = pass_div(k, ir_var(k, i), pass_index(k, p->stages));
        ir_seq_append(k, out, let(k, *parity, pass_mod(k, round, pass_index(k, 2)), loc));
    }
    if (iter)
        *iter = i;
}

static Stmt *as_seq(Kernel *k, Stmt *s)
{
    if (!s)
        return ir_seq(k, NULL, 0);
    return s->kind == STMT_SEQ ? s : ir_seq(k, &s, 1);
}

static void append_all(Kernel *k, Stmt *out, Stmt *items)
{
    items = as_seq(k, items);
    for (int i = 0; i < items->u.seq.count; i++)
        ir_seq_append(k, out, items->u.seq.items[i]);
}

static Expr *bytes_or_zero(Kernel *k, Expr *bytes)
{
    return bytes ? bytes : pass_index(k, 0);
}

/* Allocates the rings and queues their init. */
static void make_rings(PipeCtx *c, Pipe *p, Loc loc)
{
    Kernel *k = c->k;
    Stmt *alloc;
    p->full = async_new_mbarriers(k, "full", p->stages, loc, &alloc);
    ir_seq_append(k, c->prefix, alloc);
    p->empty = async_new_mbarriers(k, "empty", p->stages, loc, &alloc);
    ir_seq_append(k, c->prefix, alloc);
    p->full->mbarrier_synchronized = p->empty->mbarrier_synchronized = true;
    Var *slot = ir_new_var(k, "slot", PASS_INDEX_TYPE, VAR_LOOP);
    Stmt *body = ir_seq(k, NULL, 0);
    ir_seq_append(k, body, async_mbarrier(k, MBAR_INIT, p->full, ir_var(k, slot),
                                          pass_index(k, 1), loc));
    /* a multicast slot is released by every warp of every CTA (one
     * arrive_cluster per warp reaches each CTA), else by every thread */
    int64_t releases = p->multicast ? (int64_t)(k->compute_threads / 32) * p->multicast
                                    : k->compute_threads;
    ir_seq_append(k, body, async_mbarrier(k, MBAR_INIT, p->empty, ir_var(k, slot),
                                          pass_index(k, releases), loc));
    Stmt *loop = ir_new_stmt(k, STMT_FOR, loc);
    loop->u.loop.var = slot;
    loop->u.loop.begin = pass_index(k, 0);
    loop->u.loop.end = pass_index(k, p->stages);
    loop->u.loop.step = 1;
    loop->u.loop.kind = LOOP_UNROLL;
    loop->u.loop.body = body;
    ir_seq_append(k, c->inits, loop);
    if (p->base)
        ir_seq_append(k, c->prefix, let(k, p->base, pass_index(k, 0), loc));
    if (p->consumer_base)
        ir_seq_append(k, c->prefix, let(k, p->consumer_base, pass_index(k, 0), loc));
}

/* base = base + max(trip count of loop, 0), after a run of loop. */
static Stmt *advance_base(Kernel *k, Var *base, const Stmt *loop)
{
    Stmt *add = ir_new_stmt(k, STMT_ASSIGN, loop->loc);
    add->u.assign.var = base;
    add->u.assign.value = pass_add(k, ir_var(k, base),
                                   ir_binary(k, BIN_MAX, trip_count(k, loop),
                                             pass_index(k, 0)));
    return add;
}

/* loop; base += its trips (what replaces a nested loop of a pair). */
static Stmt *with_advance(Kernel *k, Stmt *loop, Var *base)
{
    Stmt *out = ir_seq(k, &loop, 1);
    ir_seq_append(k, out, advance_base(k, base, loop));
    return out;
}

/* Adds the stage dimension to every versioned buffer (after re-indexing:
 * the walkers read index arrays of the old rank). */
static void add_stage_dims(Pipe *p, Kernel *k, bool synchronized)
{
    for (int i = 0; i < p->versioned.count; i++) {
        Buffer *b = p->versioned.items[i];
        for (int d = b->rank; d > 0; d--)
            b->shape[d] = b->shape[d - 1];
        b->shape[0] = pass_index(k, p->stages);
        b->rank++;
        b->mbarrier_synchronized = synchronized;
    }
}

static void serialize(Stmt *loop)
{
    loop->u.loop.kind = LOOP_SERIAL;
    loop->u.loop.stages = 0;
    loop->u.loop.release_lag = 0;
    loop->u.loop.role = PIPE_BOTH;
    loop->u.loop.pipe_id = 0;
}

/* The consumers' release of a slot: arrive, or arrive_cluster when the
 * slot is filled by multicasts (a producer in any CTA writes it). */
static Stmt *release_slot(Kernel *k, const Pipe *p, Var *stage, Loc loc)
{
    return async_mbarrier(k, p->multicast ? MBAR_ARRIVE_CLUSTER : MBAR_ARRIVE, p->empty,
                          ir_var(k, stage), NULL, loc);
}

/* Lagged release in global iteration it: `if it >= 1 { let stage of
 * it - 1; [let parity of it - 1;] arrive empty[that stage] }`; the caller
 * may append to the IF's then body, which sees the lets (parity may be
 * NULL). */
static Stmt *release_previous(Kernel *k, const Pipe *p, Var *it, Var **stage,
                              Var **parity, Loc loc)
{
    Stmt *body = ir_seq(k, NULL, 0);
    int64_t S = p->stages;
    Var *prev = ir_new_var(k, "it_prev", PASS_INDEX_TYPE, VAR_LET);
    ir_seq_append(k, body, let(k, prev, ir_binary(k, BIN_SUB, ir_var(k, it),
                                                  pass_index(k, 1)), loc));
    *stage = ir_new_var(k, "stage_prev", PASS_INDEX_TYPE, VAR_LET);
    ir_seq_append(k, body, let(k, *stage, pass_mod(k, ir_var(k, prev), pass_index(k, S)),
                               loc));
    if (parity) {
        *parity = ir_new_var(k, "parity_prev", PASS_INDEX_TYPE, VAR_LET);
        Expr *round = pass_div(k, ir_var(k, prev), pass_index(k, S));
        ir_seq_append(k, body, let(k, *parity, pass_mod(k, round, pass_index(k, 2)), loc));
    }
    ir_seq_append(k, body, release_slot(k, p, *stage, loc));
    Expr *later = ir_binary(k, BIN_GE, ir_var(k, it), pass_index(k, 1));
    return async_if(k, later, body, loc);
}

/* Role both: returns what replaces the loop (prologue, loop, base update). */
static Stmt *pipeline_both(PipeCtx *c, Pipe *p, Stmt *skeleton)
{
    Kernel *k = c->k;
    Stmt *loop = p->loop;
    Loc loc = loop->loc;
    Var *k_var = loop->u.loop.var;
    int64_t S = p->stages, step = loop->u.loop.step;
    Expr *bytes = async_skeleton_bytes(k, skeleton);

    /* every copy of a tree that reads a versioned buffer is made here,
     * before re-indexing */
    Var *j = ir_new_var(k, "j", PASS_INDEX_TYPE, VAR_LOOP);
    Expr *k_of_j = pass_add(k, ir_copy_expr(k, loop->u.loop.begin),
                            pass_mul(k, ir_var(k, j), pass_index(k, step)));
    Stmt *first = ir_substitute_stmt(k, skeleton, k_var, k_of_j);
    Expr *first_bytes = ir_substitute(k, bytes_or_zero(k, bytes), k_var, k_of_j);
    /* a lagged loop refills, at the end of iteration i, the slot of i - 1 */
    int64_t lag = loop->u.loop.release_lag;
    Expr *k_ahead = pass_add(k, ir_var(k, k_var), pass_index(k, (S - lag) * step));
    Stmt *refill = ir_substitute_stmt(k, skeleton, k_var, k_ahead);
    Expr *refill_bytes = ir_substitute(k, bytes_or_zero(k, bytes), k_var, k_ahead);
    Stmt *body = async_strip(k, loop->u.loop.body);

    /* prologue: thread 0 issues iterations 0 .. min(S, n) - 1 */
    Stmt *pro_body = ir_seq(k, NULL, 0);
    Var *pro_stage, *pro_parity, *pro_it;
    Expr *j_global = p->base ? pass_add(k, ir_var(k, p->base), ir_var(k, j)) : ir_var(k, j);
    stage_lets(k, pro_body, p, j_global, &pro_stage, p->base ? &pro_parity : NULL,
               &pro_it, loc);
    if (p->base) { /* the slot's previous use may be the last run's */
        Expr *reused = ir_binary(k, BIN_GE, ir_var(k, pro_it), pass_index(k, S));
        Stmt *wait = async_mbarrier(k, MBAR_WAIT, p->empty, ir_var(k, pro_stage),
                                    ir_binary(k, BIN_XOR, ir_var(k, pro_parity),
                                              pass_index(k, 1)),
                                    loc);
        ir_seq_append(k, pro_body, async_if(k, reused, as_seq(k, wait), loc));
    }
    ir_seq_append(k, pro_body, async_mbarrier(k, MBAR_EXPECT_TX, p->full,
                                              ir_var(k, pro_stage), first_bytes, loc));
    append_all(k, pro_body, first);
    Stmt *pro_loop = ir_new_stmt(k, STMT_FOR, loc);
    pro_loop->u.loop.var = j;
    pro_loop->u.loop.begin = pass_index(k, 0);
    Expr *ahead_count = pass_index(k, S);
    if (lag && p->base) /* the previous run's last slot is held until iteration base ends */
        ahead_count = ir_binary(k, BIN_SUB, ahead_count,
                                ir_binary(k, BIN_MIN, ir_var(k, p->base), pass_index(k, 1)));
    pro_loop->u.loop.end = ir_binary(k, BIN_MIN, ahead_count, trip_count(k, loop));
    pro_loop->u.loop.step = 1;
    pro_loop->u.loop.kind = LOOP_SERIAL;
    pro_loop->u.loop.body = pro_body;

    /* the loop */
    Stmt *out_body = ir_seq(k, NULL, 0);
    Var *stage, *parity, *it;
    stage_lets(k, out_body, p, iteration(k, loop, ir_var(k, k_var), p->base), &stage,
               &parity, &it, loc);
    ir_seq_append(k, out_body, async_mbarrier(k, MBAR_WAIT, p->full, ir_var(k, stage),
                                              ir_var(k, parity), loc));
    append_all(k, out_body, body);
    Reindex r = {.k = k, .versioned = &p->versioned, .stage = pro_stage, .full = p->full};
    reindex(&r, pro_body);
    r.stage = stage;
    reindex(&r, out_body);

    /* release a slot (this iteration's, or the previous one's with a
     * lag), and thread 0 refills it with the iteration S on */
    Var *free_stage = stage, *free_parity = parity;
    Stmt *release = NULL;
    if (lag)
        release = release_previous(k, p, it, &free_stage, &free_parity, loc);
    else
        release = release_slot(k, p, stage, loc);
    Stmt *issue = ir_seq(k, NULL, 0);
    ir_seq_append(k, issue, async_mbarrier(k, MBAR_WAIT, p->empty, ir_var(k, free_stage),
                                           ir_var(k, free_parity), loc));
    ir_seq_append(k, issue, async_mbarrier(k, MBAR_EXPECT_TX, p->full,
                                           ir_var(k, free_stage), refill_bytes, loc));
    append_all(k, issue, refill);
    r.stage = free_stage;
    reindex(&r, issue);
    Expr *ahead = ir_binary(k, BIN_LT, ir_copy_expr(k, k_ahead),
                            ir_copy_expr(k, loop->u.loop.end));
    Stmt *refill_if = async_if(k, async_thread_is(k, 0), async_if(k, ahead, issue, loc), loc);
    if (lag) { /* inside the `not the first iteration` guard */
        ir_seq_append(k, release->u.if_.then_body, refill_if);
        ir_seq_append(k, out_body, release);
    } else {
        ir_seq_append(k, out_body, release);
        ir_seq_append(k, out_body, refill_if);
    }
    add_stage_dims(p, k, !other_writes(body, &p->versioned));

    loop->u.loop.body = out_body;
    serialize(loop);
    Stmt *out = ir_seq(k, NULL, 0);
    ir_seq_append(k, out, async_if(k, async_thread_is(k, 0), pro_loop, loc));
    ir_seq_append(k, out, loop);
    if (p->base)
        ir_seq_append(k, out, advance_base(k, p->base, loop));
    return out;
}

/* Warp-specialised pair: rewrites both loops in place. */
static void pipeline_pair(PipeCtx *c, Pipe *p)
{
    Kernel *k = c->k;
    Stmt *prod = p->loop, *cons = p->consumer;
    Loc loc = prod->loc;
    Expr *bytes = async_skeleton_bytes(k, prod->u.loop.body);

    Stmt *pbody = ir_seq(k, NULL, 0);
    Var *pstage, *pparity, *pit;
    stage_lets(k, pbody, p, iteration(k, prod, ir_var(k, prod->u.loop.var), p->base),
               &pstage, &pparity, &pit, loc);
    Expr *used = ir_binary(k, BIN_GE, ir_var(k, pit), pass_index(k, p->stages));
    Stmt *wait = async_mbarrier(k, MBAR_WAIT, p->empty, ir_var(k, pstage),
                                ir_binary(k, BIN_XOR, ir_var(k, pparity), pass_index(k, 1)),
                                loc);
    ir_seq_append(k, pbody, async_if(k, used, as_seq(k, wait), loc));
    ir_seq_append(k, pbody, async_mbarrier(k, MBAR_EXPECT_TX, p->full, ir_var(k, pstage),
                                           bytes_or_zero(k, bytes), loc));
    append_all(k, pbody, prod->u.loop.body);

    Stmt *cbody = ir_seq(k, NULL, 0);
    Var *cstage, *cparity, *cit;
    stage_lets(k, cbody, p, iteration(k, cons, ir_var(k, cons->u.loop.var),
                                      p->consumer_base),
               &cstage, &cparity, &cit, loc);
    ir_seq_append(k, cbody, async_mbarrier(k, MBAR_WAIT, p->full, ir_var(k, cstage),
                                           ir_var(k, cparity), loc));
    append_all(k, cbody, cons->u.loop.body);
    if (cons->u.loop.release_lag) {
        Var *prev_stage;
        ir_seq_append(k, cbody, release_previous(k, p, cit, &prev_stage, NULL, loc));
    } else {
        ir_seq_append(k, cbody, release_slot(k, p, cstage, loc));
    }

    Reindex r = {.k = k, .versioned = &p->versioned, .stage = pstage, .full = p->full};
    reindex(&r, pbody);
    r.stage = cstage;
    reindex(&r, cbody);
    add_stage_dims(p, k, true);
    prod->u.loop.body = pbody;
    cons->u.loop.body = cbody;
    serialize(prod);
    serialize(cons);
}

/* ---- driver ------------------------------------------------------------ */

/* Replaces role-both loops by their rewritten sequence (spliced). */
static Stmt *replace(PipeCtx *c, Stmt *s, Stmt *const *from, Stmt *const *to, int n)
{
    if (!s)
        return NULL;
    for (int i = 0; i < n; i++)
        if (s == from[i]) { /* a pipelined loop nested in this one */
            s->u.loop.body = replace(c, s->u.loop.body, from, to, n);
            return to[i];
        }
    switch (s->kind) {
    case STMT_SEQ: {
        Stmt *out = ir_seq(c->k, NULL, 0);
        out->loc = s->loc;
        for (int i = 0; i < s->u.seq.count; i++) {
            Stmt *item = replace(c, s->u.seq.items[i], from, to, n);
            if (item->kind == STMT_SEQ && item != s->u.seq.items[i])
                append_all(c->k, out, item);
            else
                ir_seq_append(c->k, out, item);
        }
        return out;
    }
    case STMT_FOR: s->u.loop.body = replace(c, s->u.loop.body, from, to, n); return s;
    case STMT_PARALLEL:
        s->u.parallel.body = replace(c, s->u.parallel.body, from, to, n);
        return s;
    case STMT_IF:
        s->u.if_.then_body = replace(c, s->u.if_.then_body, from, to, n);
        s->u.if_.else_body = replace(c, s->u.if_.else_body, from, to, n);
        return s;
    default:
        return s;
    }
}

/* Is loop (one of c->loops) inside another loop? */
static bool nested_loop(const PipeCtx *c, const Stmt *loop)
{
    for (int i = 0; i < c->loops.count; i++)
        if (c->loops.items[i] == loop)
            return c->nested.items[i] != NULL;
    return false;
}

static Stmt *find_consumer(PipeCtx *c, const Stmt *producer)
{
    for (int i = 0; i < c->loops.count; i++) {
        Stmt *s = c->loops.items[i];
        if (s->u.loop.role == PIPE_CONSUMER && s->u.loop.pipe_id == producer->u.loop.pipe_id)
            return s;
    }
    return NULL;
}

bool pass_pipeline_loops(Kernel *k, Diag *diag)
{
    PipeCtx c = {.k = k, .diag = diag, .ok = true};
    collect_loops(&c, k->body, false);
    if (c.loops.count == 0)
        return true;
    c.prefix = ir_seq(k, NULL, 0);
    c.inits = ir_seq(k, NULL, 0);
    PtrVec from = {0}, to = {0};
    for (int i = 0; i < c.loops.count; i++) {
        Stmt *loop = c.loops.items[i];
        PipeRole role = loop->u.loop.role;
        if (role == PIPE_CONSUMER || loop->u.loop.kind != LOOP_PIPELINED)
            continue; /* done with its producer */
        Pipe p = {.loop = loop, .stages = loop->u.loop.stages};
        if (role == PIPE_PRODUCER) {
            p.consumer = find_consumer(&c, loop);
            if (!p.consumer)
                ice("producer loop %s without its consumer", loop->u.loop.var->name);
        }
        if (p.stages < 1) {
            pass_error(diag, &c.ok, loop->loc, "a pipelined loop needs stages >= 1");
            continue;
        }
        const Stmt *lagged = p.consumer ? p.consumer : loop;
        if (lagged->u.loop.release_lag && p.stages < 2) {
            pass_error(diag, &c.ok, loop->loc, "a pipelined loop with release_lag "
                       "1 needs stages >= 2");
            continue;
        }
        Stmt *skeleton = role == PIPE_PRODUCER ? loop->u.loop.body
                                               : async_skeleton(k, loop->u.loop.body);
        destinations(k, skeleton, &p.versioned);
        p.multicast = skeleton_multicast(skeleton);
        if (p.multicast && k->compute_threads % 32 != 0) {
            pass_error(diag, &c.ok, loop->loc, "a pipelined loop whose copies multicast "
                       "needs whole warps (%d threads)", k->compute_threads);
            continue;
        }
        c.multicast = c.multicast || p.multicast;
        if (p.versioned.count == 0) { /* nothing asynchronous to overlap */
            serialize(loop);
            if (p.consumer)
                serialize(p.consumer);
            continue;
        }
        const Stmt *outside = touching(k->body, &p.versioned, loop, p.consumer);
        if (outside) {
            pass_error(diag, &c.ok, outside->loc, "'%s' is filled by TMA in a "
                       "pipelined loop and also used outside it",
                       ((Buffer *)p.versioned.items[0])->name);
            continue;
        }
        bool room = true;
        for (int b = 0; b < p.versioned.count && room; b++)
            if (((Buffer *)p.versioned.items[b])->rank >= IR_MAX_RANK) {
                pass_error(diag, &c.ok, loop->loc, "'%s' has no room for a stage "
                           "dimension", ((Buffer *)p.versioned.items[b])->name);
                room = false;
            }
        if (!room)
            continue;
        if (role == PIPE_BOTH) {
            c.bound.count = 0;
            pass_visit_stmts(loop->u.loop.body, bound_vars, &c);
            c.loop_var = loop->u.loop.var;
            const Var *missing = async_missing_var(skeleton, known_ahead, &c);
            if (missing) {
                pass_error(diag, &c.ok, loop->loc, "a TMA copy in this pipelined "
                           "loop depends on '%s', which is not known before its "
                           "iteration (compute it with a let from the loop "
                           "variable)", missing->name);
                continue;
            }
        }
        if (c.nested.items[i])
            p.base = ir_new_var(k, "pipe_base", PASS_INDEX_TYPE, VAR_MUTABLE);
        if (p.consumer && nested_loop(&c, p.consumer))
            p.consumer_base = ir_new_var(k, "pipe_base", PASS_INDEX_TYPE, VAR_MUTABLE);
        if ((p.base != NULL) != (p.consumer_base != NULL) && p.consumer) {
            pass_error(diag, &c.ok, loop->loc, "the producer and the consumer of a "
                       "pipeline must both be in a loop, or both not");
            continue;
        }
        make_rings(&c, &p, loop->loc);
        if (role == PIPE_PRODUCER) {
            pipeline_pair(&c, &p);
            if (p.base) {
                vec_push(k->arena, &from, p.loop);
                vec_push(k->arena, &to, with_advance(k, p.loop, p.base));
                vec_push(k->arena, &from, p.consumer);
                vec_push(k->arena, &to, with_advance(k, p.consumer, p.consumer_base));
            }
        } else {
            vec_push(k->arena, &from, loop);
            vec_push(k->arena, &to, pipeline_both(&c, &p, skeleton));
        }
    }
    if (!c.ok)
        return false;
    if (from.count)
        k->body = replace(&c, k->body, (Stmt *const *)from.items,
                          (Stmt *const *)to.items, from.count);
    if (c.inits->u.seq.count)
        async_prepend_init(k, c.prefix->u.seq.items, c.prefix->u.seq.count, c.inits,
                           k->body->loc);
    if (c.multicast) /* no CTA leaves while its peers may still write into
                        its shared memory or arrive on its barriers */
        ir_seq_append(k, k->body, async_fence(k, FENCE_CLUSTER_SYNC, 0, k->body->loc));
    return true;
}
