/*
 * infer_layouts.c -- choose how every fragment and PARALLEL loop is spread
 * over the block's threads.
 *
 * A layout (ir.h) cuts a tile, flattened row-major, into chunks of `vec`
 * consecutive elements dealt round-robin to the threads.  Layouts flow in
 * program order, the way data does:
 *
 *   - a PARALLEL loop touching a fragment that already has a layout must
 *     iterate exactly that layout, so that every thread finds its own
 *     elements in its own registers.  A loop over the PARENT shape of a
 *     reduced fragment iterates the parent layout and may read the reduced
 *     fragment at [first rank-1 vars]: the thread holding chunk c also
 *     holds the reduction of c's row (that is what replication buys);
 *   - any other loop is free: it gets a tile layout over its own extents
 *     whose vec is the widest vector its global/shared accesses allow
 *     (IR_VECTOR_BYTES per access, contiguous along the innermost var);
 *   - fragments written by a loop take the loop's layout;
 *   - REDUCE over the last dimension of a tile layout gives its destination
 *     the reduced layout, provided a result's group of chunks fits in a warp
 *     (the butterfly runs on shuffles);
 *   - before all of that, the accumulator C of every GEMM (and A, when it is
 *     a fragment) gets the MMA layout (docs/hopper.md section 4): wgmma
 *     fixes where its registers live, so the fill before the gemm, the
 *     element-wise loops after it and the epilogue copy must follow it, not
 *     the other way round.  Loops that touch such a fragment adopt the MMA
 *     layout by the first rule, and the other fragments of its shape they
 *     touch take it too, even when an earlier loop writes them first
 *     (spread_mma_layouts).
 *
 * Free loops span the threads the tile code runs on: compute_threads once
 * warp_specialize has added a producer warpgroup, else threads.
 *
 * Nothing is rewritten here; lower_parallel turns the layouts into code.
 * requires: lower_tile_ops has run.  guarantees: KSTATE_LAYOUTS.
 */
#include <stdio.h>
#include <string.h>

#include "tile_util.h"

typedef struct {
    Kernel *k;
    Diag *diag;
    bool ok;
    PtrVec failed; /* fragments whose layout an error left unset: later
                      reads of them are not reported again */
    PtrVec all_loops;  /* every PARALLEL, filled on first use */
} InferCtx;

/* One access of a buffer inside a PARALLEL body. */
typedef struct {
    Buffer *buffer;
    Expr **indices;
    bool store;
    Loc loc;
} Access;

/* What one PARALLEL body touches. */
typedef struct {
    InferCtx *ctx;
    PtrVec accesses;       /* Access* in program order */
    bool serial_work;      /* FOR loops or per-thread tile ops inside */
    Stmt *nested;          /* a REDUCE or PARALLEL inside the body */
    Expr **lets;           /* value of each LET var of the body, by id */
    int nlets;
} LoopScan;

/* ---- scanning a PARALLEL body ------------------------------------------ */

static void add_access(LoopScan *scan, Buffer *b, Expr **indices,
                       bool store, Loc loc)
{
    Access *a = arena_alloc(scan->ctx->k->arena, sizeof *a);
    *a = (Access){b, indices, store, loc};
    vec_push(scan->ctx->k->arena, &scan->accesses, a);
}

static Expr *scan_load(void *opaque, Expr *e)
{
    LoopScan *scan = opaque;
    if (e->kind == EXPR_LOAD)
        add_access(scan, e->u.load.buffer, e->u.load.indices, false, e->loc);
    return e;
}

static void scan_stmt(void *opaque, Stmt *s)
{
    LoopScan *scan = opaque;
    pass_rewrite_stmt_exprs(s, false, scan_load, scan);
    switch (s->kind) {
    case STMT_STORE:
        add_access(scan, s->u.store.buffer, s->u.store.indices, true, s->loc);
        break;
    case STMT_LET:
        if (s->u.let.var->id < scan->nlets)
            scan->lets[s->u.let.var->id] = s->u.let.value;
        break;
    case STMT_REDUCE:
    case STMT_PARALLEL:
    case STMT_GEMM:
        if (!scan->nested)
            scan->nested = s;
        scan->serial_work = true;
        break;
    case STMT_FOR:
    case STMT_COPY:
    case STMT_FILL:
        scan->serial_work = true;
        break;
    default:
        break;
    }
}

