/*
 * lower_parallel.c -- PARALLEL loops and REDUCE become per-thread code;
 * fragments become per-thread LOCAL arrays.
 *
 * infer_layouts gave every PARALLEL loop and fragment a Layout (ir.h): the
 * tile, flattened row-major, is cut into C chunks of V elements, chunk c
 * going to thread c % T in slot c / T.  A thread therefore runs
 *
 *   for s in unroll(0, S) {                   // dropped when S == 1
 *     let c = s * T + thread_idx;             // the chunk
 *     if (c < C) {                            // dropped when C % T == 0
 *       for v in vectorized(0, V) { body }    // dropped when V == 1
 *     }
 *   }
 *
 * with the loop vars rebuilt from (c, v): the innermost is
 * (c % (E / V)) * V + v, the outer ones unflatten c / (E / V) row-major.
 * Only constant DIV/MOD appear, so pass_simplify turns them into shifts
 * and masks when the extents are powers of two.  The thread's elements of
 * a fragment F live at F[s * V + v]; a reduced fragment holds one element
 * per chunk, at [s].
 *
 * A loop with the MMA layout (docs/hopper.md section 4; M x N over W
 * warpgroups, S = M / (64 W) m-slots) walks the thread's elements in local
 * order, so that the j%2 pairs end up in one 2-lane vectorized loop:
 *
 *   for ms in unroll(0, S) {                  // dropped when S == 1
 *     for g in unroll(0, N / 8) {             // the 8-column group j/8
 *       for h in unroll(0, 2) {               // the row half (r%16)/8
 *         for v in vectorized(0, 2) { body }  // j%2
 *   }}}
 *
 * with i = 64 W ms + 16 (thread_idx / 32) + 8 h + (thread_idx % 32) / 4,
 * j = 8 g + 2 (thread_idx % 4) + v, and fragment element local index
 * ms (N/2) + 4 g + 2 h + v.  (16 (thread_idx / 32) is the section's
 * 64 wg + 16 (r / 16) with both thread terms folded.)
 *
 * A loop over a reduced layout iterates the parent's chunks with the last
 * dimension dropped: the `group` chunks of one result are replicas, so
 * only replica 0 (c % group == 0) may store to shared or global memory.
 *
 * REDUCE folds each slot's V elements in registers, then combines the
 * group's partial results with an XOR butterfly of shuffles.  The
 * shuffles run on every lane (no guard), which is why invalid chunks must
 * hold a harmless value: zero for sum and absmax (LOCAL arrays start
 * zero-filled), the identity (by a select) for max and min.
 *
 * requires: KSTATE_LAYOUTS.  guarantees: KSTATE_THREAD.  Block-level
 * FOR/IF/LET are left alone.
 */
#include <math.h>
#include <stdint.h>

#include "tile_util.h"

typedef struct {
    Kernel *k;
    Diag *diag;
} LowerCtx;

/* How the body of one lowered loop finds its thread's data. */
typedef struct {
    Kernel *k;
    Var *vars[IR_MAX_RANK];    /* the PARALLEL loop vars ... */
    Expr *values[IR_MAX_RANK]; /* ... and what replaces them */
    int nvars;
    Expr *slot;                /* s, or 0 when S == 1 */
    Expr *lane;                /* v, or NULL when V == 1 */
    int vec;
    Expr *chunk;               /* c */
    int group;                 /* reduced loop: replicas per result, else 1 */
    Expr *local;               /* MMA loop: the element's local index */
} Rewrite;

/* ---- the slot / chunk frame -------------------------------------------- */

typedef struct {
    Var *slot_var;  /* NULL when S == 1 */
    Expr *slot;
    Var *chunk_var;
    Stmt *let_chunk;
} Frame;

static Expr *thread_idx(Kernel *k)
{
    return ir_call(k, INTR_THREAD_IDX, PASS_INDEX_TYPE, NULL, 0);
}

/* The slot: a FOR var when the layout has several slots, else 0. */
static void open_frame(Kernel *k, const Layout *l, Frame *f)
{
    f->slot_var = NULL;
    f->slot = pass_index(k, 0);
    if (l->slots > 1) {
        f->slot_var = ir_new_var(k, "s", PASS_INDEX_TYPE, VAR_LOOP);
        f->slot = ir_var(k, f->slot_var);
    }
    f->chunk_var = NULL;
    f->let_chunk = NULL;
}

