/*
 * test_lossless_replay.c -- replays kernels/quant_block.tk's
 * per_block_cast_lossless in C, thread by thread, and compares it with the
 * C reference (tests/ref/block_cast.c), with no GPU.
 *
 * The kernel picks its conversion per thread: when every valid item's
 * relative exponent d = E_in - E_out lies in -5..6 (checked once from the
 * min and max of the thread's input exponents) it runs the prmt tables of
 * stdlib/fp4.tk with no per-item branch, one pair of tables per slot when
 * an input block spans the slot's columns; otherwise each item chooses
 * the tables or decode-multiply-encode.  It also reads one packed scale
 * word per slot and takes its items' bytes apart, and masks partial tiles.
 * This replay follows those steps (thread mapping, word loads, masking,
 * the shuffles and shared-memory maximum, the range check, both table
 * paths and the fallback) for the three instances, partial row and column
 * tiles, input blocks that split a slot (x_block_k 8 and 16) or span it,
 * both input scale layouts, and exponent spreads that keep every thread
 * on the table path or push some onto the fallback; the output data and
 * every output exponent must equal the reference's.  The tables
 * themselves are proved for every code and d in tests/test_fp4_decode.c.
 */
#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "block_cast.h"
#include "packed_emulation.h"
#include "reference.h"

/* stdlib/fp4.tk's e4m3 table decoder, line for line */
static uint32_t table_low(int32_t d) { return 0x3C383000u + (uint32_t)d * 0x08080800u; }
static uint32_t table_high(int32_t d) { return 0x4C484440u + (uint32_t)d * 0x08080808u; }
static uint32_t e4m3x4(uint32_t w, uint32_t half, uint32_t low, uint32_t high) {
    uint32_t magnitude = prmt(low, high, (w >> (16u * half)) & 0x7777u);
    return magnitude | (prmt(w << 4, w, half == 0u ? 0xD9C8u : 0xFBEAu) & 0x80808080u);
}

/* the kernel's fallback: e4m3(fp4_value(code) * 2^d), the scale built
 * from its exponent bits */
static uint8_t fallback(uint32_t code, int32_t d) {
    return ref_e4m3_from_f32(ref_e2m1_to_f32((uint8_t)(code & 0xFu)) *
                             f32_of((uint32_t)(d + 127) << 23));
}

typedef struct instance {
    int bm, nt, tr, p, g; /* g groups of p / g adjacent items per slot */
    int ipr;              /* items per tile row: the tile is 8 * ipr columns */
} instance;

typedef struct problem {
    int64_t rows, cols;
    int lbm, lbk, lanes_log2;
    bool packed_in;
    const uint8_t *x;
    const unsigned char *sf_in;
    const ref_sf_shape *in_shape;
    uint8_t *out;
    int *e_out_block; /* [nbm][nbk] of the output blocks, -1 where unset */
    int64_t nbk;
} problem;

enum { MAX_NT = 512, MAX_ITEMS = 16, MAX_G = 2, MAX_KB = 8 };

/* the row of slot s of thread t in tile row by: a warp's slots are
 * adjacent rows (32 / tpr rows a slot) */
static int64_t tile_row(const instance *in, int64_t by, int s, int t) {
    const int tpr = in->ipr / in->p, rw = 32 / tpr, slots = in->tr / (in->nt / tpr);
    return by * in->tr + (int64_t)(t / 32) * slots * rw + (int64_t)s * rw + t % 32 / tpr;
}

