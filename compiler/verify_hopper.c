/*
 * verify_hopper.c -- the verifier's rules for the Hopper nodes
 * (docs/hopper.md): gemm, mbarrier, tma, wgmma and fence statements,
 * pipelined loops, warp-specialised IFs, named barriers, the TMA clauses
 * of a copy, MMA layouts, the async kinds of shared buffers and the
 * kernel's Hopper fields (compute_threads, min_blocks, hints, tensor maps).
 *
 * verify.c walks the tree and calls in here for those nodes; scoping and
 * expression typing stay there (verify_expr, verify_region).  The rules are
 * structural: what codegen and the later passes rely on (an mbarrier is
 * one u64 element of an mbarrier buffer, a wgmma shape exists in PTX, a
 * tma has one coordinate per dimension of its map), not what makes a
 * program fast.
 */
#include "verify.h"

/* Extents of the region's non-singleton dimensions; returns their count. */
static int region_shape(const Region *r, int64_t shape[IR_MAX_RANK])
{
    int n = 0;
    for (int d = 0; r->buffer && d < r->buffer->rank && d < IR_MAX_RANK; d++)
        if (r->extent[d] > 0)
            shape[n++] = r->extent[d];
    return n;
}

static int64_t product(const int64_t *values, int count)
{
    int64_t p = 1;
    for (int i = 0; i < count; i++)
        p *= values[i];
    return p;
}

/* Elements of a buffer with a constant shape, -1 otherwise. */
static int64_t const_elements(const Buffer *b)
{
    int64_t n = 1;
    for (int d = 0; d < b->rank && d < IR_MAX_RANK; d++) {
        if (!b->shape[d] || b->shape[d]->kind != EXPR_INT)
            return -1;
        n *= b->shape[d]->u.int_value;
    }
    return n;
}

/* r is one element of a shared u64 mbarrier buffer. */
static void check_mbarrier_element(Verifier *v, const Region *r, const char *what, Loc loc)
{
    verify_region(v, r, loc);
    const Buffer *b = r->buffer;
    if (!b)
        return;
    if (b->scope != SCOPE_SHARED || b->dtype != DT_U64 || b->async_kind != SHARED_ASYNC_MBARRIER)
        verify_report(v, loc, "%s @%s is not a shared u64 mbarrier buffer (%s %s, %s)", what,
                      buffer_name(b), ir_scope_name(b->scope), dname(b->dtype),
                      ir_async_kind_name(b->async_kind));
    for (int d = 0; d < b->rank && d < IR_MAX_RANK; d++)
        if (r->extent[d] != 0) {
            verify_report(v, loc, "%s @%s: not a single element (extent %lld on dim %d)", what,
                          buffer_name(b), (long long)r->extent[d], d);
            break;
        }
}

static void check_scope(Verifier *v, const Buffer *b, Scope want, const char *what, Loc loc)
{
    if (b && b->scope != want)
        verify_report(v, loc, "%s @%s is %s, not %s", what, buffer_name(b),
                      ir_scope_name(b->scope), ir_scope_name(want));
}

/* ---- statements -------------------------------------------------------------------- */

