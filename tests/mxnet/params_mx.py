"""params_mx.py - ampc's compiled programs against MXNet 1.9.1 (run by
params.sh, which compiles the programs into TMP first):

  (a) MXNet builds examples/mlp.sym's network by hand (same parameter names),
      initialises it (Xavier, magnitude 2; random biases), saves it with
      Module.save_checkpoint; the program loads the .params, predicts on a
      random .npy, and matches MXNet's forward (fp32 and AMP float16);
  (b) round trip: the program trains a few steps, --save-params; MXNet loads
      the file (mx.nd.load, Module.set_params, SymbolBlock.imports) and
      predicts what the program's --predict does; the same with the float16
      values of the AMP program (--save-params-16bit);
  (c) examples/digits_cnn.sym's network (BatchNorm, moving statistics set to
      random values) as in (a), from a V2 file and from the V3 file MXNet
      writes under numpy shape semantics;
  (d) bad files: each refused with a message naming the file, exit 1.

usage: python params_mx.py TMP   (TMP holds the programs mlp, mlp16, cnn, cnn16)
"""
import os
import subprocess
import sys
import warnings

import numpy as np
import mxnet as mx

warnings.simplefilter("ignore")  # MXNet's UserWarnings about label shapes and types

TMP = sys.argv[1]
PASSED, FAILED = 0, 0

# The outputs are softmax probabilities; they are compared as centred
# log-probabilities, log p - mean(log p) per row, which are the logits up to
# a constant per row (so a difference there is a difference of logits, not
# one shrunk by the softmax).  Tolerances on max |ampc - MXNet|:
# fp32: both compute in fp32 but sum in different orders (OpenBLAS GEMM
# blocking, MXNet's MKL-DNN kernels): seen ~1e-6; 1e-4 leaves room and is
# far below what a wrong weight, layout or BatchNorm statistic gives (>1e-2).
TOL_F32 = 1e-4
# AMP float16: ampc stores the weights and activations in float16 (11-bit
# significands, each layer's output rounded) while MXNet computes in fp32:
# seen ~1e-3; 1e-2 allows float16's relative error of 2^-11 compounding over
# the layers on logits of order 1.
TOL_F16 = 1e-2
# The comparison means something only if the outputs vary across samples by
# much more than the looser tolerance: the centred log-probabilities' std
# over the samples, averaged over the classes, must exceed this.
MIN_SPREAD = 10 * TOL_F16


def check(cond, what):
    global PASSED, FAILED
    if cond:
        PASSED += 1
        print("ok - " + what)
    else:
        FAILED += 1
        print("FAILED - " + what)
    return cond


def prog(name, *args):
    r = subprocess.run([os.path.join(TMP, name), *args], capture_output=True, text=True,
                       timeout=300)
    return r.returncode, r.stdout, r.stderr


def path(name):
    return os.path.join(TMP, name)


# ---- the networks, built by hand with ampc's parameter names -------------------------

def mlp_sym():
    x = mx.sym.var("data")
    for i, n in ((1, 128), (2, 64)):
        x = mx.sym.FullyConnected(x, num_hidden=n, name="dense%d_fc1" % i)
        x = mx.sym.Activation(x, act_type="relu", name="dense%d_act1" % i)
    x = mx.sym.FullyConnected(x, num_hidden=10, name="fc1")
    return mx.sym.SoftmaxOutput(x, mx.sym.var("softmax_label"), name="softmax_output1")


