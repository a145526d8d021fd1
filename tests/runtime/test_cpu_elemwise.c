/* test_cpu_elemwise.c - elemwise_add/sub/mul, broadcast_add/mul (and sub),
 * the six tensor-scalar ops, exp/log/sqrt and Concat, forward and backward
 * against naive references and central differences. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "test_cpu_util.h"

static double ref_bin(RtBinOp op, double a, double b)
{
    return op == RT_BIN_ADD ? a + b : op == RT_BIN_SUB ? a - b : a * b;
}

static const char *bin_name[] = {"add", "sub", "mul"};

/* ---- elemwise ---------------------------------------------------------------- */

typedef struct {
    RtBinOp op;
    double *a, *b, *dy;
    size_t n;
} BinCtx;

static double bin_loss(void *p)
{
    BinCtx *c = p;
    double s = 0;
    for (size_t i = 0; i < c->n; i++)
        s += ref_bin(c->op, c->a[i], c->b[i]) * c->dy[i];
    return s;
}

static size_t elemwise_run(RtBinOp op, size_t n, RtDType dt, bool fd)
{
    double *a = tu_dalloc(n), *b = tu_dalloc(n), *dy = tu_dalloc(n), *y = tu_dalloc(n),
           *da = tu_dalloc(n), *db = tu_dalloc(n);
    tu_fill(a, n, -2, 2);
    tu_fill(b, n, -2, 2);
    tu_fill(dy, n, -1, 1);
    tu_round_all(a, n, dt);
    tu_round_all(b, n, dt);
    tu_round_all(dy, n, dt);
    for (size_t i = 0; i < n; i++) {
        y[i] = ref_bin(op, a[i], b[i]);
        da[i] = op == RT_BIN_MUL ? dy[i] * b[i] : dy[i];
        db[i] = op == RT_BIN_MUL ? dy[i] * a[i] : op == RT_BIN_SUB ? -dy[i] : dy[i];
    }
    void *as = tu_pack(a, n, dt), *bs = tu_pack(b, n, dt), *dys = tu_pack(dy, n, dt),
         *ys = tu_pack(y, n, dt), *das = tu_pack(y, n, dt), *dbs = tu_pack(y, n, dt);
    size_t bad = 0, esz = rt_dtype_size(dt);
    char nm[64];
    rt_elemwise_forward(op, n, dt, as, bs, ys);
    snprintf(nm, sizeof nm, "elemwise_%s y", bin_name[op]);
    bad += tu_check(nm, ys, dt, y, n, tu_tol(dt, 4));
    rt_elemwise_backward(op, n, dt, dys, as, bs, das, dbs, false, false);
    snprintf(nm, sizeof nm, "elemwise_%s da", bin_name[op]);
    bad += tu_check(nm, das, dt, da, n, tu_tol(dt, 2));
    snprintf(nm, sizeof nm, "elemwise_%s db", bin_name[op]);
    bad += tu_check(nm, dbs, dt, db, n, tu_tol(dt, 2));
    float *da32 = tu_unpack(das, n, dt), *db32 = tu_unpack(dbs, n, dt);
    /* accumulate into da; db not wanted */
    rt_elemwise_backward(op, n, dt, dys, as, bs, das, NULL, true, false);
    double *t = tu_dalloc(n);
    for (size_t i = 0; i < n; i++)
        t[i] = 2 * da[i];
    snprintf(nm, sizeof nm, "elemwise_%s da accumulate", bin_name[op]);
    bad += tu_check(nm, das, dt, t, n, tu_tol(dt, 4));
    /* y = x op x: one gradient buffer, the second write accumulates */
    void *g = tu_pack(y, n, dt);
    rt_elemwise_backward(op, n, dt, dys, as, as, g, g, false, true);
    for (size_t i = 0; i < n; i++)
        t[i] = op == RT_BIN_ADD ? 2 * dy[i] : op == RT_BIN_SUB ? 0 : 2 * dy[i] * a[i];
    snprintf(nm, sizeof nm, "elemwise_%s x op x", bin_name[op]);
    bad += tu_check(nm, g, dt, t, n, tu_tol(dt, 4));
    /* in place: y written over a */
    void *ip = tu_pack(a, n, dt);
    rt_elemwise_forward(op, n, dt, ip, bs, ip);
    if (memcmp(ip, ys, n * esz)) {
        fprintf(stderr, "elemwise_%s: in-place forward differs\n", bin_name[op]);
        bad++;
    }
    if (fd) {
        BinCtx c = {op, a, b, dy, n};
        snprintf(nm, sizeof nm, "elemwise_%s a", bin_name[op]);
        bad += tu_fd_check(nm, a, n, da32, bin_loss, &c, 20, 1e-3, 1e-5, 1e-4);
        snprintf(nm, sizeof nm, "elemwise_%s b", bin_name[op]);
        bad += tu_fd_check(nm, b, n, db32, bin_loss, &c, 20, 1e-3, 1e-5, 1e-4);
    }
    free(a), free(b), free(dy), free(y), free(da), free(db), free(t), free(da32), free(db32);
    free(as), free(bs), free(dys), free(ys), free(das), free(dbs), free(g), free(ip);
    return bad;
}

