/*
 * test_ir_hopper.c -- the IR core of the Hopper nodes (docs/hopper.md):
 * property tables and constructor defaults, deep copy and substitution of
 * gemm / mbarrier / tma / wgmma / fence and the new fields, the buffer
 * accesses tile_util reports for them, the textual IR (a module built
 * through the API with every new node must print -> parse -> print
 * identically; malformed text is a parse error with a message) and the
 * verifier (the goldens tests/ir/hopper_*.ir are accepted; each broken
 * variant is rejected with its message).
 *
 * The broken variants are the goldens with one piece of text replaced, or
 * the parsed golden with one field changed where the text cannot say it.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"
#include "ir_test_support.h"
#include "passes/tile_util.h"

#define THREAD_GOLDEN TK_SOURCE_DIR "/tests/ir/hopper_thread.ir"
#define TILE_GOLDEN TK_SOURCE_DIR "/tests/ir/hopper_tile.ir"
#define CLUSTER_GOLDEN TK_SOURCE_DIR "/tests/ir/hopper_cluster.ir"

/* ---- helpers ------------------------------------------------------------------ */

static char *stmt_text(const Kernel *k, Stmt *s)
{
    /* print through a throwaway kernel view whose body is s */
    Kernel view = *k;
    view.body = s;
    char *text = NULL;
    size_t size = 0;
    FILE *out = open_memstream(&text, &size);
    ir_print_kernel(out, &view);
    fclose(out);
    return text;
}

/* text with the first occurrence of `find` replaced (which must exist). */
static char *replace(const char *text, const char *find, const char *with)
{
    const char *at = strstr(text, find);
    cr_assert(at, "\"%s\" is not in the golden", find);
    size_t head = (size_t)(at - text);
    char *result = malloc(strlen(text) + strlen(with) + 1);
    memcpy(result, text, head);
    strcpy(result + head, with);
    strcat(result, at + strlen(find));
    return result;
}

/* Verifies every kernel of m; returns the messages (malloc'd). */
static bool verify_module(Module *m, char **messages)
{
    Captured c;
    capture_init(&c);
    bool ok = true;
    for (int i = 0; i < m->nkernels; i++)
        ok &= ir_verify(m->kernels[i], &c.diag, "test_pass");
    *messages = strdup(capture_text(&c));
    capture_done(&c);
    return ok;
}

static void expect_rejected(Module *m, const char *expected, const char *what)
{
    char *messages;
    cr_expect(!verify_module(m, &messages), "verifier accepted %s", what);
    cr_expect(strstr(messages, expected), "expected \"%s\" for %s in:\n%s", expected, what,
              messages);
    free(messages);
}

/* The golden at path with find -> with must fail verification with a
 * message containing expected. */
static void expect_text_rejected(const char *path, const char *find, const char *with,
                                 const char *expected)
{
    char *golden = read_file(path);
    char *text = replace(golden, find, with);
    Arena *arena = arena_new();
    expect_rejected(parse_ok(arena, text), expected, with);
    arena_free(arena);
    free(text);
    free(golden);
}

static void expect_parse_error(const char *path, const char *find, const char *with,
                               const char *expected)
{
    char *golden = read_file(path);
    char *text = replace(golden, find, with);
    Arena *arena = arena_new();
    Captured c;
    capture_init(&c);
    cr_expect_null(ir_parse(arena, &c.diag, "<ir>", text), "parsed with \"%s\"", with);
    cr_expect(strstr(capture_text(&c), expected), "expected \"%s\" for \"%s\" in:\n%s",
              expected, with, capture_text(&c));
    capture_done(&c);
    arena_free(arena);
    free(text);
    free(golden);
}

/* The first statement of kind `kind` (pre-order) under s. */
static Stmt *find_stmt(Stmt *s, StmtKind kind)
{
    if (!s)
        return NULL;
    if (s->kind == kind)
        return s;
    Stmt *found = NULL;
    switch (s->kind) {
    case STMT_SEQ:
        for (int i = 0; i < s->u.seq.count && !found; i++)
            found = find_stmt(s->u.seq.items[i], kind);
        return found;
    case STMT_FOR:
        return find_stmt(s->u.loop.body, kind);
    case STMT_IF:
        found = find_stmt(s->u.if_.then_body, kind);
        return found ? found : find_stmt(s->u.if_.else_body, kind);
    default:
        return NULL;
    }
}

/* ---- tables and defaults --------------------------------------------------------- */

