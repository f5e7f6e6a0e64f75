/*
 * flush.c -- empties the L2 cache before each timed launch of tkbench.
 *
 * A timed row must start with its inputs out of the 60 MB L2, so that it
 * reads them from device memory as a real first touch would.  The first
 * way tkbench did this, a cuMemsetD32 over 256 MiB, leaves the L2 full
 * of the memset's own dirty lines: the timed kernel then pays for their
 * write-back, up to ~50 MB of device-memory writes that are not its
 * bytes, which costs a 170 MB cast several percent of its measured
 * bandwidth and a 1 GB one almost nothing.  The read flush instead runs a
 * small kernel (PTX below, JIT-compiled by the driver once) that reads
 * the 256 MiB buffer: the L2 ends up holding clean lines, which the
 * timed kernel evicts for free, and the previous row's dirty outputs are
 * written back during the flush, outside the timed region.  The memset
 * flush stays available (--flush memset) to compare the two.
 *
 * --flush read-last, the default since 2026-12-02 (when two kernels
 * started storing with an L2 evict_last policy), guards against those
 * stores: such lines could outlive a flush of normal-priority reads, so
 * the next timed launch would rewrite lines still in the L2 and its
 * output would never reach device memory.  It reads the buffer at
 * evict_last priority, which evicts older evict_last lines in LRU order,
 * then gives the buffer's lines normal priority again (applypriority),
 * leaving the L2 as the plain read flush does: clean lines of normal
 * priority.  Both are kernels on the stream, so nothing waits on the host.
 */

#include "flush.h"

#include <stdio.h>
#include <string.h>

/* The flush kernels, one grid-stride loop over a count of items of the
 * buffer (load_kernel joins these pieces):
 *   read:       each item is a 16-byte word; the thread xors them and
 *               stores the result only if it equals a value the fill
 *               pattern cannot produce (an even or odd number of copies of
 *               0x3F800000 xor to 0 or to the pattern), which keeps the
 *               loads live without writing anything;
 *   read-last:  the same loads with an L2 evict_last policy;
 *   demote:     each item is a 128-byte line, given normal priority again
 *               (applypriority: a no-op for a line not in the L2). */
static const char PTX_HEAD[] =
    ".version 8.0\n"
    ".target sm_90\n"
    ".address_size 64\n"
    ".visible .entry tkbench_flush(.param .u64 buffer, .param .u64 count,\n"
    "                              .param .u64 sink) {\n"
    "  .reg .u64 %rd<11>;\n"
    "  .reg .u32 %r<12>;\n"
    "  .reg .pred %p<3>;\n"
    "  ld.param.u64 %rd1, [buffer];\n"
    "  ld.param.u64 %rd2, [count];\n"
    "  ld.param.u64 %rd9, [sink];\n"
    "  mov.u32 %r1, %ctaid.x;\n"
    "  mov.u32 %r2, %ntid.x;\n"
    "  mov.u32 %r3, %tid.x;\n"
    "  mov.u32 %r4, %nctaid.x;\n"
    "  mul.wide.u32 %rd3, %r1, %r2;\n"
    "  cvt.u64.u32 %rd4, %r3;\n"
    "  add.u64 %rd3, %rd3, %rd4;\n"
    "  mul.wide.u32 %rd5, %r4, %r2;\n"
    "  mov.u32 %r5, 0;\n";
static const char PTX_POLICY[] = "  createpolicy.fractional.L2::evict_last.b64 %rd10, 1.0;\n";
static const char PTX_LOOP[] =
    "LOOP:\n"
    "  setp.ge.u64 %p1, %rd3, %rd2;\n"
    "  @%p1 bra DONE;\n";
static const char PTX_READ[] =
    "  shl.b64 %rd6, %rd3, 4;\n"
    "  add.u64 %rd7, %rd1, %rd6;\n"
    "  ld.global.v4.u32 {%r6, %r7, %r8, %r9}, [%rd7];\n";
static const char PTX_READ_LAST[] =
    "  shl.b64 %rd6, %rd3, 4;\n"
    "  add.u64 %rd7, %rd1, %rd6;\n"
    "  ld.global.L2::cache_hint.v4.u32 {%r6, %r7, %r8, %r9}, [%rd7], %rd10;\n";
static const char PTX_XOR[] =
    "  xor.b32 %r5, %r5, %r6;\n"
    "  xor.b32 %r5, %r5, %r7;\n"
    "  xor.b32 %r5, %r5, %r8;\n"
    "  xor.b32 %r5, %r5, %r9;\n";
static const char PTX_DEMOTE[] =
    "  shl.b64 %rd6, %rd3, 7;\n"
    "  add.u64 %rd7, %rd1, %rd6;\n"
    "  applypriority.global.L2::evict_normal [%rd7], 128;\n";
