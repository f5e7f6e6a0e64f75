/*
 * plan_shared.c -- places shared buffers and picks their bank layout.
 *
 * Every SCOPE_SHARED buffer gets a 128-byte aligned offset in the block's
 * shared array (in ALLOC order; no reuse yet), a row pitch and an XOR
 * swizzle (the formula is in ir.h, struct Buffer; codegen computes
 * addresses from it).  The layout is chosen by simulation rather than by
 * rules: warp 0's accesses (thread_idx 0..31, block vars 0, symbols 4096)
 * are evaluated for every unrolled iteration, a VECTORIZED loop (or a
 * copy loop vectorize will turn into one vector access) counting as one
 * access of lanes*bytes per thread, and each candidate layout is charged
 * the wavefronts the hardware would need (ir_shared_wavefronts).
 *
 * Candidates, in order of preference for ties: the plain layout (rows
 * 16-byte aligned), swizzle_shift 0..5 when a row has at least 128 bytes
 * or the buffer at least 1 KiB, and a pitch padded by 16 bytes.  The
 * transpose's patch reads (V rows of a V x V patch per thread, rows 256
 * bytes apart) are 8-way conflicts in the plain layout; a swizzle that
 * XORs the 16-byte chunk with the row bits makes them conflict-free.
 *
 * The choice and the simulated cost of every access are kept as text in
 * Buffer.plan_note, for --dump-after=plan_shared.
 *
 * Buffers the async units touch have a fixed layout (Buffer.async_kind,
 * set by lower_tma, lower_gemm and pipeline_loops): PLAIN is dense rows,
 * no swizzle, 128-byte aligned (TMA's box layout); SWIZZLE128 is dense
 * 128-byte rows with swizzle_shift 0 (the hardware's 128-byte swizzle:
 * chunk c of row r at c ^ (r % 8)) on a 1024-byte aligned base, the
 * period of that pattern; MBARRIER objects are 8-byte aligned.  The
 * block may use more than 48 KB (the runtime raises the dynamic shared
 * limit), but not more than the 227 KB an sm_90 block can have.
 *
 * requires: KSTATE_THREAD.  guarantees: KSTATE_SHARED.
 */
#include "ir.h"

#include <string.h>

#define SIM_SYMBOL_VALUE 4096   /* representative size of a dimension */
#define SIM_MAX_VARS 256
#define SIM_MAX_RECORDS 4096     /* bounds the simulation's work */
#define SIM_SERIAL_ITERATIONS 4  /* a serial loop repeats its pattern */
#define MAX_SITES 64
#define MAX_SHARED_BYTES (227 * 1024) /* per block on sm_90 */
#define SWIZZLE128_ROW_BYTES 128

/* One warp-wide shared access: per thread the element [row, col] of
 * lane 0 and the bytes it moves. */
typedef struct {
    Buffer *buffer;
    const void *site;
    bool store;
    int bytes;
    bool active[IR_WARP_SIZE];
    int64_t row[IR_WARP_SIZE], col[IR_WARP_SIZE];
} Record;

typedef struct {
    Kernel *k;
    const Var *vars[SIM_MAX_VARS];
    int64_t values[IR_WARP_SIZE][SIM_MAX_VARS];
    int nvars;
    Record *records;
    int nrecords, capacity;
    bool overflow;
} Sim;

/* ------------------------------------------------------------------ */
/* evaluation over the 32 threads of warp 0                            */
/* ------------------------------------------------------------------ */

static bool eval_thread(Sim *s, const Expr *e, int t, int64_t *out)
{
    return ir_eval_int_thread(e, s->vars, s->values[t], s->nvars, t, out);
}

static void bind(Sim *s, const Var *v, const int64_t *values)
{
    if (s->nvars == SIM_MAX_VARS) return;
    s->vars[s->nvars] = v;
    for (int t = 0; t < IR_WARP_SIZE; t++) s->values[t][s->nvars] = values[t];
    s->nvars++;
}

/* Evaluates e for every active thread; false if any cannot be. */
static bool eval_all(Sim *s, const Expr *e, const bool *active, int64_t *out)
{
    for (int t = 0; t < IR_WARP_SIZE; t++) {
        out[t] = 0;
        if (active[t] && !eval_thread(s, e, t, &out[t])) return false;
    }
    return true;
}

