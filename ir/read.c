/* read.c - reads the text dump (print.c) back into a graph.
 *
 * This is what lets a single pass be tested on a hand-written graph, as
 * LLVM's tests do with .ll files.  Errors point into the .ir file: an
 * unknown op or attribute, a value of the wrong type, an undefined %id. */
#include "ir.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    Diag *d;
    int file;
    const char *p, *end, *line_start;
    int line;
    Graph *g;     /* the graph being read */
    Graph *first; /* the training graph, when g is its inference graph */
    StrMap ids;   /* "%12" text -> node id */
    Arena tmp;
    bool failed;
    int stage;    /* ir_stage of the pass the banner names; -1 without one */
} Reader;

static Loc here(const Reader *r) { return (Loc){r->file, r->line, (int)(r->p - r->line_start) + 1}; }

static bool rd_error(Reader *r, Loc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool rd_error(Reader *r, Loc loc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    diag_verror_in(r->d, loc, -1, fmt, ap);
    va_end(ap);
    r->failed = true;
    return false;
}

static void skip_blanks(Reader *r)
{
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\r'))
        r->p++;
}

static bool at_eol(Reader *r)
{
    skip_blanks(r);
    return r->p >= r->end || *r->p == '\n' || *r->p == '#';
}

static bool expect(Reader *r, char c)
{
    skip_blanks(r);
    if (r->p < r->end && *r->p == c) {
        r->p++;
        return true;
    }
    return rd_error(r, here(r), "expected '%c'", c);
}

static bool accept(Reader *r, char c)
{
    skip_blanks(r);
    if (r->p < r->end && *r->p == c) {
        r->p++;
        return true;
    }
    return false;
}

static bool is_word_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.';
}

/* A bare word: identifiers, dtype names ("?" too). */
static const char *word(Reader *r)
{
    skip_blanks(r);
    const char *s = r->p;
    if (r->p < r->end && *r->p == '?') {
        r->p++;
    } else {
        while (r->p < r->end && is_word_char(*r->p) && *r->p != '.')
            r->p++;
    }
    if (r->p == s) {
        rd_error(r, here(r), "expected a name");
        return NULL;
    }
    return arena_strndup(&r->tmp, s, (size_t)(r->p - s));
}

static bool integer(Reader *r, int64_t *out)
{
    skip_blanks(r);
    Loc at = here(r);
    char *end;
    errno = 0;
    long long v = strtoll(r->p, &end, 10);
    if (end == r->p || end > r->end)
        return rd_error(r, at, "expected an integer");
    if (errno == ERANGE)
        return rd_error(r, at, "integer out of range");
    r->p = end;
    *out = v;
    return true;
}

static bool number(Reader *r, double *out)
{
    skip_blanks(r);
    Loc at = here(r);
    char *end;
    double v = strtod(r->p, &end);
    if (end == r->p || end > r->end)
        return rd_error(r, at, "expected a number");
    r->p = end;
    *out = v;
    return true;
}

static const char *string(Reader *r)
{
    skip_blanks(r);
    Loc at = here(r);
    if (r->p >= r->end || *r->p != '"') {
        rd_error(r, at, "expected a string");
        return NULL;
    }
    r->p++;
    /* Room for the text up to the closing quote (or the end of the line),
     * which the string cannot outgrow: sizing it by the rest of the file
     * made reading a dump quadratic in its size. */
    const char *q = r->p;
    while (q < r->end && *q != '"' && *q != '\n')
        q += *q == '\\' && q + 1 < r->end && q[1] != '\n' ? 2 : 1;
    char *buf = arena_alloc(&r->tmp, (size_t)(q - r->p) + 1);
    size_t n = 0;
    while (r->p < r->end && *r->p != '"') {
        if (*r->p == '\n') {
            rd_error(r, at, "unterminated string");
            return NULL;
        }
        if (*r->p == '\\' && r->p + 1 < r->end && r->p[1] != '\n') {
            r->p++;
            buf[n++] = *r->p == 'n' ? '\n' : *r->p == 't' ? '\t' : *r->p;
        } else {
            buf[n++] = *r->p;
        }
        r->p++;
    }
    if (r->p >= r->end) {
        rd_error(r, at, "unterminated string");
        return NULL;
    }
    r->p++;
    buf[n] = 0;
    return buf;
}

