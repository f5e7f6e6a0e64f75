/*
 * lower_buffer.c -- the statements that use buffers: declaring a shared,
 * fragment or local buffer, storing one element (assignment, which also
 * covers 'var' variables, and atomics), and the tile statements over
 * regions (copy, fill, reduce).
 *
 * lower_ast.c walks a kernel's statements and hands these ones here; they
 * share the buffer lookup, the index and store-type checks and the
 * region rules, which is why they live together.  What is checked is what
 * the passes would otherwise reject far from the source: constant shapes,
 * one index per dimension, store types (literals adapt, everything else
 * needs an explicit conversion), equal region shapes, and no fragment in
 * per-thread code.  Every store to a tensor clears its read_only flag
 * (lower_ast.c sets it on every tensor parameter), which decides whether
 * loads of the tensor may use ld.global.nc.
 * lower_region is shared with the gemm of lower_hopper.c.
 */
#include <string.h>

#include "lower.h"

static Expr **expr_array(Lower *lower, Expr **items, int count) {
    Expr **array = arena_alloc(lower->kernel->arena,
                               sizeof(Expr *) * (size_t)(count ? count : 1));
    memcpy(array, items, sizeof(Expr *) * (size_t)count);
    return array;
}

static void mark_written(Buffer *buffer) {
    if (buffer->scope == SCOPE_GLOBAL) buffer->read_only = false;
}

/* The value an element store or an atomic writes to buffer (converted to
 * its dtype, or NULL after a diagnostic), and the buffer marked written. */
static Expr *written_value(Lower *lower, Value value, Buffer *buffer,
                           const AstNode *target, Loc loc) {
    Expr *e = lower_store_value(lower, value, buffer->dtype,
                                arena_printf(lower->program->scratch,
                                             "%s buffer",
                                             ir_dtype_name(buffer->dtype)),
                                target->name, loc);
    if (e) mark_written(buffer);
    return e;
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

/* The value of a store to `buffer` (or assignment to a var) must have the
 * element type exactly; literals adapt. */
Expr *lower_store_value(Lower *lower, Value value, DType dtype,
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

void lower_alloc(Lower *lower, Stmt *seq, const AstNode *node) {
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
        if (!lower_positive_const(lower, ast_at(node->list, i), what,
                                  &shape[i]))
            ok = false;
    }
    if (!ok) return;
    Buffer *buffer = ir_new_buffer(lower->kernel, node->name, dtype, scope, rank);
    buffer->loc = node->loc;
    for (int i = 0; i < rank; i++)
        buffer->shape[i] = lower_at(ir_int(lower->kernel, DT_I32, shape[i]),
                                    ast_at(node->list, i)->loc);
    binding->buffer = buffer;
    Stmt *s = ir_new_stmt(lower->kernel, STMT_ALLOC, node->loc);
    s->u.alloc.buffer = buffer;
    ir_seq_append(lower->kernel, seq, s);
}

void lower_assign(Lower *lower, Stmt *seq, const AstNode *node) {
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
        Expr *e = lower_store_value(lower, value, var->dtype, "var",
                                    target->name, node->b->loc);
        if (!e) return;
        Stmt *s = ir_new_stmt(lower->kernel, STMT_ASSIGN, node->loc);
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
    Expr *e = written_value(lower, value, buffer, target, node->b->loc);
    if (!e) return;
    Stmt *s = ir_new_stmt(lower->kernel, STMT_STORE, node->loc);
    s->u.store.buffer = buffer;
    s->u.store.indices = expr_array(lower, index, buffer->rank);
    s->u.store.value = e;
    ir_seq_append(k, seq, s);
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
            if (slice->b && !lower_positive_const(lower, slice->b,
                                                  "a slice extent",
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

void lower_copy(Lower *lower, Stmt *seq, const AstNode *node) {
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
    Stmt *s = ir_new_stmt(lower->kernel, STMT_COPY, node->loc);
    s->u.copy.src = src;
    s->u.copy.dst = dst;
    s->u.copy.tma = tma;
    s->u.copy.multicast_hint = multicast;
    s->u.copy.tensor_map = -1;
    ir_seq_append(lower->kernel, seq, s);
}

void lower_fill(Lower *lower, Stmt *seq, const AstNode *node) {
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
    Stmt *s = ir_new_stmt(lower->kernel, STMT_FILL, node->loc);
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

void lower_reduce(Lower *lower, Stmt *seq, const AstNode *node) {
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
    Stmt *s = ir_new_stmt(lower->kernel, STMT_REDUCE, node->loc);
    s->u.reduce.op = (ReduceOp)op;
    s->u.reduce.src = src;
    s->u.reduce.dst = dst;
    s->u.reduce.dim = (int)dim;
    s->u.reduce.clear = clear;
    ir_seq_append(lower->kernel, seq, s);
}

void lower_atomic(Lower *lower, Stmt *seq, const AstNode *node) {
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
    Expr *e = written_value(lower, value, buffer, target, node->b->loc);
    if (!e) return;
    Stmt *s = ir_new_stmt(lower->kernel, STMT_ATOMIC, node->loc);
    s->u.atomic.op = (AtomicOp)node->op;
    s->u.atomic.buffer = buffer;
    s->u.atomic.indices = expr_array(lower, index, buffer->rank);
    s->u.atomic.value = e;
    ir_seq_append(lower->kernel, seq, s);
}
