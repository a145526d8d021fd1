/* output.c - the files `ampc -S` and `ampc -o` write, written so that no
 * failure destroys anything (docs/codegen.md, "Output files"):
 *
 *   - an output that is one of the inputs (the model, an import, a --from-ir
 *     dump: the same device and inode) is refused before anything is written;
 *   - a regular file, or a path that does not exist yet, is written to a
 *     temporary file beside it (same directory, so the rename is atomic) and
 *     renamed over it only when everything succeeded; a symbolic link to a
 *     regular file is resolved first, so the link stays and its target is
 *     replaced;
 *   - anything else (a device, a FIFO, /dev/stdout and the other links into
 *     /proc/self/fd) is written directly and never renamed over, so a device
 *     node is never replaced by a regular file;
 *   - the intermediate C file of -o lives in a private temporary directory;
 *     ampc removes only the temporary files it created. */
#include "codegen.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

bool cg_output_is_input(Diag *d, const char *out)
{
    struct stat o;
    if (stat(out, &o) != 0)
        return false; /* a new path is no input */
    for (int i = 0; i < d->files.len; i++) {
        const SrcFile *f = diag_file(d, i);
        struct stat s;
        if (stat(f->path, &s) == 0 && s.st_dev == o.st_dev && s.st_ino == o.st_ino) {
            diag_plain_error(d, "refusing to write '%s': it is the input '%s'", out, f->path);
            return true;
        }
    }
    return false;
}

/* Whether path must be written in place: it exists and is not a regular
 * file, or it names a descriptor of this process (/proc/self/fd/N, or a link
 * into /proc such as /dev/stdout), where a rename would replace the link. */
static bool write_in_place(const char *path)
{
    struct stat st, lst;
    if (strncmp(path, "/proc/", 6) == 0)
        return true;
    if (lstat(path, &lst) == 0 && S_ISLNK(lst.st_mode)) {
        char target[PATH_MAX];
        ssize_t n = readlink(path, target, sizeof target - 1);
        if (n > 0 && (target[n] = 0, strncmp(target, "/proc/", 6) == 0))
            return true;
        if (stat(path, &st) != 0)
            return true; /* a dangling link: write through it */
    }
    return stat(path, &st) == 0 && !S_ISREG(st.st_mode);
}

/* A temporary file in the directory of path (made 0600 by mkstemp); its
 * name goes to tmp.  -1 and errno on failure. */
static int temp_beside(const char *path, char *tmp, size_t cap)
{
    const char *slash = strrchr(path, '/');
    int dirlen = slash ? (int)(slash - path) + 1 : 0;
    if (snprintf(tmp, cap, "%.*s.ampc-tmp.XXXXXX", dirlen, path) >= (int)cap) {
        errno = ENAMETOOLONG;
        return -1;
    }
    return mkstemp(tmp);
}

static bool write_all(int fd, const char *data, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, data, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        data += n, len -= (size_t)n;
    }
    return true;
}

/* The file the output replaces: path, or a symbolic link's target. */
static bool resolve(Diag *d, const char *path, char *out, size_t cap)
{
    struct stat lst;
    if (lstat(path, &lst) == 0 && S_ISLNK(lst.st_mode)) {
        char buf[PATH_MAX];
        if (!realpath(path, buf) || strlen(buf) >= cap) {
            diag_plain_error(d, "cannot write '%s': %s", path, strerror(errno ? errno : ENAMETOOLONG));
            return false;
        }
        memcpy(out, buf, strlen(buf) + 1);
        return true;
    }
    if (strlen(path) >= cap) {
        diag_plain_error(d, "cannot write '%s': %s", path, strerror(ENAMETOOLONG));
        return false;
    }
    memcpy(out, path, strlen(path) + 1);
    return true;
}

