/*
 * ast.c -- constructors of the syntax tree, one per grammar action, and a
 * printer for the parser goldens.
 *
 * Every constructor records the node's depth (1 + its deepest child).
 * When a subtree would nest deeper than AST_MAX_DEPTH, the constructor
 * reports it once per file and returns an ERROR node instead: later walks
 * of the tree are recursive and must stay within the C stack whatever the
 * input ("1+1+1+..." a million times is a left-leaning chain that the
 * bison stack alone would not catch).
 */
#include <string.h>

#include "ast.h"

const char *ast_kind_name(AstKind kind) {
    static const char *const names[] = {
#define X(e, name) name,
        AST_KINDS(X)
#undef X
    };
    return (unsigned)kind < AST_COUNT ? names[kind] : "?";
}

Loc ast_loc(ParseCtx *ctx, AstSpan span) {
    return (Loc){ctx->file->path, span.first_line, span.first_column};
}

PtrVec *ast_list(ParseCtx *ctx, PtrVec *list, AstNode *item) {
    if (!list) list = arena_alloc(ctx->arena, sizeof *list);
    if (item) vec_push(ctx->arena, list, item);
    return list;
}

AstNode *ast_node(ParseCtx *ctx, AstKind kind, AstSpan span) {
    AstNode *node = arena_alloc(ctx->arena, sizeof *node);
    node->kind = kind;
    node->loc = ast_loc(ctx, span);
    node->depth = 1;
    return node;
}

AstNode *ast_error(ParseCtx *ctx, AstSpan span) {
    return ast_node(ctx, AST_ERROR, span);
}

static int list_depth(const PtrVec *list) {
    int depth = 0;
    for (int i = 0; i < ast_count(list); i++) {
        const AstNode *item = ast_at(list, i);
        if (item && item->depth > depth) depth = item->depth;
    }
    return depth;
}

static int node_depth(const AstNode *node) { return node ? node->depth : 0; }

/* Statements and expressions may be replaced by an ERROR node (every walk
 * skips those); the containers around them (kernels, params, slices...)
 * are kept, their depth is bounded by their parts. */
static bool replaceable(AstKind kind) {
    switch (kind) {
    case AST_BLOCK: case AST_ALLOC: case AST_LET: case AST_VAR:
    case AST_ASSIGN: case AST_PARALLEL: case AST_FOR: case AST_IF:
    case AST_COPY: case AST_GEMM: case AST_GEMM_WAIT: case AST_FILL:
    case AST_REDUCE:
    case AST_ATOMIC:
    case AST_ASSERT: case AST_INDEX: case AST_CALL: case AST_BITCAST:
    case AST_UNARY: case AST_BINARY: case AST_TERNARY:
        return true;
    default:
        return false;
    }
}

/* Sets node->depth from its children; replaces the node by an ERROR node
 * past AST_MAX_DEPTH. */
static AstNode *finish(ParseCtx *ctx, AstNode *node, AstSpan span) {
    int depth = node_depth(node->type);
    int children[] = {node_depth(node->a), node_depth(node->b),
                      node_depth(node->c), list_depth(node->list),
                      list_depth(node->list2), list_depth(node->list3),
                      list_depth(node->list4), list_depth(node->list5)};
    for (size_t i = 0; i < sizeof children / sizeof children[0]; i++)
        if (children[i] > depth) depth = children[i];
    node->depth = depth + 1;
    if (node->depth <= AST_MAX_DEPTH || !replaceable(node->kind)) return node;
    if (!ctx->depth_reported) {
        ctx->depth_reported = true;
        diag_error(ctx->diag, node->loc,
                   "nesting is too deep (more than %d levels)", AST_MAX_DEPTH);
    }
    return ast_error(ctx, span);
}

AstNode *ast_import(ParseCtx *ctx, const char *name, AstSpan span) {
    AstNode *node = ast_node(ctx, AST_IMPORT, span);
    node->text = name;
    return node;
}

AstNode *ast_const(ParseCtx *ctx, const char *name, AstNode *type,
                   AstNode *value, AstSpan span) {
    AstNode *node = ast_node(ctx, AST_CONST, span);
    node->name = name;
    node->type = type;
    node->a = value;
    return finish(ctx, node, span);
}

