/*
 * test_elem.c - the shared per-element math (runtime/kernels/{act,loss,
 * optim,lossscale}.h) against naive double-precision references written
 * here, finite differences, hand-computed examples and PyTorch's own
 * loss-scale test.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kernels/elem.h"
#include "kernels/tolerance.h"

static int near(double got, double want, double atol, double rtol, const char *what, double x)
{
    if (fabs(got - want) <= atol + rtol * fabs(want))
        return 1;
    fprintf(stderr, "%s(%.9g): got %.9g, want %.9g\n", what, x, got, want);
    return 0;
}

/* ---- activations ------------------------------------------------------------- */

static const double SELU_A = 1.6732632423543772848170429916717;
static const double SELU_L = 1.0507009873554804934193349852946;
static const double SLOPE = 0.25;

typedef struct {
    const char *name;
    float (*f)(float);            /* kernel forward */
    float (*g)(float);            /* kernel dy/dx at x */
    float (*gy)(float);           /* kernel dy/dx from y, or NULL */
    double (*ref)(double);        /* naive reference */
    double (*dref)(double);       /* its derivative, by hand */
} Act;

static double r_relu(double x) { return x > 0 ? x : 0; }
static double d_relu(double x) { return x > 0 ? 1 : 0; }
static double r_sigmoid(double x) { return 1 / (1 + exp(-x)); }
static double d_sigmoid(double x) { return exp(-x) / ((1 + exp(-x)) * (1 + exp(-x))); }
static double r_tanh(double x) { return tanh(x); }
static double d_tanh(double x) { return 1 / (cosh(x) * cosh(x)); }
static double r_softrelu(double x) { return x > 30 ? x + exp(-x) : log(1 + exp(x)); }
static double d_softrelu(double x) { return 1 / (1 + exp(-x)); }
static double r_softsign(double x) { return x / (1 + fabs(x)); }
static double d_softsign(double x) { return 1 / ((1 + fabs(x)) * (1 + fabs(x))); }
static double r_leaky(double x) { return x > 0 ? x : SLOPE * x; }
static double d_leaky(double x) { return x > 0 ? 1 : SLOPE; }
static double r_elu(double x) { return x > 0 ? x : SLOPE * (exp(x) - 1); }
static double d_elu(double x) { return x > 0 ? 1 : SLOPE * exp(x); }
static double r_selu(double x) { return x > 0 ? SELU_L * x : SELU_L * SELU_A * (exp(x) - 1); }
static double d_selu(double x) { return x > 0 ? SELU_L : SELU_L * SELU_A * exp(x); }

/* the two-argument kernels at the fixed slope, to share the loop */
static float k_leaky(float x) { return ampc_leaky(x, 0.25f); }
static float k_leaky_g(float x) { return ampc_leaky_grad(x, 0.25f); }
static float k_prelu(float x) { return ampc_prelu(x, 0.25f); }
static float k_prelu_g(float x) { return ampc_prelu_grad(x, 0.25f); }
static float k_elu(float x) { return ampc_elu(x, 0.25f); }
static float k_elu_g(float x) { return ampc_elu_grad(x, 0.25f); }
static float k_elu_gy(float y) { return ampc_elu_grad_y(y, 0.25f); }

static const Act acts[] = {
    {"relu", ampc_relu, ampc_relu_grad, ampc_relu_grad_y, r_relu, d_relu},
    {"sigmoid", ampc_sigmoid, ampc_sigmoid_grad, ampc_sigmoid_grad_y, r_sigmoid, d_sigmoid},
    {"tanh", ampc_tanh, ampc_tanh_grad, ampc_tanh_grad_y, r_tanh, d_tanh},
    {"softrelu", ampc_softrelu, ampc_softrelu_grad, ampc_softrelu_grad_y, r_softrelu, d_softrelu},
    {"softsign", ampc_softsign, ampc_softsign_grad, NULL, r_softsign, d_softsign},
    {"leaky", k_leaky, k_leaky_g, NULL, r_leaky, d_leaky},
    {"prelu", k_prelu, k_prelu_g, NULL, r_leaky, d_leaky},
    {"elu", k_elu, k_elu_g, k_elu_gy, r_elu, d_elu},
    {"selu", ampc_selu, ampc_selu_grad, ampc_selu_grad_y, r_selu, d_selu},
};

