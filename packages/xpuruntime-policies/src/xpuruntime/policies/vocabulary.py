"""The ops, kernels and engines a policy may name.

Built-in entries describe what xpuruntime and its engine plugins know how to run. Plugins
add kernels through the entry-point group ``xpuruntime.kernels``: each entry point loads to
an iterable of :class:`KernelSpec` (or a callable returning one). Plugins are read lazily, the
first time a name is not found among the built-ins or a full listing is asked for, so
validating an ordinary policy imports no plugin code.

Engine names come from the built-ins and the names in the ``xpuruntime.engines`` group
(metadata only; no engine module is imported).

Which engine honours which kernel on which device is each engine's own business: engine and
runtime packages publish the table their mapping is built from (:class:`SupportedKernel`
rows) in the entry-point group ``xpuruntime.kernel_support``, named after the engine.
:func:`engine_tables` reads them (lazily: loading a table may import the engine's package,
PyTorch included) for listings; an engine whose package is not installed is described by the
built-in declarations below, and the listing says so. Validating a policy (names, and the
conflict pre-check against the engine list) reads only the built-in declarations, so it
imports no engine code; a test keeps those declarations equal to every installed engine's
table, and each engine applies its own table when it runs.
"""

from __future__ import annotations

import functools

import msgspec

from xpuruntime.policies._suggest import choices_hint, shown
from xpuruntime.policies.errors import (
    PolicyValidationError,
    UnknownEngineError,
    UnknownKernelError,
    UnknownOpError,
)

KERNELS_ENTRY_POINT_GROUP = "xpuruntime.kernels"
ENGINES_ENTRY_POINT_GROUP = "xpuruntime.engines"
KERNEL_SUPPORT_ENTRY_POINT_GROUP = "xpuruntime.kernel_support"

#: Device kinds a policy can pin (``cuda:1`` is kind ``cuda``).
DEVICE_KINDS = ("cpu", "cuda", "npu")

#: Runtimes that run kernels outside an inference engine: PyTorch training
#: (``xpuruntime.pytorch``) and xpuruntime's own ops (``xpuruntime.ops``). The engine list of
#: an ExecutionPolicy does not constrain them.
TRAINING_RUNTIMES = frozenset({"torch", "xpuruntime"})


class KernelSpec(msgspec.Struct, frozen=True):
    """One kernel that implements one op.

    ``engines`` are the inference engines (``onnxruntime``, ``tensorrt``, ...) and runtimes
    (``torch``, ``xpuruntime``) declared able to honour a policy that pins this kernel (the
    built-in declaration; installed engines publish their own tables, see
    :func:`engine_tables`); ``devices`` the device kinds it runs on.
    """

    op: str
    name: str
    backend: str
    devices: frozenset[str]
    engines: frozenset[str]
    description: str = ""
    #: Other names accepted for this kernel; policies store ``name``.
    aliases: tuple[str, ...] = ()

    def is_named(self, name: str) -> bool:
        """Whether ``name`` is this kernel's name or one of its aliases."""
        return name == self.name or name in self.aliases


class EngineSpec(msgspec.Struct, frozen=True):
    """An inference engine as far as policy validation needs to know it."""

    name: str
    devices: frozenset[str]
    #: True where int8 runs only from a model that is already quantized (QDQ); the
    #: ExecutionPolicy must then name one in ``quantized_model``.
    int8_needs_quantized_model: bool = False
    aliases: tuple[str, ...] = ()


def _kernel(
    op: str, name: str, backend: str, devices: str, engines: str, description: str
) -> KernelSpec:
    # PyTorch's own implementations answer to "aten" too (the name of its op library).
    aliases = ("aten",) if name == "torch" else ()
    return KernelSpec(
        op,
        name,
        backend,
        frozenset(devices.split()),
        frozenset(engines.split()),
        description,
        aliases,
    )


