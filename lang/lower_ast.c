/*
 * lower_ast.c -- one kernel instance becomes one IR Kernel.
 *
 * For each instance (template arguments bound to the template parameters)
 * the kernel's declaration is walked once: tensor parameters become
 * SCOPE_GLOBAL buffers whose unknown dimension names become VAR_SYMBOLs,
 * `where` conditions become constraints, kernel-level lets become
 * compile-time constants, and the launch body maps statement by statement
 * onto IR statements (see ir.h).  Typing and folding of expressions is
 * lower_expr.c's job; this file checks what statements need: constant
 * shapes and extents, ranks, store types, where tile operations may
 * appear.
 *
 * A failed instance still leaves its (partial) kernel in the module; the
 * front end returns NULL for the whole module whenever any error was
 * reported, so nobody sees it.
 */
#include <string.h>

#include "lower.h"

/* The largest thread block CUDA launches (cudaDevAttrMaxThreadsPerBlock on
 * every architecture tkc targets). */
#define LOWER_MAX_THREADS 1024

static void lower_stmt(Lower *lower, Stmt *seq, const AstNode *node);

static Stmt *new_stmt(Lower *lower, StmtKind kind, Loc loc) {
    return ir_new_stmt(lower->kernel, kind, loc);
}

static Stmt *new_seq(Lower *lower, Loc loc) {
    Stmt *seq = ir_seq(lower->kernel, NULL, 0);
    seq->loc = loc;
    return seq;
}

static Expr **expr_array(Lower *lower, Expr **items, int count) {
    Expr **array = arena_alloc(lower->kernel->arena,
                               sizeof(Expr *) * (size_t)(count ? count : 1));
    memcpy(array, items, sizeof(Expr *) * (size_t)count);
    return array;
}

static void mark_written(Buffer *buffer) {
    if (buffer->scope == SCOPE_GLOBAL) buffer->read_only = false;
}

const char *lower_scope_text(Scope scope) {
    switch (scope) {
    case SCOPE_GLOBAL: return "tensor";
    case SCOPE_SHARED: return "shared buffer";
    case SCOPE_FRAGMENT: return "fragment";
    default: return "local buffer";
    }
}

/* The buffer bound to `name`, or NULL after an error. */
static Buffer *find_buffer(Lower *lower, const char *name, Loc loc) {
    Binding *binding = lower_find(lower, name);
    if (binding && binding->kind == BIND_BUFFER) {
        if (!binding->buffer) lower->failed = true;
        return binding->buffer;
    }
    if (binding || program_lookup(lower->file, name))
        lower_error(lower, loc, "'%s' is not a buffer", name);
    else
        lower_error(lower, loc, "unknown buffer '%s'", name);
    return NULL;
}

/* A compile-time integer > 0 (shapes, extents). */
static bool positive_const(Lower *lower, const AstNode *node, const char *what,
                           int64_t *out) {
    if (!lower_const_int(lower, node, what, out)) return false;
    if (*out <= 0) {
        lower_error(lower, node->loc, "%s must be positive, got %lld", what,
                    (long long)*out);
        return false;
    }
    return true;
}

/* The value of a store to `buffer` (or assignment to a var) must have the
 * element type exactly; literals adapt. */
static Expr *store_value(Lower *lower, Value value, DType dtype,
                         const char *what, const char *name, Loc loc) {
    value = lower_adapt(lower, value, dtype, loc);
    if (!value.expr) return NULL;
    DType got = value.expr->dtype;
    if (got == dtype) return value.expr;
    lower_error(lower, loc, "storing %s into %s '%s' needs an explicit "
                "conversion, e.g. %s(...)", ir_dtype_name(got), what, name,
                ir_dtype_name(dtype));
    return NULL;
}

static bool indices(Lower *lower, Buffer *buffer, const AstNode *target,
                    Expr **out) {
    int count = ast_count(target->list);
    if (count != buffer->rank) {
        lower_error(lower, target->loc, "buffer '%s' has rank %d but %d "
                    "ind%s given", target->name, buffer->rank, count,
                    count == 1 ? "ex is" : "ices are");
        return false;
    }
    bool ok = true;
    for (int i = 0; i < count; i++) {
        out[i] = lower_int_index(lower, ast_at(target->list, i)).expr;
        if (!out[i]) ok = false;
    }
    return ok;
}

/* ---- statements ------------------------------------------------------ */

static Stmt *lower_body(Lower *lower, const AstNode *block) {
    Stmt *seq = new_seq(lower, block ? block->loc : (Loc){0});
    if (!block || block->kind == AST_ERROR) return seq;
    lower_push_scope(lower);
    for (int i = 0; i < ast_count(block->list); i++)
        lower_stmt(lower, seq, ast_at(block->list, i));
    lower_pop_scope(lower);
    return seq;
}

