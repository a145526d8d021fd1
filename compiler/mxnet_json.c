/* mxnet_json.c - ampc --from-mxnet: an MXNet symbol JSON file (what
 * Module.save_checkpoint and HybridBlock.export write) as ampc source.
 *
 * The file is read with json-c, checked node by node (every index, count and
 * size is range-checked: the file is untrusted), and written out as a .sym
 * model: one `param(name=...)` per parameter, one op call per node with
 * name="..." (MXNet's names kept, so .params keys match), model inputs for the
 * data and label variables.  The driver then elaborates that text like any
 * .sym file, so an imported model takes exactly the path through the passes a
 * hand-written one does, and --emit-sym writes the same text for the user to
 * keep editing (docs/mxnet.md).
 *
 * Dialects: 1.x files keep op parameters and hints under "attrs"; files
 * before 0.9 under "param" (op parameters) and "attr" (hints); inputs are
 * [node, index, version] or [node, index]; legacy op names (_Plus,
 * _MulScalar, Softmax, ...) map to today's; a BatchNorm without its two
 * moving-statistics inputs gets them implicitly (<name>_moving_mean, as MXNet
 * names them).  Where MXNet's defaults differ from ampc's (BatchNorm
 * fix_gamma=True, eps=1e-3) they are written out.  An op ampc does not have,
 * or an attribute value it cannot honour, is refused with the node's name. */
#include "driver.h"
#include "../runtime/kernels/unary.h"
#include "../runtime/settings.h"

#include <errno.h>
#include <json-c/json.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Sizes the importer accepts (a ResNet-152 export has about 1,500 nodes). */
#define MX_MAX_NODES 1000000
#define MX_MAX_INPUTS 100000 /* inputs of one node (a Concat's) */
#define MX_MAX_NAME 4096     /* bytes of a node name */
#define MX_MAX_DEPTH 64      /* JSON nesting (the format needs 4) */

enum { ROLE_UNUSED, ROLE_DATA, ROLE_LABEL, ROLE_PARAM };

enum { CAST_NONE, CAST_ONE, CAST_MULTI }; /* amp_cast, amp_multicast: read through */

typedef struct {
    const char *name, *op; /* json-c strings, live as long as the root */
    int cast;              /* CAST_*: an AMP cast, which readers see through */
    json_object *attrs[3]; /* "attrs", "attr", "param" (any may be NULL) */
    int nin;
    int *in;         /* node ids */
    OpKind kind;     /* the ampc op; OP_COUNT for a variable */
    const char *act; /* relu/sigmoid/tanh ops: Activation's act_type */
    int role;        /* variables: ROLE_* */
    int reader;      /* variables: the first node reading it (messages) */
} MxNode;

typedef struct {
    Diag *d;
    const char *path;
    const MxImportOptions *o;
    MxNode *nodes;
    int n;
    int *heads;
    int nheads;
    FILE *out;
    char prefix[16]; /* temporaries: <prefix><node id> */
} Mx;

static const char *node_attr(const MxNode *n, const char *key);
static bool parse_int(const char *s, int64_t *out);

/* ---- messages ---------------------------------------------------------------- */

