/*
 * ir_rewrite.c -- the generic rewriting helpers and structural queries of
 * the IR (ir.h, "Generic rewriting helpers"): deep copies of expressions
 * and statements, substitution of a variable, whether an expression or a
 * statement uses a variable, and structural equality of expressions.
 *
 * Copying a statement clones the variables bound inside it (LET vars, FOR
 * and PARALLEL induction vars) and remaps their uses: a loop body copied
 * twice (unrolling, instancing) then defines distinct variables, which the
 * verifier's scoping check and the printer's unique names require.
 * Buffers ALLOCated inside a copied statement are shared, not cloned.
 * Every expression slot of every statement kind is copied, the Hopper ones
 * included (regions of gemm, mbarrier, tma, wgmma and a copy's barrier,
 * tma coordinates, mbarrier values, scale_d), so a copy shares no node
 * with its original.
 */
#include "ir.h"

#include <stdlib.h>
#include <string.h>

/* ---- copying and substitution ----------------------------------------- */

/* State of one copy: bound variables cloned so far (by Var.id of the
 * original) and the optional substitution var -> value. */
typedef struct {
    Kernel *k;
    int nslots;         /* k->nvars when the copy started */
    Var **clones;       /* [nslots], NULL = not cloned */
    const Var *subst_var;
    const Expr *subst_value;
} CopyContext;

static void copy_context_init(CopyContext *c, Kernel *k, const Var *var,
                              const Expr *value, bool clone_vars)
{
    c->k = k;
    c->nslots = clone_vars ? k->nvars : 0;
    c->clones = c->nslots ? calloc((size_t)c->nslots, sizeof(Var *)) : NULL;
    if (c->nslots && !c->clones)
        ice("out of memory copying a statement");
    c->subst_var = var;
    c->subst_value = value;
}

static void copy_context_done(CopyContext *c) { free(c->clones); }

/* The Var a use of v refers to in the copy. */
static Var *mapped_var(CopyContext *c, Var *v)
{
    if (v && v->id >= 0 && v->id < c->nslots && c->clones[v->id])
        return c->clones[v->id];
    return v;
}

/* Called where a statement binds v: the copy binds a fresh clone. */
static Var *bind_clone(CopyContext *c, Var *v)
{
    if (!v || !c->clones || v->id < 0 || v->id >= c->nslots)
        return v;
    Var *clone = ir_new_var(c->k, v->name, v->dtype, v->kind);
    clone->block_dim = v->block_dim;
    c->clones[v->id] = clone;
    return clone;
}

static Expr *copy_expr(CopyContext *c, const Expr *e);

static Expr **copy_exprs(CopyContext *c, Expr *const *items, int count)
{
    if (count <= 0 || !items)
        return NULL;
    Expr **copy = arena_alloc(c->k->arena, sizeof(Expr *) * (size_t)count);
    for (int i = 0; i < count; i++)
        copy[i] = copy_expr(c, items[i]);
    return copy;
}