static bool read_dims(Reader *r, Node *n);

/* dtype [dims] [@layout]: "f32[N,3,224,224]", "?", "f16[]", "f16[N,64,8,8]@nhwc" */
static bool read_type(Reader *r, Node *n)
{
    if (!read_dims(r, n))
        return false;
    if (r->p >= r->end || *r->p != '@')
        return true;
    r->p++;
    Loc at = here(r);
    const char *w = word(r);
    if (!w)
        return false;
    for (int l = 0; l < LAYOUT_COUNT; l++)
        if (strcmp(w, layout_name((Layout)l)) == 0) {
            n->layout = (Layout)l;
            return true;
        }
    return rd_error(r, at, "unknown layout '%s' (nchw or nhwc)", w);
}

static bool read_dims(Reader *r, Node *n)
{
    skip_blanks(r); /* locations point at the word, not the blank before it */
    Loc at = here(r);
    const char *dt = word(r);
    if (!dt)
        return false;
    if (strcmp(dt, "?") != 0) {
        n->dtype = dtype_parse(dt);
        if (n->dtype == DT_UNKNOWN)
            return rd_error(r, at, "unknown dtype '%s' (the dtypes: %s)", dt, dtype_names(true));
    }
    if (r->p >= r->end || *r->p != '[')
        return true;
    r->p++;
    n->shape.rank = 0;
    if (accept(r, ']'))
        return true;
    do {
        if (n->shape.rank == AMPC_MAX_RANK)
            return rd_error(r, here(r), "more than %d dimensions", AMPC_MAX_RANK);
        skip_blanks(r);
        Dim d;
        if (r->p < r->end && *r->p == 'N') {
            r->p++;
            d = DIM_N;
        } else {
            int64_t v;
            Loc dat = here(r); /* blanks were skipped above */
            if (!integer(r, &v))
                return false;
            if (v < 0 || v > INT32_MAX)
                return rd_error(r, dat, "dimension out of range");
            /* no rule makes an empty dimension and elaborate refuses one in an
             * input: a dump that holds one is refused as the model would be
             * (the memory planner's in-place rule assumes every tensor has
             * bytes) */
            if (v == 0)
                return rd_error(r, dat, "dimension 0: every dimension is at least 1");
            d = v;
            if (r->p < r->end && *r->p == 'N') {
                r->p++;
                d = -v;
            }
        }
        n->shape.d[n->shape.rank++] = d;
    } while (accept(r, ','));
    return expect(r, ']');
}

/* The schema's range, enforced as elaborate does for the DSL: a dump is
 * user input too, and check and shape rules divide by these values. */
static bool int_in_range(Reader *r, Loc at, const Node *n, const AttrSpec *as, int64_t v)
{
    if ((double)v >= as->min && (double)v <= as->max)
        return true;
    return rd_error(r, at, "%s: attribute '%s' must be between %.0f and %.0f, got %lld",
                    op_info(n->op)->name, as->name, as->min, as->max, (long long)v);
}

