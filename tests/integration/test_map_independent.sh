#!/usr/bin/env bash
# test_map_independent.sh — SSD's mAP against an independent implementation: a short SSD
# training on procedural scenes, its evaluation's detections written by `mpx eval
# --detections`, and pycocotools' COCOeval set up for VOC07 (experiments/map_check.py) must
# give the mAP mpx printed (to 1e-6 points where the two protocols cannot differ, which the
# script checks). Without pycocotools or CIFAR-10 the test is skipped (exit 77), not passed.
set -u
root=${MPX_SOURCE_DIR:?}
MPX=${MPX:?MPX must point to the mpx binary}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_WAIT_POLICY=passive
python3 -c 'import pycocotools, numpy' 2>/dev/null || { echo "pycocotools not installed: skipped"; exit 77; }
[ -f "$root/data/cache/cifar-10-batches-bin/test_batch.bin" ] || [ -f "$root/../shared/data/cifar10-jpg.tar.gz" ] ||
    { echo "CIFAR-10 not available: skipped"; exit 77; }
"$MPX" train "$root/experiments/configs/ssd/smoke/fp32.cfg" train.steps=40 train.eval_every=0 \
    data.scenes_eval=64 train.threads=2 --out "$tmp/ssd.h5" >"$tmp/train.log" 2>&1 ||
    { echo "FAIL: mpx train exited $?"; tail -3 "$tmp/train.log"; exit 1; }
"$MPX" eval "$tmp/ssd.h5" --detections "$tmp/dets.tsv" >"$tmp/eval" 2>&1 ||
    { echo "FAIL: mpx eval --detections exited $?"; cat "$tmp/eval"; exit 1; }
map=$(awk -F'\t' '$1 == "mAP" {print $2}' "$tmp/eval")
[ -n "$map" ] && [ -s "$tmp/dets.tsv" ] && [ ! -e "$tmp/dets.tsv.tmp" ] ||
    { echo "FAIL: no mAP printed or no detections file"; cat "$tmp/eval"; exit 1; }
python3 "$root/experiments/map_check.py" "$tmp/dets.tsv" "$map"
rc=$?
# The comparison can fail: a mAP one point off is refused.
wrong=$(python3 -c "print($map + 1.0)")
python3 "$root/experiments/map_check.py" "$tmp/dets.tsv" "$wrong" >/dev/null &&
    { echo "FAIL: map_check accepted a mAP 1 point off"; exit 1; }
exit $rc