Test(hopper_ir, property_tables_and_defaults)
{
    cr_expect_str_eq(ir_pipe_role_name(PIPE_CONSUMER), "consumer");
    cr_expect_str_eq(ir_mbarrier_op_name(MBAR_EXPECT_TX), "expect_tx");
    cr_expect(ir_mbarrier_op_has_value(MBAR_WAIT) && !ir_mbarrier_op_has_value(MBAR_ARRIVE));
    cr_expect_str_eq(ir_fence_op_name(FENCE_TMA_STORE_WAIT), "tma_store_wait");
    cr_expect(ir_fence_op_has_value(FENCE_SETMAXNREG_DEC));
    cr_expect(!ir_fence_op_has_value(FENCE_PROXY_ASYNC));
    cr_expect_str_eq(ir_hint_name(HINT_OFF), "off");
    cr_expect_str_eq(ir_async_kind_name(SHARED_ASYNC_SWIZZLE128), "swizzle128");
    cr_expect_str_eq(ir_stmt_name(STMT_WGMMA), "wgmma");
    cr_expect_str_eq(ir_loop_name(LOOP_PIPELINED), "pipelined");

    Arena *arena = arena_new();
    Module *m = ir_new_module(arena, "sm_90a");
    Kernel *k = ir_new_kernel(m, "k");
    cr_expect_eq(k->compute_threads, k->threads, "compute_threads is a real count");
    cr_expect_eq(ir_new_stmt(k, STMT_COPY, (Loc){0})->u.copy.tensor_map, -1);
    cr_expect_eq(ir_new_stmt(k, STMT_TMA, (Loc){0})->u.tma.tensor_map, -1);
    cr_expect_eq(ir_new_stmt(k, STMT_COPY, (Loc){0})->u.copy.tma, HINT_AUTO);
    /* parsing without compute_threads gives threads */
    Module *parsed = parse_ok(arena, "kernel k {\n  threads 96\n  grid 1, 1, 1\n  body {}\n}\n");
    cr_expect_eq(parsed->kernels[0]->compute_threads, 96);
    char *text = print_module_text(parsed);
    cr_expect_null(strstr(text, "compute_threads"), "printed at its default:\n%s", text);
    free(text);
    arena_free(arena);
}

/* ---- a module built through the API ------------------------------------------------- */

static Region whole_element(Kernel *k, Buffer *b, Expr *index)
{
    Region r = {.buffer = b};
    r.start[0] = index;
    for (int d = 1; d < b->rank; d++)
        r.start[d] = ir_int(k, DT_I32, 0);
    return r;
}

/* A tile of b: start 0 and the full extent on every dim but the first,
 * which is the single index `first`. */
static Region stage_tile(Kernel *k, Buffer *b, Expr *first)
{
    Region r = whole_element(k, b, first);
    for (int d = 1; d < b->rank; d++)
        r.extent[d] = b->shape[d]->u.int_value;
    return r;
}

static Stmt *append(Kernel *k, Stmt *seq, StmtKind kind)
{
    Stmt *s = ir_new_stmt(k, kind, (Loc){0});
    ir_seq_append(k, seq, s);
    return s;
}