static Expr *copy_expr(CopyContext *c, const Expr *e)
{
    if (!e)
        return NULL;
    if (e->kind == EXPR_VAR && c->subst_var && e->u.var == c->subst_var) {
        CopyContext plain = {.k = c->k};
        return copy_expr(&plain, c->subst_value);
    }
    Expr *n = arena_alloc(c->k->arena, sizeof(Expr));
    *n = *e;
    switch (e->kind) {
    case EXPR_INT:
    case EXPR_FLOAT:
        break;
    case EXPR_VAR:
        n->u.var = mapped_var(c, e->u.var);
        break;
    case EXPR_LOAD:
        n->u.load.indices = copy_exprs(c, e->u.load.indices,
                                       e->u.load.buffer ? e->u.load.buffer->rank : 0);
        n->u.load.predicate = copy_expr(c, e->u.load.predicate);
        break;
    case EXPR_UNARY:
        n->u.unary.operand = copy_expr(c, e->u.unary.operand);
        break;
    case EXPR_BINARY:
        n->u.binary.lhs = copy_expr(c, e->u.binary.lhs);
        n->u.binary.rhs = copy_expr(c, e->u.binary.rhs);
        break;
    case EXPR_SELECT:
        n->u.select.cond = copy_expr(c, e->u.select.cond);
        n->u.select.then_value = copy_expr(c, e->u.select.then_value);
        n->u.select.else_value = copy_expr(c, e->u.select.else_value);
        break;
    case EXPR_CAST:
        n->u.cast.value = copy_expr(c, e->u.cast.value);
        break;
    case EXPR_CALL:
        n->u.call.args = copy_exprs(c, e->u.call.args, e->u.call.nargs);
        break;
    case EXPR_RAMP:
        n->u.ramp.base = copy_expr(c, e->u.ramp.base);
        break;
    case EXPR_BROADCAST:
        n->u.broadcast.value = copy_expr(c, e->u.broadcast.value);
        break;
    default:
        ice("copy of unknown expression kind %d", (int)e->kind);
    }
    return n;
}

static Region copy_region(CopyContext *c, const Region *r)
{
    Region n = *r;
    int rank = r->buffer ? r->buffer->rank : 0;
    for (int i = 0; i < rank && i < IR_MAX_RANK; i++)
        n.start[i] = copy_expr(c, r->start[i]);
    return n;
}

static Stmt *copy_stmt(CopyContext *c, const Stmt *s)
{
    if (!s)
        return NULL;
    Kernel *k = c->k;
    Stmt *n = arena_alloc(k->arena, sizeof(Stmt));
    *n = *s;
    switch (s->kind) {
    case STMT_SEQ: {
        /* through ir_seq, which owns the SEQ capacity rule */
        int count = s->u.seq.count;
        Stmt **items = count ? malloc(sizeof(Stmt *) * (size_t)count) : NULL;
        if (count && !items)
            ice("out of memory copying a statement");
        for (int i = 0; i < count; i++)
            items[i] = copy_stmt(c, s->u.seq.items[i]);
        n->u.seq = ir_seq(k, items, count)->u.seq;
        free(items);
        break;
    }
    case STMT_LET:
        /* the value is evaluated before the variable is bound */
        n->u.let.value = copy_expr(c, s->u.let.value);
        n->u.let.var = bind_clone(c, s->u.let.var);
        break;
    case STMT_ASSIGN:
        if (c->subst_var && s->u.assign.var == c->subst_var)
            ice("ir_substitute_stmt: %s is assigned to", c->subst_var->name);
        n->u.assign.var = mapped_var(c, s->u.assign.var);
        n->u.assign.value = copy_expr(c, s->u.assign.value);
        break;
    case STMT_STORE: {
        int rank = s->u.store.buffer ? s->u.store.buffer->rank : 0;
        n->u.store.indices = copy_exprs(c, s->u.store.indices, rank);
        n->u.store.value = copy_expr(c, s->u.store.value);
        n->u.store.predicate = copy_expr(c, s->u.store.predicate);
        break;
    }
    case STMT_ALLOC:
    case STMT_BARRIER:
    case STMT_RETURN:
    case STMT_REDUCE:
        break;
    case STMT_FOR:
        n->u.loop.begin = copy_expr(c, s->u.loop.begin);
        n->u.loop.end = copy_expr(c, s->u.loop.end);
        n->u.loop.var = bind_clone(c, s->u.loop.var);
        n->u.loop.body = copy_stmt(c, s->u.loop.body);
        break;
    case STMT_PARALLEL:
        for (int i = 0; i < s->u.parallel.rank && i < IR_MAX_RANK; i++)
            n->u.parallel.vars[i] = bind_clone(c, s->u.parallel.vars[i]);
        if (s->u.parallel.layout) {
            n->u.parallel.layout = arena_alloc(k->arena, sizeof(Layout));
            *n->u.parallel.layout = *s->u.parallel.layout;
        }
        n->u.parallel.body = copy_stmt(c, s->u.parallel.body);
        break;
    case STMT_IF:
        n->u.if_.cond = copy_expr(c, s->u.if_.cond);
        n->u.if_.then_body = copy_stmt(c, s->u.if_.then_body);
        n->u.if_.else_body = copy_stmt(c, s->u.if_.else_body);
        break;
    case STMT_COPY:
        n->u.copy.src = copy_region(c, &s->u.copy.src);
        n->u.copy.dst = copy_region(c, &s->u.copy.dst);
        n->u.copy.barrier = copy_region(c, &s->u.copy.barrier);
        break;
    case STMT_GEMM:
        n->u.gemm.a = copy_region(c, &s->u.gemm.a);
        n->u.gemm.b = copy_region(c, &s->u.gemm.b);
        break;
    case STMT_MBARRIER:
        n->u.mbarrier.bar = copy_region(c, &s->u.mbarrier.bar);
        n->u.mbarrier.value = copy_expr(c, s->u.mbarrier.value);
        break;
    case STMT_TMA:
        n->u.tma.smem = copy_region(c, &s->u.tma.smem);
        n->u.tma.bar = copy_region(c, &s->u.tma.bar);
        for (int i = 0; i < IR_MAX_RANK; i++)
            n->u.tma.coords[i] = copy_expr(c, s->u.tma.coords[i]);
        break;
    case STMT_WGMMA:
        n->u.wgmma.a = copy_region(c, &s->u.wgmma.a);
        n->u.wgmma.b = copy_region(c, &s->u.wgmma.b);
        n->u.wgmma.scale_d = copy_expr(c, s->u.wgmma.scale_d);
        break;
    case STMT_FENCE:
        break;
    case STMT_FILL:
        n->u.fill.dst = copy_region(c, &s->u.fill.dst);
        n->u.fill.value = copy_expr(c, s->u.fill.value);
        break;
    case STMT_ATOMIC: {
        int rank = s->u.atomic.buffer ? s->u.atomic.buffer->rank : 0;
        n->u.atomic.indices = copy_exprs(c, s->u.atomic.indices, rank);
        n->u.atomic.value = copy_expr(c, s->u.atomic.value);
        break;
    }
    case STMT_EVAL:
        n->u.eval.value = copy_expr(c, s->u.eval.value);
        break;
    case STMT_ASSERT:
        n->u.assert_.cond = copy_expr(c, s->u.assert_.cond);
        break;
    default:
        ice("copy of unknown statement kind %d", (int)s->kind);
    }
    return n;
}

