#!/usr/bin/env bash
# test_eval.sh — `mpx eval`: a checkpoint evaluated again gives the training's final evaluation
# (loss and metric to the digits printed) in every kind of precision, with FP32 masters (fp32,
# fp16_dynamic, bf16) and without (bf16_pure), ResNet and, with the text corpus, BERT; and
# `--bootstrap N`, the evaluation set's own sampling noise: on a classifier the bootstrap
# spread of top-1 over images must match the binomial standard error sqrt(p (1 - p) / n) (2000
# resamples: the estimate's own relative error is ~1.6%, so 10% is a test that a wrong
# resampling, e.g. of batches or without replacement, fails); the same resamples give the same
# numbers twice; `--units` writes one row per image whose hits give the printed metric; the
# options' errors exit 2 and write nothing.
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
# eval_again LABEL CONFIG OVERRIDES...: train briefly, then mpx eval must repeat the final evaluation.
eval_again() {
    local label=$1 cfg=$2; shift 2
    "$MPX" train "$cfg" "$@" train.steps=4 train.eval_every=0 train.threads=2 --out "$tmp/$label.h5" \
        >"$tmp/$label.log" 2>&1 || { check false "$label: mpx train exited $?"; return; }
    local want got
    want=$("$MPX" export "$tmp/$label.h5" eval | tail -1 | cut -f2,3)
    got=$("$MPX" eval "$tmp/$label.h5" 2>&1 | tail -2 | cut -f2 | paste -s)
    check "python3 -c 'import sys; w=[float(x) for x in \"$want\".split()]; g=[float(x) for x in \"$got\".split()]; sys.exit(not (len(g) == 2 and all(abs(a-b) <= 1e-5 * max(1, abs(a)) for a, b in zip(w, g))))'" \
        "$label: mpx eval gives '$got', the training's final evaluation '$want'"
}
for m in fp32 fp16_dynamic bf16 bf16_pure; do
    eval_again "resnet50-$m" "$root/experiments/configs/resnet50/smoke/$m.cfg" data.dataset=synthetic data.train_subset=0 data.eval_subset=0
done
if [ -f "$root/../shared/data/text-corpus.tar.gz" ]; then
    for m in fp32 fp16_dynamic; do eval_again "bert-$m" "$root/experiments/configs/bert/smoke/$m.cfg"; done
fi
"$MPX" eval "$tmp/r.h5" --bootstrap 2000 --units "$tmp/units.tsv" >"$tmp/a" 2>&1 || { echo "FAIL: mpx eval --bootstrap"; cat "$tmp/a"; exit 1; }
"$MPX" eval "$tmp/r.h5" --bootstrap=2000 >"$tmp/b" 2>&1
get() { awk -F'\t' -v k="$2" '$1 == k {print $2}' "$1"; }
p=$(get "$tmp/a" top1) n=$(get "$tmp/a" units) sd=$(get "$tmp/a" top1_sd)
lo=$(get "$tmp/a" top1_lo) hi=$(get "$tmp/a" top1_hi)
echo "top1 $p over $n images: bootstrap sd $sd, 90% [$lo, $hi]"
check "[ -n \"$n\" ] && [ \"$n\" -ge 50 ]" "units: '$n' (expected the evaluation images)"
check "python3 -c \"import math,sys; p=$p/100; se=100*math.sqrt(p*(1-p)/$n); print('binomial se', round(se,4)); sys.exit(not (se > 0 and abs($sd-se) <= 0.1*se))\"" \
    "bootstrap sd $sd is not the binomial standard error within 10%"
check "python3 -c 'import sys; sys.exit(not ($lo < $p < $hi))'" "90% interval [$lo, $hi] does not hold top1 $p"
check "cmp -s <(grep -v units_file \"$tmp/a\") \"$tmp/b\"" "two bootstraps of the same checkpoint differ"
check "[ \$(tail -n +2 \"$tmp/units.tsv\" | wc -l) -eq \"$n\" ] && python3 -c \"import csv,sys; r=list(csv.DictReader(open('$tmp/units.tsv'),delimiter='\t')); sys.exit(not abs(100*sum(float(x['correct']) for x in r)/len(r) - $p) < 1e-4)\"" \
    "--units: not one row per image, or its hits do not give top1 $p"
"$MPX" eval "$tmp/r.h5" --bootstrap 1 >/dev/null 2>"$tmp/e1"; rc=$?
check "[ $rc -eq 2 ] && [ \$(wc -l < \"$tmp/e1\") -eq 1 ] && grep -q -- '--bootstrap' \"$tmp/e1\"" "--bootstrap 1: exit $rc, $(cat "$tmp/e1")"
"$MPX" eval "$tmp/r.h5" --detections "$tmp/d.tsv" >/dev/null 2>"$tmp/e2"; rc=$?
check "[ $rc -eq 2 ] && [ ! -e \"$tmp/d.tsv\" ] && [ ! -e \"$tmp/d.tsv.tmp\" ] && grep -q 'SSD runs only' \"$tmp/e2\"" \
    "--detections on a classifier: exit $rc, $(cat "$tmp/e2")"
echo "$checks checks, $fails failed"
[ "$fails" -eq 0 ]
