"""What to install when an import fails: the pip extra (or dependency) that brings each module back.

The optional parts (the human study, trackers, SLURM, DeepSpeed) and the real-model stack are imported
where they are used, so a missing one surfaces as a ModuleNotFoundError deep in a command. The CLI turns
it into one line naming the install (``grpo_bench.cli.entry.main``); ``require`` checks up front.
A test keeps these tables in step with pyproject.toml.
"""

from __future__ import annotations

import importlib.util

from grpo_bench.errors import UserError

EXTRA_OF = {
    "fastapi": "study", "starlette": "study", "uvicorn": "study", "jinja2": "study", "multipart": "study",
    "python_multipart": "study", "httpx": "study", "selenium": "study", "krippendorff": "study",
    "tensorboard": "tensorboard", "wandb": "wandb", "submitit": "cluster", "deepspeed": "deepspeed",
    "rapidocr_onnxruntime": "ocr",
}
"""Top-level module -> the extra of pyproject's [project.optional-dependencies] that installs it."""
DISTRIBUTION_OF = {
    "fastapi": "fastapi", "starlette": "fastapi", "uvicorn": "uvicorn", "jinja2": "jinja2",
    "multipart": "python-multipart", "python_multipart": "python-multipart", "httpx": "httpx",
    "selenium": "selenium", "krippendorff": "krippendorff", "tensorboard": "tensorboard", "wandb": "wandb",
    "submitit": "submitit", "deepspeed": "deepspeed", "rapidocr_onnxruntime": "rapidocr-onnxruntime",
    "diffusers": "diffusers", "transformers": "transformers", "peft": "peft", "accelerate": "accelerate",
    "safetensors": "safetensors", "imageio_ffmpeg": "imageio-ffmpeg", "imageio": "imageio",
}
"""Top-level module -> the distribution that pyproject names for it (modules without an extra are
dependencies of the package itself: the real-model stack, checkpoints, videos)."""


def install_hint(module: str) -> str | None:
    """The pip command that brings ``module`` (a dotted name is read by its top level) back; None if unknown."""
    top = module.split(".")[0]
    if top in EXTRA_OF:
        return f"pip install 'grpo-bench[{EXTRA_OF[top]}]'"
    if top in DISTRIBUTION_OF:
        return f"pip install {DISTRIBUTION_OF[top]} (a dependency of grpo-bench; `pip install -e .` installs them all)"
    return None


def missing_line(exc: ModuleNotFoundError) -> str | None:
    """One line for a failed import of a module we know how to install; None for any other module (a bug)."""
    name = exc.name or ""
    hint = install_hint(name)
    if hint is None:
        return None
    top = name.split(".")[0]
    what = f"the {EXTRA_OF[top]} extra" if top in EXTRA_OF else "grpo-bench"
    return f"{top} is not installed (part of {what}): {hint}"


def require(module: str, what: str) -> None:
    """Fail with one line before any work when ``what`` needs ``module`` and it is not importable."""
    if importlib.util.find_spec(module) is None:
        how = install_hint(module) or f"pip install {module}"
        raise UserError(f"{what} needs {module}, which is not installed: {how}")
