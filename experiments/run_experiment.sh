#!/usr/bin/env bash
# run_experiment.sh — run one model's method set at one scale, then its figures and table.
#
#   experiments/run_experiment.sh MODEL [SCALE] [SEEDS]      (make experiment-MODEL does this)
#
# Runs experiments/configs/MODEL/SCALE/<method>.cfg for every method in
# experiments/configs/MODEL/methods.list and seeds 0..SEEDS-1 into
# results/MODEL/SCALE/<method>-s<seed>.h5. A finished run (a .done marker beside its run file) is
# not run again; an interrupted one resumes from its checkpoint. FORCE=1 redoes everything.
# RESULTS (run files), FIGDIR (figures), TSVDIR and OUT_DIR (tables) move the outputs; EXTRA
# adds config overrides to every run (e.g. EXTRA=data.root=/imagenet).
# A run that diverges is a result (recorded in its run file), not a failure of the experiment.
set -euo pipefail
model=${1:?usage: run_experiment.sh MODEL [SCALE] [SEEDS]}
scale=${2:-small}
seeds=${3:-1}
root=$(cd "$(dirname "$0")/.." && pwd)
mpx=${MPX:-$root/build/mpx}
cfgdir=$root/experiments/configs/$model
out=${RESULTS:-$root/results}/$model/$scale

[ -x "$mpx" ] || { echo "run_experiment: $mpx not built (run make)" >&2; exit 2; }
[ -d "$cfgdir/$scale" ] || { echo "run_experiment: no configs for scale '$scale' in $cfgdir" >&2; exit 2; }
case "$seeds" in ''|*[!0-9]*|0) echo "run_experiment: SEEDS must be a positive integer, got '$seeds'" >&2; exit 2;; esac
mkdir -p "$out"

mapfile -t methods < <(grep -v '^\s*\(#\|$\)' "$cfgdir/methods.list")
total=$(( ${#methods[@]} * seeds )); n=0; failed=0
for ((seed = 0; seed < seeds; seed++)); do  # seed-major: a full method set first
  for method in "${methods[@]}"; do
    n=$((n + 1))
    run=$out/$method-s$seed.h5
    if [ -f "$run.done" ] && [ -f "$run" ] && [ -z "${FORCE:-}" ]; then
      echo "[$n/$total] $model/$scale $method seed $seed: done already ($run)"
      continue
    fi
    args=("$cfgdir/$scale/$method.cfg" "train.seed=$seed" --out "$run")
    if [ -f "${run%.h5}.ckpt" ] && [ -f "$run" ] && [ -z "${FORCE:-}" ]; then
      args+=(--resume "${run%.h5}.ckpt")
      echo "[$n/$total] $model/$scale $method seed $seed: resuming"
    else
      args+=(--force)
      echo "[$n/$total] $model/$scale $method seed $seed"
    fi
    rm -f "$run.done"
    set +e
    "$mpx" train "${args[@]}" ${EXTRA:-}
    rc=$?
    set -e
    case $rc in
      0) touch "$run.done" ;;
      3) echo "  (diverged: recorded in $run)"; touch "$run.done" ;;
      *) echo "  FAILED (exit $rc): $method seed $seed" >&2; failed=$((failed + 1)) ;;
    esac
  done
done

bash "$root/plots/figures.sh" "$model" "$scale"
bash "$root/experiments/make_table.sh" "$model" "$scale"
if [ "$failed" -gt 0 ]; then
  echo "run_experiment: $failed run(s) failed" >&2
  exit 1
fi
