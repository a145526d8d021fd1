/*
 * cuda_kernels_gpu.c - the GPU test of the custom kernels (make gpu-check,
 * part (a) for the kernels of runtime/cuda/kernels.cuh): each kernel run on
 * the device against its CPU twin in libampcrt.a, on the cases of the
 * emulation test (tests/runtime/test_cuda_emu.c): every dtype, odd sizes
 * and the grid-stride edges, subnormals, -0, values past the fp16 range,
 * inf and NaN.  Bit for bit, with NaN compared as NaN (the GPU returns the
 * canonical NaN where the host keeps a payload).  Prints one table row per
 * kernel: cases run, elements compared, mismatches.
 *
 * Exit 0 when all agree, 1 on a mismatch, 3 without a usable GPU (the
 * message names the CUDA call and its error).  make cuda-check builds and
 * links it everywhere (so it cannot rot); it runs only where a GPU is.
 */
#include <cuda_runtime_api.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/ampc_cuda.h"
#include "kernels/half.h"
#include "rt.h"
#include "train.h"

#define CHECK(call)                                                                           \
    do {                                                                                      \
        cudaError_t e_ = (call);                                                              \
        if (e_ != cudaSuccess) {                                                              \
            printf("cuda_kernels_gpu: %s:%d: %s: %s\n", __FILE__, __LINE__, #call,            \
                   cudaGetErrorString(e_));                                                   \
            exit(e_ == cudaErrorNoDevice || e_ == cudaErrorInsufficientDriver ? 3 : 1);       \
        }                                                                                     \
    } while (0)

static const size_t sizes[] = {1, 7, 255, 256, 257, 1000, 3001, 1048577, 2 * 1048576 + 5};
enum { NSIZES = sizeof sizes / sizeof sizes[0] };

typedef struct {
    const char *name;
    long cases, elems, bad;
} Row;
static Row rows[16];
static int nrows;

static Row *row(const char *name)
{
    for (int i = 0; i < nrows; i++)
        if (!strcmp(rows[i].name, name))
            return &rows[i];
    rows[nrows].name = name;
    return &rows[nrows++];
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}

static float value(void)
{
    unsigned r = (unsigned)(next() % 100);
    float sign = (next() & 1) ? -1.0f : 1.0f, u = (float)(next() >> 40) / 16777216.0f;
    if (r < 5) {
        uint32_t b = (uint32_t)(next() & 0x807fffffu);
        float f;
        memcpy(&f, &b, 4);
        return f;
    }
    if (r < 10)
        return sign * u * 6.0e-5f;
    if (r < 13)
        return sign * (65504.0f + u * 100.0f);
    if (r < 15)
        return -0.0f;
    if (r < 17)
        return sign * INFINITY;
    if (r < 19)
        return NAN;
    return sign * u * 8.0f;
}

static size_t es(int dt) { return dt == RT_F32 ? 4 : 2; }

static void fill(void *p, int dt, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float v = value();
        if (dt == RT_F32)
            ((float *)p)[i] = v;
        else if (dt == RT_F16)
            ((uint16_t *)p)[i] = ampc_float_to_half(v);
        else
            ((uint16_t *)p)[i] = ampc_float_to_bf16(v);
    }
}

static int isnan_at(const void *p, size_t i, int dt)
{
    if (dt == RT_F32) {
        float v = ((const float *)p)[i];
        return v != v;
    }
    uint16_t h = ((const uint16_t *)p)[i];
    return dt == RT_F16 ? ampc_half_isnan(h) : ampc_bf16_isnan(h);
}

/* compares the device buffer d with the host result want */
static void compare(const char *name, const void *d, const void *want, size_t n, int dt)
{
    static unsigned char *got;
    if (!got && !(got = malloc(2 * 1048576 * 4 + 64))) {
        printf("cuda_kernels_gpu: out of memory\n");
        exit(1);
    }
    CHECK(cudaMemcpy(got, d, n * es(dt), cudaMemcpyDeviceToHost));
    Row *r = row(name);
    r->cases++;
    r->elems += (long)n;
    for (size_t i = 0; i < n; i++)
        if (memcmp(got + i * es(dt), (const char *)want + i * es(dt), es(dt)) &&
            !(isnan_at(got, i, dt) && isnan_at(want, i, dt))) {
            if (r->bad < 3)
                printf("  %s: dtype %d, n %zu, element %zu differs\n", name, dt, n, i);
            r->bad++;
        }
}

static void *dev(const void *h, size_t bytes)
{
    void *d;
    CHECK(cudaMalloc(&d, bytes ? bytes : 4));
    if (h && bytes)
        CHECK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
    return d;
}

#define RUN(call) CHECK((cudaError_t)(call))

