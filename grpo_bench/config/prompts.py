"""Prompt sets: which prompts a run trains on and which it evaluates on.

``prompts: world`` (the default) is the embedded world's 40 train / 8 held-out eval prompts; a world plug-in
registers its own set by name (``grpo_bench.registry.PROMPT_SETS``). Any other value is a file: a YAML mapping
``{train: [...], eval: [...]}`` or a plain text file with one prompt per line (then train and eval are the same
list). Real-model suites point this at their prompt file; the world oracle only understands world prompts
(``eval_oracle``), a registered set is scored by the oracle its world declares for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from grpo_bench.errors import UserError


@dataclass(frozen=True)
class PromptSet:
    train: list[str]
    eval: list[str]

    def require_world_eval(self, where: str = "") -> None:
        """The world's oracle scores only world prompts: a UserError naming the first one it cannot parse."""
        from grpo_bench.world import parse

        try:
            for p in self.eval:
                parse(p)
        except UserError as exc:
            raise UserError(f"{where}eval_oracle is on but the eval prompts are not world prompts ({exc}); "
                            "set eval_oracle: false for real models") from None

    def require_world_train(self, where: str = "", source: str = "") -> None:
        """The world model knows only the world's vocabulary: a UserError naming the first training
        prompt it cannot parse."""
        from grpo_bench.world import parse

        try:
            for p in self.train:
                parse(p)
        except UserError as exc:
            raise UserError(f"{where}model 'world' knows only the world's vocabulary, but the prompts in "
                            f"{source!r} are not world prompts ({exc})") from None


def _world() -> PromptSet:
    from grpo_bench.world import prompts

    return PromptSet(prompts("train"), prompts("eval"))


BUILTIN = {"world": _world}


def load_prompt_set(spec: str, where: str = "") -> PromptSet:
    """The prompt set a config's ``prompts`` key names (a built-in name, a world plug-in's registered set, or a
    file path)."""
    from grpo_bench.registry import PROMPT_SETS

    if spec in BUILTIN:
        return BUILTIN[spec]()
    if spec in PROMPT_SETS:
        train, evals = PROMPT_SETS.get(spec)()
        return PromptSet(list(train), list(evals))
    path = Path(spec).expanduser()
    if not path.is_file():
        raise UserError(
            f"{where}config key 'prompts': {spec!r} is neither a built-in prompt set "
            f"({', '.join([*BUILTIN, *PROMPT_SETS.names()])}) nor an existing file (YAML with train/eval lists, "
            "or one prompt per line)"
        )
    from grpo_bench import safe_yaml

    text = safe_yaml.read_text(path, "prompt file")  # UTF-8 text of bounded size, or one line
    if path.suffix in (".yaml", ".yml"):
        data = safe_yaml.load_text(text, str(path))
        if not isinstance(data, dict) or set(data) != {"train", "eval"}:
            raise UserError(f"{path}: a prompt file must be a mapping with exactly the keys 'train' and 'eval'")
        train, evals = data["train"], data["eval"]
    else:
        train = evals = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
    for key, items in (("train", train), ("eval", evals)):
        if not isinstance(items, list) or not items or not all(isinstance(p, str) and p.strip() for p in items):
            raise UserError(f"{path}: '{key}' must be a non-empty list of prompt strings")
    return PromptSet([p.strip() for p in train], [p.strip() for p in evals])
