"""Launching the Hopper attention kernels (Gluon, and the small Triton kernels beside them)
without the JIT's per-call host work.

Triton's JIT binds the arguments, computes a cache key and looks the compiled kernel up on
every call; a Gluon host TMA descriptor validates itself on construction; the compiled
kernel's ``[grid]`` wrapper builds launch metadata. Here the first call of a kind goes
through the JIT, which compiles, caches and launches, and returns the compiled kernel; it is
kept under a key holding everything that JIT specialises on (the constants, the warps, each
tensor's dtype and 16-byte alignment, each integer's being 1, divisible by 16 or past 32
bits, each descriptor's dtype, block and layout), so a call the JIT would compile anew still
goes through it. Later calls launch the kept kernel (:class:`Kept`) through its own launcher
(``CompiledKernel.run``) with light descriptor arguments; a caller that knows from a key of
its own that a call specialises as an earlier one did launches the kept kernel directly
(the Hopper forward's repeated calls, :mod:`.hopper`), without this module's per-argument
key. Measured by ``scripts/attention_host_time.py`` (docs/attention.md).

Light: ``import xpuruntime`` loads it (through :mod:`.hopper`), so torch and Triton are
imported inside the functions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from xpuruntime.runtime.errors import XpuRuntimeError

if TYPE_CHECKING:
    import torch

__all__ = ["Kept", "Tma", "launch", "relaunch_key"]


@dataclass(frozen=True, slots=True)
class Tma:
    """A host TMA descriptor argument: ``tensor`` (16-byte aligned base and outer strides,
    unit inner stride, no empty dimension: the caller's to establish, as Gluon's descriptor
    asserts them) read in ``block`` boxes into shared memory of ``layout``."""

    tensor: torch.Tensor
    block: tuple[int, ...]
    layout: Any


class _HostDescriptor:
    """A descriptor argument as Triton's launcher reads it for a compiled kernel: the tensor,
    its shape and strides, the padding. The launcher encodes the tensor map with the block
    and swizzle recorded in the kernel's metadata when the JIT compiled it from a Gluon
    ``TensorDescriptor``, not with the argument's, so later calls pass this instead and skip
    that class's per-call validation."""

    __slots__ = ("base", "padding", "shape", "strides")

    def __init__(self, x: torch.Tensor) -> None:
        self.base = x
        self.shape = list(x.shape)
        self.strides = list(x.stride())
        self.padding = "zero"


def _int_key(value: int) -> Any:
    return value == 1, value % 16 == 0, -(2**31) <= value < 2**31


def _type_key(value: float | bool) -> Any:
    return type(value)


def _tma_key(arg: Tma) -> Any:
    return arg.tensor.dtype, arg.block, arg.layout


def _pointer_key(x: torch.Tensor) -> Any:
    return x.dtype, x.data_ptr() % 16 == 0


#: What Triton's JIT specialises an argument on, by the argument's type: an integer on being
#: 1, divisible by 16, fitting 32 bits; a pointer (a tensor) on its dtype and 16-byte
#: alignment; a descriptor on its dtype, block and layout; a float or bool on its type alone.
#: Looked up by exact type, the common case (the key is built on every call); other types
#: (tensors, numpy scalars) go through :func:`_key_of_other` once, which adds the tensors'.
_KEYS: dict[type, Any] = {int: _int_key, float: _type_key, bool: _type_key, Tma: _tma_key}


def _key_of_other(arg: Any) -> Any:
    import numbers

    if isinstance(arg, bool):
        return bool
    if isinstance(arg, numbers.Integral):
        return _int_key(int(arg))
    if isinstance(arg, numbers.Real):
        return float
    # A pointer: later arguments of this type skip the (abstract-class) checks above.
    _KEYS[type(arg)] = _pointer_key
    return _pointer_key(arg)


def _arg_key(arg: Any) -> Any:
    by_type = _KEYS.get(type(arg))
    return by_type(arg) if by_type is not None else _key_of_other(arg)


def _gluon_descriptor(arg: Tma) -> Any:
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    x = arg.tensor
    return TensorDescriptor(x, list(x.shape), list(x.stride()), list(arg.block), arg.layout)


def _launch_hooks_set(runtime: Any) -> bool:
    """Whether a launch hook is installed in Triton's runtime settings (a profiler such as
    Proton): then the compiled kernel's ``[grid]`` wrapper launches, which computes the
    launch metadata hooks take."""
    enter, leave = runtime.launch_enter_hook, runtime.launch_exit_hook
    return bool(getattr(enter, "calls", enter)) or bool(getattr(leave, "calls", leave))


