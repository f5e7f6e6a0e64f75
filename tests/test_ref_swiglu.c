/*
 * test_ref_swiglu.c -- checks the SwiGLU references (tests/ref/swiglu.c)
 * on the CPU, with no GPU, against formulas written independently here.
 *
 * The golden GPU tests trust these references bit for bit after the exp,
 * so each piece gets an oracle: the forward activation over every bf16
 * gate value (exhaustive) in double precision, the scales against
 * amax / 448 and the power-of-two rule, the clamp counts against a plain
 * count, the backward gradients against a central finite difference of
 * SwiGLU in double, the weight gradient against a double dot product, the
 * per-channel cast against the per-token reference run on the transposed
 * activation, and the routing draw against the invariants of
 * get_fused_mapping (spec 5.9).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "reference.h"
#include "swiglu.h"

/* SwiGLU in double: silu(l) * u. */
static double silu_double(double l) { return l / (1.0 + exp(-l)); }

static float *random_floats(int64_t count, float scale, uint64_t seed) {
    float *v = malloc((size_t)count * sizeof *v);
    cr_assert(v != NULL);
    ref_rng rng = ref_rng_seed(seed, 1);
    for (int64_t i = 0; i < count; i++)
        v[i] = ref_rng_normal(&rng) * scale;
    return v;
}

/* Every bf16 gate value with u = 1: the reference's act, dequantised from
 * a scale of 1 (no rounding beyond e4m3), against double SwiGLU. */
Test(ref_swiglu, forward_activation_every_bf16_gate) {
    const int64_t rows = 512, half = 128; /* 65536 gates */
    uint16_t *x = malloc((size_t)(rows * 2 * half) * sizeof *x);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < half; j++) {
            x[r * 2 * half + j] = (uint16_t)(r * half + j);
            x[r * 2 * half + half + j] = 0x3F80; /* 1.0 */
        }
    float *table = malloc(65536 * sizeof *table);
    for (int b = 0; b < 65536; b++)
        table[b] = expf(ref_bf16_to_f32((uint16_t)b));
    ref_swiglu_forward args = {.x = x, .dtype = TK_BF16, .rows = rows, .half = half,
                               .num_per_channels = 128, .round_sf = false,
                               .layout = TK_SF_ROW_MAJOR, .exp = ref_swiglu_exp_bf16_table(table)};
    uint8_t *out = malloc((size_t)(rows * half));
    float *sf = malloc((size_t)rows * sizeof *sf);
    cr_assert(ref_swiglu_forward_per_token_cast(&args, out, sf, NULL));
    ref_swiglu_forward host = args;
    host.exp = ref_swiglu_exp_host();
    uint8_t *out_host = malloc((size_t)(rows * half));
    float *sf_host = malloc((size_t)rows * sizeof *sf);
    cr_assert(ref_swiglu_forward_per_token_cast(&host, out_host, sf_host, NULL));
    /* the table provider and the host's expf agree (same expf values) */
    cr_assert(memcmp(out, out_host, (size_t)(rows * half)) == 0);
    for (int64_t r = 0; r < rows; r++) {
        double amax = 0;
        for (int64_t j = 0; j < half; j++) {
            float l = ref_bf16_to_f32((uint16_t)(r * half + j));
            if (!isnan(l))
                amax = fmax(amax, fabs(silu_double(l)));
        }
        if (isinf(amax) || isnan(amax))
            continue;
        /* sf = max(amax, 1e-4) / 448 to f32 accuracy */
        double want = fmax(amax, 1e-4) / 448.0;
        cr_assert(fabs(sf[r] - want) <= 4e-7 * want, "row %ld: sf %g, want %g", (long)r,
                  (double)sf[r], want);
        for (int64_t j = 0; j < half; j++) {
            float l = ref_bf16_to_f32((uint16_t)(r * half + j));
            double act = silu_double(l);
            if (!isfinite(act))
                continue;
            double got = ref_e4m3_to_f32(out[r * half + j]) * (double)sf[r];
            /* e4m3 keeps 3 mantissa bits: half an ulp is 2^-4 relative,
             * plus the subnormal step 2^-10 of the scale range */
            double tolerance = fabs(act) / 16.0 + (double)sf[r] * 0x1p-9 + 1e-30;
            cr_assert(fabs(got - act) <= tolerance * 1.01,
                      "gate %g: dequantised %g, SwiGLU %g", (double)l, got, act);
        }
    }
    free(x), free(table), free(out), free(sf), free(out_host), free(sf_host);
}