AstNode *ast_fn(ParseCtx *ctx, const char *name, PtrVec *params,
                AstNode *type, PtrVec *lets, AstNode *value, AstSpan span) {
    AstNode *node = ast_node(ctx, AST_FN, span);
    node->name = name;
    node->list = params;
    node->type = type;
    node->list2 = lets;
    node->a = value;
    return finish(ctx, node, span);
}

AstNode *ast_kernel(ParseCtx *ctx, const char *name, PtrVec *tparams,
                    PtrVec *params, PtrVec *wheres, PtrVec *instances,
                    PtrVec *lets, AstNode *launch, AstSpan span) {
    AstNode *node = ast_node(ctx, AST_KERNEL, span);
    node->name = name;
    node->list = tparams;
    node->list2 = params;
    node->list3 = wheres;
    node->list4 = instances;
    node->list5 = lets;
    node->a = launch;
    return finish(ctx, node, span);
}

AstNode *ast_named(ParseCtx *ctx, AstKind kind, const char *name,
                   const char *text, AstSpan span) {
    AstNode *node = ast_node(ctx, kind, span);
    node->name = name;
    node->text = text;
    return node;
}

AstNode *ast_fn_param(ParseCtx *ctx, const char *name, AstNode *type,
                      AstSpan span) {
    AstNode *node = ast_node(ctx, AST_FN_PARAM, span);
    node->name = name;
    node->type = type;
    return finish(ctx, node, span);
}

AstNode *ast_tensor_param(ParseCtx *ctx, const char *name, AstNode *type,
                          PtrVec *dims, PtrVec *strides, AstNode *cache, AstSpan span) {
    AstNode *node = ast_node(ctx, AST_PARAM, span);
    node->name = name;
    node->type = type;
    node->flag = true;
    node->list = dims;
    node->list2 = strides;
    node->a = cache;
    return finish(ctx, node, span);
}

AstNode *ast_scalar_param(ParseCtx *ctx, const char *name, AstNode *type,
                          AstSpan span) {
    AstNode *node = ast_node(ctx, AST_PARAM, span);
    node->name = name;
    node->type = type;
    return finish(ctx, node, span);
}

/* The condition's source text, as written, is kept for the launcher's
 * error message ("constraint 'H % 64 == 0' failed"). */
AstNode *ast_where(ParseCtx *ctx, AstNode *cond, AstSpan span) {
    AstNode *node = ast_node(ctx, AST_WHERE, span);
    node->a = cond;
    const AstFile *file = ctx->file;
    int begin = span.first_offset, end = span.last_offset;
    if (begin < 0) begin = 0;
    if (end > (int)file->length) end = (int)file->length;
    if (end < begin) end = begin;
    char *text = arena_alloc(ctx->arena, (size_t)(end - begin) + 1);
    memcpy(text, file->text + begin, (size_t)(end - begin));
    node->text = text;
    return finish(ctx, node, span);
}

AstNode *ast_instance(ParseCtx *ctx, const char *name, PtrVec *targs,
                      AstSpan span) {
    AstNode *node = ast_node(ctx, AST_INSTANCE, span);
    node->name = name;
    node->list = targs;
    return finish(ctx, node, span);
}

AstNode *ast_targ(ParseCtx *ctx, int kind, const char *name, int64_t value,
                  AstSpan span) {
    AstNode *node = ast_node(ctx, AST_TARG, span);
    node->op = kind;
    node->name = name;
    node->int_value = value;
    node->flag = value != 0;
    return node;
}

AstNode *ast_launch(ParseCtx *ctx, PtrVec *block_vars, const char *grid,
                    PtrVec *grid_exprs, const char *threads,
                    AstNode *thread_count, AstNode *hints, AstNode *body,
                    AstSpan span) {
    AstNode *node = ast_node(ctx, AST_LAUNCH, span);
    node->list = block_vars;
    node->text = grid;
    node->name2 = threads;
    node->list2 = grid_exprs;
    node->a = thread_count;
    node->b = body;
    node->c = hints;
    return finish(ctx, node, span);
}

