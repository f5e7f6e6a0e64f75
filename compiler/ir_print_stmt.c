/*
 * ir_print_stmt.c -- the statement, kernel and module half of the textual
 * IR printer (docs/ir.md); expressions, buffer declarations, layouts and
 * regions are in ir_print.c, with which it shares ir_print.h.
 *
 * Statements print one per line, nested blocks indented by two spaces.
 * Fields that are at their constructor defaults (ir_new_stmt,
 * ir_new_kernel) are not written, so IR that predates a field prints as it
 * did; ir_parse_stmt.c restores exactly those defaults.
 */
#include "ir_print.h"

#include <string.h>

typedef struct {
    FILE *out;
    int indent;
    const Kernel *kernel; /* for the tensor maps' ranks */
} Printer;

/* ---- statements ---------------------------------------------------------------- */

static void print_stmt(Printer *p, const Stmt *s);

static void print_indent(Printer *p)
{
    for (int i = 0; i < p->indent; i++)
        fputs("  ", p->out);
}

/* `{`, the statements of a SEQ (or the one statement), `}`.  The caller
 * has written the text before the brace; the closing brace ends the line
 * unless `more` (for `} else {`). */
static void print_block(Printer *p, const Stmt *body, bool more)
{
    bool empty = !body || (body->kind == STMT_SEQ && body->u.seq.count == 0);
    if (empty) {
        fputs("{}", p->out);
    } else {
        fputs("{\n", p->out);
        p->indent++;
        if (body->kind == STMT_SEQ)
            for (int i = 0; i < body->u.seq.count; i++)
                print_stmt(p, body->u.seq.items ? body->u.seq.items[i] : NULL);
        else
            print_stmt(p, body);
        p->indent--;
        print_indent(p);
        fputc('}', p->out);
    }
    if (!more)
        fputc('\n', p->out);
}

/* `%name` plus `: dtype` when the dtype is not the default i32. */
static void print_var_decl_i32(FILE *out, const Var *v)
{
    ir_print_var_name(out, v);
    if (v && v->dtype != DT_I32)
        fprintf(out, ": %s", ir_dtype_name(v->dtype));
}

/* ` stages N [release_lag L] [role R] [pipe N]` of a PIPELINED loop (the
 * lag only when not 0, role and pipe only when not `both` / 0). */
static void print_pipeline_clauses(FILE *out, const Stmt *s)
{
    fprintf(out, " stages %d", s->u.loop.stages);
    if (s->u.loop.release_lag != 0)
        fprintf(out, " release_lag %d", s->u.loop.release_lag);
    if (s->u.loop.role != PIPE_BOTH)
        fprintf(out, " role %s", (unsigned)s->u.loop.role < PIPE_COUNT
                                     ? ir_pipe_role_name(s->u.loop.role) : "<bad>");
    if (s->u.loop.role != PIPE_BOTH || s->u.loop.pipe_id != 0)
        fprintf(out, " pipe %d", s->u.loop.pipe_id);
}

static const char *hint_text(Hint hint)
{
    return (unsigned)hint <= HINT_ON ? ir_hint_name(hint) : "<bad>";
}

static const char *cache_hint_text(CacheHint hint)
{
    return (unsigned)hint < CACHE_COUNT ? ir_cache_hint_name(hint) : "<bad>";
}

/* ` [tma H] [multicast_hint H] [map N] [multicast C dim D]
 * [barrier @bar[i]]` of a COPY. */
static void print_copy_clauses(FILE *out, const Stmt *s)
{
    if (s->u.copy.tma != HINT_AUTO)
        fprintf(out, " tma %s", hint_text(s->u.copy.tma));
    if (s->u.copy.multicast_hint != HINT_AUTO)
        fprintf(out, " multicast_hint %s", hint_text(s->u.copy.multicast_hint));
    if (s->u.copy.tensor_map != -1)
        fprintf(out, " map %d", s->u.copy.tensor_map);
    if (s->u.copy.multicast)
        fprintf(out, " multicast %d dim %d", s->u.copy.multicast, s->u.copy.multicast_dim);
    if (s->u.copy.barrier.buffer) {
        fputs(" barrier ", out);
        ir_print_region(out, &s->u.copy.barrier);
    }
}

