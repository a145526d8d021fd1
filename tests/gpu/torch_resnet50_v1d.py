#!/usr/bin/env python3
"""ResNet-50 v1d in PyTorch, the reference of make gpu-check (c).

The network of examples/resnet50_v1d.sym, written out (not torchvision's
v1.5): a deep stem of three 3x3 convolutions (32, 32, 64; the first with
stride 2), a 3x3 stride-2 max pool, bottleneck stages of 3, 4, 6 and 3
blocks with the stride on the 3x3 convolution, average-pool downsampling
(2x2, stride 2) before the 1x1 projection of a strided block's shortcut,
the last BatchNorm of each block starting at gamma = 0, a global average
pool and a 1000-way FullyConnected.  BatchNorm: eps 1e-5, MXNet's momentum
0.9 (PyTorch's 0.1).  The optimizer is the .sym's train block's: NAG
(SGD with nesterov=True), momentum 0.9, weight decay 1e-4 except on the
BatchNorm gamma and beta and the FullyConnected bias (wd_mult=0), fp32
weights (autocast keeps them fp32: the multi_precision masters); the loss
is softmax cross-entropy with label smoothing 0.1.  The learning rate is
constant (the .sym's cosine schedule costs nothing per step).

Its best eager setting on a GPU: torch.backends.cudnn.benchmark = True,
channels_last model and inputs, torch.autocast(float16) with GradScaler,
the fused SGD.
The synthetic batch is made once on the device (no input pipeline).  Each
step is timed with CUDA events; the first --warmup steps are excluded and
the median step gives images/second.

Prints one JSON line: params (trainable values; must equal ampc --report's
"trainable parameters" for resnet50_v1d.sym), images_per_sec,
median_step_ms, peak_alloc_mib and peak_reserved_mib
(torch.cuda.max_memory_allocated/reserved; null on the CPU).

  torch_resnet50_v1d.py --device cuda --batch 256 --steps 100 --warmup 20
  torch_resnet50_v1d.py --device cpu --batch 2 --steps 2 --warmup 1 --image-size 64  # dry run
  torch_resnet50_v1d.py --params-only
"""
import argparse
import json
import statistics
import sys
import time

import torch
from torch import nn


def conv_bn(cin, cout, kernel, stride=1, last_gamma=False):
    conv = nn.Conv2d(cin, cout, kernel, stride=stride, padding=kernel // 2, bias=False)
    bn = nn.BatchNorm2d(cout, eps=1e-5, momentum=0.1)
    if last_gamma:
        nn.init.zeros_(bn.weight)
    return nn.Sequential(conv, bn)


class Bottleneck(nn.Module):
    def __init__(self, cin, c, stride, down):
        super().__init__()
        self.body = nn.Sequential(
            conv_bn(cin, c, 1), nn.ReLU(inplace=True),
            conv_bn(c, c, 3, stride=stride), nn.ReLU(inplace=True),
            conv_bn(c, c * 4, 1, last_gamma=True))
        self.short = None
        if down:
            layers = [nn.AvgPool2d(2, 2)] if stride != 1 else []
            self.short = nn.Sequential(*layers, conv_bn(cin, c * 4, 1))
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        sc = x if self.short is None else self.short(x)
        return self.relu(self.body(x) + sc)


class ResNet50V1d(nn.Module):
    def __init__(self, classes=1000):
        super().__init__()
        self.stem = nn.Sequential(
            conv_bn(3, 32, 3, stride=2), nn.ReLU(inplace=True),
            conv_bn(32, 32, 3), nn.ReLU(inplace=True),
            conv_bn(32, 64, 3), nn.ReLU(inplace=True),
            nn.MaxPool2d(3, stride=2, padding=1))
        blocks, cin = [], 64
        for c, n, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            blocks.append(Bottleneck(cin, c, stride, True))
            blocks += [Bottleneck(c * 4, c, 1, False) for _ in range(n - 1)]
            cin = c * 4
        self.stages = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(2048, classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):  # msra_prelu(): He normal, fan-in
                nn.init.kaiming_normal_(m.weight, mode="fan_in", nonlinearity="relu")

    def forward(self, x):
        x = self.pool(self.stages(self.stem(x)))
        return self.fc(torch.flatten(x, 1))


def param_groups(model):
    """wd 1e-4 on the conv and FC weights; none on BN gamma/beta, FC bias"""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (decay if p.ndim > 1 else no_decay).append(p)
    return [{"params": decay, "weight_decay": 1e-4}, {"params": no_decay, "weight_decay": 0.0}]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=100, help="steps in all, warm-up included")
    ap.add_argument("--warmup", type=int, default=20, help="first steps not timed")
    ap.add_argument("--image-size", type=int, default=224, help="the dry run's is smaller")
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--amp", choices=("auto", "on", "off"), default="auto",
                    help="autocast float16 + GradScaler; auto: on a GPU only")
    ap.add_argument("--params-only", action="store_true", help="print the parameter count")
    a = ap.parse_args()
    if a.steps <= a.warmup:
        ap.error("--steps must exceed --warmup")

    torch.manual_seed(42)
    model = ResNet50V1d()
    nparams = sum(p.numel() for p in model.parameters() if p.requires_grad)
    if a.params_only:
        print(json.dumps({"params": nparams}))
        return 0
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    amp = a.amp == "on" or (a.amp == "auto" and cuda)
    if cuda:
        torch.backends.cudnn.benchmark = True
    model = model.to(dev, memory_format=torch.channels_last)
    # fused=True: one kernel per step for every parameter, PyTorch's fastest
    # eager optimizer (and ampc's is fused too)
    opt = torch.optim.SGD(param_groups(model), lr=a.lr, momentum=0.9, nesterov=True, fused=True)
    scaler = torch.amp.GradScaler(dev.type, enabled=amp)
    loss_fn = nn.CrossEntropyLoss(label_smoothing=0.1)
    g = torch.Generator(device="cpu").manual_seed(0)
    x = (torch.rand(a.batch, 3, a.image_size, a.image_size, generator=g) * 2 - 1).to(dev)
    x = x.contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (a.batch,), generator=g).to(dev)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=torch.float16, enabled=amp):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss

    times = []
    if cuda:
        torch.cuda.reset_peak_memory_stats(dev)
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(a.steps)]
        for i in range(a.steps):
            ev[i][0].record()
            loss = step()
            ev[i][1].record()
        torch.cuda.synchronize(dev)
        times = [b.elapsed_time(e) for b, e in ev[a.warmup:]]
    else:
        for i in range(a.steps):
            t0 = time.perf_counter()
            loss = step()
            if i >= a.warmup:
                times.append((time.perf_counter() - t0) * 1e3)
    med = statistics.median(times)
    out = {
        "params": nparams, "device": a.device, "amp": "float16" if amp else "off",
        "batch": a.batch, "timed_steps": len(times), "warmup": a.warmup,
        "median_step_ms": med, "images_per_sec": a.batch / (med / 1e3),
        "loss": float(loss.detach().float().cpu()),
        "peak_alloc_mib": torch.cuda.max_memory_allocated(dev) / 2**20 if cuda else None,
        "peak_reserved_mib": torch.cuda.max_memory_reserved(dev) / 2**20 if cuda else None,
        "torch": torch.__version__,
    }
    if not all(map(lambda v: v == v, (out["loss"], med))):
        print(json.dumps(out))
        print("torch_resnet50_v1d: the loss or the step time is NaN", file=sys.stderr)
        return 1
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
