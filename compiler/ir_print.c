/*
 * ir_print.c -- writes the textual IR described in docs/ir.md.
 *
 * The printer is the inverse of ir_parse.c: whatever it writes, the parser
 * reads back into an IR that prints identically.  Two rules keep the text
 * short without losing that property:
 *
 *  - types that the parser infers are not written.  A node gets a
 *    `:dtype` suffix only when its dtype differs from the inferred one, and
 *    a `:xN` suffix only when its lanes differ (see inferred_dtype and
 *    inferred_lanes below, which mirror the ir.c constructors).
 *  - an integer or float literal takes its type from context (the other
 *    operand of a binary op or select, the buffer of a store, the variable
 *    of a let/assign/for) when written bare; literal_is_bare decides when a
 *    bare literal would be read back with the same type.
 *
 * Binary operators print infix with C precedence and the fewest parentheses
 * that keep the tree shape.  The printer never crashes on a malformed tree
 * (a pass dumping broken IR is when the dump matters most): missing pieces
 * print as <null>, which the parser rejects.
 */
#include "ir.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    FILE *out;
    int indent;
} Printer;

/* ---- names, literals ----------------------------------------------------- */

static bool is_name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c == '_' || c == '.';
}

static void print_string(FILE *out, const char *s)
{
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(out, "\\%c", *p);
        else if (*p == '\n')
            fputs("\\n", out);
        else if (*p == '\t')
            fputs("\\t", out);
        else if (*p < 32 || *p >= 127)
            fprintf(out, "\\x%02x", *p);
        else
            fputc(*p, out);
    }
    fputc('"', out);
}

/* A bare word ([A-Za-z_][A-Za-z0-9_.]*) or, for anything else, a string
 * (`%"0 odd"`).  A digit never follows a sigil, so `%H %64` lexes as a
 * modulo. */
static void print_name(FILE *out, const char *sigil, const char *name)
{
    if (!name) {
        fprintf(out, "%s<null>", sigil);
        return;
    }
    bool plain = (name[0] >= 'a' && name[0] <= 'z') ||
                 (name[0] >= 'A' && name[0] <= 'Z') || name[0] == '_';
    for (const char *p = name; *p && plain; p++)
        plain = is_name_char(*p);
    fputs(sigil, out);
    if (plain)
        fputs(name, out);
    else
        print_string(out, name);
}

static void print_var_name(FILE *out, const Var *v)
{
    print_name(out, "%", v ? v->name : NULL);
}

static void print_buffer_name(FILE *out, const Buffer *b)
{
    print_name(out, "@", b ? b->name : NULL);
}

/* Shortest %g form that reads back as the same double, always with a '.'
 * or exponent so that the lexer sees a float. */
static void print_double(FILE *out, double value)
{
    if (isnan(value)) {
        fputs("nan", out);
        return;
    }
    if (isinf(value)) {
        fputs(value < 0 ? "-inf" : "inf", out);
        return;
    }
    char text[64];
    for (int precision = 1; precision <= 17; precision++) {
        snprintf(text, sizeof text, "%.*g", precision, value);
        if (strtod(text, NULL) == value)
            break;
    }
    fputs(text, out);
    if (!strpbrk(text, ".e"))
        fputs(".0", out);
}

static bool is_int_class(DType t)
{
    DClass cls = ir_dtype_class(t);
    return cls == DCLASS_SINT || cls == DCLASS_UINT;
}

/* INT literals of dtype bool print as true/false and never take context;
 * every other INT or FLOAT is a numeric literal. */
static bool is_numeric_literal(const Expr *e)
{
    return e && ((e->kind == EXPR_INT && e->dtype != DT_BOOL) ||
                 e->kind == EXPR_FLOAT);
}

/* The dtype the parser gives a bare literal of this kind in context ctx
 * (DT_VOID: no context).  ir_parse.c implements the same rule. */
/* Context value meaning "write the literal's dtype whatever it is". */
#define CTX_FORCE_SUFFIX DT_COUNT

static DType literal_dtype_in(ExprKind kind, DType ctx)
{
    if ((unsigned)ctx >= DT_COUNT)
        ctx = DT_VOID;
    if (kind == EXPR_INT)
        return (ctx != DT_VOID && is_int_class(ctx)) ? ctx : DT_I32;
    return (ctx != DT_VOID && ir_dtype_is_float(ctx)) ? ctx : DT_F32;
}

