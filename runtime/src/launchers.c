/*
 * launchers.c -- compiles the launchers tkc generated for kernels.tk.
 *
 * `tkc kernels.tk --emit=header` writes tk_kernels.h into the build
 * directory: declarations of tkl_<kernel>__<instance>() for the api_*.c
 * files, and, under TK_LAUNCHERS_IMPLEMENTATION, their definitions (argument
 * checks, grid computation, tk__launch).  This file is the one translation
 * unit that instantiates the definitions.
 */
#define TK_LAUNCHERS_IMPLEMENTATION
#include "tk_kernels.h"
