/*
 * simplify_expr.c -- expression folding and index algebra for pass_simplify.
 *
 * The expression half of pass_simplify (simplify.c holds the pass entry and
 * the statement rewriting); simplify_expr() is its entry point, called
 * through simplify.h.
 *
 * Integer expressions built from +, - and multiplication by constants are
 * flattened into a sum of terms coeff*atom + constant, merged and rebuilt
 * in a canonical order (positive terms first in order of appearance,
 * constant last).  Floor division and remainder by a positive constant k
 * split that sum: terms whose coefficient is a multiple of k leave the
 * division, terms proven multiples of k by facts_modular (H with
 * H % 64 == 0) leave the remainder, and what is left is decided by its
 * bounds (x / k == 0 and x % k == x when 0 <= x < k).  Comparisons are
 * decided by the bounds of their difference.
 *
 * Floats are folded with the GPU's semantics: f32 operations in float,
 * never through double, and only operations whose PTX instruction is
 * correctly rounded (add, sub, mul, div.rn, sqrt.rn, fma.rn); exp,
 * exp2, rsqrt and sigmoid are approximations on the GPU and are left
 * alone, as are conversions to the 8-bit float formats.
 */
#include "simplify.h"

#include <math.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* helpers                                                             */
/* ------------------------------------------------------------------ */

bool simplify_is_int_const(const Expr *e, int64_t *value)
{
    if (!e || e->kind != EXPR_INT || e->lanes != 1) return false;
    if (value) *value = e->u.int_value;
    return true;
}

static bool is_scalar_int(const Expr *e)
{
    return e && e->lanes == 1 && ir_dtype_is_int(e->dtype) && e->dtype != DT_BOOL;
}

static Expr *make_int(Simplifier *s, DType t, int64_t v, Loc loc)
{
    Expr *e = ir_int(s->k, t, ir_int_wrap(t, v));
    e->loc = loc;
    return e;
}

static Expr *make_bool(Simplifier *s, bool v, int lanes, Loc loc)
{
    Expr *e = ir_int(s->k, DT_BOOL, v);
    e->loc = loc;
    if (lanes > 1) e = ir_broadcast(s->k, e, lanes);
    return e;
}

Expr *simplify_build_binary(Simplifier *s, BinOp op, Expr *a, Expr *b, Loc loc)
{
    Expr *e = ir_binary(s->k, op, a, b);
    e->loc = loc;
    return e;
}

static int64_t floor_div(int64_t a, int64_t b)
{
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) q--;
    return q;
}

static int64_t gcd64(int64_t a, int64_t b)
{
    if (a < 0) a = -a;
    if (b < 0) b = -b;
    while (b) { int64_t t = a % b; a = b; b = t; }
    return a;
}

static bool is_commutative(BinOp op)
{
    switch (op) {
    case BIN_ADD: case BIN_MUL: case BIN_MIN: case BIN_MAX: case BIN_AND:
    case BIN_OR: case BIN_XOR: case BIN_EQ: case BIN_NE: case BIN_LAND:
    case BIN_LOR:
        return true;
    default: return false;
    }
}

static bool is_comparison(BinOp op)
{
    return op == BIN_EQ || op == BIN_NE || op == BIN_LT || op == BIN_LE ||
           op == BIN_GT || op == BIN_GE;
}

/* op with its operands swapped: a < b == b > a */
static BinOp flip_comparison(BinOp op)
{
    switch (op) {
    case BIN_LT: return BIN_GT;
    case BIN_LE: return BIN_GE;
    case BIN_GT: return BIN_LT;
    case BIN_GE: return BIN_LE;
    default: return op;
    }
}

/* ------------------------------------------------------------------ */
/* linear sums                                                         */
/* ------------------------------------------------------------------ */

#define SUM_MAX_TERMS 16

typedef struct { Expr *atom; int64_t coeff; } Term;
typedef struct {
    Term terms[SUM_MAX_TERMS];
    int count;
    int64_t constant;
    bool ok;
    DType dtype;
} Sum;

static void sum_add_term(Sum *sum, Expr *atom, int64_t coeff)
{
    for (int i = 0; i < sum->count; i++)
        if (ir_expr_equal(sum->terms[i].atom, atom)) {
            if (__builtin_add_overflow(sum->terms[i].coeff, coeff, &sum->terms[i].coeff))
                sum->ok = false;
            return;
        }
    if (sum->count == SUM_MAX_TERMS) { sum->ok = false; return; }
    sum->terms[sum->count].atom = atom;
    sum->terms[sum->count++].coeff = coeff;
}

