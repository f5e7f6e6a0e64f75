/*
 * channel_cast.c -- reference of the per-channel casts (channel_cast.h,
 * tilekernels-spec.md 6.6-6.8).
 *
 * Work is split over blocks of num_per_tokens output rows: a block owns
 * its output rows (or, transposed, its columns of every output row) and
 * its row of scales, so the workers write disjoint memory.  Each block
 * makes two passes over its rows, as the specification reads: first the
 * per-column |max|, then the quantisation.  The value of an element is
 * recomputed in the second pass with the same single rounding as in the
 * first, so both passes see identical f32 values.
 */
#pragma GCC optimize("fp-contract=off")

#include <math.h>
#include <stdlib.h>

#include "channel_cast.h"

typedef struct channel_job {
    const ref_channel_input *in;
    const int32_t *pos_to_token;
    int64_t out_rows;
    int num_per_tokens;
    bool round_sf, transposed;
    uint8_t *out;
    float *out_sf;
    float decoded[256]; /* every e4m3 code, for quantised input */
} channel_job;

/* Input row of output row r, or -1 for a zero row. */
static int64_t source_row(const channel_job *job, int64_t r) {
    if (job->pos_to_token == NULL)
        return r;
    int64_t source = job->pos_to_token[r];
    return source >= 0 && source < job->in->rows ? source : -1;
}

/* The real value of input element (source, c), one rounding at most. */
static float input_value(const channel_job *job, int64_t source, int64_t c) {
    const ref_channel_input *in = job->in;
    if (source < 0)
        return 0.0f;
    int64_t index = source * in->row_stride + c;
    switch (in->dtype) {
    case TK_F32:
        return ((const float *)in->x)[index];
    case TK_BF16:
        return ref_bf16_to_f32(((const uint16_t *)in->x)[index]);
    default: { /* TK_E4M3: data times the row's scale of its 128 columns */
        float scale = in->x_sf[source * in->x_sf_strides[0] +
                               c / REF_CHANNEL_INPUT_GROUP * in->x_sf_strides[1]];
        return job->decoded[((const uint8_t *)in->x)[index]] * scale;
    }
    }
}

static void cast_blocks(void *context, int64_t begin, int64_t end) {
    const channel_job *job = context;
    int64_t cols = job->in->cols;
    float *amax = malloc((size_t)(cols > 0 ? cols : 1) * sizeof *amax);
    float *inv = malloc((size_t)(cols > 0 ? cols : 1) * sizeof *inv);
    if (amax == NULL || inv == NULL)
        abort(); /* a test helper: nothing sensible to return */
    for (int64_t block = begin; block < end; block++) {
        int64_t r0 = block * job->num_per_tokens;
        int64_t r1 = r0 + job->num_per_tokens < job->out_rows ? r0 + job->num_per_tokens
                                                                : job->out_rows;
        for (int64_t c = 0; c < cols; c++)
            amax[c] = 0.0f;
        for (int64_t r = r0; r < r1; r++) {
            int64_t source = source_row(job, r);
            for (int64_t c = 0; c < cols; c++)
                amax[c] = fmaxf(amax[c], fabsf(input_value(job, source, c)));
        }
        for (int64_t c = 0; c < cols; c++) {
            ref_scale scale = ref_sf_and_inv(amax[c], job->round_sf);
            job->out_sf[block * cols + c] = scale.sf;
            inv[c] = scale.inv;
        }
        for (int64_t r = r0; r < r1; r++) {
            int64_t source = source_row(job, r);
            for (int64_t c = 0; c < cols; c++) {
                uint8_t code = ref_e4m3_from_f32(input_value(job, source, c) * inv[c]);
                if (job->transposed)
                    job->out[c * job->out_rows + r] = code;
                else
                    job->out[r * cols + c] = code;
            }
        }
    }
    free(amax);
    free(inv);
}

