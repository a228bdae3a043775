#!/usr/bin/env bash
# test_cli.sh — the mpx command's contract with its users: --help everywhere (exit 0), and bad
# input as one clear line on stderr naming the file/line/key/value at fault with exit code 2,
# never a crash and never a clobbered file.
set -u
MPX=${MPX:?MPX must point to the mpx binary}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0 checks=0
expect() { # expect CODE PATTERN -- command...
  local code=$1 pattern=$2; shift 3
  checks=$((checks + 1))
  "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [ "$rc" -ne "$code" ] || ! grep -qE -- "$pattern" "$tmp/err" "$tmp/out"; then
    fails=$((fails + 1))
    echo "FAIL: $* -> exit $rc (want $code), output:"; cat "$tmp/err" "$tmp/out" | head -5
  fi
  if [ "$code" -eq 2 ] && [ "$(wc -l < "$tmp/err")" -gt 2 ]; then
    fails=$((fails + 1)); echo "FAIL: $* printed more than two lines on stderr"; cat "$tmp/err"
  fi
}

for c in train eval export bench info; do expect 0 "usage: mpx $c" -- "$MPX" $c --help; done
expect 0 "usage: mpx COMMAND" -- "$MPX" --help
expect 2 "unknown command 'trian'" -- "$MPX" trian
expect 0 "precision" -- "$MPX" train --help-config
expect 0 "tensor_cores" -- "$MPX" train --help-config

cat > "$tmp/ok.cfg" <<'CFG'
[model]
arch = resnet20
width = 0.25
[data]
dataset = synthetic
resolution = 8
[train]
steps = 2
batch_size = 4
[log]
stats_every = 1
CFG
printf '[train]\nstpes = 10\n' > "$tmp/typo.cfg"
printf '[train]\nsteps = ten\n' > "$tmp/badvalue.cfg"
printf '[precision]\nmode = fp32\nscaling = dynamic\n' > "$tmp/contra.cfg"
printf '[precision]\nmode = fp16\nscaling = fixed\n' > "$tmp/fixed.cfg"
printf 'include = b.cfg\n' > "$tmp/a.cfg"; printf 'include = a.cfg\n' > "$tmp/b.cfg"
printf '[trian]\nsteps = 1\n' > "$tmp/section.cfg"
printf '[data]\ndataset = cifar10\ncache_dir = %s/nocache\nshared_dir = %s/noshared\n' "$tmp" "$tmp" > "$tmp/nodata.cfg"

