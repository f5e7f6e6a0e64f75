/*
 * parser.y -- the grammar of .tk files (docs/language.md is the prose
 * version).
 *
 * A pure (reentrant) bison parser over the reentrant flex scanner of
 * lexer.l: all state lives in the ParseCtx and the scanner handed to
 * tk_yyparse, so several files can be parsed in one process.  Actions are
 * thin: one constructor of ast.c each, so the grammar reads as a grammar;
 * every check that is not about syntax lives in sema.c and lower_ast.c.
 *
 * Error recovery: a syntax error inside a statement skips to the next ';'
 * or to the end of the enclosing block; at the top level it skips to the
 * next ';' or '}'.  Bison then stays quiet until three tokens have been
 * shifted, which keeps one mistake from producing a cascade.
 */

%define api.pure full
%define api.prefix {tk_yy}
%define api.token.prefix {TOK_}
%define api.location.type {AstSpan}
%define parse.error detailed
%locations
%param {void *scanner}
%parse-param {ParseCtx *ctx}

%code requires {
#include "ast.h"
}

%code {
#include <string.h>

int tk_yylex(TK_YYSTYPE *value, AstSpan *span, void *scanner);
static void tk_yyerror(AstSpan *span, void *scanner, ParseCtx *ctx,
                       const char *message);

/* Spans carry byte offsets besides lines and columns, so the default
 * location rule is restated here to carry them too. */
#define YYLLOC_DEFAULT(cur, rhs, n)                                         \
    do {                                                                    \
        if (n) {                                                            \
            (cur).first_line = YYRHSLOC(rhs, 1).first_line;                 \
            (cur).first_column = YYRHSLOC(rhs, 1).first_column;             \
            (cur).first_offset = YYRHSLOC(rhs, 1).first_offset;             \
            (cur).last_line = YYRHSLOC(rhs, n).last_line;                   \
            (cur).last_column = YYRHSLOC(rhs, n).last_column;               \
            (cur).last_offset = YYRHSLOC(rhs, n).last_offset;               \
        } else {                                                            \
            (cur).first_line = (cur).last_line = YYRHSLOC(rhs, 0).last_line; \
            (cur).first_column = (cur).last_column =                        \
                YYRHSLOC(rhs, 0).last_column;                               \
            (cur).first_offset = (cur).last_offset =                        \
                YYRHSLOC(rhs, 0).last_offset;                               \
        }                                                                   \
    } while (0)
}

%union {
    const char *string;
    struct { int64_t value; bool is_unsigned; } integer;
    struct { double value; bool f_suffix; } real;
    AstNode *node;
    PtrVec *list;
    int op;
}

%token <string> IDENT "identifier"
%token <string> STRING "string"
%token <integer> INT "integer"
%token <real> FLOAT "number"
%token IMPORT "import" CONST "const" FN "fn" KERNEL "kernel"
%token WHERE "where" INSTANCES "instances" LAUNCH "launch" IN "in"
%token TENSOR "tensor" STRIDES "strides"
%token SHARED "shared" FRAG "frag" LOCAL "local" LET "let" VAR "var"
%token PARALLEL "parallel" FOR "for" IF "if" ELSE "else"
%token COPY "copy" FILL "fill" REDUCE "reduce" GEMM "gemm" GEMM_WAIT "gemm_wait"
%token ATOMIC_ADD "atomic_add" ATOMIC_MAX "atomic_max" ATOMIC_MIN "atomic_min"
%token SYNC_THREADS "sync_threads" SYNC_WARP "sync_warp"
%token RETURN "return" ASSERT "assert" TRUE "true" FALSE "false"
%token BITCAST "bitcast"
%token ARROW "->" EQ "==" NE "!=" LE "<=" GE ">=" ANDAND "&&" OROR "||"
%token SHL "<<" SHR ">>"
%token ADD_ASSIGN "+=" SUB_ASSIGN "-=" MUL_ASSIGN "*=" DIV_ASSIGN "/="
%token OR_ASSIGN "|=" AND_ASSIGN "&=" XOR_ASSIGN "^="

%type <node> decl import const fn kernel tparam param where instance targ
%type <node> type fn_param fn_let kitem launch block stmt if_stmt
%type <node> region slice option expr lvalue atomic_target launch_hints param_cache
%type <list> decls tparams_opt tparams params params_opt strides_opt exprs
%type <list> exprs_opt wheres_opt wheres instances_opt instances targs
%type <list> fn_params_opt fn_params fn_lets kitems names stmts axes slices
%type <list> options
%type <op> assign_op atomic_op alloc_kind

