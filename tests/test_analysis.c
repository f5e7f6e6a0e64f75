/*
 * test_analysis.c -- unit tests for analysis.c: the congruences and
 * intervals of Facts, the constant evaluator, the shared-memory address
 * formula and the bank-conflict model that plan_shared simulates with.
 *
 * Expressions come from a small kernel written in IR text: each `let`
 * in its body names one expression under test, so a test reads as
 * "the facts about %name are ...".
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "ir.h"

static const char *KERNEL_TEXT =
    "arch sm_90a\n"
    "\n"
    "kernel facts {\n"
    "  threads 128\n"
    "  symbol %H, %T, %sx, %NB\n"
    "  param @x: global f32 [%T, %H] strides [%sx, 1] readonly\n"
    "  constraint \"H % 64 == 0\" %H % 64 == 0\n"
    "  constraint \"sx % 8 == 0\" %sx % 8 == 0\n"
    "  constraint \"NB == ceildiv(H, 128)\" %NB == (%H + 127) / 128\n"
    "  grid (%H + 1023) / 1024, (%T + 3) / 4, 1\n"
    "  block %bx = x, %by = y\n"
    "  body {\n"
    "    for %s in unroll(0, 4) {\n"
    "      let %c = %s * 128 + thread_idx()\n"
    "      let %h0 = %bx * 1024 + %c % 128 * 8\n"
    "      let %row = %by * 4 + %c / 128\n"
    "      let %off = %row * %sx + %h0\n"
    "      let %q = %h0 / 128\n"
    "      let %r = %h0 % 64\n"
    "      let %nbytes = %NB * 4\n"
    "      let %sh = thread_idx() << 3\n"
    "      let %mask = thread_idx() & 15\n"
    "      let %wide = %c * 2147483647\n"
    "      let %neg = 0 - thread_idx() - 1\n"
    "    }\n"
    "  }\n"
    "}\n";

static Arena *arena;
static Kernel *kernel;
static Facts *facts;

static void setup(void)
{
    arena = arena_new();
    Diag diag;
    diag_init(&diag, stderr);
    diag_add_source(&diag, "<test>", KERNEL_TEXT);
    Module *m = ir_parse(arena, &diag, "<test>", KERNEL_TEXT);
    cr_assert_not_null(m, "the test kernel must parse");
    kernel = m->kernels[0];
    facts = facts_new(kernel);
}

static void teardown(void)
{
    arena_free(arena);
}

/* The value of `let %name = ...` in the test kernel. */
static const Expr *find_let(const Stmt *s, const char *name)
{
    if (!s) return NULL;
    switch (s->kind) {
    case STMT_SEQ:
        for (int i = 0; i < s->u.seq.count; i++) {
            const Expr *e = find_let(s->u.seq.items[i], name);
            if (e) return e;
        }
        return NULL;
    case STMT_LET:
        return strcmp(s->u.let.var->name, name) == 0 ? s->u.let.value : NULL;
    case STMT_FOR: return find_let(s->u.loop.body, name);
    default: return NULL;
    }
}

static const Expr *let(const char *name)
{
    const Expr *e = find_let(kernel->body, name);
    cr_assert_not_null(e, "no let %s", name);
    return e;
}

static void expect_modular(const char *name, int64_t coeff, int64_t base)
{
    Modular m = facts_modular(facts, let(name));
    cr_expect_eq(m.coeff, coeff, "%s: coeff %lld, want %lld", name, (long long)m.coeff,
                 (long long)coeff);
    cr_expect_eq(m.base, base, "%s: base %lld, want %lld", name, (long long)m.base,
                 (long long)base);
}

static void expect_bounds(const char *name, int64_t lo, int64_t hi)
{
    int64_t l, h;
    cr_assert(facts_bounds(facts, let(name), &l, &h), "%s: bounds unknown", name);
    cr_expect_eq(l, lo, "%s: lo %lld, want %lld", name, (long long)l, (long long)lo);
    cr_expect_eq(h, hi, "%s: hi %lld, want %lld", name, (long long)h, (long long)hi);
}

TestSuite(analysis, .init = setup, .fini = teardown);

Test(analysis, modular_from_constraints_and_arithmetic)
{
    expect_modular("c", 1, 0);
    expect_modular("h0", 8, 0);      /* bx*1024 + (c%128)*8 */
    expect_modular("off", 8, 0);     /* row*sx with sx = 8k, plus h0 */
    expect_modular("q", 1, 0);       /* h0 / 128: 8 does not divide by 128 */
    expect_modular("r", 8, 0);       /* h0 % 64 keeps the congruence mod 8 */
    expect_modular("sh", 8, 0);      /* x << 3 */
    expect_modular("neg", 1, 0);
}

