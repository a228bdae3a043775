#!/usr/bin/env bash
# gpu-bundle.sh — prepare, on a machine without a GPU, what tests/gpu-run.sh needs on a lent GPU
# machine that has the NVIDIA driver and the CUDA/cuDNN libraries but cannot install anything:
#   BUNDLE/bundle.tar.xz  the CUDA build's mpx and cuda tests, with every shared library they
#                         load except glibc's and NVIDIA's (HDF5, oneDNN, OpenBLAS, libjpeg, ...)
#   BUNDLE/data/          the datasets gpu-check's smoke runs read (BERT: the text corpus; SSD's
#                         scenes: the CIFAR-10 archive), copied from ../shared/data
# BUNDLE (default .gpu, which git ignores; made afresh) then travels with the device tool's `carry`, under its
# 64 MiB limit (checked here), and the device command is `bash tests/gpu-run.sh BUNDLE`.
#
#   tests/gpu-bundle.sh [--build-dir DIR] [--out BUNDLE]
# The build directory (default build/) must be a CUDA build; it is brought up to date first.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
bdir=$root/build
out=$root/.gpu
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) bdir=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu-bundle: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
data=$root/../shared/data
[ -f "$bdir/CMakeCache.txt" ] || { echo "gpu-bundle: $bdir is not a CMake build (run make first)" >&2; exit 2; }
grep -q '^MPX_CUDA:BOOL=ON' "$bdir/CMakeCache.txt" ||
  { echo "gpu-bundle: $bdir was configured without the CUDA backend (MPX_CUDA=OFF)" >&2; exit 2; }
for f in cifar10-jpg.tar.gz text-corpus.tar.gz; do
  [ -f "$data/$f" ] || { echo "gpu-bundle: $data/$f is missing" >&2; exit 2; }
done

echo "gpu-bundle: building $bdir"
cmake --build "$bdir" -j"$(nproc)" > /dev/null
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/build/tests" "$stage/lib"
cp "$bdir/mpx" "$stage/build/"
cp "$bdir"/tests/cuda_* "$stage/build/tests/"
# Every library the binaries load, but glibc's (the loader, libc, libm, ...) and NVIDIA's (the
# driver's and the toolkit's, which the GPU machine has in the versions its driver wants).
ldd "$stage/build/mpx" "$stage"/build/tests/cuda_* | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' |
  sort -u | grep -vE '/(ld-linux[^/]*|libc|libm|libdl|libpthread|librt|libresolv|libutil)\.so' |
  grep -vE '/lib(cuda|cudart|cublas|cublasLt|cudnn[a-z_]*|nvrtc|nvJitLink|nccl)\.so' |
  while read -r lib; do cp -L "$lib" "$stage/lib/"; done
if ldd "$stage/build/mpx" | grep -q "not found"; then
  ldd "$stage/build/mpx" | grep "not found" >&2
  echo "gpu-bundle: mpx has unresolved libraries here" >&2
  exit 1
fi
git -C "$root" rev-parse HEAD > "$stage/commit"
# BUNDLE is this script's: made afresh, so nothing stale travels (but never a folder of others').
if [ -e "$out" ] && [ -n "$(ls -A "$out")" ] && [ ! -f "$out/bundle.tar.xz" ]; then
  echo "gpu-bundle: $out exists and holds no bundle; not touching it" >&2
  exit 2
fi
rm -rf "$out"
mkdir -p "$out/data"
tar -cJf "$out/bundle.tar.xz" -C "$stage" .
cp "$data/cifar10-jpg.tar.gz" "$data/text-corpus.tar.gz" "$out/data/"
size=$(du -sk "$out" | cut -f1)
echo "gpu-bundle: $out holds $(ls "$stage/lib" | wc -l) libraries, $(ls "$stage/build/tests" | wc -l) cuda" \
     "tests and the data: $((size / 1024)) MiB (commit $(cut -c1-7 "$stage/commit"))"
if [ "$size" -gt $((60 * 1024)) ]; then
  echo "gpu-bundle: $out is over 60 MiB; the device tool carries at most 64 MiB with the tree" >&2
  exit 1
fi
