#!/usr/bin/env python3
"""report.py — one model's results at one scale: per-run summaries, the table, the claims.

  experiments/report.py summarize MODEL SCALE    run files -> runs.tsv and layers.tsv
  experiments/report.py table MODEL SCALE        summaries -> table.md, table.csv, claims.csv
  experiments/report.py claims [MODEL ...] [--scale SCALE]
                                                 the same for each model at SCALE (default:
                                                 every scale with a committed reference),
                                                 and every claim's verdict on stdout

The pipeline keeps what a table needs apart from the run files: `summarize` reads every
finished run file (a .done marker beside it) of the model's method list with `mpx export` and
writes one row per run (runs.tsv) and one per run and layer (layers.tsv), replacing the rows of
the runs it read and keeping the others, so a partial re-run never drops committed results.
`table` and `claims` read only those summaries: a clean clone evaluates the committed ones.

Where: a scale whose reference is committed (the folder results/reference/MODEL/SCALE/ exists)
is summarised there; any other into results/MODEL/SCALE/report/, which git ignores, so a smoke
run never touches the committed references. OUT_DIR overrides the folder, RESULTS the run
files' root, MPX the binary.

Claims (experiments/claims/MODEL.tsv) are data: which methods, which metric, which comparison,
which margin. Each is evaluated on the summaries into a verdict — holds, fails or not shown —
with the numbers that decide it and a statistic that explains it; the rules are in
experiments/claims/README.md.
"""
import csv
import glob
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from claims import Method, claims_section, fnum, numerics_path, pct, write_claims  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MPX = os.environ.get("MPX", os.path.join(ROOT, "build", "mpx"))
RUN_COLS = ["method", "seed", "precision", "scaling", "steps", "final_loss", "eval_loss", "metric",
            "skipped", "samples_per_s", "wall_s", "stopped", "act_nonzero", "act_flushed",
            "act_below_min", "weight_nonzero", "weight_flushed", "weight_below_min",
            "update_nonzero", "update_lost", "update_error", "operand_dy_nonzero",
            "operand_dy_flushed", "operand_nonzero", "operand_saturated", "scale_lo", "scale_hi",
            "evals", "git_commit", "threads", "host", "isa", "init_weights", "cpu_paths"]
LAYER_COLS = ["method", "seed", "layer", "name", "kind", "act_nonzero", "act_flushed",
              "act_below_min", "weight_nonzero", "weight_flushed", "update_nonzero",
              "update_lost", "numerics"]
METRIC = {"resnet50": "top1", "bert": "mlm_acc", "ssd": "mAP"}
PAPER_NOTE = {
    "resnet50": "Paper numbers are ImageNet (224 px, full ResNet-50), a different setting from "
                "ours: they are there for the claim, not the digits.",
    "bert": "Neither paper trained BERT; DeepLearningExamples report BERT pretraining loss 1.2437 "
            "(AMP, dynamic scaling) vs 1.2465 (FP32) at full scale.",
    "ssd": "Paper numbers are VOC2007 test mAP of full SSD (MPT: SSD300 with VGG; ALS: SSD512), "
           "a different setting from ours: they are there for the claim (FP16 without scaling "
           "diverges, scale 8 fixes it), not the digits.",
}


def die(msg):
    print(f"report: {msg}", file=sys.stderr)
    sys.exit(2)


def read_list(path):
    with open(path) as f:
        return [l.strip() for l in f if l.strip() and not l.lstrip().startswith("#")]


def methods_of(model):
    """The table's methods: methods.list, then those of master_weights.list (the master-weights
    ablation) and formats.list (the formats experiment) that it does not name."""
    path = os.path.join(ROOT, "experiments", "configs", model, "methods.list")
    if not os.path.exists(path):
        die(f"{path}: no such file (unknown model '{model}')")
    ms = read_list(path)
    for extra in ("master_weights.list", "formats.list"):
        extra = os.path.join(ROOT, "experiments", "configs", model, extra)
        if os.path.exists(extra):
            ms += [m for m in read_list(extra) if m not in ms]
    return ms


