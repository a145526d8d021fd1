/*
 * emu_cuda.h - what nvcc provides a kernel source, for the emulation build:
 * the library's .cu files compiled by the host's C++ compiler (g++ or
 * clang++, -std=c++17) into libampcemu.a, whose launches run in the
 * emulator (emu.c).  Only cuda/kernel_api.cuh includes it.
 *
 *   - __global__, __device__, __host__, __forceinline__, __launch_bounds__;
 *     threadIdx, blockIdx, blockDim, gridDim, warpSize; dim3, cudaStream_t;
 *     float2/float4/uint2/uint4/int4 (16-byte aligned as CUDA's).
 *   - ampc_dptr<T>: a device pointer.  It cannot be dereferenced as raw
 *     memory: p[i] and *p are references that check and count the access
 *     (emu.h's ampc_emu_access) as they are read or assigned; &p[i] is an
 *     ampc_dptr again.  AMPC_LAUNCH refuses a kernel with a raw pointer
 *     parameter at compile time, and a raw pointer that reaches device
 *     memory some other way faults during the launch (emu.c's guard).
 *   - the counting number types: after the system headers, `float` and
 *     `double` are #defined as AmpcEmuF32 and AmpcEmuF64, classes of one
 *     float or double (the same size, alignment and calling convention)
 *     whose operators and libm overloads add one to their kind in the
 *     running launch's counts (emu.h's AmpcEmuFlop) and compute what C
 *     would: the usual arithmetic conversions, one IEEE rounding per
 *     operation (-ffp-contract=off).  So every kernel's FLOPs are counted
 *     with no change to its arithmetic.  A system header included after
 *     this one would see the #defines: kernel sources include only the
 *     headers below (the build fails loudly otherwise).
 *   - __syncthreads, __syncwarp, __shfl*_sync, __ballot_sync, __any_sync,
 *     __all_sync, atomics, AMPC_SHARED declarations: calls into emu.c with
 *     their call site.  The pre-Volta __shfl, __any, ... are poisoned.
 */
#ifndef AMPC_CUDA_EMU_CUDA_H
#define AMPC_CUDA_EMU_CUDA_H

#ifndef __cplusplus
#error "cuda/emu_cuda.h is the emulation build's: compile the .cu as C++ (-x c++ -std=c++17)"
#endif

/* every system header a kernel source uses, before float and double change */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tuple>
#include <type_traits>
#include <utility>

#include "emu/emu.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)

#define threadIdx ampc_emu_thread_idx
#define blockIdx ampc_emu_block_idx
#define blockDim ampc_emu_block_dim
#define gridDim ampc_emu_grid_dim
#define warpSize 32

typedef struct CUstream_st *cudaStream_t;

struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
    constexpr operator AmpcEmuDim3() const { return AmpcEmuDim3{x, y, z}; }
};

/* ---- the counting number types ---------------------------------------------------------- */

struct AmpcEmuF32;
struct AmpcEmuF64;

namespace ampc_emu
{

inline void count(int kind) { ampc_emu_flop_count[kind]++; }

template <class T> struct counting : std::false_type {
};
template <> struct counting<AmpcEmuF32> : std::true_type {
};
template <> struct counting<AmpcEmuF64> : std::true_type {
};

/* C's rank: an integer 0, float 1, double 2; -1 for anything else */
template <class T>
struct rank
    : std::integral_constant<int, std::is_integral<T>::value || std::is_enum<T>::value ? 0 : -1> {
};
template <> struct rank<float> : std::integral_constant<int, 1> {
};
template <> struct rank<double> : std::integral_constant<int, 2> {
};
template <> struct rank<AmpcEmuF32> : std::integral_constant<int, 1> {
};
template <> struct rank<AmpcEmuF64> : std::integral_constant<int, 2> {
};

} // namespace ampc_emu

template <class T> class ampc_dref;

namespace ampc_emu
{
/* a reference to device memory stands for its value type */
template <class T> struct value {
    typedef T type;
};
template <class T> struct value<ampc_dref<T>> {
    typedef typename std::remove_cv<T>::type type;
};
template <class T> using value_t = typename value<typename std::decay<T>::type>::type;
} // namespace ampc_emu