# Declared engines per kernel: kept equal to the tables the engines publish (a test checks
# every installed one), so the light conflict pre-check agrees with what engines do.
BUILTIN_KERNELS: tuple[KernelSpec, ...] = (
    _kernel("matmul", "cublas", "cuda", "cuda", "onnxruntime torch xpuruntime", "cuBLAS GEMM"),
    _kernel(
        "matmul", "cublasLt", "cuda", "cuda", "torch xpuruntime", "cuBLASLt GEMM (epilogue fusion)"
    ),
    _kernel("matmul", "cpu", "cpu", "cpu", "onnxruntime openvino torch xpuruntime", "CPU GEMM"),
    _kernel("matmul", "torch", "torch", "cpu cuda", "torch", "PyTorch's own aten::matmul"),
    _kernel(
        "linear", "cublasLt", "cuda", "cuda", "torch xpuruntime", "cuBLASLt GEMM + fused epilogue"
    ),
    _kernel("linear", "cpu", "cpu", "cpu", "onnxruntime torch xpuruntime", "CPU GEMM + epilogue"),
    _kernel("linear", "torch", "torch", "cpu cuda", "torch", "PyTorch's F.linear + activation"),
    _kernel("attention", "flash_v2", "cuda", "cuda", "onnxruntime torch", "FlashAttention-2"),
    _kernel("attention", "cudnn", "cuda", "cuda", "onnxruntime torch", "cuDNN fused attention"),
    _kernel(
        "attention", "efficient", "cuda", "cuda", "onnxruntime torch", "memory-efficient attention"
    ),
    _kernel("attention", "math", "any", "cpu cuda", "onnxruntime torch", "unfused reference math"),
    _kernel(
        "attention",
        "xrt_flash_hopper",
        "xpuruntime",
        "cuda",
        "torch xpuruntime",
        "xpuruntime's warp-specialised Hopper (sm_90) attention forward (Gluon), with "
        "xrt_flash's Triton backward",
    ),
    _kernel(
        "attention",
        "xrt_flash",
        "xpuruntime",
        "cuda",
        "torch xpuruntime",
        "xpuruntime's FlashAttention kernels (Triton; forward and backward, GQA, varlen)",
    ),
    _kernel(
        "attention",
        "xrt_flash_fp8",
        "xpuruntime",
        "cuda",
        "xpuruntime",
        "xpuruntime's float8 e4m3 attention forward for inference (Triton; scaled per block)",
    ),
    _kernel("layernorm", "xrt", "xpuruntime", "cpu cuda", "torch xpuruntime", "xpuruntime kernel"),
    _kernel("layernorm", "apex", "cuda", "cuda", "", "NVIDIA Apex fused layer norm"),
    _kernel("layernorm", "torch", "torch", "cpu cuda", "torch", "PyTorch's own layer_norm"),
    _kernel(
        "layernorm", "cpu", "cpu", "cpu", "onnxruntime openvino torch xpuruntime", "CPU layer norm"
    ),
    _kernel("rmsnorm", "xrt", "xpuruntime", "cpu cuda", "torch xpuruntime", "xpuruntime kernel"),
    _kernel("rmsnorm", "torch", "torch", "cpu cuda", "torch", "PyTorch's own rms_norm"),
    _kernel("rmsnorm", "cpu", "cpu", "cpu", "onnxruntime torch xpuruntime", "CPU RMS norm"),
    _kernel("conv", "cudnn", "cuda", "cuda", "onnxruntime torch", "cuDNN convolution"),
    _kernel("conv", "onednn", "cpu", "cpu", "openvino torch", "oneDNN convolution"),
    _kernel("conv", "torch", "torch", "cpu cuda", "torch", "PyTorch's own convolution"),
)

BUILTIN_ENGINES: tuple[EngineSpec, ...] = (
    EngineSpec("tensorrt", frozenset({"cuda"})),
    EngineSpec("onnxruntime", frozenset({"cpu", "cuda"}), aliases=("onnxrt",)),
    EngineSpec("openvino", frozenset({"cpu", "npu"})),
    EngineSpec("qnn", frozenset({"cpu", "npu"}), int8_needs_quantized_model=True),
)

#: The engine preference order of ``ExecutionPolicy(engines=...)`` by default.
DEFAULT_ENGINE_ORDER: tuple[str, ...] = ("tensorrt", "onnxruntime", "openvino", "qnn")


class PluginProblem(msgspec.Struct, frozen=True):
    """A ``xpuruntime.kernels`` entry point that could not be used, and why."""

    entry_point: str
    reason: str


class _Plugins(msgspec.Struct, frozen=True):
    kernels: tuple[KernelSpec, ...]
    problems: tuple[PluginProblem, ...]


@functools.lru_cache(maxsize=1)
def _plugins() -> _Plugins:
    from importlib.metadata import entry_points  # costs tens of ms: only when needed

    builtin_keys = {(spec.op, spec.name) for spec in BUILTIN_KERNELS}
    seen: set[tuple[str, str]] = set()
    kernels: list[KernelSpec] = []
    problems: list[PluginProblem] = []
    for entry_point in entry_points(group=KERNELS_ENTRY_POINT_GROUP):
        label = f"{entry_point.name} = {entry_point.value}"
        try:
            loaded = entry_point.load()
            provided = loaded() if callable(loaded) else loaded
            specs = list(provided)
        except Exception as exc:  # a broken plugin must not break policy validation
            problems.append(PluginProblem(label, f"{type(exc).__name__}: {exc}"))
            continue
        for spec in specs:
            if not isinstance(spec, KernelSpec):
                problems.append(PluginProblem(label, f"provided {shown(spec)}, not a KernelSpec"))
            elif (spec.op, spec.name) in builtin_keys | seen:  # aliases may overlap: first wins
                problems.append(
                    PluginProblem(label, f"kernel {spec.name!r} for op {spec.op!r} already exists")
                )
            else:
                seen.add((spec.op, spec.name))
                kernels.append(spec)
    return _Plugins(tuple(kernels), tuple(problems))


