#!/usr/bin/env bash
# test_experiment_smoke.sh — `make experiment-{resnet50,bert,ssd} SCALE=smoke` end to end
# (docs/design.md §10 rung 7, the CI path): every method's run file, the run summaries, the TSV
# exports, the figures (PNG and SVG), the adaptive-scaling overhead, the results table
# with its claims section, all under the run files' folder (a temporary RESULTS): a scale
# without a committed reference writes into results/MODEL/SCALE/report/, and the committed
# references (results/reference/, plots/figures/) stay byte for byte as they were. A model
# whose data is missing (CIFAR-10 for resnet50 and ssd, the text corpus for bert, in
# ../shared/data or data/cache) is skipped, saying so; all missing: exit 77.
# ResNet-50 runs its methods and the formats ones with fewer, smaller steps than its smoke
# configs (EXTRA: 6 steps of 16, 64 evaluation images): the pipeline is what is checked here, and
# make test takes less time; `make regress` trains the smoke configs as they are.
set -u
root=${MPX_SOURCE_DIR:?}
MPX=${MPX:?MPX must point to the mpx binary}
command -v gnuplot >/dev/null || { echo "gnuplot not installed: skipped"; exit 77; }
have_cifar() { [ -f "$root/data/cache/cifar-10-batches-bin/test_batch.bin" ] || [ -f "$root/../shared/data/cifar10-jpg.tar.gz" ]; }
have_text() { [ -f "$root/../shared/data/text-corpus.tar.gz" ]; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export MPX RESULTS=$tmp/results
unset OUT_DIR FIGDIR
fails=0 checks=0 ran=0
check() { checks=$((checks + 1)); if ! eval "$1"; then fails=$((fails + 1)); echo "FAIL: $2"; fi; }
committed() { (cd "$root" && find results/reference plots/figures -type f -print0 | sort -z | xargs -0 sha256sum); }
committed > "$tmp/committed.before"
for model in resnet50 bert ssd; do
  case $model in
    bert) have_text || { echo "$model: text corpus not available: skipped"; continue; } ;;
    *) have_cifar || { echo "$model: CIFAR-10 not available: skipped"; continue; } ;;
  esac
  ran=$((ran + 1))
  export TSVDIR=$tmp/tsv/$model
  if [ "$model" = resnet50 ]; then
    export EXTRA="train.steps=6 train.batch_size=16 train.eval_every=3 data.eval_subset=64"
  else
    unset EXTRA
  fi
  report=$RESULTS/$model/smoke/report
  FIGDIR=$report/figures
  bash "$root/experiments/run_experiment.sh" $model smoke 1 > "$tmp/$model.log" 2>&1
  rc=$?
  check "[ $rc -eq 0 ]" "$model: run_experiment exited $rc: $(tail -5 "$tmp/$model.log")"
  mapfile -t methods < <(grep -v '^\s*\(#\|$\)' "$root/experiments/configs/$model/methods.list")
  ndefault=${#methods[@]}
  # The default set is methods.list alone; the master-weights ablation is its own set.
  check "grep -q \"^$model/smoke: ${#methods[@]} method(s) x 1 seed(s): ${methods[*]};\" \"$tmp/$model.log\"" \
    "$model: the default set should be methods.list: $(grep -m1 'method(s) x' "$tmp/$model.log")"
  mwlist=$root/experiments/configs/$model/master_weights.list
  if [ -f "$mwlist" ]; then
    cp "$RESULTS/$model/smoke/estimate.json" "$tmp/$model.estimate.json"
    mapfile -t mw < <(grep -v '^\s*\(#\|$\)' "$mwlist")
    METHODS=master_weights bash "$root/experiments/run_experiment.sh" $model smoke 1 > "$tmp/$model.mw.log" 2>&1
    rc=$?
    check "[ $rc -eq 0 ] && grep -q \"^$model/smoke: ${#mw[@]} method(s) x 1 seed(s): ${mw[*]};\" \"$tmp/$model.mw.log\"" \
      "$model: METHODS=master_weights exited $rc: $(tail -3 "$tmp/$model.mw.log")"
    methods+=("${mw[@]}")
  fi
  # Without PARALLEL: one run per core, no more than the runs or the memory (2 GiB a run) allow.
  want=$(nproc); mem=$(awk '/^MemAvailable:/ { print int($2 / 1048576 / 2) }' /proc/meminfo)
  [ "$want" -le "$ndefault" ] || want=$ndefault
  [ "$want" -le "$mem" ] || want=$mem
  [ "$want" -ge 1 ] || want=1
  check "grep -q \"run(s) to do, $want at a time (one per core by default\" \"$tmp/$model.log\"" \
    "$model: the default PARALLEL should be $want: $(grep -m1 'at a time' "$tmp/$model.log")"
  # The estimate comes before the first run, then progress with an ETA. It benches each step
  # cost once: methods differing only in loss scaling share a step time, stochastic rounding
  # (a different precision policy) has its own.
  if [ "$model" = resnet50 ]; then
    # Where the runs train decides the default: the paper configs' GPU runs go one at a time.
    check "[ \"\$(EXTRA= python3 \"$root/experiments/estimate.py\" device \"$root/experiments/configs/$model/paper/fp32.cfg\")\" = cuda ] && [ \"\$(EXTRA=train.device=cpu python3 \"$root/experiments/estimate.py\" device \"$root/experiments/configs/$model/paper/fp32.cfg\")\" = cpu ] && [ \"\$(EXTRA= python3 \"$root/experiments/estimate.py\" device \"$root/experiments/configs/$model/smoke/fp32.cfg\")\" = cpu ]" \
      "$model: estimate.py device should say cuda for the paper configs (cpu with EXTRA=train.device=cpu) and cpu for smoke"
    check "python3 -c 'import json,sys; s=json.load(open(sys.argv[1]))[\"method_step_s\"]; sys.exit(not (s[\"fp16_none\"] == s[\"fp16_fixed8\"] == s[\"fp16_adaptive\"]))' \"$tmp/$model.estimate.json\"" \
      "$model: estimate.json should share fp16's step time among the scalings"
    check "python3 -c 'import json,sys; s=json.load(open(sys.argv[1]))[\"method_step_s\"]; sys.exit(not (s[\"fp16_pure\"] != s[\"fp16_pure_sr\"]))' \"$RESULTS/$model/smoke/estimate.json\"" \
      "$model: the master-weights estimate should bench fp16_pure_sr apart from fp16_pure"
  fi
  check "[ \"\$(grep -m1 -n '^estimate on this machine: ' \"$tmp/$model.log\" | cut -d: -f1)\" -lt \"\$(grep -m1 -n '^\\[1/' \"$tmp/$model.log\" | cut -d: -f1)\" ] && grep -q '^progress: 1 of .*, ETA ' \"$tmp/$model.log\"" \
    "$model: no estimate before the runs or no ETA: $(grep -m1 '^estimate' "$tmp/$model.log")"
  for m in "${methods[@]}"; do
    check "[ -f \"$RESULTS/$model/smoke/$m-s0.h5.done\" ]" "$model: no finished run for $m"
    check "[ \$(\"$MPX\" export \"$RESULTS/$model/smoke/$m-s0.h5\" eval | tail -n +2 | wc -l) -ge 1 ]" "$model $m: no evaluation rows"
  done
  for f in 1_act_grad_hist 2_weight_grad_hist 3_underflow 4_adaptive_scale 5_loss_metric 6_dynamic_scale 7_lost_updates 8_whatif; do
    for ext in png svg; do check "[ -s \"$FIGDIR/$f.$ext\" ]" "$model: missing figure $f.$ext"; done
  done
  # Figure 5 is drawn per method set: the master-weights ablation has its own.
  [ ! -f "$mwlist" ] || check "[ -s \"$FIGDIR/5_loss_metric_master_weights.svg\" ]" "$model: no figure 5 of the master-weights set"
  check "[ -s \"$TSVDIR/fp32/act_grad_hist.tsv\" ] && [ -s \"$TSVDIR/fp16_none/underflow_rate.tsv\" ]" "$model: missing TSV exports"
  check "grep -q '^| fp16_adaptive | fp16 | adaptive | 1 |' \"$report/table.md\"" "$model: table lacks the adaptive row"
  check "[ \$(wc -l < \"$report/table.csv\") -eq $((${#methods[@]} + 1)) ]" "$model: csv should have a header and ${#methods[@]} methods"
  check "[ \$(wc -l < \"$report/runs.tsv\") -eq $((${#methods[@]} + 1)) ]" "$model: runs.tsv should have a header and a row per method"
  check "grep -q '^## Claims' \"$report/table.md\" && [ \$(wc -l < \"$report/claims.csv\") -eq \$(grep -vc '^#' \"$root/experiments/claims/$model.tsv\") ]" "$model: table lacks its claims or claims.csv a claim"
  check "grep -q 'not shown.*fewer than 2 comparable runs' \"$report/table.md\"" "$model: one seed must leave the seed-based claims not shown"
  check "python3 -c 'import json,sys; json.load(open(sys.argv[1]))[\"overheads\"][\"adaptive_update_every_100_parts_ci95\"]' \"$report/overheads.json\"" "$model: no adaptive overhead measured"
  check "[ \$(grep -c 'update_lost' \"$report/runs.tsv\") -eq 1 ] && awk -F'\\t' 'NR > 1 && \$19 > 0 { n++ } END { exit !(n > 0) }' \"$report/runs.tsv\"" "$model: no run with lost-update statistics in runs.tsv"
  # Re-running does not redo finished runs; METHODS=all is methods.list and the ablation.
  METHODS=all bash "$root/experiments/run_experiment.sh" $model smoke 1 > "$tmp/$model.log2" 2>&1
  check "[ \$(grep -c 'done already' \"$tmp/$model.log2\") -eq ${#methods[@]} ]" "$model: finished runs were redone"
  if [ "$model" = resnet50 ]; then
    # Two runs at a time, a subset of the methods: both finish, each logs to <run>.log; an
    # unknown method is refused before anything runs. ESTIMATE=0 skips the estimate's benches.
    rm -f "$RESULTS/$model/smoke/"{fp32,fp16_none}-s0.{h5,h5.done,ckpt}
    ESTIMATE=0 PARALLEL=2 METHODS="fp32 fp16_none" bash "$root/experiments/run_experiment.sh" $model smoke 1 \
      > "$tmp/$model.log3" 2>&1
    rc=$?
    check "[ $rc -eq 0 ]" "$model: PARALLEL=2 run_experiment exited $rc: $(tail -5 "$tmp/$model.log3")"
    check "[ \$(grep -c ': finished' \"$tmp/$model.log3\") -eq 2 ]" "$model: PARALLEL=2 did not finish both runs"
    check "! grep -q '^estimate' \"$tmp/$model.log3\"" "$model: ESTIMATE=0 still estimated"
    for m in fp32 fp16_none; do
      check "[ -f \"$RESULTS/$model/smoke/$m-s0.h5.done\" ] && grep -q '^step' \"$RESULTS/$model/smoke/$m-s0.log\"" \
        "$model: PARALLEL=2 run $m has no .done or no log"
    done
    METHODS="fp32 nosuch" bash "$root/experiments/run_experiment.sh" $model smoke 1 > "$tmp/$model.log4" 2>&1
    rc=$?
    check "[ $rc -eq 2 ] && grep -q \"METHODS: 'nosuch'\" \"$tmp/$model.log4\"" "$model: unknown METHODS entry gave exit $rc"
    # Figure data: drawn from the run files, the reduced TSVs are kept in FIGDATA; with the run
    # files gone the figures come out the same from them, and the per-layer figure takes a
    # method without figure data (fp16_none here) from layers.tsv's seed-0 rows.
    fd=$tmp/figdata
    FIGDATA=$fd FIGDIR=$tmp/fig_runs TSVDIR=$tmp/tsv_runs bash "$root/plots/figures.sh" $model smoke \
      > "$tmp/figures1.log" 2>&1
    check "[ -s \"$fd/fp16_adaptive/scale.tsv\" ] && [ -s \"$fd/fp32/act_grad_hist.tsv\" ] && [ -s \"$fd/fp16_dynamic/dynamic.tsv\" ]" \
      "$model: figure data not saved: $(tail -3 "$tmp/figures1.log")"
    mkdir -p "$tmp/away"
    mv "$RESULTS/$model/smoke/"*-s0.h5.done "$tmp/away/"
    rm -rf "$fd/fp16_none"
    FIGDATA=$fd FIGDIR=$tmp/fig_saved TSVDIR=$tmp/tsv_saved bash "$root/plots/figures.sh" $model smoke \
      > "$tmp/figures2.log" 2>&1
    for f in 1_act_grad_hist 3_underflow 4_adaptive_scale 6_dynamic_scale 7_lost_updates; do
      check "cmp -s \"$tmp/fig_runs/$f.svg\" \"$tmp/fig_saved/$f.svg\"" "$model: figure $f from the figure data differs from the one from the run files"
    done
    check "grep -q 'fp16_none in the per-layer figure only' \"$tmp/figures2.log\" && [ -s \"$tmp/fig_saved/5_loss_metric.svg\" ]" \
      "$model: fp16_none not taken from layers.tsv: $(tail -3 "$tmp/figures2.log")"
    # FIGURES draws only the figures named; the others are neither drawn nor removed.
    mkdir -p "$tmp/fig_some"; echo keep > "$tmp/fig_some/5_loss_metric.svg"
    FIGURES="3 4" FIGDATA=$fd FIGDIR=$tmp/fig_some TSVDIR=$tmp/tsv_some bash "$root/plots/figures.sh" $model smoke \
      > "$tmp/figures3.log" 2>&1
    check "cmp -s \"$tmp/fig_runs/3_underflow.svg\" \"$tmp/fig_some/3_underflow.svg\" && [ -s \"$tmp/fig_some/4_adaptive_scale.png\" ] && [ \$(ls \"$tmp/fig_some\" | wc -l) -eq 5 ] && grep -qx keep \"$tmp/fig_some/5_loss_metric.svg\"" \
      "$model: FIGURES=\"3 4\" drew $(ls "$tmp/fig_some" | tr '\n' ' ')"
    FIGURES="3 x" bash "$root/plots/figures.sh" $model smoke > "$tmp/figures4.log" 2>&1
    rc=$?
    check "[ $rc -eq 2 ] && grep -q \"FIGURES: 'x'\" \"$tmp/figures4.log\"" "$model: FIGURES=\"3 x\" gave exit $rc"
    mv "$tmp/away/"*.done "$RESULTS/$model/smoke/"
  fi
  if [ "$model" != ssd ]; then
    # The formats experiment (make experiment-formats, one model at a time here): the methods
    # of formats.list the set above lacks run; the table gains their rows and the formats
    # claims; the quantizing modes' operand casts reach runs.tsv.
    ESTIMATE=0 METHODS=formats bash "$root/experiments/run_experiment.sh" $model smoke 1 > "$tmp/$model.log5" 2>&1
    rc=$?
    check "[ $rc -eq 0 ]" "$model: the formats experiment exited $rc: $(tail -5 "$tmp/$model.log5")"
    for m in $(grep -v '^\s*\(#\|$\)' "$root/experiments/configs/$model/formats.list"); do
      check "[ -f \"$RESULTS/$model/smoke/$m-s0.h5.done\" ] && grep -q '^| $m | ' \"$report/table.md\"" "$model: formats method $m has no run or no table row"
    done
    check "[ -s \"$FIGDIR/9_fp8_scale.svg\" ] && [ -s \"$FIGDIR/5_loss_metric_formats.svg\" ]" "$model: no figure of the FP8 delayed scales or no figure 5 of the formats set"
    for c in FIXED16-RNE FIXED16-SR FP8-HYBRID MXFP8; do
      check "grep -q ',$c,' \"$report/claims.csv\"" "$model: claim $c not evaluated"
    done
    cat > "$tmp/operands.py" <<'PY'
import csv, sys
rows = {r["method"]: r for r in csv.DictReader(open(sys.argv[1]), delimiter="\t")}
sys.exit(0 if int(rows["fixed16_rne"]["operand_dy_nonzero"] or 0) > 0 and
         int(rows["fp8_delayed"]["operand_dy_nonzero"] or 0) > 0 else 1)
PY
    check "python3 \"$tmp/operands.py\" \"$report/runs.tsv\"" "$model: runs.tsv lacks the operand casts of the quantizing modes"
  fi
done
[ "$ran" -eq 0 ] && { echo "no dataset available: skipped"; exit 77; }
committed > "$tmp/committed.after"
check "cmp -s \"$tmp/committed.before\" \"$tmp/committed.after\"" "the smoke experiments changed committed references: $(diff "$tmp/committed.before" "$tmp/committed.after" | head -3)"
echo "test_experiment_smoke.sh: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
