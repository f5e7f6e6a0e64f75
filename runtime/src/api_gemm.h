/*
 * api_gemm.h -- the GEMM entry points' instance selection, for libtk's
 * tests and tkbench only (never installed): the differential tests run the
 * same validated call on the instances of kernels/gemm.tk that forbid TMA
 * or warp specialisation, and on the persistent form of gemm_bf16
 * (kernels/gemm_persistent.tk), and compare them with the default one.
 */
#ifndef TK_API_GEMM_H
#define TK_API_GEMM_H

#include "tk_internal.h"

/* Which instance of a GEMM kernel a call launches.  The PERSISTENT* ones
 * exist for gemm_bf16 only (kernels/gemm_persistent.tk and
 * gemm_bf16_store.tk: one block per SM looping over the tiles); the fp8
 * GEMM rejects them.  The cluster ones (docs/hopper.md 11) exist for the
 * fp8 GEMM only, and so do the FP8_* ones (kernels/gemm_fp8_store.tk and
 * gemm_fp8_tall.tk: one block per SM walking the tiles, the epilogue
 * through shared memory and TMA stores). */
typedef enum tk__gemm_variant {
    TK__GEMM_DEFAULT = 0,           /* TMA and warp specialisation where legal */
    TK__GEMM_TMA_OFF = 1,           /* copies through registers, no tensor maps */
    TK__GEMM_WS_OFF = 2,            /* TMA pipeline without a producer warpgroup */
    TK__GEMM_PERSISTENT = 3,        /* bf16: persistent, warp-specialised */
    TK__GEMM_PERSISTENT_WS_OFF = 4, /* bf16: persistent, no producer warpgroup */
    TK__GEMM_PERSISTENT_BAND16 = 5, /* bf16: persistent, bands of 16 tile rows */
    TK__GEMM_CLUSTER2 = 7,          /* fp8: 128 x 128, clusters of 2 sharing B */
    TK__GEMM_CLUSTER2_WS_OFF = 8,   /* fp8: the same without a producer warpgroup */
    /* bf16, persistent, epilogue through shared memory and TMA stores
     * (kernels/gemm_bf16_store.tk) */
    TK__GEMM_PERSISTENT_STORE = 24,      /* 3 stages + the whole 128 x 256 tile */
    TK__GEMM_PERSISTENT_STORE_HALF = 25, /* 4 stages + a 128 x 128 half tile */
    /* fp8, persistent, 128 x 128 tiles on two consumer warpgroups, TMA-store
     * epilogue (kernels/gemm_fp8_store.tk) */
    TK__GEMM_FP8_PERSISTENT_STORE = 26, /* bands of 16, 3 stages + half tile,
                                         * B scales loaded one step ahead */
    /* fp8, persistent, 192 x 128 tiles on three consumer warpgroups, TMA-store
     * epilogue (kernels/gemm_fp8_tall.tk; tk_gemm_fp8_blockscaled) */
    TK__GEMM_FP8_TALL_PERSISTENT_STORE = 33,       /* bands of 12, 4 stages + tile */
    TK__GEMM_FP8_TALL_PERSISTENT_STORE_BAND16 = 34 /* the same in bands of 16 */
    /* A number never changes meaning (bench rows and notes name them),
     * so retired ones leave gaps: 6 and 9 were the 256 x 128 fp8 kernel
     * and its A-multicast cluster form, 10..15 the persistent fp8 kernels
     * with st.global epilogues (128 x 128 in bands of 8 or 16, without a
     * producer warpgroup, with B multicast; 256 x 128, with A multicast),
     * 27 the 256 x 128 one with the TMA-store epilogue: all measured
     * slower than 33 and removed (docs/perf.md holds their numbers);
     * 16..23 are unused, and 28..32 were fp8 store experiments (28 and 31,
     * the B scales loaded one step ahead, became 26's body; 29, 30 and 32,
     * one K block per step at 128 x 128 and 128 x 192 tiles, measured
     * slower and are gone). */
} tk__gemm_variant;

/* tk_gemm_bf16 / tk_gemm_fp8_blockscaled (same arguments, same checks)
 * on the chosen instance. */
TK_INTERNAL tk_status tk__gemm_bf16_variant(const tk_tensor *a, const tk_tensor *b,
                                            const tk_tensor *d, tk__gemm_variant variant,
                                            tk_stream stream);
TK_INTERNAL tk_status tk__gemm_fp8_blockscaled_variant(const tk_tensor *a,
                                                       const tk_tensor *sfa,
                                                       const tk_tensor *b,
                                                       const tk_tensor *sfb,
                                                       const tk_tensor *d,
                                                       tk__gemm_variant variant,
                                                       tk_stream stream);

#endif
