/*
 * test_codegen_hopper.c -- the back end of the Hopper statements, without
 * a GPU and without the front end or the passes.
 *
 * Each test builds a thread-level kernel by hand with the ir.c
 * constructors, in the shape the Hopper passes produce (docs/hopper.md 3
 * and 5): mbarriers initialised by thread 0, a producer warpgroup issuing
 * TMA loads under expect_tx, consumers waiting on the parity and running
 * wgmma on 128-byte-swizzled tiles, a TMA store, named barriers and
 * setmaxnreg.  The kernel goes through codegen_module and then ptxas
 * (whole program, as tkc does), and the PTX is checked for the
 * instructions, the tensor-map parameters, .maxntid/.minnctapersm and
 * the absence of local memory (ptxas -v: no stack frame, no spills); and
 * the cluster form (.reqnctapercluster, a multicast load, the release to
 * every CTA through mapa, cluster barriers).
 * Operands that a pass must never produce are diagnostics, not crashes.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ir.h"
#include "tkc_test_support.h"

/* ---- IR building helpers ----------------------------------------------- */

static Expr *i32(Kernel *k, int64_t v) { return ir_int(k, DT_I32, v); }
static Expr *tid(Kernel *k) { return ir_call(k, INTR_THREAD_IDX, DT_I32, NULL, 0); }
static Expr *bin(Kernel *k, BinOp op, Expr *a, Expr *b) { return ir_binary(k, op, a, b); }

static Stmt *seq(Kernel *k) { return ir_seq(k, NULL, 0); }

static Stmt *if_then(Kernel *k, Expr *cond, Stmt *then_body, Stmt *else_body) {
    Stmt *s = ir_new_stmt(k, STMT_IF, k->loc);
    s->u.if_.cond = cond;
    s->u.if_.then_body = then_body;
    s->u.if_.else_body = else_body;
    return s;
}

static Stmt *fence(Kernel *k, FenceOp op, int64_t value) {
    Stmt *s = ir_new_stmt(k, STMT_FENCE, k->loc);
    s->u.fence.op = op;
    s->u.fence.value = value;
    return s;
}

static Stmt *barrier(Kernel *k, int id, int threads) {
    Stmt *s = ir_new_stmt(k, STMT_BARRIER, k->loc);
    s->u.barrier.id = id;
    s->u.barrier.threads = threads;
    return s;
}

/* The region of one element / the origin of a tile: starts, extents 0. */
static Region at(Kernel *k, Buffer *b, const int64_t *start) {
    Region r;
    memset(&r, 0, sizeof r);
    r.buffer = b;
    for (int d = 0; d < b->rank; d++) r.start[d] = i32(k, start ? start[d] : 0);
    return r;
}

static Stmt *mbarrier(Kernel *k, MbarrierOp op, Buffer *bar, int64_t slot, Expr *value) {
    Stmt *s = ir_new_stmt(k, STMT_MBARRIER, k->loc);
    s->u.mbarrier.op = op;
    s->u.mbarrier.bar = at(k, bar, &slot);
    s->u.mbarrier.value = value;
    return s;
}

static Buffer *shared(Kernel *k, const char *name, DType t, int rank, const int64_t *shape,
                      int64_t offset, int async_kind) {
    Buffer *b = ir_new_buffer(k, name, t, SCOPE_SHARED, rank);
    for (int d = 0; d < rank; d++) b->shape[d] = i32(k, shape[d]);
    b->pitch = shape[rank - 1];
    b->shared_offset = offset;
    b->async_kind = async_kind;
    b->swizzle_shift = async_kind == SHARED_ASYNC_SWIZZLE128 ? 0 : -1;
    Stmt *alloc = ir_new_stmt(k, STMT_ALLOC, k->loc);
    alloc->u.alloc.buffer = b;
    ir_seq_append(k, k->body, alloc);
    return b;
}

static Buffer *tensor(Kernel *k, const char *name, DType t, Var *rows, Var *cols) {
    Buffer *b = ir_new_buffer(k, name, t, SCOPE_GLOBAL, 2);
    b->shape[0] = ir_var(k, rows);
    b->shape[1] = ir_var(k, cols);
    b->strides[0] = ir_var(k, cols);
    b->strides[1] = i32(k, 1);
    b->param_index = k->nparams;
    k->params[k->nparams++] = (Param){b->name, PARAM_TENSOR, b, NULL};
    return b;
}

static void add_map(Kernel *k, Buffer *global, int64_t rows, int64_t cols, int swizzle) {
    TensorMap *map = &k->tensor_maps[k->ntensor_maps++];
    map->global = global;
    map->rank = 2;
    map->box[0] = rows;
    map->box[1] = cols;
    map->swizzle_bytes = swizzle;
}

static Stmt *tma(Kernel *k, bool store, Buffer *smem, int64_t stage, int map, Expr *row,
                 Expr *col, Buffer *bar) {
    Stmt *s = ir_new_stmt(k, STMT_TMA, k->loc);
    int64_t origin[3] = {stage, 0, 0};
    s->u.tma.store = store;
    s->u.tma.smem = at(k, smem, smem->rank == 3 ? origin : origin + 1);
    s->u.tma.tensor_map = map;
    s->u.tma.coords[0] = row;
    s->u.tma.coords[1] = col;
    if (bar) {
        int64_t slot = 0;
        s->u.tma.bar = at(k, bar, &slot);
    }
    return s;
}

static Stmt *wgmma(Kernel *k, DType t, int n, Region a, Region b, Buffer *acc,
                   int64_t offset, bool transpose_b, Expr *scale_d) {
    Stmt *s = ir_new_stmt(k, STMT_WGMMA, k->loc);
    s->u.wgmma.a = a;
    s->u.wgmma.b = b;
    s->u.wgmma.acc = acc;
    s->u.wgmma.acc_offset = offset;
    s->u.wgmma.m = 64;
    s->u.wgmma.n = n;
    s->u.wgmma.k = ir_dtype_bits(t) == 16 ? 16 : 32;
    s->u.wgmma.a_dtype = t;
    s->u.wgmma.b_dtype = t;
    s->u.wgmma.acc_dtype = DT_F32;
    s->u.wgmma.transpose_b = transpose_b;
    s->u.wgmma.scale_d = scale_d;
    return s;
}

