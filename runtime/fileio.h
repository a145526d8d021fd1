/* fileio.h - how the training program opens what it reads and writes
 * (runtime/fileio.c; docs/training.md, Files).
 *
 * Inputs (checkpoints, data files) are opened without blocking and must be
 * regular files: a FIFO would block the open or the read forever and a
 * device such as /dev/zero never ends.  Every input opened here is noted in
 * the run's input list, so that an output naming one of them (the same
 * device and inode) is refused before anything is written to it.
 *
 * Outputs: a regular file (or a new path) is written to a temporary file
 * beside it and renamed over it when complete; a device or a FIFO (for
 * example /dev/stdout) is written directly and never renamed over.
 */
#ifndef AMPC_FILEIO_H
#define AMPC_FILEIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Opens path for reading (what: "checkpoint", ... for messages, or NULL).  Refuses anything that is not a regular file without
 * blocking: open with O_NONBLOCK, fstat, then O_NONBLOCK is cleared.  The
 * file's size goes to *size (may be NULL) and its identity to the input
 * list.  Returns the descriptor, or -1 with "cannot open [WHAT ]PATH: ..." or
 * "[WHAT ]PATH: not a regular file (a FIFO)" in err. */
int rt_open_input(const char *path, const char *what, int64_t *size, char *err, size_t errlen);

/* Forgets the inputs noted so far (the start of a run). */
void rt_inputs_reset(void);
/* True when path names (after symbolic links) one of the noted inputs. */
bool rt_is_input(const char *path);

/* When fd (at offset 0) starts with the gzip magic number, checks the
 * whole compressed file: every member complete and well formed, nothing
 * but further gzip members after the first, at most max decompressed
 * bytes.  zlib's gzread would silently ignore trailing bytes and stop at a
 * truncation without saying where.  A file without the magic number
 * passes.  The descriptor is read with pread (its offset is unchanged).
 * False with "PATH: ..." and the byte offset (compressed) in err. */
bool rt_gz_check(int fd, const char *path, int64_t max, char *err, size_t errlen);

/* An output file being written. */
typedef struct {
    FILE *f;
    char *path;
    char *tmp;   /* the temporary file beside path; NULL when written directly */
} RtOutFile;

/* Opens path for writing (what names the flag for messages, e.g.
 * "--dump-state").  Refused: a path that is one of the run's inputs, a
 * directory.  A device, FIFO or socket is opened directly; anything else
 * goes to PATH.tmp.XXXXXX until rt_out_commit. */
bool rt_out_open(RtOutFile *o, const char *path, const char *what, char *err, size_t errlen);
/* Flushes and checks every write; a temporary file is fsynced, closed and
 * renamed over the path, and the directory fsynced (checkpoint.c's way).  On failure the temporary file is removed (only
 * it: a file the program did not create is never deleted). */
bool rt_out_commit(RtOutFile *o, const char *what, char *err, size_t errlen);
/* Closes without committing: removes the temporary file, if any. */
void rt_out_abort(RtOutFile *o);

/* ---- checkpoint.c: the files of a save directory ---------------------------- */

/* Removes from dir the temporary files of interrupted checkpoint saves of
 * this model: regular files named exactly "<model>-NNNN.params.tmp.XXXXXX"
 * (rt_checkpoint_save's mkstemp pattern), nothing else.  Each is noted on
 * note.  Returns how many. */
int rt_checkpoint_clean_stale(const char *dir, const char *model, FILE *note, const char *prog);

#endif /* AMPC_FILEIO_H */
