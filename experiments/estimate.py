#!/usr/bin/env python3
"""estimate.py — how long an experiment's runs will take on this machine, from step times
measured here a moment ago.

  experiments/estimate.py measure MODEL SCALE THREADS OUT.json METHOD...
      the step time of every method: one `mpx bench` (3 steps after 1 warm-up, THREADS threads
      and the overrides in $EXTRA, as the runs will have) per distinct precision policy, loss
      scaling aside, into OUT.json
  experiments/estimate.py runs OUT.json PARALLEL METHOD:SEED...
      the estimated seconds of each run (one line: METHOD:SEED SECONDS) and of the whole set on
      PARALLEL slots, each run started on the first slot to come free (total; sum: all the
      runs' seconds added up)
  experiments/estimate.py single CONFIG THREADS OUT.json
      the estimated seconds of one run of CONFIG on THREADS threads
  experiments/estimate.py device CONFIG
      where CONFIG's runs train (train.device, after its includes and $EXTRA): cpu or cuda

A run's time is its steps times the measured step time of its method, plus its evaluations
(each a forward pass over the evaluation examples: about a third of a training step's work per
example). Stochastic rounding, pure 16-bit storage, the FP8 recipes and fixed point change a
step's cost and are timed; loss scaling costs a little more than the plain step (statistics
every stats_every steps, adaptive factors): not counted, so the estimate is a floor within ~10%.
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


# [precision] keys that only the loss scaler reads: methods differing in these alone take the
# same step time (the scaler's statistics cost a few percent, not counted), so share one bench.
SCALING_KEYS = {"scaling", "loss_scale", "init_scale", "growth_factor", "backoff_factor",
                "growth_interval", "hysteresis", "min_scale", "max_scale", "als", "n_uf", "u_min",
                "u_max", "scale_bound", "accum_bound", "update_every", "quantile", "unscale_fp16"}


def section_of(cfg_path, want, seen=None):
    """The keys of section `want` a config sets, following its includes in order (a later
    include or the file's own key overrides an earlier one)."""
    seen = seen or set()
    keys = {}
    if cfg_path in seen or not os.path.exists(cfg_path):
        return keys
    seen.add(cfg_path)
    section = ""
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
            keys.update(section_of(os.path.join(os.path.dirname(cfg_path), val), want, seen))
        elif section == want:
            keys[key] = val
    return keys


def device_of(cfg_path):
    """train.device of a config with $EXTRA's overrides: where its runs will train."""
    device = section_of(cfg_path, "train").get("device", "cpu")
    for o in os.environ.get("EXTRA", "").split():
        if o.startswith("train.device="):
            device = o.split("=", 1)[1]
    return device


def bench(cfg, threads, out, extra=True):
    """The bench JSON of one short `mpx bench` of cfg (with $EXTRA's overrides, as the set's runs
    get them, unless extra is False) on threads."""
    cmd = [MPX, "bench", cfg, *(os.environ.get("EXTRA", "").split() if extra else []),
           f"train.threads={threads}",
           "--steps", "3", "--warmup", "1", "--json", out]
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit(f"estimate: {' '.join(cmd)} failed: {r.stderr.strip()[-300:]}")
    return json.load(open(out))


def run_seconds(schedule, batch, step_s):
    """A run's seconds: its steps, and its evaluations at a third of a step's work per example."""
    steps, every, n_eval = schedule["steps"], schedule["eval_every"], schedule["eval_examples"]
    evals = (steps // every if every > 0 else 0) + (0 if every > 0 and steps % every == 0 else 1)
    return steps * step_s + evals * n_eval / batch * step_s / 3


def measure(model, scale, threads, out, methods):
    """One `mpx bench` per distinct step cost: each group of methods whose precision policies
    differ only in loss scaling is timed once, on its first method's config (its mode with its
    rounding, master weights, FP8 recipe, fixed-point bits)."""
    cfgdir = os.path.join(ROOT, "experiments", "configs", model, scale)
    groups = {}
    for m in methods:
        pol = section_of(os.path.join(cfgdir, f"{m}.cfg"), "precision")
        cost = frozenset((k, v) for k, v in pol.items() if k not in SCALING_KEYS)
        groups.setdefault(cost, []).append(m)
    result = {"method_step_s": {}, "method_modes": {}}
    for members in groups.values():
        b = bench(os.path.join(cfgdir, f"{members[0]}.cfg"), threads, out)
        v = b["variants"][0]
        result["schedule"], result["batch"] = b["schedule"], b["batch"]
        for m in members:
            result["method_step_s"][m] = v["median_s"]
            result["method_modes"][m] = v["mode"]
    json.dump(result, open(out, "w"))


def runs(bench_json, parallel, items):
    """Each run's seconds, and the whole set's: the runs in the driver's order, each started on
    the first of PARALLEL slots to come free."""
    b = json.load(open(bench_json))
    slots = [0.0] * max(1, parallel)
    for item in items:
        secs = run_seconds(b["schedule"], b["batch"], b["method_step_s"][item.split(":")[0]])
        slots[slots.index(min(slots))] += secs
        print(f"{item} {max(1, round(secs))}")
    print(f"total {max(slots):.0f}")
    print(f"sum {sum(slots):.0f}")
    by_mode = {}
    for m, t in b["method_step_s"].items():
        by_mode.setdefault(b["method_modes"][m], []).append(t)
    print("steps " + " ".join(f"{m}={min(ts):.3f}" + (f"-{max(ts):.3f}s" if max(ts) > min(ts) else "s")
                              for m, ts in sorted(by_mode.items())))


def single(cfg, threads, out):
    """The seconds of one run of cfg on threads (SSD vgg's pretraining, run before the set and
    without $EXTRA)."""
    b = bench(cfg, threads, out, extra=False)
    print(f"{max(1, round(run_seconds(b['schedule'], b['batch'], b['variants'][0]['median_s'])))}")


def main(argv):
    if len(argv) >= 6 and argv[1] == "measure":
        measure(argv[2], argv[3], int(argv[4]), argv[5], argv[6:])
    elif len(argv) >= 4 and argv[1] == "runs":
        runs(argv[2], int(argv[3]), argv[4:])
    elif len(argv) == 5 and argv[1] == "single":
        single(argv[2], int(argv[3]), argv[4])
    elif len(argv) == 3 and argv[1] == "device":
        print(device_of(argv[2]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
