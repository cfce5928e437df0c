"""The metaclass of the policy structs."""

from __future__ import annotations

from typing import Any

import msgspec

from xpuruntime.policies._suggest import choices_hint
from xpuruntime.policies.errors import UnknownFieldError


class PolicyStructMeta(msgspec.StructMeta):
    """Turns an unknown keyword argument into UnknownFieldError with a "did you mean".

    (msgspec's own TypeError names the argument but not the settings that exist.)
    """

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        fields = cls.__struct_fields__
        for name in kwargs:
            if name not in fields:
                raise UnknownFieldError(
                    f"{cls.__name__} has no setting {name!r}. {choices_hint(name, fields)}"
                )
        return super().__call__(*args, **kwargs)
