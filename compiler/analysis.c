/*
 * analysis.c -- what the compiler may assume about integer expressions.
 *
 * The thread-level passes (simplify, vectorize, plan_shared) need two
 * kinds of knowledge about index arithmetic: a constant interval that
 * holds every value an expression can take (facts_bounds), and a
 * congruence "value = coeff*n + base" (facts_modular, TVM's ModularSet).
 * Both are computed on demand from per-variable facts gathered once:
 *   - kernel constraints: `H % 64 == 0` gives H = 64n, `NB == expr`
 *     becomes a substitution, `X >= e` / `X < e` narrow X's interval;
 *   - symbols are in [0, INT32_MAX] (the launcher rejects anything else),
 *     block vars in [0, grid), thread_idx in [0, threads);
 *   - LET values and FOR ranges, found by one walk over the body (vars
 *     are unique per kernel, so no scoping is needed; passes that create
 *     vars later register them with facts_add_let / facts_add_range).
 * Integer arithmetic is assumed not to wrap only where the computed
 * interval proves it: a result that leaves its dtype's range falls back
 * to the whole range, and congruences keep only coefficients that
 * survive wrapping (powers of two up to 2^bits).
 *
 * The constant evaluator used by the bank-conflict simulation, the
 * simulator's hardware model (ir_shared_wavefronts) and the shared-memory
 * address formula of ir.h are in analysis_eval.c; ir_loop_vector_lanes,
 * the other query plan_shared and vectorize share, is in
 * analysis_loops.c; the symbolic proof that an index is below a tensor
 * dimension (facts_prove_below, for dropping bounds guards) is in
 * analysis_bounds.c.
 */
#include "ir.h"

#include <limits.h>
#include <string.h>

typedef struct { bool ok; int64_t lo, hi; } Range;

typedef struct VarFact {
    bool has_range;              /* explicit interval (constraints, adds) */
    int64_t lo, hi;
    bool has_mod;                /* congruence from a constraint */
    Modular mod;
    const Expr *value;           /* LET value */
    const Expr *subst;           /* constraint equality var == subst */
    const Expr *loop_begin, *loop_end;
    int64_t loop_step;
    bool busy;                   /* recursion guard for cyclic facts */
    bool cached;                 /* cache_* valid */
    Range cache_range;
    Modular cache_mod;
} VarFact;

struct Facts {
    Kernel *kernel;
    VarFact *vars; /* indexed by Var.id; grows on demand */
    int capacity;
};

/* ------------------------------------------------------------------ */
/* small integer helpers                                               */
/* ------------------------------------------------------------------ */

static int64_t gcd64(int64_t a, int64_t b)
{
    if (a < 0) a = -a;
    if (b < 0) b = -b;
    while (b) { int64_t t = a % b; a = b; b = t; }
    return a;
}

int64_t ir_floor_div(int64_t a, int64_t b)
{
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) q--;
    return q;
}

int64_t ir_floor_mod(int64_t a, int64_t b)
{
    return a - ir_floor_div(a, b) * b;
}

/* The value range of a dtype; false for 64-bit types (no clamp needed
 * beyond int64 itself) and non-integers. */
static bool dtype_range(DType t, int64_t *lo, int64_t *hi)
{
    int bits = ir_dtype_bits(t);
    switch (ir_dtype_class(t)) {
    case DCLASS_BOOL: *lo = 0; *hi = 1; return true;
    case DCLASS_SINT:
        if (bits >= 64) return false;
        *lo = -((int64_t)1 << (bits - 1));
        *hi = ((int64_t)1 << (bits - 1)) - 1;
        return true;
    case DCLASS_UINT:
        if (bits >= 64) return false;
        *lo = 0;
        *hi = ((int64_t)1 << bits) - 1;
        return true;
    default: return false;
    }
}

int64_t ir_int_wrap(DType t, int64_t value)
{
    int bits = ir_dtype_bits(t);
    if (ir_dtype_class(t) == DCLASS_BOOL) return value != 0;
    if (bits <= 0 || bits >= 64) return value;
    uint64_t mask = ((uint64_t)1 << bits) - 1;
    uint64_t u = (uint64_t)value & mask;
    if (ir_dtype_class(t) == DCLASS_SINT && (u >> (bits - 1)) & 1)
        u |= ~mask;
    return (int64_t)u;
}

