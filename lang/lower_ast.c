/*
 * lower_ast.c -- one kernel instance becomes one IR Kernel.
 *
 * For each instance (template arguments bound to the template parameters)
 * the kernel's declaration is walked once: tensor parameters become
 * SCOPE_GLOBAL buffers whose unknown dimension names become VAR_SYMBOLs,
 * `where` conditions become constraints, kernel-level lets become
 * compile-time constants, and the launch body maps statement by statement
 * onto IR statements (see ir.h).  This file walks the statements and
 * lowers the ones that give the kernel its structure: blocks, let and var,
 * parallel and for loops, if, sync, return and assert.  The statements
 * that use buffers (alloc, assignment, atomics, copy, fill, reduce) are
 * lower_buffer.c's, gemm and the Hopper hints lower_hopper.c's, and the
 * typing and folding of expressions lower_expr.c's.  What is checked here:
 * constant extents, loop bounds and steps, bool conditions, the grid and
 * thread count of the launch, the dimensions and strides of tensor
 * parameters.
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

/* A compile-time integer > 0 (shapes, extents). */
bool lower_positive_const(Lower *lower, const AstNode *node, const char *what,
                          int64_t *out) {
    if (!lower_const_int(lower, node, what, out)) return false;
    if (*out <= 0) {
        lower_error(lower, node->loc, "%s must be positive, got %lld", what,
                    (long long)*out);
        return false;
    }
    return true;
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
        init = lower_store_value(lower, lower_expr(lower, node->a), dtype,
                                 "var", node->name, node->a->loc);
        if (!init) return;
    }
    Var *var = ir_new_var(lower->kernel, node->name, dtype, VAR_MUTABLE);
    binding->var = var;
    Stmt *s = new_stmt(lower, STMT_LET, node->loc);
    s->u.let.var = var;
    s->u.let.value = init;
    ir_seq_append(lower->kernel, seq, s);
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
        if (!lower_positive_const(lower, axis->a, what,
                                  &s->u.parallel.extent[i]))
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
    if (lower_positive_const(lower, launch->a, "the thread count",
                             &threads)) {
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
