/*
 * lower_tma.c -- decides which block-level copies become TMA copies.
 *
 * A block-level COPY between a global tensor and a whole shared buffer (or
 * one index of its leading dims) can be one cp.async.bulk.tensor per
 * block: one thread issues it, the Tensor Memory Accelerator moves the box
 * and reports the bytes on an mbarrier.  The pass checks the conditions of
 * docs/hopper.md section 2 (each failure has a reason, printed with
 * --explain-tma and in the error of a copy forced with tma = on), records
 * a TensorMap per distinct (tensor, box, swizzle), sets copy.tensor_map and
 * the shared buffer's async_kind (SWIZZLE128 for a gemm operand, else
 * PLAIN).
 *
 * Policy in auto mode: only copies directly in a pipelined loop (under its
 * IFs, not in a nested loop) or whose shared side is a gemm operand become
 * TMA.  Other copies (the transpose's tile, the staging of element-wise
 * kernels) keep the vectorised fallback, which is as fast for them and
 * needs no mbarrier; `tma = on` (copy or kernel) makes them TMA too.
 *
 * A TMA load outside a pipelined loop gets its own protocol here (the
 * pipelined ones get theirs from pipeline_loops): one mbarrier slot
 * initialised at the top of the kernel, a phase bit per thread, and
 * consecutive TMA loads of one sequence share one expect_tx and one wait.
 * TMA stores get `fence proxy_async; barrier` in front (threads' writes
 * become visible to the async proxy) and a commit + wait behind.
 *
 * In a kernel with a cluster, a pipelined TMA load whose box, loop bounds
 * and guards are the same in every CTA of the cluster (cluster_uniform.c)
 * multicasts (unless its multicast hint is off; `multicast = on` makes
 * failing to an error): each CTA loads one slice of the box, split along
 * its outermost dimension wider than 1, and the slice lands in every
 * CTA.  The tensor map's box is the slice (docs/hopper.md 11).
 *
 * requires: tile level (after check_types).  guarantees: every COPY has
 * tensor_map >= 0 exactly when it is a TMA copy; a TMA load outside a
 * pipelined loop carries its barrier.
 */
#include <stdio.h>
#include <stdlib.h>

#include "async_util.h"

bool pass_explain_tma;

#define TMA_MAX_RANK 5
#define TMA_MAX_BOX 256
#define SWIZZLE_ROW_BYTES 128

typedef struct {
    Kernel *k;
    Diag *diag;
    bool ok;
    Facts *facts;
    PtrVec gemm_operands; /* Buffer*: shared A/B operands of a gemm */
    PtrVec loaded;        /* Buffer*: shared destinations of global copies */
    int deferred;         /* store groups whose wait was deferred */
    Buffer *bar;          /* the standalone loads' mbarrier, once needed */
    ClusterUniform *uniform; /* with a cluster: what every CTA agrees on */
    const Stmt *multicast; /* the first copy that multicasts */
    Stmt *bar_alloc;      /* its ALLOC */
    Var *phase;           /* its phase bit */
} TmaCtx;

static bool is_gemm_operand(TmaCtx *c, const Buffer *b)
{
    for (int i = 0; i < c->gemm_operands.count; i++)
        if (c->gemm_operands.items[i] == b)
            return true;
    return false;
}

static bool is_loaded(TmaCtx *c, const Buffer *b)
{
    for (int i = 0; i < c->loaded.count; i++)
        if (c->loaded.items[i] == b)
            return true;
    return false;
}

/* Records gemm operands, and the shared buffers that copies from global
 * memory fill (their layout is the load's, so a store from them keeps
 * it). */
static void find_gemm_operand(void *opaque, Stmt *s)
{
    TmaCtx *c = opaque;
    if (s->kind == STMT_COPY && s->u.copy.src.buffer->scope == SCOPE_GLOBAL &&
        s->u.copy.dst.buffer->scope == SCOPE_SHARED)
        vec_push(c->k->arena, &c->loaded, s->u.copy.dst.buffer);
    if (s->kind != STMT_GEMM)
        return;
    if (s->u.gemm.a.buffer->scope == SCOPE_SHARED)
        vec_push(c->k->arena, &c->gemm_operands, s->u.gemm.a.buffer);
    if (s->u.gemm.b.buffer->scope == SCOPE_SHARED)
        vec_push(c->k->arena, &c->gemm_operands, s->u.gemm.b.buffer);
}

