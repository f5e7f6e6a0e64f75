/*
 * test_lang.c -- the front end: parser goldens, diagnostic goldens, the
 * shipped library, robustness against broken input, and the IR that
 * lower_ast.c builds for small programs.
 *
 *   tests/lang/parse/NAME.tk   + NAME.out  the AST dump (ast_dump)
 *   tests/lang/errors/NAME.tk  + NAME.err  the diagnostics, with the source
 *                                          directory stripped from paths
 *   tests/lang/ir/NAME.tk      + NAME.ir   the module lower_ast.c builds
 *                                          (ir_print_module), which must
 *                                          pass ir_verify at tile level
 *
 * To refresh a golden after an intended change, write the new output to
 * the .out / .err file and review the diff.
 */
#include <criterion/criterion.h>
#include <glob.h>
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "ast.h"
#include "frontend.h"

#define SOURCE_DIR TK_SOURCE_DIR
static const char *const include_dirs[] = {SOURCE_DIR "/stdlib", NULL};

static char *slurp(const char *path, size_t *length) {
    FILE *in = fopen(path, "rb");
    if (!in) return NULL;
    fseek(in, 0, SEEK_END);
    long size = ftell(in);
    fseek(in, 0, SEEK_SET);
    char *text = malloc((size_t)size + 1);
    size_t n = fread(text, 1, (size_t)size, in);
    text[n] = '\0';
    fclose(in);
    if (length) *length = n;
    return text;
}

/* Sorted names of the files in dir ending in suffix. */
static int list_files(const char *dir, const char *suffix, char names[][256],
                      int max) {
    DIR *d = opendir(dir);
    cr_assert(d, "cannot open %s", dir);
    int count = 0;
    size_t n = strlen(suffix);
    for (struct dirent *e; (e = readdir(d)) && count < max;) {
        size_t len = strlen(e->d_name);
        if (len > n && strcmp(e->d_name + len - n, suffix) == 0)
            snprintf(names[count++], 256, "%s", e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)count, 256, (int (*)(const void *, const void *))strcmp);
    return count;
}

/* Replaces every occurrence of `from` in text (malloc'd) by "". */
static void strip(char *text, const char *from) {
    size_t n = strlen(from);
    for (char *hit; (hit = strstr(text, from));)
        memmove(hit, hit + n, strlen(hit + n) + 1);
}

static void report_diff(const char *name, const char *expected, const char *got) {
    if (strcmp(expected, got) == 0) return;
    cr_log_error("%s: output differs\n--- expected\n%s--- got\n%s", name,
                 expected, got);
    cr_assert_fail("%s does not match its golden", name);
}

/* ---- goldens ----------------------------------------------------------- */

Test(lang, parse_goldens) {
    const char *dir = SOURCE_DIR "/tests/lang/parse";
    static char names[64][256];
    int count = list_files(dir, ".tk", names, 64);
    cr_assert(count >= 2);
    for (int i = 0; i < count; i++) {
        char path[1024], golden[1024];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        snprintf(golden, sizeof golden, "%s/%.*s.out", dir,
                 (int)strlen(names[i]) - 3, names[i]);
        size_t length = 0;
        char *text = slurp(path, &length);
        char *expected = slurp(golden, NULL);
        cr_assert(text && expected, "missing %s or its .out", names[i]);
        Arena *arena = arena_new();
        Diag diag;
        diag_init(&diag, stderr);
        char *got = NULL;
        size_t size = 0;
        FILE *out = open_memstream(&got, &size);
        AstFile *file = parse_file(arena, &diag, names[i], text, length, NULL);
        ast_dump(out, file);
        fclose(out);
        cr_expect_eq(diag.errors, 0, "%s: %d syntax errors", names[i], diag.errors);
        report_diff(names[i], expected, got);
        free(got);
        free(text);
        free(expected);
        arena_free(arena);
    }
}

