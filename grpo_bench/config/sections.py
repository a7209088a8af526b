"""The components of a run config, one dataclass each, every option once with its default and doc, and their
sections (docs/design.md §1): ``COMPONENTS`` names them, ``section`` builds one from a run config (what a core
component is built from), ``flatten_sections`` spells a mapping with nested sections as the flat keys every
config reads. ``RunConfig`` (config/run.py) combines them; the generator's section is models/options.py.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, TypeVar

from pydantic import Field

from grpo_bench import params as plugin_params
from grpo_bench.errors import UserError, unknown
from grpo_bench.fields import (
    AtLeast1,
    FieldRules,
    Float,
    Int,
    Ints,
    MaybeBool,
    MaybeFloat,
    MaybeInt,
    MaybeInts,
    MaybeName,
    Name,
    Names,
    NonNegative,
    Positive,
    execution,
    upto,
)
from grpo_bench.models.options import GeneratorOptions

T = TypeVar("T")


# --- the components ------------------------------------------------------------------------------
@dataclass
class Compared:
    """What is compared: the method, the reward and its weights, the generator, the prompts."""

    method: Name = "sage_grpo"
    """Registered method (`grpo-bench methods`)."""
    method_revision: Annotated[Int, Field(ge=0)] = 0
    """The method recipe's revision, filled in by ``resolve`` from the method file (``Method.revision``): it
    enters the cell id when non-zero, so a corrected recipe never resumes or restores cells of the old one."""
    setting: Name = "A"
    """Reward weights: A = (VQ, MQ, TA) (1, 1, 1); B = (0.5, 0.5, 1)."""
    seed: Annotated[Int, Field(ge=0, le=2**63 - 1, json_schema_extra={"range": "0..2**63-1"})] = 0
    """Run seed: prompt order, initial noise and SDE noise derive from it (shared across methods)."""
    model: Name = "world"
    """Generator: 'world' (embedded) or a diffusers preset / hub id / local folder."""
    reward: Name = "world_judge"
    """Training reward (registered in grpo_bench.rewards)."""
    prompts: Name = "world"
    """Prompt set: 'world' (40 train / 8 held-out eval prompts) or a file (YAML train/eval lists, or one per line)."""
    eval_oracle: bool = True
    """Score eval videos with the world's exact oracle (world prompts only; off for real models)."""
    reward_path: Name = ""
    """Folder of the reward's weights ('' = its hub id in the local cache): VideoAlign's VideoReward
    checkpoint, the CLIP / PickScore model, or the world judge's .safetensors."""
    reward_base_path: Name = ""
    """Second folder some rewards need ('' = default): VideoAlign's base Qwen2-VL-2B-Instruct,
    PickScore's processor (CLIP-ViT-H-14)."""


@dataclass
class MethodOptions:
    """The method's options (None = the method's default, methods/*.py) and plug-in parameters."""

    kernel: MaybeName = None
    """Registered step kernel at the stochastic steps (`grpo-bench methods` lists them); None: the method's own.
    Any method runs with any kernel, so "method x sampler" is a grid (its noise_level is that kernel's scale)."""
    noise_level: MaybeFloat = None
    """Kernel noise scale (eta or a)."""
    step_rule: MaybeName = None
    """Registered step rule: which steps of an update are SDE and trained (all, window, sparse, branch;
    core/step_rules.py), its parameters as ``steps.<key>`` (``steps.size=3``); None: the method's own. Any method
    runs with any rule, so "method x step rule" is a grid."""
    objective: MaybeName = None
    """Registered per-step ratio objective (clipped, kl_mask, ratio_norm, noise_weighted); None: the method's own.
    A policy-gradient method takes any; a likelihood-free loss family none. A chosen objective runs at its own
    defaults (another method's ``method.*`` are not its parameters)."""
    logprob: MaybeName = None
    """'gaussian' or 'unscaled'."""
    score_term: MaybeBool = None
    """Score correction in the SDE mean."""
    train_fraction: MaybeFloat = None
    """Random share of eligible steps trained per sample."""
    max_train_steps: MaybeInt = 3
    """Cap on trained steps per sample: a random subset of the method's eligible steps, drawn per
    sample. The world default 3 keeps an update cheap and the training compute equal across methods;
    null restores each method's own selection (every eligible step, or DanceGRPO's 60%)."""
    shared_noise: MaybeBool = None
    """Same initial noise for all rollouts of a prompt."""
    clip_range: MaybeFloat = None
    """PPO ratio clip epsilon."""
    kl: MaybeName = None
    """KL trust region: none, fixed, flow_grpo, stepwise, moving, dual."""
    equalizer: MaybeBool = None
    """Per-step gradient-norm equalizer S_i."""
    window: MaybeInts = None
    """[k, w]: SDE and training only on steps k..k+w-1."""
    params: dict[str, Any] = field(default_factory=dict)
    """Plug-in parameters as dotted keys ({"kernel.gamma": 0.3, "kl.tau": 0.9, "anchor.tau": 0.99});
    set them as top-level dotted keys in YAML or ``kernel.gamma=0.3`` on the command line."""
    equalizer_proxy: Literal["auto", "gaussian", "logprob", "mismatched_gaussian"] = "auto"
    """What the equalizer divides by. 'auto' (= 'logprob'): the run's log-prob form's own per-step sensitivity,
    the proxy that equalizes that form (lambda/std for the Gaussian density, SAGE-GRPO's; lambda*std for CPS's
    unscaled surrogate). 'gaussian': lambda/std, accepted only where it is that form's own proxy.
    'mismatched_gaussian': lambda/std on a form it does not fit, an explicitly labelled ablation row (for CPS
    it widens the per-step spread instead of removing it)."""


