/*
 * tile_util.c -- walkers, index builders and layout helpers shared by the
 * tile-level passes (see tile_util.h).
 *
 * The index builders fold only what is locally obvious (two constants, an
 * identity operand); everything else is left to pass_simplify, which knows
 * the kernel's facts.  The folding matters for readability of the lowered
 * IR (goldens, --dump-after) and for vectorize, which pattern-matches
 * `base + v` in the last index.
 */
#include <math.h>
#include <string.h>

#include <stdarg.h>
#include <stdio.h>

#include "tile_util.h"

Expr *pass_index(Kernel *k, int64_t value)
{
    return ir_int(k, PASS_INDEX_TYPE, value);
}

static bool is_int_const(const Expr *e, int64_t value)
{
    return e->kind == EXPR_INT && e->u.int_value == value;
}

/* Floor division and modulo, as the IR defines them on integers. */
static int64_t floor_div(int64_t a, int64_t b)
{
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0)))
        q--;
    return q;
}

static int64_t floor_mod(int64_t a, int64_t b)
{
    return a - floor_div(a, b) * b;
}

/* Brings b to a's integer type so ir_binary sees agreeing operands. */
static Expr *match_type(Kernel *k, const Expr *a, Expr *b)
{
    if (a->dtype == b->dtype)
        return b;
    if (b->kind == EXPR_INT)
        return ir_int(k, a->dtype, b->u.int_value);
    return ir_cast(k, CAST_CONVERT, a->dtype, b);
}

Expr *pass_add(Kernel *k, Expr *a, Expr *b)
{
    b = match_type(k, a, b);
    if (a->kind == EXPR_INT && b->kind == EXPR_INT)
        return ir_int(k, a->dtype, a->u.int_value + b->u.int_value);
    if (is_int_const(a, 0))
        return b;
    if (is_int_const(b, 0))
        return a;
    return ir_binary(k, BIN_ADD, a, b);
}

Expr *pass_mul(Kernel *k, Expr *a, Expr *b)
{
    b = match_type(k, a, b);
    if (a->kind == EXPR_INT && b->kind == EXPR_INT)
        return ir_int(k, a->dtype, a->u.int_value * b->u.int_value);
    if (is_int_const(a, 0) || is_int_const(b, 0))
        return ir_int(k, a->dtype, 0);
    if (is_int_const(a, 1))
        return b;
    if (is_int_const(b, 1))
        return a;
    return ir_binary(k, BIN_MUL, a, b);
}

Expr *pass_div(Kernel *k, Expr *a, Expr *b)
{
    b = match_type(k, a, b);
    if (a->kind == EXPR_INT && b->kind == EXPR_INT && b->u.int_value != 0)
        return ir_int(k, a->dtype,
                      floor_div(a->u.int_value, b->u.int_value));
    if (is_int_const(b, 1))
        return a;
    return ir_binary(k, BIN_DIV, a, b);
}

Expr *pass_mod(Kernel *k, Expr *a, Expr *b)
{
    b = match_type(k, a, b);
    if (a->kind == EXPR_INT && b->kind == EXPR_INT && b->u.int_value != 0)
        return ir_int(k, a->dtype,
                      floor_mod(a->u.int_value, b->u.int_value));
    if (is_int_const(b, 1))
        return ir_int(k, a->dtype, 0);
    return ir_binary(k, BIN_MOD, a, b);
}

Expr *pass_and(Kernel *k, Expr *a, Expr *b)
{
    if (!a)
        return b;
    if (!b)
        return a;
    return ir_binary(k, BIN_LAND, a, b);
}

Expr *pass_convert(Kernel *k, Expr *value, DType to)
{
    DType from = value->dtype;
    if (from == to)
        return value;
    bool narrow_from = ir_dtype_is_float(from) && from != DT_F32 &&
                       from != DT_F64;
    bool narrow_to = ir_dtype_is_float(to) && to != DT_F32 && to != DT_F64;
    if (narrow_from && narrow_to)
        value = ir_cast(k, CAST_CONVERT, DT_F32, value);
    return ir_cast(k, CAST_CONVERT, to, value);
}

/* ---- walkers ----------------------------------------------------------- */

