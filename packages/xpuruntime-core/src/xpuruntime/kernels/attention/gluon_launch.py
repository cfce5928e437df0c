"""Launching the Hopper attention kernels (Gluon, and the small Triton kernels beside them)
without the JIT's per-call host work.

Triton's JIT binds the arguments, computes a cache key and looks the compiled kernel up on
every call; a Gluon host TMA descriptor validates itself on construction; the compiled
kernel's ``[grid]`` wrapper builds launch metadata. Here the first call of a kind goes
through the JIT, which compiles, caches and launches, and returns the compiled kernel; it is
kept under a key holding everything that JIT specialises on (the constants, the warps and
pipeline stages, each tensor's dtype and 16-byte alignment, each integer's being 1, divisible
by 16 or past 32 bits, each descriptor's dtype, block and layout), so a call the JIT would
compile anew still goes through it. Later calls launch the kept kernel (:class:`Kept`) through Triton's
compiled C launcher without its Python wrappers (:class:`_Direct`), or, where that launcher
is laid out otherwise, through ``CompiledKernel.run`` with light descriptor arguments; a
caller that knows from a key of its own that a call specialises as an earlier one did
launches the kept kernel directly (the Hopper forward's repeated calls, :mod:`.hopper`),
without this module's per-argument key, or binds one launch's arguments (:class:`Bound`)
and launches it again with new tensors' addresses alone. Measured by
``scripts/attention_host_time.py`` (docs/attention.md).

Light: ``import xpuruntime`` loads it (through :mod:`.hopper`), so torch and Triton are
imported inside the functions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from xpuruntime.runtime.errors import XpuRuntimeError

if TYPE_CHECKING:
    import torch

__all__ = ["Bound", "Kept", "Repeats", "Replay", "Tma", "launch", "relaunch_key"]


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


class _Direct:
    """Triton's compiled launcher for one kernel (Triton 3.6's ``CudaLauncher``), called
    without its Python wrappers: ``CudaLauncher.__call__`` (scratch allocation, none here)
    and the wrapper that expands each descriptor argument into its encoded tensor map,
    shape and strides (a loop over every argument, with a dictionary of the kernel's
    descriptor metadata read per descriptor). Here the descriptors' positions and metadata
    are read once, so a launch encodes each descriptor's tensor map and passes the rest as
    they are; the C launcher itself (argument parsing, ``cuLaunchKernelEx``) is Triton's. A
    CUDA tensor passed as a pointer goes as its address: the launcher takes an integer as
    it is, where for a tensor it calls ``data_ptr`` and asks the driver about the address
    (``cuPointerGetAttribute``, per pointer and launch); any other tensor goes as it is,
    for that query to judge it as before. :meth:`of` returns None where the launcher is
    not Triton 3.6's ``CudaLauncher`` laid out as read here, or needs scratch memory: those
    launches go through ``CompiledKernel.run``."""

    __slots__ = ("current_stream", "fill", "head", "launch", "plan", "runtime")

    def __init__(
        self,
        launch: Any,
        head: tuple[Any, ...],
        plan: list[tuple[int, tuple[Any, ...] | None]],
        driver: Any,
        runtime: Any,
    ) -> None:
        self.launch = launch  # the C function: grid, stream, then ``head``, then the arguments
        self.head = head
        # By position: (position, (swizzle, element size, dtype, block)) for a descriptor,
        # (position, None) for a pointer.
        self.plan = plan
        self.fill = driver.utils.fill_tma_descriptor  # encodes a tensor map
        self.current_stream = driver.get_current_stream  # a device's current raw stream
        self.runtime = runtime  # Triton's runtime settings (launch hooks)

    @classmethod
    def of(cls, kernel: Any) -> _Direct | None:
        try:
            from triton import knobs
            from triton.backends.nvidia import driver as nvidia
            from triton.runtime import driver

            launcher = kernel.run
            if type(launcher) is not nvidia.CudaLauncher or nvidia._BASE_ARGS_FORMAT != (
                "iiiKKppOOOOOO"  # grid, stream, function, flags, scratch, metadata, hooks
            ):
                return None
            if launcher.global_scratch_size or launcher.profile_scratch_size:
                return None  # allocated per launch by CudaLauncher.__call__
            wrapped = launcher.launch
            qualname = getattr(wrapped, "__qualname__", None)
            if qualname == "wrap_handle_tensordesc.<locals>.inner":  # expands descriptors
                cells = dict(
                    zip(wrapped.__code__.co_freevars, wrapped.__closure__ or (), strict=True)
                )
                c_launch = cells["launcher"].cell_contents
                positions = sorted(cells["tensordesc_indices"].cell_contents)
                metadata = cells["tensordesc_meta"].cell_contents
            elif type(wrapped).__name__ == "builtin_function_or_method":  # no descriptor
                c_launch, positions, metadata = wrapped, [], []
            else:
                return None
            if len(metadata) != len(positions) or any(
                meta is None or meta["fp4_padded"] for meta in metadata
            ):
                return None
            plan: list[tuple[int, tuple[Any, ...] | None]] = [
                (position, (
                    meta["swizzle"], meta["elem_size"],
                    nvidia.TMA_DTYPE_DEVICE_TO_HOST[meta["elem_type"]], meta["block_size"],
                ))
                for position, meta in zip(positions, metadata, strict=True)
            ]  # fmt: skip
            types = list(kernel.src.signature.values())
            plan += [
                (i, None) for i, ty in enumerate(types) if isinstance(ty, str) and ty[0] == "*"
            ]
            plan.sort(key=lambda entry: entry[0])
            head = (
                kernel.function, launcher.launch_cooperative_grid, launcher.launch_pdl,
                None, None, kernel.packed_metadata, None, None, None,
            )  # fmt: skip
            return cls(c_launch, head, plan, driver.active, knobs.runtime)
        except (AttributeError, KeyError, RuntimeError, TypeError, ValueError):
            return None  # not the layout read above

    def __call__(
        self, grid3: tuple[int, ...], stream: int, args: Sequence[Any], constants: tuple[Any, ...]
    ) -> None:
        self.launch(*self.lay_out(grid3, stream, args, constants, ())[0])

    def lay_out(
        self,
        grid3: tuple[int, ...],
        stream: int,
        args: Sequence[Any],
        constants: tuple[Any, ...],
        sources: Sequence[Any],
    ) -> tuple[list[Any], list[_Slot]]:
        """The C launcher's arguments for one launch, and where in them each descriptor or
        CUDA pointer over one of ``sources`` (by identity) went (:class:`Bound`)."""
        final = [*grid3, stream, *self.head]
        slots: list[_Slot] = []
        fill, done = self.fill, 0
        for position, meta in self.plan:
            final += args[done:position]
            arg = args[position]
            done = position + 1
            if meta is None:  # a pointer
                if getattr(arg, "is_cuda", False):
                    if sources:
                        _add_slot(slots, sources, arg, len(final), None)
                    final.append(arg.data_ptr())
                else:
                    final.append(arg)
                continue
            if type(arg) is not Tma:
                raise XpuRuntimeError(
                    f"gluon_launch: argument {position} of a kept kernel must be a Tma, "
                    f"got {type(arg).__name__}"
                )
            x = arg.tensor
            shape, strides = list(x.shape), list(x.stride())
            if strides[-1] != 1:  # the encoding assumes it (Triton's own wrapper asserts it)
                raise XpuRuntimeError(
                    f"gluon_launch: descriptor argument {position} has inner stride "
                    f"{strides[-1]}, not 1"
                )
            if sources:
                _add_slot(slots, sources, x, len(final), (*meta, shape, strides, 0))
            final.append(fill(x.data_ptr(), *meta, shape, strides, 0))  # 0: zero padding
            final += shape
            final += strides
        final += args[done:]
        final += constants
        return final, slots


#: (index in the C launcher's arguments, index in a bound launch's sources, the tensor-map
#: encoding's arguments after the address, None for a pointer).
_Slot = tuple[int, int, "tuple[Any, ...] | None"]


def _add_slot(
    slots: list[_Slot], sources: Sequence[Any], tensor: Any, index: int, encoding: Any
) -> None:
    for source_index, source in enumerate(sources):
        if source is tensor:
            slots.append((index, source_index, encoding))
            return


class Bound:
    """One launch of a kept kernel, laid out for Triton's C launcher (:class:`_Direct`), to
    launch again with other tensors in place of the ``sources`` it was bound to: each launch
    reads their addresses and re-encodes the descriptors over them (an address equal to the
    last one's takes the last encoding, which depends on nothing else here), and takes
    everything else (grid, other arguments, shapes and strides, constants) as bound. The
    caller must know that the new tensors have the bound ones' shapes, strides, dtypes and
    16-byte alignment, and that the other arguments hold, e.g. from a cache key of its own
    (the Hopper forward's repeated calls). :meth:`launch` returns False, launching nothing,
    while a launch hook is installed (the hooks' launch metadata needs the JIT's path)."""

    __slots__ = ("device", "direct", "final", "last", "slots")

    def __init__(self, direct: _Direct, device: int, final: list[Any], slots: list[_Slot]) -> None:
        self.direct = direct
        self.device = device
        self.final = final
        self.slots = slots
        self.last: dict[int, tuple[int, Any]] = {}  # slot index -> (address, its encoding)

    def launch(self, sources: Sequence[Any]) -> bool:
        direct = self.direct
        if _launch_hooks_set(direct.runtime):
            return False
        final = list(self.final)  # a copy: two threads may launch one Bound
        final[3] = direct.current_stream(self.device)  # after the grid's three dimensions
        last, fill = self.last, direct.fill
        addresses = [source.data_ptr() for source in sources]  # a source may fill many slots
        for index, source_index, encoding in self.slots:
            address = addresses[source_index]
            if encoding is None:
                final[index] = address
                continue
            known = last.get(index)
            if known is not None and known[0] == address:
                final[index] = known[1]
            else:
                tensor_map = fill(address, *encoding)
                last[index] = (address, tensor_map)
                final[index] = tensor_map
        direct.launch(*final)
        return True


class Kept:
    """A kernel the JIT compiled for one specialisation of its arguments, launched again with
    arguments of that same specialisation through its own launcher, without :func:`launch`'s
    cache key (built per argument on every call, the larger part of a launch's host time)
    and, where Triton's launcher is laid out as :class:`_Direct` expects, without that
    launcher's Python wrappers. The caller must know that the arguments specialise as the
    first call's did (the same dtypes, tensors' 16-byte alignment, integers' classes,
    descriptors' dtype, block and layout), e.g. from a cache of its own keyed on the shapes,
    strides and alignment that determine them."""

    __slots__ = ("constant_values", "device", "direct", "kernel")

    def __init__(self, kernel: Any, constant_values: tuple[Any, ...], device: int) -> None:
        self.kernel = kernel  # Triton's CompiledKernel
        self.constant_values = constant_values  # in the kernel's argument order
        self.device = device
        self.direct = _Direct.of(kernel)

    def bind(
        self, grid: tuple[int, ...], args: Sequence[Any], sources: Sequence[Any]
    ) -> Bound | None:
        """``args`` on ``grid`` laid out to launch again with other tensors in place of
        ``sources`` (:class:`Bound`); None where this kernel does not launch directly, or
        where two sources are one tensor (which of them an argument stands for would be
        ambiguous, and a later launch may pass two different ones)."""
        direct = self.direct
        if direct is None or len({id(source) for source in sources}) != len(sources):
            return None
        final, slots = direct.lay_out((*grid, 1, 1)[:3], 0, args, self.constant_values, sources)
        return Bound(direct, self.device, final, slots)

    def replay(self, grid: tuple[int, ...], args: Sequence[Any], sources: Sequence[Any]) -> Replay:
        """This launch on ``grid`` with ``args``, to repeat on other tensors in place of
        ``sources`` (:class:`Replay`; the caller's key must guarantee what :class:`Bound`
        asks)."""
        return Replay(self, grid, self.bind(grid, args, sources))

    def launch(self, grid: tuple[int, ...], args: Sequence[Any]) -> None:
        """Launch on ``grid`` on the current stream of the device it was compiled for, with
        ``args`` as :func:`launch` takes them (less the constants)."""
        grid3 = (*grid, 1, 1)[:3]
        direct = self.direct
        if direct is not None and not _launch_hooks_set(direct.runtime):
            direct(grid3, direct.current_stream(self.device), args, self.constant_values)
            return
        from triton import knobs
        from triton.runtime import driver

        kernel = self.kernel
        stream = driver.active.get_current_stream(self.device)
        if _launch_hooks_set(knobs.runtime):
            values = [_HostDescriptor(a.tensor) if type(a) is Tma else a for a in args]
            kernel[grid3](*values, *self.constant_values, stream=stream)
            return
        # CompiledKernel.run is its launcher: grid, stream, function, then the packed metadata,
        # launch metadata and hooks (none here), then the kernel's arguments.
        values = [_HostDescriptor(a.tensor) if type(a) is Tma else a for a in args]
        kernel.run(
            *grid3, stream, kernel.function, kernel.packed_metadata, None, None, None,
            *values, *self.constant_values,
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class Replay:
    """A kept kernel's launch (:meth:`Kept.replay`) repeated on other tensors: through
    ``bound`` (None where the kernel does not launch directly) while no launch hook is
    installed, else through ``kept`` on ``grid`` with the arguments built anew."""

    kept: Kept
    grid: tuple[int, ...]
    bound: Bound | None

    def launch(self, sources: Sequence[Any], args: Callable[[], Sequence[Any]]) -> None:
        """Launch on the current stream with ``sources`` in place of the bound ones;
        ``args`` builds the full arguments where the bound launch cannot run."""
        if self.bound is None or not self.bound.launch(sources):
            self.kept.launch(self.grid, args())


_V = TypeVar("_V")


class Repeats(dict[tuple[Any, ...], _V]):
    """Calls' launches to repeat, by the caller's key of everything a call's launches depend
    on (:func:`.hopper._repeat_key`, :func:`.fp8._repeat_key`). :meth:`keep` empties it when
    it holds ``bound`` entries, so a workload of ever new shapes keeps only recent ones."""

    def __init__(self, bound: int = 1024) -> None:
        super().__init__()
        self.bound = bound

    def keep(self, key: tuple[Any, ...], value: _V) -> None:
        if len(self) >= self.bound:
            self.clear()
        self[key] = value


#: (kernel, device, constants, warps, pipeline stages, registers, Triton's debug and
#: instrumentation settings, the arguments' specialisations) -> the compiled kernel and its constant arguments' values in
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
    num_stages: int | None = None,
    maxnreg: int | None = None,
) -> Kept | None:
    """Launch the JIT function ``fn`` on ``grid`` on the current device's current stream:
    ``args`` its runtime arguments in order (tensors, integers, floats, :class:`Tma`
    descriptors), ``constants`` its ``constexpr`` arguments by name, which must be exactly
    the arguments after the runtime ones (checked before anything runs). ``num_stages``: the
    software pipeline's stages, None for the JIT's default. ``maxnreg``: the
    registers a thread at launch (ptxas' ``.maxnreg``), None for the compiler's choice.
    Returns the kept compiled kernel (:class:`Kept`), or None where none is kept (Triton's
    interpreter, a function with pre-run hooks)."""
    from triton.runtime import driver

    device = driver.active.get_current_device()
    key = (
        id(fn), device,
        tuple([(name, type(value), value) for name, value in constants.items()]),
        num_warps, num_stages, maxnreg, *_jit_settings(),
        tuple([_arg_key(arg) for arg in args]),
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
    options: dict[str, int] = {"num_warps": num_warps}
    if num_stages is not None:
        options["num_stages"] = num_stages
    if maxnreg is not None:
        options["maxnreg"] = maxnreg
    kernel = fn[grid](*values, **constants, **options)
    if kernel is None or getattr(fn, "pre_run_hooks", None):
        return None  # None: Triton's interpreter, which keeps no compiled kernel
    # Later calls pass every argument in the kernel's order, constants included, as the JIT
    # passes them to the compiled kernel.
    kept = _compiled[key] = Kept(kernel, tuple(constants[name] for name in rest), device)
    return kept
