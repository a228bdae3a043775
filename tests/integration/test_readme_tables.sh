#!/usr/bin/env bash
# test_readme_tables.sh — README's "How long" and "Results at a glance" tables are what
# experiments/readme_tables.py computes from the committed runs.tsv and claims.csv files: a
# reference run or verdict that changes without README is a failure naming the stale table.
set -u
root=${MPX_SOURCE_DIR:?}
command -v python3 >/dev/null || { echo "python3 not found: skipped"; exit 77; }
python3 "$root/experiments/readme_tables.py" --check "$root/README.md"