Expr *pass_rewrite_expr(Expr *e, PassExprFn fn, void *ctx)
{
    if (!e)
        return NULL;
    switch (e->kind) {
    case EXPR_INT:
    case EXPR_FLOAT:
    case EXPR_VAR:
        break;
    case EXPR_LOAD:
        for (int d = 0; d < e->u.load.buffer->rank; d++)
            e->u.load.indices[d] =
                pass_rewrite_expr(e->u.load.indices[d], fn, ctx);
        e->u.load.predicate = pass_rewrite_expr(e->u.load.predicate, fn, ctx);
        break;
    case EXPR_UNARY:
        e->u.unary.operand = pass_rewrite_expr(e->u.unary.operand, fn, ctx);
        break;
    case EXPR_BINARY:
        e->u.binary.lhs = pass_rewrite_expr(e->u.binary.lhs, fn, ctx);
        e->u.binary.rhs = pass_rewrite_expr(e->u.binary.rhs, fn, ctx);
        break;
    case EXPR_SELECT:
        e->u.select.cond = pass_rewrite_expr(e->u.select.cond, fn, ctx);
        e->u.select.then_value =
            pass_rewrite_expr(e->u.select.then_value, fn, ctx);
        e->u.select.else_value =
            pass_rewrite_expr(e->u.select.else_value, fn, ctx);
        break;
    case EXPR_CAST:
        e->u.cast.value = pass_rewrite_expr(e->u.cast.value, fn, ctx);
        break;
    case EXPR_CALL:
        for (int i = 0; i < e->u.call.nargs; i++)
            e->u.call.args[i] = pass_rewrite_expr(e->u.call.args[i], fn, ctx);
        break;
    case EXPR_RAMP:
        e->u.ramp.base = pass_rewrite_expr(e->u.ramp.base, fn, ctx);
        break;
    case EXPR_BROADCAST:
        e->u.broadcast.value =
            pass_rewrite_expr(e->u.broadcast.value, fn, ctx);
        break;
    case EXPR_COUNT:
        ice("bad expression kind");
    }
    return fn(ctx, e);
}

/* A region with no buffer (a COPY's barrier before lower_tma) has no
 * starts. */
static void rewrite_region(Region *r, PassExprFn fn, void *ctx)
{
    for (int d = 0; r->buffer && d < r->buffer->rank; d++)
        r->start[d] = pass_rewrite_expr(r->start[d], fn, ctx);
}

void pass_rewrite_stmt_exprs(Stmt *s, bool recurse, PassExprFn fn,
                             void *ctx)
{
    if (!s)
        return;
    switch (s->kind) {
    case STMT_SEQ:
        if (recurse)
            for (int i = 0; i < s->u.seq.count; i++)
                pass_rewrite_stmt_exprs(s->u.seq.items[i], true, fn, ctx);
        break;
    case STMT_LET:
        s->u.let.value = pass_rewrite_expr(s->u.let.value, fn, ctx);
        break;
    case STMT_ASSIGN:
        s->u.assign.value = pass_rewrite_expr(s->u.assign.value, fn, ctx);
        break;
    case STMT_STORE:
        for (int d = 0; d < s->u.store.buffer->rank; d++)
            s->u.store.indices[d] =
                pass_rewrite_expr(s->u.store.indices[d], fn, ctx);
        s->u.store.value = pass_rewrite_expr(s->u.store.value, fn, ctx);
        s->u.store.predicate =
            pass_rewrite_expr(s->u.store.predicate, fn, ctx);
        break;
    case STMT_FOR:
        s->u.loop.begin = pass_rewrite_expr(s->u.loop.begin, fn, ctx);
        s->u.loop.end = pass_rewrite_expr(s->u.loop.end, fn, ctx);
        if (recurse)
            pass_rewrite_stmt_exprs(s->u.loop.body, true, fn, ctx);
        break;
    case STMT_PARALLEL:
        if (recurse)
            pass_rewrite_stmt_exprs(s->u.parallel.body, true, fn, ctx);
        break;
    case STMT_IF:
        s->u.if_.cond = pass_rewrite_expr(s->u.if_.cond, fn, ctx);
        if (recurse) {
            pass_rewrite_stmt_exprs(s->u.if_.then_body, true, fn, ctx);
            pass_rewrite_stmt_exprs(s->u.if_.else_body, true, fn, ctx);
        }
        break;
    case STMT_COPY:
        rewrite_region(&s->u.copy.src, fn, ctx);
        rewrite_region(&s->u.copy.dst, fn, ctx);
        rewrite_region(&s->u.copy.barrier, fn, ctx);
        break;
    case STMT_GEMM:
        rewrite_region(&s->u.gemm.a, fn, ctx);
        rewrite_region(&s->u.gemm.b, fn, ctx);
        break;
    case STMT_MBARRIER:
        rewrite_region(&s->u.mbarrier.bar, fn, ctx);
        s->u.mbarrier.value = pass_rewrite_expr(s->u.mbarrier.value, fn, ctx);
        break;
    case STMT_TMA:
        rewrite_region(&s->u.tma.smem, fn, ctx);
        rewrite_region(&s->u.tma.bar, fn, ctx);
        for (int d = 0; d < IR_MAX_RANK; d++)
            s->u.tma.coords[d] = pass_rewrite_expr(s->u.tma.coords[d], fn, ctx);
        break;
    case STMT_WGMMA:
        rewrite_region(&s->u.wgmma.a, fn, ctx);
        rewrite_region(&s->u.wgmma.b, fn, ctx);
        s->u.wgmma.scale_d = pass_rewrite_expr(s->u.wgmma.scale_d, fn, ctx);
        break;
    case STMT_FILL:
        rewrite_region(&s->u.fill.dst, fn, ctx);
        s->u.fill.value = pass_rewrite_expr(s->u.fill.value, fn, ctx);
        break;
    case STMT_ATOMIC:
        for (int d = 0; d < s->u.atomic.buffer->rank; d++)
            s->u.atomic.indices[d] =
                pass_rewrite_expr(s->u.atomic.indices[d], fn, ctx);
        s->u.atomic.value = pass_rewrite_expr(s->u.atomic.value, fn, ctx);
        break;
    case STMT_EVAL:
        s->u.eval.value = pass_rewrite_expr(s->u.eval.value, fn, ctx);
        break;
    case STMT_ASSERT:
        s->u.assert_.cond = pass_rewrite_expr(s->u.assert_.cond, fn, ctx);
        break;
    case STMT_ALLOC:
    case STMT_BARRIER:
    case STMT_REDUCE:
    case STMT_RETURN:
    case STMT_FENCE:
        break;
    case STMT_COUNT:
        ice("bad statement kind");
    }
}