/* one thread block (tile by, bx) of instance in */
static void replay_tile(const instance *in, const problem *pr, int64_t by, int64_t bx) {
    const int64_t TC = 8 * in->ipr;
    const int q_items = in->p / in->g, gi = in->ipr / in->g;
    const int tpr = in->ipr / in->p, rps = in->nt / tpr, slots = in->tr / rps;
    const int lb = 1 << pr->lanes_log2, tlb = lb / q_items, kbs = in->ipr >> pr->lanes_log2;
    const bool shared_block = (gi >> pr->lanes_log2) == 0;
    static uint32_t nibbles[MAX_NT][MAX_ITEMS];
    static int e_in[MAX_NT][MAX_ITEMS], e_out[MAX_NT][MAX_ITEMS], lo[MAX_NT], hi[MAX_NT];
    int a[MAX_G][MAX_NT], partial[MAX_NT / 32][MAX_KB];
    bool full = by * in->tr + in->tr <= pr->rows && bx * TC + TC <= pr->cols;
    for (int t = 0; t < in->nt; t++) {
        int64_t col = bx * TC + (int64_t)(t % tpr) * 8 * q_items;
        for (int s = 0; s < slots; s++) {
            int64_t r = tile_row(in, by, s, t);
            for (int g = 0; g < in->g; g++) {
                int64_t cg = col + (int64_t)g * gi * 8;
                bool valid = r < pr->rows && cg < pr->cols; /* the copies' masks */
                uint32_t word = 0;
                if (pr->packed_in && valid) {
                    /* the group's packed word: 4 consecutive bytes */
                    size_t at = ref_sf_offset(pr->in_shape, r >> pr->lbm, (cg >> pr->lbk) & ~3);
                    cr_assert_eq(at % 4, 0, "a packed word is not 4-byte aligned");
                    for (int b = 0; b < 4; b++)
                        word |= (uint32_t)pr->sf_in[at + (size_t)b] << (8 * b);
                }
                for (int q = 0; q < q_items; q++) {
                    int j = s * in->p + g * q_items + q;
                    int64_t c = cg + 8 * q;
                    nibbles[t][j] = 0;
                    for (int b = 0; b < 4 && valid; b++)
                        nibbles[t][j] |= (uint32_t)pr->x[r * (pr->cols / 2) + c / 2 + b]
                                         << (8 * b);
                    if (pr->packed_in)
                        e_in[t][j] = (int)prmt(word, 0u, 0x4440u | (uint32_t)((c >> pr->lbk) & 3));
                    else
                        e_in[t][j] = valid ? ref_sf_exponent(pr->in_shape, pr->sf_in,
                                                             r >> pr->lbm, c >> pr->lbk)
                                           : 0;
                }
            }
        }
        lo[t] = 255;
        for (int g = 0; g < in->g; g++)
            a[g][t] = 0;
        for (int s = 0; s < slots; s++)
            for (int g = 0; g < in->g; g++)
                for (int q = 0; q < q_items; q++) {
                    int j = s * in->p + g * q_items + q;
                    int64_t r = tile_row(in, by, s, t);
                    bool valid = full || (r < pr->rows && col + g * gi * 8 + 8 * q < pr->cols);
                    if (!valid)
                        e_in[t][j] = 0;
                    a[g][t] = e_in[t][j] > a[g][t] ? e_in[t][j] : a[g][t];
                    if (valid && e_in[t][j] < lo[t])
                        lo[t] = e_in[t][j];
                }
        hi[t] = a[0][t];
        for (int g = 1; g < in->g; g++)
            hi[t] = a[g][t] > hi[t] ? a[g][t] : hi[t];
    }
    if (in->bm == 1) {
        /* each slot's row segment: the TLB lanes of its output block */
        for (int t = 0; t < in->nt; t++)
            for (int s = 0; s < slots; s++) {
                int m = 0, first = t & ~(tlb - 1);
                for (int u = first; u < first + tlb; u++)
                    for (int h = 0; h < in->p; h++)
                        m = e_in[u][s * in->p + h] > m ? e_in[u][s * in->p + h] : m;
                e_out[t][s * in->g] = m - 6 > 0 ? m - 6 : 0;
            }
    } else {
        for (int g = 0; g < in->g; g++)
            for (int w = 0; w < in->nt / 32; w++) {
                int lane[32];
                for (int l = 0; l < 32; l++)
                    lane[l] = shared_block ? hi[32 * w + l] : a[g][32 * w + l];
                for (int o = 0; o < 5; o++) {
                    if (!((1 << o) < tlb || (1 << o) >= tpr))
                        continue;
                    int next[32];
                    for (int l = 0; l < 32; l++)
                        next[l] = lane[l] > lane[l ^ (1 << o)] ? lane[l] : lane[l ^ (1 << o)];
                    memcpy(lane, next, sizeof next);
                }
                for (int l = 0; l < tpr; l++)
                    if ((l & (tlb - 1)) == 0 && (!shared_block || g == 0))
                        partial[w][(g * gi + l * q_items) >> pr->lanes_log2] = lane[l];
            }
        for (int t = 0; t < in->nt; t++)
            for (int g = 0; g < in->g; g++) {
                int kb = (g * gi + (t % tpr) * q_items) >> pr->lanes_log2, m = partial[0][kb];
                for (int w = 1; w < in->nt / 32; w++)
                    m = partial[w][kb] > m ? partial[w][kb] : m;
                for (int s = 0; s < slots; s++)
                    e_out[t][s * in->g + g] = m - 6 > 0 ? m - 6 : 0;
            }
    }
    for (int t = 0; t < in->nt; t++) {
        int64_t col = bx * TC + (int64_t)(t % tpr) * 8 * q_items;
        int e_min = e_out[t][0], e_max = e_out[t][0];
        for (int g = 1; g < in->g; g++) {
            e_min = e_out[t][g] < e_min ? e_out[t][g] : e_min;
            e_max = e_out[t][g] > e_max ? e_out[t][g] : e_max;
        }
        bool tables = in->bm != 1 && lo[t] + 5 >= e_max && hi[t] <= e_min + 6;
        bool one_block = ((8 * q_items - 1) >> pr->lbk) == 0;
        for (int s = 0; s < slots; s++) {
            int64_t r = tile_row(in, by, s, t);
            for (int g = 0; g < in->g; g++) {
                int64_t cg = col + (int64_t)g * gi * 8;
                int64_t kg = bx * kbs + ((g * gi + (t % tpr) * q_items) >> pr->lanes_log2);
                int eo = e_out[t][s * in->g + g];
                uint8_t v[16];
                for (int q = 0; q < q_items; q++) {
                    int j = s * in->p + g * q_items + q;
                    int32_t d = e_in[t][tables && one_block ? s * in->p + g * q_items : j] - eo;
                    if (tables || (d >= -5 && d <= 6)) {
                        uint32_t w0 = e4m3x4(nibbles[t][j], 0, table_low(d), table_high(d));
                        uint32_t w1 = e4m3x4(nibbles[t][j], 1, table_low(d), table_high(d));
                        for (int i = 0; i < 4; i++) {
                            v[8 * q + i] = (uint8_t)(w0 >> (8 * i));
                            v[8 * q + 4 + i] = (uint8_t)(w1 >> (8 * i));
                        }
                    } else {
                        for (int i = 0; i < 8; i++)
                            v[8 * q + i] = fallback(nibbles[t][j] >> (4 * i), d);
                    }
                }
                if (r < pr->rows && cg < pr->cols) {
                    memcpy(pr->out + r * pr->cols + cg, v, (size_t)(8 * q_items));
                    if (kg * (8 << pr->lanes_log2) < pr->cols)
                        pr->e_out_block[(in->bm == 1 ? r : by) * pr->nbk + kg] = eo;
                }
            }
        }
    }
}

