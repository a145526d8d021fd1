/*
 * cuda_device_smoke.c - the CUDA device (runtime/cuda/device.cu) through
 * runtime/device.h, against the CPU optimizer, linked as a training program
 * would link it (libampccuda.a, libampcrt.a, cudart).
 *
 * Without a usable GPU, opening the device must fail cleanly: a message
 * naming device.cu:LINE, the CUDA call and its error string, exit status 3
 * (make cuda-check prints it as a SKIPPED line).  With one (make gpu-check,
 * or cuda-check on a GPU machine), it runs one model of three parameters
 * (fp16 and bf16 with fp32 masters, fp32; 70,001 elements each, so chunks
 * of 65,536 split them) through fill, copies, setup, the finite check and
 * two steps each of SGD, SGD with momentum and clipping, NAG and Adam, and
 * compares every weight, master and state with rt_optim_step2 on the host
 * bit for bit (NaN as NaN); then 40 steps without the host (device.h:
 * ls_init, lr_ahead, step_begin, train_update, ls_update) with a dynamic
 * loss scale and overflows planted by a pattern: the scale, tracker,
 * counters, update count and flag ring against the host's loss scaler, the
 * weights, masters and states against rt_optim_step2 with the schedule's
 * learning rate, the BatchNorm commit (moving_update calling
 * rt_cuda_batchnorm_update_moving, which reads the device's step state)
 * against rt_batchnorm_update_moving on the finite steps only, and no wait
 * counted in RtDevice.syncs in those steps; then
 * a NaN gradient must clear the flag and first_nonfinite must name its
 * parameter.
 * Exit 0 on success, 1 on a mismatch.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/device_cuda.h"
#include "cuda/rt_cuda.h"
#include "kernels/half.h"
#include "train.h"
#include "lossscale.h"
#include "cpu/cpu.h"

enum { NP = 3, N = 70001 };

static const RtParam params[NP] = {
    {"a_weight", RT_PK_WEIGHT, RT_F16, true, 1, {N}, N, "default", 1, 1, 0, NP + 0, RT_LAYOUT_NCHW},
    {"b_weight", RT_PK_WEIGHT, RT_BF16, true, 1, {N}, N, "default", 1, 0.5f, 1, NP + 1, RT_LAYOUT_NCHW},
    {"c_bias", RT_PK_BIAS, RT_F32, false, 1, {N}, N, "default", 0, 2, 2, NP + 2, RT_LAYOUT_NCHW},
};
static const RtBuffer buffers[2 * NP] = {
    {"a", RT_F16, N, 0, false, 0, 0},  {"b", RT_BF16, N, 0, false, 0, 0},
    {"c", RT_F32, N, 0, false, 0, 0},  {"ga", RT_F16, N, 0, false, 0, 0},
    {"gb", RT_BF16, N, 0, false, 0, 0}, {"gc", RT_F32, N, 0, false, 0, 0},
};
static const RtModel model = {.name = "cuda_smoke", .nparams = NP, .params = params,
                              .nbuffers = 2 * NP, .buffers = buffers};

static size_t esz(RtDType dt) { return dt == RT_F32 ? 4 : 2; }

static int same(const void *a, const void *b, size_t n, RtDType dt, const char *what, int p)
{
    for (size_t i = 0; i < n; i++) {
        float x, y;
        if (dt == RT_F32) {
            x = ((const float *)a)[i], y = ((const float *)b)[i];
        } else if (dt == RT_F16) {
            x = ampc_half_to_float(((const uint16_t *)a)[i]);
            y = ampc_half_to_float(((const uint16_t *)b)[i]);
        } else {
            x = ampc_bf16_to_float(((const uint16_t *)a)[i]);
            y = ampc_bf16_to_float(((const uint16_t *)b)[i]);
        }
        if (memcmp((const char *)a + i * esz(dt), (const char *)b + i * esz(dt), esz(dt)) &&
            !(x != x && y != y)) {
            fprintf(stderr, "cuda_device_smoke: %s of parameter %d, element %zu: GPU %.9g, CPU "
                    "%.9g\n", what, p, i, (double)x, (double)y);
            return 0;
        }
    }
    return 1;
}

/* Overflow on a pattern: isolated, and a burst of 4 */
/* the program's BatchNorm commit (its moving_update): device save_mean,
 * save_invstd, moving_mean, moving_var of BNC channels */
enum { BNC = 67 };
static float *bn_dev[4];
static void bn_commit(RtCtx *ctx)
{
    rt_cuda_batchnorm_update_moving(ctx->cuda, BNC, 50, bn_dev[0], bn_dev[1], 1e-5f, 0.9f,
                                    bn_dev[2], bn_dev[3], ctx->step_state);
}

