/* diag.c - the source-file table and user-facing diagnostics.
 *
 * Messages follow gcc and clang: "file:line:col: error: message", the source
 * line, a caret under the column, then one note per DSL call frame that led
 * there ("note: in call to 'block' from file:line:col").  User errors are
 * counted and never abort; compiler bugs go through ampc_die(). */
#include "ir.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/suggest.h"
#include <sys/stat.h>
#include <unistd.h>

void diag_init(Diag *d, FILE *out)
{
    memset(d, 0, sizeof *d);
    d->out = out ? out : stderr;
    arena_init(&d->arena);
}

void diag_free(Diag *d)
{
    for (int i = 0; i < d->files.len; i++) {
        free(VEC_AT(d->files, SrcFile, i).text);
        free(VEC_AT(d->files, SrcFile, i).path);
    }
    vec_free(&d->files);
    vec_free(&d->frames);
    arena_free(&d->arena);
}

static char *xstrdup(const char *s)
{
    char *p = strdup(s);
    if (!p)
        DIE("out of memory");
    return p;
}

int diag_add_buffer(Diag *d, const char *path, const char *text, size_t len)
{
    SrcFile *f = vec_push(&d->files, sizeof(SrcFile));
    f->path = xstrdup(path);
    f->text = malloc(len + 1);
    if (!f->text)
        DIE("out of memory");
    memcpy(f->text, text, len);
    f->text[len] = 0;
    f->len = len;
    return d->files.len - 1;
}

/* Records why a load failed (diag_load_error) and returns -1. */
static int load_failed(Diag *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int load_failed(Diag *d, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->load_error, sizeof d->load_error, fmt, ap);
    va_end(ap);
    return -1;
}

static const char *file_kind(mode_t m)
{
    return S_ISDIR(m)    ? "a directory"
           : S_ISCHR(m)  ? "a character device"
           : S_ISBLK(m)  ? "a block device"
           : S_ISFIFO(m) ? "a FIFO"
           : S_ISSOCK(m) ? "a socket"
                         : "an unknown kind";
}

/* Every file ampc reads as source (a model, an import, an --from-ir dump)
 * comes through here, so one check covers them all: only a regular file is
 * read, and at most AMPC_MAX_SOURCE_BYTES of it.  /dev/zero would otherwise
 * be read until memory runs out, and a FIFO would block forever: the open
 * is non-blocking (a FIFO without a writer opens at once) and fstat refuses
 * anything that is not a regular file before a byte is read.  The size is
 * checked again while reading, as a file may grow or misstate its size. */
