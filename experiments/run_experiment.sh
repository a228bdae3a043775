#!/usr/bin/env bash
# run_experiment.sh — run one model's method set at one scale, then its summaries, figures,
# adaptive-scaling overhead, table and claims.
#
#   experiments/run_experiment.sh MODEL [SCALE] [SEEDS]      (make experiment-MODEL does this)
#
# Runs experiments/configs/MODEL/SCALE/<method>.cfg for every method in
# experiments/configs/MODEL/methods.list and seeds 0..SEEDS-1 into
# results/MODEL/SCALE/<method>-s<seed>.h5. A finished run (a .done marker beside its run file) is
# not run again; an interrupted one resumes from its checkpoint. FORCE=1 redoes everything.
# RESULTS (run files), FIGDIR (figures), TSVDIR and OUT_DIR (tables) move the outputs; EXTRA
# adds config overrides to every run (e.g. EXTRA=data.root=/imagenet). METHODS="a b" runs only
# those methods; METHODS=core the model's core set (core.list: fp32, fp16 without scaling,
# fixed, dynamic and adaptive scaling), METHODS=master_weights the master-weights ablation
# (master_weights.list: 16-bit storage without FP32 masters, the costliest runs, so not in
# the default set), METHODS=all methods.list and then master_weights.list, METHODS=formats the
# formats experiment's (formats.list).
# PARALLEL=n runs n trainings at a time, each with cores/n threads (train.threads) and its
# output in <run>.log. The default on the CPU is one run per core, each on one thread, as every
# committed reference was run: on 2 cores, two one-thread runs finish about 1.25x sooner than one
# after the other on both threads, because small GEMMs scale poorly over threads. It is capped by
# the runs to do and by the memory available (2 GiB a run); runs on a GPU (train.device = cuda,
# the `paper` scale) go one at a time. PARALLEL=1 runs one at a time on every core. A run's
# result depends on its thread count (the BLAS and oneDNN reductions split the work
# differently), so compare seeds run with the same threads; the run file records them.
# A run that diverges is a result (recorded in its run file), not a failure of the experiment.
# First it says which runs it will do and how long they should take here (experiments/
# estimate.py: short `mpx bench`es on this machine, one per distinct step cost and one of the
# pretraining where there is one; ESTIMATE=0 skips it), and after every finished run how many
# are done and an ETA for the rest.
# Then: experiments/report.py summarizes the finished run files (runs.tsv, layers.tsv),
# plots/figures.sh draws the figures, `mpx bench --overheads` measures the adaptive scaling's
# cost once (overheads.json; OVERHEAD_STEPS rounds, default 30, 6 at smoke), and report.py
# writes the table with the claims' verdicts. A scale whose reference is committed
# (results/reference/MODEL/SCALE/) is written there and into plots/figures/MODEL/SCALE/; any
# other into results/MODEL/SCALE/report/, which git ignores.
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
case "${PARALLEL:-}" in *[!0-9]*|0*) echo "run_experiment: PARALLEL must be a positive integer, got '$PARALLEL'" >&2; exit 2;; esac

list_of() { grep -v '^\s*\(#\|$\)' "$cfgdir/$1.list" | tr '\n' ' '; }
read -r -a methods <<< "$(list_of methods)"
case "${METHODS:-}" in
  core|formats|master_weights)
    [ -f "$cfgdir/$METHODS.list" ] || { echo "run_experiment: no $METHODS set ($cfgdir/$METHODS.list)" >&2; exit 2; }
    METHODS=$(list_of "$METHODS") ;;
  all)
    METHODS=$(list_of methods)
    [ ! -f "$cfgdir/master_weights.list" ] || METHODS="$METHODS $(list_of master_weights)" ;;
esac
if [ -n "${METHODS:-}" ]; then
  for m in $METHODS; do
    [ -f "$cfgdir/$scale/$m.cfg" ] ||
      { echo "run_experiment: METHODS: '$m' has no config at this scale ($cfgdir/$scale/$m.cfg)" >&2; exit 2; }
  done
  read -r -a methods <<< "$METHODS"
