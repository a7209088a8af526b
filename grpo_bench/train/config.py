"""Typed run configuration, YAML loading and validation with clear errors (docs/design.md §3–4, §6).

One flat ``RunConfig`` holds everything a single training run needs. Method options default to
None, meaning "the method's own default" (methods/*.py); ``resolve`` fills them in so the stored
config.yaml is complete. Overrides use the same key names everywhere: YAML suites, ``key=value``
on the command line, and Python. Plug-in parameters (a kernel's, a KL variant's, an anchor
policy's own) are dotted keys, ``kernel.gamma=0.3``, ``kl.tau=0.9``, ``anchor.tau=0.99``, kept in
``params`` (grpo_bench.params).

Cell ids (``config_id``) hash the resolved config. Every field added after the fields of
``HASHED_FIELDS`` declares an id-neutral value in ``ID_NEUTRAL``: while a config holds that value
the field is left out of the hash, so adding a field with a default keeps every existing id;
changing a default (or setting the field) changes the ids it affects.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_bench import params as plugin_params
from grpo_bench import safe_yaml
from grpo_bench.errors import UserError, unknown
from grpo_bench.preflight import shown

METHOD_OPTIONS = (
    "noise_level", "logprob", "score_term", "train_fraction", "max_train_steps", "shared_noise",
    "clip_range", "kl", "equalizer", "window",
)


@dataclass
class RunConfig:
    """One GRPO run. Every field is a valid ``key=value`` override."""

    # --- what is compared ---------------------------------------------------------------
    method: str = "sage_grpo"
    """Registered method (`grpo-bench methods`)."""
    setting: str = "A"
    """Reward weights: A = (VQ, MQ, TA) (1, 1, 1); B = (0.5, 0.5, 1)."""
    seed: int = 0
    """Run seed: prompt order, initial noise and SDE noise derive from it (shared across methods)."""
    model: str = "world"
    """Generator: 'world' (embedded) or a diffusers preset / hub id / local folder."""
    reward: str = "world_judge"
    """Training reward (registered in grpo_bench.rewards)."""
    prompts: str = "world"
    """Prompt set: 'world' (40 train / 8 held-out eval prompts) or a file (YAML train/eval lists, or one per line)."""
    eval_oracle: bool = True
    """Score eval videos with the world's exact oracle (world prompts only; off for real models)."""

    # --- method options (None = the method's default) -------------------------------------
    noise_level: float | None = None
    """Kernel noise scale (eta or a)."""
    logprob: str | None = None
    """'gaussian' or 'unscaled'."""
    score_term: bool | None = None
    """Score correction in the SDE mean."""
    train_fraction: float | None = None
    """Random share of eligible steps trained per sample."""
    max_train_steps: int | None = 3
    """Cap on trained steps per sample: a random subset of the method's eligible steps, drawn per
    sample. The world default 3 keeps an update cheap and the training compute equal across methods;
    null restores each method's own selection (every eligible step, or DanceGRPO's 60%)."""
    shared_noise: bool | None = None
    """Same initial noise for all rollouts of a prompt."""
    clip_range: float | None = None
    """PPO ratio clip epsilon."""
    kl: str | None = None
    """KL trust region: none, fixed, stepwise, moving, dual."""
    equalizer: bool | None = None
    """Per-step gradient-norm equalizer S_i."""
    window: list[int] | None = None
    """[k, w]: SDE and training only on steps k..k+w-1."""

    # --- sampling -------------------------------------------------------------------------
    steps: int = 10
    """Sampler steps T."""
    shift: float = 3.0
    """Schedule shift."""
    guidance: float = 1.0
    """Classifier-free guidance scale (1 = off; >1 doubles the batch in one call)."""
    prompts_per_update: int = 2
    """P: prompt groups per update (world default sized for ~10 min per 200 updates on 2 cores)."""
    group_size: int = 8
    """G: rollouts per prompt (>= 2)."""
    video_size: int = 16
    """World video height/width (16 or 24)."""

    # --- optimisation ---------------------------------------------------------------------
    updates: int = 200
    """Number of rollout+train iterations."""
    lr: float = 1e-4
    """AdamW learning rate. Set on the world by the step size it produces, not by any reward (a reward
    is what the benchmark judges): measured with sage_grpo (P=2, G=8, T=10), the KL between consecutive
    policies is 5e-5..2.5e-4 per optimizer step at 1e-4 (median 7e-5) and 3e-3..1.2e-1 at 1e-3
    (median 2e-2): 1e-3 leaves any trust region of the world's scale in one step."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    max_grad_norm: float = 1.0
    """Gradient-norm clip."""
    inner_epochs: int = 1
    """Optimizer passes over each rollout batch."""
    minibatches: int = 2
    """Optimizer steps per pass (the batch is split; gradients accumulate within each). The default 2
    gives every rollout two optimizer steps (as DanceGRPO and FlowGRPO take): only from the second
    on does the policy differ from the rollout policy, so that the PPO ratio moves, the clip can act
    and the step-wise KL is non-zero. With 1, every method is group-baseline REINFORCE."""
    micro_batch: int = 0
    """Samples per training forward (0 = the whole minibatch); lower it to fit GPU memory."""
    adv_clip: float = 5.0
    """Advantage clip (±)."""
    on_bad_reward: str = "error"
    """Non-finite reward: 'error' stops the run, 'zero' gives that sample A = 0."""

    # --- trust region ---------------------------------------------------------------------
    kl_weight: float = 0.05
    """Constant KL weight (used when kl_adaptive is false)."""
    kl_adaptive: bool = True
    """Warm-up from kl_beta_min to kl_beta_max over kl_warmup updates, then feedback on kl_target."""
    kl_beta_min: float = 1e-3
    """Adaptive KL weight: start and floor. World-calibrated: the paper's 1e-7 -> 1e-5 range is for
    HunyuanVideo latents; on the world |grad KL| ~ 2 * sqrt(KL / 0.04) against |grad policy| ~ 0.02,
    so weights ~1e-3 .. 1e-1 span "negligible" to "holds KL near 1e-3"."""
    kl_beta_max: float = 1e-1
    """Adaptive KL weight: end of the warm-up and ceiling."""
    kl_warmup: int = 50
    """Adaptive KL weight: linear warm-up length in updates."""
    kl_target: float = 1e-3
    """Adaptive KL weight: target of the mean KL over the last kl_window updates (see kl_target_auto)."""
    kl_window: int = 10
    """Adaptive KL weight: feedback on the mean KL of the last N updates."""
    beta_pos: float = 1.0
    """Dual KL: weight of the moving-anchor (position) term."""
    beta_vel: float = 0.1
    """Dual KL: weight of the step-wise (velocity) term."""
    anchor_every: int = 10
    """Moving anchor: copy the policy every N optimizer steps."""
    stepwise_estimator: str = "sample"
    """Step-wise KL: 'sample' (mean logp_old - logp) or 'analytic' (stored mu_old)."""

    # --- evaluation and logging -------------------------------------------------------------
    eval_every: int = 25
    """Oracle/judge evaluation on the eval prompts every K updates (and at 0 and the last)."""
    eval_samples: int = 4
    """Videos per eval prompt (fixed noise)."""
    diag_every: int = 50
    """Measured per-step gradient norms every D updates (0 = never)."""
    checkpoint_every: int = 25
    """Save a checkpoint (safetensors + JSON, train/checkpoint.py) every N updates (resume point)."""
    save_videos: bool = True
    """Store eval sample videos (final update) in the run directory."""
    trackers: list[str] = field(default_factory=list)
    """Extra accelerate trackers mirroring metrics.jsonl (e.g. [tensorboard] or [wandb])."""

    # --- system ---------------------------------------------------------------------------
    device: str = "auto"
    """'auto', 'cpu', 'cuda' or 'cuda:N'."""
    mixed_precision: str = "no"
    """accelerate mixed precision: no, bf16, fp16."""
    threads: int = 0
    """torch intra-op threads (0 = leave as is)."""

    # --- real models (ignored by the world) -------------------------------------------------
    lora_rank: int = 0
    """LoRA rank (0 = full fine-tuning)."""
    lora_alpha: float = 0.0
    """LoRA alpha (0 = equal to the rank)."""
    lora_targets: list[str] = field(default_factory=lambda: ["to_q", "to_k", "to_v", "to_out.0"])
    """Module names LoRA wraps."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass."""
    frames: int = 8
    """Frames per video (real models: latent frames follow the VAE)."""
    height: int = 16
    width: int = 16

    # --- fields added after the id scheme was fixed: each has an entry in ID_NEUTRAL -------------
    params: dict[str, Any] = field(default_factory=dict)
    """Plug-in parameters as dotted keys ({"kernel.gamma": 0.3, "kl.tau": 0.9, "anchor.tau": 0.99});
    set them as top-level dotted keys in YAML or ``kernel.gamma=0.3`` on the command line."""
    param_dtype: str = "float32"
    """Full fine-tuning: dtype the trained weights are stored in, 'float32' (master weights; the forward
    autocasts under mixed_precision) or 'bf16' (bf16 parameters and AdamW state, the paper's FSDP2 recipe)."""
    reward_path: str = ""
    """Folder of the reward's weights ('' = its hub id in the local cache): VideoAlign's VideoReward
    checkpoint, the CLIP / PickScore model, or the world judge's .safetensors."""
    reward_base_path: str = ""
    """Second folder some rewards need ('' = default): VideoAlign's base Qwen2-VL-2B-Instruct,
    PickScore's processor (CLIP-ViT-H-14)."""
    stepwise_ref: str = "rollout"
    """Step-wise KL reference: 'rollout' = the rollout policy (the reference code's logp_old - logp,
    zero on a rollout's first optimizer step), 'previous' = a parameter snapshot from before the last
    optimizer step, evaluated at loss time (a true velocity term: KL between consecutive iterates)."""
    kl_target_auto: bool = False
    """Adaptive KL weight: at the end of the warm-up set kl_target to the mean KL measured over the
    warm-up's last kl_window updates, so the controller holds the KL the run actually reaches, with
    proportional feedback every update (factor sqrt(mean KL / target), clamped to [1/2, 2])."""
    adv_norm: str = "group"
    """Advantage scale: 'group' = each group's population std (SAGE-GRPO), 'group_unbiased' = each
    group's unbiased std (DanceGRPO's torch.std), 'global' = the std of the whole batch's rewards,
    centred per group (FlowGRPO's global_std)."""
    equalizer_proxy: str = "gaussian"
    """What the equalizer divides by: 'gaussian' = lambda/std at every step (SAGE-GRPO's reference
    proxy, right for the Gaussian log-prob), 'logprob' = the run's log-prob form's own sensitivity
    (lambda*std for CPS's unscaled surrogate, where the Gaussian proxy widens the per-step spread)."""

    def method_overrides(self) -> dict[str, Any]:
        """The method options set in this config (None = keep the method default)."""
        out = {k: getattr(self, k) for k in METHOD_OPTIONS if getattr(self, k) is not None}
        if self.params:
            out["params"] = dict(self.params)
        return out

    def get(self, key: str) -> Any:
        """A field's value, or a dotted plug-in parameter's (None when not set)."""
        if plugin_params.is_param_key(key):
            return self.params.get(key)
        return getattr(self, key)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