/* Every Hopper node, with %i used in each expression slot. */
static Kernel *build_kernel(Module *m, Var **loop_var)
{
    Kernel *k = ir_new_kernel(m, "built");
    k->threads = 384;
    k->compute_threads = 256;
    k->min_blocks = 1;
    k->hint_tma = HINT_ON;
    k->hint_warp_specialize = HINT_OFF;
    Var *n = ir_new_var(k, "N", DT_I32, VAR_SYMBOL);
    k->symbols = arena_alloc(m->arena, sizeof(Var *));
    k->symbols[0] = n;
    k->nsymbols = 1;
    Buffer *a = ir_new_buffer(k, "a", DT_BF16, SCOPE_GLOBAL, 2);
    a->shape[0] = ir_var(k, n);
    a->shape[1] = ir_int(k, DT_I32, 64);
    a->strides[0] = ir_int(k, DT_I32, 64);
    a->strides[1] = ir_int(k, DT_I32, 1);
    a->param_index = 0;
    a->read_only = true;
    k->params = arena_alloc(m->arena, sizeof(Param));
    k->params[0] = (Param){"a", PARAM_TENSOR, a, NULL};
    k->nparams = 1;
    k->tensor_maps = arena_alloc(m->arena, sizeof(TensorMap));
    k->tensor_maps[0] = (TensorMap){.global = a, .rank = 2, .box = {64, 64},
                                    .swizzle_bytes = 128};
    k->ntensor_maps = 1;

    Buffer *sa = ir_new_buffer(k, "sa", DT_BF16, SCOPE_SHARED, 3);
    int64_t sa_shape[3] = {2, 64, 64};
    for (int d = 0; d < 3; d++)
        sa->shape[d] = ir_int(k, DT_I32, sa_shape[d]);
    sa->async_kind = SHARED_ASYNC_SWIZZLE128;
    sa->mbarrier_synchronized = true;
    Buffer *bar = ir_new_buffer(k, "bar", DT_U64, SCOPE_SHARED, 1);
    bar->shape[0] = ir_int(k, DT_I32, 2);
    bar->async_kind = SHARED_ASYNC_MBARRIER;
    Buffer *acc = ir_new_buffer(k, "acc", DT_F32, SCOPE_FRAGMENT, 2);
    acc->shape[0] = ir_int(k, DT_I32, 64);
    acc->shape[1] = ir_int(k, DT_I32, 64);
    acc->layout = pass_new_mma_layout(k, 64, 64, 1);
    Buffer *regs = ir_new_buffer(k, "regs", DT_F32, SCOPE_LOCAL, 1);
    regs->shape[0] = ir_int(k, DT_I32, 32);
    Buffer *allocated[] = {sa, bar, acc, regs};
    for (int i = 0; i < 4; i++)
        append(k, k->body, STMT_ALLOC)->u.alloc.buffer = allocated[i];

    Stmt *loop = append(k, k->body, STMT_FOR);
    Var *i = ir_new_var(k, "i", DT_I32, VAR_LOOP);
    *loop_var = i;
    loop->u.loop.var = i;
    loop->u.loop.begin = ir_int(k, DT_I32, 0);
    loop->u.loop.end = ir_var(k, n);
    loop->u.loop.step = 1;
    loop->u.loop.kind = LOOP_PIPELINED;
    loop->u.loop.stages = 2;
    loop->u.loop.role = PIPE_CONSUMER;
    loop->u.loop.pipe_id = 3;
    Stmt *body = loop->u.loop.body = ir_seq(k, NULL, 0);
    Expr *slot = ir_binary(k, BIN_MOD, ir_var(k, i), ir_int(k, DT_I32, 2));

    Stmt *copy = append(k, body, STMT_COPY);
    copy->u.copy.src = (Region){.buffer = a, .start = {ir_binary(k, BIN_MUL, ir_var(k, i),
                                                                 ir_int(k, DT_I32, 64)),
                                                       ir_int(k, DT_I32, 0)},
                                .extent = {64, 64}};
    copy->u.copy.dst = stage_tile(k, sa, ir_copy_expr(k, slot));
    copy->u.copy.tma = HINT_ON;
    copy->u.copy.tensor_map = 0;
    copy->u.copy.barrier = whole_element(k, bar, ir_copy_expr(k, slot));

    Stmt *mbar = append(k, body, STMT_MBARRIER);
    mbar->u.mbarrier.op = MBAR_WAIT;
    mbar->u.mbarrier.bar = whole_element(k, bar, ir_copy_expr(k, slot));
    mbar->u.mbarrier.value = ir_binary(k, BIN_MOD, ir_binary(k, BIN_DIV, ir_var(k, i),
                                                             ir_int(k, DT_I32, 2)),
                                       ir_int(k, DT_I32, 2));

    Stmt *gemm = append(k, body, STMT_GEMM);
    gemm->u.gemm.a = stage_tile(k, sa, ir_copy_expr(k, slot));
    gemm->u.gemm.b = stage_tile(k, sa, ir_copy_expr(k, slot));
    gemm->u.gemm.c = acc;
    gemm->u.gemm.transpose_b = true;

    Stmt *tma = append(k, body, STMT_TMA);
    tma->u.tma.smem = stage_tile(k, sa, ir_copy_expr(k, slot));
    tma->u.tma.tensor_map = 0;
    tma->u.tma.coords[0] = ir_binary(k, BIN_MUL, ir_var(k, i), ir_int(k, DT_I32, 64));
    tma->u.tma.coords[1] = ir_int(k, DT_I32, 0);
    tma->u.tma.bar = whole_element(k, bar, ir_copy_expr(k, slot));

    Stmt *fence = append(k, body, STMT_FENCE);
    fence->u.fence.op = FENCE_WGMMA_FENCE;

    Stmt *wgmma = append(k, body, STMT_WGMMA);
    wgmma->u.wgmma.a = whole_element(k, sa, ir_copy_expr(k, slot));
    wgmma->u.wgmma.b = whole_element(k, sa, ir_int(k, DT_I32, 1));
    wgmma->u.wgmma.a.extent[1] = wgmma->u.wgmma.b.extent[1] = 64;
    wgmma->u.wgmma.a.extent[2] = wgmma->u.wgmma.b.extent[2] = 16;
    wgmma->u.wgmma.acc = regs;
    wgmma->u.wgmma.m = 64;
    wgmma->u.wgmma.n = 64;
    wgmma->u.wgmma.k = 16;
    wgmma->u.wgmma.a_dtype = DT_BF16;
    wgmma->u.wgmma.b_dtype = DT_BF16;
    wgmma->u.wgmma.acc_dtype = DT_F32;
    wgmma->u.wgmma.transpose_b = true;
    wgmma->u.wgmma.scale_d = ir_binary(k, BIN_NE, ir_var(k, i), ir_int(k, DT_I32, 0));

    Stmt *wait = append(k, body, STMT_FENCE);
    wait->u.fence.op = FENCE_WGMMA_WAIT;
    wait->u.fence.value = 1;
    Stmt *named = append(k, body, STMT_BARRIER);
    named->u.barrier.id = 1;
    named->u.barrier.threads = 256;

    Stmt *split = append(k, k->body, STMT_IF);
    split->u.if_.cond = ir_binary(k, BIN_GE, ir_call(k, INTR_THREAD_IDX, DT_I32, NULL, 0),
                                  ir_int(k, DT_I32, 256));
    split->u.if_.warp_specialized = true;
    split->u.if_.then_body = ir_seq(k, NULL, 0);
    split->u.if_.else_body = ir_seq(k, NULL, 0);
    Stmt *dec = append(k, split->u.if_.then_body, STMT_FENCE);
    dec->u.fence.op = FENCE_SETMAXNREG_DEC;
    dec->u.fence.value = 40;
    return k;
}

