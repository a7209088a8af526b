"""``train``'s memory check: before any weight is loaded, plan's prediction of the resolved config's peak GPU memory
per process (plan/estimate.py ``estimate``, the code ``grpo-bench plan`` runs) against the device's memory.

A real checkpoint's recipe can ask for more than any GPU holds (Wan 2.1 14B at its generation size: ~1.9 TB per
process); without this check such a run loads ~60 GB of weights and then dies of an out-of-memory error minutes in.
The device's memory is ``--gpu-memory GB`` when given, else the free memory of the GPUs the run will use
(``torch.cuda.mem_get_info``); without a GPU and without ``--gpu-memory`` the check is skipped with one line. A run
predicted not to fit is refused in one line (exit 2) naming the prediction, the memory and what shrinks it;
``--no-memory-check`` runs it anyway (plan's numbers are predictions, not measurements).
"""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING

from rich.console import Console

from grpo_bench.errors import UserError

if TYPE_CHECKING:
    from collections.abc import Callable

    from grpo_bench.config.run import RunConfig
    from grpo_bench.models.options import GeneratorOptions

CHECKED_ENV = "GRPO_BENCH_MEMORY_CHECKED"
"""Set by the process that checked before ``accelerate launch``: the launched processes do not check again."""


def launch_shape(accelerate_config: str | None) -> tuple[int, str]:
    """(processes, sharding) of the run: the accelerate config's when train will relaunch itself with one, the
    launcher's environment inside a launched process, else one unsharded process."""
    if accelerate_config is not None:
        import yaml

        from grpo_bench.cli.plan import sharding_of
        from grpo_bench.train.distributed import config_path

        launch = yaml.safe_load(config_path(accelerate_config).read_text()) or {}
        return int(launch.get("num_processes", 1) or 1), sharding_of(accelerate_config)
    processes = int(os.environ.get("WORLD_SIZE", "1"))
    # accelerate launch exports these to its processes (accelerate/utils/launch.py prepare_multi_gpu_env)
    sharding = ("fsdp2" if os.environ.get("ACCELERATE_USE_FSDP", "").lower() == "true" else
                "deepspeed_zero2" if os.environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() == "true" else "none")
    return processes, sharding


def device_memory(device: str, processes: int, relaunching: bool) -> tuple[float | None, str]:
    """(bytes each process can use, where that number comes from), or (None, why there is none): the least free
    memory of the GPUs the run takes (before a relaunch: GPUs 0 .. processes - 1; inside a launched process: its
    LOCAL_RANK's; ``cuda:N``: that one)."""
    import torch

    if device == "cpu":
        return None, "the run is on the CPU (device=cpu)"
    if not torch.cuda.is_available():
        return None, "no GPU is visible"
    if device.startswith("cuda:"):
        indices = [int(device.split(":", 1)[1])]
    elif relaunching:
        indices = list(range(min(processes, torch.cuda.device_count())))
    else:
        indices = [int(os.environ.get("LOCAL_RANK", "0"))]
    free = {i: torch.cuda.mem_get_info(i) for i in indices}
    least = min(indices, key=lambda i: free[i][0])
    name = torch.cuda.get_device_name(least)
    return float(free[least][0]), (f"free on cuda:{least} ({name}, {free[least][1] / 1024**3:.1f} GB in all; "
                                   "torch.cuda.mem_get_info)")


def fitting_frames(frames: int, fits: Callable[[int], bool]) -> int | None:
    """The most frames (4k + 1, as the video VAEs take them) below the run's ``frames`` that ``fits`` (the predicted
    peak at that many frames, the run's resolution, fits the memory); None when even 5 does not or the run is of
    stills (plan's peak grows with frames)."""
    lo, hi = 1, (int(frames) - 2) // 4  # frames 5 .. the largest 4k + 1 below the run's
    if int(frames) <= 1 or hi < lo or not fits(4 * lo + 1):
        return None
    while lo < hi:  # the largest k that fits
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(4 * mid + 1) else (lo, mid - 1)
    return 4 * lo + 1


