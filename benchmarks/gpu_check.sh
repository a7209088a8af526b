#!/usr/bin/env bash
# One GPU, under 8 minutes: measured peak GPU memory and seconds for
#   * one GRPO update of the tiny presets (tiny-wan, tiny-hunyuan15), and
#   * a training forward+backward of a real-width HunyuanVideo 1.5 / Wan 2.1 14B layer stack
#     (random weights built from the checkpoints' configs, --blocks blocks, 480p x 81 frames),
# each printed next to `grpo-bench plan`'s prediction (grpo_bench/train/plan.py).
#
#   benchmarks/gpu_check.sh                    # the check (needs a CUDA GPU)
#   benchmarks/gpu_check.sh --dry-run          # the plan column only: CPU, seconds, no model run
#   benchmarks/gpu_check.sh --blocks 4 --json gpu_check.json
#
# Then paste the table into docs/real_models.md ("Measured on a GPU").
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python )}"
if [[ " $* " != *" --dry-run "* ]] && ! "$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "gpu_check: no CUDA GPU visible; run with --dry-run for the predictions only" >&2
  exit 2
fi
exec timeout 480 "$PYTHON" benchmarks/gpu_check.py "$@"