static const char *expr_text(Arena *arena, const Expr *e)
{
    char *text = NULL;
    size_t size = 0;
    FILE *out = open_memstream(&text, &size);
    ir_print_expr(out, e);
    fclose(out);
    char *copy = arena_strdup(arena, text);
    free(text);
    return copy;
}

static const char *kind_name(int async_kind)
{
    return async_kind == SHARED_ASYNC_SWIZZLE128 ? "swizzle128"
           : async_kind == SHARED_ASYNC_PLAIN    ? "plain"
           : async_kind == SHARED_ASYNC_MBARRIER ? "mbarrier"
                                                 : "none";
}

/* ---- legality (docs/hopper.md 2, rules 2-5) ---------------------------- */

/* The box of the global region: its extents, 1 for a single index. */
static void global_box(const Region *g, int64_t box[IR_MAX_RANK])
{
    for (int d = 0; d < g->buffer->rank; d++)
        box[d] = g->extent[d] > 0 ? g->extent[d] : 1;
}

/* NULL when the copy can be a TMA copy, else why not.  *kind is the
 * shared buffer's async_kind it needs. */
static const char *illegal_reason(TmaCtx *c, const Stmt *s, bool pipelined,
                                  int *kind)
{
    Kernel *k = c->k;
    Arena *a = k->arena;
    bool store = s->u.copy.src.buffer->scope == SCOPE_SHARED;
    const Region *g = store ? &s->u.copy.dst : &s->u.copy.src;
    const Region *sh = store ? &s->u.copy.src : &s->u.copy.dst;
    Buffer *gb = g->buffer, *sb = sh->buffer;
    int bits = ir_dtype_bits(gb->dtype);

    if (gb->dtype != sb->dtype)
        return arena_printf(a, "the copy converts %s to %s (TMA moves bytes "
                            "unchanged)", ir_dtype_name(s->u.copy.src.buffer->dtype),
                            ir_dtype_name(s->u.copy.dst.buffer->dtype));
    if (bits < 8)
        return arena_printf(a, "%s elements are narrower than a byte",
                            ir_dtype_name(gb->dtype));
    int bytes = bits / 8;
    if (gb->rank > TMA_MAX_RANK)
        return arena_printf(a, "'%s' has rank %d (a tensor map has at most %d)",
                            gb->name, gb->rank, TMA_MAX_RANK);
    const Expr *last = gb->strides[gb->rank - 1];
    if (!last || last->kind != EXPR_INT || last->u.int_value != 1)
        return arena_printf(a, "the last stride of '%s' is not 1", gb->name);
    for (int d = 0; d + 1 < gb->rank; d++) {
        Modular m = facts_modular(c->facts, gb->strides[d]);
        if ((m.coeff * bytes) % 16 != 0 || (m.base * bytes) % 16 != 0)
            return arena_printf(a, "stride %d of '%s' (%s) is not provably a "
                                "multiple of 16 bytes (a `where` constraint "
                                "such as `%s %% %d == 0` proves it)",
                                d, gb->name, expr_text(a, gb->strides[d]),
                                expr_text(a, gb->strides[d]), 16 / bytes);
    }
    int64_t box[IR_MAX_RANK];
    global_box(g, box);
    for (int d = 0; d < gb->rank; d++)
        if (box[d] > TMA_MAX_BOX)
            return arena_printf(a, "box extent %lld of dimension %d is over %d",
                                (long long)box[d], d, TMA_MAX_BOX);
    int64_t inner = box[gb->rank - 1] * bytes;
    if (inner % 16 != 0)
        return arena_printf(a, "the innermost box is %lld bytes, not a "
                            "multiple of 16", (long long)inner);

    /* the shared side: single indices on leading dims, then whole dims */
    int first = 0;
    while (first < sb->rank && sh->extent[first] == 0)
        first++;
    if (first == sb->rank)
        return arena_printf(a, "the shared side is a single element of '%s'",
                            sb->name);
    int64_t slab = bytes;
    for (int d = first; d < sb->rank; d++) {
        const Expr *start = sh->start[d];
        bool zero = !start || (start->kind == EXPR_INT && start->u.int_value == 0);
        const Expr *extent = sb->shape[d];
        if (sh->extent[d] == 0 || !zero || extent->kind != EXPR_INT ||
            extent->u.int_value != sh->extent[d])
            return arena_printf(a, "the shared side is not the whole of '%s' "
                                "(or one index of its leading dims)", sb->name);
        slab *= sh->extent[d];
    }
    int64_t row = sh->extent[sb->rank - 1] * bytes;
    /* A store's source with 128-byte rows that no load fills takes the
     * 128-byte swizzle too: the threads that write it (one 16-byte chunk
     * of 8 consecutive rows per warp access in the MMA layout) then hit 8
     * different chunks, where plain rows would be an 8-way bank conflict. */
    bool swizzle = is_gemm_operand(c, sb) ||
                   (store && row == SWIZZLE_ROW_BYTES && !is_loaded(c, sb));
    *kind = swizzle ? SHARED_ASYNC_SWIZZLE128 : SHARED_ASYNC_PLAIN;
    if (*kind == SHARED_ASYNC_SWIZZLE128 && row != SWIZZLE_ROW_BYTES)
        return arena_printf(a, "'%s' is a gemm operand, so its rows must be "
                            "exactly %d bytes for the 128-byte swizzle; they "
                            "are %lld", sb->name, SWIZZLE_ROW_BYTES, (long long)row);
    if (sb->async_kind != SHARED_ASYNC_NONE && sb->async_kind != *kind)
        return arena_printf(a, "'%s' is already laid out as %s", sb->name,
                            kind_name(sb->async_kind));
    /* each stage (or indexed slab) must start where TMA can write it */
    int64_t align = *kind == SHARED_ASYNC_SWIZZLE128 ? 1024 : 128;
    if ((first > 0 || pipelined) && slab % align != 0)
        return arena_printf(a, "one box of '%s' is %lld bytes, not a multiple "
                            "of %lld (each stage must start %lld-byte aligned)",
                            sb->name, (long long)slab, (long long)align,
                            (long long)align);
    for (int d = 0; d < gb->rank; d++)
        if (g->start[d] && !async_uniform_scalar(g->start[d]))
            return arena_printf(a, "the start of dimension %d depends on the "
                                "thread (one thread issues a TMA copy)", d);
    for (int d = 0; d < first; d++)
        if (sh->start[d] && !async_uniform_scalar(sh->start[d]))
            return arena_printf(a, "the index into '%s' depends on the thread",
                                sb->name);
    return NULL;
}

