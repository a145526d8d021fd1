/*
 * test_train_lossscale.c - the runtime's loss scaler (runtime/lossscale.c):
 * PyTorch's test of the update rule run through rt_loss_scaler_update (growth
 * 2, backoff 0.25, interval 2, from 4: finite, finite, overflow gives scales
 * 4, 8, 2 and trackers 1, 0, 0), the new scale in effect from the next step,
 * the 2^24 cap, the minimum, the warning when the scale falls below 1, the
 * give-up below FLT_MIN, MXNet's log lines, the mode by the model's amp, and
 * the parser of loss_scale settings (train block and --loss-scale).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train.h"
#include "lossscale.h"

static char log_text[8192], warn_text[8192];

static void slurp(FILE *f, char *dst, size_t cap)
{
    rewind(f);
    size_t n = fread(dst, 1, cap - 1, f);
    dst[n] = 0;
    fclose(f);
}

static RtLossScaleConfig cfg(const char *s)
{
    RtLossScaleConfig c;
    char err[256];
    rt_loss_scale_default(&c);
    if (!rt_loss_scale_parse(s, &c, err, sizeof err))
        fail_msg("'%s': %s", s, err);
    return c;
}

/* Steps the scaler through a string of 'f' (finite) and 'o' (overflow)
 * steps, recording the scale each step runs with and the tracker after it. */
static void steps(RtLossScaler *ls, const char *seq, float *used, int32_t *tracker, bool *skip)
{
    FILE *log = tmpfile(), *warn = tmpfile();
    for (int i = 0; seq[i]; i++) {
        used[i] = ls->s.scale; /* the step state's scale in step i */
        skip[i] = rt_loss_scaler_update(ls, seq[i] == 'f', log, warn);
        tracker[i] = ls->s.tracker;
    }
    slurp(log, log_text, sizeof log_text);
    slurp(warn, warn_text, sizeof warn_text);
}

/* PyTorch's test_grad_scaling_update_scale (test/test_cuda.py), through the
 * runtime's scaler: the scale after each step, and the tracker. */
static void test_pytorch_rule(void **state)
{
    (void)state;
    RtLossScaleConfig c = cfg("dynamic(init=4, growth=2, backoff=0.25, interval=2)");
    RtLossScaler ls;
    rt_loss_scaler_init(&ls, &c, "float16");
    assert_int_equal(ls.mode, RT_LS_DYNAMIC);
    float used[3];
    int32_t tr[3];
    bool skip[3];
    FILE *log = tmpfile();
    float after[3];
    const char *seq = "ffo";
    for (int i = 0; i < 3; i++) {
        used[i] = ls.s.scale;
        skip[i] = rt_loss_scaler_update(&ls, seq[i] == 'f', log, NULL);
        after[i] = ls.s.scale;
        tr[i] = ls.s.tracker;
    }
    slurp(log, log_text, sizeof log_text);
    /* scale after each step 4, 8, 2; tracker 1, 0, 0 */
    assert_float_equal(after[0], 4, 0);
    assert_float_equal(after[1], 8, 0);
    assert_float_equal(after[2], 2, 0);
    assert_int_equal(tr[0], 1);
    assert_int_equal(tr[1], 0);
    assert_int_equal(tr[2], 0);
    /* the new scale is used from the next step (PyTorch's rule) */
    assert_float_equal(used[0], 4, 0);
    assert_float_equal(used[1], 4, 0);
    assert_float_equal(used[2], 8, 0);
    assert_false(skip[0]);
    assert_false(skip[1]);
    assert_true(skip[2]);
    assert_int_equal(ls.skipped, 1);
    /* MXNet's lines, once per change */
    assert_string_equal(log_text, "AMP: increasing loss scale to 8\n"
                                  "AMP: decreasing loss scale to 2\n");
}

static void test_defaults_and_cap(void **state)
{
    (void)state;
    RtLossScaleConfig c;
    rt_loss_scale_default(&c);
    assert_int_equal(c.mode, RT_LS_DEFAULT);
    assert_float_equal(c.init, 65536, 0);
    assert_float_equal(c.growth, 2, 0);
    assert_float_equal(c.backoff, 0.5, 0);
    assert_int_equal(c.interval, 2000);
    assert_float_equal(c.max_scale, 16777216, 0);
    assert_float_equal(c.min_scale, 0, 0);
    /* 2000 finite steps double the scale, then the cap holds it at 2^24 */
    RtLossScaler ls;
    rt_loss_scaler_init(&ls, &c, "float16");
    FILE *log = tmpfile();
    for (int i = 0; i < 2000 * 20; i++)
        assert_false(rt_loss_scaler_update(&ls, true, log, NULL));
    slurp(log, log_text, sizeof log_text);
    assert_float_equal(ls.s.scale, 16777216, 0);
    /* 65536 -> 2^24 is 8 doublings, each logged; no line once capped */
    const char *p = log_text;
    int lines = 0;
    while ((p = strstr(p, "AMP: increasing loss scale to")))
        lines++, p++;
    assert_int_equal(lines, 8);
    assert_non_null(strstr(log_text, "AMP: increasing loss scale to 16777216\n"));
    /* a cap that is not a power-of-two multiple: clamped to it */
    c = cfg("dynamic(init=3, interval=1, max=10)");
    rt_loss_scaler_init(&ls, &c, "float16");
    rt_loss_scaler_update(&ls, true, NULL, NULL);
    assert_float_equal(ls.s.scale, 6, 0);
    rt_loss_scaler_update(&ls, true, NULL, NULL);
    assert_float_equal(ls.s.scale, 10, 0);
    rt_loss_scaler_update(&ls, true, NULL, NULL);
    assert_float_equal(ls.s.scale, 10, 0);
}