static void test_elemwise(void **state)
{
    (void)state;
    tu_seed(40);
    size_t bad = 0;
    for (int op = 0; op < 3; op++) {
        bad += elemwise_run((RtBinOp)op, 1234, RT_F32, true);
        bad += elemwise_run((RtBinOp)op, 1234, RT_F16, false);
        bad += elemwise_run((RtBinOp)op, 77, RT_BF16, false);
    }
    assert_int_equal(bad, 0);
}

/* ---- broadcast ------------------------------------------------------------------ */

typedef struct {
    RtBinOp op;
    const RtBcastDims *d;
    double *a, *b, *dy, *y;
} BcCtx;

/* Offsets into a and b of output element i (independent of the kernel's walk). */
static void bc_index(const RtBcastDims *d, size_t i, size_t *ia, size_t *ib)
{
    size_t a = 0, b = 0, sa = 1, sb = 1;
    for (int ax = d->rank - 1; ax >= 0; ax--) {
        size_t k = i % (size_t)d->out[ax];
        i /= (size_t)d->out[ax];
        if (d->a[ax] != 1)
            a += k * sa;
        if (d->b[ax] != 1)
            b += k * sb;
        sa *= (size_t)d->a[ax];
        sb *= (size_t)d->b[ax];
    }
    *ia = a;
    *ib = b;
}

static size_t prod(const int64_t *s, int r)
{
    size_t n = 1;
    for (int i = 0; i < r; i++)
        n *= (size_t)s[i];
    return n;
}

static void ref_bc(const BcCtx *c, double *y, double *da, double *db)
{
    const RtBcastDims *d = c->d;
    size_t no = prod(d->out, d->rank);
    if (da) {
        memset(da, 0, prod(d->a, d->rank) * sizeof *da);
        memset(db, 0, prod(d->b, d->rank) * sizeof *db);
    }
    for (size_t i = 0; i < no; i++) {
        size_t ia, ib;
        bc_index(d, i, &ia, &ib);
        y[i] = ref_bin(c->op, c->a[ia], c->b[ib]);
        if (da) {
            da[ia] += c->op == RT_BIN_MUL ? c->dy[i] * c->b[ib] : c->dy[i];
            db[ib] += c->op == RT_BIN_MUL ? c->dy[i] * c->a[ia]
                    : c->op == RT_BIN_SUB ? -c->dy[i] : c->dy[i];
        }
    }
}

static double bc_loss(void *p)
{
    BcCtx *c = p;
    ref_bc(c, c->y, NULL, NULL);
    return tu_dot(c->y, c->dy, prod(c->d->out, c->d->rank));
}

