#!/usr/bin/env bash
# test_regress_verdict.sh — the accuracy rule of experiments/regress.py on constructed values:
# the metric fails only below its band and says when the band reaches 0 (cannot fail); the
# losses fail on either side. The SSD case is the CI failure it was written for (bf16 smoke mAP
# 1.21 against 0.17 +- 0.73 on a host with native BF16 GEMMs).
set -u
root=${MPX_SOURCE_DIR:?}
command -v python3 >/dev/null || { echo "python3 not found: skipped"; exit 77; }
python3 - "$root/experiments" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
from regress import accuracy_verdict, band
cases = [  # key, now, mean, tol -> passes, verdict
    ("metric", 1.2097, 0.1689, 0.7316, True, "ok (uninformative: the band reaches 0)"),
    ("metric", 45.9, 47.0, 1.0, False, "REGRESSION"),
    ("metric", 46.1, 47.0, 1.0, True, "ok"),
    ("metric", 48.5, 47.0, 1.0, True, "ok (better than the band)"),
    ("eval_loss", 1.5, 2.0, 0.1, False, "REGRESSION"),
    ("eval_loss", 2.5, 2.0, 0.1, False, "REGRESSION"),
    ("final_loss", 2.05, 2.0, 0.1, True, "ok"),
]
bad = 0
for key, now, mean, tol, ok, want in cases:
    got_ok, got = accuracy_verdict(key, now, mean, tol)
    if (got_ok, got) != (ok, want):
        print(f"FAIL {key} {now} vs {mean} +- {tol}: got ({got_ok}, {got!r}), want ({ok}, {want!r})")
        bad += 1
# The band: 4 sd, floors 1% of a loss and 0.5 metric points.
for args, want in [(("metric", 47.0, 0.05), 0.5), (("metric", 47.0, 0.5), 2.0),
                   (("eval_loss", 2.0, 0.001), 0.02)]:
    if abs(band(*args) - want) > 1e-12:
        print(f"FAIL band{args} = {band(*args)}, want {want}")
        bad += 1
print(f"{len(cases) + 3} checks, {bad} failed")
sys.exit(1 if bad else 0)
PY