/* x: random packed FP4; input exponents base + 0..spread (a random
 * subset of blocks raised by jump), in the given layout */
static void check_case(int64_t rows, int64_t cols, int in_bm, int in_bk, bool packed_in,
                       int out_bm, int out_bk, int base, int spread, int jump, unsigned seed) {
    /* b1, b32 and b128 (the grid order decides only which tile runs
     * when, which this replay does not see) */
    static const instance instances[] = {
        {1, 128, 32, 1, 1, 16}, {32, 128, 32, 1, 1, 16}, {128, 256, 128, 2, 1, 32}};
    const instance *in = out_bm == 1 ? &instances[0] : out_bm == 32 ? &instances[1] : &instances[2];
    const int64_t TC = 8 * in->ipr;
    tk_sf_layout in_layout = packed_in ? TK_SF_PACKED_UE8M0 : TK_SF_ROW_MAJOR;
    ref_sf_shape in_shape, out_shape;
    cr_assert(ref_sf_shape_of(rows, cols, in_bm, in_bk, in_layout, &in_shape));
    cr_assert(ref_sf_shape_of(rows, cols, out_bm, out_bk, TK_SF_PACKED_UE8M0, &out_shape));
    uint8_t *x = malloc((size_t)(rows * cols / 2));
    unsigned char *sf_in = calloc(in_shape.bytes, 1), *sf_out = calloc(out_shape.bytes, 1);
    uint8_t *want = malloc((size_t)(rows * cols)), *got = calloc((size_t)(rows * cols), 1);
    int *e_out = malloc(sizeof(int) * (size_t)(out_shape.nbm * out_shape.nbk));
    srand(seed);
    for (int64_t i = 0; i < rows * cols / 2; i++)
        x[i] = (uint8_t)(rand() & 0xFF);
    for (int64_t i = 0; i < in_shape.nbm; i++)
        for (int64_t k = 0; k < in_shape.nbk; k++) {
            int e = base + rand() % (spread + 1) + (rand() % 8 == 0 ? jump : 0);
            ref_scale scale = {ref_f32_from_bits((uint32_t)e << 23), 0.0f, (uint8_t)e};
            ref_sf_store(&in_shape, sf_in, i, k, scale);
        }
    for (int64_t i = 0; i < out_shape.nbm * out_shape.nbk; i++)
        e_out[i] = -1;
    cr_assert(ref_per_block_cast_lossless(x, rows, cols, sf_in, in_layout, in_bm, in_bk, want,
                                          sf_out, TK_SF_PACKED_UE8M0, out_bm, out_bk));
    problem pr = {rows, cols, 0, 0, out_bk == 32 ? 2 : 4, packed_in, x, sf_in, &in_shape, got,
                  e_out, out_shape.nbk};
    while ((1 << pr.lbm) < in_bm)
        pr.lbm++;
    while ((1 << pr.lbk) < in_bk)
        pr.lbk++;
    for (int64_t by = 0; by < (rows + in->tr - 1) / in->tr; by++)
        for (int64_t bx = 0; bx < (cols + TC - 1) / TC; bx++)
            replay_tile(in, &pr, by, bx);
    int64_t bad = 0;
    for (int64_t i = 0; i < rows * cols; i++)
        bad += got[i] != want[i];
    cr_assert_eq(bad, 0, "%ldx%ld in %dx%d %s -> %dx%d, exponents %d+%d(+%d): %ld bytes differ",
                 rows, cols, in_bm, in_bk, packed_in ? "packed" : "f32", out_bm, out_bk, base,
                 spread, jump, bad);
    for (int64_t i = 0; i < out_shape.nbm; i++)
        for (int64_t k = 0; k < out_shape.nbk; k++)
            cr_assert_eq(e_out[i * out_shape.nbk + k],
                         ref_sf_exponent(&out_shape, sf_out, i, k),
                         "output exponent of block (%ld, %ld)", i, k);
    free(x);
    free(sf_in);
    free(sf_out);
    free(want);
    free(got);
    free(e_out);
}