static bool node_fail(Mx *m, const MxNode *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static bool node_fail(Mx *m, const MxNode *n, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    diag_plain_error(m->d, "%s: node '%s' (op '%s'): %s", m->path, n->name, n->op, msg);
    return false;
}

static bool file_fail(Mx *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool file_fail(Mx *m, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    diag_plain_error(m->d, "%s: %s", m->path, msg);
    return false;
}

/* ---- the op map ---------------------------------------------------------------- */

/* MXNet's op names (today's and legacy) and the ampc op each becomes; act is
 * Activation's act_type for the one-activation ops. */
static const struct {
    const char *mx, *ampc, *act;
} mx_ops[] = {
    {"Convolution", "Convolution", NULL},
    {"FullyConnected", "FullyConnected", NULL},
    {"BatchNorm", "BatchNorm", NULL},
    {"Activation", "Activation", NULL},
    {"LeakyReLU", "LeakyReLU", NULL},
    {"Dropout", "Dropout", NULL},
    {"Pooling", "Pooling", NULL},
    {"Flatten", "Flatten", NULL},
    {"flatten", "Flatten", NULL},
    {"Reshape", "Reshape", NULL},
    {"reshape", "Reshape", NULL},
    {"Concat", "Concat", NULL},
    {"concat", "Concat", NULL},
    {"elemwise_add", "elemwise_add", NULL},
    {"_Plus", "elemwise_add", NULL},
    {"_plus", "elemwise_add", NULL},
    {"_add", "elemwise_add", NULL},
    {"elemwise_sub", "elemwise_sub", NULL},
    {"_Minus", "elemwise_sub", NULL},
    {"_minus", "elemwise_sub", NULL},
    {"_sub", "elemwise_sub", NULL},
    {"elemwise_mul", "elemwise_mul", NULL},
    {"_Mul", "elemwise_mul", NULL},
    {"_mul", "elemwise_mul", NULL},
    {"broadcast_add", "broadcast_add", NULL},
    {"broadcast_plus", "broadcast_add", NULL},
    {"broadcast_mul", "broadcast_mul", NULL},
    {"_plus_scalar", "_plus_scalar", NULL},
    {"_PlusScalar", "_plus_scalar", NULL},
    {"_minus_scalar", "_minus_scalar", NULL},
    {"_MinusScalar", "_minus_scalar", NULL},
    {"_rminus_scalar", "_rminus_scalar", NULL},
    {"_RMinusScalar", "_rminus_scalar", NULL},
    {"_mul_scalar", "_mul_scalar", NULL},
    {"_MulScalar", "_mul_scalar", NULL},
    {"_div_scalar", "_div_scalar", NULL},
    {"_DivScalar", "_div_scalar", NULL},
    {"_rdiv_scalar", "_rdiv_scalar", NULL},
    {"_RDivScalar", "_rdiv_scalar", NULL},
#define MX_UNARY(N, n) {#n, #n, NULL},
    AMPC_UNARY_LIST(MX_UNARY) /* exp, log, sqrt, sin ... rint: the same names */
#undef MX_UNARY
    {"Cast", "Cast", NULL},
    {"cast", "Cast", NULL},
    {"softmax", "softmax", NULL},
    {"log_softmax", "log_softmax", NULL},
    {"sum", "sum", NULL},
    {"sum_axis", "sum", NULL},
    {"mean", "mean", NULL},
    {"SoftmaxOutput", "SoftmaxOutput", NULL},
    {"Softmax", "SoftmaxOutput", NULL},
    {"relu", "Activation", "relu"},
    {"sigmoid", "Activation", "sigmoid"},
    {"tanh", "Activation", "tanh"},
    {"clip", "clip", NULL},
};

/* Attributes ampc has no use for, accepted when their value is one of
 * `values` ('|'-separated; NULL: any value).  Everything else an op carries
 * must be one of its ampc attributes, or the node is refused. */
#define MX_FALSE "False|false|0"
static const struct {
    const char *op, *attr, *values;
} mx_ignored[] = {
    {"Convolution", "workspace", NULL},
    {"Convolution", "cudnn_tune", NULL},
    {"Convolution", "cudnn_off", NULL},
    {"Convolution", "layout", "None|NCW|NCHW|NCDHW"},
    {"Pooling", "cudnn_off", NULL},
    {"Pooling", "layout", "None|NCW|NCHW|NCDHW"},
    {"Pooling", "p_value", NULL},
    {"BatchNorm", "cudnn_off", NULL},
    {"BatchNorm", "output_mean_var", MX_FALSE},
    {"Dropout", "cudnn_off", NULL},
    {"Dropout", "mode", "training"},
    {"Dropout", "axes", "()|[]"},
    {"LeakyReLU", "lower_bound", NULL},
    {"LeakyReLU", "upper_bound", NULL},
    {"Reshape", "reverse", MX_FALSE},
    {"SoftmaxOutput", "multi_output", MX_FALSE},
    {"SoftmaxOutput", "preserve_shape", MX_FALSE},
    {"SoftmaxOutput", "out_grad", MX_FALSE},
    {"softmax", "temperature", "None|1|1.0"},
    {"softmax", "use_length", MX_FALSE},
    {"softmax", "dtype", "None|float32"},
    {"log_softmax", "temperature", "None|1|1.0"},
    {"log_softmax", "use_length", MX_FALSE},
    {"log_softmax", "dtype", "None|float32"},
    {"sum", "exclude", MX_FALSE},
    {"mean", "exclude", MX_FALSE},
    {"_plus_scalar", "is_int", NULL},
    {"_minus_scalar", "is_int", NULL},
    {"_rminus_scalar", "is_int", NULL},
    {"_mul_scalar", "is_int", NULL},
    {"_div_scalar", "is_int", NULL},
    {"_rdiv_scalar", "is_int", NULL},
};

/* Attributes a user sets on any symbol (mx.sym.X(..., attr={...})), which
 * files before 1.0 wrote without underscores next to the op's own under
 * "attr": placement and memory hints, none of the op's arithmetic. */
#define MX_USER_ATTRS "ctx_group|lr_mult|wd_mult|force_mirroring|mirror_stage|init"

/* MXNet's defaults where ampc's differ (or where the reader of the
 * generated source should see MXNet's): written when the file omits them. */
static const struct {
    const char *op, *attr, *text;
} mx_defaults[] = {
    {"BatchNorm", "eps", "0.001"},
    {"BatchNorm", "momentum", "0.9"},
    {"BatchNorm", "fix_gamma", "true"},
    {"Pooling", "pooling_convention", "\"valid\""},
    {"Pooling", "count_include_pad", "true"},
};

static bool one_of(const char *v, const char *list)
{
    size_t n = strlen(v);
    for (const char *p = list; *p;) {
        const char *bar = strchr(p, '|');
        size_t k = bar ? (size_t)(bar - p) : strlen(p);
        if (k == n && strncmp(p, v, n) == 0)
            return true;
        p += k + (bar != NULL);
    }
    return false;
}

/* ---- text ------------------------------------------------------------------------ */

/* The length of the UTF-8 sequence at s (1 to 4), or 0 when it is not
 * one: overlong forms, surrogates and code points above U+10FFFF are not;
 * *cp gets the code point. */
static int utf8_char(const unsigned char *s, unsigned *cp)
{
    static const unsigned min[] = {0, 0, 0x80, 0x800, 0x10000};
    int n = s[0] < 0x80                   ? 1
            : s[0] >= 0xc2 && s[0] < 0xe0 ? 2
            : s[0] >= 0xe0 && s[0] < 0xf0 ? 3
            : s[0] >= 0xf0 && s[0] < 0xf5 ? 4
                                          : 0;
    if (n == 0)
        return 0;
    unsigned c = n == 1 ? s[0] : s[0] & (0x7f >> n);
    for (int k = 1; k < n; k++) {
        if ((s[k] & 0xc0) != 0x80)
            return 0;
        c = c << 6 | (s[k] & 0x3f);
    }
    if (c < min[n] || c > 0x10ffff || (c >= 0xd800 && c < 0xe000))
        return 0;
    *cp = c;
    return n;
}

bool mx_text_ok(const char *s, char *why, size_t cap)
{
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; p[i];) {
        unsigned c;
        int n = utf8_char(p + i, &c);
        if (n == 0) {
            snprintf(why, cap, "invalid UTF-8 at byte %zu", i);
            return false;
        }
        if (c < 0x20 || (c >= 0x7f && c < 0xa0)) {
            snprintf(why, cap, "control character U+%04X at byte %zu", c, i);
            return false;
        }
        i += (size_t)n;
    }
    return true;
}

/* ---- reading the JSON ---------------------------------------------------------- */

static json_object *get(json_object *o, const char *key)
{
    json_object *v = NULL;
    return o && json_object_is_type(o, json_type_object) && json_object_object_get_ex(o, key, &v)
               ? v
               : NULL;
}

/* A string without NUL bytes (json-c allows \u0000), or NULL. */
static const char *str_of(json_object *v)
{
    if (!v || !json_object_is_type(v, json_type_string))
        return NULL;
    const char *s = json_object_get_string(v);
    return strlen(s) == (size_t)json_object_get_string_len(v) ? s : NULL;
}

/* An int in [lo, hi]: a JSON integer, or -1 (not one, or out of range). */
static bool int_of(json_object *v, int64_t lo, int64_t hi, int64_t *out)
{
    if (!v || !json_object_is_type(v, json_type_int))
        return false;
    errno = 0;
    int64_t x = json_object_get_int64(v);
    if (errno || x < lo || x > hi)
        return false;
    *out = x;
    return true;
}

/* The text at `offset` as line:col for a parse error. */
static Loc offset_loc(const SrcFile *f, int file, size_t offset)
{
    Loc l = {file, 1, 1};
    for (size_t i = 0; i < offset && i < f->len; i++) {
        if (f->text[i] == '\n')
            l.line++, l.col = 1;
        else
            l.col++;
    }
    return l;
}

/* What json-c 0.16's strict mode still lets through, which RFC 8259 and
 * MXNet's own reader (dmlc-core's JSONReader) do not: a raw control
 * character inside a string (dmlc stops at a raw newline; a JSON writer
 * escapes them), a single-quoted string, and bare words other than true,
 * false and null (NaN, Infinity).  Runs over text json-c accepted, so
 * strings and numbers are well formed.  True when it finds one: *at gets
 * its offset, why says what it is. */
static bool json_lenient_text(const char *t, size_t len, size_t *at, char *why, size_t cap)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)t[i];
        *at = i;
        if (c == '"') {
            for (i++; i < len && t[i] != '"'; i++) {
                *at = i;
                if (t[i] == '\\') {
                    i++;
                } else if ((unsigned char)t[i] < 0x20) {
                    snprintf(why, cap, "control character U+%04X inside a string (JSON escapes it)",
                             (unsigned char)t[i]);
                    return true;
                }
            }
        } else if (c == '\'') {
            snprintf(why, cap, "a single-quoted string (JSON strings take double quotes)");
            return true;
        } else if ((c | 32) >= 'a' && (c | 32) <= 'z') {
            size_t k = i;
            while (k < len && (t[k] | 32) >= 'a' && (t[k] | 32) <= 'z')
                k++;
            if (!(k - i == 4 && (memcmp(t + i, "true", 4) == 0 || memcmp(t + i, "null", 4) == 0)) &&
                !(k - i == 5 && memcmp(t + i, "false", 5) == 0)) {
                snprintf(why, cap, "'%.*s' is not a JSON value", (int)(k - i > 20 ? 20 : k - i),
                         t + i);
                return true;
            }
            i = k - 1;
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            while (i + 1 < len && t[i + 1] && strchr("0123456789.eE+-", t[i + 1]))
                i++;
        }
    }
    return false;
}