static Range range_make(int64_t lo, int64_t hi)
{
    Range r = { true, lo, hi };
    return r;
}

static const Range RANGE_NONE = { false, 0, 0 };

/* Clamps a mathematically computed range to what the dtype can hold: a
 * range that leaves the dtype may have wrapped, so it becomes the whole
 * dtype range. */
static Range range_fit(Range r, DType t)
{
    int64_t lo, hi;
    if (!dtype_range(t, &lo, &hi)) return r;
    if (!r.ok || r.lo < lo || r.hi > hi) return range_make(lo, hi);
    return r;
}

static Range range_union(Range a, Range b)
{
    if (!a.ok || !b.ok) return RANGE_NONE;
    return range_make(a.lo < b.lo ? a.lo : b.lo, a.hi > b.hi ? a.hi : b.hi);
}

static Range range_intersect(Range a, Range b)
{
    if (!a.ok) return b;
    if (!b.ok) return a;
    Range r = range_make(a.lo > b.lo ? a.lo : b.lo, a.hi < b.hi ? a.hi : b.hi);
    if (r.lo > r.hi) return a; /* contradictory facts: trust neither */
    return r;
}

static Range range_add(Range a, Range b)
{
    Range r = { true, 0, 0 };
    if (!a.ok || !b.ok || __builtin_add_overflow(a.lo, b.lo, &r.lo) ||
        __builtin_add_overflow(a.hi, b.hi, &r.hi))
        return RANGE_NONE;
    return r;
}

static Range range_neg(Range a)
{
    if (!a.ok || a.lo == INT64_MIN) return RANGE_NONE;
    return range_make(-a.hi, -a.lo);
}

static Range range_mul(Range a, Range b)
{
    if (!a.ok || !b.ok) return RANGE_NONE;
    int64_t c[4];
    if (__builtin_mul_overflow(a.lo, b.lo, &c[0]) ||
        __builtin_mul_overflow(a.lo, b.hi, &c[1]) ||
        __builtin_mul_overflow(a.hi, b.lo, &c[2]) ||
        __builtin_mul_overflow(a.hi, b.hi, &c[3]))
        return RANGE_NONE;
    Range r = range_make(c[0], c[0]);
    for (int i = 1; i < 4; i++) {
        if (c[i] < r.lo) r.lo = c[i];
        if (c[i] > r.hi) r.hi = c[i];
    }
    return r;
}

/* Floor division by a range of strictly positive divisors. */
static Range range_div(Range a, Range b)
{
    if (!a.ok || !b.ok || b.lo <= 0) return RANGE_NONE;
    int64_t c[4] = { ir_floor_div(a.lo, b.lo), ir_floor_div(a.lo, b.hi),
                     ir_floor_div(a.hi, b.lo), ir_floor_div(a.hi, b.hi) };
    Range r = range_make(c[0], c[0]);
    for (int i = 1; i < 4; i++) {
        if (c[i] < r.lo) r.lo = c[i];
        if (c[i] > r.hi) r.hi = c[i];
    }
    return r;
}

/* ------------------------------------------------------------------ */
/* congruences                                                         */
/* ------------------------------------------------------------------ */

static const Modular MOD_ANY = { 1, 0 };

static Modular mod_make(int64_t coeff, int64_t base)
{
    Modular m;
    if (coeff < 0) coeff = -coeff;
    m.coeff = coeff;
    m.base = coeff ? ir_floor_mod(base, coeff) : base;
    return m;
}

/* Keeps only what survives wrapping to t: the coefficient's power-of-two
 * part up to 2^bits (an exact value is wrapped itself). */
static Modular mod_fit(Modular m, DType t)
{
    int bits = ir_dtype_bits(t);
    if (!ir_dtype_is_int(t)) return MOD_ANY;
    if (m.coeff == 0) return mod_make(0, ir_int_wrap(t, m.base));
    if (bits >= 64) return m;
    int64_t c = m.coeff & -m.coeff; /* largest power of two dividing */
    if (bits < 62 && c > ((int64_t)1 << bits)) c = (int64_t)1 << bits;
    return mod_make(c, m.base);
}

static Modular mod_union(Modular a, Modular b)
{
    int64_t g = gcd64(gcd64(a.coeff, b.coeff), a.base - b.base);
    return mod_make(g, a.base);
}