/* ---- contiguity along the innermost loop var --------------------------- */

typedef struct {
    LoopScan *scan;
    const Var *var;
    bool found;
} UseSearch;

static Expr *find_use(void *opaque, Expr *e)
{
    UseSearch *search = opaque;
    if (e->kind != EXPR_VAR)
        return e;
    const Var *v = e->u.var;
    if (v == search->var)
        search->found = true;
    else if (v->kind == VAR_LET && v->id < search->scan->nlets &&
             search->scan->lets[v->id])
        pass_rewrite_expr(search->scan->lets[v->id], find_use, search);
    return e;
}

/* Does e depend on var, looking through the body's LETs? */
static bool uses_var(LoopScan *scan, Expr *e, const Var *var)
{
    UseSearch search = {scan, var, false};
    pass_rewrite_expr(e, find_use, &search);
    return search.found;
}

/* Is e of the form `<expr without var> + var` (or var itself)? */
static bool contiguous_in(LoopScan *scan, Expr *e, const Var *var)
{
    if (e->kind == EXPR_VAR) {
        const Var *v = e->u.var;
        if (v == var)
            return true;
        if (v->kind == VAR_LET && v->id < scan->nlets && scan->lets[v->id])
            return contiguous_in(scan, scan->lets[v->id], var);
        return false;
    }
    if (e->kind != EXPR_BINARY || e->u.binary.op != BIN_ADD)
        return false;
    Expr *a = e->u.binary.lhs, *b = e->u.binary.rhs;
    return (contiguous_in(scan, b, var) && !uses_var(scan, a, var)) ||
           (contiguous_in(scan, a, var) && !uses_var(scan, b, var));
}

/* The vec of a free loop: one full 16-byte vector of the NARROWEST
 * contiguous global or shared access (so a cast from bf16 to e4m3 loads 32
 * bf16 bytes and stores 16 e4m3 bytes per chunk: every access is a whole
 * number of 16-byte vectors), but no store wider than 16 bytes and no load
 * wider than IR_LAYOUT_MAX_CHUNK_BYTES,
 * cut down to a power of two dividing the innermost extent.  Coarse
 * per-thread work (inner loops, e.g. the transpose's register patch) keeps
 * one element per chunk. */
#define IR_LAYOUT_MAX_CHUNK_BYTES 64
/* Widest-vector candidates of one scanned loop (see choose_vec). */
static void vec_candidates(LoopScan *scan, Stmt *loop, int64_t *best,
                           int64_t *widest_bits, int64_t *widest_store_bits)
{
    int rank = loop->u.parallel.rank;
    const Var *inner = loop->u.parallel.vars[rank - 1];
    for (int i = 0; i < scan->accesses.count; i++) {
        Access *a = scan->accesses.items[i];
        Buffer *b = a->buffer;
        if ((b->scope != SCOPE_GLOBAL && b->scope != SCOPE_SHARED) ||
            b->rank == 0 || ir_dtype_bits(b->dtype) == 0)
            continue;
        if (!contiguous_in(scan, a->indices[b->rank - 1], inner))
            continue;
        int64_t bits = ir_dtype_bits(b->dtype);
        int64_t lanes = IR_VECTOR_BYTES * 8 / bits;
        if (lanes > *best)
            *best = lanes;
        if (bits > *widest_bits)
            *widest_bits = bits;
        if (a->store && bits > *widest_store_bits)
            *widest_store_bits = bits;
    }
}

/* `consumers` are the later loops over the same extents that read the
 * fragments this loop writes: they adopt its layout, so their memory
 * accesses count too (per_token_cast's bf16 loads and e4m3 stores). */
