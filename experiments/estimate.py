#!/usr/bin/env python3
"""estimate.py — how long an experiment's runs will take on this machine, from step times
measured here a moment ago.

  experiments/estimate.py measure MODEL SCALE THREADS OUT.json METHOD...
      one `mpx bench` of the model's fp32 config in every precision mode the methods use
      (3 steps after 1 warm-up, THREADS threads each, as the runs will have), into OUT.json
  experiments/estimate.py runs OUT.json PARALLEL METHOD:SEED...
      the estimated seconds of each run (one line: METHOD:SEED SECONDS) and of the whole set on
      PARALLEL slots

A run's time is its steps times the measured step time of its mode, plus its evaluations (each
a forward pass over the evaluation examples: about a third of a training step's work per
example). Scaling methods cost a little more than their mode's plain step (statistics every
stats_every steps, adaptive factors): not counted, so the estimate is a floor within ~10%.
Runs sharing the machine (PARALLEL > 1) slow each other a little more; the ETA the driver
prints corrects the estimate by the time the finished runs actually took.
"""
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MPX = os.environ.get("MPX", os.path.join(ROOT, "build", "mpx"))


def mode_of(cfg_path, seen=None):
    """The precision.mode a method config sets (following includes), fp32 when none does."""
    seen = seen or set()
    if cfg_path in seen or not os.path.exists(cfg_path):
        return None
    seen.add(cfg_path)
    mode, section = None, ""
    for line in open(cfg_path, encoding="utf-8"):
        line = line.split(";")[0].split("#")[0].strip()
        if not line:
            continue
        if line.startswith("["):
            section = line.strip("[]").strip()
            continue
        m = re.match(r"(\w+)\s*=\s*(\S+)", line)
        if not m:
            continue
        key, val = m.groups()
        if key == "include":
            inc = mode_of(os.path.join(os.path.dirname(cfg_path), val), seen)
            mode = inc or mode
        elif section == "precision" and key == "mode":
            mode = val
    return mode


def measure(model, scale, threads, out, methods):
    cfgdir = os.path.join(ROOT, "experiments", "configs", model, scale)
    modes = sorted({mode_of(os.path.join(cfgdir, f"{m}.cfg")) or "fp32" for m in methods})
    cmd = [MPX, "bench", os.path.join(cfgdir, "fp32.cfg"), f"train.threads={threads}",
           "--modes", ",".join(modes), "--steps", "3", "--warmup", "1", "--json", out]
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit(f"estimate: {' '.join(cmd)} failed: {r.stderr.strip()[-300:]}")
    b = json.load(open(out))
    b["method_modes"] = {m: mode_of(os.path.join(cfgdir, f"{m}.cfg")) or "fp32" for m in methods}
    json.dump(b, open(out, "w"))


def runs(bench, parallel, items):
    b = json.load(open(bench))
    step = {v["mode"]: v["median_s"] for v in b["variants"]}
    sch = b["schedule"]
    steps, every, n_eval, batch = sch["steps"], sch["eval_every"], sch["eval_examples"], b["batch"]
    evals = (steps // every if every > 0 else 0) + (0 if every > 0 and steps % every == 0 else 1)
    total = 0.0
    for item in items:
        method = item.split(":")[0]
        t = step[b["method_modes"][method]]
        secs = steps * t + evals * n_eval / batch * t / 3
        total += secs
        print(f"{item} {secs:.0f}")
    print(f"total {total / max(1, parallel):.0f}")
    print("steps " + " ".join(f"{m}={s:.3f}s" for m, s in sorted(step.items())))


def main(argv):
    if len(argv) >= 6 and argv[1] == "measure":
        measure(argv[2], argv[3], int(argv[4]), argv[5], argv[6:])
    elif len(argv) >= 4 and argv[1] == "runs":
        runs(argv[2], int(argv[3]), argv[4:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