/* ---- multicast (docs/hopper.md 11) ------------------------------------- */

/* NULL when the TMA load s (in a pipelined loop when `pipelined`, under
 * cluster-uniform loops and IFs when `uniform_path`) can multicast: then
 * *dim is the global dim its box is split on, box[*dim] / cluster size
 * per CTA.  Else why not. */
static const char *multicast_reason(TmaCtx *c, const Stmt *s, bool pipelined,
                                    bool uniform_path, int kind, int *dim)
{
    Kernel *k = c->k;
    Arena *a = k->arena;
    int ctas = cluster_size(k);
    if (ctas < 2)
        return "the kernel has no cluster (launch ... with(cluster = N))";
    if (s->u.copy.src.buffer->scope != SCOPE_GLOBAL)
        return "it is a store (only loads multicast)";
    if (!pipelined)
        return "it is not in a pipelined loop (only pipelined loads multicast)";
    if (!uniform_path)
        return "a loop bound or an IF condition around it may differ between the "
               "CTAs of a cluster";
    const Region *g = &s->u.copy.src, *sh = &s->u.copy.dst;
    for (int d = 0; d < g->buffer->rank; d++)
        if (!cluster_uniform_expr(c->uniform, g->start[d]))
            return arena_printf(a, "the start of dimension %d may differ between the "
                                "CTAs of a cluster (it depends on a clustered block "
                                "index other than through block / a multiple of the "
                                "cluster size)", d);
    for (int d = 0; d < sh->buffer->rank; d++)
        if (!cluster_uniform_expr(c->uniform, sh->start[d]))
            return arena_printf(a, "the index into '%s' may differ between the CTAs of "
                                "a cluster", sh->buffer->name);
    int64_t box[IR_MAX_RANK];
    global_box(g, box);
    int rank = g->buffer->rank;
    int split = 0;
    while (split < rank - 1 && box[split] == 1)
        split++;
    int bytes = ir_dtype_bits(g->buffer->dtype) / 8;
    int64_t total = bytes;
    for (int d = 0; d < rank; d++)
        total *= box[d];
    int64_t align = kind == SHARED_ASYNC_SWIZZLE128 ? 1024 : 128;
    if (box[split] % ctas != 0)
        return arena_printf(a, "its box is %lld wide on dimension %d, not a multiple of "
                            "the %d CTAs", (long long)box[split], split, ctas);
    if (kind == SHARED_ASYNC_SWIZZLE128 && split == rank - 1)
        return "its 128-byte swizzled rows cannot be split";
    if ((total / ctas) % align != 0)
        return arena_printf(a, "a slice of %lld bytes is not a multiple of %lld (each "
                            "CTA's slice must start %lld-byte aligned)",
                            (long long)(total / ctas), (long long)align, (long long)align);
    *dim = split;
    return NULL;
}

