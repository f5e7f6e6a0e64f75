/*
 * ir.c -- constructors and property tables of the IR defined in ir.h.
 *
 * Every node is allocated in the kernel's arena and never freed on its
 * own.  Expressions are trees: a node has exactly one parent, so passes may
 * rewrite in place; helpers that "replace" something (ir_substitute,
 * ir_copy_*) therefore always return fresh copies.  The name and property
 * tables are generated from the X-macro lists in ir.h so they cannot drift
 * from the enums.
 *
 * Deep copies, substitution and structural queries are in ir_rewrite.c.
 */
#include "ir.h"

#include <stdlib.h>
#include <string.h>

/* ---- property tables ----------------------------------------------- */

static const struct {
    const char *name;
    int bits;
    DClass cls;
} dtype_table[DT_COUNT] = {
#define X(e, name, bits, cls) {name, bits, cls},
    IR_DTYPES(X)
#undef X
};

static void check_dtype(DType t)
{
    if ((unsigned)t >= DT_COUNT)
        ice("bad dtype %d", (int)t);
}

const char *ir_dtype_name(DType t)
{
    check_dtype(t);
    return dtype_table[t].name;
}

int ir_dtype_bits(DType t)
{
    check_dtype(t);
    return dtype_table[t].bits;
}

DClass ir_dtype_class(DType t)
{
    check_dtype(t);
    return dtype_table[t].cls;
}

bool ir_dtype_from_name(const char *name, DType *out)
{
    for (int i = 0; i < DT_COUNT; i++) {
        if (strcmp(dtype_table[i].name, name) == 0) {
            *out = (DType)i;
            return true;
        }
    }
    return false;
}

bool ir_dtype_is_int(DType t)
{
    DClass cls = ir_dtype_class(t);
    return cls == DCLASS_SINT || cls == DCLASS_UINT || cls == DCLASS_BOOL;
}

bool ir_dtype_is_float(DType t)
{
    DClass cls = ir_dtype_class(t);
    return cls == DCLASS_FLOAT || cls == DCLASS_FLOAT8;
}

bool ir_dtype_mma_operands(DType a, DType b)
{
    bool fp8_a = a == DT_E4M3 || a == DT_E5M2, fp8_b = b == DT_E4M3 || b == DT_E5M2;
    return (a == b && (a == DT_BF16 || a == DT_F16)) || (fp8_a && fp8_b);
}

/* One lookup function per X-macro list; out-of-range values are compiler
 * bugs, caught here rather than printed as garbage. */
