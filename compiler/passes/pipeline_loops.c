/*
 * pipeline_loops.c -- (being written; see docs/hopper.md).  Until then the pass
 * changes nothing.
 */
#include "../ir.h"

bool pass_pipeline_loops(Kernel *k, Diag *diag) {
    (void)k;
    (void)diag;
    return true;
}
