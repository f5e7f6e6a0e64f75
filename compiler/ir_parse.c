/*
 * ir_parse.c -- reads the textual IR (docs/ir.md) back into a Module.
 *
 * A hand-written recursive-descent parser over a token array: the whole
 * text is tokenised first by ir_lex.c (so any lookahead is cheap), then
 * parsed by one function per production, each preceded by its grammar
 * rule, in three files: this one (modules, kernels, buffer declarations,
 * layouts, regions), ir_parse_expr.c (names, expressions) and
 * ir_parse_stmt.c (statements).  Nodes are
 * built with the ir.c constructors, so the dtype and lanes inference is the
 * constructors'; the printer (ir_print.c) writes a `:dtype` / `:xN` suffix
 * exactly where that inference would be wrong, which is what makes
 * print(parse(text)) == text for printed text.
 *
 * Names resolve kernel-wide and must be defined textually before use; the
 * scoping rules proper (a LET visible to the end of its SEQ, ...) are the
 * verifier's business, so the parser can read IR that the verifier must
 * reject.  The parser stops at the first error: it reports it through
 * diag_error and unwinds with longjmp to ir_parse, which returns NULL.  All
 * state lives in a Parser on the stack, so parses can run concurrently in
 * separate arenas.
 */
#include "ir_lex.h"

#include <stdlib.h>
#include <string.h>

/* ---- buffers, layouts ------------------------------------------------------------------- */

/* intlist = '[' [int {',' int}] ']' */
static int parse_int_list(Parser *p, int64_t *values, const char *what)
{
    int count = 0;
    ir_lex_expect_punct(p, "[");
    if (!is_punct(peek(p), "]")) {
        do {
            if (count == IR_MAX_RANK)
                ir_lex_error(p, peek(p)->loc, "more than %d %s", IR_MAX_RANK, what);
            values[count++] = ir_lex_expect_int(p, what, INT64_MIN, INT64_MAX);
        } while (accept_punct(p, ","));
    }
    ir_lex_expect_punct(p, "]");
    return count;
}

/* layout = 'layout' ['mma'] '(' intlist ',' 'threads' int ',' 'vec' int ','
 *          'slots' int [',' 'reduced' intlist ',' 'group' int]
 *          [',' 'warpgroups' int] ')'      (warpgroups: mma only) */
Layout *ir_parse_layout(Parser *p)
{
    Layout *layout = arena_alloc(p->arena, sizeof(Layout));
    ir_lex_expect_word(p, "layout");
    if (accept_word(p, "mma"))
        layout->kind = LAYOUT_MMA;
    ir_lex_expect_punct(p, "(");
    layout->rank = parse_int_list(p, layout->extent, "extents");
    ir_lex_expect_punct(p, ",");
    ir_lex_expect_word(p, "threads");
    layout->threads = (int)ir_lex_expect_int(p, "threads", INT32_MIN, INT32_MAX);
    ir_lex_expect_punct(p, ",");
    ir_lex_expect_word(p, "vec");
    layout->vec = (int)ir_lex_expect_int(p, "vec", INT32_MIN, INT32_MAX);
    ir_lex_expect_punct(p, ",");
    ir_lex_expect_word(p, "slots");
    layout->slots = ir_lex_expect_int(p, "slots", INT64_MIN, INT64_MAX);
    if (layout->kind == LAYOUT_MMA) {
        ir_lex_expect_punct(p, ",");
        ir_lex_expect_word(p, "warpgroups");
        layout->warpgroups = (int)ir_lex_expect_int(p, "warpgroups", INT32_MIN, INT32_MAX);
    } else if (accept_punct(p, ",")) {
        ir_lex_expect_word(p, "reduced");
        layout->reduced = true;
        layout->parent_rank = parse_int_list(p, layout->parent_extent, "extents");
        ir_lex_expect_punct(p, ",");
        ir_lex_expect_word(p, "group");
        layout->group = (int)ir_lex_expect_int(p, "group", INT32_MIN, INT32_MAX);
    }
    ir_lex_expect_punct(p, ")");
    return layout;
}