static const char PTX_TAIL[] =
    "  add.u64 %rd3, %rd3, %rd5;\n"
    "  bra LOOP;\n"
    "DONE:\n"
    "  setp.eq.u32 %p2, %r5, 0x9E3779B9;\n"
    "  @%p2 st.global.u32 [%rd9], %r5;\n"
    "  ret;\n"
    "}\n";

typedef enum { KERNEL_READ, KERNEL_READ_LAST, KERNEL_DEMOTE } flush_kernel;

#define FILL_PATTERN 0x3F800000u
#define READ_BLOCKS 2048
#define READ_THREADS 256

static bool check(const tkb_flush *flush, CUresult result, const char *what) {
    if (result == CUDA_SUCCESS)
        return true;
    const char *message = "unknown error";
    if (flush->api->cuGetErrorString)
        flush->api->cuGetErrorString(result, &message);
    fprintf(stderr, "tkbench: L2 flush: %s failed: %s\n", what, message);
    return false;
}

/* Loads one of the flush kernels. */
static bool load_kernel(tkb_flush *flush, flush_kernel kind, CUmodule *module,
                        CUfunction *function) {
    char ptx[sizeof PTX_HEAD + sizeof PTX_POLICY + sizeof PTX_LOOP + sizeof PTX_READ_LAST +
             sizeof PTX_XOR + sizeof PTX_TAIL];
    const char *body = kind == KERNEL_READ ? PTX_READ
                       : kind == KERNEL_READ_LAST ? PTX_READ_LAST
                                                  : PTX_DEMOTE;
    snprintf(ptx, sizeof ptx, "%s%s%s%s%s%s", PTX_HEAD,
             kind == KERNEL_READ_LAST ? PTX_POLICY : "", PTX_LOOP, body,
             kind == KERNEL_DEMOTE ? "" : PTX_XOR, PTX_TAIL);
    return check(flush, flush->api->cuModuleLoadData(module, ptx),
                 "cuModuleLoadData (flush PTX)") &&
           check(flush, flush->api->cuModuleGetFunction(function, *module, "tkbench_flush"),
                 "cuModuleGetFunction");
}

bool tkb_flush_init(tkb_flush *flush, const tk__driver_api *api, tkb_flush_mode mode) {
    memset(flush, 0, sizeof *flush);
    flush->api = api;
    flush->mode = mode;
    if (!check(flush, api->cuMemAlloc(&flush->buffer, TKB_FLUSH_BYTES + 4), "cuMemAlloc"))
        return false;
    flush->sink = flush->buffer + TKB_FLUSH_BYTES;
    if (mode == TKB_FLUSH_MEMSET)
        return true;
    return check(flush, api->cuMemsetD32(flush->buffer, FILL_PATTERN, TKB_FLUSH_BYTES / 4),
                 "cuMemsetD32") &&
           load_kernel(flush, mode == TKB_FLUSH_READ_LAST ? KERNEL_READ_LAST : KERNEL_READ,
                       &flush->module, &flush->function) &&
           (mode != TKB_FLUSH_READ_LAST ||
            load_kernel(flush, KERNEL_DEMOTE, &flush->demote_module, &flush->demote_function));
}

bool tkb_flush_run(tkb_flush *flush, unsigned pattern) {
    const tk__driver_api *api = flush->api;
    if (flush->mode == TKB_FLUSH_MEMSET)
        return check(flush, api->cuMemsetD32(flush->buffer, pattern, TKB_FLUSH_BYTES / 4),
                     "cuMemsetD32");
    unsigned long long words = TKB_FLUSH_BYTES / 16;
    unsigned long long lines = TKB_FLUSH_BYTES / 128;
    void *params[] = {&flush->buffer, &words, &flush->sink};
    void *demote[] = {&flush->buffer, &lines, &flush->sink};
    return check(flush,
                 api->cuLaunchKernel(flush->function, READ_BLOCKS, 1, 1, READ_THREADS, 1, 1, 0,
                                     NULL, params, NULL),
                 "cuLaunchKernel (read flush)") &&
           (flush->mode != TKB_FLUSH_READ_LAST ||
            check(flush,
                  api->cuLaunchKernel(flush->demote_function, READ_BLOCKS, 1, 1, READ_THREADS, 1,
                                      1, 0, NULL, demote, NULL),
                  "cuLaunchKernel (demote)"));
}

void tkb_flush_free(tkb_flush *flush) {
    if (flush->buffer)
        flush->api->cuMemFree(flush->buffer);
    flush->buffer = 0;
}

const char *tkb_flush_name(tkb_flush_mode mode) {
    if (mode == TKB_FLUSH_READ_LAST)
        return "evict_last read of 256 MiB, then its lines demoted to normal";
    return mode == TKB_FLUSH_MEMSET ? "memset of 256 MiB" : "read of 256 MiB";
}