/* Sets s's multicast (or reports why not, or fails a `multicast = on`);
 * box becomes one CTA's slice. */
static void decide_multicast(TmaCtx *c, Stmt *s, bool pipelined, bool uniform_path,
                             int kind, int64_t box[IR_MAX_RANK])
{
    Hint hint = s->u.copy.multicast_hint;
    if (hint == HINT_OFF)
        return;
    int dim = 0;
    const char *reason = multicast_reason(c, s, pipelined, uniform_path, kind, &dim);
    if (reason) {
        if (hint == HINT_ON)
            pass_error(c->diag, &c->ok, s->loc, "copy '%s' -> '%s' cannot multicast: %s",
                       s->u.copy.src.buffer->name, s->u.copy.dst.buffer->name, reason);
        else if (pass_explain_tma && cluster_size(c->k) > 1)
            diag_note(c->diag, s->loc, "copy '%s' -> '%s' does not multicast: %s",
                      s->u.copy.src.buffer->name, s->u.copy.dst.buffer->name, reason);
        return;
    }
    s->u.copy.multicast = cluster_size(c->k);
    s->u.copy.multicast_dim = dim;
    box[dim] /= s->u.copy.multicast;
    if (!c->multicast)
        c->multicast = s;
}

/* ---- decisions --------------------------------------------------------- */

static int tensor_map_index(TmaCtx *c, Buffer *global, const int64_t *box,
                            int swizzle)
{
    Kernel *k = c->k;
    for (int i = 0; i < k->ntensor_maps; i++) {
        TensorMap *m = &k->tensor_maps[i];
        bool same = m->global == global && m->swizzle_bytes == swizzle;
        for (int d = 0; same && d < m->rank; d++)
            same = m->box[d] == box[d];
        if (same)
            return i;
    }
    TensorMap *maps = arena_alloc(k->arena, sizeof(TensorMap) *
                                                (size_t)(k->ntensor_maps + 1));
    for (int i = 0; i < k->ntensor_maps; i++)
        maps[i] = k->tensor_maps[i];
    TensorMap *m = &maps[k->ntensor_maps];
    m->global = global;
    m->rank = global->rank;
    for (int d = 0; d < global->rank; d++)
        m->box[d] = box[d];
    m->swizzle_bytes = swizzle;
    k->tensor_maps = maps;
    return k->ntensor_maps++;
}

