"""Serving on Ray Serve: a deployment whose replicas each run the model under one policy.

Ray is the engine: it places replicas, assigns GPUs, routes and scales requests.
xpuruntime builds the deployment and, inside every replica, the sessions that honour the
policy on the GPU(s) Ray assigned to that replica (or the CPU)::

    from xpuruntime.inference.serve import deployment, replica_records, run

    app = deployment("model.onnx", ExecutionPolicy(fallback="error"), num_replicas=2)
    handle = run(app)                                         # ray.serve.run, clearer errors
    outputs = handle.run.remote({"input": x}).result()       # numpy in, numpy out
    records = replica_records(handle, 2)                      # each replica's record

Over HTTP, ``POST /`` with ``{"inputs": {name: nested lists}, "outputs": [names]?}`` runs
the model and ``GET /`` returns the answering replica's record. A bad request answers 400
(409 when the policy forbids it) with ``{"error": {"type": ..., "message": ...}}``.

A replica whose engine cannot honour the policy under ``fallback="error"`` refuses to start;
:func:`run` raises :class:`ReplicaRefusedError` with the replica's reason where
``ray.serve.run`` only says that the deployment failed.
Needs ``pip install 'xpuruntime[serve]'`` (Ray Serve).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np

from xpuruntime.inference.errors import InputError, ModelNotFoundError, SessionClosedError
from xpuruntime.inference.pool import SessionPool
from xpuruntime.inference.tensors import as_host_array
from xpuruntime.policies import ExecutionPolicy
from xpuruntime.policies.errors import PolicyError, XpuRuntimeError
from xpuruntime.runtime.errors import EngineNotInstalledError, FallbackError
from xpuruntime.runtime.record import ExecutionRecord

if TYPE_CHECKING:
    from ray.serve import Application
    from ray.serve.handle import DeploymentHandle

__all__ = [
    "InferenceReplica",
    "ReplicaRecord",
    "ReplicaRefusedError",
    "deployment",
    "http_error",
    "replica_devices",
    "replica_records",
    "run",
]

_INSTALL = "pip install 'xpuruntime[serve]' (Ray Serve)"


class ReplicaRefusedError(XpuRuntimeError, RuntimeError):
    """A replica's engine cannot honour the policy on the device Ray gave it."""


@dataclass(frozen=True)
class ReplicaRecord:
    """One replica's identity (Ray actor and node, assigned GPU ids, devices) and record."""

    replica: str
    node: str
    gpu_ids: list[str]
    devices: list[str]
    record: ExecutionRecord


