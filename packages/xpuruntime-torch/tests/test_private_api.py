"""Private PyTorch APIs are looked up through one helper that names them when they move."""

from __future__ import annotations

import pytest
import torch

from xpuruntime.pytorch._compat import private_api
from xpuruntime.pytorch.errors import TorchVersionError


def test_present_private_api_is_returned() -> None:
    assert private_api(torch._C, "_SDPBackend", "torch._C") is torch._C._SDPBackend


def test_moved_private_api_names_itself_and_the_fix() -> None:
    with pytest.raises(TorchVersionError, match=r"torch\._C\._gone_in_this_release") as info:
        private_api(torch._C, "_gone_in_this_release", "torch._C")
    assert "tested with torch 2.1 to 2.13" in str(info.value)
    assert isinstance(info.value, ImportError)