/* Where json-c's tokener stopped at `end`: the offset of a trailing comma
 * (one followed by '}' or ']') at or just before it, or len.  json-c stops
 * on the comma in an array and on the bracket in an object. */
static size_t trailing_comma(const char *t, size_t len, size_t end)
{
    size_t c = end;
    if (c < len && (t[c] == '}' || t[c] == ']')) {
        while (c > 0 && strchr(" \t\r\n", t[c - 1]) && t[c - 1])
            c--;
        if (c == 0)
            return len;
        c--;
    }
    if (c >= len || t[c] != ',')
        return len;
    size_t k = c + 1;
    while (k < len && t[k] && strchr(" \t\r\n", t[k]))
        k++;
    return k < len && (t[k] == '}' || t[k] == ']') ? c : len;
}

/* The file as JSON (RFC 8259, which MXNet's writer follows): json-c's
 * strict tokener with UTF-8 validation, then json_lenient_text for what
 * that still accepts.  So trailing commas, comments, raw control characters
 * in strings, single quotes, NaN and invalid UTF-8 are refused at their
 * line and column (docs/mxnet.md, "The JSON dialect"). */
static json_object *parse_json(Mx *m, int file)
{
    const SrcFile *f = diag_file(m->d, file);
    if (f->len > INT32_MAX) {
        file_fail(m, "the file is larger than 2 GiB");
        return NULL;
    }
    json_tokener *tok = json_tokener_new_ex(MX_MAX_DEPTH);
    if (!tok)
        DIE("out of memory");
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_ALLOW_TRAILING_CHARS |
                                    JSON_TOKENER_VALIDATE_UTF8);
    json_object *root = json_tokener_parse_ex(tok, f->text, (int)f->len);
    enum json_tokener_error err = json_tokener_get_error(tok);
    size_t end = json_tokener_get_parse_end(tok);
    json_tokener_free(tok);
    if (root && err == json_tokener_success) {
        /* only white space may follow the value */
        while (end < f->len && f->text[end] && strchr(" \t\r\n", f->text[end]))
            end++;
        size_t at;
        char why[96];
        bool lenient = end == f->len && json_lenient_text(f->text, f->len, &at, why, sizeof why);
        if (end == f->len && !lenient)
            return root;
        json_object_put(root);
        if (lenient) {
            diag_error(m->d, offset_loc(f, file, at), "malformed JSON: %s", why);
            return NULL;
        }
        diag_error(m->d, offset_loc(f, file, end),
                   "malformed JSON: text after the end of the symbol's object");
        return NULL;
    }
    if (root)
        json_object_put(root);
    size_t comma = trailing_comma(f->text, f->len, end);
    if (err == json_tokener_continue || err == json_tokener_success)
        diag_error(m->d, offset_loc(f, file, f->len),
                   "malformed JSON: the file ends inside a value (truncated?)");
    else if (end < f->len && f->text[end] == '/')
        diag_error(m->d, offset_loc(f, file, end), "malformed JSON: a comment (JSON has none)");
    else if (comma < f->len)
        diag_error(m->d, offset_loc(f, file, comma),
                   "malformed JSON: a comma before '%c' (JSON has no trailing commas)",
                   f->text[comma + 1 + strspn(f->text + comma + 1, " \t\r\n")]);
    else
        diag_error(m->d, offset_loc(f, file, end), "malformed JSON: %s",
                   json_tokener_error_desc(err));
    return NULL;
}

/* One entry of "inputs" or "heads": [node, index] or [node, index, version],
 * naming an earlier node (< limit) and its only output. */
static bool read_entry(Mx *m, json_object *e, int limit, const char *where, int *out)
{
    int64_t id, idx, ver = 0;
    size_t len = e && json_object_is_type(e, json_type_array) ? json_object_array_length(e) : 0;
    if (len != 2 && len != 3)
        return file_fail(m, "%s: each entry must be [node, index] or [node, index, version]",
                         where);
    if (!int_of(json_object_array_get_idx(e, 0), 0, INT32_MAX, &id) ||
        !int_of(json_object_array_get_idx(e, 1), 0, INT32_MAX, &idx) ||
        (len == 3 && !int_of(json_object_array_get_idx(e, 2), 0, INT32_MAX, &ver)))
        return file_fail(m,
                         "%s: an entry holds something other than small non-negative "
                         "integers",
                         where);
    if (id >= limit)
        return file_fail(m, "%s: node %lld %s", where, (long long)id,
                         limit == m->n ? "does not exist"
                                       : "does not come before the node "
                                         "reading it");
    /* an AMP cast is read as what it casts (MXNet's RemoveAmpCast): output
     * k of amp_multicast is its input k */
    const MxNode *src = &m->nodes[id];
    if (src->cast == CAST_MULTI && idx < src->nin) {
        *out = src->in[idx];
        return true;
    }
    if (idx != 0)
        return file_fail(m, "%s: output %lld of node '%s': ampc's ops have one output", where,
                         (long long)idx, src->name);
    *out = src->cast == CAST_ONE ? src->in[0] : (int)id;
    return true;
}

