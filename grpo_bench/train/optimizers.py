"""The run's optimizer (config key ``optimizer``): torch's AdamW, or torch's Muon with AdamW beside it.

SAGE-GRPO trains with Muon: its ``post_train.py`` declares ``--use_muon`` with default true (kept by
``scripts/post_train/train_grpo.sh``) and builds ``get_muon_optimizer(model=self.transformer,
lr=self.config.learning_rate, weight_decay=self.config.weight_decay)`` (weight decay default 0.01) from
HunyuanVideo-1.5's ``hyvideo/optim/muon.py``. That file was not readable here; its signature
(``Muon(lr, wd, muon_params, momentum, nesterov, ns_steps, adamw_params, adamw_betas, adamw_eps)`` with an
``adjust_lr_for_muon``) is Moonlight's, whose update is scaled by 0.2 sqrt(max(A, B)) to match AdamW's RMS:
torch's ``adjust_lr_fn="match_rms_adamw"``.

Muon orthogonalises 2-D matrices only; the parameters it must not take go to AdamW, as Muon's authors
and Moonlight split them: every parameter that is not 2-D (biases, norm scales, the patch-embedding
convolutions), and the 2-D weights of the input embeddings (a name containing ``embed``), the norms
(``norm``) and the output layer (``proj_out``), and every parameter of an ``nn.Embedding`` or a norm
module. Both get the same lr and weight decay; AdamW keeps
betas (0.9, 0.999) and eps 1e-8 (post_train.py's AdamW branch). ``split`` is the rule, tested on the tiny
diffusers transformers.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from grpo_bench.config.sections import Optimisation, checked
from grpo_bench.errors import UserError

ADAMW_NAMES = ("embed", "norm", "proj_out")
"""Name parts of 2-D weights that stay with AdamW under Muon (input embeddings, norms, the output layer)."""
ADAMW_MODULES = (nn.Embedding, nn.LayerNorm, nn.GroupNorm, nn.RMSNorm)
"""Module types whose parameters stay with AdamW under Muon."""


def split(module: nn.Module, params: list[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
    """(Muon's parameters, AdamW's) among ``params`` (the trainable ones, in the module's order)."""
    wanted = {id(p) for p in params}
    kept_off = {id(p) for m in module.modules() if isinstance(m, ADAMW_MODULES) for p in m.parameters(recurse=False)}
    muon, adamw = [], []
    for name, p in module.named_parameters():
        if id(p) not in wanted:
            continue
        hidden_matrix = (p.ndim == 2 and id(p) not in kept_off
                         and not any(part in name.lower() for part in ADAMW_NAMES))
        (muon if hidden_matrix else adamw).append(p)
    return muon, adamw


class MuonAdamW(torch.optim.Optimizer):
    """torch.optim.Muon on the hidden matrices and torch.optim.AdamW on the rest, stepped together.

    One optimizer object for the trainer, checkpoints and accelerate: its ``param_groups`` are both
    optimizers' groups, its state dict both state dicts."""

    def __init__(self, muon_params: list[Tensor], adamw_params: list[Tensor], lr: float, weight_decay: float) -> None:
        self.parts: list[torch.optim.Optimizer] = []
        if muon_params:
            self.parts.append(torch.optim.Muon(muon_params, lr=lr, weight_decay=weight_decay,
                                               adjust_lr_fn="match_rms_adamw"))
        if adamw_params:
            self.parts.append(torch.optim.AdamW(adamw_params, lr=lr, weight_decay=weight_decay))
        super().__init__([p for part in self.parts for g in part.param_groups for p in g["params"]], {"lr": lr})
        self.param_groups = [g for part in self.parts for g in part.param_groups]

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        for part in self.parts:
            part.step()
        return None

    def zero_grad(self, set_to_none: bool = True) -> None:
        for part in self.parts:
            part.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict[str, Any]:
        return {"parts": [part.state_dict() for part in self.parts]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        parts = state_dict.get("parts") if isinstance(state_dict, dict) else None
        if not isinstance(parts, list) or len(parts) != len(self.parts):
            raise UserError("optimizer state: not a Muon + AdamW state of this model (resume with the run's own "
                            "optimizer, or --no-resume)")
        for part, state in zip(self.parts, parts):
            part.load_state_dict(state)


def build(module: nn.Module, params: list[Tensor], options: Optimisation) -> torch.optim.Optimizer:
    """The optimizer ``options.optimizer`` names over ``params`` (the module's trainable parameters), built from
    the run's ``Optimisation`` section alone (``section(cfg, Optimisation)``; its optimizer, lr and weight decay),
    which it checks first (a bad value is one line naming the key and what it allows)."""
    options = checked(options, Optimisation, "optimisation section: ")
    if options.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=options.lr, weight_decay=options.weight_decay)
    muon, adamw = split(module, params)
    if not muon:
        raise UserError(f"optimizer: muon: the trainable module ({type(module).__name__}) has no trainable 2-D "
                        "hidden weight for Muon (every trainable parameter is an embedding, norm, bias or output "
                        "layer); use optimizer: adamw")
    return MuonAdamW(muon, adamw, options.lr, options.weight_decay)