static void check_gemm(Verifier *v, const Stmt *s, Loc loc)
{
    verify_tile_level(v, s);
    verify_region(v, &s->u.gemm.a, loc);
    verify_region(v, &s->u.gemm.b, loc);
    const Buffer *a = s->u.gemm.a.buffer, *b = s->u.gemm.b.buffer, *c = s->u.gemm.c;
    verify_buffer_use(v, c, loc);
    if (s->u.gemm.wait < 0 || s->u.gemm.wait > 7)
        verify_report(v, loc, "gemm wait %d (0..7 groups in flight)", s->u.gemm.wait);
    if (!a || !b || !c)
        return;
    if (a->scope != SCOPE_SHARED && a->scope != SCOPE_FRAGMENT)
        verify_report(v, loc, "gemm A @%s is %s, not shared or a fragment", buffer_name(a),
                      ir_scope_name(a->scope));
    check_scope(v, b, SCOPE_SHARED, "gemm B", loc);
    check_scope(v, c, SCOPE_FRAGMENT, "gemm C", loc);
    if (!ir_dtype_mma_operands(a->dtype, b->dtype))
        verify_report(v, loc, "gemm of %s x %s (bf16, f16 or fp8 pairs)", dname(a->dtype),
                      dname(b->dtype));
    if (c->dtype != DT_F32 && c->dtype != DT_F16)
        verify_report(v, loc, "gemm C @%s has dtype %s, not f32 or f16", buffer_name(c),
                      dname(c->dtype));
    int64_t shape_a[IR_MAX_RANK], shape_b[IR_MAX_RANK];
    int rank_a = region_shape(&s->u.gemm.a, shape_a), rank_b = region_shape(&s->u.gemm.b, shape_b);
    if (rank_a != 2 || rank_b != 2 || c->rank != 2) {
        verify_report(v, loc, "gemm operands are not matrices (ranks %d, %d, %d)", rank_a,
                      rank_b, c->rank);
        return;
    }
    int64_t m = shape_a[s->u.gemm.transpose_a ? 1 : 0], ka = shape_a[s->u.gemm.transpose_a ? 0 : 1];
    int64_t kb = shape_b[s->u.gemm.transpose_b ? 1 : 0], n = shape_b[s->u.gemm.transpose_b ? 0 : 1];
    bool c_const = c->shape[0] && c->shape[0]->kind == EXPR_INT && c->shape[1] &&
                   c->shape[1]->kind == EXPR_INT;
    if (ka != kb || (c_const && (c->shape[0]->u.int_value != m || c->shape[1]->u.int_value != n)))
        verify_report(v, loc, "gemm shapes disagree: A gives [%lld, %lld], B [%lld, %lld]",
                      (long long)m, (long long)ka, (long long)kb, (long long)n);
}

/* The CTAs of the kernel's cluster (1 without one; -1 when a dimension
 * is out of 1..8, which verify_kernel_hopper reports). */
static int cluster_size(const Kernel *k)
{
    int size = 1;
    for (int d = 0; d < 3; d++) {
        if (k->cluster[d] < 1 || k->cluster[d] > 8)
            return -1;
        size *= k->cluster[d];
    }
    return size;
}

static void check_mbarrier(Verifier *v, const Stmt *s, Loc loc)
{
    MbarrierOp op = s->u.mbarrier.op;
    if ((unsigned)op >= MBAR_COUNT) {
        verify_report(v, loc, "unknown mbarrier op %d", (int)op);
        return;
    }
    check_mbarrier_element(v, &s->u.mbarrier.bar, "mbarrier", loc);
    if (op == MBAR_ARRIVE_CLUSTER && cluster_size(v->k) < 2)
        verify_report(v, loc, "mbarrier arrive_cluster in a kernel without a cluster");
    const Expr *value = s->u.mbarrier.value;
    if (!ir_mbarrier_op_has_value(op)) {
        if (value)
            verify_report(v, loc, "mbarrier %s takes no value", ir_mbarrier_op_name(op));
        return;
    }
    if (!value) {
        verify_report(v, loc, "mbarrier %s has no value", ir_mbarrier_op_name(op));
        return;
    }
    verify_scalar(v, value, DT_VOID, "mbarrier value");
    if (value->kind == EXPR_INT && op != MBAR_WAIT && value->u.int_value < 1)
        verify_report(v, loc, "mbarrier %s of %lld", ir_mbarrier_op_name(op),
                      (long long)value->u.int_value);
}

/* A multicast TMA load (copy or tma): the box is shared by every CTA of
 * the cluster and split into that many slices along global dim `dim`, so
 * the tensor map's box is one slice: the dims before `dim` are 1 (each
 * slice is one contiguous run of shared memory). */
static void check_multicast(Verifier *v, int ctas, int dim, const TensorMap *map, bool store,
                            Loc loc)
{
    if (ctas == 0)
        return;
    if (ctas < 2 || ctas != cluster_size(v->k))
        verify_report(v, loc, "multicast to %d CTAs in a cluster of %d (all of it, at least 2)",
                      ctas, cluster_size(v->k));
    if (store)
        verify_report(v, loc, "a TMA store cannot multicast");
    if (!map)
        return;
    if (dim < 0 || dim >= map->rank) {
        verify_report(v, loc, "multicast dim %d of a rank-%d tensor map", dim, map->rank);
        return;
    }
    for (int d = 0; d < dim; d++)
        if (map->box[d] != 1)
            verify_report(v, loc, "multicast along dim %d, but the box is %lld wide on dim %d",
                          dim, (long long)map->box[d], d);
}

/* A tensor map index of this kernel, or report. */
static const TensorMap *tensor_map_at(Verifier *v, int index, Loc loc)
{
    if (index < 0 || index >= v->k->ntensor_maps) {
        verify_report(v, loc, "tensor map %d out of range (%d maps)", index, v->k->ntensor_maps);
        return NULL;
    }
    return &v->k->tensor_maps[index];
}

