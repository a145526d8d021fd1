/* paramlayout.c - a parameter's device layout and its canonical one
 * (paramlayout.h). */
#include "paramlayout.h"

#include <stdlib.h>
#include <string.h>

bool rt_param_permuted(const RtParam *p)
{
    return p->layout == RT_LAYOUT_NHWC && p->rank >= 3;
}

void rt_param_convert(const RtParam *p, RtDType dt, const void *src, void *dst, RtLayout to)
{
    if (!rt_param_permuted(p) || p->numel <= 0) {
        if (src != dst)
            memcpy(dst, src, (size_t)p->numel * rt_dtype_size(dt));
        return;
    }
    /* [k][c][spatial] is NCHW with n = k, c = c, hw = the spatial product */
    int64_t hw = p->numel / (p->shape[0] * p->shape[1]);
    rt_layout_convert(p->shape[0], p->shape[1], hw, dt, src, dst, to);
}

bool rt_param_convert_inplace(const RtParam *p, RtDType dt, void *buf, RtLayout to)
{
    if (!rt_param_permuted(p))
        return true;
    size_t bytes = (size_t)p->numel * rt_dtype_size(dt);
    void *tmp = malloc(bytes ? bytes : 1);
    if (!tmp)
        return false;
    memcpy(tmp, buf, bytes);
    rt_param_convert(p, dt, tmp, buf, to);
    free(tmp);
    return true;
}
