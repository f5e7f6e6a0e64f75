/*
 * random.c -- reproducible random inputs for the golden tests and tkbench.
 *
 * Tests must never run on zeros (an unwritten output would pass) and
 * should see the magnitudes TileKernels' own generator produces: normals
 * scaled by a power of two anywhere from 2^-110 to 2^126.  Every row (or
 * chunk) has its own splitmix64 stream derived from (seed, index), so the
 * buffers are filled in parallel and are identical for any thread count.
 */
#include <float.h>
#include <math.h>

#include "reference.h"

ref_rng ref_rng_seed(uint64_t seed, uint64_t stream) {
    ref_rng rng;
    /* distinct odd multipliers keep (seed, stream) pairs apart */
    rng.state = seed * 0x9E3779B97F4A7C15ull ^ (stream + 1) * 0xD1B54A32D192ED03ull;
    ref_rng_next(&rng);
    return rng;
}

uint64_t ref_rng_next(ref_rng *rng) {
    uint64_t z = (rng->state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

float ref_rng_uniform(ref_rng *rng) {
    return (float)(ref_rng_next(rng) >> 40) * 0x1p-24f;
}

float ref_rng_normal(ref_rng *rng) {
    for (;;) {
        uint64_t bits = ref_rng_next(rng);
        /* u1 in (0, 1) so the logarithm is finite and non-zero */
        double u1 = ((double)(bits >> 40) + 0.5) * 0x1p-24;
        double u2 = (double)(bits & 0xFFFFFF) * 0x1p-24;
        double value = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
        if ((float)value != 0.0f)
            return (float)value;
    }
}

void ref_rng_distinct(ref_rng *rng, uint64_t n, int k, int64_t *out) {
    for (int i = 0; i < k; i++) {
        int64_t value;
        bool fresh;
        do { /* rejection: k << n in every use */
            value = (int64_t)(ref_rng_next(rng) % n);
            fresh = true;
            for (int j = 0; j < i; j++)
                fresh = fresh && out[j] != value;
        } while (!fresh);
        out[i] = value;
    }
}

typedef struct fill_float_job {
    void *data;
    tk_dtype dtype;
    int64_t row_stride;
    int exp_min, exp_max;
    uint64_t seed;
} fill_float_job;

static void fill_float_rows(void *context, int64_t begin, int64_t end) {
    const fill_float_job *job = context;
    const float limit = FLT_MAX / 8;
    for (int64_t row = begin; row < end; row++) {
        ref_rng rng = ref_rng_seed(job->seed, (uint64_t)row);
        int span = job->exp_max - job->exp_min + 1;
        int exponent = job->exp_min + (int)(ref_rng_next(&rng) % (uint64_t)span);
        for (int64_t col = 0; col < job->row_stride; col++) {
            int64_t index = row * job->row_stride + col;
            for (;;) {
                float value = ldexpf(ref_rng_normal(&rng), exponent);
                value = fminf(fmaxf(value, -limit), limit);
                if (job->dtype == TK_BF16) {
                    uint16_t bits = ref_bf16_from_f32(value);
                    if ((bits & 0x7FFF) == 0)
                        continue; /* underflowed: draw again */
                    ((uint16_t *)job->data)[index] = bits;
                } else {
                    if (value == 0.0f)
                        continue;
                    ((float *)job->data)[index] = value;
                }
                break;
            }
        }
    }
}

void ref_fill_rand_float(void *data, tk_dtype dtype, int64_t rows,
                         int64_t row_stride, int exp_min, int exp_max,
                         uint64_t seed) {
    fill_float_job job = {data, dtype, row_stride, exp_min, exp_max, seed};
    if (exp_max < exp_min)
        job.exp_max = exp_min;
    ref_parallel_for(rows, 1 + (1 << 16) / (row_stride + 1), fill_float_rows,
                     &job);
}

#define E4M3_FILL_CHUNK (1 << 20)

typedef struct fill_e4m3_job {
    uint8_t *data;
    int64_t count;
    uint64_t seed;
} fill_e4m3_job;

static void fill_e4m3_chunks(void *context, int64_t begin, int64_t end) {
    const fill_e4m3_job *job = context;
    for (int64_t chunk = begin; chunk < end; chunk++) {
        ref_rng rng = ref_rng_seed(job->seed, (uint64_t)chunk);
        int64_t first = chunk * E4M3_FILL_CHUNK;
        int64_t last = first + E4M3_FILL_CHUNK < job->count ? first + E4M3_FILL_CHUNK
                                                            : job->count;
        for (int64_t i = first; i < last; i++) {
            /* 252 finite non-zero codes: 0x01..0x7E and 0x81..0xFE */
            unsigned pick = (unsigned)(ref_rng_next(&rng) % 252);
            job->data[i] = (uint8_t)(pick < 126 ? pick + 1 : 0x81 + (pick - 126));
        }
    }
}

void ref_fill_rand_e4m3(uint8_t *data, int64_t count, uint64_t seed) {
    fill_e4m3_job job = {data, count, seed};
    int64_t chunks = (count + E4M3_FILL_CHUNK - 1) / E4M3_FILL_CHUNK;
    ref_parallel_for(chunks, 1, fill_e4m3_chunks, &job);
}
