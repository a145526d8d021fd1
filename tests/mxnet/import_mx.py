"""import_mx.py - ampc's symbol JSON import and export against MXNet 1.9.1
(run by import.sh; docs/mxnet.md, "Symbol JSON"):

  (a) export: every example, written with --emit-mxnet-json (fp32, and with
      --amp=float16 the rewritten graph), loads with mx.sym.load, and MXNet's
      infer_shape (and, for AMP, infer_type) gives every node the shape and
      dtype ampc gives it;
  (b) import: Gluon model-zoo networks (resnet18_v1, resnet50_v2 and
      mobilenetv2_1.0 at 64x64; squeezenet1.1 and densenet121 at 224x224,
      their final pools being fixed-size), initialised with Xavier
      (magnitude 2) and random BatchNorm moving statistics, exported by
      MXNet; ampc imports the JSON (--loss=softmax), the program loads the
      .params and predicts on a random .npy, and the outputs match MXNet's
      forward (fp32; AMP float16 for two of them, looser); on a disagreement
      the graph is cut at stages to say where it starts; and a small Gluon
      network trained a few steps by the program from MXNet's weights is
      loaded back by MXNet (SymbolBlock.imports) and predicts the same;
  (d) the JSON dialect: names MXNet saves with quotes, backslashes, '/'
      and non-ASCII letters import and export back; control characters are
      refused with their messages;
  (e) MXNet's own AMP test cases (check_amp_convert_symbol, fp16 and bf16)
      through both, and ampc's bf16 dtypes against MXNet's bf16 rewrite;
  (c) AMP decisions: for the imported ResNets, ampc's dtype for every op is
      the one amp.convert_symbol(..., cast_optional_params=True) gives, and
      ampc's cast count is at most MXNet's (both printed).

usage: python import_mx.py AMPC TMP
"""
import json
import os
import subprocess
import sys
import warnings

import numpy as np
import mxnet as mx
from mxnet.contrib import amp

warnings.simplefilter("ignore")  # MXNet's UserWarnings

AMPC, TMP = sys.argv[1], sys.argv[2]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PASSED, FAILED = 0, 0

# The program's outputs are softmax probabilities (--loss=softmax); they are
# compared as centred log-probabilities (log p - mean log p per row: the
# logits up to a constant per row).  Tolerances on max |ampc - MXNet|:
# fp32: the same arithmetic summed in other orders (OpenBLAS GEMM blocking and
# ampc's direct convolutions against MXNet's MKL-DNN), through up to 121
# layers: seen ~3e-6 (resnet18) to ~2e-5 (densenet121); 1e-3 leaves room and
# stays far below what a wrong weight, layout, default or statistic gives
# (> 1e-1 on these logits).
TOL_F32 = 1e-3
# AMP float16 against MXNet's fp32 (MXNet 1.9 has no float16 GEMM on the CPU
# to compare with): every layer's output rounded to an 11-bit significand,
# compounding over the network, on centred logits of at most 8 (export_zoo
# scales them so): seen 1.0e-2 (resnet18_v1) and 1.6e-1 (mobilenetv2_1.0, 53
# layers); the fp32 comparison above already holds the import to 1e-3, so
# this one only needs to catch an AMP decision gone wrong (an op's error of
# the order of the logits): 4e-1, 5% of their range.
TOL_F16 = 4e-1
# The comparison means something only if the outputs vary across samples
# (the inputs are low-frequency random patterns, not white noise, which the
# global pools average away): the centred logits' standard deviation over
# the samples, averaged over the classes, well above the fp32 tolerance.
MIN_SPREAD = 50 * TOL_F32


def check(cond, what):
    global PASSED, FAILED
    if cond:
        PASSED += 1
        print("ok - " + what)
    else:
        FAILED += 1
        print("FAILED - " + what)
    return cond


def run(args, what):
    r = subprocess.run(args, capture_output=True, text=True, timeout=600, cwd=ROOT)
    if r.returncode != 0:
        print("    %s failed (exit %d):\n%s" % (what, r.returncode,
                                                 "\n".join("    " + l for l in
                                                           (r.stderr or r.stdout).splitlines()[-15:])))
    return r


def path(name):
    return os.path.join(TMP, name)


# ---- ampc's dumps -------------------------------------------------------------------

