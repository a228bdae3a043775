#!/usr/bin/env bash
# test_preempt.sh — run files under concurrency and preemption, on a tiny synthetic-data ResNet:
#   a second `mpx train` on a run file another process is writing (with --force too) exits 2
#   naming the holder and touches nothing: the first run finishes and its file is complete;
#   SIGTERM mid-run: the step in progress finishes, a checkpoint is written, exit 4, the run file
#   says why (`stopped`); --resume then reproduces the uninterrupted run bit for bit (every
#   step's loss, scale and skip, the evaluations, the final weights through `mpx eval`).
set -u
MPX=${MPX:?MPX must point to the mpx binary}
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT
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
steps = 300
batch_size = 4
lr = 0.05
lr_schedule = constant
eval_every = 100
eval_batches = 2
checkpoint_every = 0
[precision]
mode = fp16
scaling = adaptive
update_every = 7
[log]
stats_every = 10
CFG

# waits until RUN's file holds at least N training rows (or PID ended); 0 when it does
wait_rows() {
  local run=$1 want=$2 pid=$3 n=0
  for _ in $(seq 1 600); do
    n=$("$MPX" export "$run" train 2>/dev/null | tail -n +2 | wc -l)
    [ "$n" -ge "$want" ] && return 0
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}

# Two writers: the second refuses before touching anything.
"$MPX" train "$tmp/base.cfg" --out "$tmp/one.h5" >/dev/null 2>&1 &
pid=$!
wait_rows "$tmp/one.h5" 5 $pid
check "kill -0 $pid 2>/dev/null" "the first run ended before the second writer could be tried"
err=$("$MPX" train "$tmp/base.cfg" --out "$tmp/one.h5" --force 2>&1 >/dev/null)
rc=$?
check "[ $rc -eq 2 ]" "second writer with --force: exit $rc, want 2 ($err)"
check "echo \"\$err\" | grep -q \"one.h5' is in use by another process (pid $pid on \"" "second writer: the message names no holder: $err"
wait $pid
rc=$?
check "[ $rc -eq 0 ]" "the first run failed (exit $rc) after a second writer was refused"
rows=$("$MPX" export "$tmp/one.h5" train 2>/dev/null | tail -n +2 | wc -l)
check "[ $rows -eq 300 ]" "the first run's file holds $rows training rows, want 300"
check "\"$MPX\" export \"$tmp/one.h5\" summary | tail -1 | grep -qv interrupted" "the first run's summary"
# The lock is free again: a new writer with --force goes ahead.
"$MPX" train "$tmp/base.cfg" train.steps=2 --out "$tmp/one.h5" --force >/dev/null 2>&1
check "[ $? -eq 0 ]" "a writer after the first one ended was refused"

# SIGTERM, then --resume, against the uninterrupted run.
"$MPX" train "$tmp/base.cfg" --out "$tmp/full.h5" >/dev/null 2>&1
"$MPX" train "$tmp/base.cfg" --out "$tmp/part.h5" > "$tmp/part.out" 2> "$tmp/part.err" &
pid=$!
wait_rows "$tmp/part.h5" 30 $pid
kill -TERM $pid 2>/dev/null
wait $pid
rc=$?
check "[ $rc -eq 4 ]" "SIGTERM: exit $rc, want 4 ($(tail -2 "$tmp/part.err"))"
check "[ -f \"$tmp/part.ckpt\" ]" "SIGTERM: no checkpoint written"
check "grep -q 'stopped by signal 15 after step' \"$tmp/part.err\"" "SIGTERM: no message: $(tail -2 "$tmp/part.err")"
check "\"$MPX\" export \"$tmp/part.h5\" summary | tail -1 | grep -q 'interrupted by signal 15'" "SIGTERM: the run file does not say it was interrupted"
done_rows=$("$MPX" export "$tmp/part.h5" train | tail -n +2 | wc -l)
check "[ $done_rows -ge 30 ] && [ $done_rows -lt 300 ]" "SIGTERM: the run file holds $done_rows rows"
"$MPX" train "$tmp/base.cfg" --resume "$tmp/part.ckpt" >/dev/null 2>&1
check "[ $? -eq 0 ]" "resume after SIGTERM failed"
"$MPX" export "$tmp/full.h5" train | cut -f1,2,4,5 > "$tmp/full.tsv"
"$MPX" export "$tmp/part.h5" train | cut -f1,2,4,5 > "$tmp/part.tsv"
check "cmp -s \"$tmp/full.tsv\" \"$tmp/part.tsv\"" "resumed after SIGTERM: steps differ from the uninterrupted run: $(diff "$tmp/full.tsv" "$tmp/part.tsv" | head -4)"
"$MPX" export "$tmp/full.h5" eval > "$tmp/full-eval.tsv"
"$MPX" export "$tmp/part.h5" eval > "$tmp/part-eval.tsv"
check "cmp -s \"$tmp/full-eval.tsv\" \"$tmp/part-eval.tsv\"" "resumed after SIGTERM: evaluations differ"
check "[ \"\$(\"$MPX\" eval \"$tmp/full.h5\" | tail -2)\" = \"\$(\"$MPX\" eval \"$tmp/part.h5\" | tail -2)\" ]" "resumed after SIGTERM: weights differ (eval)"
check "\"$MPX\" export \"$tmp/part.h5\" summary | tail -1 | grep -qv interrupted" "the resumed run still says it was interrupted"

echo "test_preempt.sh: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
