/*
 * test_ref_fp4.c -- checks the FP4 references (tests/ref/fp4.c), the
 * kernels' e2m1 encoder algorithm and the host helper tk_unpack_e2m1
 * against naive, independently written formulas, with no GPU.
 *
 * The GPU golden tests (test_gpu_fp4.c) trust ref_e2m1_from_f32 and
 * ref_per_token_quant bit for bit, so here: all 16 codes, every RNE
 * midpoint and its neighbours, saturation, NaN -> +6, signed zero, the
 * spec's measured probe values, and a sweep over every f32 pattern below
 * 8 in magnitude against a nearest-grid-value search.  The same sweep runs
 * a C transcription of stdlib/fp4.tk's fp4_code (the float-add rounding
 * trick the kernels use), so a flaw in that algorithm shows up without a
 * GPU.  The per-token references are compared with element loops that
 * share no code with them.
 */
#pragma GCC optimize("fp-contract=off")

#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "fp4.h"
#include "reference.h"
#include "tk.h"

static const double GRID[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};

/* Nearest grid value by search in double precision, ties to the even
 * code, saturating at 6, NaN -> +6, sign in bit 3 (spec 2.2). */
static int naive_e2m1_encode(float x) {
    if (isnan(x))
        return 0x7;
    int sign = signbit(x) ? 8 : 0;
    double a = fabs((double)x);
    if (a >= 6.0)
        return sign | 7;
    int low = 0;
    while (low < 7 && GRID[low + 1] <= a)
        low++;
    double below = a - GRID[low], above = GRID[low + 1] - a;
    int code = below < above ? low : below > above ? low + 1 : ((low & 1) ? low + 1 : low);
    return sign | code;
}

/* stdlib/fp4.tk fp4_code, transcribed operation for operation (u32
 * arithmetic, one IEEE f32 add, fminf for min on non-NaN values). */
static int kernel_fp4_code(float x) {
    float a = x == x ? fminf(fabsf(x), 6.0f) : 6.0f;
    uint32_t binade = ref_f32_bits(a) & 0x7F800000u;
    if (binade < 0x3F800000u)
        binade = 0x3F800000u;
    uint32_t magic = binade + 0x0B000000u;
    volatile float sum = a + ref_f32_from_bits(magic);
    uint32_t steps = ref_f32_bits(sum) - magic;
    uint32_t code = steps + (binade >> 22) - 254u;
    uint32_t sign = (ref_f32_bits(x) >> 28) & 8u;
    return (int)(code | (x == x ? sign : 0u));
}

Test(e2m1, every_code_decodes_and_round_trips) {
    for (int code = 0; code < 16; code++) {
        float value = ref_e2m1_to_f32((uint8_t)code);
        double want = (code & 8) ? -GRID[code & 7] : GRID[code & 7];
        cr_assert_eq((double)value, want, "code %d decodes to %g, expected %g", code,
                     (double)value, want);
        cr_assert_eq(signbit(value) != 0, (code & 8) != 0, "code %d: sign", code);
        cr_assert_eq(ref_e2m1_from_f32(value), code, "code %d does not round-trip", code);
        cr_assert_eq(kernel_fp4_code(value), code, "kernel encoder: code %d", code);
    }
}

Test(e2m1, midpoints_round_to_even_and_neighbours_to_nearest) {
    for (int low = 0; low < 7; low++) {
        float mid = (float)((GRID[low] + GRID[low + 1]) / 2); /* exact in f32 */
        int even = (low & 1) ? low + 1 : low;
        for (int s = 0; s < 2; s++) {
            float sign = s ? -1.0f : 1.0f;
            int sbit = s ? 8 : 0;
            float at = sign * mid, up = sign * nextafterf(mid, 10.0f),
                  down = sign * nextafterf(mid, 0.0f);
            cr_assert_eq(ref_e2m1_from_f32(at), sbit | even, "midpoint %g", (double)at);
            cr_assert_eq(ref_e2m1_from_f32(up), sbit | (low + 1), "above %g", (double)at);
            cr_assert_eq(ref_e2m1_from_f32(down), sbit | low, "below %g", (double)at);
            cr_assert_eq(kernel_fp4_code(at), sbit | even, "kernel: midpoint %g", (double)at);
            cr_assert_eq(kernel_fp4_code(up), sbit | (low + 1), "kernel: above %g", (double)at);
            cr_assert_eq(kernel_fp4_code(down), sbit | low, "kernel: below %g", (double)at);
        }
    }
}