static bool literal_is_bare(const Expr *e, DType ctx)
{
    if (ctx == CTX_FORCE_SUFFIX || (unsigned)e->dtype >= DT_COUNT)
        return false;
    return is_numeric_literal(e) && e->dtype == literal_dtype_in(e->kind, ctx);
}

/* ---- inference mirrors of the constructors ---------------------------------- */

static bool binop_is_boolean(BinOp op)
{
    return op == BIN_EQ || op == BIN_NE || op == BIN_LT || op == BIN_LE ||
           op == BIN_GT || op == BIN_GE || op == BIN_LAND || op == BIN_LOR;
}

static int lanes_of(const Expr *e) { return e ? e->lanes : 1; }
static int max2(int a, int b) { return a > b ? a : b; }

/* Lanes the parser's constructor call gives e (see ir.c). */
static int inferred_lanes(const Expr *e)
{
    switch (e->kind) {
    case EXPR_LOAD: {
        int lanes = 1;
        for (int i = 0; e->u.load.buffer && i < e->u.load.buffer->rank; i++)
            lanes = max2(lanes, lanes_of(e->u.load.indices[i]));
        return lanes;
    }
    case EXPR_UNARY:
        return lanes_of(e->u.unary.operand);
    case EXPR_BINARY:
        return max2(lanes_of(e->u.binary.lhs), lanes_of(e->u.binary.rhs));
    case EXPR_SELECT:
        return max2(lanes_of(e->u.select.cond),
                    max2(lanes_of(e->u.select.then_value),
                         lanes_of(e->u.select.else_value)));
    case EXPR_CAST:
        return lanes_of(e->u.cast.value);
    case EXPR_CALL: {
        int lanes = 1;
        for (int i = 0; i < e->u.call.nargs && e->u.call.args; i++)
            lanes = max2(lanes, lanes_of(e->u.call.args[i]));
        return lanes;
    }
    case EXPR_RAMP:
    case EXPR_BROADCAST:
        return e->lanes; /* written explicitly */
    default:
        return 1;
    }
}

/* Dtype the parser infers for a non-literal e (literals: see above). */
static DType inferred_dtype(const Expr *e)
{
    switch (e->kind) {
    case EXPR_VAR:
        return e->u.var ? e->u.var->dtype : e->dtype;
    case EXPR_LOAD:
        return e->u.load.buffer ? e->u.load.buffer->dtype : e->dtype;
    case EXPR_UNARY:
        if (e->u.unary.op == UN_LNOT)
            return DT_BOOL;
        return e->u.unary.operand ? e->u.unary.operand->dtype : e->dtype;
    case EXPR_BINARY:
        if (binop_is_boolean(e->u.binary.op))
            return DT_BOOL;
        return e->u.binary.lhs ? e->u.binary.lhs->dtype : e->dtype;
    case EXPR_SELECT:
        return e->u.select.then_value ? e->u.select.then_value->dtype : e->dtype;
    case EXPR_CALL:
        return ir_call_default_dtype(e->u.call.op, e->u.call.args, e->u.call.nargs);
    case EXPR_RAMP:
        return e->u.ramp.base ? e->u.ramp.base->dtype : e->dtype;
    case EXPR_BROADCAST:
        return e->u.broadcast.value ? e->u.broadcast.value->dtype : e->dtype;
    default:
        return e->dtype; /* CAST writes its type; literals handled apart */
    }
}

/* ---- expressions ----------------------------------------------------------------- */

/* Binding strength of infix operators (higher binds tighter); min and max
 * print as calls. */
static int binop_precedence(BinOp op)
{
    switch (op) {
    case BIN_LOR: return 1;
    case BIN_LAND: return 2;
    case BIN_OR: return 3;
    case BIN_XOR: return 4;
    case BIN_AND: return 5;
    case BIN_EQ: case BIN_NE: return 6;
    case BIN_LT: case BIN_LE: case BIN_GT: case BIN_GE: return 7;
    case BIN_SHL: case BIN_SHR: return 8;
    case BIN_ADD: case BIN_SUB: return 9;
    case BIN_MUL: case BIN_DIV: case BIN_MOD: return 10;
    default: return 0; /* MIN, MAX */
    }
}
#define PRECEDENCE_PRIMARY 100

static void print_expr_in(FILE *out, const Expr *e, DType ctx, int min_precedence);

