/* fileio.c - opening inputs and outputs safely (fileio.h). */
#include "fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

/* ---- the run's inputs ----------------------------------------------------------- */

enum { MAX_INPUTS = 64 };
static struct {
    dev_t dev;
    ino_t ino;
} inputs[MAX_INPUTS];
static int ninputs;

void rt_inputs_reset(void) { ninputs = 0; }

static void note_input(const struct stat *st)
{
    for (int i = 0; i < ninputs; i++)
        if (inputs[i].dev == st->st_dev && inputs[i].ino == st->st_ino)
            return;
    if (ninputs < MAX_INPUTS) { /* a run reads at most a few files */
        inputs[ninputs].dev = st->st_dev;
        inputs[ninputs].ino = st->st_ino;
        ninputs++;
    }
}

static bool is_input(const struct stat *st)
{
    for (int i = 0; i < ninputs; i++)
        if (inputs[i].dev == st->st_dev && inputs[i].ino == st->st_ino)
            return true;
    return false;
}

bool rt_is_input(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && is_input(&st);
}

static const char *kind_of(mode_t m)
{
    return S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO" : S_ISCHR(m) ? "a character device"
           : S_ISBLK(m) ? "a block device" : S_ISSOCK(m) ? "a socket" : "not a plain file";
}

/* "WHAT PATH" or, without a what, "PATH" */
static void name_of(char *dst, size_t cap, const char *what, const char *path)
{
    snprintf(dst, cap, "%s%s%s", what ? what : "", what ? " " : "", path);
}

int rt_open_input(const char *path, const char *what, int64_t *size, char *err, size_t errlen)
{
    char name[4200];
    name_of(name, sizeof name, what, path);
    /* O_NONBLOCK: opening a FIFO without a writer would wait forever */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        snprintf(err, errlen, "cannot open %s: %s", name, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file (%s)", name, kind_of(st.st_mode));
        close(fd);
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        snprintf(err, errlen, "cannot open %s: %s", name, strerror(errno));
        close(fd);
        return -1;
    }
    note_input(&st);
    if (size)
        *size = (int64_t)st.st_size;
    return fd;
}

/* ---- gzip framing ---------------------------------------------------------------- */

bool rt_gz_check(int fd, const char *path, int64_t max, char *err, size_t errlen)
{
    unsigned char magic[2];
    if (pread(fd, magic, 2, 0) != 2 || magic[0] != 0x1f || magic[1] != 0x8b)
        return true; /* not gzip: read as it is */
    enum { CHUNK = 1 << 16 };
    unsigned char *in = malloc(CHUNK), *out = malloc(CHUNK);
    z_stream z;
    memset(&z, 0, sizeof z);
    bool ok = in && out && inflateInit2(&z, 16 + MAX_WBITS) == Z_OK;
    if (!ok) {
        snprintf(err, errlen, "%s: out of memory", path);
        free(in);
        free(out);
        return false;
    }
    int64_t off = 0, total = 0; /* compressed bytes read, decompressed bytes */
    bool eof = false, member_done = false;
    for (;;) {
        if (z.avail_in == 0 && !eof) {
            ssize_t got = pread(fd, in, CHUNK, (off_t)off);
            if (got < 0 && errno == EINTR)
                continue;
            if (got < 0) {
                snprintf(err, errlen, "%s: read error at byte %lld: %s", path, (long long)off,
                         strerror(errno));
                ok = false;
                break;
            }
            eof = got == 0;
            off += got;
            z.next_in = in;
            z.avail_in = (uInt)got;
        }
        int64_t at = off - z.avail_in; /* compressed offset of the next byte */
        if (member_done) {
            if (z.avail_in == 0 && eof)
                break; /* the file ends right after a member */
            if (z.avail_in == 0)
                continue;
            if (z.next_in[0] != 0x1f || (z.avail_in > 1 && z.next_in[1] != 0x8b)) {
                snprintf(err, errlen, "%s: trailing data at byte %lld after the end of the gzip "
                         "stream (decompressed offset %lld)", path, (long long)at,
                         (long long)total);
                ok = false;
                break;
            }
            inflateReset(&z);
            member_done = false;
        }
        if (z.avail_in == 0 && eof) {
            snprintf(err, errlen, "%s: corrupt or truncated gzip data at byte %lld "
                     "(decompressed offset %lld): the compressed stream ends early", path,
                     (long long)at, (long long)total);
            ok = false;
            break;
        }
        z.next_out = out;
        z.avail_out = CHUNK;
        int rc = inflate(&z, Z_NO_FLUSH);
        total += CHUNK - z.avail_out;
        if (rc == Z_STREAM_END)
            member_done = true;
        else if (rc != Z_OK && rc != Z_BUF_ERROR) {
            snprintf(err, errlen, "%s: corrupt or truncated gzip data at byte %lld "
                     "(decompressed offset %lld): %s", path, (long long)(off - z.avail_in),
                     (long long)total, z.msg ? z.msg : "inflate error");
            ok = false;
            break;
        }
        if (total > max) {
            snprintf(err, errlen, "%s: decompresses to more than %lld bytes (at compressed byte "
                     "%lld): not this data set's file", path, (long long)max,
                     (long long)(off - z.avail_in));
            ok = false;
            break;
        }
    }
    inflateEnd(&z);
    free(in);
    free(out);
    return ok;
}