/* dims = '[' [('_' | expr) {',' ...}] ']'; returns the count. */
static int parse_dims(Parser *p, Expr **items)
{
    int count = 0;
    ir_lex_expect_punct(p, "[");
    if (!is_punct(peek(p), "]")) {
        do {
            if (count == IR_MAX_RANK)
                ir_lex_error(p, peek(p)->loc, "more than %d dimensions", IR_MAX_RANK);
            items[count++] = accept_word(p, "_") ? NULL : ir_parse_expr(p);
        } while (accept_punct(p, ","));
    }
    ir_lex_expect_punct(p, "]");
    return count;
}

static bool scope_from_name(const char *name, Scope *out)
{
    for (int s = SCOPE_GLOBAL; s <= SCOPE_LOCAL; s++) {
        if (strcmp(ir_scope_name((Scope)s), name) == 0) {
            *out = (Scope)s;
            return true;
        }
    }
    return false;
}

static CacheHint parse_cache_hint(Parser *p);

/* bufferdecl = BUFFER ':' scope dtype dims ['strides' dims] ['readonly']
 *              ['cache' cachehint] [layout] ['plain' | 'swizzle128' | 'mbarrier']
 *              ['synchronized'] ['offset' int] ['pitch' int]
 *              ['swizzle' int] */
Buffer *ir_parse_buffer_decl(Parser *p)
{
    Token *name = peek(p);
    if (name->kind != TOKEN_BUFFER)
        ir_lex_error(p, name->loc, "expected a buffer (@name), found %s", ir_lex_describe(p, name));
    next(p);
    if (ir_parse_find_buffer(p->kernel, name->text))
        ir_lex_error(p, name->loc, "buffer @%s is defined twice", name->text);
    ir_lex_expect_punct(p, ":");
    Token *scope_token = peek(p);
    Scope scope;
    if (scope_token->kind != TOKEN_IDENT || !scope_from_name(scope_token->text, &scope))
        ir_lex_error(p, scope_token->loc,
                    "expected a scope (global, shared, fragment, local), found %s",
                    ir_lex_describe(p, scope_token));
    next(p);
    DType t = ir_lex_expect_dtype(p);
    Expr *shape[IR_MAX_RANK];
    int rank = parse_dims(p, shape);
    Buffer *b = ir_new_buffer(p->kernel, name->text, t, scope, rank);
    b->loc = name->loc;
    memcpy(b->shape, shape, sizeof(Expr *) * (size_t)rank);
    if (accept_word(p, "strides")) {
        Expr *strides[IR_MAX_RANK];
        Token *strides_token = peek(p);
        int count = parse_dims(p, strides);
        if (count != rank)
            ir_lex_error(p, strides_token->loc, "@%s has rank %d but %d strides are given",
                        name->text, rank, count);
        memcpy(b->strides, strides, sizeof(Expr *) * (size_t)rank);
    }
    if (accept_word(p, "readonly"))
        b->read_only = true;
    if (accept_word(p, "cache")) {
        b->has_cache_hint = true;
        b->cache_hint = parse_cache_hint(p);
    }
    if (is_word(peek(p), "layout"))
        b->layout = ir_parse_layout(p);
    for (int kind = SHARED_ASYNC_PLAIN; kind <= SHARED_ASYNC_MBARRIER; kind++)
        if (accept_word(p, ir_async_kind_name(kind)))
            b->async_kind = kind;
    if (accept_word(p, "synchronized"))
        b->mbarrier_synchronized = true;
    if (accept_word(p, "offset"))
        b->shared_offset = ir_lex_expect_int(p, "offset", INT64_MIN, INT64_MAX);
    if (accept_word(p, "pitch"))
        b->pitch = ir_lex_expect_int(p, "pitch", INT64_MIN, INT64_MAX);
    if (accept_word(p, "swizzle"))
        b->swizzle_shift = (int)ir_lex_expect_int(p, "swizzle", INT32_MIN, INT32_MAX);
    return b;
}

