/*
 * test_lang_hopper.c -- the front end's Hopper statements (docs/hopper.md
 * section 1): the example kernel of that section, taken from the document
 * itself, and an fp8 variant lower to the IR the Hopper passes expect
 * (STMT_GEMM, LOOP_PIPELINED with stages / role / pipe_id, copy and
 * kernel hints, compute_threads); each rule has its diagnostic; and
 * pass_check_types applies the same gemm and stage rules to IR that did
 * not come from the front end.  The goldens in tests/lang/{parse,errors,
 * ir}/hopper*.tk (run by test_lang.c) hold the full texts.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "frontend.h"
#include "ir_test_support.h"

#define SOURCE_DIR TK_SOURCE_DIR

/* the whole file: read_file of ir_test_support.h */
static char *slurp(const char *path) { return read_file(path); }

/* The first ``` block after `heading` in docs/hopper.md (malloc'd). */
static char *doc_example(const char *heading) {
    char *doc = slurp(SOURCE_DIR "/docs/hopper.md");
    char *section = strstr(doc, heading);
    cr_assert(section, "docs/hopper.md has no '%s'", heading);
    char *open = strstr(section, "```\n");
    cr_assert(open);
    open += 4;
    char *close = strstr(open, "```");
    cr_assert(close);
    char *text = strndup(open, (size_t)(close - open));
    free(doc);
    return text;
}

/* Compiles text; the diagnostics land in *messages (malloc'd). */
static Module *compile(Arena *arena, const char *text, char **messages) {
    size_t size = 0;
    FILE *out = open_memstream(messages, &size);
    Diag diag;
    diag_init(&diag, out);
    Module *m = frontend_compile_source(arena, &diag, "hopper.tk", text, NULL,
                                        "sm_90a");
    fclose(out);
    cr_assert((m == NULL) == (diag.errors > 0));
    return m;
}

static Module *compile_ok(Arena *arena, const char *text) {
    char *messages = NULL;
    Module *m = compile(arena, text, &messages);
    cr_assert_not_null(m, "does not compile:\n%s", messages);
    free(messages);
    return m;
}

static void expect_error(const char *text, const char *message) {
    Arena *arena = arena_new();
    char *messages = NULL;
    Module *m = compile(arena, text, &messages);
    cr_expect_null(m, "compiled, expected \"%s\"", message);
    cr_expect(strstr(messages, message), "expected \"%s\" in:\n%s", message,
              messages);
    cr_expect(strstr(messages, "hopper.tk:"), "no location in:\n%s",
              messages);
    free(messages);
    arena_free(arena);
}

/* Every statement of s (pre-order) of `kind`, up to max. */
static int find_stmts(Stmt *s, StmtKind kind, Stmt **found, int count,
                      int max) {
    if (!s) return count;
    if (s->kind == kind && count < max) found[count++] = s;
    switch (s->kind) {
    case STMT_SEQ:
        for (int i = 0; i < s->u.seq.count; i++)
            count = find_stmts(s->u.seq.items[i], kind, found, count, max);
        break;
    case STMT_FOR: count = find_stmts(s->u.loop.body, kind, found, count, max); break;
    case STMT_PARALLEL:
        count = find_stmts(s->u.parallel.body, kind, found, count, max);
        break;
    case STMT_IF:
        count = find_stmts(s->u.if_.then_body, kind, found, count, max);
        count = find_stmts(s->u.if_.else_body, kind, found, count, max);
        break;
    default: break;
    }
    return count;
}

static char *print_kernel(const Kernel *k) {
    char *text = NULL;
    size_t size = 0;
    FILE *out = open_memstream(&text, &size);
    ir_print_kernel(out, k);
    fclose(out);
    return text;
}

static bool check_types(Kernel *k, char **messages) {
    size_t size = 0;
    FILE *out = open_memstream(messages, &size);
    Diag diag;
    diag_init(&diag, out);
    bool ok = pass_check_types(k, &diag);
    fclose(out);
    return ok;
}

/* ---- lowering ------------------------------------------------------------- */

