#!/usr/bin/env bash
# test_reference_path.sh — train.isa = avx2 gives the same bits on every host kind: short runs of
# a ResNet-50 (convolutions, batch-norm, FP16 casts with dynamic scaling, SGD) and a BERT
# (GEMMs, attention, layer norm, GELU, AdamW; when the text corpus is at hand) on one thread
# must reproduce the SHA-256 of their per-step losses and final evaluation committed in
# tests/data/reference_path.tsv. That file names the host kinds each hash was produced on; a
# mismatch on one of them fails, and on a kind not yet among them it is reported and skipped
# (exit 77) with the hash this host gave, so that a new host kind is added by evidence.
set -u
root=${MPX_SOURCE_DIR:?}
MPX=${MPX:?MPX must point to the mpx binary}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_WAIT_POLICY=passive
grep -q avx2 /proc/cpuinfo && grep -q f16c /proc/cpuinfo || { echo "no AVX2/F16C: skipped"; exit 77; }
kind=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')
fails=0 unverified=0 ran=0
run_case() {  # name config overrides...
    local name=$1 cfg=$2; shift 2
    "$MPX" train "$cfg" train.isa=avx2 train.threads=1 "$@" --out "$tmp/$name" >"$tmp/$name.log" 2>&1 ||
        { echo "FAIL: $name: mpx train exited $?"; tail -3 "$tmp/$name.log"; fails=$((fails + 1)); return; }
    local got want hosts
    got=$({ "$MPX" export "$tmp/$name" train | cut -f1,2; "$MPX" export "$tmp/$name" eval; } | sha256sum | cut -c1-64)
    want=$(awk -F'\t' -v n="$name" '$1 == n {print $2}' "$root/tests/data/reference_path.tsv")
    hosts=$(awk -F'\t' -v n="$name" '$1 == n {print $3}' "$root/tests/data/reference_path.tsv")
    ran=$((ran + 1))
    if [ "$got" = "$want" ]; then echo "ok: $name $got"; return; fi
    case ";$hosts;" in
    *";$kind;"*) echo "FAIL: $name: loss curve hash $got, committed $want (from $hosts)"; fails=$((fails + 1)) ;;
    *) echo "UNVERIFIED: $name on '$kind' gives $got, not $want (verified on: $hosts)"; unverified=$((unverified + 1)) ;;
    esac
}
run_case resnet50_fp16_dynamic "$root/experiments/configs/resnet50/smoke/fp16_dynamic.cfg" \
    data.dataset=synthetic data.train_subset=0 data.eval_subset=0 train.steps=12
corpus="$root/../shared/data/text-corpus.tar.gz"
if [ -f "$corpus" ]; then
    run_case bert_fp16_dynamic "$root/experiments/configs/bert/smoke/fp16_dynamic.cfg"
else
    echo "text corpus not at hand ($corpus): the BERT case skipped"
fi
echo "$ran cases on '$kind', $fails failed, $unverified on an unverified host kind"
[ "$fails" -eq 0 ] || exit 1
[ "$unverified" -eq 0 ] || exit 77
exit 0