static void test_act_forward_and_grad(void **state)
{
    (void)state;
    long checked = 0;
    for (size_t a = 0; a < sizeof acts / sizeof acts[0]; a++) {
        const Act *A = &acts[a];
        for (int i = -2000; i <= 2000; i++) {
            float x = (float)i / 100.0f; /* -20 .. 20 step 0.01 */
            double xd = x;
            /* forward: a few fp32 ulps of the exact value */
            assert_true(near(A->f(x), A->ref(xd), 1e-30, 4e-7, A->name, xd));
            /* derivative: against the hand derivative */
            assert_true(near(A->g(x), A->dref(xd), 1e-12, 2e-6, A->name, xd));
            /* and against a central finite difference of the reference,
             * away from the kink at 0 */
            if (fabs(xd) > 1e-3) {
                double h = 1e-6 * (1 + fabs(xd));
                double fd = (A->ref(xd + h) - A->ref(xd - h)) / (2 * h);
                assert_true(near(A->g(x), fd, 1e-7, 1e-5, A->name, xd));
            }
            /* the from-the-output form agrees with the from-the-input one */
            if (A->gy)
                assert_true(near(A->gy(A->f(x)), A->g(x), 1e-6, 1e-5, A->name, xd));
            checked++;
        }
    }
    assert_int_equal(checked, 9 * 4001);
}

static void test_act_edges(void **state)
{
    (void)state;
    /* relu family at the kink: left branch, as MXNet (x > 0 is the right one) */
    assert_true(ampc_relu_grad(0.0f) == 0.0f && ampc_leaky_grad(0.0f, 0.1f) == 0.1f);
    assert_true(ampc_relu(-0.0f) == 0.0f && ampc_relu(-3.0f) == 0.0f);
    /* softrelu: stable at both ends */
    assert_true(ampc_softrelu(100.0f) == 100.0f);
    assert_true(ampc_softrelu(1000.0f) == 1000.0f); /* log(1+e^x) would overflow */
    assert_true(near(ampc_softrelu(-30.0f), exp(-30.0), 0, 1e-6, "softrelu", -30));
    assert_true(near(ampc_softrelu(-80.0f), exp(-80.0), 1e-44, 1e-5, "softrelu", -80));
    assert_true(ampc_softrelu(-200.0f) == 0.0f && ampc_softrelu_grad(-200.0f) == 0.0f);
    assert_true(ampc_softrelu_grad(200.0f) == 1.0f && ampc_softrelu_grad_y(200.0f) == 1.0f);
    /* sigmoid saturates without NaN */
    assert_true(ampc_sigmoid(-200.0f) == 0.0f && ampc_sigmoid(200.0f) == 1.0f);
    assert_true(ampc_sigmoid_grad(-200.0f) == 0.0f && ampc_sigmoid_grad(200.0f) == 0.0f);
    assert_true(ampc_tanh_grad(50.0f) >= 0.0f && ampc_tanh_grad(50.0f) < 1e-40f);
    assert_true(ampc_tanh_grad_y(ampc_tanh(50.0f)) == 0.0f && ampc_tanh_grad(100.0f) == 0.0f);
    /* selu constants: MXNet's, f(1) = lambda, f(-inf) = -lambda*alpha */
    assert_true(ampc_selu(1.0f) == (float)SELU_L);
    assert_true(near(ampc_selu(-100.0f), -SELU_L * SELU_A, 0, 1e-7, "selu", -100));
    assert_true(ampc_selu_grad_y(ampc_selu(-100.0f)) >= 0.0f);
    /* elu: f(-inf) = -slope */
    assert_true(ampc_elu(-100.0f, 0.3f) == -0.3f);
    /* prelu: the gamma gradient */
    assert_true(ampc_prelu_grad_gamma(-2.0f) == -2.0f && ampc_prelu_grad_gamma(2.0f) == 0.0f);
    /* NaN propagates through the smooth ones */
    assert_true(isnan(ampc_sigmoid(NAN)) && isnan(ampc_tanh(NAN)) && isnan(ampc_softrelu(NAN)));
    assert_true(isnan(ampc_softsign(NAN)) && isnan(ampc_selu(NAN)) && isnan(ampc_elu(NAN, 1)));
}

