#!/usr/bin/env python3
"""ssd_torch.py — the PyTorch peer of mpx's SSD detection training step (CPU or CUDA).

The network of experiments/configs/ssd/<scale>/fp32.cfg built the same way as models/ssd.c
(defaults: scale `small`: a ResNet-18 trunk at width 0.5, 128x128 images, 10 classes plus
background, batch 16). One training step = forward, the MultiBox loss (matching and hard-
negative mining included), backward, SGD with momentum, on one fixed batch in channels-last
layout, like `mpx bench`. Prints one JSON line (the fields of resnet50_torch.py, plus priors,
the last step's loss and positives, the number of matched priors in the batch).

What matches mpx:
  * trunk: the ImageNet stem (conv 7x7/2 pad 3, BN, ReLU, max-pool 3x3/2 pad 1), basic blocks
    [2, 2, 2, 2] at widths round(64, 128, 256, 512 x width) (models/resnet.c: stride on the
    first block of stages 2-4, 1x1 conv + BN projection where the shape changes), convs
    without bias; the taps are the outputs of stages 2, 3, 4 (strides 8, 16, 32);
  * extra blocks while the last map is larger than 1x1 and there are fewer than 6 maps: 1x1
    conv to k/2 + BN + ReLU, 3x3 stride-2 pad-1 conv to k + BN + ReLU, k = max(8,
    round(256 x width)); at 128 px the maps are 16, 8, 4, 2, 1 (1532 priors);
  * heads: per map a 3x3 pad-1 class conv (boxes x (classes + 1), with bias) and box conv
    (boxes x 4, with bias), 6 boxes on maps 1..3 (0-based) else 4; NHWC outputs flattened and
    concatenated in mpx's prior order (map, row, column, box);
  * priors as lib/ops/ssd_priors.c (linear scales 0.2 .. 0.9, ratios 1, extra 1, 2, 1/2, and 3,
    1/3 on 6-box maps, clipped to the image), computed once outside the step as mpx does;
  * the MultiBox loss, inside the timed step and vectorised over the batch: IoU of every prior
    with every GT, every GT's best prior forced to it, every other prior matched to its best
    GT when the IoU >= 0.5, offsets encoded with variances 0.1 / 0.2, hard-negative mining by
    background loss (stable sort, ties to the lower prior index) keeping
    min(#non-positives, max(3 x #positives, 3)) per image, cross-entropy over positives and
    kept negatives plus smooth-L1 (beta 1) on the positives, divided by the batch's positives;
    the loss in FP32 whatever the precision, as mpx;
  * parameters: 3,490,470 at scale small, as `mpx info experiments/configs/ssd/small/fp32.cfg`;
  * SGD (lr 0.02, momentum 0.9, weight decay 5e-4 on the conv weights only, not on biases and
    BN parameters, as mpx), BN in training mode (batch statistics, eps 1e-5, momentum 0.1).
What differs:
  * the forced best-prior-per-GT step: mpx matches (GT, prior) pairs greedily by IoU so that two
    GTs never claim the same prior (Caffe SSD's bipartite step); the peer takes each GT's argmax
    prior (ssd.pytorch / torchvision), where two GTs sharing a best prior leave it to one of
    them. The two agree unless two GTs of one image have the same best prior; the work is the
    same;
  * the batch is fixed random data (N(0, 1) pixels, 1-6 random boxes per image with random
    classes), not procedural scenes; the number of positives, hence the loss' work, differs a
    little from mpx's batch;
  * --precision amp-bf16 / amp-fp16 is torch.autocast, amp-fp16 with a GradScaler: the
    convolutions in the low precision, BN, ReLU and the adds on their low-precision outputs
    (PyTorch's BN accumulates its statistics in FP32), the MultiBox loss in FP32 (the heads'
    outputs cast up). mpx's bf16 / fp16 modes have their own op paths (FP32 for everything but
    the convolutions and GEMMs; `mpx info` lists them). On a CPU without fp16 arithmetic
    PyTorch's fp16 convolutions are slow, as mpx's emulated fp16 is.

  python3 ssd_torch.py --threads 2 --steps 10
  python3 ssd_torch.py --precision amp-bf16
  python3 ssd_torch.py --device cuda --width 1 --res 300 --batch 32 --precision amp-fp16

Optional: needs `pip install torch` (CPU is enough); compare.sh runs it beside mpx.
"""
import argparse
import json
import math
import statistics
import time
import warnings

