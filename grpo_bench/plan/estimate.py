"""``grpo-bench plan``: before anything runs, what one cell needs per process.

From a resolved run's ``PlanInputs`` section (``plan/inputs.py``) and the model's architecture alone (no
weights: real checkpoints are built from the configs in ``models/real_specs.yaml`` on PyTorch's ``meta`` device,
tiny presets from their random pipelines: ``plan/model_specs.py``, into a ``ModelSpec``, ``plan/spec.py``), the
plan predicts per process:

* weights, gradients, AdamW state and KL anchors (bytes per parameter from the precision; divided
  by the processes where the launch shards them: ``fsdp2`` shards all four plus one gathered block,
  ``deepspeed_zero2`` gradients and optimizer state);
* activations of the largest forward: a training micro-batch (``micro_batch`` rows, doubled by
  classifier-free guidance) with or without gradient checkpointing, or a no-grad rollout forward;
  ``ACT_BYTES`` per token and hidden unit per layer (measured on a Wan block stack; Megatron's
  34 s·h bytes per 16-bit layer plus the blocks' modulation; float32 doubles it), with no L x L
  attention term (fused / memory-efficient attention kernels) (``plan/costs.py``, as the VAE,
  reward and communication terms);
* the rollout store (x, x', mu and one mu_ref per anchor at every stored step), decoded videos,
  the VAE and reward weights (the reward's in the dtype its factory declares it loads), and the text
  encoders while prompts are cached (offloaded after; the reward is loaded before the cache is built);
* host memory: the interpreter baseline, the pipeline materialised once in its load dtypes, the
  offloaded text encoders and the prompt cache (on a CPU run, also everything above);
* sequence parallelism (``sequence_parallel: sp``): each process of a group holds 1/sp of a forward's
  tokens, so its activations and transformer FLOPs are divided by sp, and a group of sp processes is one
  data-parallel rank (its rows, rollout store and evaluation share are those of W/sp processes); the
  Ulysses all-to-all traffic is not modelled;
* seconds per update from the forward FLOPs (2 x parameters x tokens plus attention) of the
  rollout, anchors, training (3x, 4x with checkpointing), and the diagnostic and evaluation
  amortised over their intervals, at a declared throughput (``tflops``).

These are estimates; ``tests/plan/test_plan.py`` compares the activation and weight terms with measured
peaks of small models on the CPU, and ``benchmarks/gpu_check.sh`` prints the GPU measurement next to
the prediction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from grpo_bench.errors import UserError
from grpo_bench.plan.costs import (
    CALL_OVERHEAD_S,
    LINK_GB_S,
    ROLLOUT_BYTES,
    VAE_DECODE_MAPS,
    VAE_THROUGHPUT,
    PlannedUpdate,
    autocast_copy_bytes,
    communication_bytes,
    optimizer_step_seconds,
    reward_cost,
    reward_weight_bytes,
    training_activation_bytes,
    training_pass_factor,
)
from grpo_bench.plan.inputs import PlanInputs
from grpo_bench.plan.model_specs import model_spec
from grpo_bench.plan.spec import ModelSpec

GB = 1024**3
HOST_BASELINE_GB = {"cpu": 0.5, "cuda": 2.5}
"""Resident memory of one process with Python, torch, diffusers, transformers and accelerate loaded:
0.5 GB measured on the CPU (the tiny presets peak at 0.47-0.49 GB, tests/plan/test_plan.py); with CUDA the
runtime, cuBLAS/cuDNN and kernel images add more (2.5 GB assumed, not measured in this repository)."""
GPU_OVERHEAD_GB = 1.0
"""CUDA context and kernels, per process."""
FRAGMENTATION = 1.1
"""Allocator slack on the predicted GPU peak."""


@dataclass
class Plan:
    """Predicted per-process needs of one cell (bytes, seconds)."""

    model: str
    params: int
    trainable: int
    tokens: int
    gpu: dict[str, float]
    host: dict[str, float]
    seconds_per_update: float
    processes: int
    sharding: str
    updates: int = 0
    sequence_parallel: int = 1
    """Processes one video's tokens are split over (a group of them is one data-parallel rank)."""
    seconds: dict[str, float] | None = None
    """seconds_per_update by term: transformer, vae, reward, communication."""

    @property
    def seconds_per_cell(self) -> float:
        """The whole cell: its updates (evaluation and diagnostics amortised into each)."""
        return self.seconds_per_update * self.updates

    @property
    def gpu_peak(self) -> float:
        return self.gpu["peak"]

    @property
    def host_peak(self) -> float:
        return self.host["peak"]


