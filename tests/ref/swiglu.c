/*
 * swiglu.c -- references of the fused SwiGLU casts (tilekernels-spec.md
 * 6.9, 6.10, 6.11) and the MoE routing draw their tests run on.
 *
 * Each element is computed exactly as the spec writes it, left to right,
 * one f32 rounding per operation: act = (l / (1 + e)) * u with e supplied
 * by the caller's exp provider (swiglu.h explains why), the backward's one
 * FMA written as fmaf, then the per-token or per-channel cast of
 * tilekernels-spec.md 4.1 with e4m3 constants.  The file is compiled
 * without FMA contraction, so no other a*b+c fuses.  Work is split over
 * rows (per-token casts) or row blocks (per-channel), which own disjoint
 * outputs.
 */
#pragma GCC optimize("fp-contract=off")

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "reference.h"
#include "swiglu.h"

/* ---- exp providers ------------------------------------------------------- */

static float exp_host(const void *context, int64_t row, int64_t column,
                      float argument) {
    (void)context, (void)row, (void)column;
    return expf(argument);
}

ref_swiglu_exp ref_swiglu_exp_host(void) {
    ref_swiglu_exp provider = {exp_host, NULL};
    return provider;
}

static float exp_bf16_table(const void *context, int64_t row, int64_t column,
                            float argument) {
    (void)row, (void)column;
    uint32_t bits = ref_f32_bits(argument);
    if ((bits & 0xFFFFu) != 0)
        return NAN; /* not a bf16 value: the caller chose the wrong provider */
    return ((const float *)context)[bits >> 16];
}

ref_swiglu_exp ref_swiglu_exp_bf16_table(const float *table) {
    ref_swiglu_exp provider = {exp_bf16_table, table};
    return provider;
}

static float exp_elements(const void *context, int64_t row, int64_t column,
                          float argument) {
    (void)argument;
    const ref_swiglu_exp_array *array = context;
    return array->values[row * array->columns + column];
}

ref_swiglu_exp ref_swiglu_exp_elements(const ref_swiglu_exp_array *array) {
    ref_swiglu_exp provider = {exp_elements, array};
    return provider;
}

/* ---- shared pieces ----------------------------------------------------- */

static inline float load_float(const void *x, tk_dtype dtype, int64_t index) {
    if (dtype == TK_BF16)
        return ref_bf16_to_f32(((const uint16_t *)x)[index]);
    return ((const float *)x)[index];
}

/* The clamp of spec 6.9/6.11 with the GPU's min/max (spec 2.1: fminf /
 * fmaxf, NaN-ignoring), so a NaN gate or up becomes c.  The NaN test comes
 * first because glibc's fminf/fmaxf follow IEEE 754-2008 minNum for a
 * signalling NaN (bf16 0x7F81..0x7FBF widened) and return NaN, whereas
 * min.f32 / max.f32 return the other operand for every NaN. */
static inline float clamp_gate(float l, float c) { return isnan(l) ? c : fminf(l, c); }
static inline float clamp_up(float u, float c) {
    return isnan(u) ? c : fmaxf(fminf(u, c), -c);
}

/* ---- forward, per token ----------------------------------------------- */

typedef struct forward_job {
    const ref_swiglu_forward *args;
    ref_sf_shape sf_shape;
    float floor;
    uint8_t *out;
    void *sf;
    int64_t counts[REF_MAX_THREADS][3]; /* per worker slot, summed after */
    int64_t next_slot;
    float *argument; /* exp_arguments mode */
} forward_job;

static bool row_processed(const ref_swiglu_forward *args, int64_t row) {
    return !args->pos_to_expert || args->pos_to_expert[row] >= 0;
}

static float row_weight(const ref_swiglu_forward *args, int64_t row) {
    if (!args->topk_weights)
        return 1.0f;
    int32_t index = args->pos_to_token_topk[row];
    /* a negative index has weight 0 (spec 15.13); one past the weights
     * reads 0 as the kernel's masked load does */
    if (index < 0 || index >= args->num_weights)
        return 0.0f;
    return args->topk_weights[index];
}