static Buffer *local(Kernel *k, Stmt *body, const char *name, DType t, int64_t count) {
    Buffer *b = ir_new_buffer(k, name, t, SCOPE_LOCAL, 1);
    b->shape[0] = i32(k, count);
    Stmt *alloc = ir_new_stmt(k, STMT_ALLOC, k->loc);
    alloc->u.alloc.buffer = b;
    ir_seq_append(k, body, alloc);
    return b;
}

static Stmt *store1(Kernel *k, Buffer *b, Expr *index, Expr *value) {
    Stmt *s = ir_new_stmt(k, STMT_STORE, k->loc);
    s->u.store.buffer = b;
    s->u.store.indices = arena_alloc(k->arena, sizeof(Expr *));
    s->u.store.indices[0] = index;
    s->u.store.value = value;
    return s;
}

/* ---- the warp-specialised kernel --------------------------------------- */

typedef struct HopperOptions {
    DType ab;            /* bf16 or e4m3 */
    bool transpose_b;    /* B is [N, K] (K-major) */
    bool a_in_registers; /* A from a LOCAL array */
    const char *arch;    /* NULL: sm_90a */
    bool no_wgmma;       /* leave the wgmma statements out */
    bool cluster;        /* a cluster of 2: B's box multicasts (each CTA
                            loads 32 of its 64 rows), the consumers
                            release with arrive_cluster, cluster barriers
                            after the init and at the end */
} HopperOptions;

/* One 64 x 64 output tile, K = 64 (bf16) / 128 (e4m3) in one TMA stage:
 *   thread 0: init full[0] (count 1) and done[0] (count 256); fence; barrier
 *   threads 256..383: setmaxnreg.dec 40; thread 256: expect_tx, two TMA loads
 *   threads 0..255: setmaxnreg.inc 232; wait full[0] parity 0; wgmma x 4;
 *                   commit; wait 0; arrive done[0]; acc -> st; proxy fence;
 *                   bar.sync 1, 256; thread 0: TMA store, commit, wait 0 */
