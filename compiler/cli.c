/* cli.c - the parts of ampc's command line that speak to the user (main.c
 * keeps the option table and the pipeline): the version, what a bad option
 * was and what was meant, the C compiler's flags, the record of how a
 * program was built, and -v's summary.
 *
 * The git revision is for --version only (make writes it into
 * BUILD/gen/version.h); dumps, reports and emitted C carry the release
 * version (AMPC_VERSION), so they do not change with every commit. */
#include "driver.h"
#include "version.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>

/* ---- the version ------------------------------------------------------------------ */

void cli_print_version(FILE *f)
{
    if (*AMPC_GIT_REV)
        fprintf(f, "ampc %s (git %s)\n", AMPC_VERSION, AMPC_GIT_REV);
    else
        fprintf(f, "ampc %s\n", AMPC_VERSION);
}

/* ---- bad options -------------------------------------------------------------------- */

/* The argument that holds short option letter c: getopt's optind does not
 * move past a cluster ("-Sx", "-O2") until its last letter, and argv is
 * permuted as it goes, so argv[optind - 1] may be anything. */
static const char *short_arg(int argc, char **argv, int c)
{
    for (int i = 1; i < argc; i++)
        if (argv[i][0] == '-' && argv[i][1] && argv[i][1] != '-' && strchr(argv[i] + 1, c))
            return argv[i];
    return NULL;
}

/* "--name" of a long option as written, without its "=value" */
static int long_name_len(const char *arg) { return (int)strcspn(arg, "="); }

static void bad_long(Diag *d, const char *arg, const struct option *longs)
{
    const char *name = arg + 2;
    int n = long_name_len(name);
    char list[512] = "";
    int matches = 0;
    size_t used = 0;
    Suggest s = {0};
    char word[64];
    snprintf(word, sizeof word, "%.*s", n < 60 ? n : 60, name);
    for (const struct option *o = longs; o->name; o++) {
        if (n > 0 && strncmp(o->name, name, (size_t)n) == 0 && used + 40 < sizeof list) {
            used += (size_t)snprintf(list + used, sizeof list - used, "%s--%s", matches ? ", " : "",
                                     o->name);
            matches++;
        }
        suggest_try(&s, word, o->name);
    }
    if (matches > 1)
        diag_plain_error(d, "option '--%.*s' is ambiguous: it could be %s (write more of it)", n,
                         name, list);
    else if (s.best)
        diag_plain_error(d, "unknown option '--%.*s' (did you mean '--%s'?)", n, name, s.best);
    else
        diag_plain_error(d, "unknown option '--%.*s' (see ampc --help)", n, name);
}

void cli_bad_option(Diag *d, int c, int argc, char **argv, const struct option *longs)
{
    /* getopt leaves optind after the argument of a long option */
    const char *arg = optind > 0 && optind <= argc ? argv[optind - 1] : "";
    if (c == ':' && optopt > 0 && optopt < 256) {
        diag_plain_error(d, "option '-%c' needs a value", optopt);
    } else if (c == ':') {
        diag_plain_error(d, "option '%.*s' needs a value", long_name_len(arg), arg);
    } else if (optopt >= 256) { /* a long option that takes no value, given one */
        diag_plain_error(d, "option '%.*s' does not take a value", long_name_len(arg), arg);
    } else if (optopt > 0) {
        const char *in = short_arg(argc, argv, optopt);
        if (in && strlen(in) > 2)
            diag_plain_error(d, "unknown option '-%c' (in '%s'; see ampc --help)", optopt, in);
        else
            diag_plain_error(d, "unknown option '-%c' (see ampc --help)", optopt);
    } else if (strncmp(arg, "--", 2) == 0) {
        bad_long(d, arg, longs);
    } else {
        diag_plain_error(d, "unknown option '%s' (see ampc --help)", arg);
    }
}

void cli_unknown_dump(Diag *d, const char *name)
{
    Suggest s = {0};
    for (int i = 0; i < stage_count; i++) /* the graph passes, then the stages */
        suggest_try(&s, name, pass_pipeline[i].name);
    suggest_try(&s, name, "all");
    if (s.best)
        diag_plain_error(d, "unknown pass '%s' for --dump (did you mean '%s'?)", name, s.best);
    else
        diag_plain_error(d, "unknown pass '%s' for --dump (see ampc --help)", name);
}

/* ---- the C compiler's flags ----------------------------------------------------------- */

bool cli_cc_flag(Diag *d, int c, const char *arg, char *flags, size_t cap)
{
    char flag[8];
    if (c == 'W') {
        diag_plain_error(d,
                         "'-W%s': ampc's diagnostics have no levels to turn on or off: every "
                         "problem in a model is an error, always reported (the C compiler "
                         "of the program takes CFLAGS)",
                         arg ? arg : "");
        return false;
    }
    if (c == 'g') {
        snprintf(flag, sizeof flag, "-g");
    } else if (!arg || (arg[0] >= '0' && arg[0] <= '3' && !arg[1])) {
        snprintf(flag, sizeof flag, "-O%s", arg ? arg : "1");
    } else {
        diag_plain_error(d,
                         "'-O%s': the optimisation level of the program's C compiler is -O0, "
                         "-O1, -O2 or -O3",
                         arg);
        return false;
    }
    size_t used = strlen(flags);
    if (used + strlen(flag) + 2 > cap) {
        diag_plain_error(d, "too many -O and -g flags");
        return false;
    }
    snprintf(flags + used, cap - used, "%s%s", used ? " " : "", flag);
    return true;
}

/* ---- how a program was built ------------------------------------------------------------ */

/* argv as one line, each absolute path (an argument, or the value of
 * --flag=/path) reduced to its file name, so a program's --version says how
 * it was built without saying where. */
char *cli_command_line(int argc, char **argv)
{
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    if (!m)
        DIE("out of memory");
    fputs("ampc", m);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *eq = strncmp(a, "--", 2) == 0 ? strchr(a, '=') : NULL;
        const char *path = eq ? eq + 1 : a;
        fputc(' ', m);
        if (eq)
            fprintf(m, "%.*s", (int)(eq + 1 - a), a);
        if (path[0] == '/') {
            const char *slash = strrchr(path, '/');
            fputs(slash[1] ? slash + 1 : path, m);
        } else {
            fputs(path, m);
        }
    }
    if (fclose(m) != 0)
        DIE("out of memory");
    return text;
}

/* ---- -v ------------------------------------------------------------------------------------ */

void cli_summary(FILE *f, const char *input, const Graph *g, bool trains, const char *output)
{
    GraphStats s;
    graph_stats(g, &s);
    fprintf(f, "ampc: %s: model %s: %d nodes, %lld trainable values in %lld tensors, amp %s, %s",
            input, g->model ? g->model : "?", g->nnodes, (long long)s.trainable,
            (long long)s.trainable_tensors, g->info.amp ? dtype_long(g->info.amp) : "off",
            trains ? "trains" : "predicts only (no loss head)");
    if (output)
        fprintf(f, ": wrote %s\n", output);
    else
        fputs(": checked (no -o: nothing written)\n", f);
}
