/*
 * async_util.c -- helpers shared by the Hopper tile passes (see
 * async_util.h): mbarrier buffers and their initialisation, guards, TMA
 * box bytes, and the skeleton of a pipelined loop body.
 */
#include "async_util.h"

Expr *async_thread_is(Kernel *k, int64_t thread)
{
    Expr *t = ir_call(k, INTR_THREAD_IDX, PASS_INDEX_TYPE, NULL, 0);
    return ir_binary(k, BIN_EQ, t, pass_index(k, thread));
}

Stmt *async_if(Kernel *k, Expr *cond, Stmt *then_body, Loc loc)
{
    Stmt *s = ir_new_stmt(k, STMT_IF, loc);
    s->u.if_.cond = cond;
    s->u.if_.then_body = then_body;
    return s;
}

Stmt *async_fence(Kernel *k, FenceOp op, int64_t value, Loc loc)
{
    Stmt *s = ir_new_stmt(k, STMT_FENCE, loc);
    s->u.fence.op = op;
    s->u.fence.value = value;
    return s;
}

Stmt *async_mbarrier(Kernel *k, MbarrierOp op, Buffer *bar, Expr *slot,
                     Expr *value, Loc loc)
{
    Stmt *s = ir_new_stmt(k, STMT_MBARRIER, loc);
    s->u.mbarrier.op = op;
    s->u.mbarrier.bar.buffer = bar;
    s->u.mbarrier.bar.start[0] = slot;
    s->u.mbarrier.bar.extent[0] = 0;
    s->u.mbarrier.value = value;
    return s;
}

Buffer *async_new_mbarriers(Kernel *k, const char *name, int64_t slots,
                            Loc loc, Stmt **alloc)
{
    Buffer *b = ir_new_buffer(k, name, DT_U64, SCOPE_SHARED, 1);
    b->shape[0] = pass_index(k, slots);
    b->async_kind = SHARED_ASYNC_MBARRIER;
    b->loc = loc;
    *alloc = ir_new_stmt(k, STMT_ALLOC, loc);
    (*alloc)->u.alloc.buffer = b;
    return b;
}

void async_prepend_init(Kernel *k, Stmt **prefix, int nprefix, Stmt *inits,
                        Loc loc)
{
    Stmt *body = k->body;
    if (!body || body->kind != STMT_SEQ)
        body = body ? ir_seq(k, &body, 1) : ir_seq(k, NULL, 0);
    Stmt *out = ir_seq(k, prefix, nprefix);
    ir_seq_append(k, out, async_if(k, async_thread_is(k, 0), inits, loc));
    ir_seq_append(k, out, async_fence(k, FENCE_MBARRIER_INIT, 0, loc));
    Stmt *bar = ir_new_stmt(k, STMT_BARRIER, loc);
    ir_seq_append(k, out, bar);
    /* the peers of a cluster may arrive on (or multicast into) this CTA's
     * barriers as soon as they pass their own init */
    if (cluster_size(k) > 1)
        ir_seq_append(k, out, async_fence(k, FENCE_CLUSTER_SYNC, 0, loc));
    for (int i = 0; i < body->u.seq.count; i++)
        ir_seq_append(k, out, body->u.seq.items[i]);
    out->loc = body->loc;
    k->body = out;
}

bool async_is_pipe_copy(const Stmt *s)
{
    return s && s->kind == STMT_COPY && s->u.copy.tensor_map >= 0 &&
           !s->u.copy.barrier.buffer &&
           s->u.copy.dst.buffer->scope == SCOPE_SHARED;
}

int64_t async_copy_bytes(const Stmt *copy)
{
    const Region *r = &copy->u.copy.src;
    if (r->buffer->scope != SCOPE_GLOBAL)
        r = &copy->u.copy.dst;
    int64_t elements = 1;
    for (int d = 0; d < r->buffer->rank; d++)
        elements *= r->extent[d] > 0 ? r->extent[d] : 1;
    return elements * ir_dtype_bits(r->buffer->dtype) / 8;
}

/* ---- expression queries ------------------------------------------------ */

typedef bool (*VarTest)(void *ctx, const Var *v);