static void sum_flatten(Sum *sum, Expr *e, int64_t scale)
{
    int64_t k, scaled;
    if (!sum->ok) return;
    if (e->dtype != sum->dtype || e->lanes != 1) { sum_add_term(sum, e, scale); return; }
    switch (e->kind) {
    case EXPR_INT:
        if (__builtin_mul_overflow(e->u.int_value, scale, &scaled) ||
            __builtin_add_overflow(sum->constant, scaled, &sum->constant))
            sum->ok = false;
        return;
    case EXPR_UNARY:
        if (e->u.unary.op == UN_NEG) { sum_flatten(sum, e->u.unary.operand, -scale); return; }
        break;
    case EXPR_BINARY:
        switch (e->u.binary.op) {
        case BIN_ADD:
            sum_flatten(sum, e->u.binary.lhs, scale);
            sum_flatten(sum, e->u.binary.rhs, scale);
            return;
        case BIN_SUB:
            sum_flatten(sum, e->u.binary.lhs, scale);
            sum_flatten(sum, e->u.binary.rhs, -scale);
            return;
        case BIN_MUL:
            if (simplify_is_int_const(e->u.binary.rhs, &k)) {
                if (__builtin_mul_overflow(scale, k, &scaled)) { sum->ok = false; return; }
                sum_flatten(sum, e->u.binary.lhs, scaled);
                return;
            }
            if (simplify_is_int_const(e->u.binary.lhs, &k)) {
                if (__builtin_mul_overflow(scale, k, &scaled)) { sum->ok = false; return; }
                sum_flatten(sum, e->u.binary.rhs, scaled);
                return;
            }
            break;
        default: break;
        }
        break;
    default: break;
    }
    sum_add_term(sum, e, scale);
}

static Sum sum_of(Expr *e)
{
    Sum sum;
    memset(&sum, 0, sizeof sum);
    sum.ok = true;
    sum.dtype = e->dtype;
    sum_flatten(&sum, e, 1);
    return sum;
}

static Expr *term_expr(Simplifier *s, const Term *t, int64_t magnitude, Loc loc)
{
    if (magnitude == 1) return t->atom;
    return simplify_build_binary(s, BIN_MUL, t->atom, make_int(s, t->atom->dtype, magnitude, loc), loc);
}

/* Canonical expression of a sum: positive terms first, in order of
 * appearance, then negative ones, then the constant. */
static Expr *sum_build(Simplifier *s, const Sum *sum, Loc loc)
{
    Expr *result = NULL;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < sum->count; i++) {
            const Term *t = &sum->terms[i];
            if (t->coeff == 0 || (pass == 0) != (t->coeff > 0)) continue;
            int64_t magnitude = t->coeff > 0 ? t->coeff : -t->coeff;
            Expr *piece = term_expr(s, t, magnitude, loc);
            if (!result)
                result = t->coeff > 0 ? piece : simplify_build_binary(s, BIN_MUL, t->atom,
                                                       make_int(s, sum->dtype, t->coeff, loc), loc);
            else
                result = simplify_build_binary(s, t->coeff > 0 ? BIN_ADD : BIN_SUB, result, piece, loc);
        }
    int64_t c = ir_int_wrap(sum->dtype, sum->constant);
    if (!result) return make_int(s, sum->dtype, c, loc);
    if (c > 0) result = simplify_build_binary(s, BIN_ADD, result, make_int(s, sum->dtype, c, loc), loc);
    else if (c < 0 && c > INT64_MIN)
        result = simplify_build_binary(s, BIN_SUB, result, make_int(s, sum->dtype, -c, loc), loc);
    return result;
}

bool simplify_bounds(Simplifier *s, const Expr *e, int64_t *lo, int64_t *hi)
{
    return facts_bounds(s->facts, e, lo, hi);
}

/* Is coeff*atom a multiple of k, by the atom's congruence? */
static bool term_multiple_of(Simplifier *s, const Term *t, int64_t k)
{
    if (t->coeff % k == 0) return true;
    Modular m = facts_modular(s->facts, t->atom);
    int64_t c, b;
    if (__builtin_mul_overflow(m.coeff, t->coeff, &c) ||
        __builtin_mul_overflow(m.base, t->coeff, &b))
        return false;
    return c % k == 0 && b % k == 0;
}

/* ------------------------------------------------------------------ */
/* integer division and remainder by a positive constant               */
/* ------------------------------------------------------------------ */