static bool read_attr_value(Reader *r, Node *n, int a)
{
    const AttrSpec *as = &op_info(n->op)->attrs[a];
    AttrVal *v = &n->attrs[a];
    skip_blanks(r);
    Loc at = here(r);
    switch (as->type) {
    case AT_INT: return integer(r, &v->i) && int_in_range(r, at, n, as, v->i);
    case AT_FLOAT:
        if (!number(r, &v->f))
            return false;
        if (!(v->f >= as->min && v->f <= as->max))
            return rd_error(r, at, "%s: attribute '%s' must be between %g and %g, got %g",
                            op_info(n->op)->name, as->name, as->min, as->max, v->f);
        return true;
    case AT_BOOL: {
        const char *w = word(r);
        if (!w)
            return false;
        if (strcmp(w, "true") && strcmp(w, "false"))
            return rd_error(r, at, "%s: '%s' must be true or false", as->name, w);
        v->b = strcmp(w, "true") == 0;
        return true;
    }
    case AT_ENUM: {
        const char *w = word(r);
        if (!w)
            return false;
        for (int i = 0; as->choices[i]; i++)
            if (strcmp(as->choices[i], w) == 0) {
                v->e = i;
                return true;
            }
        return rd_error(r, at, "%s: '%s' is not a valid %s", op_info(n->op)->name, w, as->name);
    }
    case AT_DTYPE: {
        const char *w = word(r);
        if (!w)
            return false;
        v->e = dtype_parse(w);
        if (v->e == DT_UNKNOWN && strcmp(w, "unknown") != 0)
            return rd_error(r, at, "unknown dtype '%s' (the dtypes: %s, unknown)", w,
                            dtype_names(false));
        return true;
    }
    case AT_STR: {
        const char *s = string(r);
        if (!s)
            return false;
        v->s = arena_strdup(&r->g->arena, s);
        return true;
    }
    case AT_TUPLE:
        if (!expect(r, '('))
            return false;
        v->t.n = 0;
        if (accept(r, ')'))
            return true;
        do {
            skip_blanks(r);
            if (r->p < r->end && *r->p == ')')
                break; /* "(3,)" */
            if (v->t.n == AMPC_MAX_RANK)
                return rd_error(r, here(r), "%s: more than %d values", as->name, AMPC_MAX_RANK);
            Loc el = here(r);
            if (!integer(r, &v->t.v[v->t.n]) || !int_in_range(r, el, n, as, v->t.v[v->t.n]))
                return false;
            v->t.n++;
        } while (accept(r, ','));
        return expect(r, ')');
    }
    return false;
}

/* key_name: the name the value's key gives the node when it has no name=
 * (--dump-ids=names), or NULL (a position) */
static bool read_attrs(Reader *r, Node *n, const char *key_name, Loc key_at)
{
    const OpInfo *oi = op_info(n->op);
    bool seen[32] = {0};
    bool have_name = false;
    if (!expect(r, '{'))
        return false;
    if (accept(r, '}'))
        goto done;
    do {
        skip_blanks(r);
        Loc at = here(r);
        const char *key = word(r);
        if (!key || !expect(r, '='))
            return false;
        if (strcmp(key, "name") == 0) {
            const char *s = string(r);
            if (!s)
                return false;
            if (!graph_set_name(r->g, n, s))
                return rd_error(r, at, "duplicate name '%s'", s);
            have_name = true;
            continue;
        }
        int a = op_attr_index(n->op, key);
        if (a < 0)
            return rd_error(r, at, "%s has no attribute '%s' (its attributes: %s)", oi->name, key,
                            op_names_text(&r->g->arena, n->op, false));
        if (seen[a])
            return rd_error(r, at, "attribute '%s' given twice", key);
        seen[a] = true;
        if (!read_attr_value(r, n, a))
            return false;
    } while (accept(r, ','));
    if (!expect(r, '}'))
        return false;
done:
    if (!have_name && key_name && !graph_set_name(r->g, n, key_name))
        return rd_error(r, key_at, "duplicate name '%s'", key_name);
    if (!have_name && !key_name)
        return rd_error(r, n->loc, "node has no name");
    for (int a = 0; a < oi->nattrs; a++)
        if (oi->attrs[a].required && !seen[a])
            return rd_error(r, n->loc, "%s: missing required attribute '%s'", oi->name,
                            oi->attrs[a].name);
    return true;
}

/* A value's key after '%': its position (digits: "%12"), a bare name
 * ("stage1_conv1") or a quoted one ("\"odd name\""), as print.c writes
 * them; a hand-written graph may use any word as a label (%x) and name
 * the node with name="...".  Keys are labels first: a quoted one is kept
 * with its quote ("\"odd name"), so it never equals a bare label.  *is_name
 * says whether the key may be a node's name; NULL after an error. */