/* region = BUFFER '[' [expr [':' '+' int] {',' ...}] ']' */
Region ir_parse_region(Parser *p)
{
    Region region = {0};
    Token *name = peek(p);
    region.buffer = ir_parse_use_buffer(p);
    Token *open = ir_lex_expect_punct(p, "[");
    int count = 0;
    if (!is_punct(peek(p), "]")) {
        do {
            if (count == IR_MAX_RANK)
                ir_lex_error(p, peek(p)->loc, "more than %d dimensions", IR_MAX_RANK);
            region.start[count] = ir_parse_expr(p);
            if (accept_punct(p, ":")) {
                ir_lex_expect_punct(p, "+");
                region.extent[count] = ir_lex_expect_int(p, "extent", 1, INT64_MAX);
            }
            count++;
        } while (accept_punct(p, ","));
    }
    ir_lex_expect_punct(p, "]");
    if (count != region.buffer->rank)
        ir_lex_error(p, open->loc, "@%s has rank %d but the region has %d dimensions",
                    name->text, region.buffer->rank, count);
    return region;
}

/* ---- kernels and modules ------------------------------------------------------------------ */

/* param = 'param' (bufferdecl | VAR ':' dtype) ['name' STRING] */
static void parse_param(Parser *p, PtrVec *params)
{
    Param *param = arena_alloc(p->arena, sizeof(Param));
    if (peek(p)->kind == TOKEN_BUFFER) {
        param->kind = PARAM_TENSOR;
        param->buffer = ir_parse_buffer_decl(p);
        param->buffer->param_index = params->count;
        param->name = param->buffer->name;
    } else {
        param->kind = PARAM_SCALAR;
        param->var = ir_parse_define_var(p, DT_I32, VAR_SCALAR);
        ir_lex_expect_punct(p, ":");
        param->var->dtype = ir_lex_expect_dtype(p);
        param->name = param->var->name;
    }
    if (accept_word(p, "name"))
        param->name = ir_lex_expect_string(p, "parameter name");
    vec_push(p->arena, params, param);
}

Hint ir_parse_hint(Parser *p)
{
    Token *token = peek(p);
    for (int hint = HINT_AUTO; hint <= HINT_ON; hint++) {
        if (is_word(token, ir_hint_name((Hint)hint))) {
            next(p);
            return (Hint)hint;
        }
    }
    ir_lex_error(p, token->loc, "expected a hint (auto, off, on), found %s",
                 ir_lex_describe(p, token));
}

/* A cache hint word of load_cache / store_cache (IR_CACHE_HINTS). */
static CacheHint parse_cache_hint(Parser *p)
{
    Token *token = peek(p);
    for (int hint = 0; hint < CACHE_COUNT; hint++) {
        if (is_word(token, ir_cache_hint_name((CacheHint)hint))) {
            next(p);
            return (CacheHint)hint;
        }
    }
    ir_lex_error(p, token->loc, "expected a cache hint (default, streaming, evict_first, "
                 "evict_last), found %s", ir_lex_describe(p, token));
}

/* tensormap = 'tensor_map' int BUFFER 'box' intlist 'swizzle' int
 * The index must be the map's position (maps print in order). */
static void parse_tensor_map(Parser *p, PtrVec *maps)
{
    Token *index = peek(p);
    int64_t value = ir_lex_expect_int(p, "tensor map index", 0, INT32_MAX);
    if (value != maps->count)
        ir_lex_error(p, index->loc, "tensor map %lld out of order (expected %d)",
                     (long long)value, maps->count);
    TensorMap *map = arena_alloc(p->arena, sizeof(TensorMap));
    Token *name = peek(p);
    map->global = ir_parse_use_buffer(p);
    ir_lex_expect_word(p, "box");
    Token *box = peek(p);
    map->rank = parse_int_list(p, map->box, "box extents");
    if (map->rank != map->global->rank)
        ir_lex_error(p, box->loc, "@%s has rank %d but the box has %d extents", name->text,
                     map->global->rank, map->rank);
    ir_lex_expect_word(p, "swizzle");
    map->swizzle_bytes = (int)ir_lex_expect_int(p, "swizzle bytes", INT32_MIN, INT32_MAX);
    vec_push(p->arena, maps, map);
}

