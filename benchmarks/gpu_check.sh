#!/usr/bin/env bash
# One GPU (an H200), under 10 minutes: measured peak GPU memory, seconds and achieved TFLOP/s for
#   * one GRPO update of the tiny presets (tiny-wan, tiny-hunyuan15);
#   * a training forward+backward of a real-width HunyuanVideo 1.5 / Wan 2.1 1.3B layer stack
#     (random weights built from the checkpoints' configs, --blocks blocks) at the shipped suites' shapes:
#     81 x 352 x 624 (20,003 tokens, hunyuan15_paper) and 33 x 480 x 832 (14,040 tokens, wan_small);
#   * float32-master vs bf16 HunyuanVideo stacks at 2 and 8 blocks (per-layer and recompute memory);
#   * dense vs key-padding attention at 70% text padding;
#   * the real-config HunyuanVideo 1.5 VAE decoding latents 21 x 22 x 39 (fp32 tiled, fp16 untiled);
#   * a VideoAlign-size (Qwen2-VL-2B) forward on 6 frames at 336 x 588;
#   * weights_changed of bf16 parameters vs float32 masters at lr 1e-5;
#   * a 1-process FSDP2 launch;
# each printed next to `grpo-bench plan`'s prediction (grpo_bench/plan/estimate.py), then measured / predicted
# per case (memory, and seconds per update for the tiny updates): the corrections `plan` needs, also in
# --json. benchmarks/gpu_check.py documents every case.
#
#   benchmarks/gpu_check.sh                    # the check (needs a CUDA GPU)
#   benchmarks/gpu_check.sh --dry-run          # the plan column only: CPU, seconds, no model run
#   benchmarks/gpu_check.sh --blocks 4 --json gpu_check.jsonl   # rows appended as they finish
#
# Then paste the table into docs/real_models.md ("Measured on a GPU").
#
# On a bare device (no diffusers, no registry) copy the tree with the wheelhouse that
# `python benchmarks/wheelhouse.py` builds here (./wheelhouse, ignored by git); this script then makes
# .venv-device (system site packages: the device's torch and transformers), installs the wheelhouse and the
# project into it offline, and runs the check, all in one command:
#   benchmarks/gpu_check.sh --json gpu_check.jsonl
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -d wheelhouse ] && [ -z "${PYTHON:-}" ] && ! python3 -c "import diffusers" 2>/dev/null; then
  if [ ! -x .venv-device/bin/python ]; then
    python3 -m venv --system-site-packages --without-pip .venv-device
    python3 -m pip --python .venv-device/bin/python install --quiet --no-index --no-deps wheelhouse/*.whl
    python3 -m pip --python .venv-device/bin/python install --quiet --no-index --no-deps --no-build-isolation -e .
  fi
  PYTHON=.venv-device/bin/python
fi
PYTHON="${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}"
if [[ " $* " != *" --dry-run "* ]] && ! "$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "gpu_check: no CUDA GPU visible; run with --dry-run for the predictions only" >&2
  exit 2
fi
exec timeout 570 "$PYTHON" benchmarks/gpu_check.py --cases all "$@"
