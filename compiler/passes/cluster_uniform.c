/*
 * cluster_uniform.c -- which values are the same in every CTA of a cluster.
 *
 * A TMA load may multicast (docs/hopper.md 11) only when every CTA of the
 * cluster loads the same box in the same iterations: its region, the
 * bounds of the loops around it and the conditions of the IFs around it
 * must be cluster-uniform.  The cluster groups consecutive blocks along
 * the grid's dimensions (cluster[d] of them along d), so a value is
 * uniform when it depends on no per-thread quantity and on the block
 * index of a clustered dimension only through `block / D` with D a
 * multiple of cluster[d] (the blocks C*q .. C*q + C - 1 of one cluster
 * all give q / m for D = C*m).  Lets and loop variables are followed to
 * their definitions (each Var is defined once in the kernel); mutable
 * variables, parallel indices and loads from anything but global memory
 * are taken as varying, which is conservative: a multicast it refuses is
 * a local load, never a wrong one.
 */
#include "async_util.h"

/* Per Var.id: what defines it, and the memoised answer. */
typedef enum { UNKNOWN, WORKING, UNIFORM, VARYING } Answer;

struct ClusterUniform {
    const Kernel *k;
    int nvars;
    const Expr **value;      /* LET: its value */
    const Stmt **loop;       /* FOR: its loop */
    Answer *answer;
};

static void record(ClusterUniform *u, const Stmt *s)
{
    if (!s)
        return;
    switch (s->kind) {
    case STMT_SEQ:
        for (int i = 0; i < s->u.seq.count; i++)
            record(u, s->u.seq.items[i]);
        return;
    case STMT_LET:
        if (s->u.let.var->kind == VAR_LET && s->u.let.var->id < u->nvars)
            u->value[s->u.let.var->id] = s->u.let.value;
        return;
    case STMT_FOR:
        if (s->u.loop.var->id < u->nvars)
            u->loop[s->u.loop.var->id] = s;
        record(u, s->u.loop.body);
        return;
    case STMT_IF:
        record(u, s->u.if_.then_body);
        record(u, s->u.if_.else_body);
        return;
    case STMT_PARALLEL:
        record(u, s->u.parallel.body);
        return;
    default:
        return;
    }
}

ClusterUniform *cluster_uniform_new(Kernel *k)
{
    ClusterUniform *u = arena_alloc(k->arena, sizeof *u);
    u->k = k;
    u->nvars = k->nvars;
    size_t n = (size_t)(k->nvars > 0 ? k->nvars : 1);
    u->value = arena_alloc(k->arena, sizeof(Expr *) * n);
    u->loop = arena_alloc(k->arena, sizeof(Stmt *) * n);
    u->answer = arena_alloc(k->arena, sizeof(Answer) * n);
    record(u, k->body);
    return u;
}

int cluster_size(const Kernel *k)
{
    return k->cluster[0] * k->cluster[1] * k->cluster[2];
}

static bool clustered(const ClusterUniform *u, int dim)
{
    return dim >= 0 && dim < 3 && u->k->cluster[dim] > 1;
}

static bool var_uniform(ClusterUniform *u, const Var *v)
{
    switch (v->kind) {
    case VAR_SYMBOL:
    case VAR_SCALAR:
        return true;
    case VAR_BLOCK:
        return !clustered(u, v->block_dim);
    case VAR_MUTABLE:
        return false;
    case VAR_LET:
    case VAR_LOOP:
        break;
    }
    if (v->id < 0 || v->id >= u->nvars)
        return false;
    Answer *answer = &u->answer[v->id];
    if (*answer == UNIFORM || *answer == VARYING)
        return *answer == UNIFORM;
    if (*answer == WORKING) /* a cycle cannot happen in valid IR; stay safe */
        return false;
    *answer = WORKING;
    bool uniform = false;
    if (v->kind == VAR_LET && u->value[v->id]) {
        uniform = cluster_uniform_expr(u, u->value[v->id]);
    } else if (v->kind == VAR_LOOP && u->loop[v->id]) {
        const Stmt *loop = u->loop[v->id];
        uniform = cluster_uniform_expr(u, loop->u.loop.begin) &&
                  cluster_uniform_expr(u, loop->u.loop.end);
    }
    *answer = uniform ? UNIFORM : VARYING;
    return uniform;
}

/* block / D with D a positive multiple of the block's cluster extent. */
static bool cluster_quotient(const ClusterUniform *u, const Expr *e)
{
    if (e->kind != EXPR_BINARY || e->u.binary.op != BIN_DIV)
        return false;
    const Expr *block = e->u.binary.lhs, *divisor = e->u.binary.rhs;
    if (block->kind != EXPR_VAR || block->u.var->kind != VAR_BLOCK ||
        divisor->kind != EXPR_INT || divisor->u.int_value <= 0)
        return false;
    int dim = block->u.var->block_dim;
    return clustered(u, dim) && divisor->u.int_value % u->k->cluster[dim] == 0;
}

bool cluster_uniform_expr(ClusterUniform *u, const Expr *e)
{
    if (!e)
        return true;
    switch (e->kind) {
    case EXPR_INT:
    case EXPR_FLOAT:
        return true;
    case EXPR_VAR:
        return var_uniform(u, e->u.var);
    case EXPR_LOAD:
        if (e->u.load.buffer->scope != SCOPE_GLOBAL)
            return false;
        for (int d = 0; d < e->u.load.buffer->rank; d++)
            if (!cluster_uniform_expr(u, e->u.load.indices[d]))
                return false;
        return cluster_uniform_expr(u, e->u.load.predicate);
    case EXPR_UNARY:
        return cluster_uniform_expr(u, e->u.unary.operand);
    case EXPR_BINARY:
        if (cluster_quotient(u, e))
            return true;
        return cluster_uniform_expr(u, e->u.binary.lhs) &&
               cluster_uniform_expr(u, e->u.binary.rhs);
    case EXPR_SELECT:
        return cluster_uniform_expr(u, e->u.select.cond) &&
               cluster_uniform_expr(u, e->u.select.then_value) &&
               cluster_uniform_expr(u, e->u.select.else_value);
    case EXPR_CAST:
        return cluster_uniform_expr(u, e->u.cast.value);
    case EXPR_CALL: {
        Intrinsic op = e->u.call.op;
        if (ir_intrinsic_flags(op) & INTR_THREAD)
            return false;
        if (op == INTR_BLOCK_IDX_X || op == INTR_BLOCK_IDX_Y || op == INTR_BLOCK_IDX_Z)
            return !clustered(u, (int)(op - INTR_BLOCK_IDX_X));
        for (int i = 0; i < e->u.call.nargs; i++)
            if (!cluster_uniform_expr(u, e->u.call.args[i]))
                return false;
        return true;
    }
    case EXPR_RAMP:
        return cluster_uniform_expr(u, e->u.ramp.base);
    case EXPR_BROADCAST:
        return cluster_uniform_expr(u, e->u.broadcast.value);
    default:
        return false;
    }
}
