/*
 * emit_header.c -- the C launchers of a module (`tkc --emit=header`).
 *
 * For every kernel instance the header declares
 *   tk_status tkl_<kernel>__<instance>(const tk_tensor *x, ...,
 *                                      <scalar type> s, ..., tk_stream stream);
 * (tensors and scalars in Kernel.params order) and, under
 * TK_LAUNCHERS_IMPLEMENTATION, defines it.  A launcher checks everything
 * before it launches, failing with TK_ERROR_INVALID_ARGUMENT and a message
 * naming the kernel and the argument:
 *   1. each tensor: not NULL, dtype, rank, no negative shape or stride, data
 *      present when non-empty and 16-byte aligned (the kernels' vector
 *      accesses rely on it), largest element offset within int32;
 *   2. binding: the first occurrence of a symbol as a whole shape or stride
 *      entry (params order; a tensor's shape before its strides) gives its
 *      value, which must fit in int32 (the kernels index in i32);
 *   3. every other shape/stride entry must equal its expression; a stride
 *      the .tk source leaves out must be the contiguous one; the stride of
 *      a dimension of size <= 1 is never used, so it is not checked;
 *   4. every `where` constraint, quoting its source text and the values of
 *      its symbols;
 *   5. the grid: a zero dimension launches nothing and succeeds; more than
 *      2^31-1 blocks in x or 65535 in y/z is an invalid argument.
 * Launcher expressions are evaluated in int64 with TileLang's floor
 * division; a division by a zero run-time value or an int64 overflow is an
 * invalid argument.  The parameter block matches codegen_llvm.c's kernel
 * ABI: device pointers, scalars (bool as one byte, 16-bit floats as their
 * bits, 8-bit floats as their byte), the symbols as int32_t, then one
 * CUtensorMap per Kernel.tensor_maps entry (128 bytes, 64-byte aligned:
 * cuda.h aligns the type), encoded after the grid check (an empty grid
 * launches nothing and needs none) by tk__tensor_map from the tensor
 * argument, which checks what TMA requires and names the tensor.
 */
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"

/* ---- text helpers ------------------------------------------------------ */

/* A C identifier for an IR name (".1" suffixes become "_1"). */
static void put_identifier(FILE *out, const char *prefix, const char *name) {
    fputs(prefix, out);
    for (const char *p = name; *p; p++)
        fputc(isalnum((unsigned char)*p) ? *p : '_', out);
}

/* Writes s as the body of a C string literal that is also a printf format
 * (so '%' is doubled). */
static void put_format_text(FILE *out, const char *s) {
    for (const char *p = s; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == '"' || c == '\\') fprintf(out, "\\%c", c);
        else if (c == '%') fputs("%%", out);
        else if (c == '\n') fputs("\\n", out);
        else if (c < 32 || c >= 127) fprintf(out, "\\%03o", c);
        else fputc(c, out);
    }
}

static bool is_float_type(DType t) { return ir_dtype_is_float(t); }

/* C parameter type of a scalar: 16-bit floats travel as their bits and
 * 8-bit floats as their byte, since C has no such types. */
static const char *scalar_c_type(DType t) {
    switch (t) {
    case DT_BOOL: return "bool";
    case DT_I8: return "int8_t";
    case DT_U8: case DT_E4M3: case DT_E5M2: case DT_E2M1: case DT_UE8M0: return "uint8_t";
    case DT_I16: return "int16_t";
    case DT_U16: case DT_F16: case DT_BF16: return "uint16_t";
    case DT_I32: return "int32_t";
    case DT_U32: return "uint32_t";
    case DT_I64: return "int64_t";
    case DT_U64: return "uint64_t";
    case DT_F32: return "float";
    case DT_F64: return "double";
    case DT_VOID: case DT_COUNT: break;
    }
    ice("scalar parameter of type %s", ir_dtype_name(t));
}

static void put_param_name(FILE *out, const Param *p) {
    put_identifier(out, "", p->name);
    /* the launcher's own parameter is `stream` */
    if (strcmp(p->name, "stream") == 0) fputc('_', out);
}

/* ---- expressions ------------------------------------------------------- */

