/*
 * warp_specialize.c -- splits the block into consumer warpgroups and one
 * producer warpgroup around a pipelined loop of TMA copies.
 *
 * When every shared input of a pipelined loop arrives by TMA, the copies
 * need one thread and almost no registers, while the gemm wants every
 * register it can get.  So the block grows by one warpgroup (threads
 * [C, C+128)) that gives registers away (setmaxnreg_dec 40) and lets one
 * thread issue the copies; the C consumer threads take the registers
 * (setmaxnreg_inc) and run everything else (docs/hopper.md section 3):
 *
 *     <shared allocs>
 *     if thread_idx() >= C  [warp_specialized] {
 *       fence setmaxnreg_dec 40
 *       if thread_idx() == C { <lets the copies need>
 *         for k in pipelined(...) role producer pipe 0 { <the TMA copies> } }
 *     } else {
 *       fence setmaxnreg_inc R
 *       <statements before the loop>
 *       for k in pipelined(...) role consumer pipe 0 { <everything else> }
 *       <statements after the loop>
 *     }
 *
 * The producer loop holds the body's skeleton (async_skeleton: the copies,
 * the guards around them, the lets they read); pipeline_loops then adds
 * the full/empty mbarrier protocol to the pair.  Block-wide barriers
 * already in the consumer branch become the named barrier `1, C`, the one
 * the consumers can reach without the producer.
 *
 * The pipelined loop may sit inside serial loops (a persistent kernel's
 * loop over tiles): then the producer gets the skeleton of the nest (each
 * enclosing loop's header and the lets before the inner loop that the
 * copies need) and the consumers the whole original nest, so the producer
 * runs on into the next tile's K blocks while the consumers finish the
 * current tile's epilogue.  Both halves run the same trip counts, which
 * pipeline_loops relies on to keep stage and parity in step.
 *
 * A loop qualifies when it is the kernel's only pipelined loop, sits at the
 * top of the launch body or in a nest of serial loops there, every copy in
 * its body writing shared memory is a pipelined TMA copy, nothing else in
 * the body writes those buffers, the copies and the enclosing loops'
 * bounds read only values the producer can compute, and the block has a
 * multiple of 128 threads (at most 896).  Hint off: nothing happens; on:
 * a loop that does not qualify is an error giving the reason.
 *
 * requires: lower_tma.  guarantees: at most one warp_specialized IF, at
 * the top of the body; Kernel.threads = compute_threads + 128 and
 * min_blocks = 1 when it is there.
 */
#include "async_util.h"

#define PRODUCER_THREADS 128
#define PRODUCER_REGISTERS 40
#define MAX_REGISTERS 240
#define REGISTER_FILE 65536
#define MAX_BLOCK_THREADS 1024
#define MAX_NEST 16

/* The way from the launch body down to the pipelined loop: level d is the
 * sequence seq[d] and the index of the statement on the way in it; every
 * level but the last holds a serial loop there. */
typedef struct {
    Stmt *seq[MAX_NEST];
    int index[MAX_NEST];
    int depth;
} Path;

typedef struct {
    Kernel *k;
    int loops;           /* pipelined loops in the kernel */
    Stmt *loop;          /* the first one */
    PtrVec dup_vars;     /* lets before the loop the producer recomputes */
    PtrVec loop_vars;    /* the pipelined loop's and the enclosing loops' */
    Path path;
} WsCtx;

static void count_loops(void *opaque, Stmt *s)
{
    WsCtx *w = opaque;
    if (s->kind == STMT_FOR && s->u.loop.kind == LOOP_PIPELINED) {
        if (!w->loop)
            w->loop = s;
        w->loops++;
    }
}

static bool member(const PtrVec *set, const void *item)
{
    for (int i = 0; i < set->count; i++)
        if (set->items[i] == item)
            return true;
    return false;
}

/* Buffers the loop's pipe copies write. */
static void tma_destinations(Kernel *k, const Stmt *s, PtrVec *out)
{
    if (!s)
        return;
    if (s->kind == STMT_SEQ)
        for (int i = 0; i < s->u.seq.count; i++)
            tma_destinations(k, s->u.seq.items[i], out);
    else if (s->kind == STMT_IF) {
        tma_destinations(k, s->u.if_.then_body, out);
        tma_destinations(k, s->u.if_.else_body, out);
    } else if (async_is_pipe_copy(s) && !member(out, s->u.copy.dst.buffer))
        vec_push(k->arena, out, s->u.copy.dst.buffer);
}