/* let c = s * T + thread_idx */
static void frame_chunk(Kernel *k, const Layout *l, Loc loc, Frame *f)
{
    f->chunk_var = ir_new_var(k, "c", PASS_INDEX_TYPE, VAR_LET);
    f->let_chunk = ir_new_stmt(k, STMT_LET, loc);
    f->let_chunk->u.let.var = f->chunk_var;
    f->let_chunk->u.let.value =
        pass_add(k, pass_mul(k, ir_copy_expr(k, f->slot),
                             pass_index(k, l->threads)),
                 thread_idx(k));
}

static Stmt *new_for(Kernel *k, Loc loc, Var *var, int64_t end,
                     LoopKind kind, Stmt *body)
{
    Stmt *loop = ir_new_stmt(k, STMT_FOR, loc);
    loop->u.loop.var = var;
    loop->u.loop.begin = pass_index(k, 0);
    loop->u.loop.end = pass_index(k, end);
    loop->u.loop.step = 1;
    loop->u.loop.kind = kind;
    loop->u.loop.body = body;
    return loop;
}

/* SEQ { a; b } with b's statements spliced in when b is a SEQ. */
static Stmt *new_seq2(Kernel *k, Stmt *a, Stmt *b)
{
    Stmt *seq = ir_seq(k, &a, 1);
    if (b->kind != STMT_SEQ) {
        ir_seq_append(k, seq, b);
        return seq;
    }
    for (int i = 0; i < b->u.seq.count; i++)
        ir_seq_append(k, seq, b->u.seq.items[i]);
    return seq;
}

/* let c = ...; if (c < C) { body }  inside the slot loop. */
static Stmt *close_frame(Kernel *k, const Layout *l, Loc loc, Frame *f,
                         Stmt *body)
{
    int64_t chunks = pass_layout_chunks(l);
    if (chunks % l->threads != 0) {
        Stmt *guard = ir_new_stmt(k, STMT_IF, loc);
        guard->u.if_.cond = ir_binary(k, BIN_LT, ir_var(k, f->chunk_var),
                                      pass_index(k, chunks));
        guard->u.if_.then_body = body;
        body = guard;
    }
    Stmt *seq = new_seq2(k, f->let_chunk, body);
    if (!f->slot_var)
        return seq;
    return new_for(k, loc, f->slot_var, l->slots, LOOP_UNROLL, seq);
}

/* Coordinate d (not the last) of the element tile whose chunk is c:
 * c / (chunks per row * product of the extents between d and the last),
 * modulo extent[d] except for the outermost, which c < C bounds. */
static Expr *outer_coord(Kernel *k, Expr *chunk, const int64_t *extent,
                         int rank, int vec, int d)
{
    int64_t divisor = extent[rank - 1] / vec;
    for (int j = d + 1; j < rank - 1; j++)
        divisor *= extent[j];
    Expr *value = pass_div(k, ir_copy_expr(k, chunk), pass_index(k, divisor));
    if (d > 0)
        value = pass_mod(k, value, pass_index(k, extent[d]));
    return value;
}

/* ---- rewriting a loop body --------------------------------------------- */

static Expr **local_index(Rewrite *rw, const Buffer *b)
{
    Kernel *k = rw->k;
    /* IR_MAX_RANK slots: the buffer keeps its tile rank until the end of
     * the pass, and walkers read that many entries */
    Expr **idx = arena_alloc(k->arena, sizeof(Expr *) * IR_MAX_RANK);
    if (rw->local) {
        idx[0] = ir_copy_expr(k, rw->local);
        return idx;
    }
    Expr *slot = ir_copy_expr(k, rw->slot);
    if (b->layout->reduced || !rw->lane)
        idx[0] = slot;
    else
        idx[0] = pass_add(k, pass_mul(k, slot, pass_index(k, rw->vec)),
                          ir_copy_expr(k, rw->lane));
    return idx;
}

static Expr *rewrite_expr(void *opaque, Expr *e)
{
    Rewrite *rw = opaque;
    if (e->kind == EXPR_VAR) {
        for (int i = 0; i < rw->nvars; i++)
            if (e->u.var == rw->vars[i])
                return ir_copy_expr(rw->k, rw->values[i]);
    } else if (e->kind == EXPR_LOAD &&
               e->u.load.buffer->scope == SCOPE_FRAGMENT) {
        e->u.load.indices = local_index(rw, e->u.load.buffer);
    }
    return e;
}

