"""A diffusers pipeline from local files only: a folder, or a hub id already in the local Hugging Face
cache. Nothing here downloads or retries; a model that is not present is a one-line UserError naming
what to download and where to put it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from grpo_bench.errors import UserError
from grpo_bench.hub_offline import offline_hub

DTYPE_KEYWORD_SINCE = (0, 40)
"""diffusers 0.40 renamed ``from_pretrained``'s ``torch_dtype`` to ``dtype`` (the old name warns that it goes in
1.0); earlier releases know only ``torch_dtype`` (checked in the 0.39.0 and 0.40.0 wheels)."""


def dtype_keyword(diffusers_version: str) -> str:
    """The name ``from_pretrained`` of this diffusers release takes the load dtype by."""
    release = tuple(int(part) for part in diffusers_version.split(".")[:2])
    return "dtype" if release >= DTYPE_KEYWORD_SINCE else "torch_dtype"


def looks_local(source: str) -> bool:
    """A filesystem path rather than a registered name or an ``org/name`` hub id."""
    return source.startswith(("/", ".", "~")) or source.count("/") > 1 or "\\" in source


def missing_model(source: str, what: str) -> UserError:
    local = f"models/{source.rstrip('/').split('/')[-1]}"
    return UserError(
        f"model {source!r} ({what}) is not available locally and grpo-bench never downloads weights; "
        f"download it first, e.g. `hf download {source} --local-dir {local}`, then pass model={local} "
        f"(or pre-fill the Hugging Face cache at $HF_HOME)"
    )


def load_pipeline(pipeline_cls: Any, source: str, what: str, dtype: Any = None, **kwargs: Any) -> Any:
    """``pipeline_cls.from_pretrained`` from a local folder or the local Hugging Face cache only, ``dtype`` (a dtype
    or one per component) under the name this diffusers release takes it by.

    Never downloads, retries or opens a socket (``offline_hub``): a model that is not present gives a one-line UserError
    naming what to download and where to put it.
    """
    if dtype is not None:
        import diffusers

        kwargs[dtype_keyword(diffusers.__version__)] = dtype
    path = Path(os.path.expanduser(source))
    local = path.exists()
    if local and not (path / "model_index.json").is_file():
        raise UserError(
            f"model folder {str(path)!r} has no model_index.json (expected a diffusers {what} pipeline folder)"
        )
    kwargs.setdefault("low_cpu_mem_usage", True)  # weights go straight into their tensors (no random init)
    try:
        with offline_hub():
            return pipeline_cls.from_pretrained(str(path) if local else source, local_files_only=True, **kwargs)
    except (OSError, ValueError) as exc:
        if local:
            raise UserError(f"cannot load the {what} pipeline from {str(path)!r}: {str(exc).splitlines()[0]}") from None
        raise missing_model(source, what) from None


def pipeline_class_name(source: str) -> str | None:
    """``_class_name`` from a local pipeline folder's model_index.json (None if not local)."""
    import json

    index = Path(os.path.expanduser(source)) / "model_index.json"
    if not index.is_file():
        return None
    return json.loads(index.read_text()).get("_class_name")
