/*
 * unary.h - per-element math of the unary ops (exp, log, sqrt and the unary
 * math of MXNet 1.9.1's AMP lists: sin ... rint), shared by the CPU kernels
 * (cpu/elemwise.c, gcc) and the CUDA ones (cuda/ops_math.cuh, nvcc), so the
 * two compute the same expression.
 *
 * AMPC_UNARY_LIST is the one list: rt.h's RtUnaryOp (RT_UNARY_SIN ...) and
 * the codes below come from it in its order.  ampc_unary(op, x) is the
 * value, ampc_unary_grad(op, x) dy/dx at the input, which the backward of
 * every op but exp, log and sqrt uses (those three keep their own, through y
 * or x).  Definitions are MXNet's (src/operator/mshadow_op.h): round halves
 * away from zero, rint to even, fix toward zero; sign(0) and sign(NaN) are
 * 0; the rounding ops and sign have a zero gradient, abs the sign of x; the
 * gradients of tan and the inverse functions are the analytic ones.
 */
#ifndef AMPC_KERNELS_UNARY_H
#define AMPC_KERNELS_UNARY_H

#include <math.h>

/* as kernels/half.h defines it; not included, so that the compiler (ir/)
 * can take the list without the runtime's include path */
#ifndef AMPC_HD
#ifdef __CUDACC__
#define AMPC_HD __host__ __device__
#else
#define AMPC_HD
#endif
#endif

/* X(NAME, name): name as ops.def spells the op */
// clang-format off
#define AMPC_UNARY_LIST(X)                                                                      \
    X(EXP, exp) X(LOG, log) X(SQRT, sqrt) X(SIN, sin) X(COS, cos) X(TAN, tan)                  \
    X(ARCSIN, arcsin) X(ARCCOS, arccos) X(ARCTAN, arctan) X(SINH, sinh) X(COSH, cosh)           \
    X(ARCSINH, arcsinh) X(ARCCOSH, arccosh) X(ARCTANH, arctanh) X(EXPM1, expm1)                 \
    X(LOG1P, log1p) X(LOG2, log2) X(LOG10, log10) X(CBRT, cbrt) X(RCBRT, rcbrt)                 \
    X(RSQRT, rsqrt) X(RECIPROCAL, reciprocal) X(SQUARE, square) X(ABS, abs)                     \
    X(NEGATIVE, negative) X(SIGN, sign) X(ERF, erf) X(DEGREES, degrees) X(RADIANS, radians)    \
    X(FLOOR, floor) X(CEIL, ceil) X(ROUND, round) X(TRUNC, trunc) X(FIX, fix) X(RINT, rint)
// clang-format on

#define AMPC_UNARY_CODE(N, n) AMPC_UNARY_##N,
enum { AMPC_UNARY_LIST(AMPC_UNARY_CODE) AMPC_UNARY_COUNT };
#undef AMPC_UNARY_CODE

/* branch-free, so that every element costs the same (two compares and a
 * conversion: ir/gpu_kernels.c's counts) */
static inline AMPC_HD float ampc_sign(float x) { return (float)((x > 0.0f) - (x < 0.0f)); }

