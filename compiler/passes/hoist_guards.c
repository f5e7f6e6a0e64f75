/*
 * hoist_guards.c -- one branch per unrolled copy loop instead of one per
 * access, when every guard of the loop is loop-invariant.
 *
 * A copy of rows of a tile, `for s in unroll(0, 8) { w[s] = x[r + s, col
 * : +8; if col < H] }` (its row guards dropped by simplify's proof,
 * analysis_bounds.c), guards each access with the same column test.
 * Codegen makes each guard a branch around its access; LLVM sinks each
 * address computation into its branch and ptxas, predicating them,
 * re-loads the tensor's base and stride from the parameter bank for
 * every access (measured on per_channel_cast_and_transpose: dropping the
 * row guards alone made its SASS longer, LDC 12 -> 20).  When every
 * conjunct of every guard in the loop depends on nothing the loop
 * defines, the loop becomes
 *
 *     if P { the loop without guards }  else { the loop as it was }
 *
 * with P the conjunction of those conjuncts: P implies every guard, and
 * the else copy is the original, so the result is the same computation.
 * An interior tile runs the unguarded copy.  A conjunct must be
 * lane-invariant, read no memory and use only symbols, scalars, block
 * vars, pure intrinsics and immutable vars defined before the loop, so
 * it has one value for the whole loop.  The loop must be UNROLL and a
 * pure copy: lets, local allocs, nested unrolled loops and stores of an
 * element read (a load, a var or a constant), with pure calls only -- no
 * barrier or warp-synchronous call, which the divergent branch would
 * break, and no computation: duplicating a loop that computes made the
 * SASS of most memory-bound kernels longer (ptxas keeps both copies).
 * The loop must run at least two guarded accesses (counting unrolled
 * trips).  Local ALLOCs inside the loop move before the branch: a local
 * array is one entry-block alloca wherever its ALLOC stands (codegen),
 * and the two copies share it.  Runs after the second simplify (guards
 * final), before insert_barriers.
 *
 * It fires on the four per_channel_cast_and_transpose kernels only; with
 * it their SASS is 16 instructions shorter (bm128: 1056 against 1072) and
 * has 14 fewer parameter reloads (LDC 20 against 34), every other kernel
 * of the library compiling to the same PTX (2026-12-02, tkc --emit=ptx
 * with the pass removed from the pipeline, ptxas, cuobjdump).  Its effect
 * on time has not been measured apart from analysis_bounds'.
 *
 * requires KSTATE_VECTOR.  guarantees: nothing new (keeps every KSTATE).
 */
#include "ir.h"

#include <string.h>

enum { HOIST_MAX_VARS = 256 };

/* Vars a loop binds: a hoisted conjunct may use none of them. */
typedef struct {
    const Var *vars[HOIST_MAX_VARS];
    int n;
    bool overflow;
} VarSet;

static void varset_add(VarSet *s, const Var *v)
{
    if (s->n == HOIST_MAX_VARS) s->overflow = true;
    else s->vars[s->n++] = v;
}

static bool varset_has(const VarSet *s, const Var *v)
{
    for (int i = 0; i < s->n; i++)
        if (s->vars[i] == v) return true;
    return false;
}

/* Whether every call in e is pure and not warp-synchronous. */
static bool expr_straight(const Expr *e)
{
    if (!e) return true;
    switch (e->kind) {
    case EXPR_LOAD:
        for (int i = 0; i < e->u.load.buffer->rank; i++)
            if (!expr_straight(e->u.load.indices[i])) return false;
        return expr_straight(e->u.load.predicate);
    case EXPR_UNARY: return expr_straight(e->u.unary.operand);
    case EXPR_BINARY: return expr_straight(e->u.binary.lhs) && expr_straight(e->u.binary.rhs);
    case EXPR_SELECT:
        return expr_straight(e->u.select.cond) && expr_straight(e->u.select.then_value) &&
               expr_straight(e->u.select.else_value);
    case EXPR_CAST: return expr_straight(e->u.cast.value);
    case EXPR_CALL: {
        unsigned flags = ir_intrinsic_flags(e->u.call.op);
        if (!(flags & INTR_PURE) || (flags & INTR_SYNC)) return false;
        for (int i = 0; i < e->u.call.nargs; i++)
            if (!expr_straight(e->u.call.args[i])) return false;
        return true;
    }
    case EXPR_RAMP: return expr_straight(e->u.ramp.base);
    case EXPR_BROADCAST: return expr_straight(e->u.broadcast.value);
    default: return true;
    }
}

