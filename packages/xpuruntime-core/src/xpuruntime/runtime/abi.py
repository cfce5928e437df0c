"""ABI handshake between the native core and the packages built against it.

Every package that calls into `xpuruntime.runtime._core` declares the ABI it was written
for and calls :func:`member_version` at import (``__version__ = member_version(name, abi)``),
so a mismatched install fails with a message naming both sides instead of a crash or an
obscure attribute error later.
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


def member_version(distribution: str, abi: int) -> str:
    """The installed version of ``distribution`` (a member calling into the native core),
    after checking the core provides the ABI it was written for (ImportError if not)."""
    try:
        installed = version(distribution)
    except PackageNotFoundError:  # running from a source tree that is not installed
        installed = "0.0.0+unknown"
    require_abi(abi, f"{distribution} {installed}")
    return installed
