#!/usr/bin/env bash
# figures.sh — regenerate one model's figures from its run files (docs/design.md §8).
#
#   plots/figures.sh MODEL [SCALE]     (run by make experiment-MODEL and make plots)
#
# Each method of methods.list, then master_weights.list and formats.list, is drawn from its seed-0
# run file (results/MODEL/SCALE/<method>-s0.h5 with a .done beside it): `mpx export` TSVs, reduced
# to what the figures draw, in plots/tsv/MODEL/SCALE/<method>/. Runs of one scale are trained on
# several machines, so the reduced TSVs are also the committed figure data: drawing a committed
# scale's figures (results/reference/MODEL/SCALE/ exists, no FIGDIR) saves them in its
# figdata/<method>/, and a method whose run file is not on this machine is drawn from there; failing
# that, the per-layer figure takes its seed-0 rows of the summary's layers.tsv (the same sums).
# Figures go to plots/figures/MODEL/SCALE/ for a committed scale, else to
# results/MODEL/SCALE/report/figures/ (ignored by git: a smoke run never rewrites committed
# figures). FIGDIR, TSVDIR, RESULTS, OUT_DIR (the summary's folder) and FIGDATA (the figure data,
# read and saved there) override.
#   1 act_grad_hist     activation-gradient histogram pooled over layers and statistics
#                       steps, FP32 run, FP16 normal/subnormal/flush regions (MPT Fig. 3)
#   2 weight_grad_hist  the same for weight gradients (MPT Fig. 2b)
#   3 underflow         underflow rate per layer and method, a heatmap (ALS)
#   4 adaptive_scale    per-layer cumulative scale over steps, adaptive run (ALS)
#   5 loss_metric       training loss (trailing mean) and evaluation metric vs step, per method;
#                       one figure per method set (5_loss_metric_master_weights, ..._formats)
#   6 dynamic_scale     dynamic loss scale vs step, skipped steps marked
#   7 lost_updates      weight updates lost in storage, over steps and per layer: the
#                       master-weights ablation (MPT §3.1) and the runs with masters beside it
#   8 whatif            per layer and recipe, what the fp32 run's gradients would lose in FP16,
#                       BF16, FP8 and block formats (log.whatif), at the last statistics step
#   9 fp8_scale         per-layer scale of the E5M2 gradient operand over steps, FP8 delayed
# Figures whose data are missing are skipped with a note. FIGURES="3 9" draws only those (the
# others keep their files): a committed scale's figures redrawn where only some methods' runs
# are on this machine.
set -euo pipefail
model=${1:?usage: figures.sh MODEL [SCALE]}
scale=${2:-small}
root=$(cd "$(dirname "$0")/.." && pwd)
mpx=${MPX:-$root/build/mpx}
runs=${RESULTS:-$root/results}/$model/$scale
tsv=${TSVDIR:-$root/plots/tsv/$model/$scale}
ref=$root/results/reference/$model/$scale
figdata=${FIGDATA:-$ref/figdata}
save=0
[ -n "${FIGDATA:-}" ] && save=1
if [ -d "$ref" ]; then
  fig=${FIGDIR:-$root/plots/figures/$model/$scale}
  [ -z "${FIGDIR:-}" ] && save=1
  summary=${OUT_DIR:-$ref}
else
  fig=${FIGDIR:-${RESULTS:-$root/results}/$model/$scale/report/figures}
  summary=${OUT_DIR:-${RESULTS:-$root/results}/$model/$scale/report}
fi
gp=$root/plots
command -v gnuplot >/dev/null || { echo "figures: gnuplot not installed (make deps)" >&2; exit 2; }
for f in ${FIGURES:-}; do
  case $f in [1-9]) ;; *) echo "figures: FIGURES: '$f' is not a figure number (1-9)" >&2; exit 2 ;; esac
done
want() { [ -z "${FIGURES:-}" ] || [[ " $FIGURES " == *" $1 "* ]]; }
note() { if want "$1"; then echo "figures: $2"; fi; } # note N TEXT: a note about figure N, if drawn
mkdir -p "$tsv" "$fig"
cd "$root"