fi
mkdir -p "$out"
total=$(( ${#methods[@]} * seeds )); n=0; failed=0; running=0

# The runs still to do, their estimated seconds (est[method:seed]) and the whole set's.
pending=()
for ((seed = 0; seed < seeds; seed++)); do
  for method in "${methods[@]}"; do
    [ -f "$out/$method-s$seed.h5.done" ] && [ -f "$out/$method-s$seed.h5" ] && [ -z "${FORCE:-}" ] ||
      pending+=("$method:$seed")
  done
done
# PARALLEL's default: one run per core, no more than the runs to do or the memory allows.
cores=$(nproc 2>/dev/null || echo 1)
if [ -n "${PARALLEL:-}" ]; then
  parallel=$PARALLEL how="PARALLEL=$PARALLEL"
elif [ "$(python3 "$root/experiments/estimate.py" device "$cfgdir/$scale/${methods[0]}.cfg")" != cpu ]; then
  parallel=1 how="one at a time by default on a GPU; PARALLEL=n sets it"
else
  mem_gib=$(awk '/^MemAvailable:/ { print int($2 / 1048576) }' /proc/meminfo 2>/dev/null || true)
  parallel=$cores
  [ -z "$mem_gib" ] || [ "$parallel" -le $((mem_gib / 2)) ] || parallel=$((mem_gib / 2))
  [ "$parallel" -le "${#pending[@]}" ] || parallel=${#pending[@]}
  [ "$parallel" -ge 1 ] || parallel=1
  how="one per core by default; PARALLEL=n sets it"
fi
run_threads=$(( cores / parallel > 0 ? cores / parallel : 1 ))
threads=()
[ "$parallel" -eq 1 ] || threads=("train.threads=$run_threads")
# A scale with a pretrain.cfg (SSD `vgg`: its VGG trunk pretrained on CIFAR-10 classification,
# as the papers' SSDs start from ImageNet weights) trains it once first, with every thread, into
# $out/pretrain.h5; every run of the set then starts from its checkpoint (train.init_from).
pretrain=none pre=$out/pretrain.h5
if [ -f "$cfgdir/$scale/pretrain.cfg" ] && [ "${#pending[@]}" -gt 0 ]; then
  pretrain=todo
  [ -f "$pre.done" ] && [ -f "${pre%.h5}.ckpt" ] && [ -z "${FORCE:-}" ] && pretrain=done
fi
declare -A est=()
est_total=0 est_sum=0
echo "$model/$scale: ${#methods[@]} method(s) x $seeds seed(s): ${methods[*]}; ${#pending[@]} run(s) to do, $parallel at a time ($how)"
if [ "${#pending[@]}" -gt 0 ] && [ "${ESTIMATE:-1}" != 0 ]; then
  ejson=$out/estimate.json
  mapfile -t pm < <(printf '%s\n' "${pending[@]}" | cut -d: -f1 | sort -u)
  if python3 "$root/experiments/estimate.py" measure "$model" "$scale" "$run_threads" "$ejson" "${pm[@]}" &&
     elines=$(python3 "$root/experiments/estimate.py" runs "$ejson" "$parallel" "${pending[@]}"); then
    while read -r k v; do
      case $k in total) est_total=$v ;; sum) est_sum=$v ;; steps) ;; *) est[$k]=$v ;; esac
    done <<< "$elines"
    pre_note=
    if [ "$pretrain" = todo ] &&
       pre_s=$(python3 "$root/experiments/estimate.py" single "$cfgdir/$scale/pretrain.cfg" "$cores" "${ejson%.json}-pretrain.json"); then
      est_total=$((est_total + pre_s))
      pre_note="the pretraining first, $(( (pre_s + 59) / 60 )) min of it; "
    fi
    when="about $(( est_total / 3600 )) h $(( est_total % 3600 / 60 )) min"
    [ "$est_total" -ge 60 ] || when="under a minute"
    echo "estimate on this machine: $when ($pre_note$(grep '^steps' <<< "$elines" | cut -d' ' -f2-) per step, $run_threads thread(s) each)"
  else
    echo "estimate: not available (mpx bench failed); running anyway" >&2
  fi
fi
init=()
if [ "$pretrain" != none ]; then
  if [ "$pretrain" = done ]; then
    echo "pretraining: done already ($pre)"
  else
    echo "pretraining the trunk first: $cfgdir/$scale/pretrain.cfg -> $pre"
    resume=(--force)
    [ -f "${pre%.h5}.ckpt" ] && [ -f "$pre" ] && [ -z "${FORCE:-}" ] && resume=(--resume "${pre%.h5}.ckpt")
    "$mpx" train "$cfgdir/$scale/pretrain.cfg" --out "$pre" "${resume[@]}" ||
      { echo "run_experiment: pretraining failed ($cfgdir/$scale/pretrain.cfg)" >&2; exit 1; }
    touch "$pre.done"
  fi
  init=("train.init_from=${pre%.h5}.ckpt")
fi
t_start=$(date +%s); est_done=0; runs_done=0
declare -A pid_item=()

