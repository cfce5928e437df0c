"""Flags shared by the commands that open a session, and turning them into a policy and feeds.

Precedence (the same as everywhere in xpuruntime): a flag > ``XPURUNTIME_POLICY_*`` > the
``--policy`` file (or ``$XPURUNTIME_POLICY_FILE``) > the defaults. Flags left out set nothing,
so a file or the environment decides; the record's ``policy_sources`` says who set what.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
import numpy as np

from xpuruntime.inference.errors import InputError
from xpuruntime.policies import ExecutionPolicy, LayeredPolicy, PolicyDocument
from xpuruntime.policies.errors import PolicyError
from xpuruntime.runtime.engines import TensorInfo

if TYPE_CHECKING:
    from xpuruntime.inference.bundle import Bundle
    from xpuruntime.inference.session import InferenceSession

F = TypeVar("F", bound=Callable[..., Any])
#: The layer name of a setting a command chooses when no flag, variable or file does.
COMMAND_DEFAULT = "command default"
#: numpy's seeds are 32-bit.
MAX_SEED = 2**32 - 1
#: Largest dimension a flag may give: ONNX Runtime and OpenVINO index tensors with int32
#: extents in places, and no machine holds more anyway.
MAX_DIM = 2**31 - 1


class ModelPath(click.ParamType[str, Any]):
    """MODEL: an ONNX file or a bundle directory written by ``xpuruntime.pytorch.export``. A
    missing path, an empty file or a directory that is not a bundle is a usage error before
    anything is opened."""

    name = "model"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        from xpuruntime.policies.errors import XpuRuntimeError

        path = Path(value)
        if not path.exists():
            self.fail(f"{value!r} does not exist", param, ctx)
        if path.is_dir():
            try:
                bundle_of(str(value))
            except XpuRuntimeError as exc:
                self.fail(f"{value!r} is a directory but not a bundle: {exc}", param, ctx)
        elif path.stat().st_size == 0:
            self.fail(f"{value!r} is empty (0 bytes), not an ONNX model", param, ctx)
        return str(value)


MODEL = ModelPath()


@functools.cache
def bundle_of(model: str) -> Bundle | None:
    """The bundle when MODEL is a bundle directory. Opened once per command: opening checks
    the SHA-256 of every file, the model's included."""
    from xpuruntime.inference.bundle import open_bundle

    path = Path(model)
    return open_bundle(path) if path.is_dir() else None


def model_file(model: str) -> Path:
    """The ONNX file of MODEL (a bundle's model, or MODEL itself)."""
    bundle = bundle_of(model)
    return bundle.model if bundle is not None else Path(model)


def _stack(func: F, options: Sequence[Callable[[F], F]]) -> F:
    for option in reversed(options):
        func = option(func)
    return func


def policy_options(func: F) -> F:
    """--policy and the policy settings a flag may set (each overrides file and environment)."""
    return _stack(
        func,
        [
            click.option(
                "--policy",
                "policy_file",
                type=click.Path(exists=True, dir_okay=False),
                help="ExecutionPolicy file (JSON, YAML or TOML); default $XPURUNTIME_POLICY_FILE.",
            ),
            click.option(
                "--device",
                help="Device: auto, cpu, cuda, cuda:N, npu, npu:N (policy setting 'device').",
            ),
            click.option(
                "--fallback",
                type=click.Choice(["error", "warn", "allow"]),
                help="What happens when something cannot run as asked: error raises, warn "
                "warns and records, allow records (policy setting 'fallback').",
            ),
            click.option(
                "--precision",
                type=click.Choice(["fp32", "tf32", "fp16", "bf16", "int8", "fp8"]),
                help="Numeric precision the engine computes in (policy setting 'precision').",
            ),
            click.option(
                "--lock",
                "lock_file",
                type=click.Path(exists=True, dir_okay=False),
                callback=checked_lockfile,
                help="Replay the decisions of this lockfile: kernels, algorithms and engine "
                "options as recorded (policy settings lock='replay' and 'lock_file'; record one "
                "with `xpuruntime lock record`).",
            ),
            click.option(
                "--cache-dir",
                help="Keep compiled and optimized models here ('default': the per-user cache "
                "folder; see `xpuruntime cache explain`) (policy setting 'cache_dir').",
            ),
        ],
    )


def checked_lockfile(
    _ctx: click.Context | None, _param: click.Parameter | None, value: str | None
) -> str | None:
    """``--lock FILE`` to replay: a file that is not a lockfile is a usage error before any
    work (as for ``lock show``), not a failure after the session opened."""
    from xpuruntime.policies.errors import XpuRuntimeError
    from xpuruntime.policies.lock import Lockfile

    if value is None:
        return None
    if not Path(value).is_file():
        raise click.BadParameter(
            f"{value}: no such lockfile; record one with `xpuruntime lock record`"
        )
    try:
        Lockfile.load(value)
    except XpuRuntimeError as exc:
        raise click.BadParameter(f"{type(exc).__name__}: {exc}") from exc
    return value