def shrink_hint(generator: GeneratorOptions, micro_batch: int, processes: int, sharding: str,
                fitting: int | None) -> str:
    """The options that lower the prediction, with the run's values (the recipe's unless the command set them), and
    the most frames that fit at the run's resolution (``fitting``, ``fitting_frames``'s)."""
    g = generator
    video = int(g.frames) > 1
    size = f"{f'{g.frames} x ' if video else ''}{g.height} x {g.width}"
    parts = [f"{'frames=, ' if video else ''}height=, width= (now {size})"]
    if video and fitting is not None:
        parts[0] += f": frames={fitting} fits at {g.height} x {g.width}"
    parts.append(f"micro_batch= (now {micro_batch or 'every row at once'})")
    parts.append(f"lora_rank= (now {g.lora_rank}{': every weight trained' if int(g.lora_rank) == 0 else ''})")
    if not g.gradient_checkpointing:
        parts.append("gradient_checkpointing=true")
    parts.append(f"or more processes sharing the weights (--accelerate-config fsdp2; now {processes} process(es), "
                 f"sharding {sharding})")
    return ", ".join(parts)


def check_train_memory(cfg: RunConfig, gpu_memory_gb: float | None, accelerate_config: str | None, enabled: bool,
                       console: Console) -> None:
    """Refuse (UserError, one line) a run whose predicted GPU peak per process exceeds the device's memory; print
    one line saying what was checked, or why nothing was. An embedded world's run is not checked."""
    from grpo_bench import models
    from grpo_bench.config.run import resolve, section
    from grpo_bench.models.options import GeneratorOptions
    from grpo_bench.train.distributed import launched

    cfg = resolve(cfg)  # an image model's frames: 1
    if getattr(models.MODELS.get(cfg.model), "embedded", False) if cfg.model in models.MODELS else False:
        return
    relaunching = accelerate_config is not None and not launched()
    quiet = launched() and os.environ.get("RANK", "0") != "0"  # the launched ranks all check; rank 0 says so
    # soft_wrap: each line stays one line at any terminal width
    say = (lambda line: None) if quiet else (
        lambda line: console.print(line, markup=False, highlight=False, soft_wrap=True))
    if launched() and os.environ.get(CHECKED_ENV):
        return  # checked once before the launch
    if relaunching:  # the launched processes inherit it (a refusal below ends this process before any launch)
        os.environ[CHECKED_ENV] = "1"
    if not enabled:
        say("memory check: off (--no-memory-check)")
        return
    processes, sharding = launch_shape(accelerate_config)
    if gpu_memory_gb is not None:
        memory, source = gpu_memory_gb * 1024**3, "--gpu-memory"
    else:
        memory, source = device_memory(str(cfg.device), processes, relaunching)
        if memory is None:
            say(f"memory check: skipped ({source}; --gpu-memory GB checks the run against a GPU of that size)")
            return
    from grpo_bench.plan.estimate import GB, estimate
    from grpo_bench.plan.inputs import PlanInputs

    inputs = section(cfg, PlanInputs)
    try:
        plan = estimate(inputs, processes=processes, sharding=sharding)
    except UserError as exc:  # a model plan cannot size (a local folder it does not know): say so, do not block
        say(f"memory check: skipped (plan cannot size model {cfg.model}: {exc})")
        return
    where = f"{plan.model}, {processes} process(es), sharding {sharding}"
    if plan.gpu_peak > memory:

        def fits(frames: int) -> bool:
            at_frames = dataclasses.replace(inputs, model=dataclasses.replace(inputs.model, frames=frames))
            return estimate(at_frames, processes=processes, sharding=sharding).gpu_peak <= memory

        fitting = fitting_frames(cfg.frames, fits) if int(cfg.frames) > 1 else None
        hint = shrink_hint(section(cfg, GeneratorOptions), cfg.micro_batch, processes, sharding, fitting)
        raise UserError(
            f"grpo-bench train: predicted peak GPU memory {plan.gpu_peak / GB:.1f} GB per process ({where}; "
            f"grpo-bench plan's arithmetic) exceeds the device's {memory / GB:.1f} GB ({source}); lower it with "
            f"{hint}; or pass --no-memory-check to run anyway")
    say(f"memory check: predicted peak {plan.gpu_peak / GB:.1f} GB GPU per process ({where}) fits "
        f"{memory / GB:.1f} GB ({source})")