static size_t bc_run(RtBinOp op, int ra, const int64_t *sa, int rb, const int64_t *sb,
                     RtDType dt, bool fd)
{
    RtBcastDims d;
    assert_true(rt_broadcast_dims_init(&d, ra, sa, rb, sb));
    size_t na = prod(d.a, d.rank), nb = prod(d.b, d.rank), no = prod(d.out, d.rank);
    BcCtx c = {op, &d, tu_dalloc(na), tu_dalloc(nb), tu_dalloc(no), tu_dalloc(no)};
    tu_fill(c.a, na, -2, 2);
    tu_fill(c.b, nb, -2, 2);
    tu_fill(c.dy, no, -1, 1);
    tu_round_all(c.a, na, dt);
    tu_round_all(c.b, nb, dt);
    tu_round_all(c.dy, no, dt);
    double *y = tu_dalloc(no), *da = tu_dalloc(na), *db = tu_dalloc(nb);
    ref_bc(&c, y, da, db);
    void *as = tu_pack(c.a, na, dt), *bs = tu_pack(c.b, nb, dt), *dys = tu_pack(c.dy, no, dt),
         *ys = tu_pack(y, no, dt), *das = tu_pack(da, na, dt), *dbs = tu_pack(db, nb, dt);
    size_t bad = 0;
    char nm[64];
    snprintf(nm, sizeof nm, "broadcast_%s y", bin_name[op]);
    rt_broadcast_forward(op, &d, dt, as, bs, ys);
    bad += tu_check(nm, ys, dt, y, no, tu_tol(dt, 4));
    void *ws = tu_walloc(rt_broadcast_workspace_bytes(&d, dt, RT_PASS_BACKWARD));
    memset(das, 0x55, na * rt_dtype_size(dt));
    rt_broadcast_backward(op, &d, dt, dys, as, bs, das, dbs, false, false, ws);
    snprintf(nm, sizeof nm, "broadcast_%s da", bin_name[op]);
    bad += tu_check(nm, das, dt, da, na, tu_tol(dt, tu_maxabs(da, na)));
    snprintf(nm, sizeof nm, "broadcast_%s db", bin_name[op]);
    bad += tu_check(nm, dbs, dt, db, nb, tu_tol(dt, tu_maxabs(db, nb)));
    float *da32 = tu_unpack(das, na, dt), *db32 = tu_unpack(dbs, nb, dt);
    rt_broadcast_backward(op, &d, dt, dys, as, bs, das, dbs, true, true, ws);
    for (size_t i = 0; i < na; i++)
        da[i] *= 2;
    for (size_t i = 0; i < nb; i++)
        db[i] *= 2;
    snprintf(nm, sizeof nm, "broadcast_%s da accumulate", bin_name[op]);
    bad += tu_check(nm, das, dt, da, na, tu_tol(dt, tu_maxabs(da, na)));
    snprintf(nm, sizeof nm, "broadcast_%s db accumulate", bin_name[op]);
    bad += tu_check(nm, dbs, dt, db, nb, tu_tol(dt, tu_maxabs(db, nb)));
    /* one side only */
    rt_broadcast_backward(op, &d, dt, dys, as, bs, NULL, dbs, false, false, ws);
    for (size_t i = 0; i < nb; i++)
        db[i] /= 2;
    snprintf(nm, sizeof nm, "broadcast_%s db alone", bin_name[op]);
    bad += tu_check(nm, dbs, dt, db, nb, tu_tol(dt, tu_maxabs(db, nb)));
    free(ws);
    if (fd) {
        snprintf(nm, sizeof nm, "broadcast_%s a", bin_name[op]);
        bad += tu_fd_check(nm, c.a, na, da32, bc_loss, &c, 20, 1e-3, 1e-4, 1e-4);
        snprintf(nm, sizeof nm, "broadcast_%s b", bin_name[op]);
        bad += tu_fd_check(nm, c.b, nb, db32, bc_loss, &c, 20, 1e-3, 1e-4, 1e-4);
    }
    free(c.a), free(c.b), free(c.dy), free(c.y), free(y), free(da), free(db), free(da32),
        free(db32);
    free(as), free(bs), free(dys), free(ys), free(das), free(dbs);
    return bad;
}