/* An AMP-converted graph (what MXNet's convert_symbol and ampc's own
 * --emit-mxnet-json --amp write) is read as the fp32 graph it was made
 * from: amp_cast and amp_multicast are kinds of node read_entry sees
 * through, checked here (one input; as many outputs as inputs). */
static bool read_cast(Mx *m, MxNode *n)
{
    n->cast = strcmp(n->op, "amp_cast") == 0        ? CAST_ONE
              : strcmp(n->op, "amp_multicast") == 0 ? CAST_MULTI
                                                    : CAST_NONE;
    if (n->cast == CAST_ONE && n->nin != 1)
        return node_fail(m, n, "an amp_cast with %d inputs (it casts one)", n->nin);
    if (n->cast == CAST_MULTI) {
        const char *k = node_attr(n, "num_outputs");
        int64_t outs;
        if (n->nin < 1 || !k || !parse_int(k, &outs) || outs != n->nin)
            return node_fail(m, n, "an amp_multicast of %d inputs needs num_outputs=%d", n->nin,
                             n->nin);
    }
    return true;
}

/* A key given under more than one of "attrs", "attr" and "param" (a file
 * upgraded by hand, or written by a tool that kept both spellings) must
 * have one value: the importer will not pick one silently. */
static bool attrs_agree(Mx *m, const MxNode *n)
{
    static const char *const keys[] = {"attrs", "attr", "param"};
    for (int k = 1; k < 3; k++) {
        if (!n->attrs[k])
            continue;
        json_object_object_foreach(n->attrs[k], key, val)
        {
            for (int j = 0; j < k; j++) {
                const char *other = str_of(get(n->attrs[j], key));
                if (other && strcmp(other, str_of(val)) != 0)
                    return node_fail(m, n, "attribute '%s' is '%s' under '%s' but '%s' under '%s'",
                                     key, other, keys[j], str_of(val), keys[k]);
            }
        }
    }
    return true;
}

static bool read_node(Mx *m, int i, json_object *j)
{
    MxNode *n = &m->nodes[i];
    n->kind = OP_COUNT;
    if (!json_object_is_type(j, json_type_object))
        return file_fail(m, "node %d is not a JSON object", i);
    n->op = str_of(get(j, "op"));
    n->name = str_of(get(j, "name"));
    if (!n->op || !n->name)
        return file_fail(m, "node %d: 'op' and 'name' must be strings (without NUL bytes)", i);
    if (!*n->name || strlen(n->name) > MX_MAX_NAME || strlen(n->op) > MX_MAX_NAME)
        return file_fail(m, "node %d: the name and the op must have 1 to %d bytes", i,
                         MX_MAX_NAME);
    char why[64];
    if (!mx_text_ok(n->name, why, sizeof why))
        return file_fail(m, "node %d: the name '%s': %s", i, n->name, why);
    static const char *const keys[] = {"attrs", "attr", "param"};
    for (int k = 0; k < 3; k++) {
        json_object *a = get(j, keys[k]);
        if (!a)
            continue;
        if (!json_object_is_type(a, json_type_object))
            return node_fail(m, n, "'%s' must be an object", keys[k]);
        json_object_object_foreach(a, key, val)
        {
            if (!str_of(val) || strlen(key) > MX_MAX_NAME)
                return node_fail(m, n, "attribute '%s' must be a string", key);
        }
        n->attrs[k] = a;
    }
    if (!attrs_agree(m, n))
        return false;
    json_object *in = get(j, "inputs");
    size_t nin = in && json_object_is_type(in, json_type_array) ? json_object_array_length(in) : 0;
    if (in && !json_object_is_type(in, json_type_array))
        return node_fail(m, n, "'inputs' must be an array");
    if (nin > MX_MAX_INPUTS)
        return node_fail(m, n, "%zu inputs, more than the %d ampc reads", nin, MX_MAX_INPUTS);
    n->nin = (int)nin;
    n->in = calloc(nin ? nin : 1, sizeof(int));
    if (!n->in)
        DIE("out of memory");
    char where[2 * MX_MAX_NAME + 64];
    snprintf(where, sizeof where, "node '%s' (op '%s'): inputs", n->name, n->op);
    for (size_t k = 0; k < nin; k++)
        if (!read_entry(m, json_object_array_get_idx(in, k), i, where, &n->in[k]))
            return false;
    return read_cast(m, n);
}

/* The attribute `key` of a node (attrs first, then attr, then param), or NULL. */
static const char *node_attr(const MxNode *n, const char *key)
{
    for (int k = 0; k < 3; k++) {
        const char *s = str_of(get(n->attrs[k], key));
        if (s)
            return s;
    }
    return NULL;
}

static bool read_nodes(Mx *m, json_object *root)
{
    if (!json_object_is_type(root, json_type_object))
        return file_fail(m, "not an MXNet symbol file: the JSON is not an object");
    json_object *nodes = get(root, "nodes"), *heads = get(root, "heads");
    if (!nodes || !json_object_is_type(nodes, json_type_array) || !heads ||
        !json_object_is_type(heads, json_type_array))
        return file_fail(m, "not an MXNet symbol file: 'nodes' and 'heads' must be arrays");
    size_t n = json_object_array_length(nodes), nh = json_object_array_length(heads);
    if (n == 0 || n > MX_MAX_NODES)
        return file_fail(m, "%zu nodes: ampc reads 1 to %d", n, MX_MAX_NODES);
    if (nh == 0 || nh > (size_t)n)
        return file_fail(m, "%zu heads: a symbol has 1 to as many as it has nodes", nh);
    m->n = (int)n;
    m->nodes = calloc(n, sizeof *m->nodes);
    m->heads = calloc(nh, sizeof *m->heads);
    if (!m->nodes || !m->heads)
        DIE("out of memory");
    for (size_t i = 0; i < n; i++)
        if (!read_node(m, (int)i, json_object_array_get_idx(nodes, i)))
            return false;
    m->nheads = (int)nh;
    for (size_t i = 0; i < nh; i++)
        if (!read_entry(m, json_object_array_get_idx(heads, i), m->n, "heads", &m->heads[i]))
            return false;
    json_object *args = get(root, "arg_nodes");
    if (args && !json_object_is_type(args, json_type_array))
        return file_fail(m, "'arg_nodes' must be an array");
    for (size_t i = 0; args && i < json_object_array_length(args); i++) {
        int64_t id;
        if (!int_of(json_object_array_get_idx(args, i), 0, m->n - 1, &id) ||
            strcmp(m->nodes[id].op, "null") != 0)
            return file_fail(m, "arg_nodes: entry %zu is not the index of a variable", i);
    }
    return true;
}

