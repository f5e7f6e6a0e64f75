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
#include "ir_print.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- names, literals ----------------------------------------------------- */

static bool is_name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c == '_' || c == '.';
}

void ir_print_string(FILE *out, const char *s)
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
void ir_print_name(FILE *out, const char *sigil, const char *name)
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
        ir_print_string(out, name);
}

void ir_print_var_name(FILE *out, const Var *v)
{
    ir_print_name(out, "%", v ? v->name : NULL);
}

void ir_print_buffer_name(FILE *out, const Buffer *b)
{
    ir_print_name(out, "@", b ? b->name : NULL);
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
void ir_print_access(FILE *out, const Buffer *b, Expr *const *indices,
                         const Expr *predicate, int align_bytes)
{
    ir_print_buffer_name(out, b);
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
        ir_print_var_name(out, e->u.var);
        break;
    case EXPR_LOAD:
        ir_print_access(out, e->u.load.buffer, e->u.load.indices, e->u.load.predicate,
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

void ir_print_expr_in(FILE *out, const Expr *e, DType ctx) { print_expr_in(out, e, ctx, 0); }

/* ---- buffers, layouts --------------------------------------------------------- */

void ir_print_int_list(FILE *out, const int64_t *values, int count)
{
    fputc('[', out);
    for (int i = 0; i < count; i++)
        fprintf(out, "%s%lld", i ? ", " : "", (long long)values[i]);
    fputc(']', out);
}

/* `layout([extents], threads T, vec V, slots S[, reduced [..], group G])`;
 * an MMA layout is `layout mma([M, N], threads T, vec V, slots S,
 * warpgroups W)`. */
void ir_print_layout(FILE *out, const Layout *layout)
{
    fputs(layout->kind == LAYOUT_MMA ? "layout mma(" : "layout(", out);
    ir_print_int_list(out, layout->extent, layout->rank > IR_MAX_RANK ? 0 : layout->rank);
    fprintf(out, ", threads %d, vec %d, slots %lld", layout->threads, layout->vec,
            (long long)layout->slots);
    if (layout->kind == LAYOUT_MMA)
        fprintf(out, ", warpgroups %d", layout->warpgroups);
    if (layout->reduced) {
        fputs(", reduced ", out);
        ir_print_int_list(out, layout->parent_extent,
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

/* `@name: scope dtype [shape] strides [...] readonly layout(...)
 * plain|swizzle128|mbarrier synchronized offset N pitch N swizzle N`,
 * optional parts only when they differ from the defaults of
 * ir_new_buffer. */
void ir_print_buffer_decl(FILE *out, const Buffer *b)
{
    ir_print_buffer_name(out, b);
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
    if (b->has_cache_hint)
        fprintf(out, " cache %s",
                (unsigned)b->cache_hint < CACHE_COUNT ? ir_cache_hint_name(b->cache_hint)
                                                      : "<bad>");
    if (b->layout) {
        fputc(' ', out);
        ir_print_layout(out, b->layout);
    }
    if (b->async_kind != SHARED_ASYNC_NONE)
        fprintf(out, " %s", ir_async_kind_name(b->async_kind));
    if (b->mbarrier_synchronized)
        fputs(" synchronized", out);
    if (b->shared_offset != -1)
        fprintf(out, " offset %lld", (long long)b->shared_offset);
    if (b->pitch != 0)
        fprintf(out, " pitch %lld", (long long)b->pitch);
    if (b->swizzle_shift != -1)
        fprintf(out, " swizzle %d", b->swizzle_shift);
}

void ir_print_region(FILE *out, const Region *r)
{
    ir_print_buffer_name(out, r->buffer);
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