static Module *hopper_module(Arena *arena, HopperOptions o) {
    Module *m = ir_new_module(arena, o.arch ? o.arch : "sm_90a");
    Kernel *k = ir_new_kernel(m, "hopper__tile");
    k->source_name = "hopper";
    k->instance = "tile";
    k->threads = 384;
    k->compute_threads = 256;
    k->min_blocks = 1;
    int bytes = ir_dtype_bits(o.ab) / 8;
    int64_t kt = 128 / bytes; /* K per 128-byte row */

    Var *M = ir_new_var(k, "M", DT_I32, VAR_SYMBOL), *N = ir_new_var(k, "N", DT_I32, VAR_SYMBOL),
        *K = ir_new_var(k, "K", DT_I32, VAR_SYMBOL);
    k->symbols = arena_alloc(arena, 3 * sizeof(Var *));
    k->symbols[0] = M;
    k->symbols[1] = N;
    k->symbols[2] = K;
    k->nsymbols = 3;
    k->params = arena_alloc(arena, 4 * sizeof(Param));
    Buffer *a = tensor(k, "a", o.ab, M, K);
    Buffer *b = o.transpose_b ? tensor(k, "b", o.ab, N, K) : tensor(k, "b", o.ab, K, N);
    Buffer *d = tensor(k, "d", DT_BF16, M, N);
    Var *clear = ir_new_var(k, "clear", DT_BOOL, VAR_SCALAR);
    k->params[k->nparams++] = (Param){"clear", PARAM_SCALAR, NULL, clear};
    a->read_only = b->read_only = true;
    k->tensor_maps = arena_alloc(arena, 3 * sizeof(TensorMap));
    add_map(k, a, 64, kt, 128);
    /* a multicast map's box is one CTA's slice */
    if (o.transpose_b) add_map(k, b, o.cluster ? 32 : 64, kt, 128);
    else add_map(k, b, o.cluster ? kt / 2 : kt, 64, 128);
    if (o.cluster) k->cluster[0] = 2;
    add_map(k, d, 64, 64, 0);
    Var *bx = ir_new_var(k, "bx", DT_I32, VAR_BLOCK), *by = ir_new_var(k, "by", DT_I32, VAR_BLOCK);
    by->block_dim = 1;
    k->block_vars[0] = bx;
    k->block_vars[1] = by;

    int64_t bars_shape[1] = {2}, tile_shape[3] = {1, 64, kt}, st_shape[2] = {64, 64};
    int64_t b_shape[3] = {1, o.transpose_b ? 64 : kt, o.transpose_b ? kt : 64};
    Buffer *bars = shared(k, "bars", DT_U64, 1, bars_shape, 0, SHARED_ASYNC_MBARRIER);
    Buffer *sa = shared(k, "sa", o.ab, 3, tile_shape, 1024, SHARED_ASYNC_SWIZZLE128);
    Buffer *sb = shared(k, "sb", o.ab, 3, b_shape, 1024 + 8192, SHARED_ASYNC_SWIZZLE128);
    Buffer *st = shared(k, "st", DT_BF16, 2, st_shape, 1024 + 16384, SHARED_ASYNC_PLAIN);
    k->shared_bytes = 1024 + 16384 + 8192;

    Stmt *init = seq(k);
    ir_seq_append(k, init, mbarrier(k, MBAR_INIT, bars, 0, i32(k, 1)));
    ir_seq_append(k, init, mbarrier(k, MBAR_INIT, bars, 1, i32(k, 256)));
    ir_seq_append(k, init, fence(k, FENCE_MBARRIER_INIT, 0));
    ir_seq_append(k, k->body, if_then(k, bin(k, BIN_EQ, tid(k), i32(k, 0)), init, NULL));
    ir_seq_append(k, k->body, barrier(k, 0, 0));
    if (o.cluster) ir_seq_append(k, k->body, fence(k, FENCE_CLUSTER_SYNC, 0));

    Stmt *issue = seq(k);
    ir_seq_append(k, issue, mbarrier(k, MBAR_EXPECT_TX, bars, 0, i32(k, 16384)));
    Expr *row0 = bin(k, BIN_MUL, ir_var(k, by), i32(k, 64));
    Expr *col0 = bin(k, BIN_MUL, ir_var(k, bx), i32(k, 64));
    ir_seq_append(k, issue, tma(k, false, sa, 0, 0, row0, i32(k, 0), bars));
    Stmt *load_b = o.transpose_b ? tma(k, false, sb, 0, 1, col0, i32(k, 0), bars)
                                 : tma(k, false, sb, 0, 1, i32(k, 0), col0, bars);
    if (o.cluster) {
        load_b->u.tma.multicast = 2;
        load_b->u.tma.multicast_dim = 0;
    }
    ir_seq_append(k, issue, load_b);
    Stmt *producer = seq(k);
    ir_seq_append(k, producer, fence(k, FENCE_SETMAXNREG_DEC, 40));
    ir_seq_append(k, producer, if_then(k, bin(k, BIN_EQ, tid(k), i32(k, 256)), issue, NULL));

    Stmt *consumer = seq(k);
    ir_seq_append(k, consumer, fence(k, FENCE_SETMAXNREG_INC, 232));
    Buffer *acc = local(k, consumer, "acc", DT_F32, 32);
    ir_seq_append(k, consumer, mbarrier(k, MBAR_WAIT, bars, 0, i32(k, 0)));
    Buffer *ra = NULL;
    if (o.a_in_registers) {
        /* A registers: some per-thread values, 8 (or 16) per k-step */
        ra = local(k, consumer, "ra", o.ab, 64);
        for (int i = 0; i < 64; i++)
            ir_seq_append(k, consumer, store1(k, ra, i32(k, i),
                                              ir_cast(k, CAST_CONVERT, o.ab,
                                                      ir_cast(k, CAST_CONVERT, DT_F32,
                                                              bin(k, BIN_ADD, tid(k), i32(k, i))))));
    }
    if (!o.no_wgmma) ir_seq_append(k, consumer, fence(k, FENCE_WGMMA_FENCE, 0));
    int ksteps = (int)(kt / (ir_dtype_bits(o.ab) == 16 ? 16 : 32));
    for (int step = 0; step < ksteps; step++) {
        int64_t kk = step * (kt / ksteps);
        int64_t a_origin[3] = {0, 0, kk}, ra_origin[1] = {step * 4 * (32 / ir_dtype_bits(o.ab))};
        int64_t b_origin[3] = {0, o.transpose_b ? 0 : kk, o.transpose_b ? kk : 0};
        Region ar = o.a_in_registers ? at(k, ra, ra_origin) : at(k, sa, a_origin);
        /* the first step ignores the accumulator unless told to keep it */
        Expr *scale = step == 0 ? ir_unary(k, UN_LNOT, ir_var(k, clear))
                                : ir_int(k, DT_BOOL, 1);
        if (!o.no_wgmma)
            ir_seq_append(k, consumer, wgmma(k, o.ab, 64, ar, at(k, sb, b_origin), acc, 0,
                                             o.transpose_b, scale));
    }
    if (!o.no_wgmma) {
        ir_seq_append(k, consumer, fence(k, FENCE_WGMMA_COMMIT, 0));
        ir_seq_append(k, consumer, fence(k, FENCE_WGMMA_WAIT, 0));
    }
    ir_seq_append(k, consumer,
                  mbarrier(k, o.cluster ? MBAR_ARRIVE_CLUSTER : MBAR_ARRIVE, bars, 1, NULL));
    /* st[(tid % 128) * 32 + i] (flattened) = bf16(acc[i]) */
    for (int i = 0; i < 32; i++) {
        Expr *flat = bin(k, BIN_ADD, bin(k, BIN_MUL, bin(k, BIN_MOD, tid(k), i32(k, 128)),
                                         i32(k, 32)), i32(k, i));
        Stmt *s = ir_new_stmt(k, STMT_STORE, k->loc);
        s->u.store.buffer = st;
        s->u.store.indices = arena_alloc(arena, 2 * sizeof(Expr *));
        s->u.store.indices[0] = bin(k, BIN_DIV, flat, i32(k, 64));
        s->u.store.indices[1] = bin(k, BIN_MOD, flat, i32(k, 64));
        Expr *index = i32(k, i);
        s->u.store.value = ir_cast(k, CAST_CONVERT, DT_BF16, ir_load(k, acc, &index, NULL));
        ir_seq_append(k, consumer, s);
    }
    ir_seq_append(k, consumer, fence(k, FENCE_PROXY_ASYNC, 0));
    ir_seq_append(k, consumer, barrier(k, 1, 256));
    Stmt *out = seq(k);
    ir_seq_append(k, out, tma(k, true, st, 0, 2, row0, col0, NULL));
    ir_seq_append(k, out, fence(k, FENCE_TMA_STORE_COMMIT, 0));
    ir_seq_append(k, out, fence(k, FENCE_TMA_STORE_WAIT, 0));
    ir_seq_append(k, consumer, if_then(k, bin(k, BIN_EQ, tid(k), i32(k, 0)), out, NULL));

    Stmt *split = if_then(k, bin(k, BIN_GE, tid(k), i32(k, 256)), producer, consumer);
    split->u.if_.warp_specialized = true;
    ir_seq_append(k, k->body, split);
    if (o.cluster) ir_seq_append(k, k->body, fence(k, FENCE_CLUSTER_SYNC, 0));
    return m;
}

/* ---- compiling, and ptxas -v ------------------------------------------- */

static char *compile(Module *m, CodegenOutput what) {
    Diag diag;
    diag_init(&diag, stderr);
    char *text = codegen_module(m, &diag, what);
    cr_assert_not_null(text, "codegen failed");
    cr_assert_eq(diag.errors, 0);
    return text;
}

static void expect_all(const char *text, const char *const *expected, size_t count) {
    for (size_t e = 0; e < count; e++)
        cr_assert(strstr(text, expected[e]), "output lacks '%s':\n%s", expected[e], text);
}

static int occurrences(const char *text, const char *what) {
    int n = 0;
    for (const char *p = text; (p = strstr(p, what)); p++) n++;
    return n;
}

/* No stack frame, no spills: the accumulators and the tensor maps stay
 * out of local memory; and no ptxas warning (a serialised wgmma). */
static void expect_no_local_memory(const char *ptx) {
    cr_assert_null(strstr(ptx, ".local"), "local memory in the PTX:\n%s", ptx);
    char *report = tkc_test_ptxas_report_ok(ptx);
    cr_assert(strstr(report, "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads"),
              "ptxas -v:\n%s", report);
    /* e.g. "wgmma.mma_async instructions are serialized" */
    cr_assert_null(strstr(report, "arning"), "ptxas warns:\n%s", report);
    free(report);
}

/* ---- tests ------------------------------------------------------------- */

