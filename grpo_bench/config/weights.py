"""Where a run's weights come from: ``model=`` and ``reward_path=`` / ``reward_base_path=``, checked
before any work starts.

``model`` is a registered name (tiny presets, named checkpoints found in the Hugging Face cache),
a hub id (``org/name``, the local cache only) or a local folder. Anything that looks like a path
(starts with ``/``, ``.`` or ``~``, or has more than one ``/``) must be an existing folder; the
error names the key and the path, never a download command for a path. Rewards take their weights
through the keyword arguments their factory declares in ``path_options``, each a file or a folder
(rewards/base.py ``factory_declaration``; VideoAlign: checkpoint and base_model folders; CLIPScore: a model
folder; PickScore: model and processor folders; HPSv2: a checkpoint file; ImageReward: checkpoint and
med_config files; world judge: a weights file).

Every check reads the run's experiment section (``Compared``: model, reward, prompts and the weight paths), never
the whole run config; ``check_modality`` also the generator's ``frames``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from grpo_bench.config.sections import Compared
from grpo_bench.errors import UserError
from grpo_bench.models.pipeline_files import looks_local
from grpo_bench.rewards.base import FILE, FOLDER, factory_declaration


def check_path(what: str, value: str, kind: str, where: str = "", taker: str = "") -> None:
    """``value`` exists and is of ``kind`` (rewards/base.py FILE, FOLDER or FILE_OR_FOLDER), else one line
    naming ``what`` (the key or flag), the path and what is expected (``taker``: who expects it, and how)."""
    path = Path(value).expanduser()
    expected = taker or f"a local {kind} is expected"
    if not path.exists():
        raise UserError(f"{where}{what}: {value!r} does not exist ({expected}; grpo-bench never downloads weights)")
    if (kind == FOLDER and not path.is_dir()) or (kind == FILE and not path.is_file()):
        raise UserError(f"{where}{what}: {value!r} is not a {kind} ({expected})")


def check_model(experiment: Compared, where: str = "") -> None:
    """``model`` names something loadable: a registered name, a hub id, or an existing folder."""
    from grpo_bench import models

    name = experiment.model
    if name in models.names():
        return
    if looks_local(name) or Path(name).expanduser().exists():
        check_path("config key 'model'", name, FOLDER, where)
        if not (Path(name).expanduser() / "model_index.json").is_file():
            raise UserError(f"{where}config key 'model': folder {name!r} has no model_index.json "
                            "(expected a diffusers pipeline folder, e.g. from `hf download ID --local-dir DIR`)")
        return
    if name.count("/") != 1:
        raise UserError(f"{where}config key 'model': {name!r} is neither a registered model "
                        f"({', '.join(models.names())}), a hub id (org/name) nor an existing folder")


def reward_kwargs(experiment: Compared) -> dict[str, str]:
    """Keyword arguments that point the reward's factory at ``reward_path`` / ``reward_base_path``."""
    from grpo_bench.rewards import REWARDS

    paths = [p for p in (experiment.reward_path, experiment.reward_base_path)]
    if not any(paths):
        return {}
    options = tuple(factory_declaration(REWARDS.get(experiment.reward)).path_options)
    return {opt: p for opt, p in zip(options, paths) if p}


def check_reward(experiment: Compared, where: str = "") -> None:
    """The reward exists, takes the paths given, and each path exists and is the file or folder its
    factory declares for that option."""
    from grpo_bench.rewards import REWARDS

    kinds = factory_declaration(REWARDS.get(experiment.reward, where=where)).path_options
    options = tuple(kinds)
    paths = (("reward_path", experiment.reward_path, 0), ("reward_base_path", experiment.reward_base_path, 1))
    for key, value, index in paths:
        if not value:
            continue
        if len(options) <= index:
            raise UserError(f"{where}config key {key!r}: reward {experiment.reward!r} takes "
                            f"{'no weight path' if not options else 'only reward_path'}")
        option = options[index]
        check_path(f"config key {key!r}", value, kinds[option], where,
                   taker=f"reward {experiment.reward!r} takes its {option} as a local {kinds[option]}")


