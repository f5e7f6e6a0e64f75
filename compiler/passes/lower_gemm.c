/*
 * lower_gemm.c -- a tile GEMM becomes the wgmma instructions of one
 * warpgroup (docs/hopper.md section 5).
 *
 * wgmma.mma_async multiplies a 64-row slice of A by an n-column slice of B
 * over k = 16 (16-bit types) or 32 (8-bit types) and accumulates into the
 * warpgroup's registers, laid out as LAYOUT_MMA (infer_layouts gave the
 * accumulator that layout).  Every warpgroup runs the same code: its A rows
 * are an expression of thread_idx / 128, so
 *
 *   gemm(A, B, C)  ->  fence wgmma_fence
 *                      for each m-slot ms, N atom na, K step ks:
 *                        wgmma m64n<n>k<k>  A rows 64 (ms W + thread_idx/128)
 *                                           .. +64, cols ks k .. +k;
 *                                           B the atom's n columns, same k;
 *                                           acc registers from
 *                                           ms N/2 + na n/2;
 *                                           scale_d false on the first K
 *                                           step of a clearing gemm
 *                      fence wgmma_commit
 *                      fence wgmma_wait W     (the gemm's wait, 0 unless
 *                                              the program pipelines:
 *                                              W groups stay in flight)
 *
 * The N atom is the widest n <= 256, a multiple of 8, dividing N (the PTX
 * ISA allows every multiple of 8 up to 256 for f32 accumulation, for the
 * 16-bit and the e4m3/e5m2 types alike), so a 256-wide tile is one wgmma
 * per K step.  The WGMMA statements are unrolled here: every operand
 * position is a constant or a warpgroup expression, which is what codegen
 * needs to build the shared-memory descriptors.
 *
 * Shared operands are read through the 128-byte swizzle: their rows must be
 * exactly 128 bytes and they are marked SHARED_ASYNC_SWIZZLE128 for
 * plan_shared.  A fragment A (the register form) holds its [M, K] tile in
 * the MMA layout; the k step's eight 16-bit values start at local index
 * ms K/2 + 8 ks, which the WGMMA's a region records in start[0].  WGMMA
 * transpose flags mirror the gemm's: transpose_b = true is B given as
 * [N, K] (K-major, wgmma's native form); transpose_b = false (and
 * transpose_a = true) are the MN-major forms, legal for 16-bit types only.
 *
 * requires: KSTATE_LAYOUTS, not yet lower_parallel (the accumulator is
 * still the FRAGMENT buffer; lower_parallel turns it into the LOCAL array
 * the WGMMAs name).  guarantees: no GEMM remains.
 */
#include "tile_util.h"

typedef struct {
    Kernel *k;
    Diag *diag;
    bool ok;
} GemmCtx;

/* A 2-D matrix view of a gemm operand: which dims of the region's buffer
 * carry its rows and columns, and their extents. */
typedef struct {
    const Region *region;
    int row_dim, col_dim;
    int64_t rows, cols;
} Operand;

/* The two non-singleton dims of r; false when there are not two. */
static bool operand_view(const Region *r, Operand *op)
{
    int dims[IR_MAX_RANK], n = 0;
    for (int d = 0; d < r->buffer->rank; d++)
        if (r->extent[d] > 0)
            dims[n++] = d;
    if (n != 2)
        return false;
    *op = (Operand){r, dims[0], dims[1], r->extent[dims[0]],
                    r->extent[dims[1]]};
    return true;
}

static bool is_16bit(DType t) { return t == DT_BF16 || t == DT_F16; }
static bool is_8bit(DType t) { return t == DT_E4M3 || t == DT_E5M2; }

/* A shared operand must be a 2-D slice of the buffer's last two dims with
 * 128-byte rows (the swizzle atom: eight such rows), starting on a swizzle
 * row and, inside a row, on a k step. */