static int choose_vec(LoopScan *scan, Stmt *loop, LoopScan **consumers,
                      Stmt **consumer_loops, int nconsumers)
{
    if (scan->serial_work)
        return 1;
    int rank = loop->u.parallel.rank;
    int64_t extent = loop->u.parallel.extent[rank - 1];
    int64_t best = 0, widest_bits = 0, widest_store_bits = 0;
    vec_candidates(scan, loop, &best, &widest_bits, &widest_store_bits);
    for (int i = 0; i < nconsumers; i++) {
        if (consumers[i]->serial_work)
            return 1;
        vec_candidates(consumers[i], consumer_loops[i], &best, &widest_bits,
                       &widest_store_bits);
    }
    /* Stores stay one 16-byte vector per thread: two adjacent 16-byte
     * stores per lane leave every 32-byte sector half written by each
     * instruction, and the H200's L2 then reads the sector back from DRAM
     * (cast_back at 32 bytes per lane measured 65 % of copy bandwidth
     * against 86 % at 16).  Loads may be wider: L1 absorbs the second. */
    while (best > 1 && best * widest_store_bits > IR_VECTOR_BYTES * 8)
        best /= 2;
    while (best > 1 && best * widest_bits > IR_LAYOUT_MAX_CHUNK_BYTES * 8)
        best /= 2;
    int vec = 1;
    while (vec * 2 <= best && extent % (vec * 2) == 0)
        vec *= 2;
    return vec;
}

/* ---- layouts of PARALLEL loops ----------------------------------------- */

/* The threads the tile code runs on (docs/hopper.md section 3). */
static int tile_threads(const Kernel *k)
{
    return k->compute_threads > 0 ? k->compute_threads : k->threads;
}

static bool same_extents(const int64_t *a, const int64_t *b, int rank)
{
    for (int d = 0; d < rank; d++)
        if (a[d] != b[d])
            return false;
    return true;
}

/* The layout a loop must have to access a fragment laid out as l, or NULL
 * when no loop of these extents can. */
static Layout *loop_layout_for(Kernel *k, Layout *l, Stmt *loop)
{
    int rank = loop->u.parallel.rank;
    const int64_t *extent = loop->u.parallel.extent;
    if (l->rank == rank && same_extents(l->extent, extent, rank))
        return l;
    if (l->kind == LAYOUT_CHUNKED && l->reduced && l->parent_rank == rank &&
        same_extents(l->parent_extent, extent, rank))
        return pass_new_tile_layout(k, rank, extent, l->threads, l->vec);
    return NULL;
}

static const char *loop_vars_text(Kernel *k, Stmt *loop, int count)
{
    const char *text = "";
    for (int d = 0; d < count; d++)
        text = arena_printf(k->arena, "%s%s%s", text, d ? ", " : "",
                            loop->u.parallel.vars[d]->name);
    return text;
}

static bool seen(PtrVec *list, Buffer *b, Arena *arena)
{
    for (int i = 0; i < list->count; i++)
        if (list->items[i] == b)
            return true;
    vec_push(arena, list, b);
    return false;
}

/* A fragment access must name the loop vars themselves, in order: that is
 * what makes the element the thread's own. */