/* The coordinates of a TMA statement: as many as its tensor map's rank
 * (the non-NULL prefix when the map index is bad, so a broken dump still
 * shows them). */
static int tma_coord_count(const Kernel *k, const Stmt *s)
{
    int map = s->u.tma.tensor_map;
    if (k && map >= 0 && map < k->ntensor_maps && k->tensor_maps[map].rank >= 0 &&
        k->tensor_maps[map].rank <= IR_MAX_RANK)
        return k->tensor_maps[map].rank;
    int count = 0;
    while (count < IR_MAX_RANK && s->u.tma.coords[count])
        count++;
    return count;
}

/* gemm, mbarrier, tma, wgmma, fence (docs/hopper.md section 7). */
static void print_async_stmt(const Printer *p, const Stmt *s)
{
    FILE *out = p->out;
    switch (s->kind) {
    case STMT_GEMM:
        fputs("gemm ", out);
        ir_print_region(out, &s->u.gemm.a);
        fputs(", ", out);
        ir_print_region(out, &s->u.gemm.b);
        fputs(" -> ", out);
        ir_print_buffer_name(out, s->u.gemm.c);
        if (s->u.gemm.transpose_a)
            fputs(" transpose_a", out);
        if (s->u.gemm.transpose_b)
            fputs(" transpose_b", out);
        if (s->u.gemm.clear)
            fputs(" clear", out);
        if (s->u.gemm.wait)
            fprintf(out, " wait %d", s->u.gemm.wait);
        return;
    case STMT_MBARRIER: {
        MbarrierOp op = s->u.mbarrier.op;
        bool valid = (unsigned)op < MBAR_COUNT;
        fprintf(out, "mbarrier %s ", valid ? ir_mbarrier_op_name(op) : "<bad>");
        ir_print_region(out, &s->u.mbarrier.bar);
        if (!valid || ir_mbarrier_op_has_value(op) || s->u.mbarrier.value) {
            fputs(" = ", out);
            ir_print_expr_in(out, s->u.mbarrier.value, DT_VOID);
        }
        return;
    }
    case STMT_TMA: {
        fputs(s->u.tma.store ? "tma store " : "tma load ", out);
        ir_print_region(out, &s->u.tma.smem);
        fprintf(out, " map %d [", s->u.tma.tensor_map);
        int count = tma_coord_count(p->kernel, s);
        for (int i = 0; i < count; i++) {
            if (i)
                fputs(", ", out);
            ir_print_expr_in(out, s->u.tma.coords[i], DT_VOID);
        }
        fputc(']', out);
        if (s->u.tma.multicast)
            fprintf(out, " multicast %d dim %d", s->u.tma.multicast, s->u.tma.multicast_dim);
        if (s->u.tma.bar.buffer) {
            fputs(" barrier ", out);
            ir_print_region(out, &s->u.tma.bar);
        }
        return;
    }
    case STMT_WGMMA: {
        DType ab = s->u.wgmma.a_dtype, acc = s->u.wgmma.acc_dtype;
        fprintf(out, "wgmma m%dn%dk%d %s %s ", s->u.wgmma.m, s->u.wgmma.n, s->u.wgmma.k,
                (unsigned)ab < DT_COUNT ? ir_dtype_name(ab) : "<bad>",
                (unsigned)acc < DT_COUNT ? ir_dtype_name(acc) : "<bad>");
        ir_print_region(out, &s->u.wgmma.a);
        fputs(", ", out);
        ir_print_region(out, &s->u.wgmma.b);
        fputs(" -> ", out);
        ir_print_buffer_name(out, s->u.wgmma.acc);
        fprintf(out, " + %lld", (long long)s->u.wgmma.acc_offset);
        if (s->u.wgmma.transpose_a)
            fputs(" transpose_a", out);
        if (s->u.wgmma.transpose_b)
            fputs(" transpose_b", out);
        /* B's dtype only where it differs from A's (mixed fp8) */
        if (s->u.wgmma.b_dtype != s->u.wgmma.a_dtype)
            fprintf(out, " b_dtype %s", (unsigned)s->u.wgmma.b_dtype < DT_COUNT
                                            ? ir_dtype_name(s->u.wgmma.b_dtype) : "<bad>");
        fputs(" scale_d ", out);
        ir_print_expr_in(out, s->u.wgmma.scale_d, DT_VOID);
        return;
    }
    case STMT_FENCE: {
        FenceOp op = s->u.fence.op;
        bool valid = (unsigned)op < FENCE_COUNT;
        fprintf(out, "fence %s", valid ? ir_fence_op_name(op) : "<bad>");
        if (!valid || ir_fence_op_has_value(op) || s->u.fence.value)
            fprintf(out, " %lld", (long long)s->u.fence.value);
        return;
    }
    default:
        return;
    }
}

