/*
 * test_train_init.c - the initialisers of runtime/init.c: the generator's
 * determinism and distribution, MXNet's Xavier fans and scales, the parser
 * of initialiser strings, and the defaults by parameter kind and name.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train.h"
#include "rand.h"
#include "init.h"

/* mean and variance of n floats, in double */
static void moments(const float *w, int64_t n, double *mean, double *var)
{
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < n; i++)
        s += w[i];
    *mean = s / (double)n;
    for (int64_t i = 0; i < n; i++)
        s2 += (w[i] - *mean) * (w[i] - *mean);
    *var = s2 / (double)n;
}

static void test_rng_deterministic(void **state)
{
    (void)state;
    assert_true(rt_rand_u64(1, 2, 3) == rt_rand_u64(1, 2, 3));
    assert_true(rt_rand_u64(1, 2, 3) != rt_rand_u64(2, 2, 3));
    assert_true(rt_rand_u64(1, 2, 3) != rt_rand_u64(1, 3, 3));
    assert_true(rt_rand_u64(1, 2, 3) != rt_rand_u64(1, 2, 4));
    /* uniform in [0, 1) and roughly uniform; normal with mean 0, variance 1 */
    int64_t n = 200000;
    double s = 0, s2 = 0, ns = 0, ns2 = 0, ns4 = 0;
    for (int64_t i = 0; i < n; i++) {
        double u = rt_rand_uniform(7, 11, (uint64_t)i);
        assert_true(u >= 0 && u < 1);
        s += u;
        s2 += u * u;
        double z = rt_rand_normal(7, 11, (uint64_t)i);
        assert_true(isfinite(z));
        ns += z;
        ns2 += z * z;
        ns4 += z * z * z * z;
    }
    assert_float_equal(s / n, 0.5, 0.005);
    assert_float_equal(s2 / n - (s / n) * (s / n), 1.0 / 12, 0.002);
    assert_float_equal(ns / n, 0.0, 0.01);
    assert_float_equal(ns2 / n, 1.0, 0.01);
    assert_float_equal(ns4 / n, 3.0, 0.1); /* the kurtosis of a normal */
}

static void test_call_parse(void **state)
{
    (void)state;
    RtCall c;
    char err[256];
    assert_true(rt_call_parse("zero", &c, err, sizeof err));
    assert_string_equal(c.name, "zero");
    assert_int_equal(c.nargs, 0);
    assert_true(rt_call_parse(" msra_prelu() ", &c, err, sizeof err));
    assert_int_equal(c.nargs, 0);
    assert_true(rt_call_parse("xavier(magnitude=2.5, rnd_type=\"gaussian\",factor_type='in')", &c,
                              err, sizeof err));
    assert_int_equal(c.nargs, 3);
    assert_string_equal(rt_call_str(&c, "rnd_type"), "gaussian");
    assert_string_equal(rt_call_str(&c, "factor_type"), "in");
    assert_null(rt_call_str(&c, "slope"));
    double v = 0;
    bool bad = false;
    assert_true(rt_call_num(&c, "magnitude", &v, &bad));
    assert_false(bad);
    assert_float_equal(v, 2.5, 0);
    assert_true(rt_call_num(&c, "rnd_type", &v, &bad));
    assert_true(bad);
    assert_false(rt_call_parse("xavier(", &c, err, sizeof err));
    assert_non_null(strstr(err, "'xavier('"));
    assert_false(rt_call_parse("xavier(magnitude)", &c, err, sizeof err));
    assert_false(rt_call_parse("xavier(a=1) x", &c, err, sizeof err));
    assert_false(rt_call_parse("xavier(a=1, a=2)", &c, err, sizeof err));
    assert_non_null(strstr(err, "given twice"));
    assert_false(rt_call_parse("", &c, err, sizeof err));
    assert_false(rt_call_parse("1x", &c, err, sizeof err));
}