static void check_fragment_access(InferCtx *ctx, Stmt *loop, Access *a,
                                  PtrVec *reported)
{
    Kernel *k = ctx->k;
    Buffer *b = a->buffer;
    Layout *l = b->layout;
    Layout *loop_layout = loop->u.parallel.layout;
    if (!l) {
        bool cascade = false;
        for (int i = 0; i < ctx->failed.count && !cascade; i++)
            cascade = ctx->failed.items[i] == b;
        if (!cascade && !seen(reported, b, k->arena))
            pass_error(ctx->diag, &ctx->ok, a->loc,
                  "fragment '%s' is read before any layout is set: no "
                  "earlier parallel loop or reduce writes it",
                  b->name);
        return;
    }
    bool parent_loop = l->reduced && !loop_layout->reduced;
    if (parent_loop && a->store) {
        if (!seen(reported, b, k->arena))
            pass_error(ctx->diag, &ctx->ok, a->loc,
                  "fragment '%s' has a reduced layout: a loop over its "
                  "parent shape %s may only read it",
                  b->name,
                  pass_format_extents(k->arena, l->parent_extent,
                                      l->parent_rank));
        return;
    }
    int count = loop->u.parallel.rank - (parent_loop ? 1 : 0);
    bool exact = b->rank == count;
    for (int d = 0; exact && d < count; d++)
        exact = a->indices[d]->kind == EXPR_VAR &&
                a->indices[d]->u.var == loop->u.parallel.vars[d];
    if (!exact && !seen(reported, b, k->arena))
        pass_error(ctx->diag, &ctx->ok, a->loc,
              "fragment '%s' must be indexed by the loop variables (%s) of "
              "this parallel loop",
              b->name, loop_vars_text(k, loop, count));
}

/* ---- consumers of a free loop's fragments -------------------------- */

#define MAX_CONSUMERS 8

static void collect_parallel(void *opaque, Stmt *s)
{
    InferCtx *ctx = opaque;
    if (s->kind == STMT_PARALLEL)
        vec_push(ctx->k->arena, &ctx->all_loops, s);
}

static LoopScan *scan_loop(InferCtx *ctx, Stmt *loop)
{
    Kernel *k = ctx->k;
    LoopScan *scan = arena_alloc(k->arena, sizeof *scan);
    *scan = (LoopScan){.ctx = ctx, .nlets = k->nvars};
    scan->lets = arena_alloc(k->arena, sizeof(Expr *) * (size_t)(k->nvars + 1));
    pass_visit_stmts(loop->u.parallel.body, scan_stmt, scan);
    return scan;
}

/* Later loops with the same extents that access a fragment `scan` writes. */
static int find_consumers(InferCtx *ctx, LoopScan *scan, Stmt *loop,
                          LoopScan **consumers, Stmt **consumer_loops)
{
    if (!ctx->all_loops.count)
        pass_visit_stmts(ctx->k->body, collect_parallel, ctx);
    int n = 0, rank = loop->u.parallel.rank;
    bool after = false;
    for (int i = 0; i < ctx->all_loops.count && n < MAX_CONSUMERS; i++) {
        Stmt *other = ctx->all_loops.items[i];
        if (other == loop) { after = true; continue; }
        if (!after || other->u.parallel.rank != rank ||
            !same_extents(other->u.parallel.extent, loop->u.parallel.extent, rank))
            continue;
        LoopScan *other_scan = scan_loop(ctx, other);
        bool shares = false;
        for (int a = 0; a < scan->accesses.count && !shares; a++) {
            Access *w = scan->accesses.items[a];
            if (w->buffer->scope != SCOPE_FRAGMENT || !w->store)
                continue;
            for (int b = 0; b < other_scan->accesses.count; b++)
                if (((Access *)other_scan->accesses.items[b])->buffer == w->buffer)
                    shares = true;
        }
        if (shares) {
            consumers[n] = other_scan;
            consumer_loops[n++] = other;
        }
    }
    return n;
}