/* The .tk-like spelling of a launcher expression, for messages. */
static void human_expr(Text *t, const Expr *e) {
    switch (e->kind) {
    case EXPR_INT: text_add(t, "%lld", (long long)e->u.int_value); return;
    case EXPR_FLOAT: text_add(t, "%g", e->u.float_value); return;
    case EXPR_VAR: text_add(t, "%s", e->u.var->name); return;
    case EXPR_UNARY: {
        static const char *const ops[UN_COUNT] = {"-", "~", "!", "abs"};
        text_add(t, "%s(", ops[e->u.unary.op]);
        human_expr(t, e->u.unary.operand);
        text_add(t, ")");
        return;
    }
    case EXPR_BINARY: {
        BinOp op = e->u.binary.op;
        if (op == BIN_MIN || op == BIN_MAX) {
            text_add(t, "%s(", op == BIN_MIN ? "min" : "max");
            human_expr(t, e->u.binary.lhs);
            text_add(t, ", ");
            human_expr(t, e->u.binary.rhs);
            text_add(t, ")");
            return;
        }
        text_add(t, "(");
        human_expr(t, e->u.binary.lhs);
        text_add(t, " %s ", ir_binop_name(op));
        human_expr(t, e->u.binary.rhs);
        text_add(t, ")");
        return;
    }
    case EXPR_SELECT:
        text_add(t, "(");
        human_expr(t, e->u.select.cond);
        text_add(t, " ? ");
        human_expr(t, e->u.select.then_value);
        text_add(t, " : ");
        human_expr(t, e->u.select.else_value);
        text_add(t, ")");
        return;
    case EXPR_CAST:
        text_add(t, "%s(", ir_dtype_name(e->dtype));
        human_expr(t, e->u.cast.value);
        text_add(t, ")");
        return;
    default:
        text_add(t, "<%s>", ir_expr_name(e->kind));
        return;
    }
}

static void c_expr(FILE *out, const Expr *e);

static void c_call2(FILE *out, const char *fn, const Expr *a, const Expr *b, bool flag) {
    fprintf(out, "%s(", fn);
    c_expr(out, a);
    fputs(", ", out);
    c_expr(out, b);
    fputs(flag ? ", &tkl_bad)" : ")", out);
}

/* Writes e as a C expression of type int64_t (integers, bool) or double
 * (floats); symbols are the locals sym_<name>, scalars the parameters.
 * Operations that can fail set the local tkl_bad. */
