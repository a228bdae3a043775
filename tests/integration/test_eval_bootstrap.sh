#!/usr/bin/env bash
# test_eval_bootstrap.sh — `mpx eval --bootstrap N`, the evaluation set's own sampling noise:
# on a classifier the bootstrap spread of top-1 over images must match the binomial standard
# error sqrt(p (1 - p) / n) (2000 resamples: the estimate's own relative error is ~1.6%, so
# 10% is a test that a wrong resampling, e.g. of batches or without replacement, fails); the
# same resamples give the same numbers twice; the options' errors exit 2 and write nothing.
set -u
root=${MPX_SOURCE_DIR:?}
MPX=${MPX:?MPX must point to the mpx binary}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_WAIT_POLICY=passive
checks=0 fails=0
check() { checks=$((checks + 1)); if ! eval "$1"; then fails=$((fails + 1)); echo "FAIL: $2"; fi; }
"$MPX" train "$root/experiments/configs/resnet50/smoke/fp32.cfg" data.dataset=synthetic \
    data.train_subset=0 data.eval_subset=0 train.steps=4 train.eval_every=0 train.threads=2 \
    --out "$tmp/r.h5" >"$tmp/train.log" 2>&1 || { echo "FAIL: mpx train exited $?"; tail -3 "$tmp/train.log"; exit 1; }
"$MPX" eval "$tmp/r.h5" --bootstrap 2000 >"$tmp/a" 2>&1 || { echo "FAIL: mpx eval --bootstrap"; cat "$tmp/a"; exit 1; }
"$MPX" eval "$tmp/r.h5" --bootstrap=2000 >"$tmp/b" 2>&1
get() { awk -F'\t' -v k="$2" '$1 == k {print $2}' "$1"; }
p=$(get "$tmp/a" top1) n=$(get "$tmp/a" units) sd=$(get "$tmp/a" top1_sd)
lo=$(get "$tmp/a" top1_lo) hi=$(get "$tmp/a" top1_hi)
echo "top1 $p over $n images: bootstrap sd $sd, 90% [$lo, $hi]"
check "[ -n \"$n\" ] && [ \"$n\" -ge 50 ]" "units: '$n' (expected the evaluation images)"
check "python3 -c \"import math,sys; p=$p/100; se=100*math.sqrt(p*(1-p)/$n); print('binomial se', round(se,4)); sys.exit(not (se > 0 and abs($sd-se) <= 0.1*se))\"" \
    "bootstrap sd $sd is not the binomial standard error within 10%"
check "python3 -c 'import sys; sys.exit(not ($lo < $p < $hi))'" "90% interval [$lo, $hi] does not hold top1 $p"
check "cmp -s \"$tmp/a\" \"$tmp/b\"" "two bootstraps of the same checkpoint differ"
"$MPX" eval "$tmp/r.h5" --bootstrap 1 >/dev/null 2>"$tmp/e1"; rc=$?
check "[ $rc -eq 2 ] && [ \$(wc -l < \"$tmp/e1\") -eq 1 ] && grep -q -- '--bootstrap' \"$tmp/e1\"" "--bootstrap 1: exit $rc, $(cat "$tmp/e1")"
"$MPX" eval "$tmp/r.h5" --detections "$tmp/d.tsv" >/dev/null 2>"$tmp/e2"; rc=$?
check "[ $rc -eq 2 ] && [ ! -e \"$tmp/d.tsv\" ] && [ ! -e \"$tmp/d.tsv.tmp\" ] && grep -q 'SSD runs only' \"$tmp/e2\"" \
    "--detections on a classifier: exit $rc, $(cat "$tmp/e2")"
echo "$checks checks, $fails failed"
[ "$fails" -eq 0 ]
