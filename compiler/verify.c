/*
 * verify.c -- structural invariants of the IR, checked between passes.
 *
 * The verifier walks a kernel once, keeping the set of variables and
 * buffers in scope, and reports every violation it finds (a broken pass
 * rarely breaks just one thing).  It checks
 *
 *   - typing: operands of a binary op have one dtype and one lane count
 *     (shifts included), comparisons and && || give bool, literals,
 *     casts and intrinsic calls have sensible dtypes, a load has its
 *     buffer's dtype, a stored value has the buffer's dtype;
 *   - shapes: an access has one integer index per dimension, a region one
 *     start per dimension;
 *   - lanes: every index, predicate and stored value of a vector access is
 *     as wide as the access; lanes > 1 only once KSTATE_VECTOR;
 *   - scoping: a LET (or an ALLOC) is visible to the end of its enclosing
 *     SEQ, a loop variable inside its body, symbols, scalar parameters and
 *     block variables everywhere; every variable is bound once;
 *   - stage: no PARALLEL / COPY / FILL / REDUCE / GEMM / PIPELINED loop nor
 *     FRAGMENT buffer once KSTATE_THREAD; layouts on every PARALLEL and fragment once
 *     KSTATE_LAYOUTS; no VECTORIZED loop once KSTATE_VECTOR; every shared
 *     buffer planned (offset, pitch) once KSTATE_SHARED;
 *   - the Hopper nodes (gemm, mbarrier, tma, wgmma, fence, pipelined
 *     loops, warp-specialised ifs, named barriers, TMA copies, MMA
 *     layouts, tensor maps): verify_hopper.c, called from the walk here
 *     through verify.h.
 *
 * The typing, shape and lane rules of expressions and accesses are in
 * verify_expr.c; the walk calls verify_expr and verify_access.
 *
 * Failures are compiler bugs, but they go through diag_error (prefixed
 * "IR verifier (after PASS): ") so that tests can read them; the driver
 * turns a failed verification into an internal error.
 */
#include "verify.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>


__attribute__((format(printf, 3, 4))) void
verify_report(Verifier *v, Loc loc, const char *fmt, ...)
{
    v->errors++;
    if (v->errors > VERIFY_MAX_REPORTS)
        return;
    if (!loc.line)
        loc = v->stmt_loc.line ? v->stmt_loc : v->k->loc;
    char message[512];
    va_list args;
    va_start(args, fmt);
    vsnprintf(message, sizeof message, fmt, args);
    va_end(args);
    diag_error(v->diag, loc, "IR verifier (after %s): %s (kernel %s)", v->pass, message,
               v->k->name ? v->k->name : "?");
}

/* ---- scopes ------------------------------------------------------------------------ */

/* A Var of this kernel (its id indexes the tables), or report. */
bool verify_var_known(Verifier *v, const Var *var, Loc loc)
{
    if (!var) {
        verify_report(v, loc, "missing variable");
        return false;
    }
    if (var->id < 0 || var->id >= v->k->vars.count || v->k->vars.items[var->id] != var) {
        verify_report(v, loc, "variable %%%s does not belong to this kernel", verify_var_name(var));
        return false;
    }
    return true;
}

/* Binds var in the innermost open scope. */
static void bind(Verifier *v, Var *var, VarKind kind, int lanes, Loc loc)
{
    if (!verify_var_known(v, var, loc))
        return;
    if (var->kind != kind && !(kind == VAR_LET && var->kind == VAR_MUTABLE))
        verify_report(v, loc, "%%%s is bound as a %s variable but has kind %d", verify_var_name(var),
               kind == VAR_LOOP ? "loop" : "let", (int)var->kind);
    v->lanes[var->id] = lanes;
    if (v->bound[var->id]) {
        /* keep it in scope for good rather than cascade into more errors;
         * the scope stack has room for one entry per variable */
        verify_report(v, loc, "%%%s is bound twice", verify_var_name(var));
        v->in_scope[var->id] = true;
        return;
    }
    v->bound[var->id] = true;
    v->in_scope[var->id] = true;
    v->scope_vars[v->nscope_vars++] = var->id;
}

