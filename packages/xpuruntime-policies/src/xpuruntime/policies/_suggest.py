"""Wording shared by every "not one of the choices" error message."""

from __future__ import annotations

import difflib
import reprlib
from collections.abc import Iterable

# Values in messages come from files and may be huge or nested thousands deep: show a
# bounded repr (long text and deep nesting elided with "...").
_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 80
_REPR.maxlevel = 3
_REPR.maxlist = _REPR.maxdict = _REPR.maxtuple = 8


def shown(value: object) -> str:
    """``repr(value)``, bounded in length and depth, for error messages."""
    return _REPR.repr(value)


def closest(given: str, choices: Iterable[str]) -> str | None:
    """The choice ``given`` is most likely a slip of, or None when none is close."""
    options = sorted(set(choices))
    close = difflib.get_close_matches(given, options, n=1, cutoff=0.6)
    if not close:
        # Case slips (cublaslt for cublasLt) and abbreviations (onnx for onnxruntime) score
        # low on difflib's ratio; catch them here.
        folded = given.lower()
        close = [option for option in options if option.lower() == folded][:1] or [
            option for option in options if len(folded) >= 3 and option.lower().startswith(folded)
        ][:1]
    return close[0] if close else None


def choices_hint(given: str, choices: Iterable[str]) -> str:
    """``"Valid choices: a, b, c. Did you mean 'b'?"`` (the last part only when one is close)."""
    options = sorted(set(choices))
    hint = "Valid choices: " + (", ".join(options) if options else "(none)") + "."
    close = closest(given, options)
    if close is not None:
        hint += f" Did you mean {close!r}?"
    return hint