int main(void)
{
    int ndev = 0;
    CHECK(cudaGetDeviceCount(&ndev));
    size_t big = sizes[NSIZES - 1];
    float *a = malloc(big * 4), *b = malloc(big * 4), *g = malloc(big * 4), *y = malloc(big * 4),
          *y2 = malloc(big * 4);
    if (!a || !b || !g || !y || !y2) {
        printf("cuda_kernels_gpu: out of memory\n");
        return 1;
    }
    for (int k = 0; k < NSIZES; k++)
        for (int dt = 0; dt < 3; dt++) {
            size_t n = sizes[k], bytes = n * es(dt);
            fill(a, dt, n), fill(b, dt, n), fill(g, dt, n), fill(y, dt, n);
            void *da = dev(a, bytes), *db = dev(b, bytes), *dg = dev(g, bytes);
            void *dy = dev(NULL, big * 4), *dz = dev(NULL, big * 4);
            for (int to = 0; to < 3; to++)
                for (int acc = 0; acc < 2; acc++) {
                    fill(y2, to, n);
                    CHECK(cudaMemcpy(dy, y2, n * es(to), cudaMemcpyHostToDevice));
                    if (acc)
                        rt_cast_backward(n, (RtDType)dt, a, (RtDType)to, y2, true);
                    else
                        rt_cast_forward(n, (RtDType)dt, a, (RtDType)to, y2);
                    RUN(ampc_cu_cast(NULL, n, dt, da, to, dy, acc));
                    compare("cast", dy, y2, n, to);
                }
            for (int op = 0; op < 3; op++) {
                rt_elemwise_forward((RtBinOp)op, n, (RtDType)dt, a, b, y);
                RUN(ampc_cu_binary(NULL, op, n, dt, da, db, dy));
                compare("binary", dy, y, n, dt);
                fill(y, dt, n), fill(y2, dt, n);
                CHECK(cudaMemcpy(dy, y, bytes, cudaMemcpyHostToDevice));
                CHECK(cudaMemcpy(dz, y2, bytes, cudaMemcpyHostToDevice));
                rt_elemwise_backward((RtBinOp)op, n, (RtDType)dt, g, a, b, y, y2, op != 1, true);
                RUN(ampc_cu_binary_backward(NULL, op, n, dt, dg, da, db, dy, dz, op != 1, 1));
                compare("binary_backward", dy, y, n, dt);
                compare("binary_backward", dz, y2, n, dt);
            }
            for (int op = 0; op < 6; op++) {
                float s = op == 4 ? 0.75f : op == 5 ? -3.0f : 1e-40f;
                rt_scalar_forward((RtScalarOp)op, n, (RtDType)dt, a, s, y);
                RUN(ampc_cu_scalar(NULL, op, n, dt, da, s, dy));
                compare("scalar", dy, y, n, dt);
                fill(y, dt, n);
                CHECK(cudaMemcpy(dy, y, bytes, cudaMemcpyHostToDevice));
                rt_scalar_backward((RtScalarOp)op, n, (RtDType)dt, a, s, g, y, true);
                RUN(ampc_cu_scalar_backward(NULL, op, n, dt, da, s, dg, dy, 1));
                compare("scalar_backward", dy, y, n, dt);
            }
            rt_add_relu_forward(n, (RtDType)dt, a, b, y);
            RUN(ampc_cu_add_relu(NULL, n, dt, da, db, dy));
            compare("add_relu", dy, y, n, dt);
            rt_activation_forward(RT_ACT_RELU, n, (RtDType)dt, a, y);
            RUN(ampc_cu_relu(NULL, n, dt, da, dy));
            compare("relu", dy, y, n, dt);
            fill(y, dt, n);
            CHECK(cudaMemcpy(dy, y, bytes, cudaMemcpyHostToDevice));
            rt_activation_backward(RT_ACT_RELU, n, (RtDType)dt, NULL, a, g, y, true);
            RUN(ampc_cu_relu_backward(NULL, n, dt, da, dg, dy, 1));
            compare("relu_backward", dy, y, n, dt);
            /* the finite check: its flag against rt_all_finite */
            int32_t *flag = dev(NULL, 4);
            RUN(ampc_cu_set_flag(NULL, flag, 0));
            RUN(ampc_cu_finite(NULL, da, n, dt, flag));
            int want = !rt_all_finite(a, n, (RtDType)dt);
            compare("finite", flag, &want, 1, RT_F32);
            CHECK(cudaFree(flag));
            CHECK(cudaFree(da));
            CHECK(cudaFree(db));
            CHECK(cudaFree(dg));
            CHECK(cudaFree(dy));
            CHECK(cudaFree(dz));
        }
    /* the loss scale: 1000 steps of random flags, the state after each */
    {
        RtLossScaleConfig cfg = {RT_LS_DYNAMIC, 65536.0f, 2.0f, 0.5f, 3, 0.0f, 16777216.0f};
        RtLossScaler ls;
        rt_loss_scaler_init(&ls, &cfg, "float16");
        AmpcLossScale *ds = dev(&ls.s, sizeof ls.s);
        int32_t *flag = dev(NULL, 4);
        for (int step = 0; step < 1000; step++) {
            int32_t f = next() % 100 < 20;
            CHECK(cudaMemcpy(flag, &f, 4, cudaMemcpyHostToDevice));
            RUN(ampc_cu_loss_scale(NULL, ds, flag, ls.rule, NULL));
            rt_loss_scaler_update(&ls, !f, NULL, NULL);
            compare("loss_scale", ds, &ls.s, 2, RT_F32); /* scale and tracker, as 2 words */
        }
        CHECK(cudaFree(ds));
        CHECK(cudaFree(flag));
    }
    CHECK(cudaDeviceSynchronize());
    long bad = 0;
    printf("%-18s %8s %12s %10s\n", "kernel", "cases", "elements", "mismatches");
    for (int i = 0; i < nrows; i++) {
        printf("%-18s %8ld %12ld %10ld\n", rows[i].name, rows[i].cases, rows[i].elems, rows[i].bad);
        bad += rows[i].bad;
    }
    printf("cuda_kernels_gpu: %s\n", bad ? "FAILED" : "every kernel equals its CPU twin, bit for bit");
    free(a), free(b), free(g), free(y), free(y2);
    return bad ? 1 : 0;
}