static void decide(TmaCtx *c, Stmt *s, bool pipelined, bool uniform_path)
{
    Kernel *k = c->k;
    Arena *a = k->arena;
    Buffer *src = s->u.copy.src.buffer, *dst = s->u.copy.dst.buffer;
    bool load = src->scope == SCOPE_GLOBAL && dst->scope == SCOPE_SHARED;
    bool store = src->scope == SCOPE_SHARED && dst->scope == SCOPE_GLOBAL;
    if (!load && !store) {
        if (s->u.copy.tma == HINT_ON || s->u.copy.multicast_hint == HINT_ON)
            pass_error(c->diag, &c->ok, s->loc, "copy '%s' -> '%s' cannot use "
                       "TMA%s: it is not between global and shared memory",
                       src->name, dst->name,
                       s->u.copy.tma == HINT_ON ? "" : " (multicast = on needs it)");
        else if (pass_explain_tma)
            diag_note(c->diag, s->loc, "copy '%s' -> '%s' is not a TMA copy: "
                      "it is not between global and shared memory",
                      src->name, dst->name);
        return;
    }
    Hint hint = s->u.copy.tma != HINT_AUTO ? s->u.copy.tma : k->hint_tma;
    Buffer *shared = load ? dst : src;
    const char *reason = NULL;
    int kind = SHARED_ASYNC_PLAIN;
    if (k->hint_tma == HINT_OFF) {
        reason = "the kernel's tma hint is off";
        if (s->u.copy.tma == HINT_ON) {
            pass_error(c->diag, &c->ok, s->loc, "copy '%s' -> '%s' has tma = "
                       "on, but the kernel's tma hint is off", src->name,
                       dst->name);
            return;
        }
    } else if (s->u.copy.tma == HINT_OFF) {
        reason = "the copy's tma hint is off";
    } else {
        reason = illegal_reason(c, s, pipelined, &kind);
        if (reason && hint == HINT_ON) {
            pass_error(c->diag, &c->ok, s->loc, "copy '%s' -> '%s' cannot use "
                       "TMA: %s", src->name, dst->name, reason);
            return;
        }
        if (!reason && hint == HINT_AUTO && !pipelined &&
            !is_gemm_operand(c, shared))
            reason = "in auto mode only copies in a pipelined loop or into a "
                     "gemm operand use TMA (tma = on forces it)";
    }
    if (reason) {
        if (s->u.copy.multicast_hint == HINT_ON)
            pass_error(c->diag, &c->ok, s->loc, "copy '%s' -> '%s' has multicast = on, "
                       "but it is not a TMA copy: %s", src->name, dst->name, reason);
        else if (pass_explain_tma)
            diag_note(c->diag, s->loc, "copy '%s' -> '%s' is not a TMA copy: %s",
                      src->name, dst->name, reason);
        return;
    }
    const Region *g = load ? &s->u.copy.src : &s->u.copy.dst;
    int64_t box[IR_MAX_RANK];
    global_box(g, box);
    decide_multicast(c, s, pipelined, uniform_path, kind, box);
    int swizzle = kind == SHARED_ASYNC_SWIZZLE128 ? SWIZZLE_ROW_BYTES : 0;
    s->u.copy.tensor_map = tensor_map_index(c, g->buffer, box, swizzle);
    shared->async_kind = kind;
    if (pass_explain_tma)
        diag_note(c->diag, s->loc, "copy '%s' -> '%s' is a TMA %s: tensor map "
                  "%d, box %s, %s%s%s", src->name, dst->name,
                  load ? "load" : "store", s->u.copy.tensor_map,
                  pass_format_extents(a, box, g->buffer->rank),
                  swizzle ? "128-byte swizzle" : "no swizzle",
                  pipelined ? ", pipelined" : "",
                  s->u.copy.multicast
                      ? arena_printf(a, ", multicast to %d CTAs (each loads 1/%d along "
                                     "dimension %d)", s->u.copy.multicast,
                                     s->u.copy.multicast, s->u.copy.multicast_dim)
                      : "");
}

/* Visits block-level copies; `pipelined` is true directly inside a
 * PIPELINED loop's body (under IFs, not in a nested loop); `uniform` while
 * every enclosing loop bound and IF condition is cluster-uniform. */
static void decide_all(TmaCtx *c, Stmt *s, bool pipelined, bool uniform)
{
    if (!s)
        return;
    switch (s->kind) {
    case STMT_SEQ:
        for (int i = 0; i < s->u.seq.count; i++)
            decide_all(c, s->u.seq.items[i], pipelined, uniform);
        return;
    case STMT_FOR:
        if (c->uniform)
            uniform = uniform && cluster_uniform_expr(c->uniform, s->u.loop.begin) &&
                      cluster_uniform_expr(c->uniform, s->u.loop.end);
        decide_all(c, s->u.loop.body, s->u.loop.kind == LOOP_PIPELINED, uniform);
        return;
    case STMT_IF:
        if (c->uniform)
            uniform = uniform && cluster_uniform_expr(c->uniform, s->u.if_.cond);
        decide_all(c, s->u.if_.then_body, pipelined, uniform);
        decide_all(c, s->u.if_.else_body, pipelined, uniform);
        return;
    case STMT_COPY:
        decide(c, s, pipelined, uniform);
        return;
    default: /* PARALLEL bodies hold per-thread copies: never TMA */
        return;
    }
}

/* ---- protocols of copies outside pipelines ----------------------------- */

static bool is_standalone_load(const Stmt *s)
{
    return s->kind == STMT_COPY && s->u.copy.tensor_map >= 0 &&
           s->u.copy.dst.buffer->scope == SCOPE_SHARED;
}

