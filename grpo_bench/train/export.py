"""A finished run's policy in formats other tools read, and its eval videos to watch.

``RUN/policy/`` holds

* the embedded world: ``model.safetensors`` (the same format as the shipped base model, so
  ``grpo-bench sample --checkpoint RUN`` and ``models.load("world", path=...)`` read it);
* a diffusers model trained with LoRA: the adapters in peft's format (``adapter_config.json`` +
  ``adapter_model.safetensors``; ``PeftModel.from_pretrained`` or diffusers'
  ``load_lora_adapter`` on the base transformer);
* a fully fine-tuned diffusers model: ``transformer/`` (``save_pretrained``, safetensors);

plus ``card.json`` and ``README.md``: model, method, config, final metrics, package version and
git commit. ``RUN/samples/`` gets the final eval videos as GIF (world) and MP4 (every model) beside
``final_eval.pt``. Nothing here is pickled.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from torch import Tensor

from grpo_bench.atomic import atomic_write_json, atomic_write_text

POLICY = "policy"
CARD = "card.json"
WORLD_WEIGHTS = "model.safetensors"


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


def world_net(model: Any) -> Any:
    from grpo_bench.world.model import WorldUNet

    net = getattr(model, "net", None)
    return net if isinstance(net, WorldUNet) else None


def gather_trainable(module: Any) -> dict[int, Any]:
    """Full copies of the trainable parameters of a sharded (FSDP2) module, keyed by ``id`` of the
    parameter; an all-gather, so every rank must call it."""
    from grpo_bench.train import sharding

    return {id(p): sharding.full(p.detach()).cpu().clone() for p in module.parameters() if p.requires_grad}


def _write_weights(model: Any, module: Any, folder: Path, card: dict[str, Any],
                   gathered: dict[int, Any] | None = None) -> dict[str, Any]:
    """Weights into ``folder``; returns what the card says about them. ``gathered`` holds the full
    trainable tensors of a sharded run (``gather_trainable``)."""
    net = world_net(model)
    if net is not None:
        from grpo_bench.models.world import save_weights

        save_weights(net, folder / WORLD_WEIGHTS, model.size, model.frames,
                     extra={"grpo_bench_card": json.dumps({k: card[k] for k in ("method", "kl", "setting", "seed")})})
        return {"format": "world-safetensors", "weights": WORLD_WEIGHTS}
    transformer = getattr(module, "transformer", module)
    options = getattr(model, "options", None)
    if options is not None and getattr(options, "lora_rank", 0) > 0:
        from peft.utils import get_peft_model_state_dict
        from safetensors.torch import save_file

        config = transformer.peft_config["default"]
        config.save_pretrained(str(folder))
        if gathered is not None:  # sharded: peft's key names (adapter name dropped) of the gathered tensors
            state = {n.replace(".default", ""): gathered[id(p)].float().contiguous()
                     for n, p in transformer.named_parameters() if id(p) in gathered}
        else:
            state = {k: v.detach().float().cpu().contiguous()
                     for k, v in get_peft_model_state_dict(transformer, adapter_name="default").items()}
        save_file(state, str(folder / "adapter_model.safetensors"), metadata={"format": "pt"})
        return {"format": "peft-lora", "weights": "adapter_model.safetensors", "config": "adapter_config.json",
                "lora_rank": options.lora_rank, "base_model": card["model"]}
    if gathered is not None:  # a sharded full fine-tune: the trainable tensors by their names in the module
        from safetensors.torch import save_file

        state = {n: gathered[id(p)].contiguous() for n, p in transformer.named_parameters() if id(p) in gathered}
        save_file(state, str(folder / "trainable.safetensors"))
        return {"format": "torch-safetensors", "weights": "trainable.safetensors", "base_model": card["model"]}
    if hasattr(transformer, "save_pretrained"):
        transformer.save_pretrained(str(folder / "transformer"), safe_serialization=True)
        return {"format": "diffusers-transformer", "weights": "transformer/", "base_model": card["model"]}
    from safetensors.torch import save_file

    state = {k: v.detach().cpu().contiguous() for k, v in module.state_dict().items()}
    save_file(state, str(folder / "module.safetensors"))
    return {"format": "torch-safetensors", "weights": "module.safetensors", "base_model": card["model"]}


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


def export_policy(model: Any, module: Any, cfg: Any, out_dir: Path, final: dict[str, Any],
                  gathered: dict[int, Any] | None = None) -> Path:
    """Write ``out_dir/policy`` (weights + card) atomically; returns the folder. A sharded run passes
    the gathered trainable tensors (``gather_trainable``, called on every rank)."""
    out_dir = Path(out_dir)
    folder, tmp = out_dir / POLICY, out_dir / f".{POLICY}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    card: dict[str, Any] = {
        "model": cfg.model, "method": cfg.method, "kl": cfg.kl, "setting": cfg.setting, "seed": cfg.seed,
        "updates": final.get("updates"), "cell_id": final.get("cell_id"), "run_dir": str(out_dir),
        "final_eval": final.get("eval", {}), "config": cfg.to_dict(), **provenance(),
    }
    card["weights"] = _write_weights(model, module, tmp, card, gathered)
    atomic_write_json(tmp / CARD, card)
    atomic_write_text(tmp / "README.md", _readme(card))
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    return folder


def write_eval_videos(videos: Tensor, out_dir: Path, world: bool) -> list[Path]:
    """``samples/final_eval.gif`` (world) and ``samples/final_eval.mp4`` beside the tensor file."""
    from grpo_bench import media

    samples = Path(out_dir) / "samples"
    writers = ([(media.write_gif, "gif")] if world else []) + [(media.write_mp4, "mp4")]
    written = []
    for write, ext in writers:
        path, tmp = samples / f"final_eval.{ext}", samples / f".final_eval.tmp.{ext}"
        write(videos, tmp)
        os.replace(tmp, path)  # a killed run never leaves a half-written video under the final name
        written.append(path)
    return written
