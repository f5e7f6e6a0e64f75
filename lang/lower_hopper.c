/*
 * lower_hopper.c -- the statements and options of the Hopper path
 * (docs/hopper.md section 1): gemm (and gemm_wait), the stages of a
 * pipelined loop, the tma / warp_specialize / cluster / load_cache /
 * store_cache / min_blocks hints of a launch and the tma / multicast hints
 * of a copy.
 *
 * sema.c has already checked what is syntax (which options a statement
 * takes, each once; gemm and pipelined only at block level); here the
 * option values are evaluated for one instance (they are compile-time
 * expressions of template parameters) and the statements become IR:
 * STMT_GEMM over Regions (a whole buffer is a full region), a
 * LOOP_PIPELINED FOR with its stages and release lag, role PIPE_BOTH and
 * a pipe_id unique in the kernel, and the Hint fields.  The dtype and shape rules of gemm
 * are those of pass_check_types (pass_check_gemm), applied here too so
 * the error points at the source statement of the failing instance.
 */
#include <string.h>

#include "lower.h"

/* The deepest pipeline the front end accepts; far beyond what shared
 * memory holds, it only keeps the count an int. */
#define LOWER_MAX_STAGES 1024

const AstNode *lower_option(const PtrVec *options, const char *name) {
    for (int i = 0; i < ast_count(options); i++)
        if (strcmp(ast_at(options, i)->name, name) == 0) return ast_at(options, i);
    return NULL;
}

bool lower_hint(Lower *lower, const AstNode *option, Hint *out) {
    static const char *const words[] = {"auto", "off", "on"};
    const AstNode *value = option->a;
    /* the words, unless the program gave the name a meaning of its own */
    if (value->kind == AST_IDENT && !lower_find(lower, value->name) &&
        !program_lookup(lower->file, value->name)) {
        for (int i = 0; i < 3; i++) {
            if (strcmp(value->name, words[i]) == 0) {
                *out = (Hint)i;
                return true;
            }
        }
        lower_error(lower, value->loc, "unknown %s hint '%s'; expected auto, "
                    "off, on or a compile-time integer 0, 1 or 2",
                    option->name, value->name);
        return false;
    }
    const char *what = arena_printf(lower->program->scratch, "the %s hint",
                                    option->name);
    int64_t hint;
    if (!lower_const_int(lower, value, what, &hint)) return false;
    if (hint < HINT_AUTO || hint > HINT_ON) {
        lower_error(lower, value->loc, "the %s hint must be 0 (auto), 1 (off) "
                    "or 2 (on), got %lld", option->name, (long long)hint);
        return false;
    }
    *out = (Hint)hint;
    return true;
}

/* Positions in IR_CACHE_HINTS: 0 default, 1 streaming, 2 evict_first,
 * 3 evict_last, so that a template parameter can pick a hint. */
void lower_cache_hint(Lower *lower, const AstNode *option, CacheHint *out) {
    const AstNode *value = option->a;
    if (value->kind == AST_IDENT && !lower_find(lower, value->name) &&
        !program_lookup(lower->file, value->name)) {
        for (int i = 0; i < CACHE_COUNT; i++) {
            if (strcmp(value->name, ir_cache_hint_name((CacheHint)i)) == 0) {
                *out = (CacheHint)i;
                return;
            }
        }
        lower_error(lower, value->loc, "unknown %s hint '%s'; expected default, "
                    "streaming, evict_first, evict_last or a compile-time integer "
                    "0 to 3", option->name, value->name);
        return;
    }
    const char *what = arena_printf(lower->program->scratch, "the %s hint", option->name);
    int64_t hint;
    if (!lower_const_int(lower, value, what, &hint)) return;
    if (hint < 0 || hint >= CACHE_COUNT) {
        lower_error(lower, value->loc, "the %s hint must be 0 (default), 1 (streaming), "
                    "2 (evict_first) or 3 (evict_last), got %lld", option->name,
                    (long long)hint);
        return;
    }
    *out = (CacheHint)hint;
}

/* The most CTAs a cluster may have (the portable limit of sm_90). */
#define LOWER_MAX_CLUSTER 8
/* Resident blocks and threads of one SM on sm_90 (min_blocks). */
#define LOWER_MAX_BLOCKS_PER_SM 32
#define LOWER_MAX_THREADS_PER_SM 2048

