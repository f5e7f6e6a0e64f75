/*
 * pipe_buffers.h -- the shared buffers a pipelined loop versions
 * (pipeline_loops; docs/hopper.md section 3).
 *
 * pipeline_loops gives every shared buffer that a pipelined loop's TMA
 * copies write a leading stage dimension [S, ...].  These helpers find
 * those buffers ("versioned"), check where else they are used, and
 * rewrite a body's accesses to index the stage; the pass keeps the
 * mbarrier rings and the producer/consumer protocol.  A versioned set is
 * a PtrVec of Buffer *, small enough for linear lookups.  Private to
 * compiler/passes/.
 */
#ifndef TKC_PIPE_BUFFERS_H
#define TKC_PIPE_BUFFERS_H

#include "async_util.h"

/* Is item one of set's items (pointer equality)? */
bool pipe_member(const PtrVec *set, const void *item);

/* Appends to out, once each and in order, the buffers the pipe copies of
 * s write (s a skeleton: SEQs and IFs around the copies). */
void pipe_destinations(Kernel *k, const Stmt *s, PtrVec *out);
/* The CTAs the pipe copies of a skeleton multicast to (0: none). */
int pipe_multicast(const Stmt *s);
/* The first statement of s outside skip1/skip2 that touches a buffer of
 * set (NULL when none). */
const Stmt *pipe_touching(const Stmt *s, const PtrVec *set, const Stmt *skip1,
                          const Stmt *skip2);
/* Does the body write a buffer of set other than by pipe copies? */
bool pipe_other_writes(const Stmt *s, const PtrVec *set);

/* Re-indexes s in place: every access to a buffer of versioned gets stage
 * as its leading index, and, when full is given, every pipe copy gets the
 * barrier full[stage].  Run it while the buffers have their old rank. */
void pipe_reindex(Kernel *k, const PtrVec *versioned, Var *stage, Buffer *full,
                  Stmt *s);
/* Adds the stage dimension [stages] in front of every versioned buffer
 * and sets its mbarrier_synchronized to synchronized (after
 * re-indexing: the walkers read index arrays of the old rank). */
void pipe_add_stage_dims(Kernel *k, const PtrVec *versioned, int64_t stages,
                         bool synchronized);

#endif
