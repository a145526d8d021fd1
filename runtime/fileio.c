/* fileio.c - the one file-safety module (fileio.h): the inputs of a run,
 * outputs that never destroy a file, and the check that no two outputs of a
 * run name one file.  Serves ampc (codegen/output.c), the training programs
 * and tools/im2rec. */
#include "fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- the inputs ------------------------------------------------------------------- */

typedef struct {
    dev_t dev;
    ino_t ino;
} FileId;

static FileId *inputs;
static int ninputs, cap_inputs;
static bool inputs_lost; /* out of memory noting one: every output is refused */

void rt_inputs_reset(void)
{
    free(inputs);
    inputs = NULL;
    ninputs = cap_inputs = 0;
    inputs_lost = false;
}

static void note_input(const struct stat *st)
{
    for (int i = 0; i < ninputs; i++)
        if (inputs[i].dev == st->st_dev && inputs[i].ino == st->st_ino)
            return;
    if (ninputs == cap_inputs) {
        int cap = cap_inputs ? 2 * cap_inputs : 16;
        FileId *p = cap > 0 ? realloc(inputs, sizeof *p * (size_t)cap) : NULL;
        if (!p) {
            inputs_lost = true;
            return;
        }
        inputs = p;
        cap_inputs = cap;
    }
    inputs[ninputs++] = (FileId){st->st_dev, st->st_ino};
}

static bool is_input(const struct stat *st)
{
    for (int i = 0; i < ninputs; i++)
        if (inputs[i].dev == st->st_dev && inputs[i].ino == st->st_ino)
            return true;
    return inputs_lost;
}

bool rt_note_input(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return false;
    note_input(&st);
    return true;
}

bool rt_is_input(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && is_input(&st);
}