run() { echo "$runs/$1-s0.h5"; }
have() { [ -f "$(run "$1")" ] && [ -f "$(run "$1").done" ]; } # finished runs only, as the table

# derive METHOD: its run file's exports, reduced to what the figures draw, into $tsv/METHOD/.
derive() {
  local m=$1 r d raw steps window every
  r=$(run "$m"); d=$tsv/$m; raw=$tsv/raw_$m
  rm -rf "$d"; mkdir -p "$d" "$raw"
  # Per layer: flushed / nonzero activation gradients summed over the statistics steps.
  "$mpx" export "$r" underflow > "$raw/underflow.tsv"
  awk -F'\t' 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
    { k = $col["layer"]; name[k] = $col["name"]; nz[k] += $col["act_nonzero"]; fl[k] += $col["act_flushed"]; if (k > n) n = k }
    END { printf "layer\tname\trate_pct\n"; for (k = 0; k <= n; k++) printf "%d\t%s\t%.9g\n", k, name[k], nz[k] ? 100 * fl[k] / nz[k] : 0 }' \
    "$raw/underflow.tsv" > "$d/underflow_rate.tsv"
  # Training loss as a trailing mean over 1/50 of the run (raw losses of ten methods hide each
  # other), kept every window/5 steps; the header names the window.
  "$mpx" export "$r" train > "$raw/train.tsv"
  "$mpx" export "$r" eval > "$d/eval.tsv"
  steps=$(awk 'END { print NR - 1 }' "$raw/train.tsv")
  window=$(( steps / 50 > 1 ? steps / 50 : 1 ))
  every=$(( window / 5 > 1 ? window / 5 : 1 ))
  awk -F'\t' -v w="$window" -v e="$every" -v last="$((steps + 1))" 'NR == 1 { printf "step\tloss_mean_of_%d_steps\n", w; next }
    { i = (NR - 2) % w; if (NR - 2 >= w && ok[i]) { sum -= v[i]; cnt-- }
      ok[i] = ($2 ~ /^-?[0-9.]+([eE][-+]?[0-9]+)?$/); v[i] = $2 + 0; if (ok[i]) { sum += v[i]; cnt++ }
      if (NR - 1 >= w && ((NR - 1 - w) % e == 0 || NR == last))
        printf "%d\t%s\n", $1, cnt ? sprintf("%.6g", sum / cnt) : "NaN" }' \
    "$raw/train.tsv" > "$d/train_smooth.tsv"
  # Lost updates over steps and per layer (run files from before these statistics have none).
  if "$mpx" export "$r" updates > "$raw/updates.tsv" 2>/dev/null; then
    awk -F'\t' 'NR > 1 { n[$1] += $5; l[$1] += $5 * $6 } END { printf "step\tlost_pct\n";
        for (s in n) printf "%d\t%.9g\n", s, n[s] ? 100 * l[s] / n[s] : 0 }' "$raw/updates.tsv" |
      sort -n > "$d/lost_steps.tsv"
    awk -F'\t' 'NR > 1 { k = $2; name[k] = $3; n[k] += $5; l[k] += $5 * $6; if (k > top) top = k }
        END { printf "layer\tname\tlost_pct\n";
              for (k = 0; k <= top; k++) printf "%d\t%s\t%.9g\n", k, name[k], n[k] ? 100 * l[k] / n[k] : 0 }' \
      "$raw/updates.tsv" > "$d/lost_layers.tsv"
  fi
  # What-if counts (log.whatif; the fp32 method records them) at the last statistics step:
  # recipe, layer, name, the underflow rate; a run without them has all-zero rows.
  "$mpx" export "$r" whatif > "$raw/whatif.tsv"
  awk -F'\t' 'NR > 1 && $6 > 0 { found = 1 } END { exit !found }' "$raw/whatif.tsv" &&
    awk -F'\t' 'NR == FNR { if (FNR > 1) last = $1; next }
      FNR == 1 { print "step\trecipe\tlayer\tname\trate_pct"; next }
      $1 == last { printf "%d\t%s\t%d\t%s\t%.9g\n", $1, $5, $2, $3, ($6 > 0 ? 100 * $7 / $6 : 0) }' \
      "$raw/whatif.tsv" "$raw/whatif.tsv" > "$d/whatif.tsv"
  case $m in
  fp8_delayed) # The delayed scale of the incoming-gradient operand (E5M2) of each layer that
    # has one (a GEMM), numbered in forward order: step, GEMM index, name, scale.
    "$mpx" export "$r" operands > "$raw/operands.tsv"
    awk -F'\t' 'NR == FNR { if (FNR > 1 && $5 == "dy" && $6 > 0 && !($2 in k)) k[$2] = 1; next }
      FNR == 1 { n = 0; for (l = 0; l <= 100000; l++) if (l in k) k[l] = n++; print "step\tgemm\tname\tscale"; next }
      $5 == "dy" && ($2 in k) { print $1 "\t" k[$2] "\t" $3 "\t" $9 }' \
      "$raw/operands.tsv" "$raw/operands.tsv" > "$d/operand_scale.tsv" ;;
  fp32) # Pooled histograms and what an FP16 cast would flush.
    "$mpx" export "$r" hist --pooled > "$raw/hist_pooled.tsv"
    for t in act_grad weight_grad; do
      awk -F'\t' -v t=$t 'NR > 1 && $4 == t { c[$5] += $6; tot += $6 }
        END { printf "bin\tcount\tpct\n";
              for (k = -64; k <= 15; k++) printf "%d\t%d\t%.9g\n", k, c[k], tot ? 100 * c[k] / tot : 0;
              printf "zero\t%d\t%.9g\n", c["zero"], tot ? 100 * c["zero"] / tot : 0 }' \
        "$raw/hist_pooled.tsv" > "$d/${t}_hist.tsv"
    done
    for t in act weight; do
      awk -F'\t' -v t=$t 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; print "flushed_pct\tbelow_min_pct"; next }
        { nz += $col[t "_nonzero"]; fl += $col[t "_flushed"]; bm += $col[t "_below_min"] }
        END { printf "%.3g\t%.3g\n", nz ? 100 * fl / nz : 0, nz ? 100 * bm / nz : 0 }' \
        "$raw/underflow.tsv" > "$d/${t}_flush_summary.tsv"
    done ;;
  fp16_adaptive) # The cumulative per-layer scale: step, layer, name, scale.
    "$mpx" export "$r" scale | cut -f1-4 > "$d/scale.tsv" ;;
  fp16_dynamic) # The loss scale's change points and the skipped steps (drawn as steps).
    awk -F'\t' 'NR == 1 { print; next }
      { p = NR == 2 || $4 != prev || $5 > 0; if (p) print; lastp = p; row = $0; prev = $4 }
      END { if (NR > 1 && !lastp) print row }' "$raw/train.tsv" | cut -f1-5 > "$d/dynamic.tsv" ;;
  esac
}

