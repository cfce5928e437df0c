"""ABI handshake between the native core and the packages built against it.

Every package that calls into `xpuruntime.runtime._core` declares the ABI it was written
for and calls :func:`require_abi` at import, so a mismatched install fails with a message
naming both sides instead of a crash or an obscure attribute error later.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version


def core_abi_version() -> int:
    """The integer ABI version compiled into the installed native core."""
    from xpuruntime.runtime import _core

    return int(_core.ABI_VERSION)


def require_abi(required: int, consumer: str) -> None:
    """Raise ImportError unless the installed core provides ABI ``required``.

    ``consumer`` is the distribution asking (for example ``"xpuruntime-inference 0.1.0"``).
    """
    provided = core_abi_version()
    if provided != required:
        try:
            core_version = version("xpuruntime-core")
        except PackageNotFoundError:
            core_version = "unknown"
        raise ImportError(
            f"{consumer} needs xpuruntime-core ABI {required}, but the installed "
            f"xpuruntime-core {core_version} provides ABI {provided}. Install a matching set, "
            f"for example: pip install --upgrade 'xpuruntime' (it pins the tested versions)."
        )