warnings.filterwarnings("ignore", message=".*NumPy.*")  # torch without numpy warns at import
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def conv_bn(cin, cout, k, stride, relu=True):
    layers = [nn.Conv2d(cin, cout, k, stride=stride, padding=k // 2, bias=False),
              nn.BatchNorm2d(cout, eps=1e-5, momentum=0.1)]
    if relu:
        layers.append(nn.ReLU(inplace=True))
    return nn.Sequential(*layers)


class Basic(nn.Module):
    def __init__(self, cin, width, stride):
        super().__init__()
        self.conv1 = conv_bn(cin, width, 3, stride)
        self.conv2 = conv_bn(width, width, 3, 1, relu=False)
        self.down = conv_bn(cin, width, 1, stride, relu=False) if stride != 1 or cin != width else None
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        y = self.conv2(self.conv1(x))
        return self.relu(y + (self.down(x) if self.down is not None else x))


class SSD(nn.Module):
    def __init__(self, width, classes, res):
        super().__init__()
        s = lambda c: max(1, int(math.floor(c * width + 0.5)))  # models/resnet.c: lround
        self.classes = classes + 1
        self.stem = nn.Sequential(conv_bn(3, s(64), 7, 2), nn.MaxPool2d(3, 2, 1))
        cin, self.stages, chans = s(64), nn.ModuleList(), []
        for i, w in enumerate([64, 128, 256, 512]):
            blocks = []
            for k in range(2):
                blocks.append(Basic(cin, s(w), 2 if k == 0 and i > 0 else 1))
                cin = s(w)
            self.stages.append(nn.Sequential(*blocks))
            chans.append(cin)
        chans = chans[1:]
        sizes = self.trunk_sizes(res)
        size = sizes[-1]
        k = max(8, int(256 * width + 0.5))  # models/ssd.c: width(c, 256)
        self.extras = nn.ModuleList()
        while size > 1 and len(chans) < 6:
            self.extras.append(nn.Sequential(conv_bn(chans[-1], k // 2, 1, 1), conv_bn(k // 2, k, 3, 2)))
            chans.append(k)
            size = (size - 1) // 2 + 1
            sizes.append(size)
        self.sizes = sizes
        self.boxes = [6 if 1 <= m <= 3 else 4 for m in range(len(chans))]
        self.conf = nn.ModuleList(nn.Conv2d(c, b * self.classes, 3, padding=1)
                                  for c, b in zip(chans, self.boxes))
        self.loc = nn.ModuleList(nn.Conv2d(c, b * 4, 3, padding=1) for c, b in zip(chans, self.boxes))

    @staticmethod
    def trunk_sizes(res):
        """The sides of the stride-8, -16 and -32 maps."""
        conv = lambda n, k, st, p: (n + 2 * p - k) // st + 1
        n, sizes = conv(conv(res, 7, 2, 3), 3, 2, 1), []  # stem
        for _ in range(3):
            n = conv(n, 3, 2, 1)  # the first block of stages 2, 3, 4
            sizes.append(n)
        return sizes

    def forward(self, x):
        x = self.stages[0](self.stem(x))
        maps = []
        for st in self.stages[1:]:
            x = st(x)
            maps.append(x)
        for e in self.extras:
            x = e(x)
            maps.append(x)
        b = x.shape[0]
        conf = torch.cat([h(m).permute(0, 2, 3, 1).reshape(b, -1, self.classes)
                          for h, m in zip(self.conf, maps)], 1)
        loc = torch.cat([h(m).permute(0, 2, 3, 1).reshape(b, -1, 4) for h, m in zip(self.loc, maps)], 1)
        return conf, loc


def priors(sizes, boxes, s_min=0.2, s_max=0.9):
    """Centre-form priors [P, 4] in (map, row, col, box) order, clipped (ssd_priors.c)."""
    m = len(sizes)
    step = (s_max - s_min) / (m - 1) if m > 1 else s_max - s_min
    out = []
    for k, (f, nb) in enumerate(zip(sizes, boxes)):
        s, s_next = s_min + k * step, s_min + (k + 1) * step
        shapes = [(s, s), (math.sqrt(s * s_next),) * 2]
        for r in [2, 0.5, 3, 1 / 3][:nb - 2]:
            shapes.append((s * math.sqrt(r), s / math.sqrt(r)))
        for i in range(f):
            for j in range(f):
                cx, cy = (j + 0.5) / f, (i + 0.5) / f
                for w, h in shapes:
                    x0, x1 = max(cx - w / 2, 0.0), min(cx + w / 2, 1.0)
                    y0, y1 = max(cy - h / 2, 0.0), min(cy + h / 2, 1.0)
                    out.append(((x0 + x1) / 2, (y0 + y1) / 2, x1 - x0, y1 - y0))
    return torch.tensor(out, dtype=torch.float64).float()


def multibox(conf, loc, pri, gt, labels, thr=0.5, neg_per_pos=3, min_neg=3, var=(0.1, 0.2)):
    """MultiBox loss of conf [B, P, C], loc [B, P, 4] against gt [B, G, 4] (corner form) with
    labels [B, G] (-1 padding, objects 1..C-1); matching and mining vectorised over the batch."""
    conf, loc = conf.float(), loc.float()
    B, P, _ = conf.shape
    with torch.no_grad():
        pc = torch.cat([pri[:, :2] - pri[:, 2:] / 2, pri[:, :2] + pri[:, 2:] / 2], 1)  # [P, 4]
        lt = torch.maximum(gt[:, :, None, :2], pc[None, None, :, :2])
        rb = torch.minimum(gt[:, :, None, 2:], pc[None, None, :, 2:])
        inter = (rb - lt).clamp(min=0).prod(-1)  # [B, G, P]
        area_g = (gt[..., 2:] - gt[..., :2]).prod(-1)
        area_p = pri[:, 2] * pri[:, 3]
        iou = inter / (area_g[:, :, None] + area_p[None, None] - inter)
        valid = labels >= 0
        iou = iou.masked_fill(~valid[:, :, None], -1.0)
        best_iou, best_gt = iou.max(1)  # [B, P]: each prior's best GT (ties: lower index)
        bb, gg = valid.nonzero(as_tuple=True)  # each GT's best prior is forced to it
        pp = iou[bb, gg].argmax(-1)
        best_gt[bb, pp] = gg
        best_iou[bb, pp] = 2.0
        pos = best_iou >= thr  # [B, P]
        bidx = torch.arange(B, device=gt.device)[:, None]
        target = torch.where(pos, labels[bidx, best_gt], torch.zeros_like(best_gt))
        g = gt[bidx, best_gt]  # [B, P, 4] matched GT, corner form
        gc, gwh = (g[..., :2] + g[..., 2:]) / 2, g[..., 2:] - g[..., :2]
        loc_t = torch.cat([(gc - pri[:, :2]) / (var[0] * pri[:, 2:]),
                           torch.log(gwh.clamp(min=1e-12) / pri[:, 2:]) / var[1]], -1)
    lse = torch.logsumexp(conf, -1)  # [B, P]
    with torch.no_grad():  # hard-negative mining by background loss
        bg = (lse - conf[..., 0]).masked_fill(pos, -math.inf)
        order = torch.sort(bg, dim=1, descending=True, stable=True)[1]
        rank = torch.empty_like(order)
        rank.scatter_(1, order, torch.arange(P, device=conf.device).expand(B, P))
        npos = pos.sum(1, keepdim=True)
        k = torch.minimum(P - npos, torch.clamp(neg_per_pos * npos, min=min_neg))
        counted = pos | (rank < k)
        n = pos.sum()
    ce = lse - conf.gather(-1, target[..., None]).squeeze(-1)
    sl1 = F.smooth_l1_loss(loc, loc_t, reduction="none", beta=1.0).sum(-1)
    loss = ((ce * counted).sum() + (sl1 * pos).sum()) / n.clamp(min=1)
    return loss, n


def fixed_batch(batch, res, classes, max_boxes, gen, dev):
    x = torch.randn(batch, 3, res, res, generator=gen)
    gt = torch.zeros(batch, max_boxes, 4)
    labels = torch.full((batch, max_boxes), -1, dtype=torch.long)
    for b in range(batch):
        n = int(torch.randint(1, max_boxes + 1, (1,), generator=gen))
        wh = 0.1 + 0.5 * torch.rand(n, 2, generator=gen)
        x0 = torch.rand(n, 2, generator=gen) * (1 - wh)
        gt[b, :n] = torch.cat([x0, x0 + wh], 1)
        labels[b, :n] = torch.randint(1, classes + 1, (n,), generator=gen)
    return (x.to(dev, memory_format=torch.channels_last), gt.to(dev), labels.to(dev))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--res", type=int, default=128)
    ap.add_argument("--width", type=float, default=0.5)
    ap.add_argument("--classes", type=int, default=10, help="object classes (plus background)")
    ap.add_argument("--max-boxes", type=int, default=6)
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
    model = SSD(a.width, a.classes, a.res).to(dev, memory_format=torch.channels_last)
    model.train()
    pri = priors(model.sizes, model.boxes).to(dev)
    params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.ndim > 1]
    no_decay = [p for p in model.parameters() if p.ndim <= 1]
    opt = torch.optim.SGD([{"params": decay, "weight_decay": 5e-4},
                           {"params": no_decay, "weight_decay": 0.0}], lr=0.02, momentum=0.9)
    scaler = torch.amp.GradScaler(a.device, enabled=amp is torch.float16)
    gen = torch.Generator().manual_seed(0)
    x, gt, labels = fixed_batch(a.batch, a.res, a.classes, a.max_boxes, gen, dev)
    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
    times = []
    for i in range(a.warmup + a.steps):
        sync()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(a.device, dtype=amp or torch.float32, enabled=amp is not None):
            conf, loc = model(x)
        loss, npos = multibox(conf, loc, pri, gt, labels)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        sync()
        if i >= a.warmup:
            times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    print(json.dumps({"peer": "pytorch", "model": "ssd", "torch": torch.__version__,
                      "device": a.device, "precision": a.precision, "threads": a.threads,
                      "batch": a.batch, "res": a.res, "width": a.width, "priors": pri.shape[0],
                      "positives": int(npos), "params": params, "loss": loss.item(), "median_s": med,
                      "min_s": min(times), "samples_per_s": a.batch / med}))


if __name__ == "__main__":
    main()