/* A clamped NaN gate or up (quiet or signalling, either sign) acts as c,
 * like the GPU's NaN-ignoring min/max (spec 2.1): row 1 holds NaNs where
 * row 0 holds c, and both rows must quantise identically, with no counts
 * from the NaNs. */
Test(ref_swiglu, forward_clamp_of_nan) {
    const int64_t half = 128;
    const uint16_t nans[] = {0x7F81, 0xFF81, 0x7FBF, 0x7FC0, 0xFFC0, 0xFFFF};
    const int count = (int)(sizeof nans / sizeof nans[0]);
    uint16_t x[2 * 2 * 128];
    ref_rng rng = ref_rng_seed(11, 0);
    for (int64_t j = 0; j < 2 * half; j++)
        x[j] = ref_bf16_from_f32(ref_rng_normal(&rng));
    /* columns 0..5: NaN gates; columns 6..11: NaN ups */
    for (int i = 0; i < count; i++) {
        x[i] = 0x3F00;             /* 0.5 */
        x[half + 6 + i] = 0x3F00;
    }
    memcpy(x + 2 * half, x, (size_t)(2 * half) * sizeof *x);
    for (int i = 0; i < count; i++) {
        x[2 * half + i] = nans[i];
        x[2 * half + half + 6 + i] = nans[i];
    }
    float table[65536];
    for (int b = 0; b < 65536; b++)
        table[b] = expf(ref_bf16_to_f32((uint16_t)b));
    ref_swiglu_forward args = {.x = x, .dtype = TK_BF16, .rows = 2, .half = half,
                               .num_per_channels = 128, .round_sf = true,
                               .layout = TK_SF_ROW_MAJOR, .use_clamp = true, .clamp = 0.5f,
                               .exp = ref_swiglu_exp_bf16_table(table)};
    uint8_t out[2 * 128];
    float sf[2];
    int64_t counts[3] = {0, 0, 0};
    cr_assert(ref_swiglu_forward_per_token_cast(&args, out, sf, counts));
    cr_assert(memcmp(out, out + half, (size_t)half) == 0, "NaN clamps differ from c");
    cr_assert(memcmp(&sf[0], &sf[1], sizeof sf[0]) == 0);
    /* the same through the per-channel reference (bm 32: rows 0 and 1 of
     * a 32-row block; the other rows are zero) */
    uint16_t *tall = calloc((size_t)(32 * 2 * half), sizeof *tall);
    cr_assert(tall != NULL);
    memcpy(tall, x, sizeof x);
    uint8_t *channel_out = malloc((size_t)(32 * half));
    float channel_sf[128];
    cr_assert(channel_out != NULL);
    cr_assert(ref_swiglu_forward_per_channel_cast(tall, 32, half, 32, true, false, true, 0.5f,
                                                  ref_swiglu_exp_bf16_table(table),
                                                  channel_out, channel_sf));
    cr_assert(memcmp(channel_out, channel_out + half, (size_t)half) == 0,
              "per-channel NaN clamps differ from c");
    free(tall), free(channel_out);
    /* a NaN never counts: plain comparisons are false for it */
    int64_t plain[3] = {0, 0, 0};
    for (int64_t r = 0; r < 2; r++)
        for (int64_t j = 0; j < half; j++) {
            float l = ref_bf16_to_f32(x[r * 2 * half + j]);
            float u = ref_bf16_to_f32(x[r * 2 * half + half + j]);
            plain[0] += l > 0.5f, plain[1] += u > 0.5f, plain[2] += u < -0.5f;
        }
    for (int k = 0; k < 3; k++)
        cr_assert_eq(counts[k], plain[k], "count %d", k);
}