class Kept:
    """A kernel the JIT compiled for one specialisation of its arguments, launched again with
    arguments of that same specialisation through its own launcher
    (``CompiledKernel.run``), without :func:`launch`'s cache key (built per argument on every
    call, the larger part of a launch's host time). The caller must know that the arguments
    specialise as the first call's did (the same dtypes, tensors' 16-byte alignment,
    integers' classes, descriptors' dtype, block and layout), e.g. from a cache of its own
    keyed on the shapes, strides and alignment that determine them."""

    __slots__ = ("constant_values", "device", "kernel")

    def __init__(self, kernel: Any, constant_values: tuple[Any, ...], device: int) -> None:
        self.kernel = kernel  # Triton's CompiledKernel
        self.constant_values = constant_values  # in the kernel's argument order
        self.device = device

    def launch(self, grid: tuple[int, ...], args: Sequence[Any]) -> None:
        """Launch on ``grid`` on the current stream of the device it was compiled for, with
        ``args`` as :func:`launch` takes them (less the constants)."""
        from triton import knobs
        from triton.runtime import driver

        kernel = self.kernel
        values = [_HostDescriptor(a.tensor) if type(a) is Tma else a for a in args]
        grid3 = (*grid, 1, 1)[:3]
        stream = driver.active.get_current_stream(self.device)
        if _launch_hooks_set(knobs.runtime):
            kernel[grid3](*values, *self.constant_values, stream=stream)
            return
        # CompiledKernel.run is its launcher: grid, stream, function, then the packed metadata,
        # launch metadata and hooks (none here), then the kernel's arguments.
        kernel.run(
            *grid3, stream, kernel.function, kernel.packed_metadata, None, None, None,
            *values, *self.constant_values,
        )  # fmt: skip


#: (kernel, device, constants, warps, Triton's debug and instrumentation settings, the
#: arguments' specialisations) -> the compiled kernel and its constant arguments' values in
#: the kernel's order.
_compiled: dict[tuple[Any, ...], Kept] = {}


def _jit_settings() -> tuple[Any, ...]:
    """Triton's settings the JIT compiles under besides the arguments: debug and
    instrumentation (e.g. the sanitizer's); a kept kernel serves only the settings it was
    compiled under."""
    from triton import knobs

    return knobs.runtime.debug, knobs.compilation.instrumentation_mode


def relaunch_key(fn: Any) -> tuple[Any, ...] | None:
    """What a caller's own key for launching ``fn``'s kept kernels again
    (:meth:`Kept.launch`) must hold besides its arguments' specialisation: Triton's settings
    the JIT compiles under. None when ``fn`` has pre-run hooks, which only the JIT runs (every
    call then goes through :func:`launch`)."""
    return None if getattr(fn, "pre_run_hooks", None) else _jit_settings()


def launch(
    fn: Any,
    grid: tuple[int, ...],
    args: Sequence[Any],
    constants: Mapping[str, Any],
    *,
    num_warps: int = 4,
    maxnreg: int | None = None,
) -> Kept | None:
    """Launch the JIT function ``fn`` on ``grid`` on the current device's current stream:
    ``args`` its runtime arguments in order (tensors, integers, floats, :class:`Tma`
    descriptors), ``constants`` its ``constexpr`` arguments by name, which must be exactly
    the arguments after the runtime ones (checked before anything runs). ``maxnreg``: the
    registers a thread at launch (ptxas' ``.maxnreg``), None for the compiler's choice.
    Returns the kept compiled kernel (:class:`Kept`), or None where none is kept (Triton's
    interpreter, a function with pre-run hooks)."""
    from triton.runtime import driver

    device = driver.active.get_current_device()
    key = (
        id(fn), device,
        tuple([(name, type(value), value) for name, value in constants.items()]),
        num_warps, maxnreg, *_jit_settings(), tuple([_arg_key(arg) for arg in args]),
    )  # fmt: skip
    kept = _compiled.get(key)
    if kept is not None and not getattr(fn, "pre_run_hooks", None):
        kept.launch(grid, args)
        return kept
    # The JIT: it compiles (or finds) the kernel and launches it, and runs pre-run hooks.
    rest = fn.arg_names[len(args) :]
    if set(rest) != set(constants):
        raise XpuRuntimeError(
            f"gluon_launch: {fn.__name__} takes {list(rest)} after its {len(args)} runtime "
            f"arguments, but the constants given are {list(constants)}"
        )
    values = [_gluon_descriptor(a) if isinstance(a, Tma) else a for a in args]
    options = {"num_warps": num_warps} | ({} if maxnreg is None else {"maxnreg": maxnreg})
    kernel = fn[grid](*values, **constants, **options)
    if kernel is None or getattr(fn, "pre_run_hooks", None):
        return None  # None: Triton's interpreter, which keeps no compiled kernel
    # Later calls pass every argument in the kernel's order, constants included, as the JIT
    # passes them to the compiled kernel.
    kept = _compiled[key] = Kept(kernel, tuple(constants[name] for name in rest), device)
    return kept
