/* metrics.c - the metrics of the training and validation logs: accuracy,
 * MXNet's top-5 accuracy and the cross-entropy, summed over batches, on the
 * host: the loss head's output is copied from the device first.  Apart
 * from the logs that print them (log.c) because the loop, validation and
 * the logs all read the same sums.
 */
#include <stdint.h>

#include "train_internal.h"

/* Rows whose label is among the k most probable classes, ties broken as
 * the accuracy's argmax (the first maximum): MXNet's TopKAccuracy. */
static int64_t topk_count(int64_t n, int64_t classes, const float *p, const float *label, int k)
{
    int64_t hit = 0;
    for (int64_t r = 0; r < n; r++) {
        const float *row = p + r * classes;
        float lf = label[r];
        if (!(lf >= 0 && lf < (float)classes))
            continue;
        int64_t l = (int64_t)lf, rank = 0;
        for (int64_t j = 0; j < classes; j++)
            rank += row[j] > row[l] || (j < l && row[j] == row[l]);
        hit += rank < k;
    }
    return hit;
}

void rt_metric_add_rows(Metric *mt, const RtModel *m, RtDType dt, const void *p,
                        const float *label, int64_t n)
{
    int64_t cnt = 0;
    mt->correct += rt_accuracy_count(n, m->classes, dt, p, label);
    mt->ce_sum += rt_cross_entropy_sum(n, m->classes, dt, p, label, &cnt);
    mt->ce_count += cnt;
    if (m->classes > TOP_K && dt == RT_F32)
        mt->topk += topk_count(n, m->classes, p, label, TOP_K);
    mt->samples += n;
}

void rt_metric_add(Metric *mt, RtTrainer *t, int prob, int64_t n)
{
    const void *p = rt_trainer_read_rows(t, prob, n); /* the probabilities, on the host */
    /* the labels the batch was loaded from */
    rt_metric_add_rows(mt, t->m, t->m->buffers[prob].dtype, p, t->y_host, n);
}

double rt_metric_acc(const Metric *mt)
{
    return mt->samples ? (double)mt->correct / (double)mt->samples : 0.0;
}

double rt_metric_topk(const Metric *mt)
{
    return mt->samples ? (double)mt->topk / (double)mt->samples : 0.0;
}

double rt_metric_ce(const Metric *mt)
{
    return mt->ce_count ? mt->ce_sum / (double)mt->ce_count : 0.0;
}