void pass_visit_stmts(Stmt *s, PassStmtFn fn, void *ctx)
{
    if (!s)
        return;
    fn(ctx, s);
    switch (s->kind) {
    case STMT_SEQ:
        for (int i = 0; i < s->u.seq.count; i++)
            pass_visit_stmts(s->u.seq.items[i], fn, ctx);
        break;
    case STMT_FOR:
        pass_visit_stmts(s->u.loop.body, fn, ctx);
        break;
    case STMT_PARALLEL:
        pass_visit_stmts(s->u.parallel.body, fn, ctx);
        break;
    case STMT_IF:
        pass_visit_stmts(s->u.if_.then_body, fn, ctx);
        pass_visit_stmts(s->u.if_.else_body, fn, ctx);
        break;
    default:
        break;
    }
}

/* ---- buffer accesses --------------------------------------------------- */

static void add_use(PassBufferUse *uses, int *count, Buffer *buffer,
                    const Region *region, bool read, bool write)
{
    if (!buffer || *count == PASS_MAX_BUFFER_USES)
        return;
    uses[(*count)++] = (PassBufferUse){buffer, region, read, write};
}

int pass_stmt_buffer_uses(const Stmt *s, PassBufferUse uses[PASS_MAX_BUFFER_USES])
{
    int n = 0;
    if (!s)
        return 0;
    switch (s->kind) {
    case STMT_STORE:
        add_use(uses, &n, s->u.store.buffer, NULL, false, true);
        break;
    case STMT_ATOMIC:
        add_use(uses, &n, s->u.atomic.buffer, NULL, true, true);
        break;
    case STMT_COPY:
        add_use(uses, &n, s->u.copy.src.buffer, &s->u.copy.src, true, false);
        add_use(uses, &n, s->u.copy.dst.buffer, &s->u.copy.dst, false, true);
        /* a TMA load completes its bytes on the mbarrier */
        add_use(uses, &n, s->u.copy.barrier.buffer, &s->u.copy.barrier, true, true);
        break;
    case STMT_FILL:
        add_use(uses, &n, s->u.fill.dst.buffer, &s->u.fill.dst, false, true);
        break;
    case STMT_REDUCE:
        add_use(uses, &n, s->u.reduce.src, NULL, true, false);
        add_use(uses, &n, s->u.reduce.dst, NULL, !s->u.reduce.clear, true);
        break;
    case STMT_GEMM:
        add_use(uses, &n, s->u.gemm.a.buffer, &s->u.gemm.a, true, false);
        add_use(uses, &n, s->u.gemm.b.buffer, &s->u.gemm.b, true, false);
        add_use(uses, &n, s->u.gemm.c, NULL, !s->u.gemm.clear, true);
        break;
    case STMT_MBARRIER:
        /* init, arrive and expect_tx change the barrier's state; wait
         * only observes it */
        add_use(uses, &n, s->u.mbarrier.bar.buffer, &s->u.mbarrier.bar, true,
                s->u.mbarrier.op != MBAR_WAIT);
        break;
    case STMT_TMA:
        add_use(uses, &n, s->u.tma.smem.buffer, &s->u.tma.smem, s->u.tma.store,
                !s->u.tma.store);
        add_use(uses, &n, s->u.tma.bar.buffer, &s->u.tma.bar, true, true);
        break;
    case STMT_WGMMA:
        add_use(uses, &n, s->u.wgmma.a.buffer, &s->u.wgmma.a, true, false);
        add_use(uses, &n, s->u.wgmma.b.buffer, &s->u.wgmma.b, true, false);
        /* scale_d may be false at run time only: the accumulator counts
         * as read */
        add_use(uses, &n, s->u.wgmma.acc, NULL, true, true);
        break;
    default:
        break;
    }
    return n;
}