Expr *ir_copy_expr(Kernel *k, const Expr *e)
{
    CopyContext c;
    copy_context_init(&c, k, NULL, NULL, false);
    Expr *copy = copy_expr(&c, e);
    copy_context_done(&c);
    return copy;
}

Stmt *ir_copy_stmt(Kernel *k, const Stmt *s)
{
    CopyContext c;
    copy_context_init(&c, k, NULL, NULL, true);
    Stmt *copy = copy_stmt(&c, s);
    copy_context_done(&c);
    return copy;
}

Expr *ir_substitute(Kernel *k, const Expr *e, const Var *var, Expr *value)
{
    CopyContext c;
    copy_context_init(&c, k, var, value, false);
    Expr *copy = copy_expr(&c, e);
    copy_context_done(&c);
    return copy;
}

/* Like ir_copy_stmt (bound vars are cloned) with var replaced by a fresh
 * copy of value at every use. */
Stmt *ir_substitute_stmt(Kernel *k, const Stmt *s, const Var *var,
                         Expr *value)
{
    CopyContext c;
    copy_context_init(&c, k, var, value, true);
    Stmt *copy = copy_stmt(&c, s);
    copy_context_done(&c);
    return copy;
}

/* ---- queries ------------------------------------------------------------ */

bool ir_expr_uses_var(const Expr *e, const Var *v)
{
    if (!e)
        return false;
    switch (e->kind) {
    case EXPR_INT:
    case EXPR_FLOAT:
        return false;
    case EXPR_VAR:
        return e->u.var == v;
    case EXPR_LOAD:
        for (int i = 0; e->u.load.buffer && i < e->u.load.buffer->rank; i++)
            if (ir_expr_uses_var(e->u.load.indices[i], v))
                return true;
        return ir_expr_uses_var(e->u.load.predicate, v);
    case EXPR_UNARY:
        return ir_expr_uses_var(e->u.unary.operand, v);
    case EXPR_BINARY:
        return ir_expr_uses_var(e->u.binary.lhs, v) ||
               ir_expr_uses_var(e->u.binary.rhs, v);
    case EXPR_SELECT:
        return ir_expr_uses_var(e->u.select.cond, v) ||
               ir_expr_uses_var(e->u.select.then_value, v) ||
               ir_expr_uses_var(e->u.select.else_value, v);
    case EXPR_CAST:
        return ir_expr_uses_var(e->u.cast.value, v);
    case EXPR_CALL:
        for (int i = 0; i < e->u.call.nargs; i++)
            if (ir_expr_uses_var(e->u.call.args[i], v))
                return true;
        return false;
    case EXPR_RAMP:
        return ir_expr_uses_var(e->u.ramp.base, v);
    case EXPR_BROADCAST:
        return ir_expr_uses_var(e->u.broadcast.value, v);
    default:
        ice("unknown expression kind %d", (int)e->kind);
    }
}

