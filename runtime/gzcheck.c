/* gzcheck.c - the whole-file check of gzip data before zlib reads it
 * (fileio.h): apart from fileio.c so that the file-safety module links
 * without zlib (ampc and im2rec link it). */
#include "fileio.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

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
                snprintf(err, errlen,
                         "%s: trailing data at byte %lld after the end of the gzip "
                         "stream (decompressed offset %lld)",
                         path, (long long)at, (long long)total);
                ok = false;
                break;
            }
            inflateReset(&z);
            member_done = false;
        }
        if (z.avail_in == 0 && eof) {
            snprintf(err, errlen,
                     "%s: corrupt or truncated gzip data at byte %lld "
                     "(decompressed offset %lld): the compressed stream ends early",
                     path, (long long)at, (long long)total);
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
            snprintf(err, errlen,
                     "%s: corrupt or truncated gzip data at byte %lld "
                     "(decompressed offset %lld): %s",
                     path, (long long)(off - z.avail_in), (long long)total,
                     z.msg ? z.msg : "inflate error");
            ok = false;
            break;
        }
        if (total > max) {
            snprintf(err, errlen,
                     "%s: decompresses to more than %lld bytes (at compressed byte "
                     "%lld): not this data set's file",
                     path, (long long)max, (long long)(off - z.avail_in));
            ok = false;
            break;
        }
    }
    inflateEnd(&z);
    free(in);
    free(out);
    return ok;
}