def replica_devices(gpu_ids: Sequence[str], environ: Mapping[str, str]) -> list[str]:
    """The CUDA devices, as this process numbers them, of the GPUs Ray assigned to it.

    Ray restricts ``CUDA_VISIBLE_DEVICES`` to a replica's GPUs (so its first GPU is
    ``cuda:0``) unless told not to, in which case the GPU ids are the device indices.
    No GPU: the CPU.
    """
    if not gpu_ids:
        return ["cpu"]
    visible = [v.strip() for v in environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if not visible:
        return [f"cuda:{int(gpu)}" for gpu in gpu_ids]
    missing = [gpu for gpu in gpu_ids if gpu not in visible]
    if missing:
        raise ReplicaRefusedError(
            f"Ray assigned GPU(s) {missing} but CUDA_VISIBLE_DEVICES={','.join(visible)} hides"
            " them from this replica; leave CUDA_VISIBLE_DEVICES to Ray"
        )
    return [f"cuda:{visible.index(gpu)}" for gpu in gpu_ids]


class InferenceReplica:
    """A replica: a :class:`SessionPool` with one session on each GPU Ray assigned to it
    (the CPU, or the policy's device, when Ray assigned none)."""

    def __init__(self, model: str, policy: dict[str, Any], engine: str) -> None:
        import ray

        context = ray.get_runtime_context()
        self._gpu_ids = [str(gpu) for gpu in context.get_accelerator_ids().get("GPU", [])]
        self._replica = str(context.get_actor_id())
        self._node = str(context.get_node_id())
        execution = ExecutionPolicy.from_dict(policy)
        if self._gpu_ids:
            devices = replica_devices(self._gpu_ids, os.environ)
        else:  # a GPU the policy names but Ray did not assign goes through the fallback mode
            devices = ["cpu" if execution.device == "auto" else execution.device]
        try:
            self._pool = SessionPool(
                model, devices, engine=engine, exec_policy=execution.replace(device="auto")
            )
        except FallbackError as error:
            raise ReplicaRefusedError(
                f"replica {self._replica} on node {self._node} ({', '.join(devices)}; Ray GPU"
                f" ids {', '.join(self._gpu_ids) or 'none'}) cannot honour the policy: {error}"
            ) from error
        self._inputs = {info.name: info.dtype for info in self._pool.sessions[0].inputs}

    def run(
        self, feeds: Mapping[str, Any], output_names: Sequence[str] | None = None
    ) -> dict[str, np.ndarray]:
        """Run the model; outputs come back as numpy arrays."""
        outputs = self._pool.run(feeds, output_names)
        return {name: as_host_array(value)[0] for name, value in outputs.items()}

    def record(self) -> dict[str, Any]:
        """This replica's identity and execution record, as JSON-compatible data."""
        return {
            "replica": self._replica,
            "node": self._node,
            "gpu_ids": self._gpu_ids,
            "devices": self._pool.devices,
            "record": self._pool.record().to_dict(),
        }

    async def __call__(self, request: Any) -> Any:
        """HTTP: ``GET`` returns :meth:`record`; ``POST`` runs ``{"inputs": ..., "outputs": ...}``.

        A request the model cannot take answers 4xx, a failure 5xx, each with the typed
        error's class and message as JSON (:func:`http_error`), never a bare 500.
        """
        from starlette.responses import JSONResponse

        try:
            if request.method == "GET":
                return self.record()
            return self._answer(await request.body())
        except XpuRuntimeError as error:
            status, body = http_error(error)
            return JSONResponse(body, status_code=status)

    def _answer(self, payload: bytes) -> dict[str, Any]:
        """The outputs for a POST body; an unreadable body is an InputError."""
        try:
            body = msgspec.json.decode(payload)
        except msgspec.DecodeError as error:
            raise InputError(f"the request body is not JSON: {error}") from None
        if not isinstance(body, dict) or not isinstance(body.get("inputs"), dict):
            raise InputError(
                'the request body must be JSON {"inputs": {name: nested lists}, "outputs":'
                f" [names] (optional)}}; the model's inputs are {sorted(self._inputs)}"
            )
        feeds = {}
        for name, value in body["inputs"].items():
            try:
                feeds[name] = np.asarray(value, dtype=self._inputs.get(name))
            except (ValueError, TypeError) as error:
                raise InputError(
                    f"input {name!r}: cannot read it as a {self._inputs.get(name, 'numpy')}"
                    f" array ({error})"
                ) from None
        outputs = self.run(feeds, body.get("outputs"))
        return {
            "replica": self._replica,
            "outputs": {name: value.tolist() for name, value in outputs.items()},
        }


#: Errors that say the request was wrong (HTTP 400): the caller can fix them.
_CLIENT_ERRORS: tuple[type[XpuRuntimeError], ...] = (InputError, PolicyError, SessionClosedError)


def http_error(error: XpuRuntimeError) -> tuple[int, dict[str, Any]]:
    """The HTTP status and JSON body a replica answers for ``error``: 400 for a request the
    model cannot take (an input's name, dtype or shape, a policy setting), 409 for a
    request the policy forbids (a fallback under ``fallback="error"``), 500 otherwise; the
    body names the typed error's class and message."""
    if isinstance(error, _CLIENT_ERRORS):
        status = 400
    elif isinstance(error, FallbackError):
        status = 409
    else:
        status = 500
    return status, {"error": {"type": type(error).__name__, "message": str(error)}}


def deployment(
    model: str | os.PathLike[str],
    exec_policy: ExecutionPolicy | None = None,
    *,
    lock_file: str | os.PathLike[str] | None = None,
    engine: str = "auto",
    gpus_per_replica: float | None = None,
    name: str = "xpuruntime",
    **options: Any,
) -> Application:
    """A Ray Serve application serving ``model`` under ``exec_policy``.

    ``lock_file``: a decision lockfile the replicas replay (``lock="replay"``).
    ``gpus_per_replica``: Ray's ``num_gpus`` per replica (a fraction shares a GPU; more
    than one gives the replica a session per GPU); by default 1 when the policy's device is
    a GPU, or ``auto`` and the Ray cluster has GPUs, else 0 (CPU replicas). ``options`` go
    to ``ray.serve.deployment`` unchanged (``num_replicas``, ``autoscaling_config``,
    ``max_ongoing_requests`` ...); ``max_constructor_retry_count`` defaults to 1, since a
    replica that refuses the policy refuses it again. Paths must be readable on every node.
    """
    try:
        import ray
        from ray import serve
    except ImportError as error:
        raise EngineNotInstalledError(f"Ray Serve is not installed: {_INSTALL}") from error
    policy = exec_policy if exec_policy is not None else ExecutionPolicy()
    path = Path(model).expanduser().resolve()
    if not path.is_file():
        raise ModelNotFoundError(f"model file {str(path)!r} does not exist")
    if lock_file is not None:
        policy = _with_lock(policy, Path(lock_file).expanduser().resolve())
    if gpus_per_replica is None:
        gpus_per_replica = _default_gpus(policy, ray)
    if gpus_per_replica < 0:
        raise PolicyError(f"gpus_per_replica must be >= 0, got {gpus_per_replica}")
    actor_options = dict(options.pop("ray_actor_options", None) or {})
    actor_options.setdefault("num_gpus", gpus_per_replica)
    options.setdefault("max_constructor_retry_count", 1)
    replica = serve.deployment(
        InferenceReplica, name=name, ray_actor_options=actor_options, **options
    )
    return replica.bind(str(path), policy.to_dict(), engine)


def _with_lock(policy: ExecutionPolicy, lock_file: Path) -> ExecutionPolicy:
    if not lock_file.is_file():
        raise PolicyError(f"lock file {str(lock_file)!r} does not exist; record one first")
    if policy.lock_file not in (None, str(lock_file)):
        raise PolicyError(
            f"lock_file={str(lock_file)!r} and ExecutionPolicy(lock_file={policy.lock_file!r})"
            " name different lockfiles; pass one of them"
        )
    return policy.replace(lock="replay", lock_file=str(lock_file))


def _default_gpus(policy: ExecutionPolicy, ray: Any) -> float:
    if policy.device.startswith("cuda"):
        return 1.0
    if policy.device != "auto":
        return 0.0
    if not ray.is_initialized():
        ray.init()  # what serve.run would do: start or join the cluster now, to ask it
    return 1.0 if ray.cluster_resources().get("GPU", 0) > 0 else 0.0


def run(app: Application, **options: Any) -> DeploymentHandle:
    """``ray.serve.run(app, **options)``; a replica that refused the policy raises
    :class:`ReplicaRefusedError` with that replica's reason."""
    from ray import serve

    try:
        return serve.run(app, **options)
    except RuntimeError as error:
        status = serve.status().applications.get(options.get("name", "default"))
        messages = [d.message for d in status.deployments.values()] if status else []
        refusals = [m for m in messages if f"{ReplicaRefusedError.__name__}: " in m]
        if not refusals:
            raise
        reason = refusals[0].rsplit(f"{ReplicaRefusedError.__name__}: ", 1)[1].strip()
        raise ReplicaRefusedError(reason) from error


def replica_records(
    handle: DeploymentHandle, replicas: int, *, max_calls: int | None = None
) -> dict[str, ReplicaRecord]:
    """The record of each of ``replicas`` running replicas, by replica (Ray actor id).

    Ray routes each call to a replica of its choosing, so this asks until every replica has
    answered (at most ``max_calls`` times, 50 per replica by default).
    """
    found: dict[str, ReplicaRecord] = {}
    for _ in range(max_calls if max_calls is not None else 50 * replicas):
        answer = handle.record.remote().result()
        if answer["replica"] not in found:
            found[answer["replica"]] = ReplicaRecord(
                replica=answer["replica"],
                node=answer["node"],
                gpu_ids=list(answer["gpu_ids"]),
                devices=list(answer["devices"]),
                record=ExecutionRecord.from_json(msgspec.json.encode(answer["record"])),
            )
        if len(found) >= replicas:
            return found
    raise XpuRuntimeError(
        f"only {len(found)} of {replicas} replicas answered; check serve.status() for replicas"
        " that are not running"
    )
