/*
 * codegen_async.c -- the thread-level Hopper statements to LLVM IR:
 * MBARRIER, TMA, WGMMA and FENCE (docs/hopper.md section 6).
 *
 * Everything here is an NVVM intrinsic (toolchain.md 4) except
 * wgmma.mma_async, which LLVM 22 has no intrinsic for and is inline asm.
 * The intrinsics and the asm have side effects, so LLVM keeps them in
 * program order with each other and with every shared-memory access.
 *
 *   mbarrier  init.shared / arrive.shared / arrive.expect.tx (scope and
 *             space cta) on the addrspace(3) address of the element; a
 *             wait is a loop around try.wait.parity, which itself blocks
 *             for a hardware time limit, so the loop rarely turns.
 *             arrive_cluster: bar.warp.sync, then lane r < C arrives on
 *             CTA r's barrier through mapa (inline asm; docs/hopper.md 11).
 *   tma       cp.async.bulk.tensor.{g2s,s2g}.tile.<rank>d with the
 *             tensor map parameter and the coordinates innermost first
 *             (the IR keeps them outermost first, like the box).  The
 *             shared side is the linear (unswizzled) address of the box
 *             origin: TMA swizzles by address bits itself.  A
 *             multicast load offsets coordinate and address by its
 *             slice (%cluster_ctarank) and sets the CTA mask.
 *   wgmma     one asm statement with n/2 "+f" accumulators taken from the
 *             LOCAL array at constant indices, so SROA turns the array
 *             into registers; operands are shared-memory descriptors
 *             computed here from the planned layout, or four .b32
 *             registers of A.  After `wgmma_wait N` the accumulators of
 *             every group but the newest N are passed through an empty
 *             asm (CUTLASS's warpgroup_fence_operand) so that no use of
 *             them is scheduled before the wait; those still in flight
 *             stay recorded for the wait that completes them.  Before a
 *             wait, the LOCAL elements stored since the previous wgmma,
 *             commit or wait (an fp8 promotion into its accumulator) go
 *             through such an asm too, so that LLVM cannot sink their
 *             computation below the wait, out of the window in which the
 *             tensor cores run.
 *   fence     one intrinsic each; cluster_sync is barrier.cluster
 *             arrive.release + wait.acquire in inline asm.
 *
 * Requires thread-level IR with shared memory planned; wgmma operands in
 * the 128-byte swizzled layout (SHARED_ASYNC_SWIZZLE128: rows of exactly
 * 128 bytes, swizzle_shift 0, base 1024-byte aligned).  Guarantees: bad
 * operands (shapes, dtypes, layouts a pass should not have produced) are
 * reported through cg_error, never handed to LLVM, whose errors here
 * would abort the process.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen_llvm.h"

/* Matrix descriptor fields (PTX ISA, "Matrix Descriptor Format"). */
#define DESC_SWIZZLE128 1ull       /* bits 62-63: 128-byte swizzle */
#define DESC_SWIZZLE_BYTES 128     /* one swizzled row */
#define DESC_ATOM_BYTES 1024       /* eight swizzled rows: the SBO */

static LLVMTypeRef i32_type(Codegen *cg) { return LLVMInt32TypeInContext(cg->context); }
static LLVMTypeRef i64_type(Codegen *cg) { return LLVMInt64TypeInContext(cg->context); }

static LLVMValueRef i64_const(Codegen *cg, uint64_t v) {
    return LLVMConstInt(i64_type(cg), v, 0);
}

static int element_bytes(DType t) { return (ir_dtype_bits(t) + 7) / 8; }

/* An integer expression as i32. */
static LLVMValueRef int_value(Codegen *cg, const Expr *e) {
    LLVMValueRef v = cg_expr(cg, e);
    return e->dtype == DT_I32 ? v : cg_convert(cg, v, e->dtype, DT_I32, 1, e->loc);
}

/* The addrspace(3) address of one mbarrier object (a u64 element). */
static LLVMValueRef barrier_address(Codegen *cg, const Region *bar, Loc loc) {
    const Buffer *b = bar->buffer;
    if (!b || b->scope != SCOPE_SHARED || ir_dtype_bits(b->dtype) != 64) {
        cg_error(cg, loc, "an mbarrier must be a 64-bit element of a shared buffer");
        return NULL;
    }
    LLVMValueRef index[IR_MAX_RANK];
    cg_region_start(cg, bar, index);
    return cg_shared_pointer(cg, cg_shared_offset(cg, b, index, true));
}

/* ---- mbarrier ---------------------------------------------------------- */

/* Calls an asm statement with side effects that returns nothing. */
static void call_asm_void(Codegen *cg, const char *text, const char *constraints,
                          LLVMValueRef *inputs, LLVMTypeRef *types, int ninputs) {
    LLVMTypeRef fn = LLVMFunctionType(LLVMVoidTypeInContext(cg->context), types,
                                      (unsigned)ninputs, 0);
    LLVMValueRef code = LLVMGetInlineAsm(fn, (char *)text, strlen(text), (char *)constraints,
                                         strlen(constraints), 1, 0, LLVMInlineAsmDialectATT, 0);
    LLVMBuildCall2(cg->builder, fn, code, inputs, (unsigned)ninputs, "");
}

/* The CTAs of the kernel's cluster. */
static int cluster_ctas(const Kernel *k) {
    return k->cluster[0] * k->cluster[1] * k->cluster[2];
}

