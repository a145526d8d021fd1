/* cuda_dnn_offline.c - run by `make cuda-check` where the toolkit is (no GPU
 * needed; not under ASan, as cuda_libs_smoke): the offline check of
 * runtime/cuda/dnn.c and blas.c (--cudnn-check, docs/backend-cuda.md) can
 * fail.  A valid convolution of each pass and dtype builds its cuDNN graph
 * and gets heuristic candidates; the same convolution with a wrong filter
 * stride, a wrong tensor stride or mismatched channels is refused by cuDNN
 * with a message naming the node; the forward fused with BatchNorm's
 * statistics (GEN_STATS) builds its graph and gets candidates, and with
 * statistics of the wrong channels, per sample or of stride 0 is refused
 * naming the node; a GEMM with a leading dimension short of
 * its rows, or a transpose flipped, is refused naming the node.  Then the
 * sizer's path: the check of a valid model's convolutions and GEMMs through
 * rt_cuda_conv_workspace_bytes / rt_cuda_fc_workspace_bytes, and a dims
 * struct the geometry refuses, reported with its node.  Exit 0 when every
 * expectation holds, 1 otherwise. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/plan.h"
#include "cuda/rt_cuda.h"

static int fails;
static RtCudaCtx *cx; /* opened for the offline check */

static void expect(bool ok, const char *what, const char *got)
{
    if (!ok) {
        fprintf(stderr, "cuda_dnn_offline: FAIL: %s (got: %s)\n", what, got);
        fails++;
    }
}

static RtConvDims conv3x3(RtLayout layout)
{
    RtConvDims d = {.n = 4, .c = 16, .k = 32, .groups = 1, .nsp = 2, .in = {14, 14},
                    .kernel = {3, 3}, .stride = {1, 1}, .pad = {1, 1}, .dilate = {1, 1},
                    .layout = layout, .node = "stage1_conv2"};
    rt_conv_dims_init(&d);
    return d;
}

/* a convolution whose geometry is planted wrong must be refused, naming its node */
static void refused(const char *what, const AmpcConvGeom *g, RtDType dt, RtPass pass)
{
    char err[1024] = "";
    int64_t cand[2];
    bool ok = rt_cuda_dnn_check_geom(cx, "planted_conv", g, dt, pass, false, cand, err, sizeof err);
    char label[160];
    snprintf(label, sizeof label, "%s is refused", what);
    expect(!ok, label, err);
    snprintf(label, sizeof label, "%s: the message names the node", what);
    expect(strstr(err, "node 'planted_conv'") != NULL, label, err);
    if (!ok)
        printf("cuda_dnn_offline: planted %s: %s\n", what, err);
}

static void convolutions(void)
{
    char err[1024];
    static const RtDType dts[] = {RT_F32, RT_F16, RT_BF16};
    for (int t = 0; t < 3; t++)
        for (int p = 0; p < 3; p++) {
            RtConvDims d = conv3x3(dts[t] == RT_F32 ? RT_LAYOUT_NCHW : RT_LAYOUT_NHWC);
            AmpcConvGeom g;
            expect(ampc_conv_geom(&d, dts[t], (RtPass)p, &g, err, sizeof err), "geometry", err);
            int64_t cand[2] = {0, 0};
            bool ok = rt_cuda_dnn_check_geom(cx, d.node, &g, dts[t], (RtPass)p, p > 0, cand, err,
                                             sizeof err);
            expect(ok, "a valid convolution passes", err);
            expect(cand[0] >= 1 || cand[1] >= 1, "a valid convolution has candidates", err);
            if (ok)
                printf("cuda_dnn_offline: %s pass %d: %lld candidates (mode A), %lld (fallback)\n",
                       rt_dtype_name(dts[t]), p, (long long)cand[0], (long long)cand[1]);
        }
    RtConvDims d = conv3x3(RT_LAYOUT_NHWC);
    AmpcConvGeom good, g;
    expect(ampc_conv_geom(&d, RT_F16, RT_PASS_FORWARD, &good, err, sizeof err), "geometry", err);
    g = good, g.stride[0] = 2; /* y stays 14x14: not what a stride of 2 makes */
    refused("filter stride 2 over a stride-1 output", &g, RT_F16, RT_PASS_FORWARD);
    g = good, g.y.strides[1] = 0; /* every channel of y at one address */
    refused("tensor stride 0 on y's channels", &g, RT_F16, RT_PASS_FORWARD);
    g = good, g.w.dims[1] = 8; /* w's channels not x's */
    refused("filter channels 8 against 16", &g, RT_F16, RT_PASS_FORWARD);
    g = good, g.x.nd = 3; /* a 3-D x */
    refused("a 3-D input", &g, RT_F16, RT_PASS_BACKWARD);
}

