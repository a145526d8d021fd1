/* test_gpucost.c - the GPU cost model's inputs and formulas by hand
 * (ir/gpu_kernels.h, passes/gpucost.h, docs/gpucost.md): the bytes and
 * FLOPs kernels.def's rows give a convolution (the stem at its padded
 * size), a BatchNorm, the fused optimizer and an element-wise op, worked
 * out from the kernels' source; the times of a memory-bound, a
 * launch-bound and a library launch from the formulas; a serial and a
 * tiled reduction predicted apart by the ratio of their chains; and the
 * model's sizes of a compiled program's calls. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>

#include "fixture.h"
#include "gpu_kernels.h"
#include "gpucost.h"
#include "../../codegen/codegen.h"

static const GkLaunch *find(const GkLaunch *l, int n, const char *kernel, int which)
{
    for (int i = 0; i < n; i++)
        if (strcmp(l[i].kernel, kernel) == 0 && which-- == 0)
            return &l[i];
    fail_msg("no launch of %s", kernel);
    return NULL;
}

static void near(double got, double want)
{
    if (!(fabs(got - want) <= 1e-9 * fabs(want) + 1e-300))
        fail_msg("got %.17g, want %.17g", got, want);
}

/* The stem: 3 channels in f16 NHWC, padded to 4 for cuDNN (runtime/cuda/plan.c),
 * 2 images of 4x4, 8 filters of 3x3, stride 2 -> 2x2.  x and w are copied
 * padded (ampc_k_pad_channels reads C = 3 channels of each row, writes 4),
 * then the convolution is priced at the padded size: 2*N*P*Q*K*R*S*cp. */
static void test_conv_stem(void **state)
{
    (void)state;
    GkDims d = {.N = 2,
                .C = 3,
                .cp = 4,
                .pad = 1,
                .K = 8,
                .G = 1,
                .HW = 16,
                .PQ = 4,
                .RS = 9,
                .stride = 2,
                .s = 2,
                .h = 1,
                .dtype = DT_F16};
    GkLaunch l[GK_MAX_LAUNCHES];
    int n = gk_describe(OP_Convolution, GE_MAIN, &d, l);
    assert_int_equal(n, 3);
    const GkLaunch *px = find(l, n, "ampc_k_pad_channels", 0),
                   *pw = find(l, n, "ampc_k_pad_channels", 1);
    near(px->rd, 2 * 16 * 3 * 2); /* rows N*HW = 32, 3 channels of 2 bytes */
    near(px->wr, 2 * 16 * 4 * 2);
    near(px->blocks, 1); /* 128 elements: one block of 256 */
    near(px->serial, 1);
    near(pw->rd, 8 * 9 * 3 * 2); /* rows K*R*S = 72 */
    near(pw->wr, 8 * 9 * 4 * 2);
    const GkLaunch *c = find(l, n, "cudnn_conv_fwd", 0);
    assert_int_equal(c->kind, GK_CUDNN_FWD);
    near(c->flops[GK_TENSOR], 2.0 * 2 * 4 * 8 * 9 * 4); /* 4608, not the 3456 of 3 channels */
    near(c->rd, (2 * 16 * 4 + 8 * 9 * 4) * 2);          /* padded x and w */
    near(c->wr, 2 * 4 * 8 * 2);
    near(c->gm, 2 * 4), near(c->gn, 8), near(c->gk, 9 * 4);
    /* without padding (the conv's own channels): two launches fewer */
    d.cp = d.C = 64, d.pad = 0;
    n = gk_describe(OP_Convolution, GE_MAIN, &d, l);
    assert_int_equal(n, 1);
    near(l[0].flops[GK_TENSOR], 2.0 * 2 * 4 * 8 * 9 * 64);
}

/* The data and filter gradients: the same FLOPs as the forward; dgrad reads
 * dy and w and writes dx, wgrad reads x and dy and writes dw, and a bias
 * gradient walks N*P*Q elements per channel, one thread each. */
