"""ResNet-50 v1d (examples/resnet50_v1d.sym) in PyTorch on the CPU: the peer
that bench/resnet50.sh times ampc against.

The same network as the model file: a deep stem of three 3x3 convolutions
(32, 32, 64 filters, the first with stride 2) each followed by BatchNorm and
ReLU, a 3x3/2 max pool (pad 1), bottleneck stages of 3, 4, 6 and 3 blocks
(widths 64, 128, 256, 512, expansion 4, the stride on the 3x3 convolution),
a shortcut branch on each stage's first block (2x2/2 average pooling when
the stage strides, then a 1x1 convolution and BatchNorm), global average
pooling and a 1000-way Linear layer; convolutions without bias, BatchNorm
eps 1e-5 and momentum 0.1 (MXNet's 0.9), the last BatchNorm of each block
starting at gamma = 0.  25,576,264 trainable values, as ampc --report and
docs/resnet50.md count them; the script prints its count and bench/resnet50.sh
checks that the two agree.

The loss is softmax cross-entropy with label smoothing 0.1, summed over the
batch like MXNet's SoftmaxOutput (normalization "null"); the optimizer is SGD
with Nesterov momentum 0.9 and weight decay 1e-4, none on BatchNorm's gamma
and beta or the FC bias (wd_mult=0 in the model file), like ampc's default
nag optimizer.  The input is one fixed random batch of N x 3 x 224 x 224
(ampc draws its synthetic batch every step: about 1% of a step).

Prints one line: the median wall time of a training step (forward, backward,
update) in ms (step_ms), its CPU time over all threads (cpu_ms), both after
WARMUP untimed steps, and the process's peak RSS (getrusage ru_maxrss) in MiB
after the steps (rss_mib) and before the model was built (base_rss_mib: the
interpreter and the torch libraries).

usage: /usr/bin/python3 bench/pytorch_resnet50.py BATCH THREADS STEPS [WARMUP]
"""
import resource
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def bn(c, zero_gamma=False):
    b = nn.BatchNorm2d(c, eps=1e-5, momentum=0.1)
    if zero_gamma:
        nn.init.zeros_(b.weight)
    return b


class Bottleneck(nn.Module):
    def __init__(self, cin, c, stride, down):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(cin, c, 1, bias=False), bn(c)
        self.c2, self.b2 = nn.Conv2d(c, c, 3, stride, 1, bias=False), bn(c)
        self.c3, self.b3 = nn.Conv2d(c, 4 * c, 1, bias=False), bn(4 * c, zero_gamma=True)
        self.down = None
        if down:
            layers = [nn.AvgPool2d(2, 2)] if stride != 1 else []
            layers += [nn.Conv2d(cin, 4 * c, 1, bias=False), bn(4 * c)]
            self.down = nn.Sequential(*layers)

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        y = F.relu(self.b2(self.c2(y)))
        y = self.b3(self.c3(y))
        return F.relu(y + (self.down(x) if self.down is not None else x))


class ResNet50V1d(nn.Module):
    def __init__(self, classes=1000):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 32, 3, 2, 1, bias=False), bn(32), nn.ReLU(),
            nn.Conv2d(32, 32, 3, 1, 1, bias=False), bn(32), nn.ReLU(),
            nn.Conv2d(32, 64, 3, 1, 1, bias=False), bn(64), nn.ReLU(),
            nn.MaxPool2d(3, 2, 1))
        blocks, cin = [], 64
        for c, n, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            blocks.append(Bottleneck(cin, c, stride, down=True))
            blocks += [Bottleneck(4 * c, c, 1, down=False) for _ in range(n - 1)]
            cin = 4 * c
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(2048, classes)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)


def main():
    if len(sys.argv) not in (4, 5):
        sys.exit("usage: pytorch_resnet50.py BATCH THREADS STEPS [WARMUP]")
    batch, threads, steps = (int(a) for a in sys.argv[1:4])
    warmup = int(sys.argv[4]) if len(sys.argv) == 5 else 2
    base_rss = peak_rss_mib()
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = ResNet50V1d()
    params = sum(p.numel() for p in model.parameters())
    # wd_mult=0 in the model file: BatchNorm gamma and beta, the FC bias
    no_wd = [p for m in model.modules() if isinstance(m, nn.BatchNorm2d) for p in m.parameters()]
    no_wd.append(model.fc.bias)
    ids = {id(p) for p in no_wd}
    wd = [p for p in model.parameters() if id(p) not in ids]
    opt = torch.optim.SGD([{"params": wd, "weight_decay": 1e-4},
                           {"params": no_wd, "weight_decay": 0.0}],
                          lr=0.01, momentum=0.9, nesterov=True)
    x = torch.rand(batch, 3, 224, 224) * 2 - 1
    y = torch.randint(0, 1000, (batch,))
    times, cpu = [], []
    for i in range(warmup + steps):
        t, c = time.perf_counter(), time.process_time()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y, reduction="sum", label_smoothing=0.1)
        loss.backward()
        opt.step()
        if i >= warmup:
            times.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
    print(f"pytorch {torch.__version__} resnet50_v1d params={params} batch={batch} "
          f"threads={threads} steps={steps} step_ms={1000 * statistics.median(times):.3f} "
          f"cpu_ms={1000 * statistics.median(cpu):.3f} rss_mib={peak_rss_mib():.1f} "
          f"base_rss_mib={base_rss:.1f}", flush=True)


if __name__ == "__main__":
    main()
