"""An embedded world's parts by role, so that no module outside the world names them.

A world (the video world here, the image world's two tasks in grpo_bench/image_world/plugin.py) registers one
``WorldRoles`` entry beside its other registrations: its base model, the reward its runs train on (the judge),
its exact oracle and its prompt set, each a registered name. The trainer's evaluation, the CLI and the suite look
a role up here (``WORLDS.get(VIDEO_WORLD).judge``) instead of spelling "world_judge"; the run config's defaults
(``model: world``, ``reward: world_judge``, ``prompts: world``) and every cell id are unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

from grpo_bench.registry import Registry


@dataclass
class WorldRoles:
    """One world's registered names by role."""

    model: str
    """Its base generator (a registered model)."""
    judge: str
    """The reward its runs train on by default: the learned judge (the video world, the compositional image
    task) or the task's real reward (PP-OCRv4 on the text task)."""
    oracle: str
    """Its exact scorer: a reward registered as ground truth for ``prompts``."""
    prompts: str
    """Its prompt set."""
    name: str = ""
    """The world's name (set by ``WORLDS.register``)."""


WORLDS: Registry[WorldRoles] = Registry("world")
"""World name -> its roles; plug-in worlds register theirs when the plug-ins load (every lookup loads them)."""

VIDEO_WORLD = "world"
"""The embedded video world: the run config's default model, reward and prompts, whose oracle also scores a
prompt file of world prompts."""

WORLDS.register(VIDEO_WORLD)(WorldRoles(model="world", judge="world_judge", oracle="world_oracle", prompts="world"))


def video_world() -> WorldRoles:
    """The embedded video world's roles."""
    return WORLDS.get(VIDEO_WORLD)
