/*
 * ir.h -- the one header of the tkc compiler: the structured IR (a tree of
 * statements over expression trees) that lang/ lowers every kernel
 * instance into, and the passes, analyses and back end over it.  Each pass
 * rewrites a Kernel in place (tile level -> thread level -> vector level).
 * The meaning of the structures: docs/ir.md section 10; their text form:
 * the rest of docs/ir.md.  Sections below are owned by the file named in
 * their banner; a function's home is the banner it is declared under.
 */
#ifndef TKC_IR_H
#define TKC_IR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define IR_MAX_RANK 6       /* the most dimensions a tensor or tile may have */
#define IR_MAX_LANES 32     /* widest vector expression: 16 bytes of e2m1 */
#define IR_VECTOR_BYTES 16  /* widest global access sm_90 has: LDG.E.128 */
#define IR_WARP_SIZE 32

/* ===================================================================== */
/* arena.c                                                                */
/* ===================================================================== */

/* Bump allocator; everything of one compilation lives in one arena and is
 * freed at once.  arena_alloc returns zeroed, 16-byte-aligned memory. */
typedef struct Arena Arena;
Arena *arena_new(void);
void arena_free(Arena *arena);
void *arena_alloc(Arena *arena, size_t size);
char *arena_strdup(Arena *arena, const char *s);
char *arena_printf(Arena *arena, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Growable malloc'd text (the launcher header, inline-asm strings):
 * text_add appends printf-style; data is NUL-terminated once anything was
 * added (text_get returns "" before that); the owner frees data. */
typedef struct Text {
    char *data;
    size_t length, capacity;
} Text;
void text_add(Text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
const char *text_get(const Text *t);

/* Growable pointer array living in an arena (old storage is abandoned). */
typedef struct {
    void **items;
    int count, capacity;
} PtrVec;
void vec_push(Arena *arena, PtrVec *vec, void *item);

/* ===================================================================== */
/* diag.c  (shared with lang/)                                            */
/* ===================================================================== */

typedef struct {
    const char *file; /* path as given on the command line, or "<ir>" */
    int line, col;    /* 1-based; 0 means "no location" */
} Loc;

/* Diagnostics are collected, not fatal: diag_error records and prints
 * `file:line:col: error: msg`, the source line and a caret, and keeps
 * going.  After DIAG_MAX_ERRORS it stops printing.  Internal compiler bugs
 * go through ice(), which prints and exits with status 3. */
#define DIAG_MAX_ERRORS 20
typedef struct Diag {
    FILE *out;        /* where messages go (stderr in tkc) */
    int errors;       /* number of errors reported so far */
    /* source text registry so the caret line can be printed */
    const char *files[64];
    const char *texts[64];
    int nfiles;
} Diag;
void diag_init(Diag *diag, FILE *out);
void diag_add_source(Diag *diag, const char *file, const char *text);
void diag_error(Diag *diag, Loc loc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void diag_note(Diag *diag, Loc loc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
_Noreturn void ice_at(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define ice(...) ice_at(__FILE__, __LINE__, __VA_ARGS__)

/* ===================================================================== */
/* ir.c : data types                                                      */
/* ===================================================================== */

/* X(ENUM, name, bits, class).  `bits` is the storage width of one element;
 * e2m1 is 4 (two per byte).  ue8m0 is an unsigned biased exponent byte. */
#define IR_DTYPES(X)                                                         \
    X(VOID, "void", 0, DCLASS_VOID)                                          \
    X(BOOL, "bool", 8, DCLASS_BOOL)                                          \
    X(I8, "i8", 8, DCLASS_SINT)                                              \
    X(U8, "u8", 8, DCLASS_UINT)                                              \
    X(I16, "i16", 16, DCLASS_SINT)                                           \
    X(U16, "u16", 16, DCLASS_UINT)                                           \
    X(I32, "i32", 32, DCLASS_SINT)                                           \
    X(U32, "u32", 32, DCLASS_UINT)                                           \
    X(I64, "i64", 64, DCLASS_SINT)                                           \
    X(U64, "u64", 64, DCLASS_UINT)                                           \
    X(F16, "f16", 16, DCLASS_FLOAT)                                          \
    X(BF16, "bf16", 16, DCLASS_FLOAT)                                        \
    X(F32, "f32", 32, DCLASS_FLOAT)                                          \
    X(F64, "f64", 64, DCLASS_FLOAT)                                          \
    X(E4M3, "e4m3", 8, DCLASS_FLOAT8)                                        \
    X(E5M2, "e5m2", 8, DCLASS_FLOAT8)                                        \
    X(E2M1, "e2m1", 4, DCLASS_FLOAT8)                                        \
    X(UE8M0, "ue8m0", 8, DCLASS_UINT)

typedef enum {
#define X(e, name, bits, cls) DT_##e,
    IR_DTYPES(X)
#undef X
        DT_COUNT
} DType;

typedef enum {
    DCLASS_VOID, DCLASS_BOOL, DCLASS_SINT, DCLASS_UINT, DCLASS_FLOAT,
    DCLASS_FLOAT8 /* storage-only floats: arithmetic happens in f32 */
} DClass;

const char *ir_dtype_name(DType t);
int ir_dtype_bits(DType t);
DClass ir_dtype_class(DType t);
bool ir_dtype_from_name(const char *name, DType *out);
bool ir_dtype_is_int(DType t);   /* SINT, UINT or BOOL */
bool ir_dtype_is_float(DType t); /* FLOAT or FLOAT8 */
/* Operand dtypes a Hopper MMA (gemm, wgmma) takes: both bf16, both f16,
 * or any two fp8 types (e4m3 and e5m2 may mix). */
bool ir_dtype_mma_operands(DType a, DType b);

/* ===================================================================== */
/* ir.c : expressions                                                     */
/* ===================================================================== */

/* Binary operators.  X(ENUM, text).  On integers DIV and MOD are floor
 * division and modulo (as in TileLang); on floats DIV is IEEE division
 * (div.rn) and MOD is not allowed.  Comparisons yield bool. */
#define IR_BINOPS(X)                                                         \
    X(ADD, "+") X(SUB, "-") X(MUL, "*") X(DIV, "/") X(MOD, "%")              \
    X(MIN, "min") X(MAX, "max")                                              \
    X(AND, "&") X(OR, "|") X(XOR, "^") X(SHL, "<<") X(SHR, ">>")             \
    X(EQ, "==") X(NE, "!=") X(LT, "<") X(LE, "<=") X(GT, ">") X(GE, ">=")    \
    X(LAND, "&&") X(LOR, "||")

typedef enum {
#define X(e, text) BIN_##e,
    IR_BINOPS(X)
#undef X
        BIN_COUNT
} BinOp;

#define IR_UNOPS(X) X(NEG, "neg") X(NOT, "not") X(LNOT, "lnot") X(ABS, "abs")
typedef enum {
#define X(e, text) UN_##e,
    IR_UNOPS(X)
#undef X
        UN_COUNT
} UnOp;

/* Intrinsic calls.  X(ENUM, name, nargs, flags).  nargs -1 = variadic.
 * flags: INTR_PURE (no side effect, may be CSE'd or hoisted),
 *        INTR_THREAD (value differs per thread: never hoisted out of a
 *        per-thread region), INTR_SYNC (warp-synchronous: every lane of the
 *        warp must execute it).
 * Numerics follow tilekernels-spec.md section 2.1: EXP is libdevice expf
 * (the 3-FMA range reduction + ex2.approx.ftz), SIGMOID is 1/(1+EXP(-x)),
 * RSQRT is rsqrt.approx, SQRT is sqrt.rn, FMA is fma.rn, LOG1P is libdevice
 * log1pf (add.rz + fma.rn polynomial: IEEE operations only, so a CPU can
 * reproduce it bit for bit). */
#define INTR_PURE 1
#define INTR_THREAD 2
#define INTR_SYNC 4
#define IR_INTRINSICS(X)                                                     \
    X(THREAD_IDX, "thread_idx", 0, INTR_PURE | INTR_THREAD)                  \
    X(BLOCK_IDX_X, "block_idx_x", 0, INTR_PURE)                              \
    X(BLOCK_IDX_Y, "block_idx_y", 0, INTR_PURE)                              \
    X(BLOCK_IDX_Z, "block_idx_z", 0, INTR_PURE)                              \
    X(LANE_IDX, "lane_idx", 0, INTR_PURE | INTR_THREAD)                      \
    X(WARP_IDX, "warp_idx", 0, INTR_PURE | INTR_THREAD)                      \
    X(EXP, "exp", 1, INTR_PURE)                                              \
    X(EXP2, "exp2", 1, INTR_PURE)                                            \
    X(ONE_PLUS_EXP, "one_plus_exp", 1, INTR_PURE) /* 1 + exp(x), one FFMA */ \
    X(RSQRT, "rsqrt", 1, INTR_PURE)                                          \
    X(SQRT, "sqrt", 1, INTR_PURE)                                            \
    X(SIGMOID, "sigmoid", 1, INTR_PURE)                                      \
    X(LOG1P, "log1p", 1, INTR_PURE)                                          \
    X(FMA, "fma", 3, INTR_PURE)                                              \
    X(SHFL_XOR, "shfl_xor", 2, INTR_THREAD | INTR_SYNC)                      \
    X(SHFL_IDX, "shfl_idx", 2, INTR_THREAD | INTR_SYNC)                      \
    X(F16_RZ_BITS, "f16_rz_bits", 1, INTR_PURE) /* f32 -> u16 bits, RZ */    \
    X(E2M1_BITS, "e2m1_bits", 1, INTR_PURE)     /* f32 -> u8 nibble, RNE */  \
    X(ISFINITE, "isfinite", 1, INTR_PURE)                                    \
    X(RCP_APPROX, "rcp_approx", 1, INTR_PURE)   /* rcp.approx.ftz.f32 */     \
    X(POPCOUNT, "popcount", 1, INTR_PURE)                                    \
    /* packed bf16x2 in a u32 (low half the first lane), as the PTX ops */  \
    X(BF16X2_MUL, "bf16x2_mul", 2, INTR_PURE)   /* mul.rn.bf16x2 */          \
    X(BF16X2_FMA, "bf16x2_fma", 3, INTR_PURE)   /* fma.rn.bf16x2 */          \
    X(BF16X2_MIN, "bf16x2_min", 2, INTR_PURE)   /* min.bf16x2: NaN-dropping */ \
    X(BF16X2_MAX, "bf16x2_max", 2, INTR_PURE)   /* max.bf16x2: NaN-dropping */ \
    X(BF16X2_MAX_XORSIGN_ABS, "bf16x2_max_xorsign_abs", 2, INTR_PURE)        \
    /* max(|a|, |b|) with sign(a) ^ sign(b): max.xorsign.abs.bf16x2 */      \
    X(BF16X2, "bf16x2", 2, INTR_PURE)   /* two bf16 -> their u32 word */     \
    X(PRMT, "prmt", 3, INTR_PURE)               /* prmt.b32 byte permute */ \
    /* packed f16x2 in a u32, as bf16x2 above */                             \
    X(F16X2_MUL, "f16x2_mul", 2, INTR_PURE)     /* mul.rn.f16x2 */           \
    X(F16X2_FMA, "f16x2_fma", 3, INTR_PURE)     /* fma.rn.f16x2 */           \
    X(F16X2_MIN, "f16x2_min", 2, INTR_PURE)     /* min.f16x2: NaN-dropping */ \
    X(F16X2_MAX, "f16x2_max", 2, INTR_PURE)     /* max.f16x2: NaN-dropping */ \
    X(F16X2_MAX_NAN, "f16x2_max_nan", 2, INTR_PURE) /* max.NaN.f16x2 */   \
    /* the low / high half in both halves: ptxas folds it into a later\
     * f16x2 operand as R.H0_H0 / R.H1_H1 */                              \
    X(F16X2_LOW2, "f16x2_low2", 1, INTR_PURE)                               \
    X(F16X2_HIGH2, "f16x2_high2", 1, INTR_PURE)                             \
    X(F16X2_MAX_XORSIGN_ABS, "f16x2_max_xorsign_abs", 2, INTR_PURE)          \
    X(F16X2_ABS, "f16x2_abs", 1, INTR_PURE)     /* abs.f16x2: signs cleared */ \
    /* the two e4m3 bytes in bits 0..15 -> f16x2 (exact): cvt.rn.f16x2.e4m3x2 */ \
    X(E4M3X2_F16X2, "e4m3x2_f16x2", 1, INTR_PURE)                           \
    /* the same of bits 16..31 (the .H1 operand, no shift) */                \
    X(E4M3X2_F16X2_HIGH, "e4m3x2_f16x2_high", 1, INTR_PURE)

typedef enum {
#define X(e, name, nargs, flags) INTR_##e,
    IR_INTRINSICS(X)
#undef X
        INTR_COUNT
} Intrinsic;

/* Casts.  CAST_CONVERT is a value conversion: float->float rounds to
 * nearest even; float->e4m3/e5m2 is cvt.rn.satfinite (NaN -> 0x7F);
 * float->int truncates toward zero; int->int wraps; int->float rounds to
 * nearest.  CAST_BITCAST reinterprets bits of equal width. */
typedef enum { CAST_CONVERT, CAST_BITCAST } CastKind;

#define IR_EXPR_KINDS(X)                                                     \
    X(INT, "int")         /* u.int_value, dtype is an integer type       */   \
    X(FLOAT, "float")     /* u.float_value (double), dtype a float type  */   \
    X(VAR, "var")         /* u.var                                       */   \
    X(LOAD, "load")       /* u.load: buffer[indices] (lanes wide)        */   \
    X(UNARY, "unary")     /* u.unary                                     */   \
    X(BINARY, "binary")   /* u.binary                                    */   \
    X(SELECT, "select")   /* u.select: cond ? a : b                      */   \
    X(CAST, "cast")       /* u.cast                                      */   \
    X(CALL, "call")       /* u.call: intrinsic(args)                     */   \
    X(RAMP, "ramp")       /* u.ramp: base + i*stride for i < lanes       */   \
    X(BROADCAST, "broadcast") /* u.broadcast: value repeated lanes times */

typedef enum {
#define X(e, text) EXPR_##e,
    IR_EXPR_KINDS(X)
#undef X
        EXPR_COUNT
} ExprKind;

typedef struct Buffer Buffer;
typedef struct Var Var;
typedef struct Expr Expr;

struct Expr {
    ExprKind kind;
    DType dtype;  /* element type of the value */
    int lanes;    /* 1 = scalar; >1 only after vectorize */
    Loc loc;
    union {
        int64_t int_value;
        double float_value;
        Var *var;
        struct { Buffer *buffer; Expr **indices; Expr *predicate;
                 int align_bytes; } load;
        /* predicate: NULL or a bool expr (lanes wide, or a BROADCAST of
         * a scalar when uniform); false lanes read 0 (masking).
         * Vector form (lanes > 1): the last index is a RAMP(base, 1, lanes)
         * for a contiguous access (contiguous in memory only when the
         * buffer's last stride is 1: a global with a run-time last stride
         * is gathered per lane), or any lanes-wide expr for a gather;
         * other indices are lanes wide too (usually BROADCAST).
         * align_bytes: alignment of the first lane's address proven by
         * vectorize (0 = natural element alignment). */
        struct { UnOp op; Expr *operand; } unary;
        struct { BinOp op; Expr *lhs, *rhs; } binary;
        struct { Expr *cond, *then_value, *else_value; } select;
        struct { CastKind kind; Expr *value; } cast;
        struct { Intrinsic op; Expr **args; int nargs; } call;
        struct { Expr *base; int64_t stride; } ramp;
        struct { Expr *value; } broadcast;
    } u;
};

/* ===================================================================== */
/* ir.c : variables and buffers                                           */
/* ===================================================================== */

typedef enum {
    VAR_SYMBOL,  /* run-time tensor dimension or stride (i32; docs/ir.md 10) */
    VAR_SCALAR,  /* a scalar kernel parameter */
    VAR_LET,     /* immutable, defined once by STMT_LET */
    VAR_MUTABLE, /* STMT_LET with mutable = true, updated by STMT_ASSIGN */
    VAR_LOOP,    /* induction variable of a FOR or PARALLEL loop */
    VAR_BLOCK    /* blockIdx.x/y/z named by the launch statement */
} VarKind;

struct Var {
    const char *name; /* unique within a kernel (lower_ast renames) */
    DType dtype;
    VarKind kind;
    int id;           /* dense index within the kernel, for tables */
    int block_dim;    /* VAR_BLOCK: 0, 1, 2 for x, y, z */
};

typedef enum {
    SCOPE_GLOBAL,   /* tensor parameter in device memory */
    SCOPE_SHARED,   /* block-wide shared memory */
    SCOPE_FRAGMENT, /* register tile distributed over the block's threads */
    SCOPE_LOCAL     /* per-thread array (registers or local memory) */
} Scope;

/* A fragment layout, chosen by infer_layouts: which thread holds which
 * element of a tile in which slot of its LOCAL array (the formulas:
 * docs/ir.md section 10). */
typedef enum {
    LAYOUT_CHUNKED, /* chunks of `vec` dealt round-robin; or, reduced, the
                       result of a last-dim REDUCE of a parent layout */
    LAYOUT_MMA      /* the wgmma accumulator / A-register layout */
} LayoutKind;

typedef struct Layout {
    LayoutKind kind;
    int rank;                          /* rank of the tile itself */
    int64_t extent[IR_MAX_RANK];       /* tile shape */
    int threads;                       /* block threads the tile spans */
    int vec;                           /* elements per chunk */
    int64_t slots;                     /* ceil(chunks / threads) */
    bool reduced;                      /* result of a last-dim reduction */
    int parent_rank;                   /* reduced: rank + 1 */
    int64_t parent_extent[IR_MAX_RANK];/* reduced: the parent tile shape */
    int group;                         /* reduced: chunks per result */
    int warpgroups;                    /* MMA: warpgroups along M */
} Layout;

/* Cache policy of global loads or stores (launch ... with(load_cache = C,
 * store_cache = C), a tensor's cache(C); docs/language.md): the default
 * caching, .cs (evict-first in L1 and L2), or an L2::cache_hint policy. */
#define IR_CACHE_HINTS(X) X(DEFAULT, "default") X(STREAMING, "streaming") \
    X(EVICT_FIRST, "evict_first") X(EVICT_LAST, "evict_last")
typedef enum {
#define X(e, text) CACHE_##e,
    IR_CACHE_HINTS(X)
#undef X
        CACHE_COUNT
} CacheHint;

struct Buffer {
    const char *name;
    DType dtype;
    Scope scope;
    int rank;
    Expr *shape[IR_MAX_RANK];   /* GLOBAL: symbolic; others: EXPR_INT */
    Expr *strides[IR_MAX_RANK]; /* GLOBAL: in elements; NULL otherwise */
    int param_index;            /* GLOBAL: index in Kernel.params */
    Layout *layout;             /* FRAGMENT: set by infer_layouts */
    /* SHARED, set by plan_shared (the address formula: docs/ir.md 10) */
    int64_t shared_offset;      /* byte offset in the block's shared array */
    int64_t pitch;              /* row pitch in elements, >= shape[rank-1] */
    int swizzle_shift;          /* XOR swizzle; -1 = none */
    const char *plan_note;      /* SHARED: plan_shared's choice and the
                                   simulated wavefronts of every access,
                                   for dumps (ir_print may show it as a
                                   comment); NULL before plan_shared */
    bool read_only;             /* GLOBAL: never stored to (ld.global.nc) */
    bool has_cache_hint;        /* GLOBAL: cache_hint replaces the launch's */
    CacheHint cache_hint;       /*   load_cache / store_cache (`cache(P)`)  */
    /* SHARED: the constraint the async units (TMA, wgmma) put on
     * plan_shared, SHARED_ASYNC_* (docs/ir.md 10) */
    int async_kind;
    bool mbarrier_synchronized; /* SHARED: ordered by mbarriers only
                                   (insert_barriers leaves it alone) */
    Loc loc;
};
enum { SHARED_ASYNC_NONE, SHARED_ASYNC_PLAIN, SHARED_ASYNC_SWIZZLE128,
       SHARED_ASYNC_MBARRIER };

/* ===================================================================== */
/* ir.c : statements                                                      */
/* ===================================================================== */

/* A region of a buffer: per dimension a start expression and a constant
 * extent.  extent 0 on a dimension means "a single index" (the dimension
 * is dropped from the region's shape, e.g. x[b, i:+64]). */
typedef struct Region {
    Buffer *buffer;
    Expr *start[IR_MAX_RANK];
    int64_t extent[IR_MAX_RANK];
} Region;

#define IR_LOOP_KINDS(X)                                                     \
    X(SERIAL, "serial")       /* ordinary loop, per thread                */  \
    X(UNROLL, "unroll")       /* constant trip count, fully unrolled      */  \
    X(VECTORIZED, "vectorized") /* constant trip count, one vector op     */ \
    X(PIPELINED, "pipelined") /* tile level: software pipeline, `stages` */

typedef enum {
#define X(e, text) LOOP_##e,
    IR_LOOP_KINDS(X)
#undef X
        LOOP_COUNT
} LoopKind;

#define IR_REDUCE_OPS(X) X(SUM, "sum") X(MAX, "max") X(MIN, "min") X(ABSMAX, "absmax")
typedef enum {
#define X(e, text) REDUCE_##e,
    IR_REDUCE_OPS(X)
#undef X
        REDUCE_COUNT
} ReduceOp;

#define IR_ATOMIC_OPS(X) X(ADD, "add") X(MAX, "max") X(MIN, "min")
typedef enum {
#define X(e, text) ATOMIC_##e,
    IR_ATOMIC_OPS(X)
#undef X
        ATOMIC_COUNT
} AtomicOp;

/* Hint values of copy(..., tma = H) and launch hints (docs/hopper.md):
 * AUTO lets the compiler decide, OFF forbids, ON forces (an error when
 * the copy or kernel cannot use it). */
typedef enum { HINT_AUTO, HINT_OFF, HINT_ON } Hint;

/* Roles of a PIPELINED loop (set by warp_specialize; docs/hopper.md 3). */
#define IR_PIPE_ROLES(X)                                                     \
    X(BOTH, "both")         /* every thread produces and consumes         */ \
    X(PRODUCER, "producer") /* the producer warp's half: only TMA copies  */ \
    X(CONSUMER, "consumer") /* the consumer warpgroups' half              */
typedef enum {
#define X(e, text) PIPE_##e,
    IR_PIPE_ROLES(X)
#undef X
        PIPE_COUNT
} PipeRole;

/* mbarrier operations.  X(ENUM, text, has_value).  The value is the
 * arrival count (INIT), the transaction bytes (EXPECT_TX: an arrive that
 * also expects that many bytes), or the phase parity to wait for (WAIT:
 * blocks until the phase with that parity has completed).  ARRIVE_CLUSTER
 * is executed by whole warps: after the warp's lanes synchronise, the
 * warp arrives once on the barrier at the same offset in every CTA of
 * the kernel's cluster (lane r on CTA rank r, through mapa), with the
 * arrive's default release semantics (docs/hopper.md 11). */
#define IR_MBARRIER_OPS(X)                                                   \
    X(INIT, "init", 1) X(ARRIVE, "arrive", 0) X(EXPECT_TX, "expect_tx", 1)   \
    X(WAIT, "wait", 1) X(ARRIVE_CLUSTER, "arrive_cluster", 0)
typedef enum {
#define X(e, text, v) MBAR_##e,
    IR_MBARRIER_OPS(X)
#undef X
        MBAR_COUNT
} MbarrierOp;

/* Fences and other operand-less async bookkeeping.  X(ENUM, text,
 * has_value): WGMMA_WAIT / TMA_STORE_WAIT wait until at most `value`
 * groups are pending; SETMAXNREG_* set the warpgroup's register count to
 * `value` (24..256, multiple of 8). */
#define IR_FENCE_OPS(X)                                                      \
    X(MBARRIER_INIT, "mbarrier_init", 0) /* fence.mbarrier_init         */   \
    X(PROXY_ASYNC, "proxy_async", 0)     /* fence.proxy.async.shared::cta */ \
    X(WGMMA_FENCE, "wgmma_fence", 0)     /* wgmma.fence                  */  \
    X(WGMMA_COMMIT, "wgmma_commit", 0)   /* wgmma.commit_group           */  \
    X(WGMMA_WAIT, "wgmma_wait", 1)       /* wgmma.wait_group N           */  \
    X(TMA_STORE_COMMIT, "tma_store_commit", 0) /* cp.async.bulk.commit  */   \
    X(TMA_STORE_WAIT, "tma_store_wait", 1) /* cp.async.bulk.wait_group.read */ \
    X(SETMAXNREG_INC, "setmaxnreg_inc", 1)                                   \
    X(SETMAXNREG_DEC, "setmaxnreg_dec", 1)                                   \
    X(CLUSTER_SYNC, "cluster_sync", 0) /* barrier.cluster.arrive.release +  \
                                          barrier.cluster.wait.acquire */
typedef enum {
#define X(e, text, v) FENCE_##e,
    IR_FENCE_OPS(X)
#undef X
        FENCE_COUNT
} FenceOp;

/* Statement kinds.  X(ENUM, text, level): level T = tile level only
 * (gone after lower_parallel), A = any level. */
#define IR_STMT_KINDS(X)                                                     \
    X(SEQ, "seq", A)          /* u.seq: statements in order              */  \
    X(LET, "let", A)          /* u.let: var = value (mutable: var ...)   */  \
    X(ASSIGN, "assign", A)    /* u.assign: var = value                   */  \
    X(STORE, "store", A)      /* u.store: buffer[indices] = value        */  \
    X(ALLOC, "alloc", A)      /* u.alloc: declares a shared/frag/local   */  \
    X(FOR, "for", A)          /* u.loop                                  */  \
    X(PARALLEL, "parallel", T) /* u.parallel: tile loop over threads     */  \
    X(IF, "if", A)            /* u.if_                                   */  \
    X(BARRIER, "barrier", A)  /* u.barrier: bar.sync 0 or __syncwarp     */  \
    X(COPY, "copy", T)        /* u.copy: tile copy src -> dst            */  \
    X(FILL, "fill", T)        /* u.fill: dst region = value              */  \
    X(REDUCE, "reduce", T)    /* u.reduce: fragment reduction            */  \
    X(ATOMIC, "atomic", A)    /* u.atomic: buffer[indices] op= value     */  \
    X(EVAL, "eval", A)        /* u.eval: expression for its effect       */  \
    X(RETURN, "return", A)    /* thread exits                            */  \
    X(ASSERT, "assert", A)    /* u.assert_: trap when false              */  \
    X(GEMM, "gemm", T)        /* u.gemm: tile matrix multiply-accumulate */  \
    X(MBARRIER, "mbarrier", A) /* u.mbarrier: init/arrive/expect_tx/wait */  \
    X(TMA, "tma", A)          /* u.tma: one cp.async.bulk.tensor         */  \
    X(WGMMA, "wgmma", A)      /* u.wgmma: one wgmma.mma_async            */  \
    X(FENCE, "fence", A)      /* u.fence: fences, wgmma groups, setmaxnreg */

typedef enum {
#define X(e, text, level) STMT_##e,
    IR_STMT_KINDS(X)
#undef X
        STMT_COUNT
} StmtKind;

typedef struct Stmt Stmt;
struct Stmt {
    StmtKind kind;
    Loc loc;
    union {
        struct { Stmt **items; int count; } seq;
        struct { Var *var; Expr *value; } let;       /* value may be NULL
                                                       for a mutable var */
        struct { Var *var; Expr *value; } assign;
        struct { Buffer *buffer; Expr **indices; Expr *value;
                 Expr *predicate; int align_bytes; } store;
                 /* as for EXPR_LOAD; false lanes skip the store */
        struct { Buffer *buffer; } alloc;
        struct { Var *var; Expr *begin, *end; int64_t step; LoopKind kind;
                 Stmt *body;
                 int stages;      /* PIPELINED: ring depth (>= 1) */
                 PipeRole role;   /* PIPELINED: see IR_PIPE_ROLES */
                 int pipe_id;     /* PIPELINED: pairs a PRODUCER loop with
                                     its CONSUMER loop (same id) */
                 int release_lag; /* PIPELINED: 0, or 1 = the consumer
                                     releases iteration i's stage at the
                                     end of iteration i + 1 (needs
                                     stages >= 2; docs/hopper.md 3) */
               } loop;                               /* end exclusive */
        struct { int rank; Var *vars[IR_MAX_RANK];
                 int64_t extent[IR_MAX_RANK];
                 Layout *layout;                     /* set by
                                                       infer_layouts */
                 Stmt *body; } parallel;
        struct { Expr *cond; Stmt *then_body, *else_body;
                 bool warp_specialized; /* warp_specialize's split: then =
                                           producer warpgroup, else =
                                           consumer warpgroups */ } if_;
        struct { bool warp_only;
                 int id, threads; /* named barrier `bar.sync id, threads`;
                                     id 0 / threads 0 = the whole block */
               } barrier;
        struct { Region src, dst;
                 Hint tma;        /* the user's copy(..., tma = ...) hint */
                 Hint multicast_hint; /* copy(..., multicast = ...) */
                 int multicast;   /* lower_tma: > 1 = a TMA load whose box
                                     is the same in every CTA of the
                                     cluster (that many CTAs): each CTA
                                     loads slice `rank` of it along
                                     multicast_dim and multicasts it to
                                     all; 0 = a plain (local) copy */
                 int multicast_dim; /* the global dim the box is split on */
                 int tensor_map;  /* lower_tma: index in Kernel.tensor_maps
                                     when this copy is a TMA copy, else -1 */
                 Region barrier;  /* TMA loads: the mbarrier element they
                                     complete on (buffer NULL until
                                     lower_tma / pipeline_loops set it) */
               } copy;
        struct { Region dst; Expr *value; } fill;
        struct { ReduceOp op; Buffer *src, *dst; int dim; bool clear; }
            reduce;
        struct { AtomicOp op; Buffer *buffer; Expr **indices; Expr *value; }
            atomic;
        struct { Expr *value; } eval;
        struct { Expr *cond; const char *message; } assert_;
        /* C[M,N] (+)= op(A) op(B) into the fragment C; wait: wgmma
         * groups left in flight after it (docs/ir.md 10) */
        struct { Region a, b; Buffer *c; bool transpose_a, transpose_b,
                 clear; int wait; } gemm;
        /* bar: one element of a SHARED_ASYNC_MBARRIER buffer (extent 0
         * on every dim); value per IR_MBARRIER_OPS. */
        struct { MbarrierOp op; Region bar; Expr *value; } mbarrier;
        /* One bulk tensor copy of a box between global memory
         * (Kernel.tensor_maps[tensor_map]) and shared memory; coords: the
         * box origin, outermost first (docs/ir.md 10) */
        struct { bool store; Region smem; int tensor_map;
                 Expr *coords[IR_MAX_RANK]; Region bar;
                 int multicast;     /* > 1: a slice to every CTA of the
                                       cluster; 0 = a local copy */
                 int multicast_dim; } tma;
        /* One wgmma.mma_async m64nNkK for one warpgroup: A and B
         * origins, acc registers [acc_offset, acc_offset + n/2); scale_d
         * false ignores acc's old value (docs/ir.md 10).  a_dtype and
         * b_dtype are equal except for fp8, where e4m3 x e5m2 mix. */
        struct { Region a, b; Buffer *acc; int64_t acc_offset;
                 int m, n, k; DType a_dtype, b_dtype, acc_dtype;
                 bool transpose_a, transpose_b; Expr *scale_d; } wgmma;
        struct { FenceOp op; int64_t value; } fence;
    } u;
};

/* ===================================================================== */
/* ir.c : kernels and modules                                             */
/* ===================================================================== */

typedef enum { PARAM_TENSOR, PARAM_SCALAR } ParamKind;
typedef struct Param {
    const char *name;
    ParamKind kind;
    Buffer *buffer; /* PARAM_TENSOR: a SCOPE_GLOBAL buffer */
    Var *var;       /* PARAM_SCALAR: a VAR_SCALAR */
} Param;

/* A run-time fact the launcher checks before every launch and the
 * compiler may rely on: a bool expression over VAR_SYMBOL/VAR_SCALAR. */
typedef struct Constraint {
    Expr *cond;
    const char *text; /* source text, for the launcher's error message */
    Loc loc;
} Constraint;

/* Kernel.state flags: which stages are done, checked by the verifier. */
#define KSTATE_LAYOUTS 1  /* every fragment and PARALLEL has a layout */
#define KSTATE_THREAD 2   /* no tile-level statements remain */
#define KSTATE_VECTOR 4   /* vectorize has run */
#define KSTATE_SHARED 8   /* shared buffers have offsets */

/* A TMA tensor map (CUtensorMap) the launcher encodes from a tensor
 * argument before every launch (cached) and passes as a 128-byte
 * __grid_constant__ parameter after the symbols (docs/hopper.md 2).
 * box is row-major (outermost first), like Region extents; element
 * strides are 1; out-of-bounds elements read as zero and are not
 * written. */
typedef struct TensorMap {
    Buffer *global;                /* the SCOPE_GLOBAL tensor it maps */
    int rank;                      /* = global->rank */
    int64_t box[IR_MAX_RANK];      /* box extents, outermost first */
    int swizzle_bytes;             /* 0 (none) or 128 */
} TensorMap;

typedef struct Kernel {
    const char *name;        /* PTX entry: <kernel>__<instance> */
    const char *source_name; /* kernel name in the .tk source */
    const char *instance;    /* instance label */
    Param *params;
    int nparams;
    Var **symbols;           /* VAR_SYMBOLs in launcher order */
    int nsymbols;
    Constraint *constraints;
    int nconstraints;
    Expr *grid[3];           /* over symbols and scalars; 1 if absent */
    int threads;             /* threads per block */
    Var *block_vars[3];      /* may be NULL */
    Stmt *body;
    int64_t shared_bytes;    /* set by plan_shared */
    TensorMap *tensor_maps;  /* lower_tma; parameters after the symbols */
    int ntensor_maps;
    Hint hint_tma;           /* launch ... with(tma = ...) */
    Hint hint_warp_specialize; /* launch ... with(warp_specialize = ...) */
    CacheHint load_cache, store_cache; /* of global loads / stores */
    int compute_threads;     /* threads the tile code runs on: = threads,
                                or the consumer threads once
                                warp_specialize added a producer
                                warpgroup after them */
    int min_blocks;          /* > 0: .maxntid threads + .minnctapersm
                                min_blocks (needed for setmaxnreg) */
    int cluster[3];          /* launch ... with(cluster = C): CTAs per
                                cluster along x, y, z (each >= 1; 1, 1, 1
                                = no cluster).  The launcher rounds the
                                grid up to a multiple (docs/hopper.md 11) */
    int nvars;               /* next Var.id */
    PtrVec vars;             /* every Var, indexed by Var.id (ir_new_var) */
    PtrVec buffers;          /* every Buffer, in creation order */
    struct NameTable *names; /* ir.c: taken Var/Buffer names (private) */
    unsigned state;          /* KSTATE_* */
    Arena *arena;            /* the module's arena */
    Loc loc;
} Kernel;

typedef struct Module {
    Kernel **kernels;
    int nkernels;
    const char *arch;        /* "sm_90a" or "sm_100a" */
    Arena *arena;
} Module;

/* Constructors.  All allocate in the kernel's arena; every Expr gets
 * lanes 1 unless stated.  ir_binary infers the result dtype (bool for
 * comparisons, else the lhs dtype; operand dtypes must already agree). */
Expr *ir_int(Kernel *k, DType t, int64_t value);
Expr *ir_float(Kernel *k, DType t, double value);
Expr *ir_var(Kernel *k, Var *v);
Expr *ir_load(Kernel *k, Buffer *b, Expr **indices, Expr *predicate);
Expr *ir_unary(Kernel *k, UnOp op, Expr *a);
Expr *ir_binary(Kernel *k, BinOp op, Expr *a, Expr *b);
Expr *ir_select(Kernel *k, Expr *cond, Expr *a, Expr *b);
Expr *ir_cast(Kernel *k, CastKind kind, DType t, Expr *value);
Expr *ir_call(Kernel *k, Intrinsic op, DType t, Expr **args, int nargs);
/* The natural result dtype of an intrinsic call: i32 for the index
 * intrinsics and popcount, u16 for f16_rz_bits, u8 for e2m1_bits, bool for
 * isfinite, else the first argument's dtype.  The textual IR writes a
 * call's dtype only when it differs from this. */
DType ir_call_default_dtype(Intrinsic op, Expr *const *args, int nargs);
Expr *ir_ramp(Kernel *k, Expr *base, int64_t stride, int lanes);
Expr *ir_broadcast(Kernel *k, Expr *value, int lanes);
Expr *ir_copy_expr(Kernel *k, const Expr *e); /* deep copy */

/* ir_new_var and ir_new_buffer copy the name and make it unique within
 * the kernel by appending ".1", ".2", ... when it is already taken (so
 * clones print and parse back as distinct names).  A new Buffer has
 * param_index -1, shared_offset -1 (not planned), pitch 0 and
 * swizzle_shift -1; shape/strides are for the caller to fill. */
Var *ir_new_var(Kernel *k, const char *name, DType t, VarKind kind);
Buffer *ir_new_buffer(Kernel *k, const char *name, DType t, Scope scope,
                      int rank);

Stmt *ir_new_stmt(Kernel *k, StmtKind kind, Loc loc);
/* ir_seq copies items into an array of power-of-two capacity, which
 * ir_seq_append relies on: build SEQs through these two, not by hand. */
Stmt *ir_seq(Kernel *k, Stmt **items, int count);
void ir_seq_append(Kernel *k, Stmt *seq, Stmt *item);
Stmt *ir_copy_stmt(Kernel *k, const Stmt *s); /* deep copy; Vars bound
                                                 inside are cloned */

Kernel *ir_new_kernel(Module *m, const char *name);
Module *ir_new_module(Arena *arena, const char *arch);

/* Generic rewriting helpers (ir_rewrite.c, as are ir_copy_expr and
 * ir_copy_stmt).  ir_substitute returns a copy of e with
 * every use of var replaced by value. */
Expr *ir_substitute(Kernel *k, const Expr *e, const Var *var, Expr *value);
Stmt *ir_substitute_stmt(Kernel *k, const Stmt *s, const Var *var,
                         Expr *value);
bool ir_expr_uses_var(const Expr *e, const Var *v);
/* Whether any expression of s or of its nested statements reads v (or,
 * for an ASSIGN, writes it): region starts, indices, values, predicates,
 * loop bounds, conditions, tma coordinates, mbarrier values, scale_d. */
bool ir_stmt_uses_var(const Stmt *s, const Var *v);
bool ir_expr_equal(const Expr *a, const Expr *b);

/* Property tables generated from the X-macros. */
const char *ir_binop_name(BinOp op);
const char *ir_unop_name(UnOp op);
const char *ir_intrinsic_name(Intrinsic op);
int ir_intrinsic_nargs(Intrinsic op);
unsigned ir_intrinsic_flags(Intrinsic op);
const char *ir_stmt_name(StmtKind kind);
const char *ir_expr_name(ExprKind kind);
const char *ir_loop_name(LoopKind kind);
const char *ir_reduce_name(ReduceOp op);
const char *ir_atomic_name(AtomicOp op);
const char *ir_scope_name(Scope scope);
const char *ir_pipe_role_name(PipeRole role);
const char *ir_mbarrier_op_name(MbarrierOp op);
bool ir_mbarrier_op_has_value(MbarrierOp op);
const char *ir_fence_op_name(FenceOp op);
bool ir_fence_op_has_value(FenceOp op);
const char *ir_hint_name(Hint hint); /* "auto", "off", "on" */
const char *ir_cache_hint_name(CacheHint hint); /* "default", ... */
/* Buffer.async_kind: "none", "plain", "swizzle128", "mbarrier". */
const char *ir_async_kind_name(int async_kind);

/* ===================================================================== */
/* ir_print.c / ir_parse.c                                                */
/* ===================================================================== */

/* Textual IR (docs/ir.md).  ir_print writes exactly what ir_parse reads:
 * parse(print(m)) prints identically. */
void ir_print_module(FILE *out, const Module *m);
void ir_print_kernel(FILE *out, const Kernel *k);
void ir_print_expr(FILE *out, const Expr *e);
/* Parses IR text; on error reports through diag and returns NULL. */
Module *ir_parse(Arena *arena, Diag *diag, const char *file,
                 const char *text);

/* ===================================================================== */
/* verify.c                                                               */
/* ===================================================================== */

/* Checks structural invariants for the kernel's current state (dtypes of
 * operands agree, indices match ranks, variables defined before use,
 * tile-level statements absent once KSTATE_THREAD is set, layouts present
 * once KSTATE_LAYOUTS is set, lanes consistent).  Returns false and
 * reports through diag (these are compiler bugs: tkc turns a failure into
 * an internal error, exit 3). */
bool ir_verify(Kernel *k, Diag *diag, const char *after_pass);

/* ===================================================================== */
/* analysis.c                                                             */
/* ===================================================================== */

/* Facts the compiler may rely on: from the kernel's constraints (e.g.
 * "H % 64 == 0" gives H = 64*k + 0) and from block/loop variable ranges. */
typedef struct {
    int64_t coeff; /* the value is coeff*n + base for some integer n;
                      coeff 0 means exactly base */
    int64_t base;
} Modular;
typedef struct Facts Facts;
Facts *facts_new(Kernel *k);           /* reads Kernel.constraints */
Modular facts_modular(Facts *f, const Expr *e);
/* Known bounds [lo, hi] of an integer expression; false if unknown. */
bool facts_bounds(Facts *f, const Expr *e, int64_t *lo, int64_t *hi);
/* Facts about vars created after facts_new (facts_new itself registers
 * every LET and FOR of the body): a LET value, a FOR range, an interval. */
void facts_add_let(Facts *f, const Var *var, const Expr *value);
void facts_add_loop(Facts *f, const Var *var, const Expr *begin,
                    const Expr *end, int64_t step);
void facts_add_range(Facts *f, const Var *var, int64_t lo, int64_t hi);
/* A LET var's value or a symbol's constraint equality (NULL if none),
 * and the kernel of the facts (for analysis_bounds.c). */
const Expr *facts_definition(Facts *f, const Var *v);
Kernel *facts_kernel(Facts *f);
/* analysis_bounds.c: whether index < extent holds for every thread of
 * every block, where extent is a launcher-checked tensor dimension;
 * false when it cannot be proven (see the file's comment). */
bool facts_prove_below(Facts *f, const Expr *index, const Expr *extent);
/* value wrapped to the width and signedness of integer type t */
int64_t ir_int_wrap(DType t, int64_t value);
/* Floor division and its modulo (the result has b's sign), b != 0; and
 * whether e is a scalar integer literal (its value in *out). */
int64_t ir_floor_div(int64_t a, int64_t b);
int64_t ir_floor_mod(int64_t a, int64_t b);
bool ir_int_constant(const Expr *e, int64_t *out);

/* ===================================================================== */
/* analysis_eval.c                                                        */
/* ===================================================================== */

/* Evaluates an integer expression whose variables are all bound. */
bool ir_eval_int(const Expr *e, const Var **vars, const int64_t *values,
                 int nvars, int64_t *out);
/* As ir_eval_int, with thread_idx bound to `thread` (lane_idx, warp_idx
 * derived) and block_idx_* to 0; thread < 0 leaves them unknown. */
bool ir_eval_int_thread(const Expr *e, const Var **vars,
                        const int64_t *values, int nvars, int64_t thread,
                        int64_t *out);
/* The shared-memory formula of struct Buffer: linear byte offset of
 * element [row, col] (leading dims flattened into row), the XOR swizzle
 * of a linear offset, and the physical address shared_offset +
 * swizzle(linear). */
int64_t ir_shared_linear_offset(const Buffer *b, int64_t row, int64_t col);
int64_t ir_shared_swizzle(int64_t offset, int swizzle_shift);
int64_t ir_shared_address(const Buffer *b, int64_t row, int64_t col);
/* Wavefronts one warp-wide shared access costs: addresses[32] per thread
 * (lane 0 of each thread's vector), active[32] (NULL = all), access_bytes
 * per thread (4-byte banks; 8-byte accesses per half warp, 16-byte per
 * quarter warp; same word = broadcast). */
int ir_shared_wavefronts(const int64_t *addresses, const bool *active,
                         int access_bytes);

/* ===================================================================== */
/* analysis_loops.c                                                       */
/* ===================================================================== */

/* Lanes vectorize gives this FOR: the extent of a VECTORIZED loop, or of
 * an innermost copy-like UNROLL loop (a straight-line body with a
 * unit-stride global/shared access); 0 when it stays scalar. */
int ir_loop_vector_lanes(const Stmt *loop);

/* ===================================================================== */
/* passes/ : one file per pass.  Each returns false after reporting a
 * user-facing error through diag (e.g. an unsupported layout).          */
/* ===================================================================== */

/* passes/check_types.c -- requires: tile level.  Type and shape checks of
 * tile statements (copy shapes agree, reduce dims, fragment accesses in
 * bounds when constant).  Changes nothing. */
bool pass_check_types(Kernel *k, Diag *diag);
/* The GEMM rules pass_check_types applies to one STMT_GEMM (wait in
 * 0..7, operand scopes, dtypes, fp8 transposes, shapes agreeing per the
 * transpose flags): NULL when they hold, else the first problem as a message in
 * `arena`.  The front end calls it per instance, so the error points at
 * the source statement. */
const char *pass_check_gemm(Arena *arena, const Stmt *gemm);
/* passes/lower_tma.c -- requires: tile level.  Decides, for every
 * block-level COPY between a global tensor and a whole shared buffer (or
 * a stage of one), whether it becomes a TMA copy (docs/hopper.md 2):
 * records a TensorMap, sets copy.tensor_map and the shared buffer's
 * async_kind.  A TMA copy outside a PIPELINED loop gets its own mbarrier
 * protocol here.  Honours copy and kernel hints; with
 * pass_explain_tma set, says for every copy why it is or is not TMA. */
bool pass_lower_tma(Kernel *k, Diag *diag);
extern bool pass_explain_tma;
/* passes/warp_specialize.c -- requires: lower_tma.  When a PIPELINED
 * loop's shared inputs all arrive by TMA (and the hints allow), splits
 * the block into consumer warpgroups (threads [0, C)) and one producer
 * warpgroup (threads [C, C+128)) with setmaxnreg; sets compute_threads,
 * threads, min_blocks; marks the loops PRODUCER / CONSUMER. */
bool pass_warp_specialize(Kernel *k, Diag *diag);
/* passes/pipeline_loops.c -- requires: lower_tma, warp_specialize.  Turns
 * every PIPELINED loop into a SERIAL loop over an N-stage ring: TMA
 * destinations get a leading stage dimension, full/empty mbarriers with
 * phase parity guard each slot, a prologue fills the ring.  Safe for
 * zero- and one-iteration loops and guarded bodies. */
bool pass_pipeline_loops(Kernel *k, Diag *diag);
/* passes/lower_gemm.c -- requires KSTATE_LAYOUTS.  GEMM becomes wgmma
 * statements per warpgroup (fence, mma_async over m-slots, N atoms and K
 * steps, commit, wait) on the accumulator's MMA layout; marks the shared
 * operands SWIZZLE128. */
bool pass_lower_gemm(Kernel *k, Diag *diag);
/* passes/lower_tile_ops.c -- COPY and FILL at block level become PARALLEL
 * loops (with global edge predicates); inside a PARALLEL body they become
 * per-thread UNROLL loops. */
bool pass_lower_tile_ops(Kernel *k, Diag *diag);
/* passes/infer_layouts.c -- sets Layout on every fragment and PARALLEL;
 * guarantees KSTATE_LAYOUTS. */
bool pass_infer_layouts(Kernel *k, Diag *diag);
/* passes/lower_parallel.c -- requires KSTATE_LAYOUTS.  PARALLEL loops and
 * REDUCE become per-thread code; fragments become LOCAL arrays; guarantees
 * KSTATE_THREAD. */
bool pass_lower_parallel(Kernel *k, Diag *diag);
/* passes/simplify.c -- constant folding and index simplification using
 * Facts; may run at any level. */
bool pass_simplify(Kernel *k, Diag *diag);
/* passes/vectorize.c -- requires KSTATE_THREAD.  VECTORIZED loops become
 * lane-wide expressions: contiguous, provably aligned accesses become one
 * vector load/store (up to IR_VECTOR_BYTES), lane-invariant ones a
 * broadcast, the rest are scalarised; guarantees KSTATE_VECTOR. */
bool pass_vectorize(Kernel *k, Diag *diag);
/* passes/plan_shared.c -- requires KSTATE_THREAD.  Gives every shared
 * buffer an offset, pitch and swizzle (chosen by simulating the first
 * warp's accesses for bank conflicts); guarantees KSTATE_SHARED. */
bool pass_plan_shared(Kernel *k, Diag *diag);
/* passes/hoist_guards.c -- requires KSTATE_VECTOR.  An unrolled pure-copy
 * loop whose guards are all loop-invariant becomes if (their conjunction)
 * { the loop unguarded } else { the loop }. */
bool pass_hoist_guards(Kernel *k, Diag *diag);
/* passes/insert_barriers.c -- requires KSTATE_THREAD.  Inserts bar.sync
 * between a write and a later read (or a read and a later write) of a
 * shared buffer by different threads, including around loop back edges. */
bool pass_insert_barriers(Kernel *k, Diag *diag);

/* ===================================================================== */
/* pipeline.c                                                             */
/* ===================================================================== */

typedef struct PipelineOptions {
    const char *dump_after; /* pass name, "all", or NULL */
    FILE *dump_out;
} PipelineOptions;
/* Runs every pass over every kernel with the verifier between stages. */
bool pipeline_run(Module *m, Diag *diag, const PipelineOptions *opts);
/* Passes by name ("lower_tile_ops", ...) for --dump-after and the pass
 * golden tests; NULL if unknown.  The names are the pass_* suffixes. */
typedef bool (*PassFn)(Kernel *k, Diag *diag);
PassFn pipeline_find_pass(const char *name);

/* ===================================================================== */
/* codegen_llvm.c / ptx.c / emit_header.c                                 */
/* ===================================================================== */

/* Builds one LLVM module holding every kernel of m (thread level, vector
 * level, shared planned), links libdevice where needed and runs O3.
 * Returns LLVM IR text or PTX text (malloc'd) or NULL after diag. */
typedef enum { CODEGEN_LLVM_IR, CODEGEN_PTX } CodegenOutput;
char *codegen_module(Module *m, Diag *diag, CodegenOutput what);
/* Runs ptxas -arch=<arch> (whole program) over ptx; returns malloc'd
 * cubin bytes and size, or NULL after diag. */
unsigned char *ptx_to_cubin(const char *ptx, const char *arch, Diag *diag,
                            size_t *size);
/* Writes the C header of the launchers (see docs/architecture.md). */
void emit_header(FILE *out, const Module *m, const char *guard);

#endif
