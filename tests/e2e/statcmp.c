/* statcmp.c - compares the states (runtime/state.c) of two programs that
 * took the same first step on the same batch from the same weights, e.g. a
 * model compiled for fp32 and with --amp=float16:
 *
 *   statcmp A.state B.state --loss-rtol R --min-cosine C
 *
 * Passes when the losses agree within R (relative) and, tensor by tensor,
 * the gradients' cosine similarity is at least C.  Prints every tensor's
 * cosine, the worst first. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char name[256];
    int64_t n;
    float *g;
} T;

typedef struct {
    double loss;
    uint32_t np;
    T *t;
} S;

static void rd(void *p, size_t n, FILE *f, const char *path)
{
    if (fread(p, 1, n, f) != n) {
        fprintf(stderr, "statcmp: %s: truncated\n", path);
        exit(2);
    }
}

static void load(const char *path, S *s)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "statcmp: cannot open %s\n", path);
        exit(2);
    }
    char magic[8];
    uint32_t version;
    int64_t batch, dn;
    uint64_t seed, step;
    rd(magic, 8, f, path);
    if (memcmp(magic, "AMPCSTAT", 8)) {
        fprintf(stderr, "statcmp: %s: not a state file\n", path);
        exit(2);
    }
    rd(&version, 4, f, path);
    rd(&s->np, 4, f, path);
    rd(&batch, 8, f, path);
    rd(&dn, 8, f, path);
    rd(&seed, 8, f, path);
    rd(&step, 8, f, path);
    rd(&s->loss, 8, f, path);
    s->t = calloc(s->np, sizeof *s->t);
    for (uint32_t i = 0; i < s->np; i++) {
        uint32_t len;
        rd(&len, 4, f, path);
        if (len >= sizeof s->t[i].name) {
            fprintf(stderr, "statcmp: %s: name too long\n", path);
            exit(2);
        }
        rd(s->t[i].name, len, f, path);
        rd(&s->t[i].n, 8, f, path);
        float *v = malloc(sizeof(float) * (size_t)s->t[i].n);
        s->t[i].g = malloc(sizeof(float) * (size_t)s->t[i].n);
        rd(v, sizeof(float) * (size_t)s->t[i].n, f, path);
        rd(s->t[i].g, sizeof(float) * (size_t)s->t[i].n, f, path);
        free(v);
    }
    fclose(f);
}

int main(int argc, char **argv)
{
    double rtol = 5e-3, min_cos = 0.999;
    if (argc < 3) {
        fprintf(stderr, "usage: statcmp A B [--loss-rtol R] [--min-cosine C]\n");
        return 2;
    }
    for (int i = 3; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--loss-rtol"))
            rtol = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--min-cosine"))
            min_cos = atof(argv[i + 1]);
    }
    S a, b;
    load(argv[1], &a);
    load(argv[2], &b);
    int bad = 0;
    double lrel = fabs(a.loss - b.loss) / fabs(a.loss);
    printf("statcmp: loss %.9g vs %.9g: relative difference %.3e (limit %.1e)\n", a.loss, b.loss,
           lrel, rtol);
    if (!(lrel <= rtol))
        bad++;
    double worst = 1;
    for (uint32_t i = 0; i < a.np; i++) {
        T *ta = &a.t[i], *tb = NULL;
        for (uint32_t j = 0; j < b.np; j++)
            if (!strcmp(b.t[j].name, ta->name))
                tb = &b.t[j];
        if (!tb || tb->n != ta->n) {
            printf("statcmp: %s missing or of another size in %s\n", ta->name, argv[2]);
            bad++;
            continue;
        }
        double dot = 0, na = 0, nb = 0;
        for (int64_t k = 0; k < ta->n; k++) {
            dot += (double)ta->g[k] * tb->g[k];
            na += (double)ta->g[k] * ta->g[k];
            nb += (double)tb->g[k] * tb->g[k];
        }
        if (na == 0 && nb == 0)
            continue; /* moving statistics: no gradient on either side */
        double cos = dot / (sqrt(na) * sqrt(nb) + 1e-300);
        printf("  %-48s cosine %.6f\n", ta->name, cos);
        worst = cos < worst ? cos : worst;
        if (!(cos >= min_cos))
            bad++;
    }
    printf("statcmp: worst cosine %.6f (limit %.4f): %s\n", worst, min_cos, bad ? "FAIL" : "ok");
    return bad ? 1 : 0;
}