/* arrive_cluster: the warp's lanes synchronise (so every lane's reads of
 * the slot are ordered before the release), then lane r arrives on the
 * barrier at the same offset in CTA rank r of the cluster (mapa).  The
 * arrive keeps its default .release.cta semantics, as CUTLASS's
 * ClusterBarrier does: what it orders is this CTA's own reads of its
 * slot before the peer's TMA overwrites it, and an explicit
 * .release.cluster costs a MEMBAR.ALL.GPU per release in SASS. */
static void emit_arrive_cluster(Codegen *cg, LLVMValueRef bar, Loc loc) {
    int ctas = cluster_ctas(cg->kernel);
    if (ctas < 2 || ctas > IR_WARP_SIZE) {
        cg_error(cg, loc, "mbarrier arrive_cluster needs a cluster of 2 to 32 CTAs, not %d",
                 ctas);
        return;
    }
    LLVMValueRef mask = cg_i32(cg, -1);
    cg_call_intrinsic(cg, "llvm.nvvm.bar.warp.sync", NULL, 0, &mask, 1);
    LLVMValueRef address = LLVMBuildTrunc(
        cg->builder, LLVMBuildPtrToInt(cg->builder, bar, i64_type(cg), ""), i32_type(cg), "");
    LLVMValueRef lane = cg_call_intrinsic(cg, "llvm.nvvm.read.ptx.sreg.laneid", NULL, 0,
                                          NULL, 0);
    char text[320];
    snprintf(text, sizeof text,
             "{\n\t.reg .pred arrive;\n\t.reg .b32 remote;\n\t"
             "setp.lt.u32 arrive, $1, %d;\n\t"
             "@arrive mapa.shared::cluster.u32 remote, $0, $1;\n\t"
             "@arrive mbarrier.arrive.shared::cluster.b64 _, [remote];\n\t}",
             ctas);
    LLVMValueRef inputs[2] = {address, lane};
    LLVMTypeRef types[2] = {i32_type(cg), i32_type(cg)};
    call_asm_void(cg, text, "r,r,~{memory}", inputs, types, 2);
}

/* Spins on try_wait.parity until the phase of `parity` has completed. */
static void emit_wait(Codegen *cg, LLVMValueRef bar, LLVMValueRef parity) {
    LLVMBasicBlockRef spin = cg_new_block(cg, "mbarrier.wait");
    LLVMBasicBlockRef done = cg_new_block(cg, "mbarrier.done");
    LLVMBuildBr(cg->builder, spin);
    LLVMPositionBuilderAtEnd(cg->builder, spin);
    LLVMValueRef args[2] = {bar, parity};
    LLVMValueRef ready = cg_call_intrinsic(
        cg, "llvm.nvvm.mbarrier.try.wait.parity.scope.cta.space.cta", NULL, 0, args, 2);
    LLVMBuildCondBr(cg->builder, ready, done, spin);
    LLVMPositionBuilderAtEnd(cg->builder, done);
}

void cg_mbarrier(Codegen *cg, const Stmt *s) {
    LLVMValueRef bar = barrier_address(cg, &s->u.mbarrier.bar, s->loc);
    if (!bar) return;
    MbarrierOp op = s->u.mbarrier.op;
    LLVMValueRef value = NULL;
    if (ir_mbarrier_op_has_value(op)) {
        if (!s->u.mbarrier.value) {
            cg_error(cg, s->loc, "mbarrier %s needs a value", ir_mbarrier_op_name(op));
            return;
        }
        value = int_value(cg, s->u.mbarrier.value);
    }
    switch (op) {
    case MBAR_INIT: {
        LLVMValueRef args[2] = {bar, value};
        cg_call_intrinsic(cg, "llvm.nvvm.mbarrier.init.shared", NULL, 0, args, 2);
        return;
    }
    case MBAR_ARRIVE:
        cg_call_intrinsic(cg, "llvm.nvvm.mbarrier.arrive.shared", NULL, 0, &bar, 1);
        return;
    case MBAR_EXPECT_TX: {
        LLVMValueRef args[2] = {bar, value};
        cg_call_intrinsic(cg, "llvm.nvvm.mbarrier.arrive.expect.tx.scope.cta.space.cta",
                          NULL, 0, args, 2);
        return;
    }
    case MBAR_WAIT:
        /* only the parity bit means anything to try_wait.parity */
        emit_wait(cg, bar, LLVMBuildAnd(cg->builder, value, cg_i32(cg, 1), ""));
        return;
    case MBAR_ARRIVE_CLUSTER:
        emit_arrive_cluster(cg, bar, s->loc);
        return;
    case MBAR_COUNT: break;
    }
    ice("bad mbarrier operation %d", (int)op);
}

/* ---- TMA --------------------------------------------------------------- */

