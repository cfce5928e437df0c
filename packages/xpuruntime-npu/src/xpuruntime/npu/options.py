"""The per-engine escape hatch ``ExecutionPolicy.engine_options[engine]``, validated.

Policy files keep engine options flat (``{"qnn": {"soc_model": "69"}}``). Each engine names
the keys it maps itself and the keys it passes to its backend untouched; anything else is
a PolicyError naming the valid keys, so a typo never vanishes silently.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any

from xpuruntime.policies._suggest import choices_hint
from xpuruntime.policies.errors import PolicyError

if TYPE_CHECKING:
    from xpuruntime.policies import ExecutionPolicy


def engine_options(
    policy: ExecutionPolicy,
    engine: str,
    mapped: Collection[str],
    passthrough: Callable[[str], bool],
    valid: str,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(options the engine maps, options passed to the backend as is) of ``engine_options[engine]``."""
    own: dict[str, Any] = {}
    raw: dict[str, Any] = {}
    for key, value in dict((policy.engine_options or {}).get(engine, {})).items():
        if key in mapped:
            own[key] = value
        elif passthrough(key):
            raw[key] = value
        else:
            raise PolicyError(
                f"engine_options[{engine!r}] has unknown key {key!r}; besides {valid}: "
                f"{choices_hint(key, mapped)}"
            )
    return own, raw