/* Options of the forward: clamp counts, weights (0 for a negative index),
 * skipped rows untouched, packed and round scales, npc == I. */
Test(ref_swiglu, forward_options) {
    const int64_t rows = 37, half = 384;
    float *x = random_floats(rows * 2 * half, 2.0f, 7);
    int32_t mask[37], index[37];
    float weights[64];
    ref_rng rng = ref_rng_seed(3, 0);
    for (int i = 0; i < 64; i++)
        weights[i] = ref_rng_normal(&rng);
    for (int r = 0; r < rows; r++) {
        mask[r] = r % 5 == 3 ? -1 : r;
        index[r] = r % 7 == 2 ? -1 : (r * 3) % 64;
    }
    const float clamp = 0.5f;
    for (int variant = 0; variant < 3; variant++) {
        int npc = variant == 2 ? (int)half : 128;
        tk_sf_layout layout = variant == 1 ? TK_SF_PACKED_UE8M0 : TK_SF_ROW_MAJOR;
        ref_swiglu_forward args = {.x = x, .dtype = TK_F32, .rows = rows, .half = half,
                                   .num_per_channels = npc, .round_sf = variant != 0,
                                   .layout = layout, .pos_to_token_topk = index,
                                   .topk_weights = weights, .num_weights = 64,
                                   .pos_to_expert = mask, .use_clamp = true, .clamp = clamp,
                                   .exp = ref_swiglu_exp_host()};
        ref_sf_shape shape;
        cr_assert(ref_sf_shape_of(rows, half, 1, npc, layout, &shape));
        uint8_t *out = malloc((size_t)(rows * half));
        unsigned char *sf = malloc(shape.bytes);
        memset(out, 0xAB, (size_t)(rows * half));
        memset(sf, 0xAB, shape.bytes);
        int64_t counts[3] = {5, 0, 0};
        cr_assert(ref_swiglu_forward_per_token_cast(&args, out, sf, counts));
        int64_t want[3] = {5, 0, 0};
        for (int64_t r = 0; r < rows; r++) {
            if (mask[r] < 0) {
                for (int64_t j = 0; j < half; j++)
                    cr_assert_eq(out[r * half + j], 0xAB, "skipped row %ld written", (long)r);
                continue;
            }
            float w = index[r] < 0 ? 0.0f : weights[index[r]];
            for (int64_t g = 0; g * npc < half; g++) {
                double amax = 0;
                for (int64_t j = g * npc; j < (g + 1) * npc; j++) {
                    float l = x[r * 2 * half + j], u = x[r * 2 * half + half + j];
                    want[0] += l > clamp;
                    want[1] += u > clamp;
                    want[2] += u < -clamp;
                    double lc = fmin(l, clamp), uc = fmax(fmin(u, clamp), -clamp);
                    amax = fmax(amax, fabs(silu_double(lc) * uc * w));
                }
                float s = ref_sf_load(&shape, sf, r, g);
                double rough = fmax(amax, 1e-4) / 448.0;
                if (variant == 0) {
                    /* amax / 448 to f32 accuracy (amax here in double) */
                    cr_assert(fabs(s - rough) <= 1e-5 * rough, "row %ld group %ld: scale %g, "
                              "want %g", (long)r, (long)g, (double)s, rough);
                } else {
                    /* a power of two, at least amax / 448, below twice it */
                    int exponent;
                    cr_assert(frexpf(s, &exponent) == 0.5f, "scale %g: not a power of two", s);
                    cr_assert(s >= rough * (1 - 1e-5) && s < 2 * rough * (1 + 1e-5),
                              "row %ld group %ld: scale %g for amax %g", (long)r, (long)g,
                              (double)s, amax);
                }
            }
        }
        cr_assert(counts[0] == want[0] && counts[1] == want[1] && counts[2] == want[2],
                  "counts %ld %ld %ld, want %ld %ld %ld", (long)counts[0], (long)counts[1],
                  (long)counts[2], (long)want[0], (long)want[1], (long)want[2]);
        free(out), free(sf);
    }
    free(x);
}

