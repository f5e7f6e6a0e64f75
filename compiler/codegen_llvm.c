/*
 * codegen_llvm.c -- the IR of every kernel to one LLVM module, then PTX.
 *
 * The input is thread-level, vectorised IR with shared memory planned.
 * Each kernel becomes a `ptx_kernel` function whose parameters are, in
 * order, every Kernel.params entry, every Kernel.symbols entry as i32,
 * then every Kernel.tensor_maps entry; this ABI is the contract with the
 * launchers that emit_header.c writes:
 *   tensor  ptr addrspace(1) noalias align 16 captures(none) [readonly]
 *           (readonly when the buffer is never stored to: LLVM then emits
 *           ld.global.nc; the runtime guarantees 16-byte aligned data)
 *   scalar  its memory type; bool travels as an i8 holding 0 or 1
 *   symbol  i32
 *   tensor map  ptr byval([128 x i8]) align 64 "nvvm.grid_constant" (a
 *           CUtensorMap: `.param .align 64 .b8 p[128]`, read in place;
 *           without grid_constant LLVM would copy it to local memory and
 *           hand TMA a local address, toolchain.md 2)
 * Dynamic shared memory is one external `[0 x i8]` array in addrspace(3),
 * sized at launch with Kernel.shared_bytes; 128-byte aligned, or 1024 when
 * a kernel of the module has 128-byte-swizzled (TMA/wgmma) buffers, whose
 * swizzle pattern repeats every 1024 bytes of address.
 *
 * The block size is `.reqntid threads`, except for kernels with
 * min_blocks > 0 (warp-specialised: setmaxnreg needs them), which get
 * `.maxntid threads` and `.minnctapersm min_blocks` (ptxas rejects
 * .reqntid together with .maxntid).
 *
 * Statements are emitted straight into LLVM basic blocks; mutable
 * variables and LOCAL arrays live in entry-block allocas that O3's
 * mem2reg/SROA turn into registers.  UNROLL loops are emitted N times with
 * the induction variable bound to a constant, so local-array indices are
 * constants and no local memory is left.
 *
 * Numerics: no fast-math flags except `contract` on fmul/fadd/fsub.  The
 * NVPTX back end fuses a*b+c into fma.rn only when the operations may be
 * contracted (its default TargetOptions are FPOpFusion::Standard); the
 * contract flag is the LLVM spelling of nvcc's default --fmad=true, which
 * tilekernels-spec.md 2.1 says the exact tests rely on.  fdiv stays IEEE
 * (div.rn.f32).
 *
 * LLVM reports some errors through the context's diagnostic handler, whose
 * default calls exit(1); ours records the message and codegen_module turns
 * it into an internal error.  Constructs LLVM would abort on (e2m1 cvt on
 * sm_90a, llvm.exp) are never emitted.
 */
#define _GNU_SOURCE /* memmem */
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <llvm-c/Analysis.h>
#include <llvm-c/Target.h>
#include <llvm-c/Transforms/PassBuilder.h>

#include "codegen_llvm.h"

#define CG_TRIPLE "nvptx64-nvidia-cuda"
#define CG_SHARED_NAME "tk__shared"
/* Unrolling more iterations than this would only bloat the code; such a
 * loop (never produced by the shipped kernels) becomes a serial loop. */
#define CG_MAX_UNROLL 1024

/* ---- small helpers shared with codegen_expr.c / codegen_math.c ------- */

/* Parts of the module are generated on several threads (codegen_module):
 * diagnostics go through one lock. */
static pthread_mutex_t cg_diag_lock = PTHREAD_MUTEX_INITIALIZER;

void cg_error(Codegen *cg, Loc loc, const char *fmt, ...) {
    char message[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&cg_diag_lock);
    diag_error(cg->diag, loc, "%s", message);
    pthread_mutex_unlock(&cg_diag_lock);
    cg->failed = true;
}

LLVMTypeRef cg_scalar_type(Codegen *cg, DType t) {
    LLVMContextRef c = cg->context;
    switch (t) {
    case DT_VOID: return LLVMVoidTypeInContext(c);
    case DT_BOOL: return LLVMInt1TypeInContext(c);
    case DT_I8: case DT_U8: case DT_E4M3: case DT_E5M2: case DT_E2M1:
    case DT_UE8M0:
        return LLVMInt8TypeInContext(c);
    case DT_I16: case DT_U16: return LLVMInt16TypeInContext(c);
    case DT_I32: case DT_U32: return LLVMInt32TypeInContext(c);
    case DT_I64: case DT_U64: return LLVMInt64TypeInContext(c);
    case DT_F16: return LLVMHalfTypeInContext(c);
    case DT_BF16: return LLVMBFloatTypeInContext(c);
    case DT_F32: return LLVMFloatTypeInContext(c);
    case DT_F64: return LLVMDoubleTypeInContext(c);
    case DT_COUNT: break;
    }
    ice("bad dtype %d", (int)t);
}

LLVMTypeRef cg_memory_type(Codegen *cg, DType t) {
    /* a bool occupies one byte in memory, like C's _Bool */
    if (t == DT_BOOL) return LLVMInt8TypeInContext(cg->context);
    return cg_scalar_type(cg, t);
}

