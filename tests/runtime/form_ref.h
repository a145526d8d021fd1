/* form_ref.h - a batch in the first layer's form, as the CPU program's own
 * calls make it (tests): fp32 values [n][c][inner] cast by the CPU's Cast
 * (rt_cast_forward, amp_cast's kernel), laid out by its layout conversion
 * (rt_layout_convert, _layout's) and padded with zero channels to cp (NHWC:
 * each pixel's c values, then zeros; NCHW: each sample's planes, then zero
 * planes).  What the devices' synthetic_batch and ingest, and their CUDA
 * kernels, must write bit for bit. */
#ifndef AMPC_TESTS_FORM_REF_H
#define AMPC_TESTS_FORM_REF_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rt.h"

/* malloc'd n * cp * inner elements of dt (NULL when out of memory) */
static inline void *form_ref(const float *x, int64_t n, int64_t c, int64_t cp, int64_t inner,
                             RtDType dt, bool nhwc)
{
    int64_t sample = c * inner, es = (int64_t)rt_dtype_size(dt);
    char *cast = malloc((size_t)(n * sample * es)), *laid = malloc((size_t)(n * sample * es));
    char *out = calloc((size_t)(n * cp * inner), (size_t)es);
    if (!cast || !laid || !out) {
        free(cast), free(laid), free(out);
        return NULL;
    }
    rt_cast_forward((size_t)(n * sample), RT_F32, x, dt, cast);
    if (nhwc)
        rt_layout_convert(n, c, inner, dt, cast, laid, RT_LAYOUT_NHWC);
    else
        memcpy(laid, cast, (size_t)(n * sample * es));
    /* rows of c (NHWC: a pixel; NCHW: a sample's planes) into rows of cp */
    int64_t rows = nhwc ? n * inner : n, w = nhwc ? c : sample, wp = nhwc ? cp : cp * inner;
    for (int64_t r = 0; r < rows; r++)
        memcpy(out + r * wp * es, laid + r * w * es, (size_t)(w * es));
    free(cast), free(laid);
    return out;
}

#endif