static void test_broadcast(void **state)
{
    (void)state;
    tu_seed(41);
    static const struct {
        int ra;
        int64_t a[4];
        int rb;
        int64_t b[4];
    } shapes[] = {
        {4, {2, 3, 4, 5}, 4, {2, 3, 1, 1}}, /* [N,C,H,W] x [N,C,1,1] (squeeze-excite) */
        {2, {6, 7}, 1, {7}},                /* [N,C] + [C] (bias) */
        {3, {3, 1, 5}, 3, {1, 4, 1}},       /* both sides broadcast */
        {2, {4, 600}, 0, {0}},              /* tensor and scalar, rows longer than a chunk */
        {1, {1}, 3, {2, 3, 700}},           /* the broadcast one first */
        {3, {2, 3, 4}, 3, {2, 3, 4}},       /* no broadcast at all */
    };
    size_t bad = 0;
    for (int op = 0; op < 3; op++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            bad += bc_run((RtBinOp)op, shapes[s].ra, shapes[s].a, shapes[s].rb, shapes[s].b,
                          RT_F32, true);
            bad += bc_run((RtBinOp)op, shapes[s].ra, shapes[s].a, shapes[s].rb, shapes[s].b,
                          RT_F16, false);
        }
    bad += bc_run(RT_BIN_MUL, shapes[0].ra, shapes[0].a, shapes[0].rb, shapes[0].b, RT_BF16, false);
    assert_int_equal(bad, 0);
    RtBcastDims d;
    int64_t x[2] = {3, 4}, y[2] = {2, 4};
    assert_false(rt_broadcast_dims_init(&d, 2, x, 2, y));
}

/* ---- scalar ops and exp/log/sqrt (the unary harness) ------------------------------ */

static double f_plus(double x, double s) { return x + s; }
static double f_minus(double x, double s) { return x - s; }
static double f_rminus(double x, double s) { return s - x; }
static double f_mul(double x, double s) { return x * s; }
static double f_div(double x, double s) { return x / s; }
static double f_rdiv(double x, double s) { return s / x; }
static double d_one(double x, double s) { (void)x, (void)s; return 1; }
static double d_mone(double x, double s) { (void)x, (void)s; return -1; }
static double d_mul(double x, double s) { (void)x; return s; }
static double d_div(double x, double s) { (void)x; return 1 / s; }
static double d_rdiv(double x, double s) { return -s / (x * x); }

static void sc_fwd(const TuUnary *u, size_t n, RtDType dt, const void *x, void *y)
{
    rt_scalar_forward((RtScalarOp)u->op, n, dt, x, (float)u->a, y);
}

static void sc_bwd(const TuUnary *u, size_t n, RtDType dt, const void *x, const void *y,
                   const void *dy, void *dx, bool acc)
{
    (void)y;
    rt_scalar_backward((RtScalarOp)u->op, n, dt, u->op == RT_SCALAR_RDIV ? x : NULL,
                       (float)u->a, dy, dx, acc);
}

static const TuUnary scalar_cases[] = {
    {"plus_scalar", f_plus, d_one, sc_fwd, sc_bwd, 0, 2, false, 1.5, RT_SCALAR_PLUS},
    {"minus_scalar", f_minus, d_one, sc_fwd, sc_bwd, 0, 2, false, 0.75, RT_SCALAR_MINUS},
    {"rminus_scalar", f_rminus, d_mone, sc_fwd, sc_bwd, 0, 2, false, 3, RT_SCALAR_RMINUS},
    {"mul_scalar", f_mul, d_mul, sc_fwd, sc_bwd, 0, 2, false, -2.5, RT_SCALAR_MUL},
    {"div_scalar", f_div, d_div, sc_fwd, sc_bwd, 0, 2, false, 4, RT_SCALAR_DIV},
    {"rdiv_scalar", f_rdiv, d_rdiv, sc_fwd, sc_bwd, 0.5, 2, false, 1.25, RT_SCALAR_RDIV},
};

static void test_scalar(void **state)
{
    (void)state;
    tu_seed(42);
    assert_int_equal(tu_unary_all(scalar_cases, sizeof scalar_cases / sizeof scalar_cases[0], 1100), 0);
}

static double f_exp(double x, double a) { (void)a; return exp(x); }
static double f_log(double x, double a) { (void)a; return log(x); }
static double d_log(double x, double a) { (void)a; return 1 / x; }
static double f_sqrt(double x, double a) { (void)a; return sqrt(x); }
static double d_sqrt(double x, double a) { (void)a; return 0.5 / sqrt(x); }