Test(lang, error_goldens) {
    const char *dir = SOURCE_DIR "/tests/lang/errors";
    static char names[64][256];
    int count = list_files(dir, ".tk", names, 64);
    cr_assert(count >= 15);
    for (int i = 0; i < count; i++) {
        char path[512], golden[512];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        snprintf(golden, sizeof golden, "%s/%.*s.err", dir,
                 (int)strlen(names[i]) - 3, names[i]);
        char *expected = slurp(golden, NULL);
        cr_assert(expected, "missing the .err of %s", names[i]);
        Arena *arena = arena_new();
        Diag diag;
        char *got = NULL;
        size_t size = 0;
        FILE *out = open_memstream(&got, &size);
        diag_init(&diag, out);
        Module *m = frontend_compile(arena, &diag, path, include_dirs, "sm_90a");
        fclose(out);
        cr_expect_null(m, "%s compiled without errors", names[i]);
        cr_expect_gt(diag.errors, 0, "%s: no error reported", names[i]);
        strip(got, SOURCE_DIR "/tests/lang/errors/");
        strip(got, SOURCE_DIR "/");
        report_diff(names[i], expected, got);
        free(got);
        free(expected);
        arena_free(arena);
    }
}

Test(lang, ir_goldens) {
    const char *dir = SOURCE_DIR "/tests/lang/ir";
    static char names[64][256];
    int count = list_files(dir, ".tk", names, 64);
    cr_assert(count >= 1);
    for (int i = 0; i < count; i++) {
        char path[512], golden[512];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        snprintf(golden, sizeof golden, "%s/%.*s.ir", dir,
                 (int)strlen(names[i]) - 3, names[i]);
        char *expected = slurp(golden, NULL);
        cr_assert(expected, "missing the .ir of %s", names[i]);
        Arena *arena = arena_new();
        Diag diag;
        diag_init(&diag, stderr);
        Module *m = frontend_compile(arena, &diag, path, include_dirs, "sm_90a");
        cr_assert_not_null(m, "%s does not compile", names[i]);
        for (int k = 0; k < m->nkernels; k++)
            cr_expect(ir_verify(m->kernels[k], &diag, "frontend"),
                      "%s: kernel %s fails ir_verify", names[i],
                      m->kernels[k]->name);
        char *got = NULL;
        size_t size = 0;
        FILE *out = open_memstream(&got, &size);
        ir_print_module(out, m);
        fclose(out);
        report_diff(names[i], expected, got);
        free(got);
        free(expected);
        arena_free(arena);
    }
}

/* ---- the shipped library ------------------------------------------------ */

static const char *const library[] = {
    "kernels.tk", "kernels/cast.tk", "kernels/transpose.tk", "stdlib/quant.tk",
    "kernels/gemm.tk",
};

static Module *compile_file(Arena *arena, const char *relative, Diag *diag) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", SOURCE_DIR, relative);
    diag_init(diag, stderr);
    return frontend_compile(arena, diag, path, include_dirs, "sm_90a");
}

Test(lang, library_compiles) {
    for (size_t i = 0; i < sizeof library / sizeof library[0]; i++) {
        Arena *arena = arena_new();
        Diag diag;
        Module *m = compile_file(arena, library[i], &diag);
        cr_expect_not_null(m, "%s does not compile", library[i]);
        cr_expect_eq(diag.errors, 0, "%s: %d errors", library[i], diag.errors);
        for (int k = 0; m && k < m->nkernels; k++)
            cr_expect(ir_verify(m->kernels[k], &diag, "frontend"),
                      "%s fails ir_verify", m->kernels[k]->name);
        arena_free(arena);
    }
}

static Kernel *find_kernel(Module *m, const char *name) {
    for (int i = 0; i < m->nkernels; i++)
        if (strcmp(m->kernels[i]->name, name) == 0) return m->kernels[i];
    return NULL;
}