static bool is_tma_store(const Stmt *s)
{
    return s->kind == STMT_COPY && s->u.copy.tensor_map >= 0 &&
           s->u.copy.dst.buffer->scope == SCOPE_GLOBAL;
}

/* if thread_idx() == 0 { expect_tx @bar[0] = BYTES; copies }
 * wait @bar[0] = phase;  phase = phase ^ 1 */
static void emit_load_group(TmaCtx *c, Stmt *out, Stmt **copies, int n)
{
    Kernel *k = c->k;
    Loc loc = copies[0]->loc;
    int64_t bytes = 0;
    Stmt *issue = ir_seq(k, NULL, 0);
    for (int i = 0; i < n; i++)
        bytes += async_copy_bytes(copies[i]);
    ir_seq_append(k, issue, async_mbarrier(k, MBAR_EXPECT_TX, c->bar,
                                           pass_index(k, 0),
                                           pass_index(k, bytes), loc));
    for (int i = 0; i < n; i++) {
        Region *bar = &copies[i]->u.copy.barrier;
        bar->buffer = c->bar;
        bar->start[0] = pass_index(k, 0);
        bar->extent[0] = 0;
        ir_seq_append(k, issue, copies[i]);
    }
    ir_seq_append(k, out, async_if(k, async_thread_is(k, 0), issue, loc));
    ir_seq_append(k, out, async_mbarrier(k, MBAR_WAIT, c->bar, pass_index(k, 0),
                                         ir_var(k, c->phase), loc));
    Stmt *flip = ir_new_stmt(k, STMT_ASSIGN, loc);
    flip->u.assign.var = c->phase;
    flip->u.assign.value = ir_binary(k, BIN_XOR, ir_var(k, c->phase),
                                     pass_index(k, 1));
    ir_seq_append(k, out, flip);
}

/* ---- TMA stores -------------------------------------------------------- */

/* Whether a statement (nested ones included) reads or writes `buffer`. */
typedef struct {
    const Buffer *buffer;
    bool found;
} Touch;

static Expr *touch_expr(void *opaque, Expr *e)
{
    Touch *t = opaque;
    if (e->kind == EXPR_LOAD && e->u.load.buffer == t->buffer)
        t->found = true;
    return e;
}

static void touch_stmt(void *opaque, Stmt *s)
{
    Touch *t = opaque;
    PassBufferUse uses[PASS_MAX_BUFFER_USES];
    int n = pass_stmt_buffer_uses(s, uses);
    for (int i = 0; i < n; i++)
        if (uses[i].buffer == t->buffer)
            t->found = true;
    pass_rewrite_stmt_exprs(s, false, touch_expr, t);
}

static bool touches(Stmt *s, const Buffer *buffer)
{
    Touch t = {.buffer = buffer, .found = false};
    pass_visit_stmts(s, touch_stmt, &t);
    return t.found;
}

static void find_return(void *opaque, Stmt *s)
{
    if (s->kind == STMT_RETURN)
        *(bool *)opaque = true;
}

/* The end of the run of TMA stores that starts at items[i]. */
static int store_group_end(Stmt *seq, int i)
{
    while (i < seq->u.seq.count && is_tma_store(seq->u.seq.items[i]))
        i++;
    return i;
}

/* A store group (ending at items[end]) of a serial loop's body may leave
 * its bulk group in flight (the consumers go on to the next tile while
 * the TMA engine reads the shared tile) when every other access to its
 * buffer in the body comes before a store group of that buffer (nothing
 * after the last one touches it), so each iteration reaches a `wait` (put
 * before the first access of each run, see protocols_seq) before it
 * touches the buffer again, and the body cannot leave the loop other than
 * at its end, after which the tail wait follows. */
static bool store_deferrable(Stmt *body, int end, Buffer *source)
{
    bool exits = false;
    pass_visit_stmts(body, find_return, &exits);
    if (exits)
        return false;
    int last = body->u.seq.count;
    while (last > end && !(is_tma_store(body->u.seq.items[last - 1]) &&
                           body->u.seq.items[last - 1]->u.copy.src.buffer == source))
        last--;
    for (int j = last; j < body->u.seq.count; j++)
        if (touches(body->u.seq.items[j], source))
            return false;
    return true;
}

/* A store group items[i, end) may leave its bulk group in flight when
 * each buffer it reads may (store_deferrable): a group that stores two
 * tiles (the top and bottom halves of a 256-row tile, each its own
 * buffer) waits before the first access of either. */
