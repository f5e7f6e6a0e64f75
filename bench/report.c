/*
 * report.c -- what tkbench prints and writes once its rows have run (and
 * the clock line of its header): the memory table in GB/s against the
 * device-to-device copy, the compute table in TFLOP/s against cuBLAS, and
 * the CSV of both.  It only formats results; tkbench.c measures them.
 */
#include <stdio.h>

#include "clock.h"
#include "tkbench.h"

/* The SM clock line of the header: the device's maximum (the driver's
 * CLOCK_RATE attribute) and, through NVML, the clock and power now. */
void tkb_report_clocks(const bench_context *ctx, CUdevice device) {
    int max_khz = 0;
    char why[200] = "";
    tkb_clock_sample now;
    if (ctx->api->cuDeviceGetAttribute(&max_khz, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, device) !=
        CUDA_SUCCESS)
        max_khz = 0;
    printf("SM clock: max %d MHz; ", max_khz / 1000);
    if (tkb_clock_open(ctx->api, why, sizeof why) && tkb_clock_read(&now))
        printf("now %u MHz, %.0f W (NVML)\n", now.sm_mhz, now.power_mw / 1000.0);
    else
        printf("no live clock: %s\n", why[0] ? why : "NVML query failed");
}

/* The first table: every row that ran, its median time and bandwidth
 * against the 4 GiB copy and, for memory rows, against a copy of its
 * own bytes. */
void tkb_report_memory_table(const result *results, const bool *selected, size_t total) {
    printf("\n%-22s %-14s %-38s %10s %9s %7s %9s  %s\n", "kernel", "shape", "config",
           "time us", "GB/s", "% copy", "% same", "check");
    for (size_t i = 0; i < total; i++) {
        if (!selected[i])
            continue;
        const result *r = &results[i];
        char same[16] = "-";
        if (r->same_copy_us > 0 && r->time.median_us > 0)
            snprintf(same, sizeof same, "%.1f", 100.0 * r->same_copy_us / r->time.median_us);
        printf("%-22s %-14s %-38s %10.2f %9.1f %7.1f %9s  %s%s%s\n", r->kernel, r->shape,
               r->config, r->time.median_us, r->gbs, r->percent_copy, same, r->check,
               r->detail[0] ? ": " : "", r->detail);
    }
    printf("(%% same: a device-to-device copy of the row's bytes, timed the same way, over "
           "the kernel's time)\n");
}

/* The second table: compute rows in TFLOP/s, ours and the ceiling timed
 * interleaved (tkbench.c's time_compute), with the clock read under
 * load after. */
void tkb_report_compute_table(const result *results, const bool *selected, size_t total) {
    bool any_compute = false;
    for (size_t i = 0; i < total; i++)
        any_compute |= selected[i] && results[i].tflops > 0;
    if (!any_compute)
        return;
    printf("\n%-22s %-14s %-38s %10s %8s %10s %8s %9s %7s %5s %-8s  %s\n", "kernel", "shape",
           "config", "time us", "TFLOP/s", "cuBLAS us", "cuBLAS", "% cuBLAS", "SM MHz", "W",
           "limit", "check");
    for (size_t i = 0; i < total; i++) {
        const result *r = &results[i];
        if (!selected[i] || r->tflops <= 0)
            continue;
        char ceiling_us[16] = "-", ceiling[16] = "-", percent[16] = "-";
        char clock[16] = "-", power[16] = "-";
        if (r->ceiling_tflops > 0) {
            snprintf(ceiling_us, sizeof ceiling_us, "%.2f", r->ceiling.median_us);
            snprintf(ceiling, sizeof ceiling, "%.1f", r->ceiling_tflops);
            snprintf(percent, sizeof percent, "%.1f", 100.0 * r->tflops / r->ceiling_tflops);
        }
        if (r->sm_clock_mhz > 0)
            snprintf(clock, sizeof clock, "%d", r->sm_clock_mhz);
        if (r->power_w > 0)
            snprintf(power, sizeof power, "%.0f", r->power_w);
        const char *limit = r->clock_limit && r->clock_limit[0] ? r->clock_limit : "-";
        printf("%-22s %-14s %-38s %10.2f %8.1f %10s %8s %9s %7s %5s %-8s  %s\n", r->kernel,
               r->shape, r->config, r->time.median_us, r->tflops, ceiling_us, ceiling, percent,
               clock, power, limit, r->check);
    }
    printf("(compute rows: ours and cuBLAS timed interleaved, medians; SM MHz, W and limit "
           "read under load after the timing)\n");
}

/* The CSV: one row per benchmark that ran.  The first 14 columns are
 * those of earlier runs; compute rows add the interleaved ceiling's
 * statistics and the clock read under load after their timing; the
 * last, memory rows' same-size copy time. */
void tkb_report_csv(FILE *out, const bench_context *ctx, const result *results,
                    const bool *selected, size_t total) {
    fprintf(out, "kernel,shape,config,bytes,time_us,min_us,p20_us,p80_us,gbs,pct_copy,check,"
                 "tflops,ceiling_tflops,pct_ceiling,ceiling_us,ceiling_min_us,ceiling_p20_us,"
                 "ceiling_p80_us,sm_mhz,power_w,clock_limit,same_copy_us\n");
    fprintf(out, "d2d_copy,4GiB,,%.0f,%.2f,,,,%.1f,100.0,ok,,,,,,,,,,,\n",
            2.0 * (double)COPY_BYTES, 2.0 * (double)COPY_BYTES / (ctx->copy_gbs * 1e9) * 1e6,
            ctx->copy_gbs);
    for (size_t i = 0; i < total; i++) {
        if (!selected[i])
            continue;
        const result *r = &results[i];
        const timing *t = &r->time, *ceiling = &r->ceiling;
        /* labels may hold commas: quote the text fields (RFC 4180) */
        fprintf(out, "%s,\"%s\",\"%s\",%.0f,%.2f,%.2f,%.2f,%.2f,%.1f,%.1f,%s", r->kernel,
                r->shape, r->config, r->bytes, t->median_us, t->min_us, t->p20_us, t->p80_us,
                r->gbs, r->percent_copy, r->check);
        if (r->tflops > 0 && r->ceiling_tflops > 0)
            fprintf(out, ",%.1f,%.1f,%.1f,%.2f,%.2f,%.2f,%.2f", r->tflops, r->ceiling_tflops,
                    100.0 * r->tflops / r->ceiling_tflops, ceiling->median_us,
                    ceiling->min_us, ceiling->p20_us, ceiling->p80_us);
        else if (r->tflops > 0)
            fprintf(out, ",%.1f,,,,,,", r->tflops);
        else
            fprintf(out, ",,,,,,,");
        if (r->sm_clock_mhz > 0)
            fprintf(out, ",%d,%.0f,%s", r->sm_clock_mhz, r->power_w,
                    r->clock_limit ? r->clock_limit : "");
        else
            fprintf(out, ",,,");
        if (r->same_copy_us > 0)
            fprintf(out, ",%.2f\n", r->same_copy_us);
        else
            fprintf(out, ",\n");
    }
}
