"""``inspect``: what an ONNX file holds, without an engine (Polygraphy's ``inspect model``)."""

from __future__ import annotations

import click

from xpuruntime.inference.cli.app import main
from xpuruntime.inference.cli.options import MODEL, model_file
from xpuruntime.inference.cli.output import Output, human_bytes, json_option


def _shape(shape: list[int | str | None] | None) -> str:
    if shape is None:
        return "(unknown rank)"
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


@main.command()
@click.argument("model", type=MODEL)
@click.option(
    "--ops/--no-ops",
    "show_ops",
    default=True,
    show_default=True,
    help="Show the op histogram.",
)
@json_option("the model summary")
def inspect(model: str, show_ops: bool, json_target: str | None) -> None:
    """Show MODEL's inputs and outputs (dtypes, symbolic dimensions), opsets, producer, op
    histogram, initializers and external data files. Reads the graph only (no weights).
    MODEL is an ONNX file or a bundle directory (its model is shown)."""
    from xpuruntime.inference.errors import InvalidModelError
    from xpuruntime.inference.inspection import inspect_model

    summary = inspect_model(model_file(model))
    if summary.ir_version < 1 or not summary.opsets:
        # Protobuf reads many non-ONNX files as an empty message: no IR version, no opset.
        raise InvalidModelError(
            f"{model} is not an ONNX model: it declares no IR version and no opset"
        )
    out = Output(json_target)
    out.print(
        f"{summary.path}: {human_bytes(summary.file_bytes)}, IR version {summary.ir_version}, "
        f"opsets {', '.join(f'{d} {v}' for d, v in summary.opsets.items())}, "
        f"producer {summary.producer}, graph {summary.graph!r}"
    )
    tensors = out.table("Inputs and outputs", "kind", "name", "dtype", "shape")
    for kind, items in (("input", summary.inputs), ("output", summary.outputs)):
        for t in items:
            tensors.add_row(kind, t.name, t.dtype, _shape(t.shape))
    out.print(tensors)
    out.print(
        f"{summary.nodes} nodes"
        + (f" ({summary.subgraphs} subgraphs included)" if summary.subgraphs else "")
        + f", {summary.initializers} initializers ({human_bytes(summary.initializer_bytes)}: "
        + ", ".join(f"{n} {d}" for d, n in summary.initializer_dtypes.items())
        + ")"
    )
    if show_ops and summary.ops:
        ops = out.table("Ops", "op", "count")
        for op, count in summary.ops.items():
            ops.add_row(op, str(count))
        out.print(ops)
    if summary.external_data:
        files = out.table("External data", "file", "tensors", "bytes", "present")
        for f in summary.external_data:
            files.add_row(
                f.location, str(f.tensors), human_bytes(f.bytes), "yes" if f.present else "MISSING"
            )
        out.print(files)
    for key, value in summary.metadata.items():
        out.print(f"metadata {key}: {value}")
    out.emit(summary)