struct AmpcEmuF32 {
    float v;
    AmpcEmuF32() = default;
    constexpr AmpcEmuF32(float x) : v(x) {}
    constexpr AmpcEmuF32(double x) : v((float)x) {} /* a literal: no instruction */
    AmpcEmuF32(AmpcEmuF64 x);
    template <class I, typename std::enable_if<std::is_integral<I>::value, int>::type = 0>
    AmpcEmuF32(I i) : v((float)i)
    {
        ampc_emu::count(AMPC_EMU_CVT);
    }
    template <class I, typename std::enable_if<std::is_integral<I>::value, int>::type = 0>
    explicit operator I() const
    {
        ampc_emu::count(AMPC_EMU_CVT);
        return (I)v;
    }
    explicit operator bool() const
    {
        ampc_emu::count(AMPC_EMU_F32_CMP);
        return v != 0.0f;
    }
    AmpcEmuF32 operator-() const { return AmpcEmuF32(-v); }
    AmpcEmuF32 operator+() const { return *this; }
    template <class B> AmpcEmuF32 &operator+=(const B &b);
    template <class B> AmpcEmuF32 &operator-=(const B &b);
    template <class B> AmpcEmuF32 &operator*=(const B &b);
    template <class B> AmpcEmuF32 &operator/=(const B &b);
};

struct AmpcEmuF64 {
    double v;
    AmpcEmuF64() = default;
    constexpr AmpcEmuF64(double x) : v(x) {}
    constexpr AmpcEmuF64(float x) : v(x) {}
    AmpcEmuF64(AmpcEmuF32 x) : v(x.v) { ampc_emu::count(AMPC_EMU_CVT); }
    template <class I, typename std::enable_if<std::is_integral<I>::value, int>::type = 0>
    AmpcEmuF64(I i) : v((double)i)
    {
        ampc_emu::count(AMPC_EMU_CVT);
    }
    template <class I, typename std::enable_if<std::is_integral<I>::value, int>::type = 0>
    explicit operator I() const
    {
        ampc_emu::count(AMPC_EMU_CVT);
        return (I)v;
    }
    explicit operator bool() const
    {
        ampc_emu::count(AMPC_EMU_F64_CMP);
        return v != 0.0;
    }
    AmpcEmuF64 operator-() const { return AmpcEmuF64(-v); }
    AmpcEmuF64 operator+() const { return *this; }
    template <class B> AmpcEmuF64 &operator+=(const B &b);
    template <class B> AmpcEmuF64 &operator-=(const B &b);
    template <class B> AmpcEmuF64 &operator*=(const B &b);
    template <class B> AmpcEmuF64 &operator/=(const B &b);
};

inline AmpcEmuF32::AmpcEmuF32(AmpcEmuF64 x) : v((float)x.v) { ampc_emu::count(AMPC_EMU_CVT); }

static_assert(sizeof(AmpcEmuF32) == 4 && alignof(AmpcEmuF32) == 4 &&
                  std::is_trivially_copyable<AmpcEmuF32>::value &&
                  std::is_standard_layout<AmpcEmuF32>::value,
              "AmpcEmuF32 must be passed and stored as a float");
static_assert(sizeof(AmpcEmuF64) == 8 && alignof(AmpcEmuF64) == 8 &&
                  std::is_trivially_copyable<AmpcEmuF64>::value &&
                  std::is_standard_layout<AmpcEmuF64>::value,
              "AmpcEmuF64 must be passed and stored as a double");

namespace ampc_emu
{

/* the builtin value of an operand, widened to the operation's type R */
template <class R, class A> inline R operand(const A &a)
{
    typedef value_t<A> V;
    V x = a; /* a device reference loads here */
    if constexpr (std::is_same<V, AmpcEmuF32>::value) {
        if constexpr (std::is_same<R, double>::value)
            count(AMPC_EMU_CVT);
        return (R)x.v;
    } else if constexpr (std::is_same<V, AmpcEmuF64>::value) {
        return (R)x.v;
    } else {
        if constexpr (std::is_integral<V>::value || std::is_enum<V>::value)
            count(AMPC_EMU_CVT);
        return (R)x;
    }
}

/* enabled when one operand counts and both are numbers: the result type
 * (F64 if either is a double, else F32) */
template <class A, class B, class VA = value_t<A>, class VB = value_t<B>>
using result_t = typename std::enable_if<
    (counting<VA>::value || counting<VB>::value) && rank<VA>::value >= 0 && rank<VB>::value >= 0,
    typename std::conditional<(rank<VA>::value > rank<VB>::value ? rank<VA>::value
                                                                 : rank<VB>::value) == 2,
                              AmpcEmuF64, AmpcEmuF32>::type>::type;

template <class R>
using builtin_t =
    typename std::conditional<std::is_same<R, AmpcEmuF64>::value, double, float>::type;
template <class R> constexpr int kind(int f32)
{
    return std::is_same<R, AmpcEmuF64>::value ? f32 + 6 : f32;
}

} // namespace ampc_emu