# from_layers METHOD: the per-layer rate from the summary's seed-0 rows, where no run file or
# saved figure data has it (runs summarised before the figure data was kept).
from_layers() {
  local m=$1 d=$tsv/$1
  [ -f "$summary/layers.tsv" ] || return 1
  awk -F'\t' -v m="$m" 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
    $col["method"] == m && $col["seed"] == 0 { k = $col["layer"]; name[k] = $col["name"]
      nz[k] = $col["act_nonzero"]; fl[k] = $col["act_flushed"]; if (k > n) n = k; found = 1 }
    END { if (!found) exit 1; printf "layer\tname\trate_pct\n"
          for (k = 0; k <= n; k++) printf "%d\t%s\t%.9g\n", k, name[k], nz[k] ? 100 * fl[k] / nz[k] : 0 }' \
    "$summary/layers.tsv" > "$tsv/from_layers_$m.tsv" || { rm -f "$tsv/from_layers_$m.tsv"; return 1; }
  rm -rf "$d"; mkdir -p "$d"
  mv "$tsv/from_layers_$m.tsv" "$d/underflow_rate.tsv"
}

methods=()
lists=("$root/experiments/configs/$model/methods.list")
for l in master_weights formats; do
  [ ! -f "$root/experiments/configs/$model/$l.list" ] || lists+=("$root/experiments/configs/$model/$l.list")
