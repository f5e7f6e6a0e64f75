/*
 * vectorize.c -- VECTORIZED loops become straight-line vector code.
 *
 * In the TVM style: the loop var v of `for v in vectorized(0, V)` becomes
 * RAMP(0, 1, V) and every expression that depends on it becomes V lanes
 * wide, while lane-invariant expressions stay scalar (their users
 * BROADCAST them).  What makes the memory-bound kernels fast is decided
 * here:
 *   - an access whose last index is base + v (other indices invariant) is
 *     contiguous; its alignment is the largest power of two that
 *     facts_modular proves divides lane 0's byte offset (global base
 *     pointers are 16-byte aligned, shared buffers 128-byte aligned), and
 *     at most 16 bytes (LDG.E.128).  A 16-byte aligned access may be
 *     wider (codegen/LLVM splits it into aligned 16-byte pieces); when the
 *     proven alignment is smaller than the access, the loop is split into
 *     unroll(V/L) x vector(L);
 *   - a comparison a + v < b whose sides are congruent enough that every
 *     lane agrees (base = 8k, H = 64k, V = 8) is evaluated once, on lane
 *     0, and the access gets a BROADCAST predicate: one predicate per
 *     vector;
 *   - (h0 + v) / k and (h0 + v) % k with h0's residue leaving room for V
 *     lanes become BROADCAST(h0 / k) and RAMP(h0 % k, 1, V).
 * A loop whose body cannot be one vector operation (a serial loop, an IF
 * on a lane-varying condition, assignments, shuffles, atomics) is unrolled
 * instead: correctness first.
 *
 * Innermost copy-like UNROLL loops (ir_loop_vector_lanes: a straight-line
 * body with a unit-stride global or shared access, e.g. the transpose's
 * patch copies made by lower_tile_ops) are vectorized the same way, so a
 * per-thread copy between a LOCAL array and memory is one 8/16-byte access.
 *
 * requires: KSTATE_THREAD (and KSTATE_SHARED for shared alignment).
 * guarantees: KSTATE_VECTOR.
 */
#include "ir.h"

#include <string.h>

#define MAX_LETS 64

typedef struct {
    Kernel *k;
    Facts *facts;
    const Var *lane;             /* the loop var being vectorized */
    int lanes;
    const Var *vector_vars[MAX_LETS]; /* lane-varying lets kept as vectors */
    int nvector_vars;
    const Var *inlined[MAX_LETS];     /* lane-varying pure lets, inlined */
    Expr *inlined_value[MAX_LETS];
    int ninlined;
    bool failed;
} Vectorizer;

static int64_t gcd64(int64_t a, int64_t b)
{
    if (a < 0) a = -a;
    if (b < 0) b = -b;
    while (b) { int64_t t = a % b; a = b; b = t; }
    return a;
}

static int64_t floor_mod(int64_t a, int64_t b)
{
    int64_t r = a % b;
    return r < 0 ? r + b : r;
}

static bool int_const(const Expr *e, int64_t *v)
{
    if (!e || e->kind != EXPR_INT || e->lanes != 1) return false;
    *v = e->u.int_value;
    return true;
}

/* Does e depend on the lane (directly or through a vector let)? */
static bool varies(const Vectorizer *z, const Expr *e)
{
    if (ir_expr_uses_var(e, z->lane)) return true;
    for (int i = 0; i < z->nvector_vars; i++)
        if (ir_expr_uses_var(e, z->vector_vars[i])) return true;
    return false;
}

/* Replaces inlined lets by their values (which are in terms of v). */
static Expr *expand(Vectorizer *z, Expr *e)
{
    if (!e) return NULL;
    for (int i = z->ninlined - 1; i >= 0; i--)
        if (ir_expr_uses_var(e, z->inlined[i]))
            e = ir_substitute(z->k, e, z->inlined[i], z->inlined_value[i]);
    return e;
}

static Expr *int_expr(Vectorizer *z, DType t, int64_t v)
{
    return ir_int(z->k, t, ir_int_wrap(t, v));
}

static Expr *widen(Vectorizer *z, Expr *e)
{
    if (e->lanes == z->lanes) return e;
    return ir_broadcast(z->k, e, z->lanes);
}