static Record *new_record(Sim *s)
{
    if (s->nrecords == SIM_MAX_RECORDS) { s->overflow = true; return NULL; }
    if (s->nrecords == s->capacity) {
        int cap = s->capacity ? s->capacity * 2 : 64;
        Record *n = arena_alloc(s->k->arena, sizeof(Record) * (size_t)cap);
        if (s->nrecords) memcpy(n, s->records, sizeof(Record) * (size_t)s->nrecords);
        s->records = n;
        s->capacity = cap;
    }
    Record *r = &s->records[s->nrecords++];
    memset(r, 0, sizeof *r);
    return r;
}

static void record_access(Sim *s, Buffer *b, Expr **indices, const Expr *pred,
                          bool store, const bool *active, const void *site)
{
    if (b->scope != SCOPE_SHARED || b->rank < 1) return;
    bool live[IR_WARP_SIZE];
    int64_t idx[IR_MAX_RANK][IR_WARP_SIZE], p;
    bool any = false;
    for (int t = 0; t < IR_WARP_SIZE; t++) {
        live[t] = active[t];
        if (live[t] && pred && eval_thread(s, pred, t, &p) && !p) live[t] = false;
        any |= live[t];
    }
    if (!any) return;
    for (int d = 0; d < b->rank; d++)
        if (!eval_all(s, indices[d], live, idx[d])) return; /* data-dependent */
    Record *r = new_record(s);
    if (!r) return;
    r->buffer = b;
    r->site = site;
    r->store = store;
    r->bytes = ir_dtype_bits(b->dtype) >= 8 ? ir_dtype_bits(b->dtype) / 8 : 1;
    for (int t = 0; t < IR_WARP_SIZE; t++) {
        r->active[t] = live[t];
        int64_t row = 0;
        for (int d = 0; d + 1 < b->rank; d++) {
            if (d > 0 && b->shape[d]->kind == EXPR_INT) row *= b->shape[d]->u.int_value;
            row += idx[d][t];
        }
        r->row[t] = row;
        r->col[t] = idx[b->rank - 1][t];
    }
}

static void sim_expr(Sim *s, const Expr *e, const bool *active)
{
    if (!e) return;
    switch (e->kind) {
    case EXPR_LOAD:
        for (int d = 0; d < e->u.load.buffer->rank; d++) sim_expr(s, e->u.load.indices[d], active);
        sim_expr(s, e->u.load.predicate, active);
        record_access(s, e->u.load.buffer, e->u.load.indices, e->u.load.predicate, false,
                      active, e);
        return;
    case EXPR_UNARY: sim_expr(s, e->u.unary.operand, active); return;
    case EXPR_BINARY:
        sim_expr(s, e->u.binary.lhs, active);
        sim_expr(s, e->u.binary.rhs, active);
        return;
    case EXPR_SELECT:
        sim_expr(s, e->u.select.cond, active);
        sim_expr(s, e->u.select.then_value, active);
        sim_expr(s, e->u.select.else_value, active);
        return;
    case EXPR_CAST: sim_expr(s, e->u.cast.value, active); return;
    case EXPR_CALL:
        for (int i = 0; i < e->u.call.nargs; i++) sim_expr(s, e->u.call.args[i], active);
        return;
    default: return;
    }
}

static void sim_stmt(Sim *s, const Stmt *st, const bool *active);

/* Merges the per-lane records of a vector loop: lane l of every thread
 * at column col0 + l of the same row makes one vector access. */
static void merge_lanes(Sim *s, int first, int per_lane, int lanes)
{
    bool vector[SIM_MAX_RECORDS];
    for (int i = 0; i < per_lane; i++) {
        Record *r0 = &s->records[first + i];
        bool contiguous = true;
        for (int l = 1; l < lanes && contiguous; l++) {
            Record *rl = &s->records[first + l * per_lane + i];
            if (rl->site != r0->site || rl->buffer != r0->buffer) contiguous = false;
            for (int t = 0; t < IR_WARP_SIZE && contiguous; t++)
                if (r0->active[t] != rl->active[t] ||
                    (r0->active[t] && (rl->row[t] != r0->row[t] || rl->col[t] != r0->col[t] + l)))
                    contiguous = false;
        }
        vector[i] = contiguous;
        if (contiguous) r0->bytes *= lanes;
    }
    /* compact in place: a vector keeps its lane-0 record, a gather all */
    int out = first;
    for (int l = 0; l < lanes; l++)
        for (int i = 0; i < per_lane; i++) {
            if (vector[i] && l > 0) continue;
            s->records[out++] = s->records[first + l * per_lane + i];
        }
    s->nrecords = out;
}