expect 2 "typo.cfg:2: \[train\] unknown key 'stpes' \(did you mean 'steps'\?\)" -- "$MPX" train "$tmp/typo.cfg" --out "$tmp/r.h5"
expect 2 "badvalue.cfg:2: \[train\] steps = ten" -- "$MPX" train "$tmp/badvalue.cfg" --out "$tmp/r.h5"
expect 2 "contra.cfg:3: precision.scaling = dynamic: loss scaling needs" -- "$MPX" train "$tmp/contra.cfg" --out "$tmp/r.h5"
expect 2 "fixed scaling needs precision.loss_scale" -- "$MPX" train "$tmp/fixed.cfg" --out "$tmp/r.h5"
expect 2 "a.cfg -> .*b.cfg -> .*a.cfg" -- "$MPX" train "$tmp/a.cfg" --out "$tmp/r.h5"
expect 2 "unknown section \[trian\]" -- "$MPX" train "$tmp/section.cfg" --out "$tmp/r.h5"
expect 2 "cannot open '.*missing.cfg'" -- "$MPX" train "$tmp/missing.cfg"
expect 2 "command line: \[train\] steps = -3" -- "$MPX" train "$tmp/ok.cfg" train.steps=-3 --out "$tmp/r.h5"
expect 2 "nocache.*noshared|noshared.*nocache" -- "$MPX" train "$tmp/nodata.cfg" --out "$tmp/r.h5"
expect 0 "resnet20, tf32, none scaling" -- "$MPX" train "$tmp/ok.cfg" precision.mode=tf32 --out "$tmp/tf32.h5"
expect 2 "command line: precision.scaling = dynamic: loss scaling needs.*tf32" -- "$MPX" train "$tmp/ok.cfg" precision.mode=tf32 precision.scaling=dynamic --out "$tmp/r.h5"
expect 2 "command line: \[precision\] tensor_cores = maybe" -- "$MPX" train "$tmp/ok.cfg" precision.tensor_cores=maybe --out "$tmp/r.h5"
expect 2 "command line: precision.master_weights = false: needs precision.mode = fp16 or bf16" -- "$MPX" train "$tmp/ok.cfg" precision.master_weights=false --out "$tmp/r.h5"
expect 2 "command line: precision.als = reference: the 2019 code trains in FP16" -- "$MPX" train "$tmp/ok.cfg" precision.mode=bf16 precision.scaling=adaptive precision.als=reference --out "$tmp/r.h5"
expect 2 "command line: \[precision\] optimizer_state = fp8" -- "$MPX" train "$tmp/ok.cfg" precision.optimizer_state=fp8 --out "$tmp/r.h5"
expect 2 "precision.fixed_frac is set but precision.mode is not fixed16" -- "$MPX" train "$tmp/ok.cfg" precision.fixed_frac=10 --out "$tmp/r.h5"
expect 2 "fixed_frac = 25" -- "$MPX" train "$tmp/ok.cfg" precision.mode=fixed16 precision.fixed_frac=25 --out "$tmp/r.h5"
# Without master weights the run file holds the lost-update statistics of every stats step.
expect 0 "resnet20, fp16, dynamic scaling" -- "$MPX" train "$tmp/ok.cfg" precision.mode=fp16 precision.scaling=dynamic precision.master_weights=false --out "$tmp/pure.h5"
expect 0 "update_lost" -- "$MPX" export "$tmp/pure.h5" updates --step 1
checks=$((checks + 1))
"$MPX" export "$tmp/pure.h5" updates | awk -F'\t' 'NR > 1 && $5 > 0 { n++ } END { exit !(n > 0) }' ||
  { fails=$((fails + 1)); echo "FAIL: no layer with nonzero updates in the updates export"; }
# getopt_long: --out=F as --out F, options after the overrides
expect 0 "resnet20, fp32, none scaling" -- "$MPX" train "$tmp/ok.cfg" --out="$tmp/eq.h5" train.steps=1 --force
checks=$((checks + 1))
[ -f "$tmp/eq.h5" ] || { fails=$((fails + 1)); echo "FAIL: --out=FILE did not write FILE"; }
expect 2 "unknown option '--frce'" -- "$MPX" train "$tmp/ok.cfg" --frce
expect 2 "missing CONFIG" -- "$MPX" train

# A run file is never overwritten without --force, and the refusal leaves it intact.
echo "precious" > "$tmp/exists.h5"
expect 2 "run file '.*exists.h5' exists; pass --force" -- "$MPX" train "$tmp/ok.cfg" --out "$tmp/exists.h5"
checks=$((checks + 1))
[ "$(cat "$tmp/exists.h5")" = "precious" ] || { fails=$((fails + 1)); echo "FAIL: run file clobbered"; }

# Exports of things that are not run files.
expect 2 "does not exist" -- "$MPX" export "$tmp/none.h5" train
expect 2 "not an HDF5 file" -- "$MPX" export "$tmp/exists.h5" train
expect 2 "unknown export 'trian'" -- "$MPX" export "$tmp/exists.h5" trian
expect 2 "needs RUN.h5 and WHAT" -- "$MPX" export "$tmp/exists.h5"
expect 2 "no checkpoint" -- "$MPX" eval "$tmp/none.h5"
printf 'garbage garbage garbage garbage' > "$tmp/bad.ckpt"
expect 2 "checkpoint '.*bad.ckpt' is not usable" -- "$MPX" eval "$tmp/bad.ckpt"

# mpx bench --overheads: every overhead in the JSON with its interval around it (six rounds
# are the fewest that give one), the adaptive ones also from the work timed in place, and the
# A/A control (base against its twin) both ways; every variant's host waits per step: one for
# a plain step (the step status), more for statistics every step, and for adaptive scaling one
# per branch merge on top only when a merge misses its assumed scale (never here).
expect 0 "the same from its work timed in place" -- \
  "$MPX" bench "$tmp/ok.cfg" precision.mode=fp16 --steps 6 --warmup 1 --overheads --json "$tmp/bench.json"