/* e == inv + coeff * lane, inv lane-invariant (scalar). */
static bool affine(Vectorizer *z, Expr *e, Expr **inv, int64_t *coeff)
{
    int64_t k, c1, c2;
    Expr *i1, *i2;
    if (!varies(z, e)) { *inv = e; *coeff = 0; return true; }
    if (!ir_dtype_is_int(e->dtype) || e->dtype == DT_BOOL) return false;
    switch (e->kind) {
    case EXPR_VAR:
        if (e->u.var != z->lane) return false;
        *inv = int_expr(z, e->dtype, 0);
        *coeff = 1;
        return true;
    case EXPR_UNARY:
        if (e->u.unary.op != UN_NEG || !affine(z, e->u.unary.operand, &i1, &c1)) return false;
        *inv = ir_unary(z->k, UN_NEG, i1);
        *coeff = -c1;
        return true;
    case EXPR_BINARY:
        switch (e->u.binary.op) {
        case BIN_ADD: case BIN_SUB:
            if (!affine(z, e->u.binary.lhs, &i1, &c1) || !affine(z, e->u.binary.rhs, &i2, &c2))
                return false;
            *inv = ir_binary(z->k, e->u.binary.op, i1, i2);
            *coeff = e->u.binary.op == BIN_ADD ? c1 + c2 : c1 - c2;
            return true;
        case BIN_MUL:
            if (int_const(e->u.binary.rhs, &k) && affine(z, e->u.binary.lhs, &i1, &c1)) {
                *inv = ir_binary(z->k, BIN_MUL, i1, e->u.binary.rhs);
                *coeff = c1 * k;
                return true;
            }
            if (int_const(e->u.binary.lhs, &k) && affine(z, e->u.binary.rhs, &i1, &c1)) {
                *inv = ir_binary(z->k, BIN_MUL, e->u.binary.lhs, i1);
                *coeff = c1 * k;
                return true;
            }
            return false;
        default: return false;
        }
    default: return false;
    }
}

/* Does the residue class r + g*Z (g == 0: just r) avoid [lo, hi]? */
static bool class_avoids(Modular m, int64_t lo, int64_t hi)
{
    if (lo > hi) return true;
    if (m.coeff == 0) return m.base < lo || m.base > hi;
    int64_t first = lo + floor_mod(m.base - lo, m.coeff);
    return first > hi;
}

/* Is `d + coeff*v < 0` the same for every lane v? */
static bool uniform_negative(Vectorizer *z, Expr *d, int64_t coeff)
{
    int64_t span = coeff * (z->lanes - 1), lo, hi;
    /* the lanes disagree iff d lies in this interval */
    int64_t ilo = coeff > 0 ? -span : 0, ihi = coeff > 0 ? -1 : -span - 1;
    if (facts_bounds(z->facts, d, &lo, &hi) && (hi < ilo || lo > ihi)) return true;
    return class_avoids(facts_modular(z->facts, d), ilo, ihi);
}

static Expr *vec(Vectorizer *z, Expr *e);

/* A lane-uniform integer comparison evaluated on lane 0, or NULL. */
static Expr *uniform_comparison(Vectorizer *z, Expr *e)
{
    Expr *a = e->u.binary.lhs, *b = e->u.binary.rhs, *ia, *ib;
    int64_t ca, cb;
    BinOp op = e->u.binary.op;
    if (ir_dtype_class(a->dtype) != DCLASS_SINT) return NULL;
    if (op != BIN_LT && op != BIN_LE && op != BIN_GT && op != BIN_GE) return NULL;
    if (!affine(z, a, &ia, &ca) || !affine(z, b, &ib, &cb)) return NULL;
    int64_t c = ca - cb;
    Expr *d = ir_binary(z->k, BIN_SUB, ia, ib);
    DType t = a->dtype;
    /* bring every form to  d' + c'*v < 0 */
    switch (op) {
    case BIN_LT: break;
    case BIN_LE: d = ir_binary(z->k, BIN_SUB, d, int_expr(z, t, 1)); break;
    case BIN_GT: d = ir_unary(z->k, UN_NEG, d); c = -c; break;
    default:
        d = ir_binary(z->k, BIN_SUB, ir_unary(z->k, UN_NEG, d), int_expr(z, t, 1));
        c = -c;
        break;
    }
    if (c != 0 && !uniform_negative(z, d, c)) return NULL;
    Expr *r = ir_binary(z->k, op, ia, ib);
    r->loc = e->loc;
    return r;
}