FIELDS = {f.name: f for f in dataclasses.fields(RunConfig)}

HASHED_FIELDS = (
    "method", "setting", "seed", "model", "reward", "prompts", "eval_oracle", "noise_level", "logprob", "score_term",
    "train_fraction", "max_train_steps", "shared_noise", "clip_range", "kl", "equalizer", "window", "steps", "shift",
    "guidance", "prompts_per_update", "group_size", "video_size", "updates", "lr", "weight_decay", "max_grad_norm",
    "inner_epochs", "minibatches", "micro_batch", "adv_clip", "on_bad_reward", "kl_weight", "kl_adaptive",
    "kl_beta_min", "kl_beta_max", "kl_warmup", "kl_target", "kl_window", "beta_pos", "beta_vel", "anchor_every",
    "stepwise_estimator", "eval_every", "eval_samples", "diag_every", "checkpoint_every", "save_videos", "trackers",
    "device", "mixed_precision", "threads", "lora_rank", "lora_alpha", "lora_targets", "gradient_checkpointing",
    "frames", "height", "width",
)
"""The RunConfig fields of the first id scheme (commit 2a65c82): always hashed, as they always were."""

ID_NEUTRAL: dict[str, Any] = {
    "params": {}, "param_dtype": "float32", "reward_path": "", "reward_base_path": "", "equalizer_proxy": "gaussian",
    "stepwise_ref": "rollout", "kl_target_auto": False, "adv_norm": "group",
}
"""Fields added since: the value for which a field is left out of a cell id. A new field must be
added here with the value that reproduces the behaviour from before it existed."""