static Expr *simplify_div(Simplifier *s, Expr *e, Expr *a, int64_t k)
{
    Loc loc = e->loc;
    int64_t lo, hi;
    if (k == 1) return a;
    if (simplify_bounds(s, a, &lo, &hi) && floor_div(lo, k) == floor_div(hi, k))
        return make_int(s, e->dtype, floor_div(lo, k), loc);
    /* (x / a) / k == x / (a * k) for positive a and k */
    int64_t inner, product;
    if (a->kind == EXPR_BINARY && a->u.binary.op == BIN_DIV && a->lanes == 1 &&
        simplify_is_int_const(a->u.binary.rhs, &inner) && inner > 0 &&
        !__builtin_mul_overflow(inner, k, &product))
        return simplify_expr(s, simplify_build_binary(s, BIN_DIV, a->u.binary.lhs,
                                       make_int(s, e->dtype, product, loc), loc));
    Sum sum = sum_of(a);
    if (!sum.ok) return e;
    /* (g*X + c) / k == X' / (k/g) when g divides every coefficient and k */
    int64_t g = 0;
    for (int i = 0; i < sum.count; i++) g = gcd64(g, sum.terms[i].coeff);
    if (g > 1 && k % g == 0) {
        Sum reduced = sum;
        for (int i = 0; i < reduced.count; i++) reduced.terms[i].coeff /= g;
        reduced.constant = floor_div(sum.constant, g);
        Expr *d = simplify_build_binary(s, BIN_DIV, sum_build(s, &reduced, loc),
                         make_int(s, e->dtype, k / g, loc), loc);
        return simplify_expr(s, d);
    }
    /* split into D (coefficients multiple of k), M (multiples of k by
     * congruence) and R (the rest, with the constant's remainder) */
    Sum exact = { .ok = true, .dtype = sum.dtype }, rest = exact, modular = exact;
    exact.constant = floor_div(sum.constant, k);
    rest.constant = sum.constant - exact.constant * k;
    for (int i = 0; i < sum.count; i++) {
        Term *t = &sum.terms[i];
        if (t->coeff % k == 0) sum_add_term(&exact, t->atom, t->coeff / k);
        else if (term_multiple_of(s, t, k)) sum_add_term(&modular, t->atom, t->coeff);
        else sum_add_term(&rest, t->atom, t->coeff);
    }
    if (exact.count == 0 && exact.constant == 0 && rest.count == 0 && rest.constant == 0)
        return e; /* only congruence-divisible terms: nothing to split off */
    Expr *r = sum_build(s, &rest, loc);
    bool rest_known = simplify_bounds(s, r, &lo, &hi) && floor_div(lo, k) == floor_div(hi, k);
    if (exact.count == 0 && exact.constant == 0 && !(rest_known && modular.count))
        return e;
    Expr *result = NULL;
    if (rest_known) {
        exact.constant += floor_div(lo, k);
        Expr *d = exact.count || exact.constant ? sum_build(s, &exact, loc) : NULL;
        if (modular.count) {
            Expr *m = simplify_build_binary(s, BIN_DIV, sum_build(s, &modular, loc),
                             make_int(s, e->dtype, k, loc), loc);
            result = d && !(simplify_is_int_const(d, &lo) && lo == 0) ? simplify_build_binary(s, BIN_ADD, d, m, loc) : m;
        } else {
            result = d ? d : make_int(s, e->dtype, 0, loc);
        }
    } else {
        for (int i = 0; i < modular.count; i++)
            sum_add_term(&rest, modular.terms[i].atom, modular.terms[i].coeff);
        Expr *q = simplify_build_binary(s, BIN_DIV, sum_build(s, &rest, loc),
                         make_int(s, e->dtype, k, loc), loc);
        Expr *d = sum_build(s, &exact, loc);
        result = simplify_is_int_const(d, &lo) && lo == 0 ? q : simplify_build_binary(s, BIN_ADD, d, q, loc);
    }
    return simplify_expr(s, result);
}

