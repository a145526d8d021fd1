/* test_ir.c - the IR layer: arenas, Vec, StrMap, dtypes and shapes, the op
 * table, graph building and compaction, the canonical order, the text dump
 * and its reader, and the verifier. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fixture.h"

/* ir_print into a malloc'ed string. */
static char *print_to_string(const Graph *g, const char *pass)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    ir_print(f, g, pass);
    fclose(f);
    return text;
}

/* Runs ir_verify with stderr captured into msg. */
static bool verify_captured(const Graph *g, const char *pass, char *msg, size_t cap)
{
    fflush(stderr);
    int saved = dup(2);
    FILE *tmp = tmpfile();
    assert_true(saved >= 0 && tmp);
    dup2(fileno(tmp), 2);
    bool ok = ir_verify(g, pass);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(tmp);
    size_t n = fread(msg, 1, cap - 1, tmp);
    msg[n] = 0;
    fclose(tmp);
    return ok;
}

static Node *add_named(Graph *g, OpKind op, const int *in, int nin, const char *name)
{
    Node *n = graph_add(g, op, in, nin, loc_none(), -1);
    assert_true(graph_set_name(g, n, name));
    return n;
}

static Shape shape2(Dim a, Dim b) { return (Shape){.rank = 2, .d = {a, b}}; }

/* ---- arena ---------------------------------------------------------------- */

static void test_arena_alignment_and_zeroing(void **state)
{
    (void)state;
    Arena a;
    arena_init(&a);
    static const size_t sizes[] = {1, 3, 15, 16, 17, 31, 100, 1000, 4095};
    unsigned char *prev = NULL;
    size_t prev_size = 0, total = 0;
    for (int round = 0; round < 50; round++) {
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            unsigned char *p = arena_alloc(&a, sizes[i]);
            assert_non_null(p);
            assert_int_equal((uintptr_t)p % 16, 0);
            for (size_t k = 0; k < sizes[i]; k++)
                assert_int_equal(p[k], 0);
            memset(p, 0xab, sizes[i]); /* dirty it: later blocks must still be zero */
            if (prev && p > prev && p < prev + 65536)
                assert_true(p >= prev + prev_size); /* no overlap with the last one */
            prev = p, prev_size = sizes[i];
            total += (sizes[i] + 15) & ~(size_t)15;
        }
    }
    /* total counts bytes handed out, rounded up to 16 */
    assert_int_equal(a.total, total);
    /* zero-sized allocations still give distinct aligned pointers */
    void *z = arena_alloc(&a, 0);
    assert_int_equal((uintptr_t)z % 16, 0);
    arena_free(&a);
    assert_null(a.head);
    assert_int_equal(a.total, 0);
    /* an arena can be reused after arena_free */
    char *s = arena_strdup(&a, "again");
    assert_string_equal(s, "again");
    arena_free(&a);
}

static void test_arena_large_blocks(void **state)
{
    (void)state;
    Arena a;
    arena_init(&a);
    char *small1 = arena_alloc(&a, 32);
    /* a block far bigger than the standard 64 KiB block */
    size_t big = 3 * 1024 * 1024 + 5;
    unsigned char *p = arena_alloc(&a, big);
    assert_non_null(p);
    assert_int_equal((uintptr_t)p % 16, 0);
    for (size_t k = 0; k < big; k += 4093)
        assert_int_equal(p[k], 0);
    assert_int_equal(p[big - 1], 0);
    memset(p, 0x5a, big);
    /* the large block goes behind the current one: small allocations carry
     * on in the current block right after small1 */
    char *small2 = arena_alloc(&a, 16);
    assert_ptr_equal(small2, small1 + 32);
    /* so does one that is bigger than a block but smaller than the first */
    char *mid = arena_alloc(&a, 70000);
    assert_int_equal((uintptr_t)mid % 16, 0);
    char *small3 = arena_alloc(&a, 16);
    assert_ptr_equal(small3, small2 + 16);
    /* filling past one block starts another */
    for (int i = 0; i < 5000; i++) {
        unsigned char *q = arena_alloc(&a, 48);
        assert_int_equal((uintptr_t)q % 16, 0);
        assert_int_equal(q[0] | q[47], 0);
        q[0] = q[47] = 1;
    }
    assert_true(a.total >= big + 70000 + 5000 * 48);
    arena_free(&a);
}

static void test_arena_strings(void **state)
{
    (void)state;
    Arena a;
    arena_init(&a);
    char src[] = "conv1_weight";
    char *s = arena_strdup(&a, src);
    src[0] = 'X'; /* a copy, not an alias */
    assert_string_equal(s, "conv1_weight");
    assert_int_equal((uintptr_t)s % 16, 0);
    assert_string_equal(arena_strdup(&a, ""), "");
    char *n = arena_strndup(&a, "stage2_block1", 6);
    assert_string_equal(n, "stage2");
    assert_string_equal(arena_strndup(&a, "abc", 0), "");
    /* strndup copies exactly n bytes, NULs included */
    char *z = arena_strndup(&a, "a\0b", 3);
    assert_int_equal(z[0], 'a');
    assert_int_equal(z[1], 0);
    assert_int_equal(z[2], 'b');
    assert_int_equal(z[3], 0);
    assert_string_equal(arena_printf(&a, "%s_%s%d", "stage2", "conv", 3), "stage2_conv3");
    assert_string_equal(arena_printf(&a, "%lld|%.2f|%c", (long long)-7, 2.5, 'x'), "-7|2.50|x");
    assert_string_equal(arena_printf(&a, "%s", ""), "");
    /* a formatted string bigger than a block */
    char *long_s = arena_printf(&a, "%0*d", 100000, 42);
    assert_int_equal(strlen(long_s), 100000);
    assert_int_equal(long_s[0], '0');
    assert_string_equal(long_s + 99998, "42");
    arena_free(&a);
}

/* ---- Vec and StrMap --------------------------------------------------------- */

static void test_vec(void **state)
{
    (void)state;
    Vec v = {0};
    for (int i = 0; i < 1000; i++) {
        int64_t *e = vec_push(&v, sizeof(int64_t));
        assert_int_equal(*e, 0); /* new elements are zeroed */
        *e = (int64_t)i * i;
        assert_int_equal(v.len, i + 1);
        assert_true(v.cap >= v.len);
    }
    for (int i = 0; i < 1000; i++)
        assert_int_equal(VEC_AT(v, int64_t, i), (int64_t)i * i);
    vec_free(&v);
    assert_null(v.data);
    assert_int_equal(v.len, 0);
    assert_int_equal(v.cap, 0);
    /* reusable after vec_free, and with a struct element */
    typedef struct {
        char name[24];
        double x;
    } Item;
    for (int i = 0; i < 20; i++) {
        Item *it = vec_push(&v, sizeof(Item));
        assert_int_equal(it->name[0], 0);
        snprintf(it->name, sizeof it->name, "item%d", i);
        it->x = i / 2.0;
    }
    assert_string_equal(VEC_AT(v, Item, 13).name, "item13");
    assert_true(VEC_AT(v, Item, 13).x == 6.5);
    vec_free(&v);
    vec_free(&v); /* twice is harmless */
}

static void test_strmap_basics(void **state)
{
    (void)state;
    StrMap m = {0};
    assert_null(strmap_get(&m, "x")); /* empty map */
    assert_true(strmap_put(&m, "conv1", 1));
    assert_true(strmap_put(&m, "conv2", 2));
    assert_true(strmap_put(&m, "", 3)); /* the empty key is a key */
    assert_int_equal(*strmap_get(&m, "conv1"), 1);
    assert_int_equal(*strmap_get(&m, "conv2"), 2);
    assert_int_equal(*strmap_get(&m, ""), 3);
    assert_null(strmap_get(&m, "conv3"));
    assert_null(strmap_get(&m, "conv"));
    /* a duplicate is refused and does not replace */
    char dup[] = "conv1";
    assert_false(strmap_put(&m, dup, 99));
    assert_int_equal(*strmap_get(&m, "conv1"), 1);
    assert_int_equal(m.len, 3);
    /* values can be updated through the pointer */
    *strmap_get(&m, "conv2") = 20;
    assert_int_equal(*strmap_get(&m, "conv2"), 20);
    strmap_free(&m);
    assert_null(strmap_get(&m, "conv1"));
    assert_int_equal(m.len, 0);
    strmap_free(&m);
}

static void test_strmap_grows(void **state)
{
    (void)state;
    Arena a;
    arena_init(&a);
    StrMap m = {0};
    enum { N = 20000 };
    const char **keys = malloc(sizeof(char *) * N);
    assert_non_null(keys);
    for (int i = 0; i < N; i++) {
        keys[i] = arena_printf(&a, "stage%d_block%d_conv%d", i % 7, i / 7, i);
        assert_true(strmap_put(&m, keys[i], i));
        assert_int_equal(m.len, i + 1);
        /* power-of-two capacity, at most half full */
        assert_int_equal(m.cap & (m.cap - 1), 0);
        assert_true(m.len * 2 <= m.cap);
    }
    for (int i = 0; i < N; i++) {
        int *v = strmap_get(&m, keys[i]);
        assert_non_null(v);
        assert_int_equal(*v, i);
        /* a fresh copy of the key finds the same entry */
        char copy[64];
        snprintf(copy, sizeof copy, "%s", keys[i]);
        assert_ptr_equal(strmap_get(&m, copy), v);
    }
    for (int i = 0; i < N; i += 97)
        assert_false(strmap_put(&m, keys[i], -1));
    assert_int_equal(m.len, N);
    assert_null(strmap_get(&m, "stage0_block0_conv1"));
    free(keys);
    strmap_free(&m);
    arena_free(&a);
}

/* ---- dtypes and shapes ---------------------------------------------------------- */

