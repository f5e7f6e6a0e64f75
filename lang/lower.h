/*
 * lower.h -- what the front end's files share: the program being compiled
 * (every loaded file and its declarations), the scopes of names, and the
 * typed values that expression lowering passes around.
 *
 *   frontend.c   loads the root file and its imports (Program, SourceFile)
 *   sema.c       module-level checks: declarations, instances, recursion,
 *                constants
 *   lower_expr.c names, typing, operators and constant folding of
 *                expressions (Value)
 *   lower_call.c conversions, bitcasts, builtins and fn inlining
 *   lower_ast.c  one kernel instance -> one IR Kernel: parameters,
 *                constraints, launch, control-flow statements
 *   lower_buffer.c the statements that use buffers: alloc, assignment,
 *                atomics, copy, fill, reduce
 *   lower_hopper.c the Hopper statements and options: gemm, pipelined
 *                loops, tma / warp_specialize hints
 *
 * Nothing here is global: a Program holds all state of one compilation.
 */
#ifndef TKC_LOWER_H
#define TKC_LOWER_H

#include "ast.h"

typedef struct SourceFile SourceFile;

typedef enum { DECL_CONST, DECL_FN, DECL_KERNEL } DeclKind;

/* A top-level declaration.  Constants are evaluated once, on first use
 * (state guards against a constant defined through itself). */
typedef struct Decl {
    DeclKind kind;
    const char *name;
    AstNode *node;
    SourceFile *file;
    bool bad;               /* sema found an error: do not lower */
    int state;              /* CONST: 0 new, 1 evaluating, 2 done, 3 failed */
    DType const_type;
    int64_t int_value;
    double float_value;
    int visit;              /* FN: recursion check colour */
} Decl;

struct SourceFile {
    AstFile *ast;
    const char *path;       /* as shown in diagnostics (module arena) */
    const char *key;        /* canonical path, for cycles and diamonds */
    bool loading;           /* on the import stack right now */
    PtrVec imports;         /* SourceFile *, directly imported */
    PtrVec decls;           /* Decl *, declared in this file */
};

typedef struct Program {
    Arena *arena;           /* the module's arena: outlives the front end */
    Arena *scratch;         /* AST and tables, freed by frontend_compile */
    Diag *diag;
    const char *const *include_dirs;
    PtrVec files;           /* SourceFile *, in load order */
    PtrVec decls;           /* Decl *, every file */
    PtrVec reported;        /* "file:line:col:msg" keys already reported */
    Module *module;
} Program;

/* ---- names ------------------------------------------------------------ */

typedef enum {
    BIND_CONST,   /* a compile-time constant: value (EXPR_INT / EXPR_FLOAT) */
    BIND_EXPR,    /* an inlined fn parameter or fn let: value, copied per use */
    BIND_DTYPE,   /* a template dtype parameter */
    BIND_VAR,     /* a Var: let, var, loop, block, scalar param, symbol */
    BIND_BUFFER   /* a Buffer: tensor param, shared, frag, local */
} BindKind;

/* A typed expression.  `literal` marks a constant that came from literals
 * only (and template int parameters): its dtype is the default (i32 or
 * f32) but still adapts to the other operand of a binary operator. */
typedef struct Value {
    Expr *expr;             /* NULL: an error was already reported */
    bool literal;
} Value;

typedef struct Binding {
    const char *name;
    BindKind kind;
    Loc loc;
    Value value;
    DType dtype;
    Var *var;
    Buffer *buffer;
} Binding;

typedef struct NameScope NameScope;
struct NameScope {
    NameScope *parent;
    PtrVec bindings;
};

/* Lowering state of one kernel instance (or of a fn body checked on its
 * own, with kernel == a scratch kernel). */