static Expr *simplify_mod(Simplifier *s, Expr *e, Expr *a, int64_t k)
{
    Loc loc = e->loc;
    int64_t lo, hi;
    if (k == 1) return make_int(s, e->dtype, 0, loc);
    if (simplify_bounds(s, a, &lo, &hi) && floor_div(lo, k) == floor_div(hi, k)) {
        if (lo >= 0 && hi < k) return a;
        if (lo == hi) return make_int(s, e->dtype, lo - floor_div(lo, k) * k, loc);
    }
    Modular m = facts_modular(s->facts, a);
    if (m.coeff % k == 0) return make_int(s, e->dtype, m.base - floor_div(m.base, k) * k, loc);
    Sum sum = sum_of(a);
    if (!sum.ok) return e;
    Sum rest = { .ok = true, .dtype = sum.dtype };
    rest.constant = sum.constant - floor_div(sum.constant, k) * k;
    bool dropped = rest.constant != sum.constant;
    for (int i = 0; i < sum.count; i++) {
        Term *t = &sum.terms[i];
        if (term_multiple_of(s, t, k)) { dropped = true; continue; }
        sum_add_term(&rest, t->atom, t->coeff);
    }
    Expr *r = sum_build(s, &rest, loc);
    if (simplify_bounds(s, r, &lo, &hi) && lo >= 0 && hi < k) return r;
    if (!dropped) return e;
    return simplify_build_binary(s, BIN_MOD, r, make_int(s, e->dtype, k, loc), loc);
}

/* ------------------------------------------------------------------ */
/* comparisons                                                         */
/* ------------------------------------------------------------------ */

/* Decides a < b (and friends) on signed integers from the bounds of
 * a - b; returns -1 when unknown. */
static int decide_comparison(Simplifier *s, BinOp op, Expr *a, Expr *b)
{
    int64_t lo, hi, alo, ahi, blo, bhi;
    bool is_signed = ir_dtype_class(a->dtype) == DCLASS_SINT;
    if (is_signed && a->lanes == 1 && b->lanes == 1) {
        Sum diff = sum_of(a);
        Sum rhs = sum_of(b);
        if (diff.ok && rhs.ok) {
            for (int i = 0; i < rhs.count && diff.ok; i++)
                sum_add_term(&diff, rhs.terms[i].atom, -rhs.terms[i].coeff);
            diff.constant -= rhs.constant;
            diff.dtype = DT_I64; /* mathematical difference: no wrap */
            if (diff.ok) {
                Expr *d = sum_build(s, &diff, a->loc);
                if (!simplify_bounds(s, d, &lo, &hi)) goto separate;
                switch (op) {
                case BIN_LT: return hi < 0 ? 1 : lo >= 0 ? 0 : -1;
                case BIN_LE: return hi <= 0 ? 1 : lo > 0 ? 0 : -1;
                case BIN_GT: return lo > 0 ? 1 : hi <= 0 ? 0 : -1;
                case BIN_GE: return lo >= 0 ? 1 : hi < 0 ? 0 : -1;
                case BIN_EQ: return lo == 0 && hi == 0 ? 1 : (lo > 0 || hi < 0) ? 0 : -1;
                case BIN_NE: return lo == 0 && hi == 0 ? 0 : (lo > 0 || hi < 0) ? 1 : -1;
                default: return -1;
                }
            }
        }
    }
separate:
    if (!simplify_bounds(s, a, &alo, &ahi) || !simplify_bounds(s, b, &blo, &bhi)) return -1;
    switch (op) {
    case BIN_LT: return ahi < blo ? 1 : alo >= bhi ? 0 : -1;
    case BIN_LE: return ahi <= blo ? 1 : alo > bhi ? 0 : -1;
    case BIN_GT: return alo > bhi ? 1 : ahi <= blo ? 0 : -1;
    case BIN_GE: return alo >= bhi ? 1 : ahi < blo ? 0 : -1;
    case BIN_EQ: return alo == ahi && blo == bhi && alo == blo ? 1 : (ahi < blo || alo > bhi) ? 0 : -1;
    case BIN_NE: return alo == ahi && blo == bhi && alo == blo ? 0 : (ahi < blo || alo > bhi) ? 1 : -1;
    default: return -1;
    }
}

/* ------------------------------------------------------------------ */
/* floats                                                              */
/* ------------------------------------------------------------------ */

static bool is_float_const(const Expr *e, double *value)
{
    if (!e || e->kind != EXPR_FLOAT || e->lanes != 1) return false;
    *value = e->u.float_value;
    return true;
}

static Expr *make_float(Simplifier *s, DType t, double v, Loc loc)
{
    Expr *e = ir_float(s->k, t, t == DT_F32 ? (double)(float)v : v);
    e->loc = loc;
    return e;
}

/* Folds a binary op on two f32 or f64 constants; NULL when the GPU result
 * could differ (min/max of zeros or NaNs: PTX picks -0.0 and non-NaN). */
