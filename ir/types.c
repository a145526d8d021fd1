/* types.c - dtypes and shapes. */
#include "ir.h"

#include <string.h>

static const struct {
    const char *s, *l;
    int size;
    bool is_float;
} dtype_info[DT_COUNT] = {
#define X(id, s, l, sz, f) [id] = {s, l, sz, f},
    DTYPE_LIST(X)
#undef X
};

const char *dtype_short(DType t) { return dtype_info[t].s; }
const char *dtype_long(DType t) { return dtype_info[t].l; }
int dtype_size(DType t) { return dtype_info[t].size; }
bool dtype_is_float(DType t) { return dtype_info[t].is_float; }

DType dtype_parse(const char *s)
{
    if (strcmp(s, "unknown") == 0)
        return DT_UNKNOWN;
    for (int t = 1; t < DT_COUNT; t++)
        if (strcmp(s, dtype_info[t].s) == 0 || strcmp(s, dtype_info[t].l) == 0)
            return (DType)t;
    return DT_UNKNOWN;
}

const char *dtype_names(bool short_names)
{
    static char buf[2][128];
    char *b = buf[short_names];
    if (!b[0])
        for (int t = 1; t < DT_COUNT; t++)
            snprintf(b + strlen(b), sizeof buf[0] - strlen(b), "%s%s", t > 1 ? ", " : "",
                     short_names ? dtype_info[t].s : dtype_info[t].l);
    return b;
}

bool shape_equal(const Shape *a, const Shape *b)
{
    if (a->rank != b->rank)
        return false;
    for (int i = 0; i < a->rank; i++)
        if (a->d[i] != b->d[i])
            return false;
    return true;
}

bool shape_has_sym(const Shape *s)
{
    for (int i = 0; i < s->rank; i++)
        if (dim_is_sym(s->d[i]))
            return true;
    return false;
}

bool shape_numel_per_sample(const Shape *s, int64_t *out)
{
    int64_t n = 1;
    if (s->rank < 0)
        return false;
    for (int i = 0; i < s->rank; i++)
        if (__builtin_mul_overflow(n, s->d[i] < 0 ? -s->d[i] : s->d[i], &n))
            return false;
    *out = n;
    return true;
}

bool shape_size_ok(const Shape *s)
{
    int64_t n;
    return s->rank < 0 || (shape_numel_per_sample(s, &n) && n <= AMPC_MAX_NUMEL);
}

int64_t shape_numel(const Shape *s, int64_t batch)
{
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++)
        n *= s->d[i] < 0 ? -s->d[i] * batch : s->d[i];
    return n;
}

char *shape_str(const Shape *s, char *buf, size_t cap)
{
    size_t k = 0;
    buf[0] = 0;
    if (s->rank < 0)
        return buf;
    k += (size_t)snprintf(buf + k, cap - k, "[");
    for (int i = 0; i < s->rank && k < cap; i++) {
        Dim d = s->d[i];
        if (d == DIM_N)
            k += (size_t)snprintf(buf + k, cap - k, "%sN", i ? "," : "");
        else if (d < 0)
            k += (size_t)snprintf(buf + k, cap - k, "%s%lldN", i ? "," : "", (long long)-d);
        else
            k += (size_t)snprintf(buf + k, cap - k, "%s%lld", i ? "," : "", (long long)d);
    }
    if (k < cap)
        snprintf(buf + k, cap - k, "]");
    return buf;
}

const char *target_name(Target t)
{
    static const char *const n[] = {"cpu", "cuda"};
    return t >= 0 && t < TARGET_COUNT ? n[t] : "?";
}