Test(hopper_ir, built_module_verifies_and_round_trips)
{
    Arena *arena = arena_new();
    Module *m = ir_new_module(arena, "sm_90a");
    Var *i;
    build_kernel(m, &i);
    char *messages;
    cr_expect(verify_module(m, &messages), "built kernel rejected:\n%s", messages);
    free(messages);
    char *text = print_module_text(m);
    static const char *const pieces[] = {
        "  compute_threads 256\n  min_blocks 1\n  hint_tma on\n  hint_warp_specialize off\n",
        "  tensor_map 0 @a box [64, 64] swizzle 128\n",
        "alloc @sa: shared bf16 [2, 64, 64] swizzle128 synchronized\n",
        "alloc @bar: shared u64 [2] mbarrier\n",
        "layout mma([64, 64], threads 128, vec 2, slots 1, warpgroups 1)",
        "for %i in pipelined(0, %N) stages 2 role consumer pipe 3 {",
        "copy @a[%i * 64 : +64, 0 : +64] -> @sa[%i % 2, 0 : +64, 0 : +64] tma on map 0 "
        "barrier @bar[%i % 2]\n",
        "mbarrier wait @bar[%i % 2] = %i / 2 % 2\n",
        "gemm @sa[%i % 2, 0 : +64, 0 : +64], @sa[%i % 2, 0 : +64, 0 : +64] -> @acc "
        "transpose_b\n",
        "tma load @sa[%i % 2, 0 : +64, 0 : +64] map 0 [%i * 64, 0] barrier @bar[%i % 2]\n",
        "fence wgmma_fence\n",
        "wgmma m64n64k16 bf16 f32 @sa[%i % 2, 0 : +64, 0 : +16], @sa[1, 0 : +64, 0 : +16] "
        "-> @regs + 0 transpose_b scale_d %i != 0\n",
        "fence wgmma_wait 1\n",
        "barrier named 1 256\n",
        "if thread_idx() >= 256 warp_specialized {",
        "fence setmaxnreg_dec 40\n",
    };
    for (size_t p = 0; p < sizeof pieces / sizeof pieces[0]; p++)
        cr_expect(strstr(text, pieces[p]), "missing \"%s\" in:\n%s", pieces[p], text);
    Module *parsed = parse_ok(arena, text);
    char *again = print_module_text(parsed);
    cr_expect_str_eq(again, text, "print(parse(print(m))) differs");
    cr_expect(verify_module(parsed, &messages), "parsed kernel rejected:\n%s", messages);
    free(messages);
    free(again);
    free(text);
    arena_free(arena);
}

/* ---- copying, substitution, accesses -------------------------------------------------- */