def parse_dump(text):
    """{name: (dtype, shape tuple)} from an IR dump with N bound (--batch-size)."""
    nodes = {}
    for line in text.splitlines():
        if not line.startswith("%") or " = " not in line:
            continue
        head, rest = line.split(" = ", 1)
        ty = head.split(":", 1)[1]
        dt, dims = ty.split("[", 1)
        shape = tuple(int(d) for d in dims.rstrip("]").split(",") if d)
        name = rest.split('name="', 1)[1].split('"', 1)[0]
        op = rest.split("(", 1)[0]
        nodes[name] = (dt, shape, op)
    return nodes


MX_DT = {np.float32: "f32", np.float16: "f16", np.float64: "f64"}


# ---- (a) export ------------------------------------------------------------------------

def check_export(example, amp_flag):
    base = os.path.basename(example)[:-4] + ("_16" if amp_flag != "off" else "")
    js = path(base + "-symbol.json")
    r = run([AMPC, example, "--amp=" + amp_flag, "--emit-mxnet-json", js, "--batch-size=2",
             "--dump=cast-elide"], "ampc --emit-mxnet-json " + example)
    if not check(r.returncode == 0, "%s --amp=%s exports" % (example, amp_flag)):
        return
    ours = parse_dump(r.stdout)
    sym = mx.sym.load(js)
    inputs = {n: s for n, (d, s, op) in ours.items() if op == "Input"}
    internals = sym.get_internals()
    outs = internals.list_outputs()
    _, oshapes, _ = internals.infer_shape(**inputs)
    _, otypes, _ = internals.infer_type(**{n: "float32" for n in inputs})
    bad = []
    for out, s, t in zip(outs, oshapes, otypes):
        name = out[:-len("_output")] if out.endswith("_output") else out
        if name not in ours:
            bad.append("%s: not in ampc's graph" % name)
            continue
        dt, shape, _ = ours[name]
        if tuple(s) != shape or MX_DT.get(t, str(t)) != dt:
            bad.append("%s: MXNet %s %s, ampc %s %s" % (name, MX_DT.get(t, t), tuple(s), dt, shape))
    check(not bad and len(outs) == len(ours),
          "%s --amp=%s: mx.sym.load reads it; infer_shape/infer_type agree on all %d nodes%s"
          % (example, amp_flag, len(outs), "".join("\n    " + b for b in bad[:5])))


# ---- (b) import ------------------------------------------------------------------------

def export_zoo(name, size, x):
    """A Gluon zoo network with weights that make a comparison mean something:
    Xavier (magnitude 2); the BatchNorm moving statistics those of a random
    batch (one training-mode forward with momentum 0, so every layer's
    activations keep their scale), then each moved at random (mean by up to
    0.2 standard deviations, variance by a factor 0.7 to 1.4), gamma and beta
    random too; exported by MXNet."""
    mx.random.seed(7)
    np.random.seed(7)
    net = mx.gluon.model_zoo.vision.get_model(name)
    bns = []
    def find(b):
        if isinstance(b, mx.gluon.nn.BatchNorm):
            bns.append(b)
        for c in b._children.values():
            find(c)
    find(net)
    net.initialize(mx.init.Xavier(factor_type="in", magnitude=2))
    for b in bns:
        b._kwargs["momentum"] = 0.0
    net.hybridize()
    with mx.autograd.record(train_mode=True):
        y = net(mx.nd.array(np.random.uniform(-1, 1, (8, 3, size, size))))
    y.backward()  # MXNet's BatchNorm updates its moving statistics in the backward pass
    for b in bns:
        b._kwargs["momentum"] = 0.9
    net.hybridize()  # the graph again, with momentum 0.9 in it
    for b in bns:
        mean, var = b.running_mean.data().asnumpy(), b.running_var.data().asnumpy()
        c = mean.shape
        b.running_mean.set_data(mx.nd.array(mean + 0.2 * np.sqrt(var) * np.random.uniform(-1, 1, c)))
        b.running_var.set_data(mx.nd.array(var * np.random.uniform(0.7, 1.4, c)))
        b.gamma.set_data(mx.nd.array(np.random.uniform(0.7, 1.3, c)))
        b.beta.set_data(mx.nd.array(np.random.uniform(-0.1, 0.1, c)))
    # The logits' range: a network without BatchNorm (squeezenet) loses
    # scale layer by layer, others gain it (densenet121: ~200).  The program
    # returns probabilities, whose logarithms hold the logits only while
    # exp(-range) is no fp32 underflow: the last weight (a 1x1 convolution or
    # Dense with a zero bias, before relu and pooling, so the logits scale
    # with it) is scaled to put the largest centred logit at 8.
    top = np.abs(centred(mx_logits(net, x))).max()
    last = [p for n, p in net.collect_params().items() if n.endswith("weight")][-1]
    last.set_data(last.data() * float(8 / top))
    prefix = path(name.replace(".", "_"))
    net.export(prefix)
    return net, prefix + "-symbol.json", prefix + "-0000.params"