static const char *value_key(Reader *r, bool *is_name)
{
    skip_blanks(r);
    Loc at = here(r);
    if (r->p >= r->end || *r->p != '%') {
        rd_error(r, at, "expected a value such as %%3 or %%conv1");
        return NULL;
    }
    r->p++;
    if (r->p < r->end && *r->p == '"') {
        *is_name = true;
        const char *s = string(r);
        return s ? arena_printf(&r->tmp, "\"%s", s) : NULL;
    }
    const char *s = r->p;
    while (r->p < r->end && is_word_char(*r->p) && *r->p != '.')
        r->p++;
    if (r->p == s) {
        rd_error(r, at, "expected a value such as %%3 or %%conv1");
        return NULL;
    }
    *is_name = !(*s >= '0' && *s <= '9');
    if (!*is_name) /* positions are digits only */
        for (const char *c = s; c < r->p; c++)
            if (!(*c >= '0' && *c <= '9')) {
                rd_error(r, at,
                         "a value is %%DIGITS (its position) or %%NAME (a name "
                         "starting with a letter or '_'), not '%%%.*s'",
                         (int)(r->p - s), s);
                return NULL;
            }
    return arena_strndup(&r->tmp, s, (size_t)(r->p - s));
}

/* The name a key gives a node that has no name= (a quoted key without its quote). */
static const char *key_name(const char *key) { return key[0] == '"' ? key + 1 : key; }

static int resolve_id(Reader *r)
{
    skip_blanks(r);
    Loc at = here(r);
    bool is_name;
    const char *key = value_key(r, &is_name);
    if (!key)
        return -1;
    int *id = strmap_get(&r->ids, key);
    /* not a label: a node defined above under that name */
    const Node *n = !id && is_name ? graph_find(r->g, key_name(key)) : NULL;
    if (!id && !n) {
        rd_error(r, at, "use of undefined value '%%%s'", key);
        return -1;
    }
    return id ? *id : n->id;
}

/* %ID:TYPE = Op(%a, %b) {attrs}, or %NAME:TYPE = ... (--dump-ids=names) */
static bool read_node(Reader *r)
{
    Loc at = here(r);
    bool is_name;
    const char *key = value_key(r, &is_name);
    if (!key)
        return false;
    Node tmp = {.shape = shape_unknown()};
    if (!expect(r, ':') || !read_type(r, &tmp) || !expect(r, '='))
        return false;
    skip_blanks(r);
    Loc opat = here(r);
    const char *opname = word(r);
    if (!opname)
        return false;
    OpKind op = op_lookup(opname);
    if (op == OP_COUNT)
        return rd_error(r, opat, "unknown op '%s'", opname);
    /* a forward graph (the passes before autodiff, a hand-written graph)
     * has none of the ops autodiff makes: their rules assume its graph */
    if (op_made_by_fuse(op) && r->stage < ir_stage("fuse"))
        return rd_error(r, opat, "%s is made by the fuse pass: only a dump after fuse holds it",
                        opname);
    if (op_made_by_schedule(op) && r->stage < ir_stage("schedule"))
        return rd_error(r, opat, "%s is made by the schedule pass: only a dump after schedule "
                                 "holds it",
                        opname);
    if (op_made_by_autodiff(op) && r->stage < ir_stage("autodiff"))
        return rd_error(r, opat, "%s is made by autodiff: only a dump after autodiff holds it",
                        opname);
    if (!expect(r, '('))
        return false;
    Vec in = {0};
    if (!accept(r, ')')) {
        do {
            int id = resolve_id(r);
            if (id < 0) {
                vec_free(&in);
                return false;
            }
            *(int *)vec_push(&in, sizeof(int)) = id;
        } while (accept(r, ','));
        if (!expect(r, ')')) {
            vec_free(&in);
            return false;
        }
    }
    const OpInfo *oi = op_info(op);
    Node *n = graph_add(r->g, op, in.data, in.len, opat, -1);
    vec_free(&in);
    n->shape = tmp.shape;
    n->dtype = tmp.dtype;
    n->layout = tmp.layout;
    if (!read_attrs(r, n, is_name ? key_name(key) : NULL, at))
        return false;
    if (oi->nslots) {
        /* exactly the slots its attributes call for: (data, weight) under
         * no_bias=true, (data, weight, bias) without */
        int want = 0;
        char names[160] = "";
        for (int s = 0; s < oi->nslots; s++)
            if (op_slot_present(op, s, n->attrs))
                snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s",
                         want++ ? ", " : "", oi->slots[s].name);
        if (n->nin != want)
            return rd_error(r, opat, "%s takes %d input%s here (%s), got %d", oi->name, want,
                            want == 1 ? "" : "s", names, n->nin);
    }
    if ((op == OP_Input || op == OP_Param) && n->nin)
        return rd_error(r, opat, "%s takes no inputs", oi->name);
    if (op != OP_Input && op != OP_Param && n->nin == 0)
        return rd_error(r, opat, "%s needs inputs", oi->name);
    if (!strmap_put(&r->ids, arena_strdup(&r->tmp, key), n->id))
        return rd_error(r, at, "value '%%%s' defined twice", key);
    if (!oi->check(r->g, n)) {
        r->failed = true;
        return false;
    }
    return true;
}