%right '?' ':'
%left OROR
%left ANDAND
%left '|'
%left '^'
%left '&'
%left EQ NE
%left '<' '>' LE GE
%left SHL SHR
%left '+' '-'
%left '*' '/' '%'
%precedence UNARY

%start file

%%

/* file := (import | const | fn | kernel)* */
file:
    decls                       { ctx->file->decls = $1 ? *$1 : ctx->file->decls; }
  ;

decls:
    %empty                      { $$ = NULL; }
  | decls decl                  { $$ = ast_list(ctx, $1, $2); }
  ;

decl:
    import
  | const
  | fn
  | kernel
  | error ';'                   { $$ = NULL; }
  | error '}'                   { $$ = NULL; }
  ;

/* import := 'import' STRING ';' */
import:
    IMPORT STRING ';'           { $$ = ast_import(ctx, $2, @2); }
  ;

/* const := 'const' IDENT ':' type '=' expr ';' */
const:
    CONST IDENT ':' type '=' expr ';'
                                { $$ = ast_const(ctx, $2, $4, $6, @2); }
  ;

/* fn := 'fn' IDENT '(' params ')' '->' type '{' {let} 'return' expr ';' '}' */
fn:
    FN IDENT '(' fn_params_opt ')' ARROW type '{' fn_lets RETURN expr ';' '}'
                                { $$ = ast_fn(ctx, $2, $4, $7, $9, $11, @2); }
  ;

fn_params_opt:
    %empty                      { $$ = NULL; }
  | fn_params
  ;

fn_params:
    fn_param                    { $$ = ast_list(ctx, NULL, $1); }
  | fn_params ',' fn_param      { $$ = ast_list(ctx, $1, $3); }
  ;

fn_param:
    IDENT ':' type              { $$ = ast_fn_param(ctx, $1, $3, @1); }
  ;

fn_lets:
    %empty                      { $$ = NULL; }
  | fn_lets fn_let              { $$ = ast_list(ctx, $1, $2); }
  ;

fn_let:
    LET IDENT '=' expr ';'      { $$ = ast_let(ctx, $2, $4, @2); }
  | error ';'                   { $$ = NULL; }
  ;

/* kernel := 'kernel' IDENT ['<' tparams '>'] '(' params [','] ')'
 *           ['where' exprs] ['instances' '{' instances [','] '}']
 *           '{' {let} launch '}' */
kernel:
    KERNEL IDENT tparams_opt '(' params_opt ')' wheres_opt instances_opt
        '{' kitems '}'
                                { $$ = ast_kernel(ctx, $2, $3, $5, $7, $8, $10, NULL, @2); }
  ;

tparams_opt:
    %empty                      { $$ = NULL; }
  | '<' tparams '>'             { $$ = $2; }
  ;

tparams:
    tparam                      { $$ = ast_list(ctx, NULL, $1); }
  | tparams ',' tparam          { $$ = ast_list(ctx, $1, $3); }
  ;

/* tparam := IDENT ':' ('dtype' | 'int' | 'bool') */
tparam:
    IDENT ':' IDENT             { $$ = ast_named(ctx, AST_TPARAM, $1, $3, @1); }
  ;

params_opt:
    %empty                      { $$ = NULL; }
  | params
  | params ','
  ;

params:
    param                       { $$ = ast_list(ctx, NULL, $1); }
  | params ',' param            { $$ = ast_list(ctx, $1, $3); }
  ;

/* param := IDENT ':' 'tensor' '<' type '>' '[' dims ']' ['strides' '[' dims ']']
 *            ['cache' '(' expr ')']
 *        | IDENT ':' type */
param:
    IDENT ':' TENSOR '<' type '>' '[' exprs ']' strides_opt param_cache
                                { $$ = ast_tensor_param(ctx, $1, $5, $8, $10, $11, @1); }
  | IDENT ':' type              { $$ = ast_scalar_param(ctx, $1, $3, @1); }
  ;

strides_opt:
    %empty                      { $$ = NULL; }
  | STRIDES '[' exprs ']'       { $$ = $3; }
  ;

/* A tensor's own cache hint: 'cache' is checked by sema, like 'with'. */
param_cache:
    %empty                      { $$ = NULL; }
  | IDENT '(' expr ')'          { $$ = ast_option(ctx, $1, $3, @1); }
  ;

