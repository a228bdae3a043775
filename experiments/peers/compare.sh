#!/usr/bin/env bash
# compare.sh — mpx and its PyTorch CPU peer timing the same training step side by side in one
# run: the `small` network of MODEL at the same batch, shape and threads, for each precision
# mode, alternating mpx / PyTorch (round after round, mode after mode) so that a busy moment
# hits both, and the ratio of their samples/s (medians over the rounds).
#   experiments/peers/compare.sh [MODEL] [ROUNDS]   (MODEL resnet50 | bert | ssd, default
#                                                    resnet50; ROUNDS default 3)
#   experiments/peers/compare.sh CONFIG [ROUNDS]    (a config under experiments/configs/<model>/
#                                                    instead of <model>/small/fp32.cfg; the shape
#                                                    overrides below still apply to both)
# Environment:
#   MODES    mpx precision modes (default "fp32 bf16 fp16"); the peer runs the matching one:
#            fp32 -> fp32, bf16 -> amp-bf16, fp16 -> amp-fp16 (torch.autocast + GradScaler)
#   THREADS  threads of both (default: all cores; mpx gets train.threads)
#   STEPS, WARMUP  measured and warm-up steps of each run (default 10, 3)
#   BATCH    batch size (default: the model's small config: 64, 32, 16)
#   RES, WIDTH     resnet50 and ssd: resolution and width (defaults 32, 0.25 / 128, 0.5)
#   SEQ_LEN  bert: sequence length (default 128)
#   OUT=FILE also append the table as markdown rows to FILE (with a header when FILE is new or
#            empty), for results/reference/bench.md
#   MPX      the mpx binary (default build/mpx)
# The shape overrides go to both (mpx as config keys), so the two always time the same network.
# Needs `pip install torch`. The peers' docstrings say what matches mpx and what differs.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
mpx=${MPX:-$root/build/mpx}
model=${1:-resnet50}
cfg=
if [[ "$model" == *.cfg ]]; then  # the older form: a config file (experiments/configs/<model>/...)
  [ -f "$model" ] || { echo "compare: no config $model" >&2; exit 2; }
  cfg=$model
  model=$(cd "$(dirname "$model")" && pwd)
  model=${model#"$root/experiments/configs/"}; model=${model%%/*}
fi
rounds=${2:-3}
threads=${THREADS:-$(nproc)}
steps=${STEPS:-10}
warmup=${WARMUP:-3}
modes=${MODES:-fp32 bf16 fp16}
for v in rounds threads steps; do
  case "${!v}" in ''|*[!0-9]*|0) echo "compare: ${v^^} must be a positive integer, got '${!v}'" >&2; exit 2;; esac
done
case "$warmup" in ''|*[!0-9]*) echo "compare: WARMUP must be an integer >= 0, got '$warmup'" >&2; exit 2;; esac
python3 -c "import torch" 2>/dev/null || { echo "compare: PyTorch is not installed (pip install torch)" >&2; exit 2; }
[ -x "$mpx" ] || { echo "compare: $mpx not built (run make)" >&2; exit 2; }
cfg=${cfg:-$root/experiments/configs/$model/small/fp32.cfg}
peer=$root/experiments/peers/${model}_torch.py
case "$model" in
  resnet50)
    batch=${BATCH:-64} res=${RES:-32} width=${WIDTH:-0.25}
    over=(train.batch_size="$batch" model.width="$width" data.resolution="$res")
    args=(--batch "$batch" --res "$res" --width "$width" --stem cifar) ;;
  bert)
    batch=${BATCH:-32} seq=${SEQ_LEN:-128}
    over=(train.batch_size="$batch" data.seq_len="$seq")
    args=(--batch "$batch" --seq-len "$seq") ;;
  ssd)
    batch=${BATCH:-16} res=${RES:-128} width=${WIDTH:-0.5}
    over=(train.batch_size="$batch" model.width="$width" data.resolution="$res")
    args=(--batch "$batch" --res "$res" --width "$width") ;;
  *) echo "compare: unknown model '$model' (resnet50, bert, ssd)" >&2; exit 2 ;;
