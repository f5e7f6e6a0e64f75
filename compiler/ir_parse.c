/*
 * ir_parse.c -- reads the textual IR (docs/ir.md) back into a Module.
 *
 * A hand-written recursive-descent parser over a token array: the whole
 * text is tokenised first by ir_lex.c (so any lookahead is cheap), then
 * parsed here by one function per production, each preceded by its
 * grammar rule.  Nodes are
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

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void enter(Parser *p, Loc loc)
{
    if (++p->depth > PARSE_MAX_DEPTH)
        ir_lex_error(p, loc, "nesting deeper than %d levels", PARSE_MAX_DEPTH);
}

static void leave(Parser *p) { p->depth--; }

/* ---- names ---------------------------------------------------------------------------- */

static Var *find_var(Kernel *k, const char *name)
{
    for (int i = 0; i < k->vars.count; i++)
        if (strcmp(((Var *)k->vars.items[i])->name, name) == 0)
            return k->vars.items[i];
    return NULL;
}

static Buffer *find_buffer(Kernel *k, const char *name)
{
    for (int i = 0; i < k->buffers.count; i++)
        if (strcmp(((Buffer *)k->buffers.items[i])->name, name) == 0)
            return k->buffers.items[i];
    return NULL;
}

/* Consumes the VAR token naming a variable about to be defined. */
static Token *new_var_name(Parser *p)
{
    Token *token = peek(p);
    if (token->kind != TOKEN_VAR)
        ir_lex_error(p, token->loc, "expected a variable (%%name), found %s", ir_lex_describe(p, token));
    next(p);
    if (find_var(p->kernel, token->text))
        ir_lex_error(p, token->loc, "variable %%%s is defined twice", token->text);
    return token;
}

/* A new variable named by the VAR token at the cursor. */
static Var *define_var(Parser *p, DType t, VarKind kind)
{
    Token *token = new_var_name(p);
    return ir_new_var(p->kernel, token->text, t, kind);
}

/* vardecl = VAR [':' dtype]   (dtype defaults to i32) */
static Var *parse_var_decl(Parser *p, VarKind kind)
{
    Var *v = define_var(p, DT_I32, kind);
    if (accept_punct(p, ":"))
        v->dtype = ir_lex_expect_dtype(p);
    return v;
}

static Var *use_var(Parser *p)
{
    Token *token = next(p);
    Var *v = find_var(p->kernel, token->text);
    if (!v)
        ir_lex_error(p, token->loc, "undefined variable %%%s", token->text);
    return v;
}

static Buffer *use_buffer(Parser *p)
{
    Token *token = peek(p);
    if (token->kind != TOKEN_BUFFER)
        ir_lex_error(p, token->loc, "expected a buffer (@name), found %s", ir_lex_describe(p, token));
    next(p);
    Buffer *b = find_buffer(p->kernel, token->text);
    if (!b)
        ir_lex_error(p, token->loc, "undefined buffer @%s", token->text);
    return b;
}

/* ---- expressions --------------------------------------------------------------------- */

/* An expression plus whether it is a numeric literal written without a
 * dtype, whose type then comes from context (see ir_print.c). */
typedef struct {
    Expr *expr;
    bool bare;
} Parsed;

static Parsed parse_expr_bare(Parser *p);

static bool is_int_class(DType t)
{
    DClass cls = ir_dtype_class(t);
    return cls == DCLASS_SINT || cls == DCLASS_UINT;
}

/* Gives a bare literal the dtype of its context, when of its class. */
static void apply_context(Parsed *value, DType ctx)
{
    if (!value->bare || ctx == DT_VOID)
        return;
    Expr *e = value->expr;
    if (e->kind == EXPR_INT && is_int_class(ctx))
        e->dtype = ctx;
    else if (e->kind == EXPR_FLOAT && ir_dtype_is_float(ctx))
        e->dtype = ctx;
    value->bare = false;
}