/* Non-rounded scales are exactly max(amax, floor) / 448 with amax the
 * largest |act| (computed here the naive way), and sf_clamp_min replaces
 * the floor. */
Test(ref_swiglu, forward_scales_and_floor) {
    const int64_t rows = 9, half = 256;
    float *x = random_floats(rows * 2 * half, 0.001f, 11);
    for (int floor_case = 0; floor_case < 2; floor_case++) {
        ref_swiglu_forward args = {.x = x, .dtype = TK_F32, .rows = rows, .half = half,
                                   .num_per_channels = 128, .layout = TK_SF_COL_MAJOR,
                                   .use_sf_floor = floor_case == 1, .sf_floor = 0.5f,
                                   .exp = ref_swiglu_exp_host()};
        ref_sf_shape shape;
        cr_assert(ref_sf_shape_of(rows, half, 1, 128, TK_SF_COL_MAJOR, &shape));
        uint8_t out[9 * 256];
        unsigned char *sf = calloc(1, shape.bytes);
        cr_assert(ref_swiglu_forward_per_token_cast(&args, out, sf, NULL));
        for (int64_t r = 0; r < rows; r++)
            for (int g = 0; g < 2; g++) {
                float amax = 0;
                for (int j = g * 128; j < g * 128 + 128; j++) {
                    float l = x[r * 2 * half + j], u = x[r * 2 * half + half + j];
                    float a = l / (1.0f + expf(-l));
                    amax = fmaxf(amax, fabsf(a * u));
                }
                float floor = floor_case ? 0.5f : 1e-4f;
                float want = fmaxf(amax, floor) / 448.0f;
                cr_assert_eq(ref_sf_load(&shape, sf, r, g), want);
                for (int j = g * 128; j < g * 128 + 128; j++) {
                    float l = x[r * 2 * half + j], u = x[r * 2 * half + half + j];
                    float a = l / (1.0f + expf(-l));
                    float inv = 448.0f / fmaxf(amax, floor);
                    cr_assert_eq(out[r * half + j], ref_e4m3_from_f32(a * u * inv));
                }
            }
        free(sf);
    }
    free(x);
}

/* Backward: gradients against a central difference of w * silu(x) * y in
 * double, clamp zeroes, weight_grad against a double dot product, the
 * fp8 gradients against the bf16 ones. */