/* (inv + coeff*v) / k or % k when no lane crosses a multiple of k. */
static Expr *uniform_division(Vectorizer *z, Expr *e)
{
    Expr *inv;
    int64_t coeff, k;
    if (!int_const(e->u.binary.rhs, &k) || k <= 0) return NULL;
    if (!affine(z, e->u.binary.lhs, &inv, &coeff) || coeff <= 0) return NULL;
    int64_t span = coeff * (z->lanes - 1);
    Modular m = facts_modular(z->facts, inv);
    int64_t g = m.coeff == 0 ? k : gcd64(m.coeff, k);
    int64_t r = floor_mod(m.base, g);
    if (r + span >= g) return NULL;
    Expr *scalar = ir_binary(z->k, e->u.binary.op, inv, e->u.binary.rhs);
    scalar->loc = e->loc;
    if (e->u.binary.op == BIN_DIV) return scalar;
    return ir_ramp(z->k, scalar, coeff, z->lanes);
}

/* ------------------------------------------------------------------ */
/* memory accesses                                                     */
/* ------------------------------------------------------------------ */

/* Linear element offset (as an expression) of an access, for its
 * alignment; NULL for LOCAL arrays. */
static Expr *element_offset(Vectorizer *z, Buffer *b, Expr **indices)
{
    Kernel *k = z->k;
    DType t = indices[0]->dtype;
    Expr *off = NULL;
    if (b->scope == SCOPE_GLOBAL) {
        for (int d = 0; d < b->rank; d++) {
            Expr *stride = b->strides[d];
            if (!stride) { /* row-major: product of the later dims */
                stride = int_expr(z, t, 1);
                for (int e = d + 1; e < b->rank; e++)
                    stride = ir_binary(k, BIN_MUL, stride, b->shape[e]);
            }
            Expr *term = ir_binary(k, BIN_MUL, indices[d], stride);
            off = off ? ir_binary(k, BIN_ADD, off, term) : term;
        }
        return off;
    }
    if (b->scope != SCOPE_SHARED) return NULL;
    /* row = ((i0 * s1 + i1) * s2 + ...) over the leading dims */
    Expr *row = int_expr(z, t, 0);
    for (int d = 0; d + 1 < b->rank; d++) {
        if (d > 0) row = ir_binary(k, BIN_MUL, row, b->shape[d]);
        row = ir_binary(k, BIN_ADD, row, indices[d]);
    }
    int64_t pitch = b->pitch;
    if (pitch <= 0 && !int_const(b->shape[b->rank - 1], &pitch)) return NULL;
    return ir_binary(k, BIN_ADD, ir_binary(k, BIN_MUL, row, int_expr(z, t, pitch)),
                     indices[b->rank - 1]);
}

/* Largest power of two (<= 16) proven to divide lane 0's byte address. */
static int access_alignment(Vectorizer *z, Buffer *b, Expr **lane0)
{
    Expr *off = element_offset(z, b, lane0);
    if (!off) return 0;
    Modular m = facts_modular(z->facts, off);
    int bits = ir_dtype_bits(b->dtype);
    int64_t g = gcd64(m.coeff * bits, m.base * bits); /* in bits */
    if (b->scope == SCOPE_SHARED) g = gcd64(g, b->shared_offset * 8);
    int align = 16;
    if (g != 0)
        while (align > 1 && g % (align * 8) != 0) align /= 2;
    if (g != 0 && g % 8 != 0) align = 0; /* not even byte aligned */
    return align;
}

/* The lanes one aligned access of this buffer can take, or the whole
 * vector when the access is not contiguous (it will be scalarised). */
static bool unit_last_stride(const Buffer *b)
{
    const Expr *stride = b->strides[b->rank - 1];
    return b->scope != SCOPE_GLOBAL || !stride ||
           (stride->kind == EXPR_INT && stride->u.int_value == 1);
}

