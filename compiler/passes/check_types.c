/*
 * check_types.c -- shape and type checks of the tile-level IR.
 *
 * The front end already checks most of this against the source; what is
 * checked here is what only becomes decidable once every template argument
 * is a number: the two regions of a copy have one shape, a region or a
 * constant index stays inside a shared, fragment or local buffer, a reduce
 * names a real dimension and a result of the right shape, a fill value
 * converts to the destination, PARALLEL loops do not nest, a GEMM has
 * operands of the scopes, dtypes and shapes wgmma can take (docs/hopper.md
 * section 1) and stays at block level, and a PIPELINED loop has at least
 * one stage.  Global
 * tensors have run-time shapes; their accesses are masked by
 * lower_tile_ops instead.  A copy between two global tensors at block
 * level is allowed (it becomes an ordinary parallel loop).
 *
 * Index bounds come from a small interval evaluation: constants, PARALLEL
 * vars ([0, extent)), FOR vars with constant bounds, LETs of those, and
 * + - * / % min max over them.  Anything else is "unknown" and passes.
 *
 * requires: tile level.  Changes nothing.
 */
#include <stdio.h>

#include "tile_util.h"

typedef struct {
    int64_t lo, hi;
    bool known;
} Range;

typedef struct {
    Kernel *k;
    Diag *diag;
    bool ok;
    Range *vars; /* by Var.id */
    int nvars;
    int parallel_depth;
} CheckCtx;


/* ---- interval evaluation ----------------------------------------------- */

static const Range unknown = {0, 0, false};

static int64_t min4(int64_t a, int64_t b, int64_t c, int64_t d)
{
    int64_t m = a < b ? a : b;
    m = m < c ? m : c;
    return m < d ? m : d;
}

static int64_t max4(int64_t a, int64_t b, int64_t c, int64_t d)
{
    int64_t m = a > b ? a : b;
    m = m > c ? m : c;
    return m > d ? m : d;
}

static int64_t floor_div(int64_t a, int64_t b)
{
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0)))
        q--;
    return q;
}

static Range range_of(CheckCtx *ctx, const Expr *e)
{
    if (!e || !ir_dtype_is_int(e->dtype) || e->lanes != 1)
        return unknown;
    switch (e->kind) {
    case EXPR_INT:
        return (Range){e->u.int_value, e->u.int_value, true};
    case EXPR_VAR:
        if (e->u.var->id >= 0 && e->u.var->id < ctx->nvars)
            return ctx->vars[e->u.var->id];
        return unknown;
    case EXPR_BINARY: {
        Range a = range_of(ctx, e->u.binary.lhs);
        Range b = range_of(ctx, e->u.binary.rhs);
        if (!a.known || !b.known)
            return unknown;
        switch (e->u.binary.op) {
        case BIN_ADD:
            return (Range){a.lo + b.lo, a.hi + b.hi, true};
        case BIN_SUB:
            return (Range){a.lo - b.hi, a.hi - b.lo, true};
        case BIN_MUL:
            return (Range){min4(a.lo * b.lo, a.lo * b.hi, a.hi * b.lo,
                                a.hi * b.hi),
                           max4(a.lo * b.lo, a.lo * b.hi, a.hi * b.lo,
                                a.hi * b.hi), true};
        case BIN_DIV:   /* floor division is monotone in a for b > 0 */
            if (b.lo != b.hi || b.lo <= 0)
                return unknown;
            return (Range){floor_div(a.lo, b.lo), floor_div(a.hi, b.lo), true};
        case BIN_MOD:
            if (b.lo != b.hi || b.lo <= 0)
                return unknown;
            if (a.lo >= 0 && a.hi < b.lo)
                return a;
            return (Range){0, b.lo - 1, true};
        case BIN_MIN:
            return (Range){a.lo < b.lo ? a.lo : b.lo,
                           a.hi < b.hi ? a.hi : b.hi, true};
        case BIN_MAX:
            return (Range){a.lo > b.lo ? a.lo : b.lo,
                           a.hi > b.hi ? a.hi : b.hi, true};
        default:
            return unknown;
        }
    }
    default:
        return unknown;
    }
}

