#!/usr/bin/env bash
# figures.sh — regenerate one model's figures from its run files (DESIGN.md §8).
#
#   plots/figures.sh MODEL [SCALE]     (run by make experiment-MODEL and make plots)
#
# Exports TSV from the finished results/MODEL/SCALE/<method>-s0.h5 (a .done beside them; the
# methods of methods.list, then formats.list) with `mpx export` into
# plots/tsv/MODEL/SCALE/ and draws <n>_<name>.png and .svg with gnuplot into
# plots/figures/MODEL/SCALE/ when that scale's reference is committed (results/reference/
# MODEL/SCALE/ exists), else into results/MODEL/SCALE/report/figures/ (ignored by git: a smoke
# run never rewrites the committed figures). FIGDIR overrides.
#   1 act_grad_hist     activation-gradient histogram pooled over layers and statistics
#                       steps, FP32 run, FP16 normal/subnormal/flush regions (MPT Fig. 3)
#   2 weight_grad_hist  the same for weight gradients (MPT Fig. 2b)
#   3 underflow         underflow rate per layer and method, a heatmap (ALS)
#   4 adaptive_scale    per-layer cumulative scale over steps, adaptive run (ALS)
#   5 loss_metric       training loss (trailing mean) and evaluation metric vs step, per method
#   6 dynamic_scale     dynamic loss scale vs step, skipped steps marked
#   7 lost_updates      weight updates lost in storage, over steps and per layer: the
#                       master-weights ablation (MPT §3.1) and the runs with masters beside it
# Figures whose runs are missing are skipped with a note.
set -euo pipefail
model=${1:?usage: figures.sh MODEL [SCALE]}
scale=${2:-small}
root=$(cd "$(dirname "$0")/.." && pwd)
mpx=${MPX:-$root/build/mpx}
runs=${RESULTS:-$root/results}/$model/$scale
tsv=${TSVDIR:-$root/plots/tsv/$model/$scale}
if [ -d "$root/results/reference/$model/$scale" ]; then
  fig=${FIGDIR:-$root/plots/figures/$model/$scale}
else
  fig=${FIGDIR:-${RESULTS:-$root/results}/$model/$scale/report/figures}
fi
gp=$root/plots
command -v gnuplot >/dev/null || { echo "figures: gnuplot not installed (make deps)" >&2; exit 2; }
mkdir -p "$tsv" "$fig"
cd "$root"

run() { echo "$runs/$1-s0.h5"; }
have() { [ -f "$(run "$1")" ] && [ -f "$(run "$1").done" ]; } # finished runs only, as the table
methods=()
lists=("$root/experiments/configs/$model/methods.list")
[ -f "$root/experiments/configs/$model/formats.list" ] && lists+=("$root/experiments/configs/$model/formats.list")
while read -r m; do
  have "$m" && [[ " ${methods[*]} " != *" $m "* ]] && methods+=("$m")