static void test_conv_backward(void **state)
{
    (void)state;
    GkDims d = {.N = 4,
                .C = 16,
                .cp = 16,
                .K = 32,
                .G = 1,
                .HW = 64,
                .PQ = 64,
                .RS = 9,
                .stride = 1,
                .s = 2,
                .h = 1,
                .bias = 1,
                .dtype = DT_F16};
    GkLaunch l[GK_MAX_LAUNCHES];
    int n = gk_describe(OP__backward_Convolution, GE_DATA, &d, l);
    assert_int_equal(n, 1);
    near(l[0].flops[GK_TENSOR], 2.0 * 4 * 64 * 32 * 9 * 16);
    near(l[0].rd, (4 * 64 * 32 + 32 * 9 * 16) * 2.0);
    near(l[0].wr, 4 * 64 * 16 * 2.0);
    n = gk_describe(OP__backward_Convolution, GE_WEIGHT, &d, l);
    assert_int_equal(n, 2);
    near(l[0].rd, (4 * 64 * 16 + 4 * 64 * 32) * 2.0);
    near(l[0].wr, 32 * 9 * 16 * 2.0);
    const GkLaunch *b = find(l, n, "ampc_k_bias_grad", 0);
    near(b->serial, 4 * 64);         /* one thread walks its channel's N*P*Q elements */
    near(b->blocks * b->block, 256); /* 32 channels: one block */
    near(b->flops[GK_F64_ADD], 4 * 64 * 32);
}

/* BatchNorm's training forward, NHWC (outer = N*H*W = 100, c = 4, inner 1),
 * f16, fix_gamma off (batchnorm.cuh).  The tile (kernels/bn_tree.h):
 * one group of 64 channels aims at 2048 tiles, but a tile takes 256
 * elements at least: one tile of the 100.  ampc_k_bn_tiles: one block of
 * 256 threads (32 rows x 8 channel slots, 4 of them used: 4 channels are
 * not a multiple of 8, one a load); each row thread loads its channel's
 * first element (the shift k), then elements row, row + 32, ...: row 0 4 of
 * them, so 5 loads; bytes 2 x (400 + 32 rows x 4 channels); writes the
 * tile's 2 double partials a channel.  FLOPs: each element (double)x - k,
 * a += e, q += e*e: 3 f64 adds, 1 f64 mul, 1 conversion; each k 1
 * conversion; the fp16 decode a conversion and a multiply per load; the
 * rows' tree 31 pairs of adds a channel.  ampc_k_bn_final: a warp per
 * channel (128 threads) reads the tile's 2 partials, then x[ch], gamma,
 * beta: 5 loads; 32 lanes x 5 levels x 2 shuffle adds.
 * ampc_k_bn_apply: 4 channels cannot be read 8 at a time: per element
 * (x and the channel's 2 floats: bytes 400 x (2 + 8)), one multiply-add. */