static void infer_parallel(InferCtx *ctx, Stmt *loop)
{
    Kernel *k = ctx->k;
    Arena *arena = k->arena;
    LoopScan scan = {.ctx = ctx, .nlets = k->nvars};
    scan.lets = arena_alloc(arena, sizeof(Expr *) * (size_t)(k->nvars + 1));
    pass_visit_stmts(loop->u.parallel.body, scan_stmt, &scan);
    if (scan.nested) {
        /* both work on whole tiles, which a single thread does not own */
        pass_error(ctx->diag, &ctx->ok, scan.nested->loc, "%s inside a parallel loop",
              scan.nested->kind == STMT_REDUCE ? "reduce"
              : scan.nested->kind == STMT_GEMM ? "gemm" : "parallel loop");
        return;
    }
    int rank = loop->u.parallel.rank;
    const int64_t *extent = loop->u.parallel.extent;

    /* 1. fragments that already have a layout fix the loop's layout */
    Layout *layout = NULL;
    Buffer *from = NULL;
    bool conflict = false;
    PtrVec done = {0};
    for (int i = 0; i < scan.accesses.count; i++) {
        Access *a = scan.accesses.items[i];
        Buffer *b = a->buffer;
        if (b->scope != SCOPE_FRAGMENT || !b->layout || seen(&done, b, arena))
            continue;
        Layout *want = loop_layout_for(k, b->layout, loop);
        if (!want) {
            pass_error(ctx->diag, &ctx->ok, loop->loc,
                  "layout conflict in parallel loop over %s: fragment '%s' "
                  "has layout %s",
                  pass_format_extents(arena, extent, rank), b->name,
                  pass_format_layout(arena, b->layout));
            conflict = true;
        } else if (!layout) {
            layout = want;
            from = b;
        } else if (!pass_layout_equal(layout, want)) {
            diag_error(ctx->diag, loop->loc,
                       "layout conflict in parallel loop: fragment '%s' has "
                       "layout %s, fragment '%s' %s",
                       from->name, pass_format_layout(arena, from->layout),
                       b->name, pass_format_layout(arena, b->layout));
            ctx->ok = false;
            conflict = true;
        }
    }
    if (conflict)
        return;
    if (!layout) {
        if (k->threads <= 0)
            ice("kernel %s has no thread count", k->name);
        LoopScan *consumers[MAX_CONSUMERS];
        Stmt *consumer_loops[MAX_CONSUMERS];
        int n = find_consumers(ctx, &scan, loop, consumers, consumer_loops);
        layout = pass_new_tile_layout(k, rank, extent, tile_threads(k),
                                      choose_vec(&scan, loop, consumers,
                                                 consumer_loops, n));
    }
    loop->u.parallel.layout = layout;

    /* 2. fragments first written here take the loop's layout */
    PtrVec reported = {0};
    for (int i = 0; i < scan.accesses.count; i++) {
        Access *a = scan.accesses.items[i];
        Buffer *b = a->buffer;
        if (b->scope != SCOPE_FRAGMENT || !a->store || b->layout)
            continue;
        int64_t shape[IR_MAX_RANK];
        if (!pass_buffer_const_shape(b, shape) || b->rank != layout->rank ||
            !same_extents(shape, layout->extent, layout->rank)) {
            if (!seen(&reported, b, arena))
                pass_error(ctx->diag, &ctx->ok, a->loc,
                      "fragment '%s' is written in a parallel loop over %s "
                      "but its shape differs",
                      b->name, pass_format_extents(arena, extent, rank));
            continue;
        }
        b->layout = layout;
    }

    /* 3. every fragment access must be the thread's own element */
    for (int i = 0; i < scan.accesses.count; i++) {
        Access *a = scan.accesses.items[i];
        if (a->buffer->scope == SCOPE_FRAGMENT)
            check_fragment_access(ctx, loop, a, &reported);
    }
}

/* ---- REDUCE ------------------------------------------------------------ */

static bool reduce_layout(InferCtx *ctx, Stmt *s);

/* A failed reduce leaves its result without a layout; say so once. */
static void infer_reduce(InferCtx *ctx, Stmt *s)
{
    if (!reduce_layout(ctx, s) && !s->u.reduce.dst->layout)
        vec_push(ctx->k->arena, &ctx->failed, s->u.reduce.dst);
}