static Modular mod_add(Modular a, Modular b, int sign)
{
    int64_t base;
    if (__builtin_add_overflow(a.base, sign * b.base, &base)) return MOD_ANY;
    return mod_make(gcd64(a.coeff, b.coeff), base);
}

static Modular mod_mul(Modular a, Modular b)
{
    int64_t cc, cb, bc, bb;
    if (__builtin_mul_overflow(a.coeff, b.coeff, &cc) ||
        __builtin_mul_overflow(a.coeff, b.base, &cb) ||
        __builtin_mul_overflow(a.base, b.coeff, &bc) ||
        __builtin_mul_overflow(a.base, b.base, &bb))
        return MOD_ANY;
    return mod_make(gcd64(gcd64(cc, cb), bc), bb);
}

static Modular mod_div(Modular a, int64_t k)
{
    if (k <= 0) return MOD_ANY;
    if (a.coeff == 0) return mod_make(0, ir_floor_div(a.base, k));
    if (a.coeff % k == 0) return mod_make(a.coeff / k, ir_floor_div(a.base, k));
    return MOD_ANY;
}

static Modular mod_mod(Modular a, int64_t k)
{
    if (k <= 0) return MOD_ANY;
    if (a.coeff == 0) return mod_make(0, ir_floor_mod(a.base, k));
    if (a.coeff % k == 0) return mod_make(0, ir_floor_mod(a.base, k));
    int64_t g = gcd64(a.coeff, k);
    return mod_make(g, a.base);
}

/* ------------------------------------------------------------------ */
/* the fact table                                                      */
/* ------------------------------------------------------------------ */

static VarFact *fact_of(Facts *f, const Var *v)
{
    if (!v || v->id < 0) return NULL;
    if (v->id >= f->capacity) {
        int cap = f->capacity ? f->capacity : 64;
        while (cap <= v->id) cap *= 2;
        VarFact *n = arena_alloc(f->kernel->arena, sizeof(VarFact) * cap);
        if (f->capacity) memcpy(n, f->vars, sizeof(VarFact) * f->capacity);
        f->vars = n;
        f->capacity = cap;
    }
    return &f->vars[v->id];
}

static void facts_invalidate(Facts *f)
{
    for (int i = 0; i < f->capacity; i++) f->vars[i].cached = false;
}

void facts_add_range(Facts *f, const Var *var, int64_t lo, int64_t hi)
{
    VarFact *vf = fact_of(f, var);
    if (!vf) return;
    Range r = range_make(lo, hi);
    if (vf->has_range) r = range_intersect(range_make(vf->lo, vf->hi), r);
    vf->has_range = true;
    vf->lo = r.lo;
    vf->hi = r.hi;
    facts_invalidate(f);
}

void facts_add_let(Facts *f, const Var *var, const Expr *value)
{
    VarFact *vf = fact_of(f, var);
    if (!vf || !value) return;
    vf->value = value;
    facts_invalidate(f);
}

void facts_add_loop(Facts *f, const Var *var, const Expr *begin,
                    const Expr *end, int64_t step)
{
    VarFact *vf = fact_of(f, var);
    if (!vf) return;
    vf->loop_begin = begin;
    vf->loop_end = end;
    vf->loop_step = step > 0 ? step : 1;
    facts_invalidate(f);
}

static void add_mod_fact(Facts *f, const Var *v, int64_t c, int64_t r)
{
    VarFact *vf = fact_of(f, v);
    if (!vf || c <= 0) return;
    Modular m = mod_make(c, r);
    /* keep the stronger of two compatible congruences */
    if (vf->has_mod && vf->mod.coeff > 0 && m.coeff % vf->mod.coeff != 0)
        return;
    vf->has_mod = true;
    vf->mod = m;
}


static Modular mod_stronger(Modular a, Modular b)
{
    if (a.coeff == 0) return a;
    if (b.coeff == 0) return b;
    if (a.coeff % b.coeff == 0) return a;
    if (b.coeff % a.coeff == 0) return b;
    return a.coeff > b.coeff ? a : b;
}

bool ir_int_constant(const Expr *e, int64_t *out)
{
    if (!e || e->kind != EXPR_INT || e->lanes > 1) return false;
    *out = e->u.int_value;
    return true;
}

static Range expr_range(Facts *f, const Expr *e);
static Modular expr_mod(Facts *f, const Expr *e);