int diag_load_file(Diag *d, const char *path)
{
    d->load_error[0] = 0;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
        return load_failed(d, "%s", strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int err = errno;
        close(fd);
        return load_failed(d, "%s", strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return load_failed(d, "not a regular file (%s)", file_kind(st.st_mode));
    }
    const size_t max = AMPC_MAX_SOURCE_BYTES;
    if ((uint64_t)st.st_size > max) {
        close(fd);
        return load_failed(d, "it is larger than %zu MiB, the most ampc reads as a source file",
                           max >> 20);
    }
    size_t cap = (size_t)st.st_size + 1, len = 0; /* +1: to see the end of the file */
    char *buf = malloc(cap + 1);
    if (!buf)
        DIE("out of memory");
    for (;;) {
        if (len == cap) {
            if (cap > max) { /* it grew past the limit while being read */
                free(buf);
                close(fd);
                return load_failed(d, "it is larger than %zu MiB, the most ampc reads as a "
                                      "source file", max >> 20);
            }
            cap = cap * 2 < max + 1 ? cap * 2 : max + 1;
            char *nb = realloc(buf, cap + 1);
            if (!nb)
                DIE("out of memory");
            buf = nb;
        }
        ssize_t n = read(fd, buf + len, cap - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int err = errno;
            free(buf);
            close(fd);
            return load_failed(d, "%s", strerror(err));
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    close(fd);
    buf[len] = 0;
    SrcFile *f = vec_push(&d->files, sizeof(SrcFile));
    f->path = xstrdup(path);
    f->text = buf;
    f->len = len;
    return d->files.len - 1;
}

const char *diag_load_error(const Diag *d) { return d->load_error; }

const SrcFile *diag_file(const Diag *d, int file)
{
    if (file < 0 || file >= d->files.len)
        return NULL;
    return &VEC_AT(d->files, SrcFile, file);
}

int diag_push_frame(Diag *d, const char *fn, Loc call, int parent)
{
    CallFrame *f = vec_push(&d->frames, sizeof(CallFrame));
    /* copied: the caller's string (the syntax tree) is freed after
     * elaborate, but later passes still report errors in this frame */
    f->fn = arena_strdup(&d->arena, fn);
    f->call = call;
    f->parent = parent;
    return d->frames.len - 1;
}

/* Text from the model (names, strings, import paths) may hold control bytes
 * (a newline, a terminal escape, or a C1 control such as U+009B, CSI, in
 * UTF-8): written as \xNN, so a diagnostic keeps its lines and cannot drive
 * the terminal. */
static void put_escaped(FILE *out, const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s, next = (unsigned char)s[1];
        if ((c < 32 && c != '\t') || c == 127) {
            fprintf(out, "\\x%02x", c);
        } else if (c == 0xc2 && next >= 0x80 && next < 0xa0) {
            fprintf(out, "\\x%02x\\x%02x", c, next);
            s++;
        } else {
            fputc(c, out);
        }
    }
}

static void print_loc(const Diag *d, FILE *out, Loc loc)
{
    const SrcFile *f = diag_file(d, loc.file);
    if (f) {
        put_escaped(out, f->path);
        fprintf(out, ":%d:%d: ", loc.line, loc.col);
    } else {
        fputs("ampc: ", out);
    }
}

/* The most of a source line a diagnostic shows: a longer line (a generated
 * model, a minified one) is cut to a window around the caret, so an error on
 * a 10 MB line prints a few hundred bytes, not the line. */
enum { SHOWN_BYTES = 160 };

/* Moves p off the continuation bytes of a UTF-8 sequence (forward, or
 * backward when step is -1), so a cut never splits a character. */
static const char *utf8_boundary(const char *p, const char *lo, const char *hi, int step)
{
    while (p > lo && p < hi && ((unsigned char)*p & 0xC0) == 0x80)
        p += step;
    return p;
}

/* The source line of loc and a caret under its column.  Tabs in the line
 * are copied into the caret line so the caret lines up in any terminal. */
static void print_source_line(const Diag *d, FILE *out, Loc loc)
{
    const SrcFile *f = diag_file(d, loc.file);
    if (!f || loc.line < 1)
        return;
    const char *p = f->text, *end = f->text + f->len;
    for (int line = 1; line < loc.line && p < end; p++)
        if (*p == '\n')
            line++;
    const char *eol = p;
    while (eol < end && *eol != '\n' && *eol != '\r')
        eol++;
    if (p == eol) {
        /* an empty line (an empty file, end of file after a final
         * newline): a caret under nothing shows nothing */
        return;
    }
    /* the caret's byte, at most one past the end of the line */
    const char *caret = loc.col < 1 ? p : (size_t)(loc.col - 1) < (size_t)(eol - p) ? p + loc.col - 1 : eol;
    const char *from = p, *to = eol;
    if (eol - p > SHOWN_BYTES) {
        from = caret - p > SHOWN_BYTES / 2 ? caret - SHOWN_BYTES / 2 : p;
        to = eol - from > SHOWN_BYTES ? from + SHOWN_BYTES : eol;
        from = utf8_boundary(from, p, eol, 1);
        to = utf8_boundary(to, p, eol, -1);
    }
    const char *more = "...";
    fprintf(out, " %s", from > p ? more : "");
    for (const char *q = from; q < to; q++)
        fputc((*q == '\t' || (unsigned char)*q >= 32) ? *q : ' ', out);
    fprintf(out, "%s\n %s", to < eol ? more : "", from > p ? "   " : "");
    for (const char *q = from; q < caret; q++)
        fputc(*q == '\t' ? '\t' : ' ', out);
    fputs("^\n", out);
}

static void print_frames(const Diag *d, FILE *out, int frame)
{
    int guard = 0;
    for (; frame >= 0 && frame < d->frames.len && guard < 16; guard++) {
        const CallFrame *cf = &VEC_AT(d->frames, CallFrame, frame);
        const SrcFile *f = diag_file(d, cf->call.file);
        fprintf(out, "note: in call to '%s' from ", cf->fn);
        put_escaped(out, f ? f->path : "?");
        fprintf(out, ":%d:%d\n", cf->call.line, cf->call.col);
        frame = cf->parent;
    }
    if (frame >= 0)
        fputs("note: (further calls omitted)\n", out);
}

/* One diagnostic: "where: kind: message", the source line and caret, the
 * call chain.  It is composed in memory and written with one fwrite: d->out
 * is usually stderr, which is unbuffered, and character-at-a-time output
 * made one write() per byte (25 s for an error on a 10 MB line). */
static void emit(Diag *d, Loc loc, int frame, const char *kind, const char *fmt, va_list ap)
{
    char *text = NULL;
    if (vasprintf(&text, fmt, ap) < 0)
        DIE("out of memory");
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    if (!m)
        DIE("out of memory");
    print_loc(d, m, loc);
    fprintf(m, "%s: ", kind);
    put_escaped(m, text); /* it quotes names and strings from the model */
    free(text);
    fputc('\n', m);
    print_source_line(d, m, loc);
    print_frames(d, m, frame);
    if (fclose(m) != 0)
        DIE("out of memory");
    fwrite(buf, 1, len, d->out);
    fflush(d->out);
    free(buf);
}

void diag_verror_in(Diag *d, Loc loc, int frame, const char *fmt, va_list ap)
{
    d->nerr++;
    emit(d, loc, frame, "error", fmt, ap);
}

void diag_error_in(Diag *d, Loc loc, int frame, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    diag_verror_in(d, loc, frame, fmt, ap);
    va_end(ap);
}

void diag_error(Diag *d, Loc loc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    diag_verror_in(d, loc, -1, fmt, ap);
    va_end(ap);
}

void diag_warning(Diag *d, Loc loc, const char *fmt, ...)
{
    va_list ap;
    d->nwarn++;
    va_start(ap, fmt);
    emit(d, loc, -1, "warning", fmt, ap);
    va_end(ap);
}

void diag_note(Diag *d, Loc loc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    emit(d, loc, -1, "note", fmt, ap);
    va_end(ap);
}

void diag_plain_error(Diag *d, const char *fmt, ...)
{
    va_list ap;
    d->nerr++;
    va_start(ap, fmt);
    emit(d, loc_none(), -1, "error", fmt, ap);
    va_end(ap);
}

/* ---- did-you-mean -------------------------------------------------------------- */

void suggest_try(Suggest *s, const char *want, const char *cand)
{
    int dist = s->best ? s->dist : 1 << 30;
    if (rt_suggest_closer(want, cand, &dist))
        s->best = cand, s->dist = dist;
}

_Noreturn void ampc_die(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "ampc: internal error at %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    abort();
}