static int contiguous_lanes(Vectorizer *z, Buffer *b, Expr **indices, int lanes)
{
    Expr *lane0[IR_MAX_RANK], *inv;
    int64_t coeff;
    if (b->scope != SCOPE_GLOBAL && b->scope != SCOPE_SHARED) return lanes;
    if (!unit_last_stride(b)) return lanes; /* a gather */
    for (int d = 0; d < b->rank; d++) {
        if (!affine(z, indices[d], &inv, &coeff)) return lanes;
        if (coeff != (d == b->rank - 1 ? 1 : 0)) return lanes;
        lane0[d] = inv;
    }
    int align = access_alignment(z, b, lane0); /* <= 16 bytes */
    int bits = ir_dtype_bits(b->dtype);
    /* A 16-byte aligned access wider than 16 bytes is fine: LLVM splits
     * it into aligned 16-byte pieces (e.g. the 32 bf16 bytes of a cast
     * from 16 e4m3 lanes), so only a smaller proven alignment narrows. */
    if (align >= IR_VECTOR_BYTES || (int64_t)align * 8 >= (int64_t)lanes * bits)
        return lanes;
    int fit = bits > 0 ? align * 8 / bits : 1;
    return fit < 1 ? 1 : fit;
}

static Expr *vec_access(Vectorizer *z, Buffer *b, Expr **indices, Expr **out,
                        int *align_bytes, bool *all_scalar)
{
    Expr *vi[IR_MAX_RANK];
    bool scalar = true;
    for (int d = 0; d < b->rank; d++) {
        vi[d] = vec(z, indices[d]);
        if (!vi[d]) return NULL;
        if (vi[d]->lanes > 1) scalar = false;
    }
    *all_scalar = scalar;
    *align_bytes = 0;
    if (scalar) {
        memcpy(out, vi, sizeof(Expr *) * (size_t)b->rank);
        return out[0];
    }
    Expr *last = vi[b->rank - 1];
    bool contiguous = last->kind == EXPR_RAMP && last->u.ramp.stride == 1 &&
                      unit_last_stride(b);
    for (int d = 0; d + 1 < b->rank; d++)
        if (vi[d]->lanes > 1) contiguous = false;
    if (contiguous && b->scope != SCOPE_LOCAL) {
        Expr *lane0[IR_MAX_RANK];
        for (int d = 0; d + 1 < b->rank; d++) lane0[d] = vi[d];
        lane0[b->rank - 1] = last->u.ramp.base;
        int align = access_alignment(z, b, lane0);
        int size = z->lanes * ir_dtype_bits(b->dtype) / 8;
        if (align > size) align = size;
        *align_bytes = align;
    }
    for (int d = 0; d < b->rank; d++) out[d] = widen(z, vi[d]);
    return out[0];
}

/* ------------------------------------------------------------------ */
/* expressions                                                         */
/* ------------------------------------------------------------------ */