static void test_dtypes(void **state)
{
    (void)state;
    static const struct {
        DType t;
        const char *s, *l;
        int size;
        bool is_float;
    } want[] = {
        {DT_F16, "f16", "float16", 2, true}, {DT_BF16, "bf16", "bfloat16", 2, true},
        {DT_F32, "f32", "float32", 4, true}, {DT_F64, "f64", "float64", 8, true},
        {DT_I8, "i8", "int8", 1, false},     {DT_U8, "u8", "uint8", 1, false},
        {DT_I32, "i32", "int32", 4, false},  {DT_I64, "i64", "int64", 8, false},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        assert_string_equal(dtype_short(want[i].t), want[i].s);
        assert_string_equal(dtype_long(want[i].t), want[i].l);
        assert_int_equal(dtype_size(want[i].t), want[i].size);
        assert_int_equal(dtype_is_float(want[i].t), want[i].is_float);
        assert_int_equal(dtype_parse(want[i].s), want[i].t);
        assert_int_equal(dtype_parse(want[i].l), want[i].t);
    }
    assert_int_equal(DT_COUNT, 9);
    assert_string_equal(dtype_short(DT_UNKNOWN), "?");
    assert_int_equal(dtype_size(DT_UNKNOWN), 0);
    assert_false(dtype_is_float(DT_UNKNOWN));
    assert_int_equal(dtype_parse("float"), DT_UNKNOWN);
    assert_int_equal(dtype_parse("F32"), DT_UNKNOWN);
    assert_int_equal(dtype_parse(""), DT_UNKNOWN);
    assert_int_equal(dtype_parse("?"), DT_UNKNOWN);
}

static void test_shape_str(void **state)
{
    (void)state;
    char b[160];
    Shape s = {.rank = 4, .d = {DIM_N, 3, 224, 224}};
    assert_string_equal(shape_str(&s, b, sizeof b), "[N,3,224,224]");
    s = (Shape){.rank = 0};
    assert_string_equal(shape_str(&s, b, sizeof b), "[]");
    s = shape_unknown();
    assert_string_equal(shape_str(&s, b, sizeof b), "");
    s = (Shape){.rank = 2, .d = {-2, 6}}; /* 2N */
    assert_string_equal(shape_str(&s, b, sizeof b), "[2N,6]");
    s = (Shape){.rank = 3, .d = {2, -12, 1}};
    assert_string_equal(shape_str(&s, b, sizeof b), "[2,12N,1]");
    s = (Shape){.rank = 1, .d = {DIM_N}};
    assert_string_equal(shape_str(&s, b, sizeof b), "[N]");
    s = (Shape){.rank = 1, .d = {0}};
    assert_string_equal(shape_str(&s, b, sizeof b), "[0]");
    s = (Shape){.rank = 8, .d = {DIM_N, 2147483647, 1, 2, 3, 4, 5, 6}};
    assert_string_equal(shape_str(&s, b, sizeof b), "[N,2147483647,1,2,3,4,5,6]");
    /* a small buffer truncates but stays terminated */
    char small[8];
    memset(small, 'x', sizeof small);
    s = (Shape){.rank = 4, .d = {DIM_N, 3, 224, 224}};
    shape_str(&s, small, sizeof small);
    assert_true(memchr(small, 0, sizeof small) != NULL);
    assert_int_equal(strncmp(small, "[N,3,", 5), 0);
    /* shape_str returns its buffer */
    assert_ptr_equal(shape_str(&s, b, sizeof b), b);
}

static void test_shape_numel(void **state)
{
    (void)state;
    int64_t e = -1;
    Shape s = {.rank = 3, .d = {DIM_N, 3, 4}};
    assert_true(shape_numel_per_sample(&s, &e));
    assert_int_equal(e, 12);
    assert_int_equal(shape_numel(&s, 1), 12);
    assert_int_equal(shape_numel(&s, 8), 96);
    s = (Shape){.rank = 2, .d = {-2, 3}}; /* [2N,3] */
    assert_true(shape_numel_per_sample(&s, &e));
    assert_int_equal(e, 6);
    assert_int_equal(shape_numel(&s, 5), 30);
    s = (Shape){.rank = 2, .d = {4, -3}}; /* [4,3N] */
    assert_int_equal(shape_numel(&s, 2), 24);
    s = (Shape){.rank = 0}; /* a scalar */
    assert_true(shape_numel_per_sample(&s, &e));
    assert_int_equal(e, 1);
    assert_int_equal(shape_numel(&s, 7), 1);
    s = (Shape){.rank = 2, .d = {5, 7}}; /* no batch dimension */
    assert_int_equal(shape_numel(&s, 100), 35);
    s = shape_unknown();
    assert_false(shape_numel_per_sample(&s, &e));
    /* overflow is reported, not wrapped */
    s = (Shape){.rank = 3, .d = {DIM_N, INT64_C(1) << 40, INT64_C(1) << 30}};
    assert_false(shape_numel_per_sample(&s, &e));
    s = (Shape){.rank = 2, .d = {INT64_C(1) << 31, INT64_C(1) << 31}};
    assert_true(shape_numel_per_sample(&s, &e));
    assert_int_equal(e, INT64_C(1) << 62);
}

static void test_shape_equal_and_sym(void **state)
{
    (void)state;
    Shape a = {.rank = 2, .d = {DIM_N, 3}}, b = {.rank = 2, .d = {DIM_N, 3}};
    assert_true(shape_equal(&a, &b));
    assert_true(shape_has_sym(&a));
    b.d[0] = -2;
    assert_false(shape_equal(&a, &b));
    b = (Shape){.rank = 3, .d = {DIM_N, 3, 1}};
    assert_false(shape_equal(&a, &b));
    Shape c = {.rank = 2, .d = {1, 3}};
    assert_false(shape_has_sym(&c));
    Shape u1 = shape_unknown(), u2 = shape_unknown();
    assert_true(shape_equal(&u1, &u2));
    assert_false(shape_has_sym(&u1));
    Shape s0 = {.rank = 0};
    assert_false(shape_equal(&s0, &u1));
}

/* ---- the op table --------------------------------------------------------------- */

static void test_op_table(void **state)
{
    (void)state;
    assert_true(op_table_check());
    for (int k = 0; k < OP_COUNT; k++) {
        const OpInfo *oi = op_info((OpKind)k);
        assert_non_null(oi->name);
        assert_non_null(oi->prefix);
        assert_non_null(oi->shape);
        assert_non_null(oi->check);
        assert_non_null(oi->flops);
        assert_int_equal(op_lookup(oi->name), k);
        assert_true(oi->nslots <= 8);
        assert_true(oi->nattrs <= 16);
        for (int a = 0; a < oi->nattrs; a++) {
            const AttrSpec *as = &oi->attrs[a];
            assert_int_equal(op_attr_index((OpKind)k, as->name), a);
            /* required attributes have no default and the rest have one */
            assert_int_equal(as->required, as->def == NULL);
            if (as->type == AT_ENUM)
                assert_non_null(as->choices);
        }
        for (int s = 0; s < oi->nslots; s++) {
            assert_int_equal(op_slot_index((OpKind)k, oi->slots[s].name), s);
            /* parameter slots of the ops the DSL writes (autodiff's come from
             * `part` on) name their implicit parameter */
            if (k < OP_part && (oi->slots[s].kind == SLOT_PARAM || oi->slots[s].kind == SLOT_AUX))
                assert_non_null(oi->slots[s].suffix);
        }
        /* no two ops share a name, nor two the DSL writes a prefix */
        for (int j = 0; j < k; j++) {
            assert_string_not_equal(op_table[j].name, oi->name);
            if (k < OP_part)
                assert_string_not_equal(op_table[j].prefix, oi->prefix);
        }
    }
    assert_int_equal(op_lookup("Convolution"), OP_Convolution);
    assert_int_equal(op_lookup("SoftmaxOutput"), OP_SoftmaxOutput);
    assert_int_equal(op_lookup("convolution"), OP_COUNT);
    assert_int_equal(op_lookup(""), OP_COUNT);
    assert_int_equal(op_attr_index(OP_Convolution, "num_group"), CONV_NUM_GROUP);
    assert_int_equal(op_attr_index(OP_Convolution, "weight"), -1);
    assert_int_equal(op_slot_index(OP_Convolution, "weight"), 1);
    assert_int_equal(op_slot_index(OP_Convolution, "kernel"), -1);
    assert_int_equal(op_slot_index(OP_BatchNorm, "moving_var"), 4);
    assert_true(op_info(OP_BatchNorm)->slots[4].keep_fp32);
    assert_int_equal(op_info(OP_BatchNorm)->slots[3].kind, SLOT_AUX);
    assert_int_equal(op_info(OP_SoftmaxOutput)->slots[1].kind, SLOT_LABEL);
    assert_int_equal(op_info(OP_Concat)->nslots, 0); /* variadic */
    assert_int_equal(op_info(OP_Convolution)->amp, AMP_F16);
    assert_int_equal(op_info(OP_softmax)->amp, AMP_F32);
    assert_string_equal(op_info(OP_BatchNorm)->prefix, "bn");
    assert_string_equal(op_info(OP_FullyConnected)->prefix, "fc");
}

/* ---- graph building ---------------------------------------------------------------- */

