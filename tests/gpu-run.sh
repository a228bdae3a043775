#!/usr/bin/env bash
# gpu-run.sh — the one command for a lent GPU machine, in the repository root there, with the
# bundle of tests/gpu-bundle.sh carried along (device tool: carry [".gpu"]):
#   bash tests/gpu-run.sh [BUNDLE] [gpu-check arguments...]
# Unpacks BUNDLE/bundle.tar.xz (default .gpu), points the loader at its libraries and at the
# machine's CUDA, cuBLAS and cuDNN, puts the source tree where the binaries were built
# (/work/main: their compiled-in source paths) and the datasets where the configs read them
# (../shared/data), runs tests/gpu-check.sh on the bundled build (default arguments:
# --bench-steps 5 --memcheck, each memcheck at most 60 s, the whole check at most 440 s) and
# copies the log, the bench JSON and a tarball of every stage's log to $OUT.
set -u
t0=$(date +%s)
root=$(cd "$(dirname "$0")/.." && pwd)
bundle=${1:-.gpu}
[ $# -gt 0 ] && shift
case $bundle in /*) ;; *) bundle=$root/$bundle ;; esac
out=${OUT:-$root/results/gpu-check}
mkdir -p "$out"
[ -f "$bundle/bundle.tar.xz" ] || { echo "gpu-run: no $bundle/bundle.tar.xz (run tests/gpu-bundle.sh)" >&2; exit 2; }
g=$(mktemp -d)
tar -xJf "$bundle/bundle.tar.xz" -C "$g"
echo "gpu-run: bundle of commit $(cat "$g/commit"), tree at $(git -C "$root" rev-parse HEAD 2>/dev/null)"
libs=$g/lib
# NCCL may be only the Python wheel's (nvidia-nccl-cu13), so its site-packages are searched too.
site=$(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null)
for n in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcudnn.so.9 libnccl.so.2; do
  # shellcheck disable=SC2086
  p=$(find -H /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/lib /usr/lib/x86_64-linux-gnu /opt $site \
        -name "$n" 2>/dev/null | head -1)
  if [ -n "$p" ]; then libs=$libs:$(dirname "$p"); else echo "gpu-run: $n not found on this machine"; fi
done
export LD_LIBRARY_PATH=$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
ldd "$g/build/mpx" | grep "not found"
mkdir -p /work
[ -e /work/main ] || ln -s "$root" /work/main
for d in /work/shared "$(dirname "$root")/shared"; do
  [ -e "$d/data" ] || { mkdir -p "$d" && ln -s "$bundle/data" "$d/data"; }
done
[ $# -gt 0 ] || set -- --bench-steps 5 --memcheck
MEMCHECK_TIMEOUT=${MEMCHECK_TIMEOUT:-60} timeout 440 bash "$root/tests/gpu-check.sh" --no-build \
  --build-dir "$g/build" --log "$g/log" "$@"
rc=$?
echo "gpu-run: gpu-check exit $rc"
cp "$g/log/gpu-check.log" "$g"/log/bench_*.json "$out/" 2>/dev/null
tar -czf "$out/gpucheck.tgz" -C "$g/log" --exclude='*.h5' --exclude='*.ckpt' --exclude='*.done' . 2>/dev/null
echo "gpu-run: $(( $(date +%s) - t0 )) s"
exit $rc