/* Why the body's writes of shared memory are not all pipe copies, or
 * NULL.  `top` is false inside nested loops, where pipe copies are not. */
static const char *body_problem(Kernel *k, const Stmt *s, const PtrVec *dst,
                                bool top)
{
    if (!s)
        return NULL;
    const char *why = NULL;
    switch (s->kind) {
    case STMT_SEQ:
        for (int i = 0; i < s->u.seq.count && !why; i++)
            why = body_problem(k, s->u.seq.items[i], dst, top);
        return why;
    case STMT_IF:
        why = body_problem(k, s->u.if_.then_body, dst, top);
        return why ? why : body_problem(k, s->u.if_.else_body, dst, top);
    case STMT_FOR:
        return body_problem(k, s->u.loop.body, dst, false);
    case STMT_PARALLEL:
        return body_problem(k, s->u.parallel.body, dst, false);
    case STMT_COPY: {
        const Buffer *b = s->u.copy.dst.buffer;
        if (b->scope != SCOPE_SHARED)
            return NULL;
        if (top && async_is_pipe_copy(s))
            return NULL;
        return arena_printf(k->arena, "the copy '%s' -> '%s' in the loop is "
                            "not a pipelined TMA copy", s->u.copy.src.buffer->name,
                            b->name);
    }
    case STMT_STORE:
        if (member(dst, s->u.store.buffer))
            return arena_printf(k->arena, "'%s' is written by the TMA copies "
                                "and by other statements", s->u.store.buffer->name);
        return NULL;
    case STMT_FILL:
        if (member(dst, s->u.fill.dst.buffer))
            return arena_printf(k->arena, "'%s' is written by the TMA copies "
                                "and by other statements", s->u.fill.dst.buffer->name);
        return NULL;
    case STMT_ATOMIC:
        if (member(dst, s->u.atomic.buffer))
            return arena_printf(k->arena, "'%s' is written by the TMA copies "
                                "and by other statements", s->u.atomic.buffer->name);
        return NULL;
    default:
        return NULL;
    }
}

static bool producer_knows(void *opaque, const Var *v)
{
    WsCtx *w = opaque;
    if (v->kind == VAR_SYMBOL || v->kind == VAR_SCALAR || v->kind == VAR_BLOCK)
        return true;
    return member(&w->loop_vars, v) || member(&w->dup_vars, v);
}

static bool expr_known(WsCtx *w, const Expr *e)
{
    /* a one-statement skeleton checks exactly the expression */
    Stmt probe = {.kind = STMT_IF};
    probe.u.if_.cond = (Expr *)e;
    return async_missing_var(&probe, producer_knows, w) == NULL;
}

/* Finds the way down to w->loop through sequences and serial loops
 * (w->path); false when it is elsewhere (under an IF, in a parallel). */
static bool find_path(WsCtx *w, Stmt *seq, int depth)
{
    if (!seq || seq->kind != STMT_SEQ || depth >= MAX_NEST)
        return false;
    for (int i = 0; i < seq->u.seq.count; i++) {
        Stmt *s = seq->u.seq.items[i];
        bool found = s == w->loop ||
                     (s->kind == STMT_FOR && s->u.loop.kind == LOOP_SERIAL &&
                      find_path(w, s->u.loop.body, depth + 1));
        if (found) {
            w->path.seq[depth] = seq;
            w->path.index[depth] = i;
            if (s == w->loop)
                w->path.depth = depth + 1;
            return true;
        }
    }
    return false;
}

/* The statement on the way at level d: an enclosing loop, or the
 * pipelined loop at the last level. */
static Stmt *path_item(const Path *p, int d)
{
    return p->seq[d]->u.seq.items[p->index[d]];
}

static void find_return(void *opaque, Stmt *s)
{
    bool *found = opaque;
    if (s->kind == STMT_RETURN)
        *found = true;
}

/* Does a thread leave before it is done with the pipeline (a return
 * before the way down at the top level, in an enclosing loop or in the
 * pipelined loop)?  The producer would wait for its arrivals forever. */
static bool early_return(WsCtx *w)
{
    bool found = false;
    const Path *p = &w->path;
    for (int i = 0; i < p->index[0]; i++)
        pass_visit_stmts(p->seq[0]->u.seq.items[i], find_return, &found);
    pass_visit_stmts(path_item(p, 0), find_return, &found);
    return found;
}