def centred(v):
    return v - v.mean(axis=1, keepdims=True)


def centred_log(p):
    lp = np.log(np.maximum(p.astype(np.float64), 1e-300))
    return lp - lp.mean(axis=1, keepdims=True)


def mx_logits(net, x):
    return net(mx.nd.array(x)).asnumpy().reshape(x.shape[0], -1).astype(np.float64)


def ampc_predict(js, params, size, x, flags, tag):
    """Imports js with --loss=softmax, compiles, predicts x: the centred
    log-probabilities, or None."""
    exe, xin, out = path(tag), path(tag + "-in.npy"), path(tag + "-out.npy")
    r = run([AMPC, "--from-mxnet", js, "--input-shape", "data=1,3,%d,%d" % (size, size),
             "--loss=softmax", *flags, "-o", exe], "ampc --from-mxnet " + js)
    if r.returncode != 0:
        return None
    np.save(xin, x)
    r = run([exe, "--load-params", params, "--predict", xin, "--output", out], tag + " --predict")
    return centred_log(np.load(out)) if r.returncode == 0 else None


def cut_json(js, head, tag):
    """The symbol up to node `head`, flattened: its centred log-softmax is the
    node's value minus its mean per sample."""
    j = json.load(open(js))
    nodes = j["nodes"][:head + 1]
    nodes.append({"op": "Flatten", "name": "stage_flatten", "inputs": [[head, 0, 0]]})
    out = {"nodes": nodes, "arg_nodes": [i for i, n in enumerate(nodes) if n["op"] == "null"],
           "heads": [[len(nodes) - 1, 0, 0]], "attrs": j.get("attrs", {})}
    p = path(tag + "-symbol.json")
    json.dump(out, open(p, "w"))
    return p, nodes[head]["name"]