def _type_of(name: str) -> Any:
    return typing.get_type_hints(RunConfig)[name]


def coerce(name: str, value: Any, where: str = "") -> Any:
    """Convert a YAML/CLI value to the field's type, or raise a UserError naming key and type.

    Dotted plug-in parameters pass through; the plug-in validates them (``validate``)."""
    if plugin_params.is_param_key(name):
        return value
    if name == "params":
        if value is None:
            return {}
        bad = [k for k in value if not plugin_params.is_param_key(str(k))] if isinstance(value, dict) else [value]
        if bad:
            raise UserError(f"{where}config key 'params' maps dotted plug-in keys ('kernel.<name>', 'kl.<name>', "
                            f"'anchor.<name>') to values, got {bad[0]!r}")
        return dict(value)
    if name not in FIELDS:
        raise unknown("config key", name, FIELDS, where)
    tp = _type_of(name)
    args = typing.get_args(tp)
    optional = typing.get_origin(tp) in (typing.Union, types.UnionType) and type(None) in args
    base = next((a for a in args if a is not type(None)), tp) if optional else tp
    # 'none' is a real value of string fields (kl: none is the no-KL variant, not "method default").
    nulls = ("null",) if base is str else ("null", "none")
    if value is None or (isinstance(value, str) and value.lower() in nulls and optional):
        if optional:
            return None
        raise UserError(f"{where}config key {name!r} cannot be null")
    try:
        if base is bool:
            if isinstance(value, str):
                low = value.lower()
                if low in ("true", "1", "yes", "on"):
                    return True
                if low in ("false", "0", "no", "off"):
                    return False
                raise ValueError
            if isinstance(value, (bool, int)) and value in (0, 1):
                return bool(value)
            raise ValueError
        if base is int:
            if isinstance(value, bool):
                raise ValueError
            f = float(value)
            if not f.is_integer():
                raise ValueError
            return int(f)
        if base is float:
            if isinstance(value, bool):
                raise ValueError
            f = float(value)
            if math.isnan(f):
                raise ValueError
            return f
        if base is str:
            if not isinstance(value, (str, int, float)) or isinstance(value, bool):
                raise ValueError
            return str(value)
        if typing.get_origin(base) is list:
            (inner,) = typing.get_args(base)
            if isinstance(value, str):
                value = (safe_yaml.load_text(value, f"{where}{name}") if value.strip().startswith("[")
                         else value.split(","))
            if not isinstance(value, (list, tuple)):
                raise ValueError
            return [inner(v) if not isinstance(v, inner) else v for v in value]
    except (TypeError, ValueError):
        pass
    else:
        return value
    tname = getattr(base, "__name__", str(base))
    raise UserError(f"{where}config key {name!r} expects {tname}{' or null' if optional else ''}, got {shown(value)}")