/* a forward with statistics whose geometry is planted wrong must be refused, naming its node */
static void stats_refused(const char *what, const AmpcConvGeom *g, RtDType dt)
{
    char err[1024] = "";
    int64_t cand[2];
    bool ok = rt_cuda_dnn_check_stats_geom(cx, "planted_stats", g, dt, cand, err, sizeof err);
    char label[160];
    snprintf(label, sizeof label, "%s is refused", what);
    expect(!ok, label, err);
    snprintf(label, sizeof label, "%s: the message names the node", what);
    expect(strstr(err, "node 'planted_stats'") != NULL, label, err);
    if (!ok)
        printf("cuda_dnn_offline: planted %s: %s\n", what, err);
}

/* the convolution fused with BatchNorm's statistics (GEN_STATS after the
 * forward, one graph): valid in both layouts and every dtype, refused with
 * statistics of the wrong channels or per sample */
static void statistics(void)
{
    char err[1024];
    static const RtDType dts[] = {RT_F32, RT_F16, RT_BF16};
    for (int t = 0; t < 3; t++) {
        RtConvDims d = conv3x3(dts[t] == RT_F32 ? RT_LAYOUT_NCHW : RT_LAYOUT_NHWC);
        AmpcConvGeom g;
        expect(ampc_conv_geom(&d, dts[t], RT_PASS_FORWARD, &g, err, sizeof err), "geometry", err);
        int64_t cand[2] = {0, 0};
        bool ok = rt_cuda_dnn_check_stats_geom(cx, d.node, &g, dts[t], cand, err, sizeof err);
        expect(ok, "a valid convolution with statistics passes", err);
        expect(cand[0] >= 1 || cand[1] >= 1, "a valid convolution with statistics has candidates",
               err);
        printf("cuda_dnn_offline: %s forward with statistics: %s; %lld candidates (mode A), "
               "%lld (fallback)\n",
               rt_dtype_name(dts[t]), ok ? "finalized" : err, (long long)cand[0],
               (long long)cand[1]);
    }
    RtConvDims d = conv3x3(RT_LAYOUT_NHWC);
    AmpcConvGeom good, g;
    expect(ampc_conv_geom(&d, RT_F16, RT_PASS_FORWARD, &good, err, sizeof err), "geometry", err);
    g = good, g.stats.dims[1] = good.stats.dims[1] / 2; /* 16 sums for 32 channels */
    g.stats.strides[0] = g.stats.strides[2] = g.stats.strides[3] = g.stats.dims[1];
    stats_refused("statistics of 16 channels for 32", &g, RT_F16);
    g = good, g.stats.dims[0] = good.y.dims[0]; /* a sum per sample, not per channel */
    g.stats.strides[0] = g.stats.dims[1];
    stats_refused("statistics per sample", &g, RT_F16);
    g = good, g.stats.strides[1] = 0; /* every channel's sum at one address */
    stats_refused("statistics of stride 0", &g, RT_F16);
}