def cnn_sym():
    x = mx.sym.var("data")
    for i, c in ((1, 16), (2, 32)):
        x = mx.sym.Convolution(x, num_filter=c, kernel=(3, 3), pad=(1, 1), no_bias=True,
                               name="conv_bn_relu%d_conv1" % i)
        # ampc's BatchNorm defaults are Gluon's (docs/language.md)
        x = mx.sym.BatchNorm(x, fix_gamma=False, eps=1e-5, momentum=0.9,
                             name="conv_bn_relu%d_bn1" % i)
        x = mx.sym.Activation(x, act_type="relu")
    x = mx.sym.Pooling(x, pool_type="max", kernel=(2, 2), stride=(2, 2))
    x = mx.sym.FullyConnected(x, num_hidden=64, name="fc1")
    x = mx.sym.Dropout(mx.sym.Activation(x, act_type="relu"), p=0.25)
    x = mx.sym.FullyConnected(x, num_hidden=10, name="fc2")
    return mx.sym.SoftmaxOutput(x, mx.sym.var("softmax_label"), name="softmax_output1")


def module(sym, shape, rs, arg=None, aux=None):
    """A bound inference Module with the parameters arg and aux, or else
    Xavier(magnitude=2) weights, random biases, BatchNorm gamma/beta and
    moving statistics."""
    mod = mx.mod.Module(sym, data_names=["data"], label_names=["softmax_label"],
                        context=mx.cpu())
    mod.bind(data_shapes=[("data", shape)], for_training=False)
    if arg is not None:
        mod.set_params(arg, aux)
        return mod
    mx.random.seed(7)
    mod.init_params(mx.init.Xavier(magnitude=2))
    arg, aux = mod.get_params()
    for k, v in arg.items():
        if k.endswith("_bias") or k.endswith("_beta"):
            arg[k] = mx.nd.array(rs.uniform(-0.5, 0.5, v.shape))
        elif k.endswith("_gamma"):
            arg[k] = mx.nd.array(rs.uniform(0.5, 1.5, v.shape))
    for k, v in aux.items():
        lo, hi = (-0.5, 0.5) if k.endswith("_moving_mean") else (0.1, 1.0)
        aux[k] = mx.nd.array(rs.uniform(lo, hi, v.shape))
    mod.set_params(arg, aux)
    return mod


def forward(mod, x):
    mod.forward(mx.io.DataBatch([mx.nd.array(x)]), is_train=False)
    return mod.get_outputs()[0].asnumpy()


def predict(name, params, x, tag):
    """The program's --predict on x after --load-params params; None on failure."""
    np.save(path(tag + "_x.npy"), x)
    out = path(tag + "_y.npy")
    args = ["--predict", path(tag + "_x.npy"), "--output", out]
    if params:
        args = ["--load-params", params] + args
    rc, so, se = prog(name, *args)
    if not check(rc == 0, "%s: %s --predict exits 0" % (tag, name)):
        print(se)
        return None
    return np.load(out)


def centred(p):
    lp = np.log(np.maximum(p.astype(np.float64), 1e-30))
    return lp - lp.mean(axis=1, keepdims=True)


def compare(tag, got, want, tol):
    if got is None:
        return
    check(got.shape == want.shape, "%s: output shape %s (MXNet %s)" % (tag, got.shape, want.shape))
    if got.shape != want.shape:
        return
    lg, lw = centred(got), centred(want)
    d = float(np.max(np.abs(lg - lw)))
    check(d <= tol, "%s: max |ampc - MXNet| of the centred log-probabilities = %.3g <= %g "
          "(probabilities: %.3g)" % (tag, d, tol, float(np.max(np.abs(got - want)))))
    spread = float(np.mean(np.std(lw, axis=0)))
    check(spread > MIN_SPREAD, "%s: MXNet's outputs vary across samples (spread %.3g > %g)"
          % (tag, spread, MIN_SPREAD))
    agree = float(np.mean(np.argmax(got, 1) == np.argmax(want, 1)))
    check(agree >= (1.0 if tol <= TOL_F32 else 0.9), "%s: argmax agrees on %.0f%%"
          % (tag, 100 * agree))


def strip(d):
    arg = {k[4:]: v for k, v in d.items() if k.startswith("arg:")}
    aux = {k[4:]: v for k, v in d.items() if k.startswith("aux:")}
    return arg, aux


# ---- (a) MXNet's weights into ampc, the MLP -----------------------------------------

