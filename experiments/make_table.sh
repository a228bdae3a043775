#!/usr/bin/env bash
# make_table.sh — the results table of one model at one scale, from its run files.
#
#   experiments/make_table.sh MODEL [SCALE]
#
# Writes results/reference/MODEL.md and MODEL.csv (OUT_DIR overrides the folder): per method,
# the final evaluation metric as mean +- sample std over seeds, diverged runs, skipped steps,
# median samples/s, steps to reach (fp32 mean - 1 point), and the papers' number beside ours.
set -euo pipefail
model=${1:?usage: make_table.sh MODEL [SCALE]}
scale=${2:-small}
root=$(cd "$(dirname "$0")/.." && pwd)
mpx=${MPX:-$root/build/mpx}
runs=${RESULTS:-$root/results}/$model/$scale
outdir=${OUT_DIR:-$root/results/reference}
mkdir -p "$outdir"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# One summary row per run, tagged with its method; the eval series for steps-to-target.
: > "$tmp/rows.tsv"
while read -r m; do
  for run in "$runs/$m"-s*.h5; do
    [ -f "$run" ] || continue
    "$mpx" export "$run" summary | awk -F'\t' -v m="$m" 'NR == 2 { print m "\t" $0 }' >> "$tmp/rows.tsv"
    "$mpx" export "$run" eval | awk -F'\t' -v m="$m" -v r="$run" 'NR > 1 { print m "\t" r "\t" $1 "\t" $3 }' >> "$tmp/evals.tsv"
  done
done < <(grep -v '^\s*\(#\|$\)' "$root/experiments/configs/$model/methods.list")
[ -s "$tmp/rows.tsv" ] || { echo "make_table: no run files in $runs" >&2; exit 2; }
touch "$tmp/evals.tsv"
case "$model" in
  bert*) metric=mlm_acc
         papernote="Neither paper trained BERT; DeepLearningExamples report BERT pretraining loss 1.2437 (AMP, dynamic scaling) vs 1.2465 (FP32) at full scale." ;;
  ssd*)  metric=mAP
         papernote="Paper numbers are VOC2007 test mAP of full SSD (MPT: SSD300 with VGG; ALS: SSD512), a different setting from ours: they are there for the claim (FP16 without scaling diverges, scale 8 fixes it), not the digits." ;;
  *)     metric=top1
         papernote="Paper numbers are ImageNet (224 px, full ResNet-50), a different setting from ours: they are there for the claim, not the digits." ;;
esac

# rows.tsv: method model dataset precision scaling seed steps final_loss eval_step eval_loss
#           metric skipped samples_per_s wall_s stopped
awk -F'\t' -v OFS='\t' -v model="$model" -v scale="$scale" -v papers="$root/experiments/papers.tsv" \
    -v evals="$tmp/evals.tsv" -v csv="$outdir/$model.csv" -v md="$outdir/$model.md" -v metric="$metric" -v papernote="$papernote" '
function fmt(x) { return x == "" ? "—" : x }
BEGIN {
  while ((getline line < papers) > 0) {
    if (line ~ /^#/) continue
    split(line, p, "\t"); if (p[1] == model) { pv[p[2]] = p[3]; ps[p[2]] = p[4] }
  }
}
{
  m = $1; if (!(m in seen)) { order[++nm] = m; seen[m] = 1 }
  n[m]++; prec[m] = $4; sc[m] = $5; data = $3; steps[m] = $7
  if ($15 != "-") { div[m]++; next }
  k[m]++; v = $11 + 0; sum[m] += v; sq[m] += v * v; el[m] += $10; tl[m] += $8
  skip[m] += $12; sps[m] += $13
}
END {
  tgt = ""
  if (k["fp32"] > 0) tgt = sum["fp32"] / k["fp32"] - 1.0
  while ((getline line < evals) > 0) {
    split(line, e, "\t")
    if (tgt != "" && e[4] + 0 >= tgt && !((e[2]) in hit)) { hit[e[2]] = e[3]; hs[e[1]] += e[3]; hn[e[1]]++ }
  }
  print "model,scale,method,precision,scaling,runs,diverged,metric,metric_mean,metric_std,eval_loss_mean,train_loss_mean,skipped_mean,samples_per_s,steps_to_target,target,paper_value,paper_setting" > csv
  print "# " model ": results at scale `" scale "`\n" > md
  print "Dataset: " data ". Metric: " metric " (percent, final evaluation). Mean ± sample std over the seeds that did not diverge; " \
        "\"diverged\" counts runs stopped because the loss or gradients stayed non-finite. " \
        "Steps to target: mean first evaluation step reaching fp32 mean - 1 point" (tgt == "" ? "" : sprintf(" (%.2f)", tgt)) ". " \
        "samples/s: median training throughput (2-core CPU unless stated). " papernote "\n" > md
  print "| method | precision | scaling | runs | diverged | " metric " | eval loss | skipped steps | samples/s | steps to target | paper |" > md
  print "|---|---|---|---|---|---|---|---|---|---|---|" > md
  for (i = 1; i <= nm; i++) {
    m = order[i]; c = k[m] + 0
    mean = c ? sum[m] / c : ""; sd = ""
    if (c > 1) { var = (sq[m] - c * mean * mean) / (c - 1); sd = sqrt(var > 0 ? var : 0) }
    meanf = c ? sprintf("%.2f", mean) : ""; sdf = sd == "" ? "" : sprintf("%.2f", sd)
    elf = c ? sprintf("%.4f", el[m] / c) : ""; tlf = c ? sprintf("%.4f", tl[m] / c) : ""
    skf = c ? sprintf("%.1f", skip[m] / c) : ""; spf = c ? sprintf("%.1f", sps[m] / c) : ""
    stt = hn[m] ? sprintf("%d", hs[m] / hn[m]) : ""
    has_paper = m in pv; pval = has_paper ? pv[m] : ""; pset = has_paper ? ps[m] : ""
    printf "%s,%s,%s,%s,%s,%d,%d,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,\"%s\"\n", model, scale, m, prec[m], sc[m], n[m], div[m] + 0, metric, meanf, sdf, elf, tlf, skf, spf, stt, (tgt == "" ? "" : sprintf("%.2f", tgt)), pval, pset > csv
    cell = c ? meanf (sdf != "" ? " ± " sdf : "") : "—"
    printf "| %s | %s | %s | %d | %d | %s | %s | %s | %s | %s | %s |\n", m, prec[m], sc[m], n[m], div[m] + 0, cell, fmt(elf), fmt(skf), fmt(spf), fmt(stt), (has_paper ? pval " (" pset ")" : "—") > md
  }
}' "$tmp/rows.tsv"
echo "make_table: $outdir/$model.md, $outdir/$model.csv"
