/*
 * test_ir.c -- the IR core: arena, constructors, rewriting helpers, the
 * textual IR (print and parse) and the verifier.
 *
 * The textual IR is tested three ways: the goldens in tests/ir/ must print
 * back byte for byte; random expression trees (valid or not) must survive
 * print -> parse -> print; and every prefix of every golden, plus randomly
 * corrupted copies, must parse without crashing (Criterion runs each test
 * in its own process, so a crash fails the test).  Verifier tests build a
 * small kernel that breaks one invariant and check the message.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"

#ifndef TK_SOURCE_DIR
#define TK_SOURCE_DIR "."
#endif
#define GOLDEN_DIR TK_SOURCE_DIR "/tests/ir"

/* ---- helpers ------------------------------------------------------------------ */

static char *read_file(const char *path)
{
    FILE *file = fopen(path, "rb");
    cr_assert(file, "cannot open %s", path);
    fseek(file, 0, SEEK_END);
    long size = ftell(file);
    fseek(file, 0, SEEK_SET);
    char *text = malloc((size_t)size + 1);
    cr_assert(fread(text, 1, (size_t)size, file) == (size_t)size);
    text[size] = 0;
    fclose(file);
    return text;
}

/* Diagnostics captured in memory. */
typedef struct {
    Diag diag;
    FILE *stream;
    char *text;
    size_t size;
} Captured;

static void capture_init(Captured *c)
{
    c->text = NULL;
    c->size = 0;
    c->stream = open_memstream(&c->text, &c->size);
    diag_init(&c->diag, c->stream);
}

static const char *capture_text(Captured *c)
{
    fflush(c->stream);
    return c->text ? c->text : "";
}

static void capture_done(Captured *c)
{
    fclose(c->stream);
    free(c->text);
}

static char *print_module_text(const Module *m)
{
    char *text = NULL;
    size_t size = 0;
    FILE *out = open_memstream(&text, &size);
    ir_print_module(out, m);
    fclose(out);
    return text;
}

static char *print_expr_text(const Expr *e)
{
    char *text = NULL;
    size_t size = 0;
    FILE *out = open_memstream(&text, &size);
    ir_print_expr(out, e);
    fclose(out);
    return text;
}

/* Parses text that must be valid; fails the test with the diagnostics. */
static Module *parse_ok(Arena *arena, const char *text)
{
    Captured c;
    capture_init(&c);
    Module *m = ir_parse(arena, &c.diag, "<test>", text);
    cr_assert(m, "parse failed:\n%s\n--- text:\n%s", capture_text(&c), text);
    capture_done(&c);
    return m;
}

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

/* ---- arena ---------------------------------------------------------------------- */

Test(arena, zeroed_aligned_and_large)
{
    Arena *arena = arena_new();
    for (int i = 0; i < 20000; i++) {
        size_t size = (size_t)(i % 97) + 1;
        unsigned char *p = arena_alloc(arena, size);
        cr_assert_eq((uintptr_t)p % 16, 0);
        for (size_t j = 0; j < size; j++)
            cr_assert_eq(p[j], 0);
        memset(p, 0xAB, size);
    }
    unsigned char *big = arena_alloc(arena, 1 << 20);
    cr_assert_eq((uintptr_t)big % 16, 0);
    cr_assert_eq(big[0], 0);
    cr_assert_eq(big[(1 << 20) - 1], 0);
    memset(big, 1, 1 << 20);
    /* small allocations keep working after a big one */
    unsigned char *small = arena_alloc(arena, 8);
    cr_assert_eq(small[0], 0);
    cr_assert_str_eq(arena_printf(arena, "%s-%d", "x", 42), "x-42");
    cr_assert_str_eq(arena_strdup(arena, "hello"), "hello");
    arena_free(arena);
}

Test(arena, vec_push_grows)
{
    Arena *arena = arena_new();
    PtrVec vec = {0};
    for (intptr_t i = 0; i < 1000; i++)
        vec_push(arena, &vec, (void *)i);
    cr_assert_eq(vec.count, 1000);
    for (intptr_t i = 0; i < 1000; i++)
        cr_assert_eq((intptr_t)vec.items[i], i);
    arena_free(arena);
}

/* ---- tables and constructors ---------------------------------------------------- */