/* Facts from one conjunct of a constraint. */
static void add_constraint(Facts *f, const Expr *c)
{
    if (!c || c->kind != EXPR_BINARY) return;
    const Expr *a = c->u.binary.lhs, *b = c->u.binary.rhs;
    int64_t k, r;
    switch (c->u.binary.op) {
    case BIN_LAND:
        add_constraint(f, a);
        add_constraint(f, b);
        return;
    case BIN_EQ:
        if (a->kind != EXPR_BINARY && b->kind == EXPR_BINARY) {
            const Expr *t = a; a = b; b = t;
        }
        if (a->kind == EXPR_BINARY && a->u.binary.op == BIN_MOD &&
            a->u.binary.lhs->kind == EXPR_VAR &&
            ir_int_constant(a->u.binary.rhs, &k) && ir_int_constant(b, &r)) {
            add_mod_fact(f, a->u.binary.lhs->u.var, k, r);
            return;
        }
        if (a->kind == EXPR_VAR && !ir_expr_uses_var(b, a->u.var)) {
            VarFact *vf = fact_of(f, a->u.var);
            if (vf && !vf->subst) vf->subst = b;
        } else if (b->kind == EXPR_VAR && !ir_expr_uses_var(a, b->u.var)) {
            VarFact *vf = fact_of(f, b->u.var);
            if (vf && !vf->subst) vf->subst = a;
        }
        return;
    case BIN_GE: case BIN_GT: case BIN_LE: case BIN_LT: {
        BinOp op = c->u.binary.op;
        if (a->kind != EXPR_VAR) {
            const Expr *t = a; a = b; b = t;
            op = op == BIN_GE ? BIN_LE : op == BIN_GT ? BIN_LT
               : op == BIN_LE ? BIN_GE : BIN_GT;
        }
        if (a->kind != EXPR_VAR) return;
        Range rb = expr_range(f, b);
        if (!rb.ok) return;
        int64_t lo = INT64_MIN / 4, hi = INT64_MAX / 4;
        if (op == BIN_GE) lo = rb.lo;
        else if (op == BIN_GT) lo = rb.lo + 1;
        else if (op == BIN_LE) hi = rb.hi;
        else hi = rb.hi - 1;
        facts_add_range(f, a->u.var, lo, hi);
        return;
    }
    default:
        return;
    }
}

/* Registers every LET and FOR of the body (vars are unique per kernel). */
static void collect_stmt(Facts *f, const Stmt *s)
{
    if (!s) return;
    switch (s->kind) {
    case STMT_SEQ:
        for (int i = 0; i < s->u.seq.count; i++) collect_stmt(f, s->u.seq.items[i]);
        return;
    case STMT_LET:
        if (s->u.let.var->kind == VAR_LET && s->u.let.value)
            facts_add_let(f, s->u.let.var, s->u.let.value);
        return;
    case STMT_FOR:
        facts_add_loop(f, s->u.loop.var, s->u.loop.begin, s->u.loop.end,
                       s->u.loop.step);
        collect_stmt(f, s->u.loop.body);
        return;
    case STMT_PARALLEL:
        for (int i = 0; i < s->u.parallel.rank; i++)
            facts_add_range(f, s->u.parallel.vars[i], 0,
                            s->u.parallel.extent[i] - 1);
        collect_stmt(f, s->u.parallel.body);
        return;
    case STMT_IF:
        collect_stmt(f, s->u.if_.then_body);
        collect_stmt(f, s->u.if_.else_body);
        return;
    default:
        return;
    }
}

Facts *facts_new(Kernel *k)
{
    Facts *f = arena_alloc(k->arena, sizeof(Facts));
    f->kernel = k;
    for (int i = 0; i < k->nconstraints; i++)
        add_constraint(f, k->constraints[i].cond);
    collect_stmt(f, k->body);
    return f;
}