typedef struct {
    int nvars, nbuffers;
} ScopeMark;

static ScopeMark open_scope(Verifier *v) { return (ScopeMark){v->nscope_vars, v->visible.count}; }

static void close_scope(Verifier *v, ScopeMark mark)
{
    while (v->nscope_vars > mark.nvars)
        v->in_scope[v->scope_vars[--v->nscope_vars]] = false;
    v->visible.count = mark.nbuffers;
}

static bool buffer_visible(Verifier *v, const Buffer *b)
{
    for (int i = 0; i < v->visible.count; i++)
        if (v->visible.items[i] == b)
            return true;
    return false;
}

/* Stage rules that hold for every mention of a buffer. */
void verify_buffer_use(Verifier *v, const Buffer *b, Loc loc)
{
    if (!b) {
        verify_report(v, loc, "missing buffer");
        return;
    }
    if (!buffer_visible(v, b))
        verify_report(v, loc, "buffer @%s is used outside the scope of its declaration",
               buffer_name(b));
    if (b->scope == SCOPE_FRAGMENT && (v->k->state & KSTATE_THREAD))
        verify_report(v, loc, "fragment @%s remains at thread level", buffer_name(b));
}

/* ---- statements ----------------------------------------------------------------------- */

static void check_stmt(Verifier *v, const Stmt *s);

/* A statement body is a scope of its own (a LET directly as a loop body
 * is visible nowhere else). */
static void check_body(Verifier *v, const Stmt *body, const char *what, Loc loc)
{
    if (!body) {
        verify_report(v, loc, "%s has no body", what);
        return;
    }
    ScopeMark mark = open_scope(v);
    check_stmt(v, body);
    close_scope(v, mark);
}

void verify_region(Verifier *v, const Region *r, Loc loc)
{
    verify_buffer_use(v, r->buffer, loc);
    if (!r->buffer)
        return;
    for (int i = 0; i < r->buffer->rank && i < IR_MAX_RANK; i++) {
        if (!r->start[i])
            verify_report(v, loc, "region of @%s: start %d is missing", buffer_name(r->buffer), i);
        else
            verify_scalar(v, r->start[i], DT_VOID, "region start");
        if (r->extent[i] < 0)
            verify_report(v, loc, "region of @%s: negative extent", buffer_name(r->buffer));
    }
}

static bool is_positive_int(const Expr *e)
{
    return e && e->kind == EXPR_INT && e->u.int_value > 0;
}

static void check_layout(Verifier *v, const Layout *layout, Loc loc)
{
    if (layout->rank < 1 || layout->rank > IR_MAX_RANK || layout->threads < 1 ||
        layout->vec < 1 || layout->slots < 0)
        verify_report(v, loc, "malformed layout (rank %d, threads %d, vec %d, slots %lld)",
               layout->rank, layout->threads, layout->vec, (long long)layout->slots);
    if (layout->reduced && (layout->parent_rank != layout->rank + 1 || layout->group < 1))
        verify_report(v, loc, "malformed reduced layout (parent rank %d, group %d)",
               layout->parent_rank, layout->group);
    if (layout->kind == LAYOUT_MMA)
        verify_mma_layout(v, layout, loc);
    else if (layout->kind != LAYOUT_CHUNKED)
        verify_report(v, loc, "unknown layout kind %d", (int)layout->kind);
}

