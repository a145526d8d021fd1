/*
 * test_settings.c - one owner for the train settings: runtime/settings.c's
 * table is the set of train-block keys ampc accepts, of train_defaults the
 * program reads and of its flags, and docs/training.md lists the same;
 * ampc refuses, at the entry, what the program would refuse.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "fixture.h"
#include "../runtime/settings.h"

#include <math.h>

/* ---- the table itself ------------------------------------------------------------- */

static void test_table_is_consistent(void **state)
{
    (void)state;
    int key_only = 0;
    for (int i = 0; i < rt_nsettings; i++) {
        const RtSetting *s = &rt_settings[i];
        assert_true(s->key || s->flag);
        assert_non_null(s->parse);
        assert_non_null(s->want);
        assert_int_equal(!!s->key, !!(s->where & RT_SET_KEY));
        assert_int_equal(!!s->flag, !!(s->where & RT_SET_FLAG));
        if (s->key && s->flag) {
            /* the flag is the key with '-' for '_' */
            char want[64];
            snprintf(want, sizeof want, "%s", s->key);
            for (char *p = want; *p; p++)
                *p = *p == '_' ? '-' : *p;
            assert_string_equal(s->flag, want);
        }
        if (s->key && !s->flag) {
            /* the documented exceptions: ampc's own settings */
            assert_true(s->where & RT_SET_COMPILER);
            assert_true(strcmp(s->key, "amp") == 0 || strcmp(s->key, "kvstore") == 0);
            key_only++;
        }
        assert_true(!s->key || rt_setting_by_key(s->key) == s);
        assert_true(!s->flag || rt_setting_by_flag(s->flag) == s);
    }
    assert_int_equal(key_only, 2);
    assert_null(rt_setting_by_key("data_dir"));
    assert_null(rt_setting_by_key("clip_gradient"));
}

/* ---- strings cross from ampc to the program unchanged --------------------------------- */

/* A path in a train-block string reaches the program as config_print writes
 * it (escaped); the program's data parser undoes exactly those escapes. */
static void test_data_path_escapes_round_trip(void **state)
{
    (void)state;
    static const char *const paths[] = {"plain/dir", "back\\slash", "quote\"d", "it's",
                                        "tab\there", "new\nline", "C:\\data\\\"x\""};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        ConfigVal str = {.kind = CV_STR, .s = paths[i]};
        ConfigVal *args[] = {&str};
        const char *names[] = {NULL};
        ConfigVal call = {.kind = CV_CALL, .s = "cifar10", .nargs = 1, .argnames = names,
                          .args = args};
        char *text = NULL;
        size_t len = 0;
        FILE *m = open_memstream(&text, &len);
        assert_non_null(m);
        config_print(m, &call);
        assert_int_equal(fclose(m), 0);
        RtDataSpec d;
        char err[256] = "";
        bool ok = rt_data_spec_parse(text, &d, err, sizeof err);
        if (!ok)
            fail_msg("%s: %s", text, err);
        assert_int_equal(d.kind, RT_DS_CIFAR10);
        assert_string_equal(d.arg[0], paths[i]);
        free(text);
    }
}

/* ---- ampc's train block takes exactly the table's keys ------------------------------- */

/* A value the program accepts for each key; every key of the table must have
 * one, so a new key needs a line here (and in docs/training.md). */
static const char *sample_value(const char *key)
{
    static const char *const samples[][2] = {
        {"epochs", "3"}, {"max_steps", "10"}, {"batch_size", "8"},
        {"lr", "step(base=0.1, factor=0.5, steps=\"2,4\")"},
        {"optimizer", "adam(beta1=0.8, wd=0)"}, {"init", "normal(sigma=0.02)"},
        {"momentum", "0"}, {"wd", "1e-5"}, {"loss_scale", "off"}, {"seed", "11"},
        {"data", "cifar10(\"/tmp/c\")"}, {"augment", "mirror"}, {"log_interval", "5"},
        {"amp", "bfloat16"}, {"kvstore", "\"device\""},
    };
    for (size_t i = 0; i < sizeof samples / sizeof samples[0]; i++)
        if (strcmp(samples[i][0], key) == 0)
            return samples[i][1];
    return NULL;
}