@functools.lru_cache(maxsize=1)
def _plugin_engine_names() -> frozenset[str]:
    from importlib.metadata import entry_points

    return frozenset(ep.name for ep in entry_points(group=ENGINES_ENTRY_POINT_GROUP))


def refresh() -> None:
    """Forget what was read from entry points (call after installing a plugin at run time)."""
    _plugins.cache_clear()
    _plugin_engine_names.cache_clear()
    _tables.cache_clear()


def plugin_problems() -> tuple[PluginProblem, ...]:
    """Kernel plugins that failed to load or provided unusable entries."""
    return _plugins().problems


def all_kernels() -> tuple[KernelSpec, ...]:
    """Every known kernel: built-ins first, then plugins."""
    return BUILTIN_KERNELS + _plugins().kernels


def known_ops() -> list[str]:
    """Names of every op some kernel implements, sorted."""
    return sorted({spec.op for spec in all_kernels()})


def kernels_for(op: str) -> list[KernelSpec]:
    """The kernels of ``op``, built-ins first (raises UnknownOpError for an unknown op)."""
    specs = [spec for spec in all_kernels() if spec.op == op]
    if not specs:
        raise _unknown_op(op)
    return specs


def find_kernel(op: str, name: str) -> KernelSpec:
    """The spec of kernel ``name`` for ``op``; UnknownOpError / UnknownKernelError otherwise."""
    for spec in BUILTIN_KERNELS:  # the common case needs no plugin loaded
        if spec.op == op and spec.is_named(name):
            return spec
    for spec in kernels_for(op):
        if spec.is_named(name):
            return spec
    raise UnknownKernelError(
        f"unknown kernel {shown(name)} for op {shown(op)}. "
        f"{choices_hint(name, [spec.name for spec in kernels_for(op)])}{_plugin_note()}"
        " Use 'auto' to let the dispatcher choose."
    )


def _unknown_op(op: str) -> UnknownOpError:
    return UnknownOpError(
        f"unknown op {shown(op)}. {choices_hint(op, known_ops())}{_plugin_note()}"
        " Ops come from xpuruntime and from plugins in the"
        f" {KERNELS_ENTRY_POINT_GROUP!r} entry-point group."
    )


def _plugin_note() -> str:
    problems = plugin_problems()
    if not problems:
        return ""
    listed = "; ".join(f"{p.entry_point}: {p.reason}" for p in problems)
    return f" (Kernel plugins that failed to load: {listed}.)"


def engines() -> dict[str, EngineSpec]:
    """Known engines by name: the built-ins plus engine plugins (as bare specs)."""
    known = {spec.name: spec for spec in BUILTIN_ENGINES}
    for name in sorted(_plugin_engine_names() - known.keys()):
        known[name] = EngineSpec(name, frozenset(DEVICE_KINDS))
    return known


def engine_spec(name: str) -> EngineSpec:
    """The spec of engine ``name`` or one of its aliases; UnknownEngineError otherwise."""
    for spec in BUILTIN_ENGINES:  # the common case needs no entry-point scan
        if name == spec.name or name in spec.aliases:
            return spec
    known = engines()
    if name in known:
        return known[name]
    raise UnknownEngineError(
        f"unknown engine {shown(name)}. {choices_hint(name, known)}"
        " Engines come from xpuruntime-inference, xpuruntime-npu and plugins in the"
        f" {ENGINES_ENTRY_POINT_GROUP!r} entry-point group."
    )


def canonical_engine(name: str) -> str:
    """The engine name for ``name`` or one of its aliases; UnknownEngineError otherwise."""
    return engine_spec(name).name


# -- what each engine honours -----------------------------------------------------------


class SupportedKernel(msgspec.Struct, frozen=True):
    """One row of an engine's kernel table: the engine can act on a policy naming ``kernel``
    for ``op`` on ``devices``.

    ``enforced`` rows are honoured: pinning the kernel there runs it. Rows with
    ``enforced=False`` only steer (the engine may use the kernel but cannot be made to), so a
    pin of that kernel follows the fallback mode; ``note`` says how the engine acts on it.
    """

    op: str
    kernel: str
    devices: frozenset[str]
    enforced: bool = True
    note: str = ""


class EngineKernels(msgspec.Struct, frozen=True):
    """The kernel table of one engine or runtime, and where it came from.

    ``published`` is True when the engine's package supplied it (its own mapping); False when
    it is the built-in declaration, used because no installed package publishes one
    (``source`` says why).
    """

    engine: str
    kernels: tuple[SupportedKernel, ...]
    source: str
    published: bool

    def honours(self, op: str, kernel: str, device: str) -> bool:
        """Whether a pin of ``kernel`` for ``op`` runs on device kind ``device``."""
        return any(
            row.enforced and row.op == op and row.kernel == kernel and device in row.devices
            for row in self.kernels
        )