/* Literal contexts for the two operands of a binary op or select: each
 * operand is context for the other when exactly one of them is a numeric
 * literal; two numeric literals are bare only when both have their
 * default types. */
static void pair_contexts(const Expr *a, const Expr *b, DType *ctx_a, DType *ctx_b)
{
    *ctx_a = *ctx_b = DT_VOID;
    bool lit_a = is_numeric_literal(a), lit_b = is_numeric_literal(b);
    if (lit_a && !lit_b && b)
        *ctx_a = b->dtype;
    else if (lit_b && !lit_a && a)
        *ctx_b = a->dtype;
    else if (lit_a && lit_b) {
        if (!literal_is_bare(a, DT_VOID) || !literal_is_bare(b, DT_VOID))
            *ctx_a = *ctx_b = CTX_FORCE_SUFFIX;
    }
}

static void print_literal(FILE *out, const Expr *e, DType ctx)
{
    if (e->kind == EXPR_INT && e->dtype == DT_BOOL &&
        (e->u.int_value == 0 || e->u.int_value == 1)) {
        fputs(e->u.int_value ? "true" : "false", out);
        return;
    }
    if (e->kind == EXPR_INT)
        fprintf(out, "%lld", (long long)e->u.int_value);
    else
        print_double(out, e->u.float_value);
    if (e->dtype == DT_BOOL || !literal_is_bare(e, ctx))
        fprintf(out, ":%s", ir_dtype_name(e->dtype));
}

static void print_expr_list(FILE *out, Expr *const *items, int count)
{
    for (int i = 0; i < count; i++) {
        if (i)
            fputs(", ", out);
        print_expr_in(out, items ? items[i] : NULL, DT_VOID, 0);
    }
}

/* `[i, j; if p; align N]` of a load or store. */
static void print_access(FILE *out, const Buffer *b, Expr *const *indices,
                         const Expr *predicate, int align_bytes)
{
    print_buffer_name(out, b);
    fputc('[', out);
    print_expr_list(out, indices, b ? b->rank : 0);
    if (predicate) {
        fputs("; if ", out);
        print_expr_in(out, predicate, DT_VOID, 0);
    }
    if (align_bytes)
        fprintf(out, "; align %d", align_bytes);
    fputc(']', out);
}

static void print_call_args2(FILE *out, const char *name, const Expr *a, const Expr *b)
{
    DType ctx_a, ctx_b;
    pair_contexts(a, b, &ctx_a, &ctx_b);
    fprintf(out, "%s(", name);
    print_expr_in(out, a, ctx_a, 0);
    fputs(", ", out);
    print_expr_in(out, b, ctx_b, 0);
    fputc(')', out);
}