#define AMPC_EMU_ARITH(op, k)                                                                      \
    template <class A, class B, class R = ampc_emu::result_t<A, B>>                                \
    inline R operator op(const A &a, const B &b)                                                   \
    {                                                                                              \
        typedef ampc_emu::builtin_t<R> T;                                                          \
        T x = ampc_emu::operand<T>(a), y = ampc_emu::operand<T>(b);                                \
        ampc_emu::count(ampc_emu::kind<R>(k));                                                     \
        return R(x op y);                                                                          \
    }
AMPC_EMU_ARITH(+, AMPC_EMU_F32_ADD)
AMPC_EMU_ARITH(-, AMPC_EMU_F32_ADD)
AMPC_EMU_ARITH(*, AMPC_EMU_F32_MUL)
AMPC_EMU_ARITH(/, AMPC_EMU_F32_DIV)
#undef AMPC_EMU_ARITH

#define AMPC_EMU_CMP(op)                                                                           \
    template <class A, class B, class R = ampc_emu::result_t<A, B>>                                \
    inline bool operator op(const A &a, const B &b)                                                \
    {                                                                                              \
        typedef ampc_emu::builtin_t<R> T;                                                          \
        T x = ampc_emu::operand<T>(a), y = ampc_emu::operand<T>(b);                                \
        ampc_emu::count(ampc_emu::kind<R>(AMPC_EMU_F32_CMP));                                      \
        return x op y;                                                                             \
    }
AMPC_EMU_CMP(==)
AMPC_EMU_CMP(!=)
AMPC_EMU_CMP(<)
AMPC_EMU_CMP(>)
AMPC_EMU_CMP(<=)
AMPC_EMU_CMP(>=)
#undef AMPC_EMU_CMP

/* logical not of a number: a compare with zero */
inline bool operator!(AmpcEmuF32 a) { return !(bool)a; }
inline bool operator!(AmpcEmuF64 a) { return !(bool)a; }

#define AMPC_EMU_COMPOUND(T, op)                                                                   \
    template <class B> inline T &T::operator op##=(const B &b)                                     \
    {                                                                                              \
        *this = T(*this op b);                                                                     \
        return *this;                                                                              \
    }
AMPC_EMU_COMPOUND(AmpcEmuF32, +)
AMPC_EMU_COMPOUND(AmpcEmuF32, -)
AMPC_EMU_COMPOUND(AmpcEmuF32, *)
AMPC_EMU_COMPOUND(AmpcEmuF32, /)
AMPC_EMU_COMPOUND(AmpcEmuF64, +)
AMPC_EMU_COMPOUND(AmpcEmuF64, -)
AMPC_EMU_COMPOUND(AmpcEmuF64, *)
AMPC_EMU_COMPOUND(AmpcEmuF64, /)
#undef AMPC_EMU_COMPOUND

/* libm as the kernels call it: each call one FUNC (sqrt: SQRT); fabs free */
#define AMPC_EMU_F1(name, T, base, k)                                                              \
    inline T name(T x)                                                                             \
    {                                                                                              \
        ampc_emu::count(k);                                                                        \
        return T(::base(x.v));                                                                     \
    }