wheres_opt:
    %empty                      { $$ = NULL; }
  | WHERE wheres                { $$ = $2; }
  ;

wheres:
    where                       { $$ = ast_list(ctx, NULL, $1); }
  | wheres ',' where            { $$ = ast_list(ctx, $1, $3); }
  ;

where:
    expr                        { $$ = ast_where(ctx, $1, @1); }
  ;

instances_opt:
    %empty                      { $$ = NULL; }
  | INSTANCES '{' instances '}'     { $$ = $3; }
  | INSTANCES '{' instances ',' '}' { $$ = $3; }
  ;

instances:
    instance                    { $$ = ast_list(ctx, NULL, $1); }
  | instances ',' instance      { $$ = ast_list(ctx, $1, $3); }
  ;

/* instance := IDENT ':' '<' targ {',' targ} '>' */
instance:
    IDENT ':' '<' targs '>'     { $$ = ast_instance(ctx, $1, $4, @1); }
  ;

targs:
    targ                        { $$ = ast_list(ctx, NULL, $1); }
  | targs ',' targ              { $$ = ast_list(ctx, $1, $3); }
  ;

targ:
    IDENT                       { $$ = ast_targ(ctx, TARG_DTYPE, $1, 0, @1); }
  | INT                         { $$ = ast_targ(ctx, TARG_INT, NULL, $1.value, @1); }
  | '-' INT                     { $$ = ast_targ(ctx, TARG_INT, NULL, -$2.value, @1); }
  | TRUE                        { $$ = ast_targ(ctx, TARG_BOOL, NULL, 1, @1); }
  | FALSE                       { $$ = ast_targ(ctx, TARG_BOOL, NULL, 0, @1); }
  ;

/* The kernel body: compile-time lets, then the launch (sema checks the
 * order, which gives a better message than a syntax error). */
kitems:
    %empty                      { $$ = NULL; }
  | kitems kitem                { $$ = ast_list(ctx, $1, $2); }
  ;

kitem:
    LET IDENT '=' expr ';'      { $$ = ast_let(ctx, $2, $4, @2); }
  | launch
  | error ';'                   { $$ = NULL; }
  ;

/* launch := 'launch' '(' names ')' 'in' 'grid' '(' exprs ')'
 *           'threads' '(' expr ')' ['with' '(' options ')'] block */
launch:
    LAUNCH '(' names ')' IN IDENT '(' exprs ')' IDENT '(' expr ')'
        launch_hints block
                                { $$ = ast_launch(ctx, $3, $6, $8, $10, $12, $14, $15, @1); }
  ;

/* The kernel hints: 'with' is checked by sema, like 'grid' and 'threads'. */
launch_hints:
    %empty                      { $$ = NULL; }
  | IDENT '(' options ')'       { $$ = ast_hints(ctx, $1, $3, @1); }
  ;

names:
    IDENT                       { $$ = ast_list(ctx, NULL, ast_ident(ctx, $1, @1)); }
  | names ',' IDENT             { $$ = ast_list(ctx, $1, ast_ident(ctx, $3, @3)); }
  ;

/* type := dtype name | template dtype parameter */
type:
    IDENT                       { $$ = ast_type(ctx, $1, @1); }
  ;

block:
    '{' stmts '}'               { $$ = ast_block(ctx, $2, @1); }
  ;

stmts:
    %empty                      { $$ = NULL; }
  | stmts stmt                  { $$ = ast_list(ctx, $1, $2); }
  ;