static bool reduce_layout(InferCtx *ctx, Stmt *s)
{
    Kernel *k = ctx->k;
    Arena *arena = k->arena;
    Buffer *src = s->u.reduce.src, *dst = s->u.reduce.dst;
    int dim = s->u.reduce.dim;
    if (src->scope != SCOPE_FRAGMENT || dst->scope != SCOPE_FRAGMENT) {
        Buffer *bad = src->scope != SCOPE_FRAGMENT ? src : dst;
        pass_error(ctx->diag, &ctx->ok, s->loc, "reduce works on fragments: '%s' is a %s buffer",
              bad->name, ir_scope_name(bad->scope));
        return false;
    }
    Layout *l = src->layout;
    if (!l) {
        pass_error(ctx->diag, &ctx->ok, s->loc,
              "fragment '%s' is read by reduce before any layout is set: no "
              "earlier parallel loop writes it", src->name);
        return false;
    }
    if (l->kind == LAYOUT_MMA) {
        pass_error(ctx->diag, &ctx->ok, s->loc,
              "reduce over '%s': reductions over a gemm's MMA fragment "
              "(layout %s) are not supported", src->name,
              pass_format_layout(arena, l));
        return false;
    }
    if (l->reduced) {
        pass_error(ctx->diag, &ctx->ok, s->loc,
              "reduce over '%s': it is itself a reduction result (layout "
              "%s)", src->name, pass_format_layout(arena, l));
        return false;
    }
    if (dim != l->rank - 1) {
        diag_error(ctx->diag, s->loc,
                   "reduce over dim %d of '%s' (shape %s): only the last "
                   "dim can be reduced", dim, src->name,
                   pass_format_extents(arena, l->extent, l->rank));
        ctx->ok = false;
        return false;
    }
    int64_t extent = l->extent[dim];
    int64_t group = extent / l->vec;
    const char *why = NULL;
    if (group & (group - 1))
        why = "is not a power of two";
    else if (group > IR_WARP_SIZE)
        why = "is wider than a warp";
    else if (l->threads % group != 0)
        why = "does not divide the block's threads";
    if (why) {
        diag_error(ctx->diag, s->loc,
                   "reduce over dim %d of '%s' (extent %lld, vec %d): a "
                   "group of %lld threads %s", dim, src->name,
                   (long long)extent, l->vec, (long long)group, why);
        ctx->ok = false;
        return false;
    }
    Layout *r = arena_alloc(arena, sizeof *r);
    r->rank = l->rank - 1;
    memcpy(r->extent, l->extent, sizeof(int64_t) * (size_t)r->rank);
    r->threads = l->threads;
    r->vec = l->vec;
    r->slots = l->slots;
    r->reduced = true;
    r->parent_rank = l->rank;
    memcpy(r->parent_extent, l->extent, sizeof(int64_t) * (size_t)l->rank);
    r->group = (int)group;

    int64_t shape[IR_MAX_RANK];
    if (!pass_buffer_const_shape(dst, shape) || dst->rank != r->rank ||
        !same_extents(shape, r->extent, r->rank)) {
        pass_error(ctx->diag, &ctx->ok, s->loc, "reduce of '%s' into '%s': the result must have "
              "shape %s", src->name, dst->name,
              pass_format_extents(arena, r->extent, r->rank));
        return false;
    }
    if (dst->layout && !pass_layout_equal(dst->layout, r)) {
        diag_error(ctx->diag, s->loc,
                   "layout conflict in reduce: fragment '%s' has layout %s, "
                   "the reduction of '%s' gives %s", dst->name,
                   pass_format_layout(arena, dst->layout), src->name,
                   pass_format_layout(arena, r));
        ctx->ok = false;
        return false;
    }
    dst->layout = r;
    return true;
}

/* ---- GEMM operands ----------------------------------------------------- */

/* The MMA layout of fragment b, operand `role` of a gemm, over its shape
 * [M, N] (N = K for the A operand, whose k16 steps need 16 columns:
 * n_multiple); NULL after a diagnostic. */