static void lower_alloc(Lower *lower, Stmt *seq, const AstNode *node) {
    Scope scope = (Scope)node->op;
    Binding *binding = lower_define(lower, node->name, BIND_BUFFER, node->loc);
    if (scope != SCOPE_LOCAL && lower->parallel_depth > 0) {
        lower_error(lower, node->loc, "a %s cannot be declared inside "
                    "parallel; declare it before the parallel loop",
                    lower_scope_text(scope));
        return;
    }
    DType dtype;
    if (!lower_resolve_type(lower, node->type, &dtype)) return;
    int rank = ast_count(node->list);
    if (rank > IR_MAX_RANK) {
        lower_error(lower, node->loc, "'%s' has %d dimensions; at most %d are "
                    "supported", node->name, rank, IR_MAX_RANK);
        return;
    }
    int64_t shape[IR_MAX_RANK];
    bool ok = true;
    for (int i = 0; i < rank; i++) {
        const char *what = arena_printf(lower->program->scratch, "the shape of '%s'",
                            node->name);
        if (!positive_const(lower, ast_at(node->list, i), what, &shape[i]))
            ok = false;
    }
    if (!ok) return;
    Buffer *buffer = ir_new_buffer(lower->kernel, node->name, dtype, scope, rank);
    buffer->loc = node->loc;
    for (int i = 0; i < rank; i++)
        buffer->shape[i] = lower_at(ir_int(lower->kernel, DT_I32, shape[i]),
                                    ast_at(node->list, i)->loc);
    binding->buffer = buffer;
    Stmt *s = new_stmt(lower, STMT_ALLOC, node->loc);
    s->u.alloc.buffer = buffer;
    ir_seq_append(lower->kernel, seq, s);
}

static void lower_let(Lower *lower, Stmt *seq, const AstNode *node) {
    Value value = lower_expr(lower, node->a);
    Binding *binding = lower_define(lower, node->name, BIND_CONST, node->loc);
    if (!value.expr) return;
    if (value.expr->kind == EXPR_INT || value.expr->kind == EXPR_FLOAT) {
        binding->value = value; /* a compile-time constant: no statement */
        return;
    }
    value = lower_materialize(lower, value, node->loc);
    if (!value.expr) return;
    Var *var = ir_new_var(lower->kernel, node->name, value.expr->dtype, VAR_LET);
    binding->kind = BIND_VAR;
    binding->var = var;
    Stmt *s = new_stmt(lower, STMT_LET, node->loc);
    s->u.let.var = var;
    s->u.let.value = value.expr;
    ir_seq_append(lower->kernel, seq, s);
}

static void lower_var(Lower *lower, Stmt *seq, const AstNode *node) {
    Binding *binding = lower_define(lower, node->name, BIND_VAR, node->loc);
    DType dtype;
    if (!lower_resolve_type(lower, node->type, &dtype)) return;
    Expr *init = NULL;
    if (node->a) {
        init = store_value(lower, lower_expr(lower, node->a), dtype, "var",
                           node->name, node->a->loc);
        if (!init) return;
    }
    Var *var = ir_new_var(lower->kernel, node->name, dtype, VAR_MUTABLE);
    binding->var = var;
    Stmt *s = new_stmt(lower, STMT_LET, node->loc);
    s->u.let.var = var;
    s->u.let.value = init;
    ir_seq_append(lower->kernel, seq, s);
}

static void lower_assign(Lower *lower, Stmt *seq, const AstNode *node) {
    const AstNode *target = node->a;
    Kernel *k = lower->kernel;
    if (target->kind == AST_IDENT) {
        Binding *binding = lower_find(lower, target->name);
        if (!binding) {
            lower_error(lower, target->loc, "unknown identifier '%s'", target->name);
            return;
        }
        if (binding->kind != BIND_VAR || !binding->var ||
            binding->var->kind != VAR_MUTABLE) {
            if (binding->kind == BIND_VAR && !binding->var) {
                lower->failed = true;
                return;
            }
            lower_error(lower, target->loc, "cannot assign to '%s': only 'var' "
                        "variables can be assigned", target->name);
            return;
        }
        Var *var = binding->var;
        Value value = lower_expr(lower, node->b);
        if (node->op != ASSIGN_PLAIN)
            value = lower_binary(lower, (BinOp)node->op,
                                 (Value){lower_at(ir_var(k, var), target->loc), false},
                                 value, node->loc);
        Expr *e = store_value(lower, value, var->dtype, "var", target->name,
                              node->b->loc);
        if (!e) return;
        Stmt *s = new_stmt(lower, STMT_ASSIGN, node->loc);
        s->u.assign.var = var;
        s->u.assign.value = e;
        ir_seq_append(k, seq, s);
        return;
    }
    Buffer *buffer = find_buffer(lower, target->name, target->loc);
    if (!buffer) return;
    Expr *index[IR_MAX_RANK];
    if (!indices(lower, buffer, target, index)) return;
    Value value = lower_expr(lower, node->b);
    if (node->op != ASSIGN_PLAIN) {
        Expr *old = lower_at(ir_load(k, buffer, index, NULL), target->loc);
        Expr *copies[IR_MAX_RANK];
        for (int i = 0; i < buffer->rank; i++) copies[i] = ir_copy_expr(k, index[i]);
        memcpy(index, copies, sizeof(Expr *) * (size_t)buffer->rank);
        value = lower_binary(lower, (BinOp)node->op, (Value){old, false}, value,
                             node->loc);
    }
    Expr *e = store_value(lower, value, buffer->dtype,
                          arena_printf(lower->program->scratch, "%s buffer",
                                       ir_dtype_name(buffer->dtype)),
                          target->name, node->b->loc);
    if (!e) return;
    mark_written(buffer);
    Stmt *s = new_stmt(lower, STMT_STORE, node->loc);
    s->u.store.buffer = buffer;
    s->u.store.indices = expr_array(lower, index, buffer->rank);
    s->u.store.value = e;
    ir_seq_append(k, seq, s);
}