/* Adds the lets of level d before the way down that the producer can
 * compute, and checks the bounds of the loop on the way. */
static const char *walk_level(WsCtx *w, int d)
{
    Kernel *k = w->k;
    Stmt *seq = w->path.seq[d];
    for (int i = 0; i < w->path.index[d]; i++) {
        Stmt *s = seq->u.seq.items[i];
        if (s->kind == STMT_LET && s->u.let.var->kind == VAR_LET &&
            async_uniform_scalar(s->u.let.value) && expr_known(w, s->u.let.value))
            vec_push(k->arena, &w->dup_vars, s->u.let.var);
        if (d > 0 && s->kind == STMT_ALLOC && s->u.alloc.buffer->scope == SCOPE_SHARED)
            return arena_printf(k->arena, "the shared buffer '%s' is declared inside "
                                "the loop around the pipelined loop",
                                s->u.alloc.buffer->name);
    }
    Stmt *loop = path_item(&w->path, d);
    if (!expr_known(w, loop->u.loop.begin) || !expr_known(w, loop->u.loop.end))
        return d + 1 < w->path.depth
                   ? "the bounds of the loop around the pipelined loop depend on "
                     "values the producer warpgroup does not compute"
                   : "the loop bounds depend on values the producer warpgroup does "
                     "not compute";
    vec_push(k->arena, &w->loop_vars, loop->u.loop.var);
    return NULL;
}

/* Why the loop does not qualify, or NULL (w->path set when it does). */
static const char *qualify(WsCtx *w, Stmt **skeleton)
{
    Kernel *k = w->k;
    Arena *a = k->arena;
    pass_visit_stmts(k->body, count_loops, w);
    if (w->loops == 0)
        return "the kernel has no pipelined loop";
    if (w->loops > 1)
        return arena_printf(a, "the kernel has %d pipelined loops (warp "
                            "specialisation handles one)", w->loops);
    if (!find_path(w, k->body, 0))
        return "the pipelined loop is neither at the top level of the launch "
               "body nor in serial loops there";
    int C = k->compute_threads;
    if (C % PRODUCER_THREADS != 0)
        return arena_printf(a, "the block has %d threads, not a multiple of %d",
                            C, PRODUCER_THREADS);
    if (C + PRODUCER_THREADS > MAX_BLOCK_THREADS)
        return arena_printf(a, "the block has %d threads; with the producer "
                            "warpgroup it would exceed %d", C, MAX_BLOCK_THREADS);
    PtrVec dst = {0};
    tma_destinations(k, w->loop->u.loop.body, &dst);
    if (dst.count == 0)
        return "no copy in the pipelined loop is a TMA copy";
    const char *why = body_problem(k, w->loop->u.loop.body, &dst, true);
    if (why)
        return why;
    if (early_return(w))
        return "a thread may return before the pipelined loop is done, leaving "
               "the producer warpgroup waiting";
    for (int d = 0; d < w->path.depth; d++)
        if ((why = walk_level(w, d)))
            return why;
    *skeleton = async_skeleton(k, w->loop->u.loop.body);
    const Var *missing = async_missing_var(*skeleton, producer_knows, w);
    if (missing)
        return arena_printf(a, "a TMA copy depends on '%s', which the producer "
                            "warpgroup does not compute", missing->name);
    return NULL;
}

/* Block-wide barriers of the consumer branch become `bar.sync 1, C`. */
static void name_barriers(void *opaque, Stmt *s)
{
    Kernel *k = opaque;
    if (s->kind == STMT_BARRIER && !s->u.barrier.warp_only && s->u.barrier.id == 0) {
        s->u.barrier.id = 1;
        s->u.barrier.threads = k->compute_threads;
    }
}

static Stmt *pipelined_loop(Kernel *k, const Stmt *loop, PipeRole role,
                            Stmt *body)
{
    Stmt *s = ir_new_stmt(k, STMT_FOR, loop->loc);
    s->u.loop = loop->u.loop;
    s->u.loop.role = role;
    s->u.loop.pipe_id = 0;
    s->u.loop.body = body;
    return s;
}

/* The producer's part of level d and below: the lets it recomputes, then
 * the enclosing loop's header around the next level, or the producer loop
 * with the skeleton.  Shares nodes with the original (copied by the
 * caller). */