rs = np.random.RandomState(13)
B = 37  # not a multiple of the programs' batch sizes: the last batch is padded
x_mlp = rs.uniform(-2, 2, (B, 64)).astype(np.float32)
mlp = module(mlp_sym(), (B, 64), rs)
mlp.save_checkpoint(path("mlp"), 0)  # mlp-symbol.json, mlp-0000.params
want = forward(mlp, x_mlp)
compare("(a) mlp fp32", predict("mlp", path("mlp-0000.params"), x_mlp, "a32"), want, TOL_F32)
compare("(a) mlp AMP float16", predict("mlp16", path("mlp-0000.params"), x_mlp, "a16"), want,
        TOL_F16)

# ---- (b) round trip: ampc trains, MXNet loads -----------------------------------------

rc, so, se = prog("mlp", "--data", "synthetic", "--max-steps", "5", "--log-interval", "0",
                  "--save-params", path("b.params"))
check(rc == 0 and "Saved parameters to" in so, "(b) mlp trains 5 steps and --save-params")
rc, so, se = prog("mlp", "--data", "synthetic", "--epochs", "0", "--save-params",
                  path("b0.params"))
check(rc == 0, "(b) mlp --epochs 0 --save-params (the initial parameters)")
if os.path.exists(path("b.params")) and os.path.exists(path("b0.params")):
    d = mx.nd.load(path("b.params"))
    d0 = mx.nd.load(path("b0.params"))
    names = sorted(mlp.get_params()[0])
    check(sorted(d) == ["arg:" + n for n in names], "(b) mx.nd.load: the keys are arg:NAME "
          "of every parameter")
    check(all(v.dtype == np.float32 for v in d.values()), "(b) fp32 masters saved as float32")
    check(any(np.abs(d[k].asnumpy() - d0[k].asnumpy()).max() > 0 for k in d),
          "(b) the saved parameters are the trained ones (they differ from the initial ones)")
    arg, aux = strip(d)
    # a fresh Module: MXNet's MKLDNN subgraph keeps the weights of its first
    # forward, so set_params on a module that has run is not seen
    mlp = module(mlp_sym(), (B, 64), rs, arg, aux)
    want = forward(mlp, x_mlp)
    compare("(b) Module.set_params", predict("mlp", path("b.params"), x_mlp, "b32"), want, TOL_F32)
    # Gluon: the network without its loss head, the file as it is
    logits = mlp_sym().get_internals()["fc1_output"]
    logits.save(path("b-symbol.json"))
    net = mx.gluon.SymbolBlock.imports(path("b-symbol.json"), ["data"], path("b.params"))
    p = mx.nd.softmax(net(mx.nd.array(x_mlp))).asnumpy()
    check(np.max(np.abs(p - want)) <= TOL_F32, "(b) SymbolBlock.imports predicts as "
          "Module.set_params (max diff %.3g)" % np.max(np.abs(p - want)))

rc, so, se = prog("mlp16", "--data", "synthetic", "--max-steps", "5", "--log-interval", "0",
                  "--save-params", path("b16.params"), "--save-params-16bit")
check(rc == 0, "(b) mlp AMP float16 trains and --save-params --save-params-16bit")
if os.path.exists(path("b16.params")):
    d = mx.nd.load(path("b16.params"))
    check(all(v.dtype == np.float16 for v in d.values()), "(b) the 16-bit values are saved "
          "as float16 (%s)" % sorted(set(str(v.dtype) for v in d.values())))
    arg, aux = strip(d)
    mlp = module(mlp_sym(), (B, 64), rs, {k: v.astype("float32") for k, v in arg.items()}, aux)
    want = forward(mlp, x_mlp)
    compare("(b) mlp AMP float16 round trip", predict("mlp16", path("b16.params"), x_mlp,
                                                      "b16"), want, TOL_F16)