Test(e2m1, saturation_nan_signed_zero_and_probe_values) {
    /* tilekernels-spec.md Appendix A, __nv_cvt_float_to_fp4 column */
    static const struct {
        float x;
        int code;
    } probes[] = {
        {0.0f, 0x0}, {-0.0f, 0x8}, {0x1p-10f, 0x0}, {0x1p-9f, 0x0}, {-0.1f, 0x8},
        {0.25f, 0x0}, {0.2500001f, 0x1}, {0.75f, 0x2}, {1.25f, 0x2}, {1.75f, 0x4},
        {2.5f, 0x4}, {3.5f, 0x6}, {5.0f, 0x6}, {5.0001f, 0x7}, {6.5f, 0x7}, {7.0f, 0x7},
        {100.0f, 0x7}, {448.0f, 0x7}, {1000.0f, 0x7}, {-1000.0f, 0xF}, {65504.0f, 0x7},
        {INFINITY, 0x7}, {-INFINITY, 0xF}, {FLT_MAX, 0x7}, {-FLT_MAX, 0xF},
        {0x1p-149f, 0x0}, {-0x1p-149f, 0x8}, {NAN, 0x7}, {-NAN, 0x7},
    };
    for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
        cr_assert_eq(ref_e2m1_from_f32(probes[i].x), probes[i].code, "x = %a: got 0x%x",
                     (double)probes[i].x, ref_e2m1_from_f32(probes[i].x));
        cr_assert_eq(kernel_fp4_code(probes[i].x), probes[i].code, "kernel: x = %a",
                     (double)probes[i].x);
    }
    /* NaN payloads of both signs */
    uint32_t nans[] = {0x7F800001u, 0x7FC00000u, 0x7FFFFFFFu, 0xFF800001u, 0xFFC00000u};
    for (size_t i = 0; i < 5; i++) {
        cr_assert_eq(ref_e2m1_from_f32(ref_f32_from_bits(nans[i])), 0x7);
        cr_assert_eq(kernel_fp4_code(ref_f32_from_bits(nans[i])), 0x7);
    }
}

/* Every 7th f32 pattern with magnitude below 8 (both signs; a third of a
 * billion values, every binade and every rounding neighbourhood many
 * times over), in parallel.  Midpoints and their neighbours are checked
 * exactly above. */
typedef struct sweep {
    atomic_uint_fast64_t reference_mismatches, kernel_mismatches;
    atomic_uint_fast32_t first_bad;
} sweep;

#define SWEEP_CHUNK 4096
#define SWEEP_LIMIT 0x41000000u /* 8.0 */
#define SWEEP_STRIDE 7u

static void sweep_range(void *context, int64_t begin, int64_t end) {
    sweep *s = context;
    uint64_t bad_reference = 0, bad_kernel = 0;
    for (int64_t chunk = begin; chunk < end; chunk++)
        for (uint32_t i = 0; i < SWEEP_CHUNK; i++) {
            uint32_t bits = ((uint32_t)chunk * SWEEP_CHUNK + i) * SWEEP_STRIDE;
            for (int s_bit = 0; s_bit < 2; s_bit++) {
                float x = ref_f32_from_bits(bits | (s_bit ? 0x80000000u : 0));
                int want = naive_e2m1_encode(x);
                if (ref_e2m1_from_f32(x) != want) {
                    bad_reference++;
                    atomic_store(&s->first_bad, ref_f32_bits(x));
                }
                if (kernel_fp4_code(x) != want) {
                    bad_kernel++;
                    atomic_store(&s->first_bad, ref_f32_bits(x));
                }
            }
        }
    atomic_fetch_add(&s->reference_mismatches, bad_reference);
    atomic_fetch_add(&s->kernel_mismatches, bad_kernel);
}