/* Whether the loop body is straight-line per-thread code; collects the
 * vars it binds or assigns. */
static bool stmt_straight(const Stmt *s, VarSet *bound)
{
    if (!s) return true;
    switch (s->kind) {
    case STMT_SEQ:
        for (int i = 0; i < s->u.seq.count; i++)
            if (!stmt_straight(s->u.seq.items[i], bound)) return false;
        return true;
    case STMT_LET:
        varset_add(bound, s->u.let.var);
        return expr_straight(s->u.let.value);
    case STMT_ALLOC: return s->u.alloc.buffer->scope == SCOPE_LOCAL;
    case STMT_STORE: {
        /* a copy: the value is an element read, nothing computed from it
         * (two copies of a computation are longer code, which ptxas
         * does not merge back) */
        const Expr *v = s->u.store.value;
        if (v->kind != EXPR_LOAD && v->kind != EXPR_VAR && v->kind != EXPR_INT &&
            v->kind != EXPR_FLOAT)
            return false;
        for (int i = 0; i < s->u.store.buffer->rank; i++)
            if (!expr_straight(s->u.store.indices[i])) return false;
        return expr_straight(v) && expr_straight(s->u.store.predicate);
    }
    case STMT_FOR:
        if (s->u.loop.kind != LOOP_UNROLL) return false;
        varset_add(bound, s->u.loop.var);
        return expr_straight(s->u.loop.begin) && expr_straight(s->u.loop.end) &&
               stmt_straight(s->u.loop.body, bound);
    default:
        return false;
    }
}

/* Whether P has one value for the whole loop: no memory, no var the loop
 * binds or assigns, no mutable var at all (it may change before the
 * loop's own accesses through an assignment we did not see). */
static bool invariant(const Expr *e, const VarSet *bound)
{
    if (!e) return true;
    switch (e->kind) {
    case EXPR_INT: case EXPR_FLOAT: return true;
    case EXPR_VAR:
        return e->u.var->kind != VAR_MUTABLE && !varset_has(bound, e->u.var);
    case EXPR_UNARY: return invariant(e->u.unary.operand, bound);
    case EXPR_BINARY:
        return invariant(e->u.binary.lhs, bound) && invariant(e->u.binary.rhs, bound);
    case EXPR_SELECT:
        return invariant(e->u.select.cond, bound) &&
               invariant(e->u.select.then_value, bound) &&
               invariant(e->u.select.else_value, bound);
    case EXPR_CAST: return invariant(e->u.cast.value, bound);
    case EXPR_CALL:
        for (int i = 0; i < e->u.call.nargs; i++)
            if (!invariant(e->u.call.args[i], bound)) return false;
        return expr_straight(e);
    default: return false; /* loads, vectors */
    }
}

/* The scalar condition of a lane-invariant guard, or NULL. */
static Expr *guard_scalar(Expr *p)
{
    if (!p) return NULL;
    if (p->kind == EXPR_BROADCAST) p = p->u.broadcast.value;
    return p->lanes == 1 ? p : NULL;
}

/* Appends the ALLOCs inside st to seq.  A local array is one entry-block
 * alloca wherever its ALLOC stands (codegen), so the two copies share
 * the allocations, placed once before the branch. */
static void collect_allocs(Kernel *k, const Stmt *st, Stmt *seq)
{
    if (!st) return;
    switch (st->kind) {
    case STMT_SEQ:
        for (int i = 0; i < st->u.seq.count; i++) collect_allocs(k, st->u.seq.items[i], seq);
        return;
    case STMT_ALLOC: {
        Stmt *a = ir_new_stmt(k, STMT_ALLOC, st->loc);
        a->u.alloc.buffer = st->u.alloc.buffer;
        ir_seq_append(k, seq, a);
        return;
    }
    case STMT_IF:
        collect_allocs(k, st->u.if_.then_body, seq);
        collect_allocs(k, st->u.if_.else_body, seq);
        return;
    case STMT_FOR: collect_allocs(k, st->u.loop.body, seq); return;
    default: return;
    }
}