Test(codegen_hopper, bf16_warp_specialized_tile) {
    Arena *arena = arena_new();
    char *ptx = compile(hopper_module(arena, (HopperOptions){.ab = DT_BF16, .transpose_b = true, .a_in_registers = false}), CODEGEN_PTX);
    const char *expected[] = {
        ".maxntid 384",
        ".minnctapersm 1",
        ".param .align 64 .b8 hopper__tile_param_7[128]", /* after 4 params + 3 symbols */
        ".param .align 64 .b8 hopper__tile_param_8[128]",
        ".param .align 64 .b8 hopper__tile_param_9[128]",
        "cvta.param.u64",                                  /* read in place (grid_constant) */
        ".extern .shared .align 1024 .b8 tk__shared[]",
        "mbarrier.init.shared.b64",
        "fence.mbarrier_init.release.cluster",
        "mbarrier.arrive.expect_tx",
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes",
        "mbarrier.try_wait.parity",
        "setmaxnreg.dec.sync.aligned.u32 \t40",
        "setmaxnreg.inc.sync.aligned.u32 \t232",
        "wgmma.fence.sync.aligned",
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16",
        "wgmma.commit_group.sync.aligned",
        "wgmma.wait_group.sync.aligned \t0",
        "mbarrier.arrive.shared.b64",
        "fence.proxy.async.shared::cta",
        "bar.sync \t1, 256",
        "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group",
        "cp.async.bulk.commit_group",
        "cp.async.bulk.wait_group.read \t0",
    };
    expect_all(ptx, expected, sizeof expected / sizeof expected[0]);
    cr_assert_null(strstr(ptx, ".reqntid"), ".reqntid with .maxntid:\n%s", ptx);
    cr_assert_eq(occurrences(ptx, "wgmma.mma_async"), 4);
    /* K-major A and B: imm-trans-a 0, imm-trans-b 0 */
    cr_assert(strstr(ptx, "p, 1, 1, 0, 0;"), "transpose immediates:\n%s", ptx);
    expect_no_local_memory(ptx);
    free(ptx);
    arena_free(arena);
}

/* A cluster of 2 (docs/hopper.md 11): the kernel requires the cluster
 * shape, B's load multicasts its slice (this CTA's rank picks the rows and
 * the shared offset: 32 rows of 128 bytes) to both CTAs with mask 0b11,
 * the release reaches the barrier of each CTA through mapa, and cluster
 * barriers follow the init and end the kernel.  A's load stays local. */
Test(codegen_hopper, cluster_multicast) {
    Arena *arena = arena_new();
    char *ptx = compile(hopper_module(arena, (HopperOptions){.ab = DT_BF16, .transpose_b = true,
                                                             .cluster = true}),
                        CODEGEN_PTX);
    const char *expected[] = {
        ".explicitcluster",
        ".reqnctapercluster 2, 1, 1",
        "%cluster_ctarank",
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
        "[",
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        ".multicast::cluster",
        "bar.warp.sync \t-1",
        "%laneid",
        "setp.lt.u32 arrive, ",
        "@arrive mapa.shared::cluster.u32 remote, ",
        "@arrive mbarrier.arrive.shared::cluster.b64 _, [remote];",
        "barrier.cluster.arrive.release;",
        "barrier.cluster.wait.acquire;",
    };
    expect_all(ptx, expected, sizeof expected / sizeof expected[0]);
    cr_assert_eq(occurrences(ptx, ".multicast::cluster"), 1, "only B multicasts:\n%s", ptx);
    cr_assert_eq(occurrences(ptx, "barrier.cluster.wait.acquire"), 2);
    /* the slice: rank * 4096 bytes, rank * 32 rows */
    cr_assert(strstr(ptx, "shl.b32") || strstr(ptx, "mul.lo.s32") || strstr(ptx, "mad.lo.s32"),
              "no slice offset:\n%s", ptx);
    cr_assert_null(strstr(ptx, "mbarrier.arrive.shared.b64"), "a local release:\n%s", ptx);
    expect_no_local_memory(ptx);
    free(ptx);
    arena_free(arena);
}

/* The plain kernel carries no cluster directive. */
Test(codegen_hopper, no_cluster_without_one) {
    Arena *arena = arena_new();
    char *ptx = compile(hopper_module(arena, (HopperOptions){.ab = DT_BF16, .transpose_b = true}),
                        CODEGEN_PTX);
    cr_assert_null(strstr(ptx, "cluster_dim"), "%s", ptx);
    cr_assert_null(strstr(ptx, ".reqnctapercluster"), "%s", ptx);
    cr_assert_null(strstr(ptx, "multicast"), "%s", ptx);
    cr_assert_null(strstr(ptx, "barrier.cluster"), "%s", ptx);
    free(ptx);
    arena_free(arena);
}

/* The descriptor is built at run time from the shared window address of
 * the tile: (addr & 0x3FFFF) >> 4, LBO 1, SBO 64, 128-byte swizzle. */
Test(codegen_hopper, descriptor_fields) {
    Arena *arena = arena_new();
    char *llvm = compile(hopper_module(arena, (HopperOptions){.ab = DT_BF16, .transpose_b = true, .a_in_registers = false}),
                         CODEGEN_LLVM_IR);
    /* 1<<16 | 64<<32 | 1<<62 */
    char fields[64];
    snprintf(fields, sizeof fields, "%llu", (1ull << 16) | (64ull << 32) | (1ull << 62));
    cr_assert(strstr(llvm, fields), "descriptor constant %s missing:\n%s", fields, llvm);
    cr_assert(strstr(llvm, "ptrtoint (ptr addrspace(3) @tk__shared to i32)") ||
                  strstr(llvm, "ptrtoint ptr addrspace(3) @tk__shared to i32"),
              "descriptor not from the shared window address:\n%s", llvm);
    /* the 18-bit mask, which O3 narrows to 0x3FC0 after the shift once it
     * knows the 1024-byte alignment */
    cr_assert(strstr(llvm, "262143") || strstr(llvm, "and i32 %10, 16320"),
              "no address mask:\n%s", llvm);
    cr_assert(strstr(llvm, "ptr byval([128 x i8]) align 64 \"nvvm.grid_constant\""),
              "tensor map parameter:\n%s", llvm);
    free(llvm);
    arena_free(arena);
}

Test(codegen_hopper, mn_major_b) {
    Arena *arena = arena_new();
    char *ptx = compile(hopper_module(arena, (HopperOptions){.ab = DT_BF16, .transpose_b = false, .a_in_registers = false}), CODEGEN_PTX);
    cr_assert(strstr(ptx, "p, 1, 1, 0, 1;"), "imm-trans-b 1 for an N-major B:\n%s", ptx);
    expect_no_local_memory(ptx);
    free(ptx);
    arena_free(arena);
}