esac
for m in $modes; do
  case "$m" in fp32|bf16|fp16) ;; *) echo "compare: unknown mode '$m' in MODES (fp32 bf16 fp16)" >&2; exit 2 ;; esac
done
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

echo "compare: $model ($cfg), modes $modes, $rounds round(s), $threads thread(s), $steps steps after $warmup warm-up"
printf "%-6s %-5s %-8s %12s %10s\n" round mode who samples/s median_s
for ((r = 1; r <= rounds; r++)); do
  for m in $modes; do
    case "$m" in fp32) prec=fp32 ;; *) prec=amp-$m ;; esac
    j=$tmp/mpx-$m-$r.json t=$tmp/torch-$m-$r.json
    if ! "$mpx" bench "$cfg" --steps "$steps" --warmup "$warmup" --modes "$m" --json "$j" \
        train.threads="$threads" "${over[@]}" > "$tmp/mpx.log" 2>&1; then
      echo "compare: mpx bench failed ($model $m):" >&2; tail -5 "$tmp/mpx.log" >&2; exit 1
    fi
    if ! python3 "$peer" "${args[@]}" --threads "$threads" --steps "$steps" --warmup "$warmup" \
        --precision "$prec" > "$t" 2> "$tmp/torch.log"; then
      echo "compare: $peer failed ($prec):" >&2; tail -5 "$tmp/torch.log" >&2; exit 1
    fi
    python3 - "$j" "$t" "$r" "$m" <<'PY'
import json, sys
v = json.load(open(sys.argv[1]))["variants"][0]; t = json.load(open(sys.argv[2]))
r, m = sys.argv[3], sys.argv[4]
print(f"{r:<6} {m:<5} {'mpx':<8} {v['samples_per_s']:12.1f} {v['median_s']:10.4f}")
print(f"{r:<6} {m:<5} {'pytorch':<8} {t['samples_per_s']:12.1f} {t['median_s']:10.4f}")
PY
  done
done

python3 - "$tmp" "$model" "$rounds" "$threads" "${OUT:-}" $modes <<'PY'
import json, os, statistics, sys
d, model, n, threads, out, modes = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6:]
rows = []
for m in modes:
    mj = [json.load(open(f"{d}/mpx-{m}-{r}.json")) for r in range(1, n + 1)]
    tj = [json.load(open(f"{d}/torch-{m}-{r}.json")) for r in range(1, n + 1)]
    ms = statistics.median(j["variants"][0]["samples_per_s"] for j in mj)
    ts = statistics.median(j["samples_per_s"] for j in tj)
    rows.append(dict(model=model, mode=m, peer=tj[0]["precision"], mpx=ms, torch=ts, ratio=ms / ts,
                     host=mj[0].get("host", "?"), paths=mj[0].get("paths", {}).get(m, "?"),
                     version=tj[0]["torch"], batch=tj[0]["batch"], params=tj[0]["params"]))
print(f"\nmedian over {n} round(s), {threads} thread(s), batch {rows[0]['batch']}, "
      f"{rows[0]['params']:,} parameters in the peer; host {rows[0]['host']}, torch {rows[0]['version']}")
print(f"{'model':<9} {'mode':<5} {'peer':<9} {'mpx/s':>9} {'torch/s':>9} {'mpx/torch':>9}  mpx paths")
for x in rows:
    print(f"{x['model']:<9} {x['mode']:<5} {x['peer']:<9} {x['mpx']:9.1f} {x['torch']:9.1f} {x['ratio']:9.2f}  {x['paths']}")
if out:
    new = not os.path.exists(out) or os.path.getsize(out) == 0
    with open(out, "a") as f:
        if new:
            f.write("| model | mode | mpx samples/s | PyTorch samples/s | mpx / PyTorch | host | mpx paths | torch |\n")
            f.write("|---|---|---|---|---|---|---|---|\n")
        for x in rows:
            f.write(f"| {x['model']} | {x['mode']} (peer {x['peer']}) | {x['mpx']:.1f} | {x['torch']:.1f} | "
                    f"**{x['ratio']:.2f}** | {x['host']} | {x['paths']} | {x['version']} |\n")
    print(f"compare: markdown rows appended to {out}")
PY
