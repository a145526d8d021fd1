/* provenance.c - what every dump and report says about how it was made
 * (docs/ci.md, "Provenance"): ampc's release version, the flags that change
 * what is compiled (never a path), the SHA-256 of the input's bytes (with
 * its imports, in the order they were read) and the target the flags
 * resolved to.  Never the git revision: only `ampc --version` prints that,
 * so a rebuild of the same release makes the same documents.
 *
 * JSON documents carry it as their "provenance" object; text dumps as one
 * `# provenance: {...}` line after the banner, which the readers skip. */
#include "driver.h"

#include <nettle/sha2.h>
#include <string.h>

/* The flags that change what is compiled, so what a dump or report holds.
 * Not here: how it is printed (--dump, --dump-format, --dump-ids,
 * --dump-dir, --report, --explain, --expect), where it goes (-o, -S, the
 * --emit-* files), --verify, --time-passes and --shuffle-seed (a test of
 * order independence: the output must not change with it). */
static const char *const output_flags[] = {
    "model",         "amp",       "amp-fp16",    "amp-fp32",   "amp-exclude",
    "amp-placement", "optimizer", "loss-scale",  "batch-size", "target",
    "kernels",       "no-fuse",   "fuse",        "no-schedule", "no-memplan",
    "no-inplace",    "kvstore",   "machine",     "devices",     "machines",
    "kv-bucket-mb",  "kv-wire",   "mpi",         "input-shape", "loss",
    NULL};

void provenance_note(Provenance *p, const char *flag, const char *arg)
{
    int k = 0;
    while (output_flags[k] && strcmp(output_flags[k], flag) != 0)
        k++;
    if (!output_flags[k])
        return;
    if (p->nflags == PROV_MAX_FLAGS)
        DIE("more than %d flags", PROV_MAX_FLAGS);
    char *s = p->flag_text[p->nflags++];
    /* --machine names a built-in machine or a file: a path is not recorded */
    bool path = strcmp(flag, "machine") == 0 && arg && strchr(arg, '/');
    if (arg && !path)
        snprintf(s, PROV_FLAG_LEN, "--%s=%s", flag, arg);
    else
        snprintf(s, PROV_FLAG_LEN, "--%s%s", flag, path ? "=FILE" : "");
}

void provenance_hash(Provenance *p, const Diag *d, int nfiles)
{
    struct sha256_ctx c;
    uint8_t digest[SHA256_DIGEST_SIZE];
    sha256_init(&c);
    for (int i = 0; i < nfiles && i < d->files.len; i++) {
        const SrcFile *f = diag_file(d, i);
        sha256_update(&c, f->len, (const uint8_t *)f->text);
    }
    sha256_digest(&c, sizeof digest, digest);
    for (int i = 0; i < SHA256_DIGEST_SIZE; i++)
        snprintf(p->sha256 + 2 * i, 3, "%02x", digest[i]);
    p->nfiles = nfiles;
}

/* The object's fields: one order, for the JSON documents and the line. */
static void fields(JsonW *w, const Provenance *p)
{
    jw_str(w, "ampc", AMPC_VERSION);
    jw_object_inline(w, "input");
    jw_str(w, "kind", p->input_kind ? p->input_kind : "model");
    jw_str(w, "sha256", p->sha256[0] ? p->sha256 : NULL);
    jw_int(w, "files", p->nfiles);
    jw_end_object(w);
    jw_array_inline(w, "flags");
    for (int i = 0; i < p->nflags; i++)
        jw_str(w, NULL, p->flag_text[i]);
    jw_end_array(w);
    jw_str(w, "target", target_name(p->target));
    jw_str(w, "kernels", target_name(p->kernels));
}

void provenance_json(JsonW *w, const Provenance *p)
{
    jw_object(w, "provenance");
    fields(w, p);
    jw_end_object(w);
}

void provenance_line(FILE *f, const Provenance *p)
{
    JsonW w;
    jw_init(&w, f);
    fputs("# provenance: ", f);
    jw_object_inline(&w, NULL); /* one line; the writer ends it */
    fields(&w, p);
    jw_end_object(&w);
}