/* ---- shapes ------------------------------------------------------------ */

int pass_region_shape(const Region *r, int64_t shape[IR_MAX_RANK])
{
    int n = 0;
    for (int d = 0; d < r->buffer->rank; d++)
        if (r->extent[d] > 0)
            shape[n++] = r->extent[d];
    return n;
}

bool pass_buffer_const_shape(const Buffer *b, int64_t shape[IR_MAX_RANK])
{
    for (int d = 0; d < b->rank; d++) {
        if (!b->shape[d] || b->shape[d]->kind != EXPR_INT)
            return false;
        shape[d] = b->shape[d]->u.int_value;
    }
    return true;
}

const char *pass_format_extents(Arena *arena, const int64_t *extent,
                                int rank)
{
    char buf[IR_MAX_RANK * 24 + 4];
    size_t n = 0;
    buf[n++] = '[';
    for (int d = 0; d < rank; d++)
        n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%lld",
                              d ? ", " : "", (long long)extent[d]);
    snprintf(buf + n, sizeof buf - n, "]");
    return arena_strdup(arena, buf);
}

/* ---- layouts ----------------------------------------------------------- */

static int64_t product(const int64_t *extent, int rank)
{
    int64_t p = 1;
    for (int d = 0; d < rank; d++)
        p *= extent[d];
    return p;
}

Layout *pass_new_tile_layout(Kernel *k, int rank, const int64_t *extent,
                             int threads, int vec)
{
    Layout *l = arena_alloc(k->arena, sizeof *l);
    l->rank = rank;
    memcpy(l->extent, extent, sizeof(int64_t) * (size_t)rank);
    l->threads = threads;
    l->vec = vec;
    int64_t chunks = product(extent, rank) / vec;
    l->slots = (chunks + threads - 1) / threads;
    return l;
}

Layout *pass_new_mma_layout(Kernel *k, int64_t m, int64_t n, int warpgroups)
{
    Layout *l = arena_alloc(k->arena, sizeof *l);
    l->kind = LAYOUT_MMA;
    l->rank = 2;
    l->extent[0] = m;
    l->extent[1] = n;
    l->warpgroups = warpgroups;
    l->threads = 128 * warpgroups;
    l->vec = 2;
    l->slots = warpgroups > 0 ? m / (64 * (int64_t)warpgroups) : 0;
    return l;
}

int64_t pass_layout_chunks(const Layout *l)
{
    if (l->reduced)
        return product(l->parent_extent, l->parent_rank) / l->vec;
    return product(l->extent, l->rank) / l->vec;
}

bool pass_layout_equal(const Layout *a, const Layout *b)
{
    if (a->kind != b->kind || a->rank != b->rank || a->threads != b->threads ||
        a->vec != b->vec || a->reduced != b->reduced ||
        a->warpgroups != b->warpgroups)
        return false;
    for (int d = 0; d < a->rank; d++)
        if (a->extent[d] != b->extent[d])
            return false;
    if (!a->reduced)
        return true;
    if (a->parent_rank != b->parent_rank || a->group != b->group)
        return false;
    for (int d = 0; d < a->parent_rank; d++)
        if (a->parent_extent[d] != b->parent_extent[d])
            return false;
    return true;
}

const char *pass_format_layout(Arena *arena, const Layout *l)
{
    const char *shape = pass_format_extents(arena, l->extent, l->rank);
    if (l->kind == LAYOUT_MMA)
        return arena_printf(arena, "mma %s (%d threads, %d warpgroups)", shape,
                            l->threads, l->warpgroups);
    if (!l->reduced)
        return arena_printf(arena, "tile %s (%d threads, vec %d)", shape,
                            l->threads, l->vec);
    return arena_printf(
        arena, "reduced %s of %s (%d threads, vec %d, group %d)", shape,
        pass_format_extents(arena, l->parent_extent, l->parent_rank),
        l->threads, l->vec, l->group);
}

void pass_error(Diag *diag, bool *ok, Loc loc, const char *fmt, ...)
{
    char message[1024];
    va_list args;
    va_start(args, fmt);
    vsnprintf(message, sizeof message, fmt, args);
    va_end(args);
    diag_error(diag, loc, "%s", message);
    *ok = false;
}