static void set_range(CheckCtx *ctx, const Var *v, Range r)
{
    if (v && v->id >= 0 && v->id < ctx->nvars)
        ctx->vars[v->id] = r;
}

/* ---- accesses and regions ---------------------------------------------- */

static bool bounded(const Buffer *b)
{
    return b->scope != SCOPE_GLOBAL;
}

static void check_index(CheckCtx *ctx, Loc loc, const Buffer *b, int d,
                        Range r, int64_t extent)
{
    int64_t shape[IR_MAX_RANK];
    if (!r.known || !bounded(b) || !pass_buffer_const_shape(b, shape))
        return;
    int64_t last = r.hi + (extent > 0 ? extent - 1 : 0);
    if (r.lo >= 0 && last < shape[d])
        return;
    const char *span = r.lo == last
        ? arena_printf(ctx->k->arena, "index %lld", (long long)r.lo)
        : arena_printf(ctx->k->arena, "indices %lld..%lld", (long long)r.lo,
                       (long long)last);
    pass_error(ctx->diag, &ctx->ok, loc, "%s of dim %d of '%s' out of bounds (shape %s)", span, d,
          b->name, pass_format_extents(ctx->k->arena, shape, b->rank));
}

typedef struct {
    CheckCtx *ctx;
    Loc loc;
} AccessCheck;

static Expr *check_load(void *opaque, Expr *e)
{
    AccessCheck *check = opaque;
    if (e->kind != EXPR_LOAD)
        return e;
    const Buffer *b = e->u.load.buffer;
    if (b->scope == SCOPE_FRAGMENT && check->ctx->parallel_depth == 0)
        return e;   /* infer_layouts reports the access itself */
    for (int d = 0; d < b->rank; d++)
        check_index(check->ctx, e->loc.line ? e->loc : check->loc, b, d,
                    range_of(check->ctx, e->u.load.indices[d]), 0);
    return e;
}

static void check_region(CheckCtx *ctx, Loc loc, const Region *r,
                         const char *what)
{
    const Buffer *b = r->buffer;
    int64_t shape[IR_MAX_RANK];
    bool constant = bounded(b) && pass_buffer_const_shape(b, shape);
    for (int d = 0; d < b->rank; d++) {
        if (r->extent[d] < 0) {
            pass_error(ctx->diag, &ctx->ok, loc, "%s region of '%s': negative extent on dim %d",
                  what, b->name, d);
            continue;
        }
        if (constant && r->extent[d] > shape[d]) {
            pass_error(ctx->diag, &ctx->ok, loc,
                  "%s region of '%s': extent %lld on dim %d exceeds the "
                  "shape %s", what, b->name, (long long)r->extent[d], d,
                  pass_format_extents(ctx->k->arena, shape, b->rank));
            continue;
        }
        Range start = r->start[d] ? range_of(ctx, r->start[d])
                                  : (Range){0, 0, true};
        check_index(ctx, loc, b, d, start, r->extent[d]);
    }
}

static void check_copy(CheckCtx *ctx, Stmt *s)
{
    int64_t src[IR_MAX_RANK], dst[IR_MAX_RANK];
    int n = pass_region_shape(&s->u.copy.src, src);
    int m = pass_region_shape(&s->u.copy.dst, dst);
    bool same = n == m;
    for (int d = 0; same && d < n; d++)
        same = src[d] == dst[d];
    if (!same)
        pass_error(ctx->diag, &ctx->ok, s->loc, "copy from '%s' %s to '%s' %s: the shapes differ",
              s->u.copy.src.buffer->name,
              pass_format_extents(ctx->k->arena, src, n),
              s->u.copy.dst.buffer->name,
              pass_format_extents(ctx->k->arena, dst, m));
    check_region(ctx, s->loc, &s->u.copy.src, "copy source");
    check_region(ctx, s->loc, &s->u.copy.dst, "copy destination");
}

