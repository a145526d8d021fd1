/* arena.c - bump allocation for everything whose lifetime is a compilation
 * (AST, IR nodes, names), plus two small malloc'ed helpers: Vec, a growable
 * array, and StrMap, a string-keyed hash map. */
#include "ir.h"

#include <stdlib.h>
#include <string.h>

struct ArenaBlock {
    ArenaBlock *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

enum { ARENA_BLOCK = 64 * 1024 };

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        DIE("out of memory (%zu bytes)", n);
    return p;
}

void arena_init(Arena *a) { a->head = NULL, a->total = 0; }

void arena_free(Arena *a)
{
    for (ArenaBlock *b = a->head, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    a->head = NULL;
    a->total = 0;
}

void *arena_alloc(Arena *a, size_t size)
{
    size = (size + 15) & ~(size_t)15;
    ArenaBlock *b = a->head;
    if (!b || b->cap - b->used < size) {
        size_t cap = size > ARENA_BLOCK / 4 ? size : ARENA_BLOCK;
        b = xmalloc(sizeof(ArenaBlock) + cap);
        b->used = 0;
        b->cap = cap;
        /* A large one-off block goes behind the current one so the
         * current block's free space is not wasted. */
        if (a->head && cap != ARENA_BLOCK) {
            b->next = a->head->next;
            a->head->next = b;
        } else {
            b->next = a->head;
            a->head = b;
        }
    }
    void *p = b->data + b->used;
    b->used += size;
    a->total += size;
    memset(p, 0, size);
    return p;
}

ArenaMark arena_mark(const Arena *a)
{
    return (ArenaMark){.head = a->head,
                       .next = a->head ? a->head->next : NULL,
                       .used = a->head ? a->head->used : 0,
                       .total = a->total};
}

/* Blocks made since the mark are in two runs: new blocks pushed in front of
 * the marked head, and large one-off blocks put right behind it (before
 * its old successor).  Both runs are freed. */
void arena_release(Arena *a, ArenaMark m)
{
    for (ArenaBlock *b = a->head, *next; b != m.head; b = next) {
        next = b->next;
        free(b);
    }
    a->head = m.head;
    if (m.head) {
        for (ArenaBlock *b = m.head->next, *next; b != m.next; b = next) {
            next = b->next;
            free(b);
        }
        m.head->next = m.next;
        m.head->used = m.used;
    }
    a->total = m.total;
}

char *arena_strndup(Arena *a, const char *s, size_t n)
{
    char *p = arena_alloc(a, n + 1);
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

char *arena_strdup(Arena *a, const char *s) { return arena_strndup(a, s, strlen(s)); }

char *arena_printf(Arena *a, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *p = arena_alloc(a, (size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(p, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return p;
}

void *vec_push(Vec *v, size_t elem_size)
{
    if (v->len == v->cap) {
        int cap = v->cap ? v->cap * 2 : 8;
        void *p = realloc(v->data, (size_t)cap * elem_size);
        if (!p)
            DIE("out of memory");
        v->data = p;
        v->cap = cap;
    }
    void *e = (char *)v->data + (size_t)v->len++ * elem_size;
    memset(e, 0, elem_size);
    return e;
}

void vec_free(Vec *v)
{
    free(v->data);
    v->data = NULL;
    v->len = v->cap = 0;
}

/* FNV-1a: short identifiers, good enough spread. */
static uint32_t str_hash(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

void strmap_free(StrMap *m)
{
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

int *strmap_get(const StrMap *m, const char *key)
{
    if (!m->cap)
        return NULL;
    for (uint32_t i = str_hash(key) & (uint32_t)(m->cap - 1);; i = (i + 1) & (uint32_t)(m->cap - 1)) {
        if (m->probes)
            ++*m->probes;
        if (!m->keys[i])
            return NULL;
        if (strcmp(m->keys[i], key) == 0)
            return &m->vals[i];
    }
}

static void strmap_grow(StrMap *m)
{
    StrMap old = *m;
    m->cap = old.cap ? old.cap * 2 : 64;
    m->len = 0;
    m->keys = calloc((size_t)m->cap, sizeof *m->keys);
    m->vals = calloc((size_t)m->cap, sizeof *m->vals);
    if (!m->keys || !m->vals)
        DIE("out of memory");
    for (int i = 0; i < old.cap; i++)
        if (old.keys[i])
            strmap_put(m, old.keys[i], old.vals[i]);
    free(old.keys);
    free(old.vals);
}

bool strmap_put(StrMap *m, const char *key, int val)
{
    if ((m->len + 1) * 2 > m->cap)
        strmap_grow(m);
    uint32_t i = str_hash(key) & (uint32_t)(m->cap - 1);
    for (; m->keys[i]; i = (i + 1) & (uint32_t)(m->cap - 1)) {
        if (m->probes)
            ++*m->probes;
        if (strcmp(m->keys[i], key) == 0)
            return false;
    }
    m->keys[i] = key;
    m->vals[i] = val;
    m->len++;
    return true;
}