static void lower_parallel(Lower *lower, Stmt *seq, const AstNode *node) {
    if (lower->parallel_depth > 0) {
        lower_error(lower, node->loc, "parallel loops cannot be nested");
        return;
    }
    int rank = ast_count(node->list);
    if (rank > IR_MAX_RANK) {
        lower_error(lower, node->loc, "parallel has %d axes; at most %d are "
                    "supported", rank, IR_MAX_RANK);
        return;
    }
    Stmt *s = new_stmt(lower, STMT_PARALLEL, node->loc);
    s->u.parallel.rank = rank;
    bool ok = true;
    lower_push_scope(lower);
    for (int i = 0; i < rank; i++) {
        const AstNode *axis = ast_at(node->list, i);
        const char *what = arena_printf(lower->program->scratch,
                                        "the extent of parallel axis '%s'",
                                        axis->name);
        if (!positive_const(lower, axis->a, what, &s->u.parallel.extent[i]))
            ok = false;
        Var *var = ir_new_var(lower->kernel, axis->name, DT_I32, VAR_LOOP);
        s->u.parallel.vars[i] = var;
        lower_define(lower, axis->name, BIND_VAR, axis->loc)->var = var;
    }
    lower->parallel_depth++;
    s->u.parallel.body = lower_body(lower, node->a);
    lower->parallel_depth--;
    lower_pop_scope(lower);
    if (ok) ir_seq_append(lower->kernel, seq, s);
}

static void lower_for(Lower *lower, Stmt *seq, const AstNode *node) {
    LoopKind kind;
    if (strcmp(node->text, "serial") == 0) kind = LOOP_SERIAL;
    else if (strcmp(node->text, "unroll") == 0) kind = LOOP_UNROLL;
    else if (strcmp(node->text, "pipelined") == 0) kind = LOOP_PIPELINED;
    else {
        lower_error(lower, node->loc, "unknown loop kind '%s'; expected "
                    "serial, unroll or pipelined", node->text);
        return;
    }
    int nbounds = ast_count(node->list);
    if (nbounds != 2 && nbounds != 3) {
        lower_error(lower, node->loc, "%s() takes (begin, end) or (begin, end, "
                    "step), got %d arguments", node->text, nbounds);
        return;
    }
    Stmt *s = new_stmt(lower, STMT_FOR, node->loc);
    s->u.loop.kind = kind;
    s->u.loop.step = 1;
    bool ok = true;
    for (int i = 0; i < 2; i++) {
        const AstNode *bound = ast_at(node->list, i);
        Expr *e = lower_int_index(lower, bound).expr;
        if (!e) ok = false;
        else if (kind == LOOP_UNROLL && e->kind != EXPR_INT) {
            lower_error(lower, bound->loc, "unroll bounds must be compile-time "
                        "constants; '%s' is not", lower_expr_text(lower, bound));
            ok = false;
        }
        if (i == 0) s->u.loop.begin = e;
        else s->u.loop.end = e;
    }
    if (nbounds == 3) {
        const AstNode *step = ast_at(node->list, 2);
        if (!lower_const_int(lower, step, "the loop step", &s->u.loop.step))
            ok = false;
        else if (s->u.loop.step == 0) {
            lower_error(lower, step->loc, "the loop step must not be 0");
            ok = false;
        }
    }
    if (kind == LOOP_PIPELINED && !lower_pipelined(lower, node, s)) ok = false;
    lower_push_scope(lower);
    Var *var = ir_new_var(lower->kernel, node->name, DT_I32, VAR_LOOP);
    s->u.loop.var = var;
    lower_define(lower, node->name, BIND_VAR, node->loc)->var = var;
    s->u.loop.body = lower_body(lower, node->a);
    lower_pop_scope(lower);
    if (ok) ir_seq_append(lower->kernel, seq, s);
}