/* ---- outputs ------------------------------------------------------------------- */

bool rt_out_open(RtOutFile *o, const char *path, const char *what, char *err, size_t errlen)
{
    memset(o, 0, sizeof *o);
    struct stat st;
    bool exists = stat(path, &st) == 0;
    if (exists && is_input(&st)) {
        snprintf(err, errlen, "%s %s: this file is one of the run's inputs; refusing to "
                 "overwrite it", what, path);
        return false;
    }
    if (exists && S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "%s %s: is a directory", what, path);
        return false;
    }
    o->path = strdup(path);
    if (!o->path) {
        snprintf(err, errlen, "%s %s: out of memory", what, path);
        return false;
    }
    if (exists && !S_ISREG(st.st_mode)) {
        /* a device or FIFO: written in place, never renamed over */
        o->f = fopen(path, "wb");
        if (!o->f) {
            snprintf(err, errlen, "%s: cannot open %s: %s", what, path, strerror(errno));
            rt_out_abort(o);
            return false;
        }
        return true;
    }
    size_t n = strlen(path) + sizeof ".tmp.XXXXXX";
    o->tmp = malloc(n);
    if (!o->tmp) {
        snprintf(err, errlen, "%s %s: out of memory", what, path);
        rt_out_abort(o);
        return false;
    }
    snprintf(o->tmp, n, "%s.tmp.XXXXXX", path);
    int fd = mkstemp(o->tmp);
    if (fd < 0) {
        snprintf(err, errlen, "%s: cannot create a temporary file beside %s: %s", what, path,
                 strerror(errno));
        free(o->tmp);
        o->tmp = NULL; /* not created: nothing to remove */
        rt_out_abort(o);
        return false;
    }
    mode_t mask = umask(0);
    umask(mask);
    o->f = fdopen(fd, "wb");
    if (fchmod(fd, 0666 & ~mask) != 0 || !o->f) {
        snprintf(err, errlen, "%s: cannot write %s: %s", what, o->tmp, strerror(errno));
        if (!o->f)
            close(fd);
        rt_out_abort(o);
        return false;
    }
    return true;
}

/* fsync of the directory holding path (EINVAL: a file system without it) */
static bool sync_dir(const char *path)
{
    const char *slash = strrchr(path, '/');
    char dir[4096];
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == path)
        snprintf(dir, sizeof dir, "/");
    else if ((size_t)(slash - path) < sizeof dir)
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    else
        return true; /* too long to name here: the rename stands */
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return true; /* a directory we may not open (write-only): the rename stands */
    bool ok = fsync(fd) == 0 || errno == EINVAL;
    int e = errno;
    close(fd);
    errno = e;
    return ok;
}

bool rt_out_commit(RtOutFile *o, const char *what, char *err, size_t errlen)
{
    bool ok = fflush(o->f) == 0 && !ferror(o->f);
    int e = errno;
    if (ok && o->tmp && fsync(fileno(o->f)) != 0 && errno != EINVAL) {
        ok = false;
        e = errno;
    }
    if (fclose(o->f) != 0 && ok) {
        ok = false;
        e = errno;
    }
    o->f = NULL;
    if (ok && o->tmp && rename(o->tmp, o->path) != 0) {
        snprintf(err, errlen, "%s: cannot rename %s onto %s: %s", what, o->tmp, o->path,
                 strerror(errno));
        rt_out_abort(o);
        return false;
    }
    if (!ok) {
        snprintf(err, errlen, "%s: write error on %s: %s", what, o->path, strerror(e));
        rt_out_abort(o);
        return false;
    }
    if (o->tmp && !sync_dir(o->path)) { /* the rename made durable, as checkpoints do */
        snprintf(err, errlen, "%s: fsync of the directory of %s failed: %s", what, o->path,
                 strerror(errno));
        free(o->tmp);
        o->tmp = NULL; /* renamed: the file is there, only its durability is in doubt */
        rt_out_abort(o);
        return false;
    }
    free(o->tmp);
    o->tmp = NULL;
    rt_out_abort(o);
    return true;
}

void rt_out_abort(RtOutFile *o)
{
    if (o->f)
        fclose(o->f);
    if (o->tmp)
        unlink(o->tmp); /* ours: mkstemp created it */
    free(o->tmp);
    free(o->path);
    memset(o, 0, sizeof *o);
}
