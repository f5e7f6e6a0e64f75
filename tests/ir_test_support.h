/*
 * ir_test_support.h -- helpers shared by the IR core tests (test_ir.c,
 * test_ir_text.c, test_ir_hopper.c): reading a golden file, diagnostics
 * captured in memory, the printer's output as a string and parsing text
 * that must be valid.  Every failure is a Criterion assertion, so these
 * functions may only be called from inside a test.  They are static
 * inline so that each test binary takes only what it uses, without a
 * library of its own.
 */
#ifndef TK_TESTS_IR_TEST_SUPPORT_H
#define TK_TESTS_IR_TEST_SUPPORT_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

#include "ir.h"

#ifndef TK_SOURCE_DIR
#define TK_SOURCE_DIR "."
#endif

/* The whole file, NUL-terminated (malloc'd); fails the test if unreadable. */
static inline char *read_file(const char *path)
{
    FILE *file = fopen(path, "rb");
    cr_assert(file, "cannot open %s", path);
    fseek(file, 0, SEEK_END);
    long size = ftell(file);
    fseek(file, 0, SEEK_SET);
    char *text = malloc((size_t)size + 1);
    cr_assert(fread(text, 1, (size_t)size, file) == (size_t)size);
    text[size] = 0;
    fclose(file);
    return text;
}

/* Diagnostics captured in memory. */
typedef struct {
    Diag diag;
    FILE *stream;
    char *text;
    size_t size;
} Captured;

static inline void capture_init(Captured *c)
{
    c->text = NULL;
    c->size = 0;
    c->stream = open_memstream(&c->text, &c->size);
    diag_init(&c->diag, c->stream);
}

static inline const char *capture_text(Captured *c)
{
    fflush(c->stream);
    return c->text ? c->text : "";
}

static inline void capture_done(Captured *c)
{
    fclose(c->stream);
    free(c->text);
}

/* The printed module (malloc'd). */
static inline char *print_module_text(const Module *m)
{
    char *text = NULL;
    size_t size = 0;
    FILE *out = open_memstream(&text, &size);
    ir_print_module(out, m);
    fclose(out);
    return text;
}

/* Parses text that must be valid; fails the test with the diagnostics. */
static inline Module *parse_ok(Arena *arena, const char *text)
{
    Captured c;
    capture_init(&c);
    Module *m = ir_parse(arena, &c.diag, "<ir>", text);
    cr_assert(m, "parse failed:\n%s\n--- text:\n%s", capture_text(&c), text);
    capture_done(&c);
    return m;
}

#endif