static bool bool_cond(Lower *lower, const AstNode *node, Expr **out) {
    Value v = lower_expr(lower, node);
    if (!v.expr) return false;
    if (v.expr->dtype != DT_BOOL) {
        lower_error(lower, node->loc, "condition must be bool, got %s",
                    ir_dtype_name(v.expr->dtype));
        return false;
    }
    *out = v.expr;
    return true;
}

static void lower_if(Lower *lower, Stmt *seq, const AstNode *node) {
    Expr *cond = NULL;
    bool ok = bool_cond(lower, node->a, &cond);
    Stmt *then_body = lower_body(lower, node->b);
    Stmt *else_body = NULL;
    if (node->c && node->c->kind == AST_IF) {
        else_body = new_seq(lower, node->c->loc);
        lower_if(lower, else_body, node->c);
    } else if (node->c) {
        else_body = lower_body(lower, node->c);
    }
    if (!ok) return;
    if (cond->kind == EXPR_INT) { /* a template flag: keep one branch */
        Stmt *taken = cond->u.int_value ? then_body : else_body;
        if (taken) ir_seq_append(lower->kernel, seq, taken);
        return;
    }
    Stmt *s = new_stmt(lower, STMT_IF, node->loc);
    s->u.if_.cond = cond;
    s->u.if_.then_body = then_body;
    s->u.if_.else_body = else_body;
    ir_seq_append(lower->kernel, seq, s);
}

bool lower_region(Lower *lower, const AstNode *node, Region *region,
                  int64_t *shape, int *shape_rank) {
    Buffer *buffer = find_buffer(lower, node->name, node->loc);
    if (!buffer) return false;
    memset(region, 0, sizeof *region);
    region->buffer = buffer;
    Kernel *k = lower->kernel;
    bool ok = true;
    if (!node->list) {
        for (int i = 0; i < buffer->rank; i++) {
            region->start[i] = lower_at(ir_int(k, DT_I32, 0), node->loc);
            if (buffer->shape[i]->kind != EXPR_INT) {
                lower_error(lower, node->loc, "tensor '%s' has a run-time "
                            "shape; give its region as slices, e.g. %s[i : +N, "
                            "...]", node->name, node->name);
                return false;
            }
            region->extent[i] = buffer->shape[i]->u.int_value;
        }
    } else {
        int count = ast_count(node->list);
        if (count > buffer->rank) {
            lower_error(lower, node->loc, "buffer '%s' has rank %d but the "
                        "region has %d slice%s", node->name, buffer->rank, count,
                        count == 1 ? "" : "s");
            return false;
        }
        for (int i = 0; i < count; i++) {
            const AstNode *slice = ast_at(node->list, i);
            region->start[i] = lower_int_index(lower, slice->a).expr;
            if (!region->start[i]) ok = false;
            if (slice->b && !positive_const(lower, slice->b, "a slice extent",
                                            &region->extent[i]))
                ok = false;
        }
        for (int i = count; i < buffer->rank; i++) {
            if (buffer->shape[i]->kind != EXPR_INT) {
                lower_error(lower, node->loc, "tensor '%s' has a run-time "
                            "shape; give every dimension of its region as a "
                            "slice", node->name);
                return false;
            }
            region->start[i] = lower_at(ir_int(k, DT_I32, 0), node->loc);
            region->extent[i] = buffer->shape[i]->u.int_value;
        }
    }
    *shape_rank = 0;
    for (int i = 0; i < buffer->rank; i++)
        if (region->extent[i] > 1) shape[(*shape_rank)++] = region->extent[i];
    return ok;
}

static const char *shape_text(Lower *lower, const int64_t *shape, int rank) {
    char *text = arena_strdup(lower->program->scratch, "[");
    for (int i = 0; i < rank; i++)
        text = arena_printf(lower->program->scratch, "%s%s%lld", text,
                            i ? ", " : "", (long long)shape[i]);
    return arena_printf(lower->program->scratch, "%s]", text);
}

/* Inside parallel, copy and fill are per-thread: fragments (which are
 * spread over the threads) cannot take part. */
static bool per_thread_region(Lower *lower, const Region *region, Loc loc,
                              const char *op) {
    if (lower->parallel_depth == 0 || region->buffer->scope != SCOPE_FRAGMENT)
        return true;
    lower_error(lower, loc, "%s inside parallel runs per thread and cannot "
                "use fragment '%s'", op, region->buffer->name);
    return false;
}

