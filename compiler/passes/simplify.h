/*
 * simplify.h -- private interface between the two halves of pass_simplify.
 *
 * simplify.c holds the pass entry and the statement-level rewriting;
 * simplify_expr.c holds expression folding and index algebra.  This header
 * carries the state they share and the few expression helpers the
 * statement rewriter calls.  Private to compiler/passes/simplify*.c.
 */
#ifndef TKC_SIMPLIFY_H
#define TKC_SIMPLIFY_H

#include "ir.h"

typedef struct {
    Kernel *k;
    Facts *facts;
} Simplifier;

/* Simplify e in place where possible; returns the (possibly new) node. */
Expr *simplify_expr(Simplifier *s, Expr *e);
/* Predicates that always hold become NULL ("all lanes"); *never is set
 * when the predicate is constant false. */
Expr *simplify_predicate(Simplifier *s, Expr *p, bool *never);
/* simplify_predicate for an access to b, also dropping the bounds
 * conjuncts `index < dimension of b` that analysis_bounds.c proves. */
Expr *simplify_access_predicate(Simplifier *s, Expr *p, const Buffer *b, bool *never);
bool simplify_is_int_const(const Expr *e, int64_t *value);
/* ir_binary with the given source location. */
Expr *simplify_build_binary(Simplifier *s, BinOp op, Expr *a, Expr *b, Loc loc);
/* Bounds of e from the kernel's Facts. */
bool simplify_bounds(Simplifier *s, const Expr *e, int64_t *lo, int64_t *hi);

#endif