def check_modality(experiment: Compared, frames: int, where: str = "") -> None:
    """An image model makes one-frame clips (``frames: 1``) and is scored by a reward of stills; a video
    model by a reward of videos (a reward's ``modality``: 'image', 'video' or 'any'). Read from the
    registries and a folder's model_index.json: no model is built."""
    from grpo_bench import models
    from grpo_bench.rewards import REWARDS

    kind = models.modality(experiment.model)
    if kind is None:  # an uncached hub id: the load says what to download
        return
    if kind == "image" and frames != 1:
        raise UserError(f"{where}config key 'frames': model {experiment.model!r} makes still images (one frame), "
                        f"got frames={frames}; leave frames out (an image model's default is 1) or set frames: 1")
    from grpo_bench.rewards import GROUND_TRUTH, declares_ground_truth

    truth = GROUND_TRUTH.get(experiment.prompts) if declares_ground_truth(experiment.prompts) else None
    if kind == "image" and experiment.eval_oracle and (
            truth is None or reward_modality(REWARDS.get(truth)) == "video"):
        raise UserError(f"{where}config key 'eval_oracle': the world oracle scores the embedded world's videos, not "
                        f"the stills of model {experiment.model!r}; leave eval_oracle out (an image model's default is "
                        "false)")
    scores = reward_modality(REWARDS.get(experiment.reward))
    if scores not in ("any", kind):
        fits = [n for n in REWARDS.names() if reward_modality(REWARDS.get(n)) in ("any", kind)]
        raise UserError(f"{where}config key 'reward': {experiment.reward!r} scores {scores}s only, but model "
                        f"{experiment.model!r} makes {kind}s; choose one of {', '.join(fits)}")


def reward_modality(factory: Any) -> str:
    """What a registered reward scores: 'image' (stills), 'video' or 'any' (every frame; the default)."""
    return factory_declaration(factory).modality


def check_model_present(experiment: Compared, where: str = "") -> None:
    """A registered checkpoint name (``sd3.5-medium``, ``wan2.1-1.3b`` ...) is in the local Hugging Face cache
    (its model_index.json), else one line naming the download, before any model is built."""
    from grpo_bench import models

    factory = models.MODELS.get(experiment.model) if experiment.model in models.MODELS else None
    hub_id = getattr(factory, "hub_id", None)
    if hub_id is None:
        return
    from huggingface_hub import try_to_load_from_cache

    if not isinstance(try_to_load_from_cache(hub_id, "model_index.json"), str):
        from grpo_bench.models.pipeline_files import missing_model

        raise UserError(f"{where}{missing_model(hub_id, getattr(factory, 'family', 'diffusers'))}")


def check_weight_paths(experiment: Compared, where: str = "") -> None:
    check_model(experiment, where)
    check_reward(experiment, where)


def check_video_shape(experiment: Compared, model: Any, reward: Any) -> None:
    """The reward scores videos of the shape the model makes (a reward that declares ``video_shape``);
    UserError with the keys to change, before a single video is sampled."""
    from grpo_bench.rewards.base import declaration

    want = declaration(reward).video_shape
    have = tuple(model.video_shape)
    if want is None or tuple(want) == have:
        return
    what = f"reward {experiment.reward!r} scores videos of frames x height x width {'x'.join(map(str, want[1:]))}"
    got = f"model {experiment.model!r} makes {'x'.join(map(str, have[1:]))}"
    if experiment.model == "world":
        fix = f"set video_size: {want[2]} (or rebuild the judge for this size: grpo-bench pretrain judge --size N)"
    else:
        fix = ("the world judge scores only the embedded world's videos; choose a reward for real models "
               "(reward=videoalign / clip_score / pickscore with weights on disk) "
               "or reward=world_oracle for a smoke run")
    raise UserError(f"{what} but {got}; {fix}")
