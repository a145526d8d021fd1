/* ckpt_tool.c - prints what an ampc checkpoint holds, through the runtime's
 * own reader (runtime/checkpoint.c), for tests/e2e/training.sh:
 *
 *   ckpt_tool show FILE   the run state, one "key value" line each, then one
 *                         line per parameter with the crc32 of its fp32
 *                         values and of its momentum:
 *                           param NAME DTYPE [SHAPE] values=XXXXXXXX state=XXXXXXXX|-
 *   ckpt_tool check FILE  exit 0 for a good checkpoint; 1 and the reader's
 *                         message otherwise
 *
 * Built by training.sh against the runtime next to ampc:
 *   cc -Iruntime tests/e2e/ckpt_tool.c BUILD/libampcrt.a -lopenblas -lz -lm
 */
#include <stdio.h>
#include <string.h>
#include <zlib.h>

#include "train.h"
#include "checkpoint.h"

static unsigned long crc_floats(const float *v, int64_t n)
{
    uLong c = crc32(0L, Z_NULL, 0);
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        unsigned char b[4] = {(unsigned char)u, (unsigned char)(u >> 8),
                              (unsigned char)(u >> 16), (unsigned char)(u >> 24)};
        c = crc32(c, b, 4);
    }
    return (unsigned long)c;
}

int main(int argc, char **argv)
{
    if (argc != 3 || (strcmp(argv[1], "show") != 0 && strcmp(argv[1], "check") != 0)) {
        fprintf(stderr, "usage: ckpt_tool show|check FILE\n");
        return 2;
    }
    RtCheckpoint ck;
    char err[1024];
    if (!rt_checkpoint_read(argv[2], &ck, err, sizeof err)) {
        fprintf(stderr, "ckpt_tool: %s\n", err);
        return 1;
    }
    if (strcmp(argv[1], "show") == 0) {
        const RtRunState *r = &ck.run;
        printf("model %s\namp %s\nseed %llu\nbatch_size %lld\nepoch %lld\nbatch_in_epoch %lld\n"
               "step %lld\nnum_update %lld\noptimizer %s\nmomentum %.9g\nloss_scale_mode %s\n"
               "loss_scale %.9g\nloss_scale_tracker %d\nskipped %lld\nnonfinite %lld\n",
               ck.model, ck.amp, (unsigned long long)r->seed, (long long)r->batch_size,
               (long long)r->epoch, (long long)r->batch_in_epoch, (long long)r->step,
               (long long)r->num_update, r->optimizer == RT_OPT_NAG ? "nag" : r->optimizer == RT_OPT_ADAM ? "adam" : "sgd",
               (double)r->momentum, rt_loss_scale_mode_name(r->ls.mode), (double)r->ls.s.scale,
               (int)r->ls.s.tracker, (long long)r->ls.skipped, (long long)r->ls.nonfinite);
        for (int i = 0; i < ck.nparams; i++) {
            const RtCkptParam *p = &ck.params[i];
            printf("param %s %s%s [", p->name, rt_dtype_name(p->dtype),
                   p->has_master ? " master" : "");
            for (int d = 0; d < p->rank; d++)
                printf("%s%lld", d ? "," : "", (long long)p->shape[d]);
            printf("] values=%08lx", crc_floats(p->values, p->numel));
            if (p->state)
                printf(" state=%08lx\n", crc_floats(p->state, p->numel));
            else
                printf(" state=-\n");
        }
    }
    rt_checkpoint_free(&ck);
    return 0;
}
