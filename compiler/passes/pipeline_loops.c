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
 * Which buffers are versioned, and their re-indexing with the stage, are
 * in pipe_buffers.c; this file builds the rings and the protocol.
 *
 * requires: lower_tma, warp_specialize.  guarantees: no PIPELINED loop
 * remains; every TMA load has its barrier.
 */
#include "pipe_buffers.h"

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

/* ---- what a copy issued ahead may read -------------------------------- */

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
    return v == c->loop_var || !pipe_member(&c->bound, v);
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
    pipe_reindex(k, &p->versioned, pro_stage, p->full, pro_body);
    pipe_reindex(k, &p->versioned, stage, p->full, out_body);

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
    pipe_reindex(k, &p->versioned, free_stage, p->full, issue);
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
    pipe_add_stage_dims(k, &p->versioned, p->stages,
                        !pipe_other_writes(body, &p->versioned));

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

    pipe_reindex(k, &p->versioned, pstage, p->full, pbody);
    pipe_reindex(k, &p->versioned, cstage, p->full, cbody);
    pipe_add_stage_dims(k, &p->versioned, p->stages, true);
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
        pipe_destinations(k, skeleton, &p.versioned);
        p.multicast = pipe_multicast(skeleton);
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
        const Stmt *outside = pipe_touching(k->body, &p.versioned, loop, p.consumer);
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