Test(lang_hopper, section_1_example_lowers) {
    char *text = doc_example("## 1. Language");
    Arena *arena = arena_new();
    Module *m = compile_ok(arena, text);
    cr_assert_eq(m->nkernels, 1);
    Kernel *k = m->kernels[0];
    cr_expect_str_eq(k->name, "gemm_bf16__default");
    /* instance <128, 256, 64, 4, 2, 2>: both hints on */
    cr_expect_eq(k->threads, 256);
    cr_expect_eq(k->compute_threads, 256);
    cr_expect_eq(k->hint_tma, HINT_ON);
    cr_expect_eq(k->hint_warp_specialize, HINT_ON);

    Stmt *loops[4], *copies[4], *gemms[2];
    cr_assert_eq(find_stmts(k->body, STMT_FOR, loops, 0, 4), 1);
    cr_expect_eq(loops[0]->u.loop.kind, LOOP_PIPELINED);
    cr_expect_eq(loops[0]->u.loop.stages, 4);
    cr_expect_eq(loops[0]->u.loop.role, PIPE_BOTH);
    cr_expect_eq(loops[0]->u.loop.pipe_id, 0);
    cr_expect_eq(loops[0]->u.loop.step, 1);
    cr_assert_eq(find_stmts(k->body, STMT_COPY, copies, 0, 4), 3);
    for (int i = 0; i < 3; i++) {
        cr_expect_eq(copies[i]->u.copy.tma, HINT_AUTO);
        cr_expect_eq(copies[i]->u.copy.tensor_map, -1);
    }
    cr_assert_eq(find_stmts(k->body, STMT_GEMM, gemms, 0, 2), 1);
    Stmt *g = gemms[0];
    cr_expect_str_eq(g->u.gemm.a.buffer->name, "sa");
    cr_expect_str_eq(g->u.gemm.b.buffer->name, "sb");
    cr_expect_str_eq(g->u.gemm.c->name, "acc");
    cr_expect(!g->u.gemm.transpose_a);
    cr_expect(g->u.gemm.transpose_b);
    cr_expect(!g->u.gemm.clear);
    /* a whole buffer is its full region */
    cr_expect_eq(g->u.gemm.a.extent[0], 128);
    cr_expect_eq(g->u.gemm.a.extent[1], 64);
    cr_expect_eq(g->u.gemm.b.extent[0], 256);
    cr_expect_eq(g->u.gemm.b.start[1]->kind, EXPR_INT);

    Diag diag;
    diag_init(&diag, stderr);
    cr_expect(ir_verify(k, &diag, "frontend"));
    char *messages = NULL;
    cr_expect(check_types(k, &messages), "%s", messages);
    free(messages);
    char *printed = print_kernel(k);
    cr_expect(strstr(printed, "gemm @sa"), "%s", printed);
    cr_expect(strstr(printed, "pipelined("), "%s", printed);
    cr_expect(strstr(printed, "stages 4"), "%s", printed);
    free(printed);
    arena_free(arena);
    free(text);
}

static const char *const fp8_kernel =
    "kernel gemm_fp8<B: dtype, S: int, TMA: int>(\n"
    "    a: tensor<e4m3>[M, K], b: tensor<B>[N, K], d: tensor<bf16>[M, N])\n"
    "  where K % 16 == 0\n"
    "  instances { e4m3: <e4m3, 3, 0>, e5m2: <e5m2, 1, 1> }\n"
    "{\n"
    "  launch (bn, bm) in grid(ceildiv(N, 128), ceildiv(M, 128)) threads(256)\n"
    "      with(tma = TMA, warp_specialize = off) {\n"
    "    shared sa: e4m3[S, 128, 128];\n"
    "    shared sb: B[128, 128];\n"
    "    frag acc: f32[128, 128];\n"
    "    frag part: f32[128, 128];\n"
    "    fill(acc, 0.0);\n"
    "    for k in pipelined(0, ceildiv(K, 128), stages = S) {\n"
    "      copy(a[bm * 128 : +128, k * 128 : +128], sa[k % S], tma = on);\n"
    "      copy(b[bn * 128 : +128, k * 128 : +128], sb, tma = 2 - TMA);\n"
    "      gemm(sa[k % S], sb, part, transpose_b = true, clear = true);\n"
    "      parallel (i: 128, j: 128) { acc[i, j] += part[i, j]; }\n"
    "    }\n"
    "    for k in pipelined(0, 1, stages = 2) { }\n"
    "    copy(acc, d[bm * 128 : +128, bn * 128 : +128]);\n"
    "  }\n"
    "}\n";

