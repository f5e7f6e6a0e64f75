/*
 * ast.h -- the syntax tree of a .tk file, as the parser builds it.
 *
 * The AST is untyped and unresolved: identifiers are plain names, types are
 * names too (a dtype or a template parameter), and nothing is folded.  Name
 * resolution, typing and constant folding happen per kernel instance in
 * lower_ast.c, after template arguments are known; sema.c does the checks
 * that need no instance (declarations, instances, imports, recursion).
 *
 * One "fat" node struct serves every kind (as chibicc's Node): a kind, a
 * location, and the fields each kind documents below.  Nodes live in an
 * arena and are never freed one by one.
 */
#ifndef TKC_AST_H
#define TKC_AST_H

#include "ir.h"

/* The deepest nesting of expressions and statements the front end
 * accepts.  Deeper input is reported, so later recursive walks can never
 * exhaust the C stack whatever the input. */
#define AST_MAX_DEPTH 256

/* Node kinds.  X(ENUM, name): the comment says which fields are used. */
#define AST_KINDS(X)                                                          \
    /* ---- top level ---- */                                                 \
    X(IMPORT, "import")       /* text: the module name as written          */ \
    X(CONST, "const")         /* name, type, a: value                      */ \
    X(FN, "fn")               /* name, list: params, type: return type,    */ \
                              /* list2: lets, a: return value              */ \
    X(KERNEL, "kernel")       /* name, list: tparams, list2: params,       */ \
                              /* list3: where conds, list4: instances,     */ \
                              /* list5: kernel lets, a: launch             */ \
    X(TPARAM, "tparam")       /* name, text: kind (dtype, int, bool)       */ \
    X(PARAM, "param")         /* name, type; tensor: list: dims, list2:    */ \
                              /* strides (NULL = contiguous), a: NAMED     */ \
                              /* cache(P) or NULL; flag: tensor            */ \
    X(WHERE, "where")         /* a: condition, text: its source text       */ \
    X(INSTANCE, "instance")   /* name, list: template arguments; flag:     */ \
                              /* set by sema when the instance is bad      */ \
    X(TARG, "targ")           /* a dtype name (name), an int (int_value)   */ \
                              /* or a bool (flag); op: TARG_*              */ \
    X(TYPE, "type")           /* name: dtype name or template parameter    */ \
    X(FN_PARAM, "fn_param")   /* name, type                                */ \
    /* ---- statements ---- */                                                \
    X(LAUNCH, "launch")       /* list: block var names (IDENT nodes),      */ \
                              /* text: "grid" keyword as written,          */ \
                              /* list2: grid, a: threads, b: body,         */ \
                              /* c: HINTS or NULL                          */ \
    X(HINTS, "hints")         /* name: "with" keyword as written, list:    */ \
                              /* NAMED kernel hints (tma=, warp_special..) */ \
    X(BLOCK, "block")         /* list: statements                          */ \
    X(ALLOC, "alloc")         /* op: SCOPE_SHARED/FRAGMENT/LOCAL, name,    */ \
                              /* type, list: shape                         */ \
    X(LET, "let")             /* name, a: value                            */ \
    X(VAR, "var")             /* name, type, a: initial value or NULL      */ \
    X(ASSIGN, "assign")       /* op: ASSIGN_*, a: target (IDENT or INDEX), */ \
                              /* b: value                                  */ \
    X(PARALLEL, "parallel")   /* list: AXIS nodes, a: body                 */ \
    X(AXIS, "axis")           /* name, a: extent                           */ \
    X(FOR, "for")             /* name, text: serial/unroll/pipelined,      */ \
                              /* list: bounds, list2: NAMED options        */ \
                              /* (stages=) or NULL, a: body                */ \
    X(IF, "if")               /* a: cond, b: then block, c: else or NULL   */ \
    X(COPY, "copy")           /* a: src region, b: dst region, list:       */ \
                              /* NAMED options (tma=) or NULL              */ \
    X(GEMM, "gemm")           /* a, b, c: regions A, B, C; list: NAMED     */ \
                              /* options (transpose_a=, transpose_b=,      */ \
                              /* clear=, wait=) or NULL                    */ \
    X(GEMM_WAIT, "gemm_wait") /* a: the groups left in flight (an expr)    */ \
    X(FILL, "fill")           /* a: region, b: value                       */ \
    X(REDUCE, "reduce")       /* text: op name, name: src, name2: dst,     */ \
                              /* list: NAMED args (dim=, clear=)           */ \
    X(NAMED, "named")         /* name = a (an option of reduce, copy,      */ \
                              /* gemm, a loop or the launch hints)         */ \
    X(ATOMIC, "atomic")       /* op: ATOMIC_*, a: INDEX target, b: value   */ \
    X(SYNC, "sync")           /* flag: warp only                           */ \
    X(RETURN, "return")       /* (no fields)                               */ \
    X(ASSERT, "assert")       /* a: cond, text: message or NULL            */ \
    X(REGION, "region")       /* name, list: SLICE nodes (NULL: whole)     */ \
    X(SLICE, "slice")         /* a: start, b: extent or NULL (one index)   */ \
    /* ---- expressions ---- */                                               \
    X(INT, "int")             /* int_value, flag: 'u' suffix               */ \
    X(FLOAT, "float")         /* float_value, flag: 'f' suffix             */ \
    X(BOOL, "bool")           /* flag                                      */ \
    X(IDENT, "ident")         /* name                                      */ \
    X(INDEX, "index")         /* name, list: indices                       */ \
    X(CALL, "call")           /* name, list: arguments                     */ \
    X(BITCAST, "bitcast")     /* type, a: value                            */ \
    X(UNARY, "unary")         /* op: UnOp, a                               */ \
    X(BINARY, "binary")       /* op: BinOp, a, b                           */ \
    X(TERNARY, "ternary")     /* a ? b : c                                 */ \
    X(ERROR, "error")         /* stands for something already reported    */

