"""``explore``, ``report``, ``timeline`` and ``kernel-timeline``: the record as pictures."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from xpuruntime.inference.cli.app import main
from xpuruntime.inference.cli.options import (
    InputFlags,
    PolicyFlags,
    bundle_of,
    checked_engine,
    open_session,
    session_feeds,
    session_options,
)
from xpuruntime.policies.json_output import check_output_folder, check_output_location

if TYPE_CHECKING:
    from xpuruntime.inference.compare import Target
    from xpuruntime.inference.session import InferenceSession
    from xpuruntime.inference.visual.graph_ids import GraphIds
    from xpuruntime.inference.visual.node_times import NodeTimes
    from xpuruntime.policies import LayeredPolicy

#: A model file or a bundle folder.
MODEL_OR_BUNDLE = click.Path(exists=True)
#: Engines with a per-node profiler this package reads.
PROFILED_ENGINES = ("onnxruntime", "openvino")


def _model_file(model: str) -> Path:
    """The ONNX file of a model path or a bundle folder."""
    bundle = bundle_of(model) if Path(model).is_dir() else None
    return bundle.model if bundle is not None else Path(model)


def _layered(model: str, options: Any) -> LayeredPolicy:
    """The session policy, a bundle's own policy included, as ``run`` opens it."""
    return PolicyFlags.of(options).layered(bundle_of(model))


def _target(text: str) -> Target:
    from xpuruntime.inference.compare import Target

    engine, _, device = text.partition(":")
    return Target(engine.strip(), device.strip() or "cpu")