static void check_fill(CheckCtx *ctx, Stmt *s)
{
    const Buffer *b = s->u.fill.dst.buffer;
    const Expr *v = s->u.fill.value;
    check_region(ctx, s->loc, &s->u.fill.dst, "fill");
    if (!v || v->lanes != 1 || v->dtype == DT_VOID ||
        (v->dtype == DT_BOOL) != (b->dtype == DT_BOOL))
        pass_error(ctx->diag, &ctx->ok, s->loc, "fill of '%s' (%s) with a %s value", b->name,
              ir_dtype_name(b->dtype),
              v ? ir_dtype_name(v->dtype) : "missing");
}

static void check_reduce(CheckCtx *ctx, Stmt *s)
{
    const Buffer *src = s->u.reduce.src, *dst = s->u.reduce.dst;
    int dim = s->u.reduce.dim;
    Arena *arena = ctx->k->arena;
    if (src->scope != SCOPE_FRAGMENT || dst->scope != SCOPE_FRAGMENT) {
        const Buffer *bad = src->scope != SCOPE_FRAGMENT ? src : dst;
        pass_error(ctx->diag, &ctx->ok, s->loc, "reduce works on fragments: '%s' is a %s buffer",
              bad->name, ir_scope_name(bad->scope));
        return;
    }
    if (dim < 0 || dim >= src->rank) {
        pass_error(ctx->diag, &ctx->ok, s->loc, "reduce over dim %d of '%s', which has rank %d",
              dim, src->name, src->rank);
        return;
    }
    if (src->dtype == DT_BOOL || dst->dtype == DT_BOOL ||
        src->dtype == DT_VOID || dst->dtype == DT_VOID) {
        pass_error(ctx->diag, &ctx->ok, s->loc, "reduce %s of '%s' (%s) into '%s' (%s): not a "
              "numeric type", ir_reduce_name(s->u.reduce.op), src->name,
              ir_dtype_name(src->dtype), dst->name, ir_dtype_name(dst->dtype));
        return;
    }
    int64_t shape[IR_MAX_RANK], want[IR_MAX_RANK], have[IR_MAX_RANK];
    if (!pass_buffer_const_shape(src, shape) ||
        !pass_buffer_const_shape(dst, have))
        return;
    int n = 0;
    for (int d = 0; d < src->rank; d++)
        if (d != dim)
            want[n++] = shape[d];
    bool same = dst->rank == n;
    for (int d = 0; same && d < n; d++)
        same = have[d] == want[d];
    if (!same)
        pass_error(ctx->diag, &ctx->ok, s->loc,
              "reduce over dim %d of '%s' %s gives shape %s, but '%s' has "
              "shape %s", dim, src->name,
              pass_format_extents(arena, shape, src->rank),
              pass_format_extents(arena, want, n), dst->name,
              pass_format_extents(arena, have, dst->rank));
}

/* ---- gemm ---------------------------------------------------------------- */

static bool is_fp8(DType t)
{
    return t == DT_E4M3 || t == DT_E5M2;
}

/* "sa [128, 64]" or "sb [256, 64] (transposed)": an operand as the
 * messages show it. */
static const char *operand_text(Arena *arena, const Region *r,
                                const int64_t *shape, int rank,
                                bool transposed)
{
    return arena_printf(arena, "'%s' %s%s", r->buffer->name,
                        pass_format_extents(arena, shape, rank),
                        transposed ? " (transposed)" : "");
}

