/*
 * codegen_llvm.h -- private interface between the codegen_*.c files.
 *
 * The LLVM back end is split by topic: codegen_llvm.c owns the module, the
 * target machine, kernel signatures and statements; codegen_expr.c turns
 * expressions into LLVM values and does every memory access (addresses,
 * vector and masked loads and stores); codegen_math.c holds the numerics
 * of tilekernels-spec.md 2.1/2.2 (expf, conversions to and from the 8-bit
 * floats, shuffles); codegen_async.c the Hopper statements (mbarriers,
 * TMA, wgmma, fences).  They share one Codegen context per kernel so that
 * two modules can be compiled in one process; nothing here is global.
 */
#ifndef TKC_CODEGEN_LLVM_H
#define TKC_CODEGEN_LLVM_H

#include <llvm-c/Core.h>
#include <llvm-c/TargetMachine.h>

#include "ir.h"

/* Address space numbers of the NVPTX back end. */
#define CG_ADDRSPACE_GLOBAL 1
#define CG_ADDRSPACE_SHARED 3
#define CG_ADDRSPACE_SHARED_CLUSTER 7 /* TMA destinations */

/* A buffer that has storage of its own in the function: a LOCAL array
 * (an alloca) or a tensor parameter (the kernel argument). */
typedef struct CodegenBuffer {
    const Buffer *buffer;
    LLVMValueRef base;
    LLVMTypeRef array_type; /* LOCAL: [n x T] */
} CodegenBuffer;

typedef struct Codegen {
    LLVMContextRef context;
    LLVMModuleRef module;
    LLVMBuilderRef builder;
    Diag *diag;
    const char *arch;
    bool failed;               /* a user-facing error was reported */

    /* per kernel */
    Kernel *kernel;
    LLVMValueRef function;
    LLVMBasicBlockRef entry;   /* allocas go here */
    LLVMBasicBlockRef exit;    /* RETURN branches here */
    LLVMValueRef shared;       /* the dynamic shared array (addrspace 3) */
    LLVMValueRef *values;      /* by Var.id: SSA value, or for a mutable
                                  variable the alloca holding it */
    int nvalues;
    CodegenBuffer *buffers;
    int nbuffers, buffer_capacity;
    LLVMValueRef *tensor_maps; /* by TensorMap index: the byval parameter */
    /* wgmma accumulator ranges not yet known complete (codegen_async.c
     * pins them after the `wgmma_wait` that completes their group).
     * group: the value of wgmma_commits when the range was issued, i.e.
     * the commit group it belongs to; only differences matter. */
    struct CodegenAccumulator {
        const Buffer *acc;
        int64_t offset;
        int count;
        int64_t group;
    } *accumulators;
    int naccumulators, accumulator_capacity;
    int64_t wgmma_commits;     /* wgmma.commit_group emitted so far */
    /* the last instruction of the latest wgmma, commit or wait emitted:
     * LOCAL stores after it are fenced before the next wait (stale when
     * it belongs to another function) */
    LLVMValueRef wgmma_mark;
    bool wgmma_reported;       /* "no wgmma on this arch" said once */
    /* codegen_cache.c: the kernel's L2 policy registers by CacheHint,
     * NULL until first used */
    LLVMValueRef cache_policies[CACHE_COUNT];
} Codegen;

/* codegen_llvm.c */
LLVMTypeRef cg_scalar_type(Codegen *cg, DType t);    /* value type */
LLVMTypeRef cg_memory_type(Codegen *cg, DType t);    /* in memory */
LLVMTypeRef cg_type(Codegen *cg, DType t, int lanes);
LLVMValueRef cg_call_intrinsic(Codegen *cg, const char *name,
                               LLVMTypeRef *overloads, int noverloads,
                               LLVMValueRef *args, int nargs);
LLVMValueRef cg_var_value(Codegen *cg, const Var *v, Loc loc);
CodegenBuffer *cg_buffer(Codegen *cg, const Buffer *b);
LLVMValueRef cg_i32(Codegen *cg, int64_t v);
/* Starts a new block after the current one (which must be terminated). */
LLVMBasicBlockRef cg_new_block(Codegen *cg, const char *name);
void cg_error(Codegen *cg, Loc loc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* codegen_expr.c */
LLVMValueRef cg_expr(Codegen *cg, const Expr *e);
LLVMValueRef cg_splat(Codegen *cg, LLVMValueRef scalar, int lanes);
/* Converts between the value form and the memory form of a dtype (bool is
 * i1 in registers and i8 in memory). */
LLVMValueRef cg_to_memory(Codegen *cg, LLVMValueRef v, DType t);
LLVMValueRef cg_from_memory(Codegen *cg, LLVMValueRef v, DType t);
LLVMValueRef cg_load(Codegen *cg, const Expr *e);
void cg_store(Codegen *cg, const Stmt *s);

/* codegen_cache.c: a load or store of a global tensor under its own
 * cache(P) or the kernel's load_cache / store_cache hint, as inline PTX.  cg_cached_store returns
 * false (and emits nothing) when the access takes no hint;
 * cg_cached_load returns the loaded value of `type`, or NULL. */
bool cg_cached_store(Codegen *cg, const Buffer *b, LLVMValueRef value, LLVMValueRef address,
                     unsigned alignment);
LLVMValueRef cg_cached_load(Codegen *cg, const Buffer *b, LLVMTypeRef type,
                            LLVMValueRef address, unsigned alignment);
void cg_atomic(Codegen *cg, const Stmt *s);
/* Byte offset (i32) of shared element index[0..rank) in the dynamic shared
 * array, with or without the buffer's XOR swizzle; and the addrspace(3)
 * pointer at such an offset. */
LLVMValueRef cg_shared_offset(Codegen *cg, const Buffer *b, LLVMValueRef *index,
                              bool swizzled);
LLVMValueRef cg_shared_pointer(Codegen *cg, LLVMValueRef offset);
/* The i32 indices of a region's origin (Region.start). */
void cg_region_start(Codegen *cg, const Region *r, LLVMValueRef *out);

/* codegen_async.c: one function per statement kind */
void cg_mbarrier(Codegen *cg, const Stmt *s);
void cg_tma(Codegen *cg, const Stmt *s);
void cg_wgmma(Codegen *cg, const Stmt *s);
void cg_fence(Codegen *cg, const Stmt *s);

/* codegen_math.c */
LLVMValueRef cg_call(Codegen *cg, const Expr *e);
LLVMValueRef cg_convert(Codegen *cg, LLVMValueRef v, DType from, DType to,
                        int lanes, Loc loc);
LLVMValueRef cg_exp(Codegen *cg, LLVMValueRef x);
/* Applies a scalar f32 -> f32 function lane by lane. */
LLVMValueRef cg_map_lanes(Codegen *cg, LLVMValueRef v, int lanes,
                          LLVMValueRef (*fn)(Codegen *, LLVMValueRef));

#endif
