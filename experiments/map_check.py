#!/usr/bin/env python3
"""map_check.py — SSD's mAP recomputed by an independent implementation (pycocotools).

    python3 experiments/map_check.py DETECTIONS.tsv MPX_MAP [--tolerance T]

DETECTIONS.tsv is what `mpx eval RUN.h5 --detections DETECTIONS.tsv` writes; MPX_MAP is the mAP
(percent) that the same `mpx eval` printed. pycocotools' COCOeval is set up for the VOC07 metric:
IoU threshold 0.5 only, the 11 recall points 0, 0.1, ..., 1, one area range, every detection of
an image kept (maxDets = the most any image has). Its precision envelope read at the first recall
>= t equals VOC07's "highest precision at recall >= t", so the two agree exactly except where the
protocols differ, which this script counts:
  - a detection whose best-overlapping ground truth is already claimed: VOC counts it false,
    COCO gives it the next unclaimed ground truth with IoU >= 0.5 ("contested" below);
  - difficult objects, which COCO can only express as crowd regions (IoU against a crowd region
    is intersection over the detection's area).
With no contested detections and no difficult objects the two must agree to rounding
(tolerance 1e-6 points); otherwise the tolerance given (default 0.5 points) applies.
Exit 0 when they agree, 1 when not, 2 on bad input, 77 when pycocotools is not installed (a
skip, not a pass).
"""
import argparse
import contextlib
import io
import sys

import numpy as np


def load(path):
    dets, gts = [], []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if line.startswith("#") or line.startswith("kind\t"):
                continue
            p = line.rstrip("\n").split("\t")
            if len(p) != 9 or p[0] not in ("det", "gt"):
                raise ValueError(f"{path}:{n}: expected 9 tab-separated fields, kind det or gt")
            image, cls = int(p[1]), int(p[2])
            box = [float(x) for x in p[4:8]]
            if p[0] == "det":
                dets.append((image, cls, float(p[3]), box))
            else:
                gts.append((image, cls, box, int(p[8])))
    return dets, gts


def iou(a, b):
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    if w <= 0 or h <= 0:
        return 0.0
    inter = w * h
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def contested(dets, gts):
    """Detections that overlap two or more ground-truth objects of their class at IoU >= 0.5
    (the only ones the VOC and COCO matching rules can treat differently)."""
    by = {}
    for image, cls, box, _ in gts:
        by.setdefault((image, cls), []).append(box)
    return sum(sum(iou(box, g) >= 0.5 for g in by.get((image, cls), [])) >= 2
               for image, cls, _, box in dets)


def coco_map(dets, gts):
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    images = sorted({d[0] for d in dets} | {g[0] for g in gts})
    classes = sorted({d[1] for d in dets} | {g[1] for g in gts})
    xywh = lambda b: [b[0], b[1], b[2] - b[0], b[3] - b[1]]
    gt = COCO()
    gt.dataset = {
        "images": [{"id": i + 1} for i in images],
        "categories": [{"id": c + 1} for c in classes],
        "annotations": [{"id": k + 1, "image_id": g[0] + 1, "category_id": g[1] + 1,
                         "bbox": xywh(g[2]), "area": (g[2][2] - g[2][0]) * (g[2][3] - g[2][1]),
                         "iscrowd": g[3]} for k, g in enumerate(gts)],
    }
    with contextlib.redirect_stdout(io.StringIO()):
        gt.createIndex()
        dt = gt.loadRes([{"image_id": d[0] + 1, "category_id": d[1] + 1, "score": d[2],
                          "bbox": xywh(d[3])} for d in dets]) if dets else COCO()
        ev = COCOeval(gt, dt, "bbox")
        per_image = max((sum(1 for d in dets if d[0] == i) for i in images), default=1)
        ev.params.iouThrs = np.array([0.5])
        ev.params.recThrs = np.linspace(0.0, 1.0, 11)
        ev.params.maxDets = [max(per_image, 1)]
        ev.params.areaRng = [[0.0, 1e10]]
        ev.params.areaRngLbl = ["all"]
        ev.evaluate()
        ev.accumulate()
    prec = ev.eval["precision"][0, :, :, 0, 0]  # [recall point, class]
    aps = [prec[:, k].mean() for k in range(prec.shape[1]) if (prec[:, k] > -1).all()]
    return 100.0 * float(np.mean(aps)) if aps else 0.0, len(aps)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("detections")
    ap.add_argument("mpx_map", type=float, help="the mAP (percent) mpx eval printed")
    ap.add_argument("--tolerance", type=float, default=0.5,
                    help="points of mAP allowed where the protocols differ (default 0.5)")
    a = ap.parse_args()
    try:
        import pycocotools  # noqa: F401
    except ImportError:
        print("map_check: pycocotools is not installed (pip install pycocotools): skipped")
        return 77
    try:
        dets, gts = load(a.detections)
    except (OSError, ValueError) as e:
        print(f"map_check: {e}", file=sys.stderr)
        return 2
    ours, classes = coco_map(dets, gts)
    n_contested = contested(dets, gts)
    n_difficult = sum(g[3] for g in gts)
    exact = n_contested == 0 and n_difficult == 0
    tol = 1e-6 if exact else a.tolerance
    diff = ours - a.mpx_map
    print(f"mpx {a.mpx_map:.6f}  pycocotools {ours:.6f}  difference {diff:+.6f} points over "
          f"{classes} classes, {len(dets)} detections, {len(gts)} objects; {n_contested} contested "
          f"detections, {n_difficult} difficult objects: tolerance {tol:g}")
    ok = abs(diff) <= tol
    print("map_check: " + ("agree" if ok else "DISAGREE"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