static void gemms(void)
{
    char err[1024];
    RtFcDims d = {.n = 32, .in = 64, .hidden = 10, .node = "fc1"};
    for (int p = 0; p < 3; p++) {
        AmpcGemm g;
        expect(ampc_fc_gemm(&d, (RtPass)p, &g, err, sizeof err), "gemm", err);
        expect(rt_cuda_blas_check_gemm(cx, "fc1", &g, RT_F16, p == 0, err, sizeof err),
               "a valid GEMM passes", err);
    }
    AmpcGemm g;
    expect(ampc_fc_gemm(&d, RT_PASS_FORWARD, &g, err, sizeof err), "gemm", err);
    AmpcGemm bad = g;
    bad.lda = bad.rowsa / 2;
    expect(!rt_cuda_blas_check_gemm(cx, "planted_fc", &bad, RT_F16, true, err, sizeof err),
           "a short leading dimension is refused", err);
    expect(strstr(err, "node 'planted_fc'") && strstr(err, "leading dimension"),
           "... naming the node and the leading dimension", err);
    bad = g, bad.transb = !bad.transb;
    expect(!rt_cuda_blas_check_gemm(cx, "planted_fc", &bad, RT_F16, false, err, sizeof err),
           "a flipped transpose is refused", err);
}

/* the sizers' path: what --cudnn-check does with a program's dims */
static void sizers(void)
{
    RtConvDims d = conv3x3(RT_LAYOUT_NHWC);
    RtFcDims f = {.n = 32, .in = 64, .hidden = 10, .node = "fc1"};
    for (int p = 0; p < 3; p++) {
        expect(rt_cuda_conv_workspace_bytes(cx, &d, RT_F16, (RtPass)p) == 0, "no workspace offline",
               "");
        expect(rt_cuda_conv_workspace_bytes(cx, &d, RT_F16, (RtPass)p) == 0, "asked twice", "");
        expect(rt_cuda_fc_workspace_bytes(cx, &f, RT_F16, (RtPass)p) == 0, "no workspace offline",
               "");
    }
    expect(rt_cuda_conv_stats_workspace_bytes(cx, &d, RT_F16) == 0, "no workspace offline", "");
    char why[256] = "";
    expect(!rt_cuda_conv_stats_probe(cx, &d, RT_F16, why, sizeof why) &&
               strstr(why, "offline check only"),
           "the probe says no plan can be made offline", why);
    /* 3 passes, the two backward ones also accumulating, the forward with
     * statistics; asked twice, counted once */
    expect(rt_cuda_dnn_check_count(cx) == 6, "six distinct convolutions", "");
    expect(rt_cuda_blas_check_count(cx) == 6, "six distinct GEMMs", "");
    RtConvDims bad = d;
    bad.node = "bad_dims", bad.groups = 3; /* 16 channels in 3 groups */
    (void)rt_cuda_conv_workspace_bytes(cx, &bad, RT_F16, RT_PASS_FORWARD);
    char *text = NULL, *etext = NULL;
    size_t len = 0, elen = 0;
    FILE *out = open_memstream(&text, &len), *err = open_memstream(&etext, &elen);
    int failed = rt_cuda_check_report(cx, out, err);
    fclose(out), fclose(err);
    expect(failed == 1, "one failure reported", etext);
    expect(strstr(etext, "bad_dims") != NULL, "the failure names its node", etext);
    expect(strstr(text, "conv stage1_conv2: forward float16 nhwc") != NULL,
           "a line per convolution", text);
    expect(strstr(text, "gemm fc1: backward-weight float16") != NULL, "a line per GEMM", text);
    expect(strstr(text, "conv stage1_conv2: forward (with statistics) float16 nhwc") != NULL,
           "a line for the forward with statistics", text);
    free(text), free(etext);
}

int main(void)
{
    char err[4096];
    RtCudaConfig cfg = {.workspace_limit = 1 << 30};
    cx = rt_cuda_check_open(&cfg, err, sizeof err);
    if (!cx) {
        fprintf(stderr, "cuda_dnn_offline: FAIL: the libraries: %s\n", err);
        return 1;
    }
    convolutions();
    statistics();
    gemms();
    sizers();
    rt_cuda_close(cx);
    if (fails)
        return 1;
    printf("cuda_dnn_offline: every expectation held\n");
    return 0;
}