/* ---- SoftmaxOutput ---------------------------------------------------------------- */

static void test_softmax_ce_grad_by_hand(void **state)
{
    (void)state;
    /* p = (.1 .2 .3 .4), label 2, alpha .3, K 4: off = .1;
     * grad = (.1-.1, .2-.1, .3-1+.3, .4-.1) * .5 = (0, .05, -.2, .15) */
    const float p[4] = {0.1f, 0.2f, 0.3f, 0.4f};
    const double want[4] = {0.0, 0.05, -0.2, 0.15};
    float off = ampc_smooth_off(0.3f, 4);
    assert_true(near(off, 0.1, 0, 1e-7, "off", 0));
    double sum = 0;
    for (int j = 0; j < 4; j++) {
        float g = ampc_softmax_ce_grad(p[j], j == 2, 0.3f, off, 0.5f);
        assert_true(near(g, want[j], 1e-7, 1e-6, "smooth grad", j));
        sum += g;
    }
    assert_true(fabs(sum) < 1e-7); /* rows sum to 0 when p sums to 1 */
    /* alpha = 0: p - onehot, scale 1 */
    for (int j = 0; j < 4; j++)
        assert_true(ampc_softmax_ce_grad(p[j], j == 1, 0.0f, ampc_smooth_off(0.0f, 4), 1.0f) ==
                    (j == 1 ? p[j] - 1.0f : p[j]));
    /* K = 1 does not divide by zero */
    assert_true(ampc_smooth_off(0.1f, 1) == 0.0f);
    /* cross-entropy */
    assert_true(near(ampc_ce_loss(0.25f), log(4.0), 0, 1e-6, "ce", 0.25));
    assert_true(ampc_isfinite(ampc_ce_loss(0.0f)) && ampc_ce_loss(0.0f) > 27.0f);
}

/* the smoothed gradient is d/dz of -sum_j t_j log softmax(z)_j with
 * t = 1-alpha on the label and alpha/(K-1) elsewhere */
static void test_softmax_ce_grad_finite_diff(void **state)
{
    (void)state;
    enum { K = 5 };
    const double z[K] = {0.3, -1.2, 2.0, 0.7, -0.1};
    const int label = 3;
    const double alpha = 0.2;
    double t[K];
    for (int j = 0; j < K; j++)
        t[j] = j == label ? 1 - alpha : alpha / (K - 1);
    double p[K], zz[K];
    for (int k = 0; k < K; k++) {
        double h = 1e-6;
        double loss[2];
        for (int s = 0; s < 2; s++) {
            memcpy(zz, z, sizeof z);
            zz[k] += s ? h : -h;
            double mx = zz[0], den = 0, l = 0;
            for (int j = 1; j < K; j++)
                mx = zz[j] > mx ? zz[j] : mx;
            for (int j = 0; j < K; j++)
                den += exp(zz[j] - mx);
            for (int j = 0; j < K; j++)
                l -= t[j] * (zz[j] - mx - log(den));
            loss[s] = l;
        }
        double fd = (loss[1] - loss[0]) / (2 * h);
        double mx = z[0], den = 0;
        for (int j = 1; j < K; j++)
            mx = z[j] > mx ? z[j] : mx;
        for (int j = 0; j < K; j++)
            den += exp(z[j] - mx);
        p[k] = exp(z[k] - mx) / den;
        float g = ampc_softmax_ce_grad((float)p[k], k == label, (float)alpha,
                                       ampc_smooth_off((float)alpha, K), 1.0f);
        assert_true(near(g, fd, 1e-6, 1e-5, "ce fd", k));
    }
}

/* ---- optimizers: a naive double reference of FACTS.md 4.3 -------------------- */

typedef struct { double w, m, v; } RefState;

