/*
 * analysis_bounds.c -- proving an index below a tensor dimension, for
 * dropping bounds guards that cannot fail.
 *
 * lower_tile_ops and the front end guard every global access with
 * `index < extent` per dimension (out-of-bounds loads read 0, stores are
 * skipped: tilekernels-spec 2.4).  Codegen turns each guard into a branch
 * around the access, which costs a compare, and inside the branch ptxas
 * re-loads the tensor's base pointer from the parameter bank, so a guard
 * that always holds is pure overhead.  facts_bounds cannot decide such a
 * guard: both sides grow with run-time symbols.  This file proves the
 * common case symbolically, the launch geometry tiling the extent
 * exactly: with grid dimension G = T / 128 (or ceildiv(T, 128) where a
 * constraint makes T % 128 == 0) the block var b is at most G - 1, so
 *     index = b * 128 + r,  0 <= r <= 127   gives   index <= 128 * G - 1 < T.
 *
 * The proof works on linear forms (constant + sum of coefficient * atom)
 * of extent - index, with LET vars and constraint-equated symbols
 * (NB == T / 128) expanded:
 *   1. every block var with a negative coefficient -c is replaced by its
 *      largest value, G - 1 (c * b <= c * (G - 1)), except along a
 *      cluster dimension, whose grid the launcher rounds up;
 *   2. every floor division atom N / M (or N >> k) whose coefficient is a
 *      multiple of M is replaced by a linear bound: M * (N / M) equals
 *      N - r when facts_modular says N = r (mod M), and otherwise lies
 *      in [N - M + 1, N] (the side that keeps the inequality true);
 *   3. the remaining atoms (thread_idx, loop vars, remainders, symbols
 *      with positive coefficients) are bounded by facts_bounds, and the
 *      proof holds if the lower bound of extent - index is at least 1.
 * Index arithmetic is i32 and wraps, while the proof is about the
 * mathematical value, so the index must be a sum of non-negative terms
 * with positive coefficients (every partial sum is then at most the
 * index, which the proof puts below the extent, and an extent is a
 * tensor dimension the launcher checked to fit in i32).  Anything else --
 * a subtraction, a division or shift of the whole index, an unknown
 * atom with a negative coefficient -- fails the proof and keeps the
 * guard: ragged shapes (T % 128 != 0 with a ceildiv grid) keep theirs.
 */
#include "ir.h"

#include <string.h>

enum { LIN_MAX = 24 };
/* Coefficients stay below 2^24 so that coefficient * (an i32 bound)
 * summed over LIN_MAX atoms fits in int64. */
static const int64_t COEF_LIMIT = (int64_t)1 << 24;

typedef struct {
    bool ok;
    int n;
    const Expr *atom[LIN_MAX];
    int64_t coef[LIN_MAX];
    int64_t c;
} Lin;

static bool is_i32(const Expr *e)
{
    return e && e->lanes == 1 && e->dtype == DT_I32;
}

static void lin_const(Lin *l, int64_t v)
{
    if (v > COEF_LIMIT * COEF_LIMIT || v < -COEF_LIMIT * COEF_LIMIT) l->ok = false;
    else l->c += v;
}

static void lin_atom(Lin *l, const Expr *atom, int64_t coef)
{
    if (!l->ok || coef == 0) return;
    for (int i = 0; i < l->n; i++) {
        if (!ir_expr_equal(l->atom[i], atom)) continue;
        l->coef[i] += coef;
        if (l->coef[i] >= COEF_LIMIT || l->coef[i] <= -COEF_LIMIT) l->ok = false;
        return;
    }
    if (l->n == LIN_MAX) {
        l->ok = false;
        return;
    }
    l->atom[l->n] = atom;
    l->coef[l->n++] = coef;
}

/* l += scale * e, expanding sums, constant products and shifts, LET
 * values and constraint equalities of i32 expressions. */