done
while read -r m; do
  [[ " ${methods[*]} " == *" $m "* ]] && continue
  if have "$m"; then
    derive "$m"
    if [ "$save" = 1 ]; then rm -rf "$figdata/$m"; mkdir -p "$figdata"; cp -r "$tsv/$m" "$figdata/$m"; fi
  elif [ -f "$figdata/$m/underflow_rate.tsv" ]; then
    rm -rf "$tsv/$m"; cp -r "$figdata/$m" "$tsv/$m"
    echo "figures: $m from the committed figure data (its run file is not here)"
  elif from_layers "$m"; then
    echo "figures: $m in the per-layer figure only, from $summary/layers.tsv (no run file, no figure data)"
  else
    continue
  fi
  methods+=("$m")
done < <(cat "${lists[@]}" | grep -v '^\s*\(#\|$\)')
[ ${#methods[@]} -gt 0 ] || { echo "figures: no run files in $runs" >&2; exit 2; }
label() { echo "$1"; }
# colour METHOD: its style in common.gp, the same in every figure of the model (its place in
# the model's method lists; 24 colours).
colour() { local i; for i in "${!methods[@]}"; do [ "${methods[$i]}" = "$1" ] && { echo $((i % 24 + 1)); return; }; done; echo 8; }
# seeds METHOD: the committed runs' held-out metric per evaluation step over every seed of the
# method (runs.tsv `evals`, "step:metric,..."), as step mean lo hi n, into $tsv/METHOD/seeds.tsv;
# fails where the summary has fewer than two seeds of it.
seeds() {
  local m=$1
  [ -f "$summary/runs.tsv" ] || return 1
  awk -F'\t' -v m="$m" 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
    $col["method"] == m && $col["evals"] != "" { runs++; k = split($col["evals"], e, ",")
      for (i = 1; i <= k; i++) { split(e[i], p, ":"); s = p[1] + 0; v = p[2]
        if (v !~ /^-?[0-9.]+([eE][-+]?[0-9]+)?$/) continue
        if (!(s in n)) { lo[s] = v + 0; hi[s] = v + 0 }
        n[s]++; sum[s] += v; if (v + 0 < lo[s]) lo[s] = v + 0; if (v + 0 > hi[s]) hi[s] = v + 0 } }
    END { if (runs < 2) exit 1; print "step\tmean\tlo\thi\tn"
          for (s in n) printf "%d\t%.6g\t%.6g\t%.6g\t%d\n", s, sum[s] / n[s], lo[s], hi[s], n[s] }' \
    "$summary/runs.tsv" | { read -r h && { echo "$h"; sort -n; }; } > "$tsv/$m/seeds.tsv" &&
    [ -s "$tsv/$m/seeds.tsv" ] || { rm -f "$tsv/$m/seeds.tsv"; return 1; }
}
case $model in
  resnet50) metric="top-1 accuracy (%)" ;;
  bert) metric="masked-token accuracy (%)" ;;
  ssd) metric="mAP@0.5 (%)" ;;
  *) metric="metric" ;;
esac

draw() { # draw SCRIPT NAME VAR=VALUE...: figure NAME (its number first) unless FIGURES leaves it out
  local script=$1 name=$2; shift 2
  want "${name%%_*}" || return 0
  # Double-quoted for gnuplot: a value's \n is a line break (values hold no double quotes).
  local vars="out='$fig/$name'; model='$model'; scale='$scale'; tag='$model $scale, seed 0'"
  for kv in "$@"; do vars="$vars; ${kv%%=*}=\"${kv#*=}\""; done
  for ext in png svg; do gnuplot -e "$vars; ext='$ext'" "$gp/$script"; done
  echo "figures: $fig/$name.{png,svg}"
}