# progress ITEM: one run finished; how many are done, and the ETA from the estimate corrected by
# the time the finished runs took against their estimates.
progress() {
  runs_done=$((runs_done + 1))
  est_done=$((est_done + ${est[$1]:-0}))
  local now elapsed left msg
  now=$(date +%s); elapsed=$((now - t_start))
  msg="progress: $runs_done of ${#pending[@]} run(s) done, $((elapsed / 60)) min elapsed"
  if [ "$est_done" -gt 0 ] && [ "$est_sum" -gt 0 ]; then
    left=$(( (est_sum - est_done) * elapsed / est_done / parallel ))
    [ "$left" -ge 0 ] || left=0
    msg="$msg, ETA $((left / 3600)) h $((left % 3600 / 60)) min"
  fi
  echo "$msg"
}

# finish_one: wait for any running training and book its exit status.
finish_one() {
  local rc=0 pid=
  wait -n -p pid || rc=$?
  running=$((running - 1))
  [ "$rc" -eq 0 ] || failed=$((failed + 1))
  [ -z "$pid" ] || progress "${pid_item[$pid]:-}"
}

# train_one LABEL RUN ARGS...: one training; exit 0 done (a divergence, exit 3, counts as done).
train_one() {
  local label=$1 run=$2 rc=0
  shift 2
  if [ "$parallel" -gt 1 ]; then
    "$mpx" train "$@" ${EXTRA:-} "${threads[@]}" > "${run%.h5}.log" 2>&1 || rc=$?
  else
    "$mpx" train "$@" ${EXTRA:-} || rc=$?
  fi
  case $rc in
    0) touch "$run.done"; [ "$parallel" -eq 1 ] || echo "$label: finished" ;;
    3) echo "$label: diverged (recorded in $run)"; touch "$run.done" ;;
    *) echo "  FAILED (exit $rc): $label$( [ "$parallel" -eq 1 ] || echo ", see ${run%.h5}.log")" >&2; return 1 ;;
  esac
}
for ((seed = 0; seed < seeds; seed++)); do  # seed-major: a full method set first
  for method in "${methods[@]}"; do
    n=$((n + 1))
    run=$out/$method-s$seed.h5
    if [ -f "$run.done" ] && [ -f "$run" ] && [ -z "${FORCE:-}" ]; then
      echo "[$n/$total] $model/$scale $method seed $seed: done already ($run)"
      continue
    fi
    # a free slot first, so that the line below says when the run starts
    [ "$parallel" -eq 1 ] || [ "$running" -lt "$parallel" ] || finish_one
    args=("$cfgdir/$scale/$method.cfg" "train.seed=$seed" "${init[@]}" --out "$run")
    if [ -f "${run%.h5}.ckpt" ] && [ -f "$run" ] && [ -z "${FORCE:-}" ]; then
      args+=(--resume "${run%.h5}.ckpt")
      echo "[$n/$total] $model/$scale $method seed $seed: resuming"
    else
      args+=(--force)
      echo "[$n/$total] $model/$scale $method seed $seed"
    fi
    rm -f "$run.done"
    if [ "$parallel" -eq 1 ]; then
      train_one "$method seed $seed" "$run" "${args[@]}" || failed=$((failed + 1))
      progress "$method:$seed"
      continue
    fi
    train_one "[$n/$total] $model/$scale $method seed $seed" "$run" "${args[@]}" &
    pid_item[$!]="$method:$seed"
    running=$((running + 1))
  done
done
while [ "$running" -gt 0 ]; do finish_one; done

python3 "$root/experiments/report.py" summarize "$model" "$scale"
bash "$root/plots/figures.sh" "$model" "$scale"
if [ -d "$root/results/reference/$model/$scale" ] && [ -z "${OUT_DIR:-}" ]; then
  report=$root/results/reference/$model/$scale
else
  report=${OUT_DIR:-$out/report}
fi
if [ ! -f "$report/overheads.json" ] || [ -n "${FORCE:-}" ]; then
  steps=${OVERHEAD_STEPS:-$([ "$scale" = smoke ] && echo 6 || echo 30)}
  echo "adaptive scaling's overhead: mpx bench --overheads, $steps rounds"
  # From the source root, so that the JSON names the config by its path in the repository.
  json=$(realpath -m "$report/overheads.json") bin=$(realpath -m "$mpx")
  (cd "$root" && "$bin" bench "experiments/configs/$model/$scale/fp16_adaptive.cfg" ${EXTRA:-} \
    --modes fp16 --overheads --steps "$steps" --json "$json") > "$out/overheads.log" 2>&1 ||
    { echo "run_experiment: mpx bench --overheads failed, see $out/overheads.log" >&2; failed=$((failed + 1)); }
fi
python3 "$root/experiments/report.py" claims "$model" --scale "$scale"
if [ "$failed" -gt 0 ]; then
  echo "run_experiment: $failed run(s) failed" >&2
  exit 1
fi