def committed_scales(model):
    """The scales of MODEL with a committed reference (small first, then by name)."""
    root = os.path.join(ROOT, "results", "reference", model)
    found = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d))) \
        if os.path.isdir(root) else []
    return sorted(found, key=lambda d: (d != "small", d)) or ["small"]


def out_dir(model, scale):
    if os.environ.get("OUT_DIR"):
        return os.environ["OUT_DIR"]
    committed = os.path.join(ROOT, "results", "reference", model, scale)
    if os.path.isdir(committed):
        return committed
    return os.path.join(os.environ.get("RESULTS", os.path.join(ROOT, "results")), model, scale,
                        "report")


def export(run, what, optional=False):
    """Rows of `mpx export RUN WHAT` as dicts; None when an optional export is absent."""
    r = subprocess.run([MPX, "export", run, what], capture_output=True, text=True)
    if r.returncode != 0:
        if optional:
            return None
        die(f"mpx export {run} {what}: {r.stderr.strip()}")
    lines = r.stdout.rstrip("\n").split("\n")
    head = lines[0].split("\t")
    return [dict(zip(head, l.split("\t"))) for l in lines[1:] if l]


def read_tsv(path):
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def write_tsv(path, cols, rows):
    tmp = path + ".tmp"
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, delimiter="\t", lineterminator="\n",
                           extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    os.replace(tmp, path)


def summarize_run(run, method, seed):
    s = export(run, "summary")[0]
    stopped = s["stopped"]
    row = {k: s[k] for k in ("precision", "scaling", "steps", "final_loss", "eval_loss", "metric",
                             "skipped", "samples_per_s", "wall_s", "git_commit", "threads",
                             "host", "isa", "init_weights", "cpu_paths") if k in s}
    row.update(method=method, seed=seed,
               stopped="-" if stopped == "-" else "diverged" if "diverged" in stopped else "error")
    evals = export(run, "eval")
    row["evals"] = ",".join(f"{e['step']}:{e['metric']}" for e in evals)
    layers = {}
    for u in export(run, "underflow"):
        L = layers.setdefault(int(u["layer"]), {"name": u["name"], "kind": u["kind"]})
        for src, dst in (("act_nonzero", "act_nonzero"), ("act_flushed", "act_flushed"),
                         ("act_below_min", "act_below_min"), ("weight_nonzero", "weight_nonzero"),
                         ("weight_flushed", "weight_flushed"),
                         ("weight_below_min", "weight_below_min")):
            L[dst] = L.get(dst, 0) + int(u[src])
    upd = export(run, "updates", optional=True)
    for u in upd or []:
        L = layers[int(u["layer"])]
        n = int(u["update_nonzero"])
        L["update_nonzero"] = L.get("update_nonzero", 0) + n
        L["lost"] = L.get("lost", 0.0) + float(u["update_lost"]) * n
        L["err"] = L.get("err", 0.0) + float(u["update_error"]) * n
    tot = lambda k: sum(L.get(k, 0) for L in layers.values())
    for k in ("act_nonzero", "act_flushed", "act_below_min", "weight_nonzero", "weight_flushed",
              "weight_below_min"):
        row[k] = tot(k)
    if upd is None:
        row.update(update_nonzero="", update_lost="", update_error="")
    else:
        n = tot("update_nonzero")
        row.update(update_nonzero=n, update_lost=f"{tot('lost') / n:.9g}" if n else 0,
                   update_error=f"{tot('err') / n:.9g}" if n else 0)
    # The scale each layer's activation gradient carries (the loss scale times the adaptive
    # factors above it), as its median over the statistics steps: scale_lo and scale_hi are the
    # smallest and largest of those medians over the layers.
    per_layer = {}
    for r in export(run, "scale", optional=True) or []:
        per_layer.setdefault(int(r["layer"]), []).append(float(r["scale"]))
    medians = [statistics.median(v) for v in per_layer.values()]
    row["scale_lo"] = f"{min(medians):.6g}" if medians else ""
    row["scale_hi"] = f"{max(medians):.6g}" if medians else ""
    ops = export(run, "operands", optional=True) or []
    dy = [o for o in ops if o["operand"] == "dy"]
    row["operand_dy_nonzero"] = sum(int(o["nonzero"]) for o in dy) if ops else ""
    row["operand_dy_flushed"] = sum(int(o["flushed"]) for o in dy) if ops else ""
    # all three operands (inputs, weights, output gradients): values the cast clamped to the
    # format's largest finite value
    row["operand_nonzero"] = sum(int(o["nonzero"]) for o in ops) if ops else ""
    row["operand_saturated"] = sum(int(o["saturated"]) for o in ops) if ops else ""
    lrows = []
    for i in sorted(layers):
        L = layers[i]
        n = L.get("update_nonzero", 0)
        lrows.append({"method": method, "seed": seed, "layer": i, "name": L["name"],
                      "kind": L["kind"], "act_nonzero": L["act_nonzero"],
                      "act_flushed": L["act_flushed"], "act_below_min": L["act_below_min"],
                      "weight_nonzero": L["weight_nonzero"], "weight_flushed": L["weight_flushed"],
                      "update_nonzero": n if upd is not None else "",
                      "update_lost": (f"{L['lost'] / n:.9g}" if n else 0) if upd is not None else ""})
    return row, lrows