static void test_graph_add_defaults(void **state)
{
    Fx *fx = *state;
    Graph *g = fx->g = graph_new(&fx->d, "defaults");
    assert_string_equal(g->model, "defaults");
    /* every attribute of every op gets its schema's default and type */
    int in[8] = {0};
    Node *x = graph_add(g, OP_Input, NULL, 0, loc_none(), -1);
    for (int k = 0; k < OP_COUNT; k++) {
        const OpInfo *oi = op_info((OpKind)k);
        int nin = oi->nslots ? 1 : (k == OP_Concat ? 2 : 0);
        if (k == OP_Input || k == OP_Param)
            nin = 0;
        Node *n = graph_add(g, (OpKind)k, in, nin, (Loc){0, 3, 4}, 7);
        assert_int_equal(n->id, g->nnodes - 1);
        assert_int_equal(n->op, k);
        assert_int_equal(n->nin, nin);
        assert_int_equal(n->shape.rank, -1);
        assert_int_equal(n->dtype, DT_UNKNOWN);
        assert_null(n->name);
        assert_int_equal(n->flags, 0);
        assert_int_equal(n->loc.line, 3);
        assert_int_equal(n->loc.col, 4);
        assert_int_equal(n->frame, 7);
        for (int a = 0; a < oi->nattrs; a++) {
            assert_int_equal(n->attrs[a].type, oi->attrs[a].type);
            AttrVal want;
            op_attr_default((OpKind)k, a, &want);
            assert_int_equal(want.type, oi->attrs[a].type);
            switch (want.type) {
            case AT_INT: assert_int_equal(n->attrs[a].i, want.i); break;
            case AT_FLOAT: assert_true(n->attrs[a].f == want.f); break;
            case AT_BOOL: assert_int_equal(n->attrs[a].b, want.b); break;
            case AT_ENUM:
            case AT_DTYPE: assert_int_equal(n->attrs[a].e, want.e); break;
            case AT_STR:
                if (want.s)
                    assert_string_equal(n->attrs[a].s, want.s);
                break;
            case AT_TUPLE:
                assert_int_equal(n->attrs[a].t.n, want.t.n);
                assert_memory_equal(n->attrs[a].t.v, want.t.v, sizeof(int64_t) * (size_t)want.t.n);
                break;
            }
            /* a non-required default is inside its own range */
            if (!oi->attrs[a].required && (want.type == AT_INT || want.type == AT_FLOAT)) {
                double v = want.type == AT_INT ? (double)want.i : want.f;
                assert_true(v >= oi->attrs[a].min && v <= oi->attrs[a].max);
            }
        }
    }
    assert_int_equal(x->id, 0);
    /* a few defaults checked against the documented values */
    Node *conv = graph_add(g, OP_Convolution, in, 1, loc_none(), -1);
    assert_int_equal(conv->attrs[CONV_STRIDE].t.n, 0);   /* () until conv_check fills it */
    assert_int_equal(conv->attrs[CONV_PAD].t.n, 0);
    assert_int_equal(node_int(conv, CONV_NUM_GROUP), 1);
    assert_false(node_bool(conv, CONV_NO_BIAS));
    Node *bn = graph_add(g, OP_BatchNorm, in, 1, loc_none(), -1);
    assert_true(node_float(bn, BN_EPS) == 1e-5);           /* Gluon's, not MXNet symbol's */
    assert_true(node_float(bn, BN_MOMENTUM) == 0.9);
    assert_false(node_bool(bn, BN_FIX_GAMMA));
    assert_false(node_bool(bn, BN_USE_GLOBAL_STATS));
    assert_int_equal(node_int(bn, BN_AXIS), 1);
    Node *pool = graph_add(g, OP_Pooling, in, 1, loc_none(), -1);
    assert_int_equal(node_enum(pool, POOL_POOL_TYPE), POOL_MAX);
    assert_int_equal(node_enum(pool, POOL_CONVENTION), POOL_VALID);
    assert_true(node_bool(pool, POOL_COUNT_INCLUDE_PAD));
    assert_false(node_bool(pool, POOL_GLOBAL_POOL));
    Node *fc = graph_add(g, OP_FullyConnected, in, 1, loc_none(), -1);
    assert_true(node_bool(fc, FC_FLATTEN));
    assert_false(node_bool(fc, FC_NO_BIAS));
    Node *lr = graph_add(g, OP_LeakyReLU, in, 1, loc_none(), -1);
    assert_int_equal(node_enum(lr, LRELU_TYPE), LRELU_LEAKY);
    assert_true(node_float(lr, LRELU_SLOPE) == 0.25);
    Node *dr = graph_add(g, OP_Dropout, in, 1, loc_none(), -1);
    assert_true(node_float(dr, DROPOUT_P) == 0.5);
    Node *smo = graph_add(g, OP_SoftmaxOutput, in, 1, loc_none(), -1);
    assert_true(node_float(smo, SMO_GRAD_SCALE) == 1.0);
    assert_true(node_float(smo, SMO_IGNORE_LABEL) == -1.0);
    assert_int_equal(node_enum(smo, SMO_NORMALIZATION), SMO_NORM_NULL);
    assert_true(node_float(smo, SMO_SMOOTH_ALPHA) == 0.0);
    Node *sm = graph_add(g, OP_softmax, in, 1, loc_none(), -1);
    assert_int_equal(node_int(sm, SOFTMAX_AXIS), -1);
    Node *sum = graph_add(g, OP_sum, in, 1, loc_none(), -1);
    assert_int_equal(node_tuple(sum, REDUCE_AXIS)->t.n, 0);
    assert_false(node_bool(sum, REDUCE_KEEPDIMS));
    Node *cat = graph_add(g, OP_Concat, in, 1, loc_none(), -1);
    assert_int_equal(node_int(cat, CONCAT_DIM), 1);
    Node *p = graph_add(g, OP_Param, NULL, 0, loc_none(), -1);
    assert_int_equal(node_param_kind(p), PK_OTHER);
    assert_string_equal(p->attrs[PARAM_INIT].s, "default");
    assert_true(node_float(p, PARAM_WD_MULT) == 1.0);
    assert_true(node_float(p, PARAM_LR_MULT) == 1.0);
    assert_true(node_is_param(p));
    assert_false(node_is_param(x));
    assert_int_equal(node_enum(x, INPUT_ROLE), INPUT_DATA);
}

static void test_graph_add_copies_inputs(void **state)
{
    Fx *fx = *state;
    Graph *g = fx->g = graph_new(&fx->d, NULL);
    assert_string_equal(g->model, "");
    Node *a = add_named(g, OP_Input, NULL, 0, "a");
    Node *b = add_named(g, OP_Input, NULL, 0, "b");
    int in[2] = {a->id, b->id};
    Node *add = graph_add(g, OP_elemwise_add, in, 2, loc_none(), -1);
    in[0] = in[1] = 99; /* the node keeps its own copy */
    assert_int_equal(add->in[0], 0);
    assert_int_equal(add->in[1], 1);
    /* more nodes than the initial capacity: earlier pointers stay valid */
    for (int i = 0; i < 1000; i++) {
        int one = i == 0 ? add->id : g->nnodes - 1;
        Node *n = graph_add(g, OP_Activation, &one, 1, loc_none(), -1);
        assert_int_equal(n->id, i + 3);
        assert_ptr_equal(g->nodes[n->id], n);
    }
    assert_ptr_equal(g->nodes[2], add);
    int *uses = graph_use_counts(g);
    assert_int_equal(uses[0], 1);
    assert_int_equal(uses[2], 1);
    assert_int_equal(uses[g->nnodes - 1], 0);
    free(uses);
}

static void test_graph_set_name(void **state)
{
    Fx *fx = *state;
    Graph *g = fx->g = graph_new(&fx->d, "m");
    Node *a = graph_add(g, OP_Input, NULL, 0, loc_none(), -1);
    Node *b = graph_add(g, OP_Input, NULL, 0, loc_none(), -1);
    char name[] = "data";
    assert_true(graph_set_name(g, a, name));
    name[0] = 'X'; /* copied into the graph's arena */
    assert_string_equal(a->name, "data");
    assert_ptr_equal(graph_find(g, "data"), a);
    /* a duplicate is refused without a diagnostic and b stays unnamed */
    assert_false(graph_set_name(g, b, "data"));
    assert_null(b->name);
    assert_ptr_equal(graph_find(g, "data"), a);
    assert_int_equal(fx->d.nerr, 0);
    assert_string_equal(diag_text(fx), "");
    assert_true(graph_set_name(g, b, "label"));
    assert_ptr_equal(graph_find(g, "label"), b);
    assert_null(graph_find(g, "Data"));
    assert_null(graph_find(g, ""));
}

static void test_graph_compact(void **state)
{
    Fx *fx = *state;
    Graph *g = fx->g = graph_new(&fx->d, "compact");
    ConfigVal v = {.kind = CV_INT, .i = 32};
    ConfigEntry e = {.key = "batch_size", .val = &v};
    graph_set_train(g, &e, 1);
    Node *x = add_named(g, OP_Input, NULL, 0, "x");           /* 0: live */
    x->shape = shape2(DIM_N, 4);
    x->dtype = DT_F32;
    add_named(g, OP_Param, NULL, 0, "unused_w");              /* 1: dead */
    int in = 0;
    Node *a = add_named(g, OP_Activation, &in, 1, "a");     /* 2: live */
    a->attrs[ACT_TYPE].e = ACT_TANH;
    a->flags |= NF_EXPLICIT_NAME;
    add_named(g, OP_Activation, &in, 1, "dead_b");            /* 3: dead */
    in = 2;
    add_named(g, OP_Dropout, &in, 1, "dead_c");               /* 4: dead, uses a live node */
    Node *p = add_named(g, OP_Param, NULL, 0, "p");           /* 5: live */
    p->attrs[PARAM_INIT].s = "xavier(magnitude=2)";
    int in2[2] = {2, 5};
    Node *c = add_named(g, OP_elemwise_mul, in2, 2, "c");    /* 6: live, the output */
    c->shape = shape2(DIM_N, 4);
    graph_add_output(g, c->id);
    assert_true(c->flags & NF_OUTPUT);

    fx->g = g = graph_compact(g);
    assert_string_equal(g->model, "compact");
    assert_int_equal(g->nnodes, 4);
    static const char *const names[] = {"x", "a", "p", "c"};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(g->nodes[i]->id, i);
        assert_string_equal(g->nodes[i]->name, names[i]);
        assert_ptr_equal(graph_find(g, names[i]), g->nodes[i]);
    }
    assert_null(graph_find(g, "dead_b"));
    assert_null(graph_find(g, "unused_w"));
    assert_int_equal(g->nodes[1]->in[0], 0);
    assert_int_equal(g->nodes[3]->nin, 2);
    assert_int_equal(g->nodes[3]->in[0], 1);
    assert_int_equal(g->nodes[3]->in[1], 2);
    assert_int_equal(g->noutputs, 1);
    assert_int_equal(g->outputs[0], 3);
    assert_true(g->nodes[3]->flags & NF_OUTPUT);
    assert_false(g->nodes[1]->flags & NF_OUTPUT);
    assert_true(g->nodes[1]->flags & NF_EXPLICIT_NAME);
    /* attributes, shapes, dtypes and the train block come along */
    assert_int_equal(node_enum(g->nodes[1], ACT_TYPE), ACT_TANH);
    assert_string_equal(g->nodes[2]->attrs[PARAM_INIT].s, "xavier(magnitude=2)");
    assert_int_equal(g->nodes[0]->dtype, DT_F32);
    Shape want = shape2(DIM_N, 4);
    assert_true(shape_equal(&g->nodes[3]->shape, &want));
    assert_int_equal(g->ntrain, 1);
    assert_string_equal(g->train[0].key, "batch_size");
    assert_int_equal(g->train[0].val->i, 32);
    char msg[512];
    assert_true(verify_captured(g, "elaborate", msg, sizeof msg));
}

/* ---- canonical order and the dump ----------------------------------------------------- */

