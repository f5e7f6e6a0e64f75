/*
 * lower_tma.c -- (being written; see docs/hopper.md).  Until then the pass
 * changes nothing.
 */
#include "../ir.h"

bool pass_lower_tma(Kernel *k, Diag *diag) {
    (void)k;
    (void)diag;
    return true;
}
bool pass_explain_tma;