LLVMTypeRef cg_type(Codegen *cg, DType t, int lanes) {
    LLVMTypeRef scalar = cg_scalar_type(cg, t);
    return lanes > 1 ? LLVMVectorType(scalar, (unsigned)lanes) : scalar;
}

LLVMValueRef cg_i32(Codegen *cg, int64_t v) {
    return LLVMConstInt(LLVMInt32TypeInContext(cg->context),
                        (unsigned long long)v, 1);
}

LLVMValueRef cg_call_intrinsic(Codegen *cg, const char *name,
                               LLVMTypeRef *overloads, int noverloads,
                               LLVMValueRef *args, int nargs) {
    unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
    if (id == 0) ice("LLVM has no intrinsic %s", name);
    LLVMValueRef fn = LLVMGetIntrinsicDeclaration(cg->module, id, overloads,
                                                  (size_t)noverloads);
    LLVMTypeRef type = LLVMIntrinsicGetType(cg->context, id, overloads,
                                            (size_t)noverloads);
    return LLVMBuildCall2(cg->builder, type, fn, args, (unsigned)nargs, "");
}

LLVMBasicBlockRef cg_new_block(Codegen *cg, const char *name) {
    return LLVMAppendBasicBlockInContext(cg->context, cg->function, name);
}

/* The storage of a tensor parameter or LOCAL array; LOCAL arrays get their
 * zero-initialised alloca in the entry block the first time they are
 * seen, so an ALLOC inside a loop still has exactly one. */
CodegenBuffer *cg_buffer(Codegen *cg, const Buffer *b) {
    for (int i = 0; i < cg->nbuffers; i++)
        if (cg->buffers[i].buffer == b) return &cg->buffers[i];
    if (b->scope == SCOPE_GLOBAL || b->scope == SCOPE_SHARED)
        ice("buffer %s has no storage in kernel %s", b->name,
            cg->kernel->name);
    int64_t count = 1;
    for (int d = 0; d < b->rank; d++) {
        const Expr *extent = b->shape[d];
        if (!extent || extent->kind != EXPR_INT || extent->u.int_value < 0)
            ice("local buffer %s has a non-constant shape", b->name);
        count *= extent->u.int_value;
    }
    if (count == 0) count = 1;
    LLVMTypeRef element = cg_memory_type(cg, b->dtype);
    LLVMTypeRef array = LLVMArrayType2(element, (uint64_t)count);

    LLVMBuilderRef at_entry = LLVMCreateBuilderInContext(cg->context);
    LLVMValueRef terminator = LLVMGetBasicBlockTerminator(cg->entry);
    if (terminator) LLVMPositionBuilderBefore(at_entry, terminator);
    else LLVMPositionBuilderAtEnd(at_entry, cg->entry);
    LLVMValueRef slot = LLVMBuildAlloca(at_entry, array, b->name);
    LLVMSetAlignment(slot, IR_VECTOR_BYTES);
    int64_t bytes = count * ((ir_dtype_bits(b->dtype) + 7) / 8);
    LLVMBuildMemSet(at_entry, slot,
                    LLVMConstInt(LLVMInt8TypeInContext(cg->context), 0, 0),
                    LLVMConstInt(LLVMInt64TypeInContext(cg->context),
                                 (unsigned long long)bytes, 0),
                    IR_VECTOR_BYTES);
    LLVMDisposeBuilder(at_entry);

    if (cg->nbuffers == cg->buffer_capacity) {
        cg->buffer_capacity = cg->buffer_capacity ? 2 * cg->buffer_capacity : 8;
        cg->buffers = realloc(cg->buffers,
                              sizeof *cg->buffers * (size_t)cg->buffer_capacity);
        if (!cg->buffers) ice("out of memory");
    }
    CodegenBuffer *entry = &cg->buffers[cg->nbuffers++];
    *entry = (CodegenBuffer){b, slot, array};
    return entry;
}

static void add_param_buffer(Codegen *cg, const Buffer *b, LLVMValueRef v) {
    if (cg->nbuffers == cg->buffer_capacity) {
        cg->buffer_capacity = cg->buffer_capacity ? 2 * cg->buffer_capacity : 8;
        cg->buffers = realloc(cg->buffers,
                              sizeof *cg->buffers * (size_t)cg->buffer_capacity);
        if (!cg->buffers) ice("out of memory");
    }
    cg->buffers[cg->nbuffers++] = (CodegenBuffer){b, v, NULL};
}

/* An alloca in the entry block for a mutable variable. */
static LLVMValueRef entry_alloca(Codegen *cg, LLVMTypeRef type,
                                 const char *name) {
    LLVMBuilderRef at_entry = LLVMCreateBuilderInContext(cg->context);
    LLVMValueRef terminator = LLVMGetBasicBlockTerminator(cg->entry);
    if (terminator) LLVMPositionBuilderBefore(at_entry, terminator);
    else LLVMPositionBuilderAtEnd(at_entry, cg->entry);
    LLVMValueRef slot = LLVMBuildAlloca(at_entry, type, name);
    LLVMDisposeBuilder(at_entry);
    return slot;
}

