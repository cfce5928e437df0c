"""`import xpuruntime.pytorch` without PyTorch fails with the install command."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

MESSAGE = "xpuruntime.pytorch requires PyTorch. Install with: pip install xpuruntime[torch]"


def test_import_without_torch_names_the_install_command(tmp_path: Path) -> None:
    # A meta-path finder that refuses torch stands in for an environment without it: the
    # import machinery raises the same ModuleNotFoundError it would for a missing package.
    (tmp_path / "sitecustomize.py").write_text(
        textwrap.dedent(
            """
            import sys

            class _NoTorch:
                def find_spec(self, name, path=None, target=None):
                    if name == "torch" or name.startswith("torch."):
                        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
                    return None

            sys.meta_path.insert(0, _NoTorch())
            """
        )
    )
    code = textwrap.dedent(
        """
        try:
            import xpuruntime.pytorch
        except ImportError as error:
            print(type(error).__name__, str(error), type(error.__cause__).__name__, sep="|")
        """
    )
    env_path = [str(tmp_path), *sys.path]
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": ":".join(env_path)},
        check=True,
        timeout=120,
    )
    assert result.stdout.strip() == f"ImportError|{MESSAGE}|ModuleNotFoundError"


def test_import_does_not_need_cuda() -> None:
    import xpuruntime.pytorch as xrt_torch

    assert xrt_torch.CORE_ABI == 1
    assert callable(xrt_torch.set_kernel_policy)