METHOD_OPTIONS = tuple(f.name for f in dataclasses.fields(MethodOptions)
                       if f.name not in ("params", "equalizer_proxy"))
"""The keys a method reads as its options (``make_method(**cfg.method_overrides())``, core/method.py)."""


@dataclass
class MethodChoice(MethodOptions):
    """The method and its options: the section a builder that needs the run's method reads
    (config/recipe.py ``UpdateShape``), and what ``build`` makes, as ``RunConfig.method_overrides`` does."""

    method: Name = "sage_grpo"
    """Registered method (`grpo-bench methods`)."""

    def build(self) -> Any:
        """The method (core/method.py ``make_method``) with the options this section sets (None: its own)."""
        from grpo_bench.core.method import make_method

        overrides: dict[str, Any] = {k: getattr(self, k) for k in METHOD_OPTIONS if getattr(self, k) is not None}
        if self.params:
            overrides["params"] = dict(self.params)
        return make_method(self.method, **overrides)


@dataclass
class Sampling:
    """The rollout sampler and batch."""

    steps: Annotated[AtLeast1, upto(1000)] = 10
    """Sampler steps T."""
    shift: Positive = 3.0
    """Schedule shift."""
    guidance: Positive = 1.0
    """Classifier-free guidance scale (1 = off; >1 doubles the batch in one call)."""
    detach_uncond: bool = False
    """Under guidance, the training forward detaches the unconditional half, as FlowGRPO does
    (yifan123/flow_grpo scripts/train_sd3.py:190 ``noise_pred_uncond.detach()``): the gradient of
    v_u + g (v_c - v_u) is then g dv_c instead of g dv_c + (1 - g) dv_u. Sampling is unchanged."""
    guidance_formula: Literal["cfg", "norm_rescaled"] = "cfg"
    """How guidance combines the halves (core/sampling.py ``GUIDANCE_FORMULAS``) wherever the run samples or
    trains: 'cfg' v_u + g (v_c - v_u), or 'norm_rescaled', Qwen-Image's true CFG (that combination rescaled per
    2 x 2 latent token to the conditional prediction's norm; the qwen-image recipe's)."""
    prompts_per_update: Annotated[AtLeast1, upto(4096)] = 2
    """P: prompt groups per update (world default sized for ~10 min per 200 updates on 2 cores)."""
    group_size: Annotated[Int, Field(ge=2, json_schema_extra={"below": "GRPO needs a group"}), upto(4096)] = 8
    """G: rollouts per prompt (>= 2)."""
    video_size: Annotated[Int, upto(512)] = 16
    """World video height/width (16 or 24)."""


