"""``bench``: latency percentiles and throughput, like trtexec and benchmark_app."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from xpuruntime.inference.cli.app import main
from xpuruntime.inference.cli.options import (
    MODEL,
    InputFlags,
    PolicyFlags,
    bundle_of,
    open_session,
    session_feeds,
    session_options,
)
from xpuruntime.inference.cli.output import Output, json_option


@main.command()
@click.argument("model", type=MODEL)
@session_options
@click.option(
    "--warmup",
    default=10,
    show_default=True,
    type=click.IntRange(min=0),
    help="Untimed runs before measuring.",
)
@click.option(
    "--warmup-time",
    default=0.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Keep warming up for at least this many seconds.",
)
@click.option(
    "--iterations",
    "-n",
    type=click.IntRange(min=1),
    help="Measure at least this many runs [default: 100, or none with --duration].",
)
@click.option(
    "--duration",
    type=click.FloatRange(min=0, min_open=True),
    help="Measure for at least this many seconds.",
)
@click.option(
    "--concurrency",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="Threads running the one session at once (benchmark_app's infer requests).",
)
@json_option("the results")
def bench(
    model: str,
    engine: str,
    warmup: int,
    warmup_time: float,
    iterations: int | None,
    duration: float | None,
    concurrency: int,
    json_target: str | None,
    **options: Any,
) -> None:
    """Latency p50/p90/p99/max and throughput of MODEL (an ONNX file or a bundle directory).

    Measures at least --iterations runs and at least --duration seconds (either alone
    works), after --warmup runs and --warmup-time seconds. Progress is drawn by another
    thread while the runs are timed one by one; it never sits inside a timed run.
    """
    from xpuruntime.inference.bench import benchmark

    if iterations is None and duration is None:
        iterations = 100
    out = Output(json_target)
    sess = open_session(model, engine, PolicyFlags.of(options).layered(bundle_of(model)))
    feeds = session_feeds(sess, model, InputFlags.of(options))
    columns = (TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn())
    total = None if duration is not None else iterations
    # On stderr, and only on a terminal: progress is for people watching.
    stderr = Console(stderr=True)
    with Progress(
        *columns, console=stderr, transient=True, disable=not stderr.is_terminal
    ) as progress:
        task = progress.add_task(f"{sess.engine}:{sess.device} measuring", total=total)
        result = benchmark(
            sess,
            feeds,
            warmup=warmup,
            warmup_time=warmup_time,
            iterations=iterations,
            duration=duration,
            concurrency=concurrency,
            on_progress=lambda runs, _: progress.update(task, completed=runs),
        )
    lat = result.latency_ms
    table = out.table(
        f"{Path(model).name} on {result.engine}:{result.device} ({result.iterations} runs in "
        f"{result.duration_s:.2f} s, batch {result.batch}, concurrency {result.concurrency})",
        "p50 ms",
        "p90 ms",
        "p99 ms",
        "max ms",
        "mean ms",
        "runs/s",
        "samples/s",
    )
    table.add_row(
        f"{lat.p50:.4f}",
        f"{lat.p90:.4f}",
        f"{lat.p99:.4f}",
        f"{lat.max:.4f}",
        f"{lat.mean:.4f}",
        f"{result.throughput_runs_per_s:.1f}",
        f"{result.throughput_samples_per_s:.1f}",
    )
    out.print(table)
    out.emit(result)
