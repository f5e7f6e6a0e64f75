/*
 * ir_lex.c -- the token level of the textual IR reader (docs/ir.md).
 *
 * ir_parse tokenises the whole text up front into an array, so that the
 * grammar in ir_parse.c can look ahead freely.  This file holds the
 * tokeniser, the error exit shared by both files (diag_error, then a
 * longjmp back to ir_parse) and the expect-or-fail helpers.
 */
#include "ir_lex.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>

/* ---- errors ------------------------------------------------------------------ */

__attribute__((format(printf, 3, 4))) _Noreturn void
ir_lex_error(Parser *p, Loc loc, const char *fmt, ...)
{
    char message[512];
    va_list args;
    va_start(args, fmt);
    vsnprintf(message, sizeof message, fmt, args);
    va_end(args);
    diag_error(p->diag, loc, "%s", message);
    longjmp(p->fail, 1);
}

/* ---- lexer ----------------------------------------------------------------------- */

static bool is_word_start(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static bool is_word_char(char c)
{
    return is_word_start(c) || (c >= '0' && c <= '9') || c == '.';
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }

static void push_token(Parser *p, Token token)
{
    if (p->ntokens == p->capacity) {
        int capacity = p->capacity ? p->capacity * 2 : 256;
        Token *tokens = arena_alloc(p->arena, sizeof(Token) * (size_t)capacity);
        if (p->ntokens)
            memcpy(tokens, p->tokens, sizeof(Token) * (size_t)p->ntokens);
        p->tokens = tokens;
        p->capacity = capacity;
    }
    p->tokens[p->ntokens++] = token;
}

/* A "..." string starting at *cursor (the quote); returns the decoded text
 * and advances *cursor past the closing quote. */
static const char *lex_string(Parser *p, const char **cursor, Loc loc)
{
    const char *c = *cursor + 1;
    size_t length = 0, bound = 0;
    /* the decoded text is no longer than the raw text up to the end quote */
    while (c[bound] && c[bound] != '"' && c[bound] != '\n')
        bound += c[bound] == '\\' && c[bound + 1] ? 2 : 1;
    char *text = arena_alloc(p->arena, bound + 1);
    for (;;) {
        if (*c == 0 || *c == '\n')
            ir_lex_error(p, loc, "unterminated string");
        if (*c == '"')
            break;
        if (*c != '\\') {
            text[length++] = *c++;
            continue;
        }
        c++;
        switch (*c) {
        case '"': case '\\': text[length++] = *c++; break;
        case 'n': text[length++] = '\n'; c++; break;
        case 't': text[length++] = '\t'; c++; break;
        case 'x': {
            int value = 0, digits = 0;
            c++;
            while (digits < 2 && ((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f') ||
                                  (*c >= 'A' && *c <= 'F'))) {
                value = value * 16 + (*c <= '9' ? *c - '0' : (*c | 32) - 'a' + 10);
                c++;
                digits++;
            }
            if (digits == 0 || value == 0)
                ir_lex_error(p, loc, "bad \\x escape in string");
            text[length++] = (char)value;
            break;
        }
        default:
            ir_lex_error(p, loc, "unknown escape '\\%c' in string", *c ? *c : '0');
        }
    }
    text[length] = 0;
    *cursor = c + 1;
    return text;
}

static void lex_number(Parser *p, const char **cursor, Loc loc)
{
    const char *start = *cursor, *c = start;
    Token token = {.loc = loc};
    if (c[0] == '0' && (c[1] == 'x' || c[1] == 'X')) {
        c += 2;
        if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f') || (*c >= 'A' && *c <= 'F')))
            ir_lex_error(p, loc, "bad hexadecimal number");
        errno = 0;
        char *end;
        token.int_value = strtoull(c, &end, 16);
        if (errno == ERANGE)
            ir_lex_error(p, loc, "integer literal too large");
        c = end;
        token.kind = TOKEN_INT;
    } else {
        while (is_digit(*c))
            c++;
        bool is_float = false;
        if (*c == '.') {
            is_float = true;
            c++;
            while (is_digit(*c))
                c++;
        }
        if ((*c == 'e' || *c == 'E') &&
            (is_digit(c[1]) || ((c[1] == '+' || c[1] == '-') && is_digit(c[2])))) {
            is_float = true;
            c += 2;
            while (is_digit(*c))
                c++;
        }
        char buffer[128];
        size_t length = (size_t)(c - start);
        if (length >= sizeof buffer)
            ir_lex_error(p, loc, "number too long");
        memcpy(buffer, start, length);
        buffer[length] = 0;
        if (is_float) {
            token.kind = TOKEN_FLOAT;
            token.float_value = strtod(buffer, NULL);
        } else {
            token.kind = TOKEN_INT;
            errno = 0;
            token.int_value = strtoull(buffer, NULL, 10);
            if (errno == ERANGE)
                ir_lex_error(p, loc, "integer literal too large");
        }
    }
    if (is_word_char(*c))
        ir_lex_error(p, loc, "bad number: a letter follows the digits");
    *cursor = c;
    push_token(p, token);
}

static const char *const two_char_punct[] = {
    "<<", ">>", "<=", ">=", "==", "!=", "&&", "||", "->",
};

void ir_lex_tokenize(Parser *p)
{
    const char *c = p->text, *line_start = c;
    int line = 1;
    for (;;) {
        if (*c == '\n') {
            c++;
            line++;
            line_start = c;
            continue;
        }
        if (*c == ' ' || *c == '\t' || *c == '\r') {
            c++;
            continue;
        }
        if (*c == '#' || (c[0] == '/' && c[1] == '/')) { /* comment */
            while (*c && *c != '\n')
                c++;
            continue;
        }
        Loc loc = {p->file, line, (int)(c - line_start) + 1};
        Token token = {.loc = loc};
        if (*c == 0) {
            token.kind = TOKEN_EOF;
            token.text = "end of input";
            push_token(p, token);
            return;
        }
        if (is_word_start(*c)) {
            const char *start = c;
            while (is_word_char(*c))
                c++;
            token.kind = TOKEN_IDENT;
            token.text = arena_printf(p->arena, "%.*s", (int)(c - start), start);
            push_token(p, token);
            continue;
        }
        if ((*c == '%' || *c == '@') && (is_word_start(c[1]) || c[1] == '"')) {
            token.kind = *c == '%' ? TOKEN_VAR : TOKEN_BUFFER;
            c++;
            if (*c == '"') {
                token.text = lex_string(p, &c, loc);
                if (!*token.text)
                    ir_lex_error(p, loc, "empty name");
            } else {
                const char *start = c;
                while (is_word_char(*c))
                    c++;
                token.text = arena_printf(p->arena, "%.*s", (int)(c - start), start);
            }
            push_token(p, token);
            continue;
        }
        if (*c == '@')
            ir_lex_error(p, loc, "expected a buffer name after '@'");
        if (is_digit(*c)) {
            lex_number(p, &c, loc);
            continue;
        }
        if (*c == '"') {
            token.kind = TOKEN_STRING;
            token.text = lex_string(p, &c, loc);
            push_token(p, token);
            continue;
        }
        token.kind = TOKEN_PUNCT;
        for (size_t i = 0; i < sizeof two_char_punct / sizeof two_char_punct[0]; i++) {
            if (c[0] == two_char_punct[i][0] && c[1] == two_char_punct[i][1]) {
                token.text = two_char_punct[i];
                break;
            }
        }
        if (token.text) {
            c += 2;
        } else if (*c && strchr("()[]{},;:=+-*/%&|^<>", *c)) {
            token.text = arena_printf(p->arena, "%c", *c);
            c++;
        } else {
            unsigned char byte = (unsigned char)*c;
            if (byte >= 32 && byte < 127)
                ir_lex_error(p, loc, "unexpected character '%c'", byte);
            ir_lex_error(p, loc, "unexpected byte 0x%02x", byte);
        }
        push_token(p, token);
    }
}

/* ---- token helpers ------------------------------------------------------------------ */




/* How a token reads in a message. */
const char *ir_lex_describe(Parser *p, const Token *token)
{
    switch (token->kind) {
    case TOKEN_EOF: return "end of input";
    case TOKEN_VAR: return arena_printf(p->arena, "'%%%s'", token->text);
    case TOKEN_BUFFER: return arena_printf(p->arena, "'@%s'", token->text);
    case TOKEN_INT: return arena_printf(p->arena, "'%llu'", (unsigned long long)token->int_value);
    case TOKEN_FLOAT: return arena_printf(p->arena, "'%g'", token->float_value);
    case TOKEN_STRING: return "a string";
    default: return arena_printf(p->arena, "'%s'", token->text);
    }
}





Token *ir_lex_expect_punct(Parser *p, const char *text)
{
    if (!is_punct(peek(p), text))
        ir_lex_error(p, peek(p)->loc, "expected '%s', found %s", text, ir_lex_describe(p, peek(p)));
    return next(p);
}

Token *ir_lex_expect_word(Parser *p, const char *word)
{
    if (!is_word(peek(p), word))
        ir_lex_error(p, peek(p)->loc, "expected '%s', found %s", word, ir_lex_describe(p, peek(p)));
    return next(p);
}

/* name = IDENT | STRING */
const char *ir_lex_expect_name(Parser *p, const char *what)
{
    Token *token = peek(p);
    if (token->kind != TOKEN_IDENT && token->kind != TOKEN_STRING)
        ir_lex_error(p, token->loc, "expected %s, found %s", what, ir_lex_describe(p, token));
    next(p);
    return token->text;
}

const char *ir_lex_expect_string(Parser *p, const char *what)
{
    Token *token = peek(p);
    if (token->kind != TOKEN_STRING)
        ir_lex_error(p, token->loc, "expected %s (a string), found %s", what, ir_lex_describe(p, token));
    next(p);
    return token->text;
}

/* int = ['-'] INT, within [low, high] */
int64_t ir_lex_expect_int(Parser *p, const char *what, int64_t low, int64_t high)
{
    Token *start = peek(p);
    bool negative = accept_punct(p, "-");
    Token *token = peek(p);
    if (token->kind != TOKEN_INT)
        ir_lex_error(p, token->loc, "expected %s (an integer), found %s", what,
                    ir_lex_describe(p, token));
    next(p);
    uint64_t magnitude = token->int_value;
    int64_t value;
    if (magnitude > (uint64_t)INT64_MAX + (negative ? 1u : 0u))
        ir_lex_error(p, start->loc, "%s out of range", what);
    if (negative)
        value = magnitude == (uint64_t)INT64_MAX + 1u ? INT64_MIN : -(int64_t)magnitude;
    else
        value = (int64_t)magnitude;
    if (value < low || value > high)
        ir_lex_error(p, start->loc, "%s must be in [%lld, %lld], not %lld", what,
                    (long long)low, (long long)high, (long long)value);
    return value;
}

DType ir_lex_expect_dtype(Parser *p)
{
    Token *token = peek(p);
    DType t;
    if (token->kind != TOKEN_IDENT || !ir_dtype_from_name(token->text, &t))
        ir_lex_error(p, token->loc, "expected a dtype, found %s", ir_lex_describe(p, token));
    next(p);
    return t;
}
