/*
 * insert_barriers.c -- bar.sync between conflicting shared accesses.
 *
 * A shared buffer written by one statement and read by a later one (RAW),
 * or read and then overwritten (WAR), needs a block-wide
 * barrier in between unless one is already there: the two statements may
 * run on different threads.  The pass scans every block-level sequence
 * with the set of buffers read and written since the last barrier
 * ("pending"), and puts a BARRIER before the first statement that
 * conflicts with it.  It does not try to prove that the same thread
 * touches the same elements: the transpose, the one kernel with shared
 * memory so far, needs its single barrier anyway.  Two writes in a row
 * (WAW) are not a hazard here: tile statements write disjoint elements
 * from different threads, and a barrier per copy iteration would cost
 * more than any such race is worth guarding (TVM's storage sync does the
 * same).  Atomics are a third kind of access: two atomic updates of one
 * buffer commute, so they need no barrier between them (a histogram loop
 * would otherwise get one per update), but an atomic still conflicts with
 * a plain read or write of the buffer on either side of it.
 *
 * Barriers only go where every thread of the block arrives: a statement
 * inside a thread-dependent IF or loop is treated as one unit, and the
 * barrier goes before the outermost block-level statement holding it.  A
 * block-level compound (a loop with uniform bounds, an IF on a uniform
 * condition) whose accesses as a whole conflict with pending gets the
 * barrier in front of it rather than inside, so a patch loop gets one
 * barrier, not one per iteration.  Loop bodies are scanned twice: the
 * second scan starts from what the first left pending, which catches
 * hazards around the back edge.
 *
 * The asynchronous units (docs/hopper.md 2-3).  Buffers whose every
 * ordering is carried by mbarriers (mbarrier_synchronized: the stages of a
 * pipeline and its full/empty rings) are left alone.  A TMA load is a write
 * by the issuing thread, but only for write-after-read: the threads that
 * read the data wait on its mbarrier first, which orders the read after
 * the write; likewise an expect_tx "writes" its mbarrier and a wait reads
 * it, so a thread cannot re-arm a barrier another thread still waits on.
 * A TMA store and a wgmma read their shared operands through the async
 * proxy: a barrier that orders threads' writes before such a read gets
 * `fence proxy_async` in front of it.  In the consumer branch of a
 * warp_specialized IF the barrier is the named `bar.sync 1, C` (the
 * producer warpgroup never arrives at barrier 0 there); the producer
 * branch gets none.
 *
 * requires: KSTATE_THREAD.  A kernel without shared memory is unchanged.
 */
#include "ir.h"

#include <string.h>

#define MAX_BUFFERS 32

typedef struct {
    Buffer *reads[MAX_BUFFERS], *writes[MAX_BUFFERS], *atomics[MAX_BUFFERS];
    int nreads, nwrites, natomics;
    /* of a statement only, never pending: TMA loads and expect_tx (write
     * after read only) and async-proxy reads (TMA store, wgmma: also in
     * reads) */
    Buffer *async_writes[MAX_BUFFERS], *async_reads[MAX_BUFFERS];
    int nasync_writes, nasync_reads;
} Pending;

typedef struct {
    Kernel *k;
    bool *nonuniform; /* by Var.id */
    int capacity;
    bool changed;
    int barrier_id, barrier_threads; /* the barrier to insert: 0, 0 = block */
} Syncer;

/* ------------------------------------------------------------------ */
/* which values differ between threads                                 */
/* ------------------------------------------------------------------ */

static bool *var_slot(Syncer *z, const Var *v)
{
    if (v->id < 0) return NULL;
    if (v->id >= z->capacity) {
        int cap = z->capacity ? z->capacity : 64;
        while (cap <= v->id) cap *= 2;
        bool *n = arena_alloc(z->k->arena, sizeof(bool) * (size_t)cap);
        if (z->capacity) memcpy(n, z->nonuniform, sizeof(bool) * (size_t)z->capacity);
        z->nonuniform = n;
        z->capacity = cap;
    }
    return &z->nonuniform[v->id];
}