/* The operands of a binary op or select type each other's bare literals. */
static void pair_context(Parsed *a, Parsed *b)
{
    if (a->bare && !b->bare)
        apply_context(a, b->expr->dtype);
    else if (b->bare && !a->bare)
        apply_context(b, a->expr->dtype);
}

static Expr *parse_expr(Parser *p) { return parse_expr_bare(p).expr; }

/* An expression in a context of dtype ctx (store value, let value, ...). */
static Expr *parse_expr_in(Parser *p, DType ctx)
{
    Parsed value = parse_expr_bare(p);
    apply_context(&value, ctx);
    return value.expr;
}

/* access = BUFFER '[' [expr {',' expr}] {';' ('if' expr | 'align' int)} ']'
 * Returns the indices (buffer rank of them). */
static Expr **parse_access(Parser *p, Buffer **buffer, Expr **predicate, int *align_bytes,
                           bool clauses)
{
    Token *name = peek(p);
    Buffer *b = use_buffer(p);
    Token *open = ir_lex_expect_punct(p, "[");
    Expr *items[IR_MAX_RANK + 1];
    int count = 0;
    if (!is_punct(peek(p), "]") && !is_punct(peek(p), ";")) {
        do {
            if (count == IR_MAX_RANK)
                ir_lex_error(p, peek(p)->loc, "more than %d indices", IR_MAX_RANK);
            items[count++] = parse_expr(p);
        } while (accept_punct(p, ","));
    }
    *predicate = NULL;
    *align_bytes = 0;
    while (accept_punct(p, ";")) {
        Token *clause = peek(p);
        if (!clauses)
            ir_lex_error(p, clause->loc, "an atomic access takes no clauses");
        if (accept_word(p, "if")) {
            if (*predicate)
                ir_lex_error(p, clause->loc, "two 'if' clauses");
            *predicate = parse_expr(p);
        } else if (accept_word(p, "align")) {
            *align_bytes = (int)ir_lex_expect_int(p, "alignment", 1, 1 << 20);
        } else {
            ir_lex_error(p, clause->loc, "expected 'if' or 'align', found %s",
                        ir_lex_describe(p, clause));
        }
    }
    ir_lex_expect_punct(p, "]");
    if (count != b->rank)
        ir_lex_error(p, open->loc, "@%s has rank %d but %d indices are given", name->text,
                    b->rank, count);
    *buffer = b;
    Expr **indices = arena_alloc(p->arena, sizeof(Expr *) * (size_t)(count ? count : 1));
    memcpy(indices, items, sizeof(Expr *) * (size_t)count);
    return indices;
}

/* Arguments of a call-like form: '(' expr {',' expr} ')' (the '(' is
 * consumed by the caller's expect). */
static int parse_args(Parser *p, Parsed *args, int max)
{
    int count = 0;
    ir_lex_expect_punct(p, "(");
    if (!is_punct(peek(p), ")")) {
        do {
            if (count == max)
                ir_lex_error(p, peek(p)->loc, "too many arguments");
            args[count++] = parse_expr_bare(p);
        } while (accept_punct(p, ","));
    }
    ir_lex_expect_punct(p, ")");
    return count;
}

static void expect_count(Parser *p, Token *name, int count, int want)
{
    if (count != want)
        ir_lex_error(p, name->loc, "%s takes %d argument%s, not %d", name->text, want,
                    want == 1 ? "" : "s", count);
}

static int expect_lanes(Parser *p)
{
    return (int)ir_lex_expect_int(p, "lanes", 1, IR_MAX_LANES);
}

/* call = WORD '(' args ')' | 'bitcast' '<' dtype '>' '(' expr ')'
 *      | 'ramp' '(' expr ',' int ',' int ')' | 'broadcast' '(' expr ',' int ')'
 * WORD is a unary op, min/max, an intrinsic, a dtype (conversion) or
 * select. */