Test(e2m1, patterns_below_8_match_grid_search, .timeout = 600) {
    sweep s;
    atomic_init(&s.reference_mismatches, 0);
    atomic_init(&s.kernel_mismatches, 0);
    atomic_init(&s.first_bad, 0);
    ref_parallel_for(SWEEP_LIMIT / SWEEP_STRIDE / SWEEP_CHUNK, 64, sweep_range, &s);
    uint32_t bad = (uint32_t)atomic_load(&s.first_bad);
    cr_assert_eq(atomic_load(&s.reference_mismatches), 0,
                 "reference encoder: %llu mismatches, e.g. bits 0x%08x",
                 (unsigned long long)atomic_load(&s.reference_mismatches), bad);
    cr_assert_eq(atomic_load(&s.kernel_mismatches), 0,
                 "kernel encoder: %llu mismatches, e.g. bits 0x%08x",
                 (unsigned long long)atomic_load(&s.kernel_mismatches), bad);
}

/* ---- scales --------------------------------------------------------------- */

Test(scale, e2m1_sf_and_inv) {
    float clamp = REF_E2M1_CLAMP_MIN;
    cr_assert_eq((double)clamp, ldexp(6.0, -126));
    float amaxes[] = {0.0f, 1e-40f, clamp, 1e-30f, 0.3f, 6.0f, 7.0f, 1000.0f, 3e38f};
    for (size_t i = 0; i < sizeof amaxes / sizeof amaxes[0]; i++) {
        float a = fmaxf(amaxes[i], clamp);
        ref_scale plain = ref_fp4_scale(amaxes[i], TK_E2M1, false);
        cr_assert_eq(plain.sf, a / 6.0f);
        cr_assert_eq(plain.inv, 6.0f / a);
        ref_scale rounded = ref_fp4_scale(amaxes[i], TK_E2M1, true);
        /* next power of two >= a / 6, by frexp */
        int e;
        double m = frexp((double)(a / 6.0f), &e);
        double want = m == 0.5 ? ldexp(1.0, e - 1) : ldexp(1.0, e);
        cr_assert_eq((double)rounded.sf, want, "amax %g: sf %g, want %g", (double)amaxes[i],
                     (double)rounded.sf, want);
        cr_assert_eq((double)rounded.inv, 1.0 / want);
        cr_assert_eq(ref_ue8m0_to_f32(rounded.ue8m0), rounded.sf);
    }
    /* e4m3 goes to ref_sf_and_inv unchanged */
    ref_scale e4m3 = ref_fp4_scale(3.0f, TK_E4M3, false);
    cr_assert_eq(e4m3.sf, 3.0f / 448.0f);
}

/* ---- per-token references against element loops -------------------------- */

#define ROWS 37
#define COLS 192

static float naive_input(const float *x, int64_t r, int64_t c) { return x[r * COLS + c]; }

/* One per-token case on f32 input, both formats, checked against a direct
 * loop: scale per group from the group's |max|, then element codes. */