def _bytes(dtype: str) -> int:
    return 2 if dtype == "bf16" else 4


def estimate(inputs: PlanInputs, processes: int = 1, sharding: str = "none", tflops: float = 400.0,
             spec: ModelSpec | None = None) -> Plan:
    """The plan of one resolved run (its ``PlanInputs``, ``section(resolve(cfg), PlanInputs)``) on ``processes``
    processes (one GPU each)."""
    from grpo_bench.config.prompts import load_prompt_set
    from grpo_bench.core import schedule
    from grpo_bench.core.trust_region import make_kl

    model, shape, cadence = inputs.model, inputs.update, inputs.cadence
    choice = shape.method_choice
    spec = spec or model_spec(model)
    bf16 = model.mixed_precision == "bf16"
    compute = 2 if bf16 else 4
    lora = model.lora_rank > 0
    param_dtype = model.param_dtype
    base_bytes = (compute if lora else _bytes(param_dtype))
    trainable = spec.lora_params if lora else spec.transformer_params
    train_bytes = 4 if lora else _bytes(param_dtype)
    world = max(1, processes)
    sp = int(inputs.sequence_parallel or 1)
    dp = world
    if sp > 1:
        from grpo_bench.models.sequence_parallel import check_degree

        dp = check_degree(sp, world)  # the data-parallel ranks: groups of sp processes
        if sharding == "deepspeed_zero2":
            raise UserError(f"config key 'sequence_parallel' ({sp}) is not supported with sharding {sharding!r}; "
                            "use fsdp2 or the plain data-parallel launch, or sequence_parallel: 1")
    shard_all = world if sharding == "fsdp2" else 1
    shard_opt = world if sharding in ("fsdp2", "deepspeed_zero2") else 1

    method = choice.build()
    sigmas = schedule.sigmas(shape.steps, shape.shift)
    stored = int(method.eligible_steps(sigmas).sum())
    trained = int(method.train_steps(sigmas, 1, torch.Generator().manual_seed(0)).shape[1])
    anchors = len(make_kl(inputs.trust_region, kind=choice.kl, params=choice.params).anchors)
    rows = shape.prompts_per_update * shape.group_size // dp  # this process's rollouts (its group's)
    cfg_mult = 2 if inputs.guidance != 1.0 else 1
    micro = min(shape.micro_batch or rows, rows)
    L, hid, layers = spec.tokens, spec.hidden, spec.layers

    gpu: dict[str, float] = {}
    gpu["weights"] = (spec.transformer_params * base_bytes / shard_all
                      + (spec.block_params * base_bytes if shard_all > 1 else 0))
    if lora:
        gpu["weights"] += trainable * 4 / shard_all
    gpu["gradients"] = trainable * train_bytes / shard_opt
    gpu["optimizer"] = (2 * trainable * train_bytes / shard_opt
                        + (trainable * 4 / world if sharding == "deepspeed_zero2" else 0))
    gpu["anchors"] = anchors * trainable * train_bytes / shard_all
    gpu["vae"] = spec.vae_params * 4
    on_cpu = str(model.device) == "cpu"
    reward_bytes = reward_weight_bytes(inputs.reward, "cpu" if on_cpu else "cuda")  # at the dtype it loads in there
    gpu["reward"] = reward_bytes
    latent = math.prod(spec.latent)
    video = 3 * math.prod(spec.video)
    gpu["rollout_store"] = rows * stored * (3 + anchors) * latent * 4 + rows * video * 4
    train_act = training_activation_bytes(spec, micro * cfg_mult, model.gradient_checkpointing, bf16)
    rollout_act = min(micro * cfg_mult, rows * cfg_mult) * L * hid * ROLLOUT_BYTES * (1 if bf16 else 2)
    gpu["activations"] = max(train_act, rollout_act) / sp  # 1/sp of every forward's tokens
    gpu["autocast_copy"] = autocast_copy_bytes(spec.transformer_params, trainable, lora, param_dtype, bf16)
    # the micro-batched diagnostic sums autograd.grad results in a second gradient buffer
    gpu["diagnostic_grads"] = trainable * train_bytes / shard_all if cadence.diag_every else 0.0
    # collective buffers: FSDP2 gathers the next block while one runs and reduce-scatters a block's
    # float32 gradients; the replicated launch averages all gradients in one float32 flat buffer
    if sharding == "fsdp2" and world > 1:
        gpu["comm_buffers"] = spec.block_params * (base_bytes + 4)
    elif world > 1:
        gpu["comm_buffers"] = trainable * 4 if sharding == "none" else 0.0
    # the reward phase (no training activations alive): one video decoded per VAE call, tiled in
    # space, then the reward model's forward over a batch
    f_out, h_out, w_out = spec.video
    tile = spec.vae_tile or (h_out, w_out)
    gpu["vae_decode"] = VAE_DECODE_MAPS * spec.vae_channels * f_out * min(tile[0], h_out) * min(tile[1], w_out) * 4
    reward_act, reward_flops, reward_host_s = reward_cost(inputs.reward, f_out)
    gpu["reward_activations"] = reward_act
    encoders = spec.text_encoder_params * compute
    gpu["text_encoders_while_caching"] = encoders
    phase_only = ("text_encoders_while_caching", "vae_decode", "reward_activations", "activations", "autocast_copy")
    static = sum(v for k, v in gpu.items() if k not in phase_only)
    forward_phase = static + gpu["activations"] + gpu["autocast_copy"]  # autocast's copies live with the forward
    train_phase = max(forward_phase, static + gpu["vae_decode"], static + gpu["reward_activations"])
    # at load the whole transformer reaches the GPU before it is sharded, with the text encoders; the trainer
    # loads the reward before it caches the prompts (train/trainer.py), so the reward is there too
    cache_phase = spec.transformer_params * base_bytes + gpu["vae"] + encoders + gpu["reward"]
    gpu["peak"] = 0.0 if on_cpu else (max(train_phase, cache_phase) * FRAGMENTATION + GPU_OVERHEAD_GB * GB)

    prompts = load_prompt_set(inputs.prompts)
    n_prompts = len(set(prompts.train) | set(prompts.eval)) + 1
    text_dim = 4096 if spec.text_tokens >= 512 else hid
    host: dict[str, float] = {"baseline": HOST_BASELINE_GB["cpu" if on_cpu else "cuda"] * GB}
    host["load"] = spec.transformer_params * base_bytes + encoders + spec.vae_params * 4
    host["offloaded_text_encoders"] = encoders
    host["prompt_cache"] = n_prompts * spec.text_tokens * text_dim * compute
    host["reward_load"] = reward_bytes  # materialised on the host in its load dtype, then moved
    host["peak"] = host["baseline"] + max(host["load"], encoders + host["reward_load"]) + host["prompt_cache"]
    if on_cpu:
        host["peak"] = host["baseline"] + max(train_phase, cache_phase) + host["prompt_cache"]

    attn = 4 * L * L * hid + (0 if spec.joint_text else 4 * spec.video_tokens * spec.text_tokens * hid)  # QK^T and AV
    fwd = spec.forward_flops or 2 * spec.transformer_params * L + attn * layers  # FLOPs of one row's forward
    flops = rows * cfg_mult * fwd * (shape.steps + trained * anchors)  # sampling, then each anchor's mu_ref
    flops += (rows * trained * cfg_mult * fwd * training_pass_factor(lora, model.gradient_checkpointing)
              * shape.inner_epochs)
    if cadence.diag_every:
        flops += rows * stored * cfg_mult * fwd * 3 / cadence.diag_every
    eval_rows = math.ceil(len(prompts.eval) / dp) * inputs.eval_samples
    evals = (1 / cadence.eval_every
             + sum(1 for u in set(cadence.eval_at) if u % cadence.eval_every) / cadence.updates)  # per update
    flops += eval_rows * shape.steps * cfg_mult * fwd * evals
    videos = rows + eval_rows * evals  # decoded and scored per update
    update = PlannedUpdate(shape, inputs.guidance, lora, rows, trained, anchors)
    seconds = {
        "transformer": flops / sp / (tflops * 1e12),
        "vae": videos * spec.vae_flops_per_pixel * math.prod(spec.video) / (tflops * 1e12 * VAE_THROUGHPUT),
        "reward": videos * (reward_flops / (tflops * 1e12) + reward_host_s),  # a CPU engine's seconds too
        "communication": communication_bytes(update, spec, trainable, base_bytes, world, sharding) / (LINK_GB_S * 1e9),
        "per_step": _per_step_seconds(update, spec, trainable, train_bytes, shard_opt, dp,
                                      inputs.optimizer, tflops),
    }
    return Plan(spec.name, spec.transformer_params, trainable, L, gpu, host, sum(seconds.values()), world, sharding,
                updates=cadence.updates, seconds=seconds, sequence_parallel=sp)