static void test_batchnorm(void **state)
{
    (void)state;
    GkDims d = {.outer = 100, .c = 4, .inner = 1, .n = 400, .s = 2, .h = 1, .dtype = DT_F16};
    GkLaunch l[GK_MAX_LAUNCHES];
    int n = gk_describe(OP_BatchNorm, GE_TRAIN, &d, l);
    assert_int_equal(n, 3);
    const GkLaunch *st = find(l, n, "ampc_k_bn_tiles", 0);
    near(st->blocks * st->block, 256);
    near(st->serial, 5);
    near(st->rd, 2 * (400 + 32 * 4));
    near(st->wr, 16 * 4);
    near(st->flops[GK_F64_ADD], 3 * 400 + 62 * 4);
    near(st->flops[GK_F64_MUL], 400);
    near(st->flops[GK_F32_MUL], 400 + 128);
    near(st->flops[GK_CVT], 2 * (400 + 128));
    const GkLaunch *fi = find(l, n, "ampc_k_bn_final", 0);
    near(fi->blocks * fi->block, 128);
    near(fi->serial, 5);
    near(fi->rd, 16 * 4 + (2 + 8) * 4);
    near(fi->flops[GK_F64_ADD], (2 + 320 + 3) * 4);
    near(fi->flops[GK_F64_DIV], 3 * 4);
    near(fi->flops[GK_F64_SQRT], 4);
    near(fi->flops[GK_F64_CMP], 4);
    /* count (2), the shift's decode and double (2), +eps, two to float */
    near(fi->flops[GK_CVT], 7 * 4);
    const GkLaunch *af = find(l, n, "ampc_k_bn_apply", 0);
    near(af->rd, 400 * 10);
    near(af->ru, 800 + 32);
    near(af->wr, 800);
    near(af->blocks, 2);
    near(af->serial, 3);
    near(af->flops[GK_F32_ADD], 400);
    near(af->flops[GK_F32_MUL], 800);
    /* 64 channels NHWC, 1000 pixels: a 16-byte load is 8 channels (8 slots
     * of 8: one group), apply 8 elements a thread: 64000 / 8 = 8000 vectors
     * over 32 blocks, each x (1 load) and scale and shift (2 float4s each):
     * 5 loads */
    GkDims v = {.outer = 1000, .c = 64, .inner = 1, .n = 64000, .s = 2, .h = 1, .dtype = DT_F16};
    n = gk_describe(OP_BatchNorm, GE_TRAIN, &v, l);
    st = find(l, n, "ampc_k_bn_tiles", 0);
    near(st->blocks, 4);     /* 1000 elements: 4 tiles of 256 */
    near(st->serial, 1 + 8); /* k, then 256 / 32 rows */
    af = find(l, n, "ampc_k_bn_apply", 0);
    near(af->blocks, 32);
    near(af->serial, 5);
    near(af->access, GK_VEC16);
    near(af->rd, 64000 * 2 + 8000 * 64);
    /* the backward's sums in NCHW, f32: 2 images of 1003 elements a channel,
     * 8 tiles of 256: each row thread loads mean and invstd, then dy and x
     * of 8 elements; per element 3 conversions (g, and g and xhat to double),
     * 2 f64 adds and the tree's 31 pairs a tile and channel */
    GkDims b = {.outer = 2,
                .c = 4,
                .inner = 1003,
                .n = 8024,
                .s = 4,
                .dx = 1,
                .dgamma = 1,
                .dbeta = 1,
                .dtype = DT_F32};
    n = gk_describe(OP__backward_BatchNorm, GE_MAIN, &b, l);
    assert_int_equal(n, 3);
    const GkLaunch *sums = find(l, n, "ampc_k_bn_grad_tiles", 0);
    near(sums->blocks, 8);
    near(sums->flops[GK_CVT], 3 * 8024);
    near(sums->flops[GK_F64_ADD], 2 * 8024 + 62 * 8 * 4);
    near(sums->serial, 2 + 8 * 2);
    const GkLaunch *gf = find(l, n, "ampc_k_bn_grad_final", 0);
    near(gf->serial, 2 * 1 + 2 + 1); /* 8 tiles: one each for 8 lanes; invstd, gamma, mean */
}

/* The fused update (optim.cuh's ampc_k_mt_optim) for NAG with one state
 * tensor: a 16-bit parameter reads its gradient (2), fp32 master (4) and
 * momentum (4) and writes master, momentum and the 16-bit weight (4 + 4 +
 * 2): 20 bytes; an fp32 one reads gradient, weight and momentum (12) and
 * writes weight and momentum (8): 20 (docs/numerics.md section 4).  The
 * dynamic scale's check before it reads every gradient once more: the 22
 * bytes the kvstore pass counts. */
