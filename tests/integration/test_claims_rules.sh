#!/usr/bin/env bash
# test_claims_rules.sh — the verdict rules (experiments/claims/README.md) on constructed run
# summaries with known answers: Student's t against tabulated quantiles; paired intervals, Welch
# where pairs break (another numerics path, other initial weights); same / not_worse / worse at
# a fixed margin, including the cases the old pooled-sd rule got wrong (a consistent loss hidden
# by one method's own spread, a `worse` claim failed on a point estimate); diverged runs scored,
# runs from uncommitted trees excluded, best(...) over a sweep, overhead against its A/A control,
# seeds needed, Fisher's exact test.
set -u
root=${MPX_SOURCE_DIR:?}
command -v python3 >/dev/null || { echo "python3 not found: skipped"; exit 77; }
python3 - "$root/experiments" <<'PY'
import json, os, sys, tempfile
sys.path.insert(0, sys.argv[1])
import verdicts
from claims import Method, evaluate

bad = 0
def check(name, ok, detail=""):
    global bad
    if not ok:
        print(f"FAIL {name} {detail}")
        bad += 1

# Student's t: tabulated quantiles (6 digits)
for p, df, ref in [(0.95, 1, 6.313752), (0.95, 2, 2.919986), (0.95, 4, 2.131847),
                   (0.975, 9, 2.262157), (0.8, 2, 1.060660), (0.95, 30, 1.697261),
                   (0.975, 1000, 1.962339), (0.05, 4, -2.131847)]:
    got = verdicts.t_ppf(p, df)
    check(f"t_ppf({p}, {df})", abs(got - ref) < 5e-6, f"got {got}, want {ref}")
# Fisher: 3 of 3 diverged against 0 of 3 has one-sided p = 1 / C(6, 3) = 0.05
check("fisher", abs(verdicts.fisher_exact(3, 3, 0, 3) - 0.05) < 1e-12)
check("fisher none", verdicts.fisher_exact(0, 3, 0, 3) == 1.0)

HOST = "AMD EPYC [avx2 fma f16c avx512f avx512bw avx512_bf16]"
AVX2 = "AMD EPYC [avx2 fma f16c]"
def runs(name, values, stopped="-", host=HOST, commit="abc123", init="-", key="metric"):
    rows = []
    for s, v in enumerate(values):
        st = stopped[s] if isinstance(stopped, list) else stopped
        h = host[s] if isinstance(host, list) else host
        rows.append({"seed": str(s), key: str(v), "metric" if key != "metric" else "eval_loss": "",
                     "stopped": st, "host": h, "git_commit": commit, "init_weights": init,
                     "isa": "native"})
    return Method(name, rows)

base = [71.0, 72.0, 70.0, 73.0, 71.5]
M = {
    "a": runs("a", base),
    "a_eq": runs("a_eq", [v + 0.01 for v in base]),           # +0.01 on every seed
    "a_up": runs("a_up", [v + 0.5 for v in base]),            # +0.5 on every seed
    "a_down": runs("a_down", [v - 0.5 for v in base]),        # -0.5 on every seed
    # a consistent loss of 0.1-0.2 plus a large spread of its own across seeds: the old rule's
    # 2 pooled sd (about 2.5) called it a match
    "a_noisy": runs("a_noisy", [71.0 - 0.1, 72.0 - 0.2, 70.0 - 0.15, 73.0 - 0.1, 71.5 - 0.2]),
    # no consistent loss: differences of -0.05..+0.05, the interval inside (-margin, 0.05)
    "a_tiny": runs("a_tiny", [v + e for v, e in zip(base, [-0.05, 0.04, -0.03, 0.05, -0.02])]),
    "a_wide": runs("a_wide", [71.5, 71.0, 71.0, 73.5, 71.0]),  # d of +-0.5 around 0, no pattern
    "a_div": runs("a_div", [0, 0, 0, 0, 0], stopped="diverged"),
    # seeds 0-2 on another host kind than a's: no pairs, Welch over one numerics path
    "a_other": runs("a_other", [v + 0.01 for v in base], host=[AVX2, AVX2, AVX2, HOST, HOST]),
    "a_init": runs("a_init", [v + 0.01 for v in base], init="fnv1a64:ffff"),
    "a_dirty": runs("a_dirty", base, commit="abc123+dirty"),
    # a's seeds rerun on the AVX2 path beside its native runs (the same seeds, other runs), and
    # a method that ran seeds 0-2 natively and 3-4 on AVX2: every seed pairs on its own path
    "a_both": Method("a_both", runs("n", base).rows + runs("r", [v - 0.3 for v in base], host=AVX2).rows),
    "a_mixed": runs("a_mixed", [v + 0.01 for v in base[:3]] + [v - 0.29 for v in base[3:]],
                    host=[HOST, HOST, HOST, AVX2, AVX2]),
    "a_two": runs("a_two", base[:2]),
    "f1": runs("f1", [v - 1 for v in base]), "f2": runs("f2", [v + 0.3 for v in base]),
    "f3": runs("f3", [60.0]), "f4": Method("f4", []),
}
M["a"].rows[0]["init_weights"] = "fnv1a64:aaaa"
def claim(test, a, b, delta="0.27", metric="metric"):
    return {"test": test, "a": a, "b": b, "metric": metric, "delta": delta}