static void check_var(Codegen *cg, const Var *v) {
    if (v->id < 0 || v->id >= cg->nvalues)
        ice("variable %s has id %d outside 0..%d", v->name, v->id,
            cg->nvalues);
}

LLVMValueRef cg_var_value(Codegen *cg, const Var *v, Loc loc) {
    check_var(cg, v);
    LLVMValueRef value = cg->values[v->id];
    if (!value) ice("variable %s used before its definition", v->name);
    if (v->kind == VAR_MUTABLE)
        return LLVMBuildLoad2(cg->builder, LLVMGetAllocatedType(value), value,
                              v->name);
    return value;
}

/* ---- statements -------------------------------------------------------- */

static void emit_stmt(Codegen *cg, const Stmt *s);

/* After a branch away (RETURN): later statements go to an unreachable
 * block that LLVM deletes. */
static void start_dead_block(Codegen *cg) {
    LLVMPositionBuilderAtEnd(cg->builder, cg_new_block(cg, "dead"));
}

static bool constant_int(const Expr *e, int64_t *out) {
    if (e && e->kind == EXPR_INT) {
        *out = e->u.int_value;
        return true;
    }
    return false;
}

static void emit_serial_loop(Codegen *cg, const Stmt *s) {
    const Var *var = s->u.loop.var;
    check_var(cg, var);
    LLVMValueRef begin = cg_expr(cg, s->u.loop.begin);
    LLVMValueRef end = cg_expr(cg, s->u.loop.end);
    LLVMTypeRef type = LLVMTypeOf(begin);
    bool is_signed = ir_dtype_class(var->dtype) == DCLASS_SINT;
    int64_t step = s->u.loop.step ? s->u.loop.step : 1;

    LLVMBasicBlockRef before = LLVMGetInsertBlock(cg->builder);
    LLVMBasicBlockRef header = cg_new_block(cg, "loop");
    LLVMBasicBlockRef body = cg_new_block(cg, "loop.body");
    LLVMBasicBlockRef done = cg_new_block(cg, "loop.end");
    LLVMBuildBr(cg->builder, header);

    LLVMPositionBuilderAtEnd(cg->builder, header);
    LLVMValueRef index = LLVMBuildPhi(cg->builder, type, var->name);
    LLVMIntPredicate cmp = step > 0 ? (is_signed ? LLVMIntSLT : LLVMIntULT)
                                    : (is_signed ? LLVMIntSGT : LLVMIntUGT);
    LLVMBuildCondBr(cg->builder, LLVMBuildICmp(cg->builder, cmp, index, end, ""),
                    body, done);

    LLVMPositionBuilderAtEnd(cg->builder, body);
    cg->values[var->id] = index;
    emit_stmt(cg, s->u.loop.body);
    LLVMValueRef next = LLVMBuildAdd(cg->builder, index,
                                     LLVMConstInt(type, (unsigned long long)step, 1),
                                     "");
    LLVMBasicBlockRef latch = LLVMGetInsertBlock(cg->builder);
    LLVMBuildBr(cg->builder, header);

    LLVMValueRef incoming[2] = {begin, next};
    LLVMBasicBlockRef from[2] = {before, latch};
    LLVMAddIncoming(index, incoming, from, 2);
    LLVMPositionBuilderAtEnd(cg->builder, done);
}

static void emit_loop(Codegen *cg, const Stmt *s) {
    int64_t begin, end, step = s->u.loop.step ? s->u.loop.step : 1;
    bool unroll = s->u.loop.kind != LOOP_SERIAL;
    if (unroll && constant_int(s->u.loop.begin, &begin) &&
        constant_int(s->u.loop.end, &end) && step > 0 &&
        (end <= begin || (end - begin) / step <= CG_MAX_UNROLL)) {
        const Var *var = s->u.loop.var;
        check_var(cg, var);
        LLVMTypeRef type = cg_scalar_type(cg, var->dtype);
        for (int64_t i = begin; i < end; i += step) {
            cg->values[var->id] = LLVMConstInt(type, (unsigned long long)i, 1);
            emit_stmt(cg, s->u.loop.body);
        }
        return;
    }
    emit_serial_loop(cg, s);
}

static void emit_if(Codegen *cg, const Stmt *s) {
    LLVMValueRef cond = cg_expr(cg, s->u.if_.cond);
    LLVMBasicBlockRef then_block = cg_new_block(cg, "then");
    LLVMBasicBlockRef else_block =
        s->u.if_.else_body ? cg_new_block(cg, "else") : NULL;
    LLVMBasicBlockRef done = cg_new_block(cg, "endif");
    LLVMBuildCondBr(cg->builder, cond, then_block,
                    else_block ? else_block : done);
    LLVMPositionBuilderAtEnd(cg->builder, then_block);
    emit_stmt(cg, s->u.if_.then_body);
    LLVMBuildBr(cg->builder, done);
    if (else_block) {
        LLVMPositionBuilderAtEnd(cg->builder, else_block);
        emit_stmt(cg, s->u.if_.else_body);
        LLVMBuildBr(cg->builder, done);
    }
    LLVMPositionBuilderAtEnd(cg->builder, done);
}

