/*
 * ir_parse_stmt.c -- statements of the textual IR reader (docs/ir.md),
 * including the Hopper statements of docs/hopper.md section 7.  Every
 * optional clause that is absent leaves the field at the default of
 * ir_new_stmt, which is exactly when ir_print_stmt.c leaves it out.
 */
#include "ir_lex.h"

#include <stdio.h>
#include <string.h>

/* ---- statements ---------------------------------------------------------------------------- */

static Stmt *parse_stmt(Parser *p);

/* block = '{' {stmt} '}' -- always a SEQ */
Stmt *ir_parse_block(Parser *p)
{
    Token *open = ir_lex_expect_punct(p, "{");
    ir_parse_enter(p, open->loc);
    Stmt *seq = ir_new_stmt(p->kernel, STMT_SEQ, open->loc);
    while (!is_punct(peek(p), "}")) {
        if (peek(p)->kind == TOKEN_EOF)
            ir_lex_error(p, peek(p)->loc, "expected '}' to close the block opened at %d:%d",
                        open->loc.line, open->loc.col);
        ir_seq_append(p->kernel, seq, parse_stmt(p));
    }
    next(p);
    ir_parse_leave(p);
    return seq;
}

static bool loop_kind_from_name(const char *name, LoopKind *out)
{
    for (int kind = 0; kind < LOOP_COUNT; kind++) {
        if (strcmp(ir_loop_name((LoopKind)kind), name) == 0) {
            *out = (LoopKind)kind;
            return true;
        }
    }
    return false;
}

static void parse_pipeline_clauses(Parser *p, Stmt *s)
{
    ir_lex_expect_word(p, "stages");
    s->u.loop.stages = (int)ir_lex_expect_int(p, "stages", INT32_MIN, INT32_MAX);
    if (accept_word(p, "release_lag"))
        s->u.loop.release_lag =
            (int)ir_lex_expect_int(p, "release lag", INT32_MIN, INT32_MAX);
    if (accept_word(p, "role")) {
        Token *role = peek(p);
        int found = -1;
        for (int r = 0; r < PIPE_COUNT; r++)
            if (is_word(role, ir_pipe_role_name((PipeRole)r)))
                found = r;
        if (found < 0)
            ir_lex_error(p, role->loc, "expected a role (both, producer, consumer), found %s",
                         ir_lex_describe(p, role));
        next(p);
        s->u.loop.role = (PipeRole)found;
    }
    if (accept_word(p, "pipe"))
        s->u.loop.pipe_id = (int)ir_lex_expect_int(p, "pipe id", INT32_MIN, INT32_MAX);
}

/* 'let' | 'var' VAR [':' dtype] ['=' expr]
 * The variable is created after its value is parsed, so the value cannot
 * refer to it. */
static void parse_let(Parser *p, Stmt *s, bool mutable)
{
    Token *name = ir_parse_new_var_name(p);
    DType t = DT_VOID;
    bool typed = accept_punct(p, ":");
    if (typed)
        t = ir_lex_expect_dtype(p);
    if (accept_punct(p, "=")) {
        s->u.let.value = ir_parse_expr_in(p, t);
        if (!typed)
            t = s->u.let.value->dtype;
    } else if (!typed) {
        ir_lex_error(p, name->loc, "%%%s needs a dtype or a value", name->text);
    }
    s->u.let.var = ir_new_var(p->kernel, name->text, t, mutable ? VAR_MUTABLE : VAR_LET);
}

/* for = 'for' vardecl 'in' loopkind '(' expr ',' expr ')' ['step' int]
 *       [pipeline] block
 * pipeline = 'stages' int ['role' ('both'|'producer'|'consumer')]
 *            ['pipe' int]          (pipelined loops only, and required) */
static void parse_for(Parser *p, Stmt *s)
{
    Token *name = ir_parse_new_var_name(p);
    DType t = DT_I32;
    if (accept_punct(p, ":"))
        t = ir_lex_expect_dtype(p);
    ir_lex_expect_word(p, "in");
    Token *kind = peek(p);
    if (kind->kind != TOKEN_IDENT || !loop_kind_from_name(kind->text, &s->u.loop.kind))
        ir_lex_error(p, kind->loc,
                     "expected a loop kind (serial, unroll, vectorized, pipelined), found %s",
                    ir_lex_describe(p, kind));
    next(p);
    ir_lex_expect_punct(p, "(");
    s->u.loop.begin = ir_parse_expr_in(p, t);
    ir_lex_expect_punct(p, ",");
    s->u.loop.end = ir_parse_expr_in(p, t);
    ir_lex_expect_punct(p, ")");
    s->u.loop.step = 1;
    if (accept_word(p, "step"))
        s->u.loop.step = ir_lex_expect_int(p, "step", INT64_MIN, INT64_MAX);
    if (s->u.loop.kind == LOOP_PIPELINED)
        parse_pipeline_clauses(p, s);
    s->u.loop.var = ir_new_var(p->kernel, name->text, t, VAR_LOOP);
    s->u.loop.body = ir_parse_block(p);
}