AMPC_EMU_F1(sqrtf, AmpcEmuF32, sqrtf, AMPC_EMU_F32_SQRT)
AMPC_EMU_F1(expf, AmpcEmuF32, expf, AMPC_EMU_F32_FUNC)
AMPC_EMU_F1(logf, AmpcEmuF32, logf, AMPC_EMU_F32_FUNC)
AMPC_EMU_F1(tanhf, AmpcEmuF32, tanhf, AMPC_EMU_F32_FUNC)
AMPC_EMU_F1(log1pf, AmpcEmuF32, log1pf, AMPC_EMU_F32_FUNC)
AMPC_EMU_F1(expm1f, AmpcEmuF32, expm1f, AMPC_EMU_F32_FUNC)
AMPC_EMU_F1(floorf, AmpcEmuF32, floorf, AMPC_EMU_F32_FUNC)
AMPC_EMU_F1(ceilf, AmpcEmuF32, ceilf, AMPC_EMU_F32_FUNC)
AMPC_EMU_F1(roundf, AmpcEmuF32, roundf, AMPC_EMU_F32_FUNC)
/* the unary math of kernels/unary.h (sin ... rint) */
AMPC_EMU_F1(sinf, AmpcEmuF32, sinf, AMPC_EMU_F32_FUNC)
AMPC_EMU_F1(cosf, AmpcEmuF32, cosf, AMPC_EMU_F32_FUNC)
AMPC_EMU_F1(tanf, AmpcEmuF32, tanf, AMPC_EMU_F32_FUNC)
AMPC_EMU_F1(asinf, AmpcEmuF32, asinf, AMPC_EMU_F32_FUNC)
AMPC_EMU_F1(acosf, AmpcEmuF32, acosf, AMPC_EMU_F32_FUNC)
AMPC_EMU_F1(atanf, AmpcEmuF32, atanf, AMPC_EMU_F32_FUNC)
AMPC_EMU_F1(sinhf, AmpcEmuF32, sinhf, AMPC_EMU_F32_FUNC)
AMPC_EMU_F1(coshf, AmpcEmuF32, coshf, AMPC_EMU_F32_FUNC)
AMPC_EMU_F1(asinhf, AmpcEmuF32, asinhf, AMPC_EMU_F32_FUNC)
AMPC_EMU_F1(acoshf, AmpcEmuF32, acoshf, AMPC_EMU_F32_FUNC)
AMPC_EMU_F1(atanhf, AmpcEmuF32, atanhf, AMPC_EMU_F32_FUNC)
AMPC_EMU_F1(log2f, AmpcEmuF32, log2f, AMPC_EMU_F32_FUNC)
AMPC_EMU_F1(log10f, AmpcEmuF32, log10f, AMPC_EMU_F32_FUNC)
AMPC_EMU_F1(cbrtf, AmpcEmuF32, cbrtf, AMPC_EMU_F32_FUNC)
AMPC_EMU_F1(erff, AmpcEmuF32, erff, AMPC_EMU_F32_FUNC)
AMPC_EMU_F1(truncf, AmpcEmuF32, truncf, AMPC_EMU_F32_FUNC)
AMPC_EMU_F1(rintf, AmpcEmuF32, rintf, AMPC_EMU_F32_FUNC)
AMPC_EMU_F1(sqrt, AmpcEmuF64, sqrt, AMPC_EMU_F64_SQRT)
AMPC_EMU_F1(exp, AmpcEmuF64, exp, AMPC_EMU_F64_FUNC)
AMPC_EMU_F1(log, AmpcEmuF64, log, AMPC_EMU_F64_FUNC)
AMPC_EMU_F1(tanh, AmpcEmuF64, tanh, AMPC_EMU_F64_FUNC)
AMPC_EMU_F1(log1p, AmpcEmuF64, log1p, AMPC_EMU_F64_FUNC)
AMPC_EMU_F1(expm1, AmpcEmuF64, expm1, AMPC_EMU_F64_FUNC)
AMPC_EMU_F1(floor, AmpcEmuF64, floor, AMPC_EMU_F64_FUNC)
AMPC_EMU_F1(ceil, AmpcEmuF64, ceil, AMPC_EMU_F64_FUNC)
AMPC_EMU_F1(round, AmpcEmuF64, round, AMPC_EMU_F64_FUNC)
#undef AMPC_EMU_F1
inline AmpcEmuF32 fabsf(AmpcEmuF32 x) { return AmpcEmuF32(::fabsf(x.v)); }
inline AmpcEmuF64 fabs(AmpcEmuF64 x) { return AmpcEmuF64(::fabs(x.v)); }
inline AmpcEmuF64 pow(AmpcEmuF64 x, AmpcEmuF64 y)
{
    ampc_emu::count(AMPC_EMU_F64_FUNC);
    return AmpcEmuF64(::pow(x.v, y.v));
}
inline AmpcEmuF32 powf(AmpcEmuF32 x, AmpcEmuF32 y)
{
    ampc_emu::count(AMPC_EMU_F32_FUNC);
    return AmpcEmuF32(::powf(x.v, y.v));
}
inline AmpcEmuF32 fmaxf(AmpcEmuF32 x, AmpcEmuF32 y)
{
    ampc_emu::count(AMPC_EMU_F32_CMP);
    return AmpcEmuF32(::fmaxf(x.v, y.v));
}
inline AmpcEmuF32 fminf(AmpcEmuF32 x, AmpcEmuF32 y)
{
    ampc_emu::count(AMPC_EMU_F32_CMP);
    return AmpcEmuF32(::fminf(x.v, y.v));
}
/* an explicit fused multiply-add: one MUL and one ADD, one rounding */
inline AmpcEmuF32 fmaf(AmpcEmuF32 x, AmpcEmuF32 y, AmpcEmuF32 z)
{
    ampc_emu::count(AMPC_EMU_F32_MUL);
    ampc_emu::count(AMPC_EMU_F32_ADD);
    return AmpcEmuF32(::fmaf(x.v, y.v, z.v));
}
inline AmpcEmuF64 fma(AmpcEmuF64 x, AmpcEmuF64 y, AmpcEmuF64 z)
{
    ampc_emu::count(AMPC_EMU_F64_MUL);
    ampc_emu::count(AMPC_EMU_F64_ADD);
    return AmpcEmuF64(::fma(x.v, y.v, z.v));
}