Test(hopper_ir, copy_and_substitute_reach_every_slot)
{
    Arena *arena = arena_new();
    Module *m = ir_new_module(arena, "sm_90a");
    Var *i;
    Kernel *k = build_kernel(m, &i);
    Stmt *loop = find_stmt(k->body, STMT_FOR);
    Stmt *body = loop->u.loop.body;

    /* substitution: %i disappears from every slot of the loop body */
    Stmt *substituted = ir_substitute_stmt(k, body, i, ir_int(k, DT_I32, 5));
    char *text = stmt_text(k, substituted);
    cr_expect_null(strstr(text, "%i"), "a use of %%i survived:\n%s", text);
    cr_expect(strstr(text, "barrier @bar[5 % 2]"), "copy barrier:\n%s", text);
    cr_expect(strstr(text, "map 0 [5 * 64, 0]"), "tma coordinates:\n%s", text);
    cr_expect(strstr(text, "mbarrier wait @bar[5 % 2] = 5 / 2 % 2"), "mbarrier:\n%s", text);
    cr_expect(strstr(text, "scale_d 5 != 0"), "scale_d:\n%s", text);
    cr_expect(strstr(text, "gemm @sa[5 % 2"), "gemm region:\n%s", text);
    free(text);

    /* every Hopper statement of the body reads %i somewhere; a fence has
     * no expression */
    static const StmtKind readers[] = {STMT_COPY, STMT_MBARRIER, STMT_GEMM, STMT_TMA,
                                       STMT_WGMMA};
    for (size_t r = 0; r < sizeof readers / sizeof readers[0]; r++)
        cr_expect(ir_stmt_uses_var(find_stmt(body, readers[r]), i), "%s",
                  ir_stmt_name(readers[r]));
    cr_expect(!ir_stmt_uses_var(find_stmt(body, STMT_FENCE), i));
    cr_expect(!ir_stmt_uses_var(substituted, i));
    cr_expect(ir_stmt_uses_var(loop, i) && ir_stmt_uses_var(k->body, i));

    /* deep copy: same text, no shared expression nodes; the pipelined
     * loop keeps its fields and gets a fresh induction variable */
    Stmt *copy = ir_copy_stmt(k, loop);
    cr_expect_eq(copy->u.loop.stages, 2);
    cr_expect_eq(copy->u.loop.role, PIPE_CONSUMER);
    cr_expect_eq(copy->u.loop.pipe_id, 3);
    cr_expect_neq(copy->u.loop.var, i);
    Stmt *tma = find_stmt(body, STMT_TMA), *tma_copy = find_stmt(copy->u.loop.body, STMT_TMA);
    cr_expect_neq(tma_copy->u.tma.coords[0], tma->u.tma.coords[0]);
    cr_expect_neq(tma_copy->u.tma.bar.start[0], tma->u.tma.bar.start[0]);
    cr_expect(ir_expr_uses_var(tma_copy->u.tma.coords[0], copy->u.loop.var));
    Stmt *wgmma = find_stmt(body, STMT_WGMMA);
    Stmt *wgmma_copy = find_stmt(copy->u.loop.body, STMT_WGMMA);
    cr_expect_neq(wgmma_copy->u.wgmma.scale_d, wgmma->u.wgmma.scale_d);
    cr_expect(ir_expr_uses_var(wgmma_copy->u.wgmma.scale_d, copy->u.loop.var));
    Stmt *copy_stmt = find_stmt(copy->u.loop.body, STMT_COPY);
    cr_expect_eq(copy_stmt->u.copy.tensor_map, 0);
    cr_expect_neq(copy_stmt->u.copy.barrier.start[0],
                  find_stmt(body, STMT_COPY)->u.copy.barrier.start[0]);
    char *original = stmt_text(k, loop), *copied = stmt_text(k, copy);
    cr_expect(strstr(copied, "for %i.1 in pipelined(0, %N) stages 2 role consumer pipe 3 {"),
              "the copy binds a new variable:\n%s", copied);
    cr_expect(strstr(copied, "map 0 [%i.1 * 64, 0]"), "%s", copied);
    cr_expect_neq(strcmp(original, copied), 0);
    free(original);
    free(copied);
    arena_free(arena);
}

Test(hopper_ir, buffer_uses_of_async_statements)
{
    Arena *arena = arena_new();
    Module *m = ir_new_module(arena, "sm_90a");
    Var *i;
    Kernel *k = build_kernel(m, &i);
    Stmt *body = find_stmt(k->body, STMT_FOR)->u.loop.body;
    PassBufferUse uses[PASS_MAX_BUFFER_USES];

    int n = pass_stmt_buffer_uses(find_stmt(body, STMT_TMA), uses);
    cr_assert_eq(n, 2);
    cr_expect(strcmp(uses[0].buffer->name, "sa") == 0 && uses[0].write && !uses[0].read);
    cr_expect(strcmp(uses[1].buffer->name, "bar") == 0 && uses[1].write && uses[1].read);

    n = pass_stmt_buffer_uses(find_stmt(body, STMT_MBARRIER), uses);
    cr_assert_eq(n, 1);
    cr_expect(uses[0].read && !uses[0].write, "a wait only observes the barrier");

    n = pass_stmt_buffer_uses(find_stmt(body, STMT_WGMMA), uses);
    cr_assert_eq(n, 3);
    cr_expect(uses[0].read && !uses[0].write && uses[1].read && !uses[1].write);
    cr_expect(strcmp(uses[2].buffer->name, "regs") == 0 && uses[2].read && uses[2].write);

    n = pass_stmt_buffer_uses(find_stmt(body, STMT_GEMM), uses);
    cr_assert_eq(n, 3);
    cr_expect(uses[2].buffer->scope == SCOPE_FRAGMENT && uses[2].write && uses[2].read,
              "gemm without clear accumulates");

    n = pass_stmt_buffer_uses(find_stmt(body, STMT_COPY), uses);
    cr_assert_eq(n, 3);
    cr_expect(uses[0].read && uses[1].write && uses[2].buffer->async_kind ==
                                                    SHARED_ASYNC_MBARRIER);
    cr_expect_eq(pass_stmt_buffer_uses(find_stmt(body, STMT_FENCE), uses), 0);
    arena_free(arena);
}

