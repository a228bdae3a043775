#!/usr/bin/env bash
# run_formats.sh — the formats experiment (make experiment-formats): for ResNet-50 and BERT, the
# methods of formats.list (FP32, BF16, FP16 with dynamic and adaptive loss scaling, the FP8
# recipes, 16-bit fixed point with both roundings) through run_experiment.sh, which writes their
# run files, figures and the model's table with the formats claims (experiments/claims/).
#
#   experiments/run_formats.sh [SCALE] [SEEDS]      (SCALE smoke or small; PARALLEL, RESULTS, ...
#                                                    as for run_experiment.sh)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
for model in resnet50 bert; do
  METHODS=formats bash "$root/experiments/run_experiment.sh" "$model" "${1:-small}" "${2:-1}"
done