AstNode *ast_hints(ParseCtx *ctx, const char *with, PtrVec *options,
                   AstSpan span) {
    AstNode *node = ast_node(ctx, AST_HINTS, span);
    node->name = with;
    node->list = options;
    return finish(ctx, node, span);
}

AstNode *ast_block(ParseCtx *ctx, PtrVec *stmts, AstSpan span) {
    AstNode *node = ast_node(ctx, AST_BLOCK, span);
    node->list = stmts;
    return finish(ctx, node, span);
}

AstNode *ast_alloc(ParseCtx *ctx, Scope scope, const char *name,
                   AstNode *type, PtrVec *shape, AstSpan span) {
    AstNode *node = ast_node(ctx, AST_ALLOC, span);
    node->op = (int)scope;
    node->name = name;
    node->type = type;
    node->list = shape;
    return finish(ctx, node, span);
}

AstNode *ast_let(ParseCtx *ctx, const char *name, AstNode *value,
                 AstSpan span) {
    AstNode *node = ast_node(ctx, AST_LET, span);
    node->name = name;
    node->a = value;
    return finish(ctx, node, span);
}

AstNode *ast_var(ParseCtx *ctx, const char *name, AstNode *type,
                 AstNode *value, AstSpan span) {
    AstNode *node = ast_node(ctx, AST_VAR, span);
    node->name = name;
    node->type = type;
    node->a = value;
    return finish(ctx, node, span);
}

AstNode *ast_assign(ParseCtx *ctx, int op, AstNode *target, AstNode *value,
                    AstSpan span) {
    AstNode *node = ast_node(ctx, AST_ASSIGN, span);
    node->op = op;
    node->a = target;
    node->b = value;
    return finish(ctx, node, span);
}

AstNode *ast_parallel(ParseCtx *ctx, PtrVec *axes, AstNode *body,
                      AstSpan span) {
    AstNode *node = ast_node(ctx, AST_PARALLEL, span);
    node->list = axes;
    node->a = body;
    return finish(ctx, node, span);
}

AstNode *ast_axis(ParseCtx *ctx, const char *name, AstNode *extent,
                  AstSpan span) {
    AstNode *node = ast_node(ctx, AST_AXIS, span);
    node->name = name;
    node->a = extent;
    return finish(ctx, node, span);
}

AstNode *ast_for(ParseCtx *ctx, const char *name, const char *kind,
                 PtrVec *bounds, PtrVec *options, AstNode *body,
                 AstSpan span) {
    AstNode *node = ast_node(ctx, AST_FOR, span);
    node->name = name;
    node->text = kind;
    node->list = bounds;
    node->list2 = options;
    node->a = body;
    return finish(ctx, node, span);
}

AstNode *ast_if(ParseCtx *ctx, AstNode *cond, AstNode *then_body,
                AstNode *else_body, AstSpan span) {
    AstNode *node = ast_node(ctx, AST_IF, span);
    node->a = cond;
    node->b = then_body;
    node->c = else_body;
    return finish(ctx, node, span);
}

AstNode *ast_copy(ParseCtx *ctx, AstNode *src, AstNode *dst,
                  PtrVec *options, AstSpan span) {
    AstNode *node = ast_node(ctx, AST_COPY, span);
    node->a = src;
    node->b = dst;
    node->list = options;
    return finish(ctx, node, span);
}

AstNode *ast_gemm(ParseCtx *ctx, AstNode *a, AstNode *b, AstNode *c,
                  PtrVec *options, AstSpan span) {
    AstNode *node = ast_node(ctx, AST_GEMM, span);
    node->a = a;
    node->b = b;
    node->c = c;
    node->list = options;
    return finish(ctx, node, span);
}

AstNode *ast_gemm_wait(ParseCtx *ctx, AstNode *pending, AstSpan span) {
    AstNode *node = ast_node(ctx, AST_GEMM_WAIT, span);
    node->a = pending;
    return finish(ctx, node, span);
}

AstNode *ast_fill(ParseCtx *ctx, AstNode *dst, AstNode *value, AstSpan span) {
    AstNode *node = ast_node(ctx, AST_FILL, span);
    node->a = dst;
    node->b = value;
    return finish(ctx, node, span);
}