static void check_float_case(const float *x, int npc, tk_dtype format, bool round_sf,
                             tk_sf_layout layout) {
    ref_quant_input in = {x, TK_F32, COLS, NULL, 0, 0, 0};
    ref_sf_shape shape;
    cr_assert(ref_sf_shape_of(ROWS, COLS, 1, npc, layout, &shape));
    uint8_t out[ROWS * COLS];
    unsigned char *sf = calloc(1, shape.bytes + 1);
    memset(out, 0xAB, sizeof out);
    cr_assert(ref_per_token_quant(&in, ROWS, COLS, npc, format, round_sf, layout, NULL, out,
                                  sf));
    int64_t groups = (COLS + npc - 1) / npc;
    for (int64_t r = 0; r < ROWS; r++)
        for (int64_t g = 0; g < groups; g++) {
            float amax = 0.0f;
            for (int64_t c = g * npc; c < COLS && c < (g + 1) * npc; c++)
                if (fabsf(naive_input(x, r, c)) > amax)
                    amax = fabsf(naive_input(x, r, c));
            double qmax = format == TK_E2M1 ? 6.0 : 448.0;
            double floor = format == TK_E2M1 ? ldexp(6.0, -126) : (double)1e-4f;
            float a = amax > (float)floor ? amax : (float)floor;
            float sf_value = (float)a / (float)qmax, inv = (float)qmax / a;
            if (round_sf) {
                int e;
                double m = frexp((double)sf_value, &e);
                sf_value = (float)(m == 0.5 ? ldexp(1.0, e - 1) : ldexp(1.0, e));
                inv = 1.0f / sf_value;
            }
            cr_assert_eq(ref_sf_load(&shape, sf, r, g), sf_value, "row %ld group %ld",
                         (long)r, (long)g);
            for (int64_t c = g * npc; c < COLS && c < (g + 1) * npc; c++) {
                float q = naive_input(x, r, c) * inv;
                if (format == TK_E4M3) {
                    cr_assert_eq(out[r * COLS + c], ref_e4m3_from_f32(q));
                } else {
                    uint8_t byte = out[(r * COLS + c) / 2];
                    int code = c % 2 ? byte >> 4 : byte & 0xF;
                    cr_assert_eq(code, naive_e2m1_encode(q), "[%ld, %ld]: %g", (long)r,
                                 (long)c, (double)q);
                }
            }
        }
    free(sf);
}

static float *random_matrix(uint64_t seed) {
    float *x = malloc(sizeof(float) * ROWS * COLS);
    ref_fill_rand_float(x, TK_F32, ROWS, COLS, -20, 20, seed);
    /* exact grid midpoints and zeros in one row: ties and the clamp */
    for (int c = 0; c < COLS; c++)
        x[3 * COLS + c] = (float)((c % 7) * 0.25);
    for (int c = 0; c < COLS; c++)
        x[5 * COLS + c] = 0.0f;
    return x;
}

Test(per_token_quant, float_input_matches_element_loops) {
    float *x = random_matrix(11);
    int npcs[] = {16, 32, 64, 128, COLS};
    for (int n = 0; n < 5; n++)
        for (int f = 0; f < 2; f++) {
            tk_dtype format = f ? TK_E2M1 : TK_E4M3;
            check_float_case(x, npcs[n], format, false, TK_SF_ROW_MAJOR);
            check_float_case(x, npcs[n], format, true, TK_SF_COL_MAJOR);
            check_float_case(x, npcs[n], format, true, TK_SF_PACKED_UE8M0);
        }
    free(x);
}

Test(per_token_quant, sf_only_and_precomputed_agree_with_the_cast) {
    float *x = random_matrix(12);
    ref_quant_input in = {x, TK_F32, COLS, NULL, 0, 0, 0};
    for (int f = 0; f < 2; f++) {
        tk_dtype format = f ? TK_E2M1 : TK_E4M3;
        float sf[ROWS * 4], sf_only[ROWS * 4];
        uint8_t out[ROWS * COLS], again[ROWS * COLS];
        cr_assert(ref_per_token_quant(&in, ROWS, COLS, 64, format, false, TK_SF_ROW_MAJOR,
                                      NULL, out, sf));
        cr_assert(ref_per_token_quant(&in, ROWS, COLS, 64, format, false, TK_SF_ROW_MAJOR,
                                      NULL, NULL, sf_only));
        cr_assert_eq(memcmp(sf, sf_only, sizeof(float) * ROWS * 3), 0);
        /* inv = 1 / sf differs from QMAX / a in general; with round_sf the
         * two agree, so the precomputed cast reproduces the cast */
        cr_assert(ref_per_token_quant(&in, ROWS, COLS, 64, format, true, TK_SF_ROW_MAJOR, NULL,
                                      out, sf));
        cr_assert(ref_per_token_quant(&in, ROWS, COLS, 64, format, true, TK_SF_ROW_MAJOR, sf,
                                      again, NULL));
        size_t bytes = format == TK_E2M1 ? ROWS * COLS / 2 : ROWS * COLS;
        cr_assert_eq(memcmp(out, again, bytes), 0);
    }
    free(x);
}