Test(ref_swiglu, backward_gradients) {
    const int64_t rows = 24, half = 256, tokens = 10, topk = 3;
    const int npc = 32;
    int64_t width = 2 * half, groups = width / npc;
    uint8_t *x = malloc((size_t)(rows * width));
    ref_fill_rand_e4m3(x, rows * width, 5);
    float *x_sf = malloc((size_t)(rows * groups) * sizeof *x_sf);
    ref_rng rng = ref_rng_seed(9, 0);
    for (int64_t i = 0; i < rows * groups; i++)
        x_sf[i] = (0.5f + ref_rng_uniform(&rng)) / 256.0f;
    uint16_t *grad = malloc((size_t)(rows * half) * sizeof *grad);
    for (int64_t i = 0; i < rows * half; i++)
        grad[i] = ref_bf16_from_f32(ref_rng_normal(&rng));
    float weight[30];
    int32_t ttp[30], ptt[24];
    for (int i = 0; i < 30; i++) {
        weight[i] = ref_rng_uniform(&rng);
        ttp[i] = -1;
    }
    for (int r = 0; r < rows; r++) {
        ptt[r] = r < 20 ? (r * 7) % 30 : -1; /* rows 20.. are padding */
        if (ptt[r] >= 0)
            ttp[ptt[r]] = r;
    }
    for (int clamp_case = 0; clamp_case < 2; clamp_case++) {
        float clamp = 0.5f;
        ref_swiglu_backward args = {x, x_sf, grad, weight, ptt, ttp, rows, half, tokens,
                                    topk, npc, clamp_case == 1, clamp_case == 1, clamp,
                                    ref_swiglu_exp_host()};
        uint16_t *out = malloc((size_t)(rows * half) * 2);
        uint8_t *x_grad_fp8 = malloc((size_t)(rows * width));
        float *x_grad_sf = malloc((size_t)(rows * groups) * sizeof(float));
        uint16_t *x_grad = malloc((size_t)(rows * width) * 2);
        float weight_grad[30];
        cr_assert(ref_swiglu_backward_per_token_cast(&args, out, x_grad_fp8, x_grad_sf, x_grad,
                                                     weight_grad));
        for (int64_t r = 0; r < rows; r++) {
            double w = ptt[r] >= 0 ? weight[ptt[r]] : 0.0, dot = 0;
            for (int64_t j = 0; j < half; j++) {
                double xv = ref_e4m3_to_f32(x[r * width + j]) * (double)x_sf[r * groups + j / npc];
                double yv = ref_e4m3_to_f32(x[r * width + half + j]) *
                            (double)x_sf[r * groups + (half + j) / npc];
                bool cx = clamp_case && xv > clamp, cy = clamp_case && fabs(yv) > clamp;
                xv = cx ? clamp : xv;
                yv = cy ? copysign(clamp, yv) : yv;
                double g = ref_bf16_to_f32(grad[r * half + j]);
                double h = 1e-4 * fmax(1.0, fabs(xv));
                double gx = cx ? 0 : g * w * yv * (silu_double(xv + h) - silu_double(xv - h)) / (2 * h);
                double gy = cy ? 0 : g * w * silu_double(xv);
                double act = silu_double(xv) * yv;
                dot += g * act;
                double got_x = ref_bf16_to_f32(x_grad[r * width + j]);
                double got_y = ref_bf16_to_f32(x_grad[r * width + half + j]);
                cr_assert(fabs(got_x - gx) <= 1e-2 * fabs(gx) + 1e-6, "gx[%ld,%ld] %g vs %g",
                          (long)r, (long)j, got_x, gx);
                cr_assert(fabs(got_y - gy) <= 1e-2 * fabs(gy) + 1e-6, "gy[%ld,%ld] %g vs %g",
                          (long)r, (long)j, got_y, gy);
                if (cx)
                    cr_assert_eq(x_grad[r * width + j], 0, "clamped gate gradient not +0");
                double got_out = ref_bf16_to_f32(out[r * half + j]);
                cr_assert(fabs(got_out - act * w) <= 1e-2 * fabs(act * w) + 1e-7);
                /* the fp8 gradient dequantises to the f32 one within e4m3 */
                double deq = ref_e4m3_to_f32(x_grad_fp8[r * width + j]) *
                             (double)x_grad_sf[r * groups + j / npc];
                cr_assert(fabs(deq - got_x) <= fabs(got_x) / 8 + x_grad_sf[r * groups + j / npc],
                          "fp8 gx %g vs %g", deq, got_x);
            }
            if (ptt[r] >= 0)
                cr_assert(fabs(weight_grad[ptt[r]] - dot) <= 1e-4 * fabs(dot) + 1e-4,
                          "weight_grad %g vs %g", (double)weight_grad[ptt[r]], dot);
        }
        for (int i = 0; i < 30; i++)
            if (ttp[i] < 0)
                cr_assert_eq(weight_grad[i], 0.0f, "unmapped weight_grad[%d] not 0", i);
        free(out), free(x_grad_fp8), free(x_grad_sf), free(x_grad);
    }
    free(x), free(x_sf), free(grad);
}

/* Per-channel: the transposed and plain outputs hold the same codes, and
 * both equal a per-token cast (1 x bm blocks) of the transposed bf16
 * activation, computed by cast.c's reference. */