/* c % group == 0: this thread holds replica 0 of its result. */
static Expr *replica_zero(Rewrite *rw)
{
    Kernel *k = rw->k;
    return ir_binary(k, BIN_EQ,
                     pass_mod(k, ir_copy_expr(k, rw->chunk),
                              pass_index(k, rw->group)),
                     pass_index(k, 0));
}

static bool is_memory(const Buffer *b)
{
    return b->scope == SCOPE_GLOBAL || b->scope == SCOPE_SHARED;
}

static Stmt *rewrite_stmt(Rewrite *rw, Stmt *s)
{
    if (!s)
        return NULL;
    pass_rewrite_stmt_exprs(s, false, rewrite_expr, rw);
    switch (s->kind) {
    case STMT_SEQ:
        for (int i = 0; i < s->u.seq.count; i++)
            s->u.seq.items[i] = rewrite_stmt(rw, s->u.seq.items[i]);
        break;
    case STMT_FOR:
        s->u.loop.body = rewrite_stmt(rw, s->u.loop.body);
        break;
    case STMT_IF:
        s->u.if_.then_body = rewrite_stmt(rw, s->u.if_.then_body);
        s->u.if_.else_body = rewrite_stmt(rw, s->u.if_.else_body);
        break;
    case STMT_STORE:
        if (s->u.store.buffer->scope == SCOPE_FRAGMENT)
            s->u.store.indices = local_index(rw, s->u.store.buffer);
        else if (rw->group > 1 && is_memory(s->u.store.buffer))
            s->u.store.predicate =
                pass_and(rw->k, s->u.store.predicate, replica_zero(rw));
        break;
    case STMT_ATOMIC:
        if (rw->group > 1 && is_memory(s->u.atomic.buffer)) {
            Stmt *guard = ir_new_stmt(rw->k, STMT_IF, s->loc);
            guard->u.if_.cond = replica_zero(rw);
            guard->u.if_.then_body = s;
            return guard;
        }
        break;
    case STMT_PARALLEL:
    case STMT_COPY:
    case STMT_FILL:
    case STMT_REDUCE:
        ice("%s left inside a parallel loop", ir_stmt_name(s->kind));
    default:
        break;
    }
    return s;
}

/* ---- PARALLEL ---------------------------------------------------------- */

static Stmt *lower_tile_loop(LowerCtx *ctx, Stmt *loop, const Layout *l)
{
    Kernel *k = ctx->k;
    int rank = loop->u.parallel.rank;
    if (rank != l->rank)
        ice("parallel loop of rank %d has a layout of rank %d", rank,
            l->rank);
    Frame frame;
    open_frame(k, l, &frame);
    frame_chunk(k, l, loop->loc, &frame);
    Rewrite rw = {.k = k, .nvars = rank, .slot = frame.slot, .vec = l->vec,
                  .chunk = ir_var(k, frame.chunk_var), .group = 1};
    Var *lane_var = NULL;
    if (l->vec > 1) {
        lane_var = ir_new_var(k, "v", PASS_INDEX_TYPE, VAR_LOOP);
        rw.lane = ir_var(k, lane_var);
    }
    int64_t per_row = l->extent[rank - 1] / l->vec;
    for (int d = 0; d < rank; d++) {
        rw.vars[d] = loop->u.parallel.vars[d];
        if (d < rank - 1) {
            rw.values[d] = outer_coord(k, rw.chunk, l->extent, rank, l->vec, d);
            continue;
        }
        Expr *inner = ir_copy_expr(k, rw.chunk);
        if (rank > 1)
            inner = pass_mod(k, inner, pass_index(k, per_row));
        if (rw.lane)
            inner = pass_add(k, pass_mul(k, inner, pass_index(k, l->vec)),
                             ir_copy_expr(k, rw.lane));
        rw.values[d] = inner;
    }
    Stmt *body = rewrite_stmt(&rw, loop->u.parallel.body);
    if (lane_var)
        body = new_for(k, loop->loc, lane_var, l->vec, LOOP_VECTORIZED, body);
    return close_frame(k, l, loop->loc, &frame, body);
}