static void c_expr(FILE *out, const Expr *e) {
    if (e->lanes != 1) ice("vector expression in a launcher");
    switch (e->kind) {
    case EXPR_INT:
        if (e->u.int_value == INT64_MIN) fputs("INT64_MIN", out);
        else fprintf(out, "INT64_C(%lld)", (long long)e->u.int_value);
        return;
    case EXPR_FLOAT:
        if (isnan(e->u.float_value)) fputs("__builtin_nan(\"\")", out);
        else if (isinf(e->u.float_value))
            fputs(e->u.float_value > 0 ? "__builtin_inf()" : "(-__builtin_inf())", out);
        else fprintf(out, "%a", e->u.float_value);
        return;
    case EXPR_VAR: {
        const Var *v = e->u.var;
        if (v->kind == VAR_SYMBOL) {
            put_identifier(out, "sym_", v->name);
        } else if (v->kind == VAR_SCALAR) {
            fputs(is_float_type(v->dtype) ? "((double)" : "((int64_t)", out);
            put_identifier(out, "", v->name);
            if (strcmp(v->name, "stream") == 0) fputc('_', out);
            fputs(")", out);
        } else {
            ice("launcher expression uses %s, which is not a symbol or scalar", v->name);
        }
        return;
    }
    case EXPR_UNARY:
        switch (e->u.unary.op) {
        case UN_NEG:
            if (is_float_type(e->dtype)) fputs("(-", out);
            else fputs("tkl__sub(INT64_C(0), ", out);
            c_expr(out, e->u.unary.operand);
            fputs(is_float_type(e->dtype) ? ")" : ", &tkl_bad)", out);
            return;
        case UN_NOT: fputs("(~", out); break;
        case UN_LNOT: fputs("(int64_t)(!", out); break;
        case UN_ABS:
            fputs(is_float_type(e->dtype) ? "__builtin_fabs(" : "tkl__abs(", out);
            c_expr(out, e->u.unary.operand);
            fputs(is_float_type(e->dtype) ? ")" : ", &tkl_bad)", out);
            return;
        case UN_COUNT: ice("bad unary");
        }
        c_expr(out, e->u.unary.operand);
        fputs(")", out);
        return;
    case EXPR_BINARY: {
        const Expr *a = e->u.binary.lhs, *b = e->u.binary.rhs;
        bool f = is_float_type(a->dtype);
        const char *infix = NULL;
        switch (e->u.binary.op) {
        case BIN_ADD: if (!f) { c_call2(out, "tkl__add", a, b, true); return; } infix = "+"; break;
        case BIN_SUB: if (!f) { c_call2(out, "tkl__sub", a, b, true); return; } infix = "-"; break;
        case BIN_MUL: if (!f) { c_call2(out, "tkl__mul", a, b, true); return; } infix = "*"; break;
        case BIN_DIV: if (!f) { c_call2(out, "tkl__div", a, b, true); return; } infix = "/"; break;
        case BIN_MOD: c_call2(out, "tkl__mod", a, b, true); return;
        case BIN_MIN: c_call2(out, f ? "__builtin_fmin" : "tk__min", a, b, false); return;
        case BIN_MAX: c_call2(out, f ? "__builtin_fmax" : "tk__max", a, b, false); return;
        case BIN_SHL: c_call2(out, "tkl__shl", a, b, true); return;
        case BIN_SHR: c_call2(out, "tkl__shr", a, b, true); return;
        case BIN_AND: infix = "&"; break;
        case BIN_OR: infix = "|"; break;
        case BIN_XOR: infix = "^"; break;
        case BIN_EQ: infix = "=="; break;
        case BIN_NE: infix = "!="; break;
        case BIN_LT: infix = "<"; break;
        case BIN_LE: infix = "<="; break;
        case BIN_GT: infix = ">"; break;
        case BIN_GE: infix = ">="; break;
        case BIN_LAND: infix = "&&"; break;
        case BIN_LOR: infix = "||"; break;
        case BIN_COUNT: ice("bad binary");
        }
        bool boolean = e->dtype == DT_BOOL;
        fputs(boolean ? "(int64_t)(" : "(", out);
        c_expr(out, a);
        fprintf(out, " %s ", infix);
        c_expr(out, b);
        fputs(")", out);
        return;
    }
    case EXPR_SELECT:
        fputs("(", out);
        c_expr(out, e->u.select.cond);
        fputs(" ? ", out);
        c_expr(out, e->u.select.then_value);
        fputs(" : ", out);
        c_expr(out, e->u.select.else_value);
        fputs(")", out);
        return;
    case EXPR_CAST: {
        DType to = e->dtype, from = e->u.cast.value->dtype;
        if (e->u.cast.kind == CAST_BITCAST && is_float_type(to) != is_float_type(from))
            ice("bitcast in a launcher expression");
        static const char *const c_types[DT_COUNT] = {
            [DT_BOOL] = "bool", [DT_I8] = "int8_t", [DT_U8] = "uint8_t",
            [DT_I16] = "int16_t", [DT_U16] = "uint16_t", [DT_I32] = "int32_t",
            [DT_U32] = "uint32_t", [DT_I64] = "int64_t", [DT_U64] = "uint64_t",
            [DT_UE8M0] = "uint8_t", [DT_F32] = "float", [DT_F64] = "double"};
        const char *c_type = c_types[to];
        if (!c_type) ice("launcher cast to %s", ir_dtype_name(to));
        fprintf(out, is_float_type(to) ? "(double)(%s)(" : "(int64_t)(%s)(", c_type);
        c_expr(out, e->u.cast.value);
        fputs(")", out);
        return;
    }
    default:
        break;
    }
    ice("launcher expression of kind %s", ir_expr_name(e->kind));
}

/* The symbols and scalars an expression uses, in order, once each. */
static int collect_vars(const Expr *e, const Var **vars, int count, int capacity) {
    if (!e) return count;
    switch (e->kind) {
    case EXPR_VAR:
        for (int i = 0; i < count; i++)
            if (vars[i] == e->u.var) return count;
        if (count < capacity) vars[count++] = e->u.var;
        return count;
    case EXPR_UNARY: return collect_vars(e->u.unary.operand, vars, count, capacity);
    case EXPR_BINARY:
        count = collect_vars(e->u.binary.lhs, vars, count, capacity);
        return collect_vars(e->u.binary.rhs, vars, count, capacity);
    case EXPR_SELECT:
        count = collect_vars(e->u.select.cond, vars, count, capacity);
        count = collect_vars(e->u.select.then_value, vars, count, capacity);
        return collect_vars(e->u.select.else_value, vars, count, capacity);
    case EXPR_CAST: return collect_vars(e->u.cast.value, vars, count, capacity);
    default: return count;
    }
}

/* ` (X = %lld, sx = %lld)` in the format and the matching arguments. */
static void put_values_format(FILE *out, const Var **vars, int n) {
    if (n == 0) return;
    fputs(" (", out);
    for (int i = 0; i < n; i++) {
        fprintf(out, "%s", i ? ", " : "");
        put_format_text(out, vars[i]->name);
        fputs(is_float_type(vars[i]->dtype) ? " = %g" : " = %lld", out);
    }
    fputs(")", out);
}

