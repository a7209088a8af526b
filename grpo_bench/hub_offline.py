"""Loads from local files and the Hugging Face cache with the Hub's offline mode on, so a load opens no socket.

``local_files_only=True`` keeps diffusers and transformers from downloading a file, yet huggingface_hub 2.x still
fetches a registry from the Hub on a load's first request, to name the caller in its user agent
(``huggingface_hub/utils/_detect_agent.py``): a failed lookup on a machine without network, a wait of up to that
request's timeout on a slow one. Offline mode (``HF_HUB_OFFLINE``) is the switch the whole stack reads: the
environment variable, and huggingface_hub's module constant, which its functions read at call time.
``offline_hub`` sets both for one load and restores them after.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def offline_hub() -> Iterator[None]:
    """Hub offline mode for the duration of the block (environment and huggingface_hub's constant), then as before."""
    import huggingface_hub.constants as hub

    env, constant = os.environ.get("HF_HUB_OFFLINE"), hub.HF_HUB_OFFLINE
    os.environ["HF_HUB_OFFLINE"], hub.HF_HUB_OFFLINE = "1", True
    try:
        yield
    finally:
        hub.HF_HUB_OFFLINE = constant
        if env is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = env