/* ---- checking and classifying ------------------------------------------------------ */

static bool unique_names(Mx *m)
{
    StrMap seen = {0};
    bool ok = true;
    for (int i = 0; ok && i < m->n; i++)
        if (!strmap_put(&seen, m->nodes[i].name, i))
            ok = file_fail(m, "nodes %d and %d are both named '%s'",
                           *strmap_get(&seen, m->nodes[i].name), i, m->nodes[i].name);
    strmap_free(&seen);
    return ok;
}

/* The ampc op of each node, and the role of each variable from the slots
 * that read it: a parameter (weight, gamma, moving_mean ...), a data input,
 * or a label. */
static bool classify(Mx *m)
{
    for (int i = 0; i < m->n; i++) {
        MxNode *n = &m->nodes[i];
        if (strcmp(n->op, "null") == 0) {
            if (n->nin)
                return node_fail(m, n, "a variable with inputs");
            continue;
        }
        for (size_t k = 0; k < sizeof mx_ops / sizeof mx_ops[0]; k++)
            if (strcmp(mx_ops[k].mx, n->op) == 0) {
                n->kind = op_lookup(mx_ops[k].ampc);
                n->act = mx_ops[k].act;
            }
        if (n->kind == OP_COUNT && n->cast == CAST_NONE)
            return node_fail(m, n, "not supported");
    }
    return true;
}

/* The slot input k of node n fills: inputs go to the slots present in
 * order (no bias under no_bias; a BatchNorm of three inputs leaves its
 * statistics implicit). */
static const SlotSpec *input_slot(const MxNode *n, int k, bool no_bias)
{
    const OpInfo *oi = op_info(n->kind);
    if (oi->nslots == 0)
        return NULL; /* variadic: all data */
    int seen = 0;
    for (int s = 0; s < oi->nslots; s++) {
        if (no_bias && strcmp(oi->slots[s].name, "bias") == 0)
            continue;
        if (strcmp(oi->slots[s].name, "gamma") == 0 && n->kind == OP_LeakyReLU) {
            const char *t = node_attr(n, "act_type");
            if (!t || strcmp(t, "prelu") != 0)
                continue;
        }
        if (seen++ == k)
            return &oi->slots[s];
    }
    return NULL;
}

static bool is_true(const char *v) { return v && one_of(v, "True|true|1"); }

static bool assign_roles(Mx *m)
{
    for (int i = 0; i < m->n; i++) {
        MxNode *n = &m->nodes[i];
        if (n->kind == OP_COUNT)
            continue;
        const OpInfo *oi = op_info(n->kind);
        bool no_bias = is_true(node_attr(n, "no_bias"));
        for (int k = 0; k < n->nin; k++) {
            MxNode *v = &m->nodes[n->in[k]];
            const SlotSpec *ss = input_slot(n, k, no_bias);
            if (oi->nslots && !ss)
                return node_fail(m, n, "%d inputs, more than the op takes", n->nin);
            if (v->kind != OP_COUNT) {
                if (ss && ss->kind != SLOT_DATA && ss->kind != SLOT_LABEL)
                    return node_fail(m, n, "input %d ('%s', its %s) is computed, not a variable", k,
                                     v->name, ss->name);
                continue;
            }
            int role = !ss || ss->kind == SLOT_DATA ? ROLE_DATA
                       : ss->kind == SLOT_LABEL     ? ROLE_LABEL
                                                    : ROLE_PARAM;
            /* read both by a parameter slot and as data (MXNet's AMP test:
             * FullyConnected(x, y) + sin(y)): a parameter, which ampc's ops
             * may also read as data (amp reads its master where it must) */
            bool both = (v->role == ROLE_PARAM && role == ROLE_DATA) ||
                        (v->role == ROLE_DATA && role == ROLE_PARAM);
            if (both)
                role = ROLE_PARAM;
            else if (v->role != ROLE_UNUSED && v->role != role) {
                static const char *const roles[] = {"", "data input", "label", "parameter"};
                return node_fail(m, n, "variable '%s' is read as a %s here and as a %s by '%s'",
                                 v->name, roles[role], roles[v->role], m->nodes[v->reader].name);
            }
            if (v->role == ROLE_UNUSED)
                v->reader = i;
            v->role = role;
        }
    }
    for (int i = 0; i < m->nheads; i++)
        if (m->nodes[m->heads[i]].kind == OP_COUNT)
            return file_fail(m, "head %d is the variable '%s': ampc's outputs are computed", i,
                             m->nodes[m->heads[i]].name);
    return true;
}

/* ---- writing ampc source ----------------------------------------------------------- */

static bool is_ident(const char *s)
{
    static const char *const keywords[] = {"def", "model",  "train", "import", "if",  "else", "for",
                                           "in",  "return", "true",  "false",  "and", "or",   NULL};
    if (!*s || !(s[0] == '_' || ((s[0] | 32) >= 'a' && (s[0] | 32) <= 'z')))
        return false;
    for (const char *p = s; *p; p++)
        if (!(*p == '_' || (*p >= '0' && *p <= '9') || ((*p | 32) >= 'a' && (*p | 32) <= 'z')))
            return false;
    for (int k = 0; keywords[k]; k++)
        if (strcmp(s, keywords[k]) == 0)
            return false;
    return true;
}

/* A string from the file as a DSL string literal: quotes and backslashes
 * escaped; a control character or invalid UTF-8 refused (mx_text_ok), with
 * what names the string in the message ("the name", "attribute
 * 'act_type'"). */
static bool put_text(Mx *m, const MxNode *n, const char *what, const char *s)
{
    char why[64];
    if (!mx_text_ok(s, why, sizeof why))
        return node_fail(m, n, "%s: %s", what, why);
    fputc('"', m->out);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fputc('\\', m->out);
        fputc(*s, m->out);
    }
    fputc('"', m->out);
    return true;
}

/* The shortest text that reads back to the same double, as a DSL float
 * literal (with a '.' or an exponent). */
static void put_float(FILE *f, double v)
{
    char num[48];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(num, sizeof num, "%.*g", prec, v);
        if (strtod(num, NULL) == v)
            break;
    }
    fputs(num, f);
    if (!strpbrk(num, ".e"))
        fputs(".0", f);
}

/* Numbers as MXNet's parameter parser reads them (a C++ stream: decimal,
 * no hex), in settings.h's grammar. */
static bool parse_float(const char *s, double *out)
{
    return rt_parse_f64(s, -HUGE_VAL, HUGE_VAL, out);
}

static bool parse_int(const char *s, int64_t *out)
{
    return rt_parse_i64(s, INT64_MIN, INT64_MAX, out);
}