static Stmt *lower_reduced_loop(LowerCtx *ctx, Stmt *loop, const Layout *l)
{
    Kernel *k = ctx->k;
    int rank = loop->u.parallel.rank;
    if (rank != l->rank)
        ice("parallel loop of rank %d has a layout of rank %d", rank,
            l->rank);
    Frame frame;
    open_frame(k, l, &frame);
    frame_chunk(k, l, loop->loc, &frame);
    Rewrite rw = {.k = k, .nvars = rank, .slot = frame.slot, .vec = l->vec,
                  .chunk = ir_var(k, frame.chunk_var), .group = l->group};
    for (int d = 0; d < rank; d++) {
        rw.vars[d] = loop->u.parallel.vars[d];
        rw.values[d] = outer_coord(k, rw.chunk, l->parent_extent,
                                   l->parent_rank, l->vec, d);
    }
    Stmt *body = rewrite_stmt(&rw, loop->u.parallel.body);
    return close_frame(k, l, loop->loc, &frame, body);
}

/* A fresh loop var of the MMA walk, and an expression reading it. */
static Expr *mma_loop_var(Kernel *k, const char *name, Var **var)
{
    *var = ir_new_var(k, name, PASS_INDEX_TYPE, VAR_LOOP);
    return ir_var(k, *var);
}

static Stmt *lower_mma_loop(LowerCtx *ctx, Stmt *loop, const Layout *l)
{
    Kernel *k = ctx->k;
    Loc loc = loop->loc;
    if (loop->u.parallel.rank != 2 || l->rank != 2)
        ice("parallel loop of rank %d has an MMA layout",
            loop->u.parallel.rank);
    int64_t n = l->extent[1];
    Var *slot_var = NULL, *group_var, *half_var, *lane_var;
    Expr *slot = l->slots > 1 ? mma_loop_var(k, "ms", &slot_var)
                              : pass_index(k, 0);
    Expr *group = mma_loop_var(k, "g", &group_var);
    Expr *half = mma_loop_var(k, "h", &half_var);
    Expr *lane = mma_loop_var(k, "v", &lane_var);

    /* i = 64 W ms + 16 (tid / 32) + 8 h + (tid % 32) / 4 */
    Expr *row = pass_mul(k, ir_copy_expr(k, slot),
                         pass_index(k, 64 * (int64_t)l->warpgroups));
    row = pass_add(k, row, pass_mul(k, pass_div(k, thread_idx(k),
                                                pass_index(k, 32)),
                                    pass_index(k, 16)));
    row = pass_add(k, row, pass_mul(k, ir_copy_expr(k, half),
                                    pass_index(k, 8)));
    row = pass_add(k, row, pass_div(k, pass_mod(k, thread_idx(k),
                                                pass_index(k, 32)),
                                    pass_index(k, 4)));
    /* j = 8 g + 2 (tid % 4) + v */
    Expr *col = pass_mul(k, ir_copy_expr(k, group), pass_index(k, 8));
    col = pass_add(k, col, pass_mul(k, pass_mod(k, thread_idx(k),
                                                pass_index(k, 4)),
                                    pass_index(k, 2)));
    col = pass_add(k, col, ir_copy_expr(k, lane));
    /* local = ms (N/2) + 4 g + 2 h + v */
    Expr *local = pass_mul(k, ir_copy_expr(k, slot), pass_index(k, n / 2));
    local = pass_add(k, local, pass_mul(k, ir_copy_expr(k, group),
                                        pass_index(k, 4)));
    local = pass_add(k, local, pass_mul(k, ir_copy_expr(k, half),
                                        pass_index(k, 2)));
    local = pass_add(k, local, ir_copy_expr(k, lane));

    Rewrite rw = {.k = k, .nvars = 2, .slot = slot, .lane = lane, .vec = 2,
                  .chunk = NULL, .group = 1, .local = local};
    rw.vars[0] = loop->u.parallel.vars[0];
    rw.vars[1] = loop->u.parallel.vars[1];
    rw.values[0] = row;
    rw.values[1] = col;
    Stmt *body = rewrite_stmt(&rw, loop->u.parallel.body);
    body = new_for(k, loc, lane_var, 2, LOOP_VECTORIZED, body);
    body = new_for(k, loc, half_var, 2, LOOP_UNROLL, body);
    body = new_for(k, loc, group_var, n / 8, LOOP_UNROLL, body);
    if (slot_var)
        body = new_for(k, loc, slot_var, l->slots, LOOP_UNROLL, body);
    return body;
}