Test(lang, library_instances) {
    Arena *arena = arena_new();
    Diag diag;
    Module *m = compile_file(arena, "kernels.tk", &diag);
    cr_assert_not_null(m);
    cr_expect_str_eq(m->arch, "sm_90a");
    /* every kernel file reachable from kernels.tk contributes all its
     * instances exactly once: the root's count is the sum of the kernel
     * files compiled on their own (kernels/transpose.tk alone gives 6) */
    int sum = 0;
    glob_t files;
    char pattern[512];
    snprintf(pattern, sizeof pattern, "%s/kernels/*.tk", SOURCE_DIR);
    cr_assert_eq(glob(pattern, 0, NULL, &files), 0);
    for (size_t i = 0; i < files.gl_pathc; i++) {
        Arena *part_arena = arena_new();
        Diag part_diag;
        diag_init(&part_diag, stderr);
        Module *part = frontend_compile(part_arena, &part_diag, files.gl_pathv[i],
                                        include_dirs, "sm_90a");
        cr_assert_not_null(part, "%s does not compile", files.gl_pathv[i]);
        if (strstr(files.gl_pathv[i], "/transpose.tk"))
            cr_expect_eq(part->nkernels, 6);
        sum += part->nkernels;
        arena_free(part_arena);
    }
    globfree(&files);
    cr_expect_eq(m->nkernels, sum, "kernels.tk has %d instances, its files %d",
                 m->nkernels, sum);

    Kernel *t = find_kernel(m, "batched_transpose__bf16");
    cr_assert_not_null(t);
    cr_expect_str_eq(t->source_name, "batched_transpose");
    cr_expect_str_eq(t->instance, "bf16");
    cr_expect_eq(t->threads, 256);
    const char *symbols[] = {"B", "X", "Y", "sb", "sx"};
    cr_assert_eq(t->nsymbols, 5);
    for (int i = 0; i < 5; i++) {
        cr_expect_str_eq(t->symbols[i]->name, symbols[i]);
        cr_expect_eq(t->symbols[i]->kind, VAR_SYMBOL);
        cr_expect_eq(t->symbols[i]->dtype, DT_I32);
    }
    cr_assert_eq(t->nparams, 2);
    Buffer *x = t->params[0].buffer, *out = t->params[1].buffer;
    cr_expect_eq(x->dtype, DT_BF16);
    cr_expect(x->read_only);
    cr_expect(!out->read_only);
    cr_expect_eq(out->param_index, 1);
    /* contiguous strides of out[B, Y, X]: Y*X, X, 1 */
    cr_expect_eq(out->strides[2]->kind, EXPR_INT);
    cr_expect_eq(out->strides[1]->kind, EXPR_VAR);
    cr_expect_str_eq(out->strides[1]->u.var->name, "X");
    cr_expect_eq(out->strides[0]->kind, EXPR_BINARY);
    cr_expect_eq(t->nconstraints, 5);
    cr_expect_str_eq(t->constraints[4].text, "sb == X * sx");
    for (int i = 0; i < 3; i++) cr_expect_not_null(t->block_vars[i]);
    cr_expect_eq(t->block_vars[2]->block_dim, 2);
    cr_expect_eq(t->grid[2]->kind, EXPR_VAR); /* grid(.., .., B) */

    Kernel *c = find_kernel(m, "per_token_cast__f32_128_round");
    cr_assert_not_null(c);
    cr_expect_eq(c->threads, 128);
    cr_expect_eq(c->grid[2]->kind, EXPR_INT); /* missing dim is 1 */
    cr_expect_eq(c->grid[2]->u.int_value, 1);
    cr_expect_null(c->block_vars[2]);
    /* "sx % VEC == 0" keeps its source text, folded with VEC = 4 */
    cr_expect_str_eq(c->constraints[1].text, "sx % VEC == 0");
    arena_free(arena);
}

