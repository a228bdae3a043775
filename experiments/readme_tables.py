#!/usr/bin/env python3
"""readme_tables.py — the README's tables that come from committed results, so they stay current.

  experiments/readme_tables.py                 print the tables
  experiments/readme_tables.py --check FILE    exit 1 naming each table of FILE that is stale
  experiments/readme_tables.py --update FILE   rewrite them in FILE

Two tables, each between `<!-- table:NAME -->` and `<!-- end:NAME -->` in README.md:
- howlong: per model, scale and host kind, the median `wall_s` of one committed run (one thread,
  two side by side, as the references ran) and the time of one seed of each method set with two
  runs side by side (longest runs first onto the first free core), from the runs.tsv medians of
  that host kind and numerics path (a run stopped early counts as what it took); a set with
  methods never run there is a lower bound.
- glance: per model and scale, the verdicts of claims.csv (holds / fails / not shown).
- decided: every claim that holds or fails, with d, its 90% interval and the margin.
make test checks README.md against them (tests/integration/test_readme_tables.sh).
"""
import csv
import glob
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REF = os.path.join(ROOT, "results", "reference")
CONFIGS = os.path.join(ROOT, "experiments", "configs")
MODELS = ["resnet50", "bert", "ssd"]
SETS = ["methods", "master_weights", "formats"]


def host_kind(host, isa):
    """A short name of the host kind and numerics path from runs.tsv's host and isa columns."""
    flags = host[host.find("[") + 1:host.rfind("]")].split() if "[" in host else []
    vendor = "Intel Xeon" if host.startswith("Intel") else host.split("[")[0].strip()
    if "avx512_fp16" in flags:
        feat = "AVX512_FP16 + AMX"
    elif "avx512_bf16" in flags:
        feat = "AVX-512 + BF16"
    elif "avx512f" in flags:
        feat = "AVX-512"
    else:
        feat = "AVX2 only"
    path = " (AVX2 path)" if isa == "avx2" else ""
    return f"{vendor}, {feat}{path}"


def read_list(model, name):
    path = os.path.join(CONFIGS, model, name + ".list")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [ln.split()[0] for ln in f if ln.strip() and not ln.lstrip().startswith("#")]


def two_cores(times):
    """Makespan of the runs on two workers, longest first onto the first free one."""
    free = [0.0, 0.0]
    for t in sorted(times, reverse=True):
        i = free.index(min(free))
        free[i] += t
    return max(free)


def hours(s):
    if s < 90:
        return f"{s:.0f} s"
    return f"{s / 60:.0f} min" if s < 5400 else f"{s / 3600:.1f} h"


def howlong():
    rows = ["| model, scale | host kind (numerics path) | one run (median, range) | "
            "method set, one seed | master-weights set | formats set |",
            "|---|---|---|---|---|---|"]
    for model in MODELS:
        for tsv in sorted(glob.glob(os.path.join(REF, model, "*", "runs.tsv"))):
            scale = os.path.basename(os.path.dirname(tsv))
            walls = {}
            with open(tsv) as f:
                for r in csv.DictReader(f, delimiter="\t"):
                    if not r.get("wall_s"):
                        continue
                    kind = host_kind(r.get("host", ""), r.get("isa", ""))
                    walls.setdefault(kind, {}).setdefault(r["method"], []).append(float(r["wall_s"]))
            for kind in sorted(walls):
                med = {m: statistics.median(v) for m, v in walls[kind].items()}
                every = sorted(t for v in walls[kind].values() for t in v)
                one = (f"{hours(statistics.median(every))} "
                       f"({hours(every[0])}-{hours(every[-1])}, {len(every)} run{'s' if len(every) > 1 else ''})")
                cells = []
                for s in SETS:
                    names = read_list(model, s)
                    if not names:
                        cells.append("—")
                        continue
                    have = [med[m] for m in names if m in med]
                    if not have:
                        cells.append("not run")
                    elif len(have) == len(names):
                        cells.append(hours(two_cores(have)))
                    else:
                        cells.append(f"≥ {hours(two_cores(have))} ({len(have)} of {len(names)} run)")
                rows.append(f"| {model} {scale} | {kind} | {one} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def glance():
    rows = ["| model, scale | holds | fails | not shown | table |", "|---|---|---|---|---|"]
    total = {"holds": 0, "fails": 0, "not shown": 0}
    for model in MODELS:
        for path in sorted(glob.glob(os.path.join(REF, model, "*", "claims.csv"))):
            scale = os.path.basename(os.path.dirname(path))
            n = {"holds": 0, "fails": 0, "not shown": 0}
            with open(path) as f:
                for r in csv.DictReader(f):
                    n[r["verdict"]] = n.get(r["verdict"], 0) + 1
            for k in total:
                total[k] += n.get(k, 0)
            link = os.path.relpath(os.path.join(os.path.dirname(path), "table.md"), ROOT)
            rows.append(f"| {model} {scale} | {n['holds']} | {n['fails']} | {n['not shown']} | "
                        f"[{link}]({link}) |")
    rows.append(f"| all | {total['holds']} | {total['fails']} | {total['not shown']} | |")
    return "\n".join(rows)


def decided():
    rows = ["| verdict | claim | model, scale | the claim | a vs b | d [90% interval], margin | pairs |",
            "|---|---|---|---|---|---|---|"]
    for verdict in ("holds", "fails"):
        for model in MODELS:
            for path in sorted(glob.glob(os.path.join(REF, model, "*", "claims.csv"))):
                with open(path) as f:
                    for r in csv.DictReader(f):
                        if r["verdict"] != verdict:
                            continue
                        num = (f"{float(r['d']):+.3g} [{float(r['ci_lo']):+.3g}, "
                               f"{float(r['ci_hi']):+.3g}], {float(r['delta']):.3g}"
                               if r["d"] and r["ci_lo"] else "—")
                        rows.append(f"| {verdict} | {r['id']} | {model} {r['scale']} | "
                                    f"{r['claim']} | {r['a']} vs {r['b']} ({r['metric']}) | "
                                    f"{num} | {r['pairs'] or '—'} |")
    return "\n".join(rows)


TABLES = {"howlong": howlong, "glance": glance, "decided": decided}


def blocks(text):
    """{name: (start, end)} of each table's body in text."""
    out = {}
    for name in TABLES:
        a, b = f"<!-- table:{name} -->\n", f"<!-- end:{name} -->"
        i, j = text.find(a), text.find(b)
        if i >= 0 and j > i:
            out[name] = (i + len(a), j)
    return out


def main(argv):
    if len(argv) == 1:
        for name, fn in TABLES.items():
            print(f"<!-- table:{name} -->\n{fn()}\n<!-- end:{name} -->\n")
        return 0
    if len(argv) != 3 or argv[1] not in ("--check", "--update"):
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    path = argv[2]
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        print(f"readme_tables: {path}: {e.strerror}", file=sys.stderr)
        return 2
    where = blocks(text)
    missing = [n for n in TABLES if n not in where]
    if missing:
        print(f"readme_tables: {path}: no <!-- table:{missing[0]} --> ... <!-- end:{missing[0]} --> block",
              file=sys.stderr)
        return 2
    stale = []
    for name in sorted(TABLES, key=lambda n: -where[n][0]):
        a, b = where[name]
        want = TABLES[name]() + "\n"
        if text[a:b] != want:
            stale.append(name)
            text = text[:a] + want + text[b:]
    if argv[1] == "--check":
        for name in stale:
            print(f"readme_tables: {path}: table '{name}' is stale "
                  f"(experiments/readme_tables.py --update {path})")
        return 1 if stale else 0
    if stale:
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