typedef struct Lower {
    Program *program;
    Kernel *kernel;
    SourceFile *file;       /* file whose globals are visible (changes
                               while a fn from another file is inlined) */
    NameScope *scope;
    const char *kernel_name;/* for the "in instance" note */
    const char *instance;   /* NULL: kernel without template parameters */
    Loc instance_loc;
    bool failed;            /* an error was reported for this instance */
    bool make_symbols;      /* tensor dims: unknown names become symbols */
    PtrVec *symbols;        /* Var * of VAR_SYMBOLs, in order */
    int inline_depth;
    int parallel_depth;
    bool in_kernel_lets;    /* only constants may be defined */
    int pipe_count;         /* PIPELINED loops so far: the next pipe_id */
} Lower;

/* ---- frontend.c ------------------------------------------------------- */
/* Global declaration `name` visible from `file`: its own declarations,
 * then those of the files it imports directly. */
Decl *program_lookup(SourceFile *file, const char *name);

/* ---- sema.c ----------------------------------------------------------- */
/* Declarations and everything checkable without instantiating a kernel.
 * Marks bad declarations; errors go to diag. */
void sema_check(Program *program);

/* ---- lower_expr.c ----------------------------------------------------- */
void lower_error(Lower *lower, Loc loc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void lower_push_scope(Lower *lower);
void lower_pop_scope(Lower *lower);
Binding *lower_define(Lower *lower, const char *name, BindKind kind, Loc loc);
Binding *lower_find(Lower *lower, const char *name);
bool lower_is_type_name(Lower *lower, const char *name, DType *out);
bool lower_resolve_type(Lower *lower, const AstNode *type, DType *out);

Value lower_expr(Lower *lower, const AstNode *node);
Value lower_binary(Lower *lower, BinOp op, Value a, Value b, Loc loc);
/* The value with dtype `to`: literals adapt (range-checked); any other
 * mismatch is reported with `what` ("storing f32 into bf16 buffer 'out'
 * ..." is built by the caller and passed as what == NULL). */
Value lower_adapt(Lower *lower, Value value, DType to, Loc loc);
/* A literal takes its default type (i32 / f32), range-checked. */
Value lower_materialize(Lower *lower, Value value, Loc loc);
/* Storage-only floats (f16, bf16, fp8) become f32 for arithmetic. */
Value lower_promote(Lower *lower, Value value);
/* Integer / bool compile-time constant, or an error naming the
 * expression ("... must be a compile-time constant"). */
bool lower_const_int(Lower *lower, const AstNode *node, const char *what,
                     int64_t *out);
bool lower_const_bool(Lower *lower, const AstNode *node, const char *what,
                      bool *out);
Value lower_int_index(Lower *lower, const AstNode *node);
Value lower_const_value(Lower *lower, Decl *decl, Loc use);
/* Checks a fn body on its own, parameters standing for unknown values. */
void lower_check_fn(Program *program, Decl *decl);
void lower_check_const(Program *program, Decl *decl);
const char *lower_expr_text(Lower *lower, const AstNode *node);
bool lower_is_storage_float(DType t);
Expr *lower_at(Expr *e, Loc loc);

/* ---- shared by lower_expr.c and lower_call.c ---------------------------- */
static const Value NONE = {NULL, false};

static inline Value typed(Expr *e) { return (Value){e, false}; }

static inline bool is_integer(DType t) {
    return ir_dtype_is_int(t) && t != DT_BOOL;
}
static inline bool is_unsigned(DType t) {
    return ir_dtype_class(t) == DCLASS_UINT;
}
static inline bool is_arith_float(DType t) {
    return t == DT_F32 || t == DT_F64;
}

/* v reduced to the width of t (two's complement wrap). */
static inline int64_t wrap(DType t, int64_t v) {
    int bits = ir_dtype_bits(t);
    if (t == DT_BOOL) return v != 0;
    if (bits >= 64) return v;
    uint64_t mask = (1ull << bits) - 1;
    uint64_t u = (uint64_t)v & mask;
    if (!is_unsigned(t) && (u >> (bits - 1)) & 1) u |= ~mask;
    return (int64_t)u;
}

static inline bool fits(DType t, int64_t v) {
    if (t == DT_BOOL) return v == 0 || v == 1;
    if (t == DT_U64) return v >= 0;
    return wrap(t, v) == v && (!is_unsigned(t) || v >= 0);
}

/* lower_expr.c: constants of type t (f32 values round through float
 * unless literal), operators with folding, operand unification. */
Value lower_int_constant(Lower *lower, DType t, int64_t v, Loc loc, bool literal);
Value lower_float_constant(Lower *lower, DType t, double v, Loc loc, bool literal);
Value lower_binary_op(Lower *lower, BinOp op, Value a, Value b, Loc loc);
Value lower_unary_op(Lower *lower, UnOp op, Value a, Loc loc);
bool lower_unify(Lower *lower, Value *a, Value *b, bool widen, const char *op,
           Loc loc);
Value lower_copy_value(Lower *lower, Value value, Loc loc, bool relocate);

/* lower_call.c: the AST_BITCAST and AST_CALL cases of lower_expr, and a
 * fn's lets and value lowered in the current scope. */
Value lower_bitcast(Lower *lower, const AstNode *node);
Value lower_call(Lower *lower, const AstNode *node);
Value lower_fn_body(Lower *lower, Decl *fn);

/* ---- lower_ast.c ------------------------------------------------------ */
/* Instantiates every instance of a kernel declaration into the module. */
void lower_kernel(Program *program, Decl *decl);
/* A compile-time integer > 0 (shapes, extents), or an error naming `what`. */
bool lower_positive_const(Lower *lower, const AstNode *node, const char *what,
                          int64_t *out);

/* ---- lower_buffer.c --------------------------------------------------- */
/* A region node (IDENT or IDENT[slices]) of a tile statement, and its
 * shape: the extents that are not single indices (0) or singletons (1).
 * Fewer slices than dimensions give the leading ones; the rest are whole
 * (sa[s] of sa[S, M, K] is the [M, K] stage s). */
bool lower_region(Lower *lower, const AstNode *node, Region *region,
                  int64_t *shape, int *shape_rank);
/* "tensor", "shared buffer", "fragment", "local buffer". */
const char *lower_scope_text(Scope scope);
/* The value stored into `name` (a buffer element, or a var: `what` says
 * which) with exactly `dtype`: literals adapt, any other type is an error
 * asking for an explicit conversion.  NULL after an error. */
Expr *lower_store_value(Lower *lower, Value value, DType dtype,
                        const char *what, const char *name, Loc loc);
/* The statements lower_ast.c's walk hands over, appended to seq. */
void lower_alloc(Lower *lower, Stmt *seq, const AstNode *node);
void lower_assign(Lower *lower, Stmt *seq, const AstNode *node);
void lower_copy(Lower *lower, Stmt *seq, const AstNode *node);
void lower_fill(Lower *lower, Stmt *seq, const AstNode *node);
void lower_reduce(Lower *lower, Stmt *seq, const AstNode *node);
void lower_atomic(Lower *lower, Stmt *seq, const AstNode *node);

/* ---- lower_hopper.c --------------------------------------------------- */
/* The NAMED option `name` of an option list, or NULL. */
const AstNode *lower_option(const PtrVec *options, const char *name);
/* The value of a hint option: a compile-time integer 0 (auto), 1 (off)
 * or 2 (on), or one of the words auto / off / on. */
bool lower_hint(Lower *lower, const AstNode *option, Hint *out);
/* The value of a cache hint option (load_cache = P, store_cache = P, a
 * tensor's cache(P)): a word of IR_CACHE_HINTS or a compile-time integer,
 * its position there. */
void lower_cache_hint(Lower *lower, const AstNode *option, CacheHint *out);
/* Kernel.hint_tma / hint_warp_specialize / cluster / load_cache / store_cache
 * from the launch's `with`. */
void lower_launch_hints(Lower *lower, const AstNode *hints);
/* The stages, role and pipe_id of a PIPELINED loop from its options. */
bool lower_pipelined(Lower *lower, const AstNode *node, Stmt *loop);
void lower_gemm(Lower *lower, Stmt *seq, const AstNode *node);
void lower_gemm_wait(Lower *lower, Stmt *seq, const AstNode *node);

#endif
