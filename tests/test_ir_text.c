/*
 * test_ir_text.c -- the textual IR: printer and parser.
 *
 * The textual IR is tested three ways: the goldens in tests/ir/ must print
 * back byte for byte; random expression trees (valid or not) must survive
 * print -> parse -> print; and every prefix of every golden, plus randomly
 * corrupted copies, must parse without crashing (Criterion runs each test
 * in its own process, so a crash fails the test).  Malformed text must be
 * rejected with a located message.  The IR's constructors, rewriting
 * helpers and verifier are tested in test_ir.c.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"
#include "ir_test_support.h"

#define GOLDEN_DIR TK_SOURCE_DIR "/tests/ir"

/* ---- helpers ------------------------------------------------------------------ */

/* Golden file names (sorted), NULL-terminated. */
static char **golden_files(int *count)
{
    DIR *dir = opendir(GOLDEN_DIR);
    cr_assert(dir, "cannot open %s", GOLDEN_DIR);
    char **names = calloc(256, sizeof(char *));
    int n = 0;
    struct dirent *entry;
    while ((entry = readdir(dir)) && n < 255) {
        size_t length = strlen(entry->d_name);
        if (length > 3 && strcmp(entry->d_name + length - 3, ".ir") == 0)
            names[n++] = strdup(entry->d_name);
    }
    closedir(dir);
    qsort(names, (size_t)n, sizeof(char *), (int (*)(const void *, const void *))strcmp);
    *count = n;
    return names;
}

static char *golden_path(const char *name)
{
    char *path = malloc(strlen(GOLDEN_DIR) + strlen(name) + 2);
    sprintf(path, "%s/%s", GOLDEN_DIR, name);
    return path;
}

/* ---- textual IR: goldens ----------------------------------------------------------- */

Test(ir_text, goldens_round_trip)
{
    int count;
    char **names = golden_files(&count);
    cr_assert_geq(count, 6, "expected at least 6 goldens in %s", GOLDEN_DIR);
    for (int i = 0; i < count; i++) {
        char *path = golden_path(names[i]);
        char *text = read_file(path);
        Arena *arena = arena_new();
        Captured c;
        capture_init(&c);
        Module *m = ir_parse(arena, &c.diag, path, text);
        cr_assert(m, "%s does not parse:\n%s", names[i], capture_text(&c));
        char *printed = print_module_text(m);
        cr_expect_str_eq(printed, text, "%s does not print back identically", names[i]);
        /* idempotence on the printed text */
        Module *again = ir_parse(arena, &c.diag, "<again>", printed);
        cr_assert(again, "%s: printed text does not parse:\n%s", names[i], capture_text(&c));
        char *printed2 = print_module_text(again);
        cr_expect_str_eq(printed2, printed, "%s: print(parse(print)) differs", names[i]);
        /* goldens are valid IR, except the syntax-only one(s) */
        if (!strstr(names[i], "unverified")) {
            for (int j = 0; j < m->nkernels; j++)
                cr_expect(ir_verify(m->kernels[j], &c.diag, "golden"), "%s:\n%s", names[i],
                          capture_text(&c));
        }
        capture_done(&c);
        free(printed);
        free(printed2);
        arena_free(arena);
        free(text);
        free(path);
    }
}

