/*
 * test_data_augment.c - random crop with zero padding and horizontal mirror
 * (runtime/data/augment.c): determinism in (seed, epoch, index), a crop is
 * a shifted copy with zero fill, mirror twice is the identity, and the
 * offsets cover [-pad, pad] evenly.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "data/data_ext.h"

enum { C = 3, H = 32, W = 32, N = C * H * W };

/* distinct non-zero values, so a shifted copy is recognisable */
static void image(float *x)
{
    for (int i = 0; i < N; i++)
        x[i] = 1.0f + (float)i;
}

static float at(const float *x, int c, int y, int xx) { return x[(c * H + y) * W + xx]; }

static void test_identity(void **state)
{
    (void)state;
    float x[N], ref[N], scratch[N];
    image(x);
    image(ref);
    for (int64_t i = 0; i < 50; i++) {
        rt_augment(x, C, H, W, 0, false, 42, 3, i, scratch);
        assert_memory_equal(x, ref, sizeof x);
        RtAugment a = rt_augment_draw(0, false, 42, 3, i);
        assert_int_equal(a.dx, 0);
        assert_int_equal(a.dy, 0);
        assert_false(a.flip);
    }
}

static void test_deterministic(void **state)
{
    (void)state;
    float a[N], b[N], scratch[N];
    int differ_epoch = 0, differ_seed = 0;
    for (int64_t i = 0; i < 64; i++) {
        image(a);
        image(b);
        rt_augment(a, C, H, W, 4, true, 7, 2, i, scratch);
        rt_augment(b, C, H, W, 4, true, 7, 2, i, scratch);
        assert_memory_equal(a, b, sizeof a);
        RtAugment p = rt_augment_draw(4, true, 7, 2, i), q = rt_augment_draw(4, true, 7, 2, i);
        assert_int_equal(p.dy, q.dy);
        assert_int_equal(p.dx, q.dx);
        assert_int_equal(p.flip, q.flip);
        RtAugment e = rt_augment_draw(4, true, 7, 3, i), s = rt_augment_draw(4, true, 8, 2, i);
        differ_epoch += p.dx != e.dx || p.dy != e.dy || p.flip != e.flip;
        differ_seed += p.dx != s.dx || p.dy != s.dy || p.flip != s.flip;
        /* rt_augment is apply(draw) */
        image(b);
        rt_augment_apply(b, C, H, W, p, scratch);
        assert_memory_equal(a, b, sizeof a);
    }
    /* another epoch or seed gives other choices (same with prob 1/162 each) */
    assert_true(differ_epoch > 50);
    assert_true(differ_seed > 50);
}

/* Every output is the input shifted by (dy, dx) (mirrored when flip), with
 * zeros where the shift leaves the image; checked for every draw. */
static void test_shifted_copy(void **state)
{
    (void)state;
    float in[N], x[N], scratch[N];
    image(in);
    int saw_zero = 0;
    for (int64_t i = 0; i < 200; i++) {
        memcpy(x, in, sizeof x);
        RtAugment a = rt_augment_draw(4, i % 2 == 0, 1234, 0, i);
        rt_augment(x, C, H, W, 4, i % 2 == 0, 1234, 0, i, scratch);
        assert_true(a.dy >= -4 && a.dy <= 4 && a.dx >= -4 && a.dx <= 4);
        for (int c = 0; c < C; c++)
            for (int y = 0; y < H; y++)
                for (int xx = 0; xx < W; xx++) {
                    int sy = y + a.dy, sx = (a.flip ? W - 1 - xx : xx) + a.dx;
                    float want = sy >= 0 && sy < H && sx >= 0 && sx < W ? at(in, c, sy, sx) : 0;
                    saw_zero += want == 0;
                    assert_float_equal(at(x, c, y, xx), want, 0);
                }
    }
    assert_true(saw_zero > 0);
}