/* ---- verifier ------------------------------------------------------------------------- */

Test(hopper_verify, goldens_are_accepted)
{
    const char *paths[] = {THREAD_GOLDEN, TILE_GOLDEN, CLUSTER_GOLDEN};
    for (int p = 0; p < 3; p++) {
        char *text = read_file(paths[p]);
        Arena *arena = arena_new();
        char *messages;
        cr_expect(verify_module(parse_ok(arena, text), &messages), "%s:\n%s", paths[p],
                  messages);
        free(messages);
        arena_free(arena);
        free(text);
    }
}

Test(hopper_verify, thread_level_rules)
{
    const char *g = THREAD_GOLDEN;
    expect_text_rejected(g, "mbarrier init @bar[0] = 1", "mbarrier init @sa[0, 0, 0] = 1",
                         "mbarrier @sa is not a shared u64 mbarrier buffer");
    expect_text_rejected(g, "mbarrier init @bar[0] = 1", "mbarrier init @bar[0 : +2] = 1",
                         "not a single element");
    expect_text_rejected(g, "mbarrier init @bar[0] = 1", "mbarrier init @bar[0] = 0",
                         "mbarrier init of 0");
    expect_text_rejected(g, "alloc @bar: shared u64 [2] mbarrier",
                         "alloc @bar: shared bf16 [2] mbarrier", "has dtype bf16, not u64");
    expect_text_rejected(g, "alloc @acc: local f32 [32]", "alloc @acc: local f32 [32] plain",
                         "@acc is local but has an async kind");
    expect_text_rejected(g, "tma load @sa[1, 0 : +64, 0 : +64] map 0 [0, 0] barrier @bar[0]",
                         "tma load @acc[0 : +32] map 0 [0, 0] barrier @bar[0]",
                         "tma shared side @acc is local, not shared");
    expect_text_rejected(g, "tma load @sa[1, 0 : +64, 0 : +64] map 0 [0, 0] barrier @bar[0]",
                         "tma load @sa[1, 0 : +32, 0 : +64] map 0 [0, 0] barrier @bar[0]",
                         "shared region of 2048 elements, the box 4096");
    expect_text_rejected(g, "map 0 [0, 0] barrier @bar[0]", "map 0 [0, 0]",
                         "tma load without an mbarrier");
    expect_text_rejected(g, "m64n64k16", "m128n64k16", "wgmma m128n64k16 is not a Hopper shape");
    expect_text_rejected(g, "m64n64k16", "m64n60k16", "wgmma m64n60k16 is not a Hopper shape");
    expect_text_rejected(g, "m64n64k16", "m64n264k16", "is not a Hopper shape");
    expect_text_rejected(g, "m64n64k16", "m64n64k32", "wgmma k32 with bf16 operands");
    expect_text_rejected(g, "-> @acc + 0", "-> @sa + 0",
                         "wgmma accumulator @sa is neither local nor an MMA fragment");
    expect_text_rejected(g, "-> @acc + 0", "-> @acc + 8",
                         "wgmma accumulator registers [8, 40) past the 32 of @acc");
    expect_text_rejected(g, "scale_d %phase == 0", "scale_d %phase",
                         "wgmma scale_d has dtype i32, not bool");
    expect_text_rejected(g, "fence wgmma_wait 0", "fence wgmma_wait 9",
                         "fence wgmma_wait 9 (0..7 pending groups)");
    expect_text_rejected(g, "barrier named 2 128", "barrier named 16 128",
                         "named barrier 16 (1..15");
    expect_text_rejected(g, "barrier named 2 128", "barrier named 2 100",
                         "named barrier of 100 threads");
    expect_text_rejected(g, "barrier named 2 128", "barrier named 2 512",
                         "named barrier of 512 threads");
    expect_text_rejected(g, "barrier named 2 128", "barrier warp named 2 128",
                         "a warp barrier cannot be named");
    expect_text_rejected(g, "compute_threads 256", "compute_threads 200",
                         "compute_threads 200 with 384 threads");
    expect_text_rejected(g, "box [64, 64] swizzle 0", "box [64, 512] swizzle 0",
                         "tensor map 1: box extent 512 (1..256)");
    expect_text_rejected(g, "box [64, 64] swizzle 0", "box [64, 64] swizzle 96",
                         "tensor map 1: swizzle 96");

    /* what the text cannot say: fields set by hand on the parsed golden */
    char *text = read_file(g);
    Arena *arena = arena_new();
    Module *m = parse_ok(arena, text);
    Kernel *k = m->kernels[0];
    Stmt *arrive = NULL;
    Stmt *body = k->body;
    for (int i = 0; i < body->u.seq.count; i++)
        if (body->u.seq.items[i]->kind == STMT_MBARRIER &&
            body->u.seq.items[i]->u.mbarrier.op == MBAR_ARRIVE)
            arrive = body->u.seq.items[i];
    cr_assert(arrive && arrive->u.mbarrier.op == MBAR_ARRIVE);
    arrive->u.mbarrier.value = ir_int(k, DT_I32, 1);
    expect_rejected(m, "mbarrier arrive takes no value", "an arrive with a value");
    arrive->u.mbarrier.value = NULL;
    Stmt *tma = find_stmt(k->body, STMT_TMA);
    tma->u.tma.coords[2] = ir_int(k, DT_I32, 0);
    expect_rejected(m, "tma: coordinate 2 past the map's rank 2", "a third coordinate");
    tma->u.tma.coords[2] = NULL;
    tma->u.tma.tensor_map = 5;
    expect_rejected(m, "tensor map 5 out of range (2 maps)", "tma map 5");
    tma->u.tma.tensor_map = 0;
    Stmt *fence = find_stmt(k->body, STMT_FENCE);
    fence->u.fence.value = 3;
    expect_rejected(m, "fence mbarrier_init takes no value", "a fence with a value");
    fence->u.fence.value = 0;
    k->tensor_maps[0].global = k->buffers.items[k->buffers.count - 1];
    expect_rejected(m, "tensor map 0: @acc is not a tensor parameter", "a map of a local");
    arena_free(arena);
    free(text);
}