static void check_tma(Verifier *v, const Stmt *s, Loc loc)
{
    verify_region(v, &s->u.tma.smem, loc);
    check_scope(v, s->u.tma.smem.buffer, SCOPE_SHARED, "tma shared side", loc);
    const TensorMap *map = tensor_map_at(v, s->u.tma.tensor_map, loc);
    int rank = map && map->rank >= 0 && map->rank <= IR_MAX_RANK ? map->rank : 0;
    for (int d = 0; d < IR_MAX_RANK; d++) {
        const Expr *coord = s->u.tma.coords[d];
        if (d < rank && !coord)
            verify_report(v, loc, "tma: coordinate %d is missing (map rank %d)", d, rank);
        else if (d < rank)
            verify_scalar(v, coord, DT_VOID, "tma coordinate");
        else if (map && coord)
            verify_report(v, loc, "tma: coordinate %d past the map's rank %d", d, rank);
    }
    int64_t shape[IR_MAX_RANK];
    int n = region_shape(&s->u.tma.smem, shape);
    /* a multicast box is the tensor map's box (one slice) times the CTAs */
    int64_t slices = s->u.tma.multicast > 1 ? s->u.tma.multicast : 1;
    if (map && s->u.tma.smem.buffer && product(shape, n) != product(map->box, rank) * slices)
        verify_report(v, loc, "tma: shared region of %lld elements, the box %lld x %lld",
                      (long long)product(shape, n), (long long)product(map->box, rank),
                      (long long)slices);
    check_multicast(v, s->u.tma.multicast, s->u.tma.multicast_dim, map, s->u.tma.store, loc);
    if (s->u.tma.bar.buffer)
        check_mbarrier_element(v, &s->u.tma.bar, "tma barrier", loc);
    else if (!s->u.tma.store)
        verify_report(v, loc, "tma load without an mbarrier");
}

static void check_wgmma(Verifier *v, const Stmt *s, Loc loc)
{
    int m = s->u.wgmma.m, n = s->u.wgmma.n, kk = s->u.wgmma.k;
    DType ab = s->u.wgmma.a_dtype, bt = s->u.wgmma.b_dtype, acc_dtype = s->u.wgmma.acc_dtype;
    if (m != 64 || n < 8 || n > 256 || n % 8 != 0 || (kk != 16 && kk != 32))
        verify_report(v, loc, "wgmma m%dn%dk%d is not a Hopper shape (m64, n 8..256 by 8, "
                      "k 16 or 32)", m, n, kk);
    if (!verify_dtype_ok(ab) || !verify_dtype_ok(bt) || !ir_dtype_mma_operands(ab, bt))
        verify_report(v, loc, "wgmma operand dtypes %s x %s (bf16 x bf16, f16 x f16, "
                      "e4m3/e5m2 x e4m3/e5m2)", dname(ab), dname(bt));
    else if (kk * ir_dtype_bits(ab) != 256)
        verify_report(v, loc, "wgmma k%d with %s operands (k is 32 bytes: 16 for 16-bit, 32 "
                      "for 8-bit types)", kk, dname(ab));
    if (acc_dtype != DT_F32 && acc_dtype != DT_F16)
        verify_report(v, loc, "wgmma accumulates in %s, not f32 or f16", dname(acc_dtype));
    verify_region(v, &s->u.wgmma.a, loc);
    verify_region(v, &s->u.wgmma.b, loc);
    const Buffer *a = s->u.wgmma.a.buffer, *b = s->u.wgmma.b.buffer, *acc = s->u.wgmma.acc;
    if (a && a->scope != SCOPE_SHARED && a->scope != SCOPE_LOCAL && a->scope != SCOPE_FRAGMENT)
        verify_report(v, loc, "wgmma A @%s is %s (shared, or registers)", buffer_name(a),
                      ir_scope_name(a->scope));
    if (s->u.wgmma.transpose_a && a && a->scope != SCOPE_SHARED)
        verify_report(v, loc, "wgmma: a register A operand cannot be transposed");
    check_scope(v, b, SCOPE_SHARED, "wgmma B", loc);
    if (a && a->dtype != ab)
        verify_report(v, loc, "wgmma A @%s has dtype %s, the wgmma %s", buffer_name(a),
                      dname(a->dtype), dname(ab));
    if (b && b->dtype != bt)
        verify_report(v, loc, "wgmma B @%s has dtype %s, the wgmma %s", buffer_name(b),
                      dname(b->dtype), dname(bt));
    verify_buffer_use(v, acc, loc);
    if (acc) {
        /* lower_gemm runs before lower_parallel: the accumulator is still
         * the MMA fragment then, its LOCAL array afterwards */
        int64_t registers = -1;
        if (acc->scope == SCOPE_LOCAL)
            registers = const_elements(acc);
        else if (acc->scope == SCOPE_FRAGMENT && acc->layout &&
                 acc->layout->kind == LAYOUT_MMA)
            registers = acc->layout->slots * acc->layout->extent[1] / 2;
        else
            verify_report(v, loc, "wgmma accumulator @%s is neither local nor an MMA fragment",
                          buffer_name(acc));
        if (acc->dtype != acc_dtype)
            verify_report(v, loc, "wgmma accumulator @%s has dtype %s, the wgmma %s",
                          buffer_name(acc), dname(acc->dtype), dname(acc_dtype));
        if (s->u.wgmma.acc_offset < 0 ||
            (registers >= 0 && s->u.wgmma.acc_offset + n / 2 > registers))
            verify_report(v, loc, "wgmma accumulator registers [%lld, %lld) past the %lld of @%s",
                          (long long)s->u.wgmma.acc_offset,
                          (long long)(s->u.wgmma.acc_offset + n / 2), (long long)registers,
                          buffer_name(acc));
    }
    if (!s->u.wgmma.scale_d)
        verify_report(v, loc, "wgmma has no scale_d");
    else
        verify_scalar(v, s->u.wgmma.scale_d, DT_BOOL, "wgmma scale_d");
}

