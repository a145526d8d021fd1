/* calibrate.c - --calibrate PROFILE: reads the per-call profile a run of
 * the program wrote (its --json-log's {"event":"profile", ..., "calls":
 * [{"name", "op", "pass", "dtype", "ms"}, ...]} record, runtime/hooks.c)
 * for the GPU cost model's fit (passes/gpucost.c, gpucost_fit).
 *
 * The file is JSON Lines, or any log holding such lines (the first-run
 * kit's rows keep the record among other output): a line that starts with
 * '{' must be one JSON object; other lines are skipped.  The last profile
 * record counts; the last start event gives the batch ("batch_size"). */
#include "driver.h"

#include <json-c/json.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static bool fail(Diag *d, int file, int line, const char *what)
{
    Loc l = {file, line, 1};
    diag_error(d, l, "--calibrate: %s", what);
    return false;
}

static const char *str_of(json_object *o, const char *key)
{
    json_object *v;
    return json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_string)
               ? json_object_get_string(v)
               : NULL;
}

/* the record's calls into p (names copied) */
static bool read_calls(Diag *d, int file, int line, json_object *calls, Profile *p)
{
    if (!json_object_is_type(calls, json_type_array))
        return fail(d, file, line, "the profile record's \"calls\" is not an array");
    size_t n = json_object_array_length(calls);
    profile_free(p);
    p->calls = calloc(n + 1, sizeof *p->calls);
    if (!p->calls)
        DIE("out of memory");
    for (size_t i = 0; i < n; i++) {
        json_object *c = json_object_array_get_idx(calls, i), *ms;
        const char *name = c ? str_of(c, "name") : NULL;
        if (!name || !json_object_object_get_ex(c, "ms", &ms) ||
            !(json_object_is_type(ms, json_type_double) || json_object_is_type(ms, json_type_int)))
            return fail(d, file, line,
                        "a call of the profile record lacks a \"name\" string or an "
                        "\"ms\" number");
        double v = json_object_get_double(ms);
        if (!isfinite(v) || v < 0)
            return fail(d, file, line, "a call's \"ms\" is not a finite time >= 0");
        p->calls[p->ncalls].name = strdup(name);
        if (!p->calls[p->ncalls].name)
            DIE("out of memory");
        p->calls[p->ncalls++].ms = v;
    }
    return true;
}

static double number_of(json_object *o, const char *key)
{
    json_object *v;
    if (!json_object_object_get_ex(o, key, &v) ||
        !(json_object_is_type(v, json_type_double) || json_object_is_type(v, json_type_int)))
        return -1;
    double x = json_object_get_double(v);
    return isfinite(x) && x >= 0 ? x : -1;
}

/* the record's phases_ms that no call covers: the check and the update,
 * the moving statistics (runtime/hooks.c's phase keys) */
static void read_phases(json_object *o, GcPhases *ph)
{
    json_object *p;
    ph->optimizer_ms = ph->moving_ms = -1;
    if (!json_object_object_get_ex(o, "phases_ms", &p) || !json_object_is_type(p, json_type_object))
        return;
    double check = number_of(p, "loss_scale_check"), opt = number_of(p, "optimizer");
    ph->optimizer_ms = check >= 0 && opt >= 0 ? check + opt : -1;
    ph->moving_ms = number_of(p, "moving_update");
}

/* one '{' line: a start event's batch, or a profile record's calls */
static bool read_line(Diag *d, int file, int line, const char *s, size_t len, Profile *p,
                      bool *found)
{
    if (len > INT32_MAX)
        return fail(d, file, line, "a line longer than 2 GiB");
    json_tokener *tok = json_tokener_new();
    if (!tok)
        DIE("out of memory");
    json_object *o = json_tokener_parse_ex(tok, s, (int)len);
    bool whole = o && json_tokener_get_error(tok) == json_tokener_success &&
                 json_object_is_type(o, json_type_object);
    json_tokener_free(tok);
    if (!whole) {
        json_object_put(o);
        return fail(d, file, line, "a line starting with '{' is not one JSON object");
    }
    const char *ev = str_of(o, "event");
    json_object *v;
    bool ok = true;
    if (ev && strcmp(ev, "start") == 0 && json_object_object_get_ex(o, "batch_size", &v) &&
        json_object_is_type(v, json_type_int) && json_object_get_int64(v) > 0)
        p->batch = json_object_get_int64(v);
    else if (ev && strcmp(ev, "profile") == 0) {
        read_phases(o, &p->phases);
        if (!json_object_object_get_ex(o, "calls", &v))
            ok =
                fail(d, file, line, "the profile record has no \"calls\" (a run before issue 20?)");
        else
            ok = read_calls(d, file, line, v, p);
        *found = ok;
    }
    json_object_put(o);
    return ok;
}

bool profile_read(Diag *d, const char *path, Profile *p)
{
    memset(p, 0, sizeof *p);
    p->phases.optimizer_ms = p->phases.moving_ms = -1;
    int file = diag_load_file(d, path);
    if (file < 0) {
        diag_plain_error(d, "--calibrate: cannot read '%s': %s", path, diag_load_error(d));
        return false;
    }
    const SrcFile *f = diag_file(d, file);
    bool found = false;
    int line = 0;
    for (const char *s = f->text, *end = f->text + f->len; s < end;) {
        const char *nl = memchr(s, '\n', (size_t)(end - s));
        const char *e = nl ? nl : end;
        line++;
        if (e > s && *s == '{' && !read_line(d, file, line, s, (size_t)(e - s), p, &found)) {
            profile_free(p);
            return false;
        }
        s = nl ? nl + 1 : end;
    }
    if (!found) {
        diag_plain_error(d,
                         "--calibrate: '%s' holds no profile record (a line with "
                         "\"event\":\"profile\": run the program with --profile --json-log FILE)",
                         path);
        profile_free(p);
        return false;
    }
    return true;
}

void profile_free(Profile *p)
{
    for (int i = 0; i < p->ncalls; i++)
        free((char *)p->calls[i].name);
    free(p->calls);
    p->calls = NULL;
    p->ncalls = 0;
}