done < <(cat "${lists[@]}" | grep -v '^\s*\(#\|$\)')
[ ${#methods[@]} -gt 0 ] || { echo "figures: no run files in $runs" >&2; exit 2; }
label() { echo "$1"; }

draw() { # draw SCRIPT NAME VAR=VALUE...
  local script=$1 name=$2; shift 2
  local vars="out='$fig/$name'; model='$model'; scale='$scale'"
  for kv in "$@"; do vars="$vars; ${kv%%=*}='${kv#*=}'"; done
  for ext in png svg; do gnuplot -e "$vars; ext='$ext'" "$gp/$script"; done
  echo "figures: $fig/$name.{png,svg}"
}

# 1, 2: pooled histograms of the FP32 run (summed over layers and statistics steps).
if have fp32; then
  "$mpx" export "$(run fp32)" hist --pooled > "$tsv/hist_pooled.tsv"
  for t in act_grad weight_grad; do
    awk -F'\t' -v t=$t 'NR > 1 && $4 == t { c[$5] += $6; tot += $6 }
      END { printf "bin\tcount\tpct\n";
            for (k = -64; k <= 15; k++) printf "%d\t%d\t%.9g\n", k, c[k], tot ? 100 * c[k] / tot : 0;
            printf "zero\t%d\t%.9g\n", c["zero"], tot ? 100 * c["zero"] / tot : 0 }' \
      "$tsv/hist_pooled.tsv" > "$tsv/${t}_hist.tsv"
  done
  "$mpx" export "$(run fp32)" underflow > "$tsv/underflow_fp32.tsv"
  for t in act weight; do
    awk -F'\t' -v t=$t 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
      { nz += $col[t "_nonzero"]; fl += $col[t "_flushed"]; bm += $col[t "_below_min"] }
      END { printf "%.3g\t%.3g\n", nz ? 100 * fl / nz : 0, nz ? 100 * bm / nz : 0 }' \
      "$tsv/underflow_fp32.tsv" > "$tsv/${t}_flush_summary.tsv"
  done
  read -r af ab < "$tsv/act_flush_summary.tsv"
  read -r wf wb < "$tsv/weight_flush_summary.tsv"
  az=$(awk -F'\t' '$1 == "zero" { printf "%.3g", $3 }' "$tsv/act_grad_hist.tsv")
  wz=$(awk -F'\t' '$1 == "zero" { printf "%.3g", $3 }' "$tsv/weight_grad_hist.tsv")
  draw hist.gp 1_act_grad_hist in="$tsv/act_grad_hist.tsv" \
    title="Activation gradients, all layers, FP32 run" \
    subtitle="$az% zeros; FP16 flushes $af% of the nonzero values ($ab% are below 2^{-24})"
  draw hist.gp 2_weight_grad_hist in="$tsv/weight_grad_hist.tsv" \
    title="Weight gradients, all layers, FP32 run" \
    subtitle="$wz% zeros; FP16 flushes $wf% of the nonzero values ($wb% are below 2^{-24})"
else
  echo "figures: no fp32 run: skipping figures 1 and 2"
fi

# 3: underflow rate per layer and method (flushed / nonzero summed over statistics steps), a
# heatmap: one row per method, stages (the layer names' first component) marked.
: > "$tsv/underflow_heat.tsv"
labels=""
j=0
for m in "${methods[@]}"; do
  "$mpx" export "$(run "$m")" underflow > "$tsv/underflow_$m.tsv"
  awk -F'\t' 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
    { k = $col["layer"]; name[k] = $col["name"]; nz[k] += $col["act_nonzero"]; fl[k] += $col["act_flushed"]; if (k > n) n = k }
    END { printf "layer\tname\trate_pct\n"; for (k = 0; k <= n; k++) printf "%d\t%s\t%.9g\n", k, name[k], nz[k] ? 100 * fl[k] / nz[k] : 0 }' \
    "$tsv/underflow_$m.tsv" > "$tsv/underflow_rate_$m.tsv"
  awk -F'\t' -v j=$j 'NR > 1 { printf "%d\t%d\t%s\n", $1, j, ($3 > 0 ? $3 : "NaN") } END { print "" }' \
    "$tsv/underflow_rate_$m.tsv" >> "$tsv/underflow_heat.tsv"
  labels="$labels $(label "$m")"
  j=$((j + 1))
done
stages=$(awk -F'\t' 'NR > 1 { s = $2; sub(/\..*/, "", s)
    if (NR == 2 || s != cur) { if (NR > 2) printf "%s:%d:%d ", cur, a, $1 - 1; cur = s; a = $1 } last = $1 }
  END { printf "%s:%d:%d\n", cur, a, last }' "$tsv/underflow_rate_${methods[0]}.tsv")
draw underflow.gp 3_underflow in="$tsv/underflow_heat.tsv" methods="$labels" stages="$stages"

# 4: per-layer cumulative scale of the adaptive run.
if have fp16_adaptive; then
  "$mpx" export "$(run fp16_adaptive)" scale > "$tsv/scale_adaptive.tsv"
  draw scale_map.gp 4_adaptive_scale in="$tsv/scale_adaptive.tsv"
else
  echo "figures: no fp16_adaptive run: skipping figure 4"
fi

# 5: training loss (a trailing mean over 1/50 of the run: raw losses of ten methods hide each
# other) and evaluation metric per method.
files=""
steps=$("$mpx" export "$(run "${methods[0]}")" train | awk 'END { print NR - 1 }')
window=$(( steps / 50 > 1 ? steps / 50 : 1 ))
for m in "${methods[@]}"; do
  "$mpx" export "$(run "$m")" train > "$tsv/train_$m.tsv"
  "$mpx" export "$(run "$m")" eval > "$tsv/eval_$m.tsv"
  awk -F'\t' -v w="$window" 'NR == 1 { print "step\tloss_mean"; next }
    { i = (NR - 2) % w; if (NR - 2 >= w && ok[i]) { sum -= v[i]; cnt-- }
      ok[i] = ($2 ~ /^-?[0-9.]+([eE][-+]?[0-9]+)?$/); v[i] = $2 + 0; if (ok[i]) { sum += v[i]; cnt++ }
      if (NR - 1 >= w) printf "%d\t%s\n", $1, cnt ? sprintf("%.6g", sum / cnt) : "NaN" }' \
    "$tsv/train_$m.tsv" > "$tsv/train_smooth_$m.tsv"
  files="$files $tsv/train_smooth_$m.tsv|$tsv/eval_$m.tsv|$(label "$m")"
done
draw loss_metric.gp 5_loss_metric files="$files" window="$window"

# 6: the dynamic loss scale.
if have fp16_dynamic; then
  draw dynamic_scale.gp 6_dynamic_scale in="$tsv/train_fp16_dynamic.tsv"
else
  echo "figures: no fp16_dynamic run: skipping figure 6"
fi

# 7: lost updates of the master-weights ablation and of the runs with masters it compares with
# (run files from before these statistics have none: skipped).
files=""
for m in fp16_pure fp16_pure_sr bf16_pure bf16_pure_sr fp16_dynamic bf16 fp32; do
  have "$m" || continue
  "$mpx" export "$(run "$m")" updates > "$tsv/updates_$m.tsv" 2>/dev/null || continue
  awk -F'\t' 'NR > 1 { n[$1] += $5; l[$1] += $5 * $6 } END { printf "step\tlost_pct\n";
      for (s in n) printf "%d\t%.9g\n", s, n[s] ? 100 * l[s] / n[s] : 0 }' "$tsv/updates_$m.tsv" |
    sort -n > "$tsv/lost_steps_$m.tsv"
  awk -F'\t' 'NR > 1 { k = $2; name[k] = $3; n[k] += $5; l[k] += $5 * $6; if (k > top) top = k }
      END { printf "layer\tname\tlost_pct\n";
            for (k = 0; k <= top; k++) printf "%d\t%s\t%.9g\n", k, name[k], n[k] ? 100 * l[k] / n[k] : 0 }' \
    "$tsv/updates_$m.tsv" > "$tsv/lost_layers_$m.tsv"
  files="$files $tsv/lost_steps_$m.tsv|$tsv/lost_layers_$m.tsv|$(label "$m")"
done
if [ -n "$files" ]; then
  draw lost_updates.gp 7_lost_updates files="$files"
else
  echo "figures: no run with lost-update statistics: skipping figure 7"
fi