/* Clusters and multicast (docs/hopper.md 11). */
Test(hopper_verify, cluster_rules)
{
    const char *g = CLUSTER_GOLDEN;
    const char *thread_cluster = "  min_blocks 1\n  cluster 2 1 1";
    expect_text_rejected(g, thread_cluster, "  min_blocks 1\n  cluster 9 1 1",
                         "cluster dimension 0 is 9 (1..8)");
    expect_text_rejected(g, thread_cluster, "  min_blocks 1\n  cluster 4 4 1",
                         "a cluster of 16 CTAs (at most 8)");
    expect_text_rejected(g, thread_cluster, "  min_blocks 1",
                         "mbarrier arrive_cluster in a kernel without a cluster");
    expect_text_rejected(g, thread_cluster, "  min_blocks 1",
                         "fence cluster_sync in a kernel without a cluster");
    expect_text_rejected(g, thread_cluster, "  min_blocks 1",
                         "multicast to 2 CTAs in a cluster of 1");
    expect_text_rejected(g, "map 0 [0, 0] multicast 2 dim 0", "map 0 [0, 0] multicast 2 dim 1",
                         "multicast along dim 1, but the box is 32 wide on dim 0");
    expect_text_rejected(g, "map 0 [0, 0] multicast 2 dim 0", "map 0 [0, 0] multicast 2 dim 2",
                         "multicast dim 2 of a rank-2 tensor map");
    expect_text_rejected(g, "map 0 [0, 0] multicast 2 dim 0", "map 0 [0, 0]",
                         "tma: shared region of 4096 elements, the box 2048 x 1");
    expect_text_rejected(g, "map 0 [0, 0] multicast 2 dim 0", "map 0 [0, 0] multicast 4 dim 0",
                         "multicast to 4 CTAs in a cluster of 2");
    expect_text_rejected(g, "map 0 multicast 2 dim 0", "multicast 2 dim 0",
                         "copy: multicast without a tensor map");
}