static Expr *parse_call(Parser *p, Token *name)
{
    Kernel *k = p->kernel;
    const char *word = name->text;
    if (strcmp(word, "bitcast") == 0) {
        ir_lex_expect_punct(p, "<");
        DType t = ir_lex_expect_dtype(p);
        ir_lex_expect_punct(p, ">");
        ir_lex_expect_punct(p, "(");
        Expr *value = parse_expr(p);
        ir_lex_expect_punct(p, ")");
        return ir_cast(k, CAST_BITCAST, t, value);
    }
    if (strcmp(word, "ramp") == 0) {
        ir_lex_expect_punct(p, "(");
        Expr *base = parse_expr(p);
        ir_lex_expect_punct(p, ",");
        int64_t stride = ir_lex_expect_int(p, "ramp stride", INT64_MIN, INT64_MAX);
        ir_lex_expect_punct(p, ",");
        int lanes = expect_lanes(p);
        ir_lex_expect_punct(p, ")");
        return ir_ramp(k, base, stride, lanes);
    }
    if (strcmp(word, "broadcast") == 0) {
        ir_lex_expect_punct(p, "(");
        Expr *value = parse_expr(p);
        ir_lex_expect_punct(p, ",");
        int lanes = expect_lanes(p);
        ir_lex_expect_punct(p, ")");
        return ir_broadcast(k, value, lanes);
    }
    Parsed args[8];
    int count = parse_args(p, args, 8);
    if (strcmp(word, "select") == 0) {
        expect_count(p, name, count, 3);
        pair_context(&args[1], &args[2]);
        return ir_select(k, args[0].expr, args[1].expr, args[2].expr);
    }
    for (int op = 0; op < UN_COUNT; op++) {
        if (strcmp(word, ir_unop_name((UnOp)op)) == 0) {
            expect_count(p, name, count, 1);
            return ir_unary(k, (UnOp)op, args[0].expr);
        }
    }
    if (strcmp(word, "min") == 0 || strcmp(word, "max") == 0) {
        expect_count(p, name, count, 2);
        pair_context(&args[0], &args[1]);
        return ir_binary(k, word[1] == 'i' ? BIN_MIN : BIN_MAX, args[0].expr, args[1].expr);
    }
    for (int op = 0; op < INTR_COUNT; op++) {
        if (strcmp(word, ir_intrinsic_name((Intrinsic)op)) == 0) {
            int want = ir_intrinsic_nargs((Intrinsic)op);
            if (want >= 0)
                expect_count(p, name, count, want);
            Expr *exprs[8];
            for (int i = 0; i < count; i++)
                exprs[i] = args[i].expr;
            DType t = ir_call_default_dtype((Intrinsic)op, exprs, count);
            return ir_call(k, (Intrinsic)op, t, exprs, count);
        }
    }
    DType t;
    if (ir_dtype_from_name(word, &t)) {
        expect_count(p, name, count, 1);
        return ir_cast(k, CAST_CONVERT, t, args[0].expr);
    }
    ir_lex_error(p, name->loc, "unknown function '%s'", word);
}

/* A literal: INT, FLOAT, inf, nan, with an optional leading '-'. */
static Parsed parse_literal(Parser *p, bool negative, Token *token)
{
    Kernel *k = p->kernel;
    Parsed result = {NULL, true};
    if (token->kind == TOKEN_INT) {
        /* values are 64-bit two's complement: 18446744073709551615 is -1
         * (the u64 maximum prints back as -1) */
        uint64_t magnitude = token->int_value;
        if (negative && magnitude > (uint64_t)INT64_MAX + 1u)
            ir_lex_error(p, token->loc, "integer literal out of range");
        int64_t value = (int64_t)(negative ? 0u - magnitude : magnitude);
        result.expr = ir_int(k, DT_I32, value);
    } else if (token->kind == TOKEN_FLOAT) {
        result.expr = ir_float(k, DT_F32, negative ? -token->float_value : token->float_value);
    } else if (is_word(token, "inf")) {
        result.expr = ir_float(k, DT_F32, negative ? -INFINITY : INFINITY);
    } else if (is_word(token, "nan") && !negative) {
        result.expr = ir_float(k, DT_F32, NAN);
    } else {
        ir_lex_error(p, token->loc, "expected a number after '-' (negate with neg(x))");
    }
    return result;
}

