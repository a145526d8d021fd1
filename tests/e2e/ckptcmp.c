/* ckptcmp.c - compares the parameters of two ampc checkpoints, read through
 * the runtime's own reader (runtime/checkpoint.c, canonical layouts), for
 * tests/e2e/cuda_plan_cpu.sh:
 *
 *   ckptcmp A B TOL
 *
 * Both must hold the same parameters (names, dtypes, shapes) at the same
 * step.  For each parameter, the largest |a - b| over its fp32 values (the
 * masters of 16-bit ones) divided by the largest |a| must be at most TOL
 * (0: the same bits).  Prints the worst parameter and its error; exit 0
 * when every one is within TOL, 1 otherwise, 2 on a bad file.
 *
 * Built by the script against the runtime next to ampc:
 *   cc -Iruntime tests/e2e/ckptcmp.c BUILD/libampcrt.a -lopenblas -lz -lm
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train.h"
#include "checkpoint.h"

/* the error of p against q: max |a - b| / max |a|; 0 when bit-identical */
static double param_error(const RtCkptParam *p, const RtCkptParam *q, int *same_bits)
{
    double dmax = 0, amax = 0;
    *same_bits = memcmp(p->values, q->values, sizeof(float) * (size_t)p->numel) == 0;
    for (int64_t i = 0; i < p->numel; i++) {
        double a = p->values[i], b = q->values[i];
        if (!isfinite(a) || !isfinite(b))
            return isnan(a) && isnan(b) ? 0 : INFINITY;
        if (fabs(a - b) > dmax)
            dmax = fabs(a - b);
        if (fabs(a) > amax)
            amax = fabs(a);
    }
    return dmax == 0 ? 0 : amax == 0 ? INFINITY : dmax / amax;
}

static bool same_param(const RtCkptParam *p, const RtCkptParam *q)
{
    if (strcmp(p->name, q->name) != 0 || p->dtype != q->dtype || p->rank != q->rank ||
        p->numel != q->numel)
        return false;
    for (int d = 0; d < p->rank; d++)
        if (p->shape[d] != q->shape[d])
            return false;
    return true;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: ckptcmp A B TOL\n");
        return 2;
    }
    double tol = strtod(argv[3], NULL);
    RtCheckpoint a, b;
    char err[1024];
    if (!rt_checkpoint_read(argv[1], &a, err, sizeof err)) {
        fprintf(stderr, "ckptcmp: %s\n", err);
        return 2;
    }
    if (!rt_checkpoint_read(argv[2], &b, err, sizeof err)) {
        fprintf(stderr, "ckptcmp: %s\n", err);
        rt_checkpoint_free(&a);
        return 2;
    }
    int rc = 0;
    if (a.nparams != b.nparams || a.run.step != b.run.step) {
        fprintf(stderr, "ckptcmp: %d parameters at step %lld vs %d at step %lld\n", a.nparams,
                (long long)a.run.step, b.nparams, (long long)b.run.step);
        rc = 1;
    }
    double worst = 0;
    int wi = -1, identical = 0;
    for (int i = 0; rc == 0 && i < a.nparams; i++) {
        if (!same_param(&a.params[i], &b.params[i])) {
            fprintf(stderr, "ckptcmp: parameter %d differs in name, dtype or shape (%s, %s)\n", i,
                    a.params[i].name, b.params[i].name);
            rc = 1;
            break;
        }
        int bits;
        double e = param_error(&a.params[i], &b.params[i], &bits);
        identical += bits;
        if (wi < 0 || e > worst)
            worst = e, wi = i;
    }
    if (rc == 0) {
        printf("ckptcmp: %d parameters, %d bit-identical, worst %s: %.3g (tolerance %.3g)\n",
               a.nparams, identical, wi >= 0 ? a.params[wi].name : "-", worst, tol);
        if (worst > tol || (tol == 0 && identical != a.nparams))
            rc = 1;
    }
    rt_checkpoint_free(&a);
    rt_checkpoint_free(&b);
    return rc;
}
