"""One tensor against a reference under ``|a - b| <= atol + rtol * |b|``: what ``compare``
reports per output and a bundle's verification per reference output.

Apart from :mod:`xpuruntime.inference.compare` (which opens sessions) so that a bundle, which
a session opens, can verify without importing sessions back.
"""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np

from xpuruntime.inference.tensors import as_host_array

__all__ = ["TensorComparison", "compare_tensors"]


class TensorComparison(msgspec.Struct, frozen=True):
    """One tensor of one target against the reference target."""

    tensor: str
    target: str
    max_abs: float
    max_rel: float
    passed: bool
    note: str = ""
    #: NaN and infinite values in the target's and the reference's tensor.
    nonfinite: int = 0
    reference_nonfinite: int = 0


def compare_tensors(
    name: str,
    target: str,
    got: Any,
    expected: Any,
    *,
    atol: float,
    rtol: float,
    allow_nonfinite: bool = False,
) -> TensorComparison:
    """Compare one tensor with the reference's. NaN or Inf on either side fails the
    comparison unless ``allow_nonfinite`` (then they must sit at the same places)."""
    a = np.asarray(as_host_array(got)[0])
    b = np.asarray(as_host_array(expected)[0])
    if a.shape != b.shape:
        return TensorComparison(
            name,
            target,
            float("inf"),
            float("inf"),
            False,
            f"shape {a.shape} vs reference {b.shape}",
        )
    if a.dtype.kind not in "fc" and b.dtype.kind not in "fc":
        equal = bool(np.array_equal(a, b))
        return TensorComparison(
            name, target, 0.0 if equal else float("inf"), 0.0 if equal else float("inf"), equal
        )
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    if a64.size == 0:
        return TensorComparison(name, target, 0.0, 0.0, True)
    bad_a, bad_b = (
        int(np.count_nonzero(~np.isfinite(a64))),
        int(np.count_nonzero(~np.isfinite(b64))),
    )
    same_places = bool(np.array_equal(np.isfinite(a64), np.isfinite(b64)))
    both = np.isfinite(a64) & np.isfinite(b64)
    diff = np.where(both, np.abs(a64 - b64), 0.0)
    rel = diff / np.maximum(np.abs(np.where(both, b64, 1.0)), np.finfo(np.float64).tiny)
    max_abs = float(diff.max()) if same_places else float("inf")
    max_rel = float(rel.max()) if same_places else float("inf")
    close = same_places and np.allclose(a64, b64, atol=atol, rtol=rtol, equal_nan=True)
    passed = bool(close and (allow_nonfinite or not (bad_a or bad_b)))
    note = ""
    if bad_a or bad_b:
        note = f"NaN/Inf: {bad_a} in {target}, {bad_b} in the reference"
        if not same_places:
            note += " (at different places)"
        elif not allow_nonfinite:
            note += " (--allow-nonfinite accepts them where both sides agree)"
    return TensorComparison(name, target, max_abs, max_rel, passed, note, bad_a, bad_b)
