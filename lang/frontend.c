/*
 * frontend.c -- loading a .tk program: the root file, its imports, and the
 * three front-end stages run over them.
 *
 * `import "name";` names the file name.tk, looked up next to the importing
 * file first, then in each include directory.  Files are identified by
 * their canonical path, so a file imported twice (a diamond) is loaded
 * once, and a file that imports itself through a chain is an import cycle.
 * The stages are: parse every file; sema_check the declarations; lower
 * every kernel instance.  A file with syntax errors stops the compilation
 * after parsing, because its partial tree would only produce noise later.
 *
 * File texts and paths live in the module arena (diagnostics of later
 * passes still quote them); the AST and the tables live in a scratch arena
 * freed before returning.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "frontend.h"
#include "lower.h"

/* Larger inputs are refused rather than read: no .tk file is near this. */
#define FRONTEND_MAX_FILE_BYTES (64L << 20)

Decl *program_lookup(SourceFile *file, const char *name) {
    for (int i = 0; i < file->decls.count; i++) {
        Decl *decl = file->decls.items[i];
        if (strcmp(decl->name, name) == 0) return decl;
    }
    for (int i = 0; i < file->imports.count; i++) {
        SourceFile *imported = file->imports.items[i];
        for (int j = 0; j < imported->decls.count; j++) {
            Decl *decl = imported->decls.items[j];
            if (strcmp(decl->name, name) == 0) return decl;
        }
    }
    return NULL;
}

/* Reads a whole file into the module arena, NUL-terminated.  Returns NULL
 * (and sets errno) when it cannot. */
static char *read_file(Arena *arena, const char *path, size_t *length) {
    FILE *in = fopen(path, "rb");
    if (!in) return NULL;
    char *text = NULL;
    if (fseek(in, 0, SEEK_END) == 0) {
        long size = ftell(in);
        if (size >= 0 && size <= FRONTEND_MAX_FILE_BYTES &&
            fseek(in, 0, SEEK_SET) == 0) {
            text = arena_alloc(arena, (size_t)size + 1);
            *length = fread(text, 1, (size_t)size, in);
            text[*length] = '\0';
            if (ferror(in)) text = NULL;
        } else {
            errno = size > FRONTEND_MAX_FILE_BYTES ? EFBIG : EIO;
        }
    }
    fclose(in);
    return text;
}

static bool file_exists(const char *path) {
    FILE *in = fopen(path, "rb");
    if (!in) return false;
    fclose(in);
    return true;
}

/* The canonical path of an existing file, else the path itself. */
static const char *canonical(Program *program, const char *path) {
    char resolved[PATH_MAX];
    if (realpath(path, resolved)) return arena_strdup(program->scratch, resolved);
    return arena_strdup(program->scratch, path);
}

static SourceFile *find_loaded(Program *program, const char *key) {
    for (int i = 0; i < program->files.count; i++) {
        SourceFile *file = program->files.items[i];
        if (strcmp(file->key, key) == 0) return file;
    }
    return NULL;
}

static SourceFile *load_text(Program *program, const char *path,
                             const char *key, const char *text,
                             size_t length);

static char *join_path(Arena *arena, const char *dir, const char *name) {
    if (!dir || !*dir || strcmp(dir, ".") == 0)
        return arena_printf(arena, "%s.tk", name);
    size_t n = strlen(dir);
    return arena_printf(arena, "%s%s%s.tk", dir, dir[n - 1] == '/' ? "" : "/",
                        name);
}

/* Resolves and loads one import of `file`; reports unknown modules and
 * cycles at the import. */