typedef enum {
#define X(e, name) AST_##e,
    AST_KINDS(X)
#undef X
        AST_COUNT
} AstKind;

/* ASSIGN ops: plain '=' or a compound op (the BinOp it expands to). */
#define ASSIGN_PLAIN (-1)

/* TARG kinds */
enum { TARG_DTYPE, TARG_INT, TARG_BOOL };

typedef struct AstNode AstNode;
struct AstNode {
    AstKind kind;
    Loc loc;
    int depth;          /* nesting depth of the subtree, see AST_MAX_DEPTH */
    const char *name;
    const char *name2;
    const char *text;
    int op;
    bool flag;
    int64_t int_value;
    double float_value;
    AstNode *type;
    AstNode *a, *b, *c;
    PtrVec *list, *list2, *list3, *list4, *list5;
};

/* One parsed file.  `path` is the path used in diagnostics (and is the
 * Loc.file of every node); `dir` is its directory for relative imports. */
typedef struct AstFile {
    const char *path;
    const char *dir;
    const char *text;
    size_t length;
    PtrVec decls;       /* IMPORT, CONST, FN and KERNEL nodes, in order */
} AstFile;

/* What the grammar actions need: the arena, the diagnostics, the file
 * being built, and the lexer's state.  One per file parsed, so several
 * files (or modules) can be parsed in one process. */
typedef struct ParseCtx {
    Arena *arena;
    Diag *diag;
    AstFile *file;
    void *scanner;          /* yyscan_t */
    int errors_before;      /* diag->errors when parsing started */
    int line, column;       /* lexer position: next byte to scan */
    int offset;
    int nesting;            /* open ( [ { in the lexer */
    bool depth_reported;    /* "nesting too deep" said once per file */
    int bad_char_line;      /* last line with a bad-character error */
} ParseCtx;

/* Location of the bison grammar: line/column for diagnostics and byte
 * offsets so that a `where` condition can keep its source text. */
typedef struct AstSpan {
    int first_line, first_column, last_line, last_column;
    int first_offset, last_offset;
} AstSpan;

/* ---- constructors (ast.c): one per grammar action ---- */
Loc ast_loc(ParseCtx *ctx, AstSpan span);
PtrVec *ast_list(ParseCtx *ctx, PtrVec *list, AstNode *item);
AstNode *ast_node(ParseCtx *ctx, AstKind kind, AstSpan span);
AstNode *ast_error(ParseCtx *ctx, AstSpan span);
AstNode *ast_import(ParseCtx *ctx, const char *name, AstSpan span);
AstNode *ast_const(ParseCtx *ctx, const char *name, AstNode *type,
                   AstNode *value, AstSpan span);
AstNode *ast_fn(ParseCtx *ctx, const char *name, PtrVec *params,
                AstNode *type, PtrVec *lets, AstNode *value, AstSpan span);
AstNode *ast_kernel(ParseCtx *ctx, const char *name, PtrVec *tparams,
                    PtrVec *params, PtrVec *wheres, PtrVec *instances,
                    PtrVec *lets, AstNode *launch, AstSpan span);
AstNode *ast_named(ParseCtx *ctx, AstKind kind, const char *name,
                   const char *text, AstSpan span);
AstNode *ast_fn_param(ParseCtx *ctx, const char *name, AstNode *type,
                      AstSpan span);
AstNode *ast_tensor_param(ParseCtx *ctx, const char *name, AstNode *type,
                          PtrVec *dims, PtrVec *strides, AstNode *cache, AstSpan span);
AstNode *ast_scalar_param(ParseCtx *ctx, const char *name, AstNode *type,
                          AstSpan span);
AstNode *ast_where(ParseCtx *ctx, AstNode *cond, AstSpan span);
AstNode *ast_instance(ParseCtx *ctx, const char *name, PtrVec *targs,
                      AstSpan span);
AstNode *ast_targ(ParseCtx *ctx, int kind, const char *name, int64_t value,
                  AstSpan span);
