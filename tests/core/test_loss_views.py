"""The views a plug-in loss family reads (core/loss_views.py): built by core from its records for every call, each
tensor the one of the sample's own row and step, the velocity calls guided as the rollout was."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest
import torch
from tiny_world import TinyModel

from grpo_bench import api
from grpo_bench.config.run import RunConfig
from grpo_bench.core import loss_views, schedule
from grpo_bench.core.loss import LOSS_FAMILIES, LossContext, StepTerms, register_loss_family, step_terms
from grpo_bench.core.loss_views import LossSamples, LossVelocities
from grpo_bench.core.method import make_method
from grpo_bench.core.rollout import Rollout, StepTable
from grpo_bench.core.sampling import GUIDANCE_FORMULAS
from grpo_bench.core.trust_region import make_kl

B, SHAPE = 4, TinyModel.latent_shape
STORED = torch.tensor([1, 3])  # slot(1) = 0, slot(3) = 1: a step is not its slot
PARAMS = object()  # the method's parameters, passed through untouched


@pytest.fixture
def captured():
    """A plug-in family registered for the test: it keeps the views it is handed and calls what ``calls`` says."""
    seen: dict = {"calls": lambda velocity, x, sigma: None}

    def capture(samples: LossSamples, velocity: LossVelocities, params) -> StepTerms:
        seen.update(samples=samples, velocity=velocity, params=params)
        seen["calls"](velocity, samples.final, samples.sigma)
        zero = torch.zeros(len(samples.sigma))
        return StepTerms(zero, {"kl": zero}, zero + 1, forward_rows=velocity.rows)

    returned = register_loss_family("capture_views", needs_logprob=False)(capture)
    seen["returned"] = returned is capture
    yield seen
    LOSS_FAMILIES.unregister("capture_views")


def _case(guidance: float = 1.0, formula: str = "cfg", detach_uncond: bool = False):
    model, anchor, other = TinyModel(seed=0), TinyModel(seed=1), TinyModel(seed=2)
    g = torch.Generator().manual_seed(0)
    prompts = ["a red circle moving left", "a blue square moving up", "a green circle moving right",
               "a red square moving down"]
    final = torch.randn(B, *SHAPE, generator=g)
    noise = torch.randn(B, len(STORED), *SHAPE, generator=g)
    slot = torch.full((4,), -1, dtype=torch.long)
    slot[STORED] = torch.arange(len(STORED))
    zeros = torch.zeros(B, len(STORED), *SHAPE)
    ro = Rollout(prompts=prompts, cond=model.encode_prompts(prompts), stored=STORED, slot=slot, x=zeros,
                 x_next=zeros, logp_old=torch.zeros(B, len(STORED)), mu_old=zeros, mu_ref={}, videos=final,
                 final=final, noise=noise)
    table = StepTable.build(make_method("diffusion_nft"), schedule.sigmas(4, 3.0))
    ctx = LossContext(model, table, torch.tensor([0.5, 1.5, 2.5, 3.5]), make_kl(RunConfig(kl="none")), 1e-4,
                      "gaussian", guidance, live_anchors={"own": anchor.velocity, "kl_anchor": other.velocity},
                      family="capture_views", method_params=PARAMS, method_anchors=("own",),
                      detach_uncond=detach_uncond, guidance_formula=formula)
    return ctx, ro, model, anchor


def test_a_family_reads_each_samples_own_row_and_step(captured):
    """Rows [2, 0] at steps [3, 1]: the final latents of rows 2 and 0, the noise the rollout drew for (2, step 3)
    (slot 1) and (0, step 1) (slot 0), the steps' sigmas and equalizer weights, the rows' advantages."""
    ctx, ro, _, _ = _case()
    rows, steps = torch.tensor([2, 0]), torch.tensor([3, 1])
    adv = torch.tensor([10.0, 11.0, 12.0, 13.0])
    step_terms(ctx, ro, adv, rows, steps)
    s = captured["samples"]
    assert torch.equal(s.final, ro.final[[2, 0]])
    assert torch.equal(s.noise[0], ro.noise[2, 1]) and torch.equal(s.noise[1], ro.noise[0, 0])
    assert torch.equal(s.sigma, ctx.table.sigma[[3, 1]]) and torch.equal(s.weight, torch.tensor([3.5, 1.5]))
    assert torch.equal(s.advantages, torch.tensor([12.0, 10.0]))
    assert captured["params"] is PARAMS and captured["returned"]  # the plug-in's function stays its own
    with pytest.raises(AttributeError):
        s.final = s.noise  # a view: read-only


@pytest.mark.parametrize("guidance,formula", [(1.0, "cfg"), (2.0, "cfg"), (3.0, "norm_rescaled")])
def test_velocity_calls_are_guided_as_the_rollout_and_counted(captured, guidance, formula):
    """policy(x, sigma) and anchor(name, x, sigma) are the guided velocities of the trained model and of the
    method's own anchor at the samples' prompts: each half an independent call here, combined by the run's
    formula; the anchor's without gradient; a guided call counts two rows per sample."""
    ctx, ro, model, anchor = _case(guidance, formula, detach_uncond=True)
    out = {}

    def calls(velocity, x, sigma):
        out["v"], out["v_anchor"] = velocity.policy(x, sigma), velocity.anchor("own", x, sigma)
        with pytest.raises(KeyError, match="no anchor 'kl_anchor'; the method's live anchors: own"):
            velocity.anchor("kl_anchor", x, sigma)  # the KL variant's anchor is not the family's

    captured["calls"] = calls
    rows, steps = torch.tensor([3, 1, 0]), torch.tensor([1, 3, 3])
    terms = step_terms(ctx, ro, torch.zeros(B), rows, steps)
    x, sigma = ro.final[rows], ctx.table.sigma[steps]
    cond, null = model.encode_prompts([ro.prompts[i] for i in rows.tolist()]), model.null_cond(3)

    def guided(net):
        v_cond = net.velocity(x, sigma, cond)
        return v_cond if guidance == 1.0 else GUIDANCE_FORMULAS.get(formula)(net.velocity(x, sigma, null), v_cond,
                                                                          guidance)

    torch.testing.assert_close(out["v"], guided(model), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out["v_anchor"], guided(anchor), rtol=1e-5, atol=1e-6)
    assert out["v"].requires_grad and not out["v_anchor"].requires_grad
    assert captured["velocity"].anchors == ("own",)
    assert terms.forward_rows == 2 * 3 * (2 if guidance != 1.0 else 1)