static Expr *vec(Vectorizer *z, Expr *e)
{
    if (!e || z->failed) return NULL;
    if (!varies(z, e)) return e;
    Kernel *k = z->k;
    Expr *inv, *n;
    int64_t coeff;
    switch (e->kind) {
    case EXPR_VAR:
        if (e->u.var == z->lane)
            return ir_ramp(k, int_expr(z, e->dtype, 0), 1, z->lanes);
        n = ir_var(k, e->u.var); /* a vector let */
        n->lanes = z->lanes;
        return n;
    case EXPR_LOAD: {
        Expr *indices[IR_MAX_RANK];
        int align;
        bool scalar;
        if (!vec_access(z, e->u.load.buffer, e->u.load.indices, indices, &align, &scalar))
            return NULL;
        Expr *pred = e->u.load.predicate ? vec(z, e->u.load.predicate) : NULL;
        if (e->u.load.predicate && !pred) return NULL;
        if (scalar && (!pred || pred->lanes == 1)) {
            n = ir_load(k, e->u.load.buffer, indices, pred);
        } else {
            if (scalar)
                for (int d = 0; d < e->u.load.buffer->rank; d++) indices[d] = widen(z, indices[d]);
            n = ir_load(k, e->u.load.buffer, indices, pred ? widen(z, pred) : NULL);
            n->lanes = z->lanes;
            n->u.load.align_bytes = align;
        }
        n->loc = e->loc;
        return n;
    }
    case EXPR_UNARY:
        if (affine(z, e, &inv, &coeff)) return ir_ramp(k, inv, coeff, z->lanes);
        n = vec(z, e->u.unary.operand);
        if (!n) return NULL;
        n = ir_unary(k, e->u.unary.op, n);
        n->dtype = e->dtype;
        n->loc = e->loc;
        return n;
    case EXPR_BINARY: {
        BinOp op = e->u.binary.op;
        if (ir_dtype_is_int(e->dtype) && e->dtype != DT_BOOL &&
            (op == BIN_ADD || op == BIN_SUB || op == BIN_MUL) && affine(z, e, &inv, &coeff))
            return coeff ? ir_ramp(k, inv, coeff, z->lanes) : inv;
        if ((op == BIN_DIV || op == BIN_MOD) && ir_dtype_is_int(e->dtype)) {
            n = uniform_division(z, e);
            if (n) return n;
        }
        if (ir_dtype_is_int(e->u.binary.lhs->dtype)) {
            n = uniform_comparison(z, e);
            if (n) return n;
        }
        Expr *a = vec(z, e->u.binary.lhs), *b = vec(z, e->u.binary.rhs);
        if (!a || !b) return NULL;
        if (a->lanes == 1 && b->lanes == 1) {
            n = ir_binary(k, op, a, b);
        } else {
            n = ir_binary(k, op, widen(z, a), widen(z, b));
        }
        n->dtype = e->dtype;
        n->loc = e->loc;
        return n;
    }
    case EXPR_SELECT: {
        Expr *c = vec(z, e->u.select.cond), *a = vec(z, e->u.select.then_value),
             *b = vec(z, e->u.select.else_value);
        if (!c || !a || !b) return NULL;
        if (c->lanes == 1 && a->lanes == 1 && b->lanes == 1) n = ir_select(k, c, a, b);
        else n = ir_select(k, widen(z, c), widen(z, a), widen(z, b));
        n->loc = e->loc;
        return n;
    }
    case EXPR_CAST:
        n = vec(z, e->u.cast.value);
        if (!n) return NULL;
        n = ir_cast(k, e->u.cast.kind, e->dtype, n);
        n->loc = e->loc;
        return n;
    case EXPR_CALL: {
        unsigned flags = ir_intrinsic_flags(e->u.call.op);
        if (!(flags & INTR_PURE) || (flags & INTR_SYNC)) { z->failed = true; return NULL; }
        Expr *args[8];
        bool wide = false;
        if (e->u.call.nargs > 8) { z->failed = true; return NULL; }
        for (int i = 0; i < e->u.call.nargs; i++) {
            args[i] = vec(z, e->u.call.args[i]);
            if (!args[i]) return NULL;
            wide |= args[i]->lanes > 1;
        }
        if (wide)
            for (int i = 0; i < e->u.call.nargs; i++) args[i] = widen(z, args[i]);
        n = ir_call(k, e->u.call.op, e->dtype, args, e->u.call.nargs);
        n->loc = e->loc;
        return n;
    }
    default:
        z->failed = true; /* already vector code */
        return NULL;
    }
}

/* ------------------------------------------------------------------ */
/* statements                                                          */
/* ------------------------------------------------------------------ */

static bool expr_has_load(const Expr *e)
{
    if (!e) return false;
    switch (e->kind) {
    case EXPR_LOAD: return true;
    case EXPR_UNARY: return expr_has_load(e->u.unary.operand);
    case EXPR_BINARY: return expr_has_load(e->u.binary.lhs) || expr_has_load(e->u.binary.rhs);
    case EXPR_SELECT:
        return expr_has_load(e->u.select.cond) || expr_has_load(e->u.select.then_value) ||
               expr_has_load(e->u.select.else_value);
    case EXPR_CAST: return expr_has_load(e->u.cast.value);
    case EXPR_CALL:
        for (int i = 0; i < e->u.call.nargs; i++)
            if (expr_has_load(e->u.call.args[i])) return true;
        return false;
    default: return false;
    }
}

static Stmt *vec_stmt(Vectorizer *z, Stmt *s);