static void load_import(Program *program, SourceFile *file,
                        const AstNode *import) {
    const char *name = import->text;
    if (!*name) {
        diag_error(program->diag, import->loc, "empty module name in import");
        return;
    }
    PtrVec tried = {0};
    const char *found = NULL;
    const char *candidate = join_path(program->arena, file->ast->dir, name);
    vec_push(program->scratch, &tried, (void *)candidate);
    if (file_exists(candidate)) found = candidate;
    for (int i = 0; !found && program->include_dirs &&
                    program->include_dirs[i]; i++) {
        candidate = join_path(program->arena, program->include_dirs[i], name);
        vec_push(program->scratch, &tried, (void *)candidate);
        if (file_exists(candidate)) found = candidate;
    }
    if (!found) {
        size_t size = 1;
        for (int i = 0; i < tried.count; i++)
            size += strlen(tried.items[i]) + 2;
        char *list = arena_alloc(program->scratch, size);
        for (int i = 0; i < tried.count; i++) {
            if (i) strcat(list, ", ");
            strcat(list, tried.items[i]);
        }
        diag_error(program->diag, import->loc,
                   "cannot find module '%s' (tried %s)", name, list);
        return;
    }

    const char *key = canonical(program, found);
    SourceFile *target = find_loaded(program, key);
    if (target && target->loading) {
        diag_error(program->diag, import->loc,
                   "import cycle: '%s' imports '%s', which is still being "
                   "loaded", file->path, target->path);
        return;
    }
    if (target == file) return;
    if (!target) {
        size_t length = 0;
        char *text = read_file(program->arena, found, &length);
        if (!text) {
            diag_error(program->diag, import->loc, "cannot read '%s': %s",
                       found, strerror(errno));
            return;
        }
        target = load_text(program, found, key, text, length);
    }
    for (int i = 0; i < file->imports.count; i++)
        if (file->imports.items[i] == target) return;
    vec_push(program->scratch, &file->imports, target);
}

/* Parses one file and, depth first, everything it imports. */
static SourceFile *load_text(Program *program, const char *path,
                             const char *key, const char *text,
                             size_t length) {
    SourceFile *file = arena_alloc(program->scratch, sizeof *file);
    file->path = arena_strdup(program->arena, path);
    file->key = key;
    file->loading = true;
    vec_push(program->scratch, &program->files, file);
    diag_add_source(program->diag, file->path, text);
    file->ast = parse_file(program->scratch, program->diag, file->path, text,
                           length, NULL);
    for (int i = 0; i < file->ast->decls.count; i++) {
        const AstNode *decl = file->ast->decls.items[i];
        if (decl->kind == AST_IMPORT) load_import(program, file, decl);
    }
    file->loading = false;
    return file;
}

static Module *compile(Arena *arena, Diag *diag, const char *path,
                       const char *text, size_t length,
                       const char *const *include_dirs, const char *arch) {
    Program program = {.arena = arena, .diag = diag,
                       .include_dirs = include_dirs};
    program.scratch = arena_new();
    int errors_before = diag->errors;
    Module *module = NULL;

    load_text(&program, path, canonical(&program, path), text, length);
    if (diag->errors == errors_before) {
        program.module = ir_new_module(arena, arch ? arch : "sm_90a");
        sema_check(&program);
        for (int i = 0; i < program.decls.count; i++) {
            Decl *decl = program.decls.items[i];
            if (decl->kind == DECL_KERNEL && !decl->bad)
                lower_kernel(&program, decl);
        }
        if (diag->errors == errors_before) module = program.module;
    }
    arena_free(program.scratch);
    return diag->errors > 0 ? NULL : module;
}

Module *frontend_compile(Arena *arena, Diag *diag, const char *path,
                         const char *const *include_dirs, const char *arch) {
    size_t length = 0;
    const char *stored = arena_strdup(arena, path);
    char *text = read_file(arena, path, &length);
    if (!text) {
        diag_error(diag, (Loc){stored, 0, 0}, "cannot read '%s': %s", path,
                   strerror(errno));
        return NULL;
    }
    return compile(arena, diag, stored, text, length, include_dirs, arch);
}

Module *frontend_compile_source(Arena *arena, Diag *diag, const char *path,
                                const char *text,
                                const char *const *include_dirs,
                                const char *arch) {
    if (!text) text = "";
    size_t length = strlen(text);
    char *copy = arena_alloc(arena, length + 1);
    memcpy(copy, text, length + 1);
    return compile(arena, diag, arena_strdup(arena, path), copy, length,
                   include_dirs, arch);
}