void cg_tma(Codegen *cg, const Stmt *s) {
    const Kernel *k = cg->kernel;
    int index = s->u.tma.tensor_map;
    if (index < 0 || index >= k->ntensor_maps) {
        cg_error(cg, s->loc, "tma statement names tensor map %d; the kernel has %d",
                 index, k->ntensor_maps);
        return;
    }
    const TensorMap *map = &k->tensor_maps[index];
    const Region *smem = &s->u.tma.smem;
    if (map->rank < 1 || map->rank > 5) {
        cg_error(cg, s->loc, "a TMA tensor map has rank 1 to 5, not %d", map->rank);
        return;
    }
    if (!smem->buffer || smem->buffer->scope != SCOPE_SHARED) {
        cg_error(cg, s->loc, "the shared side of a TMA copy is not a shared buffer");
        return;
    }
    LLVMValueRef origin[IR_MAX_RANK];
    cg_region_start(cg, smem, origin);
    LLVMValueRef offset = cg_shared_offset(cg, smem->buffer, origin, false);
    int multicast = s->u.tma.multicast, split = s->u.tma.multicast_dim;
    LLVMValueRef rank = NULL;
    if (multicast > 1) {
        if (s->u.tma.store || split < 0 || split >= map->rank || multicast > 16 ||
            multicast != cluster_ctas(k)) {
            cg_error(cg, s->loc, "a multicast TMA load to %d CTAs along dim %d (a load, to "
                     "the whole cluster of %d)", multicast, split, cluster_ctas(k));
            return;
        }
        /* this CTA's slice: the dims before `split` are 1 (verifier), so
         * slice r is bytes [r * slice, (r + 1) * slice) of the box */
        int64_t slice = element_bytes(map->global->dtype);
        for (int d = 0; d < map->rank; d++) slice *= map->box[d];
        rank = cg_call_intrinsic(cg, "llvm.nvvm.read.ptx.sreg.cluster.ctarank", NULL, 0,
                                 NULL, 0);
        offset = LLVMBuildAdd(cg->builder, offset,
                              LLVMBuildMul(cg->builder, rank, cg_i32(cg, slice), ""), "");
    }
    LLVMValueRef shared = cg_shared_pointer(cg, offset);

    /* coordinates innermost first */
    LLVMValueRef coords[5];
    for (int d = 0; d < map->rank; d++) {
        const Expr *c = s->u.tma.coords[map->rank - 1 - d];
        if (!c) {
            cg_error(cg, s->loc, "TMA coordinate %d is missing", map->rank - 1 - d);
            return;
        }
        coords[d] = int_value(cg, c);
        if (rank && map->rank - 1 - d == split) /* the slice's origin */
            coords[d] = LLVMBuildAdd(
                cg->builder, coords[d],
                LLVMBuildMul(cg->builder, rank, cg_i32(cg, map->box[split]), ""), "");
    }
    LLVMContextRef c = cg->context;
    LLVMValueRef no = LLVMConstInt(LLVMInt1TypeInContext(c), 0, 0);
    LLVMValueRef args[16];
    int n = 0;
    char name[64];
    if (!s->u.tma.store) {
        LLVMValueRef bar = barrier_address(cg, &s->u.tma.bar, s->loc);
        if (!bar) return;
        args[n++] = LLVMBuildAddrSpaceCast(
            cg->builder, shared, LLVMPointerTypeInContext(c, CG_ADDRSPACE_SHARED_CLUSTER), "");
        args[n++] = bar;
        args[n++] = cg->tensor_maps[index];
        for (int d = 0; d < map->rank; d++) args[n++] = coords[d];
        /* multicast: the slice lands in every CTA of the cluster */
        uint64_t mask = rank ? (1ull << multicast) - 1 : 0;
        args[n++] = LLVMConstInt(LLVMInt16TypeInContext(c), mask, 0); /* cta_mask */
        args[n++] = i64_const(cg, 0);                               /* cache_hint */
        args[n++] = rank ? LLVMConstInt(LLVMInt1TypeInContext(c), 1, 0) : no; /* use it */
        args[n++] = no;                                             /* use cache_hint */
        args[n++] = cg_i32(cg, 0);                                  /* cta_group */
        snprintf(name, sizeof name, "llvm.nvvm.cp.async.bulk.tensor.g2s.tile.%dd", map->rank);
    } else {
        args[n++] = shared;
        args[n++] = cg->tensor_maps[index];
        for (int d = 0; d < map->rank; d++) args[n++] = coords[d];
        args[n++] = i64_const(cg, 0); /* cache_hint */
        args[n++] = no;               /* use cache_hint */
        snprintf(name, sizeof name, "llvm.nvvm.cp.async.bulk.tensor.s2g.tile.%dd", map->rank);
    }
    cg_call_intrinsic(cg, name, NULL, 0, args, n);
}

/* ---- wgmma ------------------------------------------------------------- */

static const char *wgmma_type_name(DType t) {
    switch (t) {
    case DT_BF16: return "bf16";
    case DT_F16: return "f16";
    case DT_E4M3: return "e4m3";
    case DT_E5M2: return "e5m2";
    default: return NULL;
    }
}

/* The 64-bit matrix descriptor of the operand tile starting at region r
 * (docs/hopper.md 6): start address (linear, of the region origin, in the
 * shared window) >> 4 in bits 0-13, LBO 1 (16 bytes; unused by the
 * 128-byte swizzled layouts when the operand's MN extent fits in one
 * row), SBO 1024 >> 4 in bits 32-45 (the next group of eight 128-byte
 * rows, along M/N for K-major and along K for MN-major operands), layout
 * type 1 in bits 62-63.  Base offset (bits 49-51) is 0: the buffer is
 * 1024-byte aligned and K steps stay inside the first 128 bytes of a row
 * (K-major) or move by whole 8-row groups (MN-major).
 *
 * The origin's constant indices (the K steps of one gemm, a constant row
 * block) are added to the finished descriptor instead of to the address:
 * the descriptors of one gemm's wgmmas then share the masked and shifted
 * address of the variable part (one computation per operand and stage
 * after LLVM's CSE) and differ by a constant, which removes about half
 * of the integer instructions per wgmma.  This is exact: every shared
 * address is below 2^18 (228 KB), so with both parts 16-byte aligned
 * ((v & 0x3FFFF) >> 4) + (c >> 4) = ((v + c) & 0x3FFFF) >> 4 < 2^14, and
 * the sum never reaches the fields above bit 13.  A constant part that
 * is not a non-negative multiple of 16 keeps the plain computation. */