static mode_t new_file_mode(const char *path, mode_t dflt)
{
    struct stat st;
    if (stat(path, &st) == 0)
        return st.st_mode & 07777;
    mode_t mask = umask(0);
    umask(mask);
    return dflt & ~mask;
}

static bool is_directory(Diag *d, const char *path)
{
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        diag_plain_error(d, "cannot write '%s': it is a directory", path);
        return true;
    }
    return false;
}

bool cg_write_file(Diag *d, const char *path, const char *data, size_t len)
{
    if (cg_output_is_input(d, path) || is_directory(d, path))
        return false;
    if (write_in_place(path)) {
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOCTTY | O_CLOEXEC, 0666);
        bool ok = fd >= 0 && write_all(fd, data, len);
        int err = errno;
        if (fd >= 0 && close(fd) != 0 && ok)
            ok = false, err = errno;
        if (!ok)
            diag_plain_error(d, "cannot write '%s': %s", path, strerror(err));
        return ok;
    }
    char target[PATH_MAX], tmp[PATH_MAX + 32];
    if (!resolve(d, path, target, sizeof target))
        return false;
    int fd = temp_beside(target, tmp, sizeof tmp);
    if (fd < 0) {
        diag_plain_error(d, "cannot write '%s': %s", path, strerror(errno));
        return false;
    }
    bool ok = fchmod(fd, new_file_mode(target, 0666)) == 0 && write_all(fd, data, len);
    int err = errno;
    if (close(fd) != 0 && ok)
        ok = false, err = errno;
    if (ok && rename(tmp, target) != 0)
        ok = false, err = errno;
    if (!ok) {
        unlink(tmp); /* ours: mkstemp made it */
        diag_plain_error(d, "cannot write '%s': %s", path, strerror(err));
    }
    return ok;
}

bool cg_build_program(Diag *d, const char *c_text, size_t len, const char *exe, const char *argv0)
{
    if (cg_output_is_input(d, exe) || is_directory(d, exe))
        return false;
    /* the C file: in a private directory, so no file of the user's is touched */
    const char *tmpdir = getenv("TMPDIR");
    char dir[PATH_MAX], cfile[PATH_MAX + 16];
    if (!tmpdir || !*tmpdir || snprintf(dir, sizeof dir, "%s/ampc.XXXXXX", tmpdir) >= (int)sizeof dir)
        snprintf(dir, sizeof dir, "/tmp/ampc.XXXXXX");
    if (!mkdtemp(dir)) {
        diag_plain_error(d, "cannot create a temporary directory '%s': %s", dir, strerror(errno));
        return false;
    }
    snprintf(cfile, sizeof cfile, "%s/program.c", dir);
    bool ok = false;
    int fd = open(cfile, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 || !write_all(fd, c_text, len) || close(fd) != 0) {
        diag_plain_error(d, "cannot write '%s': %s", cfile, strerror(errno));
        if (fd >= 0)
            close(fd);
    } else if (write_in_place(exe)) {
        ok = cg_build(d, cfile, exe, argv0);
    } else {
        /* the program: beside its final path, renamed into place on success */
        char target[PATH_MAX], tmp[PATH_MAX + 32];
        int tfd = resolve(d, exe, target, sizeof target) ? temp_beside(target, tmp, sizeof tmp) : -2;
        if (tfd == -1)
            diag_plain_error(d, "cannot write '%s': %s", exe, strerror(errno));
        if (tfd >= 0) {
            close(tfd);
            ok = cg_build(d, cfile, tmp, argv0);
            /* the mode cc gives a new program, not mkstemp's 0600 */
            if (ok && (chmod(tmp, new_file_mode("", 0777)) != 0 || rename(tmp, target) != 0)) {
                diag_plain_error(d, "cannot write '%s': %s", exe, strerror(errno));
                ok = false;
            }
            if (!ok)
                unlink(tmp); /* ours (or the compiler's copy of it) */
        }
    }
    unlink(cfile);
    rmdir(dir);
    return ok;
}
