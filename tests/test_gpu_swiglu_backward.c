/*
 * test_gpu_swiglu_backward.c -- golden tests of
 * swiglu_backward_and_per_token_cast (tilekernels-spec.md 6.10) on the GPU,
 * byte for byte against tests/ref/swiglu.c, by the method described at the
 * top of tests/test_gpu_swiglu.c (inputs, poisoning, the sweep of
 * TileKernels' options, the exact division fast path's boundaries).
 * Without a usable CUDA device every test is skipped.
 */
#include "swiglu_test.h"

/* ---- swiglu_backward_and_per_token_cast ----------------------------------- */

#define BWD_MAX_ROWS 40000
#define BWD_MAX_HALF 7168

/* Case n of the backward sweep.  Case 0 is the zero-token draw; cases
 * 1..12 run each npc x round x clamp combination once, two per hidden size
 * (both npc at each size), on the small draws (4000-8000 rows), except a
 * large top-6 draw (24000 rows) at I = 2048: the reference costs about
 * 20 times the forward one per element, so the large draws stay few. */
static const int64_t BWD_HALVES[] = {2048, 2560, 3072, 4096, 6144, 7168};

static void backward_case(int n, int64_t *half, int *combo, const moe_params **p) {
    static const int small[] = {8, 4, 8, 0};
    int k = n > 0 ? n - 1 : 0;
    *half = BWD_HALVES[k / 2];
    *combo = k;
    *p = n == 0 ? &MOE_EMPTY : k == 0 ? &MOE[1] : &MOE[small[k % 4]];
}