static void put_values_args(FILE *out, const Var **vars, int n) {
    for (int i = 0; i < n; i++) {
        fputs(is_float_type(vars[i]->dtype) ? ", (double)" : ", (long long)", out);
        Expr e = {.kind = EXPR_VAR, .dtype = vars[i]->dtype, .lanes = 1};
        e.u.var = (Var *)vars[i];
        c_expr(out, &e);
    }
}

/* ---- one launcher ------------------------------------------------------ */

static void put_signature(FILE *out, const Kernel *k) {
    fprintf(out, "tk_status tkl_");
    put_identifier(out, "", k->name);
    fputs("(", out);
    for (int i = 0; i < k->nparams; i++) {
        const Param *p = &k->params[i];
        if (p->kind == PARAM_TENSOR) fputs("const tk_tensor *", out);
        else fprintf(out, "%s ", scalar_c_type(p->var->dtype));
        put_param_name(out, p);
        fputs(", ", out);
    }
    fputs("tk_stream stream)", out);
}

static const char *kernel_label(const Kernel *k) {
    return k->source_name ? k->source_name : k->name;
}

/* Whether evaluating e can set tkl_bad (anything but a constant or a
 * variable can: overflow, division by zero). */
static bool may_fail(const Expr *e) {
    return e->kind != EXPR_INT && e->kind != EXPR_VAR && e->kind != EXPR_FLOAT;
}

/* Where each symbol is first bound: (param, is_stride, dim). */
typedef struct Binding {
    int param, dim;
    bool stride;
} Binding;

static bool is_symbol(const Expr *e) {
    return e && e->kind == EXPR_VAR && e->u.var->kind == VAR_SYMBOL;
}

static int symbol_index(const Kernel *k, const Var *v) {
    for (int i = 0; i < k->nsymbols; i++)
        if (k->symbols[i] == v) return i;
    ice("%s is not a symbol of kernel %s", v->name, k->name);
}

static void put_tensor_ref(FILE *out, const Param *p, bool stride, int dim) {
    put_param_name(out, p);
    fprintf(out, "->%s[%d]", stride ? "strides" : "shape", dim);
}

/* Emits the check of one shape/stride entry against its expression. */
static void check_entry(FILE *out, const Kernel *k, const Param *p, bool stride, int d,
                        const Binding *bindings) {
    const Buffer *b = p->buffer;
    const Expr *e = stride ? b->strides[d] : b->shape[d];
    const char *label = kernel_label(k);
    const char *what = stride ? "strides" : "shape";
    if (is_symbol(e)) {
        const Binding *first = &bindings[symbol_index(k, e->u.var)];
        if (first->param == b->param_index && first->stride == stride && first->dim == d)
            return; /* this entry is the binding */
    }
    fputs("    ", out);
    if (stride) {
        /* the stride of a dimension of size <= 1 is never used */
        fputs("if (", out);
        put_param_name(out, p);
        fprintf(out, "->shape[%d] > 1 && !tkl__empty(", d);
        put_param_name(out, p);
        fputs(")) ", out);
    }
    fputs("{\n", out);
    if (!e || may_fail(e)) fputs("        tkl_bad = 0;\n", out);
    fputs("        int64_t tkl_expected = ", out);
    if (e) {
        c_expr(out, e);
    } else {
        /* omitted stride: the contiguous one */
        fputs("tkl__contiguous_stride(", out);
        put_param_name(out, p);
        fprintf(out, ", %d, &tkl_bad)", d);
    }
    fputs(";\n", out);
    Text expected = {0};
    if (e && e->kind != EXPR_INT) human_expr(&expected, e);
    if (!e || may_fail(e)) {
        fprintf(out, "        if (tkl_bad)\n            return tk__fail(TK_ERROR_INVALID_ARGUMENT, \"");
        put_format_text(out, label);
        fputs(": ", out);
        put_format_text(out, p->name);
        fprintf(out, ": %s[%d]: cannot evaluate ", what, d);
        put_format_text(out, e ? text_get(&expected) : "the contiguous stride");
        fputs(" (division by zero or overflow)\");\n", out);
    }
    fputs("        if (", out);
    put_tensor_ref(out, p, stride, d);
    fputs(" != tkl_expected)\n            return tk__fail(TK_ERROR_INVALID_ARGUMENT, \"", out);
    put_format_text(out, label);
    fputs(": ", out);
    put_format_text(out, p->name);
    fprintf(out, ": %s[%d] is %%lld, expected ", what, d);
    if (!e) fputs("%lld (contiguous)", out);
    else if (e->kind == EXPR_INT) fputs("%lld", out);
    else {
        put_format_text(out, text_get(&expected));
        fputs(" = %lld", out);
    }
    fputs("\", (long long)", out);
    put_tensor_ref(out, p, stride, d);
    fputs(", (long long)tkl_expected);\n    }\n", out);
    free(expected.data);
}