# bfloat16 values: MXNet 1.9.1 loads them as its bfloat16 dtype, and widened
# they are the values the program reads back (saved again as fp32)
rc, so, se = prog("mlpbf", "--data", "synthetic", "--max-steps", "2", "--log-interval", "0",
                  "--save-params", path("bf.params"), "--save-params-16bit")
rc2, so, se = prog("mlpbf", "--load-params", path("bf.params"), "--predict", path("a32_x.npy"),
                   "--output", path("bf_y.npy"), "--save-params", path("bf32.params"))
check(rc == 0 and rc2 == 0, "(b) mlp AMP bfloat16: --save-params-16bit, then --load-params of "
      "it and --save-params in fp32")
if rc == 0 and rc2 == 0:
    d, d32 = mx.nd.load(path("bf.params")), mx.nd.load(path("bf32.params"))
    check(all("bfloat16" in str(v.dtype) for v in d.values()), "(b) MXNet reads the arrays as "
          "bfloat16")
    check(sorted(d) == sorted(d32) and all(np.array_equal(d[k].astype("float32").asnumpy(),
                                                          d32[k].asnumpy()) for k in d),
          "(b) MXNet's bfloat16 values widened are the program's")

# ---- (c) the BatchNorm CNN ----------------------------------------------------------

x_cnn = rs.uniform(-4, 4, (B, 1, 8, 8)).astype(np.float32)
cnn = module(cnn_sym(), (B, 1, 8, 8), rs)
cnn.save_checkpoint(path("cnn"), 0)
d = mx.nd.load(path("cnn-0000.params"))
check(sum(k.startswith("aux:") for k in d) == 4, "(c) the checkpoint holds 4 aux: moving "
      "statistics")
want = forward(cnn, x_cnn)
compare("(c) cnn fp32", predict("cnn", path("cnn-0000.params"), x_cnn, "c32"), want, TOL_F32)
compare("(c) cnn AMP float16", predict("cnn16", path("cnn-0000.params"), x_cnn, "c16"), want,
        TOL_F16)
with mx.util.np_shape(True):
    mx.nd.save(path("cnn-v3.params"), d)
with open(path("cnn-v3.params"), "rb") as f:
    head = f.read(28)
check(head[24:28] == b"\xca\xfa\x93\xf9", "(c) np_shape(True) writes V3 arrays (magic 0xF993faca)")
y3 = predict("cnn", path("cnn-v3.params"), x_cnn, "c3")
y2 = np.load(path("c32_y.npy")) if os.path.exists(path("c32_y.npy")) else None
check(y3 is not None and y2 is not None and np.array_equal(y3, y2),
      "(c) the V3 file predicts bit for bit as the V2 one")

# ... and its round trip: ampc trains it (the moving statistics move), MXNet
# loads the arg: and aux: arrays into a Module
rc, so, se = prog("cnn", "--data", "synthetic", "--max-steps", "3", "--log-interval", "0",
                  "--load-params", path("cnn-0000.params"), "--save-params", path("cb.params"))
check(rc == 0, "(c) cnn trains 3 steps from MXNet's weights and --save-params")
if os.path.exists(path("cb.params")):
    d2 = mx.nd.load(path("cb.params"))
    check(sorted(d2) == sorted(d), "(c) the saved keys are MXNet's (arg: and aux:)")
    moved = [k for k in d if k.startswith("aux:") and
             np.abs(d2[k].asnumpy() - d[k].asnumpy()).max() > 0]
    check(len(moved) == 4, "(c) training moved the 4 moving statistics (%d)" % len(moved))
    arg, aux = strip(d2)
    want = forward(module(cnn_sym(), (B, 1, 8, 8), rs, arg, aux), x_cnn)
    compare("(c) cnn round trip", predict("cnn", path("cb.params"), x_cnn, "cb"), want, TOL_F32)

# ---- (d) bad files --------------------------------------------------------------------

good = open(path("mlp-0000.params"), "rb").read()
np.save(path("d_x.npy"), x_mlp)