def checked_engine(_ctx: click.Context | None, _param: click.Parameter | None, value: str) -> str:
    """``--engine``: auto, or a name or alias of a known engine (installed or not); anything
    else is a usage error listing the engines (an engine that is known but not installed
    fails later, at run time, with its install command)."""
    from xpuruntime.inference.selection import engine_overview
    from xpuruntime.policies import vocabulary
    from xpuruntime.runtime.engines import discover_engines

    if value == "auto" or value in discover_engines():
        return value
    overview = engine_overview()
    if any(value == e.name or value in e.aliases for e in overview):
        return value
    try:
        vocabulary.canonical_engine(value)
    except PolicyError:
        known = [e.name + (f" ({', '.join(e.aliases)})" if e.aliases else "") for e in overview]
        raise click.BadParameter(
            f"unknown engine {value!r}; choose auto or one of: {', '.join(known)}"
        ) from None
    return value


def engine_option(func: F) -> F:
    return click.option(
        "--engine",
        default="auto",
        show_default=True,
        callback=checked_engine,
        help="Engine name or alias (onnxruntime/ort, tensorrt/trt, openvino, qnn), or auto: "
        "the first of the policy's 'engines' that runs on the device.",
    )(func)


def input_options(func: F) -> F:
    """--input, --input-shapes, --dim and --seed: what the model is fed."""
    return _stack(
        func,
        [
            click.option(
                "--input",
                "inputs",
                multiple=True,
                metavar="NAME=FILE.npy",
                help="Feed input NAME from a .npy file (repeatable); other inputs are random.",
            ),
            click.option(
                "--input-shapes",
                "input_shapes",
                multiple=True,
                metavar="NAME:DIMS[,NAME:DIMS]",
                help="Shapes of random inputs, such as image:1x3x224x224 (trtexec and "
                "Polygraphy's convention; also image:[1,3,224,224]). Default: the policy's "
                "input_shapes, else the model's shape.",
            ),
            click.option(
                "--dim",
                "dims",
                multiple=True,
                metavar="NAME=INT",
                help="Bind a symbolic dimension by name, such as batch=8 (repeatable).",
            ),
            click.option(
                "--seed",
                default=0,
                show_default=True,
                type=click.IntRange(0, MAX_SEED),
                help="Seed of the random inputs.",
            ),
        ],
    )


def session_options(func: F) -> F:
    """Everything a session-opening command takes: engine, policy and inputs."""
    return engine_option(policy_options(input_options(func)))


@dataclass(frozen=True)
class PolicyFlags:
    policy_file: str | None
    device: str | None
    fallback: str | None
    precision: str | None
    cache_dir: str | None
    lock_file: str | None

    @classmethod
    def of(cls, options: Mapping[str, Any]) -> PolicyFlags:
        return cls(*(options.get(name) for name in cls.__dataclass_fields__))

    def layered(self, bundle: Bundle | None = None, **defaults: Any) -> LayeredPolicy:
        """The session policy; a bad file, variable or value is a usage error (exit 2).

        ``bundle``: a bundle's policy (and lockfile, as the bundle decides) is the file layer
        unless --policy names another. ``defaults`` apply only where no flag, variable or
        file sets the setting.
        """
        from xpuruntime.policies import layered_policy

        flags = {
            "device": self.device,
            "fallback": self.fallback,
            "precision": self.precision,
            "cache_dir": self.cache_dir,
        }
        if self.lock_file is not None:
            flags |= {"lock": "replay", "lock_file": self.lock_file}
        execution = {k: v for k, v in flags.items() if v is not None}
        base = self.policy_file if bundle is None else _policy_layer(bundle, self.policy_file)
        try:
            layered = layered_policy(base, arguments={"execution": execution})
            unset = {
                k: v
                for k, v in defaults.items()
                if layered.source_of(f"execution.{k}") == "default"
            }
            if not unset:
                return layered
            again = layered_policy(base, arguments={"execution": {**unset, **execution}})
        except PolicyError as exc:
            raise click.UsageError(str(exc)) from exc
        sources = {**again.sources, **{f"execution.{k}": COMMAND_DEFAULT for k in unset}}
        return LayeredPolicy(again.policy, sources)


