/*
 * ref_gemm.c -- CPU references of the bf16 and fp8 block-scaled GEMMs
 * (kernels/gemm.tk) and the relative-error comparison their tests use; see
 * ref_gemm.h.
 *
 * Every input value (bf16 or e4m3) is exact in f32, and the product of two
 * f32 values is exact in double, so the only roundings are those of the
 * double sums: the reference is the true product to about 1e-16 relative,
 * far below the 2e-3 the kernels are held to.  The whole-matrix form
 * widens A and B to f32 once, then works on four rows of A at a time so
 * that each row of B is read once per four output rows; the element form
 * (tkbench's samples) runs the same loops on one row, so both give the
 * same sums in the same order.
 *
 * The kernels write bf16, so the golden reference of their output is the
 * exact product rounded once to bf16 (ref_gemm_bf16_output): a perfect
 * kernel then differs from it only where its f32 accumulation order moves
 * a value across a bf16 rounding boundary, instead of by the ~2^-9
 * relative rounding error of every element, which alone can push a small
 * output's norm ratio past 2e-3 against an f32 reference.
 */
#include "ref_gemm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Rows of A that share one pass over B in the whole-matrix reference. */
#define REF_GEMM_ROW_GROUP 4

static float gemm_load(const void *data, bool fp8, int64_t index) {
    return fp8 ? ref_e4m3_to_f32(((const uint8_t *)data)[index])
               : ref_bf16_to_f32(((const uint16_t *)data)[index]);
}

/* sum_{k in [begin, end)} a[k] * b[k] in double (exact products). */
static double dot_range(const float *a, const float *b, int64_t begin, int64_t end) {
    double sum = 0.0;
    for (int64_t k = begin; k < end; k++)
        sum += (double)a[k] * (double)b[k];
    return sum;
}

/* One output element from widened rows: the plain dot product, or the sum
 * over K blocks of each block's dot product times its two scales. */
static double gemm_row_dot(const ref_gemm_problem *p, bool fp8, const float *a_row,
                           const float *b_row, int64_t i, int64_t j) {
    if (!fp8)
        return dot_range(a_row, b_row, 0, p->k);
    double sum = 0.0;
    int64_t blocks = (p->k + REF_GEMM_SCALE_BLOCK - 1) / REF_GEMM_SCALE_BLOCK;
    for (int64_t kb = 0; kb < blocks; kb++) {
        int64_t begin = kb * REF_GEMM_SCALE_BLOCK;
        int64_t end = begin + REF_GEMM_SCALE_BLOCK < p->k ? begin + REF_GEMM_SCALE_BLOCK : p->k;
        double scale = (double)ref_sf_load(&p->sfa_shape, p->sfa, i, kb) *
                       (double)ref_sf_load(&p->sfb_shape, p->sfb, j / REF_GEMM_SCALE_BLOCK, kb);
        sum += dot_range(a_row, b_row, begin, end) * scale;
    }
    return sum;
}

/* Widens row `row` of a (rows, k) operand into out[0 .. k). */
static void widen_row(const void *data, bool fp8, int64_t k, int64_t row, float *out) {
    for (int64_t c = 0; c < k; c++)
        out[c] = gemm_load(data, fp8, row * k + c);
}

static double gemm_element(const ref_gemm_problem *p, bool fp8, int64_t i, int64_t j) {
    float *a_row = malloc((size_t)(p->k ? p->k : 1) * sizeof *a_row);
    float *b_row = malloc((size_t)(p->k ? p->k : 1) * sizeof *b_row);
    double value = NAN;
    if (a_row && b_row) {
        widen_row(p->a, fp8, p->k, i, a_row);
        widen_row(p->b, fp8, p->k, j, b_row);
        value = gemm_row_dot(p, fp8, a_row, b_row, i, j);
    }
    free(a_row);
    free(b_row);
    return value;
}

double ref_gemm_bf16_element(const ref_gemm_problem *p, int64_t i, int64_t j) {
    return gemm_element(p, false, i, j);
}

double ref_gemm_fp8_element(const ref_gemm_problem *p, int64_t i, int64_t j) {
    return gemm_element(p, true, i, j);
}

/* ---- the whole product ------------------------------------------------ */

typedef struct gemm_job {
    const ref_gemm_problem *p;
    bool fp8;
    float *a_wide, *b_wide; /* (m, k) and (n, k) widened to f32 */
    float *out;             /* one of out (f32) and out_bf16 is set */
    uint16_t *out_bf16;
} gemm_job;

static void widen_rows_a(void *context, int64_t begin, int64_t end) {
    gemm_job *job = context;
    for (int64_t r = begin; r < end; r++)
        widen_row(job->p->a, job->fp8, job->p->k, r, job->a_wide + r * job->p->k);
}

static void widen_rows_b(void *context, int64_t begin, int64_t end) {
    gemm_job *job = context;
    for (int64_t r = begin; r < end; r++)
        widen_row(job->p->b, job->fp8, job->p->k, r, job->b_wide + r * job->p->k);
}