static Expr *fold_float_binary(Simplifier *s, Expr *e, double a, double b)
{
    DType t = e->u.binary.lhs->dtype;
    BinOp op = e->u.binary.op;
    Loc loc = e->loc;
    if (t != DT_F32 && t != DT_F64) return NULL;
    if (is_comparison(op)) {
        bool r;
        switch (op) {
        case BIN_EQ: r = a == b; break;
        case BIN_NE: r = a != b; break;
        case BIN_LT: r = a < b; break;
        case BIN_LE: r = a <= b; break;
        case BIN_GT: r = a > b; break;
        default: r = a >= b; break;
        }
        return make_bool(s, r, 1, loc);
    }
    if (t == DT_F32) {
        float x = (float)a, y = (float)b, r;
        switch (op) {
        case BIN_ADD: r = x + y; break;
        case BIN_SUB: r = x - y; break;
        case BIN_MUL: r = x * y; break;
        case BIN_DIV: r = x / y; break;
        case BIN_MIN: case BIN_MAX:
            if (isnan(x) || isnan(y) || (x == 0 && y == 0)) return NULL;
            r = op == BIN_MIN ? (x < y ? x : y) : (x > y ? x : y);
            break;
        default: return NULL;
        }
        return make_float(s, t, r, loc);
    }
    double r;
    switch (op) {
    case BIN_ADD: r = a + b; break;
    case BIN_SUB: r = a - b; break;
    case BIN_MUL: r = a * b; break;
    case BIN_DIV: r = a / b; break;
    case BIN_MIN: case BIN_MAX:
        if (isnan(a) || isnan(b) || (a == 0 && b == 0)) return NULL;
        r = op == BIN_MIN ? (a < b ? a : b) : (a > b ? a : b);
        break;
    default: return NULL;
    }
    return make_float(s, t, r, loc);
}

/* ------------------------------------------------------------------ */
/* expressions                                                         */
/* ------------------------------------------------------------------ */

static Expr *simplify_binary(Simplifier *s, Expr *e)
{
    Expr *a = e->u.binary.lhs = simplify_expr(s, e->u.binary.lhs);
    Expr *b = e->u.binary.rhs = simplify_expr(s, e->u.binary.rhs);
    BinOp op = e->u.binary.op;
    Loc loc = e->loc;
    int64_t x, y;
    double fx, fy;

    /* vectors: operate on broadcast values, fold ramp + broadcast */
    if (e->lanes > 1) {
        if (a->kind == EXPR_BROADCAST && b->kind == EXPR_BROADCAST) {
            Expr *scalar = simplify_build_binary(s, op, a->u.broadcast.value, b->u.broadcast.value, loc);
            return ir_broadcast(s->k, simplify_expr(s, scalar), e->lanes);
        }
        if (op == BIN_ADD && ir_dtype_is_int(e->dtype)) {
            if (a->kind == EXPR_BROADCAST && b->kind == EXPR_RAMP) { Expr *t = a; a = b; b = t; }
            if (a->kind == EXPR_RAMP && b->kind == EXPR_BROADCAST) {
                Expr *base = simplify_expr(s, simplify_build_binary(s, BIN_ADD, a->u.ramp.base,
                                                     b->u.broadcast.value, loc));
                return ir_ramp(s->k, base, a->u.ramp.stride, e->lanes);
            }
        }
        if (is_comparison(op) && ir_dtype_is_int(a->dtype)) {
            int r = decide_comparison(s, op, a, b);
            if (r >= 0) return make_bool(s, r, e->lanes, loc);
        }
        return e;
    }

    if (simplify_is_int_const(a, NULL) && simplify_is_int_const(b, NULL)) {
        if (ir_eval_int(e, NULL, NULL, 0, &x)) return make_int(s, e->dtype, x, loc);
        return e;
    }
    if (is_float_const(a, &fx) && is_float_const(b, &fy)) {
        Expr *r = fold_float_binary(s, e, fx, fy);
        return r ? r : e;
    }
    /* constant operand on the right */
    if ((a->kind == EXPR_INT || a->kind == EXPR_FLOAT) &&
        b->kind != EXPR_INT && b->kind != EXPR_FLOAT &&
        (is_commutative(op) || is_comparison(op))) {
        e->u.binary.lhs = b;
        e->u.binary.rhs = a;
        if (is_comparison(op)) e->u.binary.op = op = flip_comparison(op);
        a = e->u.binary.lhs;
        b = e->u.binary.rhs;
    }

    if (ir_dtype_is_float(a->dtype)) {
        if ((op == BIN_MUL || op == BIN_DIV) && is_float_const(b, &fy) && fy == 1.0)
            return a;
        if (op == BIN_ADD && is_float_const(b, &fy) && fy == 0.0 && signbit(fy))
            return a;
        return e;
    }

    switch (op) {
    case BIN_ADD: case BIN_SUB: case BIN_MUL: {
        if (op == BIN_MUL && !simplify_is_int_const(b, NULL) && !simplify_is_int_const(a, NULL)) return e;
        Sum sum = sum_of(e);
        if (!sum.ok) return e;
        return sum_build(s, &sum, loc);
    }
    case BIN_DIV:
        if (simplify_is_int_const(b, &y) && y > 0) return simplify_div(s, e, a, y);
        return e;
    case BIN_MOD:
        if (simplify_is_int_const(b, &y) && y > 0) return simplify_mod(s, e, a, y);
        return e;
    case BIN_MIN: case BIN_MAX: {
        if (ir_expr_equal(a, b)) return a;
        int r = decide_comparison(s, BIN_LE, a, b);
        if (r == 1) return op == BIN_MIN ? a : b;
        r = decide_comparison(s, BIN_GE, a, b);
        if (r == 1) return op == BIN_MIN ? b : a;
        return e;
    }
    case BIN_AND:
        if (simplify_is_int_const(b, &y) && y == 0) return b;
        if (ir_expr_equal(a, b)) return a;
        return e;
    case BIN_OR: case BIN_XOR:
        if (simplify_is_int_const(b, &y) && y == 0) return a;
        if (op == BIN_OR && ir_expr_equal(a, b)) return a;
        return e;
    case BIN_SHL: case BIN_SHR:
        if (simplify_is_int_const(b, &y) && y == 0) return a;
        return e;
    case BIN_LAND:
        if (simplify_is_int_const(b, &y)) return y ? a : b;
        if (simplify_is_int_const(a, &x)) return x ? b : a;
        if (ir_expr_equal(a, b)) return a;
        return e;
    case BIN_LOR:
        if (simplify_is_int_const(b, &y)) return y ? b : a;
        if (simplify_is_int_const(a, &x)) return x ? a : b;
        if (ir_expr_equal(a, b)) return a;
        return e;
    default:
        if (is_comparison(op) && ir_dtype_is_int(a->dtype)) {
            if (ir_expr_equal(a, b))
                return make_bool(s, op == BIN_EQ || op == BIN_LE || op == BIN_GE, 1, loc);
            int r = decide_comparison(s, op, a, b);
            if (r >= 0) return make_bool(s, r, 1, loc);
        }
        return e;
    }
}

