"""How the diffusers families become models by name: ``register_family`` enters a family's tiny preset
and named checkpoints in the model registry and its pipeline class in ``PIPELINES``, through which
``load_any`` opens any supported pipeline folder or cached hub id."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from grpo_bench.errors import UserError
from grpo_bench.models.adapter_options import AdapterOptions
from grpo_bench.models.diffusers_video import DiffusersVideoModel
from grpo_bench.models.options import ModelSection
from grpo_bench.models.pipeline_files import looks_local, missing_model, pipeline_class_name
from grpo_bench.models.registry import ModelRegistry

PIPELINES = ModelRegistry("diffusers pipeline")
"""Pipeline class name (model_index.json ``_class_name``) -> loader(source, options), with its modality."""


def load_any(source: str, section: ModelSection | None = None, **overrides: Any) -> DiffusersVideoModel:
    """A supported diffusers pipeline from a local folder or a hub id in the local cache, chosen by
    its model_index.json ``_class_name``, set up as ``section`` says (keywords override ``AdapterOptions``);
    UserError naming the download when it is not present."""
    if looks_local(source) and not Path(source).expanduser().is_dir():
        raise UserError(f"config key 'model': folder {source!r} does not exist (a local diffusers pipeline "
                        "folder is expected; grpo-bench never downloads weights)")
    name = pipeline_class_name(source)
    if name is None:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(source, "model_index.json") if source.count("/") == 1 else None
        if not isinstance(cached, str):
            raise missing_model(source, "diffusers")
        name = pipeline_class_name(str(Path(cached).parent))
    loader = PIPELINES.get(name or "?", where=f"model {source!r}: ")
    return loader(source, adapter_options(section, overrides, PIPELINES.modality(name or "?")))


def adapter_options(section: ModelSection | None, overrides: dict[str, Any], modality: str) -> AdapterOptions:
    """A diffusers model's options: the run's model ``section`` (None: the defaults, one frame for a still-image
    model; a run's frames come from config/run.py), ``overrides`` on top."""
    if section is None:
        return AdapterOptions(**({"frames": 1, **overrides} if modality == "image" else overrides))
    return AdapterOptions.from_section(section, **overrides)


def pipeline_modality(source: str) -> str | None:
    """'image' or 'video' of a local pipeline folder or a cached hub id, read from its model_index.json
    without loading a weight; None when neither is present or the pipeline class is not supported."""
    name = pipeline_class_name(source)
    if name is None and source.count("/") == 1 and not looks_local(source):
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(source, "model_index.json")
        name = pipeline_class_name(str(Path(cached).parent)) if isinstance(cached, str) else None
    if name is None or name not in PIPELINES:
        return None
    return PIPELINES.modality(name)


def register_family(model: type[DiffusersVideoModel], tiny_name: str,
                    tiny: Callable[..., DiffusersVideoModel]) -> None:
    """Register a model family: its pipeline class (``model.pipeline_class``, for ``load_any``), a random
    tiny preset ``tiny(options, seed)`` and one entry per ``model.hub_ids`` name, loaded by
    ``model.from_pretrained`` from local files only. Every factory takes the run's ``section``
    (models/options.py ``ModelSection``: frames, size, LoRA, precision, device); keywords override
    AdapterOptions."""
    from grpo_bench.models.registry import MODELS

    def load_pipeline_folder(source: str, options: AdapterOptions) -> DiffusersVideoModel:
        return model.from_pretrained(source, options)

    load_pipeline_folder.__doc__ = f"A {model.family} pipeline from a local folder or the local Hugging Face cache."
    PIPELINES.register(model.pipeline_class, model.modality)(load_pipeline_folder)

    def tiny_factory(pretrained: bool = True, section: ModelSection | None = None, seed: int = 0,
                     **kw: Any) -> DiffusersVideoModel:
        return tiny(adapter_options(section, kw, model.modality), seed=seed)

    tiny_factory.__doc__ = f"Random tiny {model.family} (random whether or not ``pretrained``: no tiny weights exist)."
    MODELS.register(tiny_name, model.modality)(tiny_factory)
    for name, hub_id in model.hub_ids.items():

        def hub_factory(pretrained: bool = True, section: ModelSection | None = None, _hub: str = hub_id,
                        **kw: Any) -> DiffusersVideoModel:
            return model.from_pretrained(_hub, adapter_options(section, kw, model.modality))

        hub_factory.__doc__ = f"{hub_id} from the local cache or a local folder (never downloaded)."
        hub_factory.hub_id, hub_factory.family = hub_id, model.family
        MODELS.register(name, model.modality)(hub_factory)