static void emit_let(Codegen *cg, const Var *var, const Expr *value,
                     bool define) {
    check_var(cg, var);
    if (var->kind != VAR_MUTABLE) {
        if (!value) ice("immutable %s has no value", var->name);
        cg->values[var->id] = cg_expr(cg, value);
        return;
    }
    LLVMValueRef v = value ? cg_expr(cg, value) : NULL;
    if (define && !cg->values[var->id]) {
        LLVMTypeRef type = v ? LLVMTypeOf(v) : cg_scalar_type(cg, var->dtype);
        cg->values[var->id] = entry_alloca(cg, type, var->name);
    }
    if (!cg->values[var->id])
        ice("assignment to %s before its definition", var->name);
    /* a mutable declared without a value starts at zero, deterministically */
    if (!v) v = LLVMConstNull(LLVMGetAllocatedType(cg->values[var->id]));
    LLVMBuildStore(cg->builder, v, cg->values[var->id]);
}

/* bar.warp.sync, bar.sync 0, or the named barrier `bar.sync id, threads`
 * (warp-specialised consumers synchronise among themselves on id 1). */
static void emit_barrier(Codegen *cg, const Stmt *s) {
    if (s->u.barrier.warp_only) {
        LLVMValueRef mask = cg_i32(cg, -1);
        cg_call_intrinsic(cg, "llvm.nvvm.bar.warp.sync", NULL, 0, &mask, 1);
        return;
    }
    int id = s->u.barrier.id, threads = s->u.barrier.threads;
    if (id < 0 || id > 15 || threads < 0 || threads % IR_WARP_SIZE != 0) {
        cg_error(cg, s->loc, "named barrier %d over %d threads: the id must be 0..15 "
                 "and the thread count a multiple of %d", id, threads, IR_WARP_SIZE);
        return;
    }
    if (threads == 0) {
        LLVMValueRef arg = cg_i32(cg, id);
        cg_call_intrinsic(cg, "llvm.nvvm.barrier.cta.sync.aligned.all", NULL, 0, &arg, 1);
        return;
    }
    LLVMValueRef args[2] = {cg_i32(cg, id), cg_i32(cg, threads)};
    cg_call_intrinsic(cg, "llvm.nvvm.barrier.cta.sync.aligned.count", NULL, 0, args, 2);
}

static void emit_assert(Codegen *cg, const Stmt *s) {
    LLVMValueRef cond = cg_expr(cg, s->u.assert_.cond);
    LLVMBasicBlockRef fail = cg_new_block(cg, "assert.fail");
    LLVMBasicBlockRef ok = cg_new_block(cg, "assert.ok");
    LLVMBuildCondBr(cg->builder, cond, ok, fail);
    LLVMPositionBuilderAtEnd(cg->builder, fail);
    cg_call_intrinsic(cg, "llvm.trap", NULL, 0, NULL, 0);
    LLVMBuildUnreachable(cg->builder);
    LLVMPositionBuilderAtEnd(cg->builder, ok);
}

static void emit_stmt(Codegen *cg, const Stmt *s) {
    if (!s) return;
    switch (s->kind) {
    case STMT_SEQ:
        for (int i = 0; i < s->u.seq.count; i++)
            emit_stmt(cg, s->u.seq.items[i]);
        return;
    case STMT_LET:
        emit_let(cg, s->u.let.var, s->u.let.value, true);
        return;
    case STMT_ASSIGN:
        emit_let(cg, s->u.assign.var, s->u.assign.value, false);
        return;
    case STMT_STORE: cg_store(cg, s); return;
    case STMT_ALLOC:
        if (s->u.alloc.buffer->scope == SCOPE_LOCAL ||
            s->u.alloc.buffer->scope == SCOPE_FRAGMENT)
            cg_buffer(cg, s->u.alloc.buffer);
        return;
    case STMT_FOR: emit_loop(cg, s); return;
    case STMT_IF: emit_if(cg, s); return;
    case STMT_BARRIER: emit_barrier(cg, s); return;
    case STMT_ATOMIC: cg_atomic(cg, s); return;
    case STMT_EVAL: cg_expr(cg, s->u.eval.value); return;
    case STMT_RETURN:
        LLVMBuildBr(cg->builder, cg->exit);
        start_dead_block(cg);
        return;
    case STMT_ASSERT: emit_assert(cg, s); return;
    case STMT_MBARRIER: cg_mbarrier(cg, s); return;
    case STMT_TMA: cg_tma(cg, s); return;
    case STMT_WGMMA: cg_wgmma(cg, s); return;
    case STMT_FENCE: cg_fence(cg, s); return;
    case STMT_PARALLEL: case STMT_COPY: case STMT_FILL: case STMT_REDUCE:
    case STMT_GEMM: case STMT_COUNT:
        break;
    }
    ice("tile-level statement '%s' reached codegen in kernel %s",
        ir_stmt_name(s->kind), cg->kernel->name);
}

/* ---- kernels ----------------------------------------------------------- */

static void add_enum_attribute(Codegen *cg, LLVMValueRef fn, unsigned index,
                               const char *name, uint64_t value) {
    unsigned kind = LLVMGetEnumAttributeKindForName(name, strlen(name));
    if (kind == 0) ice("LLVM has no attribute %s", name);
    LLVMAddAttributeAtIndex(fn, index,
                            LLVMCreateEnumAttribute(cg->context, kind, value));
}

