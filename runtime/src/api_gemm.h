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

/* Which instance of a GEMM kernel a call launches.  The persistent ones
 * exist for gemm_bf16 only (kernels/gemm_persistent.tk: one block per SM
 * looping over the tiles); the fp8 GEMM rejects them.  The wide and
 * cluster ones (docs/hopper.md 11) exist for the fp8 GEMM only, and so do
 * the FP8_PERSISTENT* and FP8_WIDE_PERSISTENT* ones
 * (kernels/gemm_fp8_persistent.tk and, with the TMA-store epilogue,
 * gemm_fp8_store.tk: one block per SM walking the tiles of the fp8
 * kernels). */
typedef enum tk__gemm_variant {
    TK__GEMM_DEFAULT = 0,           /* TMA and warp specialisation where legal */
    TK__GEMM_TMA_OFF = 1,           /* copies through registers, no tensor maps */
    TK__GEMM_WS_OFF = 2,            /* TMA pipeline without a producer warpgroup */
    TK__GEMM_PERSISTENT = 3,        /* bf16: persistent, warp-specialised */
    TK__GEMM_PERSISTENT_WS_OFF = 4, /* bf16: persistent, no producer warpgroup */
    TK__GEMM_PERSISTENT_BAND16 = 5, /* bf16: persistent, bands of 16 tile rows */
    TK__GEMM_WIDE = 6,              /* fp8: 256 x 128 tiles (gemm_fp8_wide.tk) */
    TK__GEMM_CLUSTER2 = 7,          /* fp8: 128 x 128, clusters of 2 sharing B */
    TK__GEMM_CLUSTER2_WS_OFF = 8,   /* fp8: the same without a producer warpgroup */
    TK__GEMM_WIDE_CLUSTER2 = 9,     /* fp8: 256 x 128, clusters of 2 sharing A */
    TK__GEMM_FP8_PERSISTENT = 10,   /* fp8: 128 x 128, persistent, bands of 8 */
    TK__GEMM_FP8_PERSISTENT_WS_OFF = 11, /* fp8: the same without a producer warpgroup */
    TK__GEMM_FP8_PERSISTENT_BAND16 = 12, /* fp8: 128 x 128, persistent, bands of 16 */
    TK__GEMM_FP8_PERSISTENT_CLUSTER2 = 13, /* fp8: 128 x 128, persistent, B multicast */
    TK__GEMM_FP8_WIDE_PERSISTENT = 14,     /* fp8: 256 x 128, persistent */
    TK__GEMM_FP8_WIDE_PERSISTENT_CLUSTER2 = 15, /* fp8: 256 x 128, persistent, A multicast */
    /* bf16, persistent, epilogue through shared memory and TMA stores
     * (kernels/gemm_bf16_store.tk) */
    TK__GEMM_PERSISTENT_STORE = 24,      /* 3 stages + the whole 128 x 256 tile */
    TK__GEMM_PERSISTENT_STORE_HALF = 25, /* 4 stages + a 128 x 128 half tile */
    /* fp8, persistent, epilogue through shared memory and TMA stores
     * (kernels/gemm_fp8_store.tk) */
    TK__GEMM_FP8_PERSISTENT_STORE = 26,     /* 128 x 128, bands of 16, 3 stages + half
                                             * tile, B scales loaded one step ahead */
    TK__GEMM_FP8_WIDE_PERSISTENT_STORE = 27 /* 256 x 128, bands of 8, 3 stages + tile */
    /* A number never changes meaning (bench rows and notes name them),
     * so retired ones leave gaps: 16..23 are unused, and 28..32 were fp8
     * store experiments (28 and 31, the B scales loaded one step ahead,
     * became 26's body; 29, 30 and 32, one K block per step at 128 x 128
     * and 128 x 192 tiles, measured slower and are gone). */
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
