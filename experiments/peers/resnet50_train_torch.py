#!/usr/bin/env python3
"""resnet50_train_torch.py — the PyTorch peer of a whole ResNet-50 FP32 training run, to check
mpx's FP32 accuracy against an independent implementation on the same data and schedule.

What it shares with experiments/configs/resnet50/small/fp32.cfg (the defaults below are that
config's values): CIFAR-10 from mpx's cache (data/cache/cifar-10-batches-bin, which `mpx train`
unpacks from the shared JPEG archive on first use), per-channel mean/std normalisation from the
training set, random horizontal flips, no random crop; ResNet-50 v1.5 at 1/4 width with the
CIFAR stem (resnet50_torch.py's network), He-normal fan-out convolutions, the last BN of each
bottleneck starting at zero; SGD with momentum 0.9, weight decay 5e-4 on conv and fc weights
only; lr 0.1, linear warm-up over 150 steps from 10% of it, cosine to 0 at step 2200; batch 64,
a fresh shuffle each epoch; evaluation on the 10000 test images every 550 steps. What differs:
the random streams (initial weights, order, flips: PyTorch's generator, not mpx's Philox), so
a seed here is not the same run as mpx's seed, only a draw from the same recipe; compare the
means over seeds. Prints one JSON line per evaluation and a final one.

  python3 experiments/peers/resnet50_train_torch.py --seed 0 --threads 1 > peer-s0.jsonl
"""
import argparse
import json
import math
import os
import sys
import time
import warnings

warnings.filterwarnings("ignore", message=".*NumPy.*")
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from resnet50_torch import Bottleneck, resnet50  # noqa: E402


def load_cifar(root, split):
    names = [f"data_batch_{i}.bin" for i in range(1, 6)] if split == "train" else ["test_batch.bin"]
    raw = np.concatenate([np.fromfile(os.path.join(root, n), dtype=np.uint8).reshape(-1, 3073)
                          for n in names])
    return raw[:, 1:].reshape(-1, 3, 32, 32), raw[:, 0].astype(np.int64)


def lr_at(step, base, warmup, total, warmup_start=0.1):
    if step < warmup:
        return base * (warmup_start + (1 - warmup_start) * step / warmup)
    t = min(1.0, (step - warmup) / max(1, total - warmup))
    return base * 0.5 * (1 + math.cos(math.pi * t))


def evaluate(model, x, y, batch=500):
    model.eval()
    loss_sum, correct = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(x), batch):
            out = model(x[i:i + batch])
            loss_sum += nn.functional.cross_entropy(out, y[i:i + batch], reduction="sum").item()
            correct += (out.argmax(1) == y[i:i + batch]).sum().item()
    model.train()
    return loss_sum / len(x), 100.0 * correct / len(x)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=os.path.join(here, "..", "..", "data", "cache",
                                                   "cifar-10-batches-bin"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=2200)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=150)
    ap.add_argument("--eval-every", type=int, default=550)
    ap.add_argument("--width", type=float, default=0.25)
    a = ap.parse_args()
    if not os.path.exists(os.path.join(a.data, "test_batch.bin")):
        print(f"resnet50_train_torch: no CIFAR-10 binary batches in {a.data} (run any mpx "
              "ResNet training once to unpack them)", file=sys.stderr)
        return 2
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    gen = np.random.default_rng(a.seed)
    xtr, ytr = load_cifar(a.data, "train")
    xte, yte = load_cifar(a.data, "test")
    mean = xtr.reshape(len(xtr), 3, -1).mean(axis=(0, 2)) / 255.0
    std = (xtr.reshape(len(xtr), 3, -1) / 255.0).std(axis=(0, 2))
    norm = lambda x: torch.from_numpy(((x / 255.0 - mean[None, :, None, None]) /
                                       std[None, :, None, None]).astype(np.float32))
    xte_t, yte_t = norm(xte), torch.from_numpy(yte)
    model = resnet50(a.width, "cifar", 10)
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        if isinstance(m, Bottleneck):
            nn.init.zeros_(m.bn3.weight)
    decay = [p for p in model.parameters() if p.ndim > 1]
    no_decay = [p for p in model.parameters() if p.ndim <= 1]
    opt = torch.optim.SGD([{"params": decay, "weight_decay": 5e-4},
                           {"params": no_decay, "weight_decay": 0.0}], lr=a.lr, momentum=0.9)
    order, pos, t0 = gen.permutation(len(xtr)), 0, time.time()
    loss_fn = nn.CrossEntropyLoss()
    for step in range(a.steps):
        if pos + a.batch > len(order):
            order, pos = gen.permutation(len(xtr)), 0
        idx = order[pos:pos + a.batch]
        pos += a.batch
        xb = xtr[idx].copy()
        flip = gen.random(len(idx)) < 0.5
        xb[flip] = xb[flip][..., ::-1]
        for g in opt.param_groups:
            g["lr"] = lr_at(step, a.lr, a.warmup, a.steps)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(norm(xb)), torch.from_numpy(ytr[idx]))
        loss.backward()
        opt.step()
        if (step + 1) % a.eval_every == 0 or step + 1 == a.steps:
            el, top1 = evaluate(model, xte_t, yte_t)
            print(json.dumps({"peer": "pytorch", "torch": torch.__version__, "seed": a.seed,
                              "step": step + 1, "train_loss": loss.item(), "eval_loss": el,
                              "top1": top1, "wall_s": round(time.time() - t0, 1)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