/* The first var of e for which test is false. */
static const Var *first_var_failing(const Expr *e, VarTest test, void *ctx)
{
    if (!e)
        return NULL;
    const Var *v = NULL;
    switch (e->kind) {
    case EXPR_VAR:
        return test(ctx, e->u.var) ? NULL : e->u.var;
    case EXPR_LOAD:
        for (int d = 0; d < e->u.load.buffer->rank && !v; d++)
            v = first_var_failing(e->u.load.indices[d], test, ctx);
        return v ? v : first_var_failing(e->u.load.predicate, test, ctx);
    case EXPR_UNARY:
        return first_var_failing(e->u.unary.operand, test, ctx);
    case EXPR_BINARY:
        v = first_var_failing(e->u.binary.lhs, test, ctx);
        return v ? v : first_var_failing(e->u.binary.rhs, test, ctx);
    case EXPR_SELECT:
        v = first_var_failing(e->u.select.cond, test, ctx);
        if (!v)
            v = first_var_failing(e->u.select.then_value, test, ctx);
        return v ? v : first_var_failing(e->u.select.else_value, test, ctx);
    case EXPR_CAST:
        return first_var_failing(e->u.cast.value, test, ctx);
    case EXPR_CALL:
        for (int i = 0; i < e->u.call.nargs && !v; i++)
            v = first_var_failing(e->u.call.args[i], test, ctx);
        return v;
    case EXPR_RAMP:
        return first_var_failing(e->u.ramp.base, test, ctx);
    case EXPR_BROADCAST:
        return first_var_failing(e->u.broadcast.value, test, ctx);
    default:
        return NULL;
    }
}

bool async_uniform_scalar(const Expr *e)
{
    if (!e)
        return true;
    switch (e->kind) {
    case EXPR_LOAD:
        if (e->u.load.buffer->scope != SCOPE_GLOBAL)
            return false;
        for (int d = 0; d < e->u.load.buffer->rank; d++)
            if (!async_uniform_scalar(e->u.load.indices[d]))
                return false;
        return async_uniform_scalar(e->u.load.predicate);
    case EXPR_UNARY:
        return async_uniform_scalar(e->u.unary.operand);
    case EXPR_BINARY:
        return async_uniform_scalar(e->u.binary.lhs) &&
               async_uniform_scalar(e->u.binary.rhs);
    case EXPR_SELECT:
        return async_uniform_scalar(e->u.select.cond) &&
               async_uniform_scalar(e->u.select.then_value) &&
               async_uniform_scalar(e->u.select.else_value);
    case EXPR_CAST:
        return async_uniform_scalar(e->u.cast.value);
    case EXPR_CALL:
        if (ir_intrinsic_flags(e->u.call.op) & INTR_THREAD)
            return false;
        for (int i = 0; i < e->u.call.nargs; i++)
            if (!async_uniform_scalar(e->u.call.args[i]))
                return false;
        return true;
    case EXPR_RAMP:
    case EXPR_BROADCAST:
        return false;
    default:
        return true;
    }
}

/* ---- skeletons --------------------------------------------------------- */

Stmt *async_skeleton(Kernel *k, Stmt *body)
{
    if (!body)
        return NULL;
    switch (body->kind) {
    case STMT_SEQ: {
        Stmt *out = ir_seq(k, NULL, 0);
        out->loc = body->loc;
        bool any_copy = false;
        int last = 0;
        for (int i = 0; i < body->u.seq.count; i++) {
            Stmt *item = body->u.seq.items[i];
            if (item->kind == STMT_LET && item->u.let.var->kind == VAR_LET &&
                async_uniform_scalar(item->u.let.value)) {
                ir_seq_append(k, out, item);
                continue;
            }
            Stmt *part = async_skeleton(k, item);
            if (part) {
                ir_seq_append(k, out, part);
                any_copy = true;
                last = out->u.seq.count;
            }
        }
        out->u.seq.count = last; /* lets after the last copy are not needed */
        return any_copy ? out : NULL;
    }
    case STMT_IF: {
        Stmt *then_body = async_skeleton(k, body->u.if_.then_body);
        Stmt *else_body = async_skeleton(k, body->u.if_.else_body);
        if (!then_body && !else_body)
            return NULL;
        Stmt *s = ir_new_stmt(k, STMT_IF, body->loc);
        s->u.if_.cond = body->u.if_.cond;
        s->u.if_.then_body = then_body ? then_body : ir_seq(k, NULL, 0);
        s->u.if_.else_body = else_body;
        return s;
    }
    case STMT_COPY:
        return async_is_pipe_copy(body) ? body : NULL;
    default:
        return NULL;
    }
}

