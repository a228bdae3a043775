#!/usr/bin/env bash
# test_train.sh — `mpx train` end to end on a tiny synthetic-data ResNet:
#   every precision mode and scaling method writes a run file with the docs/design.md §6 layout
#   (checked with h5dump -H), `mpx export underflow` has one row per (stats step, layer);
#   resuming from a checkpoint reproduces an uninterrupted run bit for bit, evaluations included;
#   resuming a finished run trains nothing and leaves its file as it was;
#   a run killed with SIGKILL leaves a file h5dump reads, holding its flushed rows, and resumes.
set -u
MPX=${MPX:?MPX must point to the mpx binary}
command -v h5dump >/dev/null || { echo "h5dump not installed (hdf5-tools): skipped"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0 checks=0
check() { checks=$((checks + 1)); if ! eval "$1"; then fails=$((fails + 1)); echo "FAIL: $2"; fi; }

cat > "$tmp/base.cfg" <<'CFG'
[model]
arch = resnet20
width = 0.25
[data]
dataset = synthetic
resolution = 8
[train]
steps = 6
batch_size = 4
lr = 0.05
lr_schedule = constant
eval_every = 3
eval_batches = 2
checkpoint_every = 3
threads = 2
[log]
stats_every = 2
progress = never
CFG

datasets="/train/step /train/loss /train/lr /train/loss_scale /train/skipped /train/samples_per_s
 /train/wall_s /eval/step /eval/loss /eval/metric /layers/name /layers/kind /layers/params
 /layers/fan_in /stats/step /stats/act_grad_hist /stats/weight_grad_hist /stats/act_grad_nonzero
 /stats/act_grad_flushed /stats/act_grad_below_min /stats/act_grad_subnormal /stats/act_grad_overflow
 /stats/act_grad_nonfinite /stats/weight_grad_nonzero /stats/weight_grad_flushed
 /stats/weight_grad_below_min /stats/weight_grad_subnormal /stats/weight_grad_overflow
 /stats/weight_grad_nonfinite /stats/scale /stats/layer_scale /stats/g_mean /stats/g_std /stats/g_min
 /stats/g_max /stats/w_mean /stats/w_std /stats/w_min /stats/w_max /stats/operand_x_flushed
 /stats/operand_w_overflow /stats/operand_dy_nonzero /stats/operand_dy_scale
 /stats/operand_dy_scale_lo /stats/operand_x_scale_hi"
attrs="mpx_version git_commit created_utc config model dataset precision scaling seed device threads"

for variant in "fp32 none" "fp16 none" "fp16 fixed precision.loss_scale=1024" "fp16 dynamic" \
               "fp16 adaptive" "fp16 adaptive-quantile" "bf16 none" "fp8 none" \
               "fp8 none precision.fp8_recipe=current" "fp8 none precision.fp8_recipe=mxfp8" \
               "fp8 adaptive precision.fp8_recipe=als" "fixed16 none" \
               "fixed16 none precision.rounding=stochastic"; do
  set -- $variant
  run="$tmp/$1-$2${3:+-${3##*=}}.h5"
  "$MPX" train "$tmp/base.cfg" precision.mode=$1 precision.scaling=$2 ${3:-} --out "$run" >"$tmp/log" 2>&1
  check "[ $? -eq 0 ]" "$variant: mpx train failed: $(tail -2 "$tmp/log")"
  h5dump -H "$run" > "$tmp/layout" 2>&1
  check "[ $? -eq 0 ]" "$variant: h5dump -H failed"
  for d in $datasets; do
    name=${d##*/}
    check "grep -q \"DATASET \\\"$name\\\"\" \"$tmp/layout\"" "$variant: no dataset $d"
  done
  for a in $attrs; do check "grep -q \"ATTRIBUTE \\\"$a\\\"\" \"$tmp/layout\"" "$variant: no attribute $a"; done
  check "grep -A3 'DATASET \"act_grad_hist\"' \"$tmp/layout\" | grep -q 'H5S_UNLIMITED'" "$variant: hist not extendable"
  layers=$("$MPX" export "$run" layers | tail -n +2 | wc -l)
  rows=$("$MPX" export "$run" underflow | tail -n +2 | wc -l)
  check "[ $rows -eq $((3 * layers)) ]" "$variant: underflow has $rows rows, want 3 stats steps x $layers layers"
  check "[ \$(\"$MPX\" export \"$run\" train | tail -n +2 | wc -l) -eq 6 ]" "$variant: train rows"
  check "\"$MPX\" eval \"$run\" > \"$tmp/eval\" 2>&1 && grep -q '^top1' \"$tmp/eval\"" "$variant: mpx eval"
done

# The operand casts of fp8 and fixed16 runs (mpx export RUN operands): a row per statistics
# step, layer and operand; the gradients' casts saw nonzero values; at Q(16, 14) under
# round-to-nearest some gradients flush to zero; the two roundings train differently.
for run in "$tmp/fp8-none.h5" "$tmp/fixed16-none.h5" "$tmp/fixed16-none-stochastic.h5"; do
  layers=$("$MPX" export "$run" layers | tail -n +2 | wc -l)
  "$MPX" export "$run" operands > "$tmp/ops.tsv" 2>&1
  check "[ \$? -eq 0 ]" "$run: mpx export operands failed: $(head -1 "$tmp/ops.tsv")"
  rows=$(tail -n +2 "$tmp/ops.tsv" | wc -l)
  check "[ $rows -eq $((3 * 3 * layers)) ]" "$run: operands has $rows rows, want 3 steps x $layers layers x 3"
  dy_nz=$(awk -F'\t' '$5 == "dy" { s += $6 } END { print s + 0 }' "$tmp/ops.tsv")
  check "[ $dy_nz -gt 0 ]" "$run: no nonzero output gradient was cast"
done
# The range of the scales (scale_lo, scale_hi, scale_spread = log2(hi / lo)): one scale per
# tensor under delayed scaling (lo = scale = hi); MXFP8's block scales around their midpoint,
# spread over more than one binade somewhere.
awk -F'\t' 'NR > 1 && !($10 == $9 && $11 == $9 && $12 == 0) { bad++ } END { exit bad > 0 }' \
  <("$MPX" export "$tmp/fp8-none.h5" operands)
check "[ \$? -eq 0 ]" "fp8 delayed: a per-tensor scale with a range (scale_lo, scale_hi differ from scale)"
"$MPX" export "$tmp/fp8-none-mxfp8.h5" operands > "$tmp/mx.tsv"
awk -F'\t' 'NR > 1 && $6 > 0 { if (!($10 <= $9 && $9 <= $11)) bad++; if ($12 > 1) wide++ }
             END { exit !(bad == 0 && wide > 0) }' "$tmp/mx.tsv"
check "[ \$? -eq 0 ]" "fp8 mxfp8: block scales not around their midpoint, or never spread: $(sed -n 2p "$tmp/mx.tsv")"
flushed() { "$MPX" export "$1" operands | awk -F'\t' '$5 == "dy" { s += $7 } END { print s + 0 }'; }
f_rne=$(flushed "$tmp/fixed16-none.h5"); f_sr=$(flushed "$tmp/fixed16-none-stochastic.h5")
check "[ $f_rne -gt 0 ]" "fixed16: no gradient flushed under RNE at Q(16, 14) ($f_sr stochastically)"
"$MPX" export "$tmp/fixed16-none.h5" train > "$tmp/train_rne.tsv"
"$MPX" export "$tmp/fixed16-none-stochastic.h5" train > "$tmp/train_sr.tsv"
check "! cmp -s \"$tmp/train_rne.tsv\" \"$tmp/train_sr.tsv\"" "fixed16: stochastic rounding trained exactly as round-to-nearest"

# What-if counts (log.whatif): FP16's, counted beside an fp16 run's own casts of the same
# gradients, equal that run's act counts in every layer and statistics step; every recipe has a
# row per layer and step.
"$MPX" train "$tmp/base.cfg" precision.mode=fp16 log.whatif=all --out "$tmp/whatif.h5" >/dev/null 2>&1
check "[ $? -eq 0 ]" "log.whatif run failed"
"$MPX" export "$tmp/whatif.h5" whatif | awk -F'\t' 'NR > 1 && $5 == "fp16" { print $1, $2, $6, $7 }' > "$tmp/wi.txt"
"$MPX" export "$tmp/whatif.h5" underflow | awk -F'\t' 'NR > 1 { print $1, $2, $5, $6 }' > "$tmp/uf.txt"
check "[ -s \"$tmp/wi.txt\" ] && cmp -s \"$tmp/wi.txt\" \"$tmp/uf.txt\"" "what-if fp16 counts differ from the run's own: $(diff "$tmp/wi.txt" "$tmp/uf.txt" | head -3)"
check "[ \$(\"$MPX\" export \"$tmp/whatif.h5\" whatif | tail -n +2 | wc -l) -eq \$((8 * \$(wc -l < \"$tmp/uf.txt\"))) ]" "what-if: not eight recipes per layer and step"
"$MPX" export "$tmp/whatif.h5" train | cut -f1-5 > "$tmp/wi_train.tsv"
"$MPX" export "$tmp/fp16-none.h5" train | cut -f1-5 > "$tmp/plain_train.tsv"
check "[ -s \"$tmp/wi_train.tsv\" ] && cmp -s \"$tmp/wi_train.tsv\" \"$tmp/plain_train.tsv\"" "what-if statistics changed training (losses, scales or skips differ from the run without them)"
check "! \"$MPX\" train \"$tmp/base.cfg\" log.whatif=fp12 --out \"$tmp/bad.h5\" 2>&1 | grep -qv 'log.whatif'" "an unknown what-if recipe is not refused by name"

# Resume: 3 steps, then resume to 6, equals 6 uninterrupted (losses, and the final evaluation).
"$MPX" train "$tmp/base.cfg" precision.mode=fp16 precision.scaling=adaptive precision.update_every=2 \
  --out "$tmp/full.h5" >/dev/null 2>&1
"$MPX" train "$tmp/base.cfg" precision.mode=fp16 precision.scaling=adaptive precision.update_every=2 \
  train.steps=3 --out "$tmp/part.h5" >/dev/null 2>&1
"$MPX" train "$tmp/base.cfg" precision.mode=fp16 precision.scaling=adaptive precision.update_every=2 \
  --resume "$tmp/part.ckpt" >/dev/null 2>&1
check "[ $? -eq 0 ]" "resume failed"
"$MPX" export "$tmp/full.h5" train | cut -f1,2,4,5 > "$tmp/full.tsv"
"$MPX" export "$tmp/part.h5" train | cut -f1,2,4,5 > "$tmp/part.tsv"
check "cmp -s \"$tmp/full.tsv\" \"$tmp/part.tsv\"" "resumed losses differ from the uninterrupted run: $(diff "$tmp/full.tsv" "$tmp/part.tsv" | head -4)"
check "[ \"\$(\"$MPX\" eval \"$tmp/full.h5\" | tail -2)\" = \"\$(\"$MPX\" eval \"$tmp/part.h5\" | tail -2)\" ]" "resumed weights differ (eval)"
# ...continuing the run's clock (wall_s never goes back)...
check "\"$MPX\" export \"$tmp/part.h5\" train | awk -F'\t' 'NR > 2 && \$7 < prev { bad = 1 } { prev = \$7 } END { exit bad }'" "the resumed run's wall_s went back: $("$MPX" export "$tmp/part.h5" train | cut -f1,7 | tr '\n' ' ')"
# ...with every evaluation, the one at the checkpoint's step included.
"$MPX" export "$tmp/full.h5" eval > "$tmp/full-eval.tsv"
"$MPX" export "$tmp/part.h5" eval > "$tmp/part-eval.tsv"
check "cmp -s \"$tmp/full-eval.tsv\" \"$tmp/part-eval.tsv\"" "resumed evaluations differ: $(diff "$tmp/full-eval.tsv" "$tmp/part-eval.tsv" | head -4)"
# Resuming a finished run (its checkpoint at train.steps) trains nothing and keeps the file.
out=$("$MPX" train "$tmp/base.cfg" precision.mode=fp16 precision.scaling=adaptive precision.update_every=2 \
  --resume "$tmp/part.ckpt" 2>/dev/null)
check "[ $? -eq 0 ]" "resuming a finished run failed"
check "echo \"\$out\" | grep -q 'already complete'" "resuming a finished run: no 'already complete' in: $out"
"$MPX" export "$tmp/part.h5" train | cut -f1,2,4,5 > "$tmp/again.tsv"
"$MPX" export "$tmp/part.h5" eval > "$tmp/again-eval.tsv"
check "cmp -s \"$tmp/part.tsv\" \"$tmp/again.tsv\" && cmp -s \"$tmp/part-eval.tsv\" \"$tmp/again-eval.tsv\"" "resuming a finished run changed its run file"
# A checkpoint beyond train.steps is refused (exit 2, naming it), the file untouched.
err=$("$MPX" train "$tmp/base.cfg" precision.mode=fp16 precision.scaling=adaptive precision.update_every=2 \
  train.steps=4 --resume "$tmp/part.ckpt" 2>&1 >/dev/null)
check "[ $? -eq 2 ]" "resuming past train.steps: want exit 2"
check "echo \"\$err\" | grep -q 'part.ckpt.*step 6.*train.steps is 4'" "resuming past train.steps: message: $err"
"$MPX" export "$tmp/part.h5" train | cut -f1,2,4,5 > "$tmp/again.tsv"
check "cmp -s \"$tmp/part.tsv\" \"$tmp/again.tsv\"" "a refused resume changed the run file"

# SIGKILL mid-run: the file stays readable with its flushed rows; the run resumes.
"$MPX" train "$tmp/base.cfg" train.steps=400 log.stats_every=5 train.eval_every=0 train.checkpoint_every=10 \
  --out "$tmp/killed.h5" >/dev/null 2>&1 &
pid=$!
for i in $(seq 1 200); do
  n=$("$MPX" export "$tmp/killed.h5" train 2>/dev/null | tail -n +2 | wc -l)
  [ "$n" -ge 20 ] && break
  sleep 0.1
done
kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
h5dump -H "$tmp/killed.h5" >/dev/null 2>&1
check "[ $? -eq 0 ]" "killed run: h5dump cannot read the file"
n=$("$MPX" export "$tmp/killed.h5" train | tail -n +2 | wc -l)
check "[ $n -ge 20 ]" "killed run: only $n training rows survived"
# On a busy machine the run may get well past 20 steps before the kill lands: resume to 20
# steps beyond what the file holds (the checkpoint is at or before its last row).
target=$((n + 20))
"$MPX" train "$tmp/base.cfg" train.steps=$target log.stats_every=5 train.eval_every=0 train.checkpoint_every=10 \
  --resume "$tmp/killed.ckpt" >/dev/null 2>&1
check "[ $? -eq 0 ]" "killed run: resume failed"
last=$("$MPX" export "$tmp/killed.h5" train | tail -1 | cut -f1)
check "[ \"$last\" = $((target - 1)) ]" "killed run: resumed run ends at step $last, want $((target - 1))"

echo "test_train.sh: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