static void forward_rows(void *context, int64_t begin, int64_t end) {
    forward_job *job = context;
    const ref_swiglu_forward *args = job->args;
    int64_t half = args->half, width = 2 * half;
    int64_t slot = __atomic_fetch_add(&job->next_slot, 1, __ATOMIC_RELAXED) % REF_MAX_THREADS;
    int64_t counts[3] = {0, 0, 0};
    float *act = malloc((size_t)(half > 0 ? half : 1) * sizeof *act);
    if (!act)
        abort();
    for (int64_t r = begin; r < end; r++) {
        if (!row_processed(args, r))
            continue;
        float w = row_weight(args, r);
        for (int64_t j = 0; j < half; j++) {
            float l = load_float(args->x, args->dtype, r * width + j);
            float u = load_float(args->x, args->dtype, r * width + half + j);
            if (args->use_clamp) {
                counts[0] += l > args->clamp;
                counts[1] += u > args->clamp;
                counts[2] += u < -args->clamp;
                l = clamp_gate(l, args->clamp);
                u = clamp_up(u, args->clamp);
            }
            float e = args->exp.fn(args->exp.context, r, j, -l);
            float denominator = 1.0f + e;
            float a = l / denominator;
            a = a * u;
            if (args->topk_weights)
                a = a * w;
            act[j] = a;
        }
        int64_t npc = args->num_per_channels;
        for (int64_t group = 0; group * npc < half; group++) {
            int64_t c0 = group * npc, c1 = c0 + npc < half ? c0 + npc : half;
            float amax = 0.0f;
            for (int64_t c = c0; c < c1; c++)
                amax = fmaxf(amax, fabsf(act[c]));
            /* sf_and_inv (4.1) with the amax floor sf_clamp_min may replace */
            ref_scale scale = ref_quant_scale(amax, REF_E4M3_MAX, job->floor, args->round_sf);
            ref_sf_store(&job->sf_shape, job->sf, r, group, scale);
            for (int64_t c = c0; c < c1; c++)
                job->out[r * half + c] = ref_e4m3_from_f32(act[c] * scale.inv);
        }
    }
    free(act);
    for (int i = 0; i < 3; i++)
        __atomic_fetch_add(&job->counts[slot][i], counts[i], __ATOMIC_RELAXED);
}

static bool forward_valid(const ref_swiglu_forward *args) {
    if (args->dtype != TK_F32 && args->dtype != TK_BF16)
        return false;
    if (args->rows < 0 || args->half < 0 || !args->exp.fn)
        return false;
    if (args->num_per_channels != 128 && args->num_per_channels != args->half)
        return false;
    if (args->num_per_channels < 1)
        return false;
    if (args->layout == TK_SF_PACKED_UE8M0 && !args->round_sf)
        return false;
    if (!args->topk_weights != !args->pos_to_token_topk)
        return false;
    return true;
}

bool ref_swiglu_forward_per_token_cast(const ref_swiglu_forward *args,
                                       uint8_t *out, void *sf,
                                       int64_t counts[3]) {
    if (!forward_valid(args))
        return false;
    forward_job *job = calloc(1, sizeof *job);
    if (!job)
        return false;
    if (!ref_sf_shape_of(args->rows, args->half, 1, args->num_per_channels,
                         args->layout, &job->sf_shape)) {
        free(job);
        return false;
    }
    job->args = args;
    job->floor = args->use_sf_floor ? args->sf_floor : REF_E4M3_CLAMP_MIN;
    job->out = out;
    job->sf = sf;
    ref_parallel_for(args->rows, 1 + (1 << 15) / (args->half > 0 ? args->half : 1),
                     forward_rows, job);
    if (counts && args->use_clamp)
        for (int s = 0; s < REF_MAX_THREADS; s++)
            for (int i = 0; i < 3; i++)
                counts[i] += job->counts[s][i];
    free(job);
    return true;
}

static void forward_arguments(void *context, int64_t begin, int64_t end) {
    forward_job *job = context;
    const ref_swiglu_forward *args = job->args;
    int64_t half = args->half;
    for (int64_t r = begin; r < end; r++)
        for (int64_t j = 0; j < half; j++) {
            float l = load_float(args->x, args->dtype, r * 2 * half + j);
            if (args->use_clamp)
                l = clamp_gate(l, args->clamp);
            job->argument[r * half + j] = -l;
        }
}

void ref_swiglu_forward_exp_arguments(const ref_swiglu_forward *args,
                                      float *argument) {
    forward_job *job = calloc(1, sizeof *job);
    if (!job)
        abort();
    job->args = args;
    job->argument = argument;
    ref_parallel_for(args->rows, 1 + (1 << 15) / (args->half > 0 ? args->half : 1),
                     forward_arguments, job);
    free(job);
}