static void un_fwd(const TuUnary *u, size_t n, RtDType dt, const void *x, void *y)
{
    rt_unary_forward((RtUnaryOp)u->op, n, dt, x, y);
}

static void un_bwd(const TuUnary *u, size_t n, RtDType dt, const void *x, const void *y,
                   const void *dy, void *dx, bool acc)
{
    bool by_x = u->op != RT_UNARY_EXP && u->op != RT_UNARY_SQRT;
    rt_unary_backward((RtUnaryOp)u->op, n, dt, by_x ? x : NULL, by_x ? NULL : y, dy, dx, acc);
}

/* the unary math of MXNet's AMP lists (kernels/unary.h): references in
 * double, MXNet's definitions (round halves away from zero, rint to even,
 * fix toward zero, sign(0) = 0) */
// clang-format off
#define D1(name, expr) static double name(double x, double a) { (void)x, (void)a; return (expr); }
D1(f_sin, sin(x)) D1(d_sin, cos(x)) D1(f_cos, cos(x)) D1(d_cos, -sin(x))
D1(f_tan, tan(x)) D1(d_tan, 1 / (cos(x) * cos(x)))
D1(f_asin, asin(x)) D1(d_asin, 1 / sqrt(1 - x * x)) D1(f_acos, acos(x))
D1(d_acos, -1 / sqrt(1 - x * x)) D1(f_atan, atan(x)) D1(d_atan, 1 / (1 + x * x))
D1(f_sinh, sinh(x)) D1(f_cosh, cosh(x)) D1(f_asinh, asinh(x)) D1(d_asinh, 1 / sqrt(x * x + 1))
D1(f_acosh, acosh(x)) D1(d_acosh, 1 / sqrt(x * x - 1)) D1(f_atanh, atanh(x))
D1(d_atanh, 1 / (1 - x * x)) D1(f_expm1, expm1(x)) D1(f_log1p, log1p(x)) D1(d_log1p, 1 / (1 + x))
D1(f_log2, log2(x)) D1(d_log2, 1 / (x * log(2.0))) D1(f_log10, log10(x))
D1(d_log10, 1 / (x * log(10.0))) D1(f_cbrt, cbrt(x)) D1(d_cbrt, 1 / (3 * cbrt(x) * cbrt(x)))
D1(f_rcbrt, 1 / cbrt(x)) D1(d_rcbrt, -1 / (3 * x * cbrt(x))) D1(f_rsqrt, 1 / sqrt(x))
D1(d_rsqrt, -0.5 / (x * sqrt(x))) D1(f_recip, 1 / x) D1(d_recip, -1 / (x * x)) D1(f_square, x * x)
D1(d_square, 2 * x) D1(f_abs, fabs(x)) D1(f_sign, x > 0 ? 1 : x < 0 ? -1 : 0) D1(f_neg, -x)
D1(d_mone1, -1) D1(d_zero, 0) D1(f_erf, erf(x)) D1(d_erf, 2 / sqrt(M_PI) * exp(-x * x))
D1(f_deg, x * 180 / M_PI) D1(d_deg, 180 / M_PI) D1(f_rad, x * M_PI / 180) D1(d_rad, M_PI / 180)
D1(f_floor, floor(x)) D1(f_ceil, ceil(x)) D1(f_round, round(x)) D1(f_trunc, trunc(x))
D1(f_rint, rint(x))
#undef D1

