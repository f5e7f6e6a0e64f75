/*
 * arena.c -- the bump allocator every compilation lives in.
 *
 * The IR is a tree of small nodes that passes create, copy and abandon all
 * the time.  Rather than track ownership, everything of one compilation is
 * carved out of one Arena and released by a single arena_free (the QBE /
 * chibicc policy).  An arena is a list of chunks; allocation bumps a cursor
 * in the newest chunk and starts a new chunk when it is full.  Requests
 * larger than a quarter of a chunk get a chunk of their own so that they do
 * not waste the rest of the current one.
 *
 * There is no global state: two arenas (two modules) can coexist in one
 * process, which the tests rely on.
 */
#include "ir.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

enum {
    ARENA_ALIGN = 16,              /* matches max_align_t on x86-64 */
    ARENA_CHUNK_BYTES = 64 * 1024, /* default chunk payload */
};

typedef struct Chunk {
    struct Chunk *next;
    size_t size; /* payload bytes */
    size_t used; /* bytes handed out */
    /* the payload follows, aligned to ARENA_ALIGN */
    _Alignas(ARENA_ALIGN) unsigned char data[];
} Chunk;

struct Arena {
    Chunk *head; /* newest chunk first */
};

static Chunk *chunk_new(size_t size)
{
    Chunk *chunk = malloc(sizeof(Chunk) + size);
    if (!chunk)
        ice("out of memory allocating a %zu-byte arena chunk", size);
    chunk->next = NULL;
    chunk->size = size;
    chunk->used = 0;
    return chunk;
}

Arena *arena_new(void)
{
    Arena *arena = malloc(sizeof(Arena));
    if (!arena)
        ice("out of memory allocating an arena");
    arena->head = chunk_new(ARENA_CHUNK_BYTES);
    return arena;
}

void arena_free(Arena *arena)
{
    if (!arena)
        return;
    Chunk *chunk = arena->head;
    while (chunk) {
        Chunk *next = chunk->next;
        free(chunk);
        chunk = next;
    }
    free(arena);
}

void *arena_alloc(Arena *arena, size_t size)
{
    size_t rounded = (size + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
    if (rounded < size)
        ice("arena request of %zu bytes overflows", size);
    if (rounded == 0)
        rounded = ARENA_ALIGN; /* distinct, non-NULL pointers for size 0 */
    Chunk *head = arena->head;
    if (head->size - head->used < rounded) {
        if (rounded > ARENA_CHUNK_BYTES / 4) {
            /* A big block gets its own chunk, linked behind the current
             * one so the current chunk keeps serving small requests. */
            Chunk *big = chunk_new(rounded);
            big->used = rounded;
            big->next = head->next;
            head->next = big;
            memset(big->data, 0, rounded);
            return big->data;
        }
        head = chunk_new(ARENA_CHUNK_BYTES);
        head->next = arena->head;
        arena->head = head;
    }
    void *result = head->data + head->used;
    head->used += rounded;
    memset(result, 0, rounded);
    return result;
}

char *arena_strdup(Arena *arena, const char *s)
{
    size_t length = strlen(s);
    char *copy = arena_alloc(arena, length + 1);
    memcpy(copy, s, length + 1);
    return copy;
}

char *arena_printf(Arena *arena, const char *fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    int length = vsnprintf(NULL, 0, fmt, args);
    va_end(args);
    if (length < 0)
        ice("arena_printf: bad format \"%s\"", fmt);
    char *text = arena_alloc(arena, (size_t)length + 1);
    va_start(args, fmt);
    vsnprintf(text, (size_t)length + 1, fmt, args);
    va_end(args);
    return text;
}

/* Doubles the capacity when full; the old items array is simply abandoned
 * in the arena (it is freed with everything else). */
void vec_push(Arena *arena, PtrVec *vec, void *item)
{
    if (vec->count == vec->capacity) {
        int capacity = vec->capacity ? vec->capacity * 2 : 8;
        void **items = arena_alloc(arena, sizeof(void *) * (size_t)capacity);
        if (vec->count)
            memcpy(items, vec->items, sizeof(void *) * (size_t)vec->count);
        vec->items = items;
        vec->capacity = capacity;
    }
    vec->items[vec->count++] = item;
}

void text_add(Text *t, const char *fmt, ...) {
    va_list ap;
    for (;;) {
        size_t room = t->capacity - t->length;
        va_start(ap, fmt);
        int n = vsnprintf(t->data ? t->data + t->length : NULL, t->data ? room : 0, fmt, ap);
        va_end(ap);
        if (n < 0) ice("vsnprintf failed");
        if (t->data && (size_t)n < room) {
            t->length += (size_t)n;
            return;
        }
        t->capacity = (t->capacity + (size_t)n + 1) * 2;
        t->data = realloc(t->data, t->capacity);
        if (!t->data) ice("out of memory");
    }
}

const char *text_get(const Text *t) { return t->data ? t->data : ""; }
