/*
 * reference.h -- pure-C CPU references for every kernel libtk ships.
 *
 * These functions are the oracle the GPU golden tests (test_gpu_kernels)
 * and tkbench compare against, byte for byte.  They follow the exactness
 * rules of tilekernels-spec.md (sections 2.2, 3.1, 3.3, 3.5, 4.1-4.3, 6.1,
 * 6.3, 7): IEEE f32 arithmetic with one rounding per operation and no FMA
 * contraction, saturating round-to-nearest-even e4m3, RNE bf16, scale
 * factors from two IEEE divisions (or the power-of-two bit trick).
 *
 * Everything works on host memory.  Tensors are plain pointers plus sizes
 * and row strides in elements; scale-factor (SF) buffers are laid out
 * exactly as tk_sf_desc() describes them (tilekernels-spec.md 3.5), and the
 * references write only the bytes that hold a scale, so padding keeps
 * whatever the caller put there.  The large references split their work
 * over threads (ref_parallel_for); the results do not depend on the thread
 * count.
 *
 * Sections below are owned by the file named in their banner.
 */
#ifndef TK_REFERENCE_H
#define TK_REFERENCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tk.h"

/* ===================================================================== */
/* numerics.c -- number formats and the scale computation                */
/* ===================================================================== */

#define REF_E4M3_MAX 448.0f       /* largest finite e4m3 (code 0x7E)      */
#define REF_E4M3_CLAMP_MIN 1e-4f  /* amax floor, bits 0x38D1B717 (4.1)    */

uint32_t ref_f32_bits(float value);
float ref_f32_from_bits(uint32_t bits);

/* f32 -> e4m3 as cvt.rn.satfinite.e4m3x2.f32 does it: RNE on the e4m3 grid
 * (subnormals included), |x| > 448 and +-inf -> +-448 (0x7E / 0xFE), NaN of
 * either sign -> 0x7F, the sign of zero kept. */
uint8_t ref_e4m3_from_f32(float value);
/* e4m3 -> f32, exact (0x7F / 0xFF decode to NaN). */
float ref_e4m3_to_f32(uint8_t code);

/* f32 -> bf16 round-to-nearest-even; overflow rounds to +-inf; a NaN stays
 * a NaN (its payload is kept and the quiet bit set). */
uint16_t ref_bf16_from_f32(float value);
float ref_bf16_to_f32(uint16_t bits);

/* rn_e2m1 (spec 2.2) as TileKernels' reference writes it: integer
 * round-to-nearest-even with a sticky bit on the f32 pattern, i.e. the
 * nearest of {0, .5, 1, 1.5, 2, 3, 4, 6} to |x| with ties to the even
 * code; magnitudes above 6 (and infinities) saturate to 6 (code 7), NaN of
 * either sign gives +6 (0x7, the kernel's choice, spec 15.2), the sign
 * goes to bit 3 for every other input, zero results included (-0.1 ->
 * 0x8). */
#define REF_E2M1_MAX 6.0f
#define REF_E2M1_CLAMP_MIN 0x1.8p-124f /* 6 * 2^-126, bits 0x01C00000 */
uint8_t ref_e2m1_from_f32(float value);
/* Exact value of the nibble in the low 4 bits (code 8 is -0.0). */
float ref_e2m1_to_f32(uint8_t nibble);

/* Reads element `index` of a f32, bf16 or e4m3 array as f32 (exact). */
float ref_load_f32(const void *data, tk_dtype dtype, int64_t index);
/* Writes value into element `index` of a f32 array, or of a bf16 array
 * (RNE) for dtype TK_BF16. */
void ref_store_f32(void *data, tk_dtype dtype, int64_t index, float value);

/* Scale of one quantisation block (tilekernels-spec.md 4.1, e4m3):
 * sf is the dequantisation scale stored in a f32 SF buffer, inv the
 * multiplier applied before the cast, ue8m0 the biased exponent byte a
 * packed SF buffer stores (meaningful only with round_sf). */
typedef struct ref_scale {
    float sf;
    float inv;
    uint8_t ue8m0;
} ref_scale;
ref_scale ref_sf_and_inv(float amax, bool round_sf);
/* Scale of one block for any format (spec 4.1): a = max(amax, clamp_min)
 * (a NaN amax gives clamp_min), sf = a / qmax, inv = qmax / a (a second
 * division, not 1 / sf); with round_sf sf = 2^e, e = ceil(log2 sf) from
 * the bits, inv = 2^-e and ue8m0 = e + 127.  ref_sf_and_inv is this with
 * the e4m3 constants. */
ref_scale ref_quant_scale(float amax, float qmax, float clamp_min, bool round_sf);
/* Value of a UE8M0 byte: 2^(b - 127), and +0.0 for b == 0 (spec 3.3). */
float ref_ue8m0_to_f32(uint8_t biased_exponent);

/* Shape, strides and storage of an SF buffer: the same answer as
 * tk_sf_desc(), computed independently. */
typedef struct ref_sf_shape {
    tk_sf_layout layout;
    int64_t rows, cols;     /* the matrix the scales belong to          */
    int block_m, block_k;
    int64_t nbm, nbk;       /* blocks: ceil(rows/bm), ceil(cols/bk)     */
    tk_dtype dtype;         /* TK_F32, or TK_I32 for packed UE8M0       */
    int64_t shape[2];       /* logical shape of the SF tensor           */
    int64_t strides[2];     /* in elements of dtype                     */
    size_t bytes;           /* allocation the buffer needs, padding too */
} ref_sf_shape;

/* False (and *shape untouched) for a negative size, a block size < 1 or
 * an unknown layout. */
bool ref_sf_shape_of(int64_t rows, int64_t cols, int block_m, int block_k,
                     tk_sf_layout layout, ref_sf_shape *shape);