static bool check_shared(GemmCtx *ctx, Stmt *s, const Operand *op,
                         const char *role)
{
    Buffer *b = op->region->buffer;
    int rank = b->rank;
    if (op->row_dim != rank - 2 || op->col_dim != rank - 1) {
        pass_error(ctx->diag, &ctx->ok, s->loc,
                   "gemm operand %s '%s': the region must span the buffer's "
                   "last two dimensions (leading ones taken at one index)",
                   role, b->name);
        return false;
    }
    int64_t shape[IR_MAX_RANK];
    if (!pass_buffer_const_shape(b, shape))
        ice("shared buffer '%s' without a constant shape", b->name);
    int64_t row_bytes = shape[rank - 1] * ir_dtype_bits(b->dtype) / 8;
    if (row_bytes != 128) {
        pass_error(ctx->diag, &ctx->ok, s->loc,
                   "gemm operand rows must be 128 bytes (64 bf16 / 128 "
                   "e4m3) on sm_90a: %s '%s' is %s %s, rows of %lld bytes",
                   role, b->name, ir_dtype_name(b->dtype),
                   pass_format_extents(ctx->k->arena, shape, rank),
                   (long long)row_bytes);
        return false;
    }
    const Expr *row0 = op->region->start[op->row_dim];
    if (row0 && row0->kind == EXPR_INT && row0->u.int_value % 8 != 0) {
        pass_error(ctx->diag, &ctx->ok, s->loc,
                   "gemm operand %s '%s' starts at row %lld: the 128-byte "
                   "swizzle needs a multiple of 8", role, b->name,
                   (long long)row0->u.int_value);
        return false;
    }
    if (b->async_kind == SHARED_ASYNC_NONE)
        b->async_kind = SHARED_ASYNC_SWIZZLE128;
    else if (b->async_kind != SHARED_ASYNC_SWIZZLE128)
        ice("gemm operand '%s' has 128-byte rows but async kind %d, not "
            "the 128-byte swizzle", b->name, b->async_kind);
    return true;
}

/* op's region with `rows` rows from row offset `row` and `cols` columns
 * from column offset `col` (offsets relative to the region's start). */
static Region sub_region(Kernel *k, const Operand *op, Expr *row,
                         int64_t rows, Expr *col, int64_t cols)
{
    Region r = *op->region;
    for (int d = 0; d < r.buffer->rank; d++)
        r.start[d] = r.start[d] ? ir_copy_expr(k, r.start[d])
                                : pass_index(k, 0);
    r.start[op->row_dim] = pass_add(k, r.start[op->row_dim], row);
    r.start[op->col_dim] = pass_add(k, r.start[op->col_dim], col);
    r.extent[op->row_dim] = rows;
    r.extent[op->col_dim] = cols;
    return r;
}

/* The register A operand of one k step: local elements [first, first+8). */
static Region register_region(Kernel *k, Buffer *a, int64_t first)
{
    Region r = {.buffer = a};
    for (int d = 0; d < a->rank; d++)
        r.start[d] = pass_index(k, 0);
    r.start[0] = pass_index(k, first);
    r.extent[0] = 8;
    return r;
}

static Stmt *new_fence(Kernel *k, Loc loc, FenceOp op, int64_t value)
{
    Stmt *s = ir_new_stmt(k, STMT_FENCE, loc);
    s->u.fence.op = op;
    s->u.fence.value = value;
    return s;
}

/* The widest wgmma n: a multiple of 8, at most 256, dividing N. */
static int64_t n_atom(int64_t n)
{
    for (int64_t atom = 256; atom >= 8; atom -= 8)
        if (n % atom == 0)
            return atom;
    return 0;
}

/* Does r cover its whole (constant-shaped) buffer? */
static bool whole_fragment(const Region *r)
{
    int64_t shape[IR_MAX_RANK];
    if (!pass_buffer_const_shape(r->buffer, shape))
        return false;
    for (int d = 0; d < r->buffer->rank; d++) {
        const Expr *start = r->start[d];
        if ((start && (start->kind != EXPR_INT || start->u.int_value != 0)) ||
            r->extent[d] != shape[d])
            return false;
    }
    return true;
}