static Expr *simplify_cast(Simplifier *s, Expr *e)
{
    Expr *v = e->u.cast.value = simplify_expr(s, e->u.cast.value);
    DType to = e->dtype, from = v->dtype;
    int64_t x;
    double f;
    Loc loc = e->loc;
    if (e->lanes > 1) {
        if (v->kind == EXPR_BROADCAST)
            return ir_broadcast(s->k, simplify_expr(s, ir_cast(s->k, e->u.cast.kind, to,
                                                               v->u.broadcast.value)), e->lanes);
        return e;
    }
    if (to == from && e->u.cast.kind == CAST_CONVERT) return v;
    if (e->u.cast.kind == CAST_BITCAST) {
        if (ir_dtype_bits(to) != ir_dtype_bits(from) || ir_dtype_bits(to) != 32) return e;
        if (from == DT_F32 && is_float_const(v, &f) && ir_dtype_is_int(to)) {
            float g = (float)f;
            uint32_t bits;
            memcpy(&bits, &g, 4);
            return make_int(s, to, (int64_t)bits, loc);
        }
        if (to == DT_F32 && simplify_is_int_const(v, &x)) {
            uint32_t bits = (uint32_t)x;
            float g;
            memcpy(&g, &bits, 4);
            return make_float(s, to, g, loc);
        }
        if (ir_dtype_is_int(to) && simplify_is_int_const(v, &x)) return make_int(s, to, x, loc);
        return e;
    }
    if (simplify_is_int_const(v, &x)) {
        if (ir_dtype_is_int(to)) {
            if (to == DT_BOOL) return make_bool(s, x != 0, 1, loc);
            /* a u64 constant above INT64_MAX is stored wrapped: only
             * fold when the source is not an unsigned 64-bit value */
            if (from == DT_U64 && x < 0) return e;
            return make_int(s, to, x, loc);
        }
        if (from == DT_U64) return e;
        if (to == DT_F32) return make_float(s, to, (float)x, loc);
        if (to == DT_F64) return make_float(s, to, (double)x, loc);
        return e;
    }
    if (is_float_const(v, &f)) {
        if (ir_dtype_is_int(to) && to != DT_BOOL && from != DT_F16 && from != DT_BF16) {
            int64_t lo = 0, hi = 0;
            double t = trunc(f);
            bool in_range;
            switch (to) {
            case DT_I8: lo = INT8_MIN; hi = INT8_MAX; break;
            case DT_U8: case DT_UE8M0: lo = 0; hi = UINT8_MAX; break;
            case DT_I16: lo = INT16_MIN; hi = INT16_MAX; break;
            case DT_U16: lo = 0; hi = UINT16_MAX; break;
            case DT_I32: lo = INT32_MIN; hi = INT32_MAX; break;
            case DT_U32: lo = 0; hi = UINT32_MAX; break;
            default: return e;
            }
            in_range = !isnan(f) && t >= (double)lo && t <= (double)hi;
            if (in_range) return make_int(s, to, (int64_t)t, loc);
            return e;
        }
        if (from == DT_F64 && to == DT_F32) return make_float(s, to, (float)f, loc);
        if (from == DT_F32 && to == DT_F64) return make_float(s, to, f, loc);
    }
    return e;
}