static void parse_state(Parser *p, Kernel *k)
{
    static const char *const names[] = {"layouts", "thread", "vector", "shared"};
    for (;;) {
        Token *token = peek(p);
        if (token->kind == TOKEN_INT) {
            k->state |= (unsigned)ir_lex_expect_int(p, "state", 0, UINT32_MAX);
            continue;
        }
        bool found = false;
        for (unsigned bit = 0; bit < 4 && token->kind == TOKEN_IDENT; bit++) {
            if (strcmp(token->text, names[bit]) == 0) {
                k->state |= 1u << bit;
                found = true;
            }
        }
        if (!found)
            return;
        next(p);
    }
}

/* kernel = 'kernel' name '{' {item} 'body' block '}'
 * item = 'source' name | 'instance' name | 'state' {flag | int}
 *      | 'threads' int | 'shared_bytes' int | 'symbol' vardecl {',' vardecl}
 *      | param | 'constraint' STRING expr | 'grid' expr ',' expr ',' expr
 *      | 'block' vardecl '=' (x|y|z) {',' ...}
 *      | 'compute_threads' int | 'min_blocks' int | 'hint_tma' hint
 *      | 'hint_warp_specialize' hint | 'cluster' int int int | tensormap
 *      | 'load_cache' cachehint | 'store_cache' cachehint
 * compute_threads defaults to threads (ir_print leaves it out then). */