/* ---- backward ---------------------------------------------------------- */

typedef struct backward_job {
    const ref_swiglu_backward *args;
    uint16_t *out, *x_grad;
    uint8_t *x_grad_fp8;
    float *x_grad_sf;
    float *dot;        /* per row */
    float *argument;   /* exp_arguments mode */
} backward_job;

/* Dequantised and clamped gate / up values of element (r, j). */
typedef struct gate_up {
    float x, y;
    bool clamp_x, clamp_high, clamp_low;
} gate_up;

static gate_up load_gate_up(const ref_swiglu_backward *args, int64_t r, int64_t j) {
    int64_t half = args->half, groups = 2 * half / args->num_per_channels;
    gate_up v;
    v.x = ref_e4m3_to_f32(args->x[r * 2 * half + j]) *
          args->x_sf[r * groups + j / args->num_per_channels];
    v.y = ref_e4m3_to_f32(args->x[r * 2 * half + half + j]) *
          args->x_sf[r * groups + (half + j) / args->num_per_channels];
    float c = args->clamp;
    v.clamp_x = args->use_clamp && v.x > c;
    v.clamp_high = args->use_clamp && v.y > c;
    v.clamp_low = args->use_clamp && v.y < -c;
    if (v.clamp_x)
        v.x = c;
    v.y = v.clamp_high ? c : (v.clamp_low ? -c : v.y);
    return v;
}

/* Per-token cast of one half's f32 gradients (row r, half h). */
static void cast_gradients(const backward_job *job, int64_t r, int h, const float *grad) {
    const ref_swiglu_backward *args = job->args;
    int64_t half = args->half, npc = args->num_per_channels, groups = 2 * half / npc;
    for (int64_t g = 0; g < half / npc; g++) {
        float amax = 0.0f;
        for (int64_t k = 0; k < npc; k++)
            amax = fmaxf(amax, fabsf(grad[g * npc + k]));
        ref_scale scale = ref_sf_and_inv(amax, args->round_sf);
        job->x_grad_sf[r * groups + h * (half / npc) + g] = scale.sf;
        for (int64_t k = 0; k < npc; k++)
            job->x_grad_fp8[r * 2 * half + h * half + g * npc + k] =
                ref_e4m3_from_f32(grad[g * npc + k] * scale.inv);
    }
}

static void backward_rows(void *context, int64_t begin, int64_t end) {
    backward_job *job = context;
    const ref_swiglu_backward *args = job->args;
    int64_t half = args->half;
    float *gx = malloc((size_t)(2 * half + 1) * sizeof *gx);
    if (!gx)
        abort();
    float *gy = gx + half;
    for (int64_t r = begin; r < end; r++) {
        int32_t index = args->pos_to_token_topk[r];
        float w = index >= 0 ? args->weight[index] : 0.0f;
        double dot = 0.0;
        for (int64_t j = 0; j < half; j++) {
            gate_up v = load_gate_up(args, r, j);
            float g = ref_bf16_to_f32(args->grad_out[r * half + j]);
            float e = args->exp.fn(args->exp.context, r, j, -v.x);
            float d = 1.0f + e;
            float act = v.x / d;
            act = act * v.y;
            float s = 1.0f / d;
            float gws = g * w;
            gws = gws * s;
            float grad_x = 0.0f, grad_y = 0.0f;
            if (!v.clamp_x) {
                grad_x = gws * v.y;
                grad_x = grad_x * fmaf(v.x, 1.0f - s, 1.0f);
            }
            if (!(v.clamp_high || v.clamp_low))
                grad_y = gws * v.x;
            job->out[r * half + j] = ref_bf16_from_f32(act * w);
            job->x_grad[r * 2 * half + j] = ref_bf16_from_f32(grad_x);
            job->x_grad[r * 2 * half + half + j] = ref_bf16_from_f32(grad_y);
            gx[j] = grad_x;
            gy[j] = grad_y;
            dot += (double)g * (double)act;
        }
        cast_gradients(job, r, 0, gx);
        cast_gradients(job, r, 1, gy);
        job->dot[r] = (float)dot;
    }
    free(gx);
}