static void test_minimum_and_warning(void **state)
{
    (void)state;
    float used[8];
    int32_t tr[8];
    bool skip[8];
    RtLossScaler ls;
    /* a fresh run's first overflows calibrate the scale: one line at the
     * end, none per change; a resumed run's scale is calibrated already */
    RtLossScaleConfig c = cfg("dynamic(init=64)");
    rt_loss_scaler_init(&ls, &c, "float16");
    assert_true(ls.calibrating);
    steps(&ls, "ooof", used, tr, skip);
    assert_false(ls.calibrating);
    assert_float_equal(ls.s.scale, 8, 0);
    assert_string_equal(log_text, "AMP: the loss scale is calibrated: 8, after 3 skipped steps\n");
    rt_loss_scaler_init(&ls, &c, "float16");
    steps(&ls, "fo", used, tr, skip); /* no overflow at first: nothing to calibrate */
    assert_string_equal(log_text, "AMP: decreasing loss scale to 32\n");
    /* a floor: the scale stops at min, each overflow still skips (after a
     * clean step: no calibration) */
    c = cfg("dynamic(init=4, min=1)");
    rt_loss_scaler_init(&ls, &c, "float16");
    steps(&ls, "fooooo", used, tr, skip);
    assert_float_equal(ls.s.scale, 1, 0);
    assert_int_equal(ls.skipped, 5);
    for (int i = 1; i < 6; i++)
        assert_true(skip[i]);
    assert_string_equal(warn_text, "");
    assert_string_equal(log_text, "AMP: decreasing loss scale to 2\n"
                                  "AMP: decreasing loss scale to 1\n");
    /* no floor: a warning when the scale falls below 1, once per crossing */
    c = cfg("dynamic(init=2)");
    rt_loss_scaler_init(&ls, &c, "float16");
    ls.prog = "train_tiny"; /* a warning names the program (issue 21) */
    steps(&ls, "foooo", used, tr, skip);
    assert_float_equal(ls.s.scale, 0.125, 0);
    assert_non_null(
        strstr(warn_text, "train_tiny: warning: AMP: the loss scale fell below 1 (to 0.5)"));
    assert_non_null(strstr(warn_text, "--check-numerics"));
    assert_null(strstr(strstr(warn_text, "below 1") + 1, "below 1"));
    assert_non_null(strstr(log_text, "AMP: decreasing loss scale to 0.5\n"));
    assert_false(rt_loss_scaler_exhausted(&ls));
    /* overflow at every scale: the scale underflows and the run gives up */
    int n = 0;
    while (!rt_loss_scaler_exhausted(&ls) && n < 1000) {
        rt_loss_scaler_update(&ls, false, NULL, NULL);
        n++;
    }
    assert_true(n > 100 && n < 200);
    assert_true(ls.s.scale < FLT_MIN);
}

static void test_modes(void **state)
{
    (void)state;
    RtLossScaleConfig c;
    rt_loss_scale_default(&c);
    /* unset: dynamic for float16, off for fp32 and bfloat16 */
    assert_int_equal(rt_loss_scale_mode(&c, "float16"), RT_LS_DYNAMIC);
    assert_int_equal(rt_loss_scale_mode(&c, "bfloat16"), RT_LS_OFF);
    assert_int_equal(rt_loss_scale_mode(&c, "off"), RT_LS_OFF);
    assert_int_equal(rt_loss_scale_mode(&c, NULL), RT_LS_OFF);
    RtLossScaler ls;
    rt_loss_scaler_init(&ls, &c, "off");
    assert_float_equal(ls.s.scale, 1, 0);
    /* off and static never skip; non-finite steps are counted */
    assert_false(rt_loss_scaler_update(&ls, false, NULL, NULL));
    assert_int_equal(ls.nonfinite, 1);
    assert_int_equal(ls.skipped, 0);
    c = cfg("1024");
    assert_int_equal(rt_loss_scale_mode(&c, "bfloat16"), RT_LS_STATIC);
    rt_loss_scaler_init(&ls, &c, "float16");
    assert_float_equal(ls.s.scale, 1024, 0);
    for (int i = 0; i < 5000; i++)
        assert_false(rt_loss_scaler_update(&ls, i % 7 != 0, NULL, NULL));
    assert_float_equal(ls.s.scale, 1024, 0);
    c = cfg("dynamic");
    assert_int_equal(rt_loss_scale_mode(&c, "off"), RT_LS_DYNAMIC); /* set: for any amp */
    c = cfg("off");
    assert_int_equal(rt_loss_scale_mode(&c, "float16"), RT_LS_OFF);
    assert_string_equal(rt_loss_scale_mode_name(RT_LS_DYNAMIC), "dynamic");
    assert_string_equal(rt_loss_scale_mode_name(RT_LS_STATIC), "static");
    assert_string_equal(rt_loss_scale_mode_name(RT_LS_OFF), "off");
}