AstNode *ast_reduce(ParseCtx *ctx, const char *op, const char *src,
                    const char *dst, PtrVec *options, AstSpan span) {
    AstNode *node = ast_node(ctx, AST_REDUCE, span);
    node->text = op;
    node->name = src;
    node->name2 = dst;
    node->list = options;
    return finish(ctx, node, span);
}

AstNode *ast_option(ParseCtx *ctx, const char *name, AstNode *value,
                    AstSpan span) {
    AstNode *node = ast_node(ctx, AST_NAMED, span);
    node->name = name;
    node->a = value;
    return finish(ctx, node, span);
}

AstNode *ast_atomic(ParseCtx *ctx, int op, AstNode *target, AstNode *value,
                    AstSpan span) {
    AstNode *node = ast_node(ctx, AST_ATOMIC, span);
    node->op = op;
    node->a = target;
    node->b = value;
    return finish(ctx, node, span);
}

AstNode *ast_sync(ParseCtx *ctx, bool warp_only, AstSpan span) {
    AstNode *node = ast_node(ctx, AST_SYNC, span);
    node->flag = warp_only;
    return node;
}

AstNode *ast_assert(ParseCtx *ctx, AstNode *cond, const char *message,
                    AstSpan span) {
    AstNode *node = ast_node(ctx, AST_ASSERT, span);
    node->a = cond;
    node->text = message;
    return finish(ctx, node, span);
}

AstNode *ast_region(ParseCtx *ctx, const char *name, PtrVec *slices,
                    AstSpan span) {
    AstNode *node = ast_node(ctx, AST_REGION, span);
    node->name = name;
    node->list = slices;
    return finish(ctx, node, span);
}

AstNode *ast_slice(ParseCtx *ctx, AstNode *start, AstNode *extent,
                   AstSpan span) {
    AstNode *node = ast_node(ctx, AST_SLICE, span);
    node->a = start;
    node->b = extent;
    return finish(ctx, node, span);
}

AstNode *ast_int(ParseCtx *ctx, int64_t value, bool is_unsigned,
                 AstSpan span) {
    AstNode *node = ast_node(ctx, AST_INT, span);
    node->int_value = value;
    node->flag = is_unsigned;
    return node;
}

AstNode *ast_float(ParseCtx *ctx, double value, bool f_suffix, AstSpan span) {
    AstNode *node = ast_node(ctx, AST_FLOAT, span);
    node->float_value = value;
    node->flag = f_suffix;
    return node;
}

AstNode *ast_bool(ParseCtx *ctx, bool value, AstSpan span) {
    AstNode *node = ast_node(ctx, AST_BOOL, span);
    node->flag = value;
    return node;
}

AstNode *ast_ident(ParseCtx *ctx, const char *name, AstSpan span) {
    AstNode *node = ast_node(ctx, AST_IDENT, span);
    node->name = name;
    return node;
}

AstNode *ast_index(ParseCtx *ctx, const char *name, PtrVec *indices,
                   AstSpan span) {
    AstNode *node = ast_node(ctx, AST_INDEX, span);
    node->name = name;
    node->list = indices;
    return finish(ctx, node, span);
}

AstNode *ast_call(ParseCtx *ctx, const char *name, PtrVec *args,
                  AstSpan span) {
    AstNode *node = ast_node(ctx, AST_CALL, span);
    node->name = name;
    node->list = args;
    return finish(ctx, node, span);
}

AstNode *ast_bitcast(ParseCtx *ctx, AstNode *type, AstNode *value,
                     AstSpan span) {
    AstNode *node = ast_node(ctx, AST_BITCAST, span);
    node->type = type;
    node->a = value;
    return finish(ctx, node, span);
}

AstNode *ast_unary(ParseCtx *ctx, UnOp op, AstNode *operand, AstSpan span) {
    AstNode *node = ast_node(ctx, AST_UNARY, span);
    node->op = (int)op;
    node->a = operand;
    return finish(ctx, node, span);
}