static void print_stmt(Printer *p, const Stmt *s)
{
    FILE *out = p->out;
    print_indent(p);
    if (!s) {
        fputs("<null>\n", out);
        return;
    }
    switch (s->kind) {
    case STMT_SEQ:
        fputs("seq ", out);
        print_block(p, s, false);
        return;
    case STMT_LET: {
        const Var *v = s->u.let.var;
        const Expr *value = s->u.let.value;
        fputs(v && v->kind == VAR_MUTABLE ? "var " : "let ", out);
        ir_print_var_name(out, v);
        DType ctx = DT_VOID;
        if (v && (!value || v->dtype != value->dtype)) {
            fprintf(out, ": %s", ir_dtype_name(v->dtype));
            ctx = v->dtype;
        }
        if (value) {
            fputs(" = ", out);
            ir_print_expr_in(out, value, ctx);
        }
        break;
    }
    case STMT_ASSIGN:
        ir_print_var_name(out, s->u.assign.var);
        fputs(" = ", out);
        ir_print_expr_in(out, s->u.assign.value,
                      s->u.assign.var ? s->u.assign.var->dtype : DT_VOID);
        break;
    case STMT_STORE: {
        const Buffer *b = s->u.store.buffer;
        fputs("store ", out);
        ir_print_access(out, b, s->u.store.indices, s->u.store.predicate,
                     s->u.store.align_bytes);
        fputs(" = ", out);
        ir_print_expr_in(out, s->u.store.value, b ? b->dtype : DT_VOID);
        break;
    }
    case STMT_ALLOC:
        fputs("alloc ", out);
        if (s->u.alloc.buffer)
            ir_print_buffer_decl(out, s->u.alloc.buffer);
        else
            fputs("@<null>", out);
        break;
    case STMT_FOR: {
        const Var *v = s->u.loop.var;
        DType ctx = v ? v->dtype : DT_VOID;
        fputs("for ", out);
        print_var_decl_i32(out, v);
        fprintf(out, " in %s(", (unsigned)s->u.loop.kind < LOOP_COUNT
                                    ? ir_loop_name(s->u.loop.kind) : "<bad>");
        ir_print_expr_in(out, s->u.loop.begin, ctx);
        fputs(", ", out);
        ir_print_expr_in(out, s->u.loop.end, ctx);
        fputc(')', out);
        if (s->u.loop.step != 1)
            fprintf(out, " step %lld", (long long)s->u.loop.step);
        if (s->u.loop.kind == LOOP_PIPELINED)
            print_pipeline_clauses(out, s);
        fputc(' ', out);
        print_block(p, s->u.loop.body, false);
        return;
    }
    case STMT_PARALLEL: {
        fputs("parallel (", out);
        int rank = s->u.parallel.rank > IR_MAX_RANK ? 0 : s->u.parallel.rank;
        for (int i = 0; i < rank; i++) {
            const Var *v = s->u.parallel.vars[i];
            if (i)
                fputs(", ", out);
            ir_print_var_name(out, v);
            fputs(": ", out);
            if (v && v->dtype != DT_I32)
                fprintf(out, "%s ", ir_dtype_name(v->dtype));
            fprintf(out, "%lld", (long long)s->u.parallel.extent[i]);
        }
        fputs(") ", out);
        if (s->u.parallel.layout) {
            ir_print_layout(out, s->u.parallel.layout);
            fputc(' ', out);
        }
        print_block(p, s->u.parallel.body, false);
        return;
    }
    case STMT_IF:
        fputs("if ", out);
        ir_print_expr_in(out, s->u.if_.cond, DT_VOID);
        if (s->u.if_.warp_specialized)
            fputs(" warp_specialized", out);
        fputc(' ', out);
        if (!s->u.if_.else_body) {
            print_block(p, s->u.if_.then_body, false);
            return;
        }
        print_block(p, s->u.if_.then_body, true);
        fputs(" else ", out);
        print_block(p, s->u.if_.else_body, false);
        return;
    case STMT_BARRIER:
        fputs(s->u.barrier.warp_only ? "barrier warp" : "barrier", out);
        if (s->u.barrier.id != 0 || s->u.barrier.threads != 0)
            fprintf(out, " named %d %d", s->u.barrier.id, s->u.barrier.threads);
        break;
    case STMT_COPY:
        fputs("copy ", out);
        ir_print_region(out, &s->u.copy.src);
        fputs(" -> ", out);
        ir_print_region(out, &s->u.copy.dst);
        print_copy_clauses(out, s);
        break;
    case STMT_FILL: {
        const Buffer *b = s->u.fill.dst.buffer;
        fputs("fill ", out);
        ir_print_region(out, &s->u.fill.dst);
        fputs(" = ", out);
        ir_print_expr_in(out, s->u.fill.value, b ? b->dtype : DT_VOID);
        break;
    }
    case STMT_REDUCE:
        fprintf(out, "reduce %s ", (unsigned)s->u.reduce.op < REDUCE_COUNT
                                       ? ir_reduce_name(s->u.reduce.op) : "<bad>");
        ir_print_buffer_name(out, s->u.reduce.src);
        fputs(" -> ", out);
        ir_print_buffer_name(out, s->u.reduce.dst);
        fprintf(out, " dim %d", s->u.reduce.dim);
        if (s->u.reduce.clear)
            fputs(" clear", out);
        break;
    case STMT_ATOMIC: {
        const Buffer *b = s->u.atomic.buffer;
        fprintf(out, "atomic %s ", (unsigned)s->u.atomic.op < ATOMIC_COUNT
                                       ? ir_atomic_name(s->u.atomic.op) : "<bad>");
        ir_print_access(out, b, s->u.atomic.indices, NULL, 0);
        fputs(" = ", out);
        ir_print_expr_in(out, s->u.atomic.value, b ? b->dtype : DT_VOID);
        break;
    }
    case STMT_EVAL:
        fputs("eval ", out);
        ir_print_expr_in(out, s->u.eval.value, DT_VOID);
        break;
    case STMT_RETURN:
        fputs("return", out);
        break;
    case STMT_ASSERT:
        fputs("assert ", out);
        ir_print_expr_in(out, s->u.assert_.cond, DT_VOID);
        if (s->u.assert_.message) {
            fputs(", ", out);
            ir_print_string(out, s->u.assert_.message);
        }
        break;
    case STMT_GEMM:
    case STMT_MBARRIER:
    case STMT_TMA:
    case STMT_WGMMA:
    case STMT_FENCE:
        print_async_stmt(p, s);
        break;
    default:
        fprintf(out, "<bad stmt kind %d>", (int)s->kind);
        break;
    }
    fputc('\n', out);
}