const char *rt_file_kind(mode_t m)
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
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        snprintf(err, errlen, "cannot open %s: %s", name, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file (%s)", name, rt_file_kind(st.st_mode));
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

/* ---- the temporary files a signal removes ---------------------------------------- */

enum { MAX_LIVE = 16 };
static char *volatile live_tmp[MAX_LIVE]; /* what the handler unlinks */

static void live_add(char *tmp)
{
    for (int i = 0; i < MAX_LIVE; i++)
        if (!live_tmp[i]) {
            live_tmp[i] = tmp;
            return;
        }
}

static void live_remove(const char *tmp)
{
    for (int i = 0; i < MAX_LIVE; i++)
        if (live_tmp[i] == tmp)
            live_tmp[i] = NULL;
}

static void on_signal(int sig)
{
    for (int i = 0; i < MAX_LIVE; i++)
        if (live_tmp[i])
            unlink(live_tmp[i]); /* async-signal-safe */
    signal(sig, SIG_DFL);
    raise(sig);
}

void rt_out_remove_on_signal(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
}

/* ---- outputs ------------------------------------------------------------------- */

/* Whether path must be written in place: a path into /proc or a link into
 * it (/dev/stdout: a rename would replace the link), a dangling link
 * (written through), or an existing file that is not regular. */
static bool in_place(const char *path, const struct stat *st, bool exists)
{
    struct stat lst;
    if (strncmp(path, "/proc/", 6) == 0)
        return true;
    if (lstat(path, &lst) == 0 && S_ISLNK(lst.st_mode)) {
        char target[PATH_MAX];
        ssize_t n = readlink(path, target, sizeof target - 1);
        if (n > 0 && (target[n] = 0, strncmp(target, "/proc/", 6) == 0))
            return true;
        if (!exists)
            return true;
    }
    return exists && !S_ISREG(st->st_mode);
}

/* The file the output replaces: path, or its symbolic link's target. */
static char *replaced_file(const char *path)
{
    struct stat lst;
    if (lstat(path, &lst) == 0 && S_ISLNK(lst.st_mode))
        return realpath(path, NULL);
    return strdup(path);
}

/* A temporary file beside target, made 0600 by mkstemp: TARGET.tmp.XXXXXX,
 * or DIR/.ampc.tmp.XXXXXX when that name would be too long. */
static int temp_beside(const char *target, char **tmp)
{
    const char *slash = strrchr(target, '/');
    const char *base = slash ? slash + 1 : target;
    int dirlen = slash ? (int)(slash - target) + 1 : 0;
    size_t n = strlen(target) + 32;
    if (!(*tmp = malloc(n)))
        return errno = ENOMEM, -1;
    /* "./" before a bare name: a name such as "-lead" is never taken for a
     * flag by the program that writes it (cc -o) */
    const char *here = slash ? "" : "./";
    if (strlen(base) + 11 <= NAME_MAX)
        snprintf(*tmp, n, "%s%s.tmp.XXXXXX", here, target);
    else
        snprintf(*tmp, n, "%s%.*s.ampc.tmp.XXXXXX", here, dirlen, target);
    /* registered before it exists: a signal between mkstemp's creating the
     * file and a later registration would leave it behind (a SIGTERM sent
     * as soon as a first temporary file appears lands there); before,
     * the handler at worst unlinks a name nothing has yet */
    live_add(*tmp);
    int fd = mkstemp(*tmp);
    if (fd < 0) {
        int e = errno;
        live_remove(*tmp);
        free(*tmp);
        *tmp = NULL;
        errno = e;
    }
    return fd;
}

/* An existing file's mode (when keep), else dflt less the umask. */
static mode_t new_mode(const char *path, mode_t dflt, bool keep)
{
    struct stat st;
    if (keep && stat(path, &st) == 0 && S_ISREG(st.st_mode))
        return st.st_mode & 07777;
    mode_t mask = umask(0);
    umask(mask);
    return dflt & ~mask;
}

/* What every output must pass: not an input, not a directory.  *st and
 * *exists describe the path (links followed). */
static bool out_allowed(const char *path, const char *what, struct stat *st, bool *exists,
                        char *err, size_t errlen)
{
    *exists = stat(path, st) == 0;
    if (*exists && is_input(st)) {
        snprintf(err, errlen, "%s %s: this file is one of the run's inputs; refusing to "
                 "overwrite it", what, path);
        return false;
    }
    if (*exists && S_ISDIR(st->st_mode)) {
        snprintf(err, errlen, "%s %s: it is a directory", what, path);
        return false;
    }
    return true;
}

/* Opens a device, a FIFO or a /proc path in place, without waiting for a
 * FIFO's reader.  The descriptor, or -1 with a message. */
static int open_in_place(const char *path, const char *what, char *err, size_t errlen)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, 0666);
    if (fd < 0) {
        if (errno == ENXIO)
            snprintf(err, errlen, "%s %s: a FIFO with no reader (or a socket): refusing to wait "
                     "for one", what, path);
        else
            snprintf(err, errlen, "%s: cannot open %s: %s", what, path, strerror(errno));
        return -1;
    }
    struct stat st;
    int fl = fcntl(fd, F_GETFL);
    if (fstat(fd, &st) != 0 || fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0 ||
        (S_ISREG(st.st_mode) && ftruncate(fd, 0) != 0)) {
        snprintf(err, errlen, "%s: cannot open %s: %s", what, path, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

/* The temporary file beside path's target (o->path, o->tmp set; keep: a
 * replaced file's mode is kept); its descriptor, or -1 with a message. */
static int open_temp(RtOutFile *o, const char *path, const char *what, mode_t dflt, bool keep,
                     char *err, size_t errlen)
{
    if (!(o->path = replaced_file(path))) {
        snprintf(err, errlen, "%s: cannot write %s: %s", what, path, strerror(errno));
        return -1;
    }
    o->mode = new_mode(o->path, dflt, keep);
    int fd = temp_beside(o->path, &o->tmp);
    if (fd < 0) {
        snprintf(err, errlen, "%s: cannot create a temporary file beside %s: %s", what, path,
                 strerror(errno));
        return -1;
    }
    return fd;
}

static bool out_start(RtOutFile *o, const char *path, const char *what, mode_t dflt, bool stream,
                      char *err, size_t errlen)
{
    memset(o, 0, sizeof *o);
    struct stat st;
    bool exists;
    if (!out_allowed(path, what, &st, &exists, err, errlen))
        return false;
    int fd;
    if (in_place(path, &st, exists)) {
        if (!(o->path = strdup(path))) {
            snprintf(err, errlen, "%s %s: out of memory", what, path);
            return false;
        }
        if (!stream) /* the writer opens it itself */
            return true;
        fd = open_in_place(path, what, err, errlen);
    } else {
        fd = open_temp(o, path, what, dflt, stream, err, errlen);
        if (fd >= 0 && !stream) {
            close(fd);
            return true;
        }
        if (fd >= 0 && fchmod(fd, o->mode) != 0) {
            snprintf(err, errlen, "%s: cannot write %s: %s", what, o->tmp, strerror(errno));
            close(fd);
            fd = -1;
        }
    }
    if (fd >= 0 && !(o->f = fdopen(fd, "wb"))) {
        snprintf(err, errlen, "%s: cannot write %s: %s", what, path, strerror(errno));
        close(fd);
    }
    if (!o->f) {
        rt_out_abort(o);
        return false;
    }
    return true;
}

bool rt_out_open(RtOutFile *o, const char *path, const char *what, char *err, size_t errlen)
{
    return out_start(o, path, what, 0666, true, err, errlen);
}

bool rt_out_reserve(RtOutFile *o, const char *path, const char *what, mode_t mode, char *err,
                    size_t errlen)
{
    return out_start(o, path, what, mode, false, err, errlen);
}

const char *rt_out_where(const RtOutFile *o) { return o->tmp ? o->tmp : o->path; }

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

/* The temporary file made durable and renamed over o->path, which must
 * still be a regular file or absent. */
static bool replace(RtOutFile *o, const char *what, char *err, size_t errlen)
{
    struct stat st;
    if (lstat(o->path, &st) == 0 && !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s %s: it became %s while being written: never renamed over",
                 what, o->path, rt_file_kind(st.st_mode));
        return false;
    }
    if (chmod(o->tmp, o->mode) != 0 || rename(o->tmp, o->path) != 0) {
        snprintf(err, errlen, "%s: cannot rename %s onto %s: %s", what, o->tmp, o->path,
                 strerror(errno));
        return false;
    }
    live_remove(o->tmp);
    free(o->tmp);
    o->tmp = NULL; /* renamed: nothing to remove */
    if (!sync_dir(o->path)) { /* the rename made durable, as checkpoints do */
        snprintf(err, errlen, "%s: fsync of the directory of %s failed: %s", what, o->path,
                 strerror(errno));
        return false;
    }
    return true;
}

bool rt_out_commit(RtOutFile *o, const char *what, char *err, size_t errlen)
{
    bool ok = true;
    int e = 0;
    if (o->f) {
        ok = fflush(o->f) == 0 && !ferror(o->f);
        e = errno;
        if (ok && o->tmp && fsync(fileno(o->f)) != 0 && errno != EINVAL) {
            ok = false;
            e = errno;
        }
        if (fclose(o->f) != 0 && ok) {
            ok = false;
            e = errno;
        }
        o->f = NULL;
    }
    if (!ok)
        snprintf(err, errlen, "%s: write error on %s: %s", what, o->path, strerror(e));
    ok = ok && (!o->tmp || replace(o, what, err, errlen));
    rt_out_abort(o);
    return ok;
}

void rt_out_abort(RtOutFile *o)
{
    if (o->f)
        fclose(o->f);
    if (o->tmp) {
        unlink(o->tmp); /* ours: mkstemp created it */
        live_remove(o->tmp);
    }
    free(o->tmp);
    free(o->path);
    memset(o, 0, sizeof *o);
}

/* ---- several outputs of one run ----------------------------------------------------- */

/* Where an output lands: an existing file's identity; else the nearest
 * existing ancestor directory's identity and the rest of the path. */
typedef struct {
    FileId id;
    char rest[PATH_MAX];
    bool chardev; /* may be named by several outputs */
} OutId;

static void out_id(const char *path, OutId *o)
{
    memset(o, 0, sizeof *o);
    char cur[PATH_MAX];
    snprintf(cur, sizeof cur, "%s", path);
    for (;;) {
        struct stat st;
        if (stat(cur[0] ? cur : ".", &st) == 0) {
            o->id = (FileId){st.st_dev, st.st_ino};
            o->chardev = !o->rest[0] && S_ISCHR(st.st_mode);
            return;
        }
        /* the last component joins the rest */
        size_t n = strlen(cur);
        while (n > 1 && cur[n - 1] == '/')
            cur[--n] = 0;
        char *slash = strrchr(cur, '/');
        const char *base = slash ? slash + 1 : cur;
        char rest[PATH_MAX];
        if (strcmp(base, ".") == 0) /* "a/./b" is "a/b" */
            snprintf(rest, sizeof rest, "%s", o->rest);
        else if (snprintf(rest, sizeof rest, "%s%s%s", base, o->rest[0] ? "/" : "", o->rest) >=
            (int)sizeof rest)
            rest[sizeof rest - 1] = 0; /* longer than a path: compared as far as it fits */
        memcpy(o->rest, rest, sizeof rest);
        if (!slash)
            cur[0] = 0; /* the current directory */
        else if (slash == cur)
            cur[1] = 0; /* "/" */
        else
            *slash = 0;
    }
}

bool rt_outputs_distinct(const char *const *paths, const char *const *whats, int n, char *err,
                         size_t errlen)
{
    OutId *ids = n > 0 ? calloc((size_t)n, sizeof *ids) : NULL;
    if (n > 0 && !ids) {
        snprintf(err, errlen, "out of memory checking the outputs");
        return false;
    }
    bool ok = true;
    for (int i = 0; ok && i < n; i++) {
        if (!paths[i])
            continue;
        out_id(paths[i], &ids[i]);
        for (int j = 0; ok && j < i; j++)
            if (paths[j] && !ids[i].chardev && ids[i].id.dev == ids[j].id.dev &&
                ids[i].id.ino == ids[j].id.ino && strcmp(ids[i].rest, ids[j].rest) == 0) {
                snprintf(err, errlen, "%s %s and %s %s name the same file: one would be lost",
                         whats[j], paths[j], whats[i], paths[i]);
                ok = false;
            }
    }
    free(ids);
    return ok;
}