Test(swiglu_backward, sweep, .timeout = 1800) {
    gpu g = gpu_begin();
    double start = now_seconds();
    /* source and grad are read as (rows, 2I) and (rows, I) from their
     * starts: fill what the largest case reads, as rows of 7168 normals */
    int64_t pairs = 1;
    for (int n = 0; n <= 12; n++) {
        int64_t half;
        int combo;
        const moe_params *p;
        backward_case(n, &half, &combo, &p);
        ref_swiglu_mapping m;
        make_mapping(p, combo % 2 ? 128 : 32, &m);
        cr_assert(m.rows <= BWD_MAX_ROWS);
        if (m.rows * half > pairs)
            pairs = m.rows * half;
        ref_swiglu_free_mapping(&m);
    }
    int64_t fill_rows = (pairs + 7167) / 7168;
    size_t x_bytes = (size_t)BWD_MAX_ROWS * 2 * BWD_MAX_HALF;
    uint16_t *source = host_alloc((size_t)fill_rows * 2 * 7168 * 2);
    uint16_t *grad = host_alloc((size_t)fill_rows * 7168 * 2 + 2); /* uploads read 1 past */
    ref_fill_rand_float(source, TK_BF16, 2 * fill_rows, 7168, 0, 0, test_seed() + 21);
    ref_fill_rand_float(grad, TK_BF16, fill_rows, 7168, 0, 0, test_seed() + 22);
    uint8_t *x = host_alloc(x_bytes);
    float *x_sf = host_alloc(x_bytes / 32 * 4);
    size_t half_elems = (size_t)BWD_MAX_ROWS * BWD_MAX_HALF;
    CUdeviceptr d_x = gpu_alloc(&g, x_bytes), d_x_sf = gpu_alloc(&g, x_bytes / 32 * 4);
    CUdeviceptr d_grad = gpu_alloc(&g, half_elems * 2);
    CUdeviceptr d_small = gpu_alloc(&g, (size_t)BWD_MAX_ROWS * 9 * 4 * 4 + 4 * TAIL_BYTES);
    CUdeviceptr d_out = gpu_alloc(&g, half_elems * 2 + TAIL_BYTES);
    CUdeviceptr d_fp8 = gpu_alloc(&g, x_bytes + TAIL_BYTES);
    CUdeviceptr d_gsf = gpu_alloc(&g, x_bytes / 32 * 4 + TAIL_BYTES);
    CUdeviceptr d_xg = gpu_alloc(&g, x_bytes * 2 + TAIL_BYTES);
    unsigned char *got = host_alloc(x_bytes * 2 + TAIL_BYTES), *want = host_alloc(x_bytes * 2 + TAIL_BYTES);
    float *argument = host_alloc(half_elems * 4), *values = host_alloc(half_elems * 4);
    int cases = 0;
    int64_t elements = 0;
    for (int n = 0; n <= 12; n++) {
        {
            int64_t half;
            int combo;
            const moe_params *p;
            backward_case(n, &half, &combo, &p);
            int npc = combo % 2 ? 128 : 32;
            bool round_sf = (combo / 2) % 2;
            int clamp_kind = combo / 4;
            float clamp = clamp_kind == 1 ? 10.0f : 0.5f;
            int64_t width = 2 * half, groups = width / npc;
            ref_swiglu_mapping m;
            make_mapping(p, npc, &m);
            int64_t rows = m.rows, tk = m.tokens * m.topk;
            cr_assert(rows <= BWD_MAX_ROWS);
            char what[200];
            snprintf(what, sizeof what,
                     "swiglu_backward N=%ld I=%ld npc=%d round=%d clamp=%s (topk %d, %d/%d)",
                     (long)rows, (long)half, npc, round_sf,
                     clamp_kind ? (clamp_kind == 1 ? "10" : "0.5") : "none", p->topk, p->total,
                     p->ranks);
            /* x = per_token_cast(bf16 randn, e4m3, npc); padding rows are
             * random too (weight 0, as in the original) */
            cr_assert(ref_per_token_cast_e4m3(source, TK_BF16, rows, width, width, npc, false,
                                              TK_SF_ROW_MAJOR, x, x_sf));
            float *weight = host_alloc((size_t)(tk + 1) * 4);
            ref_rng rng = ref_rng_seed(test_seed() + 9, (uint64_t)cases);
            for (int64_t k = 0; k < tk; k++)
                weight[k] = ref_rng_uniform(&rng);
            CUdeviceptr d_weight = d_small, d_ptt = d_small + (size_t)BWD_MAX_ROWS * 9 * 4;
            CUdeviceptr d_ttp = d_ptt + (size_t)BWD_MAX_ROWS * 9 * 4;
            CUdeviceptr d_wgrad = d_ttp + (size_t)BWD_MAX_ROWS * 9 * 4 + TAIL_BYTES;
            CU(&g, cuMemcpyHtoD(d_x, x, (size_t)(rows * width) + 1));
            CU(&g, cuMemcpyHtoD(d_x_sf, x_sf, (size_t)(rows * groups) * 4 + 4));
            CU(&g, cuMemcpyHtoD(d_grad, grad, (size_t)(rows * half) * 2 + 2));
            CU(&g, cuMemcpyHtoD(d_weight, weight, (size_t)tk * 4 + 4));
            CU(&g, cuMemcpyHtoD(d_ptt, m.pos_to_token_topk, (size_t)rows * 4 + 4));
            CU(&g, cuMemcpyHtoD(d_ttp, m.token_topk_to_pos, (size_t)tk * 4 + 4));
            poison(&g, d_out, (size_t)(rows * half) * 2);
            poison(&g, d_fp8, (size_t)(rows * width));
            poison(&g, d_gsf, (size_t)(rows * groups) * 4);
            poison(&g, d_xg, (size_t)(rows * width) * 2);
            poison(&g, d_wgrad, (size_t)tk * 4);
            tk_tensor tx = tensor(d_x, TK_E4M3, 2, rows, width);
            tk_tensor tsf = tensor(d_x_sf, TK_F32, 2, rows, groups);
            tk_tensor tgrad = tensor(d_grad, TK_BF16, 2, rows, half);
            tk_tensor tw = tensor(d_weight, TK_F32, 2, m.tokens, m.topk);
            tk_tensor tptt = tensor(d_ptt, TK_I32, 1, rows, 0);
            tk_tensor tttp = tensor(d_ttp, TK_I32, 2, m.tokens, m.topk);
            tk_tensor tout = tensor(d_out, TK_BF16, 2, rows, half);
            tk_tensor tfp8 = tensor(d_fp8, TK_E4M3, 2, rows, width);
            tk_tensor tgsf = tensor(d_gsf, TK_F32, 2, rows, groups);
            tk_tensor txg = tensor(d_xg, TK_BF16, 2, rows, width);
            tk_tensor twg = tensor(d_wgrad, TK_F32, 2, m.tokens, m.topk);
            check_status(tk_swiglu_backward_and_per_token_cast(
                             &tx, &tsf, &tgrad, &tw, &tptt, &tttp, npc, round_sf,
                             clamp_kind ? &clamp : NULL, &tout, &tfp8, &tgsf, &txg, &twg, NULL),
                         what);
            ref_swiglu_backward args = {x, x_sf, grad, weight, m.pos_to_token_topk,
                                        m.token_topk_to_pos, rows, half, m.tokens, m.topk, npc,
                                        round_sf, clamp_kind != 0, clamp, {0}};
            ref_swiglu_backward_exp_arguments(&args, argument);
            gpu_exp(&g, argument, values, rows * half);
            ref_swiglu_exp_array array = {values, half};
            args.exp = ref_swiglu_exp_elements(&array);
            uint16_t *w_out = host_alloc((size_t)(rows * half) * 2 + 2);
            uint8_t *w_fp8 = host_alloc((size_t)(rows * width) + 1);
            float *w_gsf = host_alloc((size_t)(rows * groups) * 4 + 4);
            uint16_t *w_xg = host_alloc((size_t)(rows * width) * 2 + 2);
            float *w_wg = host_alloc((size_t)tk * 4 + 4);
            cr_assert(ref_swiglu_backward_per_token_cast(&args, w_out, w_fp8, w_gsf, w_xg, w_wg));
            download(&g, got, d_out, (size_t)(rows * half) * 2, what);
            expect_rows(got, (unsigned char *)w_out, rows, (size_t)half * 2, NULL, "out");
            download(&g, got, d_xg, (size_t)(rows * width) * 2, what);
            expect_rows(got, (unsigned char *)w_xg, rows, (size_t)width * 2, NULL, "x_grad");
            download(&g, got, d_fp8, (size_t)(rows * width), what);
            expect_rows(got, w_fp8, rows, (size_t)width, NULL, "x_grad_fp8");
            download(&g, got, d_gsf, (size_t)(rows * groups) * 4, what);
            expect_rows(got, (unsigned char *)w_gsf, rows, (size_t)groups * 4, NULL, "x_grad_sf");
            download(&g, got, d_wgrad, (size_t)tk * 4, what);
            for (int64_t k = 0; k < tk; k++) {
                float gw, ww = w_wg[k];
                memcpy(&gw, got + k * 4, 4);
                cr_assert(fabsf(gw - ww) <= 1e-4f + 1e-4f * fabsf(ww),
                          "%s: weight_grad[%ld] %g, expected %g", what, (long)k, (double)gw,
                          (double)ww);
                if (m.token_topk_to_pos[k] < 0)
                    cr_assert(gw == 0.0f, "%s: unmapped weight_grad[%ld] is %g", what, (long)k,
                              (double)gw);
            }
            free(weight), free(w_out), free(w_fp8), free(w_gsf), free(w_xg), free(w_wg);
            ref_swiglu_free_mapping(&m);
            cases++;
            elements += rows * half;
        }
    }
    fprintf(stderr, "test_gpu_swiglu: swiglu_backward: %d cases (npc 32/128 x round x clamp "
            "once each, I 2048..7168), %.1f M elements, in %.1f s\n", cases,
            (double)elements * 1e-6, now_seconds() - start);
    free(source), free(grad), free(x), free(x_sf), free(got), free(want), free(argument), free(values);
    CUdeviceptr buffers[] = {d_x, d_x_sf, d_grad, d_small, d_out, d_fp8, d_gsf, d_xg};
    for (size_t i = 0; i < sizeof buffers / sizeof buffers[0]; i++)
        CU(&g, cuMemFree(buffers[i]));
}