static bool store_group_deferrable(Stmt *body, int i, int end)
{
    for (int j = i; j < end; j++)
        if (!store_deferrable(body, end, body->u.seq.items[j]->u.copy.src.buffer))
            return false;
    return true;
}

/* if thread_idx() == 0 { fence tma_store_wait 0 }; barrier: the bulk
 * groups thread 0 committed have read their shared tiles, and every
 * thread knows it before it writes one again. */
static void emit_store_wait(TmaCtx *c, Stmt *out, Loc loc)
{
    Kernel *k = c->k;
    Stmt *wait = async_fence(k, FENCE_TMA_STORE_WAIT, 0, loc);
    ir_seq_append(k, out, async_if(k, async_thread_is(k, 0), ir_seq(k, &wait, 1), loc));
    ir_seq_append(k, out, ir_new_stmt(k, STMT_BARRIER, loc));
}

/* fence proxy_async; barrier; if thread_idx() == 0 { stores; commit
 * (; wait unless deferred) }: one barrier and one bulk group for a run of
 * consecutive stores. */
static void emit_store_group(TmaCtx *c, Stmt *out, Stmt **copies, int n,
                             bool deferred)
{
    Kernel *k = c->k;
    Loc loc = copies[0]->loc;
    ir_seq_append(k, out, async_fence(k, FENCE_PROXY_ASYNC, 0, loc));
    ir_seq_append(k, out, ir_new_stmt(k, STMT_BARRIER, loc));
    Stmt *issue = ir_seq(k, copies, n);
    ir_seq_append(k, issue, async_fence(k, FENCE_TMA_STORE_COMMIT, 0, loc));
    if (!deferred)
        ir_seq_append(k, issue, async_fence(k, FENCE_TMA_STORE_WAIT, 0, loc));
    ir_seq_append(k, out, async_if(k, async_thread_is(k, 0), issue, loc));
}

static void ensure_barrier(TmaCtx *c, Loc loc)
{
    if (c->bar)
        return;
    c->bar = async_new_mbarriers(c->k, "tma_bar", 1, loc, &c->bar_alloc);
    c->phase = ir_new_var(c->k, "tma_phase", PASS_INDEX_TYPE, VAR_MUTABLE);
}

/* The barrier's alloc, the phase bit and the one-time init go first. */
static void prepend_barrier_init(TmaCtx *c)
{
    Kernel *k = c->k;
    Loc loc = c->bar->loc;
    Stmt *let = ir_new_stmt(k, STMT_LET, loc);
    let->u.let.var = c->phase;
    let->u.let.value = pass_index(k, 0);
    Stmt *prefix[2] = {c->bar_alloc, let};
    Stmt *init = async_mbarrier(k, MBAR_INIT, c->bar, pass_index(k, 0),
                                pass_index(k, 1), loc);
    async_prepend_init(k, prefix, 2, ir_seq(k, &init, 1), loc);
}

static Stmt *protocols(TmaCtx *c, Stmt *s, bool pipelined);

/* `loop_body`: s is the body of a serial loop, where store groups may be
 * deferred (store_group_deferrable); each buffer of a deferred group then
 * gets its wait before the first statement of the run of statements
 * leading up to the group that touches it. */