def _checked_target(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """``--compare ENGINE[:DEVICE]``: an unknown engine is a usage error before any work."""
    if value is not None:
        checked_engine(ctx, param, value.partition(":")[0].strip())
    return value


def _times(
    sess: InferenceSession, model: Path, graph: GraphIds, feeds: Any, runs: int, policy: Any
) -> NodeTimes | None:
    from xpuruntime.inference.visual.node_times import onnxruntime_times, openvino_times

    if sess.engine == "onnxruntime":
        return onnxruntime_times(model, graph, feeds, device=sess.device, runs=runs, policy=policy)
    if sess.engine == "openvino":
        return openvino_times(model, graph, feeds, device=sess.device, runs=runs)
    click.echo(
        f"per-node time: {sess.engine} has no per-node profiler xpuruntime reads "
        f"({', '.join(PROFILED_ENGINES)} do); no time overlay",
        err=True,
    )
    return None


def _written_by_us(path: Path) -> bool:
    """A report (its generator tag) or a trace (``otherData.producer``) xpuruntime wrote."""
    from xpuruntime.inference.visual.html_report import GENERATOR

    try:
        if path.suffix in (".html", ".htm"):
            return GENERATOR in path.read_bytes()[:4096].decode("utf-8", "replace")
        producer = json.loads(path.read_bytes()).get("otherData", {}).get("producer", "")
        return str(producer).startswith("xpuruntime")
    except (OSError, ValueError, AttributeError):
        return False


def _refuse_overwrite(target: Path, inputs: dict[str, Any]) -> None:
    """Never overwrite an input or a bundle's file, nor a file xpuruntime did not write;
    a folder that is missing or not writable is a usage error before any work."""
    check_output_location(target, "the output", inputs)
    if target.exists() and not _written_by_us(target):
        raise click.UsageError(
            f"-o {target} exists and is not a report or trace xpuruntime wrote; remove it or "
            "name another file"
        )


compare_option = click.option(
    "--compare",
    "compare_with",
    metavar="ENGINE[:DEVICE]",
    callback=_checked_target,
    help="Also run every node on this engine and show each node's difference from the "
    "session's engine (compare --per-layer's method, for every node).",
)
runs_option = click.option(
    "--runs",
    default=10,
    show_default=True,
    type=click.IntRange(min=1),
    help="Profiled runs the per-node times average.",
)
times_option = click.option(
    "--times/--no-times",
    default=True,
    show_default=True,
    help="Per-node time from the engine's own profiler (onnxruntime, openvino).",
)


@main.command()
@click.argument("model", type=MODEL_OR_BUNDLE)
@session_options
@compare_option
@runs_option
@times_option
@click.option(
    "--node-data-out",
    type=click.Path(file_okay=False),
    help="Only write the node-data files into this folder (no Model Explorer).",
)
@click.option(
    "--port",
    default=8080,
    show_default=True,
    type=click.IntRange(1, 65535),
    help="Model Explorer's port on 127.0.0.1.",
)
@click.option("--no-browser", is_flag=True, help="Start Model Explorer without opening a browser.")
def explore(
    model: str,
    engine: str,
    compare_with: str | None,
    runs: int,
    times: bool,
    node_data_out: str | None,
    port: int,
    no_browser: bool,
    **options: Any,
) -> None:
    """Open MODEL (or a bundle) in Model Explorer on 127.0.0.1 with the execution record as
    node-data overlays: placement class (with the reason), precision, per-node time, and
    with --compare each node's difference between two engines."""
    from xpuruntime.inference.visual.graph_ids import read_graph_ids
    from xpuruntime.inference.visual.layer_diff import layer_differences
    from xpuruntime.inference.visual.overlays import numeric_overlay, record_overlays
    from xpuruntime.inference.visual.overlays import write_overlays as write

    if node_data_out is not None:
        check_output_folder(
            Path(node_data_out), "node data", {"model": model, "engine": engine, **options}
        )
    path = _model_file(model)
    graph = read_graph_ids(path)
    layered = _layered(model, options)
    sess = open_session(model, engine, layered)
    feeds = session_feeds(sess, model, InputFlags.of(options))
    sess.run(feeds)
    overlays = record_overlays(sess.record(), graph)
    measured = _times(sess, path, graph, feeds, runs, layered) if times else None
    if measured is not None:
        overlays.append(
            numeric_overlay(
                "node_time",
                f"time µs ({measured.engine}:{measured.device})",
                measured.source,
                measured.mean_us,
                sorted(measured.unmatched_us),
            )
        )
    if compare_with:
        reference = _target(f"{sess.engine}:{sess.device}")
        diff = layer_differences(
            path, graph, reference, _target(compare_with), feeds, policy=layered,
        )  # fmt: skip
        overlays.append(
            numeric_overlay(
                "difference",
                f"max abs difference ({diff.target} vs {diff.reference})",
                "every node output compared as compare --per-layer does",
                diff.max_abs_by_node(),
            )
        )
    sess.close()
    folder = Path(node_data_out or tempfile.mkdtemp(prefix="xpuruntime-explore-"))
    files = write(folder, graph, overlays)
    for f in files:
        click.echo(f"node data: {f}", err=True)
    if node_data_out is None:
        from xpuruntime.inference.visual.explorer import start_explorer

        start_explorer(path, files, port=port, open_browser=not no_browser)


@main.command()
@click.argument("source", metavar="MODEL|BUNDLE|RECORD.json", type=MODEL_OR_BUNDLE)
@click.option(
    "-o", "--output", required=True, type=click.Path(dir_okay=False), help="The HTML report."
)
@session_options
@compare_option
@times_option
@click.option(
    "--bench-runs",
    default=100,
    show_default=True,
    type=click.IntRange(min=1),
    help="Timed runs for the latency distribution (after 10 warm-up runs).",
)
@click.option(
    "--kernel-trace",
    type=click.Path(exists=True, dir_okay=False),
    help="A training step's profiler trace (xpuruntime.pytorch.profile(export_chrome_trace="
    "...)): its kernels go on a timeline.",
)
def report(
    source: str,
    output: str,
    engine: str,
    compare_with: str | None,
    times: bool,
    bench_runs: int,
    kernel_trace: str | None,
    **options: Any,
) -> None:
    """Write one self-contained HTML file (opens offline) showing an execution record.

    From a model or bundle: opens a session under the policy, benchmarks it (the latency
    distribution), reads per-node times from the engine's profiler and, with --compare,
    each node's difference from another engine. From a RECORD.json (written by `run
    --record` or `explain --json`): shows that record only.
    """
    from xpuruntime.inference.visual.html_report import ReportData, render_report, require_bokeh

    target = Path(output)
    _refuse_overwrite(
        target, {"source": source, "kernel_trace": kernel_trace, "engine": engine, **options}
    )
    kernel_events = _kernel_events(Path(kernel_trace)) if kernel_trace else []
    require_bokeh()  # after the usage checks, before any session is opened
    path = Path(source)
    if path.is_file() and path.suffix == ".json":
        from xpuruntime.runtime.record import ExecutionRecord

        data = ReportData(
            ExecutionRecord.from_json(path.read_bytes()),
            kernel_events=kernel_events,
            origin=f"record file {path}",
        )
    else:
        data = _measure(source, engine, compare_with, times, bench_runs, options)
        data.kernel_events = kernel_events
    target.write_text(render_report(data), encoding="utf-8")
    click.echo(f"report written to {target} ({target.stat().st_size / 1e6:.2f} MB)", err=True)


def _kernel_events(trace: Path) -> list[dict[str, Any]]:
    """The device kernels of a Chrome trace; a file that is not one is a usage error."""
    from xpuruntime.inference.visual.timeline import DEVICE_CATEGORIES

    try:
        events = json.loads(trace.read_bytes())["traceEvents"]
        return [e for e in events if e.get("cat") in DEVICE_CATEGORIES]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise click.UsageError(
            f"--kernel-trace {trace} is not a Chrome trace (JSON with traceEvents): "
            f"{type(exc).__name__}: {exc}"
        ) from exc


def _measure(
    model: str,
    engine: str,
    compare_with: str | None,
    times: bool,
    bench_runs: int,
    options: Any,
) -> Any:
    import msgspec

    from xpuruntime.inference.bench import benchmark
    from xpuruntime.inference.visual.graph_ids import read_graph_ids
    from xpuruntime.inference.visual.html_report import ReportData
    from xpuruntime.inference.visual.layer_diff import layer_differences

    path = _model_file(model)
    graph = read_graph_ids(path)
    layered = _layered(model, options)
    with open_session(model, engine, layered) as sess:
        feeds = session_feeds(sess, model, InputFlags.of(options))
        benchmark(sess, feeds, warmup=10, iterations=bench_runs)
        # The distribution is the benchmark's timed runs; its warm-up runs are left out.
        record = msgspec.structs.replace(sess.record(), runs=sess.record().runs[-bench_runs:])
        origin = f"a session of {model} here: {bench_runs} timed runs after 10 warm-up runs"
        data = ReportData(record, origin=origin)
        if times:
            data.node_times = _times(sess, path, graph, feeds, 10, layered)
        if compare_with:
            data.differences = layer_differences(
                path, graph, _target(f"{sess.engine}:{sess.device}"), _target(compare_with),
                feeds, policy=layered,
            )  # fmt: skip
    return data


@main.command()
@click.argument("model", type=MODEL_OR_BUNDLE)
@click.option(
    "-o", "--output", required=True, type=click.Path(dir_okay=False), help="The Chrome trace."
)
@session_options
@click.option(
    "--runs", default=3, show_default=True, type=click.IntRange(min=1), help="Runs to trace."
)
def timeline(model: str, output: str, engine: str, runs: int, **options: Any) -> None:
    """A run's per-node timeline as a Chrome trace (open it in ui.perfetto.dev): the
    engine's own profiler (onnxruntime, openvino), merged with xpuruntime's ranges."""
    from xpuruntime.inference.visual.timeline import run_timeline

    target = Path(output)
    _refuse_overwrite(target, {"model": model, "engine": engine, **options})
    layered = _layered(model, options)
    with open_session(model, engine, layered) as sess:
        feeds = session_feeds(sess, model, InputFlags.of(options))
        chosen, device = sess.engine, sess.device
    if chosen not in PROFILED_ENGINES:
        raise click.UsageError(
            f"{chosen} has no per-node profiler xpuruntime reads; use --engine "
            f"{' or '.join(PROFILED_ENGINES)}"
        )
    run_timeline(
        _model_file(model), feeds, target, engine=chosen, device=device, runs=runs,
        policy=layered,
    )  # fmt: skip
    click.echo(f"timeline written to {target}", err=True)


@main.command("kernel-timeline")
@click.argument("trace", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "-o", "--output", required=True, type=click.Path(dir_okay=False), help="The Chrome trace."
)
def kernel_timeline_command(trace: str, output: str) -> None:
    """A training step's kernels (with the op that launched each) and xpuruntime's ranges
    from TRACE, the Chrome trace xpuruntime.pytorch.profile(export_chrome_trace=...) wrote."""
    from xpuruntime.inference.visual.timeline import kernel_timeline

    target = Path(output)
    _refuse_overwrite(target, {"trace": trace})
    _, kernels = kernel_timeline(Path(trace), target)
    click.echo(f"{kernels} kernels written to {target}", err=True)
    if not kernels:
        click.echo(
            f"warning: {trace} holds no device kernels (a step profiled without a GPU: its "
            "work is PyTorch's cpu_op events, in the trace itself)",
            err=True,
        )