AstNode *ast_launch(ParseCtx *ctx, PtrVec *block_vars, const char *grid,
                    PtrVec *grid_exprs, const char *threads,
                    AstNode *thread_count, AstNode *hints, AstNode *body,
                    AstSpan span);
AstNode *ast_hints(ParseCtx *ctx, const char *with, PtrVec *options,
                   AstSpan span);
AstNode *ast_block(ParseCtx *ctx, PtrVec *stmts, AstSpan span);
AstNode *ast_alloc(ParseCtx *ctx, Scope scope, const char *name,
                   AstNode *type, PtrVec *shape, AstSpan span);
AstNode *ast_let(ParseCtx *ctx, const char *name, AstNode *value,
                 AstSpan span);
AstNode *ast_var(ParseCtx *ctx, const char *name, AstNode *type,
                 AstNode *value, AstSpan span);
AstNode *ast_assign(ParseCtx *ctx, int op, AstNode *target, AstNode *value,
                    AstSpan span);
AstNode *ast_parallel(ParseCtx *ctx, PtrVec *axes, AstNode *body,
                      AstSpan span);
AstNode *ast_axis(ParseCtx *ctx, const char *name, AstNode *extent,
                  AstSpan span);
AstNode *ast_for(ParseCtx *ctx, const char *name, const char *kind,
                 PtrVec *bounds, PtrVec *options, AstNode *body,
                 AstSpan span);
AstNode *ast_if(ParseCtx *ctx, AstNode *cond, AstNode *then_body,
                AstNode *else_body, AstSpan span);
AstNode *ast_copy(ParseCtx *ctx, AstNode *src, AstNode *dst,
                  PtrVec *options, AstSpan span);
AstNode *ast_gemm(ParseCtx *ctx, AstNode *a, AstNode *b, AstNode *c,
                  PtrVec *options, AstSpan span);
AstNode *ast_gemm_wait(ParseCtx *ctx, AstNode *pending, AstSpan span);
AstNode *ast_fill(ParseCtx *ctx, AstNode *dst, AstNode *value, AstSpan span);
AstNode *ast_reduce(ParseCtx *ctx, const char *op, const char *src,
                    const char *dst, PtrVec *options, AstSpan span);
AstNode *ast_option(ParseCtx *ctx, const char *name, AstNode *value,
                    AstSpan span);
AstNode *ast_atomic(ParseCtx *ctx, int op, AstNode *target, AstNode *value,
                    AstSpan span);
AstNode *ast_sync(ParseCtx *ctx, bool warp_only, AstSpan span);
AstNode *ast_assert(ParseCtx *ctx, AstNode *cond, const char *message,
                    AstSpan span);
AstNode *ast_region(ParseCtx *ctx, const char *name, PtrVec *slices,
                    AstSpan span);
AstNode *ast_slice(ParseCtx *ctx, AstNode *start, AstNode *extent,
                   AstSpan span);
AstNode *ast_int(ParseCtx *ctx, int64_t value, bool is_unsigned,
                 AstSpan span);
AstNode *ast_float(ParseCtx *ctx, double value, bool f_suffix, AstSpan span);
AstNode *ast_bool(ParseCtx *ctx, bool value, AstSpan span);
AstNode *ast_ident(ParseCtx *ctx, const char *name, AstSpan span);
AstNode *ast_index(ParseCtx *ctx, const char *name, PtrVec *indices,
                   AstSpan span);
AstNode *ast_call(ParseCtx *ctx, const char *name, PtrVec *args,
                  AstSpan span);
AstNode *ast_bitcast(ParseCtx *ctx, AstNode *type, AstNode *value,
                     AstSpan span);
AstNode *ast_unary(ParseCtx *ctx, UnOp op, AstNode *operand, AstSpan span);
AstNode *ast_binary(ParseCtx *ctx, BinOp op, AstNode *lhs, AstNode *rhs,
                    AstSpan span);
AstNode *ast_ternary(ParseCtx *ctx, AstNode *cond, AstNode *a, AstNode *b,
                     AstSpan span);
AstNode *ast_type(ParseCtx *ctx, const char *name, AstSpan span);

/* Lists may be NULL (empty). */
static inline int ast_count(const PtrVec *list) { return list ? list->count : 0; }
static inline AstNode *ast_at(const PtrVec *list, int i) {
    return (AstNode *)list->items[i];
}

/* Writes a readable dump of the file's declarations (the parser goldens
 * in tests/lang/parse): expressions fully parenthesised. */
void ast_dump(FILE *out, const AstFile *file);
void ast_dump_expr(FILE *out, const AstNode *e);
const char *ast_kind_name(AstKind kind);

/* ---- parser.y / lexer.l ---- */
/* Parses text[0..length) (which may hold any bytes, NULs included) into a
 * new AstFile.  Syntax errors are reported and recovered from; the result
 * is never NULL but holds only what parsed.  Returns the number of errors
 * reported while parsing through *errors. */
AstFile *parse_file(Arena *arena, Diag *diag, const char *path,
                    const char *text, size_t length, int *errors);

#endif
