/*
 * diag.c -- user diagnostics and internal compiler errors.
 *
 * Every user-facing message of tkc (front end, passes, code generation)
 * goes through diag_error / diag_note, which print
 *
 *     file.tk:12:7: error: unknown identifier 'foo'
 *         let y = foo + 1;
 *                 ^
 *
 * The source line comes from the text registered with diag_add_source, so
 * the caret can be printed long after parsing.  The caret line copies the
 * tabs of the source line so the caret lines up whatever the tab width.
 * Errors are counted and never fatal; after DIAG_MAX_ERRORS the rest are
 * counted but not printed, so a garbage input cannot flood the terminal.
 * Compiler bugs go through ice(), which exits with status 3.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"

void diag_init(Diag *diag, FILE *out) {
    memset(diag, 0, sizeof *diag);
    diag->out = out ? out : stderr;
}

/* Registers the text of `file` so that diagnostics can quote its lines.
 * Both strings must outlive the Diag (the front end keeps them in the
 * module arena).  Re-registering a file replaces its text; when the table
 * is full, later files simply get no source line. */
void diag_add_source(Diag *diag, const char *file, const char *text) {
    if (!file || !text) return;
    for (int i = 0; i < diag->nfiles; i++) {
        if (strcmp(diag->files[i], file) == 0) {
            diag->texts[i] = text;
            return;
        }
    }
    if (diag->nfiles >= (int)(sizeof diag->files / sizeof diag->files[0]))
        return;
    diag->files[diag->nfiles] = file;
    diag->texts[diag->nfiles] = text;
    diag->nfiles++;
}

static const char *source_text(const Diag *diag, const char *file) {
    for (int i = 0; i < diag->nfiles; i++)
        if (strcmp(diag->files[i], file) == 0) return diag->texts[i];
    return NULL;
}

/* Prints line `loc.line` of the registered text and a caret under column
 * `loc.col`.  Columns count bytes; a column past the end of the line puts
 * the caret just after the last character. */
static void print_source_line(const Diag *diag, Loc loc) {
    const char *text = source_text(diag, loc.file);
    if (!text || loc.line <= 0) return;
    const char *line = text;
    for (int n = 1; n < loc.line; n++) {
        line = strchr(line, '\n');
        if (!line) return;
        line++;
    }
    size_t length = strcspn(line, "\n");
    if (length > 0 && line[length - 1] == '\r') length--;
    fprintf(diag->out, "%.*s\n", (int)length, line);
    size_t caret = loc.col > 0 ? (size_t)loc.col - 1 : 0;
    if (caret > length) caret = length;
    for (size_t i = 0; i < caret; i++)
        fputc(line[i] == '\t' ? '\t' : ' ', diag->out);
    fputs("^\n", diag->out);
}

static void vreport(Diag *diag, Loc loc, const char *kind, const char *fmt,
                    va_list args) {
    const char *file = loc.file ? loc.file : "<unknown>";
    if (loc.line > 0 && loc.col > 0)
        fprintf(diag->out, "%s:%d:%d: %s: ", file, loc.line, loc.col, kind);
    else if (loc.line > 0)
        fprintf(diag->out, "%s:%d: %s: ", file, loc.line, kind);
    else
        fprintf(diag->out, "%s: %s: ", file, kind);
    vfprintf(diag->out, fmt, args);
    fputc('\n', diag->out);
    if (loc.file) print_source_line(diag, loc);
}

void diag_error(Diag *diag, Loc loc, const char *fmt, ...) {
    diag->errors++;
    if (diag->errors > DIAG_MAX_ERRORS) {
        if (diag->errors == DIAG_MAX_ERRORS + 1) {
            fprintf(diag->out, "%s: too many errors, stopping\n",
                    loc.file ? loc.file : "<unknown>");
            fflush(diag->out);
        }
        return;
    }
    va_list args;
    va_start(args, fmt);
    vreport(diag, loc, "error", fmt, args);
    va_end(args);
    fflush(diag->out);
}

/* Notes explain the error before them, so they go silent together with
 * the errors once the limit is passed. */
void diag_note(Diag *diag, Loc loc, const char *fmt, ...) {
    if (diag->errors > DIAG_MAX_ERRORS) return;
    va_list args;
    va_start(args, fmt);
    vreport(diag, loc, "note", fmt, args);
    va_end(args);
    fflush(diag->out);
}

/* __FILE__ is whatever path the build passed to the compiler (CMake uses
 * absolute ones); print it from the source tree's top directory on. */
static const char *tree_relative(const char *path) {
    static const char *const tops[] = {"/compiler/", "/lang/", "/runtime/",
                                       "/tests/"};
    const char *best = NULL;
    for (size_t i = 0; i < sizeof tops / sizeof tops[0]; i++) {
        const char *hit = NULL;
        for (const char *p = strstr(path, tops[i]); p; p = strstr(p + 1, tops[i]))
            hit = p;
        if (hit && (!best || hit > best)) best = hit;
    }
    return best ? best + 1 : path;
}

_Noreturn void ice_at(const char *file, int line, const char *fmt, ...) {
    fflush(stdout);
    fprintf(stderr, "internal compiler error at %s:%d: ", tree_relative(file),
            line);
    va_list args;
    va_start(args, fmt);
    vfprintf(stderr, fmt, args);
    va_end(args);
    fputc('\n', stderr);
    fflush(stderr);
    exit(3);
}