@dataclass
class Optimisation:
    """The policy update: optimizer, batching, advantages."""

    updates: Annotated[AtLeast1, upto(10_000_000)] = 200
    """Number of rollout+train iterations."""
    lr: Positive = 1e-4
    """AdamW learning rate. Set on the world by the step size it produces, not by any reward (a reward
    is what the benchmark judges): measured with sage_grpo (P=2, G=8, T=10), the KL between consecutive
    policies is 5e-5..2.5e-4 per optimizer step at 1e-4 (median 7e-5) and 3e-3..1.2e-1 at 1e-3
    (median 2e-2): 1e-3 leaves any trust region of the world's scale in one step."""
    weight_decay: Annotated[Float, Field(ge=0)] = 0.0
    """Decoupled weight decay of the optimizer (SAGE-GRPO's official 0.01: post_train.py
    ``--weight_decay`` default)."""
    max_grad_norm: Positive = 1.0
    """Gradient-norm clip."""
    inner_epochs: Annotated[AtLeast1, upto(1000)] = 1
    """Optimizer passes over each rollout batch."""
    minibatches: AtLeast1 = 2
    """Optimizer steps per pass (the batch is split; gradients accumulate within each). The default 2
    gives every rollout two optimizer steps (as DanceGRPO and FlowGRPO take): only from the second
    on does the policy differ from the rollout policy, so that the PPO ratio moves, the clip can act
    and the step-wise KL is non-zero. With 1, every method is group-baseline REINFORCE."""
    step_every: Literal["minibatch", "micro_step"] = "minibatch"
    """When the optimizer steps: 'minibatch' = once per minibatch, the gradients of its (sample, trained
    step) pairs accumulated: ``inner_epochs`` x ``minibatches`` optimizer steps per rollout, as the official
    codes accumulate (SAGE-GRPO and DanceGRPO's Wan script: 1 per rollout; DanceGRPO's HunyuanVideo
    script: 2; FlowGRPO: 2 per epoch; docs/real_models.md); 'micro_step' = after every (sample, trained
    step) backward (samples x trained steps per pass; no official recipe steps so)."""
    bestofn: NonNegative = 0
    """DanceGRPO's best-of-n: train only the bestofn/2 highest- and bestofn/2 lowest-advantage rollouts
    of each group (0 = every rollout; its HunyuanVideo script: 8 of 24)."""
    optimizer: Literal["adamw", "muon"] = "adamw"
    """'adamw' (torch.optim.AdamW), or 'muon': torch.optim.Muon on the 2-D hidden weight matrices and
    AdamW on embeddings, norms, biases and the output layer (train/optimizers.py), as SAGE-GRPO's
    ``--use_muon`` (its default)."""
    micro_batch: NonNegative = execution(0)
    """Samples per training forward (0 = the whole minibatch); lower it to fit GPU memory. It bounds
    memory only: no optimizer step, KL-schedule step or anchor copy depends on it."""
    adv_clip: Positive = 5.0
    """Advantage clip (±)."""
    on_bad_reward: Literal["error", "zero"] = "error"
    """Non-finite reward: 'error' stops the run, 'zero' gives that sample A = 0."""
    adv_norm: Literal["group", "group_unbiased", "global"] | None = "group"
    """Advantage scale: 'group' = each group's population std (SAGE-GRPO), 'group_unbiased' = each
    group's unbiased std (DanceGRPO's torch.std), 'global' = the std of the whole batch's rewards,
    centred per group (FlowGRPO's global_std); null: the method's own (its ``MethodConfig.adv_norm``; the
    as-shipped readings), filled in by ``resolve``."""


