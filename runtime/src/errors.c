/*
 * errors.c -- status strings, the per-thread last-error message, and dtype
 * names and sizes.
 *
 * libtk never prints: every failure records a message with tk__fail() and
 * returns a status.  The message lives in a thread-local buffer, so two
 * threads failing at once each read their own text from tk_last_error(),
 * and a successful call leaves the previous message alone (as errno does).
 */
#include <stdarg.h>
#include <stdio.h>

#include "tk_internal.h"

/* Long enough for a driver error string plus the argument that caused it. */
#define TK_ERROR_CAPACITY 512

static _Thread_local char tk__last_error_text[TK_ERROR_CAPACITY];

tk_status tk__fail(tk_status status, const char *fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    vsnprintf(tk__last_error_text, sizeof tk__last_error_text, fmt, args);
    va_end(args);
    return status;
}

const char *tk_last_error(void)
{
    return tk__last_error_text;
}

const char *tk_status_string(tk_status status)
{
    switch (status) {
    case TK_SUCCESS: return "success";
    case TK_ERROR_INVALID_ARGUMENT: return "invalid argument";
    case TK_ERROR_UNSUPPORTED: return "unsupported";
    case TK_ERROR_NO_DEVICE: return "no CUDA device";
    case TK_ERROR_DRIVER: return "CUDA driver error";
    case TK_ERROR_LAUNCH: return "kernel launch failed";
    }
    return "unknown status";
}

/* The names are the .tk spellings, so messages read like the kernel
 * sources.  The table is indexed by tk_dtype; a value outside the enum
 * (bad input from C) gets a name too rather than an out-of-bounds read. */
static const struct {
    const char *name;
    size_t size;
} tk__dtypes[] = {
    [TK_VOID] = {"void", 0},  [TK_BOOL] = {"bool", 1},
    [TK_I8] = {"i8", 1},      [TK_U8] = {"u8", 1},
    [TK_I16] = {"i16", 2},    [TK_U16] = {"u16", 2},
    [TK_I32] = {"i32", 4},    [TK_U32] = {"u32", 4},
    [TK_I64] = {"i64", 8},    [TK_U64] = {"u64", 8},
    [TK_F16] = {"f16", 2},    [TK_BF16] = {"bf16", 2},
    [TK_F32] = {"f32", 4},    [TK_F64] = {"f64", 8},
    [TK_E4M3] = {"e4m3", 1},  [TK_E5M2] = {"e5m2", 1},
    [TK_E2M1] = {"e2m1", 1},  [TK_UE8M0] = {"ue8m0", 1},
};
#define TK_DTYPE_COUNT ((int)(sizeof tk__dtypes / sizeof tk__dtypes[0]))

const char *tk__dtype_name(tk_dtype dtype)
{
    if ((int)dtype < 0 || (int)dtype >= TK_DTYPE_COUNT)
        return "<invalid dtype>";
    return tk__dtypes[dtype].name;
}

size_t tk_dtype_size(tk_dtype dtype)
{
    if ((int)dtype < 0 || (int)dtype >= TK_DTYPE_COUNT)
        return 0;
    return tk__dtypes[dtype].size;
}

/* The instance the last tk_* call picked; see tk_internal.h.  Kept beside
 * the error text because it is the same kind of per-thread report. */
static _Thread_local const char *tk__last_instance_name;

const char *tk__last_instance(void)
{
    return tk__last_instance_name ? tk__last_instance_name : "";
}

void tk__set_last_instance(const char *name)
{
    tk__last_instance_name = name;
}