Test(ir, property_tables)
{
    cr_assert_str_eq(ir_dtype_name(DT_E4M3), "e4m3");
    cr_assert_eq(ir_dtype_bits(DT_E2M1), 4);
    cr_assert_eq(ir_dtype_bits(DT_BF16), 16);
    cr_assert_eq(ir_dtype_class(DT_UE8M0), DCLASS_UINT);
    DType t;
    cr_assert(ir_dtype_from_name("bf16", &t) && t == DT_BF16);
    cr_assert(!ir_dtype_from_name("bf17", &t));
    cr_assert(ir_dtype_is_int(DT_BOOL) && ir_dtype_is_int(DT_U8) && !ir_dtype_is_int(DT_F32));
    cr_assert(ir_dtype_is_float(DT_E5M2) && ir_dtype_is_float(DT_F16) &&
              !ir_dtype_is_float(DT_I64));
    cr_assert_str_eq(ir_binop_name(BIN_SHL), "<<");
    cr_assert_str_eq(ir_binop_name(BIN_MAX), "max");
    cr_assert_str_eq(ir_unop_name(UN_LNOT), "lnot");
    cr_assert_str_eq(ir_intrinsic_name(INTR_SHFL_XOR), "shfl_xor");
    cr_assert_eq(ir_intrinsic_nargs(INTR_FMA), 3);
    cr_assert(ir_intrinsic_flags(INTR_SHFL_IDX) & INTR_SYNC);
    cr_assert_str_eq(ir_stmt_name(STMT_PARALLEL), "parallel");
    cr_assert_str_eq(ir_expr_name(EXPR_BROADCAST), "broadcast");
    cr_assert_str_eq(ir_loop_name(LOOP_VECTORIZED), "vectorized");
    cr_assert_str_eq(ir_reduce_name(REDUCE_ABSMAX), "absmax");
    cr_assert_str_eq(ir_atomic_name(ATOMIC_MIN), "min");
    cr_assert_str_eq(ir_scope_name(SCOPE_FRAGMENT), "fragment");
}

Test(ir, constructors_infer_types_and_lanes)
{
    Arena *arena = arena_new();
    Module *m = ir_new_module(arena, NULL);
    cr_assert_str_eq(m->arch, "sm_90a");
    Kernel *k = ir_new_kernel(m, "k");
    cr_assert_eq(m->nkernels, 1);
    cr_assert(k->grid[0] && k->grid[0]->kind == EXPR_INT && k->grid[0]->u.int_value == 1);
    cr_assert(k->body && k->body->kind == STMT_SEQ);
    Var *x = ir_new_var(k, "x", DT_U32, VAR_SCALAR);
    Expr *sum = ir_binary(k, BIN_ADD, ir_var(k, x), ir_int(k, DT_U32, 1));
    cr_assert_eq(sum->dtype, DT_U32);
    cr_assert_eq(sum->lanes, 1);
    Expr *less = ir_binary(k, BIN_LT, ir_var(k, x), ir_int(k, DT_U32, 9));
    cr_assert_eq(less->dtype, DT_BOOL);
    cr_assert_eq(ir_binary(k, BIN_LAND, less, less)->dtype, DT_BOOL);
    cr_assert_eq(ir_unary(k, UN_LNOT, less)->dtype, DT_BOOL);
    cr_assert_eq(ir_unary(k, UN_NEG, sum)->dtype, DT_U32);

    Buffer *b = ir_new_buffer(k, "b", DT_BF16, SCOPE_SHARED, 2);
    cr_assert_eq(b->param_index, -1);
    cr_assert_eq(b->shared_offset, -1);
    cr_assert_eq(b->swizzle_shift, -1);
    Expr *ramp = ir_ramp(k, ir_int(k, DT_I32, 0), 1, 8);
    cr_assert_eq(ramp->lanes, 8);
    Expr *row = ir_broadcast(k, ir_int(k, DT_I32, 3), 8);
    Expr *indices[2] = {row, ramp};
    Expr *load = ir_load(k, b, indices, NULL);
    cr_assert_eq(load->dtype, DT_BF16);
    cr_assert_eq(load->lanes, 8);
    cr_assert_neq(load->u.load.indices, indices); /* the array is copied */
    Expr *wide = ir_binary(k, BIN_MUL, load, ir_broadcast(k, ir_float(k, DT_BF16, 2), 8));
    cr_assert_eq(wide->lanes, 8);
    cr_assert_eq(ir_cast(k, CAST_CONVERT, DT_F32, wide)->lanes, 8);
    cr_assert_eq(ir_select(k, less, wide, wide)->lanes, 8);

    Expr *f = ir_float(k, DT_F32, 1.0);
    cr_assert_eq(ir_call(k, INTR_EXP, DT_F32, &f, 1)->dtype, DT_F32);
    cr_assert_eq(ir_call_default_dtype(INTR_ISFINITE, &f, 1), DT_BOOL);
    cr_assert_eq(ir_call_default_dtype(INTR_E2M1_BITS, &f, 1), DT_U8);
    cr_assert_eq(ir_call_default_dtype(INTR_F16_RZ_BITS, &f, 1), DT_U16);
    cr_assert_eq(ir_call_default_dtype(INTR_THREAD_IDX, NULL, 0), DT_I32);
    cr_assert_eq(ir_call_default_dtype(INTR_SQRT, &f, 1), DT_F32);
    arena_free(arena);
}