/* ---- REDUCE ------------------------------------------------------------ */

static Expr *reduce_identity(Kernel *k, ReduceOp op, DType t)
{
    bool is_float = ir_dtype_is_float(t);
    if (op == REDUCE_SUM || op == REDUCE_ABSMAX)
        return is_float ? ir_float(k, t, 0.0) : ir_int(k, t, 0);
    bool is_max = op == REDUCE_MAX;
    if (is_float)
        return ir_float(k, t, is_max ? -INFINITY : INFINITY);
    int bits = ir_dtype_bits(t);
    if (ir_dtype_class(t) == DCLASS_SINT) {
        int64_t top = bits >= 64 ? INT64_MAX : (INT64_C(1) << (bits - 1)) - 1;
        return ir_int(k, t, is_max ? -top - 1 : top);
    }
    /* unsigned and bool: 0 .. all ones (kept as the bit pattern) */
    int64_t ones = bits >= 64 ? -1 : (int64_t)((UINT64_C(1) << bits) - 1);
    return ir_int(k, t, is_max ? 0 : ones);
}

static Expr *reduce_combine(Kernel *k, ReduceOp op, Expr *acc, Expr *value)
{
    return ir_binary(k, op == REDUCE_SUM ? BIN_ADD
                        : op == REDUCE_MIN ? BIN_MIN : BIN_MAX,
                     acc, value);
}

static Stmt *new_assign(Kernel *k, Loc loc, Var *var, Expr *value)
{
    Stmt *s = ir_new_stmt(k, STMT_ASSIGN, loc);
    s->u.assign.var = var;
    s->u.assign.value = value;
    return s;
}

static Stmt *lower_reduce(LowerCtx *ctx, Stmt *s)
{
    Kernel *k = ctx->k;
    Loc loc = s->loc;
    ReduceOp op = s->u.reduce.op;
    Buffer *src = s->u.reduce.src, *dst = s->u.reduce.dst;
    const Layout *l = src->layout, *r = dst->layout;
    if (!l || !r || l->reduced || !r->reduced)
        ice("reduce of '%s' into '%s' without tile/reduced layouts",
            src->name, dst->name);
    DType t = dst->dtype;
    Frame frame;
    open_frame(k, l, &frame);
    Rewrite rw = {.k = k, .slot = frame.slot, .vec = l->vec};
    Var *lane_var = NULL;
    if (l->vec > 1) {
        lane_var = ir_new_var(k, "v", PASS_INDEX_TYPE, VAR_LOOP);
        rw.lane = ir_var(k, lane_var);
    }
    Var *acc = ir_new_var(k, "acc", t, VAR_MUTABLE);
    PtrVec items = {0};

    /* acc = identity, or the running value when the reduce accumulates */
    Stmt *init = ir_new_stmt(k, STMT_LET, loc);
    init->u.let.var = acc;
    init->u.let.value = s->u.reduce.clear
                            ? reduce_identity(k, op, t)
                            : ir_load(k, dst, local_index(&rw, dst), NULL);
    vec_push(k->arena, &items, init);

    /* the thread's own V elements, in registers */
    Expr *element = pass_convert(
        k, ir_load(k, src, local_index(&rw, src), NULL), t);
    if (op == REDUCE_ABSMAX)
        element = ir_unary(k, UN_ABS, element);
    Stmt *fold = new_assign(k, loc, acc,
                            reduce_combine(k, op, ir_var(k, acc), element));
    if (lane_var)
        fold = new_for(k, loc, lane_var, l->vec, LOOP_UNROLL, fold);
    vec_push(k->arena, &items, fold);

    /* Invalid chunks (c >= C) take part in the butterfly.  C is a multiple
     * of the group, so they form whole groups of their own and never mix
     * with valid ones; the identity just keeps their unread results
     * well-defined for max and min, as zeros already are for sum/absmax. */
    int64_t chunks = pass_layout_chunks(l);
    if ((op == REDUCE_MAX || op == REDUCE_MIN) && chunks % l->threads != 0) {
        frame_chunk(k, l, loc, &frame);
        vec_push(k->arena, &items, frame.let_chunk);
        Expr *valid = ir_binary(k, BIN_LT, ir_var(k, frame.chunk_var),
                                pass_index(k, chunks));
        vec_push(k->arena, &items,
                 new_assign(k, loc, acc,
                            ir_select(k, valid, ir_var(k, acc),
                                      reduce_identity(k, op, t))));
    }

    /* XOR butterfly over the group's consecutive lanes */
    for (int offset = r->group / 2; offset >= 1; offset /= 2) {
        Expr *args[2] = {ir_var(k, acc), pass_index(k, offset)};
        Expr **argv = arena_alloc(k->arena, sizeof args);
        argv[0] = args[0];
        argv[1] = args[1];
        Expr *partner = ir_call(k, INTR_SHFL_XOR, t, argv, 2);
        vec_push(k->arena, &items,
                 new_assign(k, loc, acc,
                            reduce_combine(k, op, ir_var(k, acc), partner)));
    }

    Stmt *store = ir_new_stmt(k, STMT_STORE, loc);
    store->u.store.buffer = dst;
    store->u.store.indices = local_index(&rw, dst);
    store->u.store.value = ir_var(k, acc);
    vec_push(k->arena, &items, store);

    Stmt *body = ir_seq(k, (Stmt **)items.items, items.count);
    if (!frame.slot_var)
        return body;
    return new_for(k, loc, frame.slot_var, l->slots, LOOP_UNROLL, body);
}