static Stmt *vec_store(Vectorizer *z, Stmt *s)
{
    Buffer *b = s->u.store.buffer;
    Expr *idx[IR_MAX_RANK], *raw[IR_MAX_RANK];
    for (int d = 0; d < b->rank; d++) raw[d] = expand(z, s->u.store.indices[d]);
    int align;
    bool scalar;
    if (!vec_access(z, b, raw, idx, &align, &scalar)) return NULL;
    Expr *value = vec(z, expand(z, s->u.store.value));
    Expr *pred = s->u.store.predicate ? vec(z, expand(z, s->u.store.predicate)) : NULL;
    if (!value || (s->u.store.predicate && !pred)) return NULL;
    Stmt *n = ir_new_stmt(z->k, STMT_STORE, s->loc);
    n->u.store.buffer = b;
    n->u.store.indices = arena_alloc(z->k->arena, sizeof(Expr *) * (size_t)b->rank);
    if (scalar && value->lanes == 1 && (!pred || pred->lanes == 1)) {
        /* every lane stores the same value to the same place */
        memcpy(n->u.store.indices, idx, sizeof(Expr *) * (size_t)b->rank);
        n->u.store.value = value;
        n->u.store.predicate = pred;
        return n;
    }
    for (int d = 0; d < b->rank; d++) n->u.store.indices[d] = widen(z, idx[d]);
    n->u.store.value = widen(z, value);
    n->u.store.predicate = pred ? widen(z, pred) : NULL;
    n->u.store.align_bytes = align;
    return n;
}

static Stmt *vec_seq(Vectorizer *z, Stmt *s)
{
    Stmt *out = ir_seq(z->k, NULL, 0);
    out->loc = s->loc;
    for (int i = 0; i < s->u.seq.count; i++) {
        Stmt *item = s->u.seq.items[i];
        if (item->kind == STMT_LET && item->u.let.var->kind == VAR_LET && item->u.let.value) {
            Expr *value = expand(z, item->u.let.value);
            if (varies(z, value)) {
                if (z->ninlined == MAX_LETS || z->nvector_vars == MAX_LETS) return NULL;
                if (!expr_has_load(value)) {
                    z->inlined[z->ninlined] = item->u.let.var;
                    z->inlined_value[z->ninlined++] = value;
                    continue;
                }
                Expr *v = vec(z, value);
                if (!v) return NULL;
                Stmt *let = ir_new_stmt(z->k, STMT_LET, item->loc);
                let->u.let.var = item->u.let.var;
                let->u.let.value = widen(z, v);
                z->vector_vars[z->nvector_vars++] = item->u.let.var;
                ir_seq_append(z->k, out, let);
                continue;
            }
            Stmt *let = ir_new_stmt(z->k, STMT_LET, item->loc);
            let->u.let.var = item->u.let.var;
            let->u.let.value = value;
            ir_seq_append(z->k, out, let);
            continue;
        }
        Stmt *n = vec_stmt(z, item);
        if (!n) return NULL;
        ir_seq_append(z->k, out, n);
    }
    return out;
}

static Stmt *vec_stmt(Vectorizer *z, Stmt *s)
{
    if (!s || z->failed) return NULL;
    switch (s->kind) {
    case STMT_SEQ: return vec_seq(z, s);
    case STMT_LET: {
        /* a mutable var (or a let without value) has no lane-wide form:
         * vec_seq would hand it straight back here; leave the loop
         * unrolled */
        if (s->u.let.var->kind != VAR_LET || !s->u.let.value) return NULL;
        Stmt *seq = ir_seq(z->k, &s, 1);
        return vec_seq(z, seq);
    }
    case STMT_STORE: return vec_store(z, s);
    case STMT_IF: {
        Expr *c = vec(z, expand(z, s->u.if_.cond));
        if (!c || c->lanes != 1) return NULL; /* lane-varying: unroll */
        Stmt *n = ir_new_stmt(z->k, STMT_IF, s->loc);
        n->u.if_.cond = c;
        n->u.if_.then_body = vec_stmt(z, s->u.if_.then_body);
        if (!n->u.if_.then_body) return NULL;
        if (s->u.if_.else_body) {
            n->u.if_.else_body = vec_stmt(z, s->u.if_.else_body);
            if (!n->u.if_.else_body) return NULL;
        }
        return n;
    }
    case STMT_FOR: {
        if (s->u.loop.kind != LOOP_UNROLL) return NULL;
        Expr *begin = expand(z, s->u.loop.begin), *end = expand(z, s->u.loop.end);
        if (varies(z, begin) || varies(z, end)) return NULL;
        Stmt *n = ir_new_stmt(z->k, STMT_FOR, s->loc);
        n->u.loop = s->u.loop;
        n->u.loop.begin = begin;
        n->u.loop.end = end;
        n->u.loop.body = vec_stmt(z, s->u.loop.body);
        return n->u.loop.body ? n : NULL;
    }
    default:
        return NULL; /* ASSIGN, ATOMIC, EVAL, BARRIER, ...: unroll */
    }
}

