/*
 * analysis_eval.c -- integer expressions evaluated at compile time, and
 * the shared-memory model the passes check layouts against.
 *
 * ir_eval_int evaluates an integer expression whose variables are all
 * bound to constants, with the IR's semantics (wrapping to the dtype,
 * floor division and modulo, unsigned compares and shifts); with a thread
 * index bound (ir_eval_int_thread) it also evaluates thread_idx, lane_idx
 * and warp_idx, which is how plan_shared and vectorize replay a warp's
 * shared-memory addresses thread by thread.  The second half is the
 * formula from a buffer element to its shared-memory byte address
 * (pitch, XOR swizzle, offset) and the bank model that counts the
 * wavefronts one warp-wide access costs.  Split from analysis.c, which
 * keeps the interval and congruence facts.
 */
#include "ir.h"

#include <limits.h>

/* ------------------------------------------------------------------ */
/* constant evaluation                                                 */
/* ------------------------------------------------------------------ */

typedef struct {
    const Var **vars;
    const int64_t *values;
    int nvars;
    int64_t thread; /* < 0: thread intrinsics are unknown */
} EvalEnv;

static bool eval(const EvalEnv *env, const Expr *e, int64_t *out);

static bool eval_binary(const EvalEnv *env, const Expr *e, int64_t *out)
{
    int64_t a, b;
    BinOp op = e->u.binary.op;
    if (!eval(env, e->u.binary.lhs, &a)) return false;
    if (op == BIN_LAND && !a) { *out = 0; return true; }
    if (op == BIN_LOR && a) { *out = 1; return true; }
    if (!eval(env, e->u.binary.rhs, &b)) return false;
    DType t = e->u.binary.lhs->dtype;
    bool is_unsigned = ir_dtype_class(t) == DCLASS_UINT;
    uint64_t ua = (uint64_t)a, ub = (uint64_t)b;
    int64_t r;
    switch (op) {
    case BIN_ADD: r = (int64_t)(ua + ub); break;
    case BIN_SUB: r = (int64_t)(ua - ub); break;
    case BIN_MUL: r = (int64_t)(ua * ub); break;
    case BIN_DIV:
        if (b == 0 || (a == INT64_MIN && b == -1)) return false;
        r = is_unsigned && ir_dtype_bits(t) == 64 ? (int64_t)(ua / ub)
                                                   : ir_floor_div(a, b);
        break;
    case BIN_MOD:
        if (b == 0 || (a == INT64_MIN && b == -1)) return false;
        r = is_unsigned && ir_dtype_bits(t) == 64 ? (int64_t)(ua % ub)
                                                   : ir_floor_mod(a, b);
        break;
    case BIN_MIN: r = (is_unsigned ? ua < ub : a < b) ? a : b; break;
    case BIN_MAX: r = (is_unsigned ? ua > ub : a > b) ? a : b; break;
    case BIN_AND: r = a & b; break;
    case BIN_OR: r = a | b; break;
    case BIN_XOR: r = a ^ b; break;
    case BIN_SHL:
        if (b < 0 || b >= ir_dtype_bits(t)) return false;
        r = (int64_t)(ua << b);
        break;
    case BIN_SHR:
        if (b < 0 || b >= ir_dtype_bits(t)) return false;
        if (is_unsigned) {
            int bits = ir_dtype_bits(t);
            uint64_t mask = bits >= 64 ? ~(uint64_t)0 : ((uint64_t)1 << bits) - 1;
            r = (int64_t)((ua & mask) >> b);
        } else {
            r = a >> b; /* gcc: arithmetic */
        }
        break;
    case BIN_EQ: r = a == b; break;
    case BIN_NE: r = a != b; break;
    case BIN_LT: r = is_unsigned ? ua < ub : a < b; break;
    case BIN_LE: r = is_unsigned ? ua <= ub : a <= b; break;
    case BIN_GT: r = is_unsigned ? ua > ub : a > b; break;
    case BIN_GE: r = is_unsigned ? ua >= ub : a >= b; break;
    case BIN_LAND: r = a && b; break;
    case BIN_LOR: r = a || b; break;
    default: return false;
    }
    *out = ir_int_wrap(e->dtype, r);
    return true;
}