def test_the_views_are_documented_field_by_field():
    """Every field of ``LossSamples`` carries a docstring, and so does every public member of ``LossVelocities``:
    the views are the whole contract of a plug-in family."""
    tree = ast.parse(inspect.getsource(loss_views))
    samples = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "LossSamples")
    body = samples.body
    fields = [n.target.id for n in body if isinstance(n, ast.AnnAssign)]
    documented = [body[i].target.id for i in range(len(body) - 1)
                  if isinstance(body[i], ast.AnnAssign) and isinstance(body[i + 1], ast.Expr)
                  and isinstance(body[i + 1].value, ast.Constant) and isinstance(body[i + 1].value.value, str)]
    assert fields == ["final", "noise", "sigma", "advantages", "weight"] and documented == fields
    for name, member in vars(LossVelocities).items():
        if not name.startswith("_"):
            assert (getattr(member, "fget", None) or member).__doc__, name


def test_the_documented_family_runs_on_the_views():
    """docs/adding_a_method.md §7's loss family, run as written on hand-made views, computes what it says."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "adding_a_method.md").read_text()
    block = next(b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "register_loss_family" in b)
    namespace = {"torch": torch, **{name: getattr(api, name) for name in api.__all__}}
    try:
        exec(block, namespace)  # noqa: S102 - the repository's own documentation
        family = namespace["my_terms"]
        g = torch.Generator().manual_seed(0)
        final, noise = torch.randn(2, *SHAPE, generator=g), torch.randn(2, *SHAPE, generator=g)
        sigma, adv, weight = torch.tensor([0.9, 0.4]), torch.tensor([1.0, -2.0]), torch.tensor([1.0, 0.5])
        model, old = TinyModel(seed=0), TinyModel(seed=1)
        cond = model.encode_prompts(["a red circle moving left"] * 2)
        velocity = LossVelocities.guided(model.velocity, {"my_old": old.velocity}, cond, None, 1.0)
        terms = family(LossSamples(final, noise, sigma, adv, weight), velocity, None)
    finally:
        LOSS_FAMILIES.unregister("my_flow_matching")
    t = sigma.view(-1, 1, 1, 1, 1)
    xt = (1 - t) * final + t * noise
    gap = (model.velocity(xt, sigma, cond) - old.velocity(xt, sigma, cond)).pow(2).flatten(1).mean(1)
    torch.testing.assert_close(terms.policy, -weight * adv * gap)
    assert terms.forward_rows == 4  # two calls of two rows
