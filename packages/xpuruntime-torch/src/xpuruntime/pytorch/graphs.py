"""CUDA graph capture of whole training steps.

:func:`graph_step` (and :class:`GraphedStep`) capture one callable that runs forward,
backward and the optimizer step, following PyTorch's whole-network capture recipe: static
input buffers, warm-up iterations on a side stream (lazy initialisation, optimizer state,
cuBLAS workspaces happen outside the graph), then ``torch.cuda.graph`` capture. Each call
copies new inputs into the static buffers and replays the graph: one launch per step.

:func:`capture_graph` is the ``with`` form (seed 004): it captures the block into a graph
whose :meth:`CapturedGraph.replay` re-runs it; warm the block up before capturing.

Without CUDA nothing can be captured: the policy's fallback mode decides between raising
(``"error"``) and running eagerly with a record of it (``"warn"`` / ``"allow"``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Generic, TypeVar

import torch

from xpuruntime.pytorch import policy
from xpuruntime.pytorch.errors import GraphInputError
from xpuruntime.runtime import profiler as core_profiler
from xpuruntime.runtime.errors import UnsupportedOperationError

__all__ = ["CapturedGraph", "GraphedStep", "capture_graph", "graph_step"]

Output = TypeVar("Output")

_OPTIMIZER_HINT = (
    "Optimizers stepped inside a graph must be created with capturable=True "
    "(torch.optim.Adam/AdamW(..., capturable=True)); the step must not sync with the host "
    "(.item(), printing tensors, data-dependent shapes)."
)


def _no_cuda_reason() -> str | None:
    if torch.cuda.is_available():
        return None
    return (
        f"CUDA graphs need a CUDA device; PyTorch {torch.__version__} sees none "
        f"(torch.cuda.is_available() is False)"
    )


def _eager_fallback(reason: str) -> None:
    policy.note_fallback(what="cuda_graph", requested="cuda_graph", chosen="eager", reason=reason)


class CapturedGraph:
    """The graph captured by :func:`capture_graph` (``captured`` is False when it ran eagerly)."""

    def __init__(self, graph: torch.cuda.CUDAGraph | None, eager_reason: str = "") -> None:
        self.graph = graph
        self.captured = False
        self.eager_reason = eager_reason

    def replay(self) -> None:
        """Re-run the captured work on the current stream."""
        if self.graph is None or not self.captured:
            raise UnsupportedOperationError(
                "nothing to replay: the block ran eagerly ("
                + (self.eager_reason or "capture did not finish")
                + "). Replay needs a successful capture on a CUDA device."
            )
        self.graph.replay()


@contextmanager
def capture_graph(
    *, pool: Any = None, stream: torch.cuda.Stream | None = None
) -> Iterator[CapturedGraph]:
    """Capture the ``with`` block into a CUDA graph (run it once eagerly first to warm up).

    ``pool`` shares a memory pool between graphs (``torch.cuda.graph_pool_handle()``).
    """
    reason = _no_cuda_reason()
    if reason is not None:
        _eager_fallback(reason)
        yield CapturedGraph(None, eager_reason=reason)
        return
    handle = CapturedGraph(torch.cuda.CUDAGraph())
    assert handle.graph is not None
    torch.cuda.synchronize()
    try:
        with (
            core_profiler.range("xrt.cuda_graph_capture"),
            torch.cuda.graph(handle.graph, pool=pool, stream=stream),
        ):
            yield handle
    except RuntimeError as error:
        raise UnsupportedOperationError(
            f"CUDA graph capture failed: {error}. {_OPTIMIZER_HINT}"
        ) from error
    handle.captured = True
    policy.note_decision(
        "training_step",
        "cuda_graph",
        "pin",
        "captured with capture_graph()",
        shape="",
        dtype="",
        device=f"cuda:{torch.cuda.current_device()}",
    )


def _static_copy(value: Any) -> Any:
    return value.detach().clone() if isinstance(value, torch.Tensor) else value


class GraphedStep(Generic[Output]):
    """A training step captured once and replayed per call (see :func:`graph_step`)."""

    def __init__(
        self,
        fn: Callable[..., Output],
        sample_args: Sequence[Any],
        *,
        warmup_iters: int = 3,
        pool: Any = None,
    ) -> None:
        if warmup_iters < 1:
            raise GraphInputError(
                f"warmup_iters must be >= 1 (lazy initialisation and optimizer state must "
                f"exist before capture), got {warmup_iters}"
            )
        self._fn = fn
        self._graph: torch.cuda.CUDAGraph | None = None
        self.eager_reason = _no_cuda_reason() or ""
        self._static_inputs = tuple(_static_copy(arg) for arg in sample_args)
        if self.eager_reason:
            _eager_fallback(self.eager_reason)
            return
        self._static_outputs = self._capture(warmup_iters, pool)

    @property
    def graphed(self) -> bool:
        """True when calls replay a CUDA graph, False when they run ``fn`` eagerly."""
        return self._graph is not None

    def _capture(self, warmup_iters: int, pool: Any) -> Output:
        side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side), core_profiler.range("xrt.graph_step_warmup"):
            for _ in range(warmup_iters):
                self._fn(*self._static_inputs)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        try:
            # Capture on the warm-up stream: autograd's AccumulateGrad nodes then run on the
            # stream they were created on.
            with (
                core_profiler.range("xrt.graph_step_capture"),
                torch.cuda.graph(graph, pool=pool, stream=side),
            ):
                outputs = self._fn(*self._static_inputs)
        except RuntimeError as error:
            raise UnsupportedOperationError(
                f"capturing the training step failed: {error}. {_OPTIMIZER_HINT}"
            ) from error
        self._graph = graph
        policy.note_decision(
            "training_step",
            "cuda_graph",
            "pin",
            f"graph_step captured after {warmup_iters} warm-up iterations on a side stream",
            shape="",
            dtype="",
            device=f"cuda:{torch.cuda.current_device()}",
        )
        return outputs

    def _check(self, args: tuple[Any, ...]) -> None:
        if len(args) != len(self._static_inputs):
            raise GraphInputError(
                f"the graphed step was captured with {len(self._static_inputs)} arguments, "
                f"called with {len(args)}"
            )
        for index, (new, static) in enumerate(zip(args, self._static_inputs, strict=True)):
            if not isinstance(static, torch.Tensor):
                if new is not static and new != static:
                    raise GraphInputError(
                        f"argument {index} is a constant of the captured graph ({static!r}); "
                        f"got {new!r}. Capture another graph for another value."
                    )
                continue
            if not isinstance(new, torch.Tensor) or (new.shape, new.dtype) != (
                static.shape,
                static.dtype,
            ):
                got = (
                    f"{tuple(new.shape)} {new.dtype}"
                    if isinstance(new, torch.Tensor)
                    else repr(new)
                )
                raise GraphInputError(
                    f"argument {index} must be a tensor of shape {tuple(static.shape)} and "
                    f"dtype {static.dtype} (the static buffer captured), got {got}. "
                    f"Pad or bucket inputs to the captured shape, or capture another graph."
                )

    def __call__(self, *args: Any) -> Output:
        """Copy ``args`` into the static inputs and replay; returns the static outputs.

        The returned tensors are overwritten by the next call: clone what you keep.
        """
        if self._graph is None:
            return self._fn(*args)
        self._check(args)
        for new, static in zip(args, self._static_inputs, strict=True):
            if isinstance(static, torch.Tensor) and new is not static:
                static.copy_(new, non_blocking=True)
        self._graph.replay()
        return self._static_outputs


def graph_step(
    fn: Callable[..., Output],
    sample_args: Sequence[Any],
    *,
    warmup_iters: int = 3,
    pool: Any = None,
) -> GraphedStep[Output]:
    """Capture ``fn(*sample_args)`` (forward + backward + ``optimizer.step()``) as a graph.

    ``fn`` should start with ``optimizer.zero_grad(set_to_none=True)`` so gradients live
    in the graph's memory; warm-up runs ``fn`` ``warmup_iters`` times (these are real
    training steps on ``sample_args``). Returns a callable taking the same arguments.
    """
    return GraphedStep(fn, sample_args, warmup_iters=warmup_iters, pool=pool)