static void lin_add(Facts *f, const Expr *e, int64_t scale, Lin *l, int depth)
{
    if (!l->ok) return;
    if (!is_i32(e) || depth > 32 || scale >= COEF_LIMIT || scale <= -COEF_LIMIT) {
        l->ok = false;
        return;
    }
    int64_t k;
    switch (e->kind) {
    case EXPR_INT:
        lin_const(l, scale * e->u.int_value);
        return;
    case EXPR_VAR: {
        const Expr *d = facts_definition(f, e->u.var);
        if (is_i32(d)) {
            lin_add(f, d, scale, l, depth + 1);
            return;
        }
        break;
    }
    case EXPR_BINARY: {
        const Expr *a = e->u.binary.lhs, *b = e->u.binary.rhs;
        switch (e->u.binary.op) {
        case BIN_ADD:
            lin_add(f, a, scale, l, depth + 1);
            lin_add(f, b, scale, l, depth + 1);
            return;
        case BIN_SUB:
            lin_add(f, a, scale, l, depth + 1);
            lin_add(f, b, -scale, l, depth + 1);
            return;
        case BIN_MUL:
            if (ir_int_constant(b, &k) && k > -COEF_LIMIT && k < COEF_LIMIT) {
                lin_add(f, a, scale * k, l, depth + 1);
                return;
            }
            if (ir_int_constant(a, &k) && k > -COEF_LIMIT && k < COEF_LIMIT) {
                lin_add(f, b, scale * k, l, depth + 1);
                return;
            }
            break;
        case BIN_SHL:
            if (ir_int_constant(b, &k) && k >= 0 && k < 24) {
                lin_add(f, a, scale * ((int64_t)1 << k), l, depth + 1);
                return;
            }
            break;
        default:
            break;
        }
        break;
    }
    default:
        break;
    }
    lin_atom(l, e, scale);
}

/* N / M or N >> k (i32: arithmetic, floor division by 2^k). */
static bool floor_division(const Expr *e, const Expr **num, int64_t *m)
{
    int64_t k;
    if (e->kind != EXPR_BINARY || !is_i32(e)) return false;
    if (e->u.binary.op == BIN_DIV && ir_int_constant(e->u.binary.rhs, &k) && k > 0 &&
        k < COEF_LIMIT) {
        *num = e->u.binary.lhs;
        *m = k;
        return true;
    }
    if (e->u.binary.op == BIN_SHR && ir_int_constant(e->u.binary.rhs, &k) && k >= 0 && k < 24) {
        *num = e->u.binary.lhs;
        *m = (int64_t)1 << k;
        return true;
    }
    return false;
}

/* One rewriting round over l (steps 1 and 2 of the file comment); true
 * when some atom was replaced. */
static bool lin_bound_round(Facts *f, Lin *l)
{
    Kernel *k = facts_kernel(f);
    for (int i = 0; i < l->n; i++) {
        const Expr *a = l->atom[i];
        int64_t c = l->coef[i];
        if (c == 0) continue;
        if (c < 0 && a->kind == EXPR_VAR && a->u.var->kind == VAR_BLOCK &&
            a->u.var->block_dim >= 0 && a->u.var->block_dim < 3 &&
            k->grid[a->u.var->block_dim] && k->cluster[a->u.var->block_dim] <= 1) {
            /* c * b >= c * (G - 1); not in a cluster dimension, which the
             * launcher rounds up past G (docs/hopper.md 11) */
            l->coef[i] = 0;
            lin_add(f, k->grid[a->u.var->block_dim], c, l, 0);
            lin_const(l, -c);
            return true;
        }
        const Expr *num;
        int64_t m;
        if (floor_division(a, &num, &m) && c % m == 0) {
            Modular md = facts_modular(f, num);
            l->coef[i] = 0;
            lin_add(f, num, c / m, l, 0);
            if (md.coeff % m == 0) lin_const(l, -(c / m) * ir_floor_mod(md.base, m));
            else if (c > 0) lin_const(l, -(c / m) * (m - 1));
            return true;
        }
    }
    return false;
}

bool facts_prove_below(Facts *f, const Expr *index, const Expr *extent)
{
    if (!is_i32(index) || !is_i32(extent)) return false;
    Lin x = {.ok = true};
    lin_add(f, index, 1, &x, 0);
    if (!x.ok || x.c < 0) return false;
    for (int i = 0; i < x.n; i++) {
        int64_t lo, hi;
        if (x.coef[i] == 0) continue;
        if (x.coef[i] < 0 || !facts_bounds(f, x.atom[i], &lo, &hi) || lo < 0) return false;
    }
    Lin d = {.ok = true};
    lin_add(f, extent, 1, &d, 0);
    lin_add(f, index, -1, &d, 0);
    for (int round = 0; d.ok && round < 8 && lin_bound_round(f, &d); round++) {}
    if (!d.ok) return false;
    int64_t low = d.c;
    for (int i = 0; i < d.n; i++) {
        int64_t lo, hi;
        if (d.coef[i] == 0) continue;
        if (!facts_bounds(f, d.atom[i], &lo, &hi)) return false;
        if (lo < -((int64_t)1 << 32) || hi > ((int64_t)1 << 32)) return false;
        low += d.coef[i] * (d.coef[i] > 0 ? lo : hi);
    }
    return low >= 1;
}