static void test_optimizer(void **state)
{
    (void)state;
    GkStepDims d = {.xb = 1000,
                    .yb = 40,
                    .rb = 400,
                    .dyn = 1,
                    .e16 = 1000,
                    .e32 = 100,
                    .nblk = 2,
                    .chunk0 = 1000,
                    .nstate = 1,
                    .nag = 1};
    GkLaunch l[GK_MAX_STEP];
    const char *names[GK_MAX_STEP];
    int n = gk_describe_step(&d, l, names);
    const GkLaunch *up = find(l, n, "ampc_k_mt_optim", 0), *chk = find(l, n, "ampc_k_mt_finite", 0);
    near(up->ru + up->wr, 20 * 1000 + 20 * 100);
    near(up->wr, 1000 * 10 + 100 * 8);
    near(chk->ru, 2 * 1000 + 4 * 100);
    near(up->blocks * up->block, 2 * 512);
    near(up->flops[GK_F32_ADD], 4 * 1100);
    /* without a dynamic scale no check runs, and the update clears the flag */
    d.dyn = 0;
    n = gk_describe_step(&d, l, names);
    for (int i = 0; i < n; i++)
        assert_string_not_equal(l[i].kernel, "ampc_k_mt_finite");
    assert_string_equal(names[0], "batch to device");
}

/* elemwise_add of 1000 f16 elements (kernels.cuh's ampc_k_binary, 16 bytes
 * at a time): 125 vectors of 8, one thread each (one block), two 16-byte
 * loads and a store a vector; per element one f32 add, two decodes (a
 * conversion and a multiply each).  1003 elements: the 3 left over one at a
 * time by the first threads, 2 loads more for the busiest.  In fp32 a vector
 * is two 16-byte loads an operand. */
static void test_elementwise(void **state)
{
    (void)state;
    GkDims d = {.n = 1000, .s = 2, .h = 1, .dtype = DT_F16};
    GkLaunch l[GK_MAX_LAUNCHES];
    assert_int_equal(gk_describe(OP_elemwise_add, GE_MAIN, &d, l), 1);
    near(l[0].rd, 4000);
    near(l[0].wr, 2000);
    near(l[0].flops[GK_F32_ADD], 1000);
    near(l[0].flops[GK_F32_MUL], 2000);
    near(l[0].flops[GK_CVT], 2000);
    near(l[0].blocks, 1);
    near(l[0].serial, 2);
    near(l[0].access, GK_VEC16);
    d.n = 1003;
    gk_describe(OP_elemwise_add, GE_MAIN, &d, l);
    near(l[0].serial, 2 + 2);
    GkDims f = {.n = 1000, .s = 4, .dtype = DT_F32};
    gk_describe(OP_elemwise_add, GE_MAIN, &f, l);
    near(l[0].serial, 4);
    f.n = 5; /* no vector: one element a thread */
    gk_describe(OP_elemwise_add, GE_MAIN, &f, l);
    near(l[0].serial, 2);
    near(l[0].access, GK_SCALAR);
}

static void machine(const char *name, KvMachine *m)
{
    Diag d;
    diag_init(&d, stderr);
    assert_true(kv_machine_builtin(&d, name, m));
    diag_free(&d);
}

/* The formulas on h100 (132 SMs, 3350 GB/s, 66.9 fp32 TFLOP/s, 1.98 GHz,
 * L2 100 ns, DRAM 300 ns, launch 2 us) at the constants' fast end
 * (docs/gpucost.md: bw_vec 0.9, latency x0.8, dep_cycles 4, cvt_slots 4,
 * launch x1). */