def stages(js, net_sym, params, size, x, tol):
    """On a disagreement: the first of a few evenly spaced ops whose value
    differs, by cutting the graph there on both sides."""
    j = json.load(open(js))
    ops = [i for i, n in enumerate(j["nodes"]) if n["op"] not in ("null",)]
    args = mx.nd.load(params)
    argp = {k[4:]: v for k, v in args.items() if k.startswith("arg:")}
    auxp = {k[4:]: v for k, v in args.items() if k.startswith("aux:")}
    for k in range(1, 9):
        head = ops[len(ops) * k // 8 - 1]
        cut, name = cut_json(js, head, "stage%d" % k)
        sym = net_sym.get_internals()[name + "_output"]
        exe = sym.bind(mx.cpu(), {**{n: argp[n] for n in sym.list_arguments() if n in argp},
                                  "data": mx.nd.array(x)},
                       aux_states={n: auxp[n] for n in sym.list_auxiliary_states()})
        theirs = exe.forward(is_train=False)[0].asnumpy().reshape(x.shape[0], -1)
        theirs = theirs - theirs.mean(axis=1, keepdims=True)
        sub = path("stage%d-0000.params" % k)  # the cut graph's parameters only
        keep = set(sym.list_arguments()) | set(sym.list_auxiliary_states())
        mx.nd.save(sub, {key: v for key, v in args.items() if key[4:] in keep})
        ours = ampc_predict(cut, sub, size, x, [], "stage%d" % k)
        diff = np.abs(ours - theirs).max() if ours is not None else float("inf")
        print("    stage %d/8, after '%s': max difference %.3g" % (k, name, diff))
        if diff > tol:
            print("    the outputs part at or before '%s'" % name)
            return


def check_zoo(name, size, amp16):
    rng = np.random.RandomState(11)
    blocks = rng.uniform(-2, 2, (2, 3, 4, 4)).repeat(size // 4, 2).repeat(size // 4, 3)
    x = (blocks + rng.uniform(-0.2, 0.2, (2, 3, size, size))).astype(np.float32)
    net, js, params = export_zoo(name, size, x)
    theirs = centred(mx_logits(net, x))
    spread = theirs.std(axis=0).mean()
    check(spread > MIN_SPREAD, "%s: MXNet's outputs vary across samples (spread %.3g > %.3g)"
          % (name, spread, MIN_SPREAD))
    tag = name.replace(".", "_")
    ours = ampc_predict(js, params, size, x, [], tag)
    diff = np.abs(ours - theirs).max() if ours is not None else float("inf")
    if not check(diff <= TOL_F32, "%s %dx%d: imported, compiled, --load-params and --predict "
                 "match MXNet's forward (fp32: max difference %.3g <= %g)"
                 % (name, size, size, diff, TOL_F32)):
        stages(js, mx.sym.load(js), params, size, x, TOL_F32)
    if amp16:
        ours = ampc_predict(js, params, size, x, ["--amp=float16"], tag + "_16")
        diff = np.abs(ours - theirs).max() if ours is not None else float("inf")
        check(diff <= TOL_F16, "%s %dx%d --amp=float16: max difference %.3g <= %g"
              % (name, size, size, diff, TOL_F16))
    return js


def check_train_roundtrip():
    """The user's whole path: a Gluon network exported by MXNet, imported and
    given a loss, trained a few steps from MXNet's weights, its .params
    loaded back by MXNet (SymbolBlock.imports), which then predicts what the
    program does."""
    mx.random.seed(5)
    net = mx.gluon.nn.HybridSequential(prefix="tiny_")
    with net.name_scope():
        net.add(mx.gluon.nn.Conv2D(8, 3, padding=1), mx.gluon.nn.BatchNorm(),
                mx.gluon.nn.Activation("relu"), mx.gluon.nn.MaxPool2D(2),
                mx.gluon.nn.Dense(10))
    net.initialize(mx.init.Xavier(magnitude=2))
    net.hybridize()
    net(mx.nd.zeros((1, 1, 8, 8)))
    net.export(path("tiny"))
    js, start, trained = path("tiny-symbol.json"), path("tiny-0000.params"), path("trained.params")
    exe = path("tiny")
    r = run([AMPC, "--from-mxnet", js, "--input-shape", "data=1,1,8,8", "--loss=softmax",
             "-o", exe], "ampc --from-mxnet tiny")
    if not check(r.returncode == 0, "a Gluon export imported with --loss=softmax compiles"):
        return
    r = run([exe, "--load-params", start, "--data", "synthetic", "--max-steps", "5",
             "--batch-size", "16", "--lr", "0.1", "--log-interval", "0", "--save-params", trained],
            "tiny: 5 training steps")
    if not check(r.returncode == 0, "it trains 5 steps from MXNet's weights and --save-params"):
        return
    before, after = mx.nd.load(start), mx.nd.load(trained)
    moved = [k for k in before if not np.array_equal(before[k].asnumpy(), after[k].asnumpy())]
    check(sorted(before) == sorted(after) and len(moved) == len(before),
          "MXNet reads the file: the same %d keys, every one moved by training (%d)"
          % (len(before), len(moved)))
    x = np.random.RandomState(3).uniform(-1, 1, (5, 1, 8, 8)).astype(np.float32)
    np.save(path("tiny-in.npy"), x)
    r = run([exe, "--load-params", trained, "--predict", path("tiny-in.npy"), "--output",
             path("tiny-out.npy")], "tiny --predict")
    if r.returncode != 0:
        check(False, "the trained program predicts")
        return
    ours = centred_log(np.load(path("tiny-out.npy")))
    back = mx.gluon.SymbolBlock.imports(js, ["data"], trained)
    theirs = centred(back(mx.nd.array(x)).asnumpy().astype(np.float64))
    diff = np.abs(ours - theirs).max()
    check(diff <= TOL_F32, "SymbolBlock.imports of the trained .params predicts what the program "
          "does (max difference %.3g <= %g)" % (diff, TOL_F32))


def check_module():
    """A symbol built with mx.sym and saved by Module.save_checkpoint: the
    file has its loss head (SoftmaxOutput with softmax_label) and the
    symbol API's defaults (BatchNorm fix_gamma=True, eps=1e-3), which the
    importer must give it."""
    mx.random.seed(9)
    x = mx.sym.var("data")
    x = mx.sym.Convolution(x, kernel=(3, 3), num_filter=6, pad=(1, 1), name="conv1")
    x = mx.sym.BatchNorm(x, name="bn1")
    x = mx.sym.Activation(x, act_type="relu", name="act1")
    x = mx.sym.Pooling(x, kernel=(3, 3), stride=(2, 2), pool_type="avg",
                       pooling_convention="full", name="pool1")
    x = mx.sym.FullyConnected(mx.sym.Flatten(x), num_hidden=10, name="fc1")
    sym = mx.sym.SoftmaxOutput(x, name="softmax")
    mod = mx.mod.Module(sym, data_names=["data"], label_names=["softmax_label"])
    mod.bind(data_shapes=[("data", (5, 1, 8, 8))], label_shapes=[("softmax_label", (5,))],
             for_training=False)
    mod.init_params(mx.init.Xavier(magnitude=2))
    arg, aux = mod.get_params()
    rng = np.random.RandomState(4)
    # small variances, so that eps=1e-3 (not 1e-5) changes the outputs by ~10%
    aux = {k: mx.nd.array(rng.uniform(0.001, 0.01, v.shape) if k.endswith("var")
                          else rng.uniform(-0.03, 0.03, v.shape)) for k, v in aux.items()}
    arg["bn1_gamma"] = mx.nd.array(rng.uniform(0.5, 1.5, arg["bn1_gamma"].shape))
    mod.set_params(arg, aux)
    mod.save_checkpoint(path("module"), 0)
    xs = rng.uniform(-1, 1, (5, 1, 8, 8)).astype(np.float32)
    theirs = centred_log(mod.predict(mx.io.NDArrayIter(xs, batch_size=5)).asnumpy())
    exe = path("module")
    r = run([AMPC, "--from-mxnet", path("module-symbol.json"), "--input-shape", "data=1,1,8,8",
             "-o", exe], "ampc --from-mxnet module")
    if not check(r.returncode == 0, "a Module checkpoint's symbol (with its loss) imports"):
        return
    np.save(path("module-in.npy"), xs)
    r = run([exe, "--load-params", path("module-0000.params"), "--predict", path("module-in.npy"),
             "--output", path("module-out.npy")], "module --predict")
    ours = centred_log(np.load(path("module-out.npy"))) if r.returncode == 0 else None
    diff = np.abs(ours - theirs).max() if ours is not None else float("inf")
    check(diff <= TOL_F32 and theirs.std(axis=0).mean() > MIN_SPREAD,
          "it predicts what Module.predict does with the symbol API's defaults (fix_gamma, "
          "eps=1e-3; max difference %.3g <= %g)" % (diff, TOL_F32))


def check_no_loss(name, size):
    """A Gluon export as it is, without --loss: the program predicts (and
    would refuse to train); its outputs are the network's own, the logits,
    compared with MXNet's directly."""
    js, params = path(name + "-symbol.json"), path(name + "-0000.params")
    exe, xin, out = path(name + "_plain"), path(name + "_plain-in.npy"), path(name + "_plain-out.npy")
    r = run([AMPC, "--from-mxnet", js, "--input-shape", "data=1,3,%d,%d" % (size, size),
             "-o", exe], "ampc --from-mxnet (no loss)")
    if not check(r.returncode == 0, "%s without --loss compiles to a predicting program" % name):
        return
    net = mx.gluon.SymbolBlock.imports(js, ["data"], params)
    x = np.random.RandomState(12).uniform(-1, 1, (3, 3, size, size)).astype(np.float32)
    np.save(xin, x)
    r = run([exe, "--load-params", params, "--predict", xin, "--output", out], "predict")
    theirs = net(mx.nd.array(x)).asnumpy()
    diff = np.abs(np.load(out) - theirs).max() if r.returncode == 0 else float("inf")
    check(diff <= TOL_F32, "%s without --loss: --predict gives MXNet's logits (max difference "
          "%.3g <= %g)" % (name, diff, TOL_F32))


def check_dialect():
    """The JSON dialect (RFC 8259, strictly: docs/mxnet.md) against what
    MXNet's own writer makes of awkward names: quotes, backslashes, slashes
    and non-ASCII letters import, and --emit-mxnet-json gives MXNet back the
    same names; a newline (which MXNet escapes) is refused by the importer's
    own message, U+0001 (which MXNet writes raw) as malformed JSON."""
    def saved(fc_name, tag):
        y = mx.sym.FullyConnected(mx.sym.var("data", shape=(1, 4)), num_hidden=2, name=fc_name)
        p = path(tag + "-symbol.json")
        y.save(p)
        return p, y
    name = 'fc "q" \\ a/b \u00e9t\u00e9 \u2192 \U0001f642'
    js, sym = saved(name, "dialect")
    back = path("dialect-back.json")
    r = run([AMPC, "--from-mxnet", js, "--emit-mxnet-json", back], "ampc --from-mxnet dialect")
    check(r.returncode == 0 and mx.sym.load(back).list_arguments() == sym.list_arguments(),
          "a symbol MXNet saved with quotes, backslashes, '/' and non-ASCII in a name imports, "
          "and exports back to MXNet with the same names")
    for bad, tag, message in (("fc\n1", "dialect_nl", "control character U+000A at byte 2"),
                              ("fc\x011", "dialect_soh",
                               "malformed JSON: control character U+0001 inside a string")):
        js, _ = saved(bad, tag)
        r = subprocess.run([AMPC, "--from-mxnet", js], capture_output=True, text=True, cwd=ROOT)
        check(r.returncode == 1 and message in r.stderr,
              "a name holding %r, as MXNet saves it, is refused: %s" % (bad, message))


# ---- (c) AMP decisions ----------------------------------------------------------------

def check_amp(name, js, size):
    # greedy: each free op follows its inputs, MXNet's rule; the default
    # (optimal) placement may move a cast across a follow op at no cost
    dumps = {}
    for place in ("greedy", "optimal"):
        r = run([AMPC, "--from-mxnet", js, "--input-shape", "data=1,3,%d,%d" % (size, size),
                 "--amp=float16", "--amp-placement=" + place, "--batch-size=1",
                 "--dump=cast-elide"], "ampc --amp=float16")
        if not check(r.returncode == 0, "%s: ampc --amp=float16 --amp-placement=%s" % (name, place)):
            return
        dumps[place] = parse_dump(r.stdout)
    ours = dumps["greedy"]
    sym = mx.sym.load(js)
    csym = amp.convert_symbol(sym, target_dtype="float16", cast_optional_params=True,
                              data_names=["data"])
    internals = csym.get_internals()
    _, otypes, _ = internals.infer_type(data="float32")
    theirs = {}
    for out, t in zip(internals.list_outputs(), otypes):
        if out.endswith("_output"):
            theirs[out[:-len("_output")]] = MX_DT.get(t, str(t))
    ops = [(n, dt) for n, (dt, _, op) in ours.items() if op not in ("Input", "Param", "amp_cast")]
    bad = ["%s: ampc %s, MXNet %s" % (n, dt, theirs.get(n)) for n, dt in ops
           if theirs.get(n) != dt]
    check(not bad, "%s: ampc's dtype (greedy placement) for each of its %d ops is MXNet's%s"
          % (name, len(ops), "".join("\n    " + b for b in bad[:5])))
    j = json.loads(csym.tojson(remove_amp_cast=False))  # tojson() drops them by default
    mx_casts = sum(1 for n in j["nodes"] if n["op"] in ("amp_cast", "amp_multicast"))
    # MXNet's converted symbol, casts and 16-bit variables kept, reads as the
    # fp32 one it was made from (docs/mxnet.md, "AMP-converted files")
    conv = path(name + "_amp-symbol.json")
    with open(conv, "w") as f:
        f.write(csym.tojson(remove_amp_cast=False))
    shape = ["--input-shape", "data=1,3,%d,%d" % (size, size), "--dump=infer-types"]
    a = run([AMPC, "--from-mxnet", conv, *shape], "ampc --from-mxnet (MXNet's AMP rewrite)")
    b = run([AMPC, "--from-mxnet", js, *shape], "ampc --from-mxnet (fp32)")
    strip = lambda t: [l for l in t.splitlines()
                       if not l.startswith("model") and not l.startswith("# provenance")]
    check(a.returncode == 0 and b.returncode == 0 and strip(a.stdout) == strip(b.stdout),
          "%s: MXNet's AMP rewrite (%d casts kept) reads as the fp32 graph" % (name, mx_casts))
    for place, d in sorted(dumps.items()):
        casts = sum(1 for dt, _, op in d.values() if op == "amp_cast")
        print("    %s casts: ampc (%s) %d, MXNet %d" % (name, place, casts, mx_casts))
        check(casts <= mx_casts, "%s: ampc's casts (%s placement, %d) are at most MXNet's (%d)"
              % (name, place, casts, mx_casts))


def mx_dt(t):
    """A dtype infer_type gives, as ampc's dump spells it (bfloat16 is a
    numpy struct dtype in MXNet 1.9)."""
    if t is None:
        return None
    t = np.dtype(t)
    return "bf16" if t.names == ("bfloat16",) else MX_DT.get(t.type, str(t))


# The ops MXNet 1.9.1's bf16 lists put in fp32 that ampc keeps in the fp16
# lists' classes (docs/amp.md, "Against MXNet's lists"): its bf16 lists follow
# the kernels oneDNN had, ampc has bf16 kernels for every op.
BF16_DIFFERENCES = {"Dropout", "Flatten", "Reshape", "Concat", "broadcast_mul", "_plus_scalar",
                    "_minus_scalar", "_rminus_scalar", "_mul_scalar", "_div_scalar", "Cast"}


def check_mxnet_amp_cases():
    """MXNet 1.9.1's own AMP test cases (tests/python/gpu/test_contrib_amp.py
    and tests/python/mkl/test_contrib_amp.py, check_amp_convert_symbol), for
    float16 and bfloat16, through MXNet's convert_symbol and through ampc:
    FullyConnected(x, y) with y also read by sin, FullyConnected in the
    target class and sin in fp32, with the two as heads (the test adds them,
    which only a batch of 10 can shape); then the flag combinations MXNet
    refuses.  docs/amp.md, "Against MXNet's lists"."""
    x, y = mx.sym.var("x"), mx.sym.var("y")
    z = mx.sym.FullyConnected(x, y, num_hidden=10, no_bias=True)
    group = mx.sym.Group([z, mx.sym.sin(y)])
    js = path("amp_case-symbol.json")
    group.save(js)
    for target, short in (("float16", "f16"), ("bfloat16", "bf16")):
        conv = amp.convert_symbol(group, target_dtype=target, target_dtype_ops=["FullyConnected"],
                                  fp32_ops=["sin"])
        internals = conv.get_internals()
        _, types, _ = internals.infer_type(x="float32", y="float32")
        theirs = {o[:-len("_output")]: mx_dt(t) for o, t in zip(internals.list_outputs(), types)
                  if o.endswith("_output")}
        mx_casts = sum(1 for n in json.loads(conv.tojson(remove_amp_cast=False))["nodes"]
                       if n["op"] in ("amp_cast", "amp_multicast"))
        r = run([AMPC, "--from-mxnet", js, "--input-shape", "x=4,20", "--amp=" + target,
                 "--amp-fp16=FullyConnected", "--amp-fp32=sin", "--batch-size=4",
                 "--dump=cast-elide"], "ampc the AMP test case")
        ours = parse_dump(r.stdout) if r.returncode == 0 else {}
        casts = sum(1 for _, _, op in ours.values() if op == "amp_cast")
        same = all(ours.get(n, (None,))[0] == theirs.get(n) for n in ("fullyconnected0", "sin0"))
        check(r.returncode == 0 and same and theirs["fullyconnected0"] == short and
              theirs["sin0"] == "f32" and casts <= mx_casts,
              "MXNet's AMP test case, %s: FullyConnected %s and sin(y) fp32 in both (ampc %s, %s), "
              "casts: ampc %d, MXNet %d" % (target, short, ours.get("fullyconnected0", ("?",))[0],
                                           ours.get("sin0", ("?",))[0], casts, mx_casts))
        # the combinations MXNet's test expects convert_symbol to refuse
        cases = [(["FullyConnected"], ["elemwise_add"], None, "--amp-fp32=elemwise_add", True),
                 (["Activation"], ["Activation"], [("Activation", "act_type", ["selu"])],
                  "--amp-fp16=Activation", True),
                 (["FullyConnected"], ["FullyConnected"], None,
                  "--amp-fp16=FullyConnected --amp-fp32=FullyConnected", True),
                 # a deliberate difference: ampc moves every Activation to fp32
                 (["FullyConnected"], ["Activation"], [("Activation", "act_type", ["selu"])],
                  "--amp-fp32=Activation", False)]
        for lo, hi, cond, flags, refused in cases:
            try:
                amp.convert_symbol(group, target_dtype=target, target_dtype_ops=lo, fp32_ops=hi,
                                   conditional_fp32_ops=cond)
                mx_refused = False
            except AssertionError:
                mx_refused = True
            r = subprocess.run([AMPC, "--from-mxnet", js, "--input-shape", "x=4,20",
                                "--amp=" + target, *flags.split(), "--dump=amp"],
                               capture_output=True, text=True, cwd=ROOT)
            check(mx_refused and (r.returncode != 0) == refused,
                  "%s %s: MXNet refuses target %s / fp32 %s; ampc %s" %
                  (target, flags, lo, hi, "refuses it" if refused else
                   "accepts it (docs/amp.md: a deliberate difference)"))


def check_amp_bf16(name, js, size):
    """ampc's bf16 dtypes against MXNet's bf16 convert_symbol: the same op by
    op except the ops BF16_DIFFERENCES lists (and the ops they feed)."""
    r = run([AMPC, "--from-mxnet", js, "--input-shape", "data=1,3,%d,%d" % (size, size),
             "--amp=bfloat16", "--amp-placement=greedy", "--batch-size=1", "--dump=cast-elide"],
            "ampc --amp=bfloat16")
    if not check(r.returncode == 0, "%s: ampc --amp=bfloat16" % name):
        return
    ours = parse_dump(r.stdout)
    csym = amp.convert_symbol(mx.sym.load(js), target_dtype="bfloat16", cast_optional_params=True,
                              data_names=["data"])
    internals = csym.get_internals()
    _, types, _ = internals.infer_type(data="float32")
    theirs = {o[:-len("_output")]: mx_dt(t) for o, t in zip(internals.list_outputs(), types)
              if o.endswith("_output")}
    ops = [(n, dt, op) for n, (dt, _, op) in ours.items() if op not in ("Input", "Param", "amp_cast")]
    differ = [(n, op) for n, dt, op in ops if theirs.get(n) != dt]
    check(all(op in BF16_DIFFERENCES for _, op in differ),
          "%s --amp=bfloat16: ampc's dtype for each of its %d ops is MXNet's bf16 rewrite's, but "
          "on the documented differences (%s)%s" % (
              name, len(ops), ", ".join(sorted({op for _, op in differ})) or "none here",
              "".join("\n    %s (%s): ampc %s, MXNet %s" % (n, op, ours[n][0], theirs.get(n))
                      for n, op in differ if op not in BF16_DIFFERENCES)))


def main():
    for ex in sorted(os.listdir(os.path.join(ROOT, "examples"))):
        if ex.endswith(".sym"):
            for a in ("off", "float16"):
                check_export(os.path.join("examples", ex), a)
    zoo = [("resnet18_v1", 64, True), ("resnet50_v2", 64, False), ("mobilenetv2_1.0", 64, True),
           ("squeezenet1.1", 224, False), ("densenet121", 224, False)]
    jsons = {}
    for name, size, amp16 in zoo:
        jsons[name] = check_zoo(name, size, amp16)
    check_no_loss("resnet18_v1", 64)
    check_train_roundtrip()
    check_module()
    check_dialect()
    for name in ("resnet18_v1", "resnet50_v2"):
        check_amp(name, jsons[name], 64)
    check_amp_bf16("resnet18_v1", jsons["resnet18_v1"], 64)
    check_mxnet_amp_cases()
    print("import_mx.py: %d passed, %d failed" % (PASSED, FAILED))
    sys.exit(1 if FAILED else 0)


main()