checks=$((checks + 1))
python3 - "$tmp/bench.json" <<'PY' || { fails=$((fails + 1)); echo "FAIL: bench JSON overheads"; }
import json, math, sys
o = json.load(open(sys.argv[1]))["overheads"]
for k in ["stats_every_1", "stats_every_100", "adaptive_update_every_1", "adaptive_update_every_100",
          "adaptive_update_every_1_parts", "adaptive_update_every_100_parts", "control", "control_parts"]:
    lo, hi = o[k + "_ci95"]
    assert math.isfinite(o[k]) and lo <= o[k] <= hi, (k, o[k], lo, hi)
w = {v["name"]: v["host_waits_per_step"] for v in json.load(open(sys.argv[1]))["variants"]}
assert w["fp16"] == w["base"] == w["control"] == w["als_cached"] == 1, w
assert w["stats"] > 1 and w["als_update"] > w["als_cached"], w
assert all(v["merge_redos_per_step"] == 0 for v in json.load(open(sys.argv[1]))["variants"])
# no layer of a ResNet gets all-zero gradient rows: nothing left out of its GEMMs
assert all(v["skipped_gflop_per_step"] == 0 for v in json.load(open(sys.argv[1]))["variants"])
PY

# The config's own mode is timed with its whole precision policy (here stochastic rounding
# without master weights), any other mode of --modes with that mode's defaults; every mode
# asked for is timed.
expect 0 "GFLOP" -- "$MPX" bench "$tmp/ok.cfg" precision.mode=fp16 precision.rounding=stochastic \
  precision.master_weights=false --steps 1 --warmup 0 --modes fp32,tf32,fp16,bf16 --json "$tmp/policy.json"
expect 2 "--modes: at most 6 modes \('fp32' is one too many\)" -- "$MPX" bench "$tmp/ok.cfg" \
  --steps 1 --warmup 0 --modes fp32,tf32,fp16,bf16,fp8,fixed16,fp32
checks=$((checks + 1))
python3 - "$tmp/policy.json" <<'PY' || { fails=$((fails + 1)); echo "FAIL: bench variants' precision policy"; }
import json, sys
v = {r["name"]: r for r in json.load(open(sys.argv[1]))["variants"]}
assert list(v) == ["fp32", "tf32", "fp16", "bf16"], list(v)
assert (v["fp16"]["rounding"], v["fp16"]["master_weights"]) == ("stochastic", False), v["fp16"]
assert (v["bf16"]["rounding"], v["bf16"]["master_weights"]) == ("rne", True), v["bf16"]
PY

# Bench JSON stays JSON whatever the config's name holds (quotes, backslashes, tabs).
cp "$tmp/ok.cfg" "$tmp/we\"ird\\	name.cfg"
expect 0 "GFLOP" -- "$MPX" bench "$tmp/we\"ird\\	name.cfg" --steps 1 --warmup 0 --modes fp32 --json="$tmp/weird.json"
checks=$((checks + 1))
python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert d["config"].endswith("we\"ird\\\tname.cfg"), d["config"]; assert d["host"]' "$tmp/weird.json" ||
  { fails=$((fails + 1)); echo "FAIL: bench JSON of a config with quotes in its name"; }

# GFLOP/s is the arithmetic done: BERT's linear backward leaves the all-zero gradient rows of
# the ignored MLM positions out of its GEMMs, and the bench subtracts them (needs the corpus).
if [ -f "${MPX_SOURCE_DIR:?}/../shared/data/text-corpus.tar.gz" ]; then
  expect 0 "GFLOP/s counts the arithmetic done" -- \
    "$MPX" bench "$MPX_SOURCE_DIR/experiments/configs/bert/smoke/fp32.cfg" --steps 2 --warmup 1 \
    --json "$tmp/bert.json"
  checks=$((checks + 1))
  python3 - "$tmp/bert.json" <<'PY' || { fails=$((fails + 1)); echo "FAIL: bench JSON skipped FLOPs"; }
import json, sys
b = json.load(open(sys.argv[1]))
for v in b["variants"]:
    s = v["skipped_gflop_per_step"]
    assert 0 < s < b["gflop_per_step"], (s, b["gflop_per_step"])
    done = (b["gflop_per_step"] - s) / v["median_s"]
    assert abs(v["gflops"] - done) <= 1e-4 * done, (v["gflops"], done)
PY
fi

echo "test_cli.sh: $checks checks, $fails failed"
[ "$fails" -eq 0 ]