static Expr *simplify_call(Simplifier *s, Expr *e)
{
    for (int i = 0; i < e->u.call.nargs; i++)
        e->u.call.args[i] = simplify_expr(s, e->u.call.args[i]);
    if (e->lanes > 1) return e;
    double a, b, c;
    int64_t x;
    Loc loc = e->loc;
    switch (e->u.call.op) {
    case INTR_SQRT: /* sqrt.rn is correctly rounded, as is sqrtf */
        if (e->dtype == DT_F32 && is_float_const(e->u.call.args[0], &a))
            return make_float(s, DT_F32, sqrtf((float)a), loc);
        return e;
    case INTR_FMA:
        if (e->dtype == DT_F32 && is_float_const(e->u.call.args[0], &a) &&
            is_float_const(e->u.call.args[1], &b) && is_float_const(e->u.call.args[2], &c))
            return make_float(s, DT_F32, fmaf((float)a, (float)b, (float)c), loc);
        return e;
    case INTR_ISFINITE:
        if (is_float_const(e->u.call.args[0], &a)) return make_bool(s, isfinite(a), 1, loc);
        return e;
    case INTR_POPCOUNT:
        if (simplify_is_int_const(e->u.call.args[0], NULL) && ir_eval_int(e, NULL, NULL, 0, &x))
            return make_int(s, e->dtype, x, loc);
        return e;
    default:
        return e; /* exp, exp2, rsqrt, sigmoid: approximations on the GPU */
    }
}

static Expr *simplify_unary(Simplifier *s, Expr *e)
{
    Expr *a = e->u.unary.operand = simplify_expr(s, e->u.unary.operand);
    int64_t x;
    double f;
    if (e->lanes > 1) return e;
    if (a->kind == EXPR_UNARY && a->u.unary.op == e->u.unary.op &&
        (e->u.unary.op == UN_NEG || e->u.unary.op == UN_NOT || e->u.unary.op == UN_LNOT))
        return a->u.unary.operand;
    if (simplify_is_int_const(a, NULL) && ir_eval_int(e, NULL, NULL, 0, &x))
        return make_int(s, e->dtype, x, e->loc);
    if (is_float_const(a, &f) && (e->dtype == DT_F32 || e->dtype == DT_F64)) {
        if (e->u.unary.op == UN_NEG) return make_float(s, e->dtype, -f, e->loc);
        if (e->u.unary.op == UN_ABS) return make_float(s, e->dtype, fabs(f), e->loc);
    }
    if (e->u.unary.op == UN_NEG && is_scalar_int(e)) {
        Sum sum = sum_of(e);
        if (sum.ok) return sum_build(s, &sum, e->loc);
    }
    return e;
}

/* Predicates that always hold are dropped; NULL means "all lanes". */
Expr *simplify_predicate(Simplifier *s, Expr *p, bool *never)
{
    int64_t v;
    *never = false;
    if (!p) return NULL;
    p = simplify_expr(s, p);
    Expr *scalar = p->kind == EXPR_BROADCAST ? p->u.broadcast.value : p;
    if (simplify_is_int_const(scalar, &v)) {
        if (v) return NULL;
        *never = true;
    }
    return p;
}

/* The conjuncts of a guard that remain after dropping each `index <
 * extent` whose extent is a dimension of the accessed tensor and which
 * facts_prove_below proves (analysis_bounds.c); NULL when none remains.
 * Only tensor dimensions qualify: the proof needs an extent the launcher
 * checked to fit in i32. */