/* Declaration rules of an ALLOCated buffer, by stage. */
static void check_alloc(Verifier *v, Buffer *b, Loc loc)
{
    if (!b) {
        verify_report(v, loc, "alloc of no buffer");
        return;
    }
    for (int i = 0; i < v->allocated.count; i++)
        if (v->allocated.items[i] == b)
            verify_report(v, loc, "@%s is allocated twice", buffer_name(b));
    vec_push(v->k->arena, &v->allocated, b);
    vec_push(v->k->arena, &v->visible, b);
    if (b->scope == SCOPE_GLOBAL)
        verify_report(v, loc, "alloc of the global buffer @%s", buffer_name(b));
    if (b->rank < 0 || b->rank > IR_MAX_RANK) {
        verify_report(v, loc, "@%s has rank %d", buffer_name(b), b->rank);
        return;
    }
    for (int i = 0; i < b->rank; i++)
        if (!is_positive_int(b->shape[i]))
            verify_report(v, loc, "@%s: dimension %d is not a positive constant", buffer_name(b), i);
    unsigned state = v->k->state;
    if (b->scope == SCOPE_FRAGMENT && (state & KSTATE_THREAD))
        verify_report(v, loc, "fragment @%s remains at thread level", buffer_name(b));
    else if (b->scope == SCOPE_FRAGMENT && (state & KSTATE_LAYOUTS) && !b->layout)
        verify_report(v, loc, "fragment @%s has no layout", buffer_name(b));
    if (b->layout)
        check_layout(v, b->layout, loc);
    verify_async_buffer(v, b, loc);
    if (b->scope == SCOPE_SHARED && (state & KSTATE_SHARED)) {
        int64_t row = b->rank && is_positive_int(b->shape[b->rank - 1])
                          ? b->shape[b->rank - 1]->u.int_value : 1;
        int64_t rows = 1;
        for (int i = 0; i + 1 < b->rank; i++)
            rows *= is_positive_int(b->shape[i]) ? b->shape[i]->u.int_value : 1;
        int64_t bytes = rows * b->pitch * ir_dtype_bits(b->dtype) / 8;
        if (b->shared_offset < 0 || b->pitch < row)
            verify_report(v, loc, "shared @%s is not planned (offset %lld, pitch %lld)",
                   buffer_name(b), (long long)b->shared_offset, (long long)b->pitch);
        else if (b->shared_offset + bytes > v->k->shared_bytes)
            verify_report(v, loc, "shared @%s ends at byte %lld, past shared_bytes %lld",
                   buffer_name(b), (long long)(b->shared_offset + bytes),
                   (long long)v->k->shared_bytes);
        if (b->swizzle_shift < -1 || b->swizzle_shift > 7)
            verify_report(v, loc, "shared @%s: swizzle_shift %d", buffer_name(b), b->swizzle_shift);
    }
}

void verify_tile_level(Verifier *v, const Stmt *s)
{
    if (v->k->state & KSTATE_THREAD)
        verify_report(v, s->loc, "tile-level statement '%s' remains at thread level",
               ir_stmt_name(s->kind));
}