static const char *check_gemm_types(Arena *arena, const Stmt *s)
{
    const Region *a = &s->u.gemm.a, *b = &s->u.gemm.b;
    const Buffer *c = s->u.gemm.c;
    DType ta = a->buffer->dtype, tb = b->buffer->dtype;
    if (a->buffer->scope != SCOPE_SHARED && a->buffer->scope != SCOPE_FRAGMENT)
        return arena_printf(arena, "gemm operand A '%s' is a %s buffer; it "
                            "must be shared or a fragment", a->buffer->name,
                            ir_scope_name(a->buffer->scope));
    if (b->buffer->scope != SCOPE_SHARED)
        return arena_printf(arena, "gemm operand B '%s' is a %s buffer; it "
                            "must be shared", b->buffer->name,
                            ir_scope_name(b->buffer->scope));
    if (c->scope != SCOPE_FRAGMENT)
        return arena_printf(arena, "gemm accumulator C '%s' is a %s buffer; "
                            "it must be a fragment", c->name,
                            ir_scope_name(c->scope));
    if (c->dtype != DT_F32)
        return arena_printf(arena, "gemm accumulator C '%s' is %s; it must "
                            "be f32", c->name, ir_dtype_name(c->dtype));
    bool sixteen = (ta == DT_BF16 || ta == DT_F16) && ta == tb;
    if (!sixteen && !(is_fp8(ta) && is_fp8(tb)))
        return arena_printf(arena, "gemm of %s '%s' by %s '%s': the operands "
                            "must be bf16 x bf16, f16 x f16 or fp8 x fp8 "
                            "(e4m3, e5m2)", ir_dtype_name(ta),
                            a->buffer->name, ir_dtype_name(tb),
                            b->buffer->name);
    if (is_fp8(ta) && (s->u.gemm.transpose_a || !s->u.gemm.transpose_b))
        return arena_printf(arena, "an fp8 gemm needs transpose_a = false "
                            "and transpose_b = true (A [M, K] and B [N, K], "
                            "the K-major form Hopper reads fp8 in)");
    if (a->buffer->scope == SCOPE_FRAGMENT && s->u.gemm.transpose_a)
        return arena_printf(arena, "gemm operand A '%s' is a fragment, "
                            "which cannot be transposed", a->buffer->name);
    return NULL;
}

const char *pass_check_gemm(Arena *arena, const Stmt *s)
{
    const Region *a = &s->u.gemm.a, *b = &s->u.gemm.b;
    const Buffer *c = s->u.gemm.c;
    if (!a->buffer || !b->buffer || !c)
        return "gemm with a missing operand";
    /* wgmma.wait_group takes 0..7 pending groups */
    if (s->u.gemm.wait < 0 || s->u.gemm.wait > 7)
        return arena_printf(arena, "gemm wait = %d: the wgmma groups left in "
                            "flight must be 0 to 7", s->u.gemm.wait);
    const char *problem = check_gemm_types(arena, s);
    if (problem)
        return problem;
    int64_t sa[IR_MAX_RANK], sb[IR_MAX_RANK], sc[IR_MAX_RANK];
    int na = pass_region_shape(a, sa), nb = pass_region_shape(b, sb);
    const char *roles[2] = {"A", "B"};
    const Region *regions[2] = {a, b};
    int ranks[2] = {na, nb};
    const int64_t *shapes[2] = {sa, sb};
    for (int i = 0; i < 2; i++)
        if (ranks[i] != 2)
            return arena_printf(arena, "gemm operand %s %s is not 2-d; index "
                                "its leading dimensions, e.g. %s[s]",
                                roles[i],
                                operand_text(arena, regions[i], shapes[i],
                                             ranks[i], false),
                                regions[i]->buffer->name);
    if (!pass_buffer_const_shape(c, sc) || c->rank != 2)
        return arena_printf(arena, "gemm accumulator C '%s' must be a 2-d "
                            "fragment [M, N]", c->name);
    bool ta = s->u.gemm.transpose_a, tb = s->u.gemm.transpose_b;
    int64_t m = ta ? sa[1] : sa[0], ka = ta ? sa[0] : sa[1];
    int64_t kb = tb ? sb[1] : sb[0], n = tb ? sb[0] : sb[1];
    if (ka != kb)
        return arena_printf(arena, "gemm K differs: A %s has K = %lld but B "
                            "%s has K = %lld",
                            operand_text(arena, a, sa, 2, ta), (long long)ka,
                            operand_text(arena, b, sb, 2, tb), (long long)kb);
    if (m != sc[0] || n != sc[1])
        return arena_printf(arena, "gemm shapes disagree: A %s and B %s give "
                            "[M, N] = [%lld, %lld] but C '%s' is %s",
                            operand_text(arena, a, sa, 2, ta),
                            operand_text(arena, b, sb, 2, tb), (long long)m,
                            (long long)n, c->name,
                            pass_format_extents(arena, sc, 2));
    return NULL;
}

