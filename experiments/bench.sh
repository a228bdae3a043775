#!/usr/bin/env bash
# bench.sh — the standard benchmark set (make bench): the training step of each model at scale
# `small` in fp32, fp16 and bf16, with the statistics and adaptive-scaling overheads, every
# speed also as a ratio to what the host's faster sgemm (oneDNN or OpenBLAS) achieves on the
# model's own GEMM shapes, measured in the same run. Tables on stdout, JSON in results/bench/<model>.json (BENCH_DIR moves them).
# Then, where PyTorch is installed (`pip install torch`), each model against its PyTorch CPU peer
# (experiments/peers/compare.sh: the same network, batch and threads, mpx and PyTorch
# alternating) in fp32, bf16 and fp16 (the peer's amp-bf16 / amp-fp16), the table on stdout and
# as markdown rows in results/bench/peers.md; without PyTorch one line says they were skipped.
#   STEPS (default 10) measured steps per variant; MODELS (default resnet50 bert ssd);
#   PEER_ROUNDS (default 3) rounds of the peer comparison (0: skip it).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mpx=${MPX:-$root/build/mpx}
out=${BENCH_DIR:-$root/results/bench}
steps=${STEPS:-10}
[ -x "$mpx" ] || { echo "bench: $mpx not built (run make)" >&2; exit 2; }
case "$steps" in ''|*[!0-9]*|0) echo "bench: STEPS must be a positive integer, got '$steps'" >&2; exit 2;; esac
peer_rounds=${PEER_ROUNDS:-3}
case "$peer_rounds" in ''|*[!0-9]*) echo "bench: PEER_ROUNDS must be an integer >= 0, got '$peer_rounds'" >&2; exit 2;; esac
mkdir -p "$out"
for model in ${MODELS:-resnet50 bert ssd}; do
  cfg=$root/experiments/configs/$model/small/fp32.cfg
  [ -f "$cfg" ] || { echo "bench: no config $cfg" >&2; exit 2; }
  echo "== $model ($cfg)"
  "$mpx" bench "$cfg" --steps "$steps" --modes fp32,fp16,bf16 --overheads --json "$out/$model.json"
done
echo "bench: JSON in $out"

[ "$peer_rounds" -gt 0 ] || exit 0
if ! python3 -c "import torch" > /dev/null 2>&1; then
  echo "bench: PyTorch not installed (pip install torch): peers skipped"
  exit 0
fi
peers=$out/peers.md
: > "$peers"
status=0
for model in ${MODELS:-resnet50 bert ssd}; do
  echo "== $model: mpx against its PyTorch peer ($peer_rounds rounds)"
  STEPS=$steps OUT=$peers MPX=$mpx bash "$root/experiments/peers/compare.sh" "$model" "$peer_rounds" ||
    { echo "bench: the peer comparison of $model failed" >&2; status=1; }
done
if [ -s "$peers" ]; then
  echo "== mpx against PyTorch (median samples/s over $peer_rounds rounds; $peers)"
  cat "$peers"
fi
exit $status
