#!/usr/bin/env bash
# test_report_dataset.sh — the dataset line of experiments/report.py's tables names the data as
# the project sees it, never by one machine's path: runs trained from the project itself, from a
# git worktree beside it (ROOT/../other/../shared), or with no path at all.
set -u
root=${MPX_SOURCE_DIR:?}
command -v python3 >/dev/null || { echo "python3 not found: skipped"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/m/s" && : > "$tmp/m/s/fp32-s0.h5"
RESULTS=$tmp python3 - "$root/experiments" <<'PY'
import os, sys
sys.path.insert(0, sys.argv[1])
import report
root = report.ROOT
up = os.path.dirname(root)
cases = [  # the run's dataset attribute -> the table's name for it
    (f"text:{root}/../shared/data/corpus.tar.gz", "text:../shared/data/corpus.tar.gz"),
    (f"text:{up}/worktree/../shared/data/corpus.tar.gz", "text:../shared/data/corpus.tar.gz"),
    (f"cifar10:{root}/data/cache/cifar", "cifar10:data/cache/cifar"),
    ("scenes (CIFAR-10 objects, 128x128)", "scenes (CIFAR-10 objects, 128x128)"),
    ("text:/srv/corpus//a.tar.gz", "text:/srv/corpus/a.tar.gz"),
    ("text:/srv/a:b/../c.tar.gz", "text:/srv/c.tar.gz"),
    (f"{root}/data/scenes", "data/scenes"),
]
bad = 0
for given, want in cases:
    report.export = lambda run, what, d=given: [{"dataset": d}]
    got = report.export_dataset("m", "s")
    if got != want:
        print(f"FAIL {given!r}: got {got!r}, want {want!r}")
        bad += 1
print(f"{len(cases)} checks, {bad} failed")
sys.exit(1 if bad else 0)
PY