/* "(3, 3)", "[3,3]", "(3,)", "()", "3", "3,3" (not "3,3,"): at most
 * AMPC_MAX_RANK ints. */
static bool parse_tuple(const char *s, int64_t *v, int *n)
{
    *n = 0;
    while (*s == ' ')
        s++;
    char close = *s == '(' ? ')' : *s == '[' ? ']' : 0;
    if (close)
        s++;
    for (;;) {
        while (*s == ' ')
            s++;
        if (*s == close && close)
            break;
        if (!close && !*s)
            break;
        char *end;
        errno = 0;
        long long x = strtoll(s, &end, 10);
        if (end == s || errno || *n == AMPC_MAX_RANK)
            return false;
        v[(*n)++] = x;
        s = end;
        while (*s == ' ')
            s++;
        if (*s == ',') {
            s++;
            if (!close && !s[strspn(s, " ")]) /* "1,3,": a Python tuple needs its brackets */
                return false;
        } else if (*s != close || (!close && *s)) {
            return false;
        }
    }
    s++;
    while (close && *s == ' ')
        s++;
    return !close || !*s;
}

/* One attribute as a DSL argument, converted by ampc's schema. */
static bool put_attr(Mx *m, const MxNode *n, const AttrSpec *as, const char *v)
{
    FILE *f = m->out;
    fprintf(f, ", %s=", as->name);
    switch (as->type) {
    case AT_INT: {
        int64_t x;
        if (!parse_int(v, &x))
            return node_fail(m, n, "attribute '%s': '%s' is not an integer", as->name, v);
        if ((double)x < as->min || (double)x > as->max) /* also keeps the literal in range */
            return node_fail(m, n, "attribute '%s': %lld is not between %.0f and %.0f", as->name,
                             (long long)x, as->min, as->max);
        fprintf(f, "%lld", (long long)x);
        return true;
    }
    case AT_FLOAT: {
        double x;
        if (!parse_float(v, &x))
            return node_fail(m, n, "attribute '%s': '%s' is not a finite number", as->name, v);
        if (x < as->min || x > as->max)
            return node_fail(m, n, "attribute '%s': %s is not between %g and %g", as->name, v,
                             as->min, as->max);
        put_float(f, x);
        return true;
    }
    case AT_BOOL:
        if (!one_of(v, "True|true|1|False|false|0"))
            return node_fail(m, n, "attribute '%s': '%s' is not True or False", as->name, v);
        fputs(is_true(v) ? "true" : "false", f);
        return true;
    case AT_ENUM:
    case AT_STR: {
        char what[MX_MAX_NAME + 16];
        snprintf(what, sizeof what, "attribute '%s'", as->name);
        return put_text(m, n, what, v);
    }
    case AT_DTYPE: {
        DType t = dtype_parse(v);
        if (t == DT_UNKNOWN)
            return node_fail(m, n, "attribute '%s': '%s' is not a dtype ampc knows", as->name, v);
        fputs(dtype_long(t), f);
        return true;
    }
    case AT_TUPLE: {
        int64_t t[AMPC_MAX_RANK];
        int k;
        if (!parse_tuple(v, t, &k))
            return node_fail(m, n, "attribute '%s': '%s' is not a tuple of at most %d integers",
                             as->name, v, AMPC_MAX_RANK);
        fputc('(', f);
        for (int i = 0; i < k; i++) {
            if (t[i] < -INT32_MAX || t[i] > INT32_MAX)
                return node_fail(m, n, "attribute '%s': %lld is out of range", as->name,
                                 (long long)t[i]);
            fprintf(f, "%s%lld", i ? "," : "", (long long)t[i]);
        }
        fputs(k == 1 ? ",)" : ")", f);
        return true;
    }
    }
    return true;
}

static bool attr_ignored(const MxNode *n, const char *key, const char *v, bool *refused)
{
    const char *op = op_info(n->kind)->name;
    for (size_t k = 0; k < sizeof mx_ignored / sizeof mx_ignored[0]; k++)
        if (strcmp(mx_ignored[k].op, op) == 0 && strcmp(mx_ignored[k].attr, key) == 0) {
            *refused = mx_ignored[k].values && !one_of(v, mx_ignored[k].values);
            return true;
        }
    return false;
}

/* Whether key was seen already (the same key may stand in attrs and in an
 * old file's param). */
static bool attr_seen(const MxNode *n, int upto, const char *key)
{
    for (int k = 0; k < upto; k++)
        if (get(n->attrs[k], key))
            return true;
    return false;
}

static bool put_attrs(Mx *m, const MxNode *n)
{
    OpKind op = n->kind;
    const OpInfo *oi = op_info(op);
    if (n->act)
        fprintf(m->out, ", act_type=\"%s\"", n->act);
    for (int k = 0; k < 3; k++) {
        if (!n->attrs[k])
            continue;
        json_object_object_foreach(n->attrs[k], key, val)
        {
            const char *v = str_of(val);
            if (strncmp(key, "__", 2) == 0 || attr_seen(n, k, key) || one_of(key, MX_USER_ATTRS))
                continue; /* hints and user attributes (__lr_mult__, ctx_group ...) */
            bool refused = false;
            if (op == OP_Concat && strcmp(key, "num_args") == 0) {
                int64_t c;
                if (!parse_int(v, &c) || c != n->nin)
                    return node_fail(m, n, "num_args=%s, but %d inputs", v, n->nin);
                continue;
            }
            if (n->act && strcmp(key, "act_type") == 0)
                return node_fail(m, n, "attribute 'act_type' is not supported");
            if (attr_ignored(n, key, v, &refused)) {
                if (refused)
                    return node_fail(m, n, "%s='%s' is not supported", key, v);
                continue;
            }
            int a = op_attr_index(op, key);
            if (a < 0)
                return node_fail(m, n, "attribute '%s' is not supported", key);
            if (strcmp(v, "None") == 0 && oi->attrs[a].type != AT_ENUM && !oi->attrs[a].required)
                continue; /* MXNet's "not given" */
            if (!put_attr(m, n, &oi->attrs[a], v))
                return false;
        }
    }
    for (size_t k = 0; k < sizeof mx_defaults / sizeof mx_defaults[0]; k++)
        if (strcmp(mx_defaults[k].op, oi->name) == 0 && !node_attr(n, mx_defaults[k].attr))
            fprintf(m->out, ", %s=%s", mx_defaults[k].attr, mx_defaults[k].text);
    return true;
}

static void put_value(Mx *m, int id)
{
    const MxNode *v = &m->nodes[id];
    if (v->role == ROLE_DATA || v->role == ROLE_LABEL)
        fputs(v->name, m->out);
    else
        fprintf(m->out, "%s%d", m->prefix, id);
}

