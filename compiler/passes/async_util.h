/*
 * async_util.h -- helpers shared by the Hopper tile passes (lower_tma,
 * warp_specialize, pipeline_loops; docs/hopper.md sections 2 and 3).
 *
 * The three passes build the same few things: mbarrier buffers and their
 * one-time initialisation at the top of the kernel, `thread_idx() == c`
 * guards, the byte count of a TMA box, and the "skeleton" of a pipelined
 * loop body (the TMA copies, the lets they read and the guards around
 * them), which one pass hands to the producer warpgroup and the other
 * issues ahead of time.  Private to compiler/passes/.
 */
#ifndef TKC_ASYNC_UTIL_H
#define TKC_ASYNC_UTIL_H

#include "tile_util.h"

/* thread_idx() == thread */
Expr *async_thread_is(Kernel *k, int64_t thread);
/* if cond { then_body } */
Stmt *async_if(Kernel *k, Expr *cond, Stmt *then_body, Loc loc);
Stmt *async_fence(Kernel *k, FenceOp op, int64_t value, Loc loc);
/* mbarrier op @bar[slot] (= value) */
Stmt *async_mbarrier(Kernel *k, MbarrierOp op, Buffer *bar, Expr *slot,
                     Expr *value, Loc loc);
/* A SHARED_ASYNC_MBARRIER buffer of u64[slots] and its ALLOC. */
Buffer *async_new_mbarriers(Kernel *k, const char *name, int64_t slots,
                            Loc loc, Stmt **alloc);
/* Puts `prefix...; if thread_idx() == 0 { inits }; fence mbarrier_init;
 * barrier` (then `fence cluster_sync` in a kernel with a cluster) at the
 * top of the kernel body: the barriers are initialised once, and visible
 * to every thread, to the async proxy and to the cluster's other CTAs
 * before use. */
void async_prepend_init(Kernel *k, Stmt **prefix, int nprefix, Stmt *inits,
                        Loc loc);

/* A COPY that lower_tma made a TMA load handled by a pipeline (tensor map
 * set, no barrier of its own yet, shared destination). */
bool async_is_pipe_copy(const Stmt *s);
/* Bytes of the box a TMA copy moves (out-of-bounds parts included). */
int64_t async_copy_bytes(const Stmt *copy);

/* The skeleton of a pipelined loop body: its pipe copies, with the IFs
 * around them and the immutable lets (that read no shared, fragment or
 * local data) before them, sharing the original nodes (ir_copy_stmt it
 * before use).  NULL when the body has no pipe copy. */
Stmt *async_skeleton(Kernel *k, Stmt *body);
/* Removes the pipe copies from body (in SEQs and IFs, not nested loops). */
Stmt *async_strip(Kernel *k, Stmt *body);
/* The transaction bytes one run of skeleton issues: constant, or a select
 * on the guards.  The skeleton's lets are substituted, so the value can
 * be computed before them.  NULL when nothing is issued. */
Expr *async_skeleton_bytes(Kernel *k, const Stmt *skeleton);
/* The first variable the skeleton reads that it neither defines nor
 * `allowed` accepts (NULL when none): the copies would be issued without
 * a value for it. */
typedef bool (*AsyncVarFn)(void *ctx, const Var *v);
const Var *async_missing_var(const Stmt *skeleton, AsyncVarFn allowed,
                             void *ctx);
/* True when e reads no buffer other than global tensors and calls no
 * per-thread intrinsic. */
bool async_uniform_scalar(const Expr *e);

/* cluster_uniform.c: values that are the same in every CTA of the
 * kernel's cluster (docs/hopper.md 11).  cluster_uniform_new records the
 * lets and loops of the kernel body as it is then. */
typedef struct ClusterUniform ClusterUniform;
ClusterUniform *cluster_uniform_new(Kernel *k);
bool cluster_uniform_expr(ClusterUniform *u, const Expr *e);
/* CTAs per cluster: the product of Kernel.cluster (1 without one). */
int cluster_size(const Kernel *k);

#endif