/* A fixed shift: rows and columns moved, the uncovered band exactly zero. */
static void test_fixed_shift(void **state)
{
    (void)state;
    float x[N], in[N], scratch[N];
    image(in);
    memcpy(x, in, sizeof x);
    RtAugment a = {.dy = 2, .dx = -3, .flip = false};
    rt_augment_apply(x, C, H, W, a, scratch);
    for (int c = 0; c < C; c++)
        for (int y = 0; y < H; y++)
            for (int xx = 0; xx < W; xx++) {
                if (y >= H - 2 || xx < 3)
                    assert_float_equal(at(x, c, y, xx), 0, 0);
                else
                    assert_float_equal(at(x, c, y, xx), at(in, c, y + 2, xx - 3), 0);
            }
    /* a shift by the whole image leaves zeros */
    memcpy(x, in, sizeof x);
    a = (RtAugment){.dy = 0, .dx = W, .flip = false};
    rt_augment_apply(x, C, H, W, a, scratch);
    for (int i = 0; i < N; i++)
        assert_float_equal(x[i], 0, 0);
}

static void test_mirror_twice(void **state)
{
    (void)state;
    float x[N], in[N], scratch[N];
    image(in);
    memcpy(x, in, sizeof x);
    RtAugment f = {.dy = 0, .dx = 0, .flip = true};
    rt_augment_apply(x, C, H, W, f, scratch);
    assert_float_equal(at(x, 1, 5, 0), at(in, 1, 5, W - 1), 0);
    assert_float_equal(at(x, 2, 7, 3), at(in, 2, 7, W - 4), 0);
    rt_augment_apply(x, C, H, W, f, scratch);
    assert_memory_equal(x, in, sizeof x);
    /* through rt_augment: the same (seed, epoch, index) flips both times */
    int flipped = 0;
    for (int64_t i = 0; i < 40; i++) {
        memcpy(x, in, sizeof x);
        rt_augment(x, C, H, W, 0, true, 5, 1, i, scratch);
        bool flip = memcmp(x, in, sizeof x) != 0;
        assert_int_equal(flip, rt_augment_draw(0, true, 5, 1, i).flip);
        flipped += flip;
        rt_augment(x, C, H, W, 0, true, 5, 1, i, scratch);
        assert_memory_equal(x, in, sizeof x);
    }
    assert_true(flipped > 5 && flipped < 35);
    /* odd width: the middle column stays */
    float o[5] = {1, 2, 3, 4, 5}, s[5];
    rt_augment_apply(o, 1, 1, 5, f, s);
    assert_float_equal(o[0], 5, 0);
    assert_float_equal(o[2], 3, 0);
    assert_float_equal(o[4], 1, 0);
}

/* Offsets cover [-pad, pad], each value about equally often; the coin is
 * fair; mirror false never flips. */
static void test_distribution(void **state)
{
    (void)state;
    enum { S = 18000, PAD = 4, SPAN = 2 * PAD + 1 };
    int cy[SPAN] = {0}, cx[SPAN] = {0}, joint[SPAN][SPAN] = {{0}}, flips = 0;
    for (int64_t i = 0; i < S; i++) {
        RtAugment a = rt_augment_draw(PAD, true, 99, (uint64_t)(i % 3), i);
        assert_true(a.dy >= -PAD && a.dy <= PAD);
        assert_true(a.dx >= -PAD && a.dx <= PAD);
        cy[a.dy + PAD]++;
        cx[a.dx + PAD]++;
        joint[a.dy + PAD][a.dx + PAD]++;
        flips += a.flip;
        assert_false(rt_augment_draw(PAD, false, 99, 0, i).flip);
    }
    /* expected 2,000 per value: sd ~42, allow 5 sd */
    for (int v = 0; v < SPAN; v++) {
        assert_in_range(cy[v], 2000 - 210, 2000 + 210);
        assert_in_range(cx[v], 2000 - 210, 2000 + 210);
        for (int u = 0; u < SPAN; u++)
            assert_true(joint[v][u] > 100); /* expected 222: every shift occurs */
    }
    assert_in_range(flips, 9000 - 340, 9000 + 340);
    /* pad 1: the three values */
    int c1[3] = {0};
    for (int64_t i = 0; i < 3000; i++)
        c1[rt_augment_draw(1, false, 3, 0, i).dx + 1]++;
    for (int v = 0; v < 3; v++)
        assert_in_range(c1[v], 1000 - 150, 1000 + 150);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_identity),
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_shifted_copy),
        cmocka_unit_test(test_fixed_shift),
        cmocka_unit_test(test_mirror_twice),
        cmocka_unit_test(test_distribution),
    };
    return cmocka_run_group_tests_name("data_augment", tests, NULL, NULL);
}