/* Interval and congruence of a variable, from its kind and its facts. */
static void var_facts(Facts *f, const Var *v, Range *range, Modular *mod)
{
    Range r = RANGE_NONE;
    Modular m = MOD_ANY;
    int64_t lo, hi;
    if (v->kind == VAR_SYMBOL) {
        r = range_make(0, INT32_MAX);
    } else if (v->kind == VAR_BLOCK) {
        r = range_make(0, INT32_MAX);
    } else if (dtype_range(v->dtype, &lo, &hi)) {
        r = range_make(lo, hi);
    }
    VarFact *vf = fact_of(f, v);
    if (!vf || vf->busy) {
        *range = r;
        *mod = m;
        return;
    }
    if (vf->cached) {
        *range = vf->cache_range;
        *mod = vf->cache_mod;
        return;
    }
    vf->busy = true;
    if (v->kind == VAR_BLOCK && v->block_dim >= 0 && v->block_dim < 3 &&
        f->kernel->grid[v->block_dim]) {
        Range g = expr_range(f, f->kernel->grid[v->block_dim]);
        /* a cluster dimension is launched rounded up to a multiple of
         * the cluster size (docs/hopper.md 11) */
        int64_t c = f->kernel->cluster[v->block_dim];
        if (g.ok && c > 1 && g.hi < INT32_MAX) g.hi = (g.hi + c - 1) / c * c;
        if (g.ok && g.hi >= 1) r = range_intersect(r, range_make(0, g.hi - 1));
    }
    if (vf->has_range) r = range_intersect(r, range_make(vf->lo, vf->hi));
    if (vf->has_mod) m = mod_stronger(m, vf->mod);
    if (vf->subst) {
        r = range_intersect(r, expr_range(f, vf->subst));
        m = mod_stronger(m, expr_mod(f, vf->subst));
    }
    if (vf->value) {
        r = range_intersect(r, expr_range(f, vf->value));
        m = mod_stronger(m, expr_mod(f, vf->value));
    }
    if (vf->loop_begin && vf->loop_end) {
        Range b = expr_range(f, vf->loop_begin), e = expr_range(f, vf->loop_end);
        if (b.ok && e.ok && e.hi - 1 >= b.lo)
            r = range_intersect(r, range_make(b.lo, e.hi - 1));
        m = mod_stronger(m, mod_add(expr_mod(f, vf->loop_begin),
                                    mod_make(vf->loop_step, 0), 1));
    }
    vf->busy = false;
    vf->cached = true;
    vf->cache_range = r;
    vf->cache_mod = m;
    *range = r;
    *mod = m;
}

static Range call_range(Facts *f, const Expr *e)
{
    int threads = f->kernel->threads > 0 ? f->kernel->threads : 1024;
    switch (e->u.call.op) {
    case INTR_THREAD_IDX: return range_make(0, threads - 1);
    case INTR_LANE_IDX: return range_make(0, IR_WARP_SIZE - 1);
    case INTR_WARP_IDX:
        return range_make(0, (threads + IR_WARP_SIZE - 1) / IR_WARP_SIZE - 1);
    case INTR_BLOCK_IDX_X: case INTR_BLOCK_IDX_Y: case INTR_BLOCK_IDX_Z: {
        int dim = e->u.call.op - INTR_BLOCK_IDX_X;
        Range r = range_make(0, INT32_MAX);
        if (f->kernel->grid[dim]) {
            Range g = expr_range(f, f->kernel->grid[dim]);
            if (g.ok && g.hi >= 1) r = range_intersect(r, range_make(0, g.hi - 1));
        }
        return r;
    }
    case INTR_POPCOUNT: return range_make(0, 64);
    default: return RANGE_NONE;
    }
}