static void test_init_parse(void **state)
{
    (void)state;
    RtInit ini;
    char err[256];
    assert_true(rt_init_parse("zero", &ini, err, sizeof err));
    assert_int_equal(ini.kind, RT_INIT_CONSTANT);
    assert_float_equal(ini.value, 0, 0);
    assert_true(rt_init_parse("one", &ini, err, sizeof err));
    assert_float_equal(ini.value, 1, 0);
    assert_true(rt_init_parse("constant(value=0.5)", &ini, err, sizeof err));
    assert_float_equal(ini.value, 0.5, 0);
    assert_true(rt_init_parse("uniform()", &ini, err, sizeof err));
    assert_int_equal(ini.kind, RT_INIT_UNIFORM);
    assert_float_equal(ini.scale, 0.07, 1e-7);
    assert_true(rt_init_parse("normal(sigma=0.02)", &ini, err, sizeof err));
    assert_int_equal(ini.kind, RT_INIT_NORMAL);
    assert_float_equal(ini.scale, 0.02, 1e-7);
    /* xavier's defaults: uniform, avg, magnitude 3 */
    assert_true(rt_init_parse("xavier()", &ini, err, sizeof err));
    assert_int_equal(ini.kind, RT_INIT_XAVIER);
    assert_false(ini.gaussian);
    assert_int_equal(ini.factor, RT_FAN_AVG);
    assert_float_equal(ini.magnitude, 3, 0);
    assert_true(rt_init_parse("xavier(rnd_type=\"gaussian\", factor_type=\"out\", magnitude=2)",
                              &ini, err, sizeof err));
    assert_true(ini.gaussian);
    assert_int_equal(ini.factor, RT_FAN_OUT);
    assert_float_equal(ini.magnitude, 2, 0);
    /* msra_prelu = xavier gaussian, magnitude 2/(1+slope^2); slope 0.25 by default */
    assert_true(rt_init_parse("msra_prelu()", &ini, err, sizeof err));
    assert_true(ini.gaussian);
    assert_int_equal(ini.factor, RT_FAN_AVG);
    assert_float_equal(ini.magnitude, 2.0 / (1 + 0.0625), 1e-6);
    RtInit alias;
    assert_true(rt_init_parse("msraprelu()", &alias, err, sizeof err)); /* MXNet's registry name */
    assert_memory_equal(&alias, &ini, sizeof ini);
    assert_true(rt_init_parse("msra_prelu(slope=0, factor_type=\"in\")", &ini, err, sizeof err));
    assert_float_equal(ini.magnitude, 2.0, 0);
    assert_int_equal(ini.factor, RT_FAN_IN);
    /* errors name the string */
    assert_false(rt_init_parse("xavier(rnd_type=\"normal\")", &ini, err, sizeof err));
    assert_non_null(strstr(err, "rnd_type"));
    assert_false(rt_init_parse("xavier(factor_type=\"sum\")", &ini, err, sizeof err));
    assert_false(rt_init_parse("xavier(scale=1)", &ini, err, sizeof err));
    assert_non_null(strstr(err, "no argument 'scale'"));
    assert_false(rt_init_parse("msra_prelu(slope=\"x\")", &ini, err, sizeof err));
    assert_false(rt_init_parse("orthogonal()", &ini, err, sizeof err));
    assert_non_null(strstr(err, "unknown initialiser 'orthogonal()'"));
    assert_false(rt_init_parse("zero(value=1)", &ini, err, sizeof err));
    /* what MXNet refuses (issue 21): normal's sigma > 0, uniform's scale >= 0 */
    assert_false(rt_init_parse("normal(sigma=-1)", &ini, err, sizeof err));
    assert_non_null(strstr(err, "sigma must be > 0"));
    assert_false(rt_init_parse("normal(sigma=0)", &ini, err, sizeof err));
    assert_false(rt_init_parse("uniform(scale=-0.1)", &ini, err, sizeof err));
    assert_non_null(strstr(err, "scale must be >= 0"));
    assert_true(rt_init_parse("uniform(scale=0)", &ini, err, sizeof err));
}

static void test_fans(void **state)
{
    (void)state;
    double fi, fo;
    int64_t conv[4] = {64, 3, 7, 7};
    assert_true(rt_init_fans(4, conv, &fi, &fo));
    assert_float_equal(fi, 3 * 49, 0);
    assert_float_equal(fo, 64 * 49, 0);
    int64_t fc[2] = {10, 32};
    assert_true(rt_init_fans(2, fc, &fi, &fo));
    assert_float_equal(fi, 32, 0);
    assert_float_equal(fo, 10, 0);
    int64_t c3[5] = {8, 4, 3, 3, 3};
    assert_true(rt_init_fans(5, c3, &fi, &fo));
    assert_float_equal(fi, 4 * 27, 0);
    assert_float_equal(fo, 8 * 27, 0);
    int64_t v[1] = {10};
    assert_false(rt_init_fans(1, v, &fi, &fo));
}

/* xavier's scale: sqrt(magnitude / factor), the bound of a uniform (variance
 * scale^2/3) or the standard deviation of a normal */
static void check_xavier(const char *s, int rank, const int64_t *shape, double expect_std)
{
    RtInit ini;
    char err[256];
    int64_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= shape[i];
    float *w = malloc((size_t)n * sizeof *w);
    assert_true(rt_init_parse(s, &ini, err, sizeof err));
    assert_true(rt_init_fill(&ini, rank, shape, n, w, 3, 99, err, sizeof err));
    double mean, var;
    moments(w, n, &mean, &var);
    assert_float_equal(mean, 0, 0.02 * expect_std);
    assert_float_equal(sqrt(var), expect_std, 0.01 * expect_std);
    if (ini.kind == RT_INIT_UNIFORM || (ini.kind == RT_INIT_XAVIER && !ini.gaussian)) {
        double bound = expect_std * sqrt(3.0) * (1 + 1e-6); /* w is rounded to fp32 */
        for (int64_t i = 0; i < n; i++)
            assert_true(fabs(w[i]) <= bound);
    }
    free(w);
}