def parse_overrides(items: list[str], where: str = "command line: ") -> dict[str, Any]:
    """``["lr=1e-4", "kl=dual"]`` → typed dict (unknown keys and bad values are UserErrors)."""
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise UserError(f"{where}override {shown(item)} is not of the form key=value")
        key, raw = item.split("=", 1)
        key = key.strip()
        if key in out:
            raise UserError(f"{where}{key} is given twice ({key}={shown(out[key])} and {shown(item)}); give it once")
        value = safe_yaml.load_text(raw, f"{where}override {key}") if raw.strip() else raw
        out[key] = coerce(key, value, where)
    return out


def fold_params(data: dict[str, Any]) -> dict[str, Any]:
    """A mapping with dotted plug-in keys moved into ``params`` (later keys win)."""
    flat = {k: v for k, v in data.items() if not plugin_params.is_param_key(k)}
    dotted = {k: v for k, v in data.items() if plugin_params.is_param_key(k)}
    if dotted:
        flat["params"] = {**(flat.get("params") or {}), **dotted}
    return flat


def from_dict(data: dict[str, Any], where: str = "") -> RunConfig:
    """Build and validate a RunConfig from a plain mapping."""
    if not isinstance(data, dict):
        raise UserError(f"{where}a run config must be a mapping of key: value, got {type(data).__name__}")
    typed = {k: coerce(k, v, where) for k, v in data.items()}
    cfg = RunConfig(**fold_params(typed))
    validate(cfg, where)
    return cfg


