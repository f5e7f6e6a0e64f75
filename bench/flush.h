/*
 * flush.h -- the L2 flush tkbench runs before each timed launch (flush.c
 * explains the modes and why reading is the default).
 */
#ifndef TKBENCH_FLUSH_H
#define TKBENCH_FLUSH_H

#include <stdbool.h>

#include "tk_internal.h"

#define TKB_FLUSH_BYTES ((size_t)256 << 20) /* > the H200's 60 MB L2 */

typedef enum { TKB_FLUSH_READ, TKB_FLUSH_MEMSET, TKB_FLUSH_READ_LAST } tkb_flush_mode;

typedef struct tkb_flush {
    const tk__driver_api *api;
    tkb_flush_mode mode;
    CUdeviceptr buffer, sink;
    CUmodule module;     /* the read kernel (evict_last loads for read-last) */
    CUfunction function;
    CUmodule demote_module; /* --flush read-last only */
    CUfunction demote_function;
} tkb_flush;

/* Allocates the buffer (and loads the read kernel); false after a message
 * on stderr. */
bool tkb_flush_init(tkb_flush *flush, const tk__driver_api *api, tkb_flush_mode mode);
/* Enqueues one flush on the default stream; pattern is the memset's fill
 * (the read flush ignores it). */
bool tkb_flush_run(tkb_flush *flush, unsigned pattern);
void tkb_flush_free(tkb_flush *flush);
const char *tkb_flush_name(tkb_flush_mode mode);

#endif