static void test_xavier_moments(void **state)
{
    (void)state;
    int64_t conv[4] = {128, 64, 3, 3}; /* fan_in 576, fan_out 1152, 73,728 values */
    double fi = 576, fo = 1152, avg = (fi + fo) / 2;
    check_xavier("xavier()", 4, conv, sqrt(3.0 / avg) / sqrt(3.0));
    check_xavier("xavier(factor_type=\"in\")", 4, conv, sqrt(3.0 / fi) / sqrt(3.0));
    check_xavier("xavier(factor_type=\"out\", magnitude=6)", 4, conv, sqrt(6.0 / fo) / sqrt(3.0));
    check_xavier("xavier(rnd_type=\"gaussian\", magnitude=2)", 4, conv, sqrt(2.0 / avg));
    check_xavier("msra_prelu()", 4, conv, sqrt(2.0 / 1.0625 / avg));
    check_xavier("msra_prelu(slope=0, factor_type=\"in\")", 4, conv, sqrt(2.0 / fi)); /* He */
    int64_t fc[2] = {256, 512};
    check_xavier("xavier()", 2, fc, sqrt(3.0 / 384) / sqrt(3.0));
    check_xavier("uniform(scale=0.1)", 2, fc, 0.1 / sqrt(3.0));
    check_xavier("normal(sigma=0.05)", 2, fc, 0.05);
}

static void test_fill_deterministic(void **state)
{
    (void)state;
    RtInit ini;
    char err[256];
    int64_t shape[2] = {16, 16};
    float a[256], b[256], c[256], d[256];
    assert_true(rt_init_parse("xavier(rnd_type=\"gaussian\")", &ini, err, sizeof err));
    assert_true(rt_init_fill(&ini, 2, shape, 256, a, 1, 5, err, sizeof err));
    assert_true(rt_init_fill(&ini, 2, shape, 256, b, 1, 5, err, sizeof err));
    assert_true(rt_init_fill(&ini, 2, shape, 256, c, 2, 5, err, sizeof err));
    assert_true(rt_init_fill(&ini, 2, shape, 256, d, 1, 6, err, sizeof err));
    assert_memory_equal(a, b, sizeof a);
    assert_memory_not_equal(a, c, sizeof a);
    assert_memory_not_equal(a, d, sizeof a);
    /* element i does not depend on how many are drawn */
    float e[100];
    assert_true(rt_init_fill(&ini, 2, shape, 100, e, 1, 5, err, sizeof err));
    assert_memory_equal(a, e, sizeof e);
    /* xavier needs rank >= 2 */
    int64_t v[1] = {8};
    assert_true(rt_init_parse("xavier()", &ini, err, sizeof err));
    assert_false(rt_init_fill(&ini, 1, v, 8, a, 1, 5, err, sizeof err));
    assert_non_null(strstr(err, "rank"));
}

static RtParam param(const char *name, RtParamKind kind, const char *init, int rank, int64_t d0,
                     int64_t d1)
{
    RtParam p;
    memset(&p, 0, sizeof p);
    p.name = name;
    p.kind = kind;
    p.dtype = RT_F32;
    p.rank = rank;
    p.shape[0] = d0;
    p.shape[1] = d1;
    p.numel = rank == 1 ? d0 : d0 * d1;
    p.init = init;
    p.wd_mult = p.lr_mult = 1;
    p.grad = -1;
    return p;
}