static void parse_kernel(Parser *p)
{
    Token *start = ir_lex_expect_word(p, "kernel");
    Token *name_token = peek(p);
    const char *name = ir_lex_expect_name(p, "a kernel name");
    for (int i = 0; i < p->module->nkernels; i++)
        if (strcmp(p->module->kernels[i]->name, name) == 0)
            ir_lex_error(p, name_token->loc, "kernel %s is defined twice", name);
    Kernel *k = ir_new_kernel(p->module, name);
    k->loc = start->loc;
    p->kernel = k;
    PtrVec params = {0}, symbols = {0}, constraints = {0}, maps = {0};
    bool compute_threads_given = false;
    ir_lex_expect_punct(p, "{");
    for (;;) {
        Token *item = peek(p);
        if (accept_word(p, "body"))
            break;
        if (accept_word(p, "source")) {
            k->source_name = ir_lex_expect_name(p, "a source kernel name");
        } else if (accept_word(p, "instance")) {
            k->instance = ir_lex_expect_name(p, "an instance name");
        } else if (accept_word(p, "state")) {
            parse_state(p, k);
        } else if (accept_word(p, "threads")) {
            k->threads = (int)ir_lex_expect_int(p, "threads", INT32_MIN, INT32_MAX);
        } else if (accept_word(p, "compute_threads")) {
            k->compute_threads = (int)ir_lex_expect_int(p, "compute_threads", INT32_MIN,
                                                        INT32_MAX);
            compute_threads_given = true;
        } else if (accept_word(p, "min_blocks")) {
            k->min_blocks = (int)ir_lex_expect_int(p, "min_blocks", INT32_MIN, INT32_MAX);
        } else if (accept_word(p, "cluster")) {
            for (int i = 0; i < 3; i++)
                k->cluster[i] = (int)ir_lex_expect_int(p, "cluster dimension", INT32_MIN,
                                                       INT32_MAX);
        } else if (accept_word(p, "hint_tma")) {
            k->hint_tma = ir_parse_hint(p);
        } else if (accept_word(p, "hint_warp_specialize")) {
            k->hint_warp_specialize = ir_parse_hint(p);
        } else if (accept_word(p, "load_cache")) {
            k->load_cache = parse_cache_hint(p);
        } else if (accept_word(p, "store_cache")) {
            k->store_cache = parse_cache_hint(p);
        } else if (accept_word(p, "tensor_map")) {
            parse_tensor_map(p, &maps);
        } else if (accept_word(p, "shared_bytes")) {
            k->shared_bytes = ir_lex_expect_int(p, "shared_bytes", INT64_MIN, INT64_MAX);
        } else if (accept_word(p, "symbol")) {
            do
                vec_push(p->arena, &symbols, ir_parse_var_decl(p, VAR_SYMBOL));
            while (accept_punct(p, ","));
        } else if (accept_word(p, "param")) {
            parse_param(p, &params);
        } else if (accept_word(p, "constraint")) {
            Constraint *c = arena_alloc(p->arena, sizeof(Constraint));
            c->loc = item->loc;
            c->text = ir_lex_expect_string(p, "the constraint's source text");
            c->cond = ir_parse_expr(p);
            vec_push(p->arena, &constraints, c);
        } else if (accept_word(p, "grid")) {
            for (int i = 0; i < 3; i++) {
                if (i)
                    ir_lex_expect_punct(p, ",");
                k->grid[i] = ir_parse_expr(p);
            }
        } else if (accept_word(p, "block")) {
            do {
                Var *v = ir_parse_var_decl(p, VAR_BLOCK);
                ir_lex_expect_punct(p, "=");
                Token *dim = peek(p);
                int index = is_word(dim, "x") ? 0 : is_word(dim, "y") ? 1
                          : is_word(dim, "z") ? 2 : -1;
                if (index < 0)
                    ir_lex_error(p, dim->loc, "expected x, y or z, found %s", ir_lex_describe(p, dim));
                next(p);
                if (k->block_vars[index])
                    ir_lex_error(p, dim->loc, "two block variables for %s", dim->text);
                v->block_dim = index;
                k->block_vars[index] = v;
            } while (accept_punct(p, ","));
        } else {
            ir_lex_error(p, item->loc, "expected a kernel item or 'body', found %s",
                        ir_lex_describe(p, item));
        }
    }
    if (!compute_threads_given)
        k->compute_threads = k->threads;
    k->ntensor_maps = maps.count;
    k->tensor_maps = arena_alloc(p->arena, sizeof(TensorMap) * (size_t)(maps.count + 1));
    for (int i = 0; i < maps.count; i++)
        k->tensor_maps[i] = *(TensorMap *)maps.items[i];
    /* the body's tma statements look the maps up (coordinate counts) */
    k->body = ir_parse_block(p);
    ir_lex_expect_punct(p, "}");
    k->nparams = params.count;
    k->params = arena_alloc(p->arena, sizeof(Param) * (size_t)(params.count + 1));
    for (int i = 0; i < params.count; i++)
        k->params[i] = *(Param *)params.items[i];
    k->nsymbols = symbols.count;
    k->symbols = (Var **)symbols.items;
    k->nconstraints = constraints.count;
    k->constraints = arena_alloc(p->arena, sizeof(Constraint) * (size_t)(constraints.count + 1));
    for (int i = 0; i < constraints.count; i++)
        k->constraints[i] = *(Constraint *)constraints.items[i];
    p->kernel = NULL;
}

/* module = ['arch' name] {kernel} */
Module *ir_parse(Arena *arena, Diag *diag, const char *file, const char *text)
{
    Parser parser = {0};
    Parser *p = &parser;
    p->arena = arena;
    p->diag = diag;
    p->file = file ? file : "<ir>";
    p->text = text ? text : "";
    diag_add_source(diag, p->file, p->text);
    if (setjmp(p->fail))
        return NULL;
    ir_lex_tokenize(p);
    const char *arch = "sm_90a";
    if (accept_word(p, "arch"))
        arch = ir_lex_expect_name(p, "an architecture (sm_90a)");
    p->module = ir_new_module(arena, arch);
    while (peek(p)->kind != TOKEN_EOF) {
        if (!is_word(peek(p), "kernel"))
            ir_lex_error(p, peek(p)->loc, "expected 'kernel', found %s", ir_lex_describe(p, peek(p)));
        parse_kernel(p);
    }
    return p->module;
}