static const TuUnary unary_cases[] = {
    {"exp", f_exp, f_exp, un_fwd, un_bwd, 0, 3, false, 0, RT_UNARY_EXP},
    {"log", f_log, d_log, un_fwd, un_bwd, 0.1, 5, true, 0, RT_UNARY_LOG},
    {"sqrt", f_sqrt, d_sqrt, un_fwd, un_bwd, 0.1, 5, true, 0, RT_UNARY_SQRT},
    {"sin", f_sin, d_sin, un_fwd, un_bwd, 0, 4, false, 0, RT_UNARY_SIN},
    {"cos", f_cos, d_cos, un_fwd, un_bwd, 0, 4, false, 0, RT_UNARY_COS},
    {"tan", f_tan, d_tan, un_fwd, un_bwd, 0, 1.2, false, 0, RT_UNARY_TAN},
    {"arcsin", f_asin, d_asin, un_fwd, un_bwd, 0, 0.9, false, 0, RT_UNARY_ARCSIN},
    {"arccos", f_acos, d_acos, un_fwd, un_bwd, 0, 0.9, false, 0, RT_UNARY_ARCCOS},
    {"arctan", f_atan, d_atan, un_fwd, un_bwd, 0, 4, false, 0, RT_UNARY_ARCTAN},
    {"sinh", f_sinh, f_cosh, un_fwd, un_bwd, 0, 3, false, 0, RT_UNARY_SINH},
    {"cosh", f_cosh, f_sinh, un_fwd, un_bwd, 0, 3, false, 0, RT_UNARY_COSH},
    {"arcsinh", f_asinh, d_asinh, un_fwd, un_bwd, 0, 4, false, 0, RT_UNARY_ARCSINH},
    {"arccosh", f_acosh, d_acosh, un_fwd, un_bwd, 1.1, 4, true, 0, RT_UNARY_ARCCOSH},
    {"arctanh", f_atanh, d_atanh, un_fwd, un_bwd, 0, 0.9, false, 0, RT_UNARY_ARCTANH},
    {"expm1", f_expm1, f_exp, un_fwd, un_bwd, 0, 3, false, 0, RT_UNARY_EXPM1},
    {"log1p", f_log1p, d_log1p, un_fwd, un_bwd, 0, 3, true, 0, RT_UNARY_LOG1P},
    {"log2", f_log2, d_log2, un_fwd, un_bwd, 0.1, 5, true, 0, RT_UNARY_LOG2},
    {"log10", f_log10, d_log10, un_fwd, un_bwd, 0.1, 5, true, 0, RT_UNARY_LOG10},
    {"cbrt", f_cbrt, d_cbrt, un_fwd, un_bwd, 0.2, 5, false, 0, RT_UNARY_CBRT},
    {"rcbrt", f_rcbrt, d_rcbrt, un_fwd, un_bwd, 0.2, 5, false, 0, RT_UNARY_RCBRT},
    {"rsqrt", f_rsqrt, d_rsqrt, un_fwd, un_bwd, 0.2, 5, true, 0, RT_UNARY_RSQRT},
    {"reciprocal", f_recip, d_recip, un_fwd, un_bwd, 0.2, 5, false, 0, RT_UNARY_RECIPROCAL},
    {"square", f_square, d_square, un_fwd, un_bwd, 0, 3, false, 0, RT_UNARY_SQUARE},
    {"abs", f_abs, f_sign, un_fwd, un_bwd, 0.01, 3, false, 0, RT_UNARY_ABS},
    {"negative", f_neg, d_mone1, un_fwd, un_bwd, 0, 3, false, 0, RT_UNARY_NEGATIVE},
    {"sign", f_sign, d_zero, un_fwd, un_bwd, 0.01, 3, false, 0, RT_UNARY_SIGN},
    {"erf", f_erf, d_erf, un_fwd, un_bwd, 0, 2.5, false, 0, RT_UNARY_ERF},
    {"degrees", f_deg, d_deg, un_fwd, un_bwd, 0, 3, false, 0, RT_UNARY_DEGREES},
    {"radians", f_rad, d_rad, un_fwd, un_bwd, 0, 300, false, 0, RT_UNARY_RADIANS},
    {"floor", f_floor, d_zero, un_fwd, un_bwd, 0, 6, false, 0, RT_UNARY_FLOOR},
    {"ceil", f_ceil, d_zero, un_fwd, un_bwd, 0, 6, false, 0, RT_UNARY_CEIL},
    {"round", f_round, d_zero, un_fwd, un_bwd, 0, 6, false, 0, RT_UNARY_ROUND},
    {"trunc", f_trunc, d_zero, un_fwd, un_bwd, 0, 6, false, 0, RT_UNARY_TRUNC},
    {"fix", f_trunc, d_zero, un_fwd, un_bwd, 0, 6, false, 0, RT_UNARY_FIX},
    {"rint", f_rint, d_zero, un_fwd, un_bwd, 0, 6, false, 0, RT_UNARY_RINT},
};
// clang-format on
_Static_assert(sizeof unary_cases / sizeof unary_cases[0] == RT_UNARY_COUNT,
               "a case for every unary op of kernels/unary.h");