/* parallel = 'parallel' '(' VAR ':' [dtype] int {',' ...} ')' [layout] block */
static void parse_parallel(Parser *p, Stmt *s)
{
    ir_lex_expect_punct(p, "(");
    int rank = 0;
    do {
        if (rank == IR_MAX_RANK)
            ir_lex_error(p, peek(p)->loc, "more than %d parallel dimensions", IR_MAX_RANK);
        Var *v = ir_parse_define_var(p, DT_I32, VAR_LOOP);
        ir_lex_expect_punct(p, ":");
        DType t;
        if (peek(p)->kind == TOKEN_IDENT && ir_dtype_from_name(peek(p)->text, &t)) {
            next(p);
            v->dtype = t;
        }
        s->u.parallel.vars[rank] = v;
        s->u.parallel.extent[rank] = ir_lex_expect_int(p, "extent", INT64_MIN, INT64_MAX);
        rank++;
    } while (accept_punct(p, ","));
    ir_lex_expect_punct(p, ")");
    s->u.parallel.rank = rank;
    if (is_word(peek(p), "layout"))
        s->u.parallel.layout = ir_parse_layout(p);
    s->u.parallel.body = ir_parse_block(p);
}

static void parse_reduce(Parser *p, Stmt *s)
{
    Token *op = peek(p);
    bool found = false;
    for (int r = 0; r < REDUCE_COUNT && op->kind == TOKEN_IDENT; r++) {
        if (strcmp(ir_reduce_name((ReduceOp)r), op->text) == 0) {
            s->u.reduce.op = (ReduceOp)r;
            found = true;
        }
    }
    if (!found)
        ir_lex_error(p, op->loc, "expected a reduction (sum, max, min, absmax), found %s",
                    ir_lex_describe(p, op));
    next(p);
    s->u.reduce.src = ir_parse_use_buffer(p);
    ir_lex_expect_punct(p, "->");
    s->u.reduce.dst = ir_parse_use_buffer(p);
    ir_lex_expect_word(p, "dim");
    s->u.reduce.dim = (int)ir_lex_expect_int(p, "dim", INT32_MIN, INT32_MAX);
    s->u.reduce.clear = accept_word(p, "clear");
}

static void parse_atomic(Parser *p, Stmt *s)
{
    Token *op = peek(p);
    bool found = false;
    for (int a = 0; a < ATOMIC_COUNT && op->kind == TOKEN_IDENT; a++) {
        if (strcmp(ir_atomic_name((AtomicOp)a), op->text) == 0) {
            s->u.atomic.op = (AtomicOp)a;
            found = true;
        }
    }
    if (!found)
        ir_lex_error(p, op->loc, "expected an atomic op (add, max, min), found %s",
                    ir_lex_describe(p, op));
    next(p);
    Expr *predicate;
    int align_bytes;
    s->u.atomic.indices = ir_parse_access(p, &s->u.atomic.buffer, &predicate, &align_bytes, false);
    ir_lex_expect_punct(p, "=");
    s->u.atomic.value = ir_parse_expr_in(p, s->u.atomic.buffer->dtype);
}

/* ---- Hopper statements (docs/hopper.md section 7) ------------------------------------------- */

/* ['multicast' int 'dim' int] of a copy or tma statement. */
static void parse_multicast(Parser *p, int *ctas, int *dim)
{
    if (!accept_word(p, "multicast"))
        return;
    *ctas = (int)ir_lex_expect_int(p, "multicast CTA count", INT32_MIN, INT32_MAX);
    ir_lex_expect_word(p, "dim");
    *dim = (int)ir_lex_expect_int(p, "multicast dimension", INT32_MIN, INT32_MAX);
}

/* copy clauses = ['tma' hint] ['multicast_hint' hint] ['map' int]
 *                ['multicast' int 'dim' int] ['barrier' region] */
