/*
 * sema.c -- checks that need no kernel instance.
 *
 * Runs once over the whole program after parsing: collects the top-level
 * declarations (one namespace for the program, so every kernel name, and
 * thus every PTX entry name, is unique), checks template parameters and
 * instance lists, the shape of kernel bodies, fn signatures and the fn
 * call graph (fns are inlined, so recursion cannot be compiled), evaluates
 * every constant and type-checks every fn body once on its own.
 *
 * The statements of a launch body are walked once for what is plain
 * syntax: the options each statement takes (gemm's transposes and wait,
 * a copy's tma hint, pipelined's stages, the launch's `with` hints), and
 * the tile statements that only exist at block level (gemm, gemm_wait,
 * pipelined loops) not appearing inside parallel (nor a pipelined loop in
 * another).
 *
 * Everything that depends on template arguments (types of expressions,
 * constant shapes, ...) is checked per instance by lower_ast.c.  A
 * declaration found bad here is marked and not lowered, which keeps one
 * mistake from being reported again by every instance.
 */
#include <string.h>

#include "lower.h"

static bool is_dtype_name(const char *name) {
    DType dtype;
    return ir_dtype_from_name(name, &dtype);
}

/* Names that would make the program ambiguous to read. */
static bool check_name(Program *program, const char *name, Loc loc) {
    if (is_dtype_name(name)) {
        diag_error(program->diag, loc,
                   "'%s' is a type name and cannot be redefined", name);
        return false;
    }
    return true;
}

static void collect(Program *program) {
    for (int f = 0; f < program->files.count; f++) {
        SourceFile *file = program->files.items[f];
        for (int i = 0; i < file->ast->decls.count; i++) {
            AstNode *node = file->ast->decls.items[i];
            DeclKind kind;
            if (node->kind == AST_CONST) kind = DECL_CONST;
            else if (node->kind == AST_FN) kind = DECL_FN;
            else if (node->kind == AST_KERNEL) kind = DECL_KERNEL;
            else continue;
            if (!check_name(program, node->name, node->loc)) continue;
            Decl *previous = NULL;
            for (int j = 0; j < program->decls.count && !previous; j++) {
                Decl *other = program->decls.items[j];
                if (strcmp(other->name, node->name) == 0) previous = other;
            }
            if (previous) {
                diag_error(program->diag, node->loc, "redefinition of '%s'",
                           node->name);
                diag_note(program->diag, previous->node->loc,
                          "previous definition of '%s' is here", node->name);
                continue;
            }
            Decl *decl = arena_alloc(program->scratch, sizeof *decl);
            decl->kind = kind;
            decl->name = node->name;
            decl->node = node;
            decl->file = file;
            vec_push(program->scratch, &file->decls, decl);
            vec_push(program->scratch, &program->decls, decl);
        }
    }
}

static bool check_tparams(Program *program, const AstNode *kernel) {
    bool ok = true;
    for (int i = 0; i < ast_count(kernel->list); i++) {
        const AstNode *tparam = ast_at(kernel->list, i);
        if (strcmp(tparam->text, "dtype") != 0 &&
            strcmp(tparam->text, "int") != 0 &&
            strcmp(tparam->text, "bool") != 0) {
            diag_error(program->diag, tparam->loc,
                       "template parameter '%s' must be a dtype, int or "
                       "bool, not '%s'", tparam->name, tparam->text);
            ok = false;
        }
        if (!check_name(program, tparam->name, tparam->loc)) ok = false;
        for (int j = 0; j < i; j++) {
            const AstNode *other = ast_at(kernel->list, j);
            if (strcmp(other->name, tparam->name) == 0) {
                diag_error(program->diag, tparam->loc,
                           "duplicate template parameter '%s'", tparam->name);
                ok = false;
            }
        }
    }
    return ok;
}

static const char *targ_kind_name(int kind) {
    return kind == TARG_DTYPE ? "a dtype" : kind == TARG_INT ? "an int" : "a bool";
}

/* A bad instance is marked (flag) and skipped by lower_kernel; the other
 * instances of the kernel are still compiled and checked. */