/* Every construct of the IR appears in some golden. */
Test(ir_text, goldens_cover_every_construct)
{
    int count;
    char **names = golden_files(&count);
    bool stmt_seen[STMT_COUNT] = {0}, expr_seen[EXPR_COUNT] = {0};
    bool intrinsic_seen[INTR_COUNT] = {0}, binop_seen[BIN_COUNT] = {0}, unop_seen[UN_COUNT] = {0};
    bool scope_seen[4] = {0}, loop_seen[LOOP_COUNT] = {0}, layout_reduced = false;
    bool predicate = false, align = false, lanes_suffix = false;
    for (int i = 0; i < count; i++) {
        char *path = golden_path(names[i]);
        char *text = read_file(path);
        Arena *arena = arena_new();
        Module *m = parse_ok(arena, text);
        for (int kk = 0; kk < m->nkernels; kk++) {
            Kernel *k = m->kernels[kk];
            for (int b = 0; b < k->buffers.count; b++) {
                Buffer *buffer = k->buffers.items[b];
                scope_seen[buffer->scope] = true;
                if (buffer->layout && buffer->layout->reduced)
                    layout_reduced = true;
            }
            /* walk statements with an explicit stack */
            Stmt *stack[4096];
            int depth = 0;
            stack[depth++] = k->body;
            while (depth) {
                Stmt *s = stack[--depth];
                stmt_seen[s->kind] = true;
                if (s->kind == STMT_SEQ)
                    for (int j = 0; j < s->u.seq.count; j++)
                        stack[depth++] = s->u.seq.items[j];
                if (s->kind == STMT_FOR) {
                    loop_seen[s->u.loop.kind] = true;
                    stack[depth++] = s->u.loop.body;
                }
                if (s->kind == STMT_PARALLEL)
                    stack[depth++] = s->u.parallel.body;
                if (s->kind == STMT_IF) {
                    stack[depth++] = s->u.if_.then_body;
                    if (s->u.if_.else_body)
                        stack[depth++] = s->u.if_.else_body;
                }
                if (s->kind == STMT_STORE && s->u.store.predicate)
                    predicate = true;
                if (s->kind == STMT_STORE && s->u.store.align_bytes)
                    align = true;
            }
        }
        /* expression kinds: look at the text, which is what matters here */
        for (int e = 0; e < INTR_COUNT; e++) {
            char *call = malloc(64);
            snprintf(call, 64, "%s(", ir_intrinsic_name((Intrinsic)e));
            if (strstr(text, call))
                intrinsic_seen[e] = true;
            free(call);
        }
        for (int op = 0; op < BIN_COUNT; op++) {
            char pattern[16];
            if (op == BIN_MIN || op == BIN_MAX)
                snprintf(pattern, sizeof pattern, "%s(", ir_binop_name((BinOp)op));
            else
                snprintf(pattern, sizeof pattern, " %s ", ir_binop_name((BinOp)op));
            if (strstr(text, pattern))
                binop_seen[op] = true;
        }
        for (int op = 0; op < UN_COUNT; op++) {
            char pattern[16];
            snprintf(pattern, sizeof pattern, "%s(", ir_unop_name((UnOp)op));
            if (strstr(text, pattern))
                unop_seen[op] = true;
        }
        expr_seen[EXPR_RAMP] |= strstr(text, "ramp(") != NULL;
        expr_seen[EXPR_BROADCAST] |= strstr(text, "broadcast(") != NULL;
        expr_seen[EXPR_SELECT] |= strstr(text, "select(") != NULL;
        expr_seen[EXPR_CAST] |= strstr(text, "bitcast<") != NULL;
        lanes_suffix |= strstr(text, ":x8") != NULL;
        arena_free(arena);
        free(text);
        free(path);
    }
    for (int s = 0; s < STMT_COUNT; s++)
        cr_expect(stmt_seen[s], "no golden has a '%s' statement", ir_stmt_name((StmtKind)s));
    for (int e = 0; e < INTR_COUNT; e++)
        cr_expect(intrinsic_seen[e], "no golden calls %s", ir_intrinsic_name((Intrinsic)e));
    for (int op = 0; op < BIN_COUNT; op++)
        cr_expect(binop_seen[op], "no golden uses '%s'", ir_binop_name((BinOp)op));
    for (int op = 0; op < UN_COUNT; op++)
        cr_expect(unop_seen[op], "no golden uses %s", ir_unop_name((UnOp)op));
    for (int sc = 0; sc < 4; sc++)
        cr_expect(scope_seen[sc], "no golden has a %s buffer", ir_scope_name((Scope)sc));
    for (int l = 0; l < LOOP_COUNT; l++)
        cr_expect(loop_seen[l], "no golden has a %s loop", ir_loop_name((LoopKind)l));
    cr_expect(expr_seen[EXPR_RAMP] && expr_seen[EXPR_BROADCAST] && expr_seen[EXPR_SELECT] &&
              expr_seen[EXPR_CAST]);
    cr_expect(layout_reduced && predicate && align && lanes_suffix);
}

/* ---- textual IR: random expressions ------------------------------------------------- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static unsigned rnd(unsigned n)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (unsigned)(rng_state % n);
}

static DType random_dtype(void) { return (DType)(1 + rnd(DT_COUNT - 1)); }

/* Any tree, well-typed or not: the text must carry every dtype and lane
 * count whatever the tree. */