/* st with its ALLOCs removed (they are placed before the branch). */
static Stmt *strip_allocs(Kernel *k, Stmt *st)
{
    if (!st) return NULL;
    switch (st->kind) {
    case STMT_SEQ:
        for (int i = 0; i < st->u.seq.count; i++)
            st->u.seq.items[i] = strip_allocs(k, st->u.seq.items[i]);
        return st;
    case STMT_ALLOC: return ir_seq(k, NULL, 0);
    case STMT_FOR: st->u.loop.body = strip_allocs(k, st->u.loop.body); return st;
    default: return st;
    }
}

/* ---- the guards of a loop ---------------------------------------------- */

enum { HOIST_MAX_CONJUNCTS = 8 };

typedef struct {
    const VarSet *bound;
    Expr *conjuncts[HOIST_MAX_CONJUNCTS]; /* distinct, all invariant */
    int n;
    int64_t guarded; /* guarded accesses per run of the loop */
    int64_t trips;   /* product of the enclosing unrolled trip counts */
    bool fail;       /* some guard is not a conjunction of invariants */
} Search;

static void add_conjuncts(Search *s, Expr *c)
{
    if (c->kind == EXPR_BINARY && c->u.binary.op == BIN_LAND) {
        add_conjuncts(s, c->u.binary.lhs);
        add_conjuncts(s, c->u.binary.rhs);
        return;
    }
    if (!invariant(c, s->bound)) {
        s->fail = true;
        return;
    }
    for (int i = 0; i < s->n; i++)
        if (ir_expr_equal(s->conjuncts[i], c)) return;
    if (s->n == HOIST_MAX_CONJUNCTS) s->fail = true;
    else s->conjuncts[s->n++] = c;
}

static void count_guard(Search *s, Expr *pred)
{
    if (!pred) return;
    Expr *c = guard_scalar(pred);
    if (!c) {
        s->fail = true;
        return;
    }
    add_conjuncts(s, c);
    s->guarded += s->trips;
}

static void visit_expr(Search *s, Expr *e)
{
    if (!e) return;
    switch (e->kind) {
    case EXPR_LOAD:
        for (int i = 0; i < e->u.load.buffer->rank; i++) visit_expr(s, e->u.load.indices[i]);
        count_guard(s, e->u.load.predicate);
        return;
    case EXPR_UNARY: visit_expr(s, e->u.unary.operand); return;
    case EXPR_BINARY: visit_expr(s, e->u.binary.lhs); visit_expr(s, e->u.binary.rhs); return;
    case EXPR_SELECT:
        visit_expr(s, e->u.select.cond);
        visit_expr(s, e->u.select.then_value);
        visit_expr(s, e->u.select.else_value);
        return;
    case EXPR_CAST: visit_expr(s, e->u.cast.value); return;
    case EXPR_CALL:
        for (int i = 0; i < e->u.call.nargs; i++) visit_expr(s, e->u.call.args[i]);
        return;
    case EXPR_RAMP: visit_expr(s, e->u.ramp.base); return;
    case EXPR_BROADCAST: visit_expr(s, e->u.broadcast.value); return;
    default: return;
    }
}

static void visit_stmt(Search *s, Stmt *st)
{
    if (!st) return;
    switch (st->kind) {
    case STMT_SEQ:
        for (int i = 0; i < st->u.seq.count; i++) visit_stmt(s, st->u.seq.items[i]);
        return;
    case STMT_LET: visit_expr(s, st->u.let.value); return;
    case STMT_STORE:
        for (int i = 0; i < st->u.store.buffer->rank; i++) visit_expr(s, st->u.store.indices[i]);
        visit_expr(s, st->u.store.value);
        count_guard(s, st->u.store.predicate);
        return;
    case STMT_FOR: {
        int64_t trips = 1, saved = s->trips;
        if (st->u.loop.begin->kind == EXPR_INT && st->u.loop.end->kind == EXPR_INT &&
            st->u.loop.step > 0)
            trips = (st->u.loop.end->u.int_value - st->u.loop.begin->u.int_value +
                     st->u.loop.step - 1) / st->u.loop.step;
        s->trips = saved * (trips > 0 ? trips : 1);
        visit_expr(s, st->u.loop.begin);
        visit_expr(s, st->u.loop.end);
        visit_stmt(s, st->u.loop.body);
        s->trips = saved;
        return;
    }
    default: return;
    }
}

/* ---- the unguarded copy ------------------------------------------------- */