static const int OUT_BLOCKS[][2] = {{1, 32}, {1, 128}, {32, 32}, {32, 128}, {128, 32}, {128, 128}};
static const int IN_BLOCKS[][2] = {{1, 8}, {1, 16}, {1, 32}, {2, 32}, {1, 128}, {32, 128}};

static void sweep(int base, int spread, int jump) {
    int64_t shapes[][2] = {{300, 352}, {129, 1024}, {256, 256}};
    unsigned seed = 1;
    for (int sh = 0; sh < 3; sh++)
        for (int ob = 0; ob < 6; ob++)
            for (int ib = 0; ib < 6; ib++)
                for (int packed = 0; packed < 2; packed++) {
                    if (OUT_BLOCKS[ob][0] % IN_BLOCKS[ib][0] != 0 ||
                        OUT_BLOCKS[ob][1] % IN_BLOCKS[ib][1] != 0)
                        continue;
                    check_case(shapes[sh][0], shapes[sh][1], IN_BLOCKS[ib][0], IN_BLOCKS[ib][1],
                               packed != 0, OUT_BLOCKS[ob][0], OUT_BLOCKS[ob][1], base, spread,
                               jump, seed++);
                }
}

/* TileKernels' data: a dynamic range of 2^9 (every thread on the tables) */
Test(lossless_replay, spec_range) { sweep(100, 5, 0); }

/* small exponents: E_out clamps to 0 and d = E_in stays in 0..5 */
Test(lossless_replay, clamped_output_scale) { sweep(0, 5, 0); }

/* some blocks 2^14 above the rest: their neighbours fall under 2^-5 of the
 * block maximum and take the fallback, others keep the tables */
Test(lossless_replay, beyond_the_spec_range) { sweep(60, 3, 14); }