static void lower_copy(Lower *lower, Stmt *seq, const AstNode *node) {
    Region src, dst;
    int64_t src_shape[IR_MAX_RANK], dst_shape[IR_MAX_RANK];
    int src_rank = 0, dst_rank = 0;
    bool ok = lower_region(lower, node->a, &src, src_shape, &src_rank);
    if (!lower_region(lower, node->b, &dst, dst_shape, &dst_rank)) ok = false;
    Hint tma = HINT_AUTO, multicast = HINT_AUTO;
    const AstNode *hint = lower_option(node->list, "tma");
    if (hint && !lower_hint(lower, hint, &tma)) ok = false;
    const AstNode *multicast_hint = lower_option(node->list, "multicast");
    if (multicast_hint && !lower_hint(lower, multicast_hint, &multicast)) ok = false;
    if (!ok) return;
    if (!per_thread_region(lower, &src, node->a->loc, "copy") ||
        !per_thread_region(lower, &dst, node->b->loc, "copy"))
        return;
    if (src_rank != dst_rank ||
        memcmp(src_shape, dst_shape, sizeof(int64_t) * (size_t)src_rank) != 0) {
        lower_error(lower, node->loc, "copy shapes differ: %s from '%s' vs %s "
                    "into '%s'", shape_text(lower, src_shape, src_rank),
                    node->a->name, shape_text(lower, dst_shape, dst_rank),
                    node->b->name);
        return;
    }
    mark_written(dst.buffer);
    Stmt *s = new_stmt(lower, STMT_COPY, node->loc);
    s->u.copy.src = src;
    s->u.copy.dst = dst;
    s->u.copy.tma = tma;
    s->u.copy.multicast_hint = multicast;
    s->u.copy.tensor_map = -1;
    ir_seq_append(lower->kernel, seq, s);
}

static void lower_fill(Lower *lower, Stmt *seq, const AstNode *node) {
    Region dst;
    int64_t shape[IR_MAX_RANK];
    int rank;
    Value value = lower_expr(lower, node->b);
    if (!lower_region(lower, node->a, &dst, shape, &rank) || !value.expr)
        return;
    if (!per_thread_region(lower, &dst, node->a->loc, "fill")) return;
    DType dtype = dst.buffer->dtype;
    value = lower_adapt(lower, value, dtype, node->b->loc);
    if (!value.expr) return;
    value = lower_materialize(lower, value, node->b->loc);
    if (!value.expr) return;
    if (value.expr->dtype != dtype) {
        if (value.expr->dtype == DT_BOOL || dtype == DT_BOOL) {
            lower_error(lower, node->b->loc, "cannot fill %s buffer '%s' with "
                        "a %s value", ir_dtype_name(dtype), dst.buffer->name,
                        ir_dtype_name(value.expr->dtype));
            return;
        }
        value.expr = lower_at(ir_cast(lower->kernel, CAST_CONVERT, dtype,
                                      value.expr), node->b->loc);
    }
    mark_written(dst.buffer);
    Stmt *s = new_stmt(lower, STMT_FILL, node->loc);
    s->u.fill.dst = dst;
    s->u.fill.value = value.expr;
    ir_seq_append(lower->kernel, seq, s);
}

static Buffer *fragment(Lower *lower, const char *name, Loc loc) {
    Buffer *buffer = find_buffer(lower, name, loc);
    if (buffer && buffer->scope != SCOPE_FRAGMENT) {
        lower_error(lower, loc, "reduce works on fragments; '%s' is a %s", name,
                    lower_scope_text(buffer->scope));
        return NULL;
    }
    return buffer;
}

static void lower_reduce(Lower *lower, Stmt *seq, const AstNode *node) {
    if (lower->parallel_depth > 0) {
        lower_error(lower, node->loc, "reduce cannot be used inside parallel");
        return;
    }
    static const char *const ops[] = {
#define X(e, text) text,
        IR_REDUCE_OPS(X)
#undef X
    };
    int op = -1;
    for (int i = 0; i < REDUCE_COUNT; i++)
        if (strcmp(ops[i], node->text) == 0) op = i;
    if (op < 0) {
        lower_error(lower, node->loc, "unknown reduction '%s'; expected sum, "
                    "max, min or absmax", node->text);
        return;
    }
    Buffer *src = fragment(lower, node->name, node->loc);
    Buffer *dst = fragment(lower, node->name2, node->loc);
    int64_t dim = -1;
    bool clear = true, ok = src && dst, seen_dim = false, seen_clear = false;
    for (int i = 0; i < ast_count(node->list); i++) {
        const AstNode *option = ast_at(node->list, i);
        if (strcmp(option->name, "dim") == 0 && !seen_dim) {
            seen_dim = true;
            if (!lower_const_int(lower, option->a, "dim", &dim)) ok = false;
        } else if (strcmp(option->name, "clear") == 0 && !seen_clear) {
            seen_clear = true;
            if (!lower_const_bool(lower, option->a, "clear", &clear)) ok = false;
        } else {
            lower_error(lower, option->loc, "%s reduce option '%s'; expected "
                        "dim= and optionally clear=",
                        seen_dim || seen_clear ? "repeated or unknown" : "unknown",
                        option->name);
            ok = false;
        }
    }
    if (!seen_dim) {
        lower_error(lower, node->loc, "reduce needs dim=");
        return;
    }
    if (!ok) return;
    if (dim < 0 || dim >= src->rank) {
        lower_error(lower, node->loc, "dim=%lld is out of range for '%s' of "
                    "rank %d", (long long)dim, src->name, src->rank);
        return;
    }
    bool shape_ok = dst->rank == src->rank - 1;
    for (int i = 0, j = 0; shape_ok && i < src->rank; i++) {
        if (i == dim) continue;
        if (src->shape[i]->u.int_value != dst->shape[j++]->u.int_value)
            shape_ok = false;
    }
    if (!shape_ok) {
        lower_error(lower, node->loc, "reduce of '%s' over dim %lld needs a "
                    "destination shaped like '%s' without that dimension",
                    src->name, (long long)dim, src->name);
        return;
    }
    if (src->dtype != dst->dtype) {
        lower_error(lower, node->loc, "reduce from %s fragment '%s' into %s "
                    "fragment '%s': the types must agree",
                    ir_dtype_name(src->dtype), src->name,
                    ir_dtype_name(dst->dtype), dst->name);
        return;
    }
    Stmt *s = new_stmt(lower, STMT_REDUCE, node->loc);
    s->u.reduce.op = (ReduceOp)op;
    s->u.reduce.src = src;
    s->u.reduce.dst = dst;
    s->u.reduce.dim = (int)dim;
    s->u.reduce.clear = clear;
    ir_seq_append(lower->kernel, seq, s);
}