/* x, w -> fc -> act, then a dead node; built in two storage orders. */
static Graph *build_small(Diag *d, bool params_first)
{
    Graph *g = graph_new(d, "small");
    Node *x = NULL, *w = NULL, *b = NULL;
    if (params_first) {
        w = add_named(g, OP_Param, NULL, 0, "fc_weight");
        b = add_named(g, OP_Param, NULL, 0, "fc_bias");
        x = add_named(g, OP_Input, NULL, 0, "x");
    } else {
        x = add_named(g, OP_Input, NULL, 0, "x");
        b = add_named(g, OP_Param, NULL, 0, "fc_bias");
        w = add_named(g, OP_Param, NULL, 0, "fc_weight");
    }
    x->shape = shape2(DIM_N, 8);
    x->dtype = DT_F32;
    w->shape = shape2(4, 8);
    w->attrs[PARAM_KIND].e = PK_WEIGHT;
    b->shape = (Shape){.rank = 1, .d = {4}};
    b->attrs[PARAM_KIND].e = PK_BIAS;
    int in[3] = {x->id, w->id, b->id};
    Node *fc = add_named(g, OP_FullyConnected, in, 3, "fc");
    fc->attrs[FC_NUM_HIDDEN].i = 4;
    fc->shape = shape2(DIM_N, 4);
    int one = fc->id;
    Node *act = add_named(g, OP_Activation, &one, 1, "act");
    act->shape = fc->shape;
    Node *side = add_named(g, OP_Dropout, &one, 1, "side");
    side->shape = fc->shape;
    graph_add_output(g, act->id);
    return g;
}

static void test_canonical_order(void **state)
{
    Fx *fx = *state;
    fx->g = build_small(&fx->d, false);
    fx->g2 = build_small(&fx->d, true);
    int *o1 = graph_canonical_order(fx->g), *o2 = graph_canonical_order(fx->g2);
    /* inputs before users, in argument order, from the output; the dead node last */
    static const char *const want[] = {"x", "fc_weight", "fc_bias", "fc", "act", "side"};
    for (int i = 0; i < 6; i++) {
        assert_string_equal(fx->g->nodes[o1[i]]->name, want[i]);
        assert_string_equal(fx->g2->nodes[o2[i]]->name, want[i]);
    }
    free(o1);
    free(o2);
    char *t1 = print_to_string(fx->g, "test"), *t2 = print_to_string(fx->g2, "test");
    assert_string_equal(t1, t2);
    assert_contains(t1, "# ampc-ir 1: test\nmodel small\n");
    assert_contains(t1, "%0:f32[N,8] = Input() {name=\"x\", role=data}\n");
    assert_contains(t1, "%3:?[N,4] = FullyConnected(%0, %1, %2) {name=\"fc\", num_hidden=4, "
                        "no_bias=false, flatten=true}\n");
    assert_contains(t1, "%4:?[N,4] = Activation(%3) {name=\"act\", act_type=relu}\n");
    assert_contains(t1, "\nreturn %4\n");
    free(t1);
    free(t2);
}

static void test_canonical_order_deep_chain(void **state)
{
    /* a long chain must not recurse on the C stack */
    Fx *fx = *state;
    Graph *g = fx->g = graph_new(&fx->d, "chain");
    Node *x = add_named(g, OP_Input, NULL, 0, "x");
    int prev = x->id;
    for (int i = 0; i < 200000; i++) {
        Node *n = graph_add(g, OP_Activation, &prev, 1, loc_none(), -1);
        prev = n->id;
    }
    graph_add_output(g, prev);
    int *order = graph_canonical_order(g);
    for (int i = 0; i < g->nnodes; i++)
        assert_int_equal(order[i], i);
    free(order);
}

static const char round_trip_src[] =
    "def cbr(x, c) = Activation(BatchNorm(Convolution(x, num_filter=c, kernel=(3,3), pad=(1,1),\n"
    "                                                 no_bias=true)), act_type=\"relu\")\n"
    "model tiny(data: float32[N,3,8,8], label: float32[N]) {\n"
    "    x = cbr(data, 4)\n"
    "    y = Pooling(x, pool_type=\"avg\", kernel=(2,2), stride=(2,2), count_include_pad=false)\n"
    "    z = Concat(y, Pooling(x, kernel=(2,2), stride=(2,2)), dim=1)\n"
    "    f = FullyConnected(Flatten(z), num_hidden=10, name=\"head\",\n"
    "                       weight=param(init=xavier(magnitude=2.5, rnd_type=\"gaussian\")))\n"
    "    g = LeakyReLU(f * 0.5 + 1, act_type=\"prelu\")\n"
    "    return SoftmaxOutput(Dropout(g, p=0.1), label, smooth_alpha=0.1, normalization=\"valid\")\n"
    "}\n"
    "train tiny {\n"
    "    batch_size = 32; epochs = 2\n"
    "    optimizer = sgd(momentum=0.9, wd=1e-4)\n"
    "    lr = 0.1; data = digits; loss_scale = dynamic\n"
    "}\n";

/* frontend_compile without the fuse pass's rewrites: a graph after
 * train-cast-elide */
static const PassOptions unfused = {.no_fuse = ~0u};

static void test_print_read_round_trip(void **state)
{
    Fx *fx = *state;
    fx->g = frontend_compile(&fx->d, "tiny.sym", round_trip_src, strlen(round_trip_src), &unfused);
    if (!fx->g)
        fail_msg("%s", diag_text(fx));
    char msg[512];
    /* frontend_compile runs every pass (fuse making no fusion): a training graph */
    assert_true(verify_captured(fx->g, "train-cast-elide", msg, sizeof msg));
    char *t1 = print_to_string(fx->g, "after train-cast-elide");
    int f = diag_add_buffer(&fx->d, "tiny.ir", t1, strlen(t1));
    fx->g2 = ir_read(&fx->d, f);
    if (!fx->g2)
        fail_msg("%s", diag_text(fx));
    assert_int_equal(fx->d.nerr, 0);
    char *t2 = print_to_string(fx->g2, "after train-cast-elide");
    assert_string_equal(t1, t2);
    /* the same graph said to come from a pass before autodiff, or without a
     * banner, is refused at its first op that only autodiff makes */
    char *t3 = print_to_string(fx->g, "after infer-types");
    const char *body = t3 + strcspn(t3, "\n") + 1; /* without the banner */
    f = diag_add_buffer(&fx->d, "tiny3.ir", body, strlen(body));
    assert_null(ir_read(&fx->d, f));
    assert_contains(diag_text(fx), "tiny3.ir:");
    assert_contains(diag_text(fx), "is made by autodiff: only a dump after autodiff holds it");
    f = diag_add_buffer(&fx->d, "tiny4.ir", t3, strlen(t3));
    assert_null(ir_read(&fx->d, f));
    assert_contains(diag_text(fx), "tiny4.ir:");
    free(t3);
    fx->d.nerr = 0;
    assert_true(verify_captured(fx->g2, "autodiff", msg, sizeof msg));
    assert_int_equal(fx->g2->nnodes, fx->g->nnodes);
    /* spot checks of what the text carries */
    assert_contains(t1, "model tiny\n");
    assert_contains(t1, "train batch_size = 32\n");
    assert_contains(t1, "train optimizer = sgd(momentum=0.9, wd=0.0001)\n");
    assert_contains(t1, "train data = digits\n");
    assert_contains(t1, "init=\"xavier(magnitude=2.5, rnd_type=\\\"gaussian\\\")\"");
    assert_contains(t1, "count_include_pad=false");
    assert_contains(t1, "eps=1e-05");
    assert_contains(t1, "kernel=(2,2)");
    assert_contains(t1, "f32[N,10] = SoftmaxOutput(");
    const Node *head = graph_find(fx->g2, "head");
    assert_non_null(head);
    assert_int_equal(head->op, OP_FullyConnected);
    assert_int_equal(node_int(head, FC_NUM_HIDDEN), 10);
    char b[64];
    assert_string_equal(shape_str(&graph_find(fx->g2, "head_weight")->shape, b, sizeof b), "[10,128]");
    assert_int_equal(graph_find(fx->g2, "label")->dtype, DT_F32);
    assert_int_equal(node_enum(graph_find(fx->g2, "label"), INPUT_ROLE), INPUT_LABEL);
    /* the train block reads back as values of the same kinds */
    assert_int_equal(fx->g2->ntrain, 6);
    assert_int_equal(fx->g2->train[0].val->kind, CV_INT);
    assert_int_equal(fx->g2->train[2].val->kind, CV_CALL);
    assert_int_equal(fx->g2->train[2].val->nargs, 2);
    assert_string_equal(fx->g2->train[2].val->argnames[1], "wd");
    assert_int_equal(fx->g2->train[3].val->kind, CV_FLOAT);
    assert_int_equal(fx->g2->train[4].val->kind, CV_SYM);
    free(t1);
    free(t2);
}

static void test_read_then_print_is_stable(void **state)
{
    /* a hand-written dump with spacing, comments and "(3,)" tuples reads back
     * and prints canonically; printing that again changes nothing */
    Fx *fx = *state;
    static const char src[] =
        "# a comment line\n"
        "\n"
        "model hand   # trailing comment\n"
        "train lr = 0.5\n"
        "%x:f32[N,4,10] = Input() {name=\"x\", role=data}\n"
        "%w : ? = Param() {name=\"w\", kind=weight}\n"
        "%c:?[N,2,8] = Convolution( %x , %w ) {name=\"c\", kernel=(3,), num_filter=2, "
        "no_bias=true}\n"
        "return %c\n";
    int f = diag_add_buffer(&fx->d, "hand.ir", src, strlen(src));
    fx->g = ir_read(&fx->d, f);
    if (!fx->g)
        fail_msg("%s", diag_text(fx));
    const Node *c = graph_find(fx->g, "c");
    /* conv_check ran while reading: stride, pad and dilate are filled in */
    assert_int_equal(c->attrs[CONV_STRIDE].t.n, 1);
    assert_int_equal(c->attrs[CONV_STRIDE].t.v[0], 1);
    assert_int_equal(c->attrs[CONV_DILATE].t.n, 1);
    char *t1 = print_to_string(fx->g, "x");
    assert_contains(t1, "%1:? = Param() {name=\"w\", kind=weight, init=\"default\"");
    assert_contains(t1, "%2:?[N,2,8] = Convolution(%0, %1) {name=\"c\", kernel=(3,), stride=(1,), "
                        "pad=(0,), dilate=(1,), num_filter=2, num_group=1, no_bias=true}\n");
    int f2 = diag_add_buffer(&fx->d, "hand2.ir", t1, strlen(t1));
    fx->g2 = ir_read(&fx->d, f2);
    assert_non_null(fx->g2);
    char *t2 = print_to_string(fx->g2, "x");
    assert_string_equal(t1, t2);
    free(t1);
    free(t2);
}

/* ---- ir_read errors -------------------------------------------------------------------- */