static Expr *random_expr(Kernel *k, Var **vars, int nvars, Buffer *buffer, int depth)
{
    Expr *e;
    unsigned choice = depth <= 0 ? rnd(3) : rnd(12);
    switch (choice) {
    case 0: {
        static const int64_t values[] = {0, 1, -1, 7, 255, -128, INT64_MIN, INT64_MAX, 65536};
        e = ir_int(k, rnd(3) ? (rnd(2) ? DT_I32 : random_dtype()) : DT_BOOL,
                   values[rnd(sizeof values / sizeof values[0])]);
        break;
    }
    case 1: {
        static const double values[] = {0.0, -0.0, 1.5, 1e-300, 3.4e38, 0.1, -2.5e-7, 448.0};
        e = ir_float(k, rnd(2) ? DT_F32 : random_dtype(), values[rnd(8)]);
        break;
    }
    case 2:
        e = ir_var(k, vars[rnd((unsigned)nvars)]);
        break;
    case 3: {
        Expr *indices[2] = {random_expr(k, vars, nvars, buffer, depth - 1),
                            random_expr(k, vars, nvars, buffer, depth - 1)};
        e = ir_load(k, buffer, indices,
                    rnd(3) == 0 ? random_expr(k, vars, nvars, buffer, depth - 1) : NULL);
        e->u.load.align_bytes = rnd(2) ? 0 : 16;
        break;
    }
    case 4:
        e = ir_unary(k, (UnOp)rnd(UN_COUNT), random_expr(k, vars, nvars, buffer, depth - 1));
        break;
    case 5:
    case 6:
    case 7:
        e = ir_binary(k, (BinOp)rnd(BIN_COUNT), random_expr(k, vars, nvars, buffer, depth - 1),
                      random_expr(k, vars, nvars, buffer, depth - 1));
        break;
    case 8:
        e = ir_select(k, random_expr(k, vars, nvars, buffer, depth - 1),
                      random_expr(k, vars, nvars, buffer, depth - 1),
                      random_expr(k, vars, nvars, buffer, depth - 1));
        break;
    case 9:
        e = ir_cast(k, rnd(2) ? CAST_CONVERT : CAST_BITCAST, random_dtype(),
                    random_expr(k, vars, nvars, buffer, depth - 1));
        break;
    case 10: {
        Intrinsic op = (Intrinsic)rnd(INTR_COUNT);
        Expr *args[3];
        int nargs = ir_intrinsic_nargs(op);
        for (int i = 0; i < nargs; i++)
            args[i] = random_expr(k, vars, nvars, buffer, depth - 1);
        e = ir_call(k, op, rnd(3) ? ir_call_default_dtype(op, args, nargs) : random_dtype(),
                    args, nargs);
        break;
    }
    default:
        if (rnd(2))
            e = ir_ramp(k, random_expr(k, vars, nvars, buffer, depth - 1),
                        (int64_t)rnd(5) - 2, 1 + (int)rnd(IR_MAX_LANES));
        else
            e = ir_broadcast(k, random_expr(k, vars, nvars, buffer, depth - 1),
                             1 + (int)rnd(IR_MAX_LANES));
        break;
    }
    /* now and then a node whose dtype or lanes no constructor would give */
    if (rnd(10) == 0)
        e->dtype = random_dtype();
    if (rnd(10) == 0)
        e->lanes = 1 + (int)rnd(IR_MAX_LANES);
    return e;
}