static Stmt *producer_nest(WsCtx *w, int d, Stmt *skeleton)
{
    Kernel *k = w->k;
    Stmt *out = ir_seq(k, NULL, 0);
    Stmt *seq = w->path.seq[d];
    for (int i = 0; i < w->path.index[d]; i++) {
        Stmt *s = seq->u.seq.items[i];
        if (s->kind == STMT_LET && member(&w->dup_vars, s->u.let.var))
            ir_seq_append(k, out, s);
    }
    Stmt *item = path_item(&w->path, d);
    if (d + 1 == w->path.depth) {
        ir_seq_append(k, out, pipelined_loop(k, item, PIPE_PRODUCER, skeleton));
        return out;
    }
    Stmt *loop = ir_new_stmt(k, STMT_FOR, item->loc);
    loop->u.loop = item->u.loop;
    loop->u.loop.body = producer_nest(w, d + 1, skeleton);
    ir_seq_append(k, out, loop);
    return out;
}

static void split(WsCtx *w, Stmt *skeleton)
{
    Kernel *k = w->k;
    Stmt *body = k->body, *loop = w->loop;
    Loc loc = loop->loc;
    int C = k->compute_threads;
    int index = w->path.index[0];
    Stmt *top = ir_seq(k, NULL, 0);
    top->loc = body->loc;
    Stmt *consumer = ir_seq(k, NULL, 0);
    int registers = (REGISTER_FILE - PRODUCER_THREADS * PRODUCER_REGISTERS) / C / 8 * 8;
    if (registers > MAX_REGISTERS)
        registers = MAX_REGISTERS;
    ir_seq_append(k, consumer, async_fence(k, FENCE_SETMAXNREG_INC, registers, loc));
    /* the skeleton shares nodes with the consumer's body: copy it (and the
     * lets and loops, whose vars are cloned) before the consumer's copies
     * go */
    Stmt *producer = ir_copy_stmt(k, producer_nest(w, 0, skeleton));
    /* the consumers run the original nest with the consumer loop in place
     * of the pipelined one */
    Path *p = &w->path;
    p->seq[p->depth - 1]->u.seq.items[p->index[p->depth - 1]] =
        pipelined_loop(k, loop, PIPE_CONSUMER, async_strip(k, loop->u.loop.body));
    for (int i = 0; i < body->u.seq.count; i++) {
        Stmt *s = body->u.seq.items[i];
        bool shared_alloc = i < index && s->kind == STMT_ALLOC &&
                            s->u.alloc.buffer->scope == SCOPE_SHARED;
        ir_seq_append(k, shared_alloc ? top : consumer, s);
    }
    pass_visit_stmts(consumer, name_barriers, k);

    Stmt *producer_branch = ir_seq(k, NULL, 0);
    ir_seq_append(k, producer_branch,
                  async_fence(k, FENCE_SETMAXNREG_DEC, PRODUCER_REGISTERS, loc));
    ir_seq_append(k, producer_branch, async_if(k, async_thread_is(k, C), producer, loc));
    Stmt *split_if = ir_new_stmt(k, STMT_IF, loc);
    split_if->u.if_.cond = ir_binary(k, BIN_GE,
                                     ir_call(k, INTR_THREAD_IDX, PASS_INDEX_TYPE, NULL, 0),
                                     pass_index(k, C));
    split_if->u.if_.then_body = producer_branch;
    split_if->u.if_.else_body = consumer;
    split_if->u.if_.warp_specialized = true;
    ir_seq_append(k, top, split_if);
    k->body = top;
    k->threads = C + PRODUCER_THREADS;
    k->min_blocks = 1;
}

static void find_split(void *opaque, Stmt *s)
{
    bool *found = opaque;
    if (s->kind == STMT_IF && s->u.if_.warp_specialized)
        *found = true;
}

bool pass_warp_specialize(Kernel *k, Diag *diag)
{
    if (k->hint_warp_specialize == HINT_OFF || !k->body)
        return true;
    bool done = false;
    pass_visit_stmts(k->body, find_split, &done);
    if (done)
        return true;
    WsCtx w = {.k = k};
    Stmt *skeleton = NULL;
    const char *why = qualify(&w, &skeleton);
    if (why) {
        if (k->hint_warp_specialize == HINT_ON) {
            diag_error(diag, w.loop ? w.loop->loc : k->loc,
                       "warp_specialize = on, but %s", why);
            return false;
        }
        return true;
    }
    split(&w, skeleton);
    return true;
}