static void test_unary(void **state)
{
    (void)state;
    tu_seed(43);
    assert_int_equal(tu_unary_all(unary_cases, sizeof unary_cases / sizeof unary_cases[0], 1100), 0);
}

/* ---- clip ------------------------------------------------------------------------- */

/* clip(x, lo, hi) and its backward (dy where lo <= x <= hi, MXNet's), with x
 * exactly at both bounds, in place, accumulating, and in 16-bit storage. */
static size_t clip_run(RtDType dt)
{
    const double lo = -1, hi = 2;
    size_t n = 1100, bad = 0;
    double *x = tu_dalloc(n), *dy = tu_dalloc(n), *y = tu_dalloc(n), *dx = tu_dalloc(n);
    tu_fill(x, n, -3, 3);
    tu_fill(dy, n, -1, 1);
    x[0] = lo, x[1] = hi, x[2] = -3, x[3] = 3; /* the bounds pass the gradient */
    tu_round_all(x, n, dt);
    tu_round_all(dy, n, dt);
    for (size_t i = 0; i < n; i++) {
        y[i] = x[i] < lo ? lo : x[i] > hi ? hi : x[i];
        dx[i] = x[i] < lo || x[i] > hi ? 0 : dy[i];
    }
    void *xs = tu_pack(x, n, dt), *ys = tu_pack(dy, n, dt), *dys = tu_pack(dy, n, dt);
    void *dxs = tu_pack(dy, n, dt);
    rt_clip_forward(n, dt, xs, (float)lo, (float)hi, ys);
    bad += tu_check("clip y", ys, dt, y, n, tu_tol(dt, 1));
    rt_clip_backward(n, dt, xs, (float)lo, (float)hi, dys, dxs, false);
    bad += tu_check("clip dx", dxs, dt, dx, n, tu_tol(dt, 1));
    rt_clip_backward(n, dt, xs, (float)lo, (float)hi, dys, dxs, true);
    for (size_t i = 0; i < n; i++)
        dx[i] *= 2;
    bad += tu_check("clip dx accumulate", dxs, dt, dx, n, tu_tol(dt, 2));
    rt_clip_forward(n, dt, xs, (float)lo, (float)hi, xs); /* in place */
    bad += tu_check("clip y in place", xs, dt, y, n, tu_tol(dt, 1));
    free(x), free(dy), free(y), free(dx), free(xs), free(ys), free(dys), free(dxs);
    return bad;
}

static void test_clip(void **state)
{
    (void)state;
    tu_seed(44);
    assert_int_equal(clip_run(RT_F32) + clip_run(RT_F16) + clip_run(RT_BF16), 0);
    float v[2] = {NAN, 7}, r[2];
    rt_clip_forward(2, RT_F32, v, 0, 6, r); /* a NaN passes, as in MXNet */
    assert_true(isnan(r[0]));
    assert_true(r[1] == 6);
}

/* ---- Concat --------------------------------------------------------------------- */

typedef struct {
    int nin;
    const int64_t *len;
    int64_t outer, inner;
    double **x, *dy;
} CatCtx;

static size_t cat_total(const CatCtx *c)
{
    size_t t = 0;
    for (int i = 0; i < c->nin; i++)
        t += (size_t)c->len[i];
    return t;
}

static void ref_cat(const CatCtx *c, double *y)
{
    size_t t = cat_total(c), k = 0;
    (void)t;
    for (int64_t o = 0; o < c->outer; o++)
        for (int i = 0; i < c->nin; i++)
            for (int64_t l = 0; l < c->len[i]; l++)
                for (int64_t j = 0; j < c->inner; j++)
                    y[k++] = c->x[i][(size_t)((o * c->len[i] + l) * c->inner + j)];
}

