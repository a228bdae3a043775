"""claims.py — a model's claims (experiments/claims/MODEL.tsv) evaluated on its run summaries.

The rules are in experiments/claims/README.md; the statistics in verdicts.py. What this module
adds is which runs may be compared: only runs from a committed, clean tree; a pair is one seed of
both methods on the same numerics path (the host kind, or the AVX2 reference path that every host
kind reproduces) from the same initial weights; a diverged run is scored at the metric's floor,
never dropped. With fewer than 3 pairs the comparison is Welch's over the runs of one numerics
path.
"""
import csv
import json
import math
import os
import statistics

import verdicts

NEED_PAIRS = 3
# The worst value a run can have: chance accuracy, an empty detector, a uniform prediction's
# cross-entropy. A diverged run is scored at it.
FLOOR = {
    "resnet50": {"metric": 10.0, "eval_loss": math.log(10)},
    "bert": {"metric": 0.0, "eval_loss": math.log(8192)},
    "ssd": {"metric": 0.0},
}
# Paired seeds (or runs per method for Welch) a model's reference can spend on one claim: a
# ResNet-50 pair is ~50 min of one core, a BERT pair ~30, an SSD pair ~10.
BUDGET = {"resnet50": 10, "bert": 10, "ssd": 20}
LOWER_IS_BETTER = ("eval_loss", "final_loss")


def fnum(x):
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def pct(x, digits=2):
    return "—" if x is None else f"{100 * x:.{digits}f}"


def clean(row):
    c = row.get("git_commit", "-")
    return c not in ("", "-") and not c.endswith("+dirty")


def numerics_path(row):
    """Runs on one path give the same bits for the same config and seed: the AVX2 reference path
    (train.isa = avx2, or a host whose best is AVX2) of one CPU vendor line (the model name: AMD
    EPYC with AVX2 only and with AVX-512 give the same bits on it,
    tests/integration/test_reference_path.sh), else the host kind itself."""
    host = row.get("host", "") or ""
    name, _, feats = host.rpartition(" [")
    feats = feats.rstrip("]").split()
    if row.get("isa") == "avx2" or (feats and "avx512f" not in feats):
        return f"avx2 reference path ({name or 'unknown CPU'})"
    return host or "unknown host"


class Method:
    """The runs of one method that a reference may use (committed, clean trees); `dirty` counts
    those it may not."""

    def __init__(self, name, rows):
        self.name = name
        self.rows = [r for r in rows if clean(r)]
        self.dirty = len(rows) - len(self.rows)
        self.ok = [r for r in self.rows if r["stopped"] == "-"]
        self.diverged = sum(r["stopped"] == "diverged" for r in self.rows)

    def values(self, key):
        return [v for v in (fnum(r[key]) for r in self.ok) if v is not None]

    def mean(self, key):
        v = self.values(key)
        return statistics.fmean(v) if v else None

    def sd(self, key):
        v = self.values(key)
        return statistics.stdev(v) if len(v) > 1 else None

    def ratio(self, num, den):
        n = sum(int(r[num]) for r in self.ok if r.get(num) not in ("", None))
        d = sum(int(r[den]) for r in self.ok if r.get(den) not in ("", None))
        return n / d if d else None

    def ratio_sd(self, num, den):
        """The sample SD over runs of each run's own num / den (None with fewer than two)."""
        v = [int(r[num]) / int(r[den]) for r in self.ok
             if r.get(num) not in ("", None) and r.get(den) not in ("", None) and int(r[den])]
        return statistics.stdev(v) if len(v) > 1 else None

    def lost_sd(self):
        v = [float(r["update_lost"]) for r in self.ok
             if r["update_nonzero"] not in ("", None) and int(r["update_nonzero"])]
        return statistics.stdev(v) if len(v) > 1 else None

    def lost(self):
        rows = [r for r in self.ok if r["update_nonzero"] not in ("", None)]
        n = sum(int(r["update_nonzero"]) for r in rows)
        return sum(float(r["update_lost"]) * int(r["update_nonzero"]) for r in rows) / n if n else None

    def scored(self, key, floor):
        """{(seed, numerics path): (value, row)} over runs that finished or diverged (scored
        at floor). A seed may have run on more than one path: each is a run of its own."""
        out = {}
        for r in self.rows:
            k = (r["seed"], numerics_path(r))
            if r["stopped"] == "diverged" and floor is not None:
                out[k] = (floor, r)
            elif r["stopped"] == "-" and fnum(r[key]) is not None:
                out[k] = (fnum(r[key]), r)
        return out


