/*
 * clock.h -- the live SM clock and power draw of tkbench's device, read
 * through NVML so that a compute row can say at what clock it ran.  The
 * H200 drops its clocks under sustained GEMM load (the power limit); a
 * TFLOP/s figure without the clock it was measured at is hard to compare
 * across runs.
 *
 * NVML is loaded at run time (libnvidia-ml.so.1, shipped with the driver),
 * never linked: the build machine has no driver.  Without it every sample
 * fails and tkbench simply leaves the clock columns empty.
 */
#ifndef TK_BENCH_CLOCK_H
#define TK_BENCH_CLOCK_H

#include <stdbool.h>
#include <stddef.h>

#include "tk.h"
#include "tk_internal.h"

/* One reading of the device. */
typedef struct tkb_clock_sample {
    unsigned sm_mhz;   /* current SM clock */
    unsigned power_mw; /* board power draw; 0 when NVML does not report it */
    /* what holds the clock down now: "power", "thermal", "slowdown" or "" */
    const char *limit;
} tkb_clock_sample;

/* Loads NVML and finds the device of the current context, once per
 * process (later calls return the first answer).  False with *why set
 * when NVML is missing or does not know the device. */
bool tkb_clock_open(const tk__driver_api *cu, char *why, size_t size);

/* Reads the device now; false when NVML is not open or the query fails. */
bool tkb_clock_read(tkb_clock_sample *sample);

#endif