/* Two modules at once: nothing global survives between compilations. */
Test(lang, two_modules_in_one_process) {
    Arena *a = arena_new(), *b = arena_new();
    Diag da, db;
    Module *ma = compile_file(a, "kernels/transpose.tk", &da);
    Module *mb = compile_file(b, "kernels/cast.tk", &db);
    Module *mc = compile_file(a, "kernels/transpose.tk", &da);
    cr_assert(ma && mb && mc);
    cr_expect_eq(ma->nkernels, mc->nkernels);
    for (int i = 0; i < ma->nkernels; i++)
        cr_expect_str_eq(ma->kernels[i]->name, mc->kernels[i]->name);
    arena_free(b);
    arena_free(a);
}

/* ---- robustness ------------------------------------------------------------ */

/* Compiles text as if it were the file at `path` (so its imports resolve)
 * and checks the contract: NULL exactly when errors were reported. */
static void compile_quietly(const char *path, const char *text, FILE *sink) {
    Arena *arena = arena_new();
    Diag diag;
    diag_init(&diag, sink);
    Module *m = frontend_compile_source(arena, &diag, path, text, include_dirs,
                                        "sm_90a");
    cr_assert((m == NULL) == (diag.errors > 0), "%s: module %p with %d errors",
              path, (void *)m, diag.errors);
    arena_free(arena);
}

Test(lang, truncated_and_flipped_library, .timeout = 600) {
    FILE *sink = fopen("/dev/null", "w");
    cr_assert(sink);
    unsigned seed = 12345;
    for (size_t i = 0; i < sizeof library / sizeof library[0]; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", SOURCE_DIR, library[i]);
        size_t length;
        char *text = slurp(path, &length);
        cr_assert(text);
        char *copy = malloc(length + 1);
        for (size_t cut = 0; cut < length; cut += 7) {
            memcpy(copy, text, cut);
            copy[cut] = '\0';
            compile_quietly(path, copy, sink);
        }
        for (int round = 0; round < 300; round++) {
            memcpy(copy, text, length + 1);
            for (int flips = 0; flips < 1 + round % 4; flips++) {
                seed = seed * 1103515245u + 12345u;
                size_t at = (seed >> 8) % length;
                seed = seed * 1103515245u + 12345u;
                copy[at] = (char)(seed >> 16);
            }
            compile_quietly(path, copy, sink);
        }
        free(copy);
        free(text);
    }
    fclose(sink);
}

static void expect_errors(const char *text) {
    Arena *arena = arena_new();
    Diag diag;
    FILE *sink = fopen("/dev/null", "w");
    diag_init(&diag, sink);
    Module *m = frontend_compile_source(arena, &diag, "deep.tk", text, NULL,
                                        "sm_90a");
    cr_expect_null(m);
    cr_expect_gt(diag.errors, 0);
    fclose(sink);
    arena_free(arena);
}

Test(lang, deep_nesting_is_an_error) {
    size_t n = 200000;
    char *text = malloc(n * 4 + 256);
    /* parentheses */
    char *p = text + sprintf(text, "const A: i32 = ");
    for (size_t i = 0; i < n; i++) *p++ = '(';
    strcpy(p, "1;");
    expect_errors(text);
    /* a long left-leaning chain: no brackets at all */
    p = text + sprintf(text, "const A: i32 = 1");
    for (size_t i = 0; i < n; i++) p += sprintf(p, "+1");
    strcpy(p, ";");
    expect_errors(text);
    /* unary operators */
    p = text + sprintf(text, "const A: i32 = ");
    for (size_t i = 0; i < n; i++) *p++ = '-';
    strcpy(p, "1;");
    expect_errors(text);
    /* nested blocks */
    p = text + sprintf(text, "kernel k(x: tensor<f32>[N]) { launch (b) in grid(N) threads(32) {");
    for (size_t i = 0; i < 5000; i++) p += sprintf(p, "{");
    strcpy(p, "}");
    expect_errors(text);
    free(text);
}