/* Byte offset of the scale of block (i, k) in the buffer. */
size_t ref_sf_offset(const ref_sf_shape *shape, int64_t i, int64_t k);
/* Bytes one scale occupies: 4 (f32) or 1 (a UE8M0 byte). */
size_t ref_sf_entry_bytes(const ref_sf_shape *shape);
/* Writes / reads the scale of block (i, k); packed buffers store and
 * return the UE8M0 byte's value. */
void ref_sf_store(const ref_sf_shape *shape, void *buffer, int64_t i,
                  int64_t k, ref_scale scale);
float ref_sf_load(const ref_sf_shape *shape, const void *buffer, int64_t i,
                  int64_t k);

/* ===================================================================== */
/* parallel.c -- splitting a reference over threads                      */
/* ===================================================================== */

/* Worker of ref_parallel_for: handles items [begin, end). */
typedef void ref_range_fn(void *context, int64_t begin, int64_t end);

/* Threads the references use: $TK_REF_THREADS if set (>= 1), else the
 * online CPUs, at most REF_MAX_THREADS. */
#define REF_MAX_THREADS 64
int ref_thread_count(void);

/* Calls fn over [0, count) in chunks, on up to ref_thread_count() threads;
 * runs inline when count < 2 * min_per_thread.  fn must write disjoint
 * memory for disjoint ranges. */
void ref_parallel_for(int64_t count, int64_t min_per_thread, ref_range_fn *fn,
                      void *context);

/* Offset of the first byte where a and b differ, or SIZE_MAX if the
 * `bytes` bytes are equal (memcmp over several threads: the golden tests
 * compare tens of gigabytes). */
size_t ref_first_difference(const void *a, const void *b, size_t bytes);

/* ===================================================================== */
/* random.c -- reproducible test inputs                                  */
/* ===================================================================== */

/* splitmix64: small, fast, and every (seed, stream) pair is its own
 * sequence, so rows can be generated in parallel reproducibly. */
typedef struct ref_rng {
    uint64_t state;
} ref_rng;
ref_rng ref_rng_seed(uint64_t seed, uint64_t stream);
uint64_t ref_rng_next(ref_rng *rng);
/* Uniform in [0, 1) with 24 random bits. */
float ref_rng_uniform(ref_rng *rng);
/* Standard normal (Box-Muller), never exactly zero. */
float ref_rng_normal(ref_rng *rng);
/* k distinct values in [0, n) (k <= n), out[0..k) in draw order: each is
 * ref_rng_next(rng) % n, redrawn while it repeats an earlier one (the
 * routing draws of the MoE references). */
void ref_rng_distinct(ref_rng *rng, uint64_t n, int k, int64_t *out);

/* Like TileKernels' generate_rand_float: normals times 2^e, finite, never
 * zero, clamped to +-FLT_MAX/8.  Each row draws its own e in
 * [exp_min, exp_max], so one buffer holds blocks of very different
 * magnitude.  dtype TK_F32 or TK_BF16 (RNE of the f32 value).  All
 * rows * row_stride elements are filled, so any view of the buffer with
 * that row stride or a smaller one is random. */
void ref_fill_rand_float(void *data, tk_dtype dtype, int64_t rows,
                         int64_t row_stride, int exp_min, int exp_max,
                         uint64_t seed);
/* Random e4m3 codes, every finite non-zero code equally likely. */
void ref_fill_rand_e4m3(uint8_t *data, int64_t count, uint64_t seed);

/* ===================================================================== */
/* transpose.c                                                            */
/* ===================================================================== */

/* out[b, j, i] = x[b, i, j] for x (batches, rows, cols) with the given row
 * and batch strides (elements) and out (batches, cols, rows) contiguous;
 * any element size (pure data movement, tilekernels-spec.md 7.1). */
void ref_batched_transpose(const void *x, void *out, size_t element_size,
                           int64_t batches, int64_t rows, int64_t cols,
                           int64_t row_stride, int64_t batch_stride);

/* ===================================================================== */
/* cast.c                                                                 */
/* ===================================================================== */

/* Block cast to e4m3 (tilekernels-spec.md 4.2): x (rows, cols) f32 or
 * bf16 with a row stride; one scale per (block_m, block_k) block, amax
 * over the block's valid elements, scales by ref_sf_and_inv, out =
 * e4m3(f32(x) * inv) contiguous (rows, cols); the scales go into `sf`
 * laid out as ref_sf_shape_of(rows, cols, block_m, block_k, layout).
 * False, writing nothing, on a bad argument (packed layout without
 * round_sf among them). */
bool ref_cast_e4m3(const void *x, tk_dtype in_dtype, int64_t rows,
                   int64_t cols, int64_t row_stride, int block_m, int block_k,
                   bool round_sf, tk_sf_layout layout, uint8_t *out, void *sf);
/* per_token_cast (spec 6.1): the block cast with (1, num_per_channels). */
bool ref_per_token_cast_e4m3(const void *x, tk_dtype in_dtype, int64_t rows,
                             int64_t cols, int64_t row_stride,
                             int num_per_channels, bool round_sf,
                             tk_sf_layout layout, uint8_t *out, void *sf);
/* cast_back (spec 4.3, 6.3): out = to_dtype(f32(x) * s) with x e4m3
 * (rows, cols) contiguous, s the scale of the element's (block_m,
 * block_k) block read from `sf` in `layout`, out f32 or bf16 contiguous. */
bool ref_cast_back_e4m3(const uint8_t *x, int64_t rows, int64_t cols,
                        const void *sf, tk_sf_layout layout, int block_m,
                        int block_k, tk_dtype out_dtype, void *out);

#endif