static void sim_for(Sim *s, const Stmt *st, const bool *active)
{
    int64_t begin[IR_WARP_SIZE], end[IR_WARP_SIZE];
    if (!eval_all(s, st->u.loop.begin, active, begin) || !eval_all(s, st->u.loop.end, active, end))
        return;
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (int t = 0; t < IR_WARP_SIZE; t++)
        if (active[t]) {
            if (begin[t] < lo) lo = begin[t];
            if (end[t] > hi) hi = end[t];
        }
    if (lo >= hi) return;
    int64_t step = st->u.loop.step > 0 ? st->u.loop.step : 1;
    int64_t trips = (hi - lo + step - 1) / step;
    int lanes = ir_loop_vector_lanes(st);
    if (st->u.loop.kind == LOOP_SERIAL && trips > SIM_SERIAL_ITERATIONS)
        trips = SIM_SERIAL_ITERATIONS;
    int saved = s->nvars;
    int first = s->nrecords, per_lane = -1;
    bool uniform_lanes = true;
    for (int64_t i = 0; i < trips && !s->overflow; i++) {
        int64_t value[IR_WARP_SIZE];
        bool live[IR_WARP_SIZE];
        for (int t = 0; t < IR_WARP_SIZE; t++) {
            value[t] = begin[t] + i * step;
            live[t] = active[t] && value[t] < end[t];
        }
        int before = s->nrecords;
        bind(s, st->u.loop.var, value);
        sim_stmt(s, st->u.loop.body, live);
        s->nvars = saved;
        int made = s->nrecords - before;
        if (per_lane < 0) per_lane = made;
        else if (made != per_lane) uniform_lanes = false;
    }
    if (lanes >= 2 && trips == lanes && uniform_lanes && per_lane > 0 && !s->overflow)
        merge_lanes(s, first, per_lane, lanes);
}

static void sim_stmt(Sim *s, const Stmt *st, const bool *active)
{
    if (!st || s->overflow) return;
    int64_t values[IR_WARP_SIZE];
    switch (st->kind) {
    case STMT_SEQ: {
        int saved = s->nvars;
        for (int i = 0; i < st->u.seq.count; i++) sim_stmt(s, st->u.seq.items[i], active);
        s->nvars = saved;
        return;
    }
    case STMT_LET:
        sim_expr(s, st->u.let.value, active);
        if (st->u.let.value && ir_dtype_is_int(st->u.let.var->dtype) &&
            eval_all(s, st->u.let.value, active, values))
            bind(s, st->u.let.var, values);
        return;
    case STMT_ASSIGN:
        sim_expr(s, st->u.assign.value, active);
        /* the var's value is no longer the bound one */
        for (int i = 0; i < s->nvars; i++)
            if (s->vars[i] == st->u.assign.var) s->vars[i] = NULL;
        if (ir_dtype_is_int(st->u.assign.var->dtype) &&
            eval_all(s, st->u.assign.value, active, values))
            bind(s, st->u.assign.var, values);
        return;
    case STMT_STORE:
        for (int d = 0; d < st->u.store.buffer->rank; d++)
            sim_expr(s, st->u.store.indices[d], active);
        sim_expr(s, st->u.store.value, active);
        sim_expr(s, st->u.store.predicate, active);
        record_access(s, st->u.store.buffer, st->u.store.indices, st->u.store.predicate, true,
                      active, st);
        return;
    case STMT_ATOMIC:
        sim_expr(s, st->u.atomic.value, active);
        record_access(s, st->u.atomic.buffer, st->u.atomic.indices, NULL, true, active, st);
        return;
    case STMT_FOR:
        sim_for(s, st, active);
        return;
    case STMT_IF: {
        bool then_live[IR_WARP_SIZE], else_live[IR_WARP_SIZE];
        sim_expr(s, st->u.if_.cond, active);
        for (int t = 0; t < IR_WARP_SIZE; t++) {
            int64_t c;
            bool known = active[t] && eval_thread(s, st->u.if_.cond, t, &c);
            then_live[t] = active[t] && (!known || c);
            else_live[t] = active[t] && (!known || !c);
        }
        sim_stmt(s, st->u.if_.then_body, then_live);
        sim_stmt(s, st->u.if_.else_body, else_live);
        return;
    }
    case STMT_EVAL: sim_expr(s, st->u.eval.value, active); return;
    default: return;
    }
}

