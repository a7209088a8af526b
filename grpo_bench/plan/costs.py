"""The plan's cost terms that are not plain bytes per parameter: activations per token and layer, the
VAE decode, the reward model's forward and the collectives, with the measured or assumed constants
each rests on (``plan/estimate.py`` adds them up per cell)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from grpo_bench.plan.spec import ModelSpec

if TYPE_CHECKING:
    from grpo_bench.config.recipe import UpdateShape


@dataclass(frozen=True)
class PlannedUpdate:
    """One update as a process of the planned launch runs it: the run's update-shape section (batch, optimizer-step
    keys, sampler steps, the method) and guidance, whether LoRA trains, and what ``estimate`` derived of them."""

    shape: UpdateShape
    guidance: float
    lora: bool
    rows: int
    """This process's rollouts (its data-parallel group's)."""
    trained: int
    """Trained steps per sample (K)."""
    anchors: int
    """KL anchors the trust region keeps."""

    @property
    def guidance_rows(self) -> int:
        """Model rows per sample: 2 under classifier-free guidance (the doubled batch), else 1."""
        return 2 if self.guidance != 1.0 else 1

# --- activations -------------------------------------------------------------------------------
ACT_BYTES = 52
"""Training activation bytes per (token x hidden unit) of one layer in 16-bit (float32: twice).
Megatron's estimate for a plain transformer layer with a fused attention kernel is 34; the adaLN
modulation and cross-attention of these video DiT blocks add to it: 52 is what a 4-layer Wan block
stack keeps (measured on the CPU in float32, halved; tests/plan/test_plan.py)."""
RECOMPUTE_BYTES = 64
"""With gradient checkpointing: the one block recomputed in the backward pass plus the backward's
temporaries, per (token x hidden unit), 16-bit (measured as ACT_BYTES)."""
ROLLOUT_BYTES = 12
"""No-grad forward: live bytes per (token x hidden unit) of the one running layer (16-bit)."""
CHECKPOINT_BYTES = 2
"""Gradient checkpointing keeps each layer's input: bytes per (token x hidden unit), 16-bit."""


def training_activation_bytes(spec: ModelSpec, rows: int, checkpointing: bool, bf16: bool) -> float:
    """Activations a forward keeps for its backward: rows x tokens x hidden x bytes per layer (every
    layer's ACT_BYTES, or with checkpointing each layer's input plus one recomputed layer)."""
    per = (spec.layers * CHECKPOINT_BYTES + RECOMPUTE_BYTES) if checkpointing else spec.layers * ACT_BYTES
    return rows * spec.tokens * spec.hidden * per * (1 if bf16 else 2)


# --- the VAE decode ------------------------------------------------------------------------------
VAE_DECODE_MAPS = 4
"""Float32 feature maps of the VAE decoder's highest-resolution stage alive at once (a conv's input and
output, a norm's and an upsampler's temporaries), per decoded voxel of a tile and channel: assumed,
not measured here (benchmarks/gpu_check.sh's vae case measures it)."""
VAE_THROUGHPUT = 0.25
"""The VAE decodes in float32 (TF32 convolutions at best): its FLOPs run at this share of the declared
bf16 throughput (assumed)."""

# --- the reward model ----------------------------------------------------------------------------
def reward_weight_bytes(reward: str, device: str) -> float:
    """Bytes of the reward model's weights on ``device`` ('cuda' or 'cpu'): the parameters and load dtype its
    factory declares (rewards/base.py ``RewardModelWeights``: CLIPScore, PickScore, HPSv2 and ImageReward
    float32, VideoAlign bfloat16 on a GPU and float32 on the CPU); 0 for a reward that declares none (the
    world's, negligible)."""
    from grpo_bench.rewards import REWARDS
    from grpo_bench.rewards.base import factory_declaration

    weights = factory_declaration(REWARDS.get(reward)).model_weights
    return 0.0 if weights is None else weights.bytes(device)


def reward_cost(reward: str, frames: int) -> tuple[float, float, float]:
    """(activation bytes of one reward call, FLOPs per video, host seconds per video) of a reward's no-grad
    forward, from the compute its factory declares (rewards/compute.py: its towers' sizes from the official
    configs, FLOPs counted on its shipped network, or an engine's measured CPU seconds); 0 for one that runs no
    network or declares nothing (a plug-in)."""
    from grpo_bench.rewards import REWARDS
    from grpo_bench.rewards.base import factory_declaration

    compute = factory_declaration(REWARDS.get(reward)).compute
    if compute is None:
        return 0.0, 0.0, 0.0
    forward = compute.forward(frames)
    return forward.activation_units * ROLLOUT_BYTES, forward.flops, forward.host_seconds


