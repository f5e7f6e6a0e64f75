/*
 * swiglu.h -- CPU references of the fused SwiGLU casts
 * (tilekernels-spec.md 6.9, 6.10, 6.11) and the MoE routing draw their
 * tests and benchmarks run on.
 *
 * The references follow the spec operation by operation in IEEE f32 (one
 * rounding per operation, FMA only where the spec writes one), except for
 * expf: CUDA's expf ends in ex2.approx, whose bits a CPU cannot reproduce
 * (spec 2.1, 15.24).  Every reference therefore takes its exp values from
 * a ref_swiglu_exp provider: the CPU's expf for the CPU tests, or the
 * values the GPU computed (kernels/swiglu.tk, swiglu_exp) for the golden
 * tests, so that everything after the exp is checked bit for bit.
 */
#ifndef TK_REF_SWIGLU_H
#define TK_REF_SWIGLU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tk.h"

/* expf(argument) for the element (row, column) of the gate half; the
 * references call it exactly once per element they compute, with
 * argument = -l (the clamped gate value).  fn must be thread-safe. */
typedef struct ref_swiglu_exp {
    float (*fn)(const void *context, int64_t row, int64_t column,
                float argument);
    const void *context;
} ref_swiglu_exp;

/* The host's expf (glibc): not CUDA's, within 2 ulp of it. */
ref_swiglu_exp ref_swiglu_exp_host(void);

/* A table of expf over every bf16 bit pattern: table[b] = expf(bf16 b).
 * Serves arguments that are bf16 values (bf16 input, bf16-valued clamp);
 * any other argument is a caller error and yields NaN. */
ref_swiglu_exp ref_swiglu_exp_bf16_table(const float *table);
/* Per-element values: values[row * columns + column] = expf(argument of
 * that element) (e.g. downloaded from the GPU); `columns` is I. */
typedef struct ref_swiglu_exp_array {
    const float *values;
    int64_t columns;
} ref_swiglu_exp_array;
ref_swiglu_exp ref_swiglu_exp_elements(const ref_swiglu_exp_array *array);

/* ---- swiglu_forward_and_per_token_cast (spec 6.9) ------------------------ */

typedef struct ref_swiglu_forward {
    const void *x;             /* (rows, 2 * half) contiguous            */
    tk_dtype dtype;            /* TK_F32 or TK_BF16                      */
    int64_t rows, half;        /* N and I                                */
    int num_per_channels;      /* 128 or I                               */
    bool round_sf;
    tk_sf_layout layout;       /* of the (rows, half) scale grid          */
    const int32_t *pos_to_token_topk;  /* (rows,) or NULL                */
    const float *topk_weights;         /* flat (T * K,) or NULL          */
    int64_t num_weights;               /* T * K                          */
    const int32_t *pos_to_expert;      /* (rows,) or NULL: < 0 skips     */
    bool use_clamp;
    float clamp;
    bool use_sf_floor;         /* sf_clamp_min given                     */
    float sf_floor;
    ref_swiglu_exp exp;
} ref_swiglu_forward;

/* Writes out (rows, half) e4m3 and the scales of every processed row
 * (skipped rows untouched), and adds the clamp counts (l > c, u > c,
 * u < -c over processed elements) to counts[0..2] when counts is non-NULL
 * and the clamp is on.  False on a bad argument, writing nothing. */
bool ref_swiglu_forward_per_token_cast(const ref_swiglu_forward *args,
                                       uint8_t *out, void *sf,
                                       int64_t counts[3]);
/* argument[r * half + j] = -(clamped gate of element (r, j)), the value
 * the kernel passes to exp, for every element of every row. */
void ref_swiglu_forward_exp_arguments(const ref_swiglu_forward *args,
                                      float *argument);

/* ---- swiglu_backward_and_per_token_cast (spec 6.10) ---------------------- */

typedef struct ref_swiglu_backward {
    const uint8_t *x;          /* e4m3 (rows, 2 * half)                  */
    const float *x_sf;         /* (rows, 2 * half / npc) row-major       */
    const uint16_t *grad_out;  /* bf16 (rows, half)                      */
    const float *weight;       /* (tokens, topk)                         */
    const int32_t *pos_to_token_topk;  /* (rows,)                        */
    const int32_t *token_topk_to_pos;  /* (tokens, topk)                 */
    int64_t rows, half, tokens, topk;
    int num_per_channels;      /* 32 or 128                              */
    bool round_sf;
    bool use_clamp;
    float clamp;
    ref_swiglu_exp exp;
} ref_swiglu_backward;

/* out bf16 (rows, half), x_grad_fp8 e4m3 (rows, 2 half), x_grad_sf f32
 * (rows, 2 half / npc), x_grad bf16 (rows, 2 half) exactly as the spec
 * writes them; weight_grad (tokens, topk) = the row's sum of
 * grad_out * act accumulated in double (the most accurate value: the
 * spec leaves the f32 order to the implementation and checks it with a
 * tolerance), 0 where token_topk_to_pos is -1. */
bool ref_swiglu_backward_per_token_cast(const ref_swiglu_backward *args,
                                        uint16_t *out, uint8_t *x_grad_fp8,
                                        float *x_grad_sf, uint16_t *x_grad,
                                        float *weight_grad);
/* argument[r * half + j] = -(dequantised, clamped gate of (r, j)). */
void ref_swiglu_backward_exp_arguments(const ref_swiglu_backward *args,
                                       float *argument);

/* ---- swiglu_forward_and_per_channel_cast_and_transpose (spec 6.11) ------- */

/* x bf16 (tokens, 2 half); act rounded to bf16, one scale per
 * num_per_tokens rows per channel: sf (tokens / bm, half) row-major, out
 * (half, tokens) if transpose else (tokens, half).  The clamp value is
 * rounded to bf16 first (the original kernel clamps in bf16). */
bool ref_swiglu_forward_per_channel_cast(const uint16_t *x, int64_t tokens,
                                         int64_t half, int num_per_tokens,
                                         bool round_sf, bool transpose,
                                         bool use_clamp, float clamp,
                                         ref_swiglu_exp exp, uint8_t *out,
                                         float *sf);

/* ---- the MoE routing the tests run on (spec 12.1, 5.9) ------------------- */

/* TileKernels' generate_topk_idx + get_fused_mapping: sent_tokens tokens
 * on each of ep_ranks ranks pick num_topk distinct experts out of
 * total_experts uniformly; picks outside this rank's total / ep_ranks
 * experts are -1 and tokens with none are dropped (tokens = the rest).
 * Each expert's rows are padded to `alignment`; inside an expert the
 * (t, k) pairs are in increasing t * K + k order. */
typedef struct ref_swiglu_mapping {
    int64_t tokens, topk, experts, rows;  /* T, K, local E, N            */
    int32_t *pos_to_expert;      /* (rows,), -1 for padding              */
    int32_t *pos_to_token;       /* (rows,)                              */
    int32_t *pos_to_token_topk;  /* (rows,), t * K + k or -1             */
    int32_t *token_topk_to_pos;  /* (tokens, topk), -1 if not local      */
} ref_swiglu_mapping;

bool ref_swiglu_make_mapping(int64_t sent_tokens, int num_topk,
                             int total_experts, int ep_ranks, int alignment,
                             uint64_t seed, ref_swiglu_mapping *mapping);
void ref_swiglu_free_mapping(ref_swiglu_mapping *mapping);

#endif