/* Checks the operand types and shapes; fills the A and B views. */
static bool check_gemm(GemmCtx *ctx, Stmt *s, Operand *a, Operand *b,
                       int64_t *m, int64_t *n, int64_t *kdim)
{
    Kernel *k = ctx->k;
    Buffer *abuf = s->u.gemm.a.buffer, *bbuf = s->u.gemm.b.buffer;
    Buffer *c = s->u.gemm.c;
    const Layout *l = c->layout;
    if (!l || l->kind != LAYOUT_MMA)
        ice("gemm accumulator '%s' without the MMA layout", c->name);
    if (c->dtype != DT_F32) {
        pass_error(ctx->diag, &ctx->ok, s->loc,
                   "gemm accumulator '%s' is %s: wgmma accumulates in f32",
                   c->name, ir_dtype_name(c->dtype));
        return false;
    }
    DType at = abuf->dtype, bt = bbuf->dtype;
    if (!((is_16bit(at) && at == bt) || (is_8bit(at) && is_8bit(bt)))) {
        pass_error(ctx->diag, &ctx->ok, s->loc,
                   "gemm operands '%s' (%s) and '%s' (%s): wgmma takes bf16 "
                   "x bf16, f16 x f16 or e4m3/e5m2 x e4m3/e5m2",
                   abuf->name, ir_dtype_name(at), bbuf->name,
                   ir_dtype_name(bt));
        return false;
    }
    if (is_8bit(at) && (s->u.gemm.transpose_a || !s->u.gemm.transpose_b)) {
        pass_error(ctx->diag, &ctx->ok, s->loc,
                   "8-bit gemm needs A as [M, K] and B as [N, K] "
                   "(transpose_a = false, transpose_b = true): wgmma reads "
                   "e4m3/e5m2 operands K-major only");
        return false;
    }
    if (bbuf->scope != SCOPE_SHARED) {
        pass_error(ctx->diag, &ctx->ok, s->loc,
                   "gemm operand B '%s' must be in shared memory, not %s",
                   bbuf->name, ir_scope_name(bbuf->scope));
        return false;
    }
    if (abuf->scope == SCOPE_FRAGMENT && !is_16bit(at)) {
        pass_error(ctx->diag, &ctx->ok, s->loc,
                   "gemm operand A '%s' in registers must be bf16 or f16, "
                   "not %s", abuf->name, ir_dtype_name(at));
        return false;
    }
    if (abuf->scope != SCOPE_SHARED && abuf->scope != SCOPE_FRAGMENT) {
        pass_error(ctx->diag, &ctx->ok, s->loc,
                   "gemm operand A '%s' must be in shared memory or a "
                   "fragment, not %s", abuf->name, ir_scope_name(abuf->scope));
        return false;
    }
    if (!operand_view(&s->u.gemm.a, a) || !operand_view(&s->u.gemm.b, b)) {
        pass_error(ctx->diag, &ctx->ok, s->loc,
                   "gemm operands must be 2-D tiles ('%s', '%s')",
                   abuf->name, bbuf->name);
        return false;
    }
    *m = s->u.gemm.transpose_a ? a->cols : a->rows;
    *kdim = s->u.gemm.transpose_a ? a->rows : a->cols;
    int64_t bk = s->u.gemm.transpose_b ? b->cols : b->rows;
    *n = s->u.gemm.transpose_b ? b->rows : b->cols;
    if (*m != l->extent[0] || *n != l->extent[1] || *kdim != bk) {
        pass_error(ctx->diag, &ctx->ok, s->loc,
                   "gemm shapes disagree: A '%s' gives M = %lld, K = %lld, "
                   "B '%s' K = %lld, N = %lld, accumulator '%s' is %s",
                   abuf->name, (long long)*m, (long long)*kdim, bbuf->name,
                   (long long)bk, (long long)*n, c->name,
                   pass_format_extents(k->arena, l->extent, 2));
        return false;
    }
    int64_t step = is_8bit(at) ? 32 : 16;
    if (*kdim % step != 0) {
        pass_error(ctx->diag, &ctx->ok, s->loc,
                   "gemm K = %lld is not a multiple of wgmma's k step %lld "
                   "for %s", (long long)*kdim, (long long)step,
                   ir_dtype_name(at));
        return false;
    }
    if (abuf->scope == SCOPE_FRAGMENT && !whole_fragment(&s->u.gemm.a)) {
        pass_error(ctx->diag, &ctx->ok, s->loc,
                   "gemm operand A '%s' in registers must be the whole "
                   "fragment: its layout, not a region, says which thread "
                   "holds which element", abuf->name);
        return false;
    }
    if (abuf->scope == SCOPE_FRAGMENT &&
        (!abuf->layout || abuf->layout->kind != LAYOUT_MMA ||
         abuf->layout->warpgroups != l->warpgroups))
        ice("register gemm operand '%s' without the accumulator's MMA "
            "layout", abuf->name);
    bool shared_ok = true;
    if (abuf->scope == SCOPE_SHARED)
        shared_ok = check_shared(ctx, s, a, "A");
    return check_shared(ctx, s, b, "B") && shared_ok;
}

