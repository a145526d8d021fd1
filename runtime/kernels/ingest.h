/*
 * ingest.h - how a data source's raw byte becomes the float its `fill`
 * gives (data.h's RtIngestNorm), in one header that gcc, clang and nvcc all
 * build, as splitmix.h is the synthetic source's: the sources' own fill
 * (data/idx.c, cifar10.c, digits.c), the CPU device's ingest
 * (cpu/device.c) and the CUDA kernel that normalises an uploaded uint8
 * batch on the device (cuda/ingest.cuh) compute exactly the same values.
 *
 * The value of byte v in channel ch is ((float)v / div - mean[ch]) /
 * std[ch]: an exact conversion, then three operations each rounded to
 * float, in that order, with no fused multiply-add possible (a division, a
 * subtraction, a division; C11's -ffp-contract=off and nvcc's -fmad=false
 * besides, and nvcc's default IEEE division, -prec-div=true).  A source
 * that only scales (IDX, digits) has mean 0 and std 1, and (x - 0) / 1 is x
 * exactly, so its values are (float)v / div as before.
 */
#ifndef AMPC_KERNELS_INGEST_H
#define AMPC_KERNELS_INGEST_H

#include "kernels/half.h" /* AMPC_HD */

/* channels a normalisation may give their own mean and std (RGB; an image
 * source with more channels shares one of each) */
#define AMPC_INGEST_MAXC 4

static inline AMPC_HD float ampc_ingest_value(unsigned char v, float div, float mean, float std)
{
    return ((float)v / div - mean) / std;
}

#endif /* AMPC_KERNELS_INGEST_H */