void lower_launch_hints(Lower *lower, const AstNode *hints) {
    Kernel *k = lower->kernel;
    k->hint_tma = HINT_AUTO;
    k->hint_warp_specialize = HINT_AUTO;
    k->load_cache = CACHE_DEFAULT;
    k->store_cache = CACHE_DEFAULT;
    if (!hints) return;
    const AstNode *load_cache = lower_option(hints->list, "load_cache");
    const AstNode *store_cache = lower_option(hints->list, "store_cache");
    if (load_cache) lower_cache_hint(lower, load_cache, &k->load_cache);
    if (store_cache) lower_cache_hint(lower, store_cache, &k->store_cache);
    const AstNode *tma = lower_option(hints->list, "tma");
    const AstNode *ws = lower_option(hints->list, "warp_specialize");
    const AstNode *cluster = lower_option(hints->list, "cluster");
    if (tma) lower_hint(lower, tma, &k->hint_tma);
    if (ws) lower_hint(lower, ws, &k->hint_warp_specialize);
    int64_t ctas;
    if (cluster && lower_const_int(lower, cluster->a, "the cluster size", &ctas)) {
        /* consecutive blocks along the grid's first dimension form a
         * cluster (docs/hopper.md 11) */
        if (ctas < 1 || ctas > LOWER_MAX_CLUSTER)
            lower_error(lower, cluster->a->loc, "a cluster has 1 to %d blocks, got %lld",
                        LOWER_MAX_CLUSTER, (long long)ctas);
        else
            k->cluster[0] = (int)ctas;
    }
    /* min_blocks = B: .minnctapersm B, so that ptxas keeps the registers
     * to what B blocks of the kernel's threads can share (it otherwise
     * takes more than it needs: swiglu_forward_per_channel_cast, 43 -> 32
     * with the same code).  A warp-specialised kernel gets 1 there. */
    const AstNode *min_blocks = lower_option(hints->list, "min_blocks");
    int64_t blocks;
    if (min_blocks && lower_const_int(lower, min_blocks->a, "the min_blocks hint", &blocks)) {
        if (blocks < 1 || blocks > LOWER_MAX_BLOCKS_PER_SM ||
            blocks * k->threads > LOWER_MAX_THREADS_PER_SM)
            lower_error(lower, min_blocks->a->loc, "min_blocks must be 1 to %d with at "
                        "most %d threads per SM, got %lld blocks of %d threads",
                        LOWER_MAX_BLOCKS_PER_SM, LOWER_MAX_THREADS_PER_SM,
                        (long long)blocks, k->threads);
        else
            k->min_blocks = (int)blocks;
    }
}

bool lower_pipelined(Lower *lower, const AstNode *node, Stmt *loop) {
    const AstNode *option = lower_option(node->list2, "stages");
    loop->u.loop.role = PIPE_BOTH;
    loop->u.loop.pipe_id = lower->pipe_count++;
    int64_t stages;
    if (!option || !lower_const_int(lower, option->a, "the pipeline stages",
                                    &stages))
        return false;
    if (stages < 1 || stages > LOWER_MAX_STAGES) {
        lower_error(lower, option->a->loc, "a pipelined loop needs 1 to %d "
                    "stages, got %lld", LOWER_MAX_STAGES, (long long)stages);
        return false;
    }
    loop->u.loop.stages = (int)stages;
    const AstNode *lag = lower_option(node->list2, "release_lag");
    int64_t release_lag = 0;
    if (lag && !lower_const_int(lower, lag->a, "the release lag", &release_lag))
        return false;
    if (release_lag < 0 || release_lag > 1) {
        lower_error(lower, lag->a->loc, "a pipelined loop's release_lag is 0 "
                    "or 1, got %lld", (long long)release_lag);
        return false;
    }
    /* with a lag, stage s is released one iteration later: one stage
     * could never be refilled while its consumer still holds it */
    if (release_lag == 1 && stages < 2) {
        lower_error(lower, lag->a->loc, "release_lag = 1 needs stages >= 2 "
                    "(the stage of an iteration stays held during the next "
                    "one), got %lld stage", (long long)stages);
        return false;
    }
    loop->u.loop.release_lag = (int)release_lag;
    return true;
}

