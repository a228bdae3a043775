#!/usr/bin/env bash
# compare.sh — mpx and the PyTorch CPU peer timing the same ResNet-50 training step side by side
# in one run (fp32, same batch, resolution, width and threads), alternating A/B/A/B so that a
# busy moment hits both, and the ratio of their samples/s.
#   experiments/peers/compare.sh [CONFIG] [ROUNDS]   (default: the resnet50 small fp32 config, 3)
#   BATCH, RES, WIDTH (default 64, 32, 0.25: scale small; the CIFAR stem) and THREADS (all cores)
# Needs `pip install torch`. Prints a table; the numbers go into results/reference/bench.md.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
mpx=${MPX:-$root/build/mpx}
cfg=${1:-$root/experiments/configs/resnet50/small/fp32.cfg}
rounds=${2:-3}
threads=${THREADS:-$(nproc)}
python3 -c "import torch" 2>/dev/null || { echo "compare: PyTorch is not installed (pip install torch)" >&2; exit 2; }
[ -x "$mpx" ] || { echo "compare: $mpx not built (run make)" >&2; exit 2; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# Both get the same shape: the config's network with these overrides (defaults: scale small).
batch=${BATCH:-64} res=${RES:-32} width=${WIDTH:-0.25}
over=(train.threads="$threads" train.batch_size="$batch" model.width="$width" data.resolution="$res")
printf "%-6s %-8s %12s %12s\n" round who samples/s median_s
for ((r = 1; r <= rounds; r++)); do
  "$mpx" bench "$cfg" --steps 10 --warmup 3 --modes fp32 --json "$tmp/mpx$r.json" "${over[@]}" > /dev/null
  python3 "$root/experiments/peers/resnet50_torch.py" --batch "$batch" --res "$res" --width "$width" \
    --stem cifar --threads "$threads" --steps 10 > "$tmp/torch$r.json"
  python3 - "$tmp/mpx$r.json" "$tmp/torch$r.json" "$r" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))["variants"][0]; t = json.load(open(sys.argv[2]))
print(f"{sys.argv[3]:<6} {'mpx':<8} {m['samples_per_s']:12.1f} {m['median_s']:12.4f}")
print(f"{sys.argv[3]:<6} {'pytorch':<8} {t['samples_per_s']:12.1f} {t['median_s']:12.4f}")
PY
done
python3 - "$tmp" "$rounds" <<'PY'
import json, statistics, sys
d, n = sys.argv[1], int(sys.argv[2])
m = [json.load(open(f"{d}/mpx{r}.json"))["variants"][0]["samples_per_s"] for r in range(1, n + 1)]
t = [json.load(open(f"{d}/torch{r}.json"))["samples_per_s"] for r in range(1, n + 1)]
tv = json.load(open(f"{d}/torch1.json"))["torch"]
print(f"median over {n} rounds: mpx {statistics.median(m):.1f} samples/s, PyTorch {tv} {statistics.median(t):.1f} samples/s, "
      f"ratio mpx/PyTorch {statistics.median(m) / statistics.median(t):.2f}")
PY
