"""ResNet-20 (examples/resnet20_cifar.sym) in MXNet 1.9.1 Gluon on the CPU: the
second peer that bench/cpu_step.sh times ampc against, the same network as
bench/pytorch_resnet20.py (272,474 trainable values; printed as params=).

The pip wheel of MXNet 1.9.1 uses oneDNN (MKLDNN) for convolutions,
BatchNorm and activations.  The network is hybridized with static_alloc and
static_shape (one cached graph, its memory planned once: how MXNet is meant
to be run for speed).  The loss is SoftmaxCrossEntropyLoss summed over the
batch (backward of the per-sample vector; trainer.step(1): no division by
the batch), like ampc's SoftmaxOutput and the PyTorch peer's reduction="sum".
The optimizer is MXNet's own "nag" (SGD with Nesterov momentum 0.9), weight
decay 1e-4 on every parameter: ampc's default optimizer is modelled on it.
The input is one fixed random batch; every step waits for its results
(mx.nd.waitall) so the step's time is the work of that step.

Threads: OMP_NUM_THREADS (MXNet's operator threads) is set to THREADS before
mxnet is imported; MXNet's engine keeps its default worker threads.

Prints one line: the median wall time of a training step (forward, backward,
update) in ms (step_ms) and the CPU time of the process over all its threads
(cpu_ms), after 3 untimed warm-up steps.

usage: /work/venv-mxnet/bin/python bench/mxnet_resnet20.py BATCH THREADS STEPS
"""
import os
import statistics
import sys
import time


def build(nn, classes=10):
    class Basic(nn.HybridBlock):
        def __init__(self, c, stride, proj, **kw):
            super().__init__(**kw)
            with self.name_scope():
                self.c1 = nn.Conv2D(c, 3, stride, 1, use_bias=False)
                self.b1 = nn.BatchNorm(epsilon=1e-5, momentum=0.9)
                self.c2 = nn.Conv2D(c, 3, 1, 1, use_bias=False)
                self.b2 = nn.BatchNorm(epsilon=1e-5, momentum=0.9)
                self.proj = None
                if proj:
                    self.proj = nn.HybridSequential()
                    self.proj.add(nn.Conv2D(c, 1, stride, 0, use_bias=False),
                                  nn.BatchNorm(epsilon=1e-5, momentum=0.9))

        def hybrid_forward(self, F, x):
            y = F.relu(self.b1(self.c1(x)))
            y = self.b2(self.c2(y))
            return F.relu(y + (self.proj(x) if self.proj is not None else x))

    class ResNet20(nn.HybridBlock):
        def __init__(self, **kw):
            super().__init__(**kw)
            with self.name_scope():
                self.c = nn.Conv2D(16, 3, 1, 1, use_bias=False)
                self.b = nn.BatchNorm(epsilon=1e-5, momentum=0.9)
                self.layers = nn.HybridSequential()
                cin = 16
                for c, stride in ((16, 1), (32, 2), (64, 2)):
                    self.layers.add(Basic(c, stride, stride != 1 or cin != c))
                    for _ in range(2):
                        self.layers.add(Basic(c, 1, False))
                    cin = c
                self.pool = nn.GlobalAvgPool2D()
                self.fc = nn.Dense(classes)

        def hybrid_forward(self, F, x):
            x = F.relu(self.b(self.c(x)))
            return self.fc(F.flatten(self.pool(self.layers(x))))

    return ResNet20()


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: mxnet_resnet20.py BATCH THREADS STEPS")
    batch, threads, steps = (int(a) for a in sys.argv[1:4])
    os.environ["OMP_NUM_THREADS"] = str(threads)
    import mxnet as mx
    from mxnet import autograd, gluon
    from mxnet.gluon import nn

    mx.random.seed(0)
    net = build(nn)
    net.initialize(mx.init.Xavier(magnitude=2), ctx=mx.cpu())
    net.hybridize(static_alloc=True, static_shape=True)
    x = mx.nd.random.uniform(-1, 1, (batch, 3, 32, 32))
    y = mx.nd.array(mx.nd.random.randint(0, 10, (batch,)).asnumpy().astype("float32"))
    net(x).wait_to_read()  # deferred initialisation: shapes known from here
    params = sum(p.data().size for p in net.collect_params().values() if p.grad_req != "null")
    trainer = gluon.Trainer(net.collect_params(), "nag",
                            {"learning_rate": 0.01, "momentum": 0.9, "wd": 1e-4})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    times, cpu = [], []
    for i in range(steps + 3):
        t, c = time.perf_counter(), time.process_time()
        with autograd.record():
            loss = loss_fn(net(x), y)
        loss.backward()
        trainer.step(1)
        mx.nd.waitall()
        if i >= 3:  # warm-up
            times.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
    print(f"mxnet {mx.__version__} resnet20 params={params} batch={batch} "
          f"threads={threads} step_ms={1000 * statistics.median(times):.3f} "
          f"cpu_ms={1000 * statistics.median(cpu):.3f}", flush=True)


if __name__ == "__main__":
    main()
