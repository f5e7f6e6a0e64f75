/*
 * frontend.h -- the entry point of the tkc front end.
 *
 * A .tk file and everything it imports become one IR Module holding every
 * instance of every kernel, checked and ready for the tile passes (see
 * docs/language.md for the language).
 */
#ifndef TKC_FRONTEND_H
#define TKC_FRONTEND_H

#include "ir.h"

/* Parses `path` (and, recursively, every module it imports), checks it, and
 * instantiates every kernel instance into a new Module in `arena` (arch
 * string stored in Module.arch).  Import "name" resolves to name.tk
 * relative to the importing file's directory first, then each dir of
 * include_dirs (NULL-terminated; tkc passes stdlib/).  Returns NULL if any
 * error was reported through diag (diag->errors > 0).  Never crashes on
 * any input bytes. */
Module *frontend_compile(Arena *arena, Diag *diag, const char *path,
                         const char *const *include_dirs, const char *arch);

/* Same, from an in-memory source (used by tests); `path` is used for
 * diagnostics and relative imports. */
Module *frontend_compile_source(Arena *arena, Diag *diag, const char *path,
                                const char *text,
                                const char *const *include_dirs,
                                const char *arch);

#endif