static inline AMPC_HD float ampc_unary(int op, float x)
{
    switch (op) {
    case AMPC_UNARY_EXP: return expf(x);
    case AMPC_UNARY_LOG: return logf(x);
    case AMPC_UNARY_SQRT: return sqrtf(x);
    case AMPC_UNARY_SIN: return sinf(x);
    case AMPC_UNARY_COS: return cosf(x);
    case AMPC_UNARY_TAN: return tanf(x);
    case AMPC_UNARY_ARCSIN: return asinf(x);
    case AMPC_UNARY_ARCCOS: return acosf(x);
    case AMPC_UNARY_ARCTAN: return atanf(x);
    case AMPC_UNARY_SINH: return sinhf(x);
    case AMPC_UNARY_COSH: return coshf(x);
    case AMPC_UNARY_ARCSINH: return asinhf(x);
    case AMPC_UNARY_ARCCOSH: return acoshf(x);
    case AMPC_UNARY_ARCTANH: return atanhf(x);
    case AMPC_UNARY_EXPM1: return expm1f(x);
    case AMPC_UNARY_LOG1P: return log1pf(x);
    case AMPC_UNARY_LOG2: return log2f(x);
    case AMPC_UNARY_LOG10: return log10f(x);
    case AMPC_UNARY_CBRT: return cbrtf(x);
    case AMPC_UNARY_RCBRT: return 1.0f / cbrtf(x);
    case AMPC_UNARY_RSQRT: return 1.0f / sqrtf(x);
    case AMPC_UNARY_RECIPROCAL: return 1.0f / x;
    case AMPC_UNARY_SQUARE: return x * x;
    case AMPC_UNARY_ABS: return fabsf(x);
    case AMPC_UNARY_NEGATIVE: return -x;
    case AMPC_UNARY_SIGN: return ampc_sign(x);
    case AMPC_UNARY_ERF: return erff(x);
    case AMPC_UNARY_DEGREES: return x * 57.295779513082320876798f;   /* 180 / pi */
    case AMPC_UNARY_RADIANS: return x * 0.017453292519943295769237f; /* pi / 180 */
    case AMPC_UNARY_FLOOR: return floorf(x);
    case AMPC_UNARY_CEIL: return ceilf(x);
    case AMPC_UNARY_ROUND: return roundf(x);
    case AMPC_UNARY_TRUNC:
    case AMPC_UNARY_FIX: return truncf(x);
    case AMPC_UNARY_RINT: return rintf(x);
    default: return x;
    }
}

/* dy/dx at x */
static inline AMPC_HD float ampc_unary_grad(int op, float x)
{
    switch (op) {
    case AMPC_UNARY_EXP: return expf(x);
    case AMPC_UNARY_LOG: return 1.0f / x;
    case AMPC_UNARY_SQRT: return 0.5f / sqrtf(x);
    case AMPC_UNARY_SIN: return cosf(x);
    case AMPC_UNARY_COS: return -sinf(x);
    case AMPC_UNARY_TAN: {
        float t = tanf(x);
        return 1.0f + t * t;
    }
    case AMPC_UNARY_ARCSIN: return 1.0f / sqrtf(1.0f - x * x);
    case AMPC_UNARY_ARCCOS: return -1.0f / sqrtf(1.0f - x * x);
    case AMPC_UNARY_ARCTAN: return 1.0f / (1.0f + x * x);
    case AMPC_UNARY_SINH: return coshf(x);
    case AMPC_UNARY_COSH: return sinhf(x);
    case AMPC_UNARY_ARCSINH: return 1.0f / sqrtf(x * x + 1.0f);
    case AMPC_UNARY_ARCCOSH: return 1.0f / sqrtf(x * x - 1.0f);
    case AMPC_UNARY_ARCTANH: return 1.0f / (1.0f - x * x);
    case AMPC_UNARY_EXPM1: return expf(x);
    case AMPC_UNARY_LOG1P: return 1.0f / (1.0f + x);
    case AMPC_UNARY_LOG2: return 1.0f / (x * 0.693147180559945309417f);  /* ln 2 */
    case AMPC_UNARY_LOG10: return 1.0f / (x * 2.302585092994045684018f); /* ln 10 */
    case AMPC_UNARY_CBRT: {
        float c = cbrtf(x);
        return 1.0f / (3.0f * c * c);
    }
    case AMPC_UNARY_RCBRT: return -1.0f / (3.0f * x * cbrtf(x));
    case AMPC_UNARY_RSQRT: return -0.5f / (x * sqrtf(x));
    case AMPC_UNARY_RECIPROCAL: return -1.0f / (x * x);
    case AMPC_UNARY_SQUARE: return 2.0f * x;
    case AMPC_UNARY_ABS: return ampc_sign(x);
    case AMPC_UNARY_NEGATIVE: return -1.0f;
    case AMPC_UNARY_ERF: return 1.128379167095512573896f * expf(-x * x); /* 2 / sqrt(pi) */
    case AMPC_UNARY_DEGREES: return 57.295779513082320876798f;
    case AMPC_UNARY_RADIANS: return 0.017453292519943295769237f;
    default: return 0.0f; /* sign and the rounding ops */
    }
}

#endif /* AMPC_KERNELS_UNARY_H */