Test(analysis, bounds_of_thread_and_loop_values)
{
    expect_bounds("c", 0, 511);                     /* s in [0,4), tid in [0,128) */
    expect_bounds("r", 0, 63);                      /* h0 % 64 (the step of 8 is not used) */
    expect_bounds("mask", 0, 15);
    expect_bounds("sh", 0, 127 * 8);
    expect_bounds("neg", -128, -1);
    int64_t lo, hi;
    cr_expect(facts_bounds(facts, let("nbytes"), &lo, &hi));
    cr_expect_eq(lo, 0);
    /* the product leaves i32: no claim beyond the dtype's range */
    cr_assert(facts_bounds(facts, let("wide"), &lo, &hi));
    cr_expect_eq(lo, INT32_MIN);
    cr_expect_eq(hi, INT32_MAX);
}

Test(analysis, symbols_and_substitutions)
{
    /* NB == (H + 127) / 128 with H = 64k: NB is in [0, INT32_MAX/128] */
    int64_t lo, hi;
    Expr *nb = NULL;
    for (int i = 0; i < kernel->nsymbols; i++)
        if (strcmp(kernel->symbols[i]->name, "NB") == 0) nb = ir_var(kernel, kernel->symbols[i]);
    cr_assert_not_null(nb);
    cr_assert(facts_bounds(facts, nb, &lo, &hi));
    cr_expect_eq(lo, 0);
    cr_expect_leq(hi, ((int64_t)INT32_MAX + 127) / 128);
}

Test(analysis, eval_int)
{
    const Expr *e = let("c");
    const Var *vars[1];
    int64_t values[1] = { 3 }, out;
    /* %s is the loop var; thread_idx is unknown to ir_eval_int */
    const Stmt *loop = kernel->body->kind == STMT_SEQ ? kernel->body->u.seq.items[0] : kernel->body;
    cr_assert_eq(loop->kind, STMT_FOR);
    vars[0] = loop->u.loop.var;
    cr_expect_not(ir_eval_int(e, vars, values, 1, &out));
    cr_assert(ir_eval_int_thread(e, vars, values, 1, 5, &out));
    cr_expect_eq(out, 3 * 128 + 5);
    cr_assert(ir_eval_int_thread(let("neg"), NULL, NULL, 0, 7, &out));
    cr_expect_eq(out, -8);
    cr_assert(ir_eval_int_thread(let("mask"), NULL, NULL, 0, 37, &out));
    cr_expect_eq(out, 5);
    /* floor semantics: -7 / 2 == -4, -7 % 2 == 1 */
    Expr *seven = ir_int(kernel, DT_I32, -7), *two = ir_int(kernel, DT_I32, 2);
    cr_assert(ir_eval_int(ir_binary(kernel, BIN_DIV, seven, two), NULL, NULL, 0, &out));
    cr_expect_eq(out, -4);
    cr_assert(ir_eval_int(ir_binary(kernel, BIN_MOD, seven, two), NULL, NULL, 0, &out));
    cr_expect_eq(out, 1);
    /* i32 wraps */
    Expr *big = ir_int(kernel, DT_I32, INT32_MAX);
    cr_assert(ir_eval_int(ir_binary(kernel, BIN_ADD, big, ir_int(kernel, DT_I32, 1)), NULL, NULL,
                          0, &out));
    cr_expect_eq(out, INT32_MIN);
    cr_expect_eq(ir_int_wrap(DT_U8, 300), 44);
    cr_expect_eq(ir_int_wrap(DT_I8, 200), -56);
}

/* ---- the shared-memory model ------------------------------------------ */

static int wavefronts_of(int64_t (*address)(int thread), int bytes)
{
    int64_t a[IR_WARP_SIZE];
    for (int t = 0; t < IR_WARP_SIZE; t++) a[t] = address(t);
    return ir_shared_wavefronts(a, NULL, bytes);
}

static int64_t consecutive_words(int t) { return t * 4; }
static int64_t same_word(int t) { (void)t; return 64; }
static int64_t column_of_f32_32x32(int t) { return t * 128; }
static int64_t two_way(int t) { return t * 8; }
static int64_t vector16_rows(int t) { return t * 16; }
static int64_t vector16_column(int t) { return t * 256; }
static int64_t bytes_same_word(int t) { return t / 4 * 4 + t % 4; }