bool ref_swiglu_backward_per_token_cast(const ref_swiglu_backward *args,
                                        uint16_t *out, uint8_t *x_grad_fp8,
                                        float *x_grad_sf, uint16_t *x_grad,
                                        float *weight_grad) {
    if (args->num_per_channels != 32 && args->num_per_channels != 128)
        return false;
    if (args->rows < 0 || args->half < 0 || args->half % args->num_per_channels != 0 ||
        args->tokens < 0 || args->topk < 0 || !args->exp.fn)
        return false;
    backward_job job = {args, out, x_grad, x_grad_fp8, x_grad_sf, NULL, NULL};
    job.dot = malloc((size_t)(args->rows + 1) * sizeof *job.dot);
    if (!job.dot)
        return false;
    ref_parallel_for(args->rows, 1 + (1 << 14) / (args->half > 0 ? args->half : 1),
                     backward_rows, &job);
    for (int64_t i = 0; i < args->tokens * args->topk; i++) {
        int32_t row = args->token_topk_to_pos[i];
        weight_grad[i] = row >= 0 && row < args->rows ? job.dot[row] : 0.0f;
    }
    free(job.dot);
    return true;
}

static void backward_arguments(void *context, int64_t begin, int64_t end) {
    backward_job *job = context;
    for (int64_t r = begin; r < end; r++)
        for (int64_t j = 0; j < job->args->half; j++)
            job->argument[r * job->args->half + j] = -load_gate_up(job->args, r, j).x;
}

void ref_swiglu_backward_exp_arguments(const ref_swiglu_backward *args,
                                       float *argument) {
    backward_job job;
    memset(&job, 0, sizeof job);
    job.args = args;
    job.argument = argument;
    ref_parallel_for(args->rows, 1 + (1 << 15) / (args->half > 0 ? args->half : 1),
                     backward_arguments, &job);
}

/* ---- forward, per channel ------------------------------------------------ */

typedef struct channel_job {
    const uint16_t *x;
    int64_t tokens, half;
    int block;
    bool round_sf, transpose, use_clamp;
    float clamp;
    ref_swiglu_exp exp;
    uint8_t *out;
    float *sf;
} channel_job;

static void channel_blocks(void *context, int64_t begin, int64_t end) {
    const channel_job *job = context;
    int64_t half = job->half, width = 2 * half;
    uint16_t *act = malloc((size_t)job->block * (size_t)(half > 0 ? half : 1) * sizeof *act);
    if (!act)
        abort();
    for (int64_t b = begin; b < end; b++) {
        int64_t r0 = b * job->block;
        for (int64_t i = 0; i < job->block; i++)
            for (int64_t j = 0; j < half; j++) {
                int64_t r = r0 + i;
                float l = ref_bf16_to_f32(job->x[r * width + j]);
                float u = ref_bf16_to_f32(job->x[r * width + half + j]);
                if (job->use_clamp) {
                    l = clamp_gate(l, job->clamp);
                    u = clamp_up(u, job->clamp);
                }
                float e = job->exp.fn(job->exp.context, r, j, -l);
                float a = l / (1.0f + e);
                a = a * u;
                act[i * half + j] = ref_bf16_from_f32(a);
            }
        for (int64_t j = 0; j < half; j++) {
            float amax = 0.0f;
            for (int64_t i = 0; i < job->block; i++)
                amax = fmaxf(amax, fabsf(ref_bf16_to_f32(act[i * half + j])));
            ref_scale scale = ref_sf_and_inv(amax, job->round_sf);
            job->sf[b * half + j] = scale.sf;
            for (int64_t i = 0; i < job->block; i++) {
                int64_t r = r0 + i;
                uint8_t q = ref_e4m3_from_f32(ref_bf16_to_f32(act[i * half + j]) * scale.inv);
                if (job->transpose)
                    job->out[j * job->tokens + r] = q;
                else
                    job->out[r * half + j] = q;
            }
        }
    }
    free(act);
}

bool ref_swiglu_forward_per_channel_cast(const uint16_t *x, int64_t tokens,
                                         int64_t half, int num_per_tokens,
                                         bool round_sf, bool transpose,
                                         bool use_clamp, float clamp,
                                         ref_swiglu_exp exp, uint8_t *out,
                                         float *sf) {
    if (num_per_tokens != 32 && num_per_tokens != 128)
        return false;
    if (tokens < 0 || half < 0 || tokens % num_per_tokens != 0 || !exp.fn)
        return false;
    channel_job job = {x, tokens, half, num_per_tokens, round_sf, transpose,
                       use_clamp, 0.0f, exp, out, sf};
    /* the original clamps in bf16 with the constant rounded to bf16 */
    job.clamp = ref_bf16_to_f32(ref_bf16_from_f32(clamp));
    ref_parallel_for(tokens / num_per_tokens, 1, channel_blocks, &job);
    return true;
}

