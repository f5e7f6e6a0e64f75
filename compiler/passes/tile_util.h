/*
 * tile_util.h -- helpers shared by the tile-level passes (check_types,
 * lower_tile_ops, infer_layouts, lower_parallel).
 *
 * These passes all walk the same statement tree and rewrite expressions in
 * place, build index arithmetic that pass_simplify must be able to fold, and
 * create fresh variables.  Keeping the walkers here means each pass only
 * states what it does to the nodes it cares about.  Private to
 * compiler/passes/; nothing outside the tile passes includes it.
 */
#ifndef TKC_TILE_UTIL_H
#define TKC_TILE_UTIL_H

#include "ir.h"

/* Every index the tile passes build is i32: symbols are i32 and the
 * runtime rejects tensors whose element offsets overflow it. */
#define PASS_INDEX_TYPE DT_I32

/* Index arithmetic that folds the trivial cases as it builds (constants,
 * x+0, x*1, x*0, x/1, x%1), so the lowered code reads like hand-written
 * code even before pass_simplify.  Integer DIV/MOD are floor operations.
 * Operands of different integer types are converted to the lhs type. */
Expr *pass_index(Kernel *k, int64_t value);
Expr *pass_add(Kernel *k, Expr *a, Expr *b);
Expr *pass_mul(Kernel *k, Expr *a, Expr *b);
Expr *pass_div(Kernel *k, Expr *a, Expr *b);
Expr *pass_mod(Kernel *k, Expr *a, Expr *b);
/* a && b, where either may be NULL (meaning "true"). */
Expr *pass_and(Kernel *k, Expr *a, Expr *b);
/* A value conversion to `to` (CAST_CONVERT); float-to-float conversions
 * between two narrow types go through f32, the type the hardware converts
 * through (e.g. e4m3 -> f32 -> bf16).  Returns value itself when the type
 * already matches. */
Expr *pass_convert(Kernel *k, Expr *value, DType to);

/* Post-order expression rewriting: the children of e are rewritten first
 * (in place), then fn decides what replaces e itself (return e to keep
 * it).  NULL is passed through. */
typedef Expr *(*PassExprFn)(void *ctx, Expr *e);
Expr *pass_rewrite_expr(Expr *e, PassExprFn fn, void *ctx);
/* Applies pass_rewrite_expr to every expression slot of s (indices, values,
 * predicates, loop bounds, region starts); with recurse, also to those of
 * every nested statement. */
void pass_rewrite_stmt_exprs(Stmt *s, bool recurse, PassExprFn fn,
                             void *ctx);

/* Pre-order statement visit (s, then its children in program order). */
typedef void (*PassStmtFn)(void *ctx, Stmt *s);
void pass_visit_stmts(Stmt *s, PassStmtFn fn, void *ctx);

/* The buffers a statement itself reads and writes: a STORE's or ATOMIC's
 * buffer, the regions of COPY (including its mbarrier), FILL, GEMM,
 * MBARRIER, TMA and WGMMA, REDUCE's buffers.  Buffers read by the loads
 * inside its expressions are not listed (walk those with
 * pass_rewrite_stmt_exprs or the expressions themselves), nor anything in
 * nested bodies.  An mbarrier a TMA load or copy completes on is read and
 * written; an mbarrier WAIT only reads.  Returns the count. */
#define PASS_MAX_BUFFER_USES 4
typedef struct {
    Buffer *buffer;
    const Region *region; /* NULL for STORE, ATOMIC, REDUCE, GEMM's C and
                             WGMMA's accumulator (whole buffer / indices) */
    bool read, write;
} PassBufferUse;
int pass_stmt_buffer_uses(const Stmt *s,
                          PassBufferUse uses[PASS_MAX_BUFFER_USES]);

/* diag_error, and *ok = false: how a tile pass reports a user error and
 * remembers that it failed. */
void pass_error(Diag *diag, bool *ok, Loc loc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Shape of a region: the extents of its non-singleton dimensions, in
 * order.  Returns the rank of the shape. */
int pass_region_shape(const Region *r, int64_t shape[IR_MAX_RANK]);
/* A buffer's constant shape, false when some dimension is not an
 * EXPR_INT (global tensors). */
bool pass_buffer_const_shape(const Buffer *b, int64_t shape[IR_MAX_RANK]);

/* "[4, 16, 32]" in the arena, for messages. */
const char *pass_format_extents(Arena *arena, const int64_t *extent,
                                int rank);

/* Layouts (see the Layout comment in ir.h). */
Layout *pass_new_tile_layout(Kernel *k, int rank, const int64_t *extent,
                             int threads, int vec);
/* The MMA layout of an [m, n] tile over `warpgroups` warpgroups
 * (docs/hopper.md 4): threads 128*warpgroups, vec 2 (the two adjacent
 * columns a thread holds), slots m / (64*warpgroups). */
Layout *pass_new_mma_layout(Kernel *k, int64_t m, int64_t n, int warpgroups);
int64_t pass_layout_chunks(const Layout *l); /* prod(extent)/vec; reduced:
                                                the parent's chunks */
bool pass_layout_equal(const Layout *a, const Layout *b);
/* "tile [4, 16, 32] (128 threads, vec 8)" or "reduced [4, 16] of
 * [4, 16, 32] (128 threads, vec 8, group 4)". */
const char *pass_format_layout(Arena *arena, const Layout *l);

#endif