Test(lang_hopper, fp8_variant_lowers) {
    Arena *arena = arena_new();
    Module *m = compile_ok(arena, fp8_kernel);
    cr_assert_eq(m->nkernels, 2);
    for (int i = 0; i < 2; i++) {
        Kernel *k = m->kernels[i];
        bool e5m2 = i == 1;
        cr_expect_eq(k->hint_tma, e5m2 ? HINT_OFF : HINT_AUTO);
        cr_expect_eq(k->hint_warp_specialize, HINT_OFF);
        cr_expect_eq(k->compute_threads, 256);
        Stmt *loops[4], *copies[4], *gemms[2];
        cr_assert_eq(find_stmts(k->body, STMT_FOR, loops, 0, 4), 2);
        cr_expect_eq(loops[0]->u.loop.stages, e5m2 ? 1 : 3);
        /* pipe ids are unique within the kernel */
        cr_expect_eq(loops[0]->u.loop.pipe_id, 0);
        cr_expect_eq(loops[1]->u.loop.pipe_id, 1);
        cr_expect_eq(loops[1]->u.loop.kind, LOOP_PIPELINED);
        cr_assert_eq(find_stmts(k->body, STMT_COPY, copies, 0, 4), 3);
        cr_expect_eq(copies[0]->u.copy.tma, HINT_ON);
        cr_expect_eq(copies[1]->u.copy.tma, e5m2 ? HINT_OFF : HINT_ON);
        /* sa[k % S]: one stage of the ring, the other dims whole */
        cr_expect_eq(copies[0]->u.copy.dst.extent[0], 0);
        cr_expect_eq(copies[0]->u.copy.dst.extent[1], 128);
        cr_assert_eq(find_stmts(k->body, STMT_GEMM, gemms, 0, 2), 1);
        Stmt *g = gemms[0];
        cr_expect_eq(g->u.gemm.a.buffer->dtype, DT_E4M3);
        cr_expect_eq(g->u.gemm.b.buffer->dtype, e5m2 ? DT_E5M2 : DT_E4M3);
        cr_expect_eq(g->u.gemm.a.extent[0], 0);
        cr_expect_eq(g->u.gemm.a.start[0]->kind, EXPR_BINARY);
        cr_expect_eq(g->u.gemm.a.extent[2], 128);
        cr_expect(g->u.gemm.clear);
        Diag diag;
        diag_init(&diag, stderr);
        cr_expect(ir_verify(k, &diag, "frontend"), "%s", k->name);
        char *messages = NULL;
        cr_expect(check_types(k, &messages), "%s", messages);
        free(messages);
    }
    arena_free(arena);
}

/* ---- diagnostics ---------------------------------------------------------- */

/* A kernel around `body`, with shared sa/sb bf16 [64, 64], s8 e4m3
 * [64, 64], sw bf16 [64, 32], fragments acc f32 and fa bf16 [64, 64]. */
static char *kernel_with(const char *hints, const char *body) {
    size_t size = 4096;
    char *text = malloc(size);
    int n = snprintf(text, size,
                     "kernel k<S: int, H: int>(a: tensor<bf16>[M, 64])\n"
                     "  instances { one: <0, 3> } {\n"
                     "  launch (bm) in grid(M) threads(128) %s {\n"
                     "    shared sa: bf16[64, 64];\n"
                     "    shared sb: bf16[64, 64];\n"
                     "    shared s8: e4m3[64, 64];\n"
                     "    shared sw: bf16[64, 32];\n"
                     "    frag acc: f32[64, 64];\n"
                     "    frag fa: bf16[64, 64];\n"
                     "    %s\n"
                     "  }\n"
                     "}\n", hints, body);
    cr_assert(n > 0 && (size_t)n < size);
    return text;
}

static void expect_body_error(const char *hints, const char *body,
                              const char *message) {
    char *text = kernel_with(hints, body);
    expect_error(text, message);
    free(text);
}

Test(lang_hopper, diagnostics) {
    /* the kernel itself is fine */
    char *good = kernel_with("with(tma = auto)",
                             "gemm(sa, sb, acc, transpose_b = true);");
    Arena *arena = arena_new();
    compile_ok(arena, good);
    arena_free(arena);
    free(good);
    /* scopes */
    expect_body_error("", "gemm(a[0 : +64, 0 : +64], sb, acc);",
                      "gemm operand A must be a shared buffer or a fragment; "
                      "'a' is a tensor");
    expect_body_error("", "gemm(sa, fa, acc);",
                      "gemm operand B must be a shared buffer; 'fa' is a "
                      "fragment");
    expect_body_error("", "gemm(sa, sb, sa);",
                      "gemm operand C must be a fragment; 'sa' is a shared "
                      "buffer");
    expect_body_error("", "gemm(sa, sb, fa);",
                      "gemm accumulator C 'fa' is bf16; it must be f32");
    /* dtypes */
    expect_body_error("", "gemm(sa, s8, acc, transpose_b = true);",
                      "gemm of bf16 'sa' by e4m3 's8': the operands must be "
                      "bf16 x bf16, f16 x f16 or fp8 x fp8");
    expect_body_error("", "gemm(s8, s8, acc);",
                      "an fp8 gemm needs transpose_a = false and "
                      "transpose_b = true");
    /* shapes */
    expect_body_error("", "gemm(sa, sw, acc);",
                      "gemm shapes disagree: A 'sa' [64, 64] and B 'sw' "
                      "[64, 32] give [M, N] = [64, 32] but C 'acc' is "
                      "[64, 64]");
    expect_body_error("", "gemm(sw, sb, acc);",
                      "gemm K differs: A 'sw' [64, 32] has K = 32 but B 'sb' "
                      "[64, 64] has K = 64");
    /* stages */
    expect_body_error("", "for k in pipelined(0, 4, stages = S) { }",
                      "a pipelined loop needs 1 to 1024 stages, got 0");
    expect_body_error("", "for k in pipelined(0, 4) { }",
                      "pipelined needs the depth of its pipeline");
    /* hints */
    expect_body_error("with(tma = H)", "",
                      "the tma hint must be 0 (auto), 1 (off) or 2 (on), "
                      "got 3");
    expect_body_error("with(warp_specialize = always)", "",
                      "unknown warp_specialize hint 'always'");
    expect_body_error("", "copy(a[0 : +64, 0 : +64], sa, tma = H);",
                      "the tma hint must be 0 (auto), 1 (off) or 2 (on), "
                      "got 3");
    /* block level only */
    expect_body_error("", "parallel (i: 64) { gemm(sa, sb, acc); }",
                      "gemm is a block-level tile statement and cannot be "
                      "inside parallel");
    expect_body_error("",
                      "parallel (i: 64) { for k in pipelined(0, 4, stages = 2)"
                      " { } }",
                      "a pipelined loop runs at block level and cannot be "
                      "inside parallel");
}