static LLVMValueRef descriptor(Codegen *cg, const Region *r, Loc loc, const char *what) {
    const Buffer *b = r->buffer;
    if (!b || b->scope != SCOPE_SHARED) {
        cg_error(cg, loc, "wgmma operand %s is not in shared memory", what);
        return NULL;
    }
    int64_t pitch = b->pitch;
    if (pitch <= 0 && b->shape[b->rank - 1] && b->shape[b->rank - 1]->kind == EXPR_INT)
        pitch = b->shape[b->rank - 1]->u.int_value;
    if (b->swizzle_shift != 0 || pitch * element_bytes(b->dtype) != DESC_SWIZZLE_BYTES) {
        cg_error(cg, loc,
                 "wgmma operand %s (%s) is not in the 128-byte swizzled layout "
                 "(rows of 128 bytes, swizzle shift 0)",
                 what, b->name);
        return NULL;
    }
    LLVMValueRef origin[IR_MAX_RANK], variable[IR_MAX_RANK], constant[IR_MAX_RANK];
    LLVMValueRef zero[IR_MAX_RANK];
    cg_region_start(cg, r, origin);
    LLVMBuilderRef bld = cg->builder;
    for (int d = 0; d < b->rank; d++) {
        bool fixed = LLVMIsAConstantInt(origin[d]) != NULL;
        zero[d] = cg_i32(cg, 0);
        variable[d] = fixed ? zero[d] : origin[d];
        constant[d] = fixed ? origin[d] : zero[d];
    }
    /* the builder folds constant operands, so these are ConstantInts when
     * the layout is the linear one descriptors describe */
    LLVMValueRef constant_offset =
        LLVMBuildSub(bld, cg_shared_offset(cg, b, constant, false),
                     cg_shared_offset(cg, b, zero, false), "");
    int64_t constant_bytes = LLVMIsAConstantInt(constant_offset)
                                 ? LLVMConstIntGetSExtValue(constant_offset)
                                 : -1;
    bool split = constant_bytes >= 0 && constant_bytes % 16 == 0;
    LLVMValueRef window = LLVMBuildPtrToInt(bld, cg->shared, i32_type(cg), "");
    LLVMValueRef address =
        LLVMBuildAdd(bld, window, cg_shared_offset(cg, b, split ? variable : origin, false), "");
    LLVMValueRef start = LLVMBuildLShr(
        bld, LLVMBuildAnd(bld, address, cg_i32(cg, 0x3FFFF), ""), cg_i32(cg, 4), "");
    uint64_t fields = (1ull << 16) | ((uint64_t)(DESC_ATOM_BYTES >> 4) << 32) |
                      (DESC_SWIZZLE128 << 62);
    LLVMValueRef descriptor = LLVMBuildOr(bld, LLVMBuildZExt(bld, start, i64_type(cg), ""),
                                          i64_const(cg, fields), "");
    if (split && constant_bytes > 0)
        descriptor = LLVMBuildAdd(bld, descriptor, i64_const(cg, (uint64_t)constant_bytes >> 4),
                                  "");
    return descriptor;
}

/* Constant flat index of a LOCAL region's origin, or -1. */
static int64_t local_origin(const Region *r) {
    const Buffer *b = r->buffer;
    int64_t flat = 0;
    for (int d = 0; d < b->rank; d++) {
        const Expr *start = r->start[d], *extent = b->shape[d];
        if ((start && start->kind != EXPR_INT) || !extent || extent->kind != EXPR_INT)
            return -1;
        flat = flat * extent->u.int_value + (start ? start->u.int_value : 0);
    }
    return flat;
}

static int64_t local_size(const Buffer *b) {
    int64_t size = 1;
    for (int d = 0; d < b->rank; d++) {
        if (!b->shape[d] || b->shape[d]->kind != EXPR_INT) return -1;
        size *= b->shape[d]->u.int_value;
    }
    return size;
}

static LLVMValueRef local_element(Codegen *cg, const Buffer *b, int64_t index) {
    CodegenBuffer *storage = cg_buffer(cg, b);
    LLVMValueRef idx[2] = {cg_i32(cg, 0), cg_i32(cg, index)};
    return LLVMBuildInBoundsGEP2(cg->builder, storage->array_type, storage->base, idx, 2, "");
}

/* The four .b32 A registers: 8 (16-bit) or 16 (8-bit) consecutive LOCAL
 * elements from the region origin, packed low element first. */
static bool a_registers(Codegen *cg, const Stmt *s, LLVMValueRef *out) {
    const Region *a = &s->u.wgmma.a;
    const Buffer *b = a->buffer;
    int per_register = 32 / ir_dtype_bits(b->dtype);
    int64_t first = local_origin(a), size = local_size(b);
    if (b->dtype != s->u.wgmma.a_dtype || first < 0 || size < 0 ||
        first + 4 * per_register > size) {
        cg_error(cg, s->loc,
                 "wgmma A registers: %s must be a %s LOCAL array with a constant origin "
                 "and %d elements from it",
                 b->name, ir_dtype_name(s->u.wgmma.a_dtype), 4 * per_register);
        return false;
    }
    LLVMTypeRef element = cg_memory_type(cg, b->dtype);
    LLVMTypeRef vector = LLVMVectorType(element, (unsigned)per_register);
    for (int r = 0; r < 4; r++) {
        LLVMValueRef packed = LLVMGetPoison(vector);
        for (int e = 0; e < per_register; e++) {
            int64_t index = first + r * per_register + e;
            LLVMValueRef v = LLVMBuildLoad2(cg->builder, element, local_element(cg, b, index), "");
            packed = LLVMBuildInsertElement(cg->builder, packed, v, cg_i32(cg, e), "");
        }
        out[r] = LLVMBuildBitCast(cg->builder, packed, i32_type(cg), "");
    }
    return true;
}