#define NAME_TABLE(function, Type, COUNT, LIST, ENTRY)                       \
    const char *function(Type value)                                         \
    {                                                                        \
        static const char *const names[COUNT] = {LIST(ENTRY)};               \
        if ((unsigned)value >= (unsigned)(COUNT))                            \
            ice(#function ": bad value %d", (int)value);                     \
        return names[value];                                                 \
    }
#define TEXT_OF_2(e, text) text,
#define TEXT_OF_3(e, text, level) text,
NAME_TABLE(ir_binop_name, BinOp, BIN_COUNT, IR_BINOPS, TEXT_OF_2)
NAME_TABLE(ir_unop_name, UnOp, UN_COUNT, IR_UNOPS, TEXT_OF_2)
NAME_TABLE(ir_stmt_name, StmtKind, STMT_COUNT, IR_STMT_KINDS, TEXT_OF_3)
NAME_TABLE(ir_expr_name, ExprKind, EXPR_COUNT, IR_EXPR_KINDS, TEXT_OF_2)
NAME_TABLE(ir_loop_name, LoopKind, LOOP_COUNT, IR_LOOP_KINDS, TEXT_OF_2)
NAME_TABLE(ir_reduce_name, ReduceOp, REDUCE_COUNT, IR_REDUCE_OPS, TEXT_OF_2)
NAME_TABLE(ir_atomic_name, AtomicOp, ATOMIC_COUNT, IR_ATOMIC_OPS, TEXT_OF_2)
NAME_TABLE(ir_pipe_role_name, PipeRole, PIPE_COUNT, IR_PIPE_ROLES, TEXT_OF_2)
NAME_TABLE(ir_mbarrier_op_name, MbarrierOp, MBAR_COUNT, IR_MBARRIER_OPS, TEXT_OF_3)
NAME_TABLE(ir_fence_op_name, FenceOp, FENCE_COUNT, IR_FENCE_OPS, TEXT_OF_3)
NAME_TABLE(ir_cache_hint_name, CacheHint, CACHE_COUNT, IR_CACHE_HINTS, TEXT_OF_2)
#undef TEXT_OF_2
#undef TEXT_OF_3
#undef NAME_TABLE

bool ir_mbarrier_op_has_value(MbarrierOp op)
{
    static const bool has_value[MBAR_COUNT] = {
#define X(e, text, value) value,
        IR_MBARRIER_OPS(X)
#undef X
    };
    if ((unsigned)op >= MBAR_COUNT)
        ice("ir_mbarrier_op_has_value: bad value %d", (int)op);
    return has_value[op];
}

bool ir_fence_op_has_value(FenceOp op)
{
    static const bool has_value[FENCE_COUNT] = {
#define X(e, text, value) value,
        IR_FENCE_OPS(X)
#undef X
    };
    if ((unsigned)op >= FENCE_COUNT)
        ice("ir_fence_op_has_value: bad value %d", (int)op);
    return has_value[op];
}

const char *ir_hint_name(Hint hint)
{
    switch (hint) {
    case HINT_AUTO: return "auto";
    case HINT_OFF: return "off";
    case HINT_ON: return "on";
    }
    ice("bad hint %d", (int)hint);
}

static const struct {
    const char *name;
    int nargs;
    unsigned flags;
} intrinsic_table[INTR_COUNT] = {
#define X(e, name, nargs, flags) {name, nargs, flags},
    IR_INTRINSICS(X)
#undef X
};

static void check_intrinsic(Intrinsic op)
{
    if ((unsigned)op >= INTR_COUNT)
        ice("bad intrinsic %d", (int)op);
}

const char *ir_intrinsic_name(Intrinsic op)
{
    check_intrinsic(op);
    return intrinsic_table[op].name;
}

int ir_intrinsic_nargs(Intrinsic op)
{
    check_intrinsic(op);
    return intrinsic_table[op].nargs;
}

unsigned ir_intrinsic_flags(Intrinsic op)
{
    check_intrinsic(op);
    return intrinsic_table[op].flags;
}

const char *ir_async_kind_name(int async_kind)
{
    switch (async_kind) {
    case SHARED_ASYNC_NONE: return "none";
    case SHARED_ASYNC_PLAIN: return "plain";
    case SHARED_ASYNC_SWIZZLE128: return "swizzle128";
    case SHARED_ASYNC_MBARRIER: return "mbarrier";
    }
    ice("bad async kind %d", async_kind);
}

const char *ir_scope_name(Scope scope)
{
    switch (scope) {
    case SCOPE_GLOBAL: return "global";
    case SCOPE_SHARED: return "shared";
    case SCOPE_FRAGMENT: return "fragment";
    case SCOPE_LOCAL: return "local";
    }
    ice("bad scope %d", (int)scope);
}

/* ---- expressions ----------------------------------------------------- */

static Expr *new_expr(Kernel *k, ExprKind kind, DType t)
{
    Expr *e = arena_alloc(k->arena, sizeof(Expr));
    e->kind = kind;
    e->dtype = t;
    e->lanes = 1;
    return e;
}

static int max_lanes(int a, int b) { return a > b ? a : b; }

Expr *ir_int(Kernel *k, DType t, int64_t value)
{
    Expr *e = new_expr(k, EXPR_INT, t);
    e->u.int_value = value;
    return e;
}

Expr *ir_float(Kernel *k, DType t, double value)
{
    Expr *e = new_expr(k, EXPR_FLOAT, t);
    e->u.float_value = value;
    return e;
}

Expr *ir_var(Kernel *k, Var *v)
{
    Expr *e = new_expr(k, EXPR_VAR, v->dtype);
    e->u.var = v;
    return e;
}

static Expr **copy_array(Kernel *k, Expr **items, int count)
{
    if (count <= 0)
        return NULL;
    Expr **copy = arena_alloc(k->arena, sizeof(Expr *) * (size_t)count);
    for (int i = 0; i < count; i++)
        copy[i] = items ? items[i] : NULL;
    return copy;
}

/* The load is as wide as its widest index (the last one is a RAMP in the
 * vector form); the indices array is copied, the Exprs are not. */
Expr *ir_load(Kernel *k, Buffer *b, Expr **indices, Expr *predicate)
{
    Expr *e = new_expr(k, EXPR_LOAD, b->dtype);
    e->u.load.buffer = b;
    e->u.load.indices = copy_array(k, indices, b->rank);
    e->u.load.predicate = predicate;
    for (int i = 0; i < b->rank; i++)
        if (e->u.load.indices[i])
            e->lanes = max_lanes(e->lanes, e->u.load.indices[i]->lanes);
    return e;
}

Expr *ir_unary(Kernel *k, UnOp op, Expr *a)
{
    Expr *e = new_expr(k, EXPR_UNARY, op == UN_LNOT ? DT_BOOL : a->dtype);
    e->lanes = a->lanes;
    e->u.unary.op = op;
    e->u.unary.operand = a;
    return e;
}

static bool binop_is_comparison(BinOp op)
{
    return op == BIN_EQ || op == BIN_NE || op == BIN_LT || op == BIN_LE ||
           op == BIN_GT || op == BIN_GE;
}

Expr *ir_binary(Kernel *k, BinOp op, Expr *a, Expr *b)
{
    bool boolean = binop_is_comparison(op) || op == BIN_LAND || op == BIN_LOR;
    Expr *e = new_expr(k, EXPR_BINARY, boolean ? DT_BOOL : a->dtype);
    e->lanes = max_lanes(a->lanes, b->lanes);
    e->u.binary.op = op;
    e->u.binary.lhs = a;
    e->u.binary.rhs = b;
    return e;
}

Expr *ir_select(Kernel *k, Expr *cond, Expr *a, Expr *b)
{
    Expr *e = new_expr(k, EXPR_SELECT, a->dtype);
    e->lanes = max_lanes(cond->lanes, max_lanes(a->lanes, b->lanes));
    e->u.select.cond = cond;
    e->u.select.then_value = a;
    e->u.select.else_value = b;
    return e;
}

Expr *ir_cast(Kernel *k, CastKind kind, DType t, Expr *value)
{
    Expr *e = new_expr(k, EXPR_CAST, t);
    e->lanes = value->lanes;
    e->u.cast.kind = kind;
    e->u.cast.value = value;
    return e;
}

Expr *ir_call(Kernel *k, Intrinsic op, DType t, Expr **args, int nargs)
{
    Expr *e = new_expr(k, EXPR_CALL, t);
    e->u.call.op = op;
    e->u.call.args = copy_array(k, args, nargs);
    e->u.call.nargs = nargs;
    for (int i = 0; i < nargs; i++)
        if (e->u.call.args[i])
            e->lanes = max_lanes(e->lanes, e->u.call.args[i]->lanes);
    return e;
}

DType ir_call_default_dtype(Intrinsic op, Expr *const *args, int nargs)
{
    switch (op) {
    case INTR_THREAD_IDX:
    case INTR_BLOCK_IDX_X:
    case INTR_BLOCK_IDX_Y:
    case INTR_BLOCK_IDX_Z:
    case INTR_LANE_IDX:
    case INTR_WARP_IDX:
    case INTR_POPCOUNT:
        return DT_I32;
    case INTR_F16_RZ_BITS:
        return DT_U16;
    case INTR_E2M1_BITS:
        return DT_U8;
    case INTR_BF16X2: /* two bf16 values -> their 32-bit word */
        return DT_U32;
    case INTR_ISFINITE:
        return DT_BOOL;
    default:
        return nargs > 0 && args && args[0] ? args[0]->dtype : DT_I32;
    }
}

Expr *ir_ramp(Kernel *k, Expr *base, int64_t stride, int lanes)
{
    Expr *e = new_expr(k, EXPR_RAMP, base->dtype);
    e->lanes = lanes;
    e->u.ramp.base = base;
    e->u.ramp.stride = stride;
    return e;
}

Expr *ir_broadcast(Kernel *k, Expr *value, int lanes)
{
    Expr *e = new_expr(k, EXPR_BROADCAST, value->dtype);
    e->lanes = lanes;
    e->u.broadcast.value = value;
    return e;
}

/* ---- variables, buffers, kernels ------------------------------------- */

/* Names taken in a kernel, one open-addressing hash set per namespace
 * (variables, buffers).  Each entry also remembers the next ".N" suffix to
 * try for that base name, so making n clones of one variable costs O(n)
 * rather than O(n^2) probes. */
typedef struct {
    const char *name;
    int next_suffix;
    bool taken; /* false: only a suffix counter for a base name */
} NameEntry;

typedef struct {
    NameEntry *entries;
    int count, capacity; /* capacity is a power of two */
} NameSet;

struct NameTable {
    NameSet vars, buffers;
};

static uint64_t hash_name(const char *name, size_t length)
{
    uint64_t hash = 14695981039346656037ull; /* FNV-1a */
    for (size_t i = 0; i < length; i++)
        hash = (hash ^ (unsigned char)name[i]) * 1099511628211ull;
    return hash;
}

/* The entry for name[0..length), or the empty slot where it would go. */
static NameEntry *name_slot(NameSet *set, const char *name, size_t length)
{
    size_t mask = (size_t)set->capacity - 1;
    size_t i = (size_t)hash_name(name, length) & mask;
    for (;;) {
        NameEntry *entry = &set->entries[i];
        if (!entry->name ||
            (strncmp(entry->name, name, length) == 0 && entry->name[length] == 0))
            return entry;
        i = (i + 1) & mask;
    }
}

static void name_set_grow(Arena *arena, NameSet *set)
{
    NameSet old = *set;
    set->capacity = old.capacity ? old.capacity * 2 : 64;
    set->entries = arena_alloc(arena, sizeof(NameEntry) * (size_t)set->capacity);
    for (int i = 0; i < old.capacity; i++)
        if (old.entries[i].name)
            *name_slot(set, old.entries[i].name, strlen(old.entries[i].name)) =
                old.entries[i];
}

/* Looks name[0..length) up, inserting it (copied, not yet taken) when
 * absent. */
static NameEntry *name_intern(Arena *arena, NameSet *set, const char *name,
                              size_t length, bool *inserted)
{
    if ((set->count + 1) * 2 > set->capacity)
        name_set_grow(arena, set);
    NameEntry *entry = name_slot(set, name, length);
    *inserted = entry->name == NULL;
    if (*inserted) {
        char *copy = arena_alloc(arena, length + 1);
        memcpy(copy, name, length);
        entry->name = copy;
        entry->next_suffix = 1;
        set->count++;
    }
    return entry;
}

/* "name" if free, else the first free "name.N".  A base that already ends
 * in ".N" (a clone of a clone) is stripped first so names stay short. */
static const char *unique_name(Kernel *k, NameSet *set, const char *name)
{
    if (!name || !*name)
        name = "t";
    bool inserted;
    size_t length = strlen(name);
    NameEntry *entry = name_intern(k->arena, set, name, length, &inserted);
    if (!entry->taken) {
        entry->taken = true;
        return entry->name;
    }
    const char *dot = strrchr(name, '.');
    if (dot && dot[1] && strspn(dot + 1, "0123456789") == strlen(dot + 1))
        length = (size_t)(dot - name);
    NameEntry *base = name_intern(k->arena, set, name, length, &inserted);
    for (int n = base->next_suffix;; n++) {
        char *candidate = arena_printf(k->arena, "%.*s.%d", (int)length, name, n);
        NameEntry *clone = name_intern(k->arena, set, candidate, strlen(candidate),
                                       &inserted);
        if (!clone->taken) {
            clone->taken = true;
            /* re-find the base: interning may have rehashed the set */
            name_slot(set, name, length)->next_suffix = n + 1;
            return clone->name;
        }
    }
}

static struct NameTable *kernel_names(Kernel *k)
{
    if (!k->names)
        k->names = arena_alloc(k->arena, sizeof(struct NameTable));
    return k->names;
}

Var *ir_new_var(Kernel *k, const char *name, DType t, VarKind kind)
{
    Var *v = arena_alloc(k->arena, sizeof(Var));
    v->name = unique_name(k, &kernel_names(k)->vars, name);
    v->dtype = t;
    v->kind = kind;
    v->id = k->nvars++;
    vec_push(k->arena, &k->vars, v);
    return v;
}

Buffer *ir_new_buffer(Kernel *k, const char *name, DType t, Scope scope,
                      int rank)
{
    if (rank < 0 || rank > IR_MAX_RANK)
        ice("buffer %s: rank %d out of range", name, rank);
    Buffer *b = arena_alloc(k->arena, sizeof(Buffer));
    b->name = unique_name(k, &kernel_names(k)->buffers, name);
    b->dtype = t;
    b->scope = scope;
    b->rank = rank;
    b->param_index = -1;
    b->shared_offset = -1;
    b->pitch = 0;
    b->swizzle_shift = -1;
    vec_push(k->arena, &k->buffers, b);
    return b;
}

Kernel *ir_new_kernel(Module *m, const char *name)
{
    Kernel *k = arena_alloc(m->arena, sizeof(Kernel));
    k->arena = m->arena;
    k->name = arena_strdup(m->arena, name);
    k->source_name = k->name;
    k->instance = "";
    for (int i = 0; i < 3; i++) {
        k->grid[i] = ir_int(k, DT_I32, 1);
        k->cluster[i] = 1;
    }
    /* compute_threads always holds a real count (never 0 for "same as
     * threads"): whoever sets threads sets it too, and only
     * warp_specialize makes the two differ. */
    k->threads = 1;
    k->compute_threads = 1;
    k->body = ir_new_stmt(k, STMT_SEQ, k->loc);
    /* m->kernels grows like a SEQ: power-of-two capacity */
    int count = m->nkernels;
    if (count == 0 || (count >= 4 && (count & (count - 1)) == 0)) {
        int capacity = count ? count * 2 : 4;
        Kernel **kernels = arena_alloc(m->arena, sizeof(Kernel *) * (size_t)capacity);
        if (count)
            memcpy(kernels, m->kernels, sizeof(Kernel *) * (size_t)count);
        m->kernels = kernels;
    }
    m->kernels[m->nkernels++] = k;
    return k;
}

Module *ir_new_module(Arena *arena, const char *arch)
{
    Module *m = arena_alloc(arena, sizeof(Module));
    m->arena = arena;
    m->arch = arena_strdup(arena, arch ? arch : "sm_90a");
    return m;
}

/* ---- statements -------------------------------------------------------- */

Stmt *ir_new_stmt(Kernel *k, StmtKind kind, Loc loc)
{
    Stmt *s = arena_alloc(k->arena, sizeof(Stmt));
    s->kind = kind;
    s->loc = loc;
    /* "not a TMA copy / no map yet": 0 is a valid tensor map index */
    if (kind == STMT_COPY)
        s->u.copy.tensor_map = -1;
    else if (kind == STMT_TMA)
        s->u.tma.tensor_map = -1;
    return s;
}

/* Capacity of a SEQ items array holding count items (see ir_seq). */
static int seq_capacity(int count)
{
    if (count == 0)
        return 0;
    int capacity = 4;
    while (capacity < count)
        capacity *= 2;
    return capacity;
}

Stmt *ir_seq(Kernel *k, Stmt **items, int count)
{
    Stmt *s = ir_new_stmt(k, STMT_SEQ, (Loc){0});
    int capacity = seq_capacity(count);
    if (capacity) {
        s->u.seq.items = arena_alloc(k->arena, sizeof(Stmt *) * (size_t)capacity);
        memcpy(s->u.seq.items, items, sizeof(Stmt *) * (size_t)count);
    }
    s->u.seq.count = count;
    if (count > 0 && items[0])
        s->loc = items[0]->loc;
    return s;
}

void ir_seq_append(Kernel *k, Stmt *seq, Stmt *item)
{
    if (seq->kind != STMT_SEQ)
        ice("ir_seq_append on a %s statement", ir_stmt_name(seq->kind));
    int count = seq->u.seq.count;
    if (count == seq_capacity(count)) {
        int capacity = seq_capacity(count + 1);
        Stmt **items = arena_alloc(k->arena, sizeof(Stmt *) * (size_t)capacity);
        if (count)
            memcpy(items, seq->u.seq.items, sizeof(Stmt *) * (size_t)count);
        seq->u.seq.items = items;
    }
    seq->u.seq.items[seq->u.seq.count++] = item;
}