static void parse_copy_clauses(Parser *p, Stmt *s)
{
    if (accept_word(p, "tma"))
        s->u.copy.tma = ir_parse_hint(p);
    if (accept_word(p, "multicast_hint"))
        s->u.copy.multicast_hint = ir_parse_hint(p);
    if (accept_word(p, "map"))
        s->u.copy.tensor_map = (int)ir_lex_expect_int(p, "tensor map", INT32_MIN, INT32_MAX);
    parse_multicast(p, &s->u.copy.multicast, &s->u.copy.multicast_dim);
    if (accept_word(p, "barrier"))
        s->u.copy.barrier = ir_parse_region(p);
}

/* Flags written as bare words in any order, each at most once. */
static void parse_flags(Parser *p, const char *const *names, bool *const *flags, int count)
{
    for (;;) {
        Token *token = peek(p);
        int found = -1;
        for (int i = 0; i < count; i++)
            if (is_word(token, names[i]))
                found = i;
        if (found < 0)
            return;
        if (*flags[found])
            ir_lex_error(p, token->loc, "'%s' is given twice", names[found]);
        *flags[found] = true;
        next(p);
    }
}

/* 'gemm' region ',' region '->' BUFFER {'transpose_a' | 'transpose_b' | 'clear'}
 *        ['wait' INT] */
static void parse_gemm(Parser *p, Stmt *s)
{
    s->u.gemm.a = ir_parse_region(p);
    ir_lex_expect_punct(p, ",");
    s->u.gemm.b = ir_parse_region(p);
    ir_lex_expect_punct(p, "->");
    s->u.gemm.c = ir_parse_use_buffer(p);
    static const char *const names[] = {"transpose_a", "transpose_b", "clear"};
    bool *flags[] = {&s->u.gemm.transpose_a, &s->u.gemm.transpose_b, &s->u.gemm.clear};
    parse_flags(p, names, flags, 3);
    /* the range is verify's rule; here only what an int holds */
    if (accept_word(p, "wait"))
        s->u.gemm.wait = (int)ir_lex_expect_int(p, "gemm wait", INT32_MIN, INT32_MAX);
}

/* 'mbarrier' op region ['=' expr]   (the value exactly when the op has one) */
static void parse_mbarrier(Parser *p, Stmt *s)
{
    Token *op = peek(p);
    int found = -1;
    for (int i = 0; i < MBAR_COUNT; i++)
        if (is_word(op, ir_mbarrier_op_name((MbarrierOp)i)))
            found = i;
    if (found < 0)
        ir_lex_error(p, op->loc, "expected an mbarrier op (init, arrive, expect_tx, wait), "
                     "found %s", ir_lex_describe(p, op));
    next(p);
    s->u.mbarrier.op = (MbarrierOp)found;
    s->u.mbarrier.bar = ir_parse_region(p);
    if (ir_mbarrier_op_has_value((MbarrierOp)found)) {
        ir_lex_expect_punct(p, "=");
        s->u.mbarrier.value = ir_parse_expr(p);
    }
}

/* 'tma' ('load' | 'store') region 'map' int '[' expr {',' expr} ']'
 *       ['multicast' int 'dim' int] ['barrier' region]
 * One coordinate per dimension of the tensor map (declared in the kernel
 * header, so known here). */
static void parse_tma(Parser *p, Stmt *s)
{
    if (accept_word(p, "store"))
        s->u.tma.store = true;
    else
        ir_lex_expect_word(p, "load");
    s->u.tma.smem = ir_parse_region(p);
    ir_lex_expect_word(p, "map");
    Token *map = peek(p);
    int index = (int)ir_lex_expect_int(p, "tensor map", 0, INT32_MAX);
    if (index >= p->kernel->ntensor_maps)
        ir_lex_error(p, map->loc, "tensor map %d is not declared (%d maps)", index,
                     p->kernel->ntensor_maps);
    s->u.tma.tensor_map = index;
    Token *open = ir_lex_expect_punct(p, "[");
    int count = 0;
    if (!is_punct(peek(p), "]")) {
        do {
            if (count == IR_MAX_RANK)
                ir_lex_error(p, peek(p)->loc, "more than %d coordinates", IR_MAX_RANK);
            s->u.tma.coords[count++] = ir_parse_expr(p);
        } while (accept_punct(p, ","));
    }
    ir_lex_expect_punct(p, "]");
    int rank = p->kernel->tensor_maps[index].rank;
    if (count != rank)
        ir_lex_error(p, open->loc, "tensor map %d has rank %d but %d coordinates are given",
                     index, rank, count);
    parse_multicast(p, &s->u.tma.multicast, &s->u.tma.multicast_dim);
    if (accept_word(p, "barrier"))
        s->u.tma.bar = ir_parse_region(p);
}