Test(codegen_hopper, a_from_registers) {
    Arena *arena = arena_new();
    char *ptx = compile(hopper_module(arena, (HopperOptions){.ab = DT_BF16, .transpose_b = true, .a_in_registers = true}), CODEGEN_PTX);
    cr_assert(strstr(ptx, "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16"));
    /* no imm-trans-a with A in registers */
    cr_assert(strstr(ptx, "p, 1, 1, 0;"), "register-A immediates:\n%s", ptx);
    expect_no_local_memory(ptx);
    free(ptx);
    arena_free(arena);
}

Test(codegen_hopper, e4m3_has_no_transpose_immediates) {
    Arena *arena = arena_new();
    char *ptx = compile(hopper_module(arena, (HopperOptions){.ab = DT_E4M3, .transpose_b = true, .a_in_registers = false}), CODEGEN_PTX);
    cr_assert(strstr(ptx, "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3"), "%s", ptx);
    cr_assert(strstr(ptx, "p, 1, 1;"), "e4m3 immediates:\n%s", ptx);
    expect_no_local_memory(ptx);
    free(ptx);
    arena_free(arena);
}

/* sm_100a has TMA, mbarriers and setmaxnreg but no wgmma: the former
 * compile and assemble, the latter is a diagnostic, never an LLVM abort. */
Test(codegen_hopper, sm_100a_has_no_wgmma) {
    Arena *arena = arena_new();
    Module *m = hopper_module(arena, (HopperOptions){.ab = DT_BF16, .transpose_b = true, .a_in_registers = false, .arch = "sm_100a", .no_wgmma = true});
    char *ptx = compile(m, CODEGEN_PTX);
    cr_assert(strstr(ptx, ".target sm_100a") && strstr(ptx, "cp.async.bulk.tensor") &&
                  strstr(ptx, "setmaxnreg") && strstr(ptx, "mbarrier.try_wait.parity"),
              "%s", ptx);
    Diag diag;
    FILE *sink = fopen("/dev/null", "w");
    diag_init(&diag, sink);
    size_t size;
    unsigned char *cubin = ptx_to_cubin(ptx, "sm_100a", &diag, &size);
    cr_assert(cubin && size > 4 && memcmp(cubin, "\177ELF", 4) == 0);
    free(cubin);
    free(ptx);
    m = hopper_module(arena, (HopperOptions){.ab = DT_BF16, .transpose_b = true, .a_in_registers = false, .arch = "sm_100a", .no_wgmma = false});
    cr_assert_null(codegen_module(m, &diag, CODEGEN_PTX));
    cr_assert_geq(diag.errors, 1);
    fclose(sink);
    arena_free(arena);
}

/* Kernels without Hopper statements keep .reqntid and 128-byte shared
 * alignment (their PTX does not change). */
Test(codegen_hopper, plain_kernel_unchanged) {
    Arena *arena = arena_new();
    Module *m = ir_new_module(arena, "sm_90a");
    Kernel *k = ir_new_kernel(m, "plain__kernel");
    k->threads = 128;
    k->compute_threads = 128;
    int64_t shape[1] = {128};
    Buffer *s = shared(k, "s", DT_F32, 1, shape, 0, SHARED_ASYNC_NONE);
    ir_seq_append(k, k->body, store1(k, s, tid(k), ir_float(k, DT_F32, 1.0)));
    ir_seq_append(k, k->body, barrier(k, 0, 0));
    char *ptx = compile(m, CODEGEN_PTX);
    cr_assert(strstr(ptx, ".reqntid 128") && strstr(ptx, ".extern .shared .align 128 .b8 tk__shared[]") &&
                  strstr(ptx, "bar.sync \t0;"),
              "%s", ptx);
    free(ptx);
    arena_free(arena);
}

/* Operands the passes must never produce are diagnostics, not LLVM
 * aborts: a wgmma on a tile that is not 128-byte swizzled, a bad shape,
 * setmaxnreg out of range, a TMA naming a missing tensor map. */
Test(codegen_hopper, bad_operands_are_diagnostics) {
    for (int variant = 0; variant < 4; variant++) {
        Arena *arena = arena_new();
        Module *m = hopper_module(arena, (HopperOptions){.ab = DT_BF16, .transpose_b = true, .a_in_registers = false});
        Kernel *k = m->kernels[0];
        Stmt *bad;
        int64_t origin[3] = {0, 0, 0};
        Buffer *sa = NULL, *acc = NULL;
        for (int i = 0; i < k->buffers.count; i++) {
            Buffer *b = k->buffers.items[i];
            if (strcmp(b->name, "sa") == 0) sa = b;
            if (strcmp(b->name, "acc") == 0) acc = b;
        }
        cr_assert(sa && acc);
        switch (variant) {
        case 0:
            sa->swizzle_shift = -1;
            bad = fence(k, FENCE_WGMMA_FENCE, 0);
            break;
        case 1:
            bad = wgmma(k, DT_BF16, 72 + 4, at(k, sa, origin), at(k, sa, origin), acc, 0, true,
                        NULL);
            break;
        case 2: bad = fence(k, FENCE_SETMAXNREG_INC, 300); break;
        default: bad = tma(k, false, sa, 0, 7, i32(k, 0), i32(k, 0), NULL); break;
        }
        ir_seq_append(k, k->body, bad);
        Diag diag;
        FILE *sink = fopen("/dev/null", "w");
        diag_init(&diag, sink);
        char *ptx = codegen_module(m, &diag, CODEGEN_PTX);
        cr_assert_null(ptx, "variant %d compiled", variant);
        cr_assert_geq(diag.errors, 1, "variant %d: no diagnostic", variant);
        fclose(sink);
        arena_free(arena);
    }
}

/* The launcher encodes one tensor map per Kernel.tensor_maps entry after
 * the grid check and appends it to the parameter block after the
 * symbols; the header compiles warning-free against the runtime. */
/* The launcher header of m (malloc'd), after checking that it compiles
 * with -Wall -Wextra -Werror against libtk's headers. */