static bool eval(const EvalEnv *env, const Expr *e, int64_t *out)
{
    if (!e || e->lanes > 1 || !ir_dtype_is_int(e->dtype)) return false;
    int64_t a;
    switch (e->kind) {
    case EXPR_INT: *out = e->u.int_value; return true;
    case EXPR_VAR:
        for (int i = 0; i < env->nvars; i++)
            if (env->vars[i] == e->u.var) { *out = env->values[i]; return true; }
        return false;
    case EXPR_CALL:
        if (env->thread < 0) return false;
        switch (e->u.call.op) {
        case INTR_THREAD_IDX: *out = env->thread; return true;
        case INTR_LANE_IDX: *out = env->thread % IR_WARP_SIZE; return true;
        case INTR_WARP_IDX: *out = env->thread / IR_WARP_SIZE; return true;
        case INTR_BLOCK_IDX_X: case INTR_BLOCK_IDX_Y: case INTR_BLOCK_IDX_Z:
            *out = 0;
            return true;
        case INTR_POPCOUNT:
            if (!eval(env, e->u.call.args[0], &a)) return false;
            *out = __builtin_popcountll((uint64_t)a &
                   (ir_dtype_bits(e->u.call.args[0]->dtype) >= 64 ? ~0ull
                    : ((1ull << ir_dtype_bits(e->u.call.args[0]->dtype)) - 1)));
            return true;
        default: return false;
        }
    case EXPR_UNARY:
        if (!eval(env, e->u.unary.operand, &a)) return false;
        switch (e->u.unary.op) {
        case UN_NEG: *out = ir_int_wrap(e->dtype, (int64_t)(0 - (uint64_t)a)); return true;
        case UN_NOT: *out = ir_int_wrap(e->dtype, ~a); return true;
        case UN_LNOT: *out = !a; return true;
        case UN_ABS: *out = ir_int_wrap(e->dtype, a < 0 ? (int64_t)(0 - (uint64_t)a) : a); return true;
        default: return false;
        }
    case EXPR_BINARY:
        if (!ir_dtype_is_int(e->u.binary.lhs->dtype)) return false;
        return eval_binary(env, e, out);
    case EXPR_SELECT:
        if (!eval(env, e->u.select.cond, &a)) return false;
        return eval(env, a ? e->u.select.then_value : e->u.select.else_value, out);
    case EXPR_CAST:
        if (!ir_dtype_is_int(e->u.cast.value->dtype)) return false;
        if (!eval(env, e->u.cast.value, &a)) return false;
        if (e->u.cast.kind == CAST_BITCAST &&
            ir_dtype_bits(e->dtype) != ir_dtype_bits(e->u.cast.value->dtype))
            return false;
        *out = ir_int_wrap(e->dtype, a);
        return true;
    default:
        return false;
    }
}

bool ir_eval_int(const Expr *e, const Var **vars, const int64_t *values,
                 int nvars, int64_t *out)
{
    EvalEnv env = { vars, values, nvars, -1 };
    return eval(&env, e, out);
}

bool ir_eval_int_thread(const Expr *e, const Var **vars,
                        const int64_t *values, int nvars, int64_t thread,
                        int64_t *out)
{
    EvalEnv env = { vars, values, nvars, thread };
    return eval(&env, e, out);
}

/* ------------------------------------------------------------------ */
/* shared memory: address formula and bank model                       */
/* ------------------------------------------------------------------ */

int64_t ir_shared_linear_offset(const Buffer *b, int64_t row, int64_t col)
{
    int64_t pitch = b->pitch;
    if (pitch <= 0) {
        int64_t w;
        pitch = ir_int_constant(b->shape[b->rank - 1], &w) ? w : 1;
    }
    return (row * pitch + col) * ir_dtype_bits(b->dtype) / 8;
}

int64_t ir_shared_swizzle(int64_t offset, int swizzle_shift)
{
    if (swizzle_shift < 0) return offset;
    return offset ^ (((offset >> (7 + swizzle_shift)) & 7) << 4);
}

int64_t ir_shared_address(const Buffer *b, int64_t row, int64_t col)
{
    return b->shared_offset +
           ir_shared_swizzle(ir_shared_linear_offset(b, row, col), b->swizzle_shift);
}

/* Shared memory has 32 banks of 4 bytes.  A warp's request is split into
 * phases: the whole warp for accesses of up to 4 bytes per thread, half
 * warps for 8 bytes, quarter warps for 16.  Within a phase every bank
 * serves one distinct 4-byte word per wavefront; threads reading the same
 * word share it (broadcast).  The phase costs as many wavefronts as its
 * busiest bank has distinct words. */
int ir_shared_wavefronts(const int64_t *addresses, const bool *active,
                         int access_bytes)
{
    if (access_bytes > 16) {
        int total = 0;
        for (int piece = 0; piece < access_bytes; piece += 16) {
            int64_t shifted[IR_WARP_SIZE];
            for (int t = 0; t < IR_WARP_SIZE; t++) shifted[t] = addresses[t] + piece;
            total += ir_shared_wavefronts(shifted, active,
                                          access_bytes - piece < 16 ? access_bytes - piece : 16);
        }
        return total;
    }
    int per_phase = access_bytes > 8 ? 8 : access_bytes > 4 ? 16 : IR_WARP_SIZE;
    int words = access_bytes > 4 ? access_bytes / 4 : 1;
    int total = 0;
    for (int first = 0; first < IR_WARP_SIZE; first += per_phase) {
        int64_t seen[IR_WARP_SIZE * 4];
        int nseen = 0;
        int per_bank[32] = { 0 };
        for (int t = first; t < first + per_phase; t++) {
            if (active && !active[t]) continue;
            for (int w = 0; w < words; w++) {
                int64_t word = (addresses[t] >> 2) + w;
                bool dup = false;
                for (int i = 0; i < nseen && !dup; i++) dup = seen[i] == word;
                if (dup) continue;
                seen[nseen++] = word;
                per_bank[((word % 32) + 32) % 32]++;
            }
        }
        int worst = 0;
        for (int b = 0; b < 32; b++)
            if (per_bank[b] > worst) worst = per_bank[b];
        total += worst;
    }
    return total;
}