static void print_expr_in(FILE *out, const Expr *e, DType ctx, int min_precedence)
{
    if (!e) {
        fputs("<null>", out);
        return;
    }
    if ((unsigned)e->dtype >= DT_COUNT) {
        fprintf(out, "<bad dtype %d>", (int)e->dtype);
        return;
    }
    bool literal = e->kind == EXPR_INT || e->kind == EXPR_FLOAT;
    bool dtype_suffix = !literal && e->kind != EXPR_CAST && e->dtype != inferred_dtype(e);
    bool lanes_suffix = e->lanes != inferred_lanes(e);
    int precedence = e->kind == EXPR_BINARY ? binop_precedence(e->u.binary.op)
                                            : PRECEDENCE_PRIMARY;
    if (precedence == 0)
        precedence = PRECEDENCE_PRIMARY;
    /* a suffix applies to a primary: parenthesise an infix expression */
    bool parens = precedence < min_precedence ||
                  ((dtype_suffix || lanes_suffix) && precedence != PRECEDENCE_PRIMARY);
    if (parens)
        fputc('(', out);
    switch (e->kind) {
    case EXPR_INT:
    case EXPR_FLOAT:
        print_literal(out, e, ctx);
        break;
    case EXPR_VAR:
        print_var_name(out, e->u.var);
        break;
    case EXPR_LOAD:
        print_access(out, e->u.load.buffer, e->u.load.indices, e->u.load.predicate,
                     e->u.load.align_bytes);
        break;
    case EXPR_UNARY:
        if ((unsigned)e->u.unary.op >= UN_COUNT) {
            fprintf(out, "<bad unop %d>", (int)e->u.unary.op);
            break;
        }
        fprintf(out, "%s(", ir_unop_name(e->u.unary.op));
        print_expr_in(out, e->u.unary.operand, DT_VOID, 0);
        fputc(')', out);
        break;
    case EXPR_BINARY: {
        BinOp op = e->u.binary.op;
        if ((unsigned)op >= BIN_COUNT) {
            fprintf(out, "<bad binop %d>", (int)op);
            break;
        }
        if (binop_precedence(op) == 0) {
            print_call_args2(out, ir_binop_name(op), e->u.binary.lhs, e->u.binary.rhs);
            break;
        }
        DType ctx_a, ctx_b;
        pair_contexts(e->u.binary.lhs, e->u.binary.rhs, &ctx_a, &ctx_b);
        /* left-associative: an equal-precedence right operand needs parens */
        print_expr_in(out, e->u.binary.lhs, ctx_a, precedence);
        fprintf(out, " %s ", ir_binop_name(op));
        print_expr_in(out, e->u.binary.rhs, ctx_b, precedence + 1);
        break;
    }
    case EXPR_SELECT: {
        DType ctx_a, ctx_b;
        const Expr *a = e->u.select.then_value, *b = e->u.select.else_value;
        pair_contexts(a, b, &ctx_a, &ctx_b);
        fputs("select(", out);
        print_expr_in(out, e->u.select.cond, DT_VOID, 0);
        fputs(", ", out);
        print_expr_in(out, a, ctx_a, 0);
        fputs(", ", out);
        print_expr_in(out, b, ctx_b, 0);
        fputc(')', out);
        break;
    }
    case EXPR_CAST:
        if (e->u.cast.kind == CAST_BITCAST)
            fprintf(out, "bitcast<%s>(", ir_dtype_name(e->dtype));
        else
            fprintf(out, "%s(", ir_dtype_name(e->dtype));
        print_expr_in(out, e->u.cast.value, DT_VOID, 0);
        fputc(')', out);
        break;
    case EXPR_CALL:
        if ((unsigned)e->u.call.op >= INTR_COUNT) {
            fprintf(out, "<bad intrinsic %d>", (int)e->u.call.op);
            break;
        }
        fprintf(out, "%s(", ir_intrinsic_name(e->u.call.op));
        print_expr_list(out, e->u.call.args, e->u.call.nargs);
        fputc(')', out);
        break;
    case EXPR_RAMP:
        fputs("ramp(", out);
        print_expr_in(out, e->u.ramp.base, DT_VOID, 0);
        fprintf(out, ", %lld, %d)", (long long)e->u.ramp.stride, e->lanes);
        break;
    case EXPR_BROADCAST:
        fputs("broadcast(", out);
        print_expr_in(out, e->u.broadcast.value, DT_VOID, 0);
        fprintf(out, ", %d)", e->lanes);
        break;
    default:
        fprintf(out, "<bad expr kind %d>", (int)e->kind);
        break;
    }
    if (parens)
        fputc(')', out);
    if (dtype_suffix)
        fprintf(out, ":%s", ir_dtype_name(e->dtype));
    if (lanes_suffix)
        fprintf(out, ":x%d", e->lanes);
}

void ir_print_expr(FILE *out, const Expr *e) { print_expr_in(out, e, DT_VOID, 0); }

/* ---- buffers, layouts --------------------------------------------------------- */

static void print_int_list(FILE *out, const int64_t *values, int count)
{
    fputc('[', out);
    for (int i = 0; i < count; i++)
        fprintf(out, "%s%lld", i ? ", " : "", (long long)values[i]);
    fputc(']', out);
}

static void print_layout(FILE *out, const Layout *layout)
{
    fputs("layout(", out);
    print_int_list(out, layout->extent, layout->rank > IR_MAX_RANK ? 0 : layout->rank);
    fprintf(out, ", threads %d, vec %d, slots %lld", layout->threads, layout->vec,
            (long long)layout->slots);
    if (layout->reduced) {
        fputs(", reduced ", out);
        print_int_list(out, layout->parent_extent,
                       layout->parent_rank > IR_MAX_RANK ? 0 : layout->parent_rank);
        fprintf(out, ", group %d", layout->group);
    }
    fputc(')', out);
}

/* Shape and stride lists may hold NULLs in a half-built buffer: `_`. */
static void print_dim_list(FILE *out, Expr *const *items, int count)
{
    fputc('[', out);
    for (int i = 0; i < count; i++) {
        if (i)
            fputs(", ", out);
        if (items[i])
            print_expr_in(out, items[i], DT_VOID, 0);
        else
            fputc('_', out);
    }
    fputc(']', out);
}