/* primary = literal | 'true' | 'false' | VAR | access | '(' expr ')' | call
 * postfix = primary {':' dtype | ':' 'x' INT} */
static Parsed parse_primary(Parser *p)
{
    Kernel *k = p->kernel;
    Token *token = peek(p);
    Parsed result = {NULL, false};
    enter(p, token->loc);
    if (token->kind == TOKEN_INT || token->kind == TOKEN_FLOAT ||
        is_word(token, "inf") || is_word(token, "nan")) {
        next(p);
        result = parse_literal(p, false, token);
    } else if (is_punct(token, "-")) {
        next(p);
        result = parse_literal(p, true, next(p));
    } else if (is_word(token, "true") || is_word(token, "false")) {
        next(p);
        result.expr = ir_int(k, DT_BOOL, token->text[0] == 't');
    } else if (token->kind == TOKEN_VAR) {
        result.expr = ir_var(k, use_var(p));
    } else if (token->kind == TOKEN_BUFFER) {
        Buffer *b;
        Expr *predicate;
        int align_bytes;
        Expr **indices = parse_access(p, &b, &predicate, &align_bytes, true);
        result.expr = ir_load(k, b, indices, predicate);
        result.expr->u.load.align_bytes = align_bytes;
    } else if (is_punct(token, "(")) {
        next(p);
        result = parse_expr_bare(p);
        ir_lex_expect_punct(p, ")");
    } else if (token->kind == TOKEN_IDENT &&
               (is_punct(peek_at(p, 1), "(") || is_word(token, "bitcast"))) {
        next(p);
        result.expr = parse_call(p, token);
    } else {
        ir_lex_error(p, token->loc, "expected an expression, found %s", ir_lex_describe(p, token));
    }
    if (!result.expr->loc.line)
        result.expr->loc = token->loc;
    /* suffixes: only a ':' followed by a dtype or xN, so that the ':' of
     * a region (`%a : +64`) is left alone */
    for (;;) {
        Token *colon = peek(p), *word = peek_at(p, 1);
        if (!is_punct(colon, ":") || word->kind != TOKEN_IDENT)
            break;
        DType t;
        if (ir_dtype_from_name(word->text, &t)) {
            next(p);
            next(p);
            result.expr->dtype = t;
            result.bare = false;
        } else if (word->text[0] == 'x' && word->text[1] >= '0' && word->text[1] <= '9') {
            char *end;
            long lanes = strtol(word->text + 1, &end, 10);
            if (*end || lanes < 1 || lanes > IR_MAX_LANES)
                ir_lex_error(p, word->loc, "bad lanes suffix '%s' (x1 .. x%d)", word->text,
                            IR_MAX_LANES);
            next(p);
            next(p);
            result.expr->lanes = (int)lanes;
        } else {
            break;
        }
    }
    leave(p);
    return result;
}

/* Infix operators by binding strength, as in ir_print.c (C precedence). */
static int infix_precedence(const Token *token, BinOp *op)
{
    static const struct {
        const char *text;
        BinOp op;
        int precedence;
    } table[] = {
        {"||", BIN_LOR, 1}, {"&&", BIN_LAND, 2}, {"|", BIN_OR, 3},
        {"^", BIN_XOR, 4},  {"&", BIN_AND, 5},   {"==", BIN_EQ, 6},
        {"!=", BIN_NE, 6},  {"<", BIN_LT, 7},    {"<=", BIN_LE, 7},
        {">", BIN_GT, 7},   {">=", BIN_GE, 7},   {"<<", BIN_SHL, 8},
        {">>", BIN_SHR, 8}, {"+", BIN_ADD, 9},   {"-", BIN_SUB, 9},
        {"*", BIN_MUL, 10}, {"/", BIN_DIV, 10},  {"%", BIN_MOD, 10},
    };
    if (token->kind != TOKEN_PUNCT)
        return 0;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        if (strcmp(token->text, table[i].text) == 0) {
            *op = table[i].op;
            return table[i].precedence;
        }
    }
    return 0;
}