static bool put_op(Mx *m, int i)
{
    const MxNode *n = &m->nodes[i];
    const OpInfo *oi = op_info(n->kind);
    bool no_bias = is_true(node_attr(n, "no_bias"));
    fprintf(m->out, "    %s%d = %s(", m->prefix, i, oi->name);
    for (int k = 0; k < n->nin; k++) {
        const SlotSpec *ss = input_slot(n, k, no_bias);
        fputs(k ? ", " : "", m->out);
        if (ss && (ss->kind == SLOT_PARAM || ss->kind == SLOT_AUX))
            fprintf(m->out, "%s=", ss->name);
        put_value(m, n->in[k]);
    }
    if (n->nin == 0)
        return node_fail(m, n, "an op without inputs");
    if (!put_attrs(m, n))
        return false;
    fputs(", name=", m->out);
    if (!put_text(m, n, "the name", n->name))
        return false;
    fputs(")\n", m->out);
    return true;
}

/* A parameter: its name, and MXNet's per-parameter hints that ampc has
 * (__wd_mult__, __lr_mult__; __init__ zeros/ones). */
static bool put_param(Mx *m, int i)
{
    const MxNode *n = &m->nodes[i];
    FILE *f = m->out;
    fprintf(f, "    %s%d = param(name=", m->prefix, i);
    if (!put_text(m, n, "the name", n->name))
        return false;
    static const char *const mults[][2] = {{"__wd_mult__", "wd_mult"},
                                           {"__lr_mult__", "lr_mult"},
                                           {"wd_mult", "wd_mult"},
                                           {"lr_mult", "lr_mult"}};
    bool done[2] = {0};
    for (int k = 0; k < 4; k++) {
        const char *v = node_attr(n, mults[k][0]);
        double x;
        if (!v || done[k % 2])
            continue;
        if (!parse_float(v, &x) || x < 0 || x > 1e30)
            return node_fail(m, n, "%s='%s' is not a number from 0 to 1e30", mults[k][0], v);
        fprintf(f, ", %s=", mults[k][1]);
        put_float(f, x);
        done[k % 2] = true;
    }
    const char *init = node_attr(n, "__init__");
    if (init && one_of(init, "zeros|zero"))
        fputs(", init=zero", f);
    else if (init && one_of(init, "ones|one"))
        fputs(", init=one", f);
    fputs(")\n", f);
    return true;
}

/* ---- inputs and their shapes ----------------------------------------------------- */

static bool is_temp(const Mx *m, const char *name);

/* --input-shape NAME=D0,D1,... (the first dimension is the batch, N). */
static const char *given_shape(Mx *m, const char *name)
{
    for (int k = 0; k < m->o->nshapes; k++) {
        const char *s = m->o->shapes[k];
        const char *eq = strchr(s, '=');
        if (eq && (size_t)(eq - s) == strlen(name) && strncmp(s, name, (size_t)(eq - s)) == 0)
            return eq + 1;
    }
    return NULL;
}

static bool check_given_shapes(Mx *m)
{
    for (int k = 0; k < m->o->nshapes; k++) {
        const char *s = m->o->shapes[k], *eq = strchr(s, '=');
        for (int j = 0; eq && j < k; j++) {
            const char *o = m->o->shapes[j];
            if (strncmp(o, s, (size_t)(eq - s + 1)) == 0)
                return file_fail(m, "--input-shape '%s' and '%s': input '%.*s' is given twice", o,
                                 s, (int)(eq - s), s);
        }
        bool found = false;
        for (int i = 0; eq && i < m->n; i++)
            found |= m->nodes[i].kind == OP_COUNT && m->nodes[i].role != ROLE_PARAM &&
                     m->nodes[i].role != ROLE_UNUSED &&
                     strlen(m->nodes[i].name) == (size_t)(eq - s) &&
                     strncmp(m->nodes[i].name, s, (size_t)(eq - s)) == 0;
        if (!eq)
            return file_fail(m, "--input-shape '%s': write NAME=D0,D1,... (data=1,3,224,224)", s);
        if (!found)
            return file_fail(m, "--input-shape '%s': the model has no input named '%.*s'", s,
                             (int)(eq - s), s);
    }
    return true;
}

/* Writes NAME: DTYPE[N,d1,...] for one input. */
static bool put_input(Mx *m, const MxNode *v, bool first)
{
    if (!is_ident(v->name))
        return file_fail(m,
                         "input '%s' is not an ampc name ([A-Za-z_][A-Za-z0-9_]*, not a "
                         "keyword): rename it in the file",
                         v->name);
    if (is_temp(m, v->name))
        return file_fail(m, "input '%s' clashes with the importer's temporaries", v->name);
    /* names the DSL gives a meaning of its own: init=zero, Cast(x, float16), N */
    if (strcmp(v->name, "zero") == 0 || strcmp(v->name, "one") == 0 || strcmp(v->name, "N") == 0 ||
        dtype_parse(v->name) != DT_UNKNOWN)
        return file_fail(m,
                         "input '%s' has the name of an ampc builtin (zero, one, N, a dtype): "
                         "rename it in the file",
                         v->name);
    const char *text = given_shape(m, v->name), *hint = node_attr(v, "__shape__");
    int64_t d[AMPC_MAX_RANK];
    int rank = 0;
    if (!text && !hint && v->role == ROLE_LABEL) {
        rank = 1, d[0] = 1; /* a class index per sample */
    } else if (!text && !hint) {
        return file_fail(m,
                         "input '%s' has no shape: give --input-shape %s=N,C,H,W (e.g. "
                         "%s=1,3,224,224)",
                         v->name, v->name, v->name);
    } else if (!parse_tuple(text ? text : hint, d, &rank) || rank < 1) {
        return file_fail(m, "input '%s': the shape '%s' is not a list of 1 to %d integers", v->name,
                         text ? text : hint, AMPC_MAX_RANK);
    }
    /* The dtype hint holds with or without --input-shape, which gives the
     * shape only; -1 is MXNet's "unknown", the default float32. */
    DType t = DT_F32;
    const char *dt = node_attr(v, "__dtype__");
    if (dt) {
        /* mshadow's type flags */
        static const DType flags[] = {DT_F32, DT_F64, DT_F16, DT_U8, DT_I32, DT_I8, DT_I64};
        int64_t k;
        if (!parse_int(dt, &k) || k < -1 || k > 12 || (k > 6 && k != 12))
            return file_fail(m, "input '%s': __dtype__='%s' is not a dtype ampc knows", v->name,
                             dt);
        t = k == 12 ? DT_BF16 : k == -1 ? DT_F32 : flags[k];
    }
    fprintf(m->out, "%s%s: %s[N", first ? "" : ", ", v->name, dtype_long(t));
    for (int k = 1; k < rank; k++) {
        if (d[k] < 1 || d[k] > INT32_MAX)
            return file_fail(m, "input '%s': dimension %d is %lld; give --input-shape %s=...",
                             v->name, k, (long long)d[k], v->name);
        fprintf(m->out, ",%lld", (long long)d[k]);
    }
    fputc(']', m->out);
    return true;
}