def claims_of(model, root):
    path = os.path.join(root, "experiments", "claims", f"{model}.tsv")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        lines = [l for l in f if l.strip() and not l.startswith("#")]
    return list(csv.DictReader(lines, delimiter="\t"))


def sweep_incomplete(methods, names, need):
    """Why best(...) cannot be picked yet, or None: every member must have run with `need`
    seeds (diverged runs count: a diverged scale is part of the sweep)."""
    absent = [n for n in names if n not in methods or not methods[n].rows]
    if absent:
        return f"sweep incomplete: {', '.join(absent)} not run"
    few = [f"{n} ({len(methods[n].rows)})" for n in names if len(methods[n].rows) < need]
    if few:
        return f"sweep members with fewer than {need} seeds: {', '.join(few)}"
    return None


def best_of(methods, names, key, higher, floor):
    """The member with the best mean over its scored runs (a diverged run at the floor)."""
    def mean(m):
        v = [x for x, _ in m.scored(key, floor).values()]
        return statistics.fmean(v) if v else None
    cands = [methods[n] for n in names if n in methods and mean(methods[n]) is not None]
    if not cands:
        return None
    return (max if higher else min)(cands, key=mean)


def compare(a, b, key, floor):
    """The interval of a - b ("better" units) and the runs behind it: paired over the seeds
    whose two runs share a numerics path and initial weights, else Welch over the runs of the
    one path where both methods have the most."""
    sign = -1.0 if key in LOWER_IS_BETTER else 1.0
    sa, sb = a.scored(key, floor), b.scored(key, floor)
    pairs, broken = [], []
    for seed, path in sorted(set(sa) & set(sb), key=lambda k: (k[1], int(k[0]))):
        (va, ra), (vb, rb) = sa[(seed, path)], sb[(seed, path)]
        ia, ib = ra.get("init_weights", "-") or "-", rb.get("init_weights", "-") or "-"
        if ia != "-" and ib != "-" and ia != ib:
            broken.append(seed)
            continue
        pairs.append((seed, sign * (va - vb), path))
    paired = {s for s, _, _ in pairs}
    broken += sorted({s for s, _ in sa} & {s for s, _ in sb} - paired - set(broken), key=int)
    info = {"broken": broken, "paths": sorted({p for _, _, p in pairs}), "pairs": pairs}
    if len(pairs) >= NEED_PAIRS:
        info["seeds"] = [s for s, _, _ in pairs]
        return verdicts.paired([d for _, d, _ in pairs]), info
    by_path = {}
    for m, s in ((0, sa), (1, sb)):
        for (seed, path), (v, r) in s.items():
            by_path.setdefault(path, ([], []))[m].append((seed, v))
    best = max(by_path.items(), key=lambda kv: min(len(kv[1][0]), len(kv[1][1])), default=None)
    if best is None or min(len(best[1][0]), len(best[1][1])) < 2:
        info["seeds"] = []
        return None, info
    path, (xa, xb) = best
    info.update(paths=[path], runs=(len(xa), len(xb)))
    return verdicts.welch([sign * v for _, v in xa], [sign * v for _, v in xb]), info


def describe(iv, info, delta, key):
    unit = "nats" if key in LOWER_IS_BETTER else "points"
    if iv.kind == "paired":
        by = {}
        for seed, _, path in info["pairs"]:
            by.setdefault(path, []).append(seed)
        how = "paired over " + "; ".join(f"seeds {','.join(v)} on {p}" for p, v in by.items())
    else:
        how = (f"Welch over {info['runs'][0]} and {info['runs'][1]} runs (fewer than {NEED_PAIRS} "
               f"pairs) on {'; '.join(info['paths'])}")
    s = (f"d = {iv.d:+.4g} {unit} (a better when > 0), 90% interval [{iv.lo:+.4g}, {iv.hi:+.4g}], "
         f"margin {delta:.4g}; {how}")
    if info["broken"]:
        s += f"; seeds {','.join(info['broken'])} unpaired (numerics path or initial weights differ)"
    return s