/* ------------------------------------------------------------------ */
/* loops                                                               */
/* ------------------------------------------------------------------ */

/* The widest power-of-two lane count (dividing lanes) that every
 * contiguous global/shared access of the body can take in one aligned
 * access of at most 16 bytes. */
static int body_lanes(Vectorizer *z, Stmt *s, int lanes);

static int expr_lanes(Vectorizer *z, Expr *e, int lanes)
{
    if (!e) return lanes;
    switch (e->kind) {
    case EXPR_LOAD: {
        Buffer *b = e->u.load.buffer;
        Expr *idx[IR_MAX_RANK];
        for (int d = 0; d < b->rank; d++) {
            idx[d] = expand(z, e->u.load.indices[d]);
            lanes = expr_lanes(z, idx[d], lanes);
        }
        int fit = contiguous_lanes(z, b, idx, lanes);
        if (fit < lanes) lanes = fit;
        return expr_lanes(z, e->u.load.predicate, lanes);
    }
    case EXPR_UNARY: return expr_lanes(z, e->u.unary.operand, lanes);
    case EXPR_BINARY:
        return expr_lanes(z, e->u.binary.rhs, expr_lanes(z, e->u.binary.lhs, lanes));
    case EXPR_SELECT:
        lanes = expr_lanes(z, e->u.select.cond, lanes);
        lanes = expr_lanes(z, e->u.select.then_value, lanes);
        return expr_lanes(z, e->u.select.else_value, lanes);
    case EXPR_CAST: return expr_lanes(z, e->u.cast.value, lanes);
    case EXPR_CALL:
        for (int i = 0; i < e->u.call.nargs; i++) lanes = expr_lanes(z, e->u.call.args[i], lanes);
        return lanes;
    default: return lanes;
    }
}

static int body_lanes(Vectorizer *z, Stmt *s, int lanes)
{
    if (!s) return lanes;
    switch (s->kind) {
    case STMT_SEQ:
        for (int i = 0; i < s->u.seq.count; i++) lanes = body_lanes(z, s->u.seq.items[i], lanes);
        return lanes;
    case STMT_LET: return expr_lanes(z, s->u.let.value, lanes);
    case STMT_STORE: {
        Buffer *b = s->u.store.buffer;
        Expr *idx[IR_MAX_RANK];
        for (int d = 0; d < b->rank; d++) idx[d] = expand(z, s->u.store.indices[d]);
        int fit = contiguous_lanes(z, b, idx, lanes);
        if (fit < lanes) lanes = fit;
        lanes = expr_lanes(z, expand(z, s->u.store.value), lanes);
        return expr_lanes(z, expand(z, s->u.store.predicate), lanes);
    }
    case STMT_IF:
        lanes = body_lanes(z, s->u.if_.then_body, lanes);
        return body_lanes(z, s->u.if_.else_body, lanes);
    case STMT_FOR: return body_lanes(z, s->u.loop.body, lanes);
    default: return lanes;
    }
}

/* Inlines the lane-varying pure lets of the body's top level so that
 * body_lanes sees indices in terms of the lane. */
