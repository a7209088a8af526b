"""A finished run's policy in formats other tools read, and its eval videos to watch.

``RUN/policy/`` holds the weights the model's ``save_policy`` writes (models/base.py):

* the embedded world: ``model.safetensors`` (the same format as the shipped base model, so
  ``grpo-bench sample --checkpoint RUN`` and ``models.load("world", path=...)`` read it);
* a diffusers model trained with LoRA: the adapters in peft's format (``adapter_config.json`` +
  ``adapter_model.safetensors``; ``PeftModel.from_pretrained`` or diffusers'
  ``load_lora_adapter`` on the base transformer);
* a fully fine-tuned diffusers model: ``transformer/`` (``save_pretrained``, safetensors);
* any other model: its trainable module's tensors (``module.safetensors``; ``models.base.save_module``);

plus ``card.json`` and ``README.md``: model, method, config, final metrics, package version and
git commit. ``RUN/samples/`` gets the final eval videos as GIF (a model's ``gif_preview``: the world)
and MP4 (every video model), an image model's stills as a PNG grid, beside ``final_eval.pt``. Nothing here is pickled.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from torch import Tensor

from grpo_bench.atomic import atomic_write_json, atomic_write_text

POLICY = "policy"
CARD = "card.json"


@functools.lru_cache(maxsize=1)
def provenance() -> dict[str, str]:
    """Package version and the git commit of the source tree it runs from ("unknown" outside git)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        ver = version("grpo-bench")
    except PackageNotFoundError:
        ver = "unknown"
    root = Path(__file__).resolve().parents[2]
    commit, dirty = "unknown", False
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=5, check=True).stdout.strip() or "unknown"
        dirty = bool(subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                                    capture_output=True, text=True, timeout=5).stdout.strip())
    except (OSError, subprocess.SubprocessError):
        pass
    return {"grpo_bench_version": ver, "git_commit": commit + ("+dirty" if dirty else "")}


def gather_trainable(module: Any) -> dict[int, Any]:
    """Full copies of the trainable parameters of a sharded (FSDP2) module, keyed by ``id`` of the
    parameter; an all-gather, so every rank must call it."""
    from grpo_bench.train import sharding

    return {id(p): sharding.full(p.detach()).cpu().clone() for p in module.parameters() if p.requires_grad}


def _readme(card: dict[str, Any]) -> str:
    ev = card.get("final_eval", {})
    title = f"{card['method']} (kl={card['kl']}, setting {card['setting']}, seed {card['seed']})"
    lines = [f"# grpo-bench policy: {title}", "",
             f"- base model: `{card['model']}`; {card['updates']} updates; cell id `{card['cell_id']}`",
             f"- weights: `{card['weights']['weights']}` ({card['weights']['format']})",
             f"- grpo-bench {card['grpo_bench_version']}, commit `{card['git_commit']}`"]
    if ev:
        lines.append("- final eval: " + ", ".join(f"{k} {v:.3f}" for k, v in sorted(ev.items())
                                                   if isinstance(v, (int, float)) and v == v))
    if card["weights"]["format"] == "world-safetensors":
        lines += ["", "Use it:", "", "```bash", f"grpo-bench sample --checkpoint {card['run_dir']} "
                  "--prompt 'a red circle moving left'", "```"]
    elif card["weights"]["format"] == "peft-lora":
        lines += ["", "Put the adapters on the base model's transformer with peft:", "", "```python",
                  "from peft import LoraConfig, inject_adapter_in_model, set_peft_model_state_dict",
                  "from safetensors.torch import load_file",
                  "inject_adapter_in_model(LoraConfig.from_pretrained(FOLDER), transformer)",
                  "set_peft_model_state_dict(transformer, load_file(f'{FOLDER}/adapter_model.safetensors'))",
                  "```"]
    return "\n".join(lines) + "\n"


def export_policy(model: Any, config: dict[str, Any], out_dir: Path, final: dict[str, Any],
                  gathered: dict[int, Any] | None = None) -> Path:
    """Write ``out_dir/policy`` (weights by the model's ``save_policy`` + card) atomically; returns the
    folder. ``config``: the run config's values (``RunConfig.to_dict``), stored whole in the card. A sharded run
    passes the gathered trainable tensors (``gather_trainable``, called on every rank)."""
    out_dir = Path(out_dir)
    folder, tmp = out_dir / POLICY, out_dir / f".{POLICY}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    card: dict[str, Any] = {
        "model": config["model"], "method": config["method"], "kl": config["kl"], "setting": config["setting"],
        "seed": config["seed"],
        "updates": final.get("updates"), "cell_id": final.get("cell_id"), "run_dir": str(out_dir),
        "final_eval": final.get("eval", {}), "config": config, **provenance(),
    }
    card["weights"] = model.save_policy(tmp, card, gathered)  # each model knows its own policy format
    atomic_write_json(tmp / CARD, card)
    atomic_write_text(tmp / "README.md", _readme(card))
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    return folder


def write_eval_videos(videos: Tensor, out_dir: Path, gif: bool) -> list[Path]:
    """``samples/final_eval.gif`` (``gif``: the model's ``gif_preview``) and ``samples/final_eval.mp4``
    beside the tensor file; stills (one-frame clips of an image model) as one ``samples/final_eval.png`` grid."""
    from grpo_bench import media

    samples = Path(out_dir) / "samples"
    if media.is_still(videos):
        writers = [(media.write_png, "png")]
    else:
        writers = ([(media.write_gif, "gif")] if gif else []) + [(media.write_mp4, "mp4")]
    written = []
    for write, ext in writers:
        path, tmp = samples / f"final_eval.{ext}", samples / f".final_eval.tmp.{ext}"
        write(videos, tmp)
        os.replace(tmp, path)  # a killed run never leaves a half-written video under the final name
        written.append(path)
    return written