AstNode *ast_binary(ParseCtx *ctx, BinOp op, AstNode *lhs, AstNode *rhs,
                    AstSpan span) {
    AstNode *node = ast_node(ctx, AST_BINARY, span);
    node->op = (int)op;
    node->a = lhs;
    node->b = rhs;
    return finish(ctx, node, span);
}

AstNode *ast_ternary(ParseCtx *ctx, AstNode *cond, AstNode *a, AstNode *b,
                     AstSpan span) {
    AstNode *node = ast_node(ctx, AST_TERNARY, span);
    node->a = cond;
    node->b = a;
    node->c = b;
    return finish(ctx, node, span);
}

AstNode *ast_type(ParseCtx *ctx, const char *name, AstSpan span) {
    AstNode *node = ast_node(ctx, AST_TYPE, span);
    node->name = name;
    return node;
}

/* ---- printer ---------------------------------------------------------- */

static const char *unop_text(int op) {
    return op == UN_NEG ? "-" : op == UN_NOT ? "~" : op == UN_LNOT ? "!" : "?";
}

static void dump_list(FILE *out, const PtrVec *list) {
    for (int i = 0; i < ast_count(list); i++) {
        if (i) fputs(", ", out);
        ast_dump_expr(out, ast_at(list, i));
    }
}

void ast_dump_expr(FILE *out, const AstNode *e) {
    if (!e) {
        fputs("<null>", out);
        return;
    }
    switch (e->kind) {
    case AST_INT:
        fprintf(out, "%lld%s", (long long)e->int_value, e->flag ? "u" : "");
        break;
    case AST_FLOAT: {
        char text[64];
        snprintf(text, sizeof text, "%.17g", e->float_value);
        /* keep floats recognisable: 1.0 prints as 1.0, not 1 */
        fprintf(out, "%s%s%s", text, strpbrk(text, ".eEn") ? "" : ".0",
                e->flag ? "f" : "");
        break;
    }
    case AST_BOOL: fputs(e->flag ? "true" : "false", out); break;
    case AST_IDENT:
    case AST_TYPE: fputs(e->name, out); break;
    case AST_INDEX:
        fprintf(out, "%s[", e->name);
        dump_list(out, e->list);
        fputc(']', out);
        break;
    case AST_CALL:
        fprintf(out, "%s(", e->name);
        dump_list(out, e->list);
        fputc(')', out);
        break;
    case AST_BITCAST:
        fprintf(out, "bitcast<%s>(", e->type ? e->type->name : "?");
        ast_dump_expr(out, e->a);
        fputc(')', out);
        break;
    case AST_UNARY:
        fprintf(out, "(%s", unop_text(e->op));
        ast_dump_expr(out, e->a);
        fputc(')', out);
        break;
    case AST_BINARY:
        fputc('(', out);
        ast_dump_expr(out, e->a);
        fprintf(out, " %s ", ir_binop_name((BinOp)e->op));
        ast_dump_expr(out, e->b);
        fputc(')', out);
        break;
    case AST_TERNARY:
        fputc('(', out);
        ast_dump_expr(out, e->a);
        fputs(" ? ", out);
        ast_dump_expr(out, e->b);
        fputs(" : ", out);
        ast_dump_expr(out, e->c);
        fputc(')', out);
        break;
    case AST_REGION:
        fputs(e->name, out);
        if (e->list) {
            fputc('[', out);
            dump_list(out, e->list);
            fputc(']', out);
        }
        break;
    case AST_SLICE:
        ast_dump_expr(out, e->a);
        if (e->b) {
            fputs(" : +", out);
            ast_dump_expr(out, e->b);
        }
        break;
    case AST_NAMED:
        fprintf(out, "%s=", e->name);
        ast_dump_expr(out, e->a);
        break;
    default: fprintf(out, "<%s>", ast_kind_name(e->kind)); break;
    }
}

static void indent(FILE *out, int level) {
    for (int i = 0; i < level; i++) fputs("  ", out);
}

static void dump_stmt(FILE *out, const AstNode *s, int level);

