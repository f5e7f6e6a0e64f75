/*
 * tkbench.h -- what the three files of tkbench's own program share: the
 * result of one row, the run's context, the driver-call check and the
 * timed loop of a memory-bound row.  tkbench.c owns the method (copy
 * ceiling, L2 flush, events, medians) and the registry of bench.h;
 * builtin.c holds the rows built into tkbench (transposes,
 * per_token_cast, cast_back), timed through tkb_time_launches; report.c
 * prints the tables and writes the CSV.  Family files see only bench.h.
 */
#ifndef TK_BENCH_TKBENCH_H
#define TK_BENCH_TKBENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "flush.h"
#include "tk.h"
#include "tk_internal.h"

#define COPY_BYTES ((size_t)4 << 30)  /* the copy-rate buffer: 4 GiB      */
#define INPUT_SEED 20240601

/* Statistics of one series of timed launches, in microseconds. */
typedef struct timing {
    double median_us, min_us, p20_us, p80_us;
} timing;

/* One row of the tables and of the CSV. */
typedef struct result {
    const char *kernel;
    char label[160]; /* kernel shape config, what --filter matches */
    char shape[48], config[64];
    double bytes;
    timing time;    /* our kernel */
    timing ceiling; /* compute rows: the vendor launches interleaved with ours */
    double gbs, percent_copy;
    /* memory rows: the median time of a device-to-device copy moving the
     * same bytes (bytes / 2 read, bytes / 2 written), timed the same way
     * right after the kernel; 0 = not measured */
    double same_copy_us;
    double tflops, ceiling_tflops; /* compute-bound rows; 0 = none */
    /* compute rows: the SM clock (MHz), board power and what limits the
     * clock, read under load right after the timing; 0 and "" = unknown */
    int sm_clock_mhz;
    double power_w;
    const char *clock_limit;
    const char *check; /* "ok", "FAIL", "error" */
    char detail[200];
} result;

/* Everything one run needs; passed around instead of globals. */
typedef struct bench_context {
    const tk__driver_api *api;
    tkb_flush flush;
    CUevent start, stop;
    int iters;
    double copy_gbs;
} bench_context;

/* ---- tkbench.c ------------------------------------------------------------ */

/* Reports a failed driver call and returns false. */
bool tkb_cu_ok(const bench_context *ctx, CUresult result, const char *what);
#define CU(ctx, call) tkb_cu_ok((ctx), (ctx)->api->call, #call)

/* A device pointer as the void * that tk_tensor.data holds. */
static inline void *device_address(CUdeviceptr ptr) { return (void *)(uintptr_t)ptr; }

typedef tk_status (*launch_fn)(void *state);

/* The timed part of a memory-bound row: --iters launches, each through
 * time_one; fills r's statistics.  Returns false (r->check = "error") on
 * failure. */
bool tkb_time_launches(bench_context *ctx, launch_fn launch_once, void *state, result *r);

/* ---- builtin.c: the rows built into tkbench ------------------------------- */

size_t tkb_builtin_count(void);
/* Fills the kernel, shape, config and label of built-in row index. */
void tkb_builtin_describe(size_t index, result *r);
/* Runs built-in row index; false means the check or a launch failed. */
bool tkb_builtin_run(bench_context *ctx, size_t index, result *r);

/* ---- report.c: what tkbench prints and writes ----------------------------- */

/* The SM clock line of the header (the device's maximum; NVML's now). */
void tkb_report_clocks(const bench_context *ctx, CUdevice device);
/* The tables and the CSV: selected[i] says whether results[i] ran, of
 * total rows (the built-in rows first, then the registered ones). */
void tkb_report_memory_table(const result *results, const bool *selected, size_t total);
void tkb_report_compute_table(const result *results, const bool *selected, size_t total);
void tkb_report_csv(FILE *out, const bench_context *ctx, const result *results,
                    const bool *selected, size_t total);

#endif