stmt:
    alloc_kind IDENT ':' type '[' exprs ']' ';'
                                { $$ = ast_alloc(ctx, (Scope)$1, $2, $4, $6, @2); }
  | LET IDENT '=' expr ';'      { $$ = ast_let(ctx, $2, $4, @2); }
  | VAR IDENT ':' type ';'      { $$ = ast_var(ctx, $2, $4, NULL, @2); }
  | VAR IDENT ':' type '=' expr ';'
                                { $$ = ast_var(ctx, $2, $4, $6, @2); }
  | lvalue assign_op expr ';'   { $$ = ast_assign(ctx, $2, $1, $3, @2); }
  | PARALLEL '(' axes ')' block { $$ = ast_parallel(ctx, $3, $5, @1); }
  | FOR IDENT IN IDENT '(' exprs ')' block
                                { $$ = ast_for(ctx, $2, $4, $6, NULL, $8, @1); }
  | FOR IDENT IN IDENT '(' exprs ',' options ')' block
                                { $$ = ast_for(ctx, $2, $4, $6, $8, $10, @1); }
  | if_stmt
  | COPY '(' region ',' region ')' ';'
                                { $$ = ast_copy(ctx, $3, $5, NULL, @1); }
  | COPY '(' region ',' region ',' options ')' ';'
                                { $$ = ast_copy(ctx, $3, $5, $7, @1); }
  | GEMM '(' region ',' region ',' region ')' ';'
                                { $$ = ast_gemm(ctx, $3, $5, $7, NULL, @1); }
  | GEMM '(' region ',' region ',' region ',' options ')' ';'
                                { $$ = ast_gemm(ctx, $3, $5, $7, $9, @1); }
  | GEMM_WAIT '(' expr ')' ';'  { $$ = ast_gemm_wait(ctx, $3, @1); }
  | FILL '(' region ',' expr ')' ';'
                                { $$ = ast_fill(ctx, $3, $5, @1); }
  | REDUCE '(' IDENT ',' IDENT ',' IDENT ',' options ')' ';'
                                { $$ = ast_reduce(ctx, $3, $5, $7, $9, @1); }
  | atomic_op '(' atomic_target ',' expr ')' ';'
                                { $$ = ast_atomic(ctx, $1, $3, $5, @1); }
  | SYNC_THREADS ';'            { $$ = ast_sync(ctx, false, @1); }
  | SYNC_WARP ';'               { $$ = ast_sync(ctx, true, @1); }
  | RETURN ';'                  { $$ = ast_node(ctx, AST_RETURN, @1); }
  | ASSERT '(' expr ')' ';'     { $$ = ast_assert(ctx, $3, NULL, @1); }
  | ASSERT '(' expr ',' STRING ')' ';'
                                { $$ = ast_assert(ctx, $3, $5, @1); }
  | block
  | error ';'                   { $$ = NULL; }
  ;

alloc_kind:
    SHARED                      { $$ = SCOPE_SHARED; }
  | FRAG                        { $$ = SCOPE_FRAGMENT; }
  | LOCAL                       { $$ = SCOPE_LOCAL; }
  ;

if_stmt:
    IF '(' expr ')' block       { $$ = ast_if(ctx, $3, $5, NULL, @1); }
  | IF '(' expr ')' block ELSE block
                                { $$ = ast_if(ctx, $3, $5, $7, @1); }
  | IF '(' expr ')' block ELSE if_stmt
                                { $$ = ast_if(ctx, $3, $5, $7, @1); }
  ;

lvalue:
    IDENT                       { $$ = ast_ident(ctx, $1, @1); }
  | IDENT '[' exprs ']'         { $$ = ast_index(ctx, $1, $3, @1); }
  ;

assign_op:
    '='                         { $$ = ASSIGN_PLAIN; }
  | ADD_ASSIGN                  { $$ = BIN_ADD; }
  | SUB_ASSIGN                  { $$ = BIN_SUB; }
  | MUL_ASSIGN                  { $$ = BIN_MUL; }
  | DIV_ASSIGN                  { $$ = BIN_DIV; }
  | OR_ASSIGN                   { $$ = BIN_OR; }
  | AND_ASSIGN                  { $$ = BIN_AND; }
  | XOR_ASSIGN                  { $$ = BIN_XOR; }
  ;

atomic_op:
    ATOMIC_ADD                  { $$ = ATOMIC_ADD; }
  | ATOMIC_MAX                  { $$ = ATOMIC_MAX; }
  | ATOMIC_MIN                  { $$ = ATOMIC_MIN; }
  ;

atomic_target:
    IDENT '[' exprs ']'         { $$ = ast_index(ctx, $1, $3, @1); }
  ;

/* parallel (IDENT ':' extent {',' IDENT ':' extent}) */
axes:
    IDENT ':' expr              { $$ = ast_list(ctx, NULL, ast_axis(ctx, $1, $3, @1)); }
  | axes ',' IDENT ':' expr     { $$ = ast_list(ctx, $1, ast_axis(ctx, $3, $5, @3)); }
  ;

/* region := IDENT | IDENT '[' slice {',' slice} ']' */
region:
    IDENT                       { $$ = ast_region(ctx, $1, NULL, @1); }
  | IDENT '[' slices ']'        { $$ = ast_region(ctx, $1, $3, @1); }
  ;