def validate(cfg: RunConfig, where: str = "") -> None:
    """Names and ranges, checked before any work starts."""
    from grpo_bench.core.method import METHODS
    from grpo_bench.rewards.base import SETTINGS

    METHODS.get(cfg.method, where=where)
    if cfg.setting not in SETTINGS:
        raise unknown("setting", cfg.setting, SETTINGS, where)
    if cfg.kl is not None:
        from grpo_bench.core.trust_region import KL_VARIANTS

        KL_VARIANTS.get(cfg.kl, where=where)
    choices = {
        "on_bad_reward": ("error", "zero"),
        "mixed_precision": ("no", "bf16", "fp16"),
        "stepwise_estimator": ("sample", "analytic"),
        "param_dtype": ("float32", "bf16"),
        "equalizer_proxy": ("gaussian", "logprob"),
        "stepwise_ref": ("rollout", "previous"),
        "adv_norm": ("group", "group_unbiased", "global"),
    }
    for key, allowed in choices.items():
        if getattr(cfg, key) not in allowed:
            raise unknown(key, getattr(cfg, key), allowed, where)
    from grpo_bench.train.tracking import check_trackers

    check_trackers(cfg.trackers, where)
    positive = (
        "steps", "prompts_per_update", "updates", "inner_epochs", "minibatches", "eval_samples", "anchor_every",
        "kl_window", "checkpoint_every", "eval_every",
    )
    for key in positive:
        if getattr(cfg, key) < 1:
            raise UserError(f"{where}config key {key!r} must be >= 1, got {getattr(cfg, key)!r}")
    for key, value in cfg.to_dict().items():  # inf passes every range check and fails an hour later
        if isinstance(value, float) and not math.isfinite(value):
            raise UserError(f"{where}config key {key!r} must be a finite number, got {value!r}")
    for key, most in UPPER_BOUNDS.items():
        if getattr(cfg, key) > most:
            raise UserError(f"{where}config key {key!r} must be <= {most}, got {getattr(cfg, key)!r}")
    if not 0 <= cfg.seed <= 2**63 - 1:
        raise UserError(f"{where}config key 'seed' must be in 0..2**63-1, got {cfg.seed}")
    if cfg.window is not None and len(cfg.window) == 2 and cfg.window[0] + cfg.window[1] > cfg.steps:
        raise UserError(f"{where}config key 'window' [{cfg.window[0]}, {cfg.window[1]}] reaches step "
                        f"{cfg.window[0] + cfg.window[1] - 1}, past the last step {cfg.steps - 1} (steps={cfg.steps})")
    from grpo_bench.preflight import device

    device(cfg.device, f"{where}config key 'device': ")
    _check_model_and_reward(cfg, where)
    if cfg.group_size < 2:
        raise UserError(f"{where}config key 'group_size' must be >= 2 (GRPO needs a group), got {cfg.group_size}")
    for key in ("lr", "shift", "guidance", "adv_clip", "max_grad_norm"):
        if not (math.isfinite(getattr(cfg, key)) and getattr(cfg, key) > 0):
            raise UserError(f"{where}config key {key!r} must be a finite number > 0, got {getattr(cfg, key)!r}")
    for key in ("micro_batch", "diag_every", "kl_warmup", "threads"):
        if getattr(cfg, key) < 0:
            raise UserError(f"{where}config key {key!r} must be >= 0, got {getattr(cfg, key)!r}")
    if cfg.minibatches > cfg.prompts_per_update * cfg.group_size:
        raise UserError(f"{where}config key 'minibatches' ({cfg.minibatches}) exceeds the rollout batch "
                        f"prompts_per_update * group_size = {cfg.prompts_per_update * cfg.group_size}")
    if not (math.isfinite(cfg.kl_target) and cfg.kl_target > 0):
        raise UserError(f"{where}config key 'kl_target' must be a finite number > 0, got {cfg.kl_target!r}")
    if cfg.kl_weight < 0 or cfg.kl_beta_min < 0 or cfg.kl_beta_max < cfg.kl_beta_min:
        raise UserError(f"{where}KL weights must satisfy 0 <= kl_beta_min <= kl_beta_max and kl_weight >= 0")
    from grpo_bench.train.prompts import load_prompt_set

    prompt_set = load_prompt_set(cfg.prompts, where)
    if cfg.eval_oracle:
        prompt_set.require_world_eval(where)
    if cfg.model == "world" and cfg.prompts != "world":
        prompt_set.require_world_train(where, cfg.prompts)
    # The method accepts its overrides (ranges of noise level, clip, window …), the plug-ins their parameters.
    try:
        _plugin_params(cfg)
    except UserError as exc:
        raise UserError(f"{where}{exc}") from None