/* `@name: scope dtype [shape] strides [...] readonly layout(...) offset N
 * pitch N swizzle N`, optional parts only when they differ from the
 * defaults of ir_new_buffer. */
static void print_buffer_decl(FILE *out, const Buffer *b)
{
    print_buffer_name(out, b);
    if ((unsigned)b->scope > SCOPE_LOCAL || (unsigned)b->dtype >= DT_COUNT ||
        b->rank < 0 || b->rank > IR_MAX_RANK) {
        fputs(": <bad buffer>", out);
        return;
    }
    fprintf(out, ": %s %s ", ir_scope_name(b->scope), ir_dtype_name(b->dtype));
    print_dim_list(out, b->shape, b->rank);
    bool strides = false;
    for (int i = 0; i < b->rank; i++)
        strides |= b->strides[i] != NULL;
    if (strides) {
        fputs(" strides ", out);
        print_dim_list(out, b->strides, b->rank);
    }
    if (b->read_only)
        fputs(" readonly", out);
    if (b->layout) {
        fputc(' ', out);
        print_layout(out, b->layout);
    }
    if (b->shared_offset != -1)
        fprintf(out, " offset %lld", (long long)b->shared_offset);
    if (b->pitch != 0)
        fprintf(out, " pitch %lld", (long long)b->pitch);
    if (b->swizzle_shift != -1)
        fprintf(out, " swizzle %d", b->swizzle_shift);
}

static void print_region(FILE *out, const Region *r)
{
    print_buffer_name(out, r->buffer);
    fputc('[', out);
    int rank = r->buffer && r->buffer->rank <= IR_MAX_RANK ? r->buffer->rank : 0;
    for (int i = 0; i < rank; i++) {
        if (i)
            fputs(", ", out);
        print_expr_in(out, r->start[i], DT_VOID, 0);
        if (r->extent[i])
            fprintf(out, " : +%lld", (long long)r->extent[i]);
    }
    fputc(']', out);
}

/* ---- statements ---------------------------------------------------------------- */

static void print_stmt(Printer *p, const Stmt *s);

static void print_indent(Printer *p)
{
    for (int i = 0; i < p->indent; i++)
        fputs("  ", p->out);
}

/* `{`, the statements of a SEQ (or the one statement), `}`.  The caller
 * has written the text before the brace; the closing brace ends the line
 * unless `more` (for `} else {`). */
static void print_block(Printer *p, const Stmt *body, bool more)
{
    bool empty = !body || (body->kind == STMT_SEQ && body->u.seq.count == 0);
    if (empty) {
        fputs("{}", p->out);
    } else {
        fputs("{\n", p->out);
        p->indent++;
        if (body->kind == STMT_SEQ)
            for (int i = 0; i < body->u.seq.count; i++)
                print_stmt(p, body->u.seq.items ? body->u.seq.items[i] : NULL);
        else
            print_stmt(p, body);
        p->indent--;
        print_indent(p);
        fputc('}', p->out);
    }
    if (!more)
        fputc('\n', p->out);
}

/* `%name` plus `: dtype` when the dtype is not the default i32. */
static void print_var_decl_i32(FILE *out, const Var *v)
{
    print_var_name(out, v);
    if (v && v->dtype != DT_I32)
        fprintf(out, ": %s", ir_dtype_name(v->dtype));
}