/* 64 (ms W + thread_idx / 128): the first row of the warpgroup's slice. */
static Expr *warpgroup_row(Kernel *k, int64_t slot, int warpgroups)
{
    Expr *row = pass_index(k, 64 * slot * warpgroups);
    if (warpgroups == 1)
        return row;
    Expr *tid = ir_call(k, INTR_THREAD_IDX, PASS_INDEX_TYPE, NULL, 0);
    return pass_add(k, row, pass_mul(k, pass_div(k, tid, pass_index(k, 128)),
                                     pass_index(k, 64)));
}

static Stmt *lower_gemm(GemmCtx *ctx, Stmt *s)
{
    Kernel *k = ctx->k;
    Operand a, b;
    int64_t m, n, kdim;
    if (!check_gemm(ctx, s, &a, &b, &m, &n, &kdim))
        return s;
    Buffer *abuf = s->u.gemm.a.buffer, *c = s->u.gemm.c;
    const Layout *l = c->layout;
    bool trans_a = s->u.gemm.transpose_a, trans_b = s->u.gemm.transpose_b;
    int warpgroups = l->warpgroups;
    int64_t step = is_8bit(abuf->dtype) ? 32 : 16;
    int64_t atom = n_atom(n);
    if (atom == 0)
        ice("gemm N = %lld is not a multiple of 8", (long long)n);

    Stmt *first = new_fence(k, s->loc, FENCE_WGMMA_FENCE, 0);
    Stmt *seq = ir_seq(k, &first, 1);
    for (int64_t slot = 0; slot < l->slots; slot++) {
        for (int64_t na = 0; na < n / atom; na++) {
            for (int64_t ks = 0; ks < kdim / step; ks++) {
                Stmt *w = ir_new_stmt(k, STMT_WGMMA, s->loc);
                Expr *row = warpgroup_row(k, slot, warpgroups);
                Expr *kcol = pass_index(k, ks * step);
                if (abuf->scope == SCOPE_FRAGMENT)
                    w->u.wgmma.a = register_region(
                        k, abuf, slot * (kdim / 2) + ks * 8);
                else if (trans_a)
                    w->u.wgmma.a = sub_region(k, &a, kcol, step, row, 64);
                else
                    w->u.wgmma.a = sub_region(k, &a, row, 64, kcol, step);
                Expr *ncol = pass_index(k, na * atom);
                kcol = pass_index(k, ks * step);
                w->u.wgmma.b = trans_b
                                   ? sub_region(k, &b, ncol, atom, kcol, step)
                                   : sub_region(k, &b, kcol, step, ncol, atom);
                w->u.wgmma.acc = c;
                w->u.wgmma.acc_offset = slot * (n / 2) + na * (atom / 2);
                w->u.wgmma.m = 64;
                w->u.wgmma.n = (int)atom;
                w->u.wgmma.k = (int)step;
                w->u.wgmma.a_dtype = abuf->dtype;
                w->u.wgmma.b_dtype = s->u.gemm.b.buffer->dtype;
                w->u.wgmma.acc_dtype = c->dtype;
                w->u.wgmma.transpose_a = trans_a;
                w->u.wgmma.transpose_b = trans_b;
                w->u.wgmma.scale_d =
                    ir_int(k, DT_BOOL, !(s->u.gemm.clear && ks == 0));
                ir_seq_append(k, seq, w);
            }
        }
    }
    ir_seq_append(k, seq, new_fence(k, s->loc, FENCE_WGMMA_COMMIT, 0));
    ir_seq_append(k, seq, new_fence(k, s->loc, FENCE_WGMMA_WAIT, s->u.gemm.wait));
    return seq;
}

static Stmt *lower_stmt(GemmCtx *ctx, Stmt *s)
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
    case STMT_GEMM:
        return lower_gemm(ctx, s);
    default:
        return s;
    }
}

bool pass_lower_gemm(Kernel *k, Diag *diag)
{
    if (!(k->state & KSTATE_LAYOUTS))
        ice("lower_gemm on kernel %s before infer_layouts", k->name);
    GemmCtx ctx = {.k = k, .diag = diag, .ok = true};
    k->body = lower_stmt(&ctx, k->body);
    return ctx.ok;
}