# 1, 2: pooled histograms of the FP32 run (summed over layers and statistics steps).
if [ -f "$tsv/fp32/act_grad_hist.tsv" ]; then
  read -r af ab < <(tail -n 1 "$tsv/fp32/act_flush_summary.tsv")
  read -r wf wb < <(tail -n 1 "$tsv/fp32/weight_flush_summary.tsv")
  az=$(awk -F'\t' '$1 == "zero" { printf "%.3g", $3 }' "$tsv/fp32/act_grad_hist.tsv")
  wz=$(awk -F'\t' '$1 == "zero" { printf "%.3g", $3 }' "$tsv/fp32/weight_grad_hist.tsv")
  draw hist.gp 1_act_grad_hist in="$tsv/fp32/act_grad_hist.tsv" \
    title="Activation gradients, all layers, FP32 run" \
    subtitle="$az% zeros; FP16 flushes $af% of the nonzero values ($ab% are below 2^{-24})"
  draw hist.gp 2_weight_grad_hist in="$tsv/fp32/weight_grad_hist.tsv" \
    title="Weight gradients, all layers, FP32 run" \
    subtitle="$wz% zeros; FP16 flushes $wf% of the nonzero values ($wb% are below 2^{-24})"
else
  note 1 "no fp32 run: skipping figure 1"; note 2 "no fp32 run: skipping figure 2"
fi

# 3: underflow rate per layer and method (flushed / nonzero summed over statistics steps), a
# heatmap: one row per method, stages (the layer names' first component) marked.
: > "$tsv/underflow_heat.tsv"
labels=""
j=0
for m in "${methods[@]}"; do
  awk -F'\t' -v j=$j 'NR > 1 { printf "%d\t%d\t%s\n", $1, j, ($3 > 0 ? $3 : "NaN") } END { print "" }' \
    "$tsv/$m/underflow_rate.tsv" >> "$tsv/underflow_heat.tsv"
  labels="$labels $(label "$m")"
  j=$((j + 1))
done
stages=$(awk -F'\t' 'NR > 1 { s = $2; sub(/\..*/, "", s)
    if (NR == 2 || s != cur) { if (NR > 2) printf "%s:%d:%d ", cur, a, $1 - 1; cur = s; a = $1 } last = $1 }
  END { printf "%s:%d:%d\n", cur, a, last }' "$tsv/${methods[0]}/underflow_rate.tsv")
draw underflow.gp 3_underflow in="$tsv/underflow_heat.tsv" methods="$labels" stages="$stages"

# 4: per-layer cumulative scale of the adaptive run.
if [ -f "$tsv/fp16_adaptive/scale.tsv" ]; then
  draw scale_map.gp 4_adaptive_scale in="$tsv/fp16_adaptive/scale.tsv"
else
  note 4 "no fp16_adaptive run: skipping figure 4"
fi

# 5: training loss (trailing mean, seed 0) and evaluation metric (every seed) per method, a figure per method set so
# that each stays readable: 5_loss_metric (methods.list), 5_loss_metric_<set> for the others
# (master_weights, formats), each with fp32 beside its methods.
for l in "${lists[@]}"; do
  sname=$(basename "$l" .list) name=5_loss_metric
  [ "$sname" = methods ] || name=5_loss_metric_$sname
  files="" window="" bands="" colours=""
  for m in $({ [ "$sname" = methods ] || echo fp32; grep -v '^\s*\(#\|$\)' "$l"; } | awk '!seen[$0]++'); do
    [[ " ${methods[*]} " == *" $m "* ]] || continue
    [ -f "$tsv/$m/train_smooth.tsv" ] || { note 5 "$m has no training curve here: not in $name"; continue; }
    [ -n "$window" ] || window=$(head -n 1 "$tsv/$m/train_smooth.tsv" | sed 's/.*loss_mean_of_\([0-9]*\)_steps.*/\1/')
    if seeds "$m"; then
      bands="$bands $tsv/$m/seeds.tsv"
      lab="$(label "$m")($(awk -F'\t' 'NR > 1 && $5 > k { k = $5 } END { print k }' "$tsv/$m/seeds.tsv"))"
    else
      bands="$bands -" lab="$(label "$m")(1)"
    fi
    files="$files $tsv/$m/train_smooth.tsv|$tsv/$m/eval.tsv|$lab" colours="$colours $(colour "$m")"
  done
  if [ -n "$files" ]; then
    draw loss_metric.gp "$name" files="$files" bands="$bands" colours="$colours" window="$window" \
      metric="$metric" tag="$model $scale: training loss of seed 0, held-out metric of every seed (how many in parentheses)"
  else
    note 5 "no training curves of $sname: skipping $name"
  fi