def summarize(model, scale):
    runs_root = os.path.join(os.environ.get("RESULTS", os.path.join(ROOT, "results")), model, scale)
    methods = methods_of(model)
    od = out_dir(model, scale)
    os.makedirs(od, exist_ok=True)
    runs_path, layers_path = os.path.join(od, "runs.tsv"), os.path.join(od, "layers.tsv")
    # A run is one method and seed on one numerics path (claims.numerics_path): the same seed
    # trained on another path is another run, kept beside it; the same path replaces it.
    key = lambda r: (r["method"], r["seed"], numerics_path(r))
    runs = {key(r): r for r in read_tsv(runs_path)}
    # layers.tsv rows name their path ("numerics"); rows written before that column existed
    # belong to the one run of their method and seed that runs.tsv then held
    path_of = {(m, sd): p for m, sd, p in runs}
    layer_rows = {}
    for r in read_tsv(layers_path):
        r["numerics"] = r.get("numerics") or path_of.get((r["method"], r["seed"]), "")
        layer_rows.setdefault((r["method"], r["seed"], r["numerics"]), []).append(r)
    n = 0
    for m in methods:
        for run in sorted(glob.glob(os.path.join(runs_root, f"{m}-s*.h5"))):
            seed = os.path.basename(run)[len(m) + 2:-3]
            if not seed.isdigit() or not os.path.exists(run + ".done"):
                continue
            row, lrows = summarize_run(run, m, seed)
            k = key(row)
            for lr in lrows:
                lr["numerics"] = k[2]
            runs[k], layer_rows[k] = row, lrows
            n += 1
    if n == 0:
        print(f"report: no finished run file of {model}/{scale} in {runs_root}: summaries "
              f"unchanged")
        return
    order = {m: i for i, m in enumerate(methods)}
    keys = sorted((k for k in runs if k[0] in order), key=lambda k: (order[k[0]], int(k[1]), k[2]))
    write_tsv(runs_path, RUN_COLS, [runs[k] for k in keys])
    write_tsv(layers_path, LAYER_COLS, [r for k in keys for r in layer_rows.get(k, [])])
    print(f"report: {n} run files of {model}/{scale} summarised into {runs_path} and {layers_path}")


def load_methods(model, scale):
    rows = read_tsv(os.path.join(out_dir(model, scale), "runs.tsv"))
    by = {}
    for r in rows:
        by.setdefault(r["method"], []).append(r)
    return {m: Method(m, by.get(m, [])) for m in methods_of(model)}


