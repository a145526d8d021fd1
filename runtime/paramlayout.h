/* paramlayout.h - a parameter's device layout and its canonical one.
 *
 * RtParam.layout (program.h) says how a parameter, its gradient, fp32 master
 * and optimizer state are laid out on the device.  Files and the host side
 * of the runtime (initialisation, checkpoints, .params files, --dump-state)
 * always hold the canonical layout (OIHW: [k, c, spatial...]); these
 * convert at that boundary.  NHWC on a tensor of rank 3 or more is
 * [k, spatial..., c] (KRSC for a 4-D convolution weight); a tensor of rank 1
 * or 2 is the same bytes in either layout. */
#ifndef AMPC_PARAMLAYOUT_H
#define AMPC_PARAMLAYOUT_H

#include "program.h"

/* Whether p's device bytes are a permutation of its canonical ones. */
bool rt_param_permuted(const RtParam *p);

/* p->numel elements of dt from src to dst (no overlap): to RT_LAYOUT_NHWC
 * converts canonical values into p's device layout, to RT_LAYOUT_NCHW the
 * device layout back to canonical.  A copy when p is not permuted.  dt is
 * the element type of the values (fp32 for a master or optimizer state). */
void rt_param_convert(const RtParam *p, RtDType dt, const void *src, void *dst, RtLayout to);

/* The same in place, through a temporary (false when it cannot be
 * allocated; nothing to do, true, when p is not permuted). */
bool rt_param_convert_inplace(const RtParam *p, RtDType dt, void *buf, RtLayout to);

#endif