/* Train values nest (sgd(stages=cosine(...))) as deep as the text says:
 * bound it, as the model language bounds its brackets, so that reading,
 * copying and printing them cannot overflow the stack. */
enum { READ_MAX_NESTING = 1000 };

static bool read_train_value(Reader *r, ConfigVal *c, int depth);

static bool read_train_call(Reader *r, ConfigVal *c, int depth)
{
    Vec args = {0}, names = {0};
    bool ok = true;
    if (!accept(r, ')')) {
        do {
            skip_blanks(r);
            const char *save = r->p;
            const char *name = NULL;
            if (r->p < r->end && ((*r->p >= 'a' && *r->p <= 'z') || (*r->p >= 'A' && *r->p <= 'Z') ||
                                  *r->p == '_')) {
                const char *w = word(r);
                if (w && accept(r, '='))
                    name = w;
                else
                    r->p = save;
            }
            ConfigVal *v = arena_alloc(&r->tmp, sizeof *v);
            if (!read_train_value(r, v, depth + 1)) {
                ok = false;
                break;
            }
            *(ConfigVal **)vec_push(&args, sizeof(ConfigVal *)) = v;
            *(const char **)vec_push(&names, sizeof(char *)) = name;
        } while (accept(r, ','));
        ok = ok && expect(r, ')');
    }
    c->nargs = args.len;
    c->args = arena_alloc(&r->tmp, sizeof(ConfigVal *) * (size_t)(args.len + 1));
    c->argnames = arena_alloc(&r->tmp, sizeof(char *) * (size_t)(args.len + 1));
    for (int i = 0; i < args.len; i++) {
        c->args[i] = VEC_AT(args, ConfigVal *, i);
        c->argnames[i] = VEC_AT(names, const char *, i);
    }
    vec_free(&args);
    vec_free(&names);
    return ok;
}

static bool read_train_value(Reader *r, ConfigVal *c, int depth)
{
    if (at_eol(r))
        return rd_error(r, here(r), "expected a value");
    if (depth > READ_MAX_NESTING)
        return rd_error(r, here(r), "value nested too deeply (more than %d levels)",
                        READ_MAX_NESTING);
    char ch = *r->p;
    if (ch == '"') {
        c->kind = CV_STR;
        return (c->s = string(r)) != NULL;
    }
    if ((ch >= '0' && ch <= '9') || ch == '-' || ch == '.') {
        const char *q = r->p + (ch == '-');
        while (q < r->end && *q >= '0' && *q <= '9')
            q++;
        if (q < r->end && (*q == '.' || *q == 'e' || *q == 'E')) {
            c->kind = CV_FLOAT;
            return number(r, &c->f);
        }
        c->kind = CV_INT;
        return integer(r, &c->i);
    }
    const char *w = word(r);
    if (!w)
        return false;
    if (accept(r, '(')) {
        c->kind = CV_CALL;
        c->s = w;
        return read_train_call(r, c, depth);
    }
    if (strcmp(w, "true") == 0 || strcmp(w, "false") == 0) {
        c->kind = CV_BOOL;
        c->b = w[0] == 't';
        return true;
    }
    c->kind = CV_SYM;
    c->s = w;
    return true;
}