/* the bit casts of CUDA's device library */
inline AmpcEmuF32 __int_as_float(int i)
{
    AmpcEmuF32 f;
    memcpy(&f, &i, 4);
    return f;
}
inline AmpcEmuF32 __uint_as_float(unsigned u)
{
    AmpcEmuF32 f;
    memcpy(&f, &u, 4);
    return f;
}
inline int __float_as_int(AmpcEmuF32 f)
{
    int i;
    memcpy(&i, &f, 4);
    return i;
}
inline unsigned __float_as_uint(AmpcEmuF32 f)
{
    unsigned u;
    memcpy(&u, &f, 4);
    return u;
}

#define float AmpcEmuF32
#define double AmpcEmuF64

/* ---- device pointers ---------------------------------------------------------------------- */

template <class T> class ampc_dptr;

namespace ampc_emu
{
template <class T> inline typename std::remove_cv<T>::type load(T *p)
{
    typedef typename std::remove_cv<T>::type V;
    V v;
    memcpy((void *)&v, ampc_emu_access(p, sizeof(V), alignof(V), AMPC_EMU_LOAD), sizeof v);
    return v;
}
template <class T> inline void store(T *p, const T &v)
{
    memcpy(ampc_emu_access(p, sizeof(T), alignof(T), AMPC_EMU_STORE), (const void *)&v, sizeof v);
}
} // namespace ampc_emu

/* An element of device memory: reading it loads, assigning it stores. */
template <class T> class ampc_dref
{
    T *p_;
    typedef typename std::remove_cv<T>::type V;

  public:
    explicit ampc_dref(T *p) : p_(p) {}
    ampc_dref(const ampc_dref &) = default;
    operator V() const { return ampc_emu::load(p_); }
    /* double s = x[i] (x of float): the counting types convert as C's do */
    template <class U, typename std::enable_if<
                           ampc_emu::counting<U>::value && ampc_emu::counting<V>::value &&
                               !std::is_same<U, V>::value && std::is_convertible<V, U>::value,
                           int>::type = 0>
    operator U() const
    {
        return U(ampc_emu::load(p_));
    }
    /* (int)x[i], (bool)x[i]: through the value */
    template <class U,
              typename std::enable_if<!ampc_emu::counting<U>::value && !std::is_same<U, V>::value &&
                                          std::is_constructible<U, V>::value,
                                      int>::type = 0>
    explicit operator U() const
    {
        return U(ampc_emu::load(p_));
    }
    const ampc_dref &operator=(const V &v) const
    {
        static_assert(!std::is_const<T>::value, "a store through a pointer to const");
        ampc_emu::store(p_, v);
        return *this;
    }
    const ampc_dref &operator=(const ampc_dref &o) const { return *this = (V)o; }
    template <class B> const ampc_dref &operator+=(const B &b) const
    {
        return *this = V(V(*this) + b);
    }
    template <class B> const ampc_dref &operator-=(const B &b) const
    {
        return *this = V(V(*this) - b);
    }
    template <class B> const ampc_dref &operator*=(const B &b) const
    {
        return *this = V(V(*this) * b);
    }
    template <class B> const ampc_dref &operator|=(const B &b) const
    {
        return *this = V(V(*this) | b);
    }
    template <class B> const ampc_dref &operator&=(const B &b) const
    {
        return *this = V(V(*this) & b);
    }
    V operator++(int) const
    {
        V old = *this;
        *this = V(old + 1);
        return old;
    }
    const ampc_dref &operator++() const { return *this = V(V(*this) + 1); }
    ampc_dptr<T> operator&() const { return ampc_dptr<T>(p_); }
};

template <class T>
inline auto operator-(const ampc_dref<T> &x)
    -> decltype(-std::declval<typename std::remove_cv<T>::type>())
{
    typedef typename std::remove_cv<T>::type V;
    return -V(x);
}