/* ", name=value" for each NAMED option of a statement. */
static void dump_options(FILE *out, const PtrVec *options) {
    for (int i = 0; i < ast_count(options); i++) {
        fputs(", ", out);
        ast_dump_expr(out, ast_at(options, i));
    }
}

static void dump_body(FILE *out, const AstNode *block, int level) {
    fputs(" {\n", out);
    if (block)
        for (int i = 0; i < ast_count(block->list); i++)
            dump_stmt(out, ast_at(block->list, i), level + 1);
    indent(out, level);
    fputs("}\n", out);
}

static void dump_stmt(FILE *out, const AstNode *s, int level) {
    static const char *const scopes[] = {"global", "shared", "frag", "local"};
    indent(out, level);
    switch (s->kind) {
    case AST_LAUNCH:
        fputs("launch (", out);
        dump_list(out, s->list);
        fprintf(out, ") in %s(", s->text);
        dump_list(out, s->list2);
        fprintf(out, ") %s(", s->name2);
        ast_dump_expr(out, s->a);
        fputc(')', out);
        if (s->c) {
            fprintf(out, " %s(", s->c->name);
            dump_list(out, s->c->list);
            fputc(')', out);
        }
        dump_body(out, s->b, level);
        break;
    case AST_BLOCK:
        fputs("block", out);
        dump_body(out, s, level);
        break;
    case AST_ALLOC:
        fprintf(out, "%s %s: %s[", scopes[s->op & 3], s->name, s->type->name);
        dump_list(out, s->list);
        fputs("]\n", out);
        break;
    case AST_LET:
        fprintf(out, "let %s = ", s->name);
        ast_dump_expr(out, s->a);
        fputc('\n', out);
        break;
    case AST_VAR:
        fprintf(out, "var %s: %s", s->name, s->type->name);
        if (s->a) {
            fputs(" = ", out);
            ast_dump_expr(out, s->a);
        }
        fputc('\n', out);
        break;
    case AST_ASSIGN:
        ast_dump_expr(out, s->a);
        if (s->op == ASSIGN_PLAIN) fputs(" = ", out);
        else fprintf(out, " %s= ", ir_binop_name((BinOp)s->op));
        ast_dump_expr(out, s->b);
        fputc('\n', out);
        break;
    case AST_PARALLEL:
        fputs("parallel (", out);
        for (int i = 0; i < ast_count(s->list); i++) {
            const AstNode *axis = ast_at(s->list, i);
            fprintf(out, "%s%s: ", i ? ", " : "", axis->name);
            ast_dump_expr(out, axis->a);
        }
        fputc(')', out);
        dump_body(out, s->a, level);
        break;
    case AST_FOR:
        fprintf(out, "for %s in %s(", s->name, s->text);
        dump_list(out, s->list);
        dump_options(out, s->list2);
        fputc(')', out);
        dump_body(out, s->a, level);
        break;
    case AST_IF:
        fputs("if ", out);
        ast_dump_expr(out, s->a);
        dump_body(out, s->b, level);
        if (s->c) {
            indent(out, level);
            if (s->c->kind == AST_IF) {
                fputs("else\n", out);
                dump_stmt(out, s->c, level);
            } else {
                fputs("else", out);
                dump_body(out, s->c, level);
            }
        }
        break;
    case AST_COPY:
        fputs("copy(", out);
        ast_dump_expr(out, s->a);
        fputs(", ", out);
        ast_dump_expr(out, s->b);
        dump_options(out, s->list);
        fputs(")\n", out);
        break;
    case AST_GEMM:
        fputs("gemm(", out);
        ast_dump_expr(out, s->a);
        fputs(", ", out);
        ast_dump_expr(out, s->b);
        fputs(", ", out);
        ast_dump_expr(out, s->c);
        dump_options(out, s->list);
        fputs(")\n", out);
        break;
    case AST_GEMM_WAIT:
        fputs("gemm_wait(", out);
        ast_dump_expr(out, s->a);
        fputs(")\n", out);
        break;
    case AST_FILL:
        fputs("fill(", out);
        ast_dump_expr(out, s->a);
        fputs(", ", out);
        ast_dump_expr(out, s->b);
        fputs(")\n", out);
        break;
    case AST_REDUCE:
        fprintf(out, "reduce(%s, %s, %s", s->text, s->name, s->name2);
        dump_options(out, s->list);
        fputs(")\n", out);
        break;
    case AST_ATOMIC:
        fprintf(out, "atomic_%s(", ir_atomic_name((AtomicOp)s->op));
        ast_dump_expr(out, s->a);
        fputs(", ", out);
        ast_dump_expr(out, s->b);
        fputs(")\n", out);
        break;
    case AST_SYNC: fputs(s->flag ? "sync_warp\n" : "sync_threads\n", out); break;
    case AST_RETURN: fputs("return\n", out); break;
    case AST_ASSERT:
        fputs("assert(", out);
        ast_dump_expr(out, s->a);
        if (s->text) fprintf(out, ", \"%s\"", s->text);
        fputs(")\n", out);
        break;
    default: fprintf(out, "<%s>\n", ast_kind_name(s->kind)); break;
    }
}