static void mark(Syncer *z, const Var *v)
{
    bool *slot = var_slot(z, v);
    if (slot && !*slot) {
        *slot = true;
        z->changed = true;
    }
}

static bool uniform(Syncer *z, const Expr *e)
{
    if (!e) return true;
    switch (e->kind) {
    case EXPR_VAR: {
        bool *slot = var_slot(z, e->u.var);
        return !slot || !*slot;
    }
    case EXPR_LOAD:
        for (int d = 0; d < e->u.load.buffer->rank; d++)
            if (!uniform(z, e->u.load.indices[d])) return false;
        return uniform(z, e->u.load.predicate);
    case EXPR_UNARY: return uniform(z, e->u.unary.operand);
    case EXPR_BINARY: return uniform(z, e->u.binary.lhs) && uniform(z, e->u.binary.rhs);
    case EXPR_SELECT:
        return uniform(z, e->u.select.cond) && uniform(z, e->u.select.then_value) &&
               uniform(z, e->u.select.else_value);
    case EXPR_CAST: return uniform(z, e->u.cast.value);
    case EXPR_CALL:
        if (ir_intrinsic_flags(e->u.call.op) & INTR_THREAD) return false;
        for (int i = 0; i < e->u.call.nargs; i++)
            if (!uniform(z, e->u.call.args[i])) return false;
        return true;
    case EXPR_RAMP: return uniform(z, e->u.ramp.base);
    case EXPR_BROADCAST: return uniform(z, e->u.broadcast.value);
    default: return true;
    }
}

static void find_nonuniform(Syncer *z, const Stmt *s, bool divergent)
{
    if (!s) return;
    switch (s->kind) {
    case STMT_SEQ:
        for (int i = 0; i < s->u.seq.count; i++) find_nonuniform(z, s->u.seq.items[i], divergent);
        return;
    case STMT_LET:
        if (!uniform(z, s->u.let.value) || (divergent && s->u.let.var->kind == VAR_MUTABLE))
            mark(z, s->u.let.var);
        return;
    case STMT_ASSIGN:
        if (divergent || !uniform(z, s->u.assign.value)) mark(z, s->u.assign.var);
        return;
    case STMT_FOR: {
        bool d = divergent || !uniform(z, s->u.loop.begin) || !uniform(z, s->u.loop.end);
        if (d) mark(z, s->u.loop.var);
        find_nonuniform(z, s->u.loop.body, d);
        return;
    }
    case STMT_IF: {
        bool d = divergent || !uniform(z, s->u.if_.cond);
        find_nonuniform(z, s->u.if_.then_body, d);
        find_nonuniform(z, s->u.if_.else_body, d);
        return;
    }
    default: return;
    }
}

/* ------------------------------------------------------------------ */
/* shared accesses of a statement                                      */
/* ------------------------------------------------------------------ */

static void add(Buffer **set, int *n, Buffer *b)
{
    if (b->mbarrier_synchronized) return;
    for (int i = 0; i < *n; i++)
        if (set[i] == b) return;
    if (*n < MAX_BUFFERS) set[(*n)++] = b;
}

