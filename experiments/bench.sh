#!/usr/bin/env bash
# bench.sh — the standard benchmark set (make bench): the training step of each model at scale
# `small` in fp32, fp16 and bf16, with the statistics and adaptive-scaling overheads, every
# speed also as a ratio to an OpenBLAS sgemm of the model's dominant GEMM measured in the same
# run. Tables on stdout, JSON in results/bench/<model>.json (BENCH_DIR moves them).
#   STEPS (default 10) measured steps per variant; MODELS (default resnet50 bert ssd).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mpx=${MPX:-$root/build/mpx}
out=${BENCH_DIR:-$root/results/bench}
steps=${STEPS:-10}
[ -x "$mpx" ] || { echo "bench: $mpx not built (run make)" >&2; exit 2; }
case "$steps" in ''|*[!0-9]*|0) echo "bench: STEPS must be a positive integer, got '$steps'" >&2; exit 2;; esac
mkdir -p "$out"
for model in ${MODELS:-resnet50 bert ssd}; do
  cfg=$root/experiments/configs/$model/small/fp32.cfg
  [ -f "$cfg" ] || { echo "bench: no config $cfg" >&2; exit 2; }
  echo "== $model ($cfg)"
  "$mpx" bench "$cfg" --steps "$steps" --modes fp32,fp16,bf16 --overheads --json "$out/$model.json"
done
echo "bench: JSON in $out"