Test(ir, names_are_unique)
{
    Arena *arena = arena_new();
    Module *m = ir_new_module(arena, "sm_90a");
    Kernel *k = ir_new_kernel(m, "k");
    Var *a = ir_new_var(k, "x", DT_I32, VAR_LET);
    Var *b = ir_new_var(k, "x", DT_I32, VAR_LET);
    Var *c = ir_new_var(k, "x.1", DT_I32, VAR_LET); /* taken: becomes x.2 */
    Var *d = ir_new_var(k, "x", DT_I32, VAR_LET);
    cr_assert_str_eq(a->name, "x");
    cr_assert_str_eq(b->name, "x.1");
    cr_assert_str_eq(c->name, "x.2");
    cr_assert_str_eq(d->name, "x.3");
    cr_assert_eq(a->id, 0);
    cr_assert_eq(d->id, 3);
    cr_assert_eq(k->nvars, 4);
    cr_assert_eq(k->vars.items[2], c);
    /* buffers have their own namespace */
    cr_assert_str_eq(ir_new_buffer(k, "x", DT_F32, SCOPE_LOCAL, 1)->name, "x");
    cr_assert_str_eq(ir_new_buffer(k, "x", DT_F32, SCOPE_LOCAL, 1)->name, "x.1");
    /* another kernel starts afresh */
    Kernel *k2 = ir_new_kernel(m, "k2");
    cr_assert_str_eq(ir_new_var(k2, "x", DT_I32, VAR_LET)->name, "x");
    /* many clones stay fast and distinct */
    for (int i = 0; i < 5000; i++)
        ir_new_var(k2, "t", DT_I32, VAR_LET);
    cr_assert_str_eq(((Var *)k2->vars.items[5000])->name, "t.4999");
    arena_free(arena);
}

Test(ir, seq_append_grows)
{
    Arena *arena = arena_new();
    Kernel *k = ir_new_kernel(ir_new_module(arena, "sm_90a"), "k");
    Stmt *items[3];
    for (int i = 0; i < 3; i++)
        items[i] = ir_new_stmt(k, STMT_BARRIER, (Loc){0});
    Stmt *seq = ir_seq(k, items, 3);
    for (int i = 0; i < 100; i++) {
        Stmt *s = ir_new_stmt(k, STMT_RETURN, (Loc){0});
        ir_seq_append(k, seq, s);
        cr_assert_eq(seq->u.seq.items[seq->u.seq.count - 1], s);
    }
    cr_assert_eq(seq->u.seq.count, 103);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(seq->u.seq.items[i], items[i]);
    for (int i = 3; i < 103; i++)
        cr_assert_eq(seq->u.seq.items[i]->kind, STMT_RETURN);
    arena_free(arena);
}