static char *launcher_header(Module *m) {
    char dir[] = "/tmp/test_codegen_hopper-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char path[128], command[1024];
    snprintf(path, sizeof path, "%s/tk_kernels.h", dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    emit_header(f, m, "HOPPER_H");
    fclose(f);
    f = fopen(path, "r");
    char *header = calloc(1, 1 << 20);
    size_t n = fread(header, 1, (1 << 20) - 1, f);
    header[n] = 0;
    fclose(f);
    const char *cuda = getenv("CUDA_HOME") ? getenv("CUDA_HOME") : "/usr/local/cuda";
    snprintf(command, sizeof command,
             "cc -std=c11 -Wall -Wextra -Werror -fsyntax-only -x c -DTK_LAUNCHERS_IMPLEMENTATION "
             "-I%s/runtime/include -I%s/runtime/src -I%s/include %s > %s/cc.log 2>&1",
             TK_SOURCE_DIR, TK_SOURCE_DIR, cuda, path, dir);
    int status = system(command);
    snprintf(command, sizeof command, "%s cat %s/cc.log; rm -rf %s", status ? "" : ": ||",
             dir, dir);
    cr_assert_eq(system(command), 0);
    cr_assert_eq(status, 0, "the launcher does not compile (log above)");
    return header;
}

Test(codegen_hopper, launcher_passes_tensor_maps) {
    Arena *arena = arena_new();
    Module *m = hopper_module(arena, (HopperOptions){.ab = DT_BF16, .transpose_b = true, .a_in_registers = false});
    char *header = launcher_header(m);
    const char *expected[] = {
        "void *tkl_params[11];",
        "static const int64_t tkl_box[2] = {64, 64};",
        "tkl_status = tk__tensor_map(\"hopper\", \"a\", a, 2, tkl_box, 128, &tkl_map0);",
        "tkl_status = tk__tensor_map(\"hopper\", \"b\", b, 2, tkl_box, 128, &tkl_map1);",
        "tkl_status = tk__tensor_map(\"hopper\", \"d\", d, 2, tkl_box, 0, &tkl_map2);",
        "tkl_params[7] = &tkl_map0;",
        "tkl_params[9] = &tkl_map2;",
        "tk__launch(\"hopper__tile\", tkl_dims, 384u, 25600u, tkl_params, stream);",
    };
    expect_all(header, expected, sizeof expected / sizeof expected[0]);
    /* encoded only once the grid is known to be non-empty */
    cr_assert_lt(strstr(header, "if (tkl_grid[0] == 0"), strstr(header, "tk__tensor_map("));
    cr_assert_null(strstr(header, "tk__launch_cluster"));
    free(header);
    arena_free(arena);
}

/* A cluster kernel's launcher rounds the clustered grid dimension up to
 * whole clusters (before the limit check) and launches through
 * tk__launch_cluster with the cluster shape; B's tensor map has the
 * slice box (32 of 64 rows). */
Test(codegen_hopper, launcher_launches_clusters) {
    Arena *arena = arena_new();
    Module *m = hopper_module(arena, (HopperOptions){.ab = DT_BF16, .transpose_b = true,
                                                     .cluster = true});
    char *header = launcher_header(m);
    const char *expected[] = {
        "tkl_grid[0] = (tkl_grid[0] + 1) / 2 * 2;",
        "static const uint32_t tkl_cluster[3] = {2u, 1u, 1u};",
        "tk__launch_cluster(\"hopper__tile\", tkl_dims, tkl_cluster, 384u, 25600u, tkl_params, "
        "stream);",
        "static const int64_t tkl_box[2] = {32, 64};",
    };
    expect_all(header, expected, sizeof expected / sizeof expected[0]);
    cr_assert_lt(strstr(header, "tkl_grid[0] = (tkl_grid[0] + 1)"),
                 strstr(header, "if (tkl_grid[0] == 0"));
    free(header);
    arena_free(arena);
}

/* ---- wgmma groups left in flight (gemm's wait = 1) ---------------------- */

/* Adds `dst[i] = dst[i] + src[i]` for the 32 registers of a 64x64 tile. */
static void accumulate(Kernel *k, Stmt *body, Buffer *dst, Buffer *src) {
    for (int i = 0; i < 32; i++) {
        Expr *index = i32(k, i);
        Expr *sum = bin(k, BIN_ADD, ir_load(k, dst, &index, NULL), ir_load(k, src, &index, NULL));
        ir_seq_append(k, body, store1(k, dst, i32(k, i), sum));
    }
}

/* One wgmma group of a 64x64x128 e4m3 tile into `part` (cleared), then
 * `wgmma_wait pending`: what lower_gemm makes of a gemm with wait. */
static void group(Kernel *k, Stmt *body, Buffer *sa, Buffer *sb, Buffer *part, int pending) {
    ir_seq_append(k, body, fence(k, FENCE_WGMMA_FENCE, 0));
    for (int step = 0; step < 4; step++) {
        int64_t origin[3] = {0, 0, step * 32};
        ir_seq_append(k, body, wgmma(k, DT_E4M3, 64, at(k, sa, origin), at(k, sb, origin), part,
                                     0, true, ir_int(k, DT_BOOL, step != 0)));
    }
    ir_seq_append(k, body, fence(k, FENCE_WGMMA_COMMIT, 0));
    ir_seq_append(k, body, fence(k, FENCE_WGMMA_WAIT, pending));
}

/* The software-pipelined fp8 consumer (kernels/gemm.tk): per iteration
 * part0's group, part1's group, each followed by wait_group 1; part0 is
 * promoted while part1 runs; wait_group 0; part1 promoted.  Only part0's
 * registers may be pinned after the second `wait_group 1` (part1's are
 * still being written: touching them would make ptxas serialise), none
 * after the first, and part1's after `wait_group 0`; ptxas accepts it
 * without the serialisation warning. */
Test(codegen_hopper, wait_one_keeps_a_group_in_flight) {
    Arena *arena = arena_new();
    Module *m = ir_new_module(arena, "sm_90a");
    Kernel *k = ir_new_kernel(m, "pair__tile");
    k->threads = 128;
    k->compute_threads = 128;
    Var *M = ir_new_var(k, "M", DT_I32, VAR_SYMBOL), *N = ir_new_var(k, "N", DT_I32, VAR_SYMBOL),
        *K = ir_new_var(k, "K", DT_I32, VAR_SYMBOL);
    k->symbols = arena_alloc(arena, 3 * sizeof(Var *));
    k->symbols[0] = M;
    k->symbols[1] = N;
    k->symbols[2] = K;
    k->nsymbols = 3;
    k->params = arena_alloc(arena, sizeof(Param));
    Buffer *d = tensor(k, "d", DT_F32, M, N);
    int64_t tile[3] = {1, 64, 128};
    Buffer *sa0 = shared(k, "sa0", DT_E4M3, 3, tile, 0, SHARED_ASYNC_SWIZZLE128);
    Buffer *sb0 = shared(k, "sb0", DT_E4M3, 3, tile, 8192, SHARED_ASYNC_SWIZZLE128);
    Buffer *sa1 = shared(k, "sa1", DT_E4M3, 3, tile, 16384, SHARED_ASYNC_SWIZZLE128);
    Buffer *sb1 = shared(k, "sb1", DT_E4M3, 3, tile, 24576, SHARED_ASYNC_SWIZZLE128);
    k->shared_bytes = 32768;
    Buffer *acc = local(k, k->body, "acc", DT_F32, 32);
    Buffer *part0 = local(k, k->body, "part0", DT_F32, 32);
    Buffer *part1 = local(k, k->body, "part1", DT_F32, 32);
    for (int i = 0; i < 32; i++)
        ir_seq_append(k, k->body, store1(k, acc, i32(k, i), ir_float(k, DT_F32, 0.0)));
    Stmt *loop = ir_new_stmt(k, STMT_FOR, k->loc);
    loop->u.loop.var = ir_new_var(k, "kb", DT_I32, VAR_LOOP);
    loop->u.loop.begin = i32(k, 0);
    loop->u.loop.end = ir_var(k, K);
    loop->u.loop.step = 1;
    loop->u.loop.kind = LOOP_SERIAL;
    loop->u.loop.body = seq(k);
    Stmt *body = loop->u.loop.body;
    group(k, body, sa0, sb0, part0, 1);
    group(k, body, sa1, sb1, part1, 1);
    accumulate(k, body, acc, part0);
    ir_seq_append(k, body, fence(k, FENCE_WGMMA_WAIT, 0));
    accumulate(k, body, acc, part1);
    ir_seq_append(k, k->body, loop);
    for (int i = 0; i < 32; i++) {
        Stmt *s = ir_new_stmt(k, STMT_STORE, k->loc);
        s->u.store.buffer = d;
        s->u.store.indices = arena_alloc(arena, 2 * sizeof(Expr *));
        s->u.store.indices[0] = tid(k);
        s->u.store.indices[1] = i32(k, i);
        Expr *index = i32(k, i);
        s->u.store.value = ir_load(k, acc, &index, NULL);
        ir_seq_append(k, k->body, s);
    }

    char *ptx = compile(m, CODEGEN_PTX);
    const char *wait1 = "wgmma.wait_group.sync.aligned \t1;";
    const char *wait0 = "wgmma.wait_group.sync.aligned \t0;";
    const char *pin = "// begin inline asm\n\t// end inline asm";
    cr_assert_eq(occurrences(ptx, wait1), 2, "%s", ptx);
    cr_assert_eq(occurrences(ptx, wait0), 1, "%s", ptx);
    const char *first = strstr(ptx, wait1), *second = strstr(first + 1, wait1);
    const char *last = strstr(ptx, wait0);
    cr_assert(second && last && second < last, "%s", ptx);
    /* nothing completes at the first wait (part0 is the newest group) */
    const char *pin1 = strstr(first, pin);
    cr_assert(pin1 && pin1 > second, "a pin before part1's group:\n%s", ptx);
    /* part0 after the second, part1 after wait_group 0 */
    cr_assert_lt(pin1, last, "%s", ptx);
    cr_assert(strstr(last, pin), "no pin after wait_group 0:\n%s", ptx);
    expect_no_local_memory(ptx);
    free(ptx);
    arena_free(arena);
}

/* ---- stores before a wait are fenced ----------------------------------- */

/* The constraint string of an empty asm over `count` tied operands of
 * register class `letter`: "=f,=f,...,0,1,...". */
static char *tied_constraints(int count, char letter) {
    char *text = calloc(1, (size_t)count * 8 + 1);
    cr_assert_not_null(text);
    for (int i = 0; i < count; i++)
        sprintf(text + strlen(text), "%s=%c", i ? "," : "", letter);
    for (int i = 0; i < count; i++) sprintf(text + strlen(text), ",%d", i);
    return text;
}

/* Stores to LOCAL arrays between a wgmma group and the wait for it (acc
 * doubled, an i32 counter array) go through one empty asm per array right
 * before that wait, f32 as "+f", i32 as "+r", so LLVM cannot sink their
 * computation below it; stores before the group's wgmmas (the zero fill)
 * are outside the window: nothing precedes the first wait.  ptxas still
 * takes the kernel without local memory. */
Test(codegen_hopper, stores_before_a_wait_are_fenced) {
    Arena *arena = arena_new();
    Module *m = ir_new_module(arena, "sm_90a");
    Kernel *k = ir_new_kernel(m, "fenced__tile");
    k->threads = 128;
    k->compute_threads = 128;
    Var *M = ir_new_var(k, "M", DT_I32, VAR_SYMBOL), *N = ir_new_var(k, "N", DT_I32, VAR_SYMBOL);
    k->symbols = arena_alloc(arena, 2 * sizeof(Var *));
    k->symbols[0] = M;
    k->symbols[1] = N;
    k->nsymbols = 2;
    k->params = arena_alloc(arena, 2 * sizeof(Param));
    Buffer *d = tensor(k, "d", DT_F32, M, N);
    Buffer *counts = tensor(k, "counts", DT_I32, M, N);
    int64_t tile[3] = {1, 64, 128};
    Buffer *sa = shared(k, "sa", DT_E4M3, 3, tile, 0, SHARED_ASYNC_SWIZZLE128);
    Buffer *sb = shared(k, "sb", DT_E4M3, 3, tile, 8192, SHARED_ASYNC_SWIZZLE128);
    k->shared_bytes = 16384;
    Buffer *acc = local(k, k->body, "acc", DT_F32, 32);
    Buffer *part = local(k, k->body, "part", DT_F32, 32);
    Buffer *count = local(k, k->body, "count", DT_I32, 4);
    for (int i = 0; i < 32; i++) /* before the wgmmas: not fenced */
        ir_seq_append(k, k->body, store1(k, acc, i32(k, i), ir_var(k, M)));
    group(k, k->body, sa, sb, part, 1);
    for (int i = 0; i < 32; i++) { /* while the group runs: fenced */
        Expr *index = i32(k, i);
        Expr *twice = bin(k, BIN_MUL, ir_load(k, acc, &index, NULL), ir_float(k, DT_F32, 2.0));
        ir_seq_append(k, k->body, store1(k, acc, i32(k, i), twice));
    }
    for (int i = 0; i < 4; i++)
        ir_seq_append(k, k->body, store1(k, count, i32(k, i), bin(k, BIN_MUL, tid(k), i32(k, i + 1))));
    ir_seq_append(k, k->body, fence(k, FENCE_WGMMA_WAIT, 0));
    accumulate(k, k->body, acc, part);
    for (int i = 0; i < 32; i++) {
        Stmt *s = ir_new_stmt(k, STMT_STORE, k->loc);
        Buffer *target = i < 4 ? counts : d;
        Buffer *source = i < 4 ? count : acc;
        s->u.store.buffer = target;
        s->u.store.indices = arena_alloc(arena, 2 * sizeof(Expr *));
        s->u.store.indices[0] = tid(k);
        s->u.store.indices[1] = i32(k, i);
        Expr *index = i32(k, i);
        s->u.store.value = ir_load(k, source, &index, NULL);
        ir_seq_append(k, k->body, s);
        if (i < 4) { /* and acc[i] too */
            Stmt *t = ir_new_stmt(k, STMT_STORE, k->loc);
            *t = *s;
            t->u.store.buffer = d;
            t->u.store.value = ir_load(k, acc, &index, NULL);
            ir_seq_append(k, k->body, t);
        }
    }

    char *llvm = compile(m, CODEGEN_LLVM_IR);
    const char *wait1 = strstr(llvm, "wgmma.wait_group.sync.aligned(i64 1)");
    const char *wait0 = strstr(llvm, "wgmma.wait_group.sync.aligned(i64 0)");
    cr_assert(wait1 && wait0 && wait1 < wait0, "%s", llvm);
    char *floats = tied_constraints(32, 'f'), *ints = tied_constraints(4, 'r');
    const char *empty = "asm sideeffect \"\"";
    const char *first_asm = strstr(llvm, empty);
    cr_assert(first_asm && first_asm > wait1, "an empty asm before the first wait:\n%s", llvm);
    const char *f = strstr(wait1, floats), *r = strstr(wait1, ints);
    cr_assert(f && f < wait0, "acc's stores are not fenced before wait_group 0:\n%s", llvm);
    cr_assert(r && r < wait0, "count's stores are not fenced before wait_group 0:\n%s", llvm);
    /* after the wait: part's pin, and nothing else fenced */
    const char *pin = strstr(wait0, floats);
    cr_assert(pin, "part is not pinned after wait_group 0:\n%s", llvm);
    cr_assert_null(strstr(pin + 1, empty), "a second asm after wait_group 0:\n%s", llvm);
    free(floats);
    free(ints);
    free(llvm);

    char *ptx = compile(m, CODEGEN_PTX);
    expect_no_local_memory(ptx);
    free(ptx);
    arena_free(arena);
}

/* ---- the TMA-store epilogue (kernels/gemm_bf16_store.tk) ---------------- */

/* The PTX tkc makes of a library file (the front end and every pass: the
 * epilogue's shape comes from lower_tma and insert_barriers). */
static char *library_ptx(const char *file) {
    char dir[] = "/tmp/test_codegen_hopper-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char path[128], command[1024];
    snprintf(path, sizeof path, "%s/k.ptx", dir);
    snprintf(command, sizeof command, "%s %s/%s -I %s -o %s --emit=ptx > %s/log 2>&1",
             TKC_PATH, TK_SOURCE_DIR, file, TK_SOURCE_DIR, path, dir);
    cr_assert_eq(system(command), 0, "tkc failed on %s", file);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = calloc(1, (size_t)size + 1);
    cr_assert_eq(fread(text, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    snprintf(command, sizeof command, "rm -rf %s", dir);
    cr_assert_eq(system(command), 0);
    return text;
}

#define BULK_STORE "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group"
#define STORE_WAIT "cp.async.bulk.wait_group.read \t0"

/* One bulk group of the four 128 x 64 boxes per tile; thread 0 waits for
 * it to read the tile only before the next tile's writes (after the K
 * loop's last wgmma) and after the tile loop, so the group drains while
 * the next K loop runs.  The accumulator reaches shared memory as 64
 * 4-byte stores per thread (no st.global at all), before the proxy fence
 * and the named barrier that precede the stores. */
Test(codegen_hopper, tma_store_epilogue) {
    char *ptx = library_ptx("kernels/gemm_bf16_store.tk");
    char *full = tkc_test_entry(ptx, "gemm_bf16_persistent_store__default");
    cr_assert_eq(occurrences(full, BULK_STORE), 4, "%s", full);
    cr_assert_eq(occurrences(full, "cp.async.bulk.commit_group"), 1, "%s", full);
    cr_assert_eq(occurrences(full, STORE_WAIT), 2, "%s", full);
    cr_assert_eq(occurrences(full, "st.shared.b32"), 64, "%s", full);
    cr_assert_null(strstr(full, "st.global"), "%s", full);
    const char *wgmma = strstr(full, "wgmma.wait_group.sync.aligned");
    const char *wait = strstr(full, STORE_WAIT);
    const char *write = strstr(full, "st.shared.b32");
    const char *fence = strstr(full, "fence.proxy.async.shared::cta");
    const char *store = strstr(full, BULK_STORE);
    const char *commit = strstr(full, "cp.async.bulk.commit_group");
    cr_assert(wgmma && wgmma < wait && wait < write && write < fence && fence < store &&
                  store < commit,
              "the epilogue is out of order:\n%s", full);
    cr_assert(strstr(fence, "bar.sync \t1, 256") < store, "no named barrier before the stores");
    /* the tail wait: after the commit, nothing but the loop's end */
    const char *tail = strstr(commit, STORE_WAIT);
    cr_assert(tail && !strstr(commit, "st.shared.b32"), "%s", full);

    /* the half tile: two groups of two boxes; the second half waits for
     * the first group, the next tile for the second */
    char *half = tkc_test_entry(ptx, "gemm_bf16_persistent_store_half__default");
    cr_assert_eq(occurrences(half, BULK_STORE), 4, "%s", half);
    cr_assert_eq(occurrences(half, "cp.async.bulk.commit_group"), 2, "%s", half);
    cr_assert_eq(occurrences(half, STORE_WAIT), 3, "%s", half);
    cr_assert_eq(occurrences(half, "st.shared.b32"), 64, "%s", half);
    cr_assert_null(strstr(half, "st.global"), "%s", half);
    expect_no_local_memory(ptx);
    free(full);
    free(half);
    free(ptx);
}
