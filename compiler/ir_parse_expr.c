/*
 * ir_parse_expr.c -- names and expressions of the textual IR reader
 * (docs/ir.md); the module entry ir_parse and the declarations are in
 * ir_parse.c, the statements in ir_parse_stmt.c, the tokens in ir_lex.c.
 *
 * Nodes are built with the ir.c constructors, so the dtype and lanes
 * inference is the constructors'; the printer (ir_print.c) writes a
 * `:dtype` / `:xN` suffix exactly where that inference would be wrong,
 * which is what makes print(parse(text)) == text for printed text.  A
 * bare numeric literal takes its dtype from its context (see Parsed).
 *
 * Names resolve kernel-wide and must be defined textually before use; the
 * scoping rules proper are the verifier's business.
 */
#include "ir_lex.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void ir_parse_enter(Parser *p, Loc loc)
{
    if (++p->depth > PARSE_MAX_DEPTH)
        ir_lex_error(p, loc, "nesting deeper than %d levels", PARSE_MAX_DEPTH);
}

void ir_parse_leave(Parser *p) { p->depth--; }

/* ---- names ---------------------------------------------------------------------------- */

Var *ir_parse_find_var(Kernel *k, const char *name)
{
    for (int i = 0; i < k->vars.count; i++)
        if (strcmp(((Var *)k->vars.items[i])->name, name) == 0)
            return k->vars.items[i];
    return NULL;
}

Buffer *ir_parse_find_buffer(Kernel *k, const char *name)
{
    for (int i = 0; i < k->buffers.count; i++)
        if (strcmp(((Buffer *)k->buffers.items[i])->name, name) == 0)
            return k->buffers.items[i];
    return NULL;
}

/* Consumes the VAR token naming a variable about to be defined. */
Token *ir_parse_new_var_name(Parser *p)
{
    Token *token = peek(p);
    if (token->kind != TOKEN_VAR)
        ir_lex_error(p, token->loc, "expected a variable (%%name), found %s", ir_lex_describe(p, token));
    next(p);
    if (ir_parse_find_var(p->kernel, token->text))
        ir_lex_error(p, token->loc, "variable %%%s is defined twice", token->text);
    return token;
}

/* A new variable named by the VAR token at the cursor. */
Var *ir_parse_define_var(Parser *p, DType t, VarKind kind)
{
    Token *token = ir_parse_new_var_name(p);
    return ir_new_var(p->kernel, token->text, t, kind);
}

/* vardecl = VAR [':' dtype]   (dtype defaults to i32) */
Var *ir_parse_var_decl(Parser *p, VarKind kind)
{
    Var *v = ir_parse_define_var(p, DT_I32, kind);
    if (accept_punct(p, ":"))
        v->dtype = ir_lex_expect_dtype(p);
    return v;
}

Var *ir_parse_use_var(Parser *p)
{
    Token *token = next(p);
    Var *v = ir_parse_find_var(p->kernel, token->text);
    if (!v)
        ir_lex_error(p, token->loc, "undefined variable %%%s", token->text);
    return v;
}

Buffer *ir_parse_use_buffer(Parser *p)
{
    Token *token = peek(p);
    if (token->kind != TOKEN_BUFFER)
        ir_lex_error(p, token->loc, "expected a buffer (@name), found %s", ir_lex_describe(p, token));
    next(p);
    Buffer *b = ir_parse_find_buffer(p->kernel, token->text);
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

Expr *ir_parse_expr(Parser *p) { return parse_expr_bare(p).expr; }

/* An expression in a context of dtype ctx (store value, let value, ...). */
Expr *ir_parse_expr_in(Parser *p, DType ctx)
{
    Parsed value = parse_expr_bare(p);
    apply_context(&value, ctx);
    return value.expr;
}

/* access = BUFFER '[' [expr {',' expr}] {';' ('if' expr | 'align' int)} ']'
 * Returns the indices (buffer rank of them). */
Expr **ir_parse_access(Parser *p, Buffer **buffer, Expr **predicate, int *align_bytes,
                           bool clauses)
{
    Token *name = peek(p);
    Buffer *b = ir_parse_use_buffer(p);
    Token *open = ir_lex_expect_punct(p, "[");
    Expr *items[IR_MAX_RANK + 1];
    int count = 0;
    if (!is_punct(peek(p), "]") && !is_punct(peek(p), ";")) {
        do {
            if (count == IR_MAX_RANK)
                ir_lex_error(p, peek(p)->loc, "more than %d indices", IR_MAX_RANK);
            items[count++] = ir_parse_expr(p);
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
            *predicate = ir_parse_expr(p);
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
        Expr *value = ir_parse_expr(p);
        ir_lex_expect_punct(p, ")");
        return ir_cast(k, CAST_BITCAST, t, value);
    }
    if (strcmp(word, "ramp") == 0) {
        ir_lex_expect_punct(p, "(");
        Expr *base = ir_parse_expr(p);
        ir_lex_expect_punct(p, ",");
        int64_t stride = ir_lex_expect_int(p, "ramp stride", INT64_MIN, INT64_MAX);
        ir_lex_expect_punct(p, ",");
        int lanes = expect_lanes(p);
        ir_lex_expect_punct(p, ")");
        return ir_ramp(k, base, stride, lanes);
    }
    if (strcmp(word, "broadcast") == 0) {
        ir_lex_expect_punct(p, "(");
        Expr *value = ir_parse_expr(p);
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
    ir_parse_enter(p, token->loc);
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
        result.expr = ir_var(k, ir_parse_use_var(p));
    } else if (token->kind == TOKEN_BUFFER) {
        Buffer *b;
        Expr *predicate;
        int align_bytes;
        Expr **indices = ir_parse_access(p, &b, &predicate, &align_bytes, true);
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
    ir_parse_leave(p);
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
        ir_parse_enter(p, token->loc);
        Parsed rhs = parse_binary(p, precedence + 1);
        ir_parse_leave(p);
        pair_context(&lhs, &rhs);
        Loc loc = lhs.expr->loc;
        lhs.expr = ir_binary(p->kernel, op, lhs.expr, rhs.expr);
        lhs.expr->loc = loc;
        lhs.bare = false;
    }
}

static Parsed parse_expr_bare(Parser *p) { return parse_binary(p, 1); }

