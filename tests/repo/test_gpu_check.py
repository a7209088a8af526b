"""benchmarks/gpu_check.py on the CPU: cases isolated, rows kept as they finish, warm-up before the measured
step, the stack and master predictions on the measurement's basis, the VideoAlign case's Qwen2-VL inputs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_check  # noqa: E402
import gpu_check_cases as cases  # noqa: E402

TINY_QWEN2VL = dict(
    text_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                     num_key_value_heads=1, vocab_size=151936,
                     rope_parameters={"rope_type": "default", "mrope_section": [2, 3, 3], "rope_theta": 10000.0}),
    vision_config=dict(embed_dim=32, depth=1, num_heads=2, hidden_size=32))


def test_a_failing_case_is_a_row_and_earlier_rows_are_on_disk(tmp_path, monkeypatch):
    out = tmp_path / "rows.jsonl"
    seen_before_last: list[int] = []

    def ok(name):
        def case(ctx):
            yield cases.row(name, predicted_gb=1.0, measured_gb=None)
        return case

    def broken(ctx):
        yield cases.row("half done", predicted_gb=2.0)
        raise RuntimeError("out of memory in block 3")

    def last(ctx):
        seen_before_last.append(len(out.read_text().splitlines()))  # what a kill here would leave
        yield cases.row("last", predicted_gb=1.0)

    for name, case in (("first", ok("first")), ("broken", broken), ("last", last)):
        monkeypatch.setitem(gpu_check.CASES, name, case)
    rows = gpu_check.main(["--device", "cpu", "--cases", "first,broken,last", "--json", str(out)])
    written = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["case"] for r in written] == ["first", "half done", "broken FAILED", "last"]
    assert written[2]["error"] == "RuntimeError: out of memory in block 3"
    assert seen_before_last == [3]  # every earlier row, the failure's included, was written before the next case
    assert [r["case"] for r in rows] == [r["case"] for r in written]


def test_unknown_case_is_refused_before_anything_runs():
    with pytest.raises(SystemExit, match="unknown case 'stak'"):
        gpu_check.main(["--device", "cpu", "--cases", "tiny,stak"])


def test_measure_warms_up_then_measures_the_second_run():
    calls: list[str] = []

    def step():
        calls.append("step")
        return len(calls)

    peak = cases.measure(step, torch.device("cpu"), lambda: calls.append("between"))
    assert calls == ["step", "between", "step"]
    assert peak.result == 3 and peak.seconds >= 0 and peak.bytes >= 0


def test_layer_terms_recover_per_layer_and_rest():
    per_layer, rest = 7.5e6, 3.25e8
    assert cases.layer_terms({8: 8 * per_layer + rest, 2: 2 * per_layer + rest}) == pytest.approx((per_layer, rest))


def test_stack_prediction_excludes_the_resident_weights():
    """The measurement starts with the weights resident, so the prediction is gradients (+ autocast copies of
    float32 masters) + activations: the plan's own terms, no weights."""
    from grpo_bench.plan.costs import AUTOCAST_COPY_BYTES, training_activation_bytes

    _, inputs, spec, _ = cases.build_stack("hunyuan15-stack", 2, cases.Context(
        gpu_check.parse_args(["--dry-run", "--device", "cpu"]), torch.device("cpu"), ""), torch.bfloat16)
    p, act = spec.transformer_params, training_activation_bytes(spec, 1, True, bf16=True)
    assert cases.above_weights_prediction(spec, p, 2) == p * 2 + act
    assert cases.above_weights_prediction(spec, p, 4) == p * 4 + p * AUTOCAST_COPY_BYTES + act


def test_dry_run_master_rows_are_positive_and_on_one_basis():
    rows = gpu_check.main(["--dry-run", "--device", "cpu", "--cases", "master"])
    by = {r["case"].strip(): r for r in rows}
    assert all(r["predicted_gb"] > 0 for r in rows) and not any(r.get("error") for r in rows)
    # eight blocks add six layers' gradients and checkpointed inputs to two blocks' prediction
    assert by["hunyuan15 bf16 (8 blocks)"]["predicted_gb"] > by["hunyuan15 bf16 (2 blocks)"]["predicted_gb"]


def test_videoalign_case_runs_a_tiny_qwen2vl_on_the_cpu():
    ctx = cases.Context(gpu_check.parse_args(["--device", "cpu"]), torch.device("cpu"), "")
    (r,) = list(cases.run_videoalign(ctx, shape=TINY_QWEN2VL))
    assert r["tokens"] == 3 * 24 * 42 // 4 + 128  # 6 frames / 2 x 336 / 14 x 588 / 14 patches, 2 x 2 merged
    assert r["measured_gb"] is not None and r["seconds"] > 0 and r["weights_gb"] > 0


def test_videoalign_inputs_mark_the_video_tokens():
    from transformers import Qwen2VLConfig

    conf = Qwen2VLConfig(**TINY_QWEN2VL)
    x = cases.videoalign_inputs(conf, 4, 56, 84, 10, torch.device("cpu"), torch.float32)
    video = x["input_ids"][0] == conf.video_token_id
    assert int(video.sum()) == 2 * 4 * 6 // 4 == x["pixel_values_videos"].shape[0] // 4
    assert torch.equal(x["mm_token_type_ids"][0] == cases.VIDEO_TOKEN_TYPE, video)
    assert x["video_grid_thw"].tolist() == [[2, 4, 6]]


def test_the_tiny_case_reports_the_train_inference_logp_gap(tmp_path):
    """gpu_check's tiny rows carry logp_gap, the mean |log p_train - log p_rollout| of the second update's first
    optimizer step at the rollout's parameters: measured, finite, and inside the liveness threshold on a CPU."""
    from types import SimpleNamespace

    ctx = cases.Context(SimpleNamespace(dry_run=False), torch.device("cpu"), str(tmp_path))
    (r,) = list(gpu_check.run_tiny("tiny-wan", ctx))
    assert r["logp_gap"] is not None and 0.0 <= r["logp_gap"] < 1e-4