static void print_stmt(Printer *p, const Stmt *s)
{
    FILE *out = p->out;
    print_indent(p);
    if (!s) {
        fputs("<null>\n", out);
        return;
    }
    switch (s->kind) {
    case STMT_SEQ:
        fputs("seq ", out);
        print_block(p, s, false);
        return;
    case STMT_LET: {
        const Var *v = s->u.let.var;
        const Expr *value = s->u.let.value;
        fputs(v && v->kind == VAR_MUTABLE ? "var " : "let ", out);
        print_var_name(out, v);
        DType ctx = DT_VOID;
        if (v && (!value || v->dtype != value->dtype)) {
            fprintf(out, ": %s", ir_dtype_name(v->dtype));
            ctx = v->dtype;
        }
        if (value) {
            fputs(" = ", out);
            print_expr_in(out, value, ctx, 0);
        }
        break;
    }
    case STMT_ASSIGN:
        print_var_name(out, s->u.assign.var);
        fputs(" = ", out);
        print_expr_in(out, s->u.assign.value,
                      s->u.assign.var ? s->u.assign.var->dtype : DT_VOID, 0);
        break;
    case STMT_STORE: {
        const Buffer *b = s->u.store.buffer;
        fputs("store ", out);
        print_access(out, b, s->u.store.indices, s->u.store.predicate,
                     s->u.store.align_bytes);
        fputs(" = ", out);
        print_expr_in(out, s->u.store.value, b ? b->dtype : DT_VOID, 0);
        break;
    }
    case STMT_ALLOC:
        fputs("alloc ", out);
        if (s->u.alloc.buffer)
            print_buffer_decl(out, s->u.alloc.buffer);
        else
            fputs("@<null>", out);
        break;
    case STMT_FOR: {
        const Var *v = s->u.loop.var;
        DType ctx = v ? v->dtype : DT_VOID;
        fputs("for ", out);
        print_var_decl_i32(out, v);
        fprintf(out, " in %s(", (unsigned)s->u.loop.kind < LOOP_COUNT
                                    ? ir_loop_name(s->u.loop.kind) : "<bad>");
        print_expr_in(out, s->u.loop.begin, ctx, 0);
        fputs(", ", out);
        print_expr_in(out, s->u.loop.end, ctx, 0);
        fputc(')', out);
        if (s->u.loop.step != 1)
            fprintf(out, " step %lld", (long long)s->u.loop.step);
        fputc(' ', out);
        print_block(p, s->u.loop.body, false);
        return;
    }
    case STMT_PARALLEL: {
        fputs("parallel (", out);
        int rank = s->u.parallel.rank > IR_MAX_RANK ? 0 : s->u.parallel.rank;
        for (int i = 0; i < rank; i++) {
            const Var *v = s->u.parallel.vars[i];
            if (i)
                fputs(", ", out);
            print_var_name(out, v);
            fputs(": ", out);
            if (v && v->dtype != DT_I32)
                fprintf(out, "%s ", ir_dtype_name(v->dtype));
            fprintf(out, "%lld", (long long)s->u.parallel.extent[i]);
        }
        fputs(") ", out);
        if (s->u.parallel.layout) {
            print_layout(out, s->u.parallel.layout);
            fputc(' ', out);
        }
        print_block(p, s->u.parallel.body, false);
        return;
    }
    case STMT_IF:
        fputs("if ", out);
        print_expr_in(out, s->u.if_.cond, DT_VOID, 0);
        fputc(' ', out);
        if (!s->u.if_.else_body) {
            print_block(p, s->u.if_.then_body, false);
            return;
        }
        print_block(p, s->u.if_.then_body, true);
        fputs(" else ", out);
        print_block(p, s->u.if_.else_body, false);
        return;
    case STMT_BARRIER:
        fputs(s->u.barrier.warp_only ? "barrier warp" : "barrier", out);
        break;
    case STMT_COPY:
        fputs("copy ", out);
        print_region(out, &s->u.copy.src);
        fputs(" -> ", out);
        print_region(out, &s->u.copy.dst);
        break;
    case STMT_FILL: {
        const Buffer *b = s->u.fill.dst.buffer;
        fputs("fill ", out);
        print_region(out, &s->u.fill.dst);
        fputs(" = ", out);
        print_expr_in(out, s->u.fill.value, b ? b->dtype : DT_VOID, 0);
        break;
    }
    case STMT_REDUCE:
        fprintf(out, "reduce %s ", (unsigned)s->u.reduce.op < REDUCE_COUNT
                                       ? ir_reduce_name(s->u.reduce.op) : "<bad>");
        print_buffer_name(out, s->u.reduce.src);
        fputs(" -> ", out);
        print_buffer_name(out, s->u.reduce.dst);
        fprintf(out, " dim %d", s->u.reduce.dim);
        if (s->u.reduce.clear)
            fputs(" clear", out);
        break;
    case STMT_ATOMIC: {
        const Buffer *b = s->u.atomic.buffer;
        fprintf(out, "atomic %s ", (unsigned)s->u.atomic.op < ATOMIC_COUNT
                                       ? ir_atomic_name(s->u.atomic.op) : "<bad>");
        print_access(out, b, s->u.atomic.indices, NULL, 0);
        fputs(" = ", out);
        print_expr_in(out, s->u.atomic.value, b ? b->dtype : DT_VOID, 0);
        break;
    }
    case STMT_EVAL:
        fputs("eval ", out);
        print_expr_in(out, s->u.eval.value, DT_VOID, 0);
        break;
    case STMT_RETURN:
        fputs("return", out);
        break;
    case STMT_ASSERT:
        fputs("assert ", out);
        print_expr_in(out, s->u.assert_.cond, DT_VOID, 0);
        if (s->u.assert_.message) {
            fputs(", ", out);
            print_string(out, s->u.assert_.message);
        }
        break;
    default:
        fprintf(out, "<bad stmt kind %d>", (int)s->kind);
        break;
    }
    fputc('\n', out);
}