static void lower_atomic(Lower *lower, Stmt *seq, const AstNode *node) {
    const AstNode *target = node->a;
    Buffer *buffer = find_buffer(lower, target->name, target->loc);
    Value value = lower_expr(lower, node->b);
    if (!buffer) return;
    if (buffer->scope != SCOPE_GLOBAL && buffer->scope != SCOPE_SHARED) {
        lower_error(lower, target->loc, "atomics work on tensors and shared "
                    "buffers; '%s' is a %s", target->name,
                    lower_scope_text(buffer->scope));
        return;
    }
    Expr *index[IR_MAX_RANK];
    if (!indices(lower, buffer, target, index)) return;
    Expr *e = store_value(lower, value, buffer->dtype,
                          arena_printf(lower->program->scratch, "%s buffer",
                                       ir_dtype_name(buffer->dtype)),
                          target->name, node->b->loc);
    if (!e) return;
    mark_written(buffer);
    Stmt *s = new_stmt(lower, STMT_ATOMIC, node->loc);
    s->u.atomic.op = (AtomicOp)node->op;
    s->u.atomic.buffer = buffer;
    s->u.atomic.indices = expr_array(lower, index, buffer->rank);
    s->u.atomic.value = e;
    ir_seq_append(lower->kernel, seq, s);
}

static void lower_stmt(Lower *lower, Stmt *seq, const AstNode *node) {
    Stmt *s;
    switch (node->kind) {
    case AST_BLOCK: ir_seq_append(lower->kernel, seq, lower_body(lower, node)); break;
    case AST_ALLOC: lower_alloc(lower, seq, node); break;
    case AST_LET: lower_let(lower, seq, node); break;
    case AST_VAR: lower_var(lower, seq, node); break;
    case AST_ASSIGN: lower_assign(lower, seq, node); break;
    case AST_PARALLEL: lower_parallel(lower, seq, node); break;
    case AST_FOR: lower_for(lower, seq, node); break;
    case AST_IF: lower_if(lower, seq, node); break;
    case AST_COPY: lower_copy(lower, seq, node); break;
    case AST_GEMM: lower_gemm(lower, seq, node); break;
    case AST_GEMM_WAIT: lower_gemm_wait(lower, seq, node); break;
    case AST_FILL: lower_fill(lower, seq, node); break;
    case AST_REDUCE: lower_reduce(lower, seq, node); break;
    case AST_ATOMIC: lower_atomic(lower, seq, node); break;
    case AST_SYNC:
        if (!node->flag && lower->parallel_depth > 0) {
            lower_error(lower, node->loc, "sync_threads cannot be used inside "
                        "parallel");
            break;
        }
        s = new_stmt(lower, STMT_BARRIER, node->loc);
        s->u.barrier.warp_only = node->flag;
        ir_seq_append(lower->kernel, seq, s);
        break;
    case AST_RETURN:
        ir_seq_append(lower->kernel, seq, new_stmt(lower, STMT_RETURN, node->loc));
        break;
    case AST_ASSERT: {
        Expr *cond;
        if (!bool_cond(lower, node->a, &cond)) break;
        s = new_stmt(lower, STMT_ASSERT, node->loc);
        s->u.assert_.cond = cond;
        s->u.assert_.message =
            node->text ? arena_strdup(lower->kernel->arena, node->text) : NULL;
        ir_seq_append(lower->kernel, seq, s);
        break;
    }
    case AST_ERROR: lower->failed = true; break;
    default:
        lower_error(lower, node->loc, "a %s cannot be used here",
                    ast_kind_name(node->kind));
        break;
    }
}

/* ---- the kernel ----------------------------------------------------- */

/* A tensor dimension or stride: an i32 expression over constants and
 * symbols (unknown names become new symbols). */