/* The value of a bool option of gemm, false when absent. */
static bool bool_option(Lower *lower, const AstNode *node, const char *name,
                        bool *out) {
    *out = false;
    const AstNode *option = lower_option(node->list, name);
    return !option || lower_const_bool(lower, option->a, name, out);
}

/* A count of wgmma groups left in flight (gemm's wait =, gemm_wait's
 * argument): a compile-time int in 0..7, which wgmma.wait_group takes. */
static bool wait_count(Lower *lower, const AstNode *value, const char *what,
                       int *out) {
    int64_t count;
    if (!lower_const_int(lower, value, what, &count)) return false;
    if (count < 0 || count > 7) {
        lower_error(lower, value->loc, "%s must be 0 to 7 (the wgmma groups "
                    "left in flight), got %lld", what, (long long)count);
        return false;
    }
    *out = (int)count;
    return true;
}

/* The scope an operand must have, reported at the operand itself. */
static bool operand_scope(Lower *lower, const AstNode *operand,
                          const Region *region, const char *role,
                          bool shared, bool fragment) {
    Scope scope = region->buffer->scope;
    if ((shared && scope == SCOPE_SHARED) ||
        (fragment && scope == SCOPE_FRAGMENT))
        return true;
    lower_error(lower, operand->loc, "gemm operand %s must be %s; '%s' is a %s",
                role, shared && fragment ? "a shared buffer or a fragment"
                      : shared ? "a shared buffer" : "a fragment",
                operand->name, lower_scope_text(scope));
    return false;
}

void lower_gemm(Lower *lower, Stmt *seq, const AstNode *node) {
    Region a, b, c;
    int64_t shape[IR_MAX_RANK];
    int rank;
    bool ok = lower_region(lower, node->a, &a, shape, &rank);
    if (!lower_region(lower, node->b, &b, shape, &rank)) ok = false;
    if (!lower_region(lower, node->c, &c, shape, &rank)) ok = false;
    bool transpose_a, transpose_b, clear;
    if (!bool_option(lower, node, "transpose_a", &transpose_a)) ok = false;
    if (!bool_option(lower, node, "transpose_b", &transpose_b)) ok = false;
    if (!bool_option(lower, node, "clear", &clear)) ok = false;
    int wait = 0;
    const AstNode *wait_option = lower_option(node->list, "wait");
    if (wait_option && !wait_count(lower, wait_option->a, "gemm's wait", &wait))
        ok = false;
    if (!ok) return;
    if (!operand_scope(lower, node->a, &a, "A", true, true) ||
        !operand_scope(lower, node->b, &b, "B", true, false) ||
        !operand_scope(lower, node->c, &c, "C", false, true))
        return;
    if (a.buffer->scope == SCOPE_FRAGMENT && node->a->list) {
        /* a fragment is spread over the threads in wgmma's own layout:
         * only all of it can feed the tensor cores */
        lower_error(lower, node->a->loc, "a fragment used as gemm operand A "
                    "must be whole; write '%s' without slices", node->a->name);
        return;
    }
    Stmt *s = ir_new_stmt(lower->kernel, STMT_GEMM, node->loc);
    s->u.gemm.a = a;
    s->u.gemm.b = b;
    s->u.gemm.c = c.buffer;
    s->u.gemm.transpose_a = transpose_a;
    s->u.gemm.transpose_b = transpose_b;
    s->u.gemm.clear = clear;
    s->u.gemm.wait = wait;
    const char *problem = pass_check_gemm(lower->program->scratch, s);
    if (problem) {
        lower_error(lower, node->loc, "%s", problem);
        return;
    }
    ir_seq_append(lower->kernel, seq, s);
}

/* gemm_wait(N): until at most N of this warpgroup's wgmma groups are in
 * flight; the accumulators of the others are complete afterwards. */
void lower_gemm_wait(Lower *lower, Stmt *seq, const AstNode *node) {
    int pending;
    if (!wait_count(lower, node->a, "gemm_wait's count", &pending)) return;
    Stmt *s = ir_new_stmt(lower->kernel, STMT_FENCE, node->loc);
    s->u.fence.op = FENCE_WGMMA_WAIT;
    s->u.fence.value = pending;
    ir_seq_append(lower->kernel, seq, s);
}