/* ------------------------------------------------------------------ */
/* candidates                                                          */
/* ------------------------------------------------------------------ */

typedef struct { int64_t pitch; int swizzle; } Candidate;

/* Wavefronts of one record under a layout. */
static int record_cost(const Record *r, const Buffer *b, Candidate c)
{
    int elem_bits = ir_dtype_bits(b->dtype);
    int64_t offset[IR_WARP_SIZE];
    for (int t = 0; t < IR_WARP_SIZE; t++)
        offset[t] = (r->row[t] * c.pitch + r->col[t]) * elem_bits / 8;
    int piece = 1;
    while (piece * 2 <= r->bytes && piece * 2 <= 16) piece *= 2;
    for (bool aligned = false; !aligned && piece > 1;) {
        aligned = true;
        for (int t = 0; t < IR_WARP_SIZE; t++)
            if (r->active[t] && offset[t] % piece != 0) aligned = false;
        if (!aligned) piece /= 2;
    }
    int total = 0;
    for (int start = 0; start < r->bytes; start += piece) {
        int64_t address[IR_WARP_SIZE];
        for (int t = 0; t < IR_WARP_SIZE; t++)
            address[t] = ir_shared_swizzle(offset[t] + start, c.swizzle);
        total += ir_shared_wavefronts(address, r->active, piece);
    }
    return total;
}

static int layout_cost(const Sim *s, const Buffer *b, Candidate c)
{
    int total = 0;
    for (int i = 0; i < s->nrecords; i++)
        if (s->records[i].buffer == b) total += record_cost(&s->records[i], b, c);
    return total;
}

static int64_t const_extent(const Expr *e)
{
    return e && e->kind == EXPR_INT ? e->u.int_value : -1;
}

/* Chooses pitch and swizzle for b; returns its size in bytes. */
static int64_t plan_buffer(Sim *s, Buffer *b, Diag *diag)
{
    Kernel *k = s->k;
    int bits = ir_dtype_bits(b->dtype);
    int64_t width = const_extent(b->shape[b->rank - 1]), rows = 1;
    for (int d = 0; d + 1 < b->rank; d++) rows *= const_extent(b->shape[d]) > 0 ? const_extent(b->shape[d]) : 1;
    if (width <= 0) {
        diag_error(diag, b->loc, "shared buffer '%s' needs a constant shape", b->name);
        return 0;
    }
    int64_t row_bytes = width * bits / 8;
    if (b->async_kind != SHARED_ASYNC_NONE) {
        b->pitch = width;
        b->swizzle_shift = -1;
        if (b->async_kind == SHARED_ASYNC_SWIZZLE128) {
            if (row_bytes != SWIZZLE128_ROW_BYTES)
                diag_error(diag, b->loc, "shared buffer '%s' needs the 128-byte "
                           "swizzle, but its rows are %lld bytes, not 128",
                           b->name, (long long)row_bytes);
            b->swizzle_shift = 0;
        }
        b->plan_note = arena_printf(k->arena, "plan_shared: pitch %lld swizzle "
                                    "%d; fixed by the async units (%s)",
                                    (long long)b->pitch, b->swizzle_shift,
                                    b->async_kind == SHARED_ASYNC_SWIZZLE128 ? "swizzle128"
                                    : b->async_kind == SHARED_ASYNC_PLAIN ? "plain"
                                                                          : "mbarrier");
        return rows * width * bits / 8;
    }
    int64_t pitch = width;
    if (row_bytes >= 16 && row_bytes % 16 != 0 && bits >= 8)
        pitch = (row_bytes + 15) / 16 * 16 * 8 / bits;
    int64_t pitch_bytes = pitch * bits / 8;
    Candidate cands[8];
    int n = 0;
    cands[n++] = (Candidate){ pitch, -1 };
    if ((row_bytes >= 128 || rows * pitch_bytes >= 1024) && pitch_bytes % 16 == 0)
        for (int shift = 0; shift <= 5; shift++) cands[n++] = (Candidate){ pitch, shift };
    if (rows > 1 && bits >= 8 && (16 * 8) % bits == 0)
        cands[n++] = (Candidate){ pitch + 16 * 8 / bits, -1 };
    int cost[8], best = 0;
    for (int i = 0; i < n; i++) {
        cost[i] = layout_cost(s, b, cands[i]);
        if (cost[i] < cost[best]) best = i;
    }
    b->pitch = cands[best].pitch;
    b->swizzle_shift = cands[best].swizzle;

    /* the note: candidates, then the chosen layout's cost per access */
    char *note = arena_printf(k->arena, "plan_shared: pitch %lld swizzle %d;",
                              (long long)b->pitch, b->swizzle_shift);
    for (int i = 0; i < n; i++)
        note = arena_printf(k->arena, "%s %s%s=%d", note,
                            cands[i].swizzle >= 0 ? "swizzle" : cands[i].pitch != pitch ? "pad" : "plain",
                            cands[i].swizzle >= 0 ? arena_printf(k->arena, "%d", cands[i].swizzle) : "",
                            cost[i]);
    const void *sites[MAX_SITES];
    int nsites = 0;
    for (int i = 0; i < s->nrecords; i++) {
        const Record *r = &s->records[i];
        if (r->buffer != b) continue;
        int site = 0;
        while (site < nsites && sites[site] != r->site) site++;
        if (site == nsites && nsites < MAX_SITES) sites[nsites++] = r->site;
    }
    for (int i = 0; i < nsites; i++) {
        int wavefronts = 0, count = 0, bytes = 0;
        bool store = false;
        for (int j = 0; j < s->nrecords; j++) {
            const Record *r = &s->records[j];
            if (r->buffer != b || r->site != sites[i]) continue;
            wavefronts += record_cost(r, b, cands[best]);
            count++;
            bytes = r->bytes;
            store = r->store;
        }
        note = arena_printf(k->arena, "%s; #%d %s %dx%dB: %d wavefronts", note, i + 1,
                            store ? "store" : "load", count, bytes, wavefronts);
    }
    b->plan_note = note;
    return rows * b->pitch * bits / 8;
}

