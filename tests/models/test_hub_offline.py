"""grpo_bench/hub_offline.py: the Hub's offline mode on inside the block and exactly as before after it."""

from __future__ import annotations

import os

import huggingface_hub.constants as hub
import pytest

from grpo_bench.hub_offline import offline_hub


@pytest.mark.parametrize("before", [None, "0"])
def test_offline_inside_and_restored_after(monkeypatch, before):
    if before is None:
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    else:
        monkeypatch.setenv("HF_HUB_OFFLINE", before)
    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", False)
    with pytest.raises(RuntimeError, match="inside"):
        with offline_hub():
            assert os.environ["HF_HUB_OFFLINE"] == "1" and hub.HF_HUB_OFFLINE is True
            raise RuntimeError("inside")  # a load that fails still restores
    assert os.environ.get("HF_HUB_OFFLINE") == before and hub.HF_HUB_OFFLINE is False