static Stmt *protocols_seq(TmaCtx *c, Stmt *s, bool pipelined, bool loop_body)
{
    Kernel *k = c->k;
    Stmt *out = ir_seq(k, NULL, 0);
    out->loc = s->loc;
    int n = s->u.seq.count;
    bool *wait_before = arena_alloc(k->arena, sizeof(bool) * (size_t)(n + 1));
    bool *defer = arena_alloc(k->arena, sizeof(bool) * (size_t)(n + 1));
    for (int i = 0; i <= n; i++)
        wait_before[i] = defer[i] = false;
    for (int i = 0; loop_body && i < n; i++) {
        if (!is_tma_store(s->u.seq.items[i]))
            continue;
        int end = store_group_end(s, i);
        if (store_group_deferrable(s, i, end)) {
            defer[i] = true;
            for (int g = i; g < end; g++) {
                Buffer *source = s->u.seq.items[g]->u.copy.src.buffer;
                int from = i;
                while (from > 0 && !(is_tma_store(s->u.seq.items[from - 1]) &&
                                     s->u.seq.items[from - 1]->u.copy.src.buffer == source))
                    from--;
                for (int j = from; j < i; j++)
                    if (touches(s->u.seq.items[j], source)) {
                        wait_before[j] = true;
                        break;
                    }
            }
            c->deferred++;
        }
        i = end - 1;
    }
    for (int i = 0; i < n;) {
        Stmt *item = s->u.seq.items[i];
        if (wait_before[i])
            emit_store_wait(c, out, item->loc);
        if (!pipelined && is_standalone_load(item)) {
            int j = i;
            while (j < n && is_standalone_load(s->u.seq.items[j]))
                j++;
            ensure_barrier(c, item->loc);
            emit_load_group(c, out, &s->u.seq.items[i], j - i);
            i = j;
            continue;
        }
        if (is_tma_store(item)) {
            int end = store_group_end(s, i);
            emit_store_group(c, out, &s->u.seq.items[i], end - i, defer[i]);
            i = end;
            continue;
        }
        Stmt *lowered = protocols(c, item, pipelined);
        if (item->kind == STMT_FOR && lowered->kind == STMT_SEQ) {
            /* the loop and its tail wait stay items of this sequence, so
             * warp_specialize still finds the loop nest at the top */
            for (int j = 0; j < lowered->u.seq.count; j++)
                ir_seq_append(k, out, lowered->u.seq.items[j]);
        } else {
            ir_seq_append(k, out, lowered);
        }
        i++;
    }
    return out;
}

/* A serial loop whose body deferred a store's wait is followed by it:
 * nothing after the loop (or the block's exit) finds a tile still being
 * read. */
static Stmt *protocols_loop(TmaCtx *c, Stmt *s)
{
    bool pipelined = s->u.loop.kind == LOOP_PIPELINED;
    int before = c->deferred;
    Stmt *body = s->u.loop.body;
    if (body && body->kind == STMT_SEQ)
        s->u.loop.body = protocols_seq(c, body, pipelined,
                                       s->u.loop.kind == LOOP_SERIAL);
    else
        s->u.loop.body = protocols(c, body, pipelined);
    if (c->deferred == before)
        return s;
    Stmt *out = ir_seq(c->k, &s, 1);
    out->loc = s->loc;
    emit_store_wait(c, out, s->loc);
    return out;
}

static Stmt *protocols(TmaCtx *c, Stmt *s, bool pipelined)
{
    if (!s)
        return NULL;
    switch (s->kind) {
    case STMT_SEQ:
        return protocols_seq(c, s, pipelined, false);
    case STMT_FOR:
        return protocols_loop(c, s);
    case STMT_IF:
        s->u.if_.then_body = protocols(c, s->u.if_.then_body, pipelined);
        s->u.if_.else_body = protocols(c, s->u.if_.else_body, pipelined);
        return s;
    case STMT_COPY:
        if ((!pipelined && is_standalone_load(s)) || is_tma_store(s)) {
            Stmt *seq = ir_seq(c->k, &s, 1);
            return protocols_seq(c, seq, pipelined, false);
        }
        return s;
    default:
        return s;
    }
}

/* A CTA whose copies multicast must stay until its peers are done with
 * it (their copies write into its shared memory, their consumers arrive
 * on its barriers): it leaves through the cluster barrier at the end of
 * the kernel, never early. */
static void forbid_return(void *opaque, Stmt *s)
{
    TmaCtx *c = opaque;
    if (s->kind == STMT_RETURN)
        pass_error(c->diag, &c->ok, s->loc, "a kernel whose copies multicast cannot "
                   "return early: the other CTAs of its cluster still write into its "
                   "shared memory (the copy at line %d)", c->multicast->loc.line);
}

bool pass_lower_tma(Kernel *k, Diag *diag)
{
    TmaCtx c = {.k = k, .diag = diag, .ok = true};
    c.facts = facts_new(k);
    pass_visit_stmts(k->body, find_gemm_operand, &c);
    if (cluster_size(k) > 1)
        c.uniform = cluster_uniform_new(k);
    decide_all(&c, k->body, false, true);
    if (c.multicast)
        pass_visit_stmts(k->body, forbid_return, &c);
    if (!c.ok)
        return false;
    if (k->ntensor_maps > 0)
        k->body = protocols(&c, k->body, false);
    if (c.bar)
        prepend_barrier_init(&c);
    return c.ok;
}