static int finite_at(int k) { return !(k == 3 || k == 11 || (k >= 20 && k < 24) || k == 31); }

/* 40 steps of SGD with momentum through the calls the loop makes, against
 * the host's rule and optimizer. */
static int no_host_steps(RtDevice *d, RtCtx *hctx, RtCtx *dctx, float **hmom, float **dmom)
{
    char err[512];
    RtLossScaler ls;
    RtLossScaleConfig lc;
    rt_loss_scale_default(&lc);
    lc.mode = RT_LS_DYNAMIC, lc.init = 1024.0f, lc.interval = 3, lc.max_scale = 8192.0f;
    rt_loss_scaler_init(&ls, &lc, "float16");
    RtDevLsInit in = {.dynamic = true, .s = ls.s, .rule = ls.rule, .batch = 64, .num_update = 0};
    if (!rt_dev_ls_init(d, &in, err, sizeof err)) {
        fprintf(stderr, "cuda_device_smoke: ls_init: %s\n", err);
        return 0;
    }
    RtOptConfig c;
    memset(&c, 0, sizeof c);
    c.kind = RT_OPT_SGD, c.momentum = 0.9f, c.clip_gradient = -1.0f, c.wd = 1e-4f;
    static float lr[RT_DEV_LS_RING + 1];
    for (int i = 0; i <= RT_DEV_LS_RING; i++)
        lr[i] = 0.05f / (float)(1 + i % 7);
    rt_dev_lr_ahead(d, &c, lr, 0, RT_DEV_LS_RING + 1);
    for (int p = 0; p < NP; p++) {
        memset(hmom[p], 0, N * sizeof(float));
        rt_dev_fill(d, dmom[p], RT_F32, N, 0.0f);
    }
    static float bn[4][BNC];
    for (int i = 0; i < BNC; i++)
        bn[0][i] = 0.1f * (float)i - 3.0f, bn[1][i] = 0.5f + 0.01f * (float)i, bn[2][i] = 0.0f,
        bn[3][i] = 1.0f;
    for (int j = 0; j < 4; j++) {
        if (!(bn_dev[j] = rt_dev_alloc(d, sizeof bn[j], "bn", err, sizeof err))) {
            fprintf(stderr, "cuda_device_smoke: %s\n", err);
            return 0;
        }
        rt_dev_to_device(d, bn_dev[j], bn[j], sizeof bn[j]);
    }
    uint16_t *g = (uint16_t *)hctx->buf[NP + 1] + (N - 1), nan16 = 0x7fc1;
    int64_t nu = 0;
    uint64_t syncs0 = d->syncs;
    for (int k = 0; k < 40; k++) {
        rt_dev_to_device(d, (uint16_t *)dctx->buf[NP + 1] + (N - 1), finite_at(k) ? g : &nan16,
                         sizeof nan16);
        float used = ls.s.scale;
        rt_dev_step_begin(d, false);
        rt_dev_check_grads(d);
        rt_dev_moving_update(d, bn_commit, dctx);
        rt_dev_train_update(d, dmom, NULL, &c);
        rt_dev_ls_update(d);
        if (finite_at(k))
            rt_batchnorm_update_moving(BNC, 50, bn[0], bn[1], 1e-5f, 0.9f, bn[2], bn[3], NULL);
        if (finite_at(k)) {
            RtOptConfig h = c;
            h.lr = lr[nu], h.t = nu + 1, h.rescale_grad = (float)(1.0 / (64.0 * (double)used));
            rt_optim_step2(&model, hctx, hmom, NULL, &h);
            nu++;
        }
        rt_loss_scaler_update(&ls, finite_at(k), NULL, NULL);
    }
    int ok = 1;
    if (d->syncs != syncs0) {
        fprintf(stderr, "cuda_device_smoke: %llu waits in 40 steps without the host\n",
                (unsigned long long)(d->syncs - syncs0));
        ok = 0;
    }
    RtDevLsState st;
    static AmpcLossScaleStep ring[RT_DEV_LS_RING];
    rt_dev_ls_read(d, &st, ring, 0);
    for (int k = 0; k < 40; k++)
        ok &= ring[k].finite == (finite_at(k) ? 1 : 0);
    /* the last record is the state the device decided */
    ok &= memcmp(&ring[39].s, &st.s, sizeof st.s) == 0 && ring[39].num_update == st.num_update;
    if (memcmp(&st.s.scale, &ls.s.scale, sizeof(float)) || st.s.tracker != ls.s.tracker ||
        st.steps != 40 || st.skipped != ls.skipped || st.num_update != nu || !ok) {
        fprintf(stderr, "cuda_device_smoke: device loss scale %g (tracker %d, %lld steps, %lld "
                "skipped, %lld updates) != host %g (%d, 40, %lld, %lld), or the ring differs\n",
                (double)st.s.scale, (int)st.s.tracker, (long long)st.steps,
                (long long)st.skipped, (long long)st.num_update, (double)ls.s.scale,
                (int)ls.s.tracker, (long long)ls.skipped, (long long)nu);
        return 0;
    }
    static float bnback[BNC];
    for (int j = 2; j < 4; j++) {
        rt_dev_to_host(d, bnback, bn_dev[j], sizeof bnback);
        ok &= same(bnback, bn[j], BNC, RT_F32, "moving statistics (skipped on the flag)", j);
        rt_dev_free(d, bn_dev[j]);
    }
    rt_dev_free(d, bn_dev[0]), rt_dev_free(d, bn_dev[1]);
    static uint16_t back[N * 2];
    for (int p = 0; ok && p < NP; p++) {
        rt_dev_to_host(d, back, dctx->buf[p], N * esz(params[p].dtype));
        ok &= same(back, hctx->buf[p], N, params[p].dtype, "weight (steps without the host)", p);
        if (params[p].has_master) {
            rt_dev_to_host(d, back, dctx->master[p], N * sizeof(float));
            ok &= same(back, hctx->master[p], N, RT_F32, "master (steps without the host)", p);
        }
        rt_dev_to_host(d, back, dmom[p], N * sizeof(float));
        ok &= same(back, hmom[p], N, RT_F32, "state (steps without the host)", p);
    }
    return ok;
}

