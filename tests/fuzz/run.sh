#!/usr/bin/env bash
# run.sh — make fuzz: build the libFuzzer targets with clang + ASan/UBSan in build-fuzz/ and
# run each for FUZZ_SECONDS (default 60) on its corpus in tests/fuzz/corpus/<target>/ (new
# inputs that add coverage go to build-fuzz/corpus/<target>/, the committed seeds are not
# touched). A crash, leak or sanitizer report fails the run and leaves the input in build-fuzz/.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
secs=${FUZZ_SECONDS:-60}
build=$root/build-fuzz
command -v clang >/dev/null || { echo "make fuzz: clang is not installed (apt-get install clang)" >&2; exit 2; }
cmake -S "$root" -B "$build" -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug -DMPX_FUZZ=ON -DMPX_CUDA=OFF \
  -DMPX_WERROR=OFF -DMPX_SANITIZE=ON -DCMAKE_C_FLAGS="-fsanitize=fuzzer-no-link -O1" > "$build.configure.log" 2>&1 \
  || { cat "$build.configure.log"; exit 1; }
targets=$(cd "$root/tests/fuzz" && ls fuzz_*.c | sed 's/\.c$//')
cmake --build "$build" -j "$(nproc)" --target $targets
failed=0
for t in $targets; do
  mkdir -p "$build/corpus/$t" "$build/artifacts/$t"
  seeds=$root/tests/fuzz/corpus/$t
  echo "fuzz: $t for ${secs} s"
  if ! (cd "$build/artifacts/$t" && ASAN_OPTIONS=detect_leaks=1 "$build/fuzz/$t" -max_total_time="$secs" \
        -max_len=65536 -print_final_stats=1 "$build/corpus/$t" "$seeds" > "$build/$t.log" 2>&1); then
    echo "fuzz: $t FOUND A PROBLEM: see $build/$t.log and $build/artifacts/$t/"; failed=$((failed + 1))
  else
    grep -E "stat::number_of_executed_units|stat::new_units_added" "$build/$t.log" | tr '\n' ' '; echo
  fi
done
[ "$failed" -eq 0 ] && echo "fuzz: no findings" || { echo "fuzz: $failed target(s) with findings" >&2; exit 1; }