/* Same shape, kinds, dtypes, lanes and constants; vars by name. */
static void expect_same_tree(const Expr *a, const Expr *b, const char *text)
{
    cr_assert(a && b, "%s", text);
    cr_assert_eq(a->kind, b->kind, "kind in %s", text);
    cr_assert_eq(a->dtype, b->dtype, "dtype %s vs %s in %s", ir_dtype_name(a->dtype),
                 ir_dtype_name(b->dtype), text);
    cr_assert_eq(a->lanes, b->lanes, "lanes in %s", text);
    switch (a->kind) {
    case EXPR_INT:
        cr_assert_eq(a->u.int_value, b->u.int_value, "%s", text);
        break;
    case EXPR_FLOAT:
        cr_assert(memcmp(&a->u.float_value, &b->u.float_value, sizeof(double)) == 0, "%s", text);
        break;
    case EXPR_VAR:
        cr_assert_str_eq(a->u.var->name, b->u.var->name);
        break;
    case EXPR_LOAD:
        cr_assert_str_eq(a->u.load.buffer->name, b->u.load.buffer->name);
        cr_assert_eq(a->u.load.align_bytes, b->u.load.align_bytes);
        for (int i = 0; i < a->u.load.buffer->rank; i++)
            expect_same_tree(a->u.load.indices[i], b->u.load.indices[i], text);
        cr_assert_eq(!a->u.load.predicate, !b->u.load.predicate, "%s", text);
        if (a->u.load.predicate)
            expect_same_tree(a->u.load.predicate, b->u.load.predicate, text);
        break;
    case EXPR_UNARY:
        cr_assert_eq(a->u.unary.op, b->u.unary.op);
        expect_same_tree(a->u.unary.operand, b->u.unary.operand, text);
        break;
    case EXPR_BINARY:
        cr_assert_eq(a->u.binary.op, b->u.binary.op, "%s", text);
        expect_same_tree(a->u.binary.lhs, b->u.binary.lhs, text);
        expect_same_tree(a->u.binary.rhs, b->u.binary.rhs, text);
        break;
    case EXPR_SELECT:
        expect_same_tree(a->u.select.cond, b->u.select.cond, text);
        expect_same_tree(a->u.select.then_value, b->u.select.then_value, text);
        expect_same_tree(a->u.select.else_value, b->u.select.else_value, text);
        break;
    case EXPR_CAST:
        cr_assert_eq(a->u.cast.kind, b->u.cast.kind);
        expect_same_tree(a->u.cast.value, b->u.cast.value, text);
        break;
    case EXPR_CALL:
        cr_assert_eq(a->u.call.op, b->u.call.op);
        cr_assert_eq(a->u.call.nargs, b->u.call.nargs);
        for (int i = 0; i < a->u.call.nargs; i++)
            expect_same_tree(a->u.call.args[i], b->u.call.args[i], text);
        break;
    case EXPR_RAMP:
        cr_assert_eq(a->u.ramp.stride, b->u.ramp.stride);
        expect_same_tree(a->u.ramp.base, b->u.ramp.base, text);
        break;
    case EXPR_BROADCAST:
        expect_same_tree(a->u.broadcast.value, b->u.broadcast.value, text);
        break;
    default:
        cr_assert_fail("bad kind");
    }
}

Test(ir_text, random_expressions_round_trip)
{
    for (int round = 0; round < 400; round++) {
        Arena *arena = arena_new();
        Module *m = ir_new_module(arena, "sm_90a");
        Kernel *k = ir_new_kernel(m, "random");
        Var *vars[6];
        for (int i = 0; i < 6; i++) {
            char name[8];
            snprintf(name, sizeof name, "v%d", i);
            vars[i] = ir_new_var(k, name, random_dtype(), VAR_SYMBOL);
        }
        k->symbols = vars;
        k->nsymbols = 6;
        Buffer *buffer = ir_new_buffer(k, "buf", random_dtype(), SCOPE_GLOBAL, 2);
        buffer->shape[0] = ir_int(k, DT_I32, 4);
        buffer->shape[1] = ir_int(k, DT_I32, 4);
        buffer->param_index = 0;
        Param param = {.name = "buf", .kind = PARAM_TENSOR, .buffer = buffer};
        k->params = &param;
        k->nparams = 1;
        Expr *exprs[4];
        Stmt *items[4];
        for (int i = 0; i < 4; i++) {
            exprs[i] = random_expr(k, vars, 6, buffer, 4);
            items[i] = ir_new_stmt(k, STMT_EVAL, (Loc){0});
            items[i]->u.eval.value = exprs[i];
        }
        /* statement contexts type bare literals too */
        Stmt *store = ir_new_stmt(k, STMT_STORE, (Loc){0});
        Expr *indices[2] = {ir_int(k, DT_I32, 0), ir_int(k, DT_I32, 1)};
        store->u.store.buffer = buffer;
        store->u.store.indices = indices;
        store->u.store.value = rnd(2) ? ir_int(k, random_dtype(), 3) : ir_float(k, random_dtype(), 2.5);
        k->body = ir_seq(k, items, 4);
        ir_seq_append(k, k->body, store);

        char *text = print_module_text(m);
        Arena *arena2 = arena_new();
        Captured c;
        capture_init(&c);
        Module *parsed = ir_parse(arena2, &c.diag, "<random>", text);
        cr_assert(parsed, "does not parse:\n%s\n%s", capture_text(&c), text);
        capture_done(&c);
        Kernel *k2 = parsed->kernels[0];
        for (int i = 0; i < 4; i++)
            expect_same_tree(exprs[i], k2->body->u.seq.items[i]->u.eval.value, text);
        expect_same_tree(store->u.store.value, k2->body->u.seq.items[4]->u.store.value, text);
        char *text2 = print_module_text(parsed);
        cr_assert_str_eq(text2, text);
        free(text);
        free(text2);
        arena_free(arena2);
        arena_free(arena);
    }
}