static void emit_constraint(FILE *out, const Kernel *k, const Constraint *c) {
    const Var *vars[16];
    int n = collect_vars(c->cond, vars, 0, 16);
    if (n > 16) n = 16;
    const char *text = c->text ? c->text : "";
    Text fallback = {0};
    if (!c->text) {
        human_expr(&fallback, c->cond);
        text = text_get(&fallback);
    }
    fputs("    {\n        tkl_bad = 0;\n        int64_t tkl_holds = (int64_t)(", out);
    c_expr(out, c->cond);
    fputs(");\n        if (tkl_bad || !tkl_holds)\n            return tk__fail(TK_ERROR_INVALID_ARGUMENT, \"", out);
    put_format_text(out, kernel_label(k));
    fputs(": constraint '", out);
    put_format_text(out, text);
    fputs("' %s", out);
    put_values_format(out, vars, n);
    fputs("\", tkl_bad ? \"divides by zero or overflows\" : \"does not hold\"", out);
    put_values_args(out, vars, n);
    fputs(");\n    }\n", out);
    free(fallback.data);
}

/* CUtensorMap tkl_map<i>, encoded from its tensor argument, and its slot
 * in the parameter block after the symbols. */
static void emit_tensor_map(FILE *out, const Kernel *k, int i) {
    const TensorMap *map = &k->tensor_maps[i];
    const Buffer *global = map->global;
    if (!global || global->scope != SCOPE_GLOBAL || global->param_index < 0 ||
        global->param_index >= k->nparams || map->rank != global->rank)
        ice("kernel %s: tensor map %d does not describe a tensor parameter", k->name, i);
    const Param *p = &k->params[global->param_index];
    fprintf(out, "    CUtensorMap tkl_map%d;\n    {\n        static const int64_t tkl_box[%d] = {",
            i, map->rank);
    for (int d = 0; d < map->rank; d++)
        fprintf(out, "%s%lld", d ? ", " : "", (long long)map->box[d]);
    fputs("};\n        tkl_status = tk__tensor_map(\"", out);
    put_format_text(out, kernel_label(k));
    fputs("\", \"", out);
    put_format_text(out, p->name);
    fputs("\", ", out);
    put_param_name(out, p);
    fprintf(out, ", %d, tkl_box, %d, &tkl_map%d);\n"
                 "        if (tkl_status != TK_SUCCESS) return tkl_status;\n    }\n"
                 "    tkl_params[%d] = &tkl_map%d;\n",
            map->rank, map->swizzle_bytes, i, k->nparams + k->nsymbols + i, i);
}