static void plan_allocs(Sim *s, Stmt *st, int64_t *offset, Diag *diag)
{
    if (!st) return;
    switch (st->kind) {
    case STMT_SEQ:
        for (int i = 0; i < st->u.seq.count; i++) plan_allocs(s, st->u.seq.items[i], offset, diag);
        return;
    case STMT_ALLOC: {
        Buffer *b = st->u.alloc.buffer;
        if (b->scope != SCOPE_SHARED) return;
        int64_t align = b->async_kind == SHARED_ASYNC_SWIZZLE128 ? 1024
                        : b->async_kind == SHARED_ASYNC_MBARRIER ? 8 : 128;
        *offset = (*offset + align - 1) / align * align;
        b->shared_offset = *offset;
        *offset += plan_buffer(s, b, diag);
        return;
    }
    case STMT_FOR: plan_allocs(s, st->u.loop.body, offset, diag); return;
    case STMT_IF:
        plan_allocs(s, st->u.if_.then_body, offset, diag);
        plan_allocs(s, st->u.if_.else_body, offset, diag);
        return;
    default: return;
    }
}

bool pass_plan_shared(Kernel *k, Diag *diag)
{
    Sim *s = arena_alloc(k->arena, sizeof(Sim));
    s->k = k;
    int64_t values[IR_WARP_SIZE];
    for (int i = 0; i < k->nsymbols; i++) {
        for (int t = 0; t < IR_WARP_SIZE; t++) values[t] = SIM_SYMBOL_VALUE;
        bind(s, k->symbols[i], values);
    }
    for (int i = 0; i < k->nparams; i++)
        if (k->params[i].kind == PARAM_SCALAR && ir_dtype_is_int(k->params[i].var->dtype)) {
            for (int t = 0; t < IR_WARP_SIZE; t++) values[t] = SIM_SYMBOL_VALUE;
            bind(s, k->params[i].var, values);
        }
    for (int d = 0; d < 3; d++)
        if (k->block_vars[d]) {
            memset(values, 0, sizeof values);
            bind(s, k->block_vars[d], values);
        }
    bool active[IR_WARP_SIZE];
    for (int t = 0; t < IR_WARP_SIZE; t++) active[t] = t < k->threads || k->threads <= 0;
    sim_stmt(s, k->body, active);
    int errors = diag->errors;
    int64_t offset = 0;
    plan_allocs(s, k->body, &offset, diag);
    k->shared_bytes = offset;
    if (offset > MAX_SHARED_BYTES)
        diag_error(diag, k->loc, "kernel '%s' needs %lld bytes of shared memory; "
                   "a block can have at most %d (227 KB)", k->name,
                   (long long)offset, MAX_SHARED_BYTES);
    k->state |= KSTATE_SHARED;
    return diag->errors == errors;
}