/* 'wgmma' shape dtype dtype region ',' region '->' BUFFER '+' int
 *         {'transpose_a' | 'transpose_b'} 'scale_d' expr
 * shape = m<M>n<N>k<K>, one word, e.g. m64n256k16 */
static void parse_wgmma(Parser *p, Stmt *s)
{
    Token *shape = peek(p);
    int m, n, kk, length = 0;
    if (shape->kind != TOKEN_IDENT ||
        sscanf(shape->text, "m%dn%dk%d%n", &m, &n, &kk, &length) != 3 ||
        shape->text[length] != 0)
        ir_lex_error(p, shape->loc, "expected a wgmma shape (m64n256k16), found %s",
                     ir_lex_describe(p, shape));
    next(p);
    s->u.wgmma.m = m;
    s->u.wgmma.n = n;
    s->u.wgmma.k = kk;
    s->u.wgmma.a_dtype = ir_lex_expect_dtype(p);
    s->u.wgmma.acc_dtype = ir_lex_expect_dtype(p);
    s->u.wgmma.a = ir_parse_region(p);
    ir_lex_expect_punct(p, ",");
    s->u.wgmma.b = ir_parse_region(p);
    ir_lex_expect_punct(p, "->");
    s->u.wgmma.acc = ir_parse_use_buffer(p);
    ir_lex_expect_punct(p, "+");
    s->u.wgmma.acc_offset = ir_lex_expect_int(p, "accumulator offset", 0, INT64_MAX);
    static const char *const names[] = {"transpose_a", "transpose_b"};
    bool *flags[] = {&s->u.wgmma.transpose_a, &s->u.wgmma.transpose_b};
    parse_flags(p, names, flags, 2);
    s->u.wgmma.b_dtype = s->u.wgmma.a_dtype;
    if (accept_word(p, "b_dtype"))
        s->u.wgmma.b_dtype = ir_lex_expect_dtype(p);
    ir_lex_expect_word(p, "scale_d");
    s->u.wgmma.scale_d = ir_parse_expr(p);
}

/* 'fence' op [int]   (the value exactly when the op has one) */
static void parse_fence(Parser *p, Stmt *s)
{
    Token *op = peek(p);
    int found = -1;
    for (int i = 0; i < FENCE_COUNT; i++)
        if (is_word(op, ir_fence_op_name((FenceOp)i)))
            found = i;
    if (found < 0)
        ir_lex_error(p, op->loc, "expected a fence op (mbarrier_init, proxy_async, "
                     "wgmma_fence, ...), found %s", ir_lex_describe(p, op));
    next(p);
    s->u.fence.op = (FenceOp)found;
    if (ir_fence_op_has_value((FenceOp)found))
        s->u.fence.value = ir_lex_expect_int(p, "fence value", INT64_MIN, INT64_MAX);
}

/* stmt = 'seq' block | let | var | VAR '=' expr | 'store' access '=' expr
 *      | 'alloc' bufferdecl | for | parallel
 *      | 'if' expr ['warp_specialized'] block ['else' block]
 *      | 'barrier' ['warp'] ['named' int int]
 *      | 'copy' region '->' region copyclauses
 *      | 'fill' region '=' expr | 'reduce' op BUFFER '->' BUFFER 'dim' int
 *        ['clear'] | 'atomic' op access '=' expr | 'eval' expr | 'return'
 *      | 'assert' expr [',' STRING]
 *      | gemm | mbarrier | tma | wgmma | fence */