/* ---- textual IR: errors --------------------------------------------------------------- */

/* Every prefix of every golden parses or fails cleanly. */
Test(ir_text, truncated_goldens_do_not_crash, .timeout = 120)
{
    int count;
    char **names = golden_files(&count);
    FILE *null_out = fopen("/dev/null", "w");
    for (int i = 0; i < count; i++) {
        char *path = golden_path(names[i]);
        char *text = read_file(path);
        size_t length = strlen(text);
        for (size_t cut = 0; cut < length; cut++) {
            char *prefix = strndup(text, cut);
            Arena *arena = arena_new();
            Diag diag;
            diag_init(&diag, null_out);
            Module *m = ir_parse(arena, &diag, "<cut>", prefix);
            cr_assert(m || diag.errors > 0, "%s cut at %zu: NULL without an error", names[i], cut);
            arena_free(arena);
            free(prefix);
        }
        free(text);
        free(path);
    }
    fclose(null_out);
}

/* Random byte corruption of the goldens must not crash either. */
Test(ir_text, corrupted_goldens_do_not_crash, .timeout = 120)
{
    static const char junk[] = "%@[](){}:;,=+-*/<>&|^!#\"\\_x0123456789.eE \n\x01\xff";
    int count;
    char **names = golden_files(&count);
    FILE *null_out = fopen("/dev/null", "w");
    for (int i = 0; i < count; i++) {
        char *path = golden_path(names[i]);
        char *text = read_file(path);
        size_t length = strlen(text);
        for (int round = 0; round < 300; round++) {
            char *copy = strdup(text);
            for (int edits = 1 + (int)rnd(3); edits > 0; edits--)
                copy[rnd((unsigned)length)] = junk[rnd(sizeof junk - 1)];
            Arena *arena = arena_new();
            Diag diag;
            diag_init(&diag, null_out);
            Module *m = ir_parse(arena, &diag, "<corrupt>", copy);
            if (m) {
                /* what parses must print, and verify without crashing */
                for (int j = 0; j < m->nkernels; j++)
                    ir_verify(m->kernels[j], &diag, "fuzz");
                char *printed = print_module_text(m);
                free(printed);
            }
            arena_free(arena);
            free(copy);
        }
        free(text);
        free(path);
    }
    fclose(null_out);
}

/* text must fail to parse with `expected` in the diagnostics. */
static void expect_parse_error(const char *text, const char *expected)
{
    Arena *arena = arena_new();
    Captured c;
    capture_init(&c);
    Module *m = ir_parse(arena, &c.diag, "<ir>", text);
    cr_expect_null(m, "parsed although it should not:\n%s", text);
    cr_expect(strstr(capture_text(&c), expected), "expected \"%s\" in:\n%s", expected,
              capture_text(&c));
    capture_done(&c);
    arena_free(arena);
}