static void check_gemm(CheckCtx *ctx, Stmt *s)
{
    if (ctx->parallel_depth > 0)
        pass_error(ctx->diag, &ctx->ok, s->loc, "gemm inside a parallel loop");
    const char *problem = pass_check_gemm(ctx->k->arena, s);
    if (problem) {
        pass_error(ctx->diag, &ctx->ok, s->loc, "%s", problem);
        return;
    }
    check_region(ctx, s->loc, &s->u.gemm.a, "gemm A");
    check_region(ctx, s->loc, &s->u.gemm.b, "gemm B");
}

/* ---- the walk ---------------------------------------------------------- */

static void check_stmt(CheckCtx *ctx, Stmt *s)
{
    if (!s)
        return;
    AccessCheck access = {ctx, s->loc};
    pass_rewrite_stmt_exprs(s, false, check_load, &access);
    switch (s->kind) {
    case STMT_SEQ:
        for (int i = 0; i < s->u.seq.count; i++)
            check_stmt(ctx, s->u.seq.items[i]);
        break;
    case STMT_LET:
        if (s->u.let.var->kind == VAR_LET)
            set_range(ctx, s->u.let.var, range_of(ctx, s->u.let.value));
        break;
    case STMT_STORE: {
        const Buffer *b = s->u.store.buffer;
        if (b->scope == SCOPE_FRAGMENT && ctx->parallel_depth == 0)
            break;
        for (int d = 0; d < b->rank; d++)
            check_index(ctx, s->loc, b, d,
                        range_of(ctx, s->u.store.indices[d]), 0);
        break;
    }
    case STMT_FOR: {
        Range begin = range_of(ctx, s->u.loop.begin);
        Range end = range_of(ctx, s->u.loop.end);
        Range r = unknown;
        if (s->u.loop.step == 1 && begin.known && end.known &&
            begin.lo == begin.hi && end.lo == end.hi && end.lo > begin.lo)
            r = (Range){begin.lo, end.lo - 1, true};
        set_range(ctx, s->u.loop.var, r);
        if (s->u.loop.kind == LOOP_PIPELINED && ctx->parallel_depth > 0)
            pass_error(ctx->diag, &ctx->ok, s->loc,
                       "pipelined loop inside a parallel loop");
        if (s->u.loop.kind == LOOP_PIPELINED && s->u.loop.stages < 1)
            pass_error(ctx->diag, &ctx->ok, s->loc, "pipelined loop with %d "
                       "stages; it needs at least 1", s->u.loop.stages);
        check_stmt(ctx, s->u.loop.body);
        break;
    }
    case STMT_PARALLEL:
        if (ctx->parallel_depth > 0)
            pass_error(ctx->diag, &ctx->ok, s->loc, "parallel loop nested in a parallel loop");
        for (int d = 0; d < s->u.parallel.rank; d++) {
            int64_t extent = s->u.parallel.extent[d];
            if (extent <= 0)
                pass_error(ctx->diag, &ctx->ok, s->loc, "parallel loop over %s: extents must be "
                      "positive", pass_format_extents(ctx->k->arena,
                                                      s->u.parallel.extent,
                                                      s->u.parallel.rank));
            set_range(ctx, s->u.parallel.vars[d],
                      (Range){0, extent - 1, extent > 0});
        }
        ctx->parallel_depth++;
        check_stmt(ctx, s->u.parallel.body);
        ctx->parallel_depth--;
        break;
    case STMT_IF:
        check_stmt(ctx, s->u.if_.then_body);
        check_stmt(ctx, s->u.if_.else_body);
        break;
    case STMT_COPY:
        check_copy(ctx, s);
        break;
    case STMT_FILL:
        check_fill(ctx, s);
        break;
    case STMT_GEMM:
        check_gemm(ctx, s);
        break;
    case STMT_REDUCE:
        if (ctx->parallel_depth > 0)
            pass_error(ctx->diag, &ctx->ok, s->loc, "reduce inside a parallel loop");
        check_reduce(ctx, s);
        break;
    default:
        break;
    }
}

bool pass_check_types(Kernel *k, Diag *diag)
{
    CheckCtx ctx = {.k = k, .diag = diag, .ok = true, .nvars = k->nvars};
    ctx.vars = arena_alloc(k->arena, sizeof(Range) * (size_t)(k->nvars + 1));
    check_stmt(&ctx, k->body);
    return ctx.ok;
}