static void add_string_attribute(Codegen *cg, LLVMValueRef fn, unsigned index,
                                 const char *name, const char *value) {
    LLVMAddAttributeAtIndex(fn, index,
                            LLVMCreateStringAttribute(cg->context, name, (unsigned)strlen(name),
                                                      value, (unsigned)strlen(value)));
}

static LLVMValueRef declare_kernel(Codegen *cg, Kernel *k) {
    int first_map = k->nparams + k->nsymbols;
    int nargs = first_map + k->ntensor_maps;
    LLVMTypeRef *types = calloc((size_t)nargs + 1, sizeof *types);
    if (!types) ice("out of memory");
    for (int i = 0; i < k->nparams; i++) {
        const Param *p = &k->params[i];
        types[i] = p->kind == PARAM_TENSOR
                       ? LLVMPointerTypeInContext(cg->context, CG_ADDRSPACE_GLOBAL)
                       : cg_memory_type(cg, p->var->dtype);
    }
    for (int i = 0; i < k->nsymbols; i++)
        types[k->nparams + i] = LLVMInt32TypeInContext(cg->context);
    for (int i = 0; i < k->ntensor_maps; i++)
        types[first_map + i] = LLVMPointerTypeInContext(cg->context, 0);
    LLVMTypeRef fn_type = LLVMFunctionType(LLVMVoidTypeInContext(cg->context),
                                           types, (unsigned)nargs, 0);
    free(types);
    if (LLVMGetNamedFunction(cg->module, k->name))
        ice("two kernels are named %s", k->name);
    LLVMValueRef fn = LLVMAddFunction(cg->module, k->name, fn_type);
    LLVMSetFunctionCallConv(fn, LLVMPTXKernelCallConv);

    for (int i = 0; i < k->nparams; i++) {
        const Param *p = &k->params[i];
        LLVMValueRef arg = LLVMGetParam(fn, (unsigned)i);
        LLVMSetValueName2(arg, p->name, strlen(p->name));
        if (p->kind != PARAM_TENSOR) continue;
        unsigned index = (unsigned)i + 1; /* attribute index 0 = return */
        add_enum_attribute(cg, fn, index, "noalias", 0);
        add_enum_attribute(cg, fn, index, "align", IR_VECTOR_BYTES);
        add_enum_attribute(cg, fn, index, "captures", 0); /* = nocapture */
        if (p->buffer->read_only) add_enum_attribute(cg, fn, index, "readonly", 0);
    }
    for (int i = 0; i < k->nsymbols; i++) {
        LLVMValueRef arg = LLVMGetParam(fn, (unsigned)(k->nparams + i));
        const char *name = k->symbols[i]->name;
        LLVMSetValueName2(arg, name, strlen(name));
    }
    LLVMTypeRef map_type = LLVMArrayType2(LLVMInt8TypeInContext(cg->context), 128);
    unsigned byval = LLVMGetEnumAttributeKindForName("byval", 5);
    if (byval == 0) ice("LLVM has no byval attribute");
    for (int i = 0; i < k->ntensor_maps; i++) {
        unsigned index = (unsigned)(first_map + i) + 1;
        LLVMValueRef arg = LLVMGetParam(fn, (unsigned)(first_map + i));
        char name[32];
        snprintf(name, sizeof name, "tensor_map%d", i);
        LLVMSetValueName2(arg, name, strlen(name));
        LLVMAddAttributeAtIndex(fn, index, LLVMCreateTypeAttribute(cg->context, byval, map_type));
        add_enum_attribute(cg, fn, index, "align", 64);
        add_string_attribute(cg, fn, index, "nvvm.grid_constant", "");
    }
    char threads[32];
    snprintf(threads, sizeof threads, "%d", k->threads);
    if (k->min_blocks > 0) {
        /* setmaxnreg is honoured only under .maxntid + .minnctapersm */
        char blocks[32];
        snprintf(blocks, sizeof blocks, "%d", k->min_blocks);
        add_string_attribute(cg, fn, LLVMAttributeFunctionIndex, "nvvm.maxntid", threads);
        add_string_attribute(cg, fn, LLVMAttributeFunctionIndex, "nvvm.minctasm", blocks);
    } else {
        /* .reqntid (which implies .maxntid: ptxas rejects both together) */
        add_string_attribute(cg, fn, LLVMAttributeFunctionIndex, "nvvm.reqntid", threads);
    }
    if (k->cluster[0] * k->cluster[1] * k->cluster[2] > 1) {
        /* .explicitcluster + .reqnctapercluster: the launch must use these
         * cluster dims (the launcher passes them to cuLaunchKernelEx) */
        char dims[48];
        snprintf(dims, sizeof dims, "%d,%d,%d", k->cluster[0], k->cluster[1], k->cluster[2]);
        add_string_attribute(cg, fn, LLVMAttributeFunctionIndex, "nvvm.cluster_dim", dims);
    }
    add_enum_attribute(cg, fn, LLVMAttributeFunctionIndex, "nounwind", 0);
    return fn;
}