static bool check_wgmma(Codegen *cg, const Stmt *s) {
    DType t = s->u.wgmma.a_dtype, tb = s->u.wgmma.b_dtype;
    int n = s->u.wgmma.n;
    int k_step = ir_dtype_bits(t) == 16 ? 16 : 32;
    if (!ir_dtype_mma_operands(t, tb)) {
        cg_error(cg, s->loc, "wgmma on %s x %s: operands are bf16 x bf16, f16 x f16 or "
                 "e4m3/e5m2 x e4m3/e5m2", ir_dtype_name(t), ir_dtype_name(tb));
        return false;
    }
    if (s->u.wgmma.m != 64 || n < 8 || n > 256 || n % 8 != 0 || s->u.wgmma.k != k_step) {
        cg_error(cg, s->loc, "wgmma m%dn%dk%d: the shape must be m64nNk%d, N a multiple "
                 "of 8 up to 256", s->u.wgmma.m, n, s->u.wgmma.k, k_step);
        return false;
    }
    if (s->u.wgmma.acc_dtype != DT_F32) {
        cg_error(cg, s->loc, "wgmma accumulates in f32, not %s",
                 ir_dtype_name(s->u.wgmma.acc_dtype));
        return false;
    }
    if (k_step == 32 && (s->u.wgmma.transpose_a || !s->u.wgmma.transpose_b)) {
        cg_error(cg, s->loc, "8-bit wgmma needs K-major operands "
                 "(transpose_a = false, transpose_b = true)");
        return false;
    }
    const Buffer *acc = s->u.wgmma.acc;
    int64_t size = acc ? local_size(acc) : -1;
    if (!acc || acc->scope != SCOPE_LOCAL || acc->dtype != DT_F32 || size < 0 ||
        s->u.wgmma.acc_offset < 0 || s->u.wgmma.acc_offset + n / 2 > size) {
        cg_error(cg, s->loc, "wgmma accumulator: %d f32 elements from %lld of a LOCAL array",
                 n / 2, (long long)s->u.wgmma.acc_offset);
        return false;
    }
    /* MN-major operands must fit one 128-byte swizzled row along M/N */
    if (!s->u.wgmma.transpose_b && n * element_bytes(t) > DESC_SWIZZLE_BYTES) {
        cg_error(cg, s->loc, "wgmma with an N-major B (transpose_b = false) of n = %d: "
                 "at most %d columns fit one 128-byte swizzled row", n,
                 DESC_SWIZZLE_BYTES / element_bytes(t));
        return false;
    }
    return true;
}

/* Remembers an accumulator range, in the group the next commit closes,
 * for the pin after the wait that completes that group.  A range issued
 * again (a gemm accumulating into a C still in flight) moves to the newer
 * group: its registers are final only when that one completes. */
static void track_accumulator(Codegen *cg, const Buffer *acc, int64_t offset, int count) {
    for (int i = 0; i < cg->naccumulators; i++)
        if (cg->accumulators[i].acc == acc && cg->accumulators[i].offset == offset &&
            cg->accumulators[i].count == count) {
            cg->accumulators[i].group = cg->wgmma_commits;
            return;
        }
    if (cg->naccumulators == cg->accumulator_capacity) {
        cg->accumulator_capacity = cg->accumulator_capacity ? 2 * cg->accumulator_capacity : 8;
        cg->accumulators = realloc(cg->accumulators, sizeof *cg->accumulators *
                                                         (size_t)cg->accumulator_capacity);
        if (!cg->accumulators) ice("out of memory");
    }
    cg->accumulators[cg->naccumulators++] =
        (struct CodegenAccumulator){acc, offset, count, cg->wgmma_commits};
}

/* A wgmma, commit or wait was just emitted: LOCAL stores after this point
 * belong to the next wait's window. */
static void mark_async(Codegen *cg) {
    LLVMBasicBlockRef block = LLVMGetInsertBlock(cg->builder);
    cg->wgmma_mark = block ? LLVMGetLastInstruction(block) : NULL;
}

/* Calls an asm statement whose first `outputs` operands are outputs of
 * type `output` tied to the last `outputs` inputs; returns the struct of
 * results. */
static LLVMValueRef call_asm_typed(Codegen *cg, const char *text, const char *constraints,
                                   LLVMValueRef *inputs, LLVMTypeRef *input_types,
                                   int ninputs, int outputs, LLVMTypeRef output) {
    LLVMTypeRef *fields = malloc(sizeof *fields * (size_t)outputs);
    if (!fields) ice("out of memory");
    for (int i = 0; i < outputs; i++) fields[i] = output;
    LLVMTypeRef result = LLVMStructTypeInContext(cg->context, fields, (unsigned)outputs, 0);
    free(fields);
    LLVMTypeRef fn = LLVMFunctionType(result, input_types, (unsigned)ninputs, 0);
    LLVMValueRef code = LLVMGetInlineAsm(fn, (char *)text, strlen(text), (char *)constraints,
                                         strlen(constraints), 1, 0, LLVMInlineAsmDialectATT, 0);
    return LLVMBuildCall2(cg->builder, fn, code, inputs, (unsigned)ninputs, "");
}

/* call_asm_typed with f32 outputs. */
static LLVMValueRef call_asm(Codegen *cg, const char *text, const char *constraints,
                             LLVMValueRef *inputs, LLVMTypeRef *input_types, int ninputs,
                             int outputs) {
    return call_asm_typed(cg, text, constraints, inputs, input_types, ninputs, outputs,
                          LLVMFloatTypeInContext(cg->context));
}