static bool region_uses_var(const Region *r, const Var *v)
{
    for (int i = 0; r->buffer && i < r->buffer->rank && i < IR_MAX_RANK; i++)
        if (ir_expr_uses_var(r->start[i], v))
            return true;
    return false;
}

static bool indices_use_var(Expr *const *indices, const Buffer *b, const Var *v)
{
    for (int i = 0; indices && b && i < b->rank; i++)
        if (ir_expr_uses_var(indices[i], v))
            return true;
    return false;
}

bool ir_stmt_uses_var(const Stmt *s, const Var *v)
{
    if (!s)
        return false;
    switch (s->kind) {
    case STMT_SEQ:
        for (int i = 0; i < s->u.seq.count; i++)
            if (ir_stmt_uses_var(s->u.seq.items[i], v))
                return true;
        return false;
    case STMT_LET:
        return ir_expr_uses_var(s->u.let.value, v);
    case STMT_ASSIGN:
        return s->u.assign.var == v || ir_expr_uses_var(s->u.assign.value, v);
    case STMT_STORE:
        return indices_use_var(s->u.store.indices, s->u.store.buffer, v) ||
               ir_expr_uses_var(s->u.store.value, v) ||
               ir_expr_uses_var(s->u.store.predicate, v);
    case STMT_ALLOC:
    case STMT_BARRIER:
    case STMT_REDUCE:
    case STMT_RETURN:
    case STMT_FENCE:
        return false;
    case STMT_FOR:
        return ir_expr_uses_var(s->u.loop.begin, v) || ir_expr_uses_var(s->u.loop.end, v) ||
               ir_stmt_uses_var(s->u.loop.body, v);
    case STMT_PARALLEL:
        return ir_stmt_uses_var(s->u.parallel.body, v);
    case STMT_IF:
        return ir_expr_uses_var(s->u.if_.cond, v) || ir_stmt_uses_var(s->u.if_.then_body, v) ||
               ir_stmt_uses_var(s->u.if_.else_body, v);
    case STMT_COPY:
        return region_uses_var(&s->u.copy.src, v) || region_uses_var(&s->u.copy.dst, v) ||
               region_uses_var(&s->u.copy.barrier, v);
    case STMT_FILL:
        return region_uses_var(&s->u.fill.dst, v) || ir_expr_uses_var(s->u.fill.value, v);
    case STMT_ATOMIC:
        return indices_use_var(s->u.atomic.indices, s->u.atomic.buffer, v) ||
               ir_expr_uses_var(s->u.atomic.value, v);
    case STMT_EVAL:
        return ir_expr_uses_var(s->u.eval.value, v);
    case STMT_ASSERT:
        return ir_expr_uses_var(s->u.assert_.cond, v);
    case STMT_GEMM:
        return region_uses_var(&s->u.gemm.a, v) || region_uses_var(&s->u.gemm.b, v);
    case STMT_MBARRIER:
        return region_uses_var(&s->u.mbarrier.bar, v) ||
               ir_expr_uses_var(s->u.mbarrier.value, v);
    case STMT_TMA:
        for (int i = 0; i < IR_MAX_RANK; i++)
            if (ir_expr_uses_var(s->u.tma.coords[i], v))
                return true;
        return region_uses_var(&s->u.tma.smem, v) || region_uses_var(&s->u.tma.bar, v);
    case STMT_WGMMA:
        return region_uses_var(&s->u.wgmma.a, v) || region_uses_var(&s->u.wgmma.b, v) ||
               ir_expr_uses_var(s->u.wgmma.scale_d, v);
    default:
        ice("unknown statement kind %d", (int)s->kind);
    }
}