def _per_step_seconds(update: PlannedUpdate, spec: ModelSpec, trainable: int, train_bytes: int, shard: int,
                      world: int, optimizer: str, tflops: float) -> float:
    """Fixed per-update costs the FLOP count misses: every optimizer step's overhead and elementwise pass
    (Muon's orthogonalisation too), and a launch overhead per transformer call (plan/costs.py)."""
    from grpo_bench.config import recipe

    shape = update.shape
    sched = recipe.schedule(shape, world)
    per_call = max(1, shape.micro_batch or update.rows)
    calls = math.ceil(update.rows / per_call) * (shape.steps + update.trained * update.anchors)  # rollout, anchors
    calls += sched.steps_per_rollout * sched.backwards_per_step  # training forwards (one per backward)
    step = optimizer_step_seconds(trainable, train_bytes, shard, optimizer, spec.hidden, tflops)
    return sched.steps_per_rollout * step + calls * CALL_OVERHEAD_S


def check_time(plan: Plan, timeout_min: float | None, requeue: int, checkpoint_every: int, where: str) -> None:
    """UserError (one line) when a cell cannot finish within its time limit: its predicted time exceeds
    ``timeout_min`` x (1 + ``requeue``) submissions, or one checkpoint interval alone exceeds a submission
    (a resubmitted cell resumes from its last checkpoint and would never get past it)."""
    if not timeout_min:
        return
    limit = timeout_min * 60
    interval = plan.seconds_per_update * checkpoint_every
    if interval > limit:
        raise UserError(f"{where}{checkpoint_every} updates between checkpoints take {interval / 3600:.1f} h by the "
                        f"plan, more than budget.timeout_min={timeout_min:g}: a cell killed at its time limit would "
                        "restart from the same checkpoint; lower checkpoint_every or raise timeout_min")
    need = math.ceil(plan.seconds_per_cell / limit)
    if need > 1 + requeue:
        raise UserError(f"{where}predicted {plan.seconds_per_cell / 3600:.1f} h per cell exceeds budget.timeout_min="
                        f"{timeout_min:g} x {1 + requeue} submission(s); raise timeout_min, or set budget.requeue: "
                        f"{need - 1} (each resubmission resumes from the last checkpoint, every {checkpoint_every} "
                        "updates)")


def check_fits(plan: Plan, gpu_memory_gb: float | None, where: str) -> None:
    """UserError (one line) when the predicted GPU peak exceeds the declared memory per device."""
    if gpu_memory_gb and plan.gpu_peak > gpu_memory_gb * GB:
        raise UserError(
            f"{where}predicted peak GPU memory {plan.gpu_peak / GB:.1f} GB per process exceeds gpu_memory_gb="
            f"{gpu_memory_gb:g} ({plan.model}, {plan.processes} process(es), sharding {plan.sharding}); lower "
            "micro_batch, turn on gradient_checkpointing, use lora_rank > 0, or shard with fsdp2 on more GPUs")
