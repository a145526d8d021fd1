/*
 * optim_bw.c - make gpu-check (d): the fused optimizer (ampc_cu_mt_optim,
 * one launch over every parameter) against a device-to-device copy of the
 * same bytes, on ResNet-50 v1d's parameters as examples/resnet50_v1d.sym
 * stores them with amp = float16 and nag(multi_precision=true):
 *
 *   - the 55 convolution weights and the FullyConnected weight and bias:
 *     float16 gradient and shadow, fp32 master and momentum;
 *   - the 110 BatchNorm gamma and beta: fp32 gradient, weight and momentum
 *     (no master), weight decay 0 (wd_mult=0, as the FC bias).
 *
 * Bytes per parameter (docs/backend-cuda.md, "Bytes per parameter"), each
 * element read and written once:
 *   16-bit with master: reads g 2 + w32 4 + m 4, writes m 4 + w32 4 + w16 2 = 20
 *   fp32:               reads g 4 + w 4 + m 4,   writes m 4 + w 4            = 20
 * so one step moves B = 20 x 25,576,264 bytes.  The copy moves the same B:
 * cudaMemcpyAsync of B/2 bytes (each byte read once and written once).
 * GB/s = B / median time (1e9 bytes); the percent is optimizer / copy.
 *
 *   optim_bw           time both (5 warm-up launches, then 50 timed each with
 *                      CUDA events, the median), print one line per row
 *   optim_bw --sizes   print the tensor counts and totals only (no GPU: the
 *                      dry run checks them against ampc --report)
 *
 * Exit 0, 1 on a CUDA failure, 3 without a usable GPU (the message names
 * the call and the CUDA error).
 */
#include <cuda_runtime_api.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/ampc_cuda.h"

#define CHECK(call)                                                                           \
    do {                                                                                      \
        cudaError_t e_ = (call);                                                              \
        if (e_ != cudaSuccess) {                                                              \
            printf("optim_bw: %s:%d: %s: %s\n", __FILE__, __LINE__, #call,                    \
                   cudaGetErrorString(e_));                                                   \
            exit(e_ == cudaErrorNoDevice || e_ == cudaErrorInsufficientDriver ? 3 : 1);       \
        }                                                                                     \
    } while (0)

enum { MAXT = 200, WARMUP = 5, TIMED = 50 };

/* one parameter: elements, 16-bit with an fp32 master, weight decay */
typedef struct {
    int64_t n;
    int half;
    float wd_mult;
} Spec;

static Spec spec[MAXT];
static int nspec;

static void add(int64_t n, int half, float wd_mult)
{
    if (nspec == MAXT) {
        fprintf(stderr, "optim_bw: more than %d tensors\n", MAXT);
        exit(1);
    }
    spec[nspec++] = (Spec){n, half, wd_mult};
}

/* conv weight [cout, cin, k, k] (16-bit) and its BatchNorm's gamma, beta */
static void conv_bn(int64_t cin, int64_t cout, int64_t k)
{
    add(cout * cin * k * k, 1, 1.0f);
    add(cout, 0, 0.0f);
    add(cout, 0, 0.0f);
}

/* examples/resnet50_v1d.sym's parameters */
static void resnet50_v1d(void)
{
    conv_bn(3, 32, 3);
    conv_bn(32, 32, 3);
    conv_bn(32, 64, 3);
    static const int64_t widths[4] = {64, 128, 256, 512}, blocks[4] = {3, 4, 6, 3};
    int64_t cin = 64;
    for (int s = 0; s < 4; s++) {
        int64_t c = widths[s];
        for (int64_t b = 0; b < blocks[s]; b++) {
            if (b == 0)
                conv_bn(cin, c * 4, 1); /* the projection shortcut */
            conv_bn(cin, c, 1);
            conv_bn(c, c, 3);
            conv_bn(c, c * 4, 1);
            cin = c * 4;
        }
    }
    add(1000 * 2048, 1, 1.0f);
    add(1000, 1, 0.0f);
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

static float median(float *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_float);
    return n % 2 ? v[n / 2] : 0.5f * (v[n / 2 - 1] + v[n / 2]);
}

static void *dev_alloc(size_t bytes)
{
    void *p = NULL;
    CHECK(cudaMalloc(&p, bytes));
    return p;
}

