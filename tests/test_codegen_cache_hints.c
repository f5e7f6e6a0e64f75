/*
 * test_codegen_cache_hints.c -- the launch's load_cache / store_cache
 * hints (docs/language.md) from source to PTX, with no GPU.
 *
 * One kernel with three instances that differ only in their hints goes
 * through the built tkc (TKC_PATH) with --emit=ptx.  Each entry's PTX is
 * checked on its own: without hints every global access is a plain
 * ld/st; `streaming` puts .cs on every global load and store (16-byte
 * vectors, a byte store, and a load of a tensor the kernel also writes,
 * which keeps no .nc); evict_first / evict_last put an L2::cache_hint
 * with one createpolicy per kernel.  Shared-memory stores never take a
 * hint.  A tensor's own cache(P) replaces the launch's hint for that
 * tensor alone, cache(default) included (TENSOR_SOURCE: a gather whose
 * gathered rows keep evict_last while its index tensor opts out of the
 * launch's evict_first).  The textual IR carries the hints
 * (tests/ir/cache_hints_tile.ir
 * prints back byte for byte in test_ir_text.c; here: its values, and a
 * bad word refused).  The diagnostics of bad hint values in source are
 * golden files (tests/lang/errors/cache_hints.tk).
 */
#include "ir_test_support.h"
#include "tkc_test_support.h"

static const char SOURCE[] =
    "kernel hinted<SC: int, LC: int>(x: tensor<f32>[N], out: tensor<f32>[N],\n"
    "                                b: tensor<e4m3>[N], io: tensor<f32>[N])\n"
    "  where N % 1024 == 0\n"
    "  instances { plain: <0, 0>, streaming: <1, 1>, policy: <2, 3> }\n"
    "{\n"
    "  launch (bx) in grid(N / 1024) threads(128)\n"
    "      with(store_cache = SC, load_cache = LC) {\n"
    "    shared s: f32[1024];\n"
    "    parallel (t: 128) {\n"
    "      local v: f32[8];\n"
    "      copy(x[bx * 1024 + t * 8 : +8], v);\n"
    "      copy(v, out[bx * 1024 + t * 8 : +8]);\n"
    "      copy(v, s[t * 8 : +8]);\n"
    "      b[bx * 1024 + t] = e4m3(v[0]);\n"
    "      io[bx * 1024 + t] = io[bx * 1024 + t] * 2.0;\n"
    "    }\n"
    "  }\n"
    "}\n";

static const char TENSOR_SOURCE[] =
    "kernel gather<LC: int>(x: tensor<bf16>[T, 1024] cache(LC),\n"
    "                       pos: tensor<i32>[N] cache(default),\n"
    "                       out: tensor<bf16>[N, 1024] cache(streaming))\n"
    "  instances { last: <3>, plain: <0> }\n"
    "{\n"
    "  launch (bx) in grid(N) threads(128) with(load_cache = evict_first) {\n"
    "    parallel (t: 128) {\n"
    "      local v: bf16[8];\n"
    "      copy(x[pos[bx], t * 8 : +8], v);\n"
    "      copy(v, out[bx, t * 8 : +8]);\n"
    "    }\n"
    "  }\n"
    "}\n";

static char *compile(void) {
    int status;
    char *ptx = tkc_test_compile(SOURCE, "hints.tk", &status);
    cr_assert_eq(status, 0, "tkc failed: %s", ptx);
    return ptx;
}

Test(codegen_cache_hints, no_hint_keeps_plain_accesses) {
    char *ptx = compile();
    char *plain = tkc_test_entry(ptx, "hinted__plain");
    cr_expect_eq(tkc_test_count(plain, "st.global.v4.b32"), 2, "%s", plain);
    cr_expect_eq(tkc_test_count(plain, "ld.global.nc.v4.b32"), 2, "%s", plain);
    cr_expect_eq(tkc_test_count(plain, ".cs"), 0, "%s", plain);
    cr_expect_eq(tkc_test_count(plain, "cache_hint"), 0, "%s", plain);
    cr_expect_eq(tkc_test_count(plain, "createpolicy"), 0, "%s", plain);
    free(plain);
    free(ptx);
}

Test(codegen_cache_hints, streaming_marks_every_global_access) {
    char *ptx = compile();
    char *text = tkc_test_entry(ptx, "hinted__streaming");
    /* the 32 bytes of `out` per thread as two 16-byte stores */
    cr_expect_eq(tkc_test_count(text, "st.global.cs.v4.b32"), 2, "%s", text);
    cr_expect_eq(tkc_test_count(text, "ld.global.cs.nc.v4.b32"), 2, "%s", text);
    cr_expect_eq(tkc_test_count(text, "st.global.cs.b8"), 1, "%s", text);
    /* io is written by the kernel: its load is not .nc */
    cr_expect_eq(tkc_test_count(text, "ld.global.cs.b32"), 1, "%s", text);
    cr_expect_eq(tkc_test_count(text, "st.global.cs.b32"), 1, "%s", text);
    cr_expect_eq(tkc_test_count(text, "st.shared.v4.b32"), 2, "%s", text);
    cr_expect_eq(tkc_test_count(text, "st.shared.cs"), 0, "%s", text);
    /* no access was left without the hint */
    cr_expect_eq(tkc_test_count(text, "st.global.v"), 0, "%s", text);
    cr_expect_eq(tkc_test_count(text, "ld.global.nc.v"), 0, "%s", text);
    cr_expect_eq(tkc_test_count(text, "createpolicy"), 0, "%s", text);
    free(text);
    free(ptx);
}