static void collect_inlined(Vectorizer *z, Stmt *s)
{
    if (!s) return;
    if (s->kind == STMT_SEQ) {
        for (int i = 0; i < s->u.seq.count; i++) collect_inlined(z, s->u.seq.items[i]);
        return;
    }
    if (s->kind == STMT_LET && s->u.let.var->kind == VAR_LET && s->u.let.value &&
        z->ninlined < MAX_LETS) {
        Expr *value = expand(z, s->u.let.value);
        if (varies(z, value) && !expr_has_load(value)) {
            z->inlined[z->ninlined] = s->u.let.var;
            z->inlined_value[z->ninlined++] = value;
        }
    }
}

static void vectorizer_reset(Vectorizer *z, const Var *lane, int lanes)
{
    z->lane = lane;
    z->lanes = lanes;
    z->nvector_vars = 0;
    z->ninlined = 0;
    z->failed = false;
}

/* Vector form of one loop, or NULL when it must stay scalar. */
static Stmt *vectorize_loop(Vectorizer *z, Stmt *loop, int lanes)
{
    Kernel *k = z->k;
    vectorizer_reset(z, loop->u.loop.var, lanes);
    collect_inlined(z, loop->u.loop.body);
    int fit = body_lanes(z, loop->u.loop.body, lanes);
    int width = 1;
    while (width * 2 <= fit && lanes % (width * 2) == 0) width *= 2;
    if (width < 2) return NULL;
    Stmt *body = loop->u.loop.body;
    Var *lane = loop->u.loop.var;
    Var *outer = NULL;
    if (width < lanes) {
        /* v = v0 * width + v1: unroll(lanes / width) x vector(width) */
        outer = ir_new_var(k, arena_printf(k->arena, "%s.o", lane->name), lane->dtype, VAR_LOOP);
        lane = ir_new_var(k, arena_printf(k->arena, "%s.i", lane->name), lane->dtype, VAR_LOOP);
        Expr *v = ir_binary(k, BIN_ADD,
                            ir_binary(k, BIN_MUL, ir_var(k, outer),
                                      ir_int(k, lane->dtype, width)),
                            ir_var(k, lane));
        body = ir_substitute_stmt(k, body, loop->u.loop.var, v);
        facts_add_loop(z->facts, outer, ir_int(k, lane->dtype, 0),
                       ir_int(k, lane->dtype, lanes / width), 1);
        facts_add_loop(z->facts, lane, ir_int(k, lane->dtype, 0),
                       ir_int(k, lane->dtype, width), 1);
    }
    vectorizer_reset(z, lane, width);
    Stmt *vector = vec_stmt(z, body);
    if (!vector || z->failed) return NULL;
    if (!outer) return vector;
    Stmt *n = ir_new_stmt(k, STMT_FOR, loop->loc);
    n->u.loop.var = outer;
    n->u.loop.begin = ir_int(k, lane->dtype, 0);
    n->u.loop.end = ir_int(k, lane->dtype, lanes / width);
    n->u.loop.step = 1;
    n->u.loop.kind = LOOP_UNROLL;
    n->u.loop.body = vector;
    return n;
}

static Stmt *walk(Vectorizer *z, Stmt *s)
{
    if (!s) return NULL;
    switch (s->kind) {
    case STMT_SEQ:
        for (int i = 0; i < s->u.seq.count; i++) s->u.seq.items[i] = walk(z, s->u.seq.items[i]);
        return s;
    case STMT_IF:
        s->u.if_.then_body = walk(z, s->u.if_.then_body);
        s->u.if_.else_body = walk(z, s->u.if_.else_body);
        return s;
    case STMT_PARALLEL:
        s->u.parallel.body = walk(z, s->u.parallel.body);
        return s;
    case STMT_FOR: {
        int lanes = ir_loop_vector_lanes(s);
        if (lanes >= 2) {
            Stmt *v = vectorize_loop(z, s, lanes);
            if (v) return v;
        }
        if (s->u.loop.kind == LOOP_VECTORIZED) s->u.loop.kind = LOOP_UNROLL;
        s->u.loop.body = walk(z, s->u.loop.body);
        return s;
    }
    default:
        return s;
    }
}

bool pass_vectorize(Kernel *k, Diag *diag)
{
    Vectorizer z;
    memset(&z, 0, sizeof z);
    z.k = k;
    z.facts = facts_new(k);
    (void)diag;
    k->body = walk(&z, k->body);
    k->state |= KSTATE_VECTOR;
    return true;
}
