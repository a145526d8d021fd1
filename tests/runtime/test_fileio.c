/* test_fileio.c - the one file-safety module (runtime/fileio.c) that ampc,
 * the programs and im2rec share: nothing is renamed over a file that is not
 * regular, a FIFO is written in place or refused (never waited for), a
 * signal removes the temporary files, and no two outputs of a run name one
 * file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fileio.h"

static char dir[64];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/test_fileio.XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* Files in dir whose name holds ".tmp." */
static int temporaries(void)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    while (d && (e = readdir(d)))
        n += strstr(e->d_name, ".tmp.") != NULL;
    if (d)
        closedir(d);
    return n;
}

static void path_in(char *p, size_t cap, const char *name) { snprintf(p, cap, "%s/%s", dir, name); }

/* A FIFO without a reader is refused at once, never waited for; with a
 * reader it is written in place and stays a FIFO. */
static void test_fifo_in_place_or_refused(void **state)
{
    (void)state;
    char fifo[128], err[512];
    path_in(fifo, sizeof fifo, "fifo");
    assert_int_equal(mkfifo(fifo, 0600), 0);
    RtOutFile o;
    assert_false(rt_out_open(&o, fifo, "--dump-state", err, sizeof err));
    assert_non_null(strstr(err, "a FIFO with no reader"));
    int rd = open(fifo, O_RDONLY | O_NONBLOCK); /* a reader */
    assert_true(rd >= 0);
    assert_true(rt_out_open(&o, fifo, "--dump-state", err, sizeof err));
    assert_null(o.tmp);
    fputs("through", o.f);
    assert_true(rt_out_commit(&o, "--dump-state", err, sizeof err));
    char buf[16] = {0};
    assert_int_equal(read(rd, buf, sizeof buf), 7);
    assert_string_equal(buf, "through");
    close(rd);
    struct stat st;
    assert_int_equal(lstat(fifo, &st), 0);
    assert_true(S_ISFIFO(st.st_mode));
    unlink(fifo);
}

/* A path that becomes a FIFO while its output is being written is not
 * renamed over: the commit fails, the FIFO stays, the temporary file goes. */
static void test_never_renamed_over_a_fifo(void **state)
{
    (void)state;
    char p[128], err[512];
    path_in(p, sizeof p, "becomes_fifo");
    RtOutFile o;
    assert_true(rt_out_open(&o, p, "--save-params", err, sizeof err));
    assert_non_null(o.tmp);
    fputs("data", o.f);
    assert_int_equal(mkfifo(p, 0600), 0);
    assert_false(rt_out_commit(&o, "--save-params", err, sizeof err));
    assert_non_null(strstr(err, "it became a FIFO while being written: never renamed over"));
    struct stat st;
    assert_int_equal(lstat(p, &st), 0);
    assert_true(S_ISFIFO(st.st_mode));
    assert_int_equal(temporaries(), 0);
    unlink(p);
}

/* A regular file is replaced through a rename (a new inode), a symbolic
 * link keeps pointing at its replaced target, a file another program
 * writes (rt_out_reserve) gets the mode asked for. */
static void test_replace_and_reserve(void **state)
{
    (void)state;
    char p[128], link[128], err[512];
    path_in(p, sizeof p, "file");
    path_in(link, sizeof link, "link");
    FILE *f = fopen(p, "w");
    fputs("old", f);
    fclose(f);
    assert_int_equal(symlink("file", link), 0);
    RtOutFile o;
    assert_true(rt_out_open(&o, link, "output", err, sizeof err));
    fputs("new", o.f);
    assert_true(rt_out_commit(&o, "output", err, sizeof err));
    struct stat st;
    assert_int_equal(lstat(link, &st), 0);
    assert_true(S_ISLNK(st.st_mode));
    char buf[8] = {0};
    f = fopen(p, "r");
    assert_non_null(fgets(buf, sizeof buf, f));
    fclose(f);
    assert_string_equal(buf, "new");
    assert_true(rt_out_reserve(&o, p, "program", 0700, err, sizeof err));
    assert_non_null(o.tmp);
    assert_string_equal(rt_out_where(&o), o.tmp);
    f = fopen(rt_out_where(&o), "w");
    fputs("prog", f);
    fclose(f);
    assert_true(rt_out_commit(&o, "program", err, sizeof err));
    assert_int_equal(stat(p, &st), 0);
    assert_int_equal(st.st_mode & 0100, 0100);
    assert_int_equal(temporaries(), 0);
    /* an input is never an output; a directory neither */
    rt_inputs_reset();
    assert_true(rt_note_input(p));
    assert_false(rt_out_open(&o, link, "--json-log", err, sizeof err));
    assert_non_null(strstr(err, "one of the run's inputs"));
    rt_inputs_reset();
    assert_false(rt_out_open(&o, dir, "--json-log", err, sizeof err));
    assert_non_null(strstr(err, "it is a directory"));
    unlink(link);
    unlink(p);
}

/* SIGTERM while an output is being written removes its temporary file. */
static void test_signal_removes_temporaries(void **state)
{
    (void)state;
    char p[128];
    path_in(p, sizeof p, "killed");
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char err[256];
        RtOutFile o;
        rt_out_remove_on_signal();
        if (!rt_out_open(&o, p, "OUT", err, sizeof err))
            _exit(3);
        fputs("partial", o.f);
        fflush(o.f);
        raise(SIGTERM);
        _exit(4); /* not reached */
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGTERM);
    assert_int_equal(temporaries(), 0);
    assert_int_equal(access(p, F_OK), -1);
}

/* Outputs that name one file, by inode or by directory and name. */
static void test_outputs_distinct(void **state)
{
    (void)state;
    char a[128], hard[128], b[128], sub[128], err[512];
    path_in(a, sizeof a, "a");
    path_in(hard, sizeof hard, "a.hard");
    path_in(b, sizeof b, "nosuch/b");
    path_in(sub, sizeof sub, "nosuch/./b");
    FILE *f = fopen(a, "w");
    fclose(f);
    assert_int_equal(link(a, hard), 0);
    const char *what[] = {"--save-params", "--json-log", "--dump-state"};
    const char *same_inode[] = {a, NULL, hard};
    assert_false(rt_outputs_distinct(same_inode, what, 3, err, sizeof err));
    assert_non_null(strstr(err, "--save-params"));
    assert_non_null(strstr(err, "--dump-state"));
    assert_non_null(strstr(err, "name the same file"));
    const char *same_new[] = {b, sub, NULL};
    assert_false(rt_outputs_distinct(same_new, what, 3, err, sizeof err));
    const char *differ[] = {a, b, "/dev/null"};
    assert_true(rt_outputs_distinct(differ, what, 3, err, sizeof err));
    const char *null3[] = {"/dev/null", "/dev/null", "/dev/null"};
    assert_true(rt_outputs_distinct(null3, what, 3, err, sizeof err));
    unlink(hard);
    unlink(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fifo_in_place_or_refused),
        cmocka_unit_test(test_never_renamed_over_a_fifo),
        cmocka_unit_test(test_replace_and_reserve),
        cmocka_unit_test(test_signal_removes_temporaries),
        cmocka_unit_test(test_outputs_distinct),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