static void check_stmt(Verifier *v, const Stmt *s)
{
    if (!s) {
        verify_report(v, v->stmt_loc, "missing statement");
        return;
    }
    if ((unsigned)s->kind >= STMT_COUNT) {
        verify_report(v, s->loc, "unknown statement kind %d", (int)s->kind);
        return;
    }
    Loc outer = v->stmt_loc;
    if (s->loc.line)
        v->stmt_loc = s->loc;
    Loc loc = v->stmt_loc;
    switch (s->kind) {
    case STMT_SEQ: {
        ScopeMark mark = open_scope(v);
        if (s->u.seq.count > 0 && !s->u.seq.items)
            verify_report(v, loc, "seq without items");
        else
            for (int i = 0; i < s->u.seq.count; i++)
                check_stmt(v, s->u.seq.items[i]);
        close_scope(v, mark);
        break;
    }
    case STMT_LET: {
        Var *var = s->u.let.var;
        const Expr *value = s->u.let.value;
        int lanes = 1;
        if (value) {
            verify_expr(v, value);
            lanes = value->lanes;
            if (var && value->dtype != var->dtype)
                verify_report(v, loc, "let %%%s: value has dtype %s, the variable %s", verify_var_name(var),
                       dname(value->dtype), dname(var->dtype));
        } else if (var && var->kind != VAR_MUTABLE) {
            verify_report(v, loc, "let %%%s has no value", verify_var_name(var));
        }
        bind(v, var, VAR_LET, lanes, loc);
        break;
    }
    case STMT_ASSIGN: {
        Var *var = s->u.assign.var;
        const Expr *value = s->u.assign.value;
        verify_expr(v, value);
        if (!verify_var_known(v, var, loc))
            break;
        if (var->kind != VAR_MUTABLE)
            verify_report(v, loc, "assignment to %%%s, which is not mutable", verify_var_name(var));
        if (!v->in_scope[var->id])
            verify_report(v, loc, "assignment to %%%s outside its scope", verify_var_name(var));
        if (value && value->dtype != var->dtype)
            verify_report(v, loc, "assignment to %%%s: value has dtype %s, the variable %s",
                   verify_var_name(var), dname(value->dtype), dname(var->dtype));
        if (value && v->in_scope[var->id] && value->lanes != v->lanes[var->id])
            verify_report(v, loc, "assignment to %%%s: value has %d lanes, the variable %d",
                   verify_var_name(var), value->lanes, v->lanes[var->id]);
        break;
    }
    case STMT_STORE: {
        const Buffer *b = s->u.store.buffer;
        const Expr *value = s->u.store.value;
        int lanes = value ? value->lanes : 1;
        verify_expr(v, value);
        verify_access(v, b, s->u.store.indices, lanes, s->u.store.predicate,
                     s->u.store.align_bytes, loc);
        if (b && value && value->dtype != b->dtype)
            verify_report(v, loc, "store to @%s: value has dtype %s, the buffer %s", buffer_name(b),
                   dname(value->dtype), dname(b->dtype));
        if (b && b->read_only)
            verify_report(v, loc, "store to the read-only buffer @%s", buffer_name(b));
        break;
    }
    case STMT_ALLOC:
        check_alloc(v, s->u.alloc.buffer, loc);
        break;
    case STMT_FOR: {
        Var *var = s->u.loop.var;
        DType t = var ? var->dtype : DT_I32;
        verify_scalar(v, s->u.loop.begin, t, "loop begin");
        verify_scalar(v, s->u.loop.end, t, "loop end");
        if (var && !verify_is_integer(var->dtype))
            verify_report(v, loc, "loop variable %%%s has dtype %s", verify_var_name(var), dname(var->dtype));
        if (s->u.loop.step < 1)
            verify_report(v, loc, "loop step %lld is not positive", (long long)s->u.loop.step);
        if ((unsigned)s->u.loop.kind >= LOOP_COUNT)
            verify_report(v, loc, "unknown loop kind %d", (int)s->u.loop.kind);
        else if (s->u.loop.kind == LOOP_VECTORIZED && (v->k->state & KSTATE_VECTOR))
            verify_report(v, loc, "vectorized loop remains after vectorize");
        else if (s->u.loop.kind == LOOP_PIPELINED)
            verify_pipelined_loop(v, s);
        else if (s->u.loop.release_lag != 0) /* not printed: would not round trip */
            verify_report(v, loc, "%s loop with a release lag", ir_loop_name(s->u.loop.kind));
        ScopeMark mark = open_scope(v);
        bind(v, var, VAR_LOOP, 1, loc);
        check_body(v, s->u.loop.body, "for", loc);
        close_scope(v, mark);
        break;
    }
    case STMT_PARALLEL: {
        verify_tile_level(v, s);
        int rank = s->u.parallel.rank;
        if (rank < 1 || rank > IR_MAX_RANK) {
            verify_report(v, loc, "parallel of rank %d", rank);
            break;
        }
        if ((v->k->state & KSTATE_LAYOUTS) && !s->u.parallel.layout)
            verify_report(v, loc, "parallel loop has no layout");
        if (s->u.parallel.layout)
            check_layout(v, s->u.parallel.layout, loc);
        ScopeMark mark = open_scope(v);
        for (int i = 0; i < rank; i++) {
            if (s->u.parallel.extent[i] < 1)
                verify_report(v, loc, "parallel extent %lld", (long long)s->u.parallel.extent[i]);
            bind(v, s->u.parallel.vars[i], VAR_LOOP, 1, loc);
        }
        check_body(v, s->u.parallel.body, "parallel", loc);
        close_scope(v, mark);
        break;
    }
    case STMT_IF: {
        verify_scalar(v, s->u.if_.cond, DT_BOOL, "if condition");
        bool split = s->u.if_.warp_specialized;
        WarpSide outer_side = v->side;
        if (split)
            verify_warp_specialized_if(v, s);
        if (split)
            v->side = SIDE_PRODUCER;
        check_body(v, s->u.if_.then_body, "if", loc);
        if (split)
            v->side = SIDE_CONSUMER;
        if (s->u.if_.else_body)
            check_body(v, s->u.if_.else_body, "else", loc);
        v->side = outer_side;
        break;
    }
    case STMT_BARRIER:
        verify_barrier(v, s);
        break;
    case STMT_RETURN:
        break;
    case STMT_COPY:
        verify_tile_level(v, s);
        verify_region(v, &s->u.copy.src, loc);
        verify_region(v, &s->u.copy.dst, loc);
        verify_copy_clauses(v, s);
        break;
    case STMT_FILL: {
        verify_tile_level(v, s);
        verify_region(v, &s->u.fill.dst, loc);
        const Expr *value = s->u.fill.value;
        verify_expr(v, value);
        if (value && s->u.fill.dst.buffer && value->dtype != s->u.fill.dst.buffer->dtype)
            verify_report(v, loc, "fill of @%s: value has dtype %s, the buffer %s",
                   buffer_name(s->u.fill.dst.buffer), dname(value->dtype),
                   dname(s->u.fill.dst.buffer->dtype));
        break;
    }
    case STMT_REDUCE: {
        verify_tile_level(v, s);
        const Buffer *src = s->u.reduce.src, *dst = s->u.reduce.dst;
        verify_buffer_use(v, src, loc);
        verify_buffer_use(v, dst, loc);
        if ((unsigned)s->u.reduce.op >= REDUCE_COUNT)
            verify_report(v, loc, "unknown reduction %d", (int)s->u.reduce.op);
        if (src && (s->u.reduce.dim < 0 || s->u.reduce.dim >= src->rank))
            verify_report(v, loc, "reduce dim %d of the rank-%d @%s", s->u.reduce.dim, src->rank,
                   buffer_name(src));
        break;
    }
    case STMT_ATOMIC: {
        const Buffer *b = s->u.atomic.buffer;
        const Expr *value = s->u.atomic.value;
        verify_expr(v, value);
        int lanes = value ? value->lanes : 1;
        verify_access(v, b, s->u.atomic.indices, lanes, NULL, 0, loc);
        if ((unsigned)s->u.atomic.op >= ATOMIC_COUNT)
            verify_report(v, loc, "unknown atomic op %d", (int)s->u.atomic.op);
        if (b && b->scope != SCOPE_GLOBAL && b->scope != SCOPE_SHARED)
            verify_report(v, loc, "atomic on the %s buffer @%s", ir_scope_name(b->scope),
                   buffer_name(b));
        if (b && value && value->dtype != b->dtype)
            verify_report(v, loc, "atomic on @%s: value has dtype %s, the buffer %s", buffer_name(b),
                   dname(value->dtype), dname(b->dtype));
        break;
    }
    case STMT_EVAL:
        verify_expr(v, s->u.eval.value);
        break;
    case STMT_ASSERT:
        verify_scalar(v, s->u.assert_.cond, DT_BOOL, "assert condition");
        break;
    case STMT_GEMM:
    case STMT_MBARRIER:
    case STMT_TMA:
    case STMT_WGMMA:
    case STMT_FENCE:
        verify_hopper_stmt(v, s);
        break;
    default:
        break;
    }
    v->stmt_loc = outer;
}