static Range binary_range(Facts *f, const Expr *e)
{
    const Expr *a = e->u.binary.lhs, *b = e->u.binary.rhs;
    Range ra = expr_range(f, a), rb = expr_range(f, b);
    switch (e->u.binary.op) {
    case BIN_ADD: return range_add(ra, rb);
    case BIN_SUB: return range_add(ra, range_neg(rb));
    case BIN_MUL: return range_mul(ra, rb);
    case BIN_DIV: return range_div(ra, rb);
    case BIN_MOD:
        if (!rb.ok || rb.lo <= 0) return RANGE_NONE;
        if (ra.ok && ra.lo >= 0 && ra.hi < rb.lo) return ra;
        return range_make(0, rb.hi - 1);
    case BIN_MIN:
        if (!ra.ok || !rb.ok) return RANGE_NONE;
        return range_make(ra.lo < rb.lo ? ra.lo : rb.lo,
                          ra.hi < rb.hi ? ra.hi : rb.hi);
    case BIN_MAX:
        if (!ra.ok || !rb.ok) return RANGE_NONE;
        return range_make(ra.lo > rb.lo ? ra.lo : rb.lo,
                          ra.hi > rb.hi ? ra.hi : rb.hi);
    case BIN_AND:
        if (ra.ok && rb.ok && ra.lo >= 0 && rb.lo >= 0)
            return range_make(0, ra.hi < rb.hi ? ra.hi : rb.hi);
        if (rb.ok && rb.lo >= 0) return range_make(0, rb.hi);
        if (ra.ok && ra.lo >= 0) return range_make(0, ra.hi);
        return RANGE_NONE;
    case BIN_OR: case BIN_XOR:
        if (ra.ok && rb.ok && ra.lo >= 0 && rb.lo >= 0) {
            int64_t m = ra.hi > rb.hi ? ra.hi : rb.hi, p = 1;
            while (p <= m && p < ((int64_t)1 << 62)) p <<= 1;
            return range_make(0, p - 1);
        }
        return RANGE_NONE;
    case BIN_SHL: {
        int64_t s;
        if (!ir_int_constant(b, &s) || s < 0 || s > 62) return RANGE_NONE;
        return range_mul(ra, range_make((int64_t)1 << s, (int64_t)1 << s));
    }
    case BIN_SHR: {
        int64_t s;
        if (!ir_int_constant(b, &s) || s < 0 || s > 62) return RANGE_NONE;
        if (ir_dtype_class(e->dtype) == DCLASS_UINT && !(ra.ok && ra.lo >= 0))
            return RANGE_NONE;
        return range_div(ra, range_make((int64_t)1 << s, (int64_t)1 << s));
    }
    case BIN_LT: case BIN_LE: case BIN_GT: case BIN_GE: {
        if (!ir_dtype_is_int(a->dtype) || !ra.ok || !rb.ok) return range_make(0, 1);
        BinOp op = e->u.binary.op;
        if (op == BIN_GT || op == BIN_GE) {
            Range t = ra; ra = rb; rb = t;
            op = op == BIN_GT ? BIN_LT : BIN_LE;
        }
        if (op == BIN_LT) {
            if (ra.hi < rb.lo) return range_make(1, 1);
            if (ra.lo >= rb.hi) return range_make(0, 0);
        } else {
            if (ra.hi <= rb.lo) return range_make(1, 1);
            if (ra.lo > rb.hi) return range_make(0, 0);
        }
        return range_make(0, 1);
    }
    default:
        return range_make(0, 1); /* EQ, NE, LAND, LOR: bool */
    }
}

static Range expr_range(Facts *f, const Expr *e)
{
    if (!e || !ir_dtype_is_int(e->dtype)) return RANGE_NONE;
    Range r = RANGE_NONE;
    switch (e->kind) {
    case EXPR_INT: r = range_make(e->u.int_value, e->u.int_value); break;
    case EXPR_VAR: {
        Modular m;
        var_facts(f, e->u.var, &r, &m);
        break;
    }
    case EXPR_CALL: r = call_range(f, e); break;
    case EXPR_UNARY: {
        Range a = expr_range(f, e->u.unary.operand);
        switch (e->u.unary.op) {
        case UN_NEG: r = range_neg(a); break;
        case UN_NOT: r = range_add(range_neg(a), range_make(-1, -1)); break;
        case UN_LNOT: r = range_make(0, 1); break;
        case UN_ABS:
            if (a.ok && a.lo >= 0) r = a;
            else if (a.ok && a.lo > INT64_MIN) {
                int64_t m = -a.lo > a.hi ? -a.lo : a.hi;
                r = range_make(a.hi < 0 ? -a.hi : 0, m);
            }
            break;
        default: break;
        }
        break;
    }
    case EXPR_BINARY: r = binary_range(f, e); break;
    case EXPR_SELECT:
        r = range_union(expr_range(f, e->u.select.then_value),
                        expr_range(f, e->u.select.else_value));
        break;
    case EXPR_CAST:
        if (ir_dtype_is_int(e->u.cast.value->dtype) && e->u.cast.kind == CAST_CONVERT)
            r = expr_range(f, e->u.cast.value);
        break;
    case EXPR_RAMP: {
        Range b = expr_range(f, e->u.ramp.base);
        int64_t span = e->u.ramp.stride * (e->lanes - 1);
        r = range_add(b, span >= 0 ? range_make(0, span) : range_make(span, 0));
        break;
    }
    case EXPR_BROADCAST: r = expr_range(f, e->u.broadcast.value); break;
    default: break;
    }
    return range_fit(r, e->dtype);
}