static bool check_instances(Program *program, const AstNode *kernel) {
    int ntparams = ast_count(kernel->list);
    if (ntparams > 0 && ast_count(kernel->list4) == 0) {
        diag_error(program->diag, kernel->loc,
                   "kernel '%s' has template parameters but no instances",
                   kernel->name);
        return false;
    }
    for (int i = 0; i < ast_count(kernel->list4); i++) {
        AstNode *instance = ast_at(kernel->list4, i);
        bool ok = true;
        for (int j = 0; j < i; j++) {
            const AstNode *other = ast_at(kernel->list4, j);
            if (strcmp(other->name, instance->name) == 0) {
                diag_error(program->diag, instance->loc,
                           "duplicate instance '%s' of kernel '%s'",
                           instance->name, kernel->name);
                diag_note(program->diag, other->loc,
                          "previous instance '%s' is here", other->name);
                ok = false;
                break;
            }
        }
        int nargs = ast_count(instance->list);
        if (nargs != ntparams) {
            diag_error(program->diag, instance->loc,
                       "instance '%s': kernel '%s' takes %d template "
                       "argument%s, got %d", instance->name, kernel->name,
                       ntparams, ntparams == 1 ? "" : "s", nargs);
            instance->flag = true;
            continue;
        }
        for (int j = 0; j < nargs; j++) {
            const AstNode *targ = ast_at(instance->list, j);
            const AstNode *tparam = ast_at(kernel->list, j);
            int expected = strcmp(tparam->text, "dtype") == 0 ? TARG_DTYPE
                           : strcmp(tparam->text, "int") == 0 ? TARG_INT
                                                              : TARG_BOOL;
            if (targ->op != expected) {
                diag_error(program->diag, targ->loc,
                           "instance '%s': template argument %d is %s, "
                           "expected %s (%s)", instance->name, j + 1,
                           targ_kind_name(targ->op),
                           tparam->text, tparam->name);
                ok = false;
            } else if (targ->op == TARG_DTYPE && !is_dtype_name(targ->name)) {
                diag_error(program->diag, targ->loc,
                           "instance '%s': unknown dtype '%s'", instance->name,
                           targ->name);
                ok = false;
            }
        }
        instance->flag = !ok;
    }
    return true;
}

/* ---- statement options and placement ---------------------------------- */

/* Each option of `options` is one of `allowed` (a NULL-terminated list)
 * and appears once.  `what` names the statement for the message. */
static bool check_options(Program *program, const PtrVec *options,
                          const char *const *allowed, const char *what) {
    bool ok = true;
    for (int i = 0; i < ast_count(options); i++) {
        const AstNode *option = ast_at(options, i);
        bool known = false;
        for (int j = 0; allowed[j]; j++)
            if (strcmp(allowed[j], option->name) == 0) known = true;
        if (!known) {
            char expected[256] = "";
            for (int j = 0; allowed[j]; j++)
                snprintf(expected + strlen(expected),
                         sizeof expected - strlen(expected), "%s%s=",
                         j == 0 ? "" : allowed[j + 1] ? ", " : " or ",
                         allowed[j]);
            diag_error(program->diag, option->loc, "unknown option '%s' of "
                       "%s; expected %s", option->name, what, expected);
            ok = false;
            continue;
        }
        for (int j = 0; j < i; j++) {
            if (strcmp(ast_at(options, j)->name, option->name) == 0) {
                diag_error(program->diag, option->loc, "option '%s' of %s is "
                           "given twice", option->name, what);
                ok = false;
                break;
            }
        }
    }
    return ok;
}

static bool has_option(const PtrVec *options, const char *name) {
    for (int i = 0; i < ast_count(options); i++)
        if (strcmp(ast_at(options, i)->name, name) == 0) return true;
    return false;
}

static bool check_loop(Program *program, const AstNode *node,
                       int parallel_depth, int pipelined_depth) {
    static const char *const options[] = {"stages", "release_lag", NULL};
    if (strcmp(node->text, "pipelined") != 0) {
        if (!node->list2) return true;
        diag_error(program->diag, ast_at(node->list2, 0)->loc, "%s loops "
                   "take no options; only pipelined takes stages=",
                   node->text);
        return false;
    }
    bool ok = check_options(program, node->list2, options, "pipelined");
    if (ast_count(node->list) != 2) {
        diag_error(program->diag, node->loc, "pipelined takes (begin, end, "
                   "stages = S), got %d bound%s", ast_count(node->list),
                   ast_count(node->list) == 1 ? "" : "s");
        ok = false;
    }
    if (!has_option(node->list2, "stages")) {
        diag_error(program->diag, node->loc, "pipelined needs the depth of "
                   "its pipeline: pipelined(begin, end, stages = S)");
        ok = false;
    }
    if (parallel_depth > 0) {
        diag_error(program->diag, node->loc, "a pipelined loop runs at block "
                   "level and cannot be inside parallel");
        ok = false;
    } else if (pipelined_depth > 0) {
        diag_error(program->diag, node->loc, "pipelined loops cannot be "
                   "nested");
        ok = false;
    }
    return ok;
}

