/*
 * tolerance.h - the shared tolerance checker (host only): compares a
 * kernel's output with its CPU twin element by element, |got - ref| <=
 * atol + rtol*|ref| (llm.c's check_tensor), prints the first mismatches and
 * the largest difference, and returns the number of mismatches.  NaN and
 * inf must match exactly (same class and sign).
 */
#ifndef AMPC_KERNELS_TOLERANCE_H
#define AMPC_KERNELS_TOLERANCE_H

#include <math.h>
#include <stddef.h>
#include <stdio.h>

#include "kernels/half.h"

static inline int ampc_close(float got, float ref, float atol, float rtol)
{
    if (!ampc_isfinite(got) || !ampc_isfinite(ref)) {
        if (got != got || ref != ref)
            return got != got && ref != ref;
        return got == ref;
    }
    return fabsf(got - ref) <= atol + rtol * fabsf(ref);
}

/* Returns the number of elements out of tolerance; prints up to 5 of them
 * and the largest absolute difference to stderr when there are any. */
static inline size_t ampc_check_close(const char *name, const float *got, const float *ref,
                                      size_t n, float atol, float rtol)
{
    size_t bad = 0, worst = 0;
    double maxdiff = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)ref[i]);
        if (d == d && d > maxdiff) {
            maxdiff = d;
            worst = i;
        }
        if (!ampc_close(got[i], ref[i], atol, rtol)) {
            if (bad < 5)
                fprintf(stderr, "%s[%zu]: got %.9g, want %.9g\n", name, i, (double)got[i],
                        (double)ref[i]);
            bad++;
        }
    }
    if (bad)
        fprintf(stderr, "%s: %zu of %zu out of tolerance (atol %g, rtol %g); max |diff| %.3g at %zu\n",
                name, bad, n, (double)atol, (double)rtol, maxdiff, worst);
    return bad;
}

#endif /* AMPC_KERNELS_TOLERANCE_H */
