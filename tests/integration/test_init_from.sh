#!/usr/bin/env bash
# test_init_from.sh — train.init_from, the pretrained start of the papers' SSDs: a run started
# from another run's checkpoint takes every weight whose name it has and nothing else.
#   The same model, learning rate 0: its evaluation equals the checkpoint's run's final one bit
#   for bit (every weight came over); a model with a differently sized parameter of the same
#   name (fc for 20 classes) and a missing file are refused, exit 2, naming the file and the
#   parameter, and write no run file; with CIFAR-10 at hand, the SSD's VGG trunk takes its 10
#   convolutions (20 parameters) from the classifier's checkpoint, and the SSD on the ResNet-18
#   trunk (no name in common) is refused.
set -u
root=${MPX_SOURCE_DIR:?}
MPX=${MPX:?MPX must point to the mpx binary}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0 checks=0
check() { checks=$((checks + 1)); if ! eval "$1"; then fails=$((fails + 1)); echo "FAIL: $2"; fi; }

cat > "$tmp/vgg.cfg" <<'CFG'
[model]
arch = vgg
width = 0.125
batchnorm = false
[data]
dataset = synthetic
resolution = 32
[train]
optimizer = sgd
momentum = 0.9
steps = 4
batch_size = 8
lr = 0.01
lr_schedule = constant
eval_batches = 2
checkpoint_every = 4
threads = 2
[log]
progress = never
CFG
"$MPX" train "$tmp/vgg.cfg" --out "$tmp/pre.h5" > "$tmp/pre.log" 2>&1
check "[ $? -eq 0 ] && [ -f \"$tmp/pre.ckpt\" ]" "pretraining run failed: $(tail -2 "$tmp/pre.log")"

# The same model at learning rate 0: one step changes nothing, so its final evaluation is the
# pretrained run's.
"$MPX" train "$tmp/vgg.cfg" train.init_from="$tmp/pre.ckpt" train.lr=0 train.steps=1 \
  train.checkpoint_every=0 --out "$tmp/same.h5" > "$tmp/same.log" 2>&1
check "[ $? -eq 0 ]" "init_from the same model failed: $(tail -2 "$tmp/same.log")"
n=$(grep -o 'init_from: [0-9]* of [0-9]* parameters' "$tmp/same.log")
check "[ -n \"$n\" ] && [ \"\$(echo $n | awk '{ print \$2 == \$4 }')\" = 1 ]" "not every parameter loaded: '$n'"
"$MPX" export "$tmp/pre.h5" eval | tail -n 1 | cut -f2,3 > "$tmp/pre.eval"
"$MPX" export "$tmp/same.h5" eval | tail -n 1 | cut -f2,3 > "$tmp/same.eval"
check "[ -s \"$tmp/pre.eval\" ] && cmp -s \"$tmp/pre.eval\" \"$tmp/same.eval\"" \
  "evaluation from the loaded weights differs: $(cat "$tmp/pre.eval") vs $(cat "$tmp/same.eval")"
# Without init_from the same step evaluates otherwise (the check above can fail).
"$MPX" train "$tmp/vgg.cfg" train.lr=0 train.steps=1 train.checkpoint_every=0 --out "$tmp/fresh.h5" > /dev/null 2>&1
"$MPX" export "$tmp/fresh.h5" eval | tail -n 1 | cut -f2,3 > "$tmp/fresh.eval"
check "! cmp -s \"$tmp/pre.eval\" \"$tmp/fresh.eval\"" "a fresh model evaluates as the pretrained one"

"$MPX" train "$tmp/vgg.cfg" model.num_classes=20 train.init_from="$tmp/pre.ckpt" --out "$tmp/bad1.h5" > "$tmp/bad1.log" 2>&1
rc=$?
check "[ $rc -eq 2 ] && grep -q \"pre.ckpt.*'fc.weight'\" \"$tmp/bad1.log\" && [ ! -f \"$tmp/bad1.h5\" ]" \
  "a size mismatch gave exit $rc: $(tail -1 "$tmp/bad1.log")"
"$MPX" train "$tmp/vgg.cfg" train.init_from="$tmp/nosuch.ckpt" --out "$tmp/bad3.h5" > "$tmp/bad3.log" 2>&1
rc=$?
check "[ $rc -eq 2 ] && grep -q 'nosuch.ckpt' \"$tmp/bad3.log\"" "a missing checkpoint gave exit $rc: $(tail -1 "$tmp/bad3.log")"

if [ -f "$root/data/cache/cifar-10-batches-bin/test_batch.bin" ] || [ -f "$root/../shared/data/cifar10-jpg.tar.gz" ]; then
  "$MPX" train "$root/experiments/configs/ssd/smoke/fp32.cfg" model.trunk=vgg model.batchnorm=false \
    model.width=0.125 train.steps=1 train.eval_every=0 data.scenes_eval=8 log.progress=never \
    train.init_from="$tmp/pre.ckpt" --out "$tmp/ssd.h5" > "$tmp/ssd.log" 2>&1
  check "[ $? -eq 0 ] && grep -q 'init_from: 20 of [0-9]* parameters' \"$tmp/ssd.log\"" \
    "the SSD's VGG trunk did not take the classifier's 20 parameters: $(grep -m1 init_from "$tmp/ssd.log"; tail -1 "$tmp/ssd.log")"
  "$MPX" train "$root/experiments/configs/ssd/smoke/fp32.cfg" train.steps=1 log.progress=never \
    train.init_from="$tmp/pre.ckpt" --out "$tmp/bad2.h5" > "$tmp/bad2.log" 2>&1
  rc=$?
  check "[ $rc -eq 2 ] && grep -q 'pre.ckpt.*no parameter' \"$tmp/bad2.log\" && [ ! -f \"$tmp/bad2.h5\" ]" \
    "a model with no name in common (SSD on the ResNet-18 trunk) gave exit $rc: $(tail -1 "$tmp/bad2.log")"
else
  echo "CIFAR-10 not available: the SSD cases skipped"
fi
echo "test_init_from.sh: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