static Graph *elaborate_train(Fx *fx, const char *entry)
{
    snprintf(fx->src, sizeof fx->src,
             "model m(x: float32[N,3,8,8], y: float32[N]) {\n"
             "    return SoftmaxOutput(FullyConnected(x, num_hidden=2), y)\n"
             "}\n"
             "train m {\n    %s\n}\n",
             entry);
    fx->off = strlen(diag_text(fx));
    return frontend_elaborate(&fx->d, "t.sym", fx->src, strlen(fx->src), NULL);
}

static void test_train_block_takes_every_key(void **state)
{
    Fx *fx = *state;
    for (int i = 0; i < rt_nsettings; i++) {
        const char *key = rt_settings[i].key;
        if (!key)
            continue;
        const char *v = sample_value(key);
        if (!v)
            fail_msg("no sample value for the train key '%s' in this test", key);
        char entry[256];
        snprintf(entry, sizeof entry, "%s = %s", key, v);
        Graph *g = elaborate_train(fx, entry);
        if (!g)
            fail_msg("'%s' refused: %s", entry, last_diag(fx));
        assert_int_equal(g->ntrain, 1);
        /* what the program gets (codegen writes config_print's form) parses */
        char *text = NULL;
        size_t len = 0;
        FILE *m = open_memstream(&text, &len);
        config_print(m, g->train[0].val);
        fclose(m);
        RtTrainOptions o;
        rt_train_options_default(&o);
        char kv[512], err[512];
        snprintf(kv, sizeof kv, "%s=%s", key, text);
        const char *defaults[] = {kv, NULL};
        if (!rt_train_apply_defaults(&o, defaults, err, sizeof err))
            fail_msg("the program refuses '%s': %s", kv, err);
        free(text);
        graph_free(g);
    }
    /* the flag-only settings are not train keys */
    for (int i = 0; i < rt_nsettings; i++) {
        if (rt_settings[i].key)
            continue;
        char entry[128], key[64];
        snprintf(key, sizeof key, "%s", rt_settings[i].flag);
        for (char *p = key; *p; p++)
            *p = *p == '-' ? '_' : *p;
        snprintf(entry, sizeof entry, "%s = 1", key);
        Graph *g = elaborate_train(fx, entry);
        if (g)
            fail_msg("'%s' accepted", entry);
        assert_contains(last_diag(fx), "unknown train setting");
    }
}