/* wgmma exists on sm_90a only (Blackwell has tcgen05 instead); LLVM
 * would abort on its fence/commit/wait intrinsics elsewhere.  Said once
 * per kernel. */
static bool wgmma_available(Codegen *cg, const Stmt *s) {
    if (strcmp(cg->arch, "sm_90a") == 0) return true;
    if (!cg->wgmma_reported)
        cg_error(cg, s->loc, "wgmma is an sm_90a instruction; %s has none", cg->arch);
    cg->wgmma_reported = true;
    return false;
}

void cg_wgmma(Codegen *cg, const Stmt *s) {
    if (!wgmma_available(cg, s) || !check_wgmma(cg, s)) return;
    int n = s->u.wgmma.n, outputs = n / 2;
    DType t = s->u.wgmma.a_dtype, tb = s->u.wgmma.b_dtype;
    bool sixteen_bit = ir_dtype_bits(t) == 16;
    bool a_in_registers = s->u.wgmma.a.buffer && s->u.wgmma.a.buffer->scope == SCOPE_LOCAL;

    /* inputs: A (descriptor or 4 registers), B descriptor, scale-d, then
     * the accumulators tied to the outputs */
    int ninputs = (a_in_registers ? 4 : 1) + 2 + outputs;
    LLVMValueRef *inputs = malloc(sizeof *inputs * (size_t)ninputs);
    LLVMTypeRef *types = malloc(sizeof *types * (size_t)ninputs);
    if (!inputs || !types) ice("out of memory");
    int next = 0;
    bool ok = true;
    if (a_in_registers) {
        ok = a_registers(cg, s, inputs);
        for (int r = 0; r < 4; r++) types[next++] = i32_type(cg);
    } else {
        inputs[next] = descriptor(cg, &s->u.wgmma.a, s->loc, "A");
        ok = inputs[next] != NULL;
        types[next++] = i64_type(cg);
    }
    if (ok) {
        inputs[next] = descriptor(cg, &s->u.wgmma.b, s->loc, "B");
        ok = inputs[next] != NULL;
        types[next++] = i64_type(cg);
    }
    if (!ok) {
        free(inputs);
        free(types);
        return;
    }
    LLVMValueRef scale_d = cg_i32(cg, 1);
    if (s->u.wgmma.scale_d)
        scale_d = LLVMBuildZExt(cg->builder, cg_expr(cg, s->u.wgmma.scale_d), i32_type(cg), "");
    types[next] = i32_type(cg);
    inputs[next++] = scale_d;
    const Buffer *acc = s->u.wgmma.acc;
    LLVMTypeRef f32 = LLVMFloatTypeInContext(cg->context);
    for (int i = 0; i < outputs; i++) {
        types[next] = f32;
        inputs[next++] = LLVMBuildLoad2(cg->builder, f32,
                                        local_element(cg, acc, s->u.wgmma.acc_offset + i), "");
    }

    Text text = {0}, constraints = {0};
    int operand = outputs; /* $outputs is the first input */
    text_add(&text, "{\n.reg .pred p;\nsetp.ne.b32 p, $%d, 0;\n",
            outputs + (a_in_registers ? 4 : 1) + 1);
    text_add(&text, "wgmma.mma_async.sync.aligned.m64n%dk%d.f32.%s.%s {", n, s->u.wgmma.k,
            wgmma_type_name(t), wgmma_type_name(tb));
    for (int i = 0; i < outputs; i++) text_add(&text, "%s$%d", i ? ", " : "", i);
    if (a_in_registers) {
        text_add(&text, "}, {$%d, $%d, $%d, $%d}", operand, operand + 1, operand + 2,
                operand + 3);
        operand += 4;
    } else {
        text_add(&text, "}, $%d", operand++);
    }
    text_add(&text, ", $%d, p, 1, 1", operand++);
    /* imm-trans: 1 = M/N-major; the IR's transpose_b means B is [N, K],
     * i.e. K-major.  A in registers has no trans-a; 8-bit has neither. */
    if (sixteen_bit) {
        if (!a_in_registers) text_add(&text, ", %d", s->u.wgmma.transpose_a ? 1 : 0);
        text_add(&text, ", %d", s->u.wgmma.transpose_b ? 0 : 1);
    }
    text_add(&text, ";\n}");
    for (int i = 0; i < outputs; i++) text_add(&constraints, "=f,");
    text_add(&constraints, a_in_registers ? "r,r,r,r,l,r" : "l,l,r");
    for (int i = 0; i < outputs; i++) text_add(&constraints, ",%d", i);
    text_add(&constraints, ",~{memory}");

    LLVMValueRef result = call_asm(cg, text.data, constraints.data, inputs, types, ninputs,
                                   outputs);
    for (int i = 0; i < outputs; i++)
        LLVMBuildStore(cg->builder, LLVMBuildExtractValue(cg->builder, result, (unsigned)i, ""),
                       local_element(cg, acc, s->u.wgmma.acc_offset + i));
    track_accumulator(cg, acc, s->u.wgmma.acc_offset, outputs);
    mark_async(cg);
    free(text.data);
    free(constraints.data);
    free(inputs);
    free(types);
}

/* After `wgmma.wait_group pending`: the accumulators of every committed
 * group but the newest `pending` ones go through an empty asm that
 * "modifies" them, so their later uses depend on something ordered after
 * the wait.  The rest (newer groups, and wgmmas not yet committed, which
 * no wait covers) stay tracked for a later wait.  The tracking follows
 * the order code is emitted in, which is program order within a loop
 * body; a group left in flight across a loop's back edge is not pinned
 * by a wait at the top of the next iteration (ptxas then orders it
 * itself, with its serialisation warning). */