def overhead(c, od):
    """An `overhead` claim: the whole-step overhead's 95% interval against the threshold, valid
    only where the A/A control resolves the threshold (its interval inside +-threshold)."""
    path = os.path.join(od, "overheads.json")
    out = {"d": "", "lo": "", "hi": "", "pairs": "", "seeds_needed": ""}
    thr = float(c["delta"])
    if not os.path.exists(path):
        return "not shown", "—", "no overheads.json (mpx bench --overheads) beside the table", out
    with open(path) as f:
        o = json.load(f)["overheads"]
    key, ctl = c["metric"], c["b"]
    if o.get(key + "_ci95") is None or o.get(ctl + "_ci95") is None:
        return ("not shown", "—", f"overheads.json has no {key} or {ctl} with a 95% interval",
                out)
    v, (lo, hi) = o[key], o[key + "_ci95"]
    res = max(abs(x) for x in o[ctl + "_ci95"])
    out.update(d=f"{v:.6g}", lo=f"{lo:.6g}", hi=f"{hi:.6g}")
    ours = f"{100 * v:+.3f}% [{100 * lo:+.3f}%, {100 * hi:+.3f}%] of a step"
    if res >= thr:
        return ("not shown", ours, f"resolution {100 * res:.2f}%: the A/A control's 95% interval "
                f"{[round(100 * x, 3) for x in o[ctl + '_ci95']]}% is not inside "
                f"±{100 * thr:.2f}%, so the bench cannot tell {100 * thr:.2f}% from nothing", out)
    if hi < thr:
        return "holds", ours, f"the 95% interval lies below {100 * thr:.2f}%", out
    if lo > thr:
        return "fails", ours, f"the 95% interval lies above {100 * thr:.2f}%", out
    return "not shown", ours, f"the 95% interval contains {100 * thr:.2f}%", out


def layers_less(a, b, layers, need):
    rate = {}
    # rows from before layers.tsv named the path belong to the one run of their seed
    keep = {m.name: {(r["seed"], numerics_path(r)) for r in m.ok} | {r["seed"] for r in m.ok}
            for m in (a, b)}
    for r in layers:
        run = (r["seed"], r["numerics"]) if r.get("numerics") else r["seed"]
        if r["method"] in keep and run in keep[r["method"]]:
            t = rate.setdefault((r["method"], r["layer"]), [0, 0])
            t[0] += int(r["act_flushed"])
            t[1] += int(r["act_nonzero"])
    under = [l for (m, l), t in rate.items() if m == b.name and t[1] and t[0] > 0]
    if not under:
        return "not shown", "—", f"{b.name} flushes no activation gradient in any layer", None
    ra = lambda l: rate[(a.name, l)][0] / rate[(a.name, l)][1]
    rb = lambda l: rate[(b.name, l)][0] / rate[(b.name, l)][1]
    lower = [l for l in under if (a.name, l) in rate and rate[(a.name, l)][1] and ra(l) < rb(l)]
    frac = len(lower) / len(under)
    why = (f"{a.name} flushes less than {b.name} in {len(lower)} of the {len(under)} layers "
           f"where {b.name} flushes any (needed: {100 * need:.0f}%; counts over every "
           "statistics step and seed, millions of values a layer)")
    return ("holds" if frac >= need else "fails"), f"{len(lower)} of {len(under)} layers", why, frac


def evaluate(model, c, methods, layers, od):
    """(verdict, ours, why, columns) of one claim row."""
    kind, key = c["test"], c["metric"]
    cols = {"d": "", "lo": "", "hi": "", "pairs": "", "seeds_needed": ""}
    if kind == "overhead":
        return overhead(c, od)
    delta = float(c["delta"])
    higher = key not in LOWER_IS_BETTER
    floor = FLOOR.get(model, {}).get(key)
    a = methods.get(c["a"])
    if c["b"].startswith("best("):
        names = c["b"][len("best("):-1].split(",")
        why = sweep_incomplete(methods, names, NEED_PAIRS)
        if why:
            return "not shown", "—", why, cols
        b = best_of(methods, names, key, higher, floor)
    else:
        b = methods.get(c["b"])
    if a is None or b is None or not a.rows or not b.rows:
        dirty = sum(m.dirty for m in (a, b) if m is not None)
        return "not shown", "—", "runs missing" + (
            f" ({dirty} from uncommitted trees excluded)" if dirty else ""), cols
    if kind == "layers_less":
        verdict, ours, why, frac = layers_less(a, b, layers, delta)
        if frac is not None:
            cols["d"] = f"{frac:.4g}"
        return verdict, ours, why, cols
    iv, info = compare(a, b, key, floor)
    fmt = lambda m: (f"{m.mean(key):.4g} ± {m.sd(key):.2g}" if m.sd(key) is not None
                     else f"{m.mean(key) or float('nan'):.4g}") + f" (n={len(m.values(key))}" + \
        (f", {m.diverged} diverged" if m.diverged else "") + ")"
    ours = f"{fmt(a)} vs {b.name} {fmt(b)}"
    extra = ""
    if a.diverged or b.diverged:
        p = verdicts.fisher_exact(a.diverged, len(a.rows), b.diverged, len(b.rows))
        extra = (f"; divergence {a.diverged}/{len(a.rows)} vs {b.diverged}/{len(b.rows)} "
                 f"(Fisher exact, one-sided p = {p:.3g}; diverged runs scored at {floor})")
    if iv is None:
        return "not shown", ours, "fewer than 2 comparable runs of each method" + extra, cols
    verdict = verdicts.decide(kind, iv, delta)
    need = verdicts.seeds_needed(kind, iv, delta)
    cols.update(d=f"{iv.d:.6g}", lo=f"{iv.lo:.6g}", hi=f"{iv.hi:.6g}",
                pairs=str(iv.n) if iv.kind == "paired" else f"welch {info['runs'][0]}+{info['runs'][1]}",
                seeds_needed="" if verdict != "not shown" else
                (str(need) if need is not None else f">{verdicts.MAX_SEEDS}"))
    why = describe(iv, info, delta, key) + extra
    if verdict == "not shown":
        budget = BUDGET.get(model, 10)
        if need is None:
            why += f"; undecidable at this spread (more than {verdicts.MAX_SEEDS} seeds)"
        else:
            why += (f"; {need} {'pairs' if iv.kind == 'paired' else 'runs per method'} would "
                    f"decide it at 80% power" + (f", beyond the budget of {budget}"
                                                 if need > budget else ""))
    return verdict, ours, why, cols