/* ---- check_types ---------------------------------------------------------- */

/* IR that did not come from the front end (a pass, or textual IR) gets the
 * same rules from pass_check_types: broken copies of a good kernel. */
Test(lang_hopper, check_types_applies_the_rules) {
    char *text = doc_example("## 1. Language");
    Arena *arena = arena_new();
    Module *m = compile_ok(arena, text);
    Kernel *k = m->kernels[0];
    Stmt *loops[1], *gemms[1];
    cr_assert_eq(find_stmts(k->body, STMT_FOR, loops, 0, 1), 1);
    cr_assert_eq(find_stmts(k->body, STMT_GEMM, gemms, 0, 1), 1);
    Stmt *g = gemms[0];
    char *messages = NULL;

    g->u.gemm.transpose_b = false; /* sb [256, 64] is now K = 256 */
    cr_expect(!check_types(k, &messages));
    cr_expect(strstr(messages, "gemm K differs: A 'sa' [128, 64] has K = 64 "
                               "but B 'sb' [256, 64] has K = 256"),
              "%s", messages);
    cr_expect(strstr(messages, "hopper.tk:"), "%s", messages);
    free(messages);
    g->u.gemm.transpose_b = true;

    Buffer *sb = g->u.gemm.b.buffer;
    sb->dtype = DT_F16;
    cr_expect(!check_types(k, &messages));
    cr_expect(strstr(messages, "gemm of bf16 'sa' by f16 'sb'"), "%s",
              messages);
    free(messages);
    sb->dtype = DT_BF16;

    g->u.gemm.b.extent[0] = 512; /* larger than the buffer */
    cr_expect(!check_types(k, &messages));
    cr_expect(strstr(messages, "gemm shapes disagree"), "%s", messages);
    free(messages);
    g->u.gemm.b.extent[0] = 256;

    loops[0]->u.loop.stages = 0;
    cr_expect(!check_types(k, &messages));
    cr_expect(strstr(messages, "pipelined loop with 0 stages; it needs at "
                               "least 1"), "%s", messages);
    free(messages);
    loops[0]->u.loop.stages = 4;

    cr_expect(check_types(k, &messages), "%s", messages);
    free(messages);
    arena_free(arena);
    free(text);
}

/* ---- robustness ----------------------------------------------------------- */

/* The Hopper syntax cut anywhere and with bytes flipped: errors, never a
 * crash, and a module exactly when no error was reported. */
Test(lang_hopper, truncated_and_flipped, .timeout = 300) {
    char *text = slurp(SOURCE_DIR "/tests/lang/ir/hopper.tk");
    size_t length = strlen(text);
    char *copy = malloc(length + 1);
    FILE *sink = fopen("/dev/null", "w");
    cr_assert(sink);
    unsigned seed = 2024;
    for (size_t round = 0; round < length / 3 + 300; round++) {
        memcpy(copy, text, length + 1);
        if (round < length / 3) {
            copy[round * 3] = '\0';
        } else {
            for (int flips = 0; flips < 1 + (int)(round % 3); flips++) {
                seed = seed * 1103515245u + 12345u;
                size_t at = (seed >> 8) % length;
                seed = seed * 1103515245u + 12345u;
                copy[at] = (char)(seed >> 16);
            }
        }
        Arena *arena = arena_new();
        Diag diag;
        diag_init(&diag, sink);
        Module *m = frontend_compile_source(arena, &diag, "hopper.tk", copy,
                                            NULL, "sm_90a");
        cr_assert((m == NULL) == (diag.errors > 0));
        arena_free(arena);
    }
    fclose(sink);
    free(copy);
    free(text);
}