static Modular expr_mod(Facts *f, const Expr *e)
{
    if (!e || !ir_dtype_is_int(e->dtype)) return MOD_ANY;
    Modular m = MOD_ANY;
    int64_t k;
    switch (e->kind) {
    case EXPR_INT: m = mod_make(0, e->u.int_value); break;
    case EXPR_VAR: {
        Range r;
        var_facts(f, e->u.var, &r, &m);
        if (r.ok && r.lo == r.hi) m = mod_make(0, r.lo);
        break;
    }
    case EXPR_UNARY:
        if (e->u.unary.op == UN_NEG)
            m = mod_mul(expr_mod(f, e->u.unary.operand), mod_make(0, -1));
        break;
    case EXPR_BINARY: {
        const Expr *a = e->u.binary.lhs, *b = e->u.binary.rhs;
        switch (e->u.binary.op) {
        case BIN_ADD: m = mod_add(expr_mod(f, a), expr_mod(f, b), 1); break;
        case BIN_SUB: m = mod_add(expr_mod(f, a), expr_mod(f, b), -1); break;
        case BIN_MUL: m = mod_mul(expr_mod(f, a), expr_mod(f, b)); break;
        case BIN_DIV: {
            Modular mb = expr_mod(f, b);
            if (mb.coeff == 0) m = mod_div(expr_mod(f, a), mb.base);
            break;
        }
        case BIN_MOD: {
            Modular mb = expr_mod(f, b);
            if (mb.coeff == 0) m = mod_mod(expr_mod(f, a), mb.base);
            break;
        }
        case BIN_MIN: case BIN_MAX:
            m = mod_union(expr_mod(f, a), expr_mod(f, b));
            break;
        case BIN_SHL:
            if (ir_int_constant(b, &k) && k >= 0 && k < 62)
                m = mod_mul(expr_mod(f, a), mod_make(0, (int64_t)1 << k));
            break;
        case BIN_SHR:
            if (ir_int_constant(b, &k) && k >= 0 && k < 62)
                m = mod_div(expr_mod(f, a), (int64_t)1 << k);
            break;
        case BIN_AND:
            /* x & (2^n - 1) == x mod 2^n in two's complement */
            if (ir_int_constant(b, &k) && k >= 0 && ((k + 1) & k) == 0)
                m = mod_mod(expr_mod(f, a), k + 1);
            break;
        default: break;
        }
        break;
    }
    case EXPR_SELECT:
        m = mod_union(expr_mod(f, e->u.select.then_value),
                      expr_mod(f, e->u.select.else_value));
        break;
    case EXPR_CAST:
        if (ir_dtype_is_int(e->u.cast.value->dtype) &&
            ir_dtype_bits(e->dtype) >= ir_dtype_bits(e->u.cast.value->dtype))
            m = expr_mod(f, e->u.cast.value);
        break;
    case EXPR_RAMP: {
        Modular b = expr_mod(f, e->u.ramp.base);
        m = mod_make(gcd64(b.coeff, e->lanes > 1 ? e->u.ramp.stride : 0), b.base);
        break;
    }
    case EXPR_BROADCAST: m = expr_mod(f, e->u.broadcast.value); break;
    default: break;
    }
    if (m.coeff != 0) {
        Range r = expr_range(f, e);
        if (r.ok && r.lo == r.hi) m = mod_make(0, r.lo);
    }
    return mod_fit(m, e->dtype);
}

Modular facts_modular(Facts *f, const Expr *e)
{
    return expr_mod(f, e);
}

bool facts_bounds(Facts *f, const Expr *e, int64_t *lo, int64_t *hi)
{
    Range r = expr_range(f, e);
    if (!r.ok) return false;
    *lo = r.lo;
    *hi = r.hi;
    return true;
}

/* The definition analysis_bounds.c may expand a variable into: its LET
 * value, or the expression a constraint equates a symbol with. */
const Expr *facts_definition(Facts *f, const Var *v)
{
    VarFact *vf = fact_of(f, v);
    if (!vf) return NULL;
    if (v->kind == VAR_LET && vf->value) return vf->value;
    if (v->kind == VAR_SYMBOL && vf->subst) return vf->subst;
    return NULL;
}

Kernel *facts_kernel(Facts *f)
{
    return f->kernel;
}
