#!/usr/bin/env bash
# test_reference_schema.sh — the committed references are files a program reads without
# ceremony: every runs.tsv and layers.tsv has the columns report.py writes today (one schema for
# every model and scale), and every overheads.json is JSON without duplicate keys and without a
# path of the machine it was measured on.
set -u
root=${MPX_SOURCE_DIR:?}
command -v python3 >/dev/null || { echo "python3 not found: skipped"; exit 77; }
python3 - "$root" <<'PY'
import glob, json, os, sys
root = sys.argv[1]
sys.path.insert(0, os.path.join(root, "experiments"))
import report
bad = []
for name, cols in (("runs.tsv", report.RUN_COLS), ("layers.tsv", report.LAYER_COLS)):
    paths = glob.glob(os.path.join(root, "results", "reference", "*", "*", name))
    if not paths:
        bad.append(f"no committed {name}")
    for p in paths:
        with open(p) as f:
            head = f.readline().rstrip("\n").split("\t")
        if head != cols:
            missing = [c for c in cols if c not in head]
            extra = [c for c in head if c not in cols]
            bad.append(f"{os.path.relpath(p, root)}: columns differ (missing {missing}, extra {extra}, "
                       f"or out of order)")
def pairs(kv):
    keys = [k for k, _ in kv]
    dup = sorted({k for k in keys if keys.count(k) > 1})
    if dup:
        raise ValueError(f"duplicate keys {dup}")
    return dict(kv)
def strings(o):
    if isinstance(o, dict):
        for v in o.values():
            yield from strings(v)
    elif isinstance(o, list):
        for v in o:
            yield from strings(v)
    elif isinstance(o, str):
        yield o
for p in glob.glob(os.path.join(root, "results", "reference", "*", "*", "overheads.json")):
    rel = os.path.relpath(p, root)
    try:
        with open(p) as f:
            o = json.load(f, object_pairs_hook=pairs)
    except ValueError as e:
        bad.append(f"{rel}: {e}")
        continue
    bad += [f"{rel}: machine path '{s}'" for s in strings(o) if s.startswith("/")]
for b in bad:
    print("test_reference_schema:", b)
sys.exit(1 if bad else 0)
PY