static double rclip(double g, double c) { return c >= 0 ? (g > c ? c : (g < -c ? -c : g)) : g; }

static void ref_sgd(RefState *s, double g, double lr, double wd, double resc, double clip)
{
    s->w = (1 - lr * wd) * s->w - lr * rclip(resc * g, clip);
}
static void ref_sgd_mom(RefState *s, double g, double lr, double wd, double mu, double resc,
                        double clip)
{
    s->m = mu * s->m - lr * wd * s->w - lr * rclip(resc * g, clip);
    s->w = s->w + s->m;
}
static void ref_nag(RefState *s, double g, double lr, double wd, double mu, double resc,
                    double clip)
{
    double G = rclip(resc * g, clip) + wd * s->w;
    s->m = mu * s->m - lr * G;
    s->w = s->w + mu * s->m - lr * G;
}
static void ref_adam(RefState *s, double g, double lr, double wd, double b1, double b2,
                     double eps, double resc, double clip, int t)
{
    double G = rclip(resc * g + wd * s->w, clip);
    s->m = b1 * s->m + (1 - b1) * G;
    s->v = b2 * s->v + (1 - b2) * G * G;
    double lrt = lr * sqrt(1 - pow(b2, t)) / (1 - pow(b1, t));
    s->w = s->w - lrt * s->m / (sqrt(s->v) + eps);
}

enum { NSTEP = 12, NCASE = 5 };
static const double case_w[NCASE] = {0.5, -1.25, 3.0, 0.001, -0.75};
static const double case_clip[NCASE] = {-1, 0.05, -1, 0.0, 1.0}; /* off, active, off, zero, loose */
static double lr_at(int t) { return 0.1 * (1 + cos(3.14159 * t / NSTEP)) / 2 + 0.01; }
static double grad_at(int c, int t) { return sin(1.3 * t + c) * (c == 1 ? 40 : 2) - 0.1 * c; }

static void test_sgd_family(void **state)
{
    (void)state;
    const double wd = 1e-2, mu = 0.9, resc = 0.5;
    for (int c = 0; c < NCASE; c++) {
        RefState r1 = {case_w[c], 0, 0}, r2 = r1, r3 = r1;
        float w1 = (float)case_w[c], w2 = w1, w3 = w1, m2 = 0, m3 = 0;
        for (int t = 1; t <= NSTEP; t++) {
            double lr = lr_at(t), g = grad_at(c, t);
            AmpcOptParam p = {0};
            p.lr = (float)lr;
            p.wd = (float)wd;
            p.momentum = (float)mu;
            p.rescale_grad = (float)resc;
            p.clip_gradient = (float)case_clip[c];
            ampc_sgd_update(&w1, (float)g, p);
            ampc_sgd_mom_update(&w2, &m2, (float)g, p);
            ampc_nag_mom_update(&w3, &m3, (float)g, p);
            ref_sgd(&r1, g, lr, wd, resc, case_clip[c]);
            ref_sgd_mom(&r2, g, lr, wd, mu, resc, case_clip[c]);
            ref_nag(&r3, g, lr, wd, mu, resc, case_clip[c]);
            assert_true(near(w1, r1.w, 1e-6, 1e-5, "sgd", t));
            assert_true(near(w2, r2.w, 1e-6, 1e-5, "sgd_mom w", t));
            assert_true(near(m2, r2.m, 1e-6, 1e-5, "sgd_mom m", t));
            assert_true(near(w3, r3.w, 1e-6, 1e-5, "nag w", t));
            assert_true(near(m3, r3.m, 1e-6, 1e-5, "nag m", t));
        }
    }
}