static void emit_definition(FILE *out, const Kernel *k) {
    const char *label = kernel_label(k);
    put_signature(out, k);
    fputs("\n{\n    int tkl_bad = 0;\n    (void)tkl_bad;\n    tk_status tkl_status;\n    (void)tkl_status;\n", out);

    /* 1. every tensor on its own */
    for (int i = 0; i < k->nparams; i++) {
        const Param *p = &k->params[i];
        if (p->kind != PARAM_TENSOR) continue;
        char upper[32];
        const char *name = ir_dtype_name(p->buffer->dtype);
        size_t j = 0;
        for (; name[j] && j + 1 < sizeof upper; j++) upper[j] = (char)toupper((unsigned char)name[j]);
        upper[j] = 0;
        fputs("    tkl_status = tkl__check_tensor(\"", out);
        put_format_text(out, label);
        fputs("\", \"", out);
        put_format_text(out, p->name);
        fprintf(out, "\", ");
        put_param_name(out, p);
        fprintf(out, ", TK_%s, %d);\n    if (tkl_status != TK_SUCCESS) return tkl_status;\n", upper,
                p->buffer->rank);
    }

    /* 2. symbol bindings: first whole-entry occurrence, params order */
    Binding *bindings = calloc((size_t)k->nsymbols + 1, sizeof *bindings);
    bool *bound = calloc((size_t)k->nsymbols + 1, sizeof *bound);
    if (!bindings || !bound) ice("out of memory");
    for (int s = 0; s < k->nsymbols; s++) {
        fputs("    int64_t ", out);
        put_identifier(out, "sym_", k->symbols[s]->name);
        fputs(" = 0;\n", out);
    }
    for (int i = 0; i < k->nparams; i++) {
        const Param *p = &k->params[i];
        if (p->kind != PARAM_TENSOR) continue;
        for (int stride = 0; stride < 2; stride++) {
            for (int d = 0; d < p->buffer->rank; d++) {
                const Expr *e = stride ? p->buffer->strides[d] : p->buffer->shape[d];
                if (!is_symbol(e)) continue;
                int s = symbol_index(k, e->u.var);
                if (bound[s]) continue;
                bound[s] = true;
                bindings[s] = (Binding){p->buffer->param_index, d, stride != 0};
                fputs("    ", out);
                put_identifier(out, "sym_", e->u.var->name);
                fputs(" = ", out);
                put_tensor_ref(out, p, stride, d);
                fputs(";\n    if (", out);
                put_identifier(out, "sym_", e->u.var->name);
                fputs(" > INT32_MAX)\n        return tk__fail(TK_ERROR_INVALID_ARGUMENT, \"", out);
                put_format_text(out, label);
                fputs(": ", out);
                put_format_text(out, p->name);
                fprintf(out, ": too large: %s[%d] is %%lld (", stride ? "strides" : "shape", d);
                put_format_text(out, e->u.var->name);
                fputs(" must fit in int32)\", (long long)", out);
                put_identifier(out, "sym_", e->u.var->name);
                fputs(");\n", out);
            }
        }
    }
    for (int s = 0; s < k->nsymbols; s++)
        if (!bound[s])
            ice("kernel %s: symbol %s is not a shape or stride of any tensor", k->name,
                k->symbols[s]->name);

    /* 3. every other entry against its expression */
    for (int i = 0; i < k->nparams; i++) {
        const Param *p = &k->params[i];
        if (p->kind != PARAM_TENSOR) continue;
        if (p->buffer->param_index != i) ice("param %s: buffer index %d", p->name, p->buffer->param_index);
        for (int d = 0; d < p->buffer->rank; d++) check_entry(out, k, p, false, d, bindings);
        for (int d = 0; d < p->buffer->rank; d++) check_entry(out, k, p, true, d, bindings);
    }
    free(bindings);
    free(bound);

    /* 4. constraints */
    for (int c = 0; c < k->nconstraints; c++) emit_constraint(out, k, &k->constraints[c]);

    /* 5. the grid */
    fputs("    int64_t tkl_grid[3];\n", out);
    for (int d = 0; d < 3; d++) {
        const Expr *g = k->grid[d];
        if (!g || g->kind == EXPR_INT) {
            if (g && g->u.int_value < 0) ice("kernel %s: negative grid", k->name);
            fprintf(out, "    tkl_grid[%d] = %lld;\n", d, g ? (long long)g->u.int_value : 1LL);
            continue;
        }
        fprintf(out, "    tkl_bad = 0;\n    tkl_grid[%d] = ", d);
        c_expr(out, g);
        fprintf(out, ";\n    if (tkl_bad || tkl_grid[%d] < 0)\n"
                     "        return tk__fail(TK_ERROR_INVALID_ARGUMENT, \"", d);
        put_format_text(out, label);
        fprintf(out, ": grid dimension %d is %%s\", tkl_bad ? \"not computable (division by zero "
                     "or overflow)\" : \"negative\");\n", d);
    }
    /* a cluster launch needs whole clusters: the blocks past the grid
     * run the kernel like the others (docs/hopper.md 11) */
    for (int d = 0; d < 3; d++)
        if (k->cluster[d] > 1)
            fprintf(out, "    tkl_grid[%d] = (tkl_grid[%d] + %d) / %d * %d;\n", d, d,
                    k->cluster[d] - 1, k->cluster[d], k->cluster[d]);
    fputs("    if (tkl_grid[0] == 0 || tkl_grid[1] == 0 || tkl_grid[2] == 0) return TK_SUCCESS;\n"
          "    if (tkl_grid[0] > INT32_MAX || tkl_grid[1] > 65535 || tkl_grid[2] > 65535)\n"
          "        return tk__fail(TK_ERROR_INVALID_ARGUMENT, \"", out);
    put_format_text(out, label);
    fputs(": grid (%lld, %lld, %lld) exceeds the limits (2^31-1, 65535, 65535)\",\n"
          "                        (long long)tkl_grid[0], (long long)tkl_grid[1], (long long)tkl_grid[2]);\n"
          "    const uint32_t tkl_dims[3] = {(uint32_t)tkl_grid[0], (uint32_t)tkl_grid[1], (uint32_t)tkl_grid[2]};\n",
          out);

    /* the parameter block */
    int nargs = k->nparams + k->nsymbols + k->ntensor_maps;
    fprintf(out, "    void *tkl_params[%d];\n", nargs + 1);
    for (int i = 0; i < k->nparams; i++) {
        const Param *p = &k->params[i];
        if (p->kind == PARAM_TENSOR) {
            fprintf(out, "    CUdeviceptr tkl_arg%d = (CUdeviceptr)(uintptr_t)", i);
            put_param_name(out, p);
            fputs("->data;\n", out);
        } else if (p->var->dtype == DT_BOOL) {
            fprintf(out, "    uint8_t tkl_arg%d = ", i);
            put_param_name(out, p);
            fputs(" ? 1 : 0;\n", out);
        } else {
            fprintf(out, "    %s tkl_arg%d = ", scalar_c_type(p->var->dtype), i);
            put_param_name(out, p);
            fputs(";\n", out);
        }
        fprintf(out, "    tkl_params[%d] = &tkl_arg%d;\n", i, i);
    }
    for (int s = 0; s < k->nsymbols; s++) {
        fprintf(out, "    int32_t tkl_sym%d = (int32_t)", s);
        put_identifier(out, "sym_", k->symbols[s]->name);
        fprintf(out, ";\n    tkl_params[%d] = &tkl_sym%d;\n", k->nparams + s, s);
    }
    for (int i = 0; i < k->ntensor_maps; i++) emit_tensor_map(out, k, i);
    if (k->cluster[0] * k->cluster[1] * k->cluster[2] > 1) {
        fprintf(out, "    static const uint32_t tkl_cluster[3] = {%du, %du, %du};\n",
                k->cluster[0], k->cluster[1], k->cluster[2]);
        fprintf(out, "    return tk__launch_cluster(\"%s\", tkl_dims, tkl_cluster, %du, %lldu, "
                "tkl_params, stream);\n}\n\n", k->name, k->threads,
                (long long)k->shared_bytes);
        return;
    }
    fprintf(out, "    return tk__launch(\"%s\", tkl_dims, %du, %lldu, tkl_params, stream);\n}\n\n",
            k->name, k->threads, (long long)k->shared_bytes);
}