static void unguard_expr(Expr *e)
{
    if (!e) return;
    switch (e->kind) {
    case EXPR_LOAD:
        for (int i = 0; i < e->u.load.buffer->rank; i++) unguard_expr(e->u.load.indices[i]);
        e->u.load.predicate = NULL;
        return;
    case EXPR_UNARY: unguard_expr(e->u.unary.operand); return;
    case EXPR_BINARY: unguard_expr(e->u.binary.lhs); unguard_expr(e->u.binary.rhs); return;
    case EXPR_SELECT:
        unguard_expr(e->u.select.cond);
        unguard_expr(e->u.select.then_value);
        unguard_expr(e->u.select.else_value);
        return;
    case EXPR_CAST: unguard_expr(e->u.cast.value); return;
    case EXPR_CALL:
        for (int i = 0; i < e->u.call.nargs; i++) unguard_expr(e->u.call.args[i]);
        return;
    case EXPR_RAMP: unguard_expr(e->u.ramp.base); return;
    case EXPR_BROADCAST: unguard_expr(e->u.broadcast.value); return;
    default: return;
    }
}

static void unguard_stmt(Stmt *st)
{
    if (!st) return;
    switch (st->kind) {
    case STMT_SEQ:
        for (int i = 0; i < st->u.seq.count; i++) unguard_stmt(st->u.seq.items[i]);
        return;
    case STMT_LET: unguard_expr(st->u.let.value); return;
    case STMT_STORE:
        for (int i = 0; i < st->u.store.buffer->rank; i++) unguard_expr(st->u.store.indices[i]);
        unguard_expr(st->u.store.value);
        st->u.store.predicate = NULL;
        return;
    case STMT_FOR: unguard_stmt(st->u.loop.body); return;
    default: return;
    }
}

static Stmt *hoist_stmt(Kernel *k, Stmt *st);

/* The hoisted form of an unrolled loop, or the loop itself. */
static Stmt *hoist_loop(Kernel *k, Stmt *loop)
{
    VarSet bound = {.n = 0};
    varset_add(&bound, loop->u.loop.var);
    Search s = {.bound = &bound, .trips = 1};
    if (stmt_straight(loop->u.loop.body, &bound) && !bound.overflow) visit_stmt(&s, loop);
    else s.fail = true;
    if (s.fail || s.n == 0 || s.guarded < 2) {
        /* not this loop as a whole: perhaps a loop inside it */
        loop->u.loop.body = hoist_stmt(k, loop->u.loop.body);
        return loop;
    }
    Expr *p = ir_copy_expr(k, s.conjuncts[0]);
    for (int i = 1; i < s.n; i++) p = ir_binary(k, BIN_LAND, p, ir_copy_expr(k, s.conjuncts[i]));
    /* then: every guard is a conjunction of P's conjuncts, so P implies it */
    Stmt *then_copy = ir_copy_stmt(k, loop);
    unguard_stmt(then_copy);
    Stmt *seq = ir_seq(k, NULL, 0);
    collect_allocs(k, loop->u.loop.body, seq);
    Stmt *branch = ir_new_stmt(k, STMT_IF, loop->loc);
    branch->u.if_.cond = p;
    branch->u.if_.then_body = strip_allocs(k, then_copy);
    branch->u.if_.else_body = strip_allocs(k, loop);
    if (seq->u.seq.count == 0) return branch;
    ir_seq_append(k, seq, branch);
    return seq;
}

static Stmt *hoist_stmt(Kernel *k, Stmt *st)
{
    if (!st) return NULL;
    switch (st->kind) {
    case STMT_SEQ:
        for (int i = 0; i < st->u.seq.count; i++)
            st->u.seq.items[i] = hoist_stmt(k, st->u.seq.items[i]);
        return st;
    case STMT_IF:
        st->u.if_.then_body = hoist_stmt(k, st->u.if_.then_body);
        st->u.if_.else_body = hoist_stmt(k, st->u.if_.else_body);
        return st;
    case STMT_FOR:
        if (st->u.loop.kind == LOOP_UNROLL) return hoist_loop(k, st);
        st->u.loop.body = hoist_stmt(k, st->u.loop.body);
        return st;
    default:
        return st;
    }
}

bool pass_hoist_guards(Kernel *k, Diag *diag)
{
    (void)diag;
    k->body = hoist_stmt(k, k->body);
    return true;
}
