#!/usr/bin/env bash
# deps.sh — check (and, as root with apt, install) the Debian packages mpx needs.
#   cmake/deps.sh check     exit 0 when all are present, else list the missing ones and exit 1
#   cmake/deps.sh install   install what is missing (root + apt-get), else print the exact command
set -u
PKGS=(build-essential cmake pkg-config libdnnl-dev libopenblas-openmp-dev libhdf5-dev hdf5-tools
      libjpeg-dev zlib1g-dev libarchive-dev libexpat1-dev libutf8proc-dev libopenmpi-dev openmpi-bin ocl-icd-opencl-dev gnuplot-nox python3 dataset-fashion-mnist)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

case "${1:-check}" in
  check)
    if [ ${#missing[@]} -gt 0 ]; then echo "missing Debian packages: ${missing[*]}"; exit 1; fi
    exit 0 ;;
  install)
    [ ${#missing[@]} -eq 0 ] && exit 0
    cmd="apt-get install -y --no-install-recommends ${missing[*]}"
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
      echo "mpx: installing ${missing[*]}"
      export DEBIAN_FRONTEND=noninteractive
      if ! $cmd >/tmp/mpx-apt.log 2>&1; then
        apt-get update >>/tmp/mpx-apt.log 2>&1
        $cmd >>/tmp/mpx-apt.log 2>&1 || { echo "mpx: apt-get failed; see /tmp/mpx-apt.log" >&2; exit 1; }
      fi
      exit 0
    fi
    echo "mpx needs Debian packages that are not installed. Run, as root:" >&2
    echo "  apt-get update && $cmd" >&2
    exit 1 ;;
  *) echo "usage: cmake/deps.sh check|install" >&2; exit 2 ;;
esac