/* Items are groups of REF_GEMM_ROW_GROUP output rows. */
static void gemm_rows(void *context, int64_t begin, int64_t end) {
    gemm_job *job = context;
    const ref_gemm_problem *p = job->p;
    for (int64_t group = begin; group < end; group++) {
        int64_t first = group * REF_GEMM_ROW_GROUP;
        int64_t last = first + REF_GEMM_ROW_GROUP < p->m ? first + REF_GEMM_ROW_GROUP : p->m;
        for (int64_t j = 0; j < p->n; j++) {
            const float *b_row = job->b_wide + j * p->k;
            for (int64_t i = first; i < last; i++) {
                double value = gemm_row_dot(p, job->fp8, job->a_wide + i * p->k, b_row, i, j);
                if (job->out_bf16)
                    job->out_bf16[i * p->n + j] = ref_gemm_bf16_from_double(value);
                else
                    job->out[i * p->n + j] = (float)value;
            }
        }
    }
}

/* The whole product into out (f32) or out_bf16, whichever is set. */
static bool gemm_whole(const ref_gemm_problem *p, bool fp8, float *out, uint16_t *out_bf16) {
    if (!p || (!out && !out_bf16) || p->m < 0 || p->n < 0 || p->k < 0 ||
        (p->m > 0 && p->k > 0 && !p->a) || (p->n > 0 && p->k > 0 && !p->b) ||
        (fp8 && (!p->sfa || !p->sfb)))
        return false;
    if (fp8 && (p->sfa_shape.layout == TK_SF_PACKED_UE8M0 ||
                p->sfb_shape.layout == TK_SF_PACKED_UE8M0 || p->sfa_shape.rows != p->m ||
                p->sfa_shape.cols != p->k || p->sfb_shape.rows != p->n ||
                p->sfb_shape.cols != p->k))
        return false;
    gemm_job job = {p, fp8, NULL, NULL, out, out_bf16};
    /* (one element more, so that empty operands still get a buffer) */
    job.a_wide = malloc((size_t)(p->m * p->k + 1) * sizeof(float));
    job.b_wide = malloc((size_t)(p->n * p->k + 1) * sizeof(float));
    bool ok = job.a_wide && job.b_wide;
    if (ok) {
        ref_parallel_for(p->m, 16, widen_rows_a, &job);
        ref_parallel_for(p->n, 16, widen_rows_b, &job);
        int64_t groups = (p->m + REF_GEMM_ROW_GROUP - 1) / REF_GEMM_ROW_GROUP;
        ref_parallel_for(groups, 1, gemm_rows, &job);
    }
    free(job.a_wide);
    free(job.b_wide);
    return ok;
}

bool ref_gemm(const ref_gemm_problem *p, bool fp8, float *out) {
    return out && gemm_whole(p, fp8, out, NULL);
}

bool ref_gemm_bf16_output(const ref_gemm_problem *p, bool fp8, uint16_t *out) {
    return out && gemm_whole(p, fp8, NULL, out);
}

/* Rounding to f32 first and then to bf16 could round twice (a value just
 * above a bf16 halfway point lands on it in f32 and then ties to even,
 * downwards).  Rounding to f32 toward zero and setting the last bit when
 * inexact ("round to odd") keeps the information that the value was above
 * or below, and with 16 bits to spare the following RNE to bf16 is then
 * exactly the RNE of the double; the same holds for f32 subnormals (bf16
 * has the same exponent range) and for overflow (FLT_MAX with its odd bit
 * rounds to infinity, as the double would). */
uint16_t ref_gemm_bf16_from_double(double value) {
    if (isnan(value))
        return ref_bf16_from_f32((float)value);
    float nearest = (float)value;
    if (fabs((double)nearest) > fabs(value))
        nearest = nextafterf(nearest, 0.0f);
    if ((double)nearest != value) {
        uint32_t bits;
        memcpy(&bits, &nearest, sizeof bits);
        bits |= 1u;
        memcpy(&nearest, &bits, sizeof bits);
    }
    return ref_bf16_from_f32(nearest);
}

void ref_gemm_round_bf16(const float *values, int64_t count, uint16_t *out) {
    for (int64_t i = 0; i < count; i++)
        out[i] = ref_bf16_from_f32(values[i]);
}

/* want is f32 values or, when want_bf16 is set, bf16 bits. */
static double relative_error(const uint16_t *got, const float *want, const uint16_t *want_bf16,
                             int64_t rows, int64_t cols, int64_t ld) {
    double error = 0.0, norm = 0.0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            double g = (double)ref_bf16_to_f32(got[r * ld + c]);
            if (!isfinite(g))
                return INFINITY;
            double w = want_bf16 ? (double)ref_bf16_to_f32(want_bf16[r * ld + c])
                                 : (double)want[r * ld + c];
            error += (g - w) * (g - w);
            norm += w * w;
        }
    return norm > 0.0 ? sqrt(error / norm) : sqrt(error);
}

double ref_gemm_relative_error(const uint16_t *got, const float *want, int64_t rows,
                               int64_t cols, int64_t ld) {
    return relative_error(got, want, NULL, rows, cols, ld);
}

double ref_gemm_relative_error_bf16(const uint16_t *got, const uint16_t *want, int64_t rows,
                                    int64_t cols, int64_t ld) {
    return relative_error(got, NULL, want, rows, cols, ld);
}