static LLVMValueRef read_sreg(Codegen *cg, const char *name) {
    return cg_call_intrinsic(cg, name, NULL, 0, NULL, 0);
}

static void emit_kernel(Codegen *cg, Kernel *k) {
    cg->kernel = k;
    cg->function = declare_kernel(cg, k);
    cg->nvalues = k->nvars;
    cg->values = calloc((size_t)k->nvars + 1, sizeof *cg->values);
    cg->nbuffers = 0;
    cg->naccumulators = 0;
    cg->wgmma_reported = false;
    memset(cg->cache_policies, 0, sizeof cg->cache_policies);
    cg->tensor_maps = calloc((size_t)k->ntensor_maps + 1, sizeof *cg->tensor_maps);
    if (!cg->values || !cg->tensor_maps) ice("out of memory");
    for (int i = 0; i < k->ntensor_maps; i++)
        cg->tensor_maps[i] =
            LLVMGetParam(cg->function, (unsigned)(k->nparams + k->nsymbols + i));

    cg->entry = cg_new_block(cg, "entry");
    LLVMBasicBlockRef body = cg_new_block(cg, "body");
    LLVMPositionBuilderAtEnd(cg->builder, body);

    /* parameters, symbols and block indices become values */
    for (int i = 0; i < k->nparams; i++) {
        const Param *p = &k->params[i];
        LLVMValueRef arg = LLVMGetParam(cg->function, (unsigned)i);
        if (p->kind == PARAM_TENSOR) {
            add_param_buffer(cg, p->buffer, arg);
        } else {
            check_var(cg, p->var);
            cg->values[p->var->id] =
                p->var->dtype == DT_BOOL
                    ? LLVMBuildTrunc(cg->builder, arg,
                                     LLVMInt1TypeInContext(cg->context), p->name)
                    : arg;
        }
    }
    for (int i = 0; i < k->nsymbols; i++) {
        const Var *v = k->symbols[i];
        check_var(cg, v);
        LLVMValueRef arg = LLVMGetParam(cg->function, (unsigned)(k->nparams + i));
        cg->values[v->id] = cg_convert(cg, arg, DT_I32, v->dtype, 1, k->loc);
    }
    static const char *const ctaid[3] = {"llvm.nvvm.read.ptx.sreg.ctaid.x",
                                         "llvm.nvvm.read.ptx.sreg.ctaid.y",
                                         "llvm.nvvm.read.ptx.sreg.ctaid.z"};
    for (int d = 0; d < 3; d++) {
        const Var *v = k->block_vars[d];
        if (!v) continue;
        check_var(cg, v);
        cg->values[v->id] =
            cg_convert(cg, read_sreg(cg, ctaid[d]), DT_I32, v->dtype, 1, k->loc);
    }

    cg->exit = cg_new_block(cg, "exit");
    emit_stmt(cg, k->body);
    LLVMBuildBr(cg->builder, cg->exit);
    LLVMPositionBuilderAtEnd(cg->builder, cg->exit);
    LLVMBuildRetVoid(cg->builder);
    LLVMPositionBuilderAtEnd(cg->builder, cg->entry);
    LLVMBuildBr(cg->builder, body);

    /* keep the blocks in creation order but put exit last (readability of
     * --emit=llvm before O3 only; O3 reorders anyway) */
    LLVMMoveBasicBlockAfter(cg->exit, LLVMGetLastBasicBlock(cg->function));
    free(cg->values);
    cg->values = NULL;
    free(cg->tensor_maps);
    cg->tensor_maps = NULL;
}

/* ---- module ------------------------------------------------------------ */

typedef struct LLVMErrors {
    char text[2048];
    bool any;
} LLVMErrors;

static void on_llvm_diagnostic(LLVMDiagnosticInfoRef info, void *opaque) {
    LLVMErrors *errors = opaque;
    if (LLVMGetDiagInfoSeverity(info) != LLVMDSError) return;
    char *message = LLVMGetDiagInfoDescription(info);
    if (!errors->any)
        snprintf(errors->text, sizeof errors->text, "%s", message);
    errors->any = true;
    LLVMDisposeMessage(message);
}

static void initialize_nvptx(void) {
    /* idempotent: LLVM guards its registries itself */
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
}

static const char *arch_features(const char *arch) {
    /* ptx90 is the newest PTX LLVM 22 knows; ptxas 13 accepts it for both
     * targets (an older version is a fatal LLVM error for sm_100a). */
    (void)arch;
    return "+ptx90";
}

static LLVMTargetMachineRef create_target_machine(const char *arch) {
    initialize_nvptx();
    LLVMTargetRef target;
    char *error = NULL;
    if (LLVMGetTargetFromTriple(CG_TRIPLE, &target, &error)) {
        char copy[256];
        snprintf(copy, sizeof copy, "%s", error ? error : "?");
        LLVMDisposeMessage(error);
        ice("no NVPTX target in this LLVM: %s", copy);
    }
    return LLVMCreateTargetMachine(target, CG_TRIPLE, arch,
                                   arch_features(arch),
                                   LLVMCodeGenLevelAggressive, LLVMRelocDefault,
                                   LLVMCodeModelDefault);
}