/* Reads a dump whose fourth line is `line`; expects failure with `want`. */
static void read_fails(Fx *fx, const char *line, const char *want)
{
    char src[1024];
    snprintf(src, sizeof src,
             "# ampc-ir 1: test\n"
             "model t\n"
             "%%0:f32[N,4] = Input() {name=\"x\", role=data}\n"
             "%s\n"
             "return %%1\n",
             line);
    int f = diag_add_buffer(&fx->d, "t.ir", src, strlen(src));
    int before = fx->d.nerr;
    size_t off = strlen(diag_text(fx));
    Graph *g = ir_read(&fx->d, f);
    if (g) {
        graph_free(g);
        fail_msg("ir_read accepted: %s", line);
    }
    assert_int_equal(fx->d.nerr, before + 1);
    assert_contains(diag_text(fx) + off, want);
}

static void test_read_errors(void **state)
{
    Fx *fx = *state;
    /* unknown op: at the op's name */
    read_fails(fx, "%1:f32[N,4] = Bogus(%0) {name=\"a\"}", "t.ir:4:15: error: unknown op 'Bogus'\n");
    /* unknown attribute: at its name */
    read_fails(fx, "%1:f32[N,4] = Activation(%0) {name=\"a\", act_type=relu, kind=weight}",
               "t.ir:4:56: error: Activation has no attribute 'kind' (its attributes: act_type)\n");
    /* undefined value */
    read_fails(fx, "%1:f32[N,4] = Activation(%7) {name=\"a\", act_type=relu}",
               "t.ir:4:26: error: use of undefined value '%7'\n");
    /* values of the wrong type */
    read_fails(fx, "%1:f32[N,4] = FullyConnected(%0) {name=\"a\", num_hidden=\"x\"}",
               "t.ir:4:56: error: expected an integer\n");
    read_fails(fx, "%1:f32[N,4] = FullyConnected(%0) {name=\"a\", num_hidden=4, no_bias=1}",
               "t.ir:4:67: error: no_bias: '1' must be true or false\n");
    read_fails(fx, "%1:f32[N,4] = Activation(%0) {name=\"a\", act_type=gelu}",
               "t.ir:4:50: error: Activation: 'gelu' is not a valid act_type\n");
    read_fails(fx, "%1:f32[N,4] = Pooling(%0) {name=\"a\", kernel=3}",
               "t.ir:4:45: error: expected '('\n");
    read_fails(fx, "%1:f32[N,4] = Cast(%0) {name=\"a\", dtype=float17}",
               "t.ir:4:41: error: unknown dtype 'float17' (the dtypes: float16, bfloat16, float32, "
               "float64, int8, uint8, int32, int64, unknown)\n");
    read_fails(fx, "%1:f32[N,4] = Dropout(%0) {name=\"a\", p=high}", "t.ir:4:40: error: expected a number\n");
    read_fails(fx, "%1:f32[N,4] = Param() {name=\"a\", init=xavier}", "t.ir:4:39: error: expected a string\n");
    /* and the rest of what a node line can get wrong */
    read_fails(fx, "%1:f32[N,4] = Activation(%0) {name=\"a\"}",
               "t.ir:4:15: error: Activation: missing required attribute 'act_type'\n");
    read_fails(fx, "%1:f32[N,4] = Activation(%0) {act_type=relu}", "t.ir:4:15: error: node has no name\n");
    read_fails(fx, "%1:f32[N,4] = Activation(%0) {name=\"x\", act_type=relu}",
               "t.ir:4:31: error: duplicate name 'x'\n");
    read_fails(fx, "%1:f32[N,4] = Activation(%0) {name=\"a\", act_type=relu, act_type=tanh}",
               "t.ir:4:56: error: attribute 'act_type' given twice\n");
    read_fails(fx, "%1:f99[N,4] = Activation(%0) {name=\"a\", act_type=relu}",
               "t.ir:4:4: error: unknown dtype 'f99' (the dtypes: f16, bf16, f32, f64, i8, u8, "
               "i32, i64)\n");
    read_fails(fx, "%1:f32[N,4] = Activation(%0, %0) {name=\"a\", act_type=relu}",
               "t.ir:4:15: error: Activation takes 1 input here (data), got 2\n");
    read_fails(fx, "%1:f32[N,4] = Param(%0) {name=\"a\"}", "t.ir:4:15: error: Param takes no inputs\n");
    read_fails(fx, "%1:f32[N,4] = Activation() {name=\"a\", act_type=relu}",
               "t.ir:4:15: error: Activation takes 1 input here (data), got 0\n");
    read_fails(fx, "%0:f32[N,4] = Activation(%0) {name=\"a\", act_type=relu}",
               "t.ir:4:1: error: value '%0' defined twice\n");
    read_fails(fx, "%1:f32[N,4] = Activation(%0) {name=\"a\", act_type=relu} extra",
               "t.ir:4:56: error: unexpected text at the end of the line\n");
    read_fails(fx, "%1:f32[N,-4] = Activation(%0) {name=\"a\", act_type=relu}",
               "t.ir:4:10: error: dimension out of range\n");
    /* an empty dimension, in a value's type or as a multiple of N (the fuzzed
     * dump that reached the memory planner: f32[N,0,8,8]) */
    read_fails(fx, "%1:f32[N,0] = Activation(%0) {name=\"a\", act_type=relu}",
               "t.ir:4:10: error: dimension 0: every dimension is at least 1\n");
    read_fails(fx, "%1:f32[0N,4] = Activation(%0) {name=\"a\", act_type=relu}",
               "t.ir:4:8: error: dimension 0: every dimension is at least 1\n");
    read_fails(fx, "%1:f32[N,4] = Activation(%0) {name=\"a, act_type=relu}",
               "t.ir:4:36: error: unterminated string\n");
    read_fails(fx, "%1:f32[N,4] = Convolution(%0) {name=\"a\", kernel=(1,1,1,1,1,1,1,1,1), num_filter=1}",
               "t.ir:4:66: error: kernel: more than 8 values\n");
    /* values outside the schema's range: conv_check and the shape rules divide
     * by num_group and stride */
    read_fails(fx, "%1:? = Convolution(%0) {name=\"a\", kernel=(3,3), num_filter=4, num_group=0}",
               "t.ir:4:73: error: Convolution: attribute 'num_group' must be between 1 and "
               "2147483647, got 0\n");
    read_fails(fx, "%1:? = Convolution(%0) {name=\"a\", kernel=(3,3), num_filter=4, stride=(1, 0)}",
               "t.ir:4:74: error: Convolution: attribute 'stride' must be between 1 and 1048576, "
               "got 0\n");
    read_fails(fx, "%1:? = Convolution(%0) {name=\"a\", kernel=(3,3), num_filter=-4}",
               "t.ir:4:60: error: Convolution: attribute 'num_filter' must be between 1 and "
               "2147483647, got -4\n");
    read_fails(fx, "%1:? = Dropout(%0) {name=\"a\", p=nan}",
               "t.ir:4:33: error: Dropout: attribute 'p' must be between 0 and 0.999999, got nan\n");
    read_fails(fx, "%1:? = Dropout(%0) {name=\"a\", p=1}",
               "t.ir:4:33: error: Dropout: attribute 'p' must be between 0 and 0.999999, got 1\n");
    /* a check hook's error while reading (the same rule elaborate applies) */
    read_fails(fx, "%1:f32[N,4] = Convolution(%0, %0, %0) {name=\"a\", kernel=(3,3), num_filter=4, "
                   "num_group=3}",
               "t.ir:4:15: error: Convolution: num_filter=4 is not divisible by num_group=3\n");
    /* the inputs its attributes call for */
    read_fails(fx, "%1:f32[N,4] = Convolution(%0) {name=\"a\", kernel=(3,3), num_filter=4}",
               "t.ir:4:15: error: Convolution takes 3 inputs here (data, weight, bias), got 1\n");
    read_fails(fx, "%1:f32[N,4] = Convolution(%0, %0, %0) {name=\"a\", kernel=(3,3), num_filter=4, "
                   "no_bias=true}",
               "t.ir:4:15: error: Convolution takes 2 inputs here (data, weight), got 3\n");
    read_fails(fx, "bogus line", "t.ir:4:1: error: expected a node, 'model', 'train' or 'return', got 'bogus'\n");
}