@dataclass
class KLWeighting:
    """The KL weight: constant, or a warm-up then feedback on the measured KL (core/kl_weight.py)."""

    kl_weight: Annotated[Float, Field(ge=0)] = 0.05
    """Constant KL weight (used when kl_adaptive is false)."""
    kl_adaptive: bool = True
    """Warm-up from kl_beta_min to kl_beta_max over kl_warmup updates, then feedback on kl_target."""
    kl_beta_min: Annotated[Float, Field(ge=0)] = 1e-3
    """Adaptive KL weight: start and floor. World-calibrated: the paper's 1e-7 -> 1e-5 range is for
    HunyuanVideo latents; on the world |grad KL| ~ 2 * sqrt(KL / 0.04) against |grad policy| ~ 0.02,
    so weights ~1e-3 .. 1e-1 span "negligible" to "holds KL near 1e-3"."""
    kl_beta_max: Float = 1e-1
    """Adaptive KL weight: end of the warm-up and ceiling (>= kl_beta_min)."""
    kl_warmup: NonNegative = 50
    """Adaptive KL weight: linear warm-up length in updates."""
    kl_target: Positive = 1e-3
    """Adaptive KL weight: target of the mean KL over the last kl_window updates (see kl_target_auto)."""
    kl_window: AtLeast1 = 10
    """Adaptive KL weight: feedback on the mean KL of the last N updates."""
    kl_schedule_unit: Literal["update", "optimizer_step"] = "update"
    """What kl_warmup and kl_window count and when the adaptive weight feeds back: 'update' (once per
    update, on its mean KL) or 'optimizer_step' (after every optimizer step, on that step's mean KL, as
    SAGE-GRPO's official code counts its warm-up). anchor_every always counts optimizer steps."""
    kl_target_auto: bool = False
    """Adaptive KL weight: measure kl_target instead of taking it (when: kl_feedback), so the
    controller holds a KL the run actually reaches, with proportional feedback every update (factor
    sqrt(mean KL / target), clamped to [1/2, 2])."""
    kl_feedback: Literal["integral", "proportional", "ziegler"] = "integral"
    """Adaptive KL weight after the warm-up: 'proportional' sets it to mid * (mean KL / kl_target)
    with mid = sqrt(kl_beta_min * kl_beta_max) (with kl_target_auto, the target is the mean KL of
    kl_window updates held at mid after the warm-up); 'integral' (release 0.3) multiplies it every
    update, which on a KL that responds weakly to the weight drifts to a bound; 'ziegler': SAGE-GRPO's schedule as
    its paper states it, Ziegler et al.'s controller w *= 1 + clip(mean KL / kl_target - 1, -0.2, 0.2) / kl_horizon
    after the warm-up (the official controller file is not public: a reading; core/kl_weight.py)."""
    kl_horizon: Positive = 10.0
    """'ziegler' feedback: the controller's horizon in kl_schedule_unit steps (a larger one moves the weight slower)."""


@dataclass
class TrustRegion:
    """The KL trust region's anchors and terms (core/anchors.py, core/trust_region.py); its variant is
    the method option ``kl``."""

    beta_pos: Float = 1.0
    """Dual KL: weight of the moving-anchor (position) term."""
    beta_vel: Float = 0.1
    """Dual KL: weight of the step-wise (velocity) term."""
    anchor_every: AtLeast1 = 10
    """Moving anchor: copy the policy every N optimizer steps."""
    stepwise_estimator: Literal["sample", "analytic"] = "sample"
    """Step-wise KL: 'sample' (mean logp_old - logp) or 'analytic' (stored mu_old)."""
    stepwise_ref: Literal["rollout", "previous"] = "rollout"
    """Step-wise KL reference: 'rollout' = the rollout policy (the reference code's logp_old - logp,
    zero on a rollout's first optimizer step), 'previous' = a parameter snapshot from before the last
    optimizer step, evaluated at loss time (a true velocity term: KL between consecutive iterates)."""


@dataclass
class Evaluation:
    """Evaluation, diagnostics, checkpoints and logging."""

    eval_every: AtLeast1 = execution(25)
    """Oracle/judge evaluation on the eval prompts every K updates (and at 0 and the last)."""
    eval_at: Ints = execution(factory=list)
    """Further evaluations, before each of these updates (1 .. updates - 1), on top of every K-th: a quality read
    at a given compute (a speed claim's, report/claims/speed.py). The eval stream has its own seeds: the
    trajectory never moves."""
    eval_samples: Annotated[AtLeast1, upto(1024)] = 4
    """Videos per eval prompt (fixed noise)."""
    diag_every: NonNegative = execution(50)
    """Measured per-step gradient norms every D updates (0 = never)."""
    checkpoint_every: AtLeast1 = execution(25)
    """Save a checkpoint (safetensors + JSON, train/checkpoint.py) every N updates (resume point)."""
    save_videos: bool = execution(True)
    """Store eval sample videos (final update) in the run directory."""
    trackers: Names = execution(factory=list)
    """Extra accelerate trackers mirroring metrics.jsonl (e.g. [tensorboard] or [wandb])."""


@dataclass
class System:
    """Where and how the run computes."""

    device: Name = execution("auto")
    """'auto', 'cpu', 'cuda' or 'cuda:N'."""
    mixed_precision: Literal["auto", "no", "bf16", "fp16"] = execution("auto")
    """Compute precision (autocast; weights, log-probs, KL and the optimizer stay fp32): 'auto' = bf16 for
    the world where the hardware has bf16 units, else fp32 (train/precision.py); no, bf16, fp16."""
    threads: Annotated[NonNegative, upto(1024)] = execution(0)
    """torch intra-op threads (0 = leave as is)."""
    sequence_parallel: Annotated[AtLeast1, upto(64)] = execution(1)
    """Processes one video's transformer tokens are split over (Ulysses sequence parallelism through diffusers'
    context-parallel API, Wan and HunyuanVideo 1.5 only; models/sequence_parallel.py). The processes of a
    launch form groups of this many consecutive ranks; a group is one data-parallel rank. 1: no splitting."""


