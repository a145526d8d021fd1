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
                         : "an unknown kind of file";
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
        return load_failed(d, "it is %s, not a regular file", file_kind(st.st_mode));
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

static void print_loc(Diag *d, Loc loc)
{
    const SrcFile *f = diag_file(d, loc.file);
    if (f)
        fprintf(d->out, "%s:%d:%d: ", f->path, loc.line, loc.col);
    else
        fprintf(d->out, "ampc: ");
}

/* The source line of loc and a caret under its column.  Tabs in the line
 * are copied into the caret line so the caret lines up in any terminal. */
static void print_source_line(Diag *d, Loc loc)
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
    fputc(' ', d->out);
    for (const char *q = p; q < eol; q++)
        fputc((*q == '\t' || (unsigned char)*q >= 32) ? *q : ' ', d->out);
    fputs("\n ", d->out);
    for (int c = 1; c < loc.col && p + c - 1 < eol; c++)
        fputc(p[c - 1] == '\t' ? '\t' : ' ', d->out);
    fputs("^\n", d->out);
}

static void print_frames(Diag *d, int frame)
{
    int guard = 0;
    for (; frame >= 0 && frame < d->frames.len && guard < 16; guard++) {
        const CallFrame *cf = &VEC_AT(d->frames, CallFrame, frame);
        const SrcFile *f = diag_file(d, cf->call.file);
        fprintf(d->out, "note: in call to '%s' from %s:%d:%d\n", cf->fn, f ? f->path : "?",
                cf->call.line, cf->call.col);
        frame = cf->parent;
    }
    if (frame >= 0)
        fprintf(d->out, "note: (further calls omitted)\n");
}

void diag_verror_in(Diag *d, Loc loc, int frame, const char *fmt, va_list ap)
{
    d->nerr++;
    print_loc(d, loc);
    fputs("error: ", d->out);
    vfprintf(d->out, fmt, ap);
    fputc('\n', d->out);
    print_source_line(d, loc);
    print_frames(d, frame);
    fflush(d->out);
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
    print_loc(d, loc);
    fputs("warning: ", d->out);
    va_start(ap, fmt);
    vfprintf(d->out, fmt, ap);
    va_end(ap);
    fputc('\n', d->out);
    print_source_line(d, loc);
    fflush(d->out);
}

void diag_note(Diag *d, Loc loc, const char *fmt, ...)
{
    va_list ap;
    print_loc(d, loc);
    fputs("note: ", d->out);
    va_start(ap, fmt);
    vfprintf(d->out, fmt, ap);
    va_end(ap);
    fputc('\n', d->out);
    print_source_line(d, loc);
    fflush(d->out);
}

void diag_plain_error(Diag *d, const char *fmt, ...)
{
    va_list ap;
    d->nerr++;
    fputs("ampc: error: ", d->out);
    va_start(ap, fmt);
    vfprintf(d->out, fmt, ap);
    va_end(ap);
    fputc('\n', d->out);
    fflush(d->out);
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