def explain(methods, spec):
    """The statistic that explains a verdict: underflow(M), operands(M), scale(M), lost(M)."""
    out = []
    for item in filter(None, spec.split(";")):
        kind, name = item.split("(")
        name = name.rstrip(")")
        m = methods.get(name)
        if m is None or not m.ok:
            continue
        if kind == "underflow":
            out.append(f"{name}: {pct(m.ratio('act_flushed', 'act_nonzero'), 3)}% of nonzero "
                       f"activation gradients flushed to zero, "
                       f"{pct(m.ratio('act_below_min', 'act_nonzero'), 3)}% below 2^-24; weight "
                       f"gradients {pct(m.ratio('weight_flushed', 'weight_nonzero'), 3)}%")
        elif kind == "operands":
            sat = m.ratio("operand_saturated", "operand_nonzero")
            out.append(f"{name}: {pct(m.ratio('operand_dy_flushed', 'operand_dy_nonzero'), 3)}% of "
                       f"nonzero output gradients flushed to zero by the GEMM operand cast"
                       + ("" if sat is None else f", {pct(sat, 3)}% of nonzero operand values "
                          "(inputs, weights, gradients) saturated"))
        elif kind == "scale":
            lo = [float(r["scale_lo"]) for r in m.ok if r.get("scale_lo") not in ("", None)]
            hi = [float(r["scale_hi"]) for r in m.ok if r.get("scale_hi") not in ("", None)]
            if lo and hi:
                a, b = min(lo), max(hi)
                span = f"{a:.4g}" if a == b else f"{a:.4g} to {b:.4g}"
                out.append(f"{name}: its activation gradients carry a scale of {span} (per layer, "
                           f"median over statistics steps)")
        elif kind == "lost":
            out.append(f"{name}: {pct(m.lost(), 2)}% of nonzero weight updates lost in storage")
    return "; ".join(out)


CLAIM_COLS = ["model", "scale", "id", "paper", "place", "claim", "test", "a", "b", "metric",
              "d", "ci_lo", "ci_hi", "delta", "delta_source", "pairs", "seeds_needed",
              "verdict", "paper_value", "ours", "why"]


def claims_section(model, scale, methods, layers, od, root):
    rows = []
    for c in claims_of(model, root):
        verdict, ours, why, cols = evaluate(model, c, methods, layers, od)
        ex = explain(methods, c.get("explain", "") or "")
        rows.append({"model": model, "scale": scale, "id": c["id"], "paper": c["paper"],
                     "place": c["place"], "claim": c["claim"], "test": c["test"], "a": c["a"],
                     "b": c["b"], "metric": c["metric"], "d": cols["d"], "ci_lo": cols["lo"],
                     "ci_hi": cols["hi"], "delta": c["delta"],
                     "delta_source": c["delta_source"], "pairs": cols["pairs"],
                     "seeds_needed": cols["seeds_needed"], "verdict": verdict,
                     "paper_value": c["paper_value"], "ours": ours,
                     "why": why + (f"; {ex}" if ex else "")})
    return rows


def write_claims(rows, od):
    with open(os.path.join(od, "claims.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CLAIM_COLS, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
