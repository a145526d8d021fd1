#!/usr/bin/env python3
"""Random models for the round-trip test (tests/roundtrip.sh).

    tests/random_models.py SEED COUNT OUTDIR

writes OUTDIR/random_<SEED>_<k>.sym, k = 0..COUNT-1, the same files for the
same arguments.  Each model is a random DAG of the ops AMP treats
differently (fp16 convolutions and dense layers, fp32 ops, follow and widest
ops, the user's Casts to every float dtype), with what has gone wrong before:
parameters shared between ops (a convolution weight read by two
convolutions, one of them named for --amp-exclude; a parameter that is both
a dense bias and a BatchNorm beta), BatchNorm gamma and beta given as model
inputs, 16-bit model inputs, prelu, Concat, and parameters returned as model
outputs.  Every model ends in a loss head, so every pass runs.

A line "# exclude: NAME" names a node that --amp-exclude may keep in fp32.
"""
import random
import sys

SIZE = 4  # spatial size: 3x3 convolutions are padded, poolings keep it


class Model:
    def __init__(self, rng):
        self.rng = rng
        self.lines = []
        self.inputs = ["x: float32[N,4,%d,%d]" % (SIZE, SIZE)]
        self.values = [("x", 4)]  # (expression name, channels); all [N,C,SIZE,SIZE]
        self.weights = {}  # (cout, cin) -> shared 3x3 weight param name
        self.params = []  # names of params, for extra outputs
        self.excludes = []
        self.k = 0

    def fresh(self, stem):
        self.k += 1
        return "%s%d" % (stem, self.k)

    def emit(self, expr, c, stem="v"):
        name = self.fresh(stem)
        self.lines.append("    %s = %s" % (name, expr))
        self.values.append((name, c))
        return name

    def pick(self, c=None):
        cands = [v for v in self.values if c is None or v[1] == c]
        # recent values more often, so the graph is deep as well as wide
        return cands[-1 - min(int(self.rng.expovariate(0.5)), len(cands) - 1)] if cands else None

    def conv(self, v, c, cout):
        r = self.rng
        name = self.fresh("conv")
        wkey = (cout, c)
        extra = ""
        if r.random() < 0.5:
            if wkey not in self.weights:
                w = self.fresh("w")
                self.lines.append("    %s = param(shape=(%d,%d,3,3), name=\"%s\")" % (w, cout, c, w))
                self.weights[wkey] = w
                self.params.append(w)
            extra = ", weight=%s" % self.weights[wkey]
            self.excludes.append(name)
        nb = "true" if r.random() < 0.5 else "false"
        return self.emit("Convolution(%s, num_filter=%d, kernel=(3,3), pad=(1,1), no_bias=%s%s, "
                         "name=\"%s\")" % (v, cout, nb, extra, name), cout)

    def batchnorm(self, v, c):
        r = self.rng
        args = ""
        roll = r.random()
        if roll < 0.3:  # gamma and beta as model inputs
            g, b = self.fresh("g"), self.fresh("b")
            self.inputs += ["%s: float32[%d]" % (g, c), "%s: float32[%d]" % (b, c)]
            args = ", gamma=%s, beta=%s" % (g, b)
        elif roll < 0.5:  # a parameter that is a dense bias and a BatchNorm beta
            s = self.fresh("s")
            self.lines.append("    %s = param(shape=(%d,), name=\"%s\")" % (s, c, s))
            self.params.append(s)
            f = self.fresh("fc")
            self.lines.append("    %s = Reshape(FullyConnected(%s, num_hidden=%d, bias=%s), "
                              "shape=(-1,%d,1,1))" % (f, v, c, s, c))
            self.emit("broadcast_add(%s, %s)" % (v, f), c)
            v = self.values[-1][0]
            args = ", beta=%s" % s
        return self.emit("BatchNorm(%s%s)" % (v, args), c)

    def step(self):
        r = self.rng
        v, c = self.pick()
        op = r.choice(["conv", "conv", "bn", "act", "lrelu", "pool", "add", "mul", "concat",
                       "cast", "f32op", "scalar", "dropout", "bcast", "input16"])
        if op == "conv":
            self.conv(v, c, r.choice([2, 4, 6]))
        elif op == "bn":
            self.batchnorm(v, c)
        elif op == "act":
            self.emit("Activation(%s, act_type=\"%s\")" % (
                v, r.choice(["relu", "sigmoid", "tanh", "softrelu", "softsign"])), c)
        elif op == "lrelu":
            t = r.choice(["leaky", "prelu", "elu"])
            self.emit("LeakyReLU(%s, act_type=\"%s\")" % (v, t), c)
        elif op == "pool":
            t = r.choice(["max", "avg"])
            self.emit("Pooling(%s, pool_type=\"%s\", kernel=(3,3), stride=(1,1), pad=(1,1))"
                      % (v, t), c)
        elif op in ("add", "mul"):
            w = self.pick(c)
            self.emit("%s %s %s" % (v, "+" if op == "add" else "*", w[0]), c)
        elif op == "concat":
            w, cw = self.pick()
            self.emit("Concat(%s, %s, dim=1)" % (v, w), c + cw)
        elif op == "cast":
            t = r.choice(["float16", "float32", "bfloat16"])
            self.emit("Cast(%s, %s)" % (v, t), c)
        elif op == "f32op":
            f = r.choice(["exp(%s)", "softmax(%s, axis=1)", "log_softmax(%s, axis=1)",
                          "sqrt(%s)"])
            self.emit(f % v, c)
        elif op == "scalar":
            self.emit(r.choice(["%s * 0.5", "%s + 1.0", "1.0 - %s", "%s / 3.0"]) % v, c)
        elif op == "dropout":
            self.emit("Dropout(%s, p=0.25)" % v, c)
        elif op == "bcast":
            p = self.fresh("p")
            self.lines.append("    %s = param(shape=(1,%d,1,1), name=\"%s\")" % (p, c, p))
            self.params.append(p)
            self.emit("broadcast_mul(%s, %s)" % (v, p), c)
        elif op == "input16":
            name = self.fresh("h")
            self.inputs.append("%s: %s[N,%d,%d,%d]" % (name, r.choice(["float16", "bfloat16"]),
                                                         c, SIZE, SIZE))
            self.values.append((name, c))
            self.emit("Cast(%s, float32) + %s" % (name, v), c)

    def text(self, name):
        r = self.rng
        for _ in range(r.randint(3, 14)):
            self.step()
        v, c = self.values[-1]
        self.inputs.append("softmax_label: float32[N]")
        outs = ["SoftmaxOutput(FullyConnected(Flatten(%s), num_hidden=10), softmax_label)" % v]
        if self.params and r.random() < 0.3:
            outs.append(r.choice(self.params))  # a parameter as a model output
        if r.random() < 0.3:
            outs.append(self.pick()[0])
        head = ["# random model (tests/random_models.py)"]
        head += ["# exclude: %s" % e for e in self.excludes[:1]]
        ret = outs[0] if len(outs) == 1 else "(%s)" % ", ".join(outs)
        return "\n".join(head + ["model %s(%s) {" % (name, ", ".join(self.inputs))] + self.lines +
                         ["    return %s" % ret, "}", ""])


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: random_models.py SEED COUNT OUTDIR")
    seed, count, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    for k in range(count):
        rng = random.Random(seed * 100003 + k)
        name = "random_%d_%d" % (seed, k)
        with open("%s/%s.sym" % (out, name), "w") as f:
            f.write(Model(rng).text(name))


if __name__ == "__main__":
    main()