/* ---- kernels -------------------------------------------------------------------------- */

/* Binds a kernel-wide variable (symbol, scalar, block) for the whole walk. */
static void declare(Verifier *v, Var *var, VarKind kind, const char *what)
{
    if (!verify_var_known(v, var, v->k->loc))
        return;
    if (var->kind != kind)
        verify_report(v, v->k->loc, "%s %%%s has kind %d", what, verify_var_name(var), (int)var->kind);
    if (v->bound[var->id])
        verify_report(v, v->k->loc, "%%%s is declared twice", verify_var_name(var));
    v->bound[var->id] = v->in_scope[var->id] = true;
    v->lanes[var->id] = 1;
}

/* Symbols first: tensor shapes and strides may name only them.  Then the
 * parameters, which constraints and the grid may name too. */
static void check_params(Verifier *v)
{
    Kernel *k = v->k;
    Loc loc = k->loc;
    for (int i = 0; i < k->nsymbols; i++) {
        declare(v, k->symbols[i], VAR_SYMBOL, "symbol");
        if (k->symbols[i] && k->symbols[i]->dtype != DT_I32)
            verify_report(v, loc, "symbol %%%s has dtype %s, not i32", verify_var_name(k->symbols[i]),
                   dname(k->symbols[i]->dtype));
    }
    for (int i = 0; i < k->nparams; i++) {
        const Buffer *b = k->params[i].kind == PARAM_TENSOR ? k->params[i].buffer : NULL;
        if (!b || b->rank < 0 || b->rank > IR_MAX_RANK)
            continue;
        for (int d = 0; d < b->rank; d++) {
            if (!b->shape[d])
                verify_report(v, b->loc, "parameter @%s: dimension %d is missing", buffer_name(b), d);
            else
                verify_scalar(v, b->shape[d], DT_I32, "tensor dimension");
            if (!b->strides[d])
                verify_report(v, b->loc, "parameter @%s: stride %d is missing", buffer_name(b), d);
            else
                verify_scalar(v, b->strides[d], DT_I32, "tensor stride");
        }
    }
    for (int i = 0; i < k->nparams; i++) {
        const Param *param = &k->params[i];
        if (param->kind == PARAM_SCALAR) {
            declare(v, param->var, VAR_SCALAR, "scalar parameter");
            continue;
        }
        Buffer *b = param->buffer;
        if (!b) {
            verify_report(v, loc, "tensor parameter %d has no buffer", i);
            continue;
        }
        if (b->scope != SCOPE_GLOBAL)
            verify_report(v, b->loc, "parameter @%s is not global", buffer_name(b));
        if (b->param_index != i)
            verify_report(v, b->loc, "parameter @%s has param_index %d, not %d", buffer_name(b),
                   b->param_index, i);
        if (b->rank < 0 || b->rank > IR_MAX_RANK)
            verify_report(v, b->loc, "parameter @%s has rank %d", buffer_name(b), b->rank);
        else
            vec_push(k->arena, &v->visible, b);
    }
}