static void test_times(void **state)
{
    (void)state;
    KvMachine m;
    machine("h100", &m);
    GkLaunch l[GK_MAX_LAUNCHES];
    GcRange t;
    GcBound b;
    /* 1e8 f16 adds, 16 bytes at a time: 4096 blocks fill the GPU; 6e8 bytes
     * at 0.9 x 3350 GB/s */
    GkDims big = {.n = 1e8, .s = 2, .h = 1, .dtype = DT_F16};
    gk_describe(OP_elemwise_add, GE_MAIN, &big, l);
    gpucost_price_launch(&m, &l[0], DT_F16, &t, &b);
    near(t.fast, 6e8 / (3350e9 * 0.9) + 2e-6);
    assert_int_equal(b, GB_MEMORY);
    /* 1000 of them: 1 block of 132 SMs, 6000 bytes in 0.26 us; one thread
     * waits 80 ns for its two loads (L2: the bytes fit); the launch is the time */
    GkDims small = {.n = 1000, .s = 2, .h = 1, .dtype = DT_F16};
    gk_describe(OP_elemwise_add, GE_MAIN, &small, l);
    gpucost_price_launch(&m, &l[0], DT_F16, &t, &b);
    double share = 1.0 / 132, mem = 6000 / (3350e9 * 0.9 * share);
    double chain = 5000.0 / 256 * 4 / 1.98e9, serial = 1 * 100e-9 * 0.8 + chain;
    near(t.fast, fmax(mem, serial) + 2e-6);
    assert_int_equal(b, GB_LAUNCH);
    /* a 3x3 convolution, 256 -> 256 channels on 256 images of 14x14, f16:
     * 784 output tiles of 128x128 fill 6 waves of 132 SMs less 8 tiles;
     * efficiency 0.75 at the fast end (3x3, 256 channels and more) */
    GkDims cv = {.N = 256,
                 .C = 256,
                 .cp = 256,
                 .K = 256,
                 .G = 1,
                 .HW = 196,
                 .PQ = 196,
                 .RS = 9,
                 .stride = 1,
                 .s = 2,
                 .h = 1,
                 .dtype = DT_F16};
    gk_describe(OP_Convolution, GE_MAIN, &cv, l);
    gpucost_price_launch(&m, &l[0], DT_F16, &t, &b);
    double flops = 2.0 * 256 * 196 * 256 * 9 * 256;
    near(t.fast, flops / (989.4e12 * 0.75 * (784.0 / 792)) + 2e-6);
    assert_int_equal(b, GB_COMPUTE);
}

/* The fixture pair: a channel sum over 256 channels of 2^20 elements, one
 * thread per channel walking its elements one load after another (today's
 * BatchNorm statistics), against the same sum tiled 64 ways (a block per
 * tile, 256 threads, each walking 2^14 elements, the partials combined
 * after).  Same bytes, same FLOPs per element: the serial form is
 * predicted slower by the ratio of the chains, 64, at both ends (to the
 * launch's few microseconds). */
static void test_serial_vs_tiled(void **state)
{
    (void)state;
    KvMachine m;
    machine("h100", &m);
    double elems = 256.0 * 1048576;
    GkLaunch serial = {.kernel = "fixture_serial_sum",
                       .blocks = 1,
                       .block = 256,
                       .rd = 2 * elems,
                       .wr = 256 * 4,
                       .serial = 1048576,
                       .flops = {[GK_F32_ADD] = elems}};
    GkLaunch tiled = serial;
    tiled.kernel = "fixture_tiled_sum";
    tiled.blocks = 64, tiled.serial = 1048576 / 64, tiled.wr = 64 * 256 * 4;
    GcRange ts, tt;
    GcBound bs, bt;
    gpucost_price_launch(&m, &serial, DT_F16, &ts, &bs);
    gpucost_price_launch(&m, &tiled, DT_F16, &tt, &bt);
    assert_int_equal(bs, GB_SERIAL);
    assert_true(bt == GB_SERIAL || bt == GB_LATENCY);
    for (int e = 0; e < 2; e++) {
        double launch = m.launch_us * 1e-6 * (e ? 2 : 1);
        double r = ((e ? ts.slow : ts.fast) - launch) / ((e ? tt.slow : tt.fast) - launch);
        if (fabs(r - 64) > 1e-6)
            fail_msg("end %d: serial / tiled = %.9g, not 64", e, r);
    }
}

/* The model on a compiled program: a small f16 CNN for CUDA, batch 2.  Its
 * first convolution's data has 3 channels (padded to 4: two pad launches
 * and the padded FLOPs); every call of the train step is priced; the
 * kvstore pass's times are the middles of the ranges. */
