/* json.c - the JSON writer every machine-readable document of ampc goes
 * through (dumps, --report=json, ampc diff --format=json; docs/ci.md).
 *
 * Output is deterministic: keys come in the order the caller writes them
 * (one fixed order per document kind, the schema's), numbers are the
 * shortest text that reads back to the same double, and nothing depends on
 * the locale (the decimal point is always '.').  Containers opened "inline"
 * print on one line, so a graph's nodes are one line each and a change to
 * one node is a one-line change in a text diff of two documents. */
#include "driver.h"

#include <locale.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void jw_init(JsonW *w, FILE *f)
{
    memset(w, 0, sizeof *w);
    w->f = f;
    w->first[0] = true;
}

/* The separator and indentation before an element at the current depth. */
static void element(JsonW *w)
{
    if (w->depth >= JW_MAX_DEPTH)
        DIE("JSON nested more than %d deep", JW_MAX_DEPTH);
    bool first = w->first[w->depth];
    if (!first)
        fputc(',', w->f);
    w->first[w->depth] = false;
    if (w->depth == 0)
        return;
    if (w->inline_from && w->depth >= w->inline_from) {
        if (!first)
            fputc(' ', w->f);
        return;
    }
    fputc('\n', w->f);
    for (int i = 0; i < w->depth; i++)
        fputs("  ", w->f);
}

void jw_string_raw(FILE *f, const char *s)
{
    fputc('"', f);
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        unsigned c = *p;
        if (c == '"' || c == '\\') {
            fprintf(f, "\\%c", c);
            p++;
        } else if (c == '\n') {
            fputs("\\n", f), p++;
        } else if (c == '\t') {
            fputs("\\t", f), p++;
        } else if (c < 0x20 || c == 0x7f) {
            fprintf(f, "\\u%04x", c), p++;
        } else if (c < 0x80) {
            fputc((int)c, f), p++;
        } else {
            /* a valid UTF-8 sequence passes; any other byte (names are the
             * user's bytes) is written as the code point of its value, so
             * the document stays valid JSON */
            int len = c >= 0xf0 && c < 0xf5 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 && c < 0xe0 ? 2 : 0;
            int k = 1;
            while (len && k < len && (p[k] & 0xc0) == 0x80)
                k++;
            if (len && k == len) {
                fwrite(p, 1, (size_t)len, f);
                p += len;
            } else {
                fprintf(f, "\\u%04x", c);
                p++;
            }
        }
    }
    fputc('"', f);
}

static void key(JsonW *w, const char *k)
{
    element(w);
    if (k) {
        jw_string_raw(w->f, k);
        fputs(": ", w->f);
    }
}

static void open(JsonW *w, const char *k, char c, bool inl)
{
    key(w, k);
    fputc(c, w->f);
    w->depth++;
    if (w->depth >= JW_MAX_DEPTH)
        DIE("JSON nested more than %d deep", JW_MAX_DEPTH);
    w->first[w->depth] = true;
    if (inl && !w->inline_from)
        w->inline_from = w->depth;
}

static void close(JsonW *w, char c)
{
    bool empty = w->first[w->depth];
    bool inl = w->inline_from && w->depth >= w->inline_from;
    if (w->inline_from == w->depth)
        w->inline_from = 0;
    w->depth--;
    if (!empty && !inl) {
        fputc('\n', w->f);
        for (int i = 0; i < w->depth; i++)
            fputs("  ", w->f);
    }
    fputc(c, w->f);
    if (w->depth == 0)
        fputc('\n', w->f);
}

void jw_object(JsonW *w, const char *k) { open(w, k, '{', false); }
void jw_object_inline(JsonW *w, const char *k) { open(w, k, '{', true); }
void jw_end_object(JsonW *w) { close(w, '}'); }
void jw_array(JsonW *w, const char *k) { open(w, k, '[', false); }
void jw_array_inline(JsonW *w, const char *k) { open(w, k, '[', true); }
void jw_end_array(JsonW *w) { close(w, ']'); }

void jw_str(JsonW *w, const char *k, const char *s)
{
    key(w, k);
    if (s)
        jw_string_raw(w->f, s);
    else
        fputs("null", w->f);
}

void jw_int(JsonW *w, const char *k, int64_t v)
{
    key(w, k);
    fprintf(w->f, "%lld", (long long)v);
}

void jw_bool(JsonW *w, const char *k, bool v)
{
    key(w, k);
    fputs(v ? "true" : "false", w->f);
}

void jw_null(JsonW *w, const char *k)
{
    key(w, k);
    fputs("null", w->f);
}

void json_number_text(double v, char *buf, size_t cap)
{
    if (!isfinite(v)) { /* JSON has no infinities: a string says which */
        snprintf(buf, cap, "%s", isnan(v) ? "\"nan\"" : v > 0 ? "\"inf\"" : "\"-inf\"");
        return;
    }
    if (v == 0) { /* -0 and 0 alike */
        snprintf(buf, cap, "0");
        return;
    }
    if (v == (double)(int64_t)v && fabs(v) < 9007199254740992.0) { /* an integer: all digits */
        snprintf(buf, cap, "%lld", (long long)v);
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, cap, "%.*g", prec, v);
        /* the C library formats in the locale's decimal point: a locale
         * ampc never sets, but a caller might; JSON wants '.' */
        const char *dp = localeconv()->decimal_point;
        if (dp && dp[0] && dp[0] != '.' && !dp[1]) {
            char *c = strchr(buf, dp[0]);
            if (c)
                *c = '.';
        }
        if (strtod(buf, NULL) == v)
            break;
    }
}

void jw_num(JsonW *w, const char *k, double v)
{
    char buf[48];
    json_number_text(v, buf, sizeof buf);
    key(w, k);
    fputs(buf, w->f);
}

void jw_lin(JsonW *w, const char *k, LinExpr e)
{
    jw_object_inline(w, k);
    jw_int(w, "fixed", e.fixed);
    jw_int(w, "per_sample", e.per_sample);
    jw_end_object(w);
}

FILE *mem_open(MemFile *m)
{
    m->text = NULL;
    m->len = 0;
    m->f = open_memstream(&m->text, &m->len);
    if (!m->f)
        DIE("out of memory");
    return m->f;
}

char *mem_close(MemFile *m)
{
    if (fclose(m->f) != 0 || !m->text)
        DIE("out of memory");
    m->f = NULL;
    return m->text;
}
