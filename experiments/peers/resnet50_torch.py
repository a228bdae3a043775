#!/usr/bin/env python3
"""resnet50_torch.py — the PyTorch peer of mpx's ResNet-50 training step (CPU or CUDA).

The network of experiments/configs/resnet50/<scale>/fp32.cfg built the same way as
models/resnet.c: ResNet-50 v1.5 (bottlenecks [3,4,6,3], stride on the 3x3, convs without bias,
BN + ReLU), a width multiplier, the CIFAR stem (3x3/1, no max-pool) or the ImageNet one. One
training step = forward, cross-entropy, backward, SGD with momentum and weight decay (on the
weights, not on biases and batch-norm parameters, as mpx), on one
fixed batch in channels-last layout, like `mpx bench`. Prints one JSON line.
--precision: fp32 (TF32 off, as mpx's fp32), tf32 (--device cuda only), amp-fp16 (autocast +
GradScaler, the DeepLearningExamples recipe) or amp-bf16, on the CPU too (torch.autocast("cpu"),
torch.amp.GradScaler("cpu"); on a CPU without fp16 arithmetic PyTorch's fp16 convolutions are
slow, as mpx's emulated fp16 is). On CUDA the step is timed between synchronisations, with
cuDNN's autotuner on (PyTorch's usual setting).

  python3 resnet50_torch.py --batch 64 --res 32 --width 0.25 --stem cifar --threads 2 --steps 10
  python3 resnet50_torch.py --precision amp-bf16
  python3 resnet50_torch.py --device cuda --batch 256 --res 224 --width 1 --stem imagenet \
      --classes 1000 --precision amp-fp16

Optional: needs `pip install torch` (CPU is enough); compare.sh runs it beside mpx.
"""
import argparse
import json
import statistics
import time
import warnings

warnings.filterwarnings("ignore", message=".*NumPy.*")  # torch without numpy warns at import
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402


class Bottleneck(nn.Module):
    def __init__(self, cin, width, stride):
        super().__init__()
        cout = width * 4
        self.conv1, self.bn1 = nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3, self.bn3 = nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False),
                                      nn.BatchNorm2d(cout))
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return self.relu(y + (self.down(x) if self.down is not None else x))


def resnet50(width, stem, classes):
    s = lambda c: int(round(c * width))
    layers = []
    if stem == "imagenet":
        layers += [nn.Conv2d(3, s(64), 7, stride=2, padding=3, bias=False), nn.BatchNorm2d(s(64)),
                   nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)]
    else:
        layers += [nn.Conv2d(3, s(64), 3, padding=1, bias=False), nn.BatchNorm2d(s(64)),
                   nn.ReLU(inplace=True)]
    cin = s(64)
    for i, (n, w) in enumerate(zip([3, 4, 6, 3], [64, 128, 256, 512])):
        for k in range(n):
            layers.append(Bottleneck(cin, s(w), 2 if k == 0 and i > 0 else 1))
            cin = s(w) * 4
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes)]
    return nn.Sequential(*layers)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--res", type=int, default=32)
    ap.add_argument("--width", type=float, default=0.25)
    ap.add_argument("--stem", choices=["cifar", "imagenet"], default="cifar")
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--precision", choices=["fp32", "tf32", "amp-fp16", "amp-bf16"], default="fp32")
    a = ap.parse_args()
    if a.device == "cpu" and a.precision == "tf32":
        ap.error("--precision tf32 needs --device cuda")
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    dev = torch.device(a.device)
    if a.device == "cuda":
        tf32 = a.precision == "tf32"
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        torch.backends.cudnn.benchmark = True
    amp = {"amp-fp16": torch.float16, "amp-bf16": torch.bfloat16}.get(a.precision)
    model = resnet50(a.width, a.stem, a.classes).to(dev, memory_format=torch.channels_last)
    params = sum(p.numel() for p in model.parameters())
    # weight decay on the conv and fc weights only, as mpx decays them (not biases, BN)
    decay = [p for p in model.parameters() if p.ndim > 1]
    no_decay = [p for p in model.parameters() if p.ndim <= 1]
    opt = torch.optim.SGD([{"params": decay, "weight_decay": 5e-4},
                           {"params": no_decay, "weight_decay": 0.0}], lr=0.05, momentum=0.9)
    scaler = torch.amp.GradScaler(a.device, enabled=amp is torch.float16)
    x = torch.randn(a.batch, 3, a.res, a.res, device=dev).to(memory_format=torch.channels_last)
    y = torch.randint(0, a.classes, (a.batch,), device=dev)
    loss_fn = nn.CrossEntropyLoss()
    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
    times = []
    for i in range(a.warmup + a.steps):
        sync()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(a.device, dtype=amp or torch.float32, enabled=amp is not None):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        sync()
        if i >= a.warmup:
            times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    print(json.dumps({"peer": "pytorch", "model": "resnet50", "torch": torch.__version__,
                      "device": a.device,
                      "precision": a.precision, "threads": a.threads, "batch": a.batch,
                      "res": a.res, "width": a.width, "params": params, "median_s": med,
                      "min_s": min(times), "samples_per_s": a.batch / med}))


if __name__ == "__main__":
    main()