static bool check_gemm(Program *program, const AstNode *node,
                       int parallel_depth) {
    static const char *const options[] = {"transpose_a", "transpose_b",
                                          "clear", "wait", NULL};
    bool ok = check_options(program, node->list, options, "gemm");
    if (node->c->list) {
        diag_error(program->diag, node->c->loc, "the gemm accumulator must "
                   "be a whole fragment; write '%s' without slices",
                   node->c->name);
        ok = false;
    }
    if (parallel_depth > 0) {
        diag_error(program->diag, node->loc, "gemm is a block-level tile "
                   "statement and cannot be inside parallel");
        ok = false;
    }
    return ok;
}

/* Walks a statement and what it contains. */
static bool check_stmts(Program *program, const AstNode *node,
                        int parallel_depth, int pipelined_depth) {
    static const char *const copy_options[] = {"tma", "multicast", NULL};
    if (!node) return true;
    bool ok = true;
    switch (node->kind) {
    case AST_BLOCK:
        for (int i = 0; i < ast_count(node->list); i++)
            if (!check_stmts(program, ast_at(node->list, i), parallel_depth,
                             pipelined_depth))
                ok = false;
        return ok;
    case AST_PARALLEL:
        return check_stmts(program, node->a, parallel_depth + 1,
                           pipelined_depth);
    case AST_FOR: {
        ok = check_loop(program, node, parallel_depth, pipelined_depth);
        bool pipelined = strcmp(node->text, "pipelined") == 0;
        if (!check_stmts(program, node->a, parallel_depth,
                         pipelined_depth + pipelined))
            ok = false;
        return ok;
    }
    case AST_IF:
        ok = check_stmts(program, node->b, parallel_depth, pipelined_depth);
        if (!check_stmts(program, node->c, parallel_depth, pipelined_depth))
            ok = false;
        return ok;
    case AST_COPY:
        return check_options(program, node->list, copy_options, "copy");
    case AST_GEMM:
        return check_gemm(program, node, parallel_depth);
    case AST_GEMM_WAIT:
        /* the wgmma groups belong to the warpgroup, not to one thread */
        if (parallel_depth == 0) return true;
        diag_error(program->diag, node->loc, "gemm_wait is a block-level "
                   "statement and cannot be inside parallel");
        return false;
    default:
        return true;
    }
}

/* A tensor parameter's trailing `cache(P)`: the grammar takes any word
 * there (like `with`), so that a misspelling gets a message. */
static bool check_param_hints(Program *program, const AstNode *kernel) {
    bool ok = true;
    for (int i = 0; i < ast_count(kernel->list2); i++) {
        const AstNode *param = ast_at(kernel->list2, i);
        if (param->kind != AST_PARAM || !param->a || strcmp(param->a->name, "cache") == 0)
            continue;
        diag_error(program->diag, param->a->loc, "expected 'cache(...)' or the next "
                   "parameter after tensor '%s', found '%s(...)'", param->name,
                   param->a->name);
        ok = false;
    }
    return ok;
}

/* The launch's `with` hints and its body's statements. */
static bool check_launch(Program *program, const AstNode *launch) {
    static const char *const hints[] = {"tma", "warp_specialize", "cluster", "load_cache",
                                        "store_cache", "min_blocks", NULL};
    bool ok = true;
    const AstNode *with = launch->c;
    if (with && strcmp(with->name, "with") != 0) {
        diag_error(program->diag, with->loc, "expected 'with' or the launch "
                   "body after threads(...), found '%s'", with->name);
        ok = false;
    }
    if (with && !check_options(program, with->list, hints, "the launch"))
        ok = false;
    if (!check_stmts(program, launch->b, 0, 0)) ok = false;
    return ok;
}

