/* frontend.c - the front end as one call: load and parse (grammar/), then
 * elaborate (passes/), and the list of passes that follow. */
#include "driver.h"

#include <string.h>

const PassDesc pass_pipeline[] = {
    {"elaborate", NULL},
    {"infer-shapes", infer_shapes},
    {"infer-types", infer_types},
};
const int pass_count = (int)(sizeof pass_pipeline / sizeof pass_pipeline[0]);

int pass_index(const char *name)
{
    for (int i = 0; i < pass_count; i++)
        if (strcmp(pass_pipeline[i].name, name) == 0)
            return i;
    return -1;
}

Graph *frontend_elaborate(Diag *d, const char *path, const char *text, size_t len,
                          const ElabOptions *opt)
{
    Arena ast;
    arena_init(&ast);
    AstProgram prog = {0};
    Graph *g = NULL;
    if (ast_load(&ast, d, path, text, len, &prog))
        g = elaborate(&prog, d, opt);
    arena_free(&ast);
    return g;
}

Graph *frontend_compile(Diag *d, const char *path, const char *text, size_t len)
{
    Graph *g = frontend_elaborate(d, path, text, len, NULL);
    for (int i = 1; g && i < pass_count; i++)
        if (!pass_pipeline[i].run(g)) {
            graph_free(g);
            g = NULL;
        }
    return g;
}
