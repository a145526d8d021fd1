"""ResNet-20 (examples/resnet20_cifar.sym) in PyTorch on the CPU: the peer
that bench/cpu_step.sh times ampc against.  Prints the median time of one
training step (forward, backward, SGD momentum update) in milliseconds, wall
(step_ms) and CPU time of the process, all threads (cpu_ms).

usage: /usr/bin/python3 bench/pytorch_resnet20.py BATCH THREADS STEPS
"""
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Basic(nn.Module):
    def __init__(self, cin, c, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, c, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(c, eps=1e-5, momentum=0.1)
        self.c2 = nn.Conv2d(c, c, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(c, eps=1e-5, momentum=0.1)
        self.proj = None
        if stride != 1:
            self.proj = nn.Sequential(nn.Conv2d(cin, c, 1, stride, 0, bias=False),
                                      nn.BatchNorm2d(c, eps=1e-5, momentum=0.1))

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        y = self.b2(self.c2(y))
        return F.relu(y + (self.proj(x) if self.proj is not None else x))


class ResNet20(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.c = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
        self.b = nn.BatchNorm2d(16, eps=1e-5, momentum=0.1)
        layers, cin = [], 16
        for c, stride in ((16, 1), (32, 2), (64, 2)):
            layers.append(Basic(cin, c, stride))
            layers += [Basic(c, c, 1) for _ in range(2)]
            cin = c
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(64, classes)

    def forward(self, x):
        x = F.relu(self.b(self.c(x)))
        x = self.layers(x)
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)


def main():
    batch, threads, steps = (int(a) for a in sys.argv[1:4])
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = ResNet20()
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, nesterov=True,
                          weight_decay=1e-4)
    x = torch.randn(batch, 3, 32, 32)
    y = torch.randint(0, 10, (batch,))
    times, cpu = [], []
    for i in range(steps + 3):
        t, c = time.perf_counter(), time.process_time()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y, reduction="sum")
        loss.backward()
        opt.step()
        if i >= 3:  # warm-up
            times.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
    print(f"pytorch {torch.__version__} resnet20 params={params} batch={batch} "
          f"threads={threads} step_ms={1000 * statistics.median(times):.3f} "
          f"cpu_ms={1000 * statistics.median(cpu):.3f}")


if __name__ == "__main__":
    main()