static Stmt *parse_stmt(Parser *p)
{
    Kernel *k = p->kernel;
    Token *token = peek(p);
    Loc loc = token->loc;
    if (token->kind == TOKEN_VAR) {
        Stmt *s = ir_new_stmt(k, STMT_ASSIGN, loc);
        s->u.assign.var = ir_parse_use_var(p);
        ir_lex_expect_punct(p, "=");
        s->u.assign.value = ir_parse_expr_in(p, s->u.assign.var->dtype);
        return s;
    }
    if (token->kind != TOKEN_IDENT)
        ir_lex_error(p, loc, "expected a statement, found %s", ir_lex_describe(p, token));
    const char *word = token->text;
    next(p);
    Stmt *s;
    if (strcmp(word, "seq") == 0) {
        s = ir_parse_block(p);
        s->loc = loc;
    } else if (strcmp(word, "let") == 0 || strcmp(word, "var") == 0) {
        s = ir_new_stmt(k, STMT_LET, loc);
        parse_let(p, s, word[0] == 'v');
    } else if (strcmp(word, "store") == 0) {
        s = ir_new_stmt(k, STMT_STORE, loc);
        s->u.store.indices = ir_parse_access(p, &s->u.store.buffer, &s->u.store.predicate,
                                          &s->u.store.align_bytes, true);
        ir_lex_expect_punct(p, "=");
        s->u.store.value = ir_parse_expr_in(p, s->u.store.buffer->dtype);
    } else if (strcmp(word, "alloc") == 0) {
        s = ir_new_stmt(k, STMT_ALLOC, loc);
        s->u.alloc.buffer = ir_parse_buffer_decl(p);
    } else if (strcmp(word, "for") == 0) {
        s = ir_new_stmt(k, STMT_FOR, loc);
        parse_for(p, s);
    } else if (strcmp(word, "parallel") == 0) {
        s = ir_new_stmt(k, STMT_PARALLEL, loc);
        parse_parallel(p, s);
    } else if (strcmp(word, "if") == 0) {
        s = ir_new_stmt(k, STMT_IF, loc);
        s->u.if_.cond = ir_parse_expr(p);
        s->u.if_.warp_specialized = accept_word(p, "warp_specialized");
        s->u.if_.then_body = ir_parse_block(p);
        if (accept_word(p, "else"))
            s->u.if_.else_body = ir_parse_block(p);
    } else if (strcmp(word, "barrier") == 0) {
        s = ir_new_stmt(k, STMT_BARRIER, loc);
        s->u.barrier.warp_only = accept_word(p, "warp");
        if (accept_word(p, "named")) {
            s->u.barrier.id = (int)ir_lex_expect_int(p, "barrier id", INT32_MIN, INT32_MAX);
            s->u.barrier.threads = (int)ir_lex_expect_int(p, "barrier threads", INT32_MIN,
                                                          INT32_MAX);
        }
    } else if (strcmp(word, "copy") == 0) {
        s = ir_new_stmt(k, STMT_COPY, loc);
        s->u.copy.src = ir_parse_region(p);
        ir_lex_expect_punct(p, "->");
        s->u.copy.dst = ir_parse_region(p);
        parse_copy_clauses(p, s);
    } else if (strcmp(word, "fill") == 0) {
        s = ir_new_stmt(k, STMT_FILL, loc);
        s->u.fill.dst = ir_parse_region(p);
        ir_lex_expect_punct(p, "=");
        s->u.fill.value = ir_parse_expr_in(p, s->u.fill.dst.buffer->dtype);
    } else if (strcmp(word, "reduce") == 0) {
        s = ir_new_stmt(k, STMT_REDUCE, loc);
        parse_reduce(p, s);
    } else if (strcmp(word, "atomic") == 0) {
        s = ir_new_stmt(k, STMT_ATOMIC, loc);
        parse_atomic(p, s);
    } else if (strcmp(word, "eval") == 0) {
        s = ir_new_stmt(k, STMT_EVAL, loc);
        s->u.eval.value = ir_parse_expr(p);
    } else if (strcmp(word, "return") == 0) {
        s = ir_new_stmt(k, STMT_RETURN, loc);
    } else if (strcmp(word, "assert") == 0) {
        s = ir_new_stmt(k, STMT_ASSERT, loc);
        s->u.assert_.cond = ir_parse_expr(p);
        if (accept_punct(p, ","))
            s->u.assert_.message = ir_lex_expect_string(p, "assert message");
    } else if (strcmp(word, "gemm") == 0) {
        s = ir_new_stmt(k, STMT_GEMM, loc);
        parse_gemm(p, s);
    } else if (strcmp(word, "mbarrier") == 0) {
        s = ir_new_stmt(k, STMT_MBARRIER, loc);
        parse_mbarrier(p, s);
    } else if (strcmp(word, "tma") == 0) {
        s = ir_new_stmt(k, STMT_TMA, loc);
        parse_tma(p, s);
    } else if (strcmp(word, "wgmma") == 0) {
        s = ir_new_stmt(k, STMT_WGMMA, loc);
        parse_wgmma(p, s);
    } else if (strcmp(word, "fence") == 0) {
        s = ir_new_stmt(k, STMT_FENCE, loc);
        parse_fence(p, s);
    } else {
        ir_lex_error(p, loc, "unknown statement '%s'", word);
    }
    return s;
}