def refused(tag, args, needle, name="mlp"):
    rc, so, se = prog(name, *args)
    check(rc == 1 and needle in se and "Sanitizer" not in se,
          "(d) %s: exit %d, %r in: %s" % (tag, rc, needle, se.strip()[:300]))


def write(name, data):
    with open(path(name), "wb") as f:
        f.write(data)
    return path(name)


def pred(params=None, x=None, out=None):
    args = ["--predict", x or path("d_x.npy"), "--output", out or path("d_y.npy")]
    return (["--load-params", params] if params else []) + args


p = write("d_magic.params", b"\x13" + good[1:])
refused("wrong magic", pred(p), p + ": not an MXNet NDArray file")
p = write("d_trunc.params", good[: len(good) // 2])
refused("truncated", pred(p), p + ": truncated")
arg, aux = strip(mx.nd.load(path("mlp-0000.params")))
bad = dict(("arg:" + k, v) for k, v in arg.items())
bad["arg:fc1_weight"] = mx.nd.zeros((10, 32))
mx.nd.save(path("d_shape.params"), bad)
refused("wrong shape", pred(path("d_shape.params")), "shape mismatch for parameter fc1_weight: "
        "the file's 'arg:fc1_weight' is (10, 32), the model's is (10, 64)")
bad = dict(("arg:" + k, v) for k, v in arg.items())
bad["arg:stage9_conv0_weight"] = mx.nd.zeros((3,))
mx.nd.save(path("d_extra.params"), bad)
refused("a name matching nothing", pred(path("d_extra.params")),
        "'arg:stage9_conv0_weight' matches no parameter of model mlp")
bad = dict(("arg:" + k, v) for k, v in arg.items() if k != "fc1_bias")
mx.nd.save(path("d_missing.params"), bad)
refused("a parameter missing", pred(path("d_missing.params")),
        "parameter fc1_bias (10,) of model mlp is missing")
bad = dict(("arg:" + k, v) for k, v in arg.items())
bad["arg:fc1_bias"] = mx.nd.zeros((10,), dtype="int32")
mx.nd.save(path("d_int32.params"), bad)
refused("an int32 array", pred(path("d_int32.params")), "dtype int32 (type flag 4) is not read")
bad = dict(("arg:" + k, v) for k, v in arg.items() if k != "fc1_bias")
bad["aux:fc1_bias"] = arg["fc1_bias"]
mx.nd.save(path("d_aux.params"), bad)
refused("arg: saved as aux:", pred(path("d_aux.params")), "which is an argument")
np.save(path("d_f8.npy"), x_mlp.astype(np.float64))
refused("a float64 .npy", pred(x=path("d_f8.npy")), "dtype '<f8' (float64)")
np.save(path("d_shape.npy"), x_mlp[:, :63])
refused("a .npy of the wrong sample shape", pred(x=path("d_shape.npy")),
        "shape (37, 63) does not match model mlp's input (N, 64)")
np.save(path("d_fortran.npy"), np.asfortranarray(x_mlp))
refused("a Fortran-order .npy", pred(x=path("d_fortran.npy")), "fortran_order is True")
raw = open(path("d_x.npy"), "rb").read()
p = write("d_trunc.npy", raw[:-7])
refused("a truncated .npy", pred(x=p), p + ": truncated")
p = write("d_not.npy", good)
refused("not a .npy", pred(x=p), p + ": not a .npy file")
refused("--output over the input",
        pred(path("mlp-0000.params"), x=path("d_x.npy"), out=path("d_x.npy")),
        "one of the run's inputs")
refused("--save-params over --load-params", pred(path("mlp-0000.params")) +
        ["--save-params", path("mlp-0000.params")], "one of the run's inputs")
check(open(path("mlp-0000.params"), "rb").read() == good and
      open(path("d_x.npy"), "rb").read() == raw, "(d) the inputs were not overwritten")

print("%d passed, %d failed" % (PASSED, FAILED))
sys.exit(1 if FAILED else 0)