slices:
    slice                       { $$ = ast_list(ctx, NULL, $1); }
  | slices ',' slice            { $$ = ast_list(ctx, $1, $3); }
  ;

/* slice := expr | expr ':' '+' extent */
slice:
    expr                        { $$ = ast_slice(ctx, $1, NULL, @1); }
  | expr ':' '+' expr           { $$ = ast_slice(ctx, $1, $4, @1); }
  ;

options:
    option                      { $$ = ast_list(ctx, NULL, $1); }
  | options ',' option          { $$ = ast_list(ctx, $1, $3); }
  ;

option:
    IDENT '=' expr              { $$ = ast_option(ctx, $1, $3, @1); }
  ;

exprs_opt:
    %empty                      { $$ = NULL; }
  | exprs
  ;

exprs:
    expr                        { $$ = ast_list(ctx, NULL, $1); }
  | exprs ',' expr              { $$ = ast_list(ctx, $1, $3); }
  ;

expr:
    INT                         { $$ = ast_int(ctx, $1.value, $1.is_unsigned, @1); }
  | FLOAT                       { $$ = ast_float(ctx, $1.value, $1.f_suffix, @1); }
  | TRUE                        { $$ = ast_bool(ctx, true, @1); }
  | FALSE                       { $$ = ast_bool(ctx, false, @1); }
  | IDENT                       { $$ = ast_ident(ctx, $1, @1); }
  | IDENT '[' exprs ']'         { $$ = ast_index(ctx, $1, $3, @1); }
  | IDENT '(' exprs_opt ')'     { $$ = ast_call(ctx, $1, $3, @1); }
  | BITCAST '<' type '>' '(' expr ')'
                                { $$ = ast_bitcast(ctx, $3, $6, @1); }
  | '(' expr ')'                { $$ = $2; }
  | '-' expr %prec UNARY        { $$ = ast_unary(ctx, UN_NEG, $2, @1); }
  | '!' expr %prec UNARY        { $$ = ast_unary(ctx, UN_LNOT, $2, @1); }
  | '~' expr %prec UNARY        { $$ = ast_unary(ctx, UN_NOT, $2, @1); }
  | expr '*' expr               { $$ = ast_binary(ctx, BIN_MUL, $1, $3, @2); }
  | expr '/' expr               { $$ = ast_binary(ctx, BIN_DIV, $1, $3, @2); }
  | expr '%' expr               { $$ = ast_binary(ctx, BIN_MOD, $1, $3, @2); }
  | expr '+' expr               { $$ = ast_binary(ctx, BIN_ADD, $1, $3, @2); }
  | expr '-' expr               { $$ = ast_binary(ctx, BIN_SUB, $1, $3, @2); }
  | expr SHL expr               { $$ = ast_binary(ctx, BIN_SHL, $1, $3, @2); }
  | expr SHR expr               { $$ = ast_binary(ctx, BIN_SHR, $1, $3, @2); }
  | expr '<' expr               { $$ = ast_binary(ctx, BIN_LT, $1, $3, @2); }
  | expr '>' expr               { $$ = ast_binary(ctx, BIN_GT, $1, $3, @2); }
  | expr LE expr                { $$ = ast_binary(ctx, BIN_LE, $1, $3, @2); }
  | expr GE expr                { $$ = ast_binary(ctx, BIN_GE, $1, $3, @2); }
  | expr EQ expr                { $$ = ast_binary(ctx, BIN_EQ, $1, $3, @2); }
  | expr NE expr                { $$ = ast_binary(ctx, BIN_NE, $1, $3, @2); }
  | expr '&' expr               { $$ = ast_binary(ctx, BIN_AND, $1, $3, @2); }
  | expr '^' expr               { $$ = ast_binary(ctx, BIN_XOR, $1, $3, @2); }
  | expr '|' expr               { $$ = ast_binary(ctx, BIN_OR, $1, $3, @2); }
  | expr ANDAND expr            { $$ = ast_binary(ctx, BIN_LAND, $1, $3, @2); }
  | expr OROR expr              { $$ = ast_binary(ctx, BIN_LOR, $1, $3, @2); }
  | expr '?' expr ':' expr      { $$ = ast_ternary(ctx, $1, $3, $5, @2); }
  ;

%%

static void tk_yyerror(AstSpan *span, void *scanner, ParseCtx *ctx,
                       const char *message) {
    (void)scanner;
    diag_error(ctx->diag, ast_loc(ctx, *span), "%s", message);
}