/* ---- kernels, modules ------------------------------------------------------------ */

static const char *const state_names[] = {"layouts", "thread", "vector", "shared"};

static void print_state(FILE *out, unsigned state)
{
    fputs("  state", out);
    for (unsigned bit = 0; bit < 4; bit++)
        if (state & (1u << bit))
            fprintf(out, " %s", state_names[bit]);
    if (state & ~15u)
        fprintf(out, " %u", state & ~15u);
    fputc('\n', out);
}

void ir_print_kernel(FILE *out, const Kernel *k)
{
    Printer printer = {out, 1};
    fputs("kernel ", out);
    print_name(out, "", k->name);
    fputs(" {\n", out);
    if (k->source_name && k->name && strcmp(k->source_name, k->name) != 0) {
        fputs("  source ", out);
        print_name(out, "", k->source_name);
        fputc('\n', out);
    }
    if (k->instance && *k->instance) {
        fputs("  instance ", out);
        print_name(out, "", k->instance);
        fputc('\n', out);
    }
    if (k->state)
        print_state(out, k->state);
    fprintf(out, "  threads %d\n", k->threads);
    if (k->shared_bytes)
        fprintf(out, "  shared_bytes %lld\n", (long long)k->shared_bytes);
    if (k->nsymbols > 0) {
        fputs("  symbol ", out);
        for (int i = 0; i < k->nsymbols; i++) {
            if (i)
                fputs(", ", out);
            print_var_decl_i32(out, k->symbols ? k->symbols[i] : NULL);
        }
        fputc('\n', out);
    }
    for (int i = 0; i < k->nparams; i++) {
        const Param *param = &k->params[i];
        fputs("  param ", out);
        const char *own_name = NULL;
        if (param->kind == PARAM_TENSOR && param->buffer) {
            print_buffer_decl(out, param->buffer);
            own_name = param->buffer->name;
        } else if (param->kind == PARAM_SCALAR && param->var) {
            print_var_name(out, param->var);
            fprintf(out, ": %s", ir_dtype_name(param->var->dtype));
            own_name = param->var->name;
        } else {
            fputs("<null>", out);
        }
        if (param->name && own_name && strcmp(param->name, own_name) != 0) {
            fputs(" name ", out);
            print_string(out, param->name);
        }
        fputc('\n', out);
    }
    for (int i = 0; i < k->nconstraints; i++) {
        fputs("  constraint ", out);
        print_string(out, k->constraints[i].text ? k->constraints[i].text : "");
        fputc(' ', out);
        print_expr_in(out, k->constraints[i].cond, DT_VOID, 0);
        fputc('\n', out);
    }
    fputs("  grid ", out);
    for (int i = 0; i < 3; i++) {
        if (i)
            fputs(", ", out);
        if (k->grid[i])
            print_expr_in(out, k->grid[i], DT_VOID, 0);
        else
            fputc('1', out);
    }
    fputc('\n', out);
    bool any_block = k->block_vars[0] || k->block_vars[1] || k->block_vars[2];
    if (any_block) {
        fputs("  block ", out);
        bool first = true;
        for (int i = 0; i < 3; i++) {
            if (!k->block_vars[i])
                continue;
            if (!first)
                fputs(", ", out);
            first = false;
            print_var_decl_i32(out, k->block_vars[i]);
            fprintf(out, " = %c", "xyz"[i]);
        }
        fputc('\n', out);
    }
    fputs("  body ", out);
    print_block(&printer, k->body, false);
    fputs("}\n", out);
}

void ir_print_module(FILE *out, const Module *m)
{
    fputs("arch ", out);
    print_name(out, "", m->arch ? m->arch : "sm_90a");
    fputc('\n', out);
    for (int i = 0; i < m->nkernels; i++) {
        fputc('\n', out);
        ir_print_kernel(out, m->kernels[i]);
    }
}