static void test_sgd_clip_semantics(void **state)
{
    (void)state;
    AmpcOptParam p = {0};
    p.lr = 1.0f;
    p.wd = 0.5f;
    p.rescale_grad = 2.0f;
    /* clip after rescale, wd outside: g = clip(2*3, 1) = 1; w = (1 - .5)*2 - 1 = 0 */
    float w = 2.0f;
    p.clip_gradient = 1.0f;
    ampc_sgd_update(&w, 3.0f, p);
    assert_true(w == 0.0f);
    /* clip_gradient = 0 is a real clip to 0 at the kernel (the Python layer
     * passes it only when truthy); -1 is off */
    w = 2.0f;
    p.clip_gradient = 0.0f;
    ampc_sgd_update(&w, 3.0f, p);
    assert_true(w == 1.0f);
    w = 2.0f;
    p.clip_gradient = -1.0f;
    ampc_sgd_update(&w, 3.0f, p);
    assert_true(w == -5.0f);
    /* NaN gradients stay NaN through the clip */
    w = 2.0f;
    p.clip_gradient = 1.0f;
    ampc_sgd_update(&w, NAN, p);
    assert_true(isnan(w));
    assert_true(ampc_clip(5.0f, 2.0f) == 2.0f && ampc_clip(-5.0f, 2.0f) == -2.0f);
}

static void test_adam(void **state)
{
    (void)state;
    const double wd = 1e-2, b1 = 0.9, b2 = 0.999, eps = 1e-8, resc = 0.25;
    for (int c = 0; c < NCASE; c++) {
        RefState r = {case_w[c], 0, 0};
        float w = (float)case_w[c], m = 0, v = 0;
        for (int t = 1; t <= NSTEP; t++) {
            double lr = lr_at(t) / 10, g = grad_at(c, t);
            AmpcOptParam p = {0};
            p.lr = ampc_adam_lr(lr, b1, b2, t);
            p.wd = (float)wd;
            p.rescale_grad = (float)resc;
            p.clip_gradient = (float)case_clip[c];
            p.beta1 = (float)b1;
            p.beta2 = (float)b2;
            p.epsilon = (float)eps;
            ampc_adam_update(&w, &m, &v, (float)g, p);
            ref_adam(&r, g, lr, wd, b1, b2, eps, resc, case_clip[c], t);
            assert_true(near(w, r.w, 1e-6, 2e-5, "adam w", t));
            assert_true(near(m, r.m, 1e-7, 2e-5, "adam m", t));
            assert_true(near(v, r.v, 1e-9, 2e-5, "adam v", t));
        }
    }
    /* bias correction: lr*sqrt(1-b2)/(1-b1) at t = 1 */
    assert_true(near(ampc_adam_lr(1e-3, 0.9, 0.999, 1), 1e-3 * sqrt(1e-3) / 0.1, 0, 1e-7, "lr_t", 1));
    /* wd inside the clip: rescale*grad = 0, wd*w = 10 -> G = clip(10, 1) = 1 */
    AmpcOptParam p = {0};
    p.lr = 1.0f;
    p.wd = 1.0f;
    p.rescale_grad = 1.0f;
    p.clip_gradient = 1.0f;
    p.beta1 = 0.0f;
    p.beta2 = 0.0f;
    p.epsilon = 0.0f;
    float w = 10.0f, m = 0, v = 0;
    ampc_adam_update(&w, &m, &v, 0.0f, p);
    assert_true(m == 1.0f && v == 1.0f && w == 9.0f);
}

/* the multi-precision variants: same master math as fp32 on the widened
 * gradient, and the shadow is ampc_float_to_half(master) bit for bit */
