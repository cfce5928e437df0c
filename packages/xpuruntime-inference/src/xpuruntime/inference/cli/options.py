"""Flags shared by the commands that open a session, and turning them into a policy and feeds.

Precedence (the same as everywhere in xpuruntime): a flag > ``XPURUNTIME_POLICY_*`` > the
``--policy`` file (or ``$XPURUNTIME_POLICY_FILE``) > the defaults. Flags left out set nothing,
so a file or the environment decides; the record's ``policy_sources`` says who set what.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
import numpy as np

from xpuruntime.inference.errors import InputError
from xpuruntime.policies import LayeredPolicy
from xpuruntime.policies.errors import PolicyError
from xpuruntime.runtime.engines import TensorInfo

if TYPE_CHECKING:
    from xpuruntime.inference.session import InferenceSession

F = TypeVar("F", bound=Callable[..., Any])
#: The layer name of a setting a command chooses when no flag, variable or file does.
COMMAND_DEFAULT = "command default"


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
                type=click.Path(dir_okay=False),
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


def engine_option(func: F) -> F:
    return click.option(
        "--engine",
        default="auto",
        show_default=True,
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
                type=int,
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

    def layered(self, **defaults: Any) -> LayeredPolicy:
        """The session policy; a bad file, variable or value is a usage error (exit 2).

        ``defaults`` apply only where no flag, variable or file sets the setting.
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
        try:
            layered = layered_policy(self.policy_file, arguments={"execution": execution})
            unset = {
                k: v
                for k, v in defaults.items()
                if layered.source_of(f"execution.{k}") == "default"
            }
            if not unset:
                return layered
            again = layered_policy(
                self.policy_file, arguments={"execution": {**unset, **execution}}
            )
        except PolicyError as exc:
            raise click.UsageError(str(exc)) from exc
        sources = {**again.sources, **{f"execution.{k}": COMMAND_DEFAULT for k in unset}}
        return LayeredPolicy(again.policy, sources)


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
        self, inputs: Sequence[TensorInfo], policy_shapes: Mapping[str, Sequence[int]] | None
    ) -> dict[str, np.ndarray]:
        """Feeds for ``inputs``; flags that do not fit the model are usage errors (exit 2)."""
        from xpuruntime.inference.feeds import build_feeds, parse_dims, parse_input_shapes

        try:
            files = {}
            for value in self.inputs:
                name, sep, path = value.partition("=")
                if not sep or not name or not path:
                    raise InputError(f"--input expects NAME=FILE.npy, got {value!r}")
                files[name] = Path(path)
            return build_feeds(
                inputs,
                files=files,
                shapes={**(policy_shapes or {}), **parse_input_shapes(self.input_shapes)},
                dims=parse_dims(self.dims),
                seed=self.seed,
            )
        except InputError as exc:
            raise click.UsageError(str(exc)) from exc


def open_session(model: str, engine: str, layered: LayeredPolicy) -> InferenceSession:
    """An InferenceSession of ``model`` under the layered policy (sources go to the record)."""
    from xpuruntime.inference import InferenceSession

    return InferenceSession(model, engine=engine, exec_policy=layered)