static void test_rules_by_kind(void **state)
{
    (void)state;
    const char *wi = "xavier()";
    RtParam p = param("conv1_weight", RT_PK_WEIGHT, "default", 2, 4, 4);
    assert_string_equal(rt_init_rule(&p, wi), wi);
    p = param("conv1_bias", RT_PK_BIAS, "default", 1, 4, 0);
    assert_string_equal(rt_init_rule(&p, wi), "zero");
    p = param("bn_beta", RT_PK_BETA, "default", 1, 4, 0);
    assert_string_equal(rt_init_rule(&p, wi), "zero");
    p = param("bn_moving_mean", RT_PK_MOVING_MEAN, "default", 1, 4, 0);
    assert_string_equal(rt_init_rule(&p, wi), "zero");
    p = param("bn_gamma", RT_PK_GAMMA, "default", 1, 4, 0);
    assert_string_equal(rt_init_rule(&p, wi), "one");
    p = param("bn_moving_var", RT_PK_MOVING_VAR, "default", 1, 4, 0);
    assert_string_equal(rt_init_rule(&p, wi), "one");
    /* an explicit init wins (ResNet's last gamma = 0) */
    p = param("bn3_gamma", RT_PK_GAMMA, "zero", 1, 4, 0);
    assert_string_equal(rt_init_rule(&p, wi), "zero");
    /* RT_PK_OTHER: MXNet's name suffixes */
    p = param("x_gamma", RT_PK_OTHER, "default", 1, 4, 0);
    assert_string_equal(rt_init_rule(&p, wi), "one");
    p = param("x_min", RT_PK_OTHER, "default", 1, 4, 0);
    assert_string_equal(rt_init_rule(&p, wi), "zero");
    p = param("x_w", RT_PK_OTHER, "default", 2, 4, 4);
    assert_string_equal(rt_init_rule(&p, wi), wi);

    /* rt_init_param: values by kind, the stream from the name */
    float w[16], w2[16];
    char err[256];
    p = param("bn_gamma", RT_PK_GAMMA, "default", 1, 16, 0);
    assert_true(rt_init_param(&p, wi, 1, w, err, sizeof err));
    for (int i = 0; i < 16; i++)
        assert_float_equal(w[i], 1, 0);
    p = param("a_weight", RT_PK_WEIGHT, "default", 2, 4, 4);
    assert_true(rt_init_param(&p, wi, 1, w, err, sizeof err));
    p.name = "b_weight";
    assert_true(rt_init_param(&p, wi, 1, w2, err, sizeof err));
    assert_memory_not_equal(w, w2, sizeof w);
    p = param("fc_bias", RT_PK_BIAS, "xavier()", 1, 16, 0);
    assert_false(rt_init_param(&p, wi, 1, w, err, sizeof err));
    assert_non_null(strstr(err, "parameter fc_bias:"));
    p = param("fc_weight", RT_PK_WEIGHT, "default", 2, 4, 4);
    assert_false(rt_init_param(&p, "nonsense(", 1, w, err, sizeof err));
    assert_non_null(strstr(err, "parameter fc_weight:"));
}

/* MXNet's defaults: Uniform(scale=0.07) is U(-0.07, 0.07) (mean 0,
 * variance 0.07^2/3), Normal(sigma=0.01) is N(0, 0.01^2); the train block's
 * init = uniform() / normal() reach every weight whose init is default. */
static void test_uniform_normal_defaults(void **state)
{
    (void)state;
    enum { n = 200000 };
    static float w[n];
    char err[256];
    RtInit ini;
    int64_t shape[2] = {400, 500};
    double mean, var;
    assert_true(rt_init_parse("uniform", &ini, err, sizeof err));
    assert_float_equal(ini.scale, 0.07f, 0);
    assert_true(rt_init_fill(&ini, 2, shape, n, w, 3, 4, err, sizeof err));
    moments(w, n, &mean, &var);
    assert_float_equal(mean, 0, 0.07 * 0.01);
    assert_float_equal(var, 0.07 * 0.07 / 3, 0.07 * 0.07 / 3 * 0.02);
    for (int i = 0; i < n; i++)
        assert_true(w[i] >= -0.07f && w[i] <= 0.07f);
    assert_true(rt_init_parse("normal()", &ini, err, sizeof err));
    assert_float_equal(ini.scale, 0.01f, 0);
    assert_true(rt_init_fill(&ini, 2, shape, n, w, 3, 5, err, sizeof err));
    moments(w, n, &mean, &var);
    assert_float_equal(mean, 0, 0.01 * 0.01);
    assert_float_equal(sqrt(var), 0.01, 0.01 * 0.01);
    /* a weight with init "default" follows the train block's rule */
    RtParam p = {"fc_weight", RT_PK_WEIGHT, RT_F32, false, 2, {400, 500}, n, "default", 1, 1, 0, 1, RT_LAYOUT_NCHW};
    assert_string_equal(rt_init_rule(&p, "normal(sigma=0.01)"), "normal(sigma=0.01)");
    assert_true(rt_init_param(&p, "normal(sigma=0.02)", 9, w, err, sizeof err));
    moments(w, n, &mean, &var);
    assert_float_equal(sqrt(var), 0.02, 0.02 * 0.01);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rng_deterministic), cmocka_unit_test(test_call_parse),
        cmocka_unit_test(test_init_parse),        cmocka_unit_test(test_fans),
        cmocka_unit_test(test_xavier_moments),    cmocka_unit_test(test_uniform_normal_defaults),    cmocka_unit_test(test_fill_deterministic),
        cmocka_unit_test(test_rules_by_kind),
    };
    return cmocka_run_group_tests_name("train_init", tests, NULL, NULL);
}