static void test_multi_precision(void **state)
{
    (void)state;
    for (int c = 0; c < NCASE; c++) {
        float w[4], m[4], v[4], W[4], M[4], V[4];
        for (int k = 0; k < 4; k++)
            w[k] = W[k] = (float)case_w[c], m[k] = M[k] = 0, v[k] = V[k] = 0;
        for (int t = 1; t <= NSTEP; t++) {
            AmpcOptParam p = {0};
            p.lr = (float)lr_at(t);
            p.wd = 1e-4f;
            p.momentum = 0.9f;
            p.rescale_grad = 1.0f / 1024;   /* unscaling folded in */
            p.clip_gradient = (float)case_clip[c];
            p.beta1 = 0.9f;
            p.beta2 = 0.999f;
            p.epsilon = 1e-8f;
            ampc_half g16 = ampc_float_to_half((float)(grad_at(c, t) * 1024));
            ampc_bf16 gb = ampc_float_to_bf16((float)(grad_at(c, t) * 1024));
            float g = ampc_half_to_float(g16), gbf = ampc_bf16_to_float(gb);
            ampc_half s0 = ampc_mp_sgd_update(&w[0], g16, p);
            ampc_sgd_update(&W[0], g, p);
            ampc_half s1 = ampc_mp_sgd_mom_update(&w[1], &m[1], g16, p);
            ampc_sgd_mom_update(&W[1], &M[1], g, p);
            ampc_half s2 = ampc_mp_nag_mom_update(&w[2], &m[2], g16, p);
            ampc_nag_mom_update(&W[2], &M[2], g, p);
            ampc_half s3 = ampc_mp_adam_update(&w[3], &m[3], &v[3], g16, p);
            ampc_adam_update(&W[3], &M[3], &V[3], g, p);
            ampc_half s[4] = {s0, s1, s2, s3};
            for (int k = 0; k < 4; k++) {
                assert_int_equal(s[k], ampc_float_to_half(w[k]));
                assert_memory_equal(&w[k], &W[k], sizeof(float));
                assert_memory_equal(&m[k], &M[k], sizeof(float));
                assert_memory_equal(&v[k], &V[k], sizeof(float));
            }
            /* bf16: one step of each from the current state, on copies */
            float wb = w[1], mb = m[1], Wb = w[1], Mb = m[1], vb = v[3], Vb = v[3];
            float wa = w[3], ma = m[3], Wa = w[3], Ma = m[3];
            assert_int_equal(ampc_mp_sgd_update_bf16(&wb, gb, p),
                             (ampc_sgd_update(&Wb, gbf, p), ampc_float_to_bf16(Wb)));
            assert_memory_equal(&wb, &Wb, sizeof(float));
            wb = Wb = w[1];
            assert_int_equal(ampc_mp_sgd_mom_update_bf16(&wb, &mb, gb, p),
                             (ampc_sgd_mom_update(&Wb, &Mb, gbf, p), ampc_float_to_bf16(Wb)));
            wb = Wb = w[2], mb = Mb = m[2];
            assert_int_equal(ampc_mp_nag_mom_update_bf16(&wb, &mb, gb, p),
                             (ampc_nag_mom_update(&Wb, &Mb, gbf, p), ampc_float_to_bf16(Wb)));
            assert_int_equal(ampc_mp_adam_update_bf16(&wa, &ma, &vb, gb, p),
                             (ampc_adam_update(&Wa, &Ma, &Vb, gbf, p), ampc_float_to_bf16(Wa)));
            assert_memory_equal(&wa, &Wa, sizeof(float));
        }
    }
}

/* ---- loss scaling ------------------------------------------------------------------ */

/* PyTorch test_grad_scaling_update_scale: growth 2, backoff .25, interval 2,
 * from 4: finite, finite, overflow -> scale 4, 8, 2; tracker 1, 0, 0 */
static void test_loss_scale_pytorch(void **state)
{
    (void)state;
    AmpcLossScaleRule r = ampc_loss_scale_rule_default();
    r.growth = 2.0f;
    r.backoff = 0.25f;
    r.interval = 2;
    AmpcLossScale s = {4.0f, 0};
    s = ampc_loss_scale_update(s, 0, r);
    assert_true(s.scale == 4.0f);
    assert_int_equal(s.tracker, 1);
    s = ampc_loss_scale_update(s, 0, r);
    assert_true(s.scale == 8.0f);
    assert_int_equal(s.tracker, 0);
    s = ampc_loss_scale_update(s, 1, r);
    assert_true(s.scale == 2.0f);
    assert_int_equal(s.tracker, 0);
}