/* ---- kernels, modules ------------------------------------------------------------ */

static const char *const state_names[] = {"layouts", "thread", "vector", "shared"};

static void print_state(FILE *out, unsigned state)
{
    fputs("  state", out);
    for (unsigned bit = 0; bit < 4; bit++)
        if (state & (1u << bit))
            fprintf(out, " %s", state_names[bit]);
    if (state & ~15u)
        fprintf(out, " %u", state & ~15u);
    fputc('\n', out);
}

void ir_print_kernel(FILE *out, const Kernel *k)
{
    Printer printer = {out, 1, k};
    fputs("kernel ", out);
    ir_print_name(out, "", k->name);
    fputs(" {\n", out);
    if (k->source_name && k->name && strcmp(k->source_name, k->name) != 0) {
        fputs("  source ", out);
        ir_print_name(out, "", k->source_name);
        fputc('\n', out);
    }
    if (k->instance && *k->instance) {
        fputs("  instance ", out);
        ir_print_name(out, "", k->instance);
        fputc('\n', out);
    }
    if (k->state)
        print_state(out, k->state);
    fprintf(out, "  threads %d\n", k->threads);
    if (k->compute_threads != k->threads)
        fprintf(out, "  compute_threads %d\n", k->compute_threads);
    if (k->min_blocks)
        fprintf(out, "  min_blocks %d\n", k->min_blocks);
    if (k->cluster[0] != 1 || k->cluster[1] != 1 || k->cluster[2] != 1)
        fprintf(out, "  cluster %d %d %d\n", k->cluster[0], k->cluster[1], k->cluster[2]);
    if (k->hint_tma != HINT_AUTO)
        fprintf(out, "  hint_tma %s\n", hint_text(k->hint_tma));
    if (k->hint_warp_specialize != HINT_AUTO)
        fprintf(out, "  hint_warp_specialize %s\n", hint_text(k->hint_warp_specialize));
    if (k->load_cache != CACHE_DEFAULT)
        fprintf(out, "  load_cache %s\n", cache_hint_text(k->load_cache));
    if (k->store_cache != CACHE_DEFAULT)
        fprintf(out, "  store_cache %s\n", cache_hint_text(k->store_cache));
    if (k->shared_bytes)
        fprintf(out, "  shared_bytes %lld\n", (long long)k->shared_bytes);
    if (k->nsymbols > 0) {
        fputs("  symbol ", out);
        for (int i = 0; i < k->nsymbols; i++) {
            if (i)
                fputs(", ", out);
            print_var_decl_i32(out, k->symbols ? k->symbols[i] : NULL);
        }
        fputc('\n', out);
    }
    for (int i = 0; i < k->nparams; i++) {
        const Param *param = &k->params[i];
        fputs("  param ", out);
        const char *own_name = NULL;
        if (param->kind == PARAM_TENSOR && param->buffer) {
            ir_print_buffer_decl(out, param->buffer);
            own_name = param->buffer->name;
        } else if (param->kind == PARAM_SCALAR && param->var) {
            ir_print_var_name(out, param->var);
            fprintf(out, ": %s", ir_dtype_name(param->var->dtype));
            own_name = param->var->name;
        } else {
            fputs("<null>", out);
        }
        if (param->name && own_name && strcmp(param->name, own_name) != 0) {
            fputs(" name ", out);
            ir_print_string(out, param->name);
        }
        fputc('\n', out);
    }
    for (int i = 0; i < k->ntensor_maps; i++) {
        const TensorMap *map = &k->tensor_maps[i];
        fprintf(out, "  tensor_map %d ", i);
        ir_print_buffer_name(out, map->global);
        fputs(" box ", out);
        ir_print_int_list(out, map->box, map->rank >= 0 && map->rank <= IR_MAX_RANK
                                             ? map->rank : 0);
        fprintf(out, " swizzle %d\n", map->swizzle_bytes);
    }
    for (int i = 0; i < k->nconstraints; i++) {
        fputs("  constraint ", out);
        ir_print_string(out, k->constraints[i].text ? k->constraints[i].text : "");
        fputc(' ', out);
        ir_print_expr_in(out, k->constraints[i].cond, DT_VOID);
        fputc('\n', out);
    }
    fputs("  grid ", out);
    for (int i = 0; i < 3; i++) {
        if (i)
            fputs(", ", out);
        if (k->grid[i])
            ir_print_expr_in(out, k->grid[i], DT_VOID);
        else
            fputc('1', out);
    }
    fputc('\n', out);
    bool any_block = k->block_vars[0] || k->block_vars[1] || k->block_vars[2];
    if (any_block) {
        fputs("  block ", out);
        bool first = true;
        for (int i = 0; i < 3; i++) {
            if (!k->block_vars[i])
                continue;
            if (!first)
                fputs(", ", out);
            first = false;
            print_var_decl_i32(out, k->block_vars[i]);
            fprintf(out, " = %c", "xyz"[i]);
        }
        fputc('\n', out);
    }
    fputs("  body ", out);
    print_block(&printer, k->body, false);
    fputs("}\n", out);
}

void ir_print_module(FILE *out, const Module *m)
{
    fputs("arch ", out);
    ir_print_name(out, "", m->arch ? m->arch : "sm_90a");
    fputc('\n', out);
    for (int i = 0; i < m->nkernels; i++) {
        fputc('\n', out);
        ir_print_kernel(out, m->kernels[i]);
    }
}
