/*
 * test_ir.c -- the IR core: arena, property tables, constructors, the
 * rewriting helpers (copy, substitute, structural equality) and the
 * verifier.
 *
 * Constructor tests build IR through the API and check the types and lane
 * counts it infers; rewriting tests check that copies get fresh bound
 * variables and still verify.  Verifier tests build a small kernel (as
 * text, or by hand where the text cannot express the breakage) that
 * breaks one invariant and check the message.  The textual IR (printer
 * and parser) is tested in test_ir_text.c.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"
#include "ir_test_support.h"

/* ---- helpers ------------------------------------------------------------------ */

static char *print_expr_text(const Expr *e)
{
    char *text = NULL;
    size_t size = 0;
    FILE *out = open_memstream(&text, &size);
    ir_print_expr(out, e);
    fclose(out);
    return text;
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
