"""fashion_cnn (examples/fashion_cnn.sym) in PyTorch on the CPU, fp32: the
peer for the Fashion-MNIST epoch time in docs/performance.md.  The same
network (3x3 stem of 16 filters, stride 2; three basic blocks of 16, 32, 64
filters, the last two with stride 2 and a 1x1 projection; global average
pooling; a 10-way classifier), the same optimizer (SGD with Nesterov
momentum 0.9, wd 1e-4; MXNet's NAG and PyTorch's differ only in where the lr
sits, which does not change the cost), batch 128, pixels x/255, shuffled.

Times STEPS training steps after 3 warm-up steps and prints the time of one
step and of a 468-step epoch (60,000 images, the last partial batch dropped,
as ampc does), wall and CPU time of the process.

usage: /usr/bin/python3 bench/pytorch_fashion.py DIR THREADS STEPS
  DIR: the Fashion-MNIST IDX files (/usr/share/datasets/fashion-mnist)
"""
import gzip
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def idx(path):
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rb") as f:
        b = f.read()
    rank = b[3]
    dims = [int.from_bytes(b[4 + 4 * i:8 + 4 * i], "big") for i in range(rank)]
    return np.frombuffer(b, np.uint8, offset=4 + 4 * rank).reshape(dims)


def find(d, name):
    p = os.path.join(d, name)
    return p if os.path.exists(p) else p + ".gz"


def bn(c):
    # MXNet's BatchNorm: eps 1e-3, momentum 0.9 on the old value
    return nn.BatchNorm2d(c, eps=1e-3, momentum=0.1)


class Basic(nn.Module):
    def __init__(self, cin, c, stride):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(cin, c, 3, stride, 1, bias=False), bn(c)
        self.c2, self.b2 = nn.Conv2d(c, c, 3, 1, 1, bias=False), bn(c)
        self.proj = None
        if stride != 1:
            self.proj = nn.Sequential(nn.Conv2d(cin, c, 1, stride, 0, bias=False), bn(c))

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        y = self.b2(self.c2(y))
        return F.relu(y + (self.proj(x) if self.proj is not None else x))


class FashionCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c, self.b = nn.Conv2d(1, 16, 3, 2, 1, bias=False), bn(16)
        self.s = nn.Sequential(Basic(16, 16, 1), Basic(16, 32, 2), Basic(32, 64, 2))
        self.fc = nn.Linear(64, 10)

    def forward(self, x):
        x = self.s(F.relu(self.b(self.c(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def main():
    d, threads, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    x = torch.from_numpy(idx(find(d, "train-images-idx3-ubyte")).astype(np.float32) / 255)
    y = torch.from_numpy(idx(find(d, "train-labels-idx1-ubyte")).astype(np.int64))
    x = x.unsqueeze(1)
    net = FashionCNN()
    print("parameters:", sum(p.numel() for p in net.parameters()))
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-4)
    perm = torch.randperm(x.shape[0])
    batch = 128

    def step(i):
        idx_ = perm[(i * batch) % (x.shape[0] - batch):][:batch]
        opt.zero_grad()
        loss = F.cross_entropy(net(x[idx_]), y[idx_])
        loss.backward()
        opt.step()

    for i in range(3):
        step(i)
    w0, c0 = time.perf_counter(), time.process_time()
    for i in range(steps):
        step(3 + i)
    w, c = (time.perf_counter() - w0) / steps, (time.process_time() - c0) / steps
    print("threads %d, %d steps of batch %d: %.2f ms/step wall, %.2f ms/step cpu; "
          "epoch (468 steps) %.1f s wall, %.1f s cpu; %.0f samples/s"
          % (threads, steps, batch, w * 1e3, c * 1e3, 468 * w, 468 * c, batch / w))


if __name__ == "__main__":
    main()