Test(codegen_cache_hints, l2_policies_are_created_once) {
    char *ptx = compile();
    char *text = tkc_test_entry(ptx, "hinted__policy");
    cr_expect_eq(tkc_test_count(text, "createpolicy.fractional.L2::evict_first.b64"), 1, "%s",
                 text);
    cr_expect_eq(tkc_test_count(text, "createpolicy.fractional.L2::evict_last.b64"), 1, "%s",
                 text);
    cr_expect_eq(tkc_test_count(text, "st.global.L2::cache_hint.v4.b32"), 2, "%s", text);
    cr_expect_eq(tkc_test_count(text, "ld.global.nc.L2::cache_hint.v4.b32"), 2, "%s", text);
    cr_expect_eq(tkc_test_count(text, "st.global.L2::cache_hint.b8"), 1, "%s", text);
    cr_expect_eq(tkc_test_count(text, "ld.global.L2::cache_hint.b32"), 1, "%s", text);
    cr_expect_eq(tkc_test_count(text, ".cs"), 0, "%s", text);
    free(text);
    free(ptx);
}

Test(codegen_cache_hints, tensor_hint_replaces_the_launch_hint) {
    int status;
    char *ptx = tkc_test_compile(TENSOR_SOURCE, "tensor_hints.tk", &status);
    cr_assert_eq(status, 0, "tkc failed: %s", ptx);
    char *last = tkc_test_entry(ptx, "gather__last");
    /* x under its evict_last, pos plain (cache(default) opts out of the
     * launch's evict_first, so no evict_first policy exists), out .cs */
    cr_expect_eq(tkc_test_count(last, "createpolicy.fractional.L2::evict_last.b64"), 1, "%s",
                 last);
    cr_expect_eq(tkc_test_count(last, "createpolicy"), 1, "%s", last);
    cr_expect_eq(tkc_test_count(last, "ld.global.nc.L2::cache_hint.v4.b32"), 1, "%s", last);
    /* pos[bx] (loaded where the row's edge mask and address need it) */
    cr_expect_gt(tkc_test_count(last, "ld.global.nc.b32"), 0, "%s", last);
    cr_expect_eq(tkc_test_count(last, "L2::cache_hint"), 1, "%s", last);
    cr_expect_eq(tkc_test_count(last, "st.global.cs.v4.b32"), 1, "%s", last);
    char *plain = tkc_test_entry(ptx, "gather__plain");
    /* cache(0) is cache(default): the launch's hint does not apply either */
    cr_expect_eq(tkc_test_count(plain, "createpolicy"), 0, "%s", plain);
    cr_expect_eq(tkc_test_count(plain, "ld.global.nc.v4.b32"), 1, "%s", plain);
    cr_expect_gt(tkc_test_count(plain, "ld.global.nc.b32"), 0, "%s", plain);
    cr_expect_eq(tkc_test_count(plain, "L2::cache_hint"), 0, "%s", plain);
    cr_expect_eq(tkc_test_count(plain, "st.global.cs.v4.b32"), 1, "%s", plain);
    free(plain);
    free(last);
    free(ptx);
}

Test(codegen_cache_hints, hinted_ptx_assembles) {
    /* the default output is a cubin: ptxas must accept every form */
    char dir[] = "/tmp/tkc_hints-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char path[160], cubin[160], command[512];
    snprintf(path, sizeof path, "%s/hints.tk", dir);
    snprintf(cubin, sizeof cubin, "%s/hints.cubin", dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs(SOURCE, f);
    fclose(f);
    snprintf(command, sizeof command, "'%s' '%s' -o '%s'", TKC_PATH, path, cubin);
    int rc = system(command);
    cr_expect(WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "tkc/ptxas failed on the hinted kernel");
    remove(path);
    remove(cubin);
    rmdir(dir);
}

Test(codegen_cache_hints, textual_ir_carries_the_hints) {
    char *golden = read_file(TK_SOURCE_DIR "/tests/ir/cache_hints_tile.ir");
    Arena *arena = arena_new();
    Module *m = parse_ok(arena, golden);
    cr_assert_eq(m->nkernels, 1);
    cr_expect_eq(m->kernels[0]->load_cache, CACHE_EVICT_LAST);
    cr_expect_eq(m->kernels[0]->store_cache, CACHE_STREAMING);
    const Buffer *sf = m->kernels[0]->params[1].buffer;
    cr_expect(sf->has_cache_hint && sf->cache_hint == CACHE_EVICT_FIRST);
    const Buffer *x = m->kernels[0]->params[0].buffer;
    cr_expect(!x->has_cache_hint);

    char *bad = strdup(golden);
    cr_assert_not_null(bad);
    char *word = strstr(bad, "store_cache streaming");
    cr_assert_not_null(word);
    memcpy(word + strlen("store_cache "), "sticky   ", strlen("streaming"));
    Captured c;
    capture_init(&c);
    cr_expect_null(ir_parse(arena, &c.diag, "<ir>", bad));
    cr_expect(strstr(capture_text(&c), "expected a cache hint (default, streaming, evict_first, "
                                       "evict_last), found 'sticky'"),
              "%s", capture_text(&c));
    capture_done(&c);
    free(bad);
    arena_free(arena);
    free(golden);
}