/* ---- the header -------------------------------------------------------- */

/* Shared by every launcher: overflow-checked int64 arithmetic and the
 * per-tensor checks. */
static const char helpers[] =
    "static inline int64_t tkl__add(int64_t a, int64_t b, int *bad) {\n"
    "    int64_t r;\n    if (__builtin_add_overflow(a, b, &r)) *bad = 1;\n    return r;\n}\n"
    "static inline int64_t tkl__sub(int64_t a, int64_t b, int *bad) {\n"
    "    int64_t r;\n    if (__builtin_sub_overflow(a, b, &r)) *bad = 1;\n    return r;\n}\n"
    "static inline int64_t tkl__mul(int64_t a, int64_t b, int *bad) {\n"
    "    int64_t r;\n    if (__builtin_mul_overflow(a, b, &r)) *bad = 1;\n    return r;\n}\n"
    "static inline int64_t tkl__div(int64_t a, int64_t b, int *bad) {\n"
    "    if (b == 0 || (a == INT64_MIN && b == -1)) { *bad = 1; return 0; }\n"
    "    return tk__floordiv(a, b);\n}\n"
    "static inline int64_t tkl__mod(int64_t a, int64_t b, int *bad) {\n"
    "    if (b == 0 || b == -1) { *bad |= b == 0; return 0; }\n"
    "    return tk__floormod(a, b);\n}\n"
    "static inline int64_t tkl__abs(int64_t a, int *bad) {\n"
    "    if (a == INT64_MIN) { *bad = 1; return 0; }\n    return a < 0 ? -a : a;\n}\n"
    "static inline int64_t tkl__shl(int64_t a, int64_t b, int *bad) {\n"
    "    if (b < 0 || b > 62 || a < 0 || a > (INT64_MAX >> b)) { *bad = 1; return 0; }\n"
    "    return a << b;\n}\n"
    "static inline int64_t tkl__shr(int64_t a, int64_t b, int *bad) {\n"
    "    if (b < 0 || b > 63) { *bad = 1; return 0; }\n    return a >> b;\n}\n"
    "static inline int tkl__empty(const tk_tensor *t) {\n"
    "    for (int d = 0; d < t->rank; d++)\n        if (t->shape[d] == 0) return 1;\n    return 0;\n}\n"
    "/* stride d of the contiguous layout of t's shape */\n"
    "static inline int64_t tkl__contiguous_stride(const tk_tensor *t, int d, int *bad) {\n"
    "    int64_t s = 1;\n"
    "    for (int i = d + 1; i < t->rank; i++) s = tkl__mul(s, t->shape[i], bad);\n"
    "    return s;\n}\n"
    "static __attribute__((unused)) tk_status tkl__check_tensor(const char *kernel, const char *name,\n"
    "                                   const tk_tensor *t, tk_dtype dtype, int rank) {\n"
    "    if (!t)\n"
    "        return tk__fail(TK_ERROR_INVALID_ARGUMENT, \"%s: %s: tensor descriptor is NULL\", kernel, name);\n"
    "    if (t->dtype != dtype)\n"
    "        return tk__fail(TK_ERROR_INVALID_ARGUMENT, \"%s: %s: dtype is %s, expected %s\", kernel, name,\n"
    "                        tk__dtype_name(t->dtype), tk__dtype_name(dtype));\n"
    "    if (t->rank != rank)\n"
    "        return tk__fail(TK_ERROR_INVALID_ARGUMENT, \"%s: %s: rank is %d, expected %d\", kernel, name,\n"
    "                        t->rank, rank);\n"
    "    for (int d = 0; d < rank; d++) {\n"
    "        if (t->shape[d] < 0)\n"
    "            return tk__fail(TK_ERROR_INVALID_ARGUMENT, \"%s: %s: shape[%d] is negative (%lld)\", kernel,\n"
    "                            name, d, (long long)t->shape[d]);\n"
    "        if (t->strides[d] < 0)\n"
    "            return tk__fail(TK_ERROR_INVALID_ARGUMENT, \"%s: %s: strides[%d] is negative (%lld)\",\n"
    "                            kernel, name, d, (long long)t->strides[d]);\n"
    "    }\n"
    "    if (tkl__empty(t)) return TK_SUCCESS;\n"
    "    if (!t->data)\n"
    "        return tk__fail(TK_ERROR_INVALID_ARGUMENT, \"%s: %s: data is NULL but the tensor is not empty\",\n"
    "                        kernel, name);\n"
    "    if ((uintptr_t)t->data % 16 != 0)\n"
    "        return tk__fail(TK_ERROR_INVALID_ARGUMENT, \"%s: %s: data %p is not 16-byte aligned\", kernel,\n"
    "                        name, t->data);\n"
    "    /* the kernels index with int32 element offsets */\n"
    "    int bad = 0;\n    int64_t largest = 0;\n"
    "    for (int d = 0; d < rank; d++)\n"
    "        if (t->shape[d] > 1)\n"
    "            largest = tkl__add(largest, tkl__mul(t->shape[d] - 1, t->strides[d], &bad), &bad);\n"
    "    if (bad || largest > INT32_MAX)\n"
    "        return tk__fail(TK_ERROR_INVALID_ARGUMENT,\n"
    "                        \"%s: %s: too large: its largest element offset %s2^31-1\", kernel, name,\n"
    "                        bad ? \"overflows int64, above \" : \"is above \");\n"
    "    return TK_SUCCESS;\n}\n\n";