done

# 6: the dynamic loss scale.
if [ -f "$tsv/fp16_dynamic/dynamic.tsv" ]; then
  draw dynamic_scale.gp 6_dynamic_scale in="$tsv/fp16_dynamic/dynamic.tsv"
else
  note 6 "no fp16_dynamic run: skipping figure 6"
fi

# 7: lost updates of the master-weights ablation and of the runs with masters it compares with.
files="" colours=""
for m in fp16_pure fp16_pure_sr bf16_pure bf16_pure_sr bf16_pure_sr_update fp16_dynamic bf16 fp32; do
  [[ " ${methods[*]} " == *" $m "* ]] && [ -f "$tsv/$m/lost_steps.tsv" ] || continue
  files="$files $tsv/$m/lost_steps.tsv|$tsv/$m/lost_layers.tsv|$(label "$m")" colours="$colours $(colour "$m")"
done
if [ -n "$files" ]; then
  draw lost_updates.gp 7_lost_updates files="$files" colours="$colours"
else
  note 7 "no run with lost-update statistics: skipping figure 7"
fi

# 8: what-if matrix of the first method with what-if counts (the fp32 run): per layer, the
# share of nonzero activation gradients each recipe would flush, at the last statistics step.
wi=""
for m in "${methods[@]}"; do [ -f "$tsv/$m/whatif.tsv" ] && { wi=$m; break; }; done
if [ -n "$wi" ]; then
  recipes=$(awk -F'\t' 'NR > 1 && !seen[$2]++ { printf "%s ", $2 }' "$tsv/$wi/whatif.tsv")
  step=$(awk -F'\t' 'NR == 2 { print $1 }' "$tsv/$wi/whatif.tsv")
  : > "$tsv/whatif_heat.tsv"
  j=0
  for rc in $recipes; do
    awk -F'\t' -v r="$rc" -v j=$j 'NR > 1 && $2 == r { printf "%d\t%d\t%s\n", $3, j, ($5 > 0 ? $5 : "NaN") } END { print "" }' \
      "$tsv/$wi/whatif.tsv" >> "$tsv/whatif_heat.tsv"
    j=$((j + 1))
  done
  draw underflow.gp 8_whatif in="$tsv/whatif_heat.tsv" methods="$recipes" stages="$stages" \
    heading="What the $wi run's activation gradients would lose in other formats, at step $step: the share of nonzero\nvalues flushed to zero, per layer and recipe (grey: none). fp16, bf16, e5m2: unscaled casts; *_current:\na per-tensor scale from the amax; mxfp8_e5m2, mxfp4: 32-element blocks, E8M0 scales; nvfp4: 16-element blocks"
else
  note 8 "no run with what-if counts (log.whatif): skipping figure 8"
fi

# 9: FP8 delayed scaling's per-tensor scale of each layer's incoming gradient over training.
if [ -f "$tsv/fp8_delayed/operand_scale.tsv" ]; then
  draw scale_map.gp 9_fp8_scale in="$tsv/fp8_delayed/operand_scale.tsv" \
    heading="FP8 delayed scaling (Transformer Engine's rule): log2 of the scale of each\nGEMM's incoming-gradient operand (E5M2) over training" \
    cbl="log2 scale" ylab="GEMM layer (forward order)"
else
  note 9 "no fp8_delayed run: skipping figure 9"
fi