static Layout *mma_layout(InferCtx *ctx, Stmt *gemm, Buffer *b,
                          const char *role, int64_t n_multiple)
{
    Kernel *k = ctx->k;
    int64_t shape[IR_MAX_RANK];
    if (b->rank != 2 || !pass_buffer_const_shape(b, shape)) {
        pass_error(ctx->diag, &ctx->ok, gemm->loc,
                   "gemm %s '%s' must be a 2-D fragment of constant shape",
                   role, b->name);
        return NULL;
    }
    int threads = tile_threads(k);
    if (threads <= 0 || threads % 128 != 0) {
        pass_error(ctx->diag, &ctx->ok, gemm->loc,
                   "gemm runs on whole warpgroups: the kernel's %d threads "
                   "are not a multiple of 128", threads);
        return NULL;
    }
    int warpgroups = threads / 128;
    const char *shape_text = pass_format_extents(k->arena, shape, 2);
    if (shape[0] % (64 * warpgroups) != 0) {
        pass_error(ctx->diag, &ctx->ok, gemm->loc,
                   "gemm %s '%s' %s: %lld rows are not a multiple of %d "
                   "(64 rows per warpgroup, %d warpgroups)", role, b->name,
                   shape_text, (long long)shape[0], 64 * warpgroups,
                   warpgroups);
        return NULL;
    }
    if (shape[1] % n_multiple != 0) {
        pass_error(ctx->diag, &ctx->ok, gemm->loc,
                   "gemm %s '%s' %s: %lld columns are not a multiple of "
                   "%lld", role, b->name, shape_text, (long long)shape[1],
                   (long long)n_multiple);
        return NULL;
    }
    return pass_new_mma_layout(k, shape[0], shape[1], warpgroups);
}

/* Gives fragment b the MMA layout unless an error says why it cannot. */
static void set_mma_layout(InferCtx *ctx, Stmt *gemm, Buffer *b,
                           const char *role, int64_t n_multiple)
{
    if (b->scope != SCOPE_FRAGMENT) {
        pass_error(ctx->diag, &ctx->ok, gemm->loc,
                   "gemm %s '%s' must be a fragment, not a %s buffer", role,
                   b->name, ir_scope_name(b->scope));
        return;
    }
    Layout *l = mma_layout(ctx, gemm, b, role, n_multiple);
    if (!l) {
        vec_push(ctx->k->arena, &ctx->failed, b);
        return;
    }
    if (b->layout && !pass_layout_equal(b->layout, l)) {
        pass_error(ctx->diag, &ctx->ok, gemm->loc,
                   "layout conflict in gemm: fragment '%s' has layout %s, "
                   "as %s it needs %s", b->name,
                   pass_format_layout(ctx->k->arena, b->layout), role,
                   pass_format_layout(ctx->k->arena, l));
        return;
    }
    b->layout = l;
}

static void infer_gemm(void *opaque, Stmt *s)
{
    InferCtx *ctx = opaque;
    if (s->kind != STMT_GEMM)
        return;
    set_mma_layout(ctx, s, s->u.gemm.c, "accumulator", 8);
    Buffer *a = s->u.gemm.a.buffer;
    if (a->scope != SCOPE_FRAGMENT)
        return;
    if (s->u.gemm.transpose_a) {
        pass_error(ctx->diag, &ctx->ok, s->loc,
                   "gemm operand A '%s' is a fragment: it must be [M, K] "
                   "(transpose_a = false)", a->name);
        return;
    }
    set_mma_layout(ctx, s, a, "operand A", 16);
}

/* A fragment first written by, say, fill(acc, 0) would get a chunked layout
 * there and conflict later with the MMA fragment it meets (acc += part * s,
 * part being a gemm's C).  So before the walk, MMA layouts spread through
 * every PARALLEL loop over an MMA fragment's extents to the other
 * fragments of that shape it accesses which have no layout yet, until
 * nothing changes (acc -> out -> ... chains). */