Stmt *async_strip(Kernel *k, Stmt *body)
{
    if (!body)
        return NULL;
    switch (body->kind) {
    case STMT_SEQ: {
        Stmt *out = ir_seq(k, NULL, 0);
        out->loc = body->loc;
        for (int i = 0; i < body->u.seq.count; i++) {
            Stmt *item = async_strip(k, body->u.seq.items[i]);
            if (item)
                ir_seq_append(k, out, item);
        }
        return out;
    }
    case STMT_IF:
        body->u.if_.then_body = async_strip(k, body->u.if_.then_body);
        if (!body->u.if_.then_body)
            body->u.if_.then_body = ir_seq(k, NULL, 0);
        body->u.if_.else_body = async_strip(k, body->u.if_.else_body);
        return body;
    case STMT_COPY:
        return async_is_pipe_copy(body) ? NULL : body;
    default:
        return body;
    }
}

/* Bytes of s; *lets collects the skeleton's lets in order. */
static Expr *bytes_of(Kernel *k, const Stmt *s, PtrVec *lets)
{
    if (!s)
        return NULL;
    switch (s->kind) {
    case STMT_SEQ: {
        Expr *sum = NULL;
        for (int i = 0; i < s->u.seq.count; i++) {
            Expr *part = bytes_of(k, s->u.seq.items[i], lets);
            if (part)
                sum = sum ? pass_add(k, sum, part) : part;
        }
        return sum;
    }
    case STMT_LET:
        vec_push(k->arena, lets, (void *)s);
        return NULL;
    case STMT_IF: {
        Expr *then_bytes = bytes_of(k, s->u.if_.then_body, lets);
        Expr *else_bytes = bytes_of(k, s->u.if_.else_body, lets);
        if (!then_bytes && !else_bytes)
            return NULL;
        return ir_select(k, ir_copy_expr(k, s->u.if_.cond),
                         then_bytes ? then_bytes : pass_index(k, 0),
                         else_bytes ? else_bytes : pass_index(k, 0));
    }
    case STMT_COPY:
        return pass_index(k, async_copy_bytes(s));
    default:
        return NULL;
    }
}

Expr *async_skeleton_bytes(Kernel *k, const Stmt *skeleton)
{
    PtrVec lets = {0};
    Expr *bytes = bytes_of(k, skeleton, &lets);
    for (int i = lets.count - 1; bytes && i >= 0; i--) {
        const Stmt *let = lets.items[i];
        bytes = ir_substitute(k, bytes, let->u.let.var, let->u.let.value);
    }
    return bytes;
}

typedef struct {
    AsyncVarFn allowed;
    void *ctx;
    PtrVec defined;
    Arena *arena;
} MissingCtx;

static bool var_known(void *opaque, const Var *v)
{
    MissingCtx *m = opaque;
    for (int i = 0; i < m->defined.count; i++)
        if (m->defined.items[i] == v)
            return true;
    return m->allowed(m->ctx, v);
}

static const Var *region_missing(MissingCtx *m, const Region *r)
{
    const Var *v = NULL;
    for (int d = 0; d < r->buffer->rank && !v; d++)
        v = first_var_failing(r->start[d], var_known, m);
    return v;
}

static const Var *missing_in(MissingCtx *m, const Stmt *s)
{
    if (!s)
        return NULL;
    const Var *v = NULL;
    switch (s->kind) {
    case STMT_SEQ: {
        int mark = m->defined.count;
        for (int i = 0; i < s->u.seq.count && !v; i++)
            v = missing_in(m, s->u.seq.items[i]);
        m->defined.count = mark;
        return v;
    }
    case STMT_LET:
        v = first_var_failing(s->u.let.value, var_known, m);
        vec_push(m->arena, &m->defined, s->u.let.var);
        return v;
    case STMT_IF:
        v = first_var_failing(s->u.if_.cond, var_known, m);
        if (!v)
            v = missing_in(m, s->u.if_.then_body);
        return v ? v : missing_in(m, s->u.if_.else_body);
    case STMT_COPY:
        v = region_missing(m, &s->u.copy.src);
        return v ? v : region_missing(m, &s->u.copy.dst);
    default:
        return NULL;
    }
}

const Var *async_missing_var(const Stmt *skeleton, AsyncVarFn allowed,
                             void *ctx)
{
    Arena *arena = arena_new();
    MissingCtx m = {.allowed = allowed, .ctx = ctx, .arena = arena};
    const Var *v = missing_in(&m, skeleton);
    arena_free(arena);
    return v;
}
