"""LoRA adapters on a diffusers transformer through peft (``ModelMixin.add_adapter`` →
``peft.inject_adapter_in_model``): injected on a frozen base with lora_B = 0, so the adapted model starts
equal to the base and the initial snapshot of the adapters is exactly "adapters disabled"; exported in
peft's own format (``adapter_config.json`` + ``adapter_model.safetensors``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import Tensor, nn

from grpo_bench.errors import UserError
from grpo_bench.models.adapter_options import AdapterOptions


def add_lora(transformer: nn.Module, opts: AdapterOptions) -> None:
    """Freeze the transformer and add float32 adapters of ``opts.lora_rank`` on ``opts.lora_targets``
    (peft autocasts them up to the frozen base's compute dtype); UserError when a target matches no module
    (peft would adapt the others silently, or fail with its own traceback when none matches)."""
    from peft import LoraConfig

    names = [n for n, _ in transformer.named_modules() if n]
    missing = [t for t in opts.lora_targets if not any(n == t or n.endswith(f".{t}") for n in names)]
    if missing:
        linear = sorted({n.split(".")[-1] if not n.split(".")[-1].isdigit() else ".".join(n.split(".")[-2:])
                         for n, m in transformer.named_modules() if isinstance(m, nn.Linear)})
        raise UserError(f"config key 'lora_targets': {', '.join(map(repr, missing))} match no module of "
                        f"{type(transformer).__name__}; allowed: module names such as {', '.join(linear[:30])}")
    transformer.requires_grad_(False)
    transformer.add_adapter(
        LoraConfig(
            r=opts.lora_rank,
            lora_alpha=opts.lora_alpha or opts.lora_rank,
            target_modules=list(opts.lora_targets),
            init_lora_weights=True,  # lora_B = 0: the adapted model starts equal to the base
        )
    )
    for p in transformer.parameters():
        if p.requires_grad:
            p.data = p.data.float()
    if not any(p.requires_grad for p in transformer.parameters()):
        raise UserError(f"lora_targets {opts.lora_targets} match no module of {type(transformer).__name__}")


def save_lora(transformer: nn.Module, folder: Path, rank: int, base_model: str,
              gathered: dict[int, Tensor] | None = None) -> dict[str, Any]:
    """The adapters in peft's format in ``folder`` (a sharded run: the gathered tensors under peft's key
    names); returns what the policy card says about the files."""
    from peft.utils import get_peft_model_state_dict
    from safetensors.torch import save_file

    transformer.peft_config["default"].save_pretrained(str(folder))
    if gathered is not None:  # sharded: peft's key names (adapter name dropped) of the gathered tensors
        state = {n.replace(".default", ""): gathered[id(p)].float().contiguous()
                 for n, p in transformer.named_parameters() if id(p) in gathered}
    else:
        state = {k: v.detach().float().cpu().contiguous()
                 for k, v in get_peft_model_state_dict(transformer, adapter_name="default").items()}
    save_file(state, str(Path(folder) / "adapter_model.safetensors"), metadata={"format": "pt"})
    return {"format": "peft-lora", "weights": "adapter_model.safetensors", "config": "adapter_config.json",
            "lora_rank": rank, "base_model": base_model}