/* Kernel body: compile-time lets, then exactly one launch, last. */
static bool check_body(Program *program, const AstNode *kernel) {
    const AstNode *launch = NULL;
    bool ok = true;
    for (int i = 0; i < ast_count(kernel->list5); i++) {
        const AstNode *item = ast_at(kernel->list5, i);
        if (item->kind == AST_ERROR) continue;
        if (launch) {
            diag_error(program->diag, item->loc,
                       "nothing may follow the launch statement of kernel '%s'",
                       kernel->name);
            return false;
        }
        if (item->kind == AST_LAUNCH) launch = item;
    }
    if (!launch) {
        diag_error(program->diag, kernel->loc,
                   "kernel '%s' has no launch statement", kernel->name);
        return false;
    }
    if (strcmp(launch->text, "grid") != 0) {
        diag_error(program->diag, launch->loc,
                   "expected 'grid' after 'in', found '%s'", launch->text);
        ok = false;
    }
    if (strcmp(launch->name2, "threads") != 0) {
        diag_error(program->diag, launch->loc,
                   "expected 'threads' after the grid, found '%s'",
                   launch->name2);
        ok = false;
    }
    if (!check_launch(program, launch)) ok = false;
    return ok;
}

static bool check_type_name(Program *program, const AstNode *type) {
    if (is_dtype_name(type->name)) return true;
    diag_error(program->diag, type->loc, "unknown type '%s'", type->name);
    return false;
}

static bool check_fn_signature(Program *program, const AstNode *fn) {
    bool ok = check_type_name(program, fn->type);
    for (int i = 0; i < ast_count(fn->list); i++) {
        const AstNode *param = ast_at(fn->list, i);
        if (!check_type_name(program, param->type)) ok = false;
        if (!check_name(program, param->name, param->loc)) ok = false;
        for (int j = 0; j < i; j++) {
            if (strcmp(ast_at(fn->list, j)->name, param->name) == 0) {
                diag_error(program->diag, param->loc,
                           "duplicate parameter '%s'", param->name);
                ok = false;
            }
        }
    }
    return ok;
}

/* ---- recursion ------------------------------------------------------- */

static bool visit_fn(Program *program, Decl *fn);

static bool visit_calls(Program *program, Decl *fn, const AstNode *node) {
    if (!node) return true;
    bool ok = true;
    if (node->kind == AST_CALL) {
        Decl *callee = program_lookup(fn->file, node->name);
        if (callee && callee->kind == DECL_FN) {
            if (callee->visit == 1) {
                diag_error(program->diag, node->loc,
                           "recursive call to '%s': fns are inlined, so they "
                           "cannot call themselves", node->name);
                return false;
            }
            if (!visit_fn(program, callee)) ok = false;
        }
    }
    if (!visit_calls(program, fn, node->a)) ok = false;
    if (!visit_calls(program, fn, node->b)) ok = false;
    if (!visit_calls(program, fn, node->c)) ok = false;
    for (int i = 0; i < ast_count(node->list); i++)
        if (!visit_calls(program, fn, ast_at(node->list, i))) ok = false;
    return ok;
}

/* Depth-first over the call graph: visit 1 = on the path, 2 = done. */
static bool visit_fn(Program *program, Decl *fn) {
    if (fn->visit == 2) return !fn->bad;
    fn->visit = 1;
    bool ok = true;
    for (int i = 0; i < ast_count(fn->node->list2); i++)
        if (!visit_calls(program, fn, ast_at(fn->node->list2, i))) ok = false;
    if (!visit_calls(program, fn, fn->node->a)) ok = false;
    fn->visit = 2;
    if (!ok) fn->bad = true;
    return ok;
}

void sema_check(Program *program) {
    collect(program);
    for (int i = 0; i < program->decls.count; i++) {
        Decl *decl = program->decls.items[i];
        const AstNode *node = decl->node;
        if (decl->kind == DECL_KERNEL) {
            bool ok = check_tparams(program, node);
            if (ok && !check_instances(program, node)) ok = false;
            if (!check_param_hints(program, node)) ok = false;
            if (!check_body(program, node)) ok = false;
            decl->bad = !ok;
        } else if (decl->kind == DECL_FN) {
            decl->bad = !check_fn_signature(program, node);
        } else if (decl->kind == DECL_CONST) {
            if (!check_type_name(program, node->type)) decl->bad = true;
        }
    }
    for (int i = 0; i < program->decls.count; i++) {
        Decl *decl = program->decls.items[i];
        if (decl->kind == DECL_FN) visit_fn(program, decl);
    }
    for (int i = 0; i < program->decls.count; i++) {
        Decl *decl = program->decls.items[i];
        if (decl->kind == DECL_CONST && !decl->bad)
            lower_check_const(program, decl);
    }
    for (int i = 0; i < program->decls.count; i++) {
        Decl *decl = program->decls.items[i];
        if (decl->kind == DECL_FN && !decl->bad) lower_check_fn(program, decl);
    }
}
