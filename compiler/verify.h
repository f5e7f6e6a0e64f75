/*
 * verify.h -- private interface between verify.c (the verifier's walk,
 * scopes and the classic statements), verify_expr.c (expressions and
 * accesses) and verify_hopper.c (the rules of the Hopper nodes: gemm,
 * mbarrier, tma, wgmma, fence, pipelined loops, named barriers, TMA
 * copies, MMA layouts, the kernel's Hopper fields).  Not for use outside
 * those three files.
 */
#ifndef TKC_VERIFY_H
#define TKC_VERIFY_H

#include "ir.h"

enum {
    VERIFY_MAX_REPORTS = 50, /* a pass that breaks everything says so once */
};

/* Which branch of a warp-specialised IF the walk is in: barriers that
 * every thread of the block must reach are illegal inside either. */
typedef enum { SIDE_BLOCK, SIDE_PRODUCER, SIDE_CONSUMER } WarpSide;

typedef struct {
    Kernel *k;
    Diag *diag;
    const char *pass;
    int errors;
    Loc stmt_loc;       /* the statement being checked, for Exprs without a
                           location of their own */
    /* variables, by Var.id */
    bool *in_scope;
    bool *bound;        /* bound once already (LET, loop, declaration) */
    int *lanes;         /* lanes of the value a LET bound */
    int *scope_vars;    /* stack of ids bound in open scopes */
    int nscope_vars;
    /* buffers in scope: stack, plus every buffer ever ALLOCated */
    PtrVec visible;
    PtrVec allocated;
    WarpSide side;
} Verifier;

/* Counts and reports one violation (`IR verifier (after PASS): ...`). */
__attribute__((format(printf, 3, 4))) void
verify_report(Verifier *v, Loc loc, const char *fmt, ...);
/* Buffer in scope, and no fragment at thread level. */
void verify_buffer_use(Verifier *v, const Buffer *b, Loc loc);
/* A Var of this kernel (its id indexes the tables), or report. */
bool verify_var_known(Verifier *v, const Var *var, Loc loc);

/* verify_expr.c */
void verify_expr(Verifier *v, const Expr *e);
/* e must be a scalar of dtype want (DT_VOID: any integer). */
void verify_scalar(Verifier *v, const Expr *e, DType want, const char *what);
/* A load or store of b: buffer in scope, one integer index per dimension
 * and a bool predicate (or none), each `lanes` wide; align_bytes a power
 * of two (0: none). */
void verify_access(Verifier *v, const Buffer *b, Expr *const *indices, int lanes,
                   const Expr *predicate, int align_bytes, Loc loc);
/* Buffer in scope, one integer start per dimension, extents >= 0. */
void verify_region(Verifier *v, const Region *r, Loc loc);
/* Reports a tile-level statement once KSTATE_THREAD is set. */
void verify_tile_level(Verifier *v, const Stmt *s);

/* verify_hopper.c */
void verify_hopper_stmt(Verifier *v, const Stmt *s);   /* GEMM .. FENCE */
void verify_copy_clauses(Verifier *v, const Stmt *copy);
void verify_pipelined_loop(Verifier *v, const Stmt *loop);
void verify_barrier(Verifier *v, const Stmt *barrier);
void verify_warp_specialized_if(Verifier *v, const Stmt *s);
void verify_mma_layout(Verifier *v, const Layout *layout, Loc loc);
void verify_async_buffer(Verifier *v, const Buffer *b, Loc loc);
void verify_kernel_hopper(Verifier *v);

static inline bool verify_dtype_ok(DType t) { return (unsigned)t < DT_COUNT; }
static inline const char *buffer_name(const Buffer *b)
{
    return b && b->name ? b->name : "?";
}
static inline const char *dname(DType t)
{
    return verify_dtype_ok(t) ? ir_dtype_name(t) : "<bad dtype>";
}
static inline const char *verify_var_name(const Var *var)
{
    return var && var->name ? var->name : "?";
}
static inline bool verify_is_integer(DType t)
{
    if (!verify_dtype_ok(t))
        return false;
    DClass cls = ir_dtype_class(t);
    return cls == DCLASS_SINT || cls == DCLASS_UINT;
}
static inline bool verify_is_float(DType t)
{
    return verify_dtype_ok(t) && ir_dtype_class(t) == DCLASS_FLOAT;
}

#endif