Test(lang, garbage_and_empty_input) {
    expect_errors("\xff\xfe\x00\x01");
    expect_errors("kernel");
    expect_errors("kernel k(");
    expect_errors("\"");
    expect_errors("/*");
    expect_errors("import \"x\"");
    /* an empty file is a valid, empty module */
    Arena *arena = arena_new();
    Diag diag;
    diag_init(&diag, stderr);
    Module *m = frontend_compile_source(arena, &diag, "empty.tk", "", NULL, NULL);
    cr_assert_not_null(m);
    cr_expect_eq(m->nkernels, 0);
    cr_expect_str_eq(m->arch, "sm_90a");
    arena_free(arena);
}

/* ---- lowering ------------------------------------------------------------- */

static Module *compile_text(Arena *arena, const char *text) {
    Diag diag;
    diag_init(&diag, stderr);
    Module *m = frontend_compile_source(arena, &diag, "inline.tk", text,
                                        include_dirs, "sm_100a");
    cr_assert_not_null(m, "the test program does not compile");
    return m;
}

static Stmt *body_item(Kernel *k, int i) {
    cr_assert_eq(k->body->kind, STMT_SEQ);
    cr_assert_lt(i, k->body->u.seq.count);
    return k->body->u.seq.items[i];
}

Test(lang, folding_and_literals) {
    Arena *arena = arena_new();
    Module *m = compile_text(arena,
        "const E: f32 = 0.0001;\n"
        "const NEG: i32 = -7 / 2;\n"
        "const MOD: i32 = -7 % 2;\n"
        "kernel k<N: int, F: bool>(x: tensor<f32>[M], y: tensor<u32>[M])\n"
        "  instances { a: <16, true> } {\n"
        "  let H = N / 4 + NEG;\n"
        "  launch (bx) in grid(ceildiv(M, 128)) threads(ceildiv(200, 64) * 32) {\n"
        "    local t: f32[H + 3];\n"
        "    x[bx] = F ? E * 2.0 : 1.0;\n"
        "    y[bx] = y[bx] >> 3;\n"
        "    x[bx] = f32(MOD) + x[bx];\n"
        "  }\n"
        "}\n");
    cr_expect_eq(m->arch[3], '1');
    Kernel *k = find_kernel(m, "k__a");
    cr_assert_not_null(k);
    cr_expect_eq(k->threads, 128);
    Stmt *alloc = body_item(k, 0);
    cr_assert_eq(alloc->kind, STMT_ALLOC);
    /* H = 16/4 + floor(-7/2) = 4 - 4 = 0, shape 3 */
    cr_expect_eq(alloc->u.alloc.buffer->shape[0]->u.int_value, 3);
    cr_expect_eq(alloc->u.alloc.buffer->scope, SCOPE_LOCAL);
    Stmt *store = body_item(k, 1);
    cr_assert_eq(store->kind, STMT_STORE);
    Expr *v = store->u.store.value;
    cr_assert_eq(v->kind, EXPR_FLOAT);
    cr_expect_eq(v->dtype, DT_F32);
    cr_expect_eq(v->u.float_value, (double)((float)0.0001 * 2.0f));
    Stmt *shift = body_item(k, 2);
    cr_expect_eq(shift->u.store.value->u.binary.rhs->dtype, DT_U32);
    Stmt *mod = body_item(k, 3);
    Expr *lhs = mod->u.store.value->u.binary.lhs;
    cr_assert_eq(lhs->kind, EXPR_FLOAT); /* f32(1), floor modulo */
    cr_expect_eq(lhs->u.float_value, 1.0);
    /* ceildiv(M, 128) = (M + 128 - 1) / 128 */
    cr_expect_eq(k->grid[0]->kind, EXPR_BINARY);
    cr_expect_eq(k->grid[0]->u.binary.op, BIN_DIV);
    arena_free(arena);
}