static double cat_loss(void *p)
{
    CatCtx *c = p;
    size_t n = (size_t)c->outer * cat_total(c) * (size_t)c->inner;
    double *y = tu_dalloc(n);
    ref_cat(c, y);
    double s = tu_dot(y, c->dy, n);
    free(y);
    return s;
}

static size_t cat_run(int nin, const int64_t *len, int64_t outer, int64_t inner, RtDType dt,
                      bool fd)
{
    double *x[4];
    void *xs[4], *dxs[4];
    CatCtx c = {nin, len, outer, inner, x, NULL};
    size_t yn = (size_t)outer * cat_total(&c) * (size_t)inner, bad = 0;
    c.dy = tu_dalloc(yn);
    tu_fill(c.dy, yn, -1, 1);
    tu_round_all(c.dy, yn, dt);
    for (int i = 0; i < nin; i++) {
        size_t n = (size_t)(outer * len[i] * inner);
        x[i] = tu_dalloc(n);
        tu_fill(x[i], n, -1, 1);
        tu_round_all(x[i], n, dt);
        xs[i] = tu_pack(x[i], n, dt);
        dxs[i] = tu_pack(x[i], n, dt);
    }
    double *y = tu_dalloc(yn);
    ref_cat(&c, y);
    void *ys = tu_pack(c.dy, yn, dt), *dys = tu_pack(c.dy, yn, dt);
    rt_concat_forward(nin, (const void *const *)xs, len, outer, inner, dt, ys);
    bad += tu_check("concat y", ys, dt, y, yn, tu_tol(dt, 1));
    /* backward: input 1 accumulates, the others overwrite, and the last is
     * not wanted */
    bool acc[4] = {false, true, false, false};
    void *want[4] = {dxs[0], dxs[1], dxs[2], dxs[3]};
    want[nin - 1] = NULL;
    rt_concat_backward(nin, dys, len, outer, inner, dt, want, acc);
    /* the split of dy, by running the reference concat on the gradients */
    size_t off = 0;
    for (int i = 0; i < nin; i++) {
        size_t n = (size_t)(outer * len[i] * inner);
        double *ref = tu_dalloc(n);
        for (int64_t o = 0; o < outer; o++)
            for (int64_t l = 0; l < len[i]; l++)
                for (int64_t j = 0; j < inner; j++)
                    ref[(size_t)((o * len[i] + l) * inner + j)] =
                        c.dy[(size_t)o * cat_total(&c) * (size_t)inner + off +
                             (size_t)(l * inner + j)];
        if (i == 1)
            for (size_t k = 0; k < n; k++)
                ref[k] += x[i][k];
        if (i == nin - 1)
            memcpy(ref, x[i], n * sizeof *ref); /* untouched */
        bad += tu_check("concat dx", dxs[i], dt, ref, n, tu_tol(dt, 2));
        if (fd && i == 0) {
            float *g = tu_unpack(dxs[0], n, dt);
            bad += tu_fd_check("concat x0", x[0], n, g, cat_loss, &c, 20, 1e-3, 1e-6, 1e-5);
            free(g);
        }
        free(ref);
        off += (size_t)(len[i] * inner);
    }
    for (int i = 0; i < nin; i++)
        free(x[i]), free(xs[i]), free(dxs[i]);
    free(c.dy), free(y), free(ys), free(dys);
    return bad;
}

static void test_concat(void **state)
{
    (void)state;
    tu_seed(44);
    int64_t len3[3] = {2, 3, 1}, len2[2] = {5, 4};
    size_t bad = cat_run(3, len3, 2, 6, RT_F32, true) + cat_run(2, len2, 1, 700, RT_F32, true) +
                 cat_run(3, len3, 2, 6, RT_F16, false) + cat_run(2, len2, 3, 1, RT_BF16, false);
    assert_int_equal(bad, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_elemwise),
        cmocka_unit_test(test_broadcast),
        cmocka_unit_test(test_scalar),
        cmocka_unit_test(test_unary),
        cmocka_unit_test(test_clip),
        cmocka_unit_test(test_concat),
    };
    return cmocka_run_group_tests_name("cpu_elemwise", tests, NULL, NULL);
}