static void check_fence(Verifier *v, const Stmt *s, Loc loc)
{
    FenceOp op = s->u.fence.op;
    if ((unsigned)op >= FENCE_COUNT) {
        verify_report(v, loc, "unknown fence %d", (int)op);
        return;
    }
    int64_t value = s->u.fence.value;
    const char *name = ir_fence_op_name(op);
    if (op == FENCE_SETMAXNREG_INC || op == FENCE_SETMAXNREG_DEC) {
        if (value < 24 || value > 256 || value % 8 != 0)
            verify_report(v, loc, "fence %s %lld (24..256, a multiple of 8)", name,
                          (long long)value);
    } else if (ir_fence_op_has_value(op)) {
        if (value < 0 || value > 7)
            verify_report(v, loc, "fence %s %lld (0..7 pending groups)", name, (long long)value);
    } else if (value != 0) {
        verify_report(v, loc, "fence %s takes no value (has %lld)", name, (long long)value);
    }
    if (op == FENCE_CLUSTER_SYNC && cluster_size(v->k) < 2)
        verify_report(v, loc, "fence cluster_sync in a kernel without a cluster");
}

void verify_hopper_stmt(Verifier *v, const Stmt *s)
{
    Loc loc = v->stmt_loc;
    switch (s->kind) {
    case STMT_GEMM: check_gemm(v, s, loc); break;
    case STMT_MBARRIER: check_mbarrier(v, s, loc); break;
    case STMT_TMA: check_tma(v, s, loc); break;
    case STMT_WGMMA: check_wgmma(v, s, loc); break;
    case STMT_FENCE: check_fence(v, s, loc); break;
    default: break;
    }
}

/* ---- clauses of the classic statements ------------------------------------------------ */

void verify_copy_clauses(Verifier *v, const Stmt *copy)
{
    Loc loc = v->stmt_loc;
    if ((unsigned)copy->u.copy.tma > HINT_ON)
        verify_report(v, loc, "copy: bad tma hint %d", (int)copy->u.copy.tma);
    if ((unsigned)copy->u.copy.multicast_hint > HINT_ON)
        verify_report(v, loc, "copy: bad multicast hint %d", (int)copy->u.copy.multicast_hint);
    if (copy->u.copy.multicast && copy->u.copy.tensor_map == -1)
        verify_report(v, loc, "copy: multicast without a tensor map");
    if (copy->u.copy.barrier.buffer)
        check_mbarrier_element(v, &copy->u.copy.barrier, "copy barrier", loc);
    if (copy->u.copy.tensor_map == -1)
        return;
    const TensorMap *map = tensor_map_at(v, copy->u.copy.tensor_map, loc);
    const Buffer *src = copy->u.copy.src.buffer, *dst = copy->u.copy.dst.buffer;
    if (!map || !src || !dst)
        return;
    const Buffer *shared = map->global == src ? dst : map->global == dst ? src : NULL;
    if (!shared)
        verify_report(v, loc, "copy: tensor map %d maps @%s, not a side of the copy",
                      copy->u.copy.tensor_map, buffer_name(map->global));
    else
        check_scope(v, shared, SCOPE_SHARED, "TMA copy's other side", loc);
    check_multicast(v, copy->u.copy.multicast, copy->u.copy.multicast_dim, map,
                    map->global == dst, loc);
}