def _policy_layer(bundle: Bundle, policy_file: str | None) -> ExecutionPolicy | str | None:
    """The file layer of a bundle's session: --policy, else what the bundle carries."""
    chosen = bundle.policy(policy_file)
    if chosen is None or isinstance(chosen, (ExecutionPolicy, str)):
        return chosen
    if isinstance(chosen, LayeredPolicy):
        return chosen.policy
    if isinstance(chosen, PolicyDocument):
        return chosen.execution_policy()
    return os.fspath(chosen)


@dataclass(frozen=True)
class InputFlags:
    inputs: tuple[str, ...]
    input_shapes: tuple[str, ...]
    dims: tuple[str, ...]
    seed: int

    @classmethod
    def of(cls, options: Mapping[str, Any]) -> InputFlags:
        return cls(*(options[name] for name in cls.__dataclass_fields__))

    def feeds(
        self,
        inputs: Sequence[TensorInfo],
        policy_shapes: Mapping[str, Sequence[int]] | None,
        declared: Sequence[TensorInfo] = (),
    ) -> dict[str, np.ndarray]:
        """Feeds for ``inputs``; flags that do not fit the model are usage errors (exit 2).

        ``declared``: the inputs as the ONNX file declares them. An engine may report a
        symbolic dimension as unknown (OpenVINO drops the names: ``image[?, 1, 8, 8]``);
        the file's name for it is what ``--dim`` binds.
        """
        from xpuruntime.inference.feeds import build_feeds, parse_dims, parse_input_shapes

        try:
            files = {}
            for value in self.inputs:
                name, sep, path = value.partition("=")
                if not sep or not name or not path:
                    raise InputError(f"--input expects NAME=FILE.npy, got {value!r}")
                files[name] = Path(path)
            shapes = parse_input_shapes(self.input_shapes)
            _check_dims(self.dims)
            dims = parse_dims(self.dims)
            for what, numbers in [
                *((f"--input-shapes {n}", v) for n, v in shapes.items()),
                *((f"--dim {n}", [v]) for n, v in dims.items()),
            ]:
                if any(not 1 <= d <= MAX_DIM for d in numbers):
                    raise InputError(
                        f"{what}: every dimension must be between 1 and {MAX_DIM}, got "
                        f"{list(numbers)}"
                    )
            return build_feeds(
                with_declared_names(inputs, declared),
                files=files,
                shapes={**(policy_shapes or {}), **shapes},
                dims=dims,
                seed=self.seed,
            )
        except InputError as exc:
            raise click.UsageError(str(exc)) from exc


def _check_dims(values: Sequence[str]) -> None:
    """--dim values parse_dims would misread: a number below 1 (it says "expects NAME=INT")
    and a name bound twice (the last would win silently)."""
    seen: dict[str, str] = {}
    for value in values:
        name, _, number = (part.strip() for part in value.partition("="))
        try:
            extent = int(number)
        except ValueError:
            continue  # not a number: parse_dims says which form it takes
        if extent < 1:
            raise InputError(
                f"--dim {name}: the value must be an integer between 1 and {MAX_DIM}, got {extent}"
            )
        if name in seen:
            raise InputError(
                f"--dim {name} is given twice ({seen[name]} and {value}); bind it once"
            )
        seen[name] = value


def with_declared_names(
    inputs: Sequence[TensorInfo], declared: Sequence[TensorInfo]
) -> list[TensorInfo]:
    """``inputs`` with each unknown (None) dimension named as the file declares it."""
    by_name = {d.name: d for d in declared}
    named = []
    for info in inputs:
        file_info = by_name.get(info.name)
        if file_info is None or len(file_info.shape) != len(info.shape):
            named.append(info)
            continue
        shape = tuple(
            f if e is None and isinstance(f, str) else e
            for e, f in zip(info.shape, file_info.shape, strict=True)
        )
        named.append(TensorInfo(info.name, info.dtype, shape))
    return named


def open_session(model: str, engine: str, layered: LayeredPolicy) -> InferenceSession:
    """An InferenceSession of ``model`` (a file or bundle) under the layered policy (sources
    go to the record)."""
    from xpuruntime.inference import InferenceSession

    return InferenceSession(model, engine=engine, exec_policy=layered)


def session_feeds(sess: InferenceSession, model: str, flags: InputFlags) -> dict[str, np.ndarray]:
    """What ``sess`` is fed: a bundle's reference inputs when no input flag is given, else
    the flags' files and random inputs (dimensions named as the ONNX file names them)."""
    bundle = bundle_of(model)
    if bundle is not None and not (flags.inputs or flags.input_shapes or flags.dims):
        return bundle.reference()[0]
    declared: Sequence[TensorInfo] = ()
    if any(d is None for info in sess.inputs for d in info.shape):
        from xpuruntime.inference.model_info import read_model_info

        declared = read_model_info(model_file(model)).tensor_infos()
    return flags.feeds(sess.inputs, sess.policy.input_shapes, declared)