Test(ir, substitute_expr_equal_and_uses)
{
    Arena *arena = arena_new();
    Kernel *k = ir_new_kernel(ir_new_module(arena, "sm_90a"), "k");
    Var *x = ir_new_var(k, "x", DT_I32, VAR_LET);
    Var *y = ir_new_var(k, "y", DT_I32, VAR_LET);
    /* (x * 4 + y) - x */
    Expr *e = ir_binary(k, BIN_SUB,
                        ir_binary(k, BIN_ADD,
                                  ir_binary(k, BIN_MUL, ir_var(k, x), ir_int(k, DT_I32, 4)),
                                  ir_var(k, y)),
                        ir_var(k, x));
    cr_assert(ir_expr_uses_var(e, x));
    cr_assert(ir_expr_uses_var(e, y));
    Expr *value = ir_binary(k, BIN_ADD, ir_var(k, y), ir_int(k, DT_I32, 1));
    Expr *s = ir_substitute(k, e, x, value);
    cr_assert(!ir_expr_uses_var(s, x));
    cr_assert(ir_expr_uses_var(s, y));
    cr_assert(ir_expr_uses_var(e, x), "the original is unchanged");
    char *text = print_expr_text(s);
    cr_assert_str_eq(text, "(%y + 1) * 4 + %y - (%y + 1)");
    free(text);
    /* each use got its own copy of value */
    cr_assert_neq(s->u.binary.rhs, value);
    cr_assert_neq(s->u.binary.rhs, s->u.binary.lhs->u.binary.lhs->u.binary.lhs);
    cr_assert(ir_expr_equal(s->u.binary.rhs, value));
    /* structural equality */
    cr_assert(ir_expr_equal(e, ir_copy_expr(k, e)));
    cr_assert(!ir_expr_equal(e, s));
    cr_assert(!ir_expr_equal(ir_int(k, DT_I32, 1), ir_int(k, DT_I64, 1)));
    cr_assert(!ir_expr_equal(ir_float(k, DT_F32, 0.0), ir_float(k, DT_F32, -0.0)));
    cr_assert(ir_expr_equal(ir_float(k, DT_F32, 0.5), ir_float(k, DT_F32, 0.5)));
    Expr *r1 = ir_ramp(k, ir_var(k, x), 1, 4), *r2 = ir_ramp(k, ir_var(k, x), 2, 4);
    cr_assert(!ir_expr_equal(r1, r2));
    cr_assert(ir_expr_equal(r1, ir_copy_expr(k, r1)));
    arena_free(arena);
}

/* A FOR loop whose body binds a LET: copying it twice must give distinct
 * variables, so that both copies verify side by side. */
Test(ir, copy_stmt_clones_bound_vars)
{
    Arena *arena = arena_new();
    const char *text =
        "kernel k {\n"
        "  threads 32\n"
        "  param @out: global f32 [64] strides [1]\n"
        "  body {\n"
        "    for %i in serial(0, 8) {\n"
        "      let %t = %i * 8\n"
        "      parallel (%p: 8) {\n"
        "        store @out[%t + %p] = f32(%t)\n"
        "      }\n"
        "    }\n"
        "  }\n"
        "}\n";
    Module *m = parse_ok(arena, text);
    Kernel *k = m->kernels[0];
    Stmt *loop = k->body->u.seq.items[0];
    Stmt *copy1 = ir_copy_stmt(k, loop);
    Stmt *copy2 = ir_copy_stmt(k, loop);
    cr_assert_neq(copy1->u.loop.var, loop->u.loop.var);
    cr_assert_neq(copy1->u.loop.var, copy2->u.loop.var);
    Stmt *let1 = copy1->u.loop.body->u.seq.items[0];
    Stmt *let0 = loop->u.loop.body->u.seq.items[0];
    cr_assert_neq(let1->u.let.var, let0->u.let.var);
    cr_assert_str_eq(let1->u.let.var->name, "t.1");
    /* uses are remapped: the copy's let value uses the copy's loop var */
    cr_assert(ir_expr_uses_var(let1->u.let.value, copy1->u.loop.var));
    cr_assert(!ir_expr_uses_var(let1->u.let.value, loop->u.loop.var));
    Stmt *par1 = copy1->u.loop.body->u.seq.items[1];
    Stmt *store1 = par1->u.parallel.body->u.seq.items[0];
    cr_assert(ir_expr_uses_var(store1->u.store.indices[0], let1->u.let.var));
    cr_assert(ir_expr_uses_var(store1->u.store.indices[0], par1->u.parallel.vars[0]));
    cr_assert_neq(par1->u.parallel.vars[0], ((Stmt *)loop->u.loop.body->u.seq.items[1])
                                                ->u.parallel.vars[0]);
    ir_seq_append(k, k->body, copy1);
    ir_seq_append(k, k->body, copy2);
    Captured c;
    capture_init(&c);
    cr_assert(ir_verify(k, &c.diag, "copy"), "%s", capture_text(&c));
    capture_done(&c);
    /* and the whole thing still prints and parses back */
    char *printed = print_module_text(m);
    Module *again = parse_ok(arena, printed);
    char *printed2 = print_module_text(again);
    cr_assert_str_eq(printed, printed2);
    free(printed);
    free(printed2);
    arena_free(arena);
}