int main(void)
{
    char err[512];
    RtDevice *d = rt_device_cuda_open(0, err, sizeof err);
    if (!d) {
        printf("cuda_device_smoke: no usable GPU: %s\n", err);
        return 3;
    }
    /* the kernels' context on the device's stream (no library: the BatchNorm
     * commit needs none), which the device owns */
    RtCudaConfig kc = {.stream = rt_device_cuda_stream(d)};
    RtCudaCtx *kx = rt_cuda_ctx_new(&kc);
    if (!kx) {
        fprintf(stderr, "cuda_device_smoke: out of memory\n");
        return 1;
    }
    rt_device_cuda_adopt(d, kx);
    static void *hbuf[2 * NP], *dbuf[2 * NP];
    static float *hmaster[NP], *dmaster[NP], *hmom[NP], *dmom[NP], *hvar[NP], *dvar[NP];
    uint64_t s = 88172645463325252ull;
    for (int b = 0; b < 2 * NP; b++) {
        size_t bytes = N * esz(buffers[b].dtype);
        hbuf[b] = malloc(bytes);
        if (!hbuf[b] || !(dbuf[b] = rt_dev_alloc(d, bytes, buffers[b].name, err, sizeof err))) {
            fprintf(stderr, "cuda_device_smoke: %s\n", hbuf[b] ? err : "out of memory");
            return 1;
        }
        for (size_t i = 0; i < N; i++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            float v = ((float)(s >> 40) / 16777216.0f - 0.5f) * (b < NP ? 2.0f : 64.0f);
            if (buffers[b].dtype == RT_F32)
                ((float *)hbuf[b])[i] = v;
            else if (buffers[b].dtype == RT_F16)
                ((uint16_t *)hbuf[b])[i] = ampc_float_to_half(v);
            else
                ((uint16_t *)hbuf[b])[i] = ampc_float_to_bf16(v);
        }
        rt_dev_to_device(d, dbuf[b], hbuf[b], bytes);
    }
    for (int p = 0; p < NP; p++) {
        hmom[p] = calloc(N, sizeof(float));
        dmom[p] = rt_dev_alloc(d, N * sizeof(float), "momentum", err, sizeof err);
        hvar[p] = calloc(N, sizeof(float));
        dvar[p] = rt_dev_alloc(d, N * sizeof(float), "var", err, sizeof err);
        hmaster[p] = params[p].has_master ? malloc(N * sizeof(float)) : NULL;
        dmaster[p] = params[p].has_master
                         ? rt_dev_alloc(d, N * sizeof(float), "master", err, sizeof err)
                         : NULL;
        if (!hmom[p] || !dmom[p] || !hvar[p] || !dvar[p] || (params[p].has_master && (!hmaster[p] || !dmaster[p]))) {
            fprintf(stderr, "cuda_device_smoke: out of memory\n");
            return 1;
        }
        if (hmaster[p]) {
            rt_to_f32(hmaster[p], hbuf[p], N, params[p].dtype);
            rt_dev_to_device(d, dmaster[p], hmaster[p], N * sizeof(float));
        }
        rt_dev_fill(d, dmom[p], RT_F32, N, 0.0f);
    }
    RtCtx hctx, dctx;
    memset(&hctx, 0, sizeof hctx);
    memset(&dctx, 0, sizeof dctx);
    hctx.buf = hbuf, hctx.master = hmaster;
    dctx.buf = dbuf, dctx.master = dmaster;
    dctx.step_state = rt_dev_step_state(d), dctx.cuda = rt_dev_kernel_ctx(d);
    if (!rt_dev_setup(d, &model, &dctx, err, sizeof err)) {
        fprintf(stderr, "cuda_device_smoke: setup: %s\n", err);
        return 1;
    }
    /* each optimizer in turn from where the last left the weights, its state
     * zeroed on both sides (the device rebuilds its table at each change) */
    static const struct {
        RtOptKind kind;
        float momentum, clip;
    } cfgs[] = {{RT_OPT_SGD, 0.0f, -1.0f}, {RT_OPT_SGD, 0.9f, 0.5f}, {RT_OPT_NAG, 0.9f, -1.0f},
                {RT_OPT_ADAM, 0.0f, -1.0f}};
    int ok = 1;
    static uint16_t back[N * 2];
    for (size_t k = 0; ok && k < sizeof cfgs / sizeof cfgs[0]; k++) {
        RtOptConfig c;
        memset(&c, 0, sizeof c);
        c.kind = cfgs[k].kind, c.momentum = cfgs[k].momentum, c.clip_gradient = cfgs[k].clip;
        c.wd = 1e-4f, c.rescale_grad = 1.0f / 64;
        c.beta1 = 0.9f, c.beta2 = 0.999f, c.epsilon = 1e-8f;
        float *const *h2 = c.kind == RT_OPT_ADAM ? hvar : NULL;
        float *const *d2 = c.kind == RT_OPT_ADAM ? dvar : NULL;
        for (int p = 0; p < NP; p++) {
            memset(hmom[p], 0, N * sizeof(float));
            memset(hvar[p], 0, N * sizeof(float));
            rt_dev_fill(d, dmom[p], RT_F32, N, 0.0f);
            rt_dev_fill(d, dvar[p], RT_F32, N, 0.0f);
        }
        for (int step = 0; step < 2 && ok; step++) {
            c.lr = 0.1f / (float)(step + 1);
            c.t = step + 1;
            rt_dev_check_grads(d);
            ok &= rt_dev_read_flag(d);
            ok &= rt_optim_step2(&model, &hctx, hmom, h2, &c);
            rt_dev_optim_step(d, dmom, d2, &c);
            ok &= rt_dev_read_flag(d);
            if (!ok)
                fprintf(stderr, "cuda_device_smoke: optimizer %zu, step %d: the flag says "
                        "non-finite\n", k, step);
        }
        for (int p = 0; ok && p < NP; p++) {
            size_t bytes = N * esz(params[p].dtype);
            rt_dev_to_host(d, back, dbuf[p], bytes);
            ok &= same(back, hbuf[p], N, params[p].dtype, "weight", p);
            if (params[p].has_master) {
                rt_dev_to_host(d, back, dmaster[p], N * sizeof(float));
                ok &= same(back, hmaster[p], N, RT_F32, "master", p);
            }
            rt_dev_to_host(d, back, dmom[p], N * sizeof(float));
            ok &= same(back, hmom[p], N, RT_F32, "state", p);
            rt_dev_to_host(d, back, dvar[p], N * sizeof(float));
            ok &= same(back, hvar[p], N, RT_F32, "var", p);
        }
        if (!ok)
            fprintf(stderr, "cuda_device_smoke: optimizer %zu differs\n", k);
    }
    if (ok)
        ok = no_host_steps(d, &hctx, &dctx, hmom, dmom);
    /* a NaN in the last element of the second gradient */
    uint16_t nan16 = 0x7fc1;
    rt_dev_to_device(d, (uint16_t *)dbuf[NP + 1] + (N - 1), &nan16, sizeof nan16);
    rt_dev_check_grads(d);
    if (ok && rt_dev_read_flag(d)) {
        fprintf(stderr, "cuda_device_smoke: a NaN gradient left the flag clear\n");
        ok = 0;
    }
    if (ok && rt_dev_first_nonfinite(d) != 1) {
        fprintf(stderr, "cuda_device_smoke: first_nonfinite did not name parameter 1\n");
        ok = 0;
    }
    for (int b = 0; b < 2 * NP; b++) {
        rt_dev_free(d, dbuf[b]);
        free(hbuf[b]);
    }
    for (int p = 0; p < NP; p++) {
        rt_dev_free(d, dmom[p]);
        rt_dev_free(d, dvar[p]);
        rt_dev_free(d, dmaster[p]);
        free(hmom[p]);
        free(hvar[p]);
        free(hmaster[p]);
    }
    rt_device_close(d);
    printf("cuda_device_smoke: %s\n", ok ? "the GPU's optimizer step equals the CPU's, bit for bit"
                                          : "FAILED");
    return ok ? 0 : 1;
}
