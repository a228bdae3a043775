#!/usr/bin/env python3
"""eval_noise.py — how much of a difference between runs the held-out set alone can make.

    python3 experiments/eval_noise.py A.units.tsv [B.units.tsv] [--resamples N]

Each file is what `mpx eval RUN.h5 --units FILE` writes (one row per evaluation unit: an image,
or a BERT sequence, with its summed loss, correct predictions and predictions). With one file:
the metric and the mean loss with their bootstrap standard deviations over resamples of the
units. With two runs evaluated on the same units (same model, config and evaluation set): the
difference A - B and its *paired* bootstrap standard deviation, resampling the units once for
both runs, which is the evaluation set's share of the noise in a comparison of two methods;
beside it, what an unpaired comparison would suffer (the two standard deviations combined).
Exit 2 when the files are unreadable or their units do not match.
"""
import argparse
import csv
import math
import random
import sys


def load(path):
    with open(path) as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    if not rows or not {"unit", "loss", "correct", "count"} <= set(rows[0]):
        raise ValueError(f"{path}: not an mpx eval --units file (columns unit, loss, correct, count)")
    return ([float(r["loss"]) for r in rows], [float(r["correct"]) for r in rows],
            [float(r["count"]) for r in rows])


def stats(u, idx):
    loss, correct, count = u
    n = sum(count[i] for i in idx)
    return sum(loss[i] for i in idx) / n, 100.0 * sum(correct[i] for i in idx) / n


def sd(v):
    m = sum(v) / len(v)
    return math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("a")
    ap.add_argument("b", nargs="?")
    ap.add_argument("--resamples", type=int, default=2000)
    a = ap.parse_args()
    try:
        ua = load(a.a)
        ub = load(a.b) if a.b else None
    except (OSError, ValueError, KeyError) as e:
        print(f"eval_noise: {e}", file=sys.stderr)
        return 2
    n = len(ua[0])
    if ub is not None and ub[2] != ua[2]:
        print(f"eval_noise: {a.a} and {a.b} do not hold the same units (their prediction counts "
              "differ): evaluate both on one evaluation set", file=sys.stderr)
        return 2
    rng = random.Random(0)
    all_idx = range(n)
    base_a = stats(ua, all_idx)
    base_b = stats(ub, all_idx) if ub else None
    boot = []
    for _ in range(a.resamples):
        idx = [rng.randrange(n) for _ in range(n)]
        sa = stats(ua, idx)
        sb = stats(ub, idx) if ub else (0.0, 0.0)
        boot.append((sa[0], sa[1], sb[0], sb[1], sa[0] - sb[0], sa[1] - sb[1]))
    col = lambda k: [b[k] for b in boot]
    print(f"units\t{n}\nresamples\t{a.resamples}")
    print(f"A\tloss {base_a[0]:.6f} (sd {sd(col(0)):.6f})\tmetric {base_a[1]:.4f} (sd {sd(col(1)):.4f})")
    if ub:
        print(f"B\tloss {base_b[0]:.6f} (sd {sd(col(2)):.6f})\tmetric {base_b[1]:.4f} (sd {sd(col(3)):.4f})")
        unpaired_l = math.hypot(sd(col(0)), sd(col(2)))
        unpaired_m = math.hypot(sd(col(1)), sd(col(3)))
        print(f"A-B\tloss {base_a[0] - base_b[0]:+.6f} (paired sd {sd(col(4)):.6f}; unpaired "
              f"{unpaired_l:.6f})\tmetric {base_a[1] - base_b[1]:+.4f} (paired sd "
              f"{sd(col(5)):.4f}; unpaired {unpaired_m:.4f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