void verify_pipelined_loop(Verifier *v, const Stmt *loop)
{
    Loc loc = v->stmt_loc;
    verify_tile_level(v, loop);
    if (loop->u.loop.stages < 1)
        verify_report(v, loc, "pipelined loop with %d stages", loop->u.loop.stages);
    if ((unsigned)loop->u.loop.role >= PIPE_COUNT)
        verify_report(v, loc, "pipelined loop with role %d", (int)loop->u.loop.role);
    if (loop->u.loop.pipe_id < 0)
        verify_report(v, loc, "pipelined loop with pipe %d", loop->u.loop.pipe_id);
    if (loop->u.loop.release_lag < 0 || loop->u.loop.release_lag > 1)
        verify_report(v, loc, "pipelined loop with release lag %d (0 or 1)",
                      loop->u.loop.release_lag);
    else if (loop->u.loop.release_lag == 1 && loop->u.loop.stages < 2)
        verify_report(v, loc, "pipelined loop with release lag 1 and %d stage%s "
                      "(a lag needs 2 or more)", loop->u.loop.stages,
                      loop->u.loop.stages == 1 ? "" : "s");
}

/* Named barriers, and where barriers may stand: the producer warpgroup of
 * a warp-specialised split runs alone (no barrier can complete there but
 * a warp's own), the consumers must use a named barrier over their
 * threads (bar.sync 0 would wait for the producer forever). */
void verify_barrier(Verifier *v, const Stmt *barrier)
{
    int id = barrier->u.barrier.id, threads = barrier->u.barrier.threads;
    Loc loc = v->stmt_loc;
    bool warp = barrier->u.barrier.warp_only;
    if (v->side == SIDE_PRODUCER && !warp)
        verify_report(v, loc, "a block or named barrier in the producer branch of a "
                      "warp-specialised if");
    else if (v->side == SIDE_CONSUMER && !warp && id == 0)
        verify_report(v, loc, "bar.sync 0 in the consumer branch of a warp-specialised if "
                      "(use a named barrier over the compute threads)");
    if (id == 0 && threads == 0)
        return;
    if (barrier->u.barrier.warp_only)
        verify_report(v, loc, "a warp barrier cannot be named");
    if (id < 1 || id > 15)
        verify_report(v, loc, "named barrier %d (1..15; 0 is the block's)", id);
    if (threads < 32 || threads % 32 != 0 || threads > v->k->threads)
        verify_report(v, loc, "named barrier of %d threads (a multiple of 32, at most the "
                      "block's %d)", threads, v->k->threads);
}

void verify_warp_specialized_if(Verifier *v, const Stmt *s)
{
    if (!s->u.if_.else_body)
        verify_report(v, v->stmt_loc, "warp-specialised if has no consumer (else) branch");
    if (v->side != SIDE_BLOCK)
        verify_report(v, v->stmt_loc, "warp-specialised if inside another one");
}

/* ---- layouts, buffers, kernels ---------------------------------------------------------- */

void verify_mma_layout(Verifier *v, const Layout *layout, Loc loc)
{
    int groups = layout->warpgroups;
    if (layout->rank != 2 || layout->reduced || groups < 1) {
        verify_report(v, loc, "malformed MMA layout (rank %d, warpgroups %d%s)", layout->rank,
                      groups, layout->reduced ? ", reduced" : "");
        return;
    }
    int64_t m = layout->extent[0], n = layout->extent[1];
    if (m < 1 || m % (64 * groups) != 0 || n < 8 || n % 8 != 0)
        verify_report(v, loc, "MMA layout [%lld, %lld]: M must be a multiple of 64*%d and N "
                      "of 8", (long long)m, (long long)n, groups);
    else if (layout->slots != m / (64 * groups))
        verify_report(v, loc, "MMA layout [%lld, %lld] over %d warpgroups has %lld slots, "
                      "not %lld", (long long)m, (long long)n, groups, (long long)layout->slots,
                      (long long)(m / (64 * groups)));
    if (layout->threads != 128 * groups || layout->vec != 2)
        verify_report(v, loc, "MMA layout: threads %d, vec %d (want %d threads, vec 2)",
                      layout->threads, layout->vec, 128 * groups);
}

