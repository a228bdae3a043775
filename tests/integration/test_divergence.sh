#!/usr/bin/env bash
# test_divergence.sh — non-finite gradients (issue 9): overflows injected with the testing
# hook train.inject_nonfinite (loss scale x2^100 at the listed steps) are skipped by dynamic and
# adaptive scaling, which then train on (dynamic backs off once per overflow); without a scaler
# that can recover (fp16, scaling = none) train.max_nonfinite consecutive bad steps stop the run
# with exit 3 and the reason in the run file. Needs CIFAR-10: skipped without it.
set -u
root=${MPX_SOURCE_DIR:?}
MPX=${MPX:?MPX must point to the mpx binary}
if [ ! -f "$root/data/cache/cifar-10-batches-bin/test_batch.bin" ] && [ ! -f "$root/../shared/data/cifar10-jpg.tar.gz" ]; then
  echo "CIFAR-10 is not available here: skipped"; exit 77
fi
cfg=$root/experiments/configs/resnet50/smoke
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0 checks=0
check() { checks=$((checks + 1)); if ! eval "$1"; then fails=$((fails + 1)); echo "FAIL: $2"; fi; }
col() { "$MPX" export "$1" "$2" | awk -F'\t' -v c="$3" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == c) k = i; next } { print $k }'; }

for m in fp16_dynamic fp16_adaptive; do
  run=$tmp/$m.h5
  "$MPX" train "$cfg/$m.cfg" train.inject_nonfinite=3,4,5 train.max_nonfinite=3 --out "$run" > "$tmp/$m.log" 2>&1
  rc=$?
  check "[ $rc -eq 0 ]" "$m: exit $rc with injected overflows at steps 3-5 (expected to recover): $(tail -1 "$tmp/$m.log")"
  check "[ \"\$(col $run summary skipped)\" = 3 ]" "$m: skipped $(col "$run" summary skipped), expected exactly the 3 injected steps"
  check "[ \"\$(col $run train skipped | tr -d '\n')\" = 000111000000 ]" "$m: skipped flags per step $(col "$run" train skipped | tr -d '\n'), expected 000111000000"
  check "awk '{ if (\$1 != \$1 + 0 || \$1 == \"nan\" || \$1 == \"inf\") exit 1 }' <<< \"\$(col $run train loss | tail -6)\"" "$m: loss not finite after recovery"
done
# Dynamic: 65536 halves once per overflow, then holds (growth_interval 2000).
check "[ \"\$(col $tmp/fp16_dynamic.h5 train loss_scale | sed -n 7p)\" = 8192 ]" "dynamic: scale after three overflows is $(col "$tmp/fp16_dynamic.h5" train loss_scale | sed -n 7p), expected 8192"

# No recovery possible: fp16 without scaling stops after max_nonfinite consecutive bad steps.
run=$tmp/none.h5
"$MPX" train "$cfg/fp16_none.cfg" train.inject_nonfinite=3,4,5 train.max_nonfinite=3 --out "$run" > "$tmp/none.log" 2>&1
rc=$?
check "[ $rc -eq 3 ]" "fp16_none: exit $rc, expected 3 (diverged)"
check "grep -q 'diverged: 3 consecutive' \"$tmp/none.log\"" "fp16_none: no divergence message: $(tail -1 "$tmp/none.log")"
check "col $run summary stopped | grep -q '^diverged'" "fp16_none: run file does not record the divergence"
check "[ \"\$(col $run summary steps)\" = 6 ]" "fp16_none: stopped after $(col "$run" summary steps) steps, expected 6 (steps 0-5)"
echo "test_divergence.sh: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