static void dump_kernel(FILE *out, const AstNode *k) {
    fprintf(out, "kernel %s", k->name);
    if (k->list) {
        fputc('<', out);
        for (int i = 0; i < ast_count(k->list); i++) {
            const AstNode *t = ast_at(k->list, i);
            fprintf(out, "%s%s: %s", i ? ", " : "", t->name, t->text);
        }
        fputc('>', out);
    }
    fputc('\n', out);
    for (int i = 0; i < ast_count(k->list2); i++) {
        const AstNode *p = ast_at(k->list2, i);
        fprintf(out, "  param %s: ", p->name);
        if (p->flag) {
            fprintf(out, "tensor<%s>[", p->type->name);
            dump_list(out, p->list);
            fputc(']', out);
            if (p->list2) {
                fputs(" strides[", out);
                dump_list(out, p->list2);
                fputc(']', out);
            }
        } else {
            fputs(p->type->name, out);
        }
        fputc('\n', out);
    }
    for (int i = 0; i < ast_count(k->list3); i++) {
        const AstNode *w = ast_at(k->list3, i);
        fputs("  where ", out);
        ast_dump_expr(out, w->a);
        fprintf(out, "   // \"%s\"\n", w->text);
    }
    for (int i = 0; i < ast_count(k->list4); i++) {
        const AstNode *inst = ast_at(k->list4, i);
        fprintf(out, "  instance %s: <", inst->name);
        for (int j = 0; j < ast_count(inst->list); j++) {
            const AstNode *t = ast_at(inst->list, j);
            if (j) fputs(", ", out);
            if (t->op == TARG_DTYPE) fputs(t->name, out);
            else if (t->op == TARG_INT) fprintf(out, "%lld", (long long)t->int_value);
            else fputs(t->flag ? "true" : "false", out);
        }
        fputs(">\n", out);
    }
    for (int i = 0; i < ast_count(k->list5); i++)
        dump_stmt(out, ast_at(k->list5, i), 1);
}

void ast_dump(FILE *out, const AstFile *file) {
    for (int i = 0; i < file->decls.count; i++) {
        const AstNode *d = file->decls.items[i];
        switch (d->kind) {
        case AST_IMPORT: fprintf(out, "import \"%s\"\n", d->text); break;
        case AST_CONST:
            fprintf(out, "const %s: %s = ", d->name, d->type->name);
            ast_dump_expr(out, d->a);
            fputc('\n', out);
            break;
        case AST_FN:
            fprintf(out, "fn %s(", d->name);
            for (int j = 0; j < ast_count(d->list); j++) {
                const AstNode *p = ast_at(d->list, j);
                fprintf(out, "%s%s: %s", j ? ", " : "", p->name, p->type->name);
            }
            fprintf(out, ") -> %s\n", d->type->name);
            for (int j = 0; j < ast_count(d->list2); j++)
                dump_stmt(out, ast_at(d->list2, j), 1);
            fputs("  return ", out);
            ast_dump_expr(out, d->a);
            fputc('\n', out);
            break;
        case AST_KERNEL: dump_kernel(out, d); break;
        default: fprintf(out, "<%s>\n", ast_kind_name(d->kind)); break;
        }
    }
}