Test(hopper_verify, tile_level_rules)
{
    const char *g = TILE_GOLDEN;
    expect_text_rejected(g, "  threads 384\n", "  state thread\n  threads 384\n",
                         "tile-level statement 'gemm' remains at thread level");
    expect_text_rejected(g, "  threads 384\n", "  state thread\n  threads 384\n",
                         "tile-level statement 'for' remains at thread level");
    expect_text_rejected(g, "stages 2 {", "stages 0 {", "pipelined loop with 0 stages");
    expect_text_rejected(g, "pipe 0 {\n        gemm", "pipe -1 {\n        gemm",
                         "pipelined loop with pipe -1");
    expect_text_rejected(g, "0 : +256, 0 : +64] -> @acc transpose_b clear",
                         "0 : +128, 0 : +64] -> @acc transpose_b clear",
                         "gemm shapes disagree");
    expect_text_rejected(g, "map 1 barrier", "map 0 barrier",
                         "copy: tensor map 0 maps @a, not a side of the copy");
    expect_text_rejected(g, "barrier @full[%k % 4]\n", "barrier @sa[0, 0, 0]\n",
                         "copy barrier @sa is not a shared u64 mbarrier buffer");
    expect_text_rejected(g, "layout mma([128, 256], threads 256, vec 2, slots 1, warpgroups 2)",
                         "layout mma([128, 256], threads 128, vec 2, slots 1, warpgroups 2)",
                         "MMA layout: threads 128, vec 2 (want 256 threads, vec 2)");
    expect_text_rejected(g, "layout mma([128, 256], threads 256, vec 2, slots 1, warpgroups 2)",
                         "layout mma([64, 256], threads 256, vec 2, slots 1, warpgroups 2)",
                         "M must be a multiple of 64*2");
    expect_text_rejected(g, "layout mma([128, 256], threads 256, vec 2, slots 1, warpgroups 2)",
                         "layout mma([128, 256], threads 256, vec 2, slots 2, warpgroups 2)",
                         "has 2 slots, not 1");
    expect_text_rejected(g, "layout mma([128, 256], threads 256, vec 2, slots 1, warpgroups 2)",
                         "layout mma([128], threads 256, vec 2, slots 1, warpgroups 2)",
                         "malformed MMA layout (rank 1");
    expect_text_rejected(g, " layout mma([128, 256], threads 256, vec 2, slots 1, warpgroups 2)",
                         "", "wgmma accumulator @acc is neither local nor an MMA fragment");

    expect_text_rejected(g, "        barrier named 1 256\n", "        barrier\n",
                         "bar.sync 0 in the consumer branch of a warp-specialised if");
    expect_text_rejected(g, "      fence setmaxnreg_dec 40\n",
                         "      fence setmaxnreg_dec 40\n      barrier named 3 128\n",
                         "a block or named barrier in the producer branch");
    expect_text_rejected(g, "      fence setmaxnreg_dec 40\n",
                         "      fence setmaxnreg_dec 40\n      if true warp_specialized {} "
                         "else {}\n", "warp-specialised if inside another one");

    char *text = read_file(g);
    Arena *arena = arena_new();
    Module *m = parse_ok(arena, text);
    Stmt *split = find_stmt(m->kernels[0]->body, STMT_IF);
    cr_assert(split->u.if_.warp_specialized);
    split->u.if_.else_body = NULL;
    expect_rejected(m, "warp-specialised if has no consumer (else) branch", "no else");
    arena_free(arena);
    free(text);
}

/* ---- parse errors ---------------------------------------------------------------------- */

Test(hopper_text, parse_errors)
{
    const char *g = THREAD_GOLDEN;
    expect_parse_error(g, "m64n64k16", "m64x", "expected a wgmma shape (m64n256k16), found 'm64x'");
    expect_parse_error(g, "map 0 [0, 0]", "map 0 [0]",
                       "tensor map 0 has rank 2 but 1 coordinates are given");
    expect_parse_error(g, "map 0 [0, 0]", "map 7 [0, 0]", "tensor map 7 is not declared (2 maps)");
    expect_parse_error(g, "mbarrier init @bar[0]", "mbarrier frob @bar[0]",
                       "expected an mbarrier op (init, arrive, expect_tx, wait), found 'frob'");
    expect_parse_error(g, "fence wgmma_fence", "fence frob", "expected a fence op");
    expect_parse_error(g, "tensor_map 1 @out", "tensor_map 2 @out",
                       "tensor map 2 out of order (expected 1)");
    expect_parse_error(g, "box [64, 64] swizzle 0", "box [64] swizzle 0",
                       "@out has rank 2 but the box has 1 extents");
    expect_parse_error(g, "mbarrier arrive @bar[1]", "mbarrier arrive @bar[1] = 1",
                       "expected a statement, found '='");
    expect_parse_error(g, "-> @acc + 0", "-> @acc", "expected '+'");
    expect_parse_error(g, "transpose_b scale_d", "transpose_b transpose_b scale_d",
                       "'transpose_b' is given twice");
    const char *t = TILE_GOLDEN;
    expect_parse_error(t, "hint_tma on", "hint_tma maybe",
                       "expected a hint (auto, off, on), found 'maybe'");
    expect_parse_error(t, "stages 2 {", "{", "expected 'stages', found '{'");
    expect_parse_error(t, "role producer", "role boss",
                       "expected a role (both, producer, consumer), found 'boss'");
    expect_parse_error(t, "tma on map 0", "tma sometimes map 0", "expected a hint");
    expect_parse_error(t, ", warpgroups 2)", ")", "expected ',', found ')'");
}