/* binary = postfix {infix-op postfix}, by precedence climbing; all
 * operators are left-associative. */
static Parsed parse_binary(Parser *p, int min_precedence)
{
    Parsed lhs = parse_primary(p);
    for (;;) {
        BinOp op;
        Token *token = peek(p);
        int precedence = infix_precedence(token, &op);
        if (precedence == 0 || precedence < min_precedence)
            return lhs;
        next(p);
        enter(p, token->loc);
        Parsed rhs = parse_binary(p, precedence + 1);
        leave(p);
        pair_context(&lhs, &rhs);
        Loc loc = lhs.expr->loc;
        lhs.expr = ir_binary(p->kernel, op, lhs.expr, rhs.expr);
        lhs.expr->loc = loc;
        lhs.bare = false;
    }
}

static Parsed parse_expr_bare(Parser *p) { return parse_binary(p, 1); }

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

/* layout = 'layout' '(' intlist ',' 'threads' int ',' 'vec' int ','
 *          'slots' int [',' 'reduced' intlist ',' 'group' int] ')' */
static Layout *parse_layout(Parser *p)
{
    Layout *layout = arena_alloc(p->arena, sizeof(Layout));
    ir_lex_expect_word(p, "layout");
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
    if (accept_punct(p, ",")) {
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
            items[count++] = accept_word(p, "_") ? NULL : parse_expr(p);
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

/* bufferdecl = BUFFER ':' scope dtype dims ['strides' dims] ['readonly']
 *              [layout] ['offset' int] ['pitch' int] ['swizzle' int] */
static Buffer *parse_buffer_decl(Parser *p)
{
    Token *name = peek(p);
    if (name->kind != TOKEN_BUFFER)
        ir_lex_error(p, name->loc, "expected a buffer (@name), found %s", ir_lex_describe(p, name));
    next(p);
    if (find_buffer(p->kernel, name->text))
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
    if (is_word(peek(p), "layout"))
        b->layout = parse_layout(p);
    if (accept_word(p, "offset"))
        b->shared_offset = ir_lex_expect_int(p, "offset", INT64_MIN, INT64_MAX);
    if (accept_word(p, "pitch"))
        b->pitch = ir_lex_expect_int(p, "pitch", INT64_MIN, INT64_MAX);
    if (accept_word(p, "swizzle"))
        b->swizzle_shift = (int)ir_lex_expect_int(p, "swizzle", INT32_MIN, INT32_MAX);
    return b;
}

/* region = BUFFER '[' [expr [':' '+' int] {',' ...}] ']' */
static Region parse_region(Parser *p)
{
    Region region = {0};
    Token *name = peek(p);
    region.buffer = use_buffer(p);
    Token *open = ir_lex_expect_punct(p, "[");
    int count = 0;
    if (!is_punct(peek(p), "]")) {
        do {
            if (count == IR_MAX_RANK)
                ir_lex_error(p, peek(p)->loc, "more than %d dimensions", IR_MAX_RANK);
            region.start[count] = parse_expr(p);
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

/* ---- statements ---------------------------------------------------------------------------- */

static Stmt *parse_stmt(Parser *p);

/* block = '{' {stmt} '}' -- always a SEQ */
static Stmt *parse_block(Parser *p)
{
    Token *open = ir_lex_expect_punct(p, "{");
    enter(p, open->loc);
    Stmt *seq = ir_new_stmt(p->kernel, STMT_SEQ, open->loc);
    while (!is_punct(peek(p), "}")) {
        if (peek(p)->kind == TOKEN_EOF)
            ir_lex_error(p, peek(p)->loc, "expected '}' to close the block opened at %d:%d",
                        open->loc.line, open->loc.col);
        ir_seq_append(p->kernel, seq, parse_stmt(p));
    }
    next(p);
    leave(p);
    return seq;
}

static bool loop_kind_from_name(const char *name, LoopKind *out)
{
    for (int kind = 0; kind < LOOP_COUNT; kind++) {
        if (strcmp(ir_loop_name((LoopKind)kind), name) == 0) {
            *out = (LoopKind)kind;
            return true;
        }
    }
    return false;
}

/* 'let' | 'var' VAR [':' dtype] ['=' expr]
 * The variable is created after its value is parsed, so the value cannot
 * refer to it. */
static void parse_let(Parser *p, Stmt *s, bool mutable)
{
    Token *name = new_var_name(p);
    DType t = DT_VOID;
    bool typed = accept_punct(p, ":");
    if (typed)
        t = ir_lex_expect_dtype(p);
    if (accept_punct(p, "=")) {
        s->u.let.value = parse_expr_in(p, t);
        if (!typed)
            t = s->u.let.value->dtype;
    } else if (!typed) {
        ir_lex_error(p, name->loc, "%%%s needs a dtype or a value", name->text);
    }
    s->u.let.var = ir_new_var(p->kernel, name->text, t, mutable ? VAR_MUTABLE : VAR_LET);
}

/* for = 'for' vardecl 'in' loopkind '(' expr ',' expr ')' ['step' int] block */
static void parse_for(Parser *p, Stmt *s)
{
    Token *name = new_var_name(p);
    DType t = DT_I32;
    if (accept_punct(p, ":"))
        t = ir_lex_expect_dtype(p);
    ir_lex_expect_word(p, "in");
    Token *kind = peek(p);
    if (kind->kind != TOKEN_IDENT || !loop_kind_from_name(kind->text, &s->u.loop.kind))
        ir_lex_error(p, kind->loc, "expected a loop kind (serial, unroll, vectorized), found %s",
                    ir_lex_describe(p, kind));
    next(p);
    ir_lex_expect_punct(p, "(");
    s->u.loop.begin = parse_expr_in(p, t);
    ir_lex_expect_punct(p, ",");
    s->u.loop.end = parse_expr_in(p, t);
    ir_lex_expect_punct(p, ")");
    s->u.loop.step = 1;
    if (accept_word(p, "step"))
        s->u.loop.step = ir_lex_expect_int(p, "step", INT64_MIN, INT64_MAX);
    s->u.loop.var = ir_new_var(p->kernel, name->text, t, VAR_LOOP);
    s->u.loop.body = parse_block(p);
}

/* parallel = 'parallel' '(' VAR ':' [dtype] int {',' ...} ')' [layout] block */
static void parse_parallel(Parser *p, Stmt *s)
{
    ir_lex_expect_punct(p, "(");
    int rank = 0;
    do {
        if (rank == IR_MAX_RANK)
            ir_lex_error(p, peek(p)->loc, "more than %d parallel dimensions", IR_MAX_RANK);
        Var *v = define_var(p, DT_I32, VAR_LOOP);
        ir_lex_expect_punct(p, ":");
        DType t;
        if (peek(p)->kind == TOKEN_IDENT && ir_dtype_from_name(peek(p)->text, &t)) {
            next(p);
            v->dtype = t;
        }
        s->u.parallel.vars[rank] = v;
        s->u.parallel.extent[rank] = ir_lex_expect_int(p, "extent", INT64_MIN, INT64_MAX);
        rank++;
    } while (accept_punct(p, ","));
    ir_lex_expect_punct(p, ")");
    s->u.parallel.rank = rank;
    if (is_word(peek(p), "layout"))
        s->u.parallel.layout = parse_layout(p);
    s->u.parallel.body = parse_block(p);
}

static void parse_reduce(Parser *p, Stmt *s)
{
    Token *op = peek(p);
    bool found = false;
    for (int r = 0; r < REDUCE_COUNT && op->kind == TOKEN_IDENT; r++) {
        if (strcmp(ir_reduce_name((ReduceOp)r), op->text) == 0) {
            s->u.reduce.op = (ReduceOp)r;
            found = true;
        }
    }
    if (!found)
        ir_lex_error(p, op->loc, "expected a reduction (sum, max, min, absmax), found %s",
                    ir_lex_describe(p, op));
    next(p);
    s->u.reduce.src = use_buffer(p);
    ir_lex_expect_punct(p, "->");
    s->u.reduce.dst = use_buffer(p);
    ir_lex_expect_word(p, "dim");
    s->u.reduce.dim = (int)ir_lex_expect_int(p, "dim", INT32_MIN, INT32_MAX);
    s->u.reduce.clear = accept_word(p, "clear");
}

static void parse_atomic(Parser *p, Stmt *s)
{
    Token *op = peek(p);
    bool found = false;
    for (int a = 0; a < ATOMIC_COUNT && op->kind == TOKEN_IDENT; a++) {
        if (strcmp(ir_atomic_name((AtomicOp)a), op->text) == 0) {
            s->u.atomic.op = (AtomicOp)a;
            found = true;
        }
    }
    if (!found)
        ir_lex_error(p, op->loc, "expected an atomic op (add, max, min), found %s",
                    ir_lex_describe(p, op));
    next(p);
    Expr *predicate;
    int align_bytes;
    s->u.atomic.indices = parse_access(p, &s->u.atomic.buffer, &predicate, &align_bytes, false);
    ir_lex_expect_punct(p, "=");
    s->u.atomic.value = parse_expr_in(p, s->u.atomic.buffer->dtype);
}

/* stmt = 'seq' block | let | var | VAR '=' expr | 'store' access '=' expr
 *      | 'alloc' bufferdecl | for | parallel | 'if' expr block ['else' block]
 *      | 'barrier' ['warp'] | 'copy' region '->' region
 *      | 'fill' region '=' expr | 'reduce' op BUFFER '->' BUFFER 'dim' int
 *        ['clear'] | 'atomic' op access '=' expr | 'eval' expr | 'return'
 *      | 'assert' expr [',' STRING] */
static Stmt *parse_stmt(Parser *p)
{
    Kernel *k = p->kernel;
    Token *token = peek(p);
    Loc loc = token->loc;
    if (token->kind == TOKEN_VAR) {
        Stmt *s = ir_new_stmt(k, STMT_ASSIGN, loc);
        s->u.assign.var = use_var(p);
        ir_lex_expect_punct(p, "=");
        s->u.assign.value = parse_expr_in(p, s->u.assign.var->dtype);
        return s;
    }
    if (token->kind != TOKEN_IDENT)
        ir_lex_error(p, loc, "expected a statement, found %s", ir_lex_describe(p, token));
    const char *word = token->text;
    next(p);
    Stmt *s;
    if (strcmp(word, "seq") == 0) {
        s = parse_block(p);
        s->loc = loc;
    } else if (strcmp(word, "let") == 0 || strcmp(word, "var") == 0) {
        s = ir_new_stmt(k, STMT_LET, loc);
        parse_let(p, s, word[0] == 'v');
    } else if (strcmp(word, "store") == 0) {
        s = ir_new_stmt(k, STMT_STORE, loc);
        s->u.store.indices = parse_access(p, &s->u.store.buffer, &s->u.store.predicate,
                                          &s->u.store.align_bytes, true);
        ir_lex_expect_punct(p, "=");
        s->u.store.value = parse_expr_in(p, s->u.store.buffer->dtype);
    } else if (strcmp(word, "alloc") == 0) {
        s = ir_new_stmt(k, STMT_ALLOC, loc);
        s->u.alloc.buffer = parse_buffer_decl(p);
    } else if (strcmp(word, "for") == 0) {
        s = ir_new_stmt(k, STMT_FOR, loc);
        parse_for(p, s);
    } else if (strcmp(word, "parallel") == 0) {
        s = ir_new_stmt(k, STMT_PARALLEL, loc);
        parse_parallel(p, s);
    } else if (strcmp(word, "if") == 0) {
        s = ir_new_stmt(k, STMT_IF, loc);
        s->u.if_.cond = parse_expr(p);
        s->u.if_.then_body = parse_block(p);
        if (accept_word(p, "else"))
            s->u.if_.else_body = parse_block(p);
    } else if (strcmp(word, "barrier") == 0) {
        s = ir_new_stmt(k, STMT_BARRIER, loc);
        s->u.barrier.warp_only = accept_word(p, "warp");
    } else if (strcmp(word, "copy") == 0) {
        s = ir_new_stmt(k, STMT_COPY, loc);
        s->u.copy.src = parse_region(p);
        ir_lex_expect_punct(p, "->");
        s->u.copy.dst = parse_region(p);
    } else if (strcmp(word, "fill") == 0) {
        s = ir_new_stmt(k, STMT_FILL, loc);
        s->u.fill.dst = parse_region(p);
        ir_lex_expect_punct(p, "=");
        s->u.fill.value = parse_expr_in(p, s->u.fill.dst.buffer->dtype);
    } else if (strcmp(word, "reduce") == 0) {
        s = ir_new_stmt(k, STMT_REDUCE, loc);
        parse_reduce(p, s);
    } else if (strcmp(word, "atomic") == 0) {
        s = ir_new_stmt(k, STMT_ATOMIC, loc);
        parse_atomic(p, s);
    } else if (strcmp(word, "eval") == 0) {
        s = ir_new_stmt(k, STMT_EVAL, loc);
        s->u.eval.value = parse_expr(p);
    } else if (strcmp(word, "return") == 0) {
        s = ir_new_stmt(k, STMT_RETURN, loc);
    } else if (strcmp(word, "assert") == 0) {
        s = ir_new_stmt(k, STMT_ASSERT, loc);
        s->u.assert_.cond = parse_expr(p);
        if (accept_punct(p, ","))
            s->u.assert_.message = ir_lex_expect_string(p, "assert message");
    } else {
        ir_lex_error(p, loc, "unknown statement '%s'", word);
    }
    return s;
}

/* ---- kernels and modules ------------------------------------------------------------------ */

/* param = 'param' (bufferdecl | VAR ':' dtype) ['name' STRING] */
static void parse_param(Parser *p, PtrVec *params)
{
    Param *param = arena_alloc(p->arena, sizeof(Param));
    if (peek(p)->kind == TOKEN_BUFFER) {
        param->kind = PARAM_TENSOR;
        param->buffer = parse_buffer_decl(p);
        param->buffer->param_index = params->count;
        param->name = param->buffer->name;
    } else {
        param->kind = PARAM_SCALAR;
        param->var = define_var(p, DT_I32, VAR_SCALAR);
        ir_lex_expect_punct(p, ":");
        param->var->dtype = ir_lex_expect_dtype(p);
        param->name = param->var->name;
    }
    if (accept_word(p, "name"))
        param->name = ir_lex_expect_string(p, "parameter name");
    vec_push(p->arena, params, param);
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
 *      | 'block' vardecl '=' (x|y|z) {',' ...} */
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
    PtrVec params = {0}, symbols = {0}, constraints = {0};
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
        } else if (accept_word(p, "shared_bytes")) {
            k->shared_bytes = ir_lex_expect_int(p, "shared_bytes", INT64_MIN, INT64_MAX);
        } else if (accept_word(p, "symbol")) {
            do
                vec_push(p->arena, &symbols, parse_var_decl(p, VAR_SYMBOL));
            while (accept_punct(p, ","));
        } else if (accept_word(p, "param")) {
            parse_param(p, &params);
        } else if (accept_word(p, "constraint")) {
            Constraint *c = arena_alloc(p->arena, sizeof(Constraint));
            c->loc = item->loc;
            c->text = ir_lex_expect_string(p, "the constraint's source text");
            c->cond = parse_expr(p);
            vec_push(p->arena, &constraints, c);
        } else if (accept_word(p, "grid")) {
            for (int i = 0; i < 3; i++) {
                if (i)
                    ir_lex_expect_punct(p, ",");
                k->grid[i] = parse_expr(p);
            }
        } else if (accept_word(p, "block")) {
            do {
                Var *v = parse_var_decl(p, VAR_BLOCK);
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
    k->body = parse_block(p);
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