Test(ir_text, parse_errors)
{
    expect_parse_error("kernel k {\n  body {\n    eval %y\n  }\n}\n",
                       "<ir>:3:10: error: undefined variable %y");
    expect_parse_error("kernel k {\n  body {\n    store @b[0] = 1\n  }\n}\n",
                       "<ir>:3:11: error: undefined buffer @b");
    expect_parse_error("kernel k {\n  param @x: global f32 [4, 4] strides [4, 1]\n"
                       "  body {\n    eval @x[1]\n  }\n}\n",
                       "<ir>:4:12: error: @x has rank 2 but 1 indices are given");
    expect_parse_error("kernel k {\n  body {\n    let %a = 1\n    let %a = 2\n  }\n}\n",
                       "4:9: error: variable %a is defined twice");
    expect_parse_error("kernel k {\n  body {\n    let %a = 1 +\n  }\n}\n",
                       "4:3: error: expected an expression, found '}'");
    expect_parse_error("kernel k {\n  body {\n    eval foo(1)\n  }\n}\n",
                       "3:10: error: unknown function 'foo'");
    expect_parse_error("kernel k {\n  body {\n    eval exp(1.0, 2.0)\n  }\n}\n",
                       "error: exp takes 1 argument, not 2");
    expect_parse_error("kernel k {\n  body {\n    eval 1:f33\n  }\n}\n",
                       "3:11: error: expected a statement, found ':'");
    expect_parse_error("kernel k {\n  body {\n    eval broadcast(1, 33)\n  }\n}\n",
                       "error: lanes must be in [1, 32], not 33");
    expect_parse_error("kernel k {\n  body {\n    eval \"abc\n  }\n}\n",
                       "3:10: error: unterminated string");
    expect_parse_error("kernel k {\n  body {\n    eval 4x\n  }\n}\n",
                       "3:10: error: bad number: a letter follows the digits");
    expect_parse_error("kernel k {\n  body {\n    eval 1 $ 2\n  }\n}\n",
                       "3:12: error: unexpected character '$'");
    expect_parse_error("kernel k {\n  body {\n    frobnicate\n  }\n}\n",
                       "3:5: error: unknown statement 'frobnicate'");
    expect_parse_error("kernel k {\n  body {\n", "error: expected '}' to close the block opened at 2:8");
    expect_parse_error("kernel k {\n  threads 32\n}\n",
                       "3:1: error: expected a kernel item or 'body', found '}'");
    expect_parse_error("kernel k {\n  body {}\n}\nkernel k {\n  body {}\n}\n",
                       "4:8: error: kernel k is defined twice");
    expect_parse_error("kernel k {\n  body {\n    alloc @t: texture f32 [4]\n  }\n}\n",
                       "error: expected a scope (global, shared, fragment, local), found 'texture'");
    expect_parse_error("kernel k {\n  body {\n    eval -%x\n  }\n}\n",
                       "error: expected a number after '-' (negate with neg(x))");
    expect_parse_error("kernel k {\n  body {\n    eval 99999999999999999999\n  }\n}\n",
                       "error: integer literal too large");
    expect_parse_error("kernel k {\n  block %b = w\n  body {}\n}\n",
                       "2:14: error: expected x, y or z, found 'w'");
    expect_parse_error("kernel k {\n  body {\n    let %a = %a + 1\n  }\n}\n",
                       "3:14: error: undefined variable %a");
    expect_parse_error("kernel k {\n  body {\n    alloc @f: fragment f32 [1, 2, 3, 4, 5, 6, 7]\n  }\n}\n",
                       "error: more than 6 dimensions");
    expect_parse_error("junk", "1:1: error: expected 'kernel', found 'junk'");
    /* deep nesting is an error, not a stack overflow */
    char *deep = malloc(200000);
    strcpy(deep, "kernel k {\n  body {\n    eval ");
    size_t length = strlen(deep);
    memset(deep + length, '(', 50000);
    strcpy(deep + length + 50000, "1");
    expect_parse_error(deep, "error: nesting deeper than 500 levels");
    free(deep);
}

/* Hand-written shorthands read as the printer's canonical form. */
Test(ir_text, shorthands_normalise)
{
    Arena *arena = arena_new();
    Module *m = parse_ok(arena,
                         "// a comment\n"
                         "kernel k {  # another\n"
                         "  threads 4 body { let %a: i64 = 0x10 let %b: f32 = ((1.5)) * 2.0 }\n"
                         "}\n");
    char *text = print_module_text(m);
    cr_assert_str_eq(text, "arch sm_90a\n\nkernel k {\n  threads 4\n  grid 1, 1, 1\n  body {\n"
                           "    let %a = 16:i64\n    let %b = 1.5 * 2.0\n  }\n}\n");
    free(text);
    arena_free(arena);
}

Test(ir_text, diagnostics_show_source_line_and_caret)
{
    expect_parse_error("kernel k {\n  body {\n    eval %missing\n  }\n}\n",
                       "<ir>:3:10: error: undefined variable %missing\n"
                       "    eval %missing\n"
                       "         ^\n");
}