static char *copy_string(const char *text, size_t size) {
    char *out = malloc(size + 1);
    if (!out) ice("out of memory");
    memcpy(out, text, size);
    out[size] = 0;
    return out;
}

/* Alignment of the dynamic shared array: 1024 when any kernel of the
 * module (not only of this part: every part must declare the same) has a
 * 128-byte-swizzled buffer, else 128. */
static unsigned shared_alignment(const Module *m) {
    for (int i = 0; i < m->nkernels; i++) {
        const Kernel *k = m->kernels[i];
        if (k->ntensor_maps > 0) return 1024;
        for (int b = 0; b < k->buffers.count; b++) {
            const Buffer *buffer = k->buffers.items[b];
            if (buffer->scope == SCOPE_SHARED &&
                buffer->async_kind == SHARED_ASYNC_SWIZZLE128)
                return 1024;
        }
    }
    return 128;
}

/* Builds, optimises and emits one LLVM module holding kernels
 * [first, first + count) of m, in its own context (so several parts can
 * run on different threads).  Returns LLVM IR or PTX text, or NULL after
 * a user-facing error. */
static char *codegen_part(Module *m, int first, int count, Diag *diag,
                          CodegenOutput what) {
    const char *arch = m->arch ? m->arch : "sm_90a";
    LLVMErrors errors = {{0}, false};
    Codegen cg = {0};
    cg.context = LLVMContextCreate();
    LLVMContextSetDiagnosticHandler(cg.context, on_llvm_diagnostic, &errors);
    cg.module = LLVMModuleCreateWithNameInContext("tk", cg.context);
    cg.builder = LLVMCreateBuilderInContext(cg.context);
    cg.diag = diag;
    cg.arch = arch;

    LLVMTargetMachineRef tm = create_target_machine(arch);
    LLVMSetTarget(cg.module, CG_TRIPLE);
    LLVMTargetDataRef layout = LLVMCreateTargetDataLayout(tm);
    char *layout_text = LLVMCopyStringRepOfTargetData(layout);
    LLVMSetDataLayout(cg.module, layout_text);
    LLVMDisposeMessage(layout_text);
    LLVMDisposeTargetData(layout);

    /* the dynamic shared array every kernel addresses */
    LLVMTypeRef bytes = LLVMArrayType2(LLVMInt8TypeInContext(cg.context), 0);
    cg.shared = LLVMAddGlobalInAddressSpace(cg.module, bytes, CG_SHARED_NAME,
                                            CG_ADDRSPACE_SHARED);
    LLVMSetLinkage(cg.shared, LLVMExternalLinkage);
    LLVMSetAlignment(cg.shared, shared_alignment(m));

    for (int i = first; i < first + count; i++) emit_kernel(&cg, m->kernels[i]);

    char *result = NULL;
    if (!cg.failed) {
        char *message = NULL;
        if (LLVMVerifyModule(cg.module, LLVMReturnStatusAction, &message)) {
            char *module_text = LLVMPrintModuleToString(cg.module);
            fprintf(stderr, "%s\n", module_text);
            LLVMDisposeMessage(module_text);
            ice("generated LLVM IR does not verify: %s", message);
        }
        LLVMDisposeMessage(message);

        LLVMPassBuilderOptionsRef options = LLVMCreatePassBuilderOptions();
        LLVMErrorRef error = LLVMRunPasses(cg.module, "default<O3>", tm, options);
        LLVMDisposePassBuilderOptions(options);
        if (error) {
            char *text = LLVMGetErrorMessage(error);
            ice("LLVM optimisation failed: %s", text);
        }
        if (errors.any) ice("LLVM: %s", errors.text);

        if (what == CODEGEN_LLVM_IR) {
            char *text = LLVMPrintModuleToString(cg.module);
            result = copy_string(text, strlen(text));
            LLVMDisposeMessage(text);
        } else {
            LLVMMemoryBufferRef buffer = NULL;
            char *text = NULL;
            if (LLVMTargetMachineEmitToMemoryBuffer(tm, cg.module, LLVMAssemblyFile,
                                                    &text, &buffer))
                ice("LLVM could not emit PTX: %s", text ? text : "?");
            if (errors.any) ice("LLVM: %s", errors.text);
            result = copy_string(LLVMGetBufferStart(buffer),
                                 LLVMGetBufferSize(buffer));
            LLVMDisposeMemoryBuffer(buffer);
        }
    }

    free(cg.buffers);
    free(cg.accumulators);
    LLVMDisposeBuilder(cg.builder);
    LLVMDisposeModule(cg.module);
    LLVMDisposeTargetMachine(tm);
    LLVMContextDispose(cg.context);
    return result;
}

/* ---- parallel PTX generation -------------------------------------------
 * LLVM spends most of tkc's time (O3 and instruction selection over every
 * unrolled kernel), and one LLVM module runs on one core.  PTX output is
 * therefore built from parts of CG_PART_KERNELS kernels each, compiled by
 * a pool of threads (one per online CPU, TKC_JOBS overrides), and the
 * parts' PTX texts are joined in kernel order.  The parts are fixed by the
 * kernel list alone, never by the thread count, so the output is the same
 * on every machine.  Diagnostics from parts go through one mutex. */
