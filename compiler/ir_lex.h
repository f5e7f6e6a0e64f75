/*
 * ir_lex.h -- private interface between the parts of the textual IR
 * reader: ir_lex.c (tokens, errors, token-level helpers) and the grammar in
 * ir_parse.c (modules, kernels, declarations), ir_parse_expr.c (names,
 * expressions) and ir_parse_stmt.c (statements).  Not for use outside
 * those files.
 */
#ifndef TKC_IR_LEX_H
#define TKC_IR_LEX_H

#include <setjmp.h>
#include <string.h>

#include "ir.h"

enum {
    PARSE_MAX_DEPTH = 500, /* nesting of blocks and expressions */
};

typedef enum {
    TOKEN_EOF,
    TOKEN_IDENT,  /* word: keyword, dtype, name */
    TOKEN_VAR,    /* %name (text = name) */
    TOKEN_BUFFER, /* @name (text = name) */
    TOKEN_INT,    /* magnitude in int_value */
    TOKEN_FLOAT,  /* float_value */
    TOKEN_STRING, /* text = decoded contents */
    TOKEN_PUNCT,  /* text = the operator or bracket */
} TokenKind;

typedef struct {
    TokenKind kind;
    const char *text;
    uint64_t int_value;
    double float_value;
    Loc loc;
} Token;

typedef struct {
    Arena *arena;
    Diag *diag;
    const char *file;
    const char *text;
    Token *tokens;
    int ntokens, capacity, pos;
    jmp_buf fail;
    Module *module;
    Kernel *kernel;
    int depth;
} Parser;

/* Reports `file:line:col: error: ...` and unwinds to ir_parse. */
__attribute__((format(printf, 3, 4))) _Noreturn void
ir_lex_error(Parser *p, Loc loc, const char *fmt, ...);
/* Fills p->tokens from p->text, ending with a TOKEN_EOF. */
void ir_lex_tokenize(Parser *p);
/* How a token reads in a message ("'foo'", "end of input"). */
const char *ir_lex_describe(Parser *p, const Token *token);

/* Expect-or-fail helpers: each consumes the token it checks. */
Token *ir_lex_expect_punct(Parser *p, const char *text);
Token *ir_lex_expect_word(Parser *p, const char *word);
const char *ir_lex_expect_name(Parser *p, const char *what);   /* word or string */
const char *ir_lex_expect_string(Parser *p, const char *what);
int64_t ir_lex_expect_int(Parser *p, const char *what, int64_t low, int64_t high);
DType ir_lex_expect_dtype(Parser *p);

/* ---- the grammar's shared productions -------------------------------- */

/* Nesting guard: ir_parse_enter fails past PARSE_MAX_DEPTH. */
void ir_parse_enter(Parser *p, Loc loc);
void ir_parse_leave(Parser *p);
/* Kernel-wide name lookup (NULL when undefined). */
Var *ir_parse_find_var(Kernel *k, const char *name);
Buffer *ir_parse_find_buffer(Kernel *k, const char *name);
/* The VAR token naming a variable about to be defined (not yet defined). */
Token *ir_parse_new_var_name(Parser *p);
Var *ir_parse_define_var(Parser *p, DType t, VarKind kind);
/* vardecl = VAR [':' dtype]   (dtype defaults to i32) */
Var *ir_parse_var_decl(Parser *p, VarKind kind);
Var *ir_parse_use_var(Parser *p);
Buffer *ir_parse_use_buffer(Parser *p);
Expr *ir_parse_expr(Parser *p);
/* An expression whose bare literals take the dtype ctx (DT_VOID: none). */
Expr *ir_parse_expr_in(Parser *p, DType ctx);
/* access = BUFFER '[' exprs {';' ('if' expr | 'align' int)} ']'; clauses
 * false rejects the ';' part.  Returns the indices. */
Expr **ir_parse_access(Parser *p, Buffer **buffer, Expr **predicate,
                       int *align_bytes, bool clauses);
Layout *ir_parse_layout(Parser *p);
Buffer *ir_parse_buffer_decl(Parser *p);
/* region = BUFFER '[' [expr [':' '+' int] {',' ...}] ']' */
Region ir_parse_region(Parser *p);
/* block = '{' {stmt} '}' -- always a SEQ */
Stmt *ir_parse_block(Parser *p);
/* 'auto' | 'off' | 'on' */
Hint ir_parse_hint(Parser *p);

/* Cursor helpers. */
static inline Token *peek(Parser *p) { return &p->tokens[p->pos]; }

static inline Token *peek_at(Parser *p, int ahead)
{
    int index = p->pos + ahead;
    return &p->tokens[index < p->ntokens ? index : p->ntokens - 1];
}

static inline Token *next(Parser *p)
{
    Token *token = &p->tokens[p->pos];
    if (token->kind != TOKEN_EOF)
        p->pos++;
    return token;
}

static inline bool is_punct(const Token *token, const char *text)
{
    return token->kind == TOKEN_PUNCT && strcmp(token->text, text) == 0;
}

static inline bool is_word(const Token *token, const char *word)
{
    return token->kind == TOKEN_IDENT && strcmp(token->text, word) == 0;
}

static inline bool accept_punct(Parser *p, const char *text)
{
    if (!is_punct(peek(p), text))
        return false;
    next(p);
    return true;
}

static inline bool accept_word(Parser *p, const char *word)
{
    if (!is_word(peek(p), word))
        return false;
    next(p);
    return true;
}

#endif