/* Values that leave the backward kernel's fast range (kernels/
 * swiglu_backward.tk: IEEE division unless |gate| <= 87, |scale| >= 2^-90
 * and clamp 0 or >= 2^-90): every non-NaN e4m3 code, zeros of both signs
 * often, scales from 2^-95 to 3 (dequantised gates up to 1344, where
 * 1 / d is subnormal or 0), clamps 0, 1e-35, 0.5 and 10, unmapped rows,
 * a partial row block and a partial block column (I = 640).  The exact
 * outputs are compared byte for byte; weight_grad, whose sum cancels
 * terms up to 1e6 here, within 1e-4 of the sum of |g * x * y| over the
 * row (|act| <= |x * y| since d >= 1). */
Test(swiglu_backward, fast_path_boundaries) {
    gpu g = gpu_begin();
    const int64_t rows = 37, half = 640, width = 2 * half;
    static const float scales[] = {0.01f, 1.0f, 0.25f, 0x1p-95f, 0x1p-60f, 2.2321428e-7f,
                                   3.0f, 0.5f, 0x1p-89f, 0.125f};
    static const float clamps[] = {0.0f, 1e-35f, 0.5f, 10.0f};
    uint8_t *x = host_alloc((size_t)(rows * width));
    float *x_sf = host_alloc((size_t)(rows * width / 32) * 4);
    uint16_t *grad = host_alloc((size_t)(rows * half) * 2);
    float *weight = host_alloc((size_t)rows * 4);
    int32_t *map = host_alloc((size_t)rows * 4);
    ref_fill_rand_float(grad, TK_BF16, rows, half, 0, 0, test_seed() + 41);
    ref_rng rng = ref_rng_seed(test_seed() + 42, 0);
    for (int64_t i = 0; i < rows * width; i++) {
        uint8_t code = (uint8_t)ref_rng_next(&rng);
        if ((code & 0x7F) == 0x7F || code % 16 == 3)
            code &= 0x80; /* no NaN; one code in 16 a signed zero */
        x[i] = code;
    }
    for (int64_t r = 0; r < rows; r++) {
        weight[r] = ref_rng_uniform(&rng);
        map[r] = r % 7 == 5 ? -1 : (int32_t)r; /* token r, top-1: its own row */
    }
    size_t x_bytes = (size_t)(rows * width), half_bytes = (size_t)(rows * half) * 2;
    CUdeviceptr d_x = gpu_alloc(&g, x_bytes), d_sf = gpu_alloc(&g, x_bytes / 32 * 4);
    CUdeviceptr d_grad = gpu_alloc(&g, half_bytes), d_weight = gpu_alloc(&g, (size_t)rows * 4);
    /* outputs carry the poisoned tail that download() checks */
    CUdeviceptr d_map = gpu_alloc(&g, (size_t)rows * 4);
    CUdeviceptr d_out = gpu_alloc(&g, half_bytes + TAIL_BYTES);
    CUdeviceptr d_fp8 = gpu_alloc(&g, x_bytes + TAIL_BYTES);
    CUdeviceptr d_gsf = gpu_alloc(&g, x_bytes / 32 * 4 + TAIL_BYTES);
    CUdeviceptr d_xg = gpu_alloc(&g, x_bytes * 2 + TAIL_BYTES);
    CUdeviceptr d_wgrad = gpu_alloc(&g, (size_t)rows * 4 + TAIL_BYTES);
    CU(&g, cuMemcpyHtoD(d_x, x, x_bytes));
    CU(&g, cuMemcpyHtoD(d_grad, grad, half_bytes));
    CU(&g, cuMemcpyHtoD(d_weight, weight, (size_t)rows * 4));
    CU(&g, cuMemcpyHtoD(d_map, map, (size_t)rows * 4));
    uint16_t *w_out = host_alloc(half_bytes), *w_xg = host_alloc(x_bytes * 2);
    uint8_t *w_fp8 = host_alloc(x_bytes), *got = host_alloc(x_bytes * 2 + TAIL_BYTES);
    float *w_gsf = host_alloc(x_bytes / 32 * 4), *w_wg = host_alloc((size_t)rows * 4);
    float *argument = host_alloc(half_bytes * 2), *values = host_alloc(half_bytes * 2);
    double *magnitude = host_alloc((size_t)rows * sizeof(double));
    int cases = 0;
    for (int npc = 32; npc <= 128; npc *= 4)
        for (int round_sf = 0; round_sf < 2; round_sf++)
            for (int c = -1; c < 4; c++) {
                int64_t groups = width / npc;
                float clamp = c >= 0 ? clamps[c] : 0.0f;
                for (int64_t i = 0; i < rows * groups; i++)
                    x_sf[i] = scales[(i + cases) % 10];
                char what[120];
                snprintf(what, sizeof what, "swiglu_backward boundaries npc=%d round=%d clamp=%g%s",
                         npc, round_sf, (double)clamp, c >= 0 ? "" : " (none)");
                CU(&g, cuMemcpyHtoD(d_sf, x_sf, (size_t)(rows * groups) * 4));
                poison(&g, d_out, half_bytes);
                poison(&g, d_fp8, x_bytes);
                poison(&g, d_gsf, (size_t)(rows * groups) * 4);
                poison(&g, d_xg, x_bytes * 2);
                poison(&g, d_wgrad, (size_t)rows * 4);
                tk_tensor tx = tensor(d_x, TK_E4M3, 2, rows, width);
                tk_tensor tsf = tensor(d_sf, TK_F32, 2, rows, groups);
                tk_tensor tgrad = tensor(d_grad, TK_BF16, 2, rows, half);
                tk_tensor tw = tensor(d_weight, TK_F32, 2, rows, 1);
                tk_tensor tmap = tensor(d_map, TK_I32, 1, rows, 0);
                tk_tensor tmap2 = tensor(d_map, TK_I32, 2, rows, 1);
                tk_tensor tout = tensor(d_out, TK_BF16, 2, rows, half);
                tk_tensor tfp8 = tensor(d_fp8, TK_E4M3, 2, rows, width);
                tk_tensor tgsf = tensor(d_gsf, TK_F32, 2, rows, groups);
                tk_tensor txg = tensor(d_xg, TK_BF16, 2, rows, width);
                tk_tensor twg = tensor(d_wgrad, TK_F32, 2, rows, 1);
                check_status(tk_swiglu_backward_and_per_token_cast(
                                 &tx, &tsf, &tgrad, &tw, &tmap, &tmap2, npc, round_sf,
                                 c >= 0 ? &clamp : NULL, &tout, &tfp8, &tgsf, &txg, &twg, NULL),
                             what);
                ref_swiglu_backward args = {x, x_sf, grad, weight, map, map, rows, half, rows,
                                            1, npc, round_sf, c >= 0, clamp, {0}};
                ref_swiglu_backward_exp_arguments(&args, argument);
                gpu_exp(&g, argument, values, rows * half);
                ref_swiglu_exp_array array = {values, half};
                args.exp = ref_swiglu_exp_elements(&array);
                cr_assert(ref_swiglu_backward_per_token_cast(&args, w_out, w_fp8, w_gsf, w_xg,
                                                             w_wg));
                download(&g, got, d_out, half_bytes, what);
                expect_rows(got, (unsigned char *)w_out, rows, (size_t)half * 2, NULL, "out");
                download(&g, got, d_xg, x_bytes * 2, what);
                expect_rows(got, (unsigned char *)w_xg, rows, (size_t)width * 2, NULL, "x_grad");
                download(&g, got, d_fp8, x_bytes, what);
                expect_rows(got, w_fp8, rows, (size_t)width, NULL, "x_grad_fp8");
                download(&g, got, d_gsf, (size_t)(rows * groups) * 4, what);
                expect_rows(got, (unsigned char *)w_gsf, rows, (size_t)groups * 4, NULL,
                            "x_grad_sf");
                for (int64_t r = 0; r < rows; r++) {
                    magnitude[r] = 0.0;
                    for (int64_t j = 0; j < half; j++)
                        magnitude[r] += fabs(ref_bf16_to_f32(grad[r * half + j]) *
                                             ref_e4m3_to_f32(x[r * width + j]) *
                                             x_sf[r * groups + j / npc] *
                                             ref_e4m3_to_f32(x[r * width + half + j]) *
                                             x_sf[r * groups + (half + j) / npc]);
                }
                download(&g, got, d_wgrad, (size_t)rows * 4, what);
                for (int64_t r = 0; r < rows; r++) {
                    float gw;
                    memcpy(&gw, got + r * 4, 4);
                    cr_assert(fabs((double)gw - w_wg[r]) <= 1e-4 + 1e-4 * magnitude[r],
                              "%s: weight_grad[%ld] %g, expected %g", what, (long)r,
                              (double)gw, (double)w_wg[r]);
                }
                cases++;
            }
    fprintf(stderr, "test_gpu_swiglu: swiglu_backward boundaries: %d cases\n", cases);
    free(x), free(x_sf), free(grad), free(weight), free(map), free(w_out), free(w_xg);
    free(w_fp8), free(got), free(w_gsf), free(w_wg), free(argument), free(values), free(magnitude);
    CUdeviceptr buffers[] = {d_x, d_sf, d_grad, d_weight, d_map, d_out, d_fp8, d_gsf, d_xg,
                             d_wgrad};
    for (size_t i = 0; i < sizeof buffers / sizeof buffers[0]; i++)
        CU(&g, cuMemFree(buffers[i]));
}

