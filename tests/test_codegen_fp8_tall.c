/*
 * test_codegen_fp8_tall.c -- the PTX of the fp8 GEMM on three consumer
 * warpgroups (kernels/gemm_fp8_tall.tk), without a GPU.
 *
 * The kernel's point is its register and warp layout: 384 consumer
 * threads plus the producer warpgroup (.maxntid 512), the consumers at
 * setmaxnreg 152 (floor8((65536 - 128 * 40) / 384), docs/hopper.md 3)
 * holding acc and one partial product, one K block per step (four
 * m64n128k32 wgmmas per warpgroup), the B scale's load between the
 * wgmmas' issue (wait_group 1) and their completion (wait_group 0), the
 * named barriers over the 384 consumers, and the whole 192 x 128 tile
 * leaving as two TMA store boxes in one bulk group.  ptxas must fit it
 * all in 152 registers: no stack frame, no spills, no warning.  The GPU
 * checks its results (tests/test_gpu_gemm.c).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tkc_test_support.h"

#define BULK_STORE "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group"
#define WGMMA "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3"

/* tkc's PTX of a library source file (imports resolved from the source
 * tree); fails the test when tkc does. */
static char *library_ptx(const char *file) {
    char dir[] = "/tmp/test_codegen_fp8_tall-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char path[128], command[1024];
    snprintf(path, sizeof path, "%s/k.ptx", dir);
    snprintf(command, sizeof command, "'%s' '%s/%s' -I '%s' -o '%s' --emit=ptx > '%s/log' 2>&1",
             TKC_PATH, TK_SOURCE_DIR, file, TK_SOURCE_DIR, path, dir);
    cr_assert_eq(system(command), 0, "tkc failed on %s", file);
    char *text = tkc_test_slurp(path);
    snprintf(command, sizeof command, "rm -rf '%s'", dir);
    cr_assert_eq(system(command), 0);
    return text;
}

static void check_instance(const char *ptx, const char *name) {
    char *entry = tkc_test_entry(ptx, name);
    cr_assert(strstr(entry, ".maxntid 512"), "%s", entry);
    cr_assert(strstr(entry, ".minnctapersm 1"), "%s", entry);
    cr_assert_eq(tkc_test_count(entry, "setmaxnreg.dec.sync.aligned.u32 \t40;"), 1, "%s", entry);
    cr_assert_eq(tkc_test_count(entry, "setmaxnreg.inc.sync.aligned.u32 \t152;"), 1, "%s",
                 entry);
    /* one K block of 128 per step: four k32 wgmmas, one group */
    cr_assert_eq(tkc_test_count(entry, WGMMA), 4, "%s", entry);
    const char *first = strstr(entry, WGMMA);
    /* after the group's commit and its wait_group 1, the B scale's load
     * comes before any promotion FMA (LLVM lays the blocks out in its own
     * order, so the wait_group 0 that follows may sit earlier in the text) */
    const char *keep_one = first ? strstr(first, "wgmma.wait_group.sync.aligned \t1;") : NULL;
    const char *load = keep_one ? strstr(keep_one, "ld.global.nc.b32") : NULL;
    const char *promote = keep_one ? strstr(keep_one, "fma.rn.f32") : NULL;
    cr_assert(load && (!promote || load < promote) && !strstr(keep_one, WGMMA),
              "the B scale is not loaded while the wgmmas run:\n%s", entry);
    /* the epilogue: named barriers over the three consumer warpgroups,
     * two boxes in one bulk group, no st.global */
    cr_assert(strstr(entry, "bar.sync \t1, 384;"), "%s", entry);
    cr_assert_eq(tkc_test_count(entry, BULK_STORE), 2, "%s", entry);
    cr_assert_eq(tkc_test_count(entry, "cp.async.bulk.commit_group"), 1, "%s", entry);
    cr_assert_null(strstr(entry, "st.global"), "%s", entry);
    cr_assert_null(strstr(entry, ".local"), "%s", entry);
    free(entry);
}

Test(codegen_fp8_tall, three_consumer_warpgroups) {
    char *ptx = library_ptx("kernels/gemm_fp8_tall.tk");
    check_instance(ptx, "gemm_fp8_blockscaled_tall_persistent_store__default");
    check_instance(ptx, "gemm_fp8_blockscaled_tall_persistent_store__band16");
    char *report = tkc_test_ptxas_report_ok(ptx);
    cr_assert_eq(tkc_test_count(report, "0 bytes stack frame, 0 bytes spill stores, "
                                        "0 bytes spill loads"),
                 2, "ptxas -v:\n%s", report);
    cr_assert_null(strstr(report, "arning"), "ptxas warns:\n%s", report);
    free(report);
    free(ptx);
}