def first_step_reaching(m, target):
    steps = []
    for r in m.ok:
        for e in r["evals"].split(","):
            if not e:
                continue
            step, val = e.split(":")
            if fnum(val) is not None and float(val) >= target:
                steps.append(int(step))
                break
    return statistics.fmean(steps) if steps else None


# ---- the table ----

def table(model, scale, quiet=False):
    od = out_dir(model, scale)
    if not os.path.exists(os.path.join(od, "runs.tsv")):
        die(f"no summaries in {od} (run `experiments/report.py summarize {model} {scale}` first)")
    methods = load_methods(model, scale)
    if not any(m.rows for m in methods.values()):
        print(f"report: no summarised run of {model}/{scale}: table left as it is")
        return []
    metric = METRIC.get(model, "metric")
    papers = {}
    with open(os.path.join(ROOT, "experiments", "papers.tsv")) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            p = line.rstrip("\n").split("\t")
            if p[0] == model:
                papers[p[1]] = (p[2], p[3])
    fp32 = methods.get("fp32")
    target = fp32.mean("metric") - 1.0 if fp32 and fp32.mean("metric") is not None else None
    runs = [r for m in methods.values() for r in m.rows]
    hosts = sorted({r.get("host", "-") for r in runs if r.get("host", "-") not in ("-", "")})
    commits = sorted({r.get("git_commit", "-") for r in runs})
    data = export_dataset(model, scale)
    md = [f"# {model}: results at scale `{scale}`", ""]
    md.append(f"Dataset: {data}. Metric: {metric} (percent, final evaluation). Every column with "
              "seeds is the mean ± the sample std over the seeds that did not diverge (ratios: "
              "pooled over them, ± the std of each seed's own); \"diverged\" counts runs stopped "
              "because the loss or gradients stayed non-finite. Steps to target: mean first "
              "evaluation step reaching fp32 mean - 1 point" +
              (f" ({target:.2f})" if target is not None else "") +
              ". Underflow: nonzero activation gradients flushed to zero by their FP16/BF16 "
              "storage (fp32: by what FP16 would have done), pooled over layers, statistics "
              "steps and seeds. Lost updates: nonzero optimizer updates that left the stored "
              "weight unchanged (FP32 masters, or the 16-bit weights without them). samples/s: "
              "median training throughput of each run (runs on different host kinds differ). "
              "Operand dy flushed: in the modes that quantize the "
              "GEMM operands as they are read (fp8, fixed16), nonzero output gradients their cast "
              "flushed to zero (the underflow column then still counts FP16's); operands "
              "saturated: nonzero values of all three operands (inputs, weights, gradients) the "
              "cast clamped to the format's largest finite value (runs summarised before this "
              "column: —). table.csv holds the same numbers with the units in the column names "
              "(`_pct`: percent, `_frac`: a fraction of 1). " +
              PAPER_NOTE.get(model, ""))
    md.append("")
    md.append(f"Runs: {len(runs)} from commits {', '.join(commits)}; host: "
              f"{'; '.join(hosts) if hosts else 'not recorded'}; summaries in `runs.tsv` and "
              "`layers.tsv` beside this file.")
    md.append("")
    md.append(f"| method | precision | scaling | runs | diverged | {metric} | eval loss | "
              "underflow % | operand dy flushed % | operands saturated % | lost updates % | "
              "skipped steps | samples/s | steps to target | paper |")
    md.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")

    def spread(v, sd, fmt, scale=1.0):
        if v is None:
            return "—"
        return f"{scale * v:{fmt}}" + (f" ± {scale * sd:{fmt}}" if sd is not None else "")

    def num(v, fmt):
        return "" if v is None else f"{v:{fmt}}"

    csv_rows = []
    for name, m in methods.items():
        if not m.rows:
            continue
        r0 = m.rows[0]
        mean, sd = m.mean("metric"), m.sd("metric")
        el, el_sd = m.mean("eval_loss"), m.sd("eval_loss")
        uf, uf_sd = m.ratio("act_flushed", "act_nonzero"), m.ratio_sd("act_flushed", "act_nonzero")
        dy = m.ratio("operand_dy_flushed", "operand_dy_nonzero")
        dy_sd = m.ratio_sd("operand_dy_flushed", "operand_dy_nonzero")
        sat = m.ratio("operand_saturated", "operand_nonzero")
        sat_sd = m.ratio_sd("operand_saturated", "operand_nonzero")
        lost, lost_sd = m.lost(), m.lost_sd()
        stt = first_step_reaching(m, target) if target is not None else None
        sk, sk_sd = m.mean("skipped"), m.sd("skipped")
        sps, sps_sd = m.mean("samples_per_s"), m.sd("samples_per_s")
        pv, ps = papers.get(name, ("", ""))
        md.append(f"| {name} | {r0['precision']} | {r0['scaling']} | {len(m.rows)} | {m.diverged} | "
                  f"{spread(mean, sd, '.2f')} | {spread(el, el_sd, '.4f')} | "
                  f"{spread(uf, uf_sd, '.3f', 100)} | {spread(dy, dy_sd, '.3f', 100)} | "
                  f"{spread(sat, sat_sd, '.3f', 100)} | {spread(lost, lost_sd, '.2f', 100)} | "
                  f"{spread(sk, sk_sd, '.1f')} | {spread(sps, sps_sd, '.1f')} | "
                  f"{'—' if stt is None else f'{stt:.0f}'} | {pv + ' (' + ps + ')' if pv else '—'} |")
        csv_rows.append({"model": model, "scale": scale, "method": name,
                         "precision": r0["precision"], "scaling": r0["scaling"],
                         "runs": len(m.rows), "diverged": m.diverged, "metric": metric,
                         "metric_mean_pct": num(mean, ".4f"), "metric_std_pct": num(sd, ".4f"),
                         "eval_loss_mean": num(el, ".4f"), "eval_loss_std": num(el_sd, ".4f"),
                         "underflow_frac": num(uf, ".6g"), "underflow_std_frac": num(uf_sd, ".6g"),
                         "operand_dy_flushed_frac": num(dy, ".6g"),
                         "operand_dy_flushed_std_frac": num(dy_sd, ".6g"),
                         "operands_saturated_frac": num(sat, ".6g"),
                         "operands_saturated_std_frac": num(sat_sd, ".6g"),
                         "lost_updates_frac": num(lost, ".6g"),
                         "lost_updates_std_frac": num(lost_sd, ".6g"),
                         "skipped_steps_mean": num(sk, ".1f"), "skipped_steps_std": num(sk_sd, ".1f"),
                         "samples_per_s_mean": num(sps, ".1f"), "samples_per_s_std": num(sps_sd, ".1f"),
                         "steps_to_target": "" if stt is None else f"{stt:.0f}",
                         "target_pct": "" if target is None else f"{target:.2f}",
                         "paper_value": pv, "paper_setting": ps})
    with open(os.path.join(od, "table.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(csv_rows[0]) if csv_rows else ["model"],
                           lineterminator="\n")
        w.writeheader()
        w.writerows(csv_rows)
    claims = claims_section(model, scale, methods, read_tsv(os.path.join(od, "layers.tsv")), od,
                            ROOT)
    write_claims(claims, od)
    if claims:
        md += ["", "## Claims", "",
               "Each claim of the papers as a test on the runs above (experiments/claims/"
               f"{model}.tsv; the rules in experiments/claims/README.md): d is a - b, signed so "
               "that d > 0 means a is better, with its 90% interval, paired over seeds where both "
               "runs share a numerics path and initial weights (else Welch); the margin delta is "
               "the paper's, fixed in advance; seeds needed: at 80% power, at the observed spread.",
               "", "| id | claim | paper | ours | d [90% interval] | delta (source) | pairs | "
               "seeds needed | verdict | why |", "|---|---|---|---|---|---|---|---|---|---|"]
        for c in claims:
            iv = f"{c['d']} [{c['ci_lo']}, {c['ci_hi']}]" if c["ci_lo"] else (c["d"] or "—")
            md.append(f"| {c['id']} | {c['claim']} ({c['paper']} {c['place']}) | "
                      f"{c['paper_value']} | {c['ours']} | {iv} | {c['delta']} "
                      f"({c['delta_source']}) | {c['pairs'] or '—'} | "
                      f"{c['seeds_needed'] or '—'} | **{c['verdict']}** | {c['why']} |")
    with open(os.path.join(od, "table.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    if not quiet:
        print(f"report: {od}/table.md, table.csv, claims.csv")
    return claims


def export_dataset(model, scale):
    """The dataset as the runs name it, relative to the project (never a machine's path)."""
    runs_root = os.path.join(os.environ.get("RESULTS", os.path.join(ROOT, "results")), model, scale)
    for run in sorted(glob.glob(os.path.join(runs_root, "*-s*.h5"))):
        rows = export(run, "summary")
        if rows:
            d = rows[0]["dataset"]  # KIND:PATH, a bare path, or a name
            kind, sep, path = d.partition(":") if ":" in d and d[0] != "/" else ("", "", d)
            if path.startswith("/"):
                path = os.path.normpath(path)  # a run from a worktree names its ROOT/../shared
            shared = os.path.normpath(os.path.join(ROOT, "..", "shared"))
            if path == shared or path.startswith(shared + "/"):
                path = "../shared" + path[len(shared):]
            elif path.startswith(ROOT + "/"):
                path = path[len(ROOT) + 1:]
            return kind + sep + path
    prev = os.path.join(out_dir(model, scale), "table.md")
    if os.path.exists(prev):
        with open(prev) as f:
            for line in f:
                if line.startswith("Dataset: "):
                    return line[len("Dataset: "):].split(". Metric:")[0]
    return "(unknown)"


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    cmd = argv[1]
    if cmd in ("summarize", "table"):
        if len(argv) != 4:
            die(f"usage: report.py {cmd} MODEL SCALE")
        if cmd == "summarize":
            summarize(argv[2], argv[3])
        else:
            table(argv[2], argv[3])
        return 0
    if cmd == "claims":
        scale, models = None, []
        i = 2
        while i < len(argv):
            if argv[i] == "--scale" and i + 1 < len(argv):
                scale = argv[i + 1]
                i += 2
            else:
                models.append(argv[i])
                i += 1
        counts = {}
        for model in models or ["resnet50", "bert", "ssd"]:
            for sc in [scale] if scale else committed_scales(model):
                if not os.path.exists(os.path.join(out_dir(model, sc), "runs.tsv")):
                    print(f"{model}/{sc}: no summaries (run make experiment-{model} SCALE={sc})")
                    continue
                for c in table(model, sc, quiet=True):
                    counts[c["verdict"]] = counts.get(c["verdict"], 0) + 1
                    iv = (f"d {c['d']} [{c['ci_lo']}, {c['ci_hi']}]" if c["ci_lo"] else
                          f"d {c['d'] or '—'}")
                    print(f"{model + '/' + sc:13s} {c['id']:16s} {c['verdict']:9s}  {c['claim']}\n"
                          f"{'':31s} {iv}, delta {c['delta']}, pairs {c['pairs'] or '—'}, "
                          f"seeds needed {c['seeds_needed'] or '—'}\n"
                          f"{'':31s} delta from: {c['delta_source']}\n"
                          f"{'':31s} ours: {c['ours']}\n{'':31s} why: {c['why']}")
        print("claims: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())))
        return 0
    die(f"unknown command '{cmd}' (summarize, table, claims; --help)")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