/* Whether name is one of the temporaries: <prefix><digits>. */
static bool is_temp(const Mx *m, const char *name)
{
    size_t k = strlen(m->prefix);
    if (strncmp(name, m->prefix, k) != 0 || !name[k])
        return false;
    for (const char *p = name + k; *p; p++)
        if (*p < '0' || *p > '9')
            return false;
    return true;
}

/* The temporaries' prefix: "x", or "x_", "x__" ... until no input is named
 * like a temporary (an input keeps its name: it is the model's). */
static void pick_prefix(Mx *m)
{
    snprintf(m->prefix, sizeof m->prefix, "x");
    for (size_t len = 1; len + 1 < sizeof m->prefix; len++) {
        bool clash = false;
        for (int i = 0; i < m->n; i++)
            clash |= m->nodes[i].kind == OP_COUNT && m->nodes[i].role != ROLE_PARAM &&
                     is_temp(m, m->nodes[i].name);
        if (!clash)
            return;
        strcat(m->prefix, "_");
    }
}

/* The model's name: the file's base name without -symbol.json or .json, as
 * an identifier. */
static void put_model_name(Mx *m)
{
    const char *base = strrchr(m->path, '/') ? strrchr(m->path, '/') + 1 : m->path;
    size_t len = strlen(base);
    static const char *const suffixes[] = {"-symbol.json", ".json"};
    for (int k = 0; k < 2; k++) {
        size_t s = strlen(suffixes[k]);
        if (len > s && strcmp(base + len - s, suffixes[k]) == 0) {
            len -= s;
            break;
        }
    }
    char name[256];
    size_t k = 0;
    if (len == 0 || !(base[0] == '_' || ((base[0] | 32) >= 'a' && (base[0] | 32) <= 'z')))
        name[k++] = 'm', name[k++] = '_';
    for (size_t i = 0; i < len && k < 200; i++) {
        char c = base[i];
        bool ok = c == '_' || (c >= '0' && c <= '9') || ((c | 32) >= 'a' && (c | 32) <= 'z');
        name[k++] = ok ? c : '_';
    }
    name[k] = 0;
    fprintf(m->out, "%s%s", name, is_ident(name) ? "" : "_"); /* a keyword: model_ */
}

static bool put_model(Mx *m)
{
    FILE *f = m->out;
    fputs("# imported from MXNet symbol JSON by ampc --from-mxnet (docs/mxnet.md)\nmodel ", f);
    put_model_name(m);
    fputc('(', f);
    bool first = true;
    for (int pass = 0; pass < 2; pass++) /* data inputs first: the program feeds the first */
        for (int i = 0; i < m->n; i++) {
            const MxNode *v = &m->nodes[i];
            if (v->kind != OP_COUNT || v->role != (pass ? ROLE_LABEL : ROLE_DATA))
                continue;
            if (!put_input(m, v, first))
                return false;
            first = false;
        }
    bool loss = m->o->loss != NULL;
    if (loss)
        fprintf(f, "%slabel: float32[N]", first ? "" : ", ");
    fputs(") {\n", f);
    for (int i = 0; i < m->n; i++) {
        const MxNode *n = &m->nodes[i];
        if (n->kind == OP_COUNT && n->role == ROLE_PARAM && !put_param(m, i))
            return false;
        if (n->kind != OP_COUNT && !put_op(m, i))
            return false;
    }
    if (loss) {
        fprintf(f, "    return SoftmaxOutput(");
        put_value(m, m->heads[0]);
        fputs(", label, name=\"softmax\")\n}\n", f);
        return true;
    }
    fputs("    return ", f);
    fputs(m->nheads > 1 ? "(" : "", f);
    for (int i = 0; i < m->nheads; i++) {
        fputs(i ? ", " : "", f);
        put_value(m, m->heads[i]);
    }
    fputs(m->nheads > 1 ? ")\n}\n" : "\n}\n", f);
    return true;
}

/* --loss=softmax: one head that is not a loss already; 'label' and
 * 'softmax' free. */
static bool check_loss(Mx *m)
{
    if (!m->o->loss)
        return true;
    if (strcmp(m->o->loss, "softmax") != 0)
        return file_fail(m, "--loss=%s: the loss ampc attaches is softmax", m->o->loss);
    if (m->nheads != 1)
        return file_fail(m, "--loss=softmax: the symbol has %d heads; it needs one", m->nheads);
    const MxNode *h = &m->nodes[m->heads[0]];
    if (h->kind == OP_SoftmaxOutput)
        return file_fail(m, "--loss=softmax: the head '%s' is a loss already", h->name);
    for (int i = 0; i < m->n; i++)
        if (strcmp(m->nodes[i].name, "label") == 0 || strcmp(m->nodes[i].name, "softmax") == 0)
            return file_fail(m, "--loss=softmax: the symbol has a node named '%s' already",
                             m->nodes[i].name);
    return true;
}

char *mxnet_import(Diag *d, const char *path, const char *text_in, size_t len_in,
                   const MxImportOptions *o, size_t *len)
{
    static const MxImportOptions none = {0};
    Mx m = {.d = d, .path = path, .o = o ? o : &none};
    int file = text_in ? diag_add_buffer(d, path, text_in, len_in) : diag_load_file(d, path);
    if (file < 0) {
        diag_plain_error(d, "cannot open '%s': %s", path, diag_load_error(d));
        return NULL;
    }
    json_object *root = parse_json(&m, file);
    char *text = NULL;
    *len = 0;
    bool ok = root && read_nodes(&m, root) && unique_names(&m) && classify(&m) &&
              assign_roles(&m) && check_given_shapes(&m) && check_loss(&m);
    if (ok) {
        pick_prefix(&m);
        m.out = open_memstream(&text, len);
        if (!m.out)
            DIE("out of memory");
        ok = put_model(&m);
        if (fclose(m.out) != 0)
            DIE("out of memory");
    }
    for (int i = 0; m.nodes && i < m.n; i++)
        free(m.nodes[i].in);
    free(m.nodes);
    free(m.heads);
    if (root)
        json_object_put(root);
    if (!ok) {
        free(text);
        return NULL;
    }
    return text;
}