/* ---- MoE routing ----------------------------------------------------------- */

void ref_swiglu_free_mapping(ref_swiglu_mapping *mapping) {
    free(mapping->pos_to_expert);
    free(mapping->pos_to_token);
    free(mapping->pos_to_token_topk);
    free(mapping->token_topk_to_pos);
    memset(mapping, 0, sizeof *mapping);
}

bool ref_swiglu_make_mapping(int64_t sent_tokens, int num_topk,
                             int total_experts, int ep_ranks, int alignment,
                             uint64_t seed, ref_swiglu_mapping *mapping) {
    memset(mapping, 0, sizeof *mapping);
    if (sent_tokens < 0 || num_topk < 1 || num_topk > total_experts || ep_ranks < 1 ||
        total_experts % ep_ranks != 0 || alignment < 1 || num_topk > 64)
        return false;
    int64_t experts = total_experts / ep_ranks, drawn = sent_tokens * ep_ranks;
    int32_t *picks = malloc((size_t)(drawn > 0 ? drawn : 1) * (size_t)num_topk * sizeof *picks);
    int64_t *count = calloc((size_t)experts, sizeof *count);
    if (!picks || !count) {
        free(picks);
        free(count);
        return false;
    }
    /* a uniform K-subset per token (the top-k of random scores), kept
     * only when some pick is local; picks stay in draw order */
    ref_rng rng = ref_rng_seed(seed, 0x5e1u);
    int64_t tokens = 0;
    for (int64_t t = 0; t < drawn; t++) {
        int64_t chosen[64];
        bool local = false;
        ref_rng_distinct(&rng, (uint64_t)total_experts, num_topk, chosen);
        for (int k = 0; k < num_topk; k++)
            local = local || chosen[k] < experts;
        if (!local)
            continue;
        for (int k = 0; k < num_topk; k++)
            picks[tokens * num_topk + k] = chosen[k] < experts ? (int32_t)chosen[k] : -1;
        tokens++;
    }
    int64_t slots = tokens * num_topk, rows = 0;
    for (int64_t i = 0; i < slots; i++)
        if (picks[i] >= 0)
            count[picks[i]]++;
    int64_t *next = calloc((size_t)experts + 1, sizeof *next);
    for (int64_t e = 0; e < experts && next; e++) {
        next[e] = rows;
        rows += (count[e] + alignment - 1) / alignment * alignment;
    }
    mapping->tokens = tokens;
    mapping->topk = num_topk;
    mapping->experts = experts;
    mapping->rows = rows;
    mapping->pos_to_expert = malloc((size_t)(rows + 1) * sizeof(int32_t));
    mapping->pos_to_token = malloc((size_t)(rows + 1) * sizeof(int32_t));
    mapping->pos_to_token_topk = malloc((size_t)(rows + 1) * sizeof(int32_t));
    mapping->token_topk_to_pos = malloc((size_t)(slots + 1) * sizeof(int32_t));
    if (!next || !mapping->pos_to_expert || !mapping->pos_to_token ||
        !mapping->pos_to_token_topk || !mapping->token_topk_to_pos) {
        free(picks);
        free(count);
        free(next);
        ref_swiglu_free_mapping(mapping);
        return false;
    }
    for (int64_t p = 0; p < rows; p++)
        mapping->pos_to_expert[p] = mapping->pos_to_token[p] = mapping->pos_to_token_topk[p] = -1;
    for (int64_t i = 0; i < slots; i++) {
        int32_t e = picks[i];
        if (e < 0) {
            mapping->token_topk_to_pos[i] = -1;
            continue;
        }
        int64_t p = next[e]++;
        mapping->token_topk_to_pos[i] = (int32_t)p;
        mapping->pos_to_expert[p] = e;
        mapping->pos_to_token[p] = (int32_t)(i / num_topk);
        mapping->pos_to_token_topk[p] = (int32_t)i;
    }
    free(picks);
    free(count);
    free(next);
    return true;
}