# --- collectives ---------------------------------------------------------------------------------
LINK_GB_S = 300.0
"""Collective bandwidth per GPU inside one node (NVLink, GB/s achieved): communication time is the
bytes a process sends and receives at this rate, not overlapped with compute (an upper bound)."""


def communication_bytes(update: PlannedUpdate, spec: ModelSpec, trainable: int, base_bytes: int, world: int,
                        sharding: str) -> float:
    """Bytes one process moves through collectives per update. FSDP2: every transformer call all-gathers
    the weights (forward; backward once more) and every backward reduce-scatters float32 gradients;
    replicated and ZeRO-2: one float32 all-reduce (or reduce-scatter + all-gather, the same volume)
    of the trainable gradients per optimizer step. Ring collectives: a share (world - 1) / world of
    each buffer, twice for an all-reduce."""
    if world <= 1:
        return 0.0
    share = (world - 1) / world
    shape, rows, trained = update.shape, update.rows, update.trained
    per_call = max(1, (shape.micro_batch or rows) // update.guidance_rows)  # samples per call
    calls = math.ceil(rows / per_call)
    backward = trained * calls * shape.inner_epochs
    if sharding == "fsdp2":
        forward = calls * (shape.steps + trained * update.anchors) + backward
        gathered = spec.transformer_params * base_bytes + (trainable * 4 if update.lora else 0)
        return share * ((forward + backward) * gathered + backward * trainable * 4)
    from grpo_bench.config import recipe

    steps = recipe.schedule(shape, world).steps_per_rollout  # optimizer steps per update
    return share * 2 * trainable * 4 * steps


# --- autocast, backward and fixed per-step costs -------------------------------------------------
AUTOCAST_COPY_BYTES = 2
"""Under bf16 autocast every float32 parameter a forward casts is cast once and the bf16 copy is cached
until the autocast region ends (torch's autocast weight cache; one forward of the trainer's is one
region): float32 master weights cost 2 more bytes per parameter during a forward (with FSDP2 of the
gathered, unsharded blocks: the whole transformer)."""


def autocast_copy_bytes(params: int, trainable: int, lora: bool, param_dtype: str, bf16: bool) -> float:
    """The bf16 copies autocast keeps of float32 parameters during a forward (0 without bf16 autocast)."""
    if not bf16:
        return 0.0
    if lora:
        return trainable * AUTOCAST_COPY_BYTES  # float32 adapters; the frozen base is bf16 already
    return params * AUTOCAST_COPY_BYTES if param_dtype == "float32" else 0.0


def training_pass_factor(lora: bool, checkpointing: bool) -> int:
    """Forwards' worth of FLOPs per trained (sample, step): forward 1, backward 2 (input and weight
    gradients), LoRA's backward 1 (the frozen base needs input gradients only; the adapters are tiny),
    checkpointing one forward more (the recompute)."""
    return 1 + (1 if lora else 2) + (1 if checkpointing else 0)


STEP_OVERHEAD_S = 0.2
"""Fixed seconds per optimizer step besides its arithmetic: zero_grad, the gradient norm and clip over
every parameter, the launcher's bookkeeping (assumed, not measured: benchmarks/gpu_check.sh measures
seconds per update beside the prediction)."""
CALL_OVERHEAD_S = 0.005
"""Fixed seconds per transformer call (kernel launches, the Python around them; assumed)."""
HBM_GB_S = 3000.0
"""Achieved GPU memory bandwidth of the optimizer's elementwise update (H100/H200 class; assumed)."""
MUON_NS_STEPS = 5
"""Newton-Schulz iterations of torch.optim.Muon (its default ns_steps)."""


def optimizer_step_seconds(trainable: int, train_bytes: int, shard: int, optimizer: str, hidden: int,
                           tflops: float) -> float:
    """One optimizer step: STEP_OVERHEAD_S, AdamW's elementwise pass (read parameter, gradient and two
    moments, write three) at HBM_GB_S over this process's shard, and for Muon the Newton-Schulz
    iterations: per square hidden x hidden matrix 5 x (4 + 2) h^3 FLOPs, i.e. 30 h per parameter,
    counted unsharded (each process orthogonalises whole matrices; an upper bound)."""
    seconds = STEP_OVERHEAD_S + 7 * trainable * train_bytes / shard / (HBM_GB_S * 1e9)
    if optimizer == "muon":
        seconds += MUON_NS_STEPS * 6 * hidden * trainable / (tflops * 1e12)
    return seconds
