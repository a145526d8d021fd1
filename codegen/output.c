/* output.c - the files `ampc -S` and `ampc -o` write, through the one
 * file-safety module the programs and im2rec use too (runtime/fileio.c;
 * docs/codegen.md, "Output files"):
 *
 *   - an output that is one of the inputs (the model, an import, a --from-ir
 *     dump: the same device and inode) is refused before anything is written;
 *   - a regular file, or a path that does not exist yet, is written to a
 *     temporary file beside it and renamed over it only when everything
 *     succeeded (a symbolic link to a regular file keeps the link, its
 *     target is replaced); nothing is ever renamed over a file that is not
 *     regular;
 *   - a device, a FIFO with a reader, /dev/stdout and the other links into
 *     /proc/self/fd are written in place;
 *   - the intermediate C file of -o lives in a private temporary directory;
 *     ampc removes only the temporary files it created. */
#include "codegen.h"
#include "../runtime/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Every file read into d joins the file-safety module's inputs. */
static void note_inputs(Diag *d)
{
    for (int i = 0; i < d->files.len; i++)
        rt_note_input(diag_file(d, i)->path);
}

bool cg_output_is_input(Diag *d, const char *out)
{
    struct stat o;
    note_inputs(d);
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

static bool write_file(Diag *d, const char *path, const char *data, size_t len);

bool cg_write_file(Diag *d, const char *path, const char *data, size_t len)
{
    return !cg_output_is_input(d, path) && write_file(d, path, data, len);
}

bool cg_rewrite_file(Diag *d, const char *path, const char *data, size_t len)
{
    return write_file(d, path, data, len);
}

static bool write_file(Diag *d, const char *path, const char *data, size_t len)
{
    RtOutFile out;
    char err[PATH_MAX + 256];
    if (!rt_out_open(&out, path, "output file", err, sizeof err)) {
        diag_plain_error(d, "%s", err);
        return false;
    }
    if (len && fwrite(data, 1, len, out.f) != len) {
        diag_plain_error(d, "cannot write '%s': %s", path, strerror(errno));
        rt_out_abort(&out);
        return false;
    }
    if (!rt_out_commit(&out, "output file", err, sizeof err)) {
        diag_plain_error(d, "%s", err);
        return false;
    }
    return true;
}

bool cg_build_program(Diag *d, const char *c_text, size_t len, const char *exe, const char *argv0)
{
    if (cg_output_is_input(d, exe))
        return false;
    /* the program: beside its final path, renamed into place on success
     * (the mode cc gives a new program: 0777 less the umask), or a device
     * written in place */
    RtOutFile out;
    char err[PATH_MAX + 256];
    if (!rt_out_reserve(&out, exe, "program", 0777, err, sizeof err)) {
        diag_plain_error(d, "%s", err);
        return false;
    }
    /* the C file: in a private directory, so no file of the user's is touched */
    const char *tmpdir = getenv("TMPDIR");
    char dir[PATH_MAX], cfile[PATH_MAX + 16];
    if (!tmpdir || !*tmpdir || snprintf(dir, sizeof dir, "%s/ampc.XXXXXX", tmpdir) >= (int)sizeof dir)
        snprintf(dir, sizeof dir, "/tmp/ampc.XXXXXX");
    if (!mkdtemp(dir)) {
        diag_plain_error(d, "cannot create a temporary directory '%s': %s", dir, strerror(errno));
        rt_out_abort(&out);
        return false;
    }
    snprintf(cfile, sizeof cfile, "%s/program.c", dir);
    bool ok = false;
    int fd = open(cfile, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 || !write_all(fd, c_text, len) || close(fd) != 0) {
        diag_plain_error(d, "cannot write '%s': %s", cfile, strerror(errno));
        if (fd >= 0)
            close(fd);
    } else {
        ok = cg_build(d, cfile, rt_out_where(&out), argv0);
    }
    if (ok && !rt_out_commit(&out, "program", err, sizeof err)) {
        diag_plain_error(d, "%s", err);
        ok = false;
    }
    if (!ok)
        rt_out_abort(&out); /* ours (or the compiler's copy of it) */
    unlink(cfile);
    rmdir(dir);
    return ok;
}