bool ref_per_channel_cast(const ref_channel_input *in,
                          const int32_t *pos_to_token, int64_t out_rows,
                          int num_per_tokens, bool round_sf, bool transposed,
                          uint8_t *out, float *out_sf) {
    if (in == NULL || in->rows < 0 || in->cols < 0 || out_rows < 0 || num_per_tokens < 1)
        return false;
    if (in->dtype != TK_F32 && in->dtype != TK_BF16 && in->dtype != TK_E4M3)
        return false;
    /* quantised input comes with its scales, float input without */
    if ((in->dtype == TK_E4M3) != (in->x_sf != NULL))
        return false;
    if (in->rows > 1 && in->row_stride < in->cols)
        return false;
    if (pos_to_token == NULL && out_rows != in->rows)
        return false;
    channel_job *job = malloc(sizeof *job);
    if (job == NULL)
        return false;
    job->in = in;
    job->pos_to_token = pos_to_token;
    job->out_rows = out_rows;
    job->num_per_tokens = num_per_tokens;
    job->round_sf = round_sf;
    job->transposed = transposed;
    job->out = out;
    job->out_sf = out_sf;
    for (int code = 0; code < 256; code++)
        job->decoded[code] = ref_e4m3_to_f32((uint8_t)code);
    int64_t blocks = (out_rows + num_per_tokens - 1) / num_per_tokens;
    int64_t block_elements = (int64_t)num_per_tokens * (in->cols > 0 ? in->cols : 1);
    ref_parallel_for(blocks, 1 + (1 << 16) / block_elements, cast_blocks, job);
    free(job);
    return true;
}

ref_channel_input ref_channel_float_input(const void *x, tk_dtype dtype,
                                          int64_t rows, int64_t cols,
                                          int64_t row_stride) {
    ref_channel_input in = {x, dtype, rows, cols, row_stride, NULL, {0, 0}};
    return in;
}

int32_t *ref_channel_moe_positions(int64_t send_tokens, int num_topk,
                                   int local_experts, int num_ranks,
                                   int alignment, uint64_t seed,
                                   int64_t *num_tokens, int64_t *num_rows) {
    int64_t total_experts = (int64_t)local_experts * num_ranks;
    if (send_tokens < 0 || num_topk < 1 || local_experts < 1 || num_ranks < 1 ||
        alignment < 1 || num_topk > total_experts || num_topk > 64)
        return NULL;
    int64_t senders = send_tokens * num_ranks;
    /* local picks of the received tokens, in (token, k) order */
    int64_t capacity = 1024, entries = 0, received = 0;
    int32_t *entry_token = malloc((size_t)capacity * sizeof *entry_token);
    int32_t *entry_expert = malloc((size_t)capacity * sizeof *entry_expert);
    int64_t *count = calloc((size_t)local_experts, sizeof *count);
    bool ok = entry_token && entry_expert && count;
    ref_rng rng = ref_rng_seed(seed, 0x6d6f65); /* "moe" */
    for (int64_t s = 0; ok && s < senders; s++) {
        int64_t picked[64];
        int local = 0;
        ref_rng_distinct(&rng, (uint64_t)total_experts, num_topk, picked); /* distinct experts */
        for (int k = 0; k < num_topk; k++) {
            int64_t expert = picked[k];
            if (expert >= local_experts)
                continue;
            if (entries == capacity) {
                capacity *= 2;
                int32_t *t = realloc(entry_token, (size_t)capacity * sizeof *t);
                int32_t *e = realloc(entry_expert, (size_t)capacity * sizeof *e);
                entry_token = t ? t : entry_token;
                entry_expert = e ? e : entry_expert;
                if (!t || !e) {
                    ok = false;
                    break;
                }
            }
            entry_token[entries] = (int32_t)received;
            entry_expert[entries] = (int32_t)expert;
            entries++;
            count[expert]++;
            local++;
        }
        received += local > 0;
    }
    int32_t *positions = NULL;
    int64_t rows = 0;
    int64_t *next = ok ? malloc((size_t)local_experts * sizeof *next) : NULL;
    if (next) {
        for (int e = 0; e < local_experts; e++) {
            next[e] = rows; /* start of expert e's range */
            rows += (count[e] + alignment - 1) / alignment * alignment;
        }
        positions = malloc((size_t)(rows > 0 ? rows : 1) * sizeof *positions);
    }
    if (positions) {
        for (int64_t p = 0; p < rows; p++)
            positions[p] = -1;
        for (int64_t i = 0; i < entries; i++)
            positions[next[entry_expert[i]]++] = entry_token[i];
        *num_tokens = received;
        *num_rows = rows;
    }
    free(next);
    free(entry_token);
    free(entry_expert);
    free(count);
    return positions;
}