@dataclass(frozen=True)
class Cadence:
    """When a run evaluates and measures diagnostics over its updates: the section the trainer's loop, the closed
    form of its compute (config/expected_compute.py) and the CLI's estimates read (``section(cfg, Cadence)``)."""

    updates: int
    eval_every: int
    eval_at: list[int]
    diag_every: int

    def evaluates_before(self, u: int) -> bool:
        """Whether the run evaluates the policy before update ``u`` (every ``eval_every``-th and each ``eval_at``;
        the final evaluation, after the last update, is the trainer's own)."""
        return u != self.updates - 1 and (u % self.eval_every == 0 or u in self.eval_at)

    def diagnoses(self, u: int) -> bool:
        """Whether update ``u`` measures the per-step gradient norms (every ``diag_every``-th; 0: never)."""
        return bool(self.diag_every) and u % self.diag_every == 0


COMPONENTS: dict[str, type] = {
    "experiment": Compared, "method_options": MethodOptions, "sampling": Sampling,
    "optimisation": Optimisation, "trust_region": TrustRegion, "kl_weighting": KLWeighting,
    "evaluation": Evaluation, "system": System, "generator": GeneratorOptions,
}
"""The components of a run config, in reading order (each field belongs to exactly one), by section name:
a YAML mapping may give a component's keys nested under its name (``trust_region: {anchor_every: 5}``)."""


def section(cfg: object, component: type[T]) -> T:
    """The component's own config, its fields of ``cfg``: what a core component is built from, so that it
    never holds (or reads) the whole run config. Any dataclass whose fields are run-config keys works (a
    phase's inputs: train/collect.py ``GroupSpec``, train/optimize.py ``Passes``); a field typed as another
    such dataclass is that dataclass's section of the same ``cfg`` (``GroupSpec.advantages``, the core's
    ``AdvantageRule``)."""
    nested = _nested_sections(component)
    return component(**{f.name: section(cfg, nested[f.name]) if f.name in nested else getattr(cfg, f.name)
                        for f in dataclasses.fields(component)})


@functools.cache
def _nested_sections(component: type) -> dict[str, type]:
    """Field name -> dataclass type, for the fields of ``component`` that are themselves sections."""
    hints = typing.get_type_hints(component)
    return {f.name: hints[f.name] for f in dataclasses.fields(component)
            if isinstance(hints[f.name], type) and dataclasses.is_dataclass(hints[f.name])}


@functools.cache
def _rules(component: type) -> FieldRules:
    return FieldRules(component)


def checked(options: Any, component: type[T], where: str = "") -> T:
    """The ``component`` section of ``options`` (exactly its fields, nothing else of what was passed), every
    field converted to its declared type and checked against its constraints (pydantic, grpo_bench/fields.py),
    or one UserError naming the key and what it allows: a builder checks the section it is given, whoever
    assembled it (a run config's ``validate``, a test, a plug-in), before it builds anything."""
    rules = _rules(component)
    return component(**{f.name: rules.check(f.name, getattr(options, f.name), where)
                        for f in dataclasses.fields(component)})


def flatten_sections(data: dict[str, Any], where: str = "") -> dict[str, Any]:
    """A mapping whose component sections (``trust_region: {anchor_every: 5}``, names in COMPONENTS) are
    spelled as the flat keys they declare, which every config reads; flat keys pass through. A key of
    another section, or one given both nested and flat, is one line naming it."""
    out = {k: v for k, v in data.items() if not (k in COMPONENTS and isinstance(v, dict))}
    for name, values in data.items():
        if name not in COMPONENTS or not isinstance(values, dict):
            continue
        own = {f.name for f in dataclasses.fields(COMPONENTS[name])}
        for key, value in values.items():
            dotted = name == "method_options" and plugin_params.is_param_key(str(key))
            if key not in own and not dotted:
                home = next((n for n, c in COMPONENTS.items() if key in {f.name for f in dataclasses.fields(c)}), None)
                if home is not None:
                    raise UserError(f"{where}{name}.{key}: {key!r} belongs to the {home} section (or the top level)")
                raise unknown(f"{name} key", key, sorted(own), where)
            if key in out:
                raise UserError(f"{where}{key} is given twice: at the top level and under {name}; keep one")
            out[key] = value
    return out