bool ir_verify(Kernel *k, Diag *diag, const char *after_pass)
{
    Verifier verifier = {.k = k, .diag = diag, .pass = after_pass ? after_pass : "?"};
    Verifier *v = &verifier;
    int nvars = k->vars.count;
    v->in_scope = calloc((size_t)nvars + 1, sizeof(bool));
    v->bound = calloc((size_t)nvars + 1, sizeof(bool));
    v->lanes = calloc((size_t)nvars + 1, sizeof(int));
    v->scope_vars = calloc((size_t)nvars + 1, sizeof(int));
    if (!v->in_scope || !v->bound || !v->lanes || !v->scope_vars)
        ice("out of memory verifying %s", k->name);

    if (k->threads < 1 || k->threads > 1024)
        verify_report(v, k->loc, "%d threads per block", k->threads);
    check_params(v);
    verify_kernel_hopper(v);
    for (int i = 0; i < k->nconstraints; i++) {
        v->stmt_loc = k->constraints[i].loc;
        verify_scalar(v, k->constraints[i].cond, DT_BOOL, "constraint");
    }
    v->stmt_loc = k->loc;
    for (int i = 0; i < 3; i++)
        if (k->grid[i])
            verify_scalar(v, k->grid[i], DT_VOID, "grid dimension");
    for (int i = 0; i < 3; i++) {
        Var *block = k->block_vars[i];
        if (!block)
            continue;
        declare(v, block, VAR_BLOCK, "block variable");
        if (verify_var_known(v, block, k->loc) && block->block_dim != i)
            verify_report(v, k->loc, "block variable %%%s has block_dim %d, not %d", verify_var_name(block),
                   block->block_dim, i);
    }
    if (!k->body)
        verify_report(v, k->loc, "kernel has no body");
    else
        check_stmt(v, k->body);

    free(v->in_scope);
    free(v->bound);
    free(v->lanes);
    free(v->scope_vars);
    return v->errors == 0;
}