static Expr *unproven_conjuncts(Simplifier *s, Expr *c, const Buffer *b)
{
    if (c->kind != EXPR_BINARY || c->lanes != 1) return c;
    Expr *lhs = c->u.binary.lhs, *rhs = c->u.binary.rhs;
    BinOp op = c->u.binary.op;
    if (op == BIN_LAND) {
        Expr *l = unproven_conjuncts(s, lhs, b), *r = unproven_conjuncts(s, rhs, b);
        if (!l || !r) return l ? l : r;
        if (l == lhs && r == rhs) return c;
        return simplify_build_binary(s, BIN_LAND, l, r, c->loc);
    }
    if (op != BIN_LT && op != BIN_GT) return c;
    const Expr *index = op == BIN_LT ? lhs : rhs, *extent = op == BIN_LT ? rhs : lhs;
    for (int d = 0; d < b->rank; d++)
        if (ir_expr_equal(extent, b->shape[d]) && facts_prove_below(s->facts, index, extent))
            return NULL;
    return c;
}

Expr *simplify_access_predicate(Simplifier *s, Expr *p, const Buffer *b, bool *never)
{
    p = simplify_predicate(s, p, never);
    if (!p || *never || b->scope != SCOPE_GLOBAL) return p;
    Expr *scalar = p->kind == EXPR_BROADCAST ? p->u.broadcast.value : p;
    if (scalar->lanes != 1) return p;
    Expr *kept = unproven_conjuncts(s, scalar, b);
    if (kept == scalar) return p;
    if (!kept) return NULL;
    return p->kind == EXPR_BROADCAST ? ir_broadcast(s->k, kept, p->lanes) : kept;
}

Expr *simplify_expr(Simplifier *s, Expr *e)
{
    if (!e) return NULL;
    int64_t lo, hi;
    bool never;
    switch (e->kind) {
    case EXPR_INT: case EXPR_FLOAT:
        return e;
    case EXPR_VAR:
        if (e->lanes == 1 && ir_dtype_is_int(e->dtype) && e->u.var->kind == VAR_LET &&
            simplify_bounds(s, e, &lo, &hi) && lo == hi)
            return make_int(s, e->dtype, lo, e->loc);
        return e;
    case EXPR_LOAD:
        for (int i = 0; i < e->u.load.buffer->rank; i++)
            e->u.load.indices[i] = simplify_expr(s, e->u.load.indices[i]);
        e->u.load.predicate = simplify_access_predicate(s, e->u.load.predicate,
                                                        e->u.load.buffer, &never);
        if (never) {
            /* masked lanes read zero */
            Expr *zero = ir_dtype_is_float(e->dtype) ? make_float(s, e->dtype, 0.0, e->loc)
                                                     : make_int(s, e->dtype, 0, e->loc);
            return e->lanes > 1 ? ir_broadcast(s->k, zero, e->lanes) : zero;
        }
        return e;
    case EXPR_UNARY: return simplify_unary(s, e);
    case EXPR_BINARY: return simplify_binary(s, e);
    case EXPR_SELECT: {
        Expr *c = e->u.select.cond = simplify_expr(s, e->u.select.cond);
        e->u.select.then_value = simplify_expr(s, e->u.select.then_value);
        e->u.select.else_value = simplify_expr(s, e->u.select.else_value);
        Expr *scalar = c->kind == EXPR_BROADCAST ? c->u.broadcast.value : c;
        int64_t v;
        if (simplify_is_int_const(scalar, &v) &&
            e->u.select.then_value->lanes == e->lanes &&
            e->u.select.else_value->lanes == e->lanes)
            return v ? e->u.select.then_value : e->u.select.else_value;
        if (ir_expr_equal(e->u.select.then_value, e->u.select.else_value) &&
            e->u.select.then_value->lanes == e->lanes)
            return e->u.select.then_value;
        return e;
    }
    case EXPR_CAST: return simplify_cast(s, e);
    case EXPR_CALL: return simplify_call(s, e);
    case EXPR_RAMP:
        e->u.ramp.base = simplify_expr(s, e->u.ramp.base);
        if (e->u.ramp.stride == 0) return ir_broadcast(s->k, e->u.ramp.base, e->lanes);
        return e;
    case EXPR_BROADCAST:
        e->u.broadcast.value = simplify_expr(s, e->u.broadcast.value);
        return e;
    default:
        return e;
    }
}