static void test_read_errors_whole_file(void **state)
{
    Fx *fx = *state;
    static const struct {
        const char *src, *want;
    } cases[] = {
        {"", "f.ir:1:1: error: no 'model' line: not an ampc IR file\n"},
        {"# only a comment\n", "f.ir:1:1: error: no 'model' line: not an ampc IR file\n"},
        {"%0:f32[N] = Input() {name=\"x\"}\n", "f.ir:1:1: error: expected 'model NAME' first\n"},
        {"model a\nmodel b\n", "f.ir:2:1: error: a second 'model' line\n"},
        {"model a\n%0:f32[N] = Input() {name=\"x\"}\n", "error: no 'return' line\n"},
        {"model a\nreturn %3\n", "f.ir:2:8: error: use of undefined value '%3'\n"},
        {"model a\ntrain lr = \n", "f.ir:2:12: error: expected a value\n"},
        {"model a\0\n", "f.ir:1:1: error: file looks binary (it contains a NUL byte)\n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t len = i == 7 ? 9 : strlen(cases[i].src);
        int f = diag_add_buffer(&fx->d, "f.ir", cases[i].src, len);
        Graph *g = ir_read(&fx->d, f);
        if (g) {
            graph_free(g);
            fail_msg("case %zu was accepted", i);
        }
        assert_contains(diag_text(fx), cases[i].want);
    }
    /* no such file index */
    assert_null(ir_read(&fx->d, 999));
}

/* ---- the verifier ------------------------------------------------------------------------ */

static void test_verify(void **state)
{
    Fx *fx = *state;
    char msg[512];
    Graph *g = fx->g = build_small(&fx->d, false);
    /* storage order x, fc_bias, fc_weight, fc, act, side; act is the output */
    assert_true(verify_captured(g, "elaborate", msg, sizeof msg));
    assert_string_equal(msg, "");
    /* an unknown shape is fine after elaborate, not after infer-shapes */
    g->nodes[1]->shape = shape_unknown();
    assert_true(verify_captured(g, "elaborate", msg, sizeof msg));
    assert_false(verify_captured(g, "infer-shapes", msg, sizeof msg));
    assert_contains(msg, "IR invalid after infer-shapes: node 1 (fc_bias)");
    assert_contains(msg, "shape unknown after shape inference");
    g->nodes[1]->shape = (Shape){.rank = 1, .d = {4}};
    if (!verify_captured(g, "infer-shapes", msg, sizeof msg))
        fail_msg("%s", msg);
    /* dtypes are required from infer-types on */
    assert_false(verify_captured(g, "infer-types", msg, sizeof msg));
    assert_contains(msg, "dtype unknown after type inference");
    for (int i = 0; i < g->nnodes; i++)
        g->nodes[i]->dtype = DT_F32;
    assert_true(verify_captured(g, "infer-types", msg, sizeof msg));
    assert_true(verify_captured(g, "amp", msg, sizeof msg));

    /* an input defined after its use */
    Node *fc = g->nodes[3];
    fc->in[0] = 4;
    assert_false(verify_captured(g, "elaborate", msg, sizeof msg));
    assert_contains(msg, "ampc: internal error: IR invalid after elaborate: node 3 (fc): an input is "
                         "not defined before its use\n");
    fc->in[0] = 3; /* its own output */
    assert_false(verify_captured(g, "elaborate", msg, sizeof msg));
    assert_contains(msg, "an input is not defined before its use");
    fc->in[0] = -1;
    assert_false(verify_captured(g, "elaborate", msg, sizeof msg));
    fc->in[0] = 0;
    assert_true(verify_captured(g, "elaborate", msg, sizeof msg));

    /* a wrong id, a missing name, a wrongly typed attribute, too many inputs */
    g->nodes[4]->id = 7;
    assert_false(verify_captured(g, "elaborate", msg, sizeof msg));
    assert_contains(msg, "id differs from its position");
    g->nodes[4]->id = 4;
    const char *saved = g->nodes[5]->name;
    g->nodes[5]->name = NULL;
    assert_false(verify_captured(g, "elaborate", msg, sizeof msg));
    assert_contains(msg, "node 5 (-): no name");
    g->nodes[5]->name = "not_registered";
    assert_false(verify_captured(g, "elaborate", msg, sizeof msg));
    assert_contains(msg, "its name is not registered in the graph's name table");
    /* names are unique in a graph: another node's name */
    g->nodes[5]->name = g->nodes[4]->name;
    assert_false(verify_captured(g, "elaborate", msg, sizeof msg));
    assert_contains(msg, "node 5 (act): its name is also node 4's (names are unique in a graph)");
    g->nodes[5]->name = saved;
    fc->attrs[FC_NUM_HIDDEN].type = AT_FLOAT;
    assert_false(verify_captured(g, "elaborate", msg, sizeof msg));
    assert_contains(msg, "attribute with the wrong type");
    fc->attrs[FC_NUM_HIDDEN].type = AT_INT;
    g->nodes[4]->nin = 2;
    g->nodes[4]->in = (int[]){3, 3};
    assert_false(verify_captured(g, "elaborate", msg, sizeof msg));
    assert_contains(msg, "more inputs than slots");
    g->nodes[4]->nin = 1;
    assert_true(verify_captured(g, "elaborate", msg, sizeof msg));

    /* outputs */
    g->outputs[0] = 6;
    assert_false(verify_captured(g, "elaborate", msg, sizeof msg));
    assert_contains(msg, "output out of range");
    g->outputs[0] = 4;
    g->noutputs = 0;
    assert_false(verify_captured(g, "elaborate", msg, sizeof msg));
    assert_contains(msg, "node -1 (-): no outputs");
    g->noutputs = 1;
    assert_true(verify_captured(g, NULL, msg, sizeof msg));
}

/* ir_verify's rule check, with the diagnostics it gives at the nodes. */
static bool rules_ok(Fx *fx, const Graph *g, const char *pass)
{
    char msg[512];
    fx->off = strlen(diag_text(fx));
    bool ok = verify_captured(g, pass, msg, sizeof msg);
    if (!ok)
        assert_contains(msg, "a node disagrees with the shape and type rules");
    return ok;
}

static int count_of(const char *hay, const char *needle)
{
    int k = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
        k++;
    return k;
}

static void test_verify_rules(void **state)
{
    Fx *fx = *state;
    Graph *g = fx->g = build_small(&fx->d, false);
    for (int i = 0; i < g->nnodes; i++)
        g->nodes[i]->dtype = DT_F32;
    Node *x = g->nodes[0], *w = g->nodes[2], *fc = g->nodes[3];
    assert_true(rules_ok(fx, g, "cast-elide"));
    char *before = print_to_string(g, NULL);

    /* a wrong output shape, reported once: the nodes that read it are not
     * checked against it */
    fc->shape = shape2(DIM_N, 5);
    assert_true(rules_ok(fx, g, "elaborate"));
    assert_false(rules_ok(fx, g, "infer-shapes"));
    assert_contains(last_diag(fx), "error: 'fc' is declared [N,5], but FullyConnected gives [N,4] here");
    assert_int_equal(count_of(last_diag(fx), "error:"), 1);
    fc->shape = shape2(DIM_N, 4);
    /* a parameter of the wrong shape, at its reader */
    w->shape = shape2(4, 9);
    assert_false(rules_ok(fx, g, "infer-shapes"));
    assert_contains(last_diag(fx), "FullyConnected: weight shape [4,9] does not match the expected [4,8]");
    w->shape = shape2(4, 8);

    /* a parameter's dtype: an error with AMP off, and after the amp pass;
     * before it, with AMP on, infer-types leaves it to the amp pass */
    w->dtype = DT_F16;
    assert_true(rules_ok(fx, g, "infer-shapes"));
    assert_false(rules_ok(fx, g, "infer-types"));
    assert_contains(last_diag(fx),
                    "FullyConnected: input 'weight' ('fc_weight') is float16 but must be float32 here");
    g->info.amp = DT_F16;
    assert_true(rules_ok(fx, g, "infer-types"));
    assert_false(rules_ok(fx, g, "amp"));
    g->info.amp = DT_UNKNOWN;
    /* a master only for a 16-bit parameter, and param_master typed by it */
    w->attrs[PARAM_MASTER].e = DT_F32;
    x->dtype = DT_F16;
    fc->dtype = g->nodes[4]->dtype = g->nodes[5]->dtype = DT_F16;
    g->nodes[1]->dtype = DT_F16;
    assert_true(rules_ok(fx, g, "cast-elide"));
    w->dtype = DT_F32;
    assert_false(rules_ok(fx, g, "cast-elide"));
    assert_contains(last_diag(fx), "'fc_weight' is float32, but only a 16-bit parameter has an fp32 "
                                   "master (master=float32)");
    w->dtype = DT_F16;
    int wid = w->id;
    Node *m = add_named(g, OP_param_master, &wid, 1, "fc_weight_master");
    m->shape = w->shape;
    m->dtype = DT_F16;
    assert_false(rules_ok(fx, g, "cast-elide"));
    assert_contains(last_diag(fx), "'fc_weight_master' is declared float16, but the master of "
                                   "'fc_weight' is float32");
    m->dtype = DT_F32;
    assert_true(rules_ok(fx, g, "cast-elide"));
    w->attrs[PARAM_MASTER].e = DT_UNKNOWN;
    assert_false(rules_ok(fx, g, "cast-elide"));
    assert_contains(last_diag(fx), "param_master reads 'fc_weight', which is not a parameter with "
                                   "a master copy");
    graph_free(fx->g);

    /* a tensor too large to address, refused as infer-shapes refuses it */
    g = fx->g = build_small(&fx->d, false);
    for (int i = 0; i < g->nnodes; i++)
        g->nodes[i]->dtype = DT_F32;
    Node *huge = add_named(g, OP_Param, NULL, 0, "huge");
    huge->shape = (Shape){.rank = 3, .d = {INT32_MAX, INT32_MAX, 2}};
    huge->dtype = DT_F32;
    assert_false(rules_ok(fx, g, "infer-shapes"));
    assert_contains(last_diag(fx), "'huge' is too large: its shape [2147483647,2147483647,2] has "
                                   "more than 2^60 elements per sample");
    graph_free(fx->g);

    /* the checks leave the graph as it was */
    g = fx->g = build_small(&fx->d, false);
    for (int i = 0; i < g->nnodes; i++)
        g->nodes[i]->dtype = DT_F32;
    assert_true(ir_check_rules(g, "cast-elide"));
    g->nodes[3]->shape = shape2(DIM_N, 5);
    assert_false(ir_check_rules(g, "cast-elide"));
    g->nodes[3]->shape = shape2(DIM_N, 4);
    char *after = print_to_string(g, NULL);
    assert_string_equal(before, after);
    free(before);
    free(after);
}

/* BatchNorm's gamma and beta stay fp32 whatever produces them: a 16-bit
 * value in those slots breaks infer-types' rules. */
static void test_verify_rules_batchnorm_slots(void **state)
{
    Fx *fx = *state;
    static const char src[] =
        "model m(x: float16[N,4,3,3], g: float16[4]) {\n"
        "    return BatchNorm(x, gamma=g, name=\"bn\")\n"
        "}\n";
    fx->g = frontend_elaborate(&fx->d, "bn.sym", src, strlen(src), NULL);
    assert_non_null(fx->g);
    assert_true(infer_shapes(fx->g));
    assert_false(infer_types(fx->g)); /* the pass refuses it ... */
    for (int i = 0; i < fx->g->nnodes; i++)
        if (fx->g->nodes[i]->dtype == DT_UNKNOWN)
            fx->g->nodes[i]->dtype = fx->g->nodes[i]->op == OP_BatchNorm ? DT_F16 : DT_F32;
    /* ... and so does the check of a graph that claims to have passed it */
    assert_false(rules_ok(fx, fx->g, "cast-elide"));
    assert_contains(last_diag(fx), "BatchNorm: input 'gamma' ('g') is float16 but must be float32 here");
}

/* A training graph is what autodiff derives from its forward part: a
 * grad_of moved between two parameters of one shape (BatchNorm's gamma and
 * beta) passes every shape and type rule, and not the derivation. */
static void test_autodiff_check(void **state)
{
    Fx *fx = *state;
    fx->g = frontend_compile(&fx->d, "tiny.sym", round_trip_src, strlen(round_trip_src), &unfused);
    assert_non_null(fx->g);
    Graph *g = fx->g;
    assert_true(autodiff_check(g, true));
    Node *gg = graph_find(g, "cbr1_bn1_gamma_grad_of"), *gb = graph_find(g, "cbr1_bn1_beta_grad_of");
    assert_non_null(gg);
    assert_non_null(gb);
    int t = gg->in[1];
    gg->in[1] = gb->in[1];
    gb->in[1] = t;
    assert_true(ir_check_rules(g, "train-cast-elide"));
    fx->off = strlen(diag_text(fx));
    assert_false(autodiff_check(g, true));
    assert_contains(last_diag(fx), "the training graph: 'cbr1_bn1_");
    assert_contains(last_diag(fx), "is not what autodiff derives from the forward part");
    gb->in[1] = gg->in[1];
    gg->in[1] = t;
    assert_true(autodiff_check(g, true));
    /* the inference graph too */
    Node *bn = graph_find(g->infer, "cbr1_bn1");
    assert_non_null(bn);
    bn->attrs[BN_USE_GLOBAL_STATS].b = false;
    fx->off = strlen(diag_text(fx));
    assert_false(autodiff_check(g, true));
    assert_contains(last_diag(fx), "the inference graph: 'cbr1_bn1' is not what autodiff derives");
}

/* The fuse pass on the tiny model: its conv-bn-relu becomes one node each
 * way (training and inference graphs); the dump after fuse reads back to
 * itself and passes fuse_check; the same graph said to come from before
 * fuse is refused at its fused ops; the `absorbed` names are what the check
 * expands the dump by, and a wrong one is caught. */
static void test_fuse_check(void **state)
{
    Fx *fx = *state;
    fx->g = frontend_compile(&fx->d, "tiny.sym", round_trip_src, strlen(round_trip_src), NULL);
    if (!fx->g)
        fail_msg("%s", diag_text(fx));
    Graph *g = fx->g;
    char msg[512];
    assert_true(verify_captured(g, "fuse", msg, sizeof msg));
    Node *f = graph_find(g, "cbr1_act1"), *b = graph_find(g, "cbr1_bn1_bwd");
    assert_non_null(f);
    assert_non_null(b);
    assert_int_equal(f->op, OP__fused_BatchNorm_relu);
    assert_string_equal(f->attrs[FUSED_BN_ABSORBED].s, "cbr1_bn1");
    assert_int_equal(b->op, OP__backward_fused_BatchNorm_relu);
    assert_string_equal(b->attrs[FUSED_BN_ABSORBED].s, "cbr1_act1_bwd");
    assert_int_equal(b->in[1], f->id); /* masks by the relu's output */
    assert_null(graph_find(g, "cbr1_bn1"));
    assert_null(graph_find(g, "cbr1_act1_bwd"));
    assert_int_equal(graph_find(g->infer, "cbr1_act1")->op, OP__fused_BatchNorm_relu);
    assert_true(fuse_check(g));
    /* the dump reads back to itself (roundtrip.sh checks whole dumps, with
     * their inference graphs) */
    char *t1 = print_to_string(g, "after fuse");
    int file = diag_add_buffer(&fx->d, "fused.ir", t1, strlen(t1));
    fx->g2 = ir_read(&fx->d, file);
    if (!fx->g2)
        fail_msg("%s", diag_text(fx));
    char *t2 = print_to_string(fx->g2, "after fuse");
    assert_string_equal(t1, t2);
    free(t1);
    free(t2);
    /* before fuse, a fused op is refused at its node */
    fx->off = strlen(diag_text(fx));
    assert_false(verify_captured(g, "train-cast-elide", msg, sizeof msg));
    assert_contains(last_diag(fx), "is made by the fuse pass, but this is a graph after "
                                   "train-cast-elide");
    /* an absorbed name another node has */
    f->attrs[FUSED_BN_ABSORBED].s = "cbr1_conv1";
    fx->off = strlen(diag_text(fx));
    assert_false(fuse_check(g));
    assert_contains(last_diag(fx), "'cbr1_act1': the node it absorbed, 'cbr1_conv1', has the "
                                   "name of another node");
    /* a free name that is not the one autodiff named the parts after */
    f->attrs[FUSED_BN_ABSORBED].s = "cbr1_bn9";
    fx->off = strlen(diag_text(fx));
    assert_false(fuse_check(g));
    assert_contains(last_diag(fx), "is not what autodiff derives from the forward part");
    f->attrs[FUSED_BN_ABSORBED].s = "cbr1_bn1";
    assert_true(fuse_check(g));
}

/* The cast fusions on the tiny model under AMP (bf16): the loss head reads
 * the 16-bit logits and its backward writes the 16-bit gradient; no cast to
 * or from fp32 is left next to them; the dump reads back to itself and
 * passes fuse_check, which expands the two into the casts and ops they
 * replaced; a wrong `absorbed` or dtype is caught. */
static void test_fuse_cast_check(void **state)
{
    Fx *fx = *state;
    const PassOptions bf16 = {.amp = "bfloat16"};
    fx->g = frontend_compile(&fx->d, "tiny.sym", round_trip_src, strlen(round_trip_src), &bf16);
    if (!fx->g)
        fail_msg("%s", diag_text(fx));
    Graph *g = fx->g;
    char msg[512];
    assert_true(verify_captured(g, "fuse", msg, sizeof msg));
    Node *head = NULL, *bwd = NULL;
    for (int i = 0; i < g->nnodes; i++) {
        Node *n = g->nodes[i];
        if (n->op == OP__fused_cast_SoftmaxOutput)
            head = n;
        else if (n->op == OP__backward_fused_SoftmaxOutput_cast)
            bwd = n;
        assert_int_not_equal(n->op, OP_SoftmaxOutput);
        assert_int_not_equal(n->op, OP__backward_SoftmaxOutput);
        if (n->op == OP_amp_cast) /* only the data input's cast is left */
            assert_int_equal(g->nodes[n->in[0]]->op, OP_Input);
    }
    assert_non_null(head);
    assert_non_null(bwd);
    assert_true(op_is_loss_head(head->op));
    assert_int_equal(head->dtype, DT_F32);
    assert_int_equal(g->nodes[head->in[0]]->dtype, DT_BF16);
    assert_null(graph_find(g, head->attrs[FUSED_SMO_ABSORBED].s)); /* the cast is gone */
    assert_int_equal(bwd->in[0], head->id);
    assert_int_equal(bwd->dtype, DT_BF16);
    assert_int_equal(node_dtype_attr(bwd, FUSED_SMO_BWD_DTYPE), DT_BF16);
    assert_null(graph_find(g, bwd->attrs[FUSED_SMO_BWD_ABSORBED].s));
    assert_float_equal(node_float(bwd, SMO_SMOOTH_ALPHA), 0.1, 1e-12);
    assert_int_equal(node_enum(bwd, SMO_NORMALIZATION), SMO_NORM_VALID);
    bool infer_fused = false;
    for (int i = 0; i < g->infer->nnodes; i++)
        infer_fused |= g->infer->nodes[i]->op == OP__fused_cast_SoftmaxOutput;
    assert_true(infer_fused);
    assert_true(fuse_check(g));
    char *t1 = print_to_string(g, "after fuse");
    int file = diag_add_buffer(&fx->d, "fused.ir", t1, strlen(t1));
    fx->g2 = ir_read(&fx->d, file);
    if (!fx->g2)
        fail_msg("%s", diag_text(fx));
    char *t2 = print_to_string(fx->g2, "after fuse");
    assert_string_equal(t1, t2);
    free(t1);
    free(t2);
    /* the backward's absorbed name is the one autodiff derives */
    const char *was = bwd->attrs[FUSED_SMO_BWD_ABSORBED].s;
    bwd->attrs[FUSED_SMO_BWD_ABSORBED].s = "softmax_output9_bwd";
    fx->off = strlen(diag_text(fx));
    assert_false(fuse_check(g));
    assert_contains(last_diag(fx), "is not what autodiff derives from the forward part");
    bwd->attrs[FUSED_SMO_BWD_ABSORBED].s = was;
    /* a dtype the node is not declared in: the shape rule says so */
    bwd->attrs[FUSED_SMO_BWD_DTYPE].e = DT_F16;
    fx->off = strlen(diag_text(fx));
    assert_false(verify_captured(g, "fuse", msg, sizeof msg));
    assert_contains(last_diag(fx), "is declared bfloat16, but _backward_fused_SoftmaxOutput_cast "
                                   "gives float16 here");
    bwd->attrs[FUSED_SMO_BWD_DTYPE].e = DT_BF16;
    assert_true(fuse_check(g));
}

/* --no-fuse names: each rule, lists, all; an unknown one is named with the
 * valid ones. */
static void test_fuse_disable(void **state)
{
    Fx *fx = *state;
    unsigned m = 0;
    assert_int_equal(fuse_rule_count(), 6);
    assert_string_equal(fuse_rule_name(0), "bn_relu");
    assert_string_equal(fuse_rule_name(1), "add_relu");
    assert_string_equal(fuse_rule_name(2), "bn_add_relu");
    assert_string_equal(fuse_rule_name(3), "cast_softmax_output");
    assert_string_equal(fuse_rule_name(4), "softmax_output_bwd_cast");
    assert_string_equal(fuse_rule_name(5), "conv_bn_stats");
    assert_null(fuse_rule_name(6));
    assert_true(fuse_disable(&fx->d, "add_relu", &m));
    assert_int_equal(m, 2u);
    m = 0;
    assert_true(fuse_disable(&fx->d, "bn_relu,add_relu", &m));
    assert_int_equal(m, 3u);
    m = 0;
    assert_true(fuse_disable(&fx->d, "all", &m));
    assert_int_equal(m, ~0u);
    fx->off = strlen(diag_text(fx));
    assert_false(fuse_disable(&fx->d, "bn_relu,bn_rel", &m));
    assert_contains(last_diag(fx), "--no-fuse: unknown fusion 'bn_rel' (the fusions are "
                                   "bn_relu, add_relu, bn_add_relu, cast_softmax_output, "
                                   "softmax_output_bwd_cast, conv_bn_stats, or all)");
    m = 0;
    assert_true(fuse_disable(&fx->d, "softmax_output_bwd_cast,cast_softmax_output", &m));
    assert_int_equal(m, 24u);
    assert_false(fuse_disable(&fx->d, "", &m));
}

/* --fuse names only the rules off by default (conv_bn_stats). */
static void test_fuse_enable(void **state)
{
    Fx *fx = *state;
    unsigned m = 0;
    assert_true(fuse_enable(&fx->d, "conv_bn_stats", &m));
    assert_int_equal(m, 1u << 5);
    fx->off = strlen(diag_text(fx));
    assert_false(fuse_enable(&fx->d, "conv_bn_stats,bn_relu", &m));
    assert_contains(last_diag(fx), "--fuse: the fusion is on unless --no-fuse turns it off: "
                                   "'bn_relu' (the fusions --fuse turns on are conv_bn_stats)");
    fx->off = strlen(diag_text(fx));
    assert_false(fuse_enable(&fx->d, "conv_bn", &m));
    assert_contains(last_diag(fx), "--fuse: unknown fusion 'conv_bn'");
    assert_false(fuse_enable(&fx->d, "", &m));
}

/* conv_bn_stats over three pairs it takes (BatchNorm + relu, + add + relu,
 * alone) and four it refuses (a bias, another reader of the convolution's
 * value, groups, the moving statistics): each refusal a warning at its
 * BatchNorm saying why; the pairs checked by fuse_check.  For
 * --target=cpu, or in fp32, nothing is fused. */
static const char stats_src[] =
    "def c(x, name) = Convolution(x, num_filter=8, kernel=(3,3), pad=(1,1), no_bias=true, "
    "name=name)\n"
    "model m(data: float32[N,3,8,8], label: float32[N]) {\n"
    "    a = Activation(BatchNorm(c(data, \"c1\"), name=\"bn1\"), act_type=\"relu\", name=\"r1\")\n"
    "    x = Activation(BatchNorm(c(a, \"c2\"), name=\"bn2\") + a, act_type=\"relu\", "
    "name=\"r2\")\n"
    "    y = BatchNorm(c(x, \"c3\"), name=\"bn3\")\n"
    "    b = BatchNorm(Convolution(y, num_filter=8, kernel=(1,1), name=\"biased\"), name=\"bnb\")\n"
    "    s = c(b, \"shared\")\n"
    "    t = BatchNorm(s, name=\"bns\") + s\n"
    "    g = BatchNorm(Convolution(t, num_filter=8, kernel=(1,1), no_bias=true, num_group=2, "
    "name=\"grouped\"), name=\"bng\")\n"
    "    z = BatchNorm(c(g, \"frozen\"), use_global_stats=true, name=\"bnf\")\n"
    "    return SoftmaxOutput(FullyConnected(Flatten(z), num_hidden=10), label)\n"
    "}\n"
    "train m { batch_size = 4; lr = 0.1; data = digits; amp = float16 }\n";

static Graph *stats_compile(Fx *fx, const char *src, Target target)
{
    PassOptions po = {.fuse = 1u << 5, .target = target};
    fx->off = strlen(diag_text(fx));
    Graph *g = frontend_compile(&fx->d, "stats.sym", src, strlen(src), &po);
    if (!g)
        fail_msg("%s", diag_text(fx));
    return g;
}

static void test_fuse_conv_bn_stats(void **state)
{
    Fx *fx = *state;
    Graph *g = fx->g = stats_compile(fx, stats_src, TARGET_CUDA);
    const char *text = diag_text(fx) + fx->off;
    static const struct {
        const char *conv, *bn;
        OpKind op;
    } made[] = {{"c1", "r1", OP__fused_BatchNorm_relu_stats},
                {"c2", "r2", OP__fused_BatchNorm_add_relu_stats},
                {"c3", "bn3", OP__fused_BatchNorm_stats}};
    for (int k = 0; k < 3; k++) {
        const Node *conv = graph_find(g, made[k].conv), *bn = graph_find(g, made[k].bn);
        assert_non_null(conv);
        assert_non_null(bn);
        assert_int_equal(conv->op, OP__fused_Convolution_stats);
        assert_int_equal(bn->op, made[k].op);
        const Node *st = g->nodes[bn->in[bn->nin - 1]];
        assert_int_equal(st->op, OP_part);
        assert_int_equal(st->in[0], conv->id);
        assert_int_equal(st->dtype, DT_F32);
        assert_int_equal(st->shape.rank, 2);
        assert_int_equal(st->shape.d[0], 2);
        assert_int_equal(st->shape.d[1], 8);
        assert_int_equal(bn->in[0], conv->id);
        /* the inference graph keeps the plain convolution */
        assert_int_equal(graph_find(g->infer, made[k].conv)->op, OP_Convolution);
    }
    static const char *const refused[] = {
        "'bnb' and the convolution 'biased' it reads stay apart: the convolution has a bias",
        "'bns' and the convolution 'shared' it reads stay apart: 'plus2' reads the "
        "convolution's value too",
        "'bng' and the convolution 'grouped' it reads stay apart: the convolution is not 2-D "
        "without groups",
        "'bnf' and the convolution 'frozen' it reads stay apart: the BatchNorm uses the moving "
        "statistics"};
    for (int k = 0; k < 4; k++) {
        assert_contains(text, refused[k]);
        static const char *const conv[] = {"biased", "shared", "grouped", "frozen"};
        assert_int_equal(graph_find(g, conv[k])->op, OP_Convolution);
    }
    /* the graph after schedule: fuse_check on it without its layouts */
    assert_true(training_graph_check(g, pass_index("schedule")));
    /* statistics of another convolution: the shape rule refuses them */
    Node *bn3 = graph_find(g, "bn3");
    int own = bn3->in[5];
    bn3->in[5] = graph_find(g, "r1")->in[5];
    fx->off = strlen(diag_text(fx));
    assert_false(op_info(bn3->op)->shape(g, bn3));
    assert_contains(last_diag(fx), "'bn3': _fused_BatchNorm_stats reads 'c1_stats' as the "
                                   "statistics of 'c3', but they are not part 1");
    bn3->in[5] = own;
    graph_free(fx->g);
    fx->g = NULL;
    /* the CPU program: a warning, nothing fused */
    g = fx->g = stats_compile(fx, stats_src, TARGET_CPU);
    assert_contains(diag_text(fx) + fx->off, "--fuse=conv_bn_stats applies to --target=cuda only");
    assert_int_equal(graph_find(g, "c1")->op, OP_Convolution);
    graph_free(fx->g);
    fx->g = NULL;
}

static void test_verify_frontend_graphs(void **state)
{
    Fx *fx = *state;
    char msg[512];
    fx->g = frontend_compile(&fx->d, "tiny.sym", round_trip_src, strlen(round_trip_src), &unfused);
    assert_non_null(fx->g);
    assert_true(verify_captured(fx->g, "autodiff", msg, sizeof msg));
    assert_true(verify_captured(fx->g, "train-cast-elide", msg, sizeof msg));
    /* a training graph is not a forward graph: the ops autodiff made are
     * refused at the node, before autodiff */
    fx->off = strlen(diag_text(fx));
    assert_false(verify_captured(fx->g, "cast-elide", msg, sizeof msg));
    assert_contains(msg, "a node disagrees with the shape and type rules");
    assert_contains(last_diag(fx), "is made by autodiff, but this is a graph after cast-elide");
    /* ids are topological: every input precedes its user */
    for (int i = 0; i < fx->g->nnodes; i++)
        for (int j = 0; j < fx->g->nodes[i]->nin; j++)
            assert_true(fx->g->nodes[i]->in[j] < i);
}

/* ---- diagnostics -------------------------------------------------------------------------- */

static void test_diag_format(void **state)
{
    Fx *fx = *state;
    static const char text[] = "line one\n\tx = bad(y)\nlast";
    int f = diag_add_buffer(&fx->d, "src.sym", text, strlen(text));
    assert_int_equal(f, 0);
    assert_string_equal(diag_file(&fx->d, f)->path, "src.sym");
    assert_null(diag_file(&fx->d, 5));
    assert_null(diag_file(&fx->d, -1));
    int outer = diag_push_frame(&fx->d, "stage", (Loc){f, 3, 1}, -1);
    int inner = diag_push_frame(&fx->d, "block", (Loc){f, 1, 6}, outer);
    diag_error_in(&fx->d, (Loc){f, 2, 6}, inner, "bad thing %d", 42);
    assert_string_equal(diag_text(fx), "src.sym:2:6: error: bad thing 42\n"
                                       " \tx = bad(y)\n"
                                       " \t    ^\n"
                                       "note: in call to 'block' from src.sym:1:6\n"
                                       "note: in call to 'stage' from src.sym:3:1\n");
    assert_int_equal(fx->d.nerr, 1);
    diag_warning(&fx->d, (Loc){f, 3, 5}, "w");
    assert_int_equal(fx->d.nwarn, 1);
    assert_contains(diag_text(fx), "src.sym:3:5: warning: w\n last\n     ^\n");
    diag_plain_error(&fx->d, "no such file '%s'", "x.sym");
    assert_contains(diag_text(fx), "ampc: error: no such file 'x.sym'\n");
    diag_error(&fx->d, loc_none(), "nowhere");
    assert_contains(diag_text(fx), "ampc: error: nowhere\n");
    assert_int_equal(fx->d.nerr, 3);
    /* a long chain of frames is cut after 16 notes */
    int fr = -1;
    for (int i = 0; i < 40; i++)
        fr = diag_push_frame(&fx->d, "rec", (Loc){f, 1, 1}, fr);
    diag_error_in(&fx->d, (Loc){f, 1, 1}, fr, "deep");
    assert_contains(diag_text(fx), "note: (further calls omitted)\n");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_arena_alignment_and_zeroing),
        cmocka_unit_test(test_arena_large_blocks),
        cmocka_unit_test(test_arena_strings),
        cmocka_unit_test(test_vec),
        cmocka_unit_test(test_strmap_basics),
        cmocka_unit_test(test_strmap_grows),
        cmocka_unit_test(test_dtypes),
        cmocka_unit_test(test_shape_str),
        cmocka_unit_test(test_shape_numel),
        cmocka_unit_test(test_shape_equal_and_sym),
        cmocka_unit_test(test_op_table),
        cmocka_unit_test_setup_teardown(test_graph_add_defaults, setup, teardown),
        cmocka_unit_test_setup_teardown(test_graph_add_copies_inputs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_graph_set_name, setup, teardown),
        cmocka_unit_test_setup_teardown(test_graph_compact, setup, teardown),
        cmocka_unit_test_setup_teardown(test_canonical_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_canonical_order_deep_chain, setup, teardown),
        cmocka_unit_test_setup_teardown(test_print_read_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_read_then_print_is_stable, setup, teardown),
        cmocka_unit_test_setup_teardown(test_read_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_read_errors_whole_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_verify, setup, teardown),
        cmocka_unit_test_setup_teardown(test_verify_frontend_graphs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_verify_rules, setup, teardown),
        cmocka_unit_test_setup_teardown(test_verify_rules_batchnorm_slots, setup, teardown),
        cmocka_unit_test_setup_teardown(test_autodiff_check, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fuse_check, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fuse_cast_check, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fuse_disable, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fuse_enable, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fuse_conv_bn_stats, setup, teardown),
        cmocka_unit_test_setup_teardown(test_diag_format, setup, teardown),
    };
    return cmocka_run_group_tests_name("ir", tests, NULL, NULL);
}
