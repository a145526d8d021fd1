/* rt.c - the runtime's helpers that are not kernels: what every backend and
 * the driver share without one depending on another.  The dims' set-up of
 * the kernel contract (rt.h: rt_conv_dims_init, rt_pool_dims_init,
 * rt_broadcast_dims_init), the storage dtypes' sizes and names, the host
 * workspace of a step (program.h's rt_ctx_ws) and a GPU program's device
 * options (program.h's RtDeviceConfig).  So runtime/cuda/ reaches none of
 * runtime/cpu/'s kernels, and the loop none of a backend's files.
 */
#include <stdio.h>
#include <stdlib.h>

#include "program.h"
#include "rt.h"

/* ---- storage dtypes -------------------------------------------------------- */

size_t rt_dtype_size(RtDType dt) { return dt == RT_F32 ? 4 : 2; }

const char *rt_dtype_name(RtDType dt)
{
    switch (dt) {
    case RT_F32: return "float32";
    case RT_F16: return "float16";
    case RT_BF16: return "bfloat16";
    }
    return "?";
}

/* ---- the dims of the kernel contract ----------------------------------------- */

bool rt_conv_dims_init(RtConvDims *d)
{
    if (d->nsp < 1 || d->nsp > RT_MAX_SPATIAL || d->n < 1 || d->c < 1 || d->k < 1 ||
        d->groups < 1 || d->c % d->groups || d->k % d->groups)
        return false;
    for (int a = 0; a < RT_MAX_SPATIAL; a++) {
        if (a >= d->nsp) {
            d->in[a] = d->kernel[a] = d->stride[a] = d->dilate[a] = d->out[a] = 1;
            d->pad[a] = 0;
            continue;
        }
        if (d->in[a] < 1 || d->kernel[a] < 1 || d->stride[a] < 1 || d->pad[a] < 0 ||
            d->dilate[a] < 1)
            return false;
        long span = (long)d->dilate[a] * (d->kernel[a] - 1) + 1;
        long room = (long)d->in[a] + 2L * d->pad[a];
        if (room < span)
            return false;
        d->out[a] = (int)((room - span) / d->stride[a] + 1);
    }
    return true;
}

bool rt_pool_dims_init(RtPoolDims *d)
{
    if (d->nsp < 1 || d->nsp > RT_MAX_SPATIAL || d->n < 1 || d->c < 1)
        return false;
    for (int a = 0; a < RT_MAX_SPATIAL; a++) {
        if (a >= d->nsp) {
            d->in[a] = d->kernel[a] = d->stride[a] = d->out[a] = 1;
            d->pad[a] = 0;
            continue;
        }
        if (d->in[a] < 1)
            return false;
        if (d->global) {
            d->kernel[a] = d->in[a];
            d->stride[a] = 1;
            d->pad[a] = 0;
        }
        if (d->kernel[a] < 1 || d->stride[a] < 1 || d->pad[a] < 0)
            return false;
        long span = (long)d->in[a] + 2L * d->pad[a] - d->kernel[a];
        if (span < 0)
            return false;
        d->out[a] = (int)((d->full_convention ? (span + d->stride[a] - 1) / d->stride[a]
                                              : span / d->stride[a]) +
                          1);
    }
    return true;
}

bool rt_broadcast_dims_init(RtBcastDims *d, int ra, const int64_t *a, int rb, const int64_t *b)
{
    if (ra < 0 || rb < 0 || ra > RT_MAX_RANK || rb > RT_MAX_RANK)
        return false;
    int r = ra > rb ? ra : rb;
    if (r == 0)
        r = 1; /* scalars: one element */
    d->rank = r;
    for (int i = 0; i < r; i++) {
        int ia = i - (r - ra), ib = i - (r - rb);
        int64_t x = ia >= 0 ? a[ia] : 1, y = ib >= 0 ? b[ib] : 1;
        if (x < 0 || y < 0 || (x != y && x != 1 && y != 1))
            return false;
        d->a[i] = x;
        d->b[i] = y;
        d->out[i] = x == 1 ? y : x;
    }
    return true;
}

/* ---- the workspace ---------------------------------------------------------- */

void *rt_ctx_ws(RtCtx *ctx, size_t bytes)
{
    if (bytes <= ctx->ws_bytes && ctx->ws)
        return ctx->ws;
    if (ctx->ws_device) { /* a device's, sized once from the program's workspace_bytes */
        fprintf(stderr,
                "error: a kernel asks for a workspace of %zu bytes, more than the %zu "
                "bytes of device memory allocated at start-up (the program's "
                "workspace_bytes); a device's workspace cannot grow during a step\n",
                bytes, ctx->ws_bytes);
        exit(1);
    }
    size_t size = (bytes + RT_WS_ALIGN - 1) / RT_WS_ALIGN * RT_WS_ALIGN;
    void *p = aligned_alloc(RT_WS_ALIGN, size ? size : RT_WS_ALIGN);
    if (!p) {
        fprintf(stderr, "error: out of memory for a workspace of %zu bytes\n", bytes);
        exit(1);
    }
    free(ctx->ws);
    ctx->ws = p;
    ctx->ws_bytes = size;
    return p;
}

/* ---- the device's options ---------------------------------------------------------- */

RtDeviceConfig rt_device_config_default(void)
{
    return (RtDeviceConfig){.cudnn_autotune = true,
                            .cudnn_workspace_mb = RT_CUDNN_WORKSPACE_MB_DEFAULT,
                            .cudnn_autotune_max = RT_CUDNN_AUTOTUNE_MAX_DEFAULT};
}

bool rt_device_configure(const RtModel *m, const RtDeviceFlags *f, RtDeviceConfig *dc, char *err,
                         size_t errlen)
{
    const char *given = f->autotune >= 0           ? "cudnn-autotune"
                        : f->workspace_mb >= 0     ? "cudnn-workspace-mb"
                        : f->fp32 >= 0             ? "cudnn-fp32"
                        : f->nondeterministic >= 0 ? "cudnn-nondeterministic"
                        : f->autotune_max >= 0     ? "cudnn-autotune-max"
                        : f->runtime_compiled >= 0 ? "cudnn-runtime-compiled"
                        : f->plan_cache            ? "cudnn-plan-cache"
                                                   : NULL;
    if (!m->open_device && given) {
        snprintf(err, errlen,
                 "--%s applies to a program built for a GPU (ampc --target=cuda); "
                 "model %s was built for the CPU",
                 given, m->name);
        return false;
    }
    *dc = rt_device_config_default();
    if (f->autotune >= 0)
        dc->cudnn_autotune = f->autotune != 0;
    if (f->workspace_mb >= 0)
        dc->cudnn_workspace_mb = f->workspace_mb;
    if (f->fp32 >= 0)
        dc->cudnn_fp32 = f->fp32;
    if (f->nondeterministic >= 0)
        dc->cudnn_nondeterministic = f->nondeterministic != 0;
    if (f->autotune_max >= 0)
        dc->cudnn_autotune_max = f->autotune_max;
    if (f->runtime_compiled >= 0)
        dc->cudnn_runtime_compiled = f->runtime_compiled != 0;
    dc->cudnn_plan_cache = f->plan_cache;
    return true;
}

int rt_device_check(const RtModel *m, const RtDeviceConfig *dc, int64_t batch, FILE *out, FILE *err)
{
    if (!m->check_device) {
        fprintf(err,
                "--cudnn-check applies to a program built for a GPU (ampc --target=cuda); "
                "model %s was built for the CPU\n",
                m->name);
        return 2;
    }
    return m->check_device(m, dc, batch, out, err);
}