static void test_program(void **state)
{
    Fx *fx = *state;
    const char *src =
        "model m(data: float32[N,3,8,8], softmax_label: float32[N]) {\n"
        "    c = Convolution(data, kernel=(3,3), pad=(1,1), num_filter=8, no_bias=true, "
        "name=\"c1\")\n"
        "    x = Activation(BatchNorm(c, name=\"bn1\"), act_type=\"relu\", name=\"r1\")\n"
        "    f = FullyConnected(Flatten(x), num_hidden=10, name=\"fc\")\n"
        "    return SoftmaxOutput(f, softmax_label, name=\"softmax\")\n"
        "}\n";
    PassOptions o = {.amp = "float16", .target = TARGET_CUDA};
    fx->g = frontend_compile(&fx->d, "t.sym", src, strlen(src), &o);
    assert_non_null(fx->g);
    Program p;
    lower(fx->g, NULL, &p);
    KvMachine m;
    machine("h100", &m);
    GcOptions go = {.batch = 2, .nstate = 1, .optimizer = 1, .dynamic = true, .log_interval = 50};
    GcResult r;
    assert_true(gpucost_predict(fx->g, &p, &m, &go, &fx->d, &r));
    const GcCall *conv = NULL;
    int train = 0;
    for (int i = 0; i < r.ncalls; i++) {
        train += r.calls[i].step == STEP_TRAIN;
        if (r.calls[i].step == STEP_TRAIN && strcmp(r.calls[i].entry, "rt_cuda_conv_forward") == 0)
            conv = &r.calls[i];
        assert_true(r.calls[i].t.fast > 0 && r.calls[i].t.fast <= r.calls[i].t.slow);
    }
    assert_non_null(conv);
    assert_string_equal(conv->node, "c1");
    assert_string_equal(conv->kernels, "ampc_k_pad_channels+ampc_k_pad_channels+cudnn_conv_fwd");
    near(conv->flops[GK_TENSOR], 2.0 * 2 * 64 * 8 * 9 * 4);
    assert_true(train >= p.step[STEP_TRAIN].ncalls); /* a backward may make two */
    double sum = 0;
    for (int i = 0; i < r.ntrain; i++)
        sum += r.train_sec[i];
    double mids = 0;
    for (int i = 0; i < r.ncalls; i++)
        if (r.calls[i].step == STEP_TRAIN)
            mids += 0.5 * (r.calls[i].t.fast + r.calls[i].t.slow);
    near(sum, mids);
    assert_true(r.step.fast <= r.step.slow && r.images_s.slow <= r.images_s.fast);
    /* conv_bn_stats (prepared, not enabled): bn1 reads c1, so its forward
     * loses the tiles' sums and their final step for ampc_k_bn_final_sums */
    assert_int_equal(r.bns, 1);
    assert_int_equal(r.stats_bns, 1);
    assert_true(r.stats_bn_fwd.fast > 0 && r.stats_bn_fwd.fast < r.family[GF_BN_FWD].fast);
    assert_true(r.stats_bn_fwd.slow < r.family[GF_BN_FWD].slow);
    near(r.device.fast - r.stats_device.fast, r.family[GF_BN_FWD].fast - r.stats_bn_fwd.fast);
    gpucost_free(&r);
    /* a machine without devices has no GPU to price */
    machine("cpu", &m);
    assert_false(gpucost_predict(fx->g, &p, &m, &go, &fx->d, &r));
    assert_contains(diag_text(fx),
                    "the GPU cost model needs a machine with devices; 'cpu' has none");
    program_free(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv_stem),
        cmocka_unit_test(test_conv_backward),
        cmocka_unit_test(test_batchnorm),
        cmocka_unit_test(test_optimizer),
        cmocka_unit_test(test_elementwise),
        cmocka_unit_test(test_times),
        cmocka_unit_test(test_serial_vs_tiled),
        cmocka_unit_test_setup_teardown(test_program, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