/* Unrolling by hand: substitute the loop variable by each constant. */
Test(ir, substitute_stmt_unrolls)
{
    Arena *arena = arena_new();
    const char *text =
        "kernel k {\n"
        "  threads 1\n"
        "  param @out: global i32 [4] strides [1]\n"
        "  body {\n"
        "    for %i in unroll(0, 4) {\n"
        "      let %v = %i * %i\n"
        "      store @out[%i] = %v + %i\n"
        "    }\n"
        "  }\n"
        "}\n";
    Module *m = parse_ok(arena, text);
    Kernel *k = m->kernels[0];
    Stmt *loop = k->body->u.seq.items[0];
    Stmt *unrolled = ir_seq(k, NULL, 0);
    for (int i = 0; i < 4; i++)
        ir_seq_append(k, unrolled,
                      ir_substitute_stmt(k, loop->u.loop.body, loop->u.loop.var,
                                         ir_int(k, DT_I32, i)));
    k->body = ir_seq(k, &unrolled, 1);
    char *printed = print_module_text(m);
    cr_assert(strstr(printed, "seq {\n        let %v.1 = 0 * 0\n        store @out[0] = %v.1 + 0\n"),
              "%s", printed);
    cr_assert(strstr(printed, "let %v.4 = 3 * 3\n        store @out[3] = %v.4 + 3\n"), "%s",
              printed);
    Captured c;
    capture_init(&c);
    cr_assert(ir_verify(k, &c.diag, "unroll"), "%s", capture_text(&c));
    capture_done(&c);
    free(printed);
    arena_free(arena);
}

