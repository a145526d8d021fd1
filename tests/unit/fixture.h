/* fixture.h - what the compiler's unit tests share: a Diag whose messages go
 * to memory (so tests can assert on them), the graph last compiled, and an
 * assertion on substrings.  Include after cmocka.h. */
#ifndef AMPC_TEST_FIXTURE_H
#define AMPC_TEST_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver.h"

typedef struct {
    Diag d;
    FILE *out;     /* diagnostics, into buf */
    char *buf;
    size_t len;
    size_t off;    /* diagnostics before the last compile */
    Graph *g, *g2; /* the last compiled graphs (freed by teardown) */
    char src[8192];
    char sbuf[160];
} Fx;

static int setup(void **state)
{
    Fx *fx = calloc(1, sizeof *fx);
    assert_non_null(fx);
    fx->out = open_memstream(&fx->buf, &fx->len);
    assert_non_null(fx->out);
    diag_init(&fx->d, fx->out);
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    Fx *fx = *state;
    graph_free(fx->g);
    graph_free(fx->g2);
    diag_free(&fx->d);
    fclose(fx->out);
    free(fx->buf);
    free(fx);
    return 0;
}

/* What has been reported so far. */
static inline const char *diag_text(Fx *fx)
{
    fflush(fx->out);
    return fx->buf ? fx->buf : "";
}

/* What the last compile reported. */
static inline const char *last_diag(Fx *fx) { return diag_text(fx) + fx->off; }

#define assert_contains(hay, needle)                                                   \
    do {                                                                               \
        const char *h_ = (hay), *n_ = (needle);                                        \
        if (!strstr(h_, n_))                                                           \
            fail_msg("expected to find\n  %s\nin\n%s", n_, h_);                        \
    } while (0)

#endif