Test(bank_model, scalar_accesses)
{
    cr_expect_eq(wavefronts_of(consecutive_words, 4), 1);
    cr_expect_eq(wavefronts_of(same_word, 4), 1, "broadcast");
    cr_expect_eq(wavefronts_of(column_of_f32_32x32, 4), 32);
    cr_expect_eq(wavefronts_of(two_way, 4), 2);
    cr_expect_eq(wavefronts_of(bytes_same_word, 1), 1, "bytes of one word");
}

Test(bank_model, vector_accesses)
{
    /* 16 bytes per thread: four quarter-warp phases, each conflict-free */
    cr_expect_eq(wavefronts_of(vector16_rows, 16), 4);
    /* every thread at the start of a 256-byte row: 8-way per phase */
    cr_expect_eq(wavefronts_of(vector16_column, 16), 32);
    /* 8 bytes per thread, consecutive: two half-warp phases */
    cr_expect_eq(wavefronts_of(two_way, 8), 2);
}

Test(bank_model, inactive_threads)
{
    int64_t a[IR_WARP_SIZE];
    bool active[IR_WARP_SIZE];
    for (int t = 0; t < IR_WARP_SIZE; t++) {
        a[t] = t * 128;
        active[t] = t == 0;
    }
    cr_expect_eq(ir_shared_wavefronts(a, active, 4), 1);
    for (int t = 0; t < IR_WARP_SIZE; t++) active[t] = false;
    cr_expect_eq(ir_shared_wavefronts(a, active, 4), 0);
}

Test(bank_model, swizzle_formula)
{
    /* bits 4..6 XOR bits (7+s)..(9+s) */
    cr_expect_eq(ir_shared_swizzle(0x100, 1), 0x110);
    cr_expect_eq(ir_shared_swizzle(0x100, -1), 0x100);
    cr_expect_eq(ir_shared_swizzle(3 * 2048 + 4, 4), 3 * 2048 + 0x30 + 4);
    /* the transpose's patch reads (bf16 128x128, rows of 256 bytes): 8-way
     * conflicts plain, conflict-free with swizzle 4 */
    Buffer b;
    memset(&b, 0, sizeof b);
    b.dtype = DT_BF16;
    b.rank = 2;
    b.pitch = 128;
    b.shared_offset = 0;
    int64_t a[IR_WARP_SIZE];
    for (int shift = -1; shift <= 4; shift += 5) {
        b.swizzle_shift = shift;
        for (int t = 0; t < IR_WARP_SIZE; t++)
            a[t] = ir_shared_address(&b, (t % 16) * 8, (t / 16) * 8);
        int w = ir_shared_wavefronts(a, NULL, 16);
        if (shift < 0) cr_expect_eq(w, 32, "plain: %d", w);
        else cr_expect_eq(w, 4, "swizzle 4: %d", w);
    }
}

/* ---- plan_shared on the transpose --------------------------------------- */

#ifdef TK_SOURCE_DIR
/* The input half of a plan_shared golden, planned: the note must show the
 * plain layout's conflicts and a conflict-free swizzle chosen. */
Test(plan_shared, transpose_note)
{
    const char *path = TK_SOURCE_DIR "/tests/passes/plan_shared/transpose_bf16.ir";
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s", path);
    static char text[1 << 16];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    char *marker = strstr(text, "// ----- expected");
    if (marker) *marker = 0;
    Arena *a = arena_new();
    Diag diag;
    diag_init(&diag, stderr);
    Module *m = ir_parse(a, &diag, "transpose_bf16.ir", text);
    cr_assert_not_null(m);
    Kernel *k = m->kernels[0];
    cr_assert(pass_plan_shared(k, &diag));
    cr_expect_eq(k->shared_bytes, 128 * 128 * 2);
    const Stmt *alloc = k->body->u.seq.items[0];
    cr_assert_eq(alloc->kind, STMT_ALLOC);
    const Buffer *tile = alloc->u.alloc.buffer;
    cr_expect_eq(tile->swizzle_shift, 4);
    cr_expect_eq(tile->pitch, 128);
    cr_assert_not_null(tile->plan_note);
    /* 8 copy stores of 16 bytes: 4 wavefronts each; 8 patch reads: 32
     * plain, 4 swizzled */
    cr_expect(strstr(tile->plan_note, "plain=288") != NULL, "%s", tile->plan_note);
    cr_expect(strstr(tile->plan_note, "swizzle4=64") != NULL, "%s", tile->plan_note);
    arena_free(a);
}
#endif