static void expr_accesses(const Expr *e, Pending *acc)
{
    if (!e) return;
    switch (e->kind) {
    case EXPR_LOAD:
        if (e->u.load.buffer->scope == SCOPE_SHARED) add(acc->reads, &acc->nreads, e->u.load.buffer);
        for (int d = 0; d < e->u.load.buffer->rank; d++) expr_accesses(e->u.load.indices[d], acc);
        expr_accesses(e->u.load.predicate, acc);
        return;
    case EXPR_UNARY: expr_accesses(e->u.unary.operand, acc); return;
    case EXPR_BINARY:
        expr_accesses(e->u.binary.lhs, acc);
        expr_accesses(e->u.binary.rhs, acc);
        return;
    case EXPR_SELECT:
        expr_accesses(e->u.select.cond, acc);
        expr_accesses(e->u.select.then_value, acc);
        expr_accesses(e->u.select.else_value, acc);
        return;
    case EXPR_CAST: expr_accesses(e->u.cast.value, acc); return;
    case EXPR_CALL:
        for (int i = 0; i < e->u.call.nargs; i++) expr_accesses(e->u.call.args[i], acc);
        return;
    case EXPR_RAMP: expr_accesses(e->u.ramp.base, acc); return;
    case EXPR_BROADCAST: expr_accesses(e->u.broadcast.value, acc); return;
    default: return;
    }
}

static void stmt_accesses(const Stmt *s, Pending *acc)
{
    if (!s) return;
    switch (s->kind) {
    case STMT_SEQ:
        for (int i = 0; i < s->u.seq.count; i++) stmt_accesses(s->u.seq.items[i], acc);
        return;
    case STMT_LET: expr_accesses(s->u.let.value, acc); return;
    case STMT_ASSIGN: expr_accesses(s->u.assign.value, acc); return;
    case STMT_STORE:
        if (s->u.store.buffer->scope == SCOPE_SHARED) add(acc->writes, &acc->nwrites, s->u.store.buffer);
        for (int d = 0; d < s->u.store.buffer->rank; d++) expr_accesses(s->u.store.indices[d], acc);
        expr_accesses(s->u.store.value, acc);
        expr_accesses(s->u.store.predicate, acc);
        return;
    case STMT_ATOMIC:
        if (s->u.atomic.buffer->scope == SCOPE_SHARED)
            add(acc->atomics, &acc->natomics, s->u.atomic.buffer);
        for (int d = 0; d < s->u.atomic.buffer->rank; d++) expr_accesses(s->u.atomic.indices[d], acc);
        expr_accesses(s->u.atomic.value, acc);
        return;
    case STMT_FOR:
        expr_accesses(s->u.loop.begin, acc);
        expr_accesses(s->u.loop.end, acc);
        stmt_accesses(s->u.loop.body, acc);
        return;
    case STMT_IF:
        expr_accesses(s->u.if_.cond, acc);
        stmt_accesses(s->u.if_.then_body, acc);
        stmt_accesses(s->u.if_.else_body, acc);
        return;
    case STMT_EVAL: expr_accesses(s->u.eval.value, acc); return;
    case STMT_ASSERT: expr_accesses(s->u.assert_.cond, acc); return;
    case STMT_TMA: {
        Buffer *b = s->u.tma.smem.buffer;
        if (s->u.tma.store) {
            add(acc->reads, &acc->nreads, b);
            add(acc->async_reads, &acc->nasync_reads, b);
        } else {
            add(acc->async_writes, &acc->nasync_writes, b);
        }
        return;
    }
    case STMT_MBARRIER: {
        Buffer *b = s->u.mbarrier.bar.buffer;
        expr_accesses(s->u.mbarrier.value, acc);
        switch (s->u.mbarrier.op) {
        case MBAR_INIT: add(acc->writes, &acc->nwrites, b); return;
        case MBAR_EXPECT_TX: add(acc->async_writes, &acc->nasync_writes, b); return;
        case MBAR_WAIT: add(acc->reads, &acc->nreads, b); return;
        default: add(acc->atomics, &acc->natomics, b); return; /* arrivals commute */
        }
    }
    case STMT_WGMMA:
        expr_accesses(s->u.wgmma.scale_d, acc);
        if (s->u.wgmma.a.buffer->scope == SCOPE_SHARED) {
            add(acc->reads, &acc->nreads, s->u.wgmma.a.buffer);
            add(acc->async_reads, &acc->nasync_reads, s->u.wgmma.a.buffer);
        }
        add(acc->reads, &acc->nreads, s->u.wgmma.b.buffer);
        add(acc->async_reads, &acc->nasync_reads, s->u.wgmma.b.buffer);
        return;
    default: return;
    }
}

