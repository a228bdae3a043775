#!/usr/bin/env bash
# test_experiment_smoke.sh — `make experiment-resnet50 SCALE=smoke` end to end (DESIGN.md §10
# rung 7, the CI path): every method's run file, the TSV exports, the six figures (PNG and SVG)
# and the results table, written into a temporary folder instead of results/ and plots/.
# Needs CIFAR-10 (../shared/data/cifar10-jpg.tar.gz or data/cache): skipped, saying so, without.
set -u
root=${MPX_SOURCE_DIR:?}
MPX=${MPX:?MPX must point to the mpx binary}
if [ ! -f "$root/data/cache/cifar-10-batches-bin/test_batch.bin" ] && \
   [ ! -f "$root/../shared/data/cifar10-jpg.tar.gz" ]; then
  echo "CIFAR-10 is not available here (neither data/cache nor ../shared/data): skipped"
  exit 77
fi
command -v gnuplot >/dev/null || { echo "gnuplot not installed: skipped"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export MPX RESULTS=$tmp/results FIGDIR=$tmp/figures TSVDIR=$tmp/tsv OUT_DIR=$tmp/reference
bash "$root/experiments/run_experiment.sh" resnet50 smoke 1 > "$tmp/log" 2>&1
rc=$?
fails=0 checks=0
check() { checks=$((checks + 1)); if ! eval "$1"; then fails=$((fails + 1)); echo "FAIL: $2"; fi; }
check "[ $rc -eq 0 ]" "run_experiment exited $rc: $(tail -5 "$tmp/log")"
while read -r m; do
  check "[ -f \"$RESULTS/resnet50/smoke/$m-s0.h5.done\" ]" "no finished run for $m"
  check "[ \$(\"$MPX\" export \"$RESULTS/resnet50/smoke/$m-s0.h5\" eval | tail -n +2 | wc -l) -ge 1 ]" "$m: no evaluation rows"
done < <(grep -v '^\s*\(#\|$\)' "$root/experiments/configs/resnet50/methods.list")
for f in 1_act_grad_hist 2_weight_grad_hist 3_underflow 4_adaptive_scale 5_loss_metric 6_dynamic_scale; do
  for ext in png svg; do check "[ -s \"$FIGDIR/$f.$ext\" ]" "missing figure $f.$ext"; done
done
check "[ -s \"$TSVDIR/act_grad_hist.tsv\" ] && [ -s \"$TSVDIR/underflow_rate_fp16_none.tsv\" ]" "missing TSV exports"
check "grep -q '^| fp16_adaptive | fp16 | adaptive | 1 |' \"$OUT_DIR/resnet50.md\"" "table lacks the adaptive row"
check "[ \$(wc -l < \"$OUT_DIR/resnet50.csv\") -eq 11 ]" "csv should have a header and 10 methods"
# Re-running does not redo finished runs.
bash "$root/experiments/run_experiment.sh" resnet50 smoke 1 > "$tmp/log2" 2>&1
check "[ \$(grep -c 'done already' \"$tmp/log2\") -eq 10 ]" "finished runs were redone"
echo "test_experiment_smoke.sh: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