static Expr *lower_dim(Lower *lower, const AstNode *node) {
    lower->make_symbols = true;
    Value v = lower_materialize(lower, lower_expr(lower, node), node->loc);
    lower->make_symbols = false;
    if (!v.expr) return NULL;
    if (v.expr->dtype != DT_I32) {
        lower_error(lower, node->loc, "tensor dimensions and strides are i32, "
                    "got %s", ir_dtype_name(v.expr->dtype));
        return NULL;
    }
    return v.expr;
}

static void lower_params(Lower *lower, const AstNode *kernel) {
    Kernel *k = lower->kernel;
    int count = ast_count(kernel->list2);
    k->params = arena_alloc(k->arena, sizeof(Param) * (size_t)(count ? count : 1));
    k->nparams = count;
    for (int i = 0; i < count; i++) {
        const AstNode *node = ast_at(kernel->list2, i);
        Param *param = &k->params[i];
        param->name = arena_strdup(k->arena, node->name);
        DType dtype = DT_F32;
        bool typed_ok = lower_resolve_type(lower, node->type, &dtype);
        if (!node->flag) {
            param->kind = PARAM_SCALAR;
            param->var = ir_new_var(k, node->name, dtype, VAR_SCALAR);
            Binding *binding = lower_define(lower, node->name, BIND_VAR, node->loc);
            if (typed_ok) binding->var = param->var;
            continue;
        }
        param->kind = PARAM_TENSOR;
        int rank = ast_count(node->list);
        int nstrides = ast_count(node->list2);
        if (rank > IR_MAX_RANK) {
            lower_error(lower, node->loc, "tensor '%s' has %d dimensions; at "
                        "most %d are supported", node->name, rank, IR_MAX_RANK);
            rank = IR_MAX_RANK;
            typed_ok = false;
        }
        if (node->list2 && nstrides != ast_count(node->list)) {
            lower_error(lower, node->loc, "tensor '%s' has %d dimensions but %d "
                        "strides", node->name, ast_count(node->list), nstrides);
            typed_ok = false;
        }
        Buffer *buffer = ir_new_buffer(k, node->name, dtype, SCOPE_GLOBAL, rank);
        buffer->param_index = i;
        buffer->read_only = true;
        buffer->loc = node->loc;
        if (node->a) {
            buffer->has_cache_hint = true;
            lower_cache_hint(lower, node->a, &buffer->cache_hint);
        }
        param->buffer = buffer;
        for (int d = 0; d < rank; d++) {
            buffer->shape[d] = lower_dim(lower, ast_at(node->list, d));
            if (!buffer->shape[d]) typed_ok = false;
        }
        for (int d = 0; d < rank && d < nstrides && node->list2; d++) {
            buffer->strides[d] = lower_dim(lower, ast_at(node->list2, d));
            if (!buffer->strides[d]) typed_ok = false;
        }
        Binding *binding = lower_define(lower, node->name, BIND_BUFFER, node->loc);
        if (!typed_ok) continue;
        binding->buffer = buffer;
        if (node->list2) continue;
        /* contiguous row-major: stride[d] = shape[d+1] * ... * shape[rank-1] */
        buffer->strides[rank - 1] = lower_at(ir_int(k, DT_I32, 1), node->loc);
        for (int d = rank - 2; d >= 0; d--) {
            const Expr *inner = buffer->strides[d + 1];
            if (inner->kind == EXPR_INT && inner->u.int_value == 1) {
                buffer->strides[d] = ir_copy_expr(k, buffer->shape[d + 1]);
                continue;
            }
            Value next = {ir_copy_expr(k, buffer->strides[d + 1]), false};
            Value extent = {ir_copy_expr(k, buffer->shape[d + 1]), false};
            buffer->strides[d] = lower_binary(lower, BIN_MUL, next, extent,
                                              node->loc).expr;
        }
    }
}

static void lower_constraints(Lower *lower, const AstNode *kernel) {
    Kernel *k = lower->kernel;
    int count = ast_count(kernel->list3);
    k->constraints = arena_alloc(k->arena,
                                 sizeof(Constraint) * (size_t)(count ? count : 1));
    for (int i = 0; i < count; i++) {
        const AstNode *where = ast_at(kernel->list3, i);
        Expr *cond;
        if (!bool_cond(lower, where->a, &cond)) continue;
        if (cond->kind == EXPR_INT) {
            if (!cond->u.int_value)
                lower_error(lower, where->loc, "constraint '%s' is false",
                            where->text);
            continue;
        }
        Constraint *c = &k->constraints[k->nconstraints++];
        c->cond = cond;
        c->text = arena_strdup(k->arena, where->text);
        c->loc = where->loc;
    }
}