namespace ampc_emu
{
/* p[i]: a reference, or for a 2-D shared array (T = E[N]) the row's pointer */
template <class T> struct index {
    typedef ampc_dref<T> type;
    static type at(T *p) { return type(p); }
};
template <class E, size_t N> struct index<E[N]> {
    typedef ampc_dptr<E> type;
    static type at(E (*p)[N]) { return type(*p); }
};
} // namespace ampc_emu

template <class T> class ampc_dptr
{
    T *p_;

  public:
    ampc_dptr() = default;
    ampc_dptr(T *p) : p_(p) {} /* a launch argument, a table's field */
    template <class U, typename std::enable_if<std::is_convertible<U *, T *>::value, int>::type = 0>
    ampc_dptr(ampc_dptr<U> o) : p_(o.ampc_raw())
    {
    }
    /* ampc_dptr<const float>(p): a reinterpreting cast, as (const float *)p */
    template <class U,
              typename std::enable_if<!std::is_convertible<U *, T *>::value, int>::type = 0>
    explicit ampc_dptr(ampc_dptr<U> o) : p_((T *)(o.ampc_raw()))
    {
    }
    T *ampc_raw() const { return p_; } /* the emulator's, not the kernels' */
    template <class I, typename std::enable_if<std::is_integral<I>::value, int>::type = 0>
    typename ampc_emu::index<T>::type operator[](I i) const
    {
        return ampc_emu::index<T>::at(p_ + i);
    }
    typename ampc_emu::index<T>::type operator*() const { return ampc_emu::index<T>::at(p_); }
    template <class I, typename std::enable_if<std::is_integral<I>::value, int>::type = 0>
    ampc_dptr operator+(I i) const
    {
        return ampc_dptr(p_ + i);
    }
    template <class I, typename std::enable_if<std::is_integral<I>::value, int>::type = 0>
    ampc_dptr operator-(I i) const
    {
        return ampc_dptr(p_ - i);
    }
    ptrdiff_t operator-(ampc_dptr o) const { return p_ - o.p_; }
    template <class I> ampc_dptr &operator+=(I i) { return p_ += i, *this; }
    ampc_dptr &operator++() { return ++p_, *this; }
    explicit operator bool() const { return p_ != nullptr; }
    bool operator!() const { return p_ == nullptr; }
    bool operator==(ampc_dptr o) const { return p_ == o.p_; }
    bool operator!=(ampc_dptr o) const { return p_ != o.p_; }
    bool operator<(ampc_dptr o) const { return p_ < o.p_; }
};

/* (T *)p for device pointers (kernel_api.cuh) */
template <class T, class U> inline ampc_dptr<T> ampc_dcast(ampc_dptr<U> p)
{
    return ampc_dptr<T>((T *)(void *)const_cast<typename std::remove_cv<U>::type *>(p.ampc_raw()));
}
template <class T> inline ampc_dptr<T> ampc_dcast(const void *p)
{
    return ampc_dptr<T>((T *)(void *)p);
}

/* the 16-byte and 8-byte vectors of CUDA (their alignment is the point) */
struct alignas(16) float4 {
    float x, y, z, w;
};
struct alignas(16) uint4 {
    unsigned x, y, z, w;
};
struct alignas(16) int4 {
    int x, y, z, w;
};
struct alignas(8) float2 {
    float x, y;
};
struct alignas(8) uint2 {
    unsigned x, y;
};
inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w)
{
    return uint4{x, y, z, w};
}
inline float2 make_float2(float x, float y) { return float2{x, y}; }

/* __ldg: a load through the read-only cache */
template <class T> inline T __ldg(ampc_dptr<const T> p) { return *p; }

/* ---- shared memory ------------------------------------------------------------------------ */