/* ---- the block-level walk ---------------------------------------------- */

static Stmt *lower_stmt(LowerCtx *ctx, Stmt *s)
{
    if (!s)
        return NULL;
    switch (s->kind) {
    case STMT_SEQ:
        for (int i = 0; i < s->u.seq.count; i++)
            s->u.seq.items[i] = lower_stmt(ctx, s->u.seq.items[i]);
        return s;
    case STMT_FOR:
        s->u.loop.body = lower_stmt(ctx, s->u.loop.body);
        return s;
    case STMT_IF:
        s->u.if_.then_body = lower_stmt(ctx, s->u.if_.then_body);
        s->u.if_.else_body = lower_stmt(ctx, s->u.if_.else_body);
        return s;
    case STMT_PARALLEL: {
        const Layout *l = s->u.parallel.layout;
        if (!l)
            ice("parallel loop without a layout");
        if (l->kind == LAYOUT_MMA)
            return lower_mma_loop(ctx, s, l);
        return l->reduced ? lower_reduced_loop(ctx, s, l)
                          : lower_tile_loop(ctx, s, l);
    }
    case STMT_REDUCE:
        return lower_reduce(ctx, s);
    case STMT_COPY:
    case STMT_FILL:
        ice("%s at block level: lower_tile_ops has not run",
            ir_stmt_name(s->kind));
    default:
        return s;
    }
}

/* A fragment becomes the thread's LOCAL array of its elements: slots*vec
 * of them for a tile layout, one per slot for a reduced layout, N/2 per
 * m-slot for an MMA layout.  Its ALLOC
 * stays; codegen zero-fills LOCAL arrays, which REDUCE relies on for the
 * chunks past the end of the tile. */
static void localise_fragment(void *opaque, Stmt *s)
{
    LowerCtx *ctx = opaque;
    if (s->kind != STMT_ALLOC || s->u.alloc.buffer->scope != SCOPE_FRAGMENT)
        return;
    Buffer *b = s->u.alloc.buffer;
    const Layout *l = b->layout;
    if (!l)
        ice("fragment '%s' without a layout", b->name);
    int64_t size = l->kind == LAYOUT_MMA ? l->slots * (l->extent[1] / 2)
                   : l->reduced           ? l->slots
                                          : l->slots * l->vec;
    b->scope = SCOPE_LOCAL;
    b->rank = 1;
    b->shape[0] = pass_index(ctx->k, size);
    for (int d = 1; d < IR_MAX_RANK; d++)
        b->shape[d] = NULL;
    b->layout = NULL;
}

bool pass_lower_parallel(Kernel *k, Diag *diag)
{
    if (!(k->state & KSTATE_LAYOUTS))
        ice("lower_parallel on kernel %s before infer_layouts", k->name);
    LowerCtx ctx = {.k = k, .diag = diag};
    k->body = lower_stmt(&ctx, k->body);
    pass_visit_stmts(k->body, localise_fragment, &ctx);
    k->state |= KSTATE_THREAD;
    return true;
}
