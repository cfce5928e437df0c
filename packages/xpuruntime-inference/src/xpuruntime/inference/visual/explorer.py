"""Model Explorer (``ai-edge-model-explorer`` with the ``model-explorer-onnx`` adapter) on
loopback, with node-data overlays."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from xpuruntime.policies.errors import XpuRuntimeError

#: Model Explorer listens here only: the graph and the record stay on this machine.
LOOPBACK = "127.0.0.1"
INSTALL_HINT = "install it with: pip install 'xpuruntime[explore]'"


class ExplorerMissingError(XpuRuntimeError, ImportError):
    """Model Explorer or its ONNX adapter is not installed."""


def start_explorer(
    model: Path, node_data: Sequence[Path], *, port: int = 8080, open_browser: bool = True
) -> None:
    """Serve ``model`` with ``node_data`` files on 127.0.0.1:``port`` until interrupted."""
    try:
        import model_explorer
        import model_explorer_onnx  # noqa: F401  (registers nothing: named as an extension)
    except ImportError as exc:
        raise ExplorerMissingError(
            f"Model Explorer is not installed ({exc.name} missing); {INSTALL_HINT}"
        ) from exc
    config = model_explorer.config().add_model_from_path(str(model))
    for path in node_data:
        config = config.add_node_data_from_path(str(path))
    model_explorer.visualize_from_config(
        config,
        host=LOOPBACK,
        port=port,
        extensions=["model_explorer_onnx"],
        no_open_in_browser=not open_browser,
    )