Test(ref_swiglu, per_channel_matches_per_token_of_transpose) {
    const int64_t tokens = 256, half = 64;
    for (int bm = 32; bm <= 128; bm *= 4)
        for (int round = 0; round < 2; round++) {
            float *values = random_floats(tokens * 2 * half, 1.5f, 13 + bm);
            uint16_t *x = malloc((size_t)(tokens * 2 * half) * 2);
            for (int64_t i = 0; i < tokens * 2 * half; i++)
                x[i] = ref_bf16_from_f32(values[i]);
            uint8_t *plain = malloc((size_t)(tokens * half)), *transposed = malloc((size_t)(tokens * half));
            float *sf = malloc((size_t)(tokens / bm * half) * 4), *sf_t = malloc((size_t)(tokens / bm * half) * 4);
            ref_swiglu_exp e = ref_swiglu_exp_host();
            cr_assert(ref_swiglu_forward_per_channel_cast(x, tokens, half, bm, round, false, true, 10.0f, e, plain, sf));
            cr_assert(ref_swiglu_forward_per_channel_cast(x, tokens, half, bm, round, true, true, 10.0f, e, transposed, sf_t));
            cr_assert(memcmp(sf, sf_t, (size_t)(tokens / bm * half) * 4) == 0);
            /* the activation, transposed to (half, tokens), in bf16 */
            uint16_t *act_t = malloc((size_t)(tokens * half) * 2);
            for (int64_t r = 0; r < tokens; r++)
                for (int64_t j = 0; j < half; j++) {
                    float l = fminf(ref_bf16_to_f32(x[r * 2 * half + j]), 10.0f);
                    float u = fmaxf(fminf(ref_bf16_to_f32(x[r * 2 * half + half + j]), 10.0f), -10.0f);
                    float a = l / (1.0f + expf(-l));
                    act_t[j * tokens + r] = ref_bf16_from_f32(a * u);
                }
            uint8_t *want = malloc((size_t)(tokens * half));
            float *want_sf = malloc((size_t)(tokens / bm * half) * 4);
            cr_assert(ref_per_token_cast_e4m3(act_t, TK_BF16, half, tokens, tokens, bm, round,
                                              TK_SF_ROW_MAJOR, want, want_sf));
            cr_assert(memcmp(transposed, want, (size_t)(tokens * half)) == 0, "bm %d round %d", bm, round);
            for (int64_t b = 0; b < tokens / bm; b++)
                for (int64_t j = 0; j < half; j++)
                    cr_assert_eq(sf[b * half + j], want_sf[j * (tokens / bm) + b]);
            for (int64_t r = 0; r < tokens; r++)
                for (int64_t j = 0; j < half; j++)
                    cr_assert_eq(plain[r * half + j], transposed[j * tokens + r]);
            free(values), free(x), free(plain), free(transposed), free(sf), free(sf_t);
            free(act_t), free(want), free(want_sf);
        }
}

/* The routing draw satisfies get_fused_mapping's invariants (spec 5.9). */
Test(ref_swiglu, mapping_invariants) {
    ref_swiglu_mapping m;
    cr_assert(ref_swiglu_make_mapping(500, 6, 72, 8, 16, 1, &m));
    cr_assert(m.tokens > 0 && m.tokens <= 4000 && m.experts == 9);
    int64_t used = 0;
    for (int64_t i = 0; i < m.tokens * m.topk; i++) {
        int32_t p = m.token_topk_to_pos[i];
        if (p < 0)
            continue;
        used++;
        cr_assert(p < m.rows);
        cr_assert_eq(m.pos_to_token_topk[p], i);
        cr_assert_eq(m.pos_to_token[p], i / m.topk);
        cr_assert(m.pos_to_expert[p] >= 0 && m.pos_to_expert[p] < m.experts);
    }
    int64_t mapped = 0;
    for (int64_t p = 0; p < m.rows; p++) {
        if (m.pos_to_expert[p] < 0) {
            cr_assert(m.pos_to_token[p] == -1 && m.pos_to_token_topk[p] == -1);
            continue;
        }
        mapped++;
        cr_assert_eq(m.token_topk_to_pos[m.pos_to_token_topk[p]], p);
    }
    cr_assert_eq(used, mapped);
    cr_assert_eq(m.rows % 16, 0);
    /* every kept token has a local expert */
    for (int64_t t = 0; t < m.tokens; t++) {
        bool local = false;
        for (int64_t k = 0; k < m.topk; k++)
            local = local || m.token_topk_to_pos[t * m.topk + k] >= 0;
        cr_assert(local, "token %ld has no local expert", (long)t);
    }
    ref_swiglu_free_mapping(&m);
}
