/* fileio.h - the one file-safety module: how ampc, the training programs and
 * tools/im2rec open what they read and write (runtime/fileio.c;
 * docs/training.md, "Files the program writes"; docs/codegen.md, "Output
 * files").  A leaf: it calls nothing but the C library, so the compiler and
 * im2rec link it without the rest of the runtime.
 *
 * Inputs (checkpoints, data files, list files, model files) are opened
 * without blocking and must be regular files: a FIFO would block the open
 * or the read forever and a device such as /dev/zero never ends.  Every
 * input opened or noted here joins the process's input list, so that an
 * output naming one of them (the same device and inode) is refused before
 * anything is written to it.
 *
 * Outputs: a regular file (or a new path) is written to a temporary file
 * beside it and renamed over it when complete; a symbolic link to a regular
 * file keeps the link and its target is replaced.  Nothing is ever renamed
 * over a file that is not regular.  A character or block device, or a FIFO
 * with a reader, is written in place (a FIFO without a reader is refused,
 * not waited for); a path into /proc (/dev/stdout, /dev/fd/N) is written in
 * place too.  The outputs of one run are checked against each other: two
 * that name one file would silently lose one of them.
 */
#ifndef AMPC_FILEIO_H
#define AMPC_FILEIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

/* ---- inputs ----------------------------------------------------------------- */

/* Opens path for reading (what: "checkpoint", ... for messages, or NULL).
 * Refuses anything that is not a regular file without blocking: open with
 * O_NONBLOCK, fstat, then O_NONBLOCK is cleared.  The file's size goes to
 * *size (may be NULL) and its identity to the input list.  Returns the
 * descriptor, or -1 with "cannot open [WHAT ]PATH: ..." or "[WHAT ]PATH:
 * not a regular file (a FIFO)" in err. */
int rt_open_input(const char *path, const char *what, int64_t *size, char *err, size_t errlen);

/* Notes an input read by other means (ampc's model files, after they are
 * loaded): its identity joins the list.  False when path does not exist. */
bool rt_note_input(const char *path);
/* Forgets the inputs noted so far and frees the list (the start of a run,
 * the end of ampc). */
void rt_inputs_reset(void);
/* True when path names (after symbolic links) one of the noted inputs. */
bool rt_is_input(const char *path);
/* What a file of mode m is, for messages: "a FIFO", "a character device". */
const char *rt_file_kind(mode_t m);

/* ---- outputs ------------------------------------------------------------------ */

/* An output file being written. */
typedef struct {
    FILE *f;     /* rt_out_open's stream (NULL after rt_out_reserve) */
    char *path;  /* the file replaced: the path, or its link's target */
    char *tmp;   /* the temporary file beside it; NULL when written in place */
    mode_t mode; /* the mode the file gets when renamed into place */
} RtOutFile;

/* Opens path for writing (what names the flag for messages, e.g.
 * "--dump-state").  Refused: a path that is one of the inputs, a directory,
 * a FIFO without a reader, a socket.  A device, a FIFO or a path into /proc
 * is opened in place; anything else goes to a temporary file until
 * rt_out_commit (a new file gets 0666 less the umask, a replaced one keeps
 * its mode).  False with "WHAT PATH: ..." in err. */
bool rt_out_open(RtOutFile *o, const char *path, const char *what, char *err, size_t errlen);
/* The same for a file another program writes (the C compiler's -o): no
 * stream; the writer writes rt_out_where(o), the temporary file (created,
 * empty) or, in place, the path itself.  mode: what the file gets, less
 * the umask (a program: 0777, as cc gives it, also when one is replaced). */
bool rt_out_reserve(RtOutFile *o, const char *path, const char *what, mode_t mode, char *err,
                    size_t errlen);
const char *rt_out_where(const RtOutFile *o);
/* Flushes and checks every write; a temporary file is fsynced, closed and
 * renamed over the path (refused if the path has meanwhile become anything
 * but a regular file), and the directory fsynced.  On failure the temporary
 * file is removed (only it: a file this process did not create is never
 * deleted). */
bool rt_out_commit(RtOutFile *o, const char *what, char *err, size_t errlen);
/* Closes without committing: removes the temporary file, if any. */
void rt_out_abort(RtOutFile *o);
/* From now on SIGINT, SIGTERM and SIGHUP remove every temporary file an
 * RtOutFile of this process holds, then end the process as the signal
 * would (im2rec: a killed run leaves nothing behind). */
void rt_out_remove_on_signal(void);

/* Whether the n outputs of one run name n different files: by device and
 * inode where a file exists, else by the nearest existing directory's
 * device and inode plus the rest of the path.  Character devices (the null
 * device) may be named by several.  NULL paths are skipped.  False with
 * "WHAT1 A and WHAT2 B name the same file" in err. */
bool rt_outputs_distinct(const char *const *paths, const char *const *whats, int n, char *err,
                         size_t errlen);

/* ---- gzcheck.c: gzip framing ----------------------------------------------------- */

/* When fd (at offset 0) starts with the gzip magic number, checks the
 * whole compressed file: every member complete and well formed, nothing
 * but further gzip members after the first, at most max decompressed
 * bytes.  zlib's gzread would silently ignore trailing bytes and stop at a
 * truncation without saying where.  A file without the magic number
 * passes.  The descriptor is read with pread (its offset is unchanged).
 * False with "PATH: ..." and the byte offset (compressed) in err. */
bool rt_gz_check(int fd, const char *path, int64_t max, char *err, size_t errlen);

/* ---- checkpoint.c: the files of a save directory ---------------------------- */

/* Removes from dir the temporary files of interrupted checkpoint saves of
 * this model: regular files named exactly "<model>-NNNN.ckpt.tmp.XXXXXX"
 * (or -stepNNNNNN, or the old .params)
 * (rt_checkpoint_save's mkstemp pattern), nothing else.  Each is noted on
 * note.  Returns how many. */
int rt_checkpoint_clean_stale(const char *dir, const char *model, FILE *note, const char *prog);

#endif /* AMPC_FILEIO_H */