static void lower_launch(Lower *lower, const AstNode *launch) {
    Kernel *k = lower->kernel;
    int nvars = ast_count(launch->list), ngrid = ast_count(launch->list2);
    if (ngrid < 1 || ngrid > 3) {
        lower_error(lower, launch->loc, "grid takes 1 to 3 dimensions, got %d",
                    ngrid);
        return;
    }
    if (nvars > ngrid) {
        lower_error(lower, launch->loc, "launch names %d block variables but "
                    "the grid has %d dimension%s", nvars, ngrid,
                    ngrid == 1 ? "" : "s");
        return;
    }
    for (int i = 0; i < ngrid; i++) {
        const AstNode *node = ast_at(launch->list2, i);
        Value v = lower_materialize(lower, lower_expr(lower, node), node->loc);
        if (!v.expr) continue;
        if (v.expr->dtype != DT_I32) {
            lower_error(lower, node->loc, "grid dimensions are i32, got %s",
                        ir_dtype_name(v.expr->dtype));
            continue;
        }
        k->grid[i] = v.expr;
    }
    int64_t threads;
    if (positive_const(lower, launch->a, "the thread count", &threads)) {
        if (threads > LOWER_MAX_THREADS)
            lower_error(lower, launch->a->loc, "threads(%lld) is more than the "
                        "%d threads a block may have", (long long)threads,
                        LOWER_MAX_THREADS);
        k->threads = (int)(threads > LOWER_MAX_THREADS ? 1 : threads);
        k->compute_threads = k->threads;
    }
    lower_launch_hints(lower, launch->c);
    lower_push_scope(lower);
    for (int i = 0; i < nvars; i++) {
        const AstNode *name = ast_at(launch->list, i);
        Var *var = ir_new_var(k, name->name, DT_I32, VAR_BLOCK);
        var->block_dim = i;
        k->block_vars[i] = var;
        lower_define(lower, name->name, BIND_VAR, name->loc)->var = var;
    }
    Stmt *body = lower_body(lower, launch->b);
    for (int i = 0; i < body->u.seq.count; i++)
        ir_seq_append(k, k->body, body->u.seq.items[i]);
    k->body->loc = launch->loc;
    lower_pop_scope(lower);
}

static void bind_template_args(Lower *lower, const AstNode *kernel,
                               const AstNode *instance) {
    for (int i = 0; instance && i < ast_count(kernel->list); i++) {
        const AstNode *tparam = ast_at(kernel->list, i);
        const AstNode *targ = ast_at(instance->list, i);
        Binding *binding;
        if (targ->op == TARG_DTYPE) {
            binding = lower_define(lower, tparam->name, BIND_DTYPE, tparam->loc);
            ir_dtype_from_name(targ->name, &binding->dtype);
        } else {
            binding = lower_define(lower, tparam->name, BIND_CONST, tparam->loc);
            Expr *e = ir_int(lower->kernel, targ->op == TARG_BOOL ? DT_BOOL : DT_I32,
                             targ->int_value);
            binding->value = (Value){lower_at(e, targ->loc), targ->op == TARG_INT};
        }
    }
}

static void instantiate(Program *program, Decl *decl, const AstNode *instance) {
    const AstNode *node = decl->node;
    const char *label = instance ? instance->name : "default";
    Kernel *k = ir_new_kernel(program->module,
                              arena_printf(program->arena, "%s__%s", decl->name,
                                           label));
    k->source_name = arena_strdup(program->arena, decl->name);
    k->instance = arena_strdup(program->arena, label);
    k->loc = node->loc;
    PtrVec symbols = {0};
    Lower lower = {.program = program, .kernel = k, .file = decl->file,
                   .kernel_name = decl->name,
                   .instance = ast_count(node->list) ? label : NULL,
                   .instance_loc = instance ? instance->loc : node->loc,
                   .symbols = &symbols};
    lower_push_scope(&lower);
    bind_template_args(&lower, node, instance);
    lower_params(&lower, node);
    k->symbols = (Var **)symbols.items;
    k->nsymbols = symbols.count;
    lower_constraints(&lower, node);
    for (int i = 0; i < ast_count(node->list5); i++) {
        const AstNode *item = ast_at(node->list5, i);
        if (item->kind == AST_LAUNCH) {
            lower_launch(&lower, item);
            continue;
        }
        if (item->kind != AST_LET) continue;
        Value v = lower_expr(&lower, item->a);
        Binding *binding = lower_define(&lower, item->name, BIND_CONST, item->loc);
        if (!v.expr) continue;
        if (v.expr->kind != EXPR_INT && v.expr->kind != EXPR_FLOAT) {
            lower_error(&lower, item->loc, "'%s': a let before launch must be "
                        "a compile-time constant", item->name);
            continue;
        }
        binding->value = v;
    }
}

void lower_kernel(Program *program, Decl *decl) {
    const AstNode *node = decl->node;
    if (ast_count(node->list4) == 0) {
        instantiate(program, decl, NULL);
        return;
    }
    for (int i = 0; i < ast_count(node->list4); i++)
        if (!ast_at(node->list4, i)->flag) /* flag: sema found it bad */
            instantiate(program, decl, ast_at(node->list4, i));
}