struct AmpcEmuSharedTag {
    char at;
};
#define AMPC_EMU_SHARED(T, name, bytes)                                                            \
    static AmpcEmuSharedTag name##_ampc_tag;                                                       \
    ampc_dptr<T> name((std::add_pointer<T>::type)ampc_emu_shared(                                  \
        &name##_ampc_tag, (bytes), alignof(T), #name, __FILE__, __LINE__))

/* ---- barriers and warp primitives ----------------------------------------------------------- */

#define __syncthreads() ampc_emu_syncthreads(__FILE__, __LINE__)

/* __syncwarp(mask), __shfl_sync(mask, v, lane, width), ...: the name is a
 * functor holding its call site, so the optional arguments stay optional */
struct AmpcEmuSite {
    int op;
    const char *file;
    int line;
    void operator()(unsigned mask = 0xffffffffu) const
    {
        ampc_emu_warp(AMPC_EMU_SYNCWARP, mask, 0, 0, 32, file, line);
    }
    template <class T> T operator()(unsigned mask, T v, int arg, int width = 32) const
    {
        static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value,
                      "a shuffle moves at most 8 bytes");
        uint64_t bits = 0;
        memcpy(&bits, (const void *)&v, sizeof v);
        bits = ampc_emu_warp(op, mask, bits, arg, width, file, line);
        T out;
        memcpy((void *)&out, &bits, sizeof out);
        return out;
    }
};
struct AmpcEmuVote {
    int op;
    const char *file;
    int line;
    template <class P> uint64_t vote(unsigned mask, const P &p) const
    {
        return ampc_emu_warp(op, mask, p ? 1 : 0, 0, 32, file, line);
    }
};
struct AmpcEmuBallot : AmpcEmuVote {
    template <class P> unsigned operator()(unsigned mask, const P &p) const
    {
        return (unsigned)vote(mask, p);
    }
};
struct AmpcEmuAnyAll : AmpcEmuVote {
    template <class P> int operator()(unsigned mask, const P &p) const
    {
        return (int)vote(mask, p);
    }
};
#define __syncwarp (AmpcEmuSite{AMPC_EMU_SYNCWARP, __FILE__, __LINE__})
#define __shfl_sync (AmpcEmuSite{AMPC_EMU_SHFL, __FILE__, __LINE__})
#define __shfl_up_sync (AmpcEmuSite{AMPC_EMU_SHFL_UP, __FILE__, __LINE__})
#define __shfl_down_sync (AmpcEmuSite{AMPC_EMU_SHFL_DOWN, __FILE__, __LINE__})
#define __shfl_xor_sync (AmpcEmuSite{AMPC_EMU_SHFL_XOR, __FILE__, __LINE__})
#define __ballot_sync (AmpcEmuBallot{{AMPC_EMU_BALLOT, __FILE__, __LINE__}})
#define __any_sync (AmpcEmuAnyAll{{AMPC_EMU_ANY, __FILE__, __LINE__}})
#define __all_sync (AmpcEmuAnyAll{{AMPC_EMU_ALL, __FILE__, __LINE__}})

/* before sm_70 lanes ran in lockstep; these assumed it */
#pragma GCC poison __shfl __shfl_up __shfl_down __shfl_xor __ballot __any __all

/* ---- atomics -------------------------------------------------------------------------------- */

namespace ampc_emu
{
template <class T> struct atype;
template <> struct atype<int> : std::integral_constant<int, AMPC_EMU_I32> {
};
template <> struct atype<unsigned> : std::integral_constant<int, AMPC_EMU_U32> {
};
template <> struct atype<unsigned long long> : std::integral_constant<int, AMPC_EMU_U64> {
};
template <> struct atype<long long> : std::integral_constant<int, AMPC_EMU_I64> {
};
template <> struct atype<AmpcEmuF32> : std::integral_constant<int, AMPC_EMU_T_F32> {
};
template <> struct atype<AmpcEmuF64> : std::integral_constant<int, AMPC_EMU_T_F64> {
};

template <class T> inline T atomic(ampc_dptr<T> p, int op, T v, T cmp = T())
{
    uint64_t bv = 0, bc = 0;
    memcpy(&bv, (const void *)&v, sizeof v);
    memcpy(&bc, (const void *)&cmp, sizeof cmp);
    uint64_t old = ampc_emu_atomic((void *)p.ampc_raw(), atype<T>::value, op, bv, bc);
    T r;
    memcpy((void *)&r, &old, sizeof r);
    return r;
}
} // namespace ampc_emu

#define AMPC_EMU_ATOMIC(name, op, T)                                                               \
    inline T name(ampc_dptr<T> p, T v) { return ampc_emu::atomic<T>(p, op, v); }
AMPC_EMU_ATOMIC(atomicAdd, AMPC_EMU_ATOM_ADD, int)
AMPC_EMU_ATOMIC(atomicAdd, AMPC_EMU_ATOM_ADD, unsigned)
AMPC_EMU_ATOMIC(atomicAdd, AMPC_EMU_ATOM_ADD, unsigned long long)
AMPC_EMU_ATOMIC(atomicAdd, AMPC_EMU_ATOM_ADD, float)
AMPC_EMU_ATOMIC(atomicAdd, AMPC_EMU_ATOM_ADD, double)
AMPC_EMU_ATOMIC(atomicSub, AMPC_EMU_ATOM_SUB, int)
AMPC_EMU_ATOMIC(atomicSub, AMPC_EMU_ATOM_SUB, unsigned)
AMPC_EMU_ATOMIC(atomicExch, AMPC_EMU_ATOM_EXCH, int)
AMPC_EMU_ATOMIC(atomicExch, AMPC_EMU_ATOM_EXCH, unsigned)
AMPC_EMU_ATOMIC(atomicExch, AMPC_EMU_ATOM_EXCH, unsigned long long)
AMPC_EMU_ATOMIC(atomicExch, AMPC_EMU_ATOM_EXCH, float)
AMPC_EMU_ATOMIC(atomicMin, AMPC_EMU_ATOM_MIN, int)
AMPC_EMU_ATOMIC(atomicMin, AMPC_EMU_ATOM_MIN, unsigned)
AMPC_EMU_ATOMIC(atomicMin, AMPC_EMU_ATOM_MIN, long long)
AMPC_EMU_ATOMIC(atomicMin, AMPC_EMU_ATOM_MIN, unsigned long long)
AMPC_EMU_ATOMIC(atomicMax, AMPC_EMU_ATOM_MAX, int)
AMPC_EMU_ATOMIC(atomicMax, AMPC_EMU_ATOM_MAX, unsigned)
AMPC_EMU_ATOMIC(atomicMax, AMPC_EMU_ATOM_MAX, long long)
AMPC_EMU_ATOMIC(atomicMax, AMPC_EMU_ATOM_MAX, unsigned long long)
AMPC_EMU_ATOMIC(atomicAnd, AMPC_EMU_ATOM_AND, int)
AMPC_EMU_ATOMIC(atomicAnd, AMPC_EMU_ATOM_AND, unsigned)
AMPC_EMU_ATOMIC(atomicAnd, AMPC_EMU_ATOM_AND, unsigned long long)
AMPC_EMU_ATOMIC(atomicOr, AMPC_EMU_ATOM_OR, int)
AMPC_EMU_ATOMIC(atomicOr, AMPC_EMU_ATOM_OR, unsigned)
AMPC_EMU_ATOMIC(atomicOr, AMPC_EMU_ATOM_OR, unsigned long long)
AMPC_EMU_ATOMIC(atomicXor, AMPC_EMU_ATOM_XOR, int)
AMPC_EMU_ATOMIC(atomicXor, AMPC_EMU_ATOM_XOR, unsigned)
AMPC_EMU_ATOMIC(atomicInc, AMPC_EMU_ATOM_INC, unsigned)
AMPC_EMU_ATOMIC(atomicDec, AMPC_EMU_ATOM_DEC, unsigned)
#undef AMPC_EMU_ATOMIC
inline int atomicCAS(ampc_dptr<int> p, int cmp, int v)
{
    return ampc_emu::atomic<int>(p, AMPC_EMU_ATOM_CAS, v, cmp);
}
inline unsigned atomicCAS(ampc_dptr<unsigned> p, unsigned cmp, unsigned v)
{
    return ampc_emu::atomic<unsigned>(p, AMPC_EMU_ATOM_CAS, v, cmp);
}
inline unsigned long long atomicCAS(ampc_dptr<unsigned long long> p, unsigned long long cmp,
                                    unsigned long long v)
{
    return ampc_emu::atomic<unsigned long long>(p, AMPC_EMU_ATOM_CAS, v, cmp);
}

/* ---- the launch ------------------------------------------------------------------------------ */

namespace ampc_emu
{
template <class T> struct raw_pointer : std::is_pointer<T> {
};

template <class... P> struct call {
    void (*kernel)(P...);
    std::tuple<P...> args;
};
template <class... P> void run_call(void *c)
{
    call<P...> *k = (call<P...> *)c;
    std::apply(k->kernel, k->args); /* each thread its own copy of the parameters */
}

template <class... P, class... A>
inline int launch(const char *name, void (*kernel)(P...), dim3 grid, dim3 block, size_t shared,
                  cudaStream_t stream, A &&...a)
{
    static_assert(!(raw_pointer<P>::value || ...),
                  "a kernel parameter is a raw pointer: declare device pointers as ampc_dptr<T> "
                  "(cuda/kernel_api.cuh), so the emulator sees every access");
    (void)stream;
    call<P...> c{kernel, std::tuple<P...>(std::forward<A>(a)...)};
    return ampc_emu_launch(name, grid, block, shared, run_call<P...>, &c);
}
} // namespace ampc_emu

#endif /* AMPC_CUDA_EMU_CUDA_H */
