/*
 * ir_print.h -- private interface between the two halves of the textual IR
 * printer: ir_print.c (names, literals, expressions, buffer declarations,
 * layouts, regions) and ir_print_stmt.c (statements, kernels, modules).
 * Not for use outside those two files.
 */
#ifndef TKC_IR_PRINT_H
#define TKC_IR_PRINT_H

#include "ir.h"

/* A quoted string with C escapes. */
void ir_print_string(FILE *out, const char *s);
/* sigil + name: a bare word when it is one, else a quoted string. */
void ir_print_name(FILE *out, const char *sigil, const char *name);
void ir_print_var_name(FILE *out, const Var *v);
void ir_print_buffer_name(FILE *out, const Buffer *b);
/* An expression whose bare literals read back in context dtype ctx
 * (DT_VOID: no context). */
void ir_print_expr_in(FILE *out, const Expr *e, DType ctx);
/* `@b[i, j; if p; align N]` of a load, store or atomic. */
void ir_print_access(FILE *out, const Buffer *b, Expr *const *indices,
                     const Expr *predicate, int align_bytes);
void ir_print_int_list(FILE *out, const int64_t *values, int count);
void ir_print_layout(FILE *out, const Layout *layout);
void ir_print_buffer_decl(FILE *out, const Buffer *b);
/* `@b[start : +extent, index, ...]` */
void ir_print_region(FILE *out, const Region *r);

#endif