int main(int argc, char **argv)
{
    int sizes_only = argc == 2 && !strcmp(argv[1], "--sizes");
    if (argc > 1 && !sizes_only) {
        fprintf(stderr, "usage: optim_bw [--sizes]\n");
        return 2;
    }
    resnet50_v1d();
    int64_t total = 0, master_n = 0, bytes = 0;
    int nmaster = 0;
    for (int i = 0; i < nspec; i++) {
        total += spec[i].n;
        bytes += 20 * spec[i].n;
        if (spec[i].half)
            master_n += spec[i].n, nmaster++;
    }
    printf("optim_bw: resnet50_v1d: %lld trainable values in %d tensors, %lld in %d with fp32 "
           "masters; 20 bytes per parameter, %lld bytes per step\n",
           (long long)total, nspec, (long long)master_n, nmaster, (long long)bytes);
    if (sizes_only)
        return 0;

    AmpcMtTensor t[MAXT];
    for (int i = 0; i < nspec; i++) {
        size_t n = (size_t)spec[i].n, wsz = spec[i].half ? 2 : 4;
        int dt = spec[i].half ? AMPC_DT_F16 : AMPC_DT_F32;
        t[i] = (AmpcMtTensor){.grad = dev_alloc(n * wsz), .weight = dev_alloc(n * wsz),
                              .master = spec[i].half ? dev_alloc(n * 4) : NULL,
                              .mom = dev_alloc(n * 4), .var = NULL, .n = spec[i].n,
                              .lr_mult = 1.0f, .wd_mult = spec[i].wd_mult, .gdt = dt, .wdt = dt};
        CHECK((cudaError_t)ampc_cu_fill(NULL, (void *)t[i].grad, dt, n, 1e-3f));
        CHECK((cudaError_t)ampc_cu_fill(NULL, t[i].weight, dt, n, 0.01f));
        if (t[i].master)
            CHECK((cudaError_t)ampc_cu_fill(NULL, t[i].master, AMPC_DT_F32, n, 0.01f));
        CHECK(cudaMemset(t[i].mom, 0, n * 4));
    }
    int64_t nblocks = ampc_mt_count_blocks(t, nspec, AMPC_MT_CHUNK);
    AmpcMtBlock *blocks = malloc(sizeof *blocks * (size_t)nblocks);
    if (nblocks <= 0 || !blocks || ampc_mt_fill_blocks(t, nspec, AMPC_MT_CHUNK, blocks) != nblocks) {
        fprintf(stderr, "optim_bw: cannot build the block table\n");
        return 1;
    }
    AmpcMtTensor *dt = dev_alloc(sizeof t[0] * (size_t)nspec);
    AmpcMtBlock *db = dev_alloc(sizeof *blocks * (size_t)nblocks);
    int32_t *found = dev_alloc(sizeof *found);
    CHECK(cudaMemcpy(dt, t, sizeof t[0] * (size_t)nspec, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(db, blocks, sizeof *blocks * (size_t)nblocks, cudaMemcpyHostToDevice));
    CHECK(cudaMemset(found, 0, sizeof *found));
    AmpcMtStep step = {.kind = AMPC_OPT_NAG, .lr = 0.1f, .wd = 1e-4f, .momentum = 0.9f,
                       .clip_gradient = -1.0f, .beta1 = 0.9f, .beta2 = 0.999f,
                       .epsilon = 1e-8f, .rescale_grad = 1.0f / 256, .batch = 256,
                       .adam_corr = 1.0};
    size_t half_bytes = (size_t)bytes / 2;
    void *src = dev_alloc(half_bytes), *dst = dev_alloc(half_bytes);
    CHECK(cudaMemset(src, 1, half_bytes));

    cudaStream_t s;
    cudaEvent_t ev[2 * TIMED];
    CHECK(cudaStreamCreate(&s));
    for (int i = 0; i < 2 * TIMED; i++)
        CHECK(cudaEventCreate(&ev[i]));
    float ms_opt[TIMED], ms_copy[TIMED];
    for (int pass = 0; pass < 2; pass++) {
        float *ms = pass ? ms_copy : ms_opt;
        for (int i = -WARMUP; i < TIMED; i++) {
            if (i >= 0)
                CHECK(cudaEventRecord(ev[2 * i], s));
            if (pass)
                CHECK(cudaMemcpyAsync(dst, src, half_bytes, cudaMemcpyDeviceToDevice, s));
            else
                CHECK((cudaError_t)ampc_cu_mt_optim(s, dt, db, nblocks, AMPC_MT_CHUNK, &step,
                                                    NULL, NULL, found, NULL));
            if (i >= 0)
                CHECK(cudaEventRecord(ev[2 * i + 1], s));
        }
        CHECK(cudaStreamSynchronize(s));
        for (int i = 0; i < TIMED; i++)
            CHECK(cudaEventElapsedTime(&ms[i], ev[2 * i], ev[2 * i + 1]));
    }
    int32_t flag = 0;
    CHECK(cudaMemcpy(&flag, found, sizeof flag, cudaMemcpyDeviceToHost));
    float mo = median(ms_opt, TIMED), mc = median(ms_copy, TIMED);
    double gbo = (double)bytes / (mo * 1e-3) / 1e9, gbc = (double)bytes / (mc * 1e-3) / 1e9;
    printf("optim_bw: optimizer %.3f ms %.1f GB/s; copy %.3f ms %.1f GB/s; %.1f%% of copy "
           "(median of %d after %d warm-up)\n", mo, gbo, mc, gbc, 100.0 * gbo / gbc, TIMED,
           WARMUP);
    if (flag) {
        printf("optim_bw: the optimizer's finite check fired on finite gradients\n");
        return 1;
    }
    return 0;
}