/* Structural equality: same shape, dtypes, lanes, constants, the same Var
 * and Buffer objects.  Locations are ignored.  Floats compare by bits, so
 * a NaN equals itself and 0.0 differs from -0.0. */
bool ir_expr_equal(const Expr *a, const Expr *b)
{
    if (a == b)
        return true;
    if (!a || !b)
        return false;
    if (a->kind != b->kind || a->dtype != b->dtype || a->lanes != b->lanes)
        return false;
    switch (a->kind) {
    case EXPR_INT:
        return a->u.int_value == b->u.int_value;
    case EXPR_FLOAT:
        return memcmp(&a->u.float_value, &b->u.float_value, sizeof(double)) == 0;
    case EXPR_VAR:
        return a->u.var == b->u.var;
    case EXPR_LOAD:
        if (a->u.load.buffer != b->u.load.buffer ||
            a->u.load.align_bytes != b->u.load.align_bytes)
            return false;
        for (int i = 0; a->u.load.buffer && i < a->u.load.buffer->rank; i++)
            if (!ir_expr_equal(a->u.load.indices[i], b->u.load.indices[i]))
                return false;
        return ir_expr_equal(a->u.load.predicate, b->u.load.predicate);
    case EXPR_UNARY:
        return a->u.unary.op == b->u.unary.op &&
               ir_expr_equal(a->u.unary.operand, b->u.unary.operand);
    case EXPR_BINARY:
        return a->u.binary.op == b->u.binary.op &&
               ir_expr_equal(a->u.binary.lhs, b->u.binary.lhs) &&
               ir_expr_equal(a->u.binary.rhs, b->u.binary.rhs);
    case EXPR_SELECT:
        return ir_expr_equal(a->u.select.cond, b->u.select.cond) &&
               ir_expr_equal(a->u.select.then_value, b->u.select.then_value) &&
               ir_expr_equal(a->u.select.else_value, b->u.select.else_value);
    case EXPR_CAST:
        return a->u.cast.kind == b->u.cast.kind &&
               ir_expr_equal(a->u.cast.value, b->u.cast.value);
    case EXPR_CALL:
        if (a->u.call.op != b->u.call.op || a->u.call.nargs != b->u.call.nargs)
            return false;
        for (int i = 0; i < a->u.call.nargs; i++)
            if (!ir_expr_equal(a->u.call.args[i], b->u.call.args[i]))
                return false;
        return true;
    case EXPR_RAMP:
        return a->u.ramp.stride == b->u.ramp.stride &&
               ir_expr_equal(a->u.ramp.base, b->u.ramp.base);
    case EXPR_BROADCAST:
        return ir_expr_equal(a->u.broadcast.value, b->u.broadcast.value);
    default:
        ice("unknown expression kind %d", (int)a->kind);
    }
}