Test(ir, two_modules_in_one_process)
{
    Arena *a = arena_new(), *b = arena_new();
    Module *ma = parse_ok(a, "arch sm_90a\nkernel k {\n  threads 1\n  body {\n    let %x = 1\n  }\n}\n");
    Module *mb = parse_ok(b, "arch sm_100a\nkernel k {\n  threads 2\n  body {\n    let %x = 2\n  }\n}\n");
    arena_free(a);
    char *text = print_module_text(mb);
    cr_assert_str_eq(text, "arch sm_100a\n\nkernel k {\n  threads 2\n  grid 1, 1, 1\n  body {\n"
                           "    let %x = 2\n  }\n}\n");
    (void)ma;
    free(text);
    arena_free(b);
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

/* ---- verifier -------------------------------------------------------------------------- */

/* Parses text (which must parse) and runs the verifier; returns the
 * diagnostics (malloc'd) and whether it passed. */
static bool verify_text(const char *text, char **messages)
{
    Arena *arena = arena_new();
    Module *m = parse_ok(arena, text);
    Captured c;
    capture_init(&c);
    bool ok = true;
    for (int i = 0; i < m->nkernels; i++)
        ok &= ir_verify(m->kernels[i], &c.diag, "test_pass");
    *messages = strdup(capture_text(&c));
    capture_done(&c);
    arena_free(arena);
    return ok;
}

static void expect_verify_error(const char *text, const char *expected)
{
    char *messages;
    bool ok = verify_text(text, &messages);
    cr_expect(!ok, "verifier accepted:\n%s", text);
    cr_expect(strstr(messages, "IR verifier (after test_pass): "), "no prefix in:\n%s", messages);
    cr_expect(strstr(messages, expected), "expected \"%s\" in:\n%s\n--- for:\n%s", expected,
              messages, text);
    free(messages);
}

static void expect_verify_ok(const char *text)
{
    char *messages;
    cr_expect(verify_text(text, &messages), "rejected:\n%s\n--- for:\n%s", messages, text);
    free(messages);
}

/* A kernel template: state, declarations and body spliced in. */
static char *kernel_text(const char *state, const char *body)
{
    char *text = malloc(strlen(body) + 1024);
    sprintf(text,
            "kernel k {\n"
            "%s"
            "  threads 128\n"
            "  symbol %%N\n"
            "  param @x: global f32 [%%N] strides [1] readonly\n"
            "  param @y: global f32 [%%N] strides [1]\n"
            "  param %%s: f32\n"
            "  grid %%N, 1, 1\n"
            "  block %%bx = x\n"
            "  body {\n%s  }\n"
            "}\n",
            state, body);
    return text;
}

static void expect_body_error(const char *state, const char *body, const char *expected)
{
    char *text = kernel_text(state, body);
    expect_verify_error(text, expected);
    free(text);
}

static void expect_body_ok(const char *state, const char *body)
{
    char *text = kernel_text(state, body);
    expect_verify_ok(text);
    free(text);
}

Test(verify, typing)
{
    expect_body_ok("", "    store @y[%bx] = @x[%bx] * %s + 1.0\n");
    expect_body_error("", "    store @y[%bx] = @x[%bx] + 1\n",
                      "operands of '+' have dtypes f32 and i32");
    expect_body_error("", "    eval (%bx < 3):i32\n", "'<' gives bool, not i32");
    expect_body_error("", "    eval %bx && true\n", "operands of '&&' have dtypes i32 and bool");
    expect_body_error("", "    eval %s % 2.0\n", "'%' does not apply to f32");
    expect_body_error("", "    eval %bx << 1:u32\n", "operands of '<<' have dtypes i32 and u32");
    expect_body_error("", "    store @y[%bx] = 1:i32\n",
                      "store to @y: value has dtype i32, the buffer f32");
    expect_body_error("", "    eval @x[1.0]\n", "index has dtype f32, not an integer");
    expect_body_error("", "    eval bitcast<f16>(%s)\n", "bitcast from f32 to f16 changes the width");
    expect_body_error("", "    eval exp(%bx)\n", "exp gives i32, not a float");
    expect_body_error("", "    eval fma(%s, 2.0, 1.0:f16)\n", "fma: argument 2 has dtype f16, the call f32");
    expect_body_error("", "    if %bx {\n    }\n", "if condition has dtype i32, not bool");
    expect_body_error("", "    eval select(%bx, 1, 2)\n", "select condition has dtype i32, not bool");
    expect_body_error("", "    eval 1.5:i32\n", "float literal of dtype i32");
    expect_body_error("", "    eval %bx:i64\n", "use of %bx has dtype i64, the variable i32");
    expect_body_error("", "    eval @x[0]:f16\n", "load of @x has dtype f16, the buffer f32");
    expect_body_error("", "    let %v: i64 = 1:i32\n", "let %v: value has dtype i32, the variable i64");
    expect_body_error("", "    eval e4m3(%s) + e4m3(%s)\n", "'+' does not apply to e4m3");
}

Test(verify, scoping)
{
    expect_body_ok("", "    let %t = %bx + %N\n    store @y[%t] = %s\n");
    expect_body_error("", "    seq {\n      let %t = 1\n    }\n    eval %t\n",
                      "%t is used outside its scope");
    expect_body_error("", "    for %i in serial(0, 4) {\n    }\n    eval %i\n",
                      "%i is used outside its scope");
    expect_body_error("", "    if true {\n      let %t = 1\n    } else {\n      eval %t\n    }\n",
                      "%t is used outside its scope");
    expect_body_error("", "    let %t = 1\n    %t = 2\n", "assignment to %t, which is not mutable");
    expect_body_error("", "    store @x[0] = 1.0\n", "store to the read-only buffer @x");
    expect_body_error("", "    seq {\n      alloc @l: local f32 [4]\n    }\n    eval @l[0]\n",
                      "buffer @l is used outside the scope of its declaration");
    expect_body_ok("", "    var %acc = 0.0\n    for %i in serial(0, 4) {\n"
                       "      %acc = %acc + @x[%i]\n    }\n    store @y[0] = %acc\n");
    expect_body_error("", "    for %i in serial(0, 4) step 0 {\n    }\n", "loop step 0 is not positive");
    expect_body_error("", "    for %i in serial(0, 4:i64) {\n    }\n",
                      "loop end has dtype i64, not i32");
}

Test(verify, stages)
{
    const char *parallel = "    parallel (%p: 128) {\n      store @y[%p] = @x[%p]\n    }\n";
    expect_body_ok("", parallel);
    expect_body_error("  state layouts\n", parallel, "parallel loop has no layout");
    expect_body_ok("  state layouts\n",
                   "    parallel (%p: 128) layout([128], threads 128, vec 1, slots 1) {\n"
                   "      store @y[%p] = @x[%p]\n    }\n");
    expect_body_error("  state layouts thread\n", parallel,
                      "tile-level statement 'parallel' remains at thread level");
    expect_body_error("  state layouts thread\n",
                      "    alloc @f: fragment f32 [8] layout([8], threads 8, vec 1, slots 1)\n",
                      "fragment @f remains at thread level");
    expect_body_error("  state layouts\n", "    alloc @f: fragment f32 [8]\n",
                      "fragment @f has no layout");
    expect_body_error("  state layouts thread\n",
                      "    alloc @t: shared f32 [8]\n    copy @x[0 : +8] -> @t[0 : +8]\n",
                      "tile-level statement 'copy' remains at thread level");
    expect_body_error("  state layouts thread\n",
                      "    alloc @t: local f32 [8]\n    fill @t[0 : +8] = 0.0\n",
                      "tile-level statement 'fill' remains at thread level");
    expect_body_error("  state layouts thread\n",
                      "    alloc @a: local f32 [8]\n    alloc @b: local f32 [1]\n"
                      "    reduce sum @a -> @b dim 0\n",
                      "tile-level statement 'reduce' remains at thread level");
    expect_body_error("  state layouts thread vector\n",
                      "    for %i in vectorized(0, 4) {\n    }\n",
                      "vectorized loop remains after vectorize");
    expect_body_ok("  state layouts thread\n", "    for %i in vectorized(0, 4) {\n    }\n");
    expect_body_error("", "    eval ramp(0, 1, 4)\n", "ramp has 4 lanes before vectorize");
    expect_body_error("  state layouts thread vector shared\n",
                      "    alloc @t: shared f32 [8, 8]\n", "shared @t is not planned");
    expect_body_ok("  state layouts thread vector shared\n  shared_bytes 288\n",
                   "    alloc @t: shared f32 [8, 8] offset 0 pitch 9\n");
    expect_body_error("  state layouts thread vector shared\n  shared_bytes 256\n",
                      "    alloc @t: shared f32 [8, 8] offset 0 pitch 9\n",
                      "shared @t ends at byte 288, past shared_bytes 256");
    expect_body_error("  state layouts thread\n", "    eval @x[0] + %s\n    eval %bx:x2\n",
                      "var has 2 lanes before vectorize");
}

Test(verify, lanes)
{
    const char *vector = "  state layouts thread vector\n";
    expect_body_ok(vector, "    store @y[ramp(%bx * 4, 1, 4); if broadcast(%bx < %N, 4); align 16] = "
                           "@x[ramp(%bx * 4, 1, 4)] * broadcast(%s, 4)\n");
    expect_body_error(vector, "    store @y[ramp(0, 1, 4)] = %s\n", "index has 4 lanes, the access 1");
    expect_body_error(vector, "    store @y[ramp(0, 1, 4); if %bx < 4] = broadcast(%s, 4)\n",
                      "predicate has 1 lanes, the access 4");
    expect_body_error(vector, "    eval broadcast(%s, 4) * broadcast(%s, 2)\n",
                      "lanes of '*': 4 and 2, result 4");
    expect_body_error(vector, "    eval @x[ramp(0, 1, 4); align 12]\n", "align_bytes 12 is not a power of two");
    expect_body_error(vector, "    let %v = @x[ramp(0, 1, 4)]\n    eval %v + 1.0\n",
                      "%v holds 4 lanes but is used with 1");
    expect_body_ok(vector, "    let %v = @x[ramp(0, 1, 4)]\n    eval %v:x4 + broadcast(1.0, 4)\n");
    expect_body_error(vector, "    eval broadcast(broadcast(1, 2), 4)\n", "broadcast of a 2-lane value");
}

/* Invariants the text cannot express: checked on hand-built kernels. */
Test(verify, hand_built)
{
    Arena *arena = arena_new();
    Module *m = ir_new_module(arena, "sm_90a");
    Kernel *k = ir_new_kernel(m, "hand");
    k->threads = 32;
    Var *t = ir_new_var(k, "t", DT_I32, VAR_LET);
    Stmt *let1 = ir_new_stmt(k, STMT_LET, (Loc){"<hand>", 1, 1});
    let1->u.let.var = t;
    let1->u.let.value = ir_int(k, DT_I32, 1);
    Stmt *let2 = ir_new_stmt(k, STMT_LET, (Loc){"<hand>", 2, 1});
    let2->u.let.var = t;
    let2->u.let.value = ir_int(k, DT_I32, 2);
    Stmt *items[2] = {let1, let2};
    k->body = ir_seq(k, items, 2);
    Captured c;
    capture_init(&c);
    cr_expect(!ir_verify(k, &c.diag, "hand"));
    cr_expect(strstr(capture_text(&c),
                     "<hand>:2:1: error: IR verifier (after hand): %t is bound twice (kernel hand)"),
              "%s", capture_text(&c));
    capture_done(&c);

    /* a load whose index is missing, a var of another kernel, no body */
    Kernel *k2 = ir_new_kernel(m, "hand2");
    k2->threads = 32;
    Buffer *b = ir_new_buffer(k2, "l", DT_F32, SCOPE_LOCAL, 2);
    b->shape[0] = ir_int(k2, DT_I32, 2);
    b->shape[1] = ir_int(k2, DT_I32, 2);
    Stmt *alloc = ir_new_stmt(k2, STMT_ALLOC, (Loc){0});
    alloc->u.alloc.buffer = b;
    Expr *indices[2] = {ir_int(k2, DT_I32, 0), NULL};
    Stmt *eval = ir_new_stmt(k2, STMT_EVAL, (Loc){0});
    eval->u.eval.value = ir_load(k2, b, indices, NULL);
    Stmt *eval2 = ir_new_stmt(k2, STMT_EVAL, (Loc){0});
    eval2->u.eval.value = ir_var(k2, t); /* t belongs to k */
    Stmt *items2[3] = {alloc, eval, eval2};
    k2->body = ir_seq(k2, items2, 3);
    capture_init(&c);
    cr_expect(!ir_verify(k2, &c.diag, "hand"));
    cr_expect(strstr(capture_text(&c), "access to @l: index 1 is missing (rank 2)"), "%s",
              capture_text(&c));
    cr_expect(strstr(capture_text(&c), "variable %t does not belong to this kernel"), "%s",
              capture_text(&c));
    capture_done(&c);

    k2->body = NULL;
    k2->threads = 2048;
    capture_init(&c);
    cr_expect(!ir_verify(k2, &c.diag, "hand"));
    cr_expect(strstr(capture_text(&c), "kernel has no body"), "%s", capture_text(&c));
    cr_expect(strstr(capture_text(&c), "2048 threads per block"), "%s", capture_text(&c));
    capture_done(&c);
    arena_free(arena);
}

Test(verify, kernel_level)
{
    expect_verify_error("kernel k {\n  threads 32\n  symbol %N: i64\n  body {}\n}\n",
                        "symbol %N has dtype i64, not i32");
    expect_verify_error("kernel k {\n  threads 32\n  symbol %N\n  param %s: f32\n"
                        "  param @x: global f32 [%s] strides [1]\n  body {}\n}\n",
                        "tensor dimension has dtype f32, not i32");
    expect_verify_error("kernel k {\n  threads 32\n  symbol %N\n  constraint \"N\" %N + 1\n  body {}\n}\n",
                        "constraint has dtype i32, not bool");
    expect_verify_error("kernel k {\n  threads 32\n  grid 1.0, 1, 1\n  body {}\n}\n",
                        "grid dimension has dtype f32, not an integer");
    expect_verify_error("kernel k {\n  threads 32\n  param @s: shared f32 [4]\n  body {}\n}\n",
                        "parameter @s is not global");
}