Test(lang, statements_map_onto_ir) {
    Arena *arena = arena_new();
    Module *m = compile_text(arena,
        "import \"quant\";\n"
        "kernel k(x: tensor<bf16>[M, 64], s: tensor<f32>[M], n: i32) {\n"
        "  launch (bx) in grid(M) threads(64) {\n"
        "    frag f: f32[64];\n"
        "    frag r: f32[2, 32];\n"
        "    frag q: f32[2];\n"
        "    parallel (i: 64) { f[i] = f32(x[bx, i]); }\n"
        "    reduce(max, r, q, dim=1, clear=false);\n"
        "    var acc: f32 = 0.0;\n"
        "    for j in serial(0, n, 2) { acc += x[bx, j]; }\n"
        "    if (acc > 0.0) { s[bx] = e4m3_sf(acc, true); } else { return; }\n"
        "    atomic_add(s[0], 1.0);\n"
        "    sync_warp;\n"
        "    assert(n > 0, \"n\");\n"
        "  }\n"
        "}\n");
    Kernel *k = find_kernel(m, "k__default");
    cr_assert_not_null(k);
    cr_expect_str_eq(k->instance, "default");
    cr_expect_eq(k->params[2].kind, PARAM_SCALAR);
    cr_expect_eq(k->params[2].var->kind, VAR_SCALAR);
    cr_expect(k->params[0].buffer->read_only);
    cr_expect(!k->params[1].buffer->read_only);
    StmtKind kinds[] = {STMT_ALLOC, STMT_ALLOC, STMT_ALLOC, STMT_PARALLEL,
                        STMT_REDUCE, STMT_LET, STMT_FOR, STMT_IF,
                        STMT_ATOMIC, STMT_BARRIER, STMT_ASSERT};
    cr_assert_eq(k->body->u.seq.count, 11);
    for (int i = 0; i < 11; i++)
        cr_expect_eq(body_item(k, i)->kind, kinds[i], "statement %d", i);
    Stmt *par = body_item(k, 3);
    Expr *cast = par->u.parallel.body->u.seq.items[0]->u.store.value;
    cr_expect_eq(cast->kind, EXPR_CAST);
    cr_expect_eq(cast->u.cast.value->dtype, DT_BF16);
    Stmt *reduce = body_item(k, 4);
    cr_expect_eq(reduce->u.reduce.op, REDUCE_MAX);
    cr_expect_eq(reduce->u.reduce.dim, 1);
    cr_expect(!reduce->u.reduce.clear);
    cr_expect_eq(body_item(k, 5)->u.let.var->kind, VAR_MUTABLE);
    Stmt *loop = body_item(k, 6);
    cr_expect_eq(loop->u.loop.kind, LOOP_SERIAL);
    cr_expect_eq(loop->u.loop.step, 2);
    /* acc += x[..]: bf16 widened to f32, assigned */
    Stmt *assign = loop->u.loop.body->u.seq.items[0];
    cr_expect_eq(assign->kind, STMT_ASSIGN);
    cr_expect_eq(assign->u.assign.value->u.binary.rhs->kind, EXPR_CAST);
    cr_expect_not_null(body_item(k, 7)->u.if_.else_body);
    cr_expect(body_item(k, 9)->u.barrier.warp_only);
    cr_expect_str_eq(body_item(k, 10)->u.assert_.message, "n");
    arena_free(arena);
}

Test(lang, variable_names_are_unique) {
    Arena *arena = arena_new();
    Module *m = compile_text(arena,
        "kernel k(x: tensor<f32>[N]) {\n"
        "  launch (b) in grid(N) threads(32) {\n"
        "    parallel (i: 32) { x[i] = 0.0; }\n"
        "    parallel (i: 32) { let v = x[i]; x[i] = v; }\n"
        "    parallel (i: 32) { let v = x[i]; x[i] = v; }\n"
        "  }\n"
        "}\n");
    Kernel *k = m->kernels[0];
    const char *names[3];
    for (int i = 0; i < 3; i++)
        names[i] = body_item(k, i)->u.parallel.vars[0]->name;
    cr_expect_str_neq(names[0], names[1]);
    cr_expect_str_neq(names[1], names[2]);
    cr_expect_str_neq(names[0], names[2]);
    arena_free(arena);
}