static void pin_accumulators(Codegen *cg, int64_t pending) {
    LLVMTypeRef f32 = LLVMFloatTypeInContext(cg->context);
    int kept = 0;
    for (int a = 0; a < cg->naccumulators; a++) {
        const struct CodegenAccumulator *range = &cg->accumulators[a];
        /* groups [commits - pending, commits) may run on, and the open
         * group (== commits) is not committed */
        if (range->group >= cg->wgmma_commits - pending) {
            cg->accumulators[kept++] = *range;
            continue;
        }
        LLVMValueRef *values = malloc(sizeof *values * (size_t)range->count);
        LLVMTypeRef *types = malloc(sizeof *types * (size_t)range->count);
        if (!values || !types) ice("out of memory");
        Text constraints = {0};
        for (int i = 0; i < range->count; i++) {
            values[i] = LLVMBuildLoad2(cg->builder, f32,
                                       local_element(cg, range->acc, range->offset + i), "");
            types[i] = f32;
            text_add(&constraints, "%s=f", i ? "," : "");
        }
        for (int i = 0; i < range->count; i++) text_add(&constraints, ",%d", i);
        LLVMValueRef result = call_asm(cg, "", constraints.data, values, types,
                                       range->count, range->count);
        for (int i = 0; i < range->count; i++)
            LLVMBuildStore(cg->builder,
                           LLVMBuildExtractValue(cg->builder, result, (unsigned)i, ""),
                           local_element(cg, range->acc, range->offset + i));
        free(constraints.data);
        free(values);
        free(types);
    }
    cg->naccumulators = kept;
}

/* ---- stores before a wait ---------------------------------------------- */

/* One LOCAL element to fence: a buffer (index into cg->buffers, whose
 * array may move) and a flat element index. */
typedef struct FencedElement {
    int buffer;
    int64_t index;
} FencedElement;

typedef struct FencedSet {
    FencedElement *items;
    int count, capacity;
} FencedSet;

static void fenced_add(FencedSet *set, int buffer, int64_t index) {
    for (int i = 0; i < set->count; i++)
        if (set->items[i].buffer == buffer && set->items[i].index == index) return;
    if (set->count == set->capacity) {
        set->capacity = set->capacity ? 2 * set->capacity : 64;
        set->items = realloc(set->items, sizeof *set->items * (size_t)set->capacity);
        if (!set->items) ice("out of memory");
    }
    set->items[set->count++] = (FencedElement){buffer, index};
}

/* Is t the register type a "+f" (f32) or "+r" (32-bit integer) operand
 * takes? */
static bool fenceable_type(Codegen *cg, LLVMTypeRef t) {
    return t == LLVMFloatTypeInContext(cg->context) || t == i32_type(cg);
}

/* Records the elements a store writes when it is a store of 32-bit
 * scalars or vectors to a LOCAL array at a constant index (the form
 * element_address and the unrolled parallel loops produce). */
static void note_store(Codegen *cg, LLVMValueRef store, FencedSet *set) {
    LLVMValueRef value = LLVMGetOperand(store, 0), pointer = LLVMGetOperand(store, 1);
    LLVMValueRef base = pointer;
    int64_t index = 0;
    if (LLVMIsAGetElementPtrInst(pointer)) {
        if (LLVMGetNumOperands(pointer) != 3) return;
        LLVMValueRef first = LLVMGetOperand(pointer, 1), flat = LLVMGetOperand(pointer, 2);
        if (!LLVMIsAConstantInt(first) || LLVMConstIntGetSExtValue(first) != 0 ||
            !LLVMIsAConstantInt(flat))
            return;
        base = LLVMGetOperand(pointer, 0);
        index = LLVMConstIntGetSExtValue(flat);
    }
    int buffer = -1;
    for (int i = 0; i < cg->nbuffers && buffer < 0; i++)
        if (cg->buffers[i].base == base && (cg->buffers[i].buffer->scope == SCOPE_LOCAL ||
                                            cg->buffers[i].buffer->scope == SCOPE_FRAGMENT))
            buffer = i;
    if (buffer < 0) return;
    LLVMTypeRef type = LLVMTypeOf(value), element = type;
    int lanes = 1;
    if (LLVMGetTypeKind(type) == LLVMVectorTypeKind) {
        element = LLVMGetElementType(type);
        lanes = (int)LLVMGetVectorSize(type);
    }
    const Buffer *b = cg->buffers[buffer].buffer;
    int64_t size = local_size(b);
    if (element != cg_memory_type(cg, b->dtype) || !fenceable_type(cg, element) || index < 0 ||
        size < 0 || index + lanes > size)
        return;
    for (int lane = 0; lane < lanes; lane++) fenced_add(set, buffer, index + lane);
}

/* Passes count elements of one buffer through an empty asm with tied
 * "+f"/"+r" operands. */
static void fence_elements(Codegen *cg, const FencedElement *items, int count) {
    const Buffer *b = cg->buffers[items[0].buffer].buffer;
    LLVMTypeRef type = cg_memory_type(cg, b->dtype);
    const char *letter = type == i32_type(cg) ? "r" : "f";
    LLVMValueRef *values = malloc(sizeof *values * (size_t)count);
    LLVMTypeRef *types = malloc(sizeof *types * (size_t)count);
    if (!values || !types) ice("out of memory");
    Text constraints = {0};
    for (int i = 0; i < count; i++) {
        values[i] = LLVMBuildLoad2(cg->builder, type, local_element(cg, b, items[i].index), "");
        types[i] = type;
        text_add(&constraints, "%s=%s", i ? "," : "", letter);
    }
    for (int i = 0; i < count; i++) text_add(&constraints, ",%d", i);
    LLVMValueRef result =
        call_asm_typed(cg, "", constraints.data, values, types, count, count, type);
    for (int i = 0; i < count; i++)
        LLVMBuildStore(cg->builder, LLVMBuildExtractValue(cg->builder, result, (unsigned)i, ""),
                       local_element(cg, b, items[i].index));
    free(constraints.data);
    free(values);
    free(types);
}

