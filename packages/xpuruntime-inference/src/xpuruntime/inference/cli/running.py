"""``run``, ``explain`` and ``demo``: open a session, run it, show outputs and the record."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import click
import numpy as np

from xpuruntime.inference.cli.app import main
from xpuruntime.inference.cli.options import (
    MODEL,
    InputFlags,
    PolicyFlags,
    bundle_of,
    engine_option,
    open_session,
    policy_options,
    session_feeds,
    session_options,
)
from xpuruntime.inference.cli.output import Output, json_option
from xpuruntime.policies.json_output import check_output_file, check_output_folder, write_text

#: Output values shown per tensor; more are elided with "…".
PREVIEW = 8


def preview(array: np.ndarray) -> str:
    """The first values of ``array`` (flattened), with "…" when there are more."""
    flat = array.ravel()
    shown = np.array2string(
        flat[:PREVIEW], precision=4, separator=", ", threshold=PREVIEW, max_line_width=1 << 20
    )
    return shown[:-1] + ", …]" if flat.size > PREVIEW else shown


def _outputs(outputs: dict[str, Any]) -> list[dict[str, Any]]:
    from xpuruntime.inference.tensors import as_host_array

    described = []
    for name, value in outputs.items():
        array = as_host_array(value)[0]
        described.append(
            {
                "name": name,
                "dtype": str(array.dtype),
                "shape": list(array.shape),
                "preview": preview(array),
            }
        )
    return described


@main.command()
@click.argument("model", type=MODEL)
@session_options
@click.option(
    "--record",
    "record_path",
    type=click.Path(dir_okay=False),
    help="Write the execution record (JSON) to this file.",
)
@click.option(
    "--save-outputs",
    type=click.Path(file_okay=False),
    help="Write each output as NAME.npy into this folder (characters other than letters, "
    "digits, '.', '-' and '_' become '_').",
)
@json_option("the outputs (names, dtypes, shapes, previews), latency and record")
def run(
    model: str,
    engine: str,
    record_path: str | None,
    save_outputs: str | None,
    json_target: str | None,
    **options: Any,
) -> None:
    """Run MODEL (an ONNX file or a bundle directory) once and print the outputs.

    Inputs are random unless --input; a bundle without input flags runs its reference
    inputs. --record and --save-outputs never write over an input or over a file that is not
    a previous output of theirs (a usage error, exit 2, before anything runs).
    """
    given = {"model": model, "engine": engine, **options}
    if record_path:
        check_output_file(Path(record_path), "json", given)
    if save_outputs:
        check_output_folder(Path(save_outputs), "the outputs", given)
    out = Output(json_target)
    sess = open_session(model, engine, PolicyFlags.of(options).layered(bundle_of(model)))
    if save_outputs:
        _check_save_folder(Path(save_outputs), [o.name for o in sess.outputs], given)
    outputs = sess.run(session_feeds(sess, model, InputFlags.of(options)))
    record = sess.record()
    latency = record.runs[-1].latency_ms
    described = _outputs(outputs)
    table = out.table("Outputs", "output", "dtype", "shape", "values")
    for o in described:
        table.add_row(o["name"], o["dtype"], str(tuple(o["shape"])), o["preview"])
    out.print(f"{sess.engine} on {sess.device}: {latency:.3f} ms", table)
    if save_outputs:
        _save_outputs(Path(save_outputs), outputs)
    if record_path:
        write_text(Path(record_path), record.to_json(), "the record")
        click.echo(f"record written to {record_path}", err=True)
    out.emit(
        {
            "engine": sess.engine,
            "device": sess.device,
            "latency_ms": latency,
            "outputs": described,
            "record": record,
        }
    )


def _npy_name(output: str) -> str:
    """The file an output is saved to: ONNX names may hold "/" ("/fc/Gemm_output_0") or
    "..", which must not lead out of the folder."""
    return re.sub(r"[^\w.-]", "_", output).lstrip(".") + ".npy"


def _check_save_folder(folder: Path, names: list[str], given: dict[str, Any]) -> None:
    """NAME.npy per output in ``folder``: never over an input or a file that is not .npy."""
    if not folder.exists():
        return  # created at the end, with its parents
    for name in names:
        check_output_file(folder / _npy_name(name), "npy", given)


def _save_outputs(folder: Path, outputs: dict[str, Any]) -> None:
    from xpuruntime.inference.tensors import as_host_array

    try:
        folder.mkdir(parents=True, exist_ok=True)
        for name, value in outputs.items():
            np.save(folder / _npy_name(name), as_host_array(value)[0])
    except OSError as exc:
        raise click.ClickException(
            f"cannot write the outputs to {folder}: {exc.strerror or exc}"
        ) from exc


@main.command()
@click.argument("model", type=MODEL)
@session_options
@click.option(
    "--runs",
    default=1,
    show_default=True,
    type=click.IntRange(min=0),
    help="Runs to make before explaining (0: only open the session).",
)
@json_option("the execution record")
def explain(model: str, engine: str, runs: int, json_target: str | None, **options: Any) -> None:
    """Open MODEL under the policy, run it, and print the execution record.

    The record says what was asked and what ran: engine, device and precision choices,
    every policy setting with the layer that set it (flag > XPURUNTIME_POLICY_* >
    policy file > default) and whether the engine honoured it, node placement, kernel
    decisions, fallbacks, runs and caches.
    """
    from xpuruntime.inference.report import renderables

    out = Output(json_target)
    sess = open_session(model, engine, PolicyFlags.of(options).layered(bundle_of(model)))
    if runs:
        feeds = session_feeds(sess, model, InputFlags.of(options))
        for _ in range(runs):
            sess.run(feeds)
    record = sess.record()
    out.print(*renderables(record))
    out.emit(record)


@main.command()
@engine_option
@policy_options
@click.option(
    "--batch",
    default=4,
    show_default=True,
    type=click.IntRange(min=1),
    help="Images in the batch.",
)
@json_option("the predictions and the execution record")
def demo(engine: str, batch: int, json_target: str | None, **options: Any) -> None:
    """Run the packaged demo classifier and show what ran (device: cpu unless set)."""
    from xpuruntime.inference.demo import DEMO_MODEL, demo_images
    from xpuruntime.inference.report import renderables

    out = Output(json_target)
    images = demo_images(batch)
    # The demo's shape is known: NPUs (fixed shapes only) can compile it as it is.
    layered = PolicyFlags.of(options).layered(
        device="cpu", input_shapes={"image": list(images.shape)}
    )
    sess = open_session(str(DEMO_MODEL), engine, layered)
    probabilities = np.asarray(sess.run({"image": images})["probabilities"])
    labels = ["vertical bar", "horizontal bar", "diagonal", "box"]
    table = out.table("Predictions", "image", "class", "probability", "top-3")
    predictions = []
    for i, p in enumerate(probabilities):
        top = [int(k) for k in np.argsort(p)[::-1][:3]]
        predictions.append({"image": i, "pattern": labels[i % 4], "top3": top})
        table.add_row(
            f"{i} ({labels[i % 4]})",
            str(top[0]),
            f"{p[top[0]]:.4f}",
            ", ".join(f"{k}:{p[k]:.3f}" for k in top),
        )
    record = sess.record()
    out.print(
        f"xpuruntime demo: {DEMO_MODEL.name} (conv + MLP classifier, input "
        f"image{list(images.shape)}) on {sess.engine}:{sess.device}",
        table,
        *renderables(record),
    )
    out.emit({"predictions": predictions, "record": record})