static bool read_line(Reader *r, Vec *train)
{
    skip_blanks(r);
    if (at_eol(r))
        return true;
    Loc at = here(r);
    if (*r->p == '%')
        return r->g ? read_node(r) : rd_error(r, at, "expected 'model NAME' first");
    const char *kw = word(r);
    if (!kw)
        return false;
    if (strcmp(kw, "model") == 0) {
        /* a training graph's dump goes on with its inference graph */
        if (r->g && (r->first || r->g->noutputs == 0))
            return rd_error(r, at, "a second 'model' line");
        /* only autodiff makes an inference graph: before it (or without a
         * banner) no pass would infer the second graph's shapes */
        if (r->g && r->stage < ir_stage("autodiff"))
            return rd_error(r, at, "a second 'model' line: only a dump after autodiff holds an "
                                   "inference graph");
        const char *name = word(r);
        if (!name)
            return false;
        if (r->g) {
            graph_set_train(r->g, train->data, train->len);
            train->len = 0;
            strmap_free(&r->ids);
            r->first = r->g;
        }
        r->g = graph_new(r->d, name);
        return true;
    }
    if (!r->g)
        return rd_error(r, at, "expected 'model NAME' first");
    if (strcmp(kw, "train") == 0) {
        ConfigEntry *e = vec_push(train, sizeof(ConfigEntry));
        e->loc = at;
        e->key = word(r);
        e->val = arena_alloc(&r->tmp, sizeof(ConfigVal));
        return e->key && expect(r, '=') && read_train_value(r, e->val, 1);
    }
    if (strcmp(kw, "return") == 0) {
        do {
            int id = resolve_id(r);
            if (id < 0)
                return false;
            graph_add_output(r->g, id);
        } while (accept(r, ','));
        return true;
    }
    return rd_error(r, at, "expected a node, 'model', 'train' or 'return', got '%s'", kw);
}

/* The stage of the pass the banner "# ampc-ir 1: after PASS" names, or -1. */
static int banner_stage(const SrcFile *f)
{
    static const char tag[] = "# ampc-ir 1: after ";
    if (f->len < sizeof tag - 1 || strncmp(f->text, tag, sizeof tag - 1) != 0)
        return -1;
    const char *p = f->text + sizeof tag - 1;
    size_t n = strcspn(p, "\r\n");
    char pass[32];
    if (n >= sizeof pass)
        return -1;
    memcpy(pass, p, n);
    pass[n] = 0;
    return ir_stage(pass);
}

Graph *ir_read(Diag *d, int file)
{
    const SrcFile *f = diag_file(d, file);
    if (!f)
        return NULL;
    Reader r = {.d = d, .file = file, .p = f->text, .end = f->text + f->len, .line = 1,
                .stage = banner_stage(f)};
    r.line_start = r.p;
    arena_init(&r.tmp);
    Vec train = {0};
    if (memchr(f->text, 0, f->len))
        rd_error(&r, (Loc){file, 1, 1}, "file looks binary (it contains a NUL byte)");
    while (!r.failed && r.p < r.end) {
        if (read_line(&r, &train) && !at_eol(&r))
            rd_error(&r, here(&r), "unexpected text at the end of the line");
        while (r.p < r.end && *r.p != '\n')
            r.p++;
        if (r.p < r.end) {
            r.p++;
            r.line++;
            r.line_start = r.p;
        }
    }
    if (!r.failed && !r.g)
        rd_error(&r, (Loc){file, 1, 1}, "no 'model' line: not an ampc IR file");
    if (!r.failed && r.g->noutputs == 0)
        rd_error(&r, here(&r), "no 'return' line");
    if (!r.failed)
        graph_set_train(r.g, train.data, train.len);
    vec_free(&train);
    strmap_free(&r.ids);
    arena_free(&r.tmp);
    if (r.failed) {
        graph_free(r.g);
        graph_free(r.first);
        return NULL;
    }
    if (r.first) {
        r.first->infer = r.g;
        return r.first;
    }
    return r.g;
}

ConfigVal *config_parse(Graph *g, const char *what, const char *text)
{
    int file = diag_add_buffer(g->diag, what, text, strlen(text));
    const SrcFile *f = diag_file(g->diag, file);
    Reader r = {.d = g->diag, .file = file, .p = f->text, .end = f->text + f->len, .line = 1};
    r.line_start = r.p;
    arena_init(&r.tmp);
    ConfigVal *v = arena_alloc(&r.tmp, sizeof *v), *out = NULL;
    if (read_train_value(&r, v, 1)) {
        if (at_eol(&r) && r.p >= r.end)
            out = config_copy(&g->arena, v);
        else
            rd_error(&r, here(&r), "unexpected text after the value");
    }
    arena_free(&r.tmp);
    return out;
}