Test(per_token_quant, quantized_input_uses_the_kernel_association) {
    /* e4m3 and FP4 data with (32, 32) f32 scales that are not powers of
     * two, so that (data * s_in) * inv and data * (s_in * inv) can differ */
    float *x = random_matrix(13);
    int rows = ROWS, cols = COLS;
    for (int kind = 0; kind < 2; kind++) {
        tk_dtype data_dtype = kind ? TK_E2M1 : TK_E4M3;
        ref_sf_shape in_shape;
        cr_assert(ref_sf_shape_of(rows, cols, 32, 32, TK_SF_ROW_MAJOR, &in_shape));
        uint8_t data[ROWS * COLS];
        float in_sf[2 * 6];
        ref_quant_input source = {x, TK_F32, COLS, NULL, 0, 0, 0};
        /* quantise per (1, 32) first, then treat as (32, 32) data with
         * arbitrary scales */
        float scratch[ROWS * 6];
        cr_assert(ref_per_token_quant(&source, rows, cols, 32, data_dtype, false,
                                      TK_SF_ROW_MAJOR, NULL, data, scratch));
        for (int i = 0; i < 12; i++)
            in_sf[i] = 0.37f * (float)(i + 1);
        ref_quant_input q = {data, data_dtype, kind ? COLS / 2 : COLS, in_sf,
                             TK_SF_ROW_MAJOR, 32, 32};
        for (int f = 0; f < 2; f++) {
            tk_dtype format = f ? TK_E2M1 : TK_E4M3;
            uint8_t out[ROWS * COLS];
            float sf[ROWS * 6];
            cr_assert(ref_per_token_quant(&q, rows, cols, 32, format, false, TK_SF_ROW_MAJOR,
                                          NULL, out, sf));
            for (int r = 0; r < rows; r++)
                for (int g = 0; g < 6; g++) {
                    float s_in = in_sf[(r / 32) * 6 + g];
                    float amax = 0.0f;
                    float values[32];
                    for (int k = 0; k < 32; k++) {
                        int c = g * 32 + k;
                        values[k] = kind ? ref_e2m1_to_f32((uint8_t)(c % 2
                                                                     ? data[(r * cols + c) / 2] >> 4
                                                                     : data[(r * cols + c) / 2] & 0xF))
                                         : ref_e4m3_to_f32(data[r * cols + c]);
                        amax = fmaxf(amax, fabsf(values[k]) * s_in);
                    }
                    ref_scale scale = ref_fp4_scale(amax, format, false);
                    cr_assert_eq(sf[r * 6 + g], scale.sf);
                    float multiplier = s_in * scale.inv;
                    for (int k = 0; k < 32; k++) {
                        int c = g * 32 + k;
                        float q_value = values[k] * multiplier;
                        int got = format == TK_E4M3
                                      ? out[r * cols + c]
                                      : (c % 2 ? out[(r * cols + c) / 2] >> 4
                                               : out[(r * cols + c) / 2] & 0xF);
                        int want = format == TK_E4M3 ? ref_e4m3_from_f32(q_value)
                                                     : naive_e2m1_encode(q_value);
                        cr_assert_eq(got, want, "kind %d format %d [%d, %d]", kind, f, r, c);
                    }
                }
        }
    }
    free(x);
}

