#!/usr/bin/env bash
# test_claims_rules.sh — the verdict rules of experiments/report.py (experiments/claims/README.md)
# on constructed run summaries: same / not_worse / worse against the pooled-sd margin, too few
# seeds, every run diverged, and best(...) over a sweep that is incomplete or short of seeds.
set -u
root=${MPX_SOURCE_DIR:?}
command -v python3 >/dev/null || { echo "python3 not found: skipped"; exit 77; }
python3 - "$root/experiments" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
from report import Method, evaluate

def runs(name, values, stopped="-"):
    return Method(name, [{"metric": str(v), "eval_loss": "", "stopped": stopped} for v in values])

M = {  # metric values, higher is better; pooled sd of a/b below is 1 unless said
    "a": runs("a", [70, 71, 72]),      # mean 71, sd 1
    "b": runs("b", [70.5, 71.5, 72.5]),  # mean 71.5, sd 1: within 2 sd of a
    "far": runs("far", [75, 76, 77]),  # mean 76: a is 5 behind, past 2 sd
    "two": runs("two", [70, 72]),
    "div": runs("div", [0, 0, 0], stopped="diverged"),
    "f1": runs("f1", [69, 70, 71]), "f2": runs("f2", [71.5, 72.5, 73.5]),
    "f3": runs("f3", [60]), "f4": Method("f4", []),
}
def claim(test, a, b, margin="2sd"):
    return {"test": test, "a": a, "b": b, "metric": "metric", "margin": margin}
cases = [  # claim -> verdict, a piece of the numbers or the reason it prints
    (claim("same", "a", "b"), "holds", "margin 2"),
    (claim("same", "a", "far"), "fails", "far better than a by 5"),
    (claim("same", "a", "b", "0.1"), "fails", "margin 0.1"),
    (claim("not_worse", "far", "a"), "holds", "far better than a"),
    (claim("not_worse", "a", "far"), "fails", "margin 2"),
    (claim("worse", "a", "far"), "holds", "far better than a"),
    (claim("worse", "far", "a"), "fails", "far is not worse"),
    (claim("worse", "a", "b"), "not shown", "a loss smaller than the margin"),
    (claim("worse", "div", "a"), "holds", "diverged in 3 of 3"),
    (claim("same", "two", "a"), "not shown", "fewer than 3 seeds (2 and 3)"),
    (claim("same", "a", "f4"), "not shown", "runs missing"),
    # the sweep's best is f2 (72.5): a is 1.5 behind, within 2 pooled sd
    (claim("not_worse", "a", "best(f1,f2)"), "holds", "f2 better than a by 1.5"),
    (claim("not_worse", "a", "best(f1,f2,div)"), "holds", "f2 better than a by 1.5"),
    (claim("not_worse", "a", "best(f1,f2,f3)"), "not shown", "fewer than 3 seeds: f3 (1)"),
    (claim("not_worse", "a", "best(f1,f2,f4)"), "not shown", "sweep incomplete: f4 not run"),
]
bad = 0
for c, want, why in cases:
    got, ours, reason = evaluate(c, M, [], ".")
    if got != want or why not in ours + " | " + reason:
        print(f"FAIL {c['test']} {c['a']} {c['b']} {c['margin']}: got {got!r} ({reason!r}), "
              f"want {want!r} with {why!r}")
        bad += 1
print(f"{len(cases)} checks, {bad} failed")
sys.exit(1 if bad else 0)
PY