static void spread_mma_layouts(InferCtx *ctx)
{
    Kernel *k = ctx->k;
    if (!ctx->all_loops.count)
        pass_visit_stmts(k->body, collect_parallel, ctx);
    int nloops = ctx->all_loops.count;
    if (nloops == 0)
        return;
    LoopScan **scans = arena_alloc(k->arena, sizeof *scans * (size_t)nloops);
    for (bool changed = true; changed;) {
        changed = false;
        for (int i = 0; i < nloops; i++) {
            Stmt *loop = ctx->all_loops.items[i];
            if (loop->u.parallel.rank != 2)
                continue;
            if (!scans[i])
                scans[i] = scan_loop(ctx, loop);
            Layout *mma = NULL;
            for (int a = 0; a < scans[i]->accesses.count && !mma; a++) {
                Buffer *b = ((Access *)scans[i]->accesses.items[a])->buffer;
                if (b->scope == SCOPE_FRAGMENT && b->layout &&
                    b->layout->kind == LAYOUT_MMA &&
                    same_extents(b->layout->extent, loop->u.parallel.extent,
                                 2))
                    mma = b->layout;
            }
            for (int a = 0; mma && a < scans[i]->accesses.count; a++) {
                Buffer *b = ((Access *)scans[i]->accesses.items[a])->buffer;
                int64_t shape[IR_MAX_RANK];
                if (b->scope != SCOPE_FRAGMENT || b->layout || b->rank != 2 ||
                    !pass_buffer_const_shape(b, shape) ||
                    !same_extents(shape, mma->extent, 2))
                    continue;
                b->layout = mma;
                changed = true;
            }
        }
    }
}

/* ---- the block-level walk ---------------------------------------------- */

typedef struct {
    InferCtx *ctx;
    Loc loc;
} BlockCheck;

static Expr *check_block_load(void *opaque, Expr *e)
{
    BlockCheck *check = opaque;
    if (e->kind == EXPR_LOAD && e->u.load.buffer->scope == SCOPE_FRAGMENT)
        pass_error(check->ctx->diag, &check->ctx->ok, e->loc.line ? e->loc : check->loc,
              "fragment '%s' is accessed outside a parallel loop: its "
              "elements live in different threads",
              e->u.load.buffer->name);
    return e;
}

static void walk(InferCtx *ctx, Stmt *s)
{
    if (!s)
        return;
    switch (s->kind) {
    case STMT_SEQ:
        for (int i = 0; i < s->u.seq.count; i++)
            walk(ctx, s->u.seq.items[i]);
        return;
    case STMT_PARALLEL:
        infer_parallel(ctx, s);
        return;
    case STMT_REDUCE:
        infer_reduce(ctx, s);
        return;
    default:
        break;
    }
    BlockCheck check = {ctx, s->loc};
    pass_rewrite_stmt_exprs(s, false, check_block_load, &check);
    if (s->kind == STMT_STORE && s->u.store.buffer->scope == SCOPE_FRAGMENT)
        pass_error(ctx->diag, &ctx->ok, s->loc,
              "fragment '%s' is accessed outside a parallel loop: its "
              "elements live in different threads",
              s->u.store.buffer->name);
    if (s->kind == STMT_FOR) {
        walk(ctx, s->u.loop.body);
    } else if (s->kind == STMT_IF) {
        walk(ctx, s->u.if_.then_body);
        walk(ctx, s->u.if_.else_body);
    }
}

static void check_alloc(void *opaque, Stmt *s)
{
    InferCtx *ctx = opaque;
    if (s->kind != STMT_ALLOC)
        return;
    Buffer *b = s->u.alloc.buffer;
    if (b->scope == SCOPE_FRAGMENT && !b->layout)
        pass_error(ctx->diag, &ctx->ok, s->loc,
              "fragment '%s' is never written by a parallel loop or reduce, "
              "so it has no layout", b->name);
}

bool pass_infer_layouts(Kernel *k, Diag *diag)
{
    InferCtx ctx = {.k = k, .diag = diag, .ok = true};
    pass_visit_stmts(k->body, infer_gemm, &ctx);
    if (ctx.ok)
        spread_mma_layouts(&ctx);
    walk(&ctx, k->body);
    if (ctx.ok)
        pass_visit_stmts(k->body, check_alloc, &ctx);
    if (ctx.ok)
        k->state |= KSTATE_LAYOUTS;
    return ctx.ok;
}