static bool member(Buffer *const *set, int n, const Buffer *b)
{
    for (int i = 0; i < n; i++)
        if (set[i] == b) return true;
    return false;
}

/* Would accesses `acc` race with what is pending?  RAW, WAR, and an
 * atomic after (or before) a plain access; never atomic after atomic.
 * *fence: an async-proxy read of a buffer with pending generic writes. */
static bool conflicts(const Pending *pending, const Pending *acc, bool *fence)
{
    *fence = false;
    for (int i = 0; i < acc->nasync_reads; i++)
        if (member(pending->writes, pending->nwrites, acc->async_reads[i]) ||
            member(pending->atomics, pending->natomics, acc->async_reads[i]))
            *fence = true;
    for (int i = 0; i < acc->nasync_writes; i++)
        if (member(pending->reads, pending->nreads, acc->async_writes[i]) ||
            member(pending->atomics, pending->natomics, acc->async_writes[i]))
            return true;
    for (int i = 0; i < acc->nreads; i++)
        if (member(pending->writes, pending->nwrites, acc->reads[i]) ||
            member(pending->atomics, pending->natomics, acc->reads[i]))
            return true;
    for (int i = 0; i < acc->nwrites; i++)
        if (member(pending->reads, pending->nreads, acc->writes[i]) ||
            member(pending->atomics, pending->natomics, acc->writes[i]))
            return true;
    for (int i = 0; i < acc->natomics; i++)
        if (member(pending->reads, pending->nreads, acc->atomics[i]) ||
            member(pending->writes, pending->nwrites, acc->atomics[i]))
            return true;
    return false;
}

static void merge(Pending *into, const Pending *from)
{
    for (int i = 0; i < from->nreads; i++) add(into->reads, &into->nreads, from->reads[i]);
    for (int i = 0; i < from->nwrites; i++) add(into->writes, &into->nwrites, from->writes[i]);
    for (int i = 0; i < from->natomics; i++)
        add(into->atomics, &into->natomics, from->atomics[i]);
}

/* ------------------------------------------------------------------ */
/* placement                                                           */
/* ------------------------------------------------------------------ */

static Stmt *sync_stmt(Syncer *z, Stmt *s, Pending *pending);
static Stmt *sync_seq(Syncer *z, Stmt *s, Pending *pending);

static bool block_level_compound(Syncer *z, const Stmt *s)
{
    if (s->kind == STMT_FOR)
        return uniform(z, s->u.loop.begin) && uniform(z, s->u.loop.end);
    if (s->kind == STMT_IF) return uniform(z, s->u.if_.cond);
    return s->kind == STMT_SEQ;
}

static Stmt *barrier(Syncer *z, Loc loc)
{
    Stmt *b = ir_new_stmt(z->k, STMT_BARRIER, loc);
    b->u.barrier.warp_only = false;
    b->u.barrier.id = z->barrier_id;
    b->u.barrier.threads = z->barrier_threads;
    return b;
}

/* The barrier before item (after `fence proxy_async` when an async-proxy
 * read must see the threads' writes). */
static void append_barrier(Syncer *z, Stmt *out, Loc loc, bool fence)
{
    if (fence) {
        Stmt *f = ir_new_stmt(z->k, STMT_FENCE, loc);
        f->u.fence.op = FENCE_PROXY_ASYNC;
        ir_seq_append(z->k, out, f);
    }
    ir_seq_append(z->k, out, barrier(z, loc));
}

/* The warp_specialized split: the consumer branch synchronises with the
 * named barrier of the consumer threads, the producer branch not at all. */