/* The values the program refuses, refused by ampc at the entry. */
static void test_bad_values_refused_at_entry(void **state)
{
    Fx *fx = *state;
    static const char *const bad[][2] = {
        {"lr = -1", "t.sym:5:5: error: train setting 'lr': '-1' is not a number from 0 to 1e30"},
        {"batch_size = 0", "train setting 'batch_size': '0' is not an integer from 1 to"},
        {"momentum = 5", "train setting 'momentum': '5' is not a number in [0, 1]"},
        {"loss_scale = dynamic(interval=0)", "interval must be an integer >= 1"},
        {"loss_scale = dynamic(init=abc)", "init must be a number"},
        {"loss_scale = dynamic(growht=2)", "dynamic() has no argument 'growht'"},
        {"augment = \"crop=65\"", "expected crop=PAD (0..64)"},
        {"data = \"nowhere\"", "is not synthetic, digits"},
        {"optimizer = sgd(lazy_update=true)", "sgd() has no argument 'lazy_update'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        Graph *g = elaborate_train(fx, bad[i][0]);
        if (g)
            fail_msg("'%s' accepted", bad[i][0]);
        assert_contains(last_diag(fx), bad[i][1]);
    }
}

/* ---- the number grammar (issue 21) ------------------------------------------------------ */

/* flag value -> the message, or NULL when accepted */
static const char *flag_error(const char *flag, const char *v)
{
    static char err[512];
    RtTrainOptions o;
    rt_train_options_default(&o);
    const RtSetting *s = rt_setting_by_flag(flag);
    assert_non_null(s);
    return rt_setting_apply(&o, s, v, RT_FROM_FLAG, err, sizeof err) ? NULL : err;
}

/* Decimal only, in ampc and the programs alike (settings.h): no hex (strtod
 * and strtoull with base 0 took --lr 0x10 and --seed 0x10 as 16), no
 * octal, no white space, no inf or nan; a refusal gives the real bounds
 * (--epochs 2^63-1 and --lr 1e39 were refused as "not an integer >= 0" and
 * "not a number >= 0"), and a float bound is compared as a double
 * (--mpi-timeout 0.001 was refused by "seconds from 0.001 to 1e6"). */
static void test_number_grammar(void **state)
{
    (void)state;
    static const char *const refused[][3] = {
        {"lr", "0x10", "'0x10' is not a number from 0 to 1e30"},
        {"lr", " 0.1", "is not a number from 0 to 1e30"},
        {"lr", "0.1 ", "is not a number from 0 to 1e30"},
        {"lr", "inf", "is not a number from 0 to 1e30"},
        {"lr", "nan", "is not a number from 0 to 1e30"},
        {"lr", "1e39", "'1e39' is not a number from 0 to 1e30"},
        {"wd", "0x1p3", "is not a number from 0 to 1e30"},
        {"epochs", "9223372036854775807", "is not an integer from 0 to 2147483647"},
        {"epochs", "0x10", "is not an integer from 0 to 2147483647"},
        {"max-steps", "99999999999999999999", "is not an integer from 0 to 9223372036854775807"},
        {"seed", "0x10", "is not an integer from 0 to 18446744073709551615"},
        {"seed", "+5", "is not an integer from 0 to 18446744073709551615"},
        {"seed", "18446744073709551616", "is not an integer from 0"},
        {"batch-size", "1e2", "is not an integer from 1 to 2147483647"},
        {"loss-scale", "0x10", "loss scale '0x10'"},
        {"loss-scale", "1e39",
         "a static scale must be a number above 0 and at most "
         "3.4028235e+38"},
        {"optimizer", "sgd(lr=1e39)", "lr must be a decimal number from -3.4028235e+38 to"},
        {"optimizer", "sgd(momentum=0x1)", "momentum must be a decimal number"},
        {"lr", "step(factor=0.5, steps=0x10)", "the steps must be integers >= 1"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        const char *e = flag_error(refused[i][0], refused[i][1]);
        if (!e || !strstr(e, refused[i][2]))
            fail_msg("--%s '%s': %s (wanted '%s')", refused[i][0], refused[i][1],
                     e ? e : "accepted", refused[i][2]);
    }
    static const char *const accepted[][2] = {
        {"lr", "0.1"},         {"lr", ".5"},
        {"lr", "1e-3"},        {"lr", "1E+2"},
        {"lr", "1e30"},        {"seed", "010"},
        {"epochs", "0"},       {"mpi-timeout", "0.001"},
        {"loss-scale", "128"}, {"max-steps", "9223372036854775807"},
    };
    for (size_t i = 0; i < sizeof accepted / sizeof accepted[0]; i++) {
        const char *e = flag_error(accepted[i][0], accepted[i][1]);
        if (e)
            fail_msg("--%s '%s' refused: %s", accepted[i][0], accepted[i][1], e);
    }
    RtTrainOptions o;
    rt_train_options_default(&o);
    char err[256];
    assert_true(
        rt_setting_apply(&o, rt_setting_by_flag("seed"), "010", RT_FROM_FLAG, err, sizeof err));
    assert_true(o.seed == 10); /* decimal, not octal 8 */
    assert_int_equal(rt_decimal_len("12.5e-3,", false), 7);
    assert_int_equal(rt_decimal_len("12.5e-3,", true), 2);
    assert_int_equal(rt_decimal_len("0x10", false), 1);
    assert_int_equal(rt_decimal_len("e5", false), 0);
    assert_int_equal(rt_decimal_len("1e", false), 0);
    double d;
    assert_false(rt_parse_f64("1e400", 0, HUGE_VAL, &d));
    assert_true(rt_parse_f64("1e-400", 0, 1, &d) && d == 0); /* underflow: 0 */
}

/* ---- docs/training.md lists the same keys and flags ------------------------------------ */

static char *read_doc(void)
{
    FILE *f = fopen("docs/training.md", "r");
    if (!f)
        fail_msg("cannot open docs/training.md (run from the repository root)");
    static char buf[1 << 18];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return buf;
}

/* The text from the heading `from` to the next line starting with `to`. */
static char *section(char *doc, const char *from, const char *to)
{
    char *a = strstr(doc, from);
    assert_non_null(a);
    char *b = strstr(a + strlen(from), to);
    assert_non_null(b);
    size_t n = (size_t)(b - a);
    char *s = malloc(n + 1);
    memcpy(s, a, n);
    s[n] = 0;
    return s;
}

/* Whether `name` follows "`--" somewhere in text (a flag as docs write it). */
static bool mentions_flag(const char *text, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = strstr(text, "`--"); p; p = strstr(p + 1, "`--"))
        if (strncmp(p + 3, name, n) == 0 && !(p[3 + n] == '-' || (p[3 + n] >= 'a' &&
                                                                  p[3 + n] <= 'z')))
            return true;
    return false;
}

static void test_docs_list_the_table(void **state)
{
    (void)state;
    char *doc = read_doc();
    char *flags = section(doc, "### The program's flags", "### Train-block keys");
    char *keys = section(doc, "### Train-block keys and values", "**Exit status.**");
    for (int i = 0; i < rt_nsettings; i++) {
        const RtSetting *s = &rt_settings[i];
        if (s->flag && !mentions_flag(flags, s->flag))
            fail_msg("docs/training.md does not list --%s", s->flag);
        if (s->key) {
            char quoted[80];
            snprintf(quoted, sizeof quoted, "| `%s`", s->key);
            char listed[80];
            snprintf(listed, sizeof listed, ", `%s`", s->key);
            if (!strstr(keys, quoted) && !strstr(keys, listed))
                fail_msg("docs/training.md's train-block table does not list '%s'", s->key);
        }
    }
    /* every flag row of the docs is a flag of the table (or --help), and its
     * train-block key column is the table's key */
    for (char *row = strstr(flags, "\n| `-"); row; row = strstr(row + 1, "\n| `-")) {
        char *end = strchr(row + 1, '\n');
        char *c1 = strchr(row + 2, '|');
        assert_non_null(c1);
        char *c2 = strchr(c1 + 1, '|');
        for (char *p = strstr(row, "`--"); p && p < c1; p = strstr(p + 1, "`--")) {
            char name[64];
            size_t n = strspn(p + 3, "abcdefghijklmnopqrstuvwxyz0123456789-");
            snprintf(name, sizeof name, "%.*s", (int)n, p + 3);
            if (strcmp(name, "help") == 0 || strcmp(name, "version") == 0)
                continue; /* options.c's own, not settings */
            const RtSetting *s = rt_setting_by_flag(name);
            if (!s)
                fail_msg("docs/training.md lists --%s, which the program does not have", name);
            char key[64] = "";
            const char *k = memchr(c1, '`', (size_t)(c2 - c1));
            if (k)
                snprintf(key, sizeof key, "%.*s", (int)strcspn(k + 1, "`"), k + 1);
            if (strcmp(key, s->key ? s->key : "") != 0)
                fail_msg("docs/training.md gives --%s the train key '%s', the table '%s'", name,
                         key, s->key ? s->key : "");
        }
        row = end ? end - 1 : row;
    }
    /* every key row of the docs is a key of the table */
    for (char *row = strstr(keys, "\n| `"); row; row = strstr(row + 1, "\n| `")) {
        char *c1 = strchr(row + 2, '|');
        for (char *p = strchr(row + 2, '`'); p && p < c1; p = strchr(p + 1, '`')) {
            char name[64];
            size_t n = strcspn(p + 1, "`");
            snprintf(name, sizeof name, "%.*s", (int)n, p + 1);
            if (!rt_setting_by_key(name))
                fail_msg("docs/training.md lists the train key '%s', which is not one", name);
            p += n + 1;
        }
    }
    free(flags);
    free(keys);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_is_consistent),
        cmocka_unit_test(test_data_path_escapes_round_trip),
        cmocka_unit_test_setup_teardown(test_train_block_takes_every_key, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_values_refused_at_entry, setup, teardown),
        cmocka_unit_test(test_number_grammar),
        cmocka_unit_test(test_docs_list_the_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