Test(cast_back_e2m1, matches_element_loop_and_round_trips) {
    float *x = random_matrix(14);
    ref_quant_input in = {x, TK_F32, COLS, NULL, 0, 0, 0};
    ref_sf_shape shape;
    cr_assert(ref_sf_shape_of(ROWS, COLS, 1, 32, TK_SF_PACKED_UE8M0, &shape));
    unsigned char *sf = calloc(1, shape.bytes);
    uint8_t packed[ROWS * COLS / 2];
    cr_assert(ref_per_token_quant(&in, ROWS, COLS, 32, TK_E2M1, true, TK_SF_PACKED_UE8M0, NULL,
                                  packed, sf));
    float back[ROWS * COLS];
    uint16_t back_bf16[ROWS * COLS];
    cr_assert(ref_cast_back_e2m1(packed, ROWS, COLS, sf, TK_SF_PACKED_UE8M0, 1, 32, TK_F32,
                                 back));
    cr_assert(ref_cast_back_e2m1(packed, ROWS, COLS, sf, TK_SF_PACKED_UE8M0, 1, 32, TK_BF16,
                                 back_bf16));
    double xy = 0, xx = 0;
    for (int r = 0; r < ROWS; r++)
        for (int c = 0; c < COLS; c++) {
            int byte = packed[(r * COLS + c) / 2];
            int code = c % 2 ? byte >> 4 : byte & 0xF;
            double value = (code & 8) ? -GRID[code & 7] : GRID[code & 7];
            float scale = ref_ue8m0_to_f32(
                ((unsigned char *)sf)[ref_sf_offset(&shape, r, c / 32)]);
            float want = (float)value * scale;
            cr_assert_eq(back[r * COLS + c], want);
            cr_assert_eq(back_bf16[r * COLS + c], ref_bf16_from_f32(want));
            xy += (double)want * x[r * COLS + c];
            xx += (double)want * want + (double)x[r * COLS + c] * x[r * COLS + c];
        }
    /* TileKernels' e2m1 round-trip bound: calc_diff < 2e-2 */
    cr_assert_lt(1.0 - 2.0 * xy / xx, 2e-2);
    free(sf);
    free(x);
}

/* ---- tk_unpack_e2m1 ------------------------------------------------------- */

Test(unpack, every_byte_both_dtypes_and_bad_arguments) {
    uint8_t bytes[256];
    for (int i = 0; i < 256; i++)
        bytes[i] = (uint8_t)i;
    float values[512], want[512];
    uint16_t halves[512];
    cr_assert_eq(tk_unpack_e2m1(bytes, 256, TK_F32, values), TK_SUCCESS);
    cr_assert_eq(tk_unpack_e2m1(bytes, 256, TK_BF16, halves), TK_SUCCESS);
    cr_assert(ref_unpack_e2m1(bytes, 256, TK_F32, want));
    for (int i = 0; i < 512; i++) {
        int code = i % 2 ? (i / 2) >> 4 : (i / 2) & 0xF;
        cr_assert_eq(ref_f32_bits(values[i]), ref_f32_bits(want[i]), "element %d", i);
        cr_assert_eq(ref_f32_bits(values[i]), ref_f32_bits(ref_e2m1_to_f32((uint8_t)code)));
        cr_assert_eq(halves[i], ref_bf16_from_f32(want[i]));
    }
    cr_assert(signbit(values[2 * 0x08]) && values[2 * 0x08] == 0.0f, "code 8 is -0.0");
    cr_assert_eq(tk_unpack_e2m1(bytes, 0, TK_F32, NULL), TK_SUCCESS);
    cr_assert_eq(tk_unpack_e2m1(bytes, -1, TK_F32, values), TK_ERROR_INVALID_ARGUMENT);
    cr_assert_eq(tk_unpack_e2m1(bytes, 4, TK_E4M3, values), TK_ERROR_INVALID_ARGUMENT);
    cr_assert_eq(tk_unpack_e2m1(NULL, 4, TK_F32, values), TK_ERROR_INVALID_ARGUMENT);
    cr_assert_eq(tk_unpack_e2m1(bytes, 4, TK_F32, NULL), TK_ERROR_INVALID_ARGUMENT);
    cr_assert(strstr(tk_last_error(), "out") != NULL, "%s", tk_last_error());
}