static void test_loss_scale_bounds(void **state)
{
    (void)state;
    AmpcLossScaleRule r = ampc_loss_scale_rule_default();
    assert_true(r.growth == 2.0f && r.backoff == 0.5f && r.interval == 2000);
    assert_true(r.max_scale <= 0.0f && r.min_scale <= 0.0f);
    /* defaults: 2000 clean steps double 2^16 */
    AmpcLossScale s = {65536.0f, 0};
    for (int i = 0; i < 1999; i++)
        s = ampc_loss_scale_update(s, 0, r);
    assert_true(s.scale == 65536.0f && s.tracker == 1999);
    s = ampc_loss_scale_update(s, 0, r);
    assert_true(s.scale == 131072.0f && s.tracker == 0);
    /* an overflow resets the count */
    s.tracker = 1500;
    s = ampc_loss_scale_update(s, 1, r);
    assert_true(s.scale == 65536.0f && s.tracker == 0);
    /* the cap (MXNet's 2^24): growth stops there, and clamps to it */
    r.interval = 1;
    r.max_scale = 16777216.0f;
    s.scale = 12582912.0f; /* 1.5 * 2^23 */
    s = ampc_loss_scale_update(s, 0, r);
    assert_true(s.scale == 16777216.0f);
    s = ampc_loss_scale_update(s, 0, r);
    assert_true(s.scale == 16777216.0f && s.tracker == 0);
    /* no cap: growth is skipped when the result would be inf (PyTorch) */
    r.max_scale = 0.0f;
    s.scale = 3.0e38f;
    s = ampc_loss_scale_update(s, 0, r);
    assert_true(s.scale == 3.0e38f && s.tracker == 0);
    /* the floor */
    r.min_scale = 1.0f;
    s.scale = 1.5f;
    s = ampc_loss_scale_update(s, 1, r);
    assert_true(s.scale == 1.0f);
    s = ampc_loss_scale_update(s, 1, r);
    assert_true(s.scale == 1.0f);
    /* without it the scale keeps halving */
    r.min_scale = 0.0f;
    s = ampc_loss_scale_update(s, 1, r);
    assert_true(s.scale == 0.5f);
}

static void test_unscale_and_isfinite(void **state)
{
    (void)state;
    assert_true(ampc_inv_scale(65536.0f) == 1.0f / 65536.0f);
    assert_true(ampc_inv_scale(3.0f) == (float)(1.0 / 3.0));
    assert_true(ampc_unscale(131072.0f, ampc_inv_scale(65536.0f)) == 2.0f);
    int found_inf = 0;
    const float g[5] = {1.0f, -3e38f, INFINITY, 0.0f, NAN};
    for (int i = 0; i < 5; i++)
        found_inf |= !ampc_isfinite(ampc_unscale(g[i], 0.5f));
    assert_true(found_inf);
    assert_true(ampc_isfinite(3.4e38f) && ampc_isfinite(-0.0f) && ampc_isfinite(1e-45f));
    assert_false(ampc_isfinite(-INFINITY) || ampc_isfinite(NAN));
    /* a half gradient that overflowed is caught after widening */
    assert_false(ampc_isfinite(ampc_half_to_float(ampc_float_to_half(70000.0f))));
}

static void test_tolerance_checker(void **state)
{
    (void)state;
    const float ref[4] = {1.0f, 2.0f, NAN, INFINITY};
    const float ok[4] = {1.0000001f, 2.0f, NAN, INFINITY};
    const float bad[4] = {1.1f, 2.0f, 0.0f, -INFINITY};
    assert_int_equal(ampc_check_close("ok", ok, ref, 4, 1e-6f, 1e-5f), 0);
    assert_int_equal(ampc_check_close("bad (expected)", bad, ref, 4, 1e-6f, 1e-5f), 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_act_forward_and_grad),
        cmocka_unit_test(test_act_edges),
        cmocka_unit_test(test_softmax_ce_grad_by_hand),
        cmocka_unit_test(test_softmax_ce_grad_finite_diff),
        cmocka_unit_test(test_sgd_family),
        cmocka_unit_test(test_sgd_clip_semantics),
        cmocka_unit_test(test_adam),
        cmocka_unit_test(test_multi_precision),
        cmocka_unit_test(test_loss_scale_pytorch),
        cmocka_unit_test(test_loss_scale_bounds),
        cmocka_unit_test(test_unscale_and_isfinite),
        cmocka_unit_test(test_tolerance_checker),
    };
    return cmocka_run_group_tests_name("elem", tests, NULL, NULL);
}