static Stmt *sync_split(Syncer *z, Stmt *s, Pending *pending)
{
    Pending consumer = *pending, producer;
    memset(&producer, 0, sizeof producer);
    int id = z->barrier_id, threads = z->barrier_threads;
    z->barrier_id = 1;
    z->barrier_threads = z->k->compute_threads;
    Stmt *else_body = s->u.if_.else_body;
    if (else_body) {
        if (else_body->kind != STMT_SEQ) else_body = ir_seq(z->k, &else_body, 1);
        s->u.if_.else_body = sync_seq(z, else_body, &consumer);
    }
    z->barrier_id = id;
    z->barrier_threads = threads;
    stmt_accesses(s->u.if_.then_body, &producer);
    merge(pending, &consumer);
    merge(pending, &producer);
    return s;
}

static Stmt *sync_seq(Syncer *z, Stmt *s, Pending *pending)
{
    Stmt *out = ir_seq(z->k, NULL, 0);
    out->loc = s->loc;
    for (int i = 0; i < s->u.seq.count; i++) {
        Stmt *item = s->u.seq.items[i];
        if (item->kind == STMT_BARRIER && !item->u.barrier.warp_only) {
            memset(pending, 0, sizeof *pending);
            ir_seq_append(z->k, out, item);
            continue;
        }
        Pending acc;
        memset(&acc, 0, sizeof acc);
        stmt_accesses(item, &acc);
        bool fence;
        if (conflicts(pending, &acc, &fence)) {
            append_barrier(z, out, item->loc, fence);
            memset(pending, 0, sizeof *pending);
        }
        if (item->kind == STMT_IF && item->u.if_.warp_specialized) {
            ir_seq_append(z->k, out, sync_split(z, item, pending));
        } else if (block_level_compound(z, item)) {
            ir_seq_append(z->k, out, sync_stmt(z, item, pending));
        } else {
            merge(pending, &acc);
            ir_seq_append(z->k, out, item);
        }
    }
    return out;
}

/* s is at block level and its accesses do not conflict with pending on
 * entry (the caller put a barrier in front otherwise). */
static Stmt *sync_stmt(Syncer *z, Stmt *s, Pending *pending)
{
    switch (s->kind) {
    case STMT_SEQ:
        return sync_seq(z, s, pending);
    case STMT_FOR: {
        Pending entry = *pending;
        Stmt *body = s->u.loop.body;
        if (body->kind != STMT_SEQ) body = ir_seq(z->k, &body, 1);
        body = sync_seq(z, body, pending);
        /* second scan: the next iteration sees what this one left */
        body = sync_seq(z, body, pending);
        merge(pending, &entry); /* the loop may not run at all */
        s->u.loop.body = body;
        return s;
    }
    case STMT_IF: {
        Pending other = *pending;
        Stmt *then_body = s->u.if_.then_body, *else_body = s->u.if_.else_body;
        if (then_body) {
            if (then_body->kind != STMT_SEQ) then_body = ir_seq(z->k, &then_body, 1);
            s->u.if_.then_body = sync_seq(z, then_body, pending);
        }
        if (else_body) {
            if (else_body->kind != STMT_SEQ) else_body = ir_seq(z->k, &else_body, 1);
            s->u.if_.else_body = sync_seq(z, else_body, &other);
        }
        merge(pending, &other);
        return s;
    }
    default: {
        Pending acc;
        memset(&acc, 0, sizeof acc);
        stmt_accesses(s, &acc);
        merge(pending, &acc);
        return s;
    }
    }
}

bool pass_insert_barriers(Kernel *k, Diag *diag)
{
    (void)diag;
    Syncer z;
    memset(&z, 0, sizeof z);
    z.k = k;
    do {
        z.changed = false;
        find_nonuniform(&z, k->body, false);
    } while (z.changed);
    Pending pending;
    memset(&pending, 0, sizeof pending);
    Stmt *body = k->body;
    if (!body) return true;
    if (body->kind != STMT_SEQ) body = ir_seq(k, &body, 1);
    k->body = sync_seq(&z, body, &pending);
    return true;
}