static void test_parse(void **state)
{
    (void)state;
    RtLossScaleConfig c = cfg("dynamic(init=1024)");
    assert_int_equal(c.mode, RT_LS_DYNAMIC);
    assert_float_equal(c.init, 1024, 0);
    assert_int_equal(c.interval, 2000); /* the rest stays at the defaults */
    /* every number, and PyTorch's names */
    c = cfg("dynamic(init=8, growth=4, backoff=0.25, interval=10, min=0.5, max=4096)");
    assert_float_equal(c.growth, 4, 0);
    assert_float_equal(c.backoff, 0.25, 0);
    assert_int_equal(c.interval, 10);
    assert_float_equal(c.min_scale, 0.5, 0);
    assert_float_equal(c.max_scale, 4096, 0);
    c = cfg("dynamic(init_scale=8, growth_factor=3, backoff_factor=0.125, growth_interval=7, "
            "max_scale=64)");
    assert_float_equal(c.init, 8, 0);
    assert_float_equal(c.growth, 3, 0);
    assert_float_equal(c.backoff, 0.125, 0);
    assert_int_equal(c.interval, 7);
    assert_float_equal(c.max_scale, 64, 0);
    /* layers: a flag's dynamic(init=) keeps the train block's interval */
    char err[256];
    rt_loss_scale_default(&c);
    assert_true(rt_loss_scale_parse("dynamic(interval=100)", &c, err, sizeof err));
    assert_true(rt_loss_scale_parse("dynamic(init=1024)", &c, err, sizeof err));
    assert_int_equal(c.interval, 100);
    assert_float_equal(c.init, 1024, 0);
    /* ... but after a static scale, dynamic starts from the defaults */
    assert_true(rt_loss_scale_parse("512", &c, err, sizeof err));
    assert_int_equal(c.mode, RT_LS_STATIC);
    assert_float_equal(c.init, 512, 0);
    assert_true(rt_loss_scale_parse("dynamic", &c, err, sizeof err));
    assert_float_equal(c.init, 65536, 0);
    assert_int_equal(c.interval, 2000);
    c = cfg("off");
    assert_int_equal(c.mode, RT_LS_OFF);
    c = cfg("none");
    assert_int_equal(c.mode, RT_LS_OFF);
    c = cfg("1e-3");
    assert_int_equal(c.mode, RT_LS_STATIC);
    assert_float_equal(c.init, 1e-3, 1e-9);

    static const struct {
        const char *s, *msg;
    } bad[] = {
        {"0", "a static scale must be a number above 0 and at most 3.4028235e+38"},
        {"-8", "a static scale must be a number above 0"},
        {"inf", "expected dynamic"},
        {"0x10", "expected dynamic"},
        {"often", "expected dynamic"},
        {"static(4)", "not of the form"},
        {"dynamic(", "not of the form"},
        {"off(init=2)", "off takes no arguments"},
        {"dynamic(init=0)", "init must be a positive"},
        {"dynamic(init=x)", "init must be a number"},
        {"dynamic(growth=1)", "growth must be in (1, 1e6]"},
        {"dynamic(backoff=1)", "backoff must be in (0, 1)"},
        {"dynamic(backoff=0)", "backoff must be in (0, 1)"},
        {"dynamic(interval=0)", "interval must be an integer >= 1"},
        {"dynamic(interval=2.5)", "interval must be an integer >= 1"},
        {"dynamic(min=-1)", "min must be a number >= 0"},
        {"dynamic(max=0)", "max must be a positive"},
        {"dynamic(init=1e30)", "needs min <= init <= max"},
        {"dynamic(init=4, min=8)", "needs min <= init <= max"},
        {"dynamic(init=4, init_scale=4)", "the same setting"},
        {"dynamic(scale=4)", "dynamic() has no argument 'scale'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        rt_loss_scale_default(&c);
        RtLossScaleConfig before = c;
        err[0] = 0;
        if (rt_loss_scale_parse(bad[i].s, &c, err, sizeof err) || !strstr(err, bad[i].msg))
            fail_msg("'%s': expected an error with '%s', got '%s'", bad[i].s, bad[i].msg, err);
        assert_memory_equal(&c, &before, sizeof c); /* unchanged */
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pytorch_rule),
        cmocka_unit_test(test_defaults_and_cap),
        cmocka_unit_test(test_minimum_and_warning),
        cmocka_unit_test(test_modes),
        cmocka_unit_test(test_parse),
    };
    return cmocka_run_group_tests_name("train_lossscale", tests, NULL, NULL);
}