#define CG_PART_KERNELS 8
#define CG_MAX_THREADS 16

typedef struct PartJob {
    Module *m;
    Diag *diag;
    int nparts;
    char **texts;          /* PTX of each part (NULL after an error) */
    bool *done;            /* part claimed */
    pthread_mutex_t lock;
} PartJob;

static void *part_worker(void *opaque) {
    PartJob *job = opaque;
    for (;;) {
        int part = -1;
        pthread_mutex_lock(&job->lock);
        for (int i = 0; i < job->nparts && part < 0; i++)
            if (!job->done[i]) { job->done[i] = true; part = i; }
        pthread_mutex_unlock(&job->lock);
        if (part < 0) return NULL;
        int first = part * CG_PART_KERNELS;
        int count = job->m->nkernels - first;
        if (count > CG_PART_KERNELS) count = CG_PART_KERNELS;
        job->texts[part] = codegen_part(job->m, first, count, job->diag, CODEGEN_PTX);
    }
}

static int worker_count(int nparts) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    const char *env = getenv("TKC_JOBS");
    if (env && *env) cpus = strtol(env, NULL, 10);
    if (cpus < 1) cpus = 1;
    if (cpus > CG_MAX_THREADS) cpus = CG_MAX_THREADS;
    return (int)(cpus < nparts ? cpus : nparts);
}

/* Appends part's PTX to out: the first part whole, later ones without the
 * header (.version/.target/.address_size) and without declarations an
 * earlier part already made (the shared array, declared before the first
 * kernel that uses it).  Anything else global
 * (.global/.const data, .func helpers) could collide between parts; the
 * kernels emit none, and an internal error says so if that changes. */
static void append_part(char **out, size_t *size, const char *text, bool first,
                        bool *shared_declared) {
    const char *body = text;
    if (!first) {
        const char *header_end = strstr(text, ".address_size");
        if (!header_end) ice("PTX part without an .address_size line");
        body = strchr(header_end, '\n');
        body = body ? body + 1 : header_end + strlen(header_end);
    }
    size_t length = strlen(body);
    char *grown = realloc(*out, *size + length + 1);
    if (!grown) ice("out of memory");
    *out = grown;
    char *dst = *out + *size;
    for (const char *line = body; *line;) {
        const char *end = strchr(line, '\n');
        size_t n = end ? (size_t)(end - line) + 1 : strlen(line);
        bool skip = false;
        /* O3 drops the shared array from parts that never use it, so the
         * first part that declares it keeps its line */
        if (strncmp(line, ".extern .shared", 15) == 0 &&
            memmem(line, n, CG_SHARED_NAME, strlen(CG_SHARED_NAME))) {
            skip = *shared_declared;
            *shared_declared = true;
        }
        if (strncmp(line, ".global", 7) == 0 || strncmp(line, ".const", 6) == 0 ||
            strncmp(line, ".func", 5) == 0 || strncmp(line, ".visible .func", 14) == 0)
            ice("PTX part declares module-level %.*s: joining parts would collide",
                (int)(n > 40 ? 40 : n), line);
        if (!skip) { memcpy(dst, line, n); dst += n; }
        line += n;
    }
    *dst = 0;
    *size = (size_t)(dst - *out);
}

char *codegen_module(Module *m, Diag *diag, CodegenOutput what) {
    const char *arch = m->arch ? m->arch : "sm_90a";
    if (strcmp(arch, "sm_90a") != 0 && strcmp(arch, "sm_100a") != 0)
        ice("unsupported architecture %s", arch);
    initialize_nvptx();
    /* LLVM IR is for reading: one module */
    if (what == CODEGEN_LLVM_IR || m->nkernels <= CG_PART_KERNELS)
        return codegen_part(m, 0, m->nkernels, diag, what);

    PartJob job = {.m = m, .diag = diag};
    job.nparts = (m->nkernels + CG_PART_KERNELS - 1) / CG_PART_KERNELS;
    job.texts = calloc((size_t)job.nparts, sizeof *job.texts);
    job.done = calloc((size_t)job.nparts, sizeof *job.done);
    if (!job.texts || !job.done) ice("out of memory");
    pthread_mutex_init(&job.lock, NULL);
    pthread_t threads[CG_MAX_THREADS];
    int nthreads = worker_count(job.nparts);
    int started = 0;
    for (int i = 1; i < nthreads; i++)
        if (pthread_create(&threads[started], NULL, part_worker, &job) == 0) started++;
    part_worker(&job); /* this thread works too */
    for (int i = 0; i < started; i++) pthread_join(threads[i], NULL);
    pthread_mutex_destroy(&job.lock);

    char *result = NULL;
    size_t size = 0;
    bool failed = false, shared_declared = false;
    for (int i = 0; i < job.nparts; i++) {
        if (!job.texts[i]) { failed = true; continue; }
        if (!failed) append_part(&result, &size, job.texts[i], i == 0, &shared_declared);
        free(job.texts[i]);
    }
    free(job.texts);
    free(job.done);
    if (failed) { free(result); return NULL; }
    return result;
}
