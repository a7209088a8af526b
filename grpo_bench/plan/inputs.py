"""What the planner reads of a run: ``PlanInputs``, the section ``estimate`` (plan/estimate.py) takes instead of the
whole run config, assembled once where a command holds the config (``section(resolve(cfg), PlanInputs)``,
config/sections.py ``section``), so that the planner never holds a RunConfig."""

from __future__ import annotations

from dataclasses import dataclass

# imported at run time, not under TYPE_CHECKING: ``section`` reads the nested sections' types off the annotations
from grpo_bench.config.recipe import UpdateShape
from grpo_bench.config.sections import Cadence, TrustRegion
from grpo_bench.models.options import ModelSection


@dataclass(frozen=True)
class PlanInputs:
    """A resolved run as the planner sees it (method options filled in by ``resolve``: the KL variant and the
    method's own steps are what the plan counts). Every field is a run-config key of the same name or one of
    the run's sections."""

    model: ModelSection
    """The generator and its geometry, precision, LoRA and device: what ``model_spec`` sizes and the weight terms
    read."""
    update: UpdateShape
    """The batch, sampler steps, optimizer steps and the method: the rollout, training and per-step terms."""
    trust_region: TrustRegion
    """The KL anchors the run keeps (with the method's ``kl`` and ``params``, in ``update.method_choice``)."""
    cadence: Cadence
    """Updates and the evaluation and diagnostic intervals amortised into each update."""
    guidance: float
    """Classifier-free guidance scale (not 1: every model call runs the doubled batch)."""
    reward: str
    """The training reward: its weights, activations and seconds per video."""
    prompts: str
    """The prompt set: the text cache and the evaluation prompts."""
    eval_samples: int
    """Videos per evaluation prompt."""
    sequence_parallel: int
    """Processes one video's tokens are split over (1: none)."""
    optimizer: str
    """'adamw' or 'muon' (its per-step cost)."""