cases = [  # claim -> verdict, a piece of what it prints
    (claim("same", "a_eq", "a"), "holds", "paired over seeds"),
    (claim("same", "a_up", "a"), "fails", "d = +0.5"),
    (claim("same", "a_noisy", "a", "0.1"), "fails", "d = -0.15"),
    (claim("same", "a_noisy", "a"), "holds", "d = -0.15"),
    (claim("same", "a_wide", "a"), "not shown", "would decide it"),
    (claim("not_worse", "a_up", "a"), "holds", "d = +0.5"),
    (claim("not_worse", "a_down", "a"), "fails", "d = -0.5"),
    (claim("worse", "a_down", "a"), "holds", "d = -0.5"),
    (claim("worse", "a_up", "a"), "fails", "d = +0.5"),
    (claim("worse", "a_tiny", "a"), "fails", "d = -0.002"),
    (claim("worse", "a_wide", "a"), "not shown", "pairs would decide it"),
    (claim("worse", "a_div", "a"), "holds", "Fisher exact, one-sided p = 0.00397"),
    (claim("same", "a_other", "a"), "not shown", "Welch over 2 and 5 runs"),
    (claim("same", "a_other", "a"), "not shown", "seeds 0,1,2 unpaired"),
    (claim("same", "a_init", "a"), "holds", "seeds 0 unpaired"),
    (claim("same", "a_dirty", "a"), "not shown", "5 from uncommitted trees excluded"),
    (claim("same", "a_two", "a"), "not shown", "Welch over 2 and 5 runs"),
    (claim("same", "a", "f4"), "not shown", "runs missing"),
    (claim("same", "a_mixed", "a_both"), "holds", "seeds 0,1,2 on AMD EPYC [avx2 fma f16c avx512f avx512bw avx512_bf16]; seeds 3,4 on avx2 reference path"),
    (claim("not_worse", "a_up", "best(f1,f2)"), "holds", "d = +0.2"),
    (claim("not_worse", "a", "best(f1,f2,a_div)"), "fails", "d = -0.3"),
    (claim("not_worse", "a", "best(f1,f2,f3)"), "not shown", "fewer than 3 seeds: f3 (1)"),
    (claim("not_worse", "a", "best(f1,f2,f4)"), "not shown", "sweep incomplete: f4 not run"),
]
for c, want, why in cases:
    got, ours, reason, cols = evaluate("resnet50", c, M, [], ".")
    check(f"{c['test']} {c['a']} {c['b']} {c['delta']}", got == want and why in ours + " | " + reason,
          f"got {got!r} ({reason!r}), want {want!r} with {why!r}")

# lower is better: a loss 0.05 nats higher on every seed fails `same` at 0.0128
L = {"x": runs("x", [5.65, 5.73, 5.68], key="eval_loss"),
     "y": runs("y", [5.70, 5.78, 5.73], key="eval_loss")}
got, _, reason, cols = evaluate("bert", claim("same", "y", "x", "0.0128", "eval_loss"), L, [], ".")
check("eval_loss sign", got == "fails" and float(cols["d"]) < 0, reason)

# seeds needed: more seeds for a smaller gap, and the interval they promise is decisive
iv = verdicts.paired([0.1, -0.1, 0.05, -0.05, 0.0])
n1 = verdicts.seeds_needed("same", iv, 0.27)
n2 = verdicts.seeds_needed("same", iv, 0.1)
check("seeds_needed monotone", n1 is not None and n2 is not None and n1 < n2, f"{n1} {n2}")
check("seeds_needed decisive",
      (verdicts.t_ppf(0.95, n2 - 1) + verdicts.t_ppf(0.8, n2 - 1)) * iv.sd / n2 ** 0.5 <= 0.1)
check("seeds_needed at the boundary", verdicts.seeds_needed("same", verdicts.paired([0.27, 0.27, 0.27]), 0.27) is None)

# overhead: decided only where the A/A control resolves the threshold
with tempfile.TemporaryDirectory() as od:
    def over(v, ci, ctl):
        with open(os.path.join(od, "overheads.json"), "w") as f:
            json.dump({"overheads": {"x": v, "x_ci95": ci, "control": 0.0, "control_ci95": ctl}}, f)
        return evaluate("resnet50", {"test": "overhead", "a": "", "b": "control", "metric": "x",
                                     "delta": "0.0027"}, M, [], od)
    check("overhead below", over(0.001, [0.0, 0.002], [-0.001, 0.001])[0] == "holds")
    check("overhead above", over(0.01, [0.008, 0.012], [-0.001, 0.001])[0] == "fails")
    v, _, why, _ = over(0.001, [0.0, 0.002], [-0.02, 0.01])
    check("overhead resolution", v == "not shown" and "resolution 2.00%" in why, why)

n = 8 + 2 + len(cases) + 1 + 3 + 3
print(f"{n} checks, {bad} failed")
sys.exit(1 if bad else 0)
PY