#: The distribution that publishes each built-in engine's (or runtime's) kernel table.
TABLE_PUBLISHERS = {
    "onnxruntime": "xpuruntime-inference",
    "tensorrt": "xpuruntime-inference",
    "openvino": "xpuruntime-npu",
    "qnn": "xpuruntime-npu",
    "torch": "xpuruntime-torch",
    "xpuruntime": "xpuruntime-core",
}

_RUNTIME_DEVICES = frozenset({"cpu", "cuda"})


def declared_kernels(engine: str) -> tuple[SupportedKernel, ...]:
    """The built-in declaration of what ``engine`` honours (from KernelSpec.engines)."""
    spec = engines().get(engine)
    reach = spec.devices if spec is not None else _RUNTIME_DEVICES
    rows = []
    for kernel in all_kernels():
        devices = kernel.devices & reach
        if engine in kernel.engines and devices:
            rows.append(SupportedKernel(kernel.op, kernel.name, devices))
    return tuple(rows)


class _Tables(msgspec.Struct, frozen=True):
    tables: dict[str, EngineKernels]
    problems: tuple[PluginProblem, ...]


def _checked_rows(
    provided: object, label: str, problems: list[PluginProblem]
) -> tuple[SupportedKernel, ...]:
    rows = []
    for row in provided:  # type: ignore[attr-defined]  # iterability checked by the caller
        if not isinstance(row, SupportedKernel):
            problems.append(PluginProblem(label, f"provided {shown(row)}, not a SupportedKernel"))
            continue
        unknown_devices = row.devices - set(DEVICE_KINDS)
        try:
            spec = find_kernel(row.op, row.kernel)
        except PolicyValidationError as exc:
            problems.append(PluginProblem(label, str(exc)))
            continue
        if unknown_devices:
            problems.append(
                PluginProblem(
                    label, f"{row.op}/{row.kernel}: unknown devices {sorted(unknown_devices)}"
                )
            )
            continue
        rows.append(
            row if spec.name == row.kernel else msgspec.structs.replace(row, kernel=spec.name)
        )
    return tuple(rows)


def _unpublished_source(engine: str) -> str:
    from importlib.metadata import PackageNotFoundError, distribution

    publisher = TABLE_PUBLISHERS.get(engine)
    if publisher is None:
        return "built-in list: no installed package publishes this engine's table"
    try:
        distribution(publisher)
    except PackageNotFoundError:
        return f"built-in list: {publisher} is not installed"
    return f"built-in list: {publisher} publishes no table for it"


@functools.lru_cache(maxsize=1)
def _tables() -> _Tables:
    from importlib.metadata import entry_points

    problems: list[PluginProblem] = []
    published: dict[str, EngineKernels] = {}
    for entry_point in entry_points(group=KERNEL_SUPPORT_ENTRY_POINT_GROUP):
        label = f"{entry_point.name} = {entry_point.value}"
        try:
            loaded = entry_point.load()
            provided = loaded() if callable(loaded) else loaded
            iter(provided)
        except Exception as exc:  # a broken engine package must not break the listing
            problems.append(PluginProblem(label, f"{type(exc).__name__}: {exc}"))
            continue
        dist = entry_point.dist
        origin = f"{dist.name} {dist.version}" if dist is not None else "an unnamed distribution"
        published[entry_point.name] = EngineKernels(
            engine=entry_point.name,
            kernels=_checked_rows(provided, label, problems),
            source=f"{origin} ({entry_point.value})",
            published=True,
        )
    names = [*engines(), *sorted(TRAINING_RUNTIMES), *published]
    tables = {
        name: published.get(name)
        or EngineKernels(name, declared_kernels(name), _unpublished_source(name), False)
        for name in dict.fromkeys(names)
    }
    return _Tables(tables, tuple(problems))


def engine_tables() -> dict[str, EngineKernels]:
    """Every known engine's and runtime's kernel table: published where installed, else the
    built-in declaration (imports the engines' packages; for listings, not for validation)."""
    return dict(_tables().tables)


def table_problems() -> tuple[PluginProblem, ...]:
    """Published kernel tables that failed to load or hold unusable rows."""
    return _tables().problems


def kernel_support(op: str, kernel: str) -> dict[str, tuple[SupportedKernel, EngineKernels]]:
    """Engine -> (its row for ``op``/``kernel``, its table), for the engines with such a row."""
    found = {}
    for name, table in _tables().tables.items():
        for row in table.kernels:
            if row.op == op and row.kernel == kernel:
                found[name] = (row, table)
    return found