void verify_async_buffer(Verifier *v, const Buffer *b, Loc loc)
{
    if (b->async_kind < SHARED_ASYNC_NONE || b->async_kind > SHARED_ASYNC_MBARRIER) {
        verify_report(v, loc, "@%s: bad async kind %d", buffer_name(b), b->async_kind);
        return;
    }
    if ((b->async_kind != SHARED_ASYNC_NONE || b->mbarrier_synchronized) &&
        b->scope != SCOPE_SHARED)
        verify_report(v, loc, "@%s is %s but has an async kind or is mbarrier-synchronized",
                      buffer_name(b), ir_scope_name(b->scope));
    if (b->async_kind == SHARED_ASYNC_MBARRIER && b->dtype != DT_U64)
        verify_report(v, loc, "mbarrier buffer @%s has dtype %s, not u64", buffer_name(b),
                      dname(b->dtype));
}

void verify_kernel_hopper(Verifier *v)
{
    Kernel *k = v->k;
    Loc loc = k->loc;
    /* compute_threads is always set (ir_new_kernel, lower_ast, ir_parse);
     * only warp_specialize makes it differ, by one producer warpgroup */
    if (k->compute_threads != k->threads &&
        !(k->compute_threads >= 1 && k->compute_threads + 128 == k->threads))
        verify_report(v, loc, "compute_threads %d with %d threads (equal, or 128 fewer)",
                      k->compute_threads, k->threads);
    if (k->min_blocks < 0)
        verify_report(v, loc, "min_blocks %d", k->min_blocks);
    /* the portable cluster size limit is 8 CTAs */
    for (int d = 0; d < 3; d++)
        if (k->cluster[d] < 1 || k->cluster[d] > 8)
            verify_report(v, loc, "cluster dimension %d is %d (1..8)", d, k->cluster[d]);
    if (cluster_size(k) > 8)
        verify_report(v, loc, "a cluster of %d CTAs (at most 8)", cluster_size(k));
    if ((unsigned)k->hint_tma > HINT_ON || (unsigned)k->hint_warp_specialize > HINT_ON)
        verify_report(v, loc, "bad hints (tma %d, warp_specialize %d)", (int)k->hint_tma,
                      (int)k->hint_warp_specialize);
    if ((unsigned)k->load_cache >= CACHE_COUNT || (unsigned)k->store_cache >= CACHE_COUNT)
        verify_report(v, loc, "bad cache hints (load %d, store %d)", (int)k->load_cache,
                      (int)k->store_cache);
    for (int i = 0; i < k->buffers.count; i++) {
        const Buffer *b = k->buffers.items[i];
        if (b->has_cache_hint && (b->scope != SCOPE_GLOBAL ||
                                  (unsigned)b->cache_hint >= CACHE_COUNT))
            verify_report(v, b->loc, "@%s: cache hint %d on a %s buffer", b->name,
                          (int)b->cache_hint, ir_scope_name(b->scope));
    }
    if (k->ntensor_maps > 0 && !k->tensor_maps) {
        verify_report(v, loc, "%d tensor maps but no table", k->ntensor_maps);
        return;
    }
    for (int i = 0; i < k->ntensor_maps; i++) {
        const TensorMap *map = &k->tensor_maps[i];
        const Buffer *g = map->global;
        if (!g || g->scope != SCOPE_GLOBAL || g->param_index < 0 ||
            g->param_index >= k->nparams || k->params[g->param_index].buffer != g) {
            verify_report(v, loc, "tensor map %d: @%s is not a tensor parameter", i,
                          buffer_name(g));
            continue;
        }
        if (map->rank != g->rank || map->rank < 1 || map->rank > 5) {
            verify_report(v, loc, "tensor map %d: rank %d for the rank-%d @%s (1..5)", i,
                          map->rank, g->rank, buffer_name(g));
            continue;
        }
        for (int d = 0; d < map->rank; d++)
            if (map->box[d] < 1 || map->box[d] > 256)
                verify_report(v, loc, "tensor map %d: box extent %lld (1..256)", i,
                              (long long)map->box[d]);
        int swizzle = map->swizzle_bytes;
        if (swizzle != 0 && swizzle != 32 && swizzle != 64 && swizzle != 128)
            verify_report(v, loc, "tensor map %d: swizzle %d (0, 32, 64, 128)", i, swizzle);
    }
}