def _plugin_params(cfg: RunConfig) -> dict[str, Any]:
    """Every plug-in parameter of the run (kernel, KL variant, anchor policies), defaults filled in and
    validated; a UserError names a bad key or value.

    The run's own ``params`` must all be taken by a component; the method's default params only
    where they apply (a method's ``anchor.tau`` is dropped when the run chooses ``kl: fixed``)."""
    from grpo_bench.core.method import make_method
    from grpo_bench.core.trust_region import ANCHOR_POLICIES, KL_VARIANTS, resolved_params

    method = make_method(cfg.method, **cfg.method_overrides())
    kl = cfg.kl if cfg.kl is not None else method.config.kl
    variant = KL_VARIANTS.get(kl)
    applies = {f"kl.{k}" for k in variant.Params.model_fields}
    applies |= {f"anchor.{k}" for p in variant.anchors.values() for k in ANCHOR_POLICIES.get(p).Params.model_fields}
    params = {k: v for k, v in method.defaults.params.items() if k.startswith("kernel.") or k in applies}
    params.update(cfg.params)
    out = plugin_params.dump(method.kernel.params, "kernel")
    out.update(resolved_params(dataclasses.replace(cfg, kl=kl, params=params)))
    return out
UPPER_BOUNDS = {
    "updates": 10_000_000, "group_size": 4096, "prompts_per_update": 4096, "steps": 1000, "eval_samples": 1024,
    "inner_epochs": 1000, "video_size": 512, "frames": 1024, "height": 4096, "width": 4096, "threads": 1024,
}
"""Values past these are typos (``updates: 1e12``) that would only hang or exhaust memory."""


def _shipped_world_size() -> int | None:
    """The video size the shipped world weights were trained on (read from the file header)."""
    from safetensors import safe_open

    from grpo_bench.models.world import DEFAULT_WEIGHTS

    try:
        with safe_open(str(DEFAULT_WEIGHTS), framework="pt") as f:
            return int((f.metadata() or {}).get("size", 16))
    except Exception:  # missing or corrupt weights: the model's own loader explains how to rebuild them
        return None


def _check_model_and_reward(cfg: RunConfig, where: str) -> None:
    from grpo_bench import models, rewards

    rewards.REWARDS.get(cfg.reward, where=f"{where}config key 'reward': ")
    name = cfg.model
    if name not in models.MODELS and "/" not in name and not Path(name).expanduser().exists():
        msg = unknown("model", name, models.names(), f"{where}config key 'model': ")
        raise UserError(f"{msg} (or a hub id org/name, or an existing folder)")
    if name == "world":
        trained = _shipped_world_size()
        if trained is not None and cfg.video_size != trained:
            raise UserError(f"{where}config key 'video_size' is {cfg.video_size}, but the shipped world weights "
                            f"were trained on {trained}x{trained} videos; use video_size: {trained}")


def resolve(cfg: RunConfig) -> RunConfig:
    """A copy with every method option filled from the method's defaults."""
    from grpo_bench.core.method import make_method

    method = make_method(cfg.method, **cfg.method_overrides())
    filled = {k: getattr(method.config, k) for k in METHOD_OPTIONS}
    if filled["window"] is not None:
        filled["window"] = list(filled["window"])
    filled["params"] = _plugin_params(cfg)
    return dataclasses.replace(cfg, **filled)


def config_id(cfg: RunConfig | dict[str, Any], length: int = 12) -> str:
    """Stable hash of a resolved config (key order does not matter; fields at their ID_NEUTRAL value
    are left out, so adding a field keeps existing ids)."""
    data = cfg.to_dict() if isinstance(cfg, RunConfig) else cfg
    data = {k: v for k, v in data.items() if not (k in ID_NEUTRAL and v == ID_NEUTRAL[k])}
    blob = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:length]