static int compare_fenced(const void *a, const void *b) {
    const FencedElement *x = a, *y = b;
    if (x->buffer != y->buffer) return x->buffer < y->buffer ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

/* Before a wait: every LOCAL element stored since the last wgmma, commit
 * or wait goes through an empty asm, so that LLVM computes it before the
 * wait (the asm has side effects, as the wait has).  Without it the
 * promotion of one K block may sink below the wait for the next one and
 * run while no wgmma is in flight.  Codegen emits blocks in layout
 * order, so the instructions after the mark, block by block, are those
 * emitted since; a store the walk misses is only left unfenced. */
static void fence_local_stores(Codegen *cg) {
    LLVMValueRef mark = cg->wgmma_mark;
    if (!mark || LLVMGetBasicBlockParent(LLVMGetInstructionParent(mark)) != cg->function)
        return;
    FencedSet set = {0};
    LLVMBasicBlockRef block = LLVMGetInstructionParent(mark);
    for (LLVMValueRef inst = LLVMGetNextInstruction(mark);;) {
        while (!inst && block) {
            block = LLVMGetNextBasicBlock(block);
            inst = block ? LLVMGetFirstInstruction(block) : NULL;
        }
        if (!inst) break;
        if (LLVMIsAStoreInst(inst)) note_store(cg, inst, &set);
        inst = LLVMGetNextInstruction(inst);
    }
    qsort(set.items, (size_t)set.count, sizeof *set.items, compare_fenced);
    /* one asm per buffer, at most 128 operands each (as a wgmma n256) */
    for (int first = 0; first < set.count;) {
        int count = 1;
        while (first + count < set.count && count < 128 &&
               set.items[first + count].buffer == set.items[first].buffer)
            count++;
        fence_elements(cg, set.items + first, count);
        first += count;
    }
    free(set.items);
}

/* ---- fences ------------------------------------------------------------ */

void cg_fence(Codegen *cg, const Stmt *s) {
    int64_t value = s->u.fence.value;
    switch (s->u.fence.op) {
    case FENCE_CLUSTER_SYNC:
        /* every thread of every CTA of the cluster; not .aligned, so the
         * threads may reach it from divergent code */
        call_asm_void(cg, "barrier.cluster.arrive.release;\n\tbarrier.cluster.wait.acquire;",
                      "~{memory}", NULL, NULL, 0);
        return;
    case FENCE_MBARRIER_INIT:
        cg_call_intrinsic(cg, "llvm.nvvm.fence.mbarrier_init.release.cluster", NULL, 0, NULL, 0);
        return;
    case FENCE_PROXY_ASYNC:
        cg_call_intrinsic(cg, "llvm.nvvm.fence.proxy.async.shared_cta", NULL, 0, NULL, 0);
        return;
    case FENCE_WGMMA_FENCE:
        if (!wgmma_available(cg, s)) return;
        cg_call_intrinsic(cg, "llvm.nvvm.wgmma.fence.sync.aligned", NULL, 0, NULL, 0);
        return;
    case FENCE_WGMMA_COMMIT:
        if (!wgmma_available(cg, s)) return;
        cg_call_intrinsic(cg, "llvm.nvvm.wgmma.commit_group.sync.aligned", NULL, 0, NULL, 0);
        cg->wgmma_commits++;
        mark_async(cg);
        return;
    case FENCE_WGMMA_WAIT: {
        if (value < 0 || value > 7) break;
        if (!wgmma_available(cg, s)) return;
        fence_local_stores(cg);
        LLVMValueRef pending = i64_const(cg, (uint64_t)value);
        cg_call_intrinsic(cg, "llvm.nvvm.wgmma.wait_group.sync.aligned", NULL, 0, &pending, 1);
        pin_accumulators(cg, value);
        mark_async(cg);
        return;
    }
    case FENCE_TMA_STORE_COMMIT:
        cg_call_intrinsic(cg, "llvm.nvvm.cp.async.bulk.commit.group", NULL, 0, NULL, 0);
        return;
    case FENCE_TMA_STORE_WAIT: {
        if (value < 0 || value > 63) break;
        LLVMValueRef pending = cg_i32(cg, value);
        cg_call_intrinsic(cg, "llvm.nvvm.cp.async.bulk.wait.group.read", NULL, 0, &pending, 1);
        return;
    }
    case FENCE_SETMAXNREG_INC:
    case FENCE_SETMAXNREG_DEC: {
        if (value < 24 || value > 256 || value % 8 != 0) break;
        LLVMValueRef count = cg_i32(cg, value);
        cg_call_intrinsic(cg,
                          s->u.fence.op == FENCE_SETMAXNREG_INC
                              ? "llvm.nvvm.setmaxnreg.inc.sync.aligned.u32"
                              : "llvm.nvvm.setmaxnreg.dec.sync.aligned.u32",
                          NULL, 0, &count, 1);
        return;
    }
    case FENCE_COUNT: ice("bad fence %d", (int)s->u.fence.op);
    }
    cg_error(cg, s->loc, "fence %s %lld: value out of range (wgmma_wait 0..7, "
             "tma_store_wait 0..63, setmaxnreg 24..256 in steps of 8)",
             ir_fence_op_name(s->u.fence.op), (long long)value);
}
