"""Real models at scale, checked on tiny random diffusers models (CPU, no download): micro-batched
rollout / gradient diagnostic / evaluation equal the unbatched ones, the text encoders leave the
accelerator after the prompts are cached, the key-padding attention equals diffusers' dense-mask
attention, evaluation shards are the single-process rows, and bf16 loading materialises each
component once in its own dtype."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from dist_train_script import ToyReward
from section_support import model_of

from grpo_bench.config.run import RunConfig
from grpo_bench.core.rollout import generator, rollout
from grpo_bench.errors import UserError
from grpo_bench.models.adapter_options import AdapterOptions
from grpo_bench.train.microbatch import MicroBatched, chunked

pytestmark = pytest.mark.filterwarnings("ignore")


def cfg_for(model: str = "tiny-wan", **kw) -> RunConfig:
    base = dict(model=model, method="flow_grpo", updates=1, steps=3, prompts_per_update=2, group_size=2, frames=5,
                height=16, width=16, lora_rank=2, device="cpu", eval_samples=2, diag_every=1, save_videos=False,
                eval_oracle=False, guidance=3.0, max_train_steps=2, kl="fixed")
    base.update(kw)
    return RunConfig(**base)


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    from grpo_bench.train.trainer import Trainer

    cfg = cfg_for()
    model = model_of(cfg)
    return Trainer(cfg, tmp_path_factory.mktemp("scale"), model, ToyReward())


def do_rollout(t, model, micro_batch):
    cfg, dev = t.cfg, t.device
    rows = [p for p in t.train_prompts[:2] for _ in range(2)]
    x0 = torch.randn(4, *t.model.latent_shape, generator=torch.Generator().manual_seed(1))
    steps = t.method.train_steps(t.sigmas, 4, generator(0, "steps", 0))
    anchors = {a: chunked(t.anchors.velocity(a), micro_batch) for a in t.anchors.names}
    return rollout(model, t.table, rows, x0, guidance=cfg.guidance, stored=t.stored, logprob=t.method.config.logprob,
                   sde_gen=generator(0, "sde", 0, dev), anchors=anchors, train_steps=steps)


def test_micro_batched_rollout_equals_unbatched(trainer):
    calls = []
    velocity = trainer.model.velocity

    def counting(x, s, c):
        calls.append(x.shape[0])
        return velocity(x, s, c)

    whole = do_rollout(trainer, trainer.model, 0)
    small = MicroBatched(trainer.model, 1)
    small.velocity = chunked(counting, 1)
    parts = do_rollout(trainer, small, 1)
    assert max(calls) == 1  # guidance doubles 4 rows to 8; never more than one per forward
    for name in ("x", "x_next", "logp_old", "mu_old", "videos"):
        torch.testing.assert_close(getattr(parts, name), getattr(whole, name), atol=1e-5, rtol=1e-4)
    for a in whole.mu_ref:
        torch.testing.assert_close(parts.mu_ref[a], whole.mu_ref[a], atol=1e-5, rtol=1e-4, equal_nan=True)


def test_micro_batched_gradient_diagnostic_equals_unbatched(trainer):
    from grpo_bench.core.loss import per_step_grad_norms

    ro = do_rollout(trainer, trainer.model, 0)
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5])
    whole = per_step_grad_norms(trainer.ctx, ro, adv, trainer.params, trainer.cfg.steps)
    parts = per_step_grad_norms(trainer.ctx, ro, adv, trainer.params, trainer.cfg.steps, micro_batch=1)
    trained = [i for i, g in enumerate(whole) if g is not None]
    assert trained and all(whole[i] > 0 for i in trained)
    assert [g is None for g in parts] == [g is None for g in whole]
    for i in trained:
        assert parts[i] == pytest.approx(whole[i], rel=1e-4)


def test_micro_batched_eval_equals_unbatched_and_shards_are_its_rows(trainer):
    from grpo_bench.config.sections import section
    from grpo_bench.train.evaluation import EvalOptions, evaluate, prompt_shard

    def run(model, acc=None):
        options = section(trainer.cfg, EvalOptions)
        return evaluate(model, ToyReward(), trainer.sigmas, options, trainer.device, trainer.autocast, acc=acc)

    metrics, rows, videos = run(trainer.model)
    m1, rows1, videos1 = run(MicroBatched(trainer.model, 1))
    torch.testing.assert_close(videos1, videos, atol=1e-5, rtol=1e-4)
    assert m1["eval_reward"] == pytest.approx(metrics["eval_reward"], rel=1e-4, abs=1e-6)
    assert [r["prompt"] for r in rows1] == [r["prompt"] for r in rows]

    class RankOf3:  # rank 1 of 3: sample its prompts only; the collective is out of scope here
        num_processes, process_index, device = 3, 1, torch.device("cpu")

        @staticmethod
        def gather(t):
            return torch.cat([t] * 3)

    n = trainer.cfg.eval_samples
    share = prompt_shard(len(rows) // n, 1, 3)
    _, _, mine = run(trainer.model, RankOf3())
    torch.testing.assert_close(mine, videos[share.start * n : share.stop * n], atol=1e-5, rtol=1e-4)
    if (len(rows) // n) % 3:  # FSDP2 (even_only) with uneven shares: every rank samples everything
        _, _, every = evaluate(trainer.model, ToyReward(), trainer.sigmas, section(trainer.cfg, EvalOptions),
                               trainer.device, trainer.autocast, acc=RankOf3(), even_only=True)
        torch.testing.assert_close(every, videos, atol=1e-5, rtol=1e-4)
    # every prompt on exactly one rank, shares differ by at most one
    for total, world in [(8, 3), (2, 4), (7, 7)]:
        shares = [prompt_shard(total, r, world) for r in range(world)]
        assert [i for s in shares for i in range(s.start, s.stop)] == list(range(total))
        assert max(s.stop - s.start for s in shares) - min(s.stop - s.start for s in shares) <= 1


def test_text_encoders_leave_after_caching_and_are_not_called_in_training(tmp_path):
    from grpo_bench.config.prompts import load_prompt_set
    from grpo_bench.train.trainer import Trainer

    cfg = cfg_for(diag_every=0)
    model = model_of(cfg)
    t = Trainer(cfg, tmp_path, model, ToyReward())
    prompts = load_prompt_set(cfg.prompts)
    assert set(model._cache) >= {*prompts.train, *prompts.eval, ""}
    assert model.text_encoders_offloaded and model.encode_device.type == "cpu"
    assert next(model.pipe.text_encoder.parameters()).device.type == "cpu"
    calls = []
    model.encode_batch = lambda p: calls.append(p)
    t.update(0)
    t.evaluate()
    assert calls == []  # every prompt came from the cache
    freed = model_of(cfg)
    n = freed.release_text_encoders(free=True)
    assert n > 0 and freed.pipe.text_encoder is None
    with pytest.raises(UserError, match="not encoded before the text encoders were released"):
        freed.encode_prompts(["a red circle"])


def test_key_padding_attention_equals_the_dense_mask():
    from grpo_bench.models.hunyuan15 import tiny_hunyuan15

    fast = tiny_hunyuan15(AdapterOptions(frames=9, height=16, width=16))
    dense = tiny_hunyuan15(AdapterOptions(frames=9, height=16, width=16, efficient_attention=False))
    kinds = {type(m.processor).__name__ for m in fast.pipe.transformer.modules() if hasattr(m, "processor")}
    assert "KeyPaddingAttnProcessor" in kinds
    prompts = ["a red circle", "a blue square moving left slowly with the cat", ""]  # three padding lengths
    x = torch.randn(3, *fast.latent_shape, generator=torch.Generator().manual_seed(0))
    s = torch.tensor([0.9, 0.5, 0.2])
    with torch.no_grad():
        v_fast, v_dense = (fast.velocity(x, s, fast.encode_prompts(prompts)),
                           dense.velocity(x, s, dense.encode_prompts(prompts)))
    assert bool(fast.encode_prompts(prompts)["prompt_embeds_mask"].eq(0).any())  # padding is present
    torch.testing.assert_close(v_fast, v_dense, atol=1e-5, rtol=1e-5)


def test_bf16_loading_materialises_each_component_in_its_dtype(tmp_path):
    from grpo_bench.models.wan import WanModel, tiny_wan_pipeline

    tiny_wan_pipeline().save_pretrained(tmp_path / "wan")
    for lora, param_dtype, want in [(2, "float32", torch.bfloat16), (0, "float32", torch.float32),
                                    (0, "bf16", torch.bfloat16)]:
        opts = AdapterOptions(frames=5, height=16, width=16, lora_rank=lora, mixed_precision="bf16",
                              param_dtype=param_dtype, max_sequence_length=16)
        model = WanModel.from_pretrained(str(tmp_path / "wan"), dataclasses.replace(opts))
        keep = tuple(model.net.transformer._keep_in_fp32_modules or ())  # diffusers keeps these float32
        base = [p for n, p in model.net.named_parameters()
                if "lora_" not in n and not any(k in n.split(".") for k in keep)]
        assert {p.dtype for p in base} == {want}, (lora, param_dtype)
        assert next(model.pipe.text_encoder.parameters()).dtype == torch.bfloat16
        assert {p.dtype for p in model.pipe.vae.parameters()} == {torch.float32}


def test_key_padding_attention_does_not_read_the_mask_back_to_the_host(monkeypatch):
    """bool(tensor) / .item() in an attention call would synchronise the GPU once per layer and step."""
    from grpo_bench.models.hunyuan15 import tiny_hunyuan15
    from grpo_bench.models.hunyuan_attention import KeyPaddingAttnProcessor

    model = tiny_hunyuan15(AdapterOptions(frames=9, height=16, width=16))
    attn = next(m for m in model.pipe.transformer.modules() if isinstance(getattr(m, "processor", None),
                                                                          KeyPaddingAttnProcessor))
    dim = attn.to_q.in_features
    hidden, text = torch.randn(2, 6, dim), torch.randn(2, 4, attn.add_q_proj.in_features)
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])

    def no_host_read(*_a, **_k):
        raise AssertionError("the processor read a tensor back to the host")

    monkeypatch.setattr(torch.Tensor, "__bool__", no_host_read)
    monkeypatch.setattr(torch.Tensor, "item", no_host_read)
    with torch.no_grad():
        out, enc = attn.processor(attn, hidden, text, mask)
    monkeypatch.undo()
    assert out.shape == (2, 6, dim) and torch.isfinite(out).all()