void emit_header(FILE *out, const Module *m, const char *guard) {
    const char *g = guard && *guard ? guard : "TK_LAUNCHERS_H";
    fprintf(out, "/* Generated by tkc %s: launchers of the module's kernels.  Do not edit. */\n",
#ifdef TKC_VERSION
            TKC_VERSION
#else
            "(dev)"
#endif
    );
    fprintf(out, "#ifndef %s\n#define %s\n\n#include <stdbool.h>\n#include <stdint.h>\n\n"
                 "#include \"tk.h\"\n\n",
            g, g);
    for (int i = 0; i < m->nkernels; i++) {
        put_signature(out, m->kernels[i]);
        fputs(";\n", out);
    }
    fprintf(out, "\n#define TKL_KERNEL_COUNT %d\n"
                 "/* PTX entry names, in module order. */\n"
                 "static const char *const tkl_kernel_names[TKL_KERNEL_COUNT + 1]\n"
                 "    __attribute__((unused)) = {\n",
            m->nkernels);
    for (int i = 0; i < m->nkernels; i++) fprintf(out, "    \"%s\",\n", m->kernels[i]->name);
    fputs("    0};\n\n#ifdef TK_LAUNCHERS_IMPLEMENTATION\n#include \"tk_internal.h\"\n\n", out);
    fputs(helpers, out);
    for (int i = 0; i < m->nkernels; i++) emit_definition(out, m->kernels[i]);
    fprintf(out, "#endif /* TK_LAUNCHERS_IMPLEMENTATION */\n#endif /* %s */\n", g);
}
