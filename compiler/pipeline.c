/*
 * pipeline.c -- the pass order, in one readable list.
 *
 * Every kernel goes through the same straight list of passes (the table
 * below), with the IR verifier after the front end and after every pass.
 * A pass that returns false has reported a user error: that kernel stops
 * there, and the others still run so that one compilation reports as many
 * errors as it can.  A verifier failure is a compiler bug and ends the
 * compilation with an internal error.
 *
 * --dump-after=NAME prints the kernel after every run of the pass NAME
 * (simplify runs twice, so it is printed twice); --dump-after=all prints
 * it after every pass, each dump headed `// after NAME: <kernel>`.
 */
#include <string.h>

#include "ir.h"

typedef struct PassEntry {
    const char *name;
    PassFn run;
} PassEntry;

/* The order matters.  The Hopper passes work on tile statements first:
 * lower_tma picks the TMA copies, warp_specialize splits producer and
 * consumer warps around a pipelined loop of TMA copies, pipeline_loops
 * builds the stage ring and its mbarriers (docs/hopper.md).  Then:
 * layouts need the tile ops lowered to PARALLEL loops, lower_gemm needs
 * the accumulator layouts,
 * lower_parallel needs layouts, simplify cleans up the index arithmetic
 * lower_parallel leaves, plan_shared wants the thread-level accesses to
 * choose a swizzle, vectorize needs plain index expressions to prove
 * contiguity, hoist_guards wants the final guards, and barriers go in
 * last, over the final accesses. */
static const PassEntry pipeline[] = {
    {"check_types", pass_check_types},
    {"lower_tma", pass_lower_tma},
    {"warp_specialize", pass_warp_specialize},
    {"pipeline_loops", pass_pipeline_loops},
    {"lower_tile_ops", pass_lower_tile_ops},
    {"infer_layouts", pass_infer_layouts},
    {"lower_gemm", pass_lower_gemm},
    {"lower_parallel", pass_lower_parallel},
    {"simplify", pass_simplify},
    {"plan_shared", pass_plan_shared},
    {"vectorize", pass_vectorize},
    {"simplify", pass_simplify},
    {"hoist_guards", pass_hoist_guards},
    {"insert_barriers", pass_insert_barriers},
};
#define PIPELINE_LENGTH (int)(sizeof pipeline / sizeof pipeline[0])

PassFn pipeline_find_pass(const char *name) {
    if (!name) return NULL;
    for (int i = 0; i < PIPELINE_LENGTH; i++)
        if (strcmp(pipeline[i].name, name) == 0) return pipeline[i].run;
    return NULL;
}

static void dump(const PipelineOptions *opts, const char *pass, const Kernel *k) {
    if (!opts || !opts->dump_after) return;
    if (strcmp(opts->dump_after, "all") != 0 && strcmp(opts->dump_after, pass) != 0)
        return;
    FILE *out = opts->dump_out ? opts->dump_out : stderr;
    fprintf(out, "// after %s: %s\n", pass, k->name);
    ir_print_kernel(out, k);
    fflush(out);
}

static void verify(Kernel *k, Diag *diag, const char *after) {
    if (!ir_verify(k, diag, after))
        ice("IR verification failed after %s in kernel %s", after, k->name);
}

/* Runs the pipeline over one kernel; false once a pass reported an error. */
static bool run_kernel(Kernel *k, Diag *diag, const PipelineOptions *opts) {
    verify(k, diag, "frontend");
    dump(opts, "frontend", k);
    for (int i = 0; i < PIPELINE_LENGTH; i++) {
        int errors = diag->errors;
        bool ok = pipeline[i].run(k, diag);
        if (!ok || diag->errors > errors) return false;
        verify(k, diag, pipeline[i].name);
        dump(opts, pipeline[i].name, k);
    }
    return true;
}

bool pipeline_run(Module *m, Diag *diag, const PipelineOptions *opts) {
    bool ok = true;
    for (int i = 0; i < m->nkernels; i++)
        if (!run_kernel(m->kernels[i], diag, opts)) ok = false;
    return ok;
}
