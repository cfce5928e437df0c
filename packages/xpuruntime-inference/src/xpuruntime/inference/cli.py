"""``xpuruntime`` command line: devices, engines, run, bench, compare, explain, policy, lock,
demo."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click
import numpy as np
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from xpuruntime.inference.cli_lock import apply_lock_option, lock_option
from xpuruntime.inference.cli_lock import lock as lock_commands
from xpuruntime.policies.errors import XpuRuntimeError

F = TypeVar("F", bound=Callable[..., Any])


def _console() -> Console:
    # Created per command: CliRunner swaps sys.stdout, a module-level Console would keep the old.
    # Width: the terminal's, or $COLUMNS when piped.
    return Console(file=sys.stdout)


def _fail(exc: BaseException) -> click.ClickException:
    return click.ClickException(f"{type(exc).__name__}: {exc}")


def _parse_dims(values: Sequence[str]) -> dict[str, int]:
    dims = {}
    for value in values:
        name, sep, number = value.partition("=")
        if not sep or not number.isdigit():
            raise click.BadParameter(
                f"expected NAME=INT (batch=8), got {value!r}", param_hint="--dim"
            )
        dims[name] = int(number)
    return dims


def _parse_inputs(values: Sequence[str]) -> dict[str, Path]:
    files = {}
    for value in values:
        name, sep, path = value.partition("=")
        if not sep:
            raise click.BadParameter(f"expected NAME=FILE.npy, got {value!r}", param_hint="--input")
        files[name] = Path(path)
    return files


def _policy(path: str | None, fallback: str | None) -> Any:
    from xpuruntime.policies import ExecutionPolicy, load_policy

    policy = ExecutionPolicy() if path is None else load_policy(path).execution_policy()
    policy = apply_lock_option(policy)
    return policy if fallback is None else policy.replace(fallback=fallback)


def session_options(func: F) -> F:
    """Options shared by the commands that open a session."""
    options = [
        click.option(
            "--device", default="auto", show_default=True, help="auto, cpu, cuda, cuda:N, npu"
        ),
        click.option(
            "--engine", default="auto", show_default=True, help="auto or an engine name/alias"
        ),
        click.option(
            "--policy",
            "policy_file",
            type=click.Path(exists=True, dir_okay=False),
            help="ExecutionPolicy file (json, yaml, toml)",
        ),
        click.option(
            "--fallback",
            type=click.Choice(["error", "warn", "allow"]),
            help="override the policy's fallback mode",
        ),
        click.option(
            "--dim",
            "dims",
            multiple=True,
            metavar="NAME=INT",
            help="bind a symbolic input dimension (batch=8)",
        ),
        click.option(
            "--input",
            "inputs",
            multiple=True,
            metavar="NAME=FILE.npy",
            help="input tensor from a .npy file (others are random)",
        ),
        click.option("--seed", default=0, show_default=True, help="seed of the random inputs"),
        lock_option(),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _open_session(
    model: str, device: str, engine: str, policy_file: str | None, fallback: str | None
) -> Any:
    from xpuruntime.inference import InferenceSession

    return InferenceSession(
        model, device=device, engine=engine, exec_policy=_policy(policy_file, fallback)
    )


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="xpuruntime-inference", prog_name="xpuruntime")
def main() -> None:
    """xpuruntime: run models under an explicit execution policy and see what ran."""
    warnings.simplefilter("default")
    warnings.showwarning = _show_warning


def _show_warning(
    message: Warning | str, category: type[Warning], *_: object, **__: object
) -> None:
    # Fallback warnings are for the person at the terminal: the message, not a source line.
    click.echo(f"warning: {category.__name__}: {message}", err=True)


@main.command()
def devices() -> None:
    """Devices this machine has: CPU, CUDA GPUs (core), and what each engine can reach."""
    import platform

    from xpuruntime.inference.selection import availability_of
    from xpuruntime.runtime.device import cuda_available, get_all_devices
    from xpuruntime.runtime.engines import discover_engines

    table = Table(title="Devices")
    for column in ("device", "name", "details", "via"):
        table.add_column(column)
    table.add_row("cpu", platform.processor() or platform.machine(), "", "host")
    for dev in get_all_devices():
        if dev.kind != "cuda":
            continue
        major, minor = dev.compute_capability
        details = f"cc {major}.{minor}, {dev.total_memory / 2**30:.1f} GiB, {dev.sm_count} SMs"
        table.add_row(f"cuda:{dev.id}", dev.name, details, "xpuruntime core")
    problems = []
    for name, entry in sorted(discover_engines().items()):
        try:
            found = availability_of(entry.load())
        except XpuRuntimeError as exc:
            problems.append(f"{name}: {exc}")
            continue
        for device in found.devices:
            if not device.startswith(("cpu", "cuda")):
                table.add_row(device, "", escape(found.reason), f"engine {name}")
    console = _console()
    console.print(table)
    if not cuda_available():
        console.print("no CUDA device visible to the xpuruntime core")
    for problem in problems:
        console.print(f"[yellow]engine plugin problem[/]: {escape(problem)}")


@main.command()
def engines() -> None:
    """Installed engines (available or not, with reasons) and how to install the others."""
    from xpuruntime.inference.selection import availability_of
    from xpuruntime.runtime.engines import KNOWN_ENGINE_HINTS, discover_engines

    table = Table(title="Engines")
    for column in ("engine", "aliases", "status", "devices", "versions", "notes"):
        table.add_column(column, overflow="fold")
    installed = discover_engines()
    for name, entry in sorted(installed.items()):
        try:
            cls = entry.load()
            found = availability_of(cls)
        except XpuRuntimeError as exc:
            table.add_row(name, "", "[red]broken plugin[/]", "", "", escape(str(exc)))
            continue
        status = "[green]available[/]" if found.available else "[red]unavailable[/]"
        hint = found.install_hint or cls.install_hint
        notes = found.reason
        if not found.available and hint not in found.reason:
            notes += f"; install: {hint}"
        versions = ", ".join(f"{k} {v}" for k, v in found.versions.items() if k != "providers")
        table.add_row(
            name,
            ", ".join(cls.aliases),
            status,
            ", ".join(found.devices),
            escape(versions),
            escape(notes),
        )
    for name, hint in sorted(KNOWN_ENGINE_HINTS.items()):
        if name not in installed:
            table.add_row(name, "", "[yellow]not installed[/]", "", "", escape(f"install: {hint}"))
    _console().print(table)


def _outputs_table(outputs: dict[str, Any]) -> Table:
    from xpuruntime.inference.tensors import as_host_array

    table = Table(title="Outputs")
    for column in ("output", "dtype", "shape", "values"):
        table.add_column(column, overflow="fold")
    for name, value in outputs.items():
        array = as_host_array(value)[0]
        preview = np.array2string(array.ravel()[:8], precision=4, separator=", ")
        table.add_row(escape(name), str(array.dtype), str(tuple(array.shape)), escape(preview))
    return table


@main.command()
@click.argument("model", type=click.Path(dir_okay=False))
@session_options
@click.option(
    "--record", "record_path", type=click.Path(dir_okay=False), help="write the record JSON here"
)
@click.option(
    "--save-outputs", type=click.Path(file_okay=False), help="write each output as NAME.npy here"
)
def run(
    model: str,
    device: str,
    engine: str,
    policy_file: str | None,
    fallback: str | None,
    dims: Sequence[str],
    inputs: Sequence[str],
    seed: int,
    record_path: str | None,
    save_outputs: str | None,
) -> None:
    """Run MODEL once (random inputs unless --input) and print the outputs."""
    from xpuruntime.inference.feeds import load_feeds

    try:
        sess = _open_session(model, device, engine, policy_file, fallback)
        feeds = load_feeds(sess.inputs, _parse_inputs(inputs), _parse_dims(dims), seed=seed)
        outputs = sess.run(feeds)
    except XpuRuntimeError as exc:
        raise _fail(exc) from exc
    console = _console()
    console.print(f"{sess.engine} on {sess.device}: {sess.record().runs[-1].latency_ms:.3f} ms")
    console.print(_outputs_table(outputs))
    if save_outputs:
        from xpuruntime.inference.tensors import as_host_array

        folder = Path(save_outputs)
        folder.mkdir(parents=True, exist_ok=True)
        for name, value in outputs.items():
            np.save(folder / f"{name}.npy", as_host_array(value)[0])
    if record_path:
        Path(record_path).write_text(sess.record().to_json())
        console.print(f"record written to {record_path}")


@main.command()
@click.argument("model", type=click.Path(dir_okay=False))
@session_options
@click.option("--warmup", default=10, show_default=True)
@click.option("--iterations", "-n", default=100, show_default=True)
@click.option(
    "--output",
    "-o",
    "output",
    type=click.Path(dir_okay=False),
    default="bench.json",
    show_default=True,
    help="JSON result file",
)
def bench(
    model: str,
    device: str,
    engine: str,
    policy_file: str | None,
    fallback: str | None,
    dims: Sequence[str],
    inputs: Sequence[str],
    seed: int,
    warmup: int,
    iterations: int,
    output: str,
) -> None:
    """Latency p50/p90/p99 and throughput of MODEL; writes JSON."""
    import msgspec

    from xpuruntime.inference.bench import benchmark
    from xpuruntime.inference.feeds import load_feeds

    console = _console()
    try:
        sess = _open_session(model, device, engine, policy_file, fallback)
        feeds = load_feeds(sess.inputs, _parse_inputs(inputs), _parse_dims(dims), seed=seed)
        columns = (
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
        )
        with Progress(*columns, console=console, transient=True) as progress:
            task = progress.add_task(f"{sess.engine}:{sess.device}", total=warmup + iterations)
            result = benchmark(
                sess,
                feeds,
                warmup=warmup,
                iterations=iterations,
                on_step=lambda: progress.advance(task),
            )
    except (XpuRuntimeError, ValueError) as exc:
        raise _fail(exc) from exc
    table = Table(
        title=f"{Path(model).name} on {result.engine}:{result.device} "
        f"({iterations} runs, batch {result.batch})"
    )
    for column in ("p50 ms", "p90 ms", "p99 ms", "mean ms", "runs/s", "samples/s"):
        table.add_column(column, justify="right")
    lat = result.latency_ms
    table.add_row(
        f"{lat.p50:.4f}",
        f"{lat.p90:.4f}",
        f"{lat.p99:.4f}",
        f"{lat.mean:.4f}",
        f"{result.throughput_runs_per_s:.1f}",
        f"{result.throughput_samples_per_s:.1f}",
    )
    console.print(table)
    Path(output).write_bytes(msgspec.json.format(msgspec.json.encode(result), indent=2))
    console.print(f"results written to {output}")


@main.command()
@click.argument("model", type=click.Path(dir_okay=False))
@click.option(
    "--engines",
    "engine_list",
    required=True,
    help="engine:device targets, comma separated (onnxruntime:cpu,onnxruntime:cuda)",
)
@click.option("--atol", default=1e-4, show_default=True)
@click.option("--rtol", default=1e-3, show_default=True)
@click.option("--per-layer", is_flag=True, help="also compare every intermediate tensor")
@click.option("--policy", "policy_file", type=click.Path(exists=True, dir_okay=False))
@click.option("--dim", "dims", multiple=True, metavar="NAME=INT")
@click.option("--input", "inputs", multiple=True, metavar="NAME=FILE.npy")
@click.option("--seed", default=0, show_default=True)
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="write the report here")
def compare(
    model: str,
    engine_list: str,
    atol: float,
    rtol: float,
    per_layer: bool,
    policy_file: str | None,
    dims: Sequence[str],
    inputs: Sequence[str],
    seed: int,
    json_path: str | None,
) -> None:
    """Run MODEL on several engines and compare outputs (exit 1 when they differ)."""
    import msgspec

    from xpuruntime.inference.compare import compare_models, parse_targets
    from xpuruntime.inference.feeds import load_feeds
    from xpuruntime.inference.model_info import read_model_info

    try:
        targets = parse_targets(engine_list)
        path = Path(model)
        if not path.is_file():
            raise click.ClickException(f"model file {model!r} does not exist")
        feeds = load_feeds(
            read_model_info(path).tensor_infos(),
            _parse_inputs(inputs),
            _parse_dims(dims),
            seed=seed,
        )
        report = compare_models(
            path,
            targets,
            feeds,
            atol=atol,
            rtol=rtol,
            per_layer=per_layer,
            policy=_policy(policy_file, None),
        )
    except XpuRuntimeError as exc:
        raise _fail(exc) from exc
    console = _console()
    status = Table(title="Targets")
    for column in ("target", "ran", "detail"):
        status.add_column(column, overflow="fold")
    for t in report.targets:
        status.add_row(
            escape(t.target), "[green]yes[/]" if t.ran else "[red]no[/]", escape(t.reason)
        )
    console.print(status)
    table = Table(title=f"Outputs vs {report.reference} (atol {atol}, rtol {rtol})")
    for column in ("output", "target", "max abs err", "max rel err", "result"):
        table.add_column(column)
    for c in report.outputs:
        table.add_row(
            c.tensor,
            c.target,
            f"{c.max_abs:.3e}",
            f"{c.max_rel:.3e}",
            "[green]pass[/]" if c.passed else f"[red]FAIL[/] {c.note}",
        )
    console.print(table)
    if per_layer:
        d = report.first_divergence
        console.print(
            "per-layer: no intermediate tensor diverges"
            if d is None
            else f"per-layer: first divergence at node {d.node!r} ({d.op_type}), tensor {d.tensor!r} "
            f"on {d.target}: max abs {d.max_abs:.3e}, max rel {d.max_rel:.3e}"
        )
    if json_path:
        Path(json_path).write_bytes(msgspec.json.format(msgspec.json.encode(report), indent=2))
    if not report.passed:
        sys.exit(1)


@main.command()
@click.argument("model", type=click.Path(dir_okay=False))
@session_options
@click.option("--runs", default=1, show_default=True, help="runs to make before explaining")
@click.option(
    "--json", "json_path", type=click.Path(dir_okay=False), help="write the record JSON here"
)
def explain(
    model: str,
    device: str,
    engine: str,
    policy_file: str | None,
    fallback: str | None,
    dims: Sequence[str],
    inputs: Sequence[str],
    seed: int,
    runs: int,
    json_path: str | None,
) -> None:
    """Open MODEL under the policy, run it, and print the execution record."""
    from xpuruntime.inference.feeds import load_feeds
    from xpuruntime.inference.report import renderables

    try:
        sess = _open_session(model, device, engine, policy_file, fallback)
        feeds = load_feeds(sess.inputs, _parse_inputs(inputs), _parse_dims(dims), seed=seed)
        for _ in range(runs):
            sess.run(feeds)
    except XpuRuntimeError as exc:
        raise _fail(exc) from exc
    record = sess.record()
    _console().print(*renderables(record))
    if json_path:
        Path(json_path).write_text(record.to_json())


@main.command()
@click.option("--device", default="cpu", show_default=True)
@click.option("--engine", default="auto", show_default=True)
@click.option("--batch", default=4, show_default=True)
@click.option(
    "--json", "json_path", type=click.Path(dir_okay=False), help="write the record JSON here"
)
def demo(device: str, engine: str, batch: int, json_path: str | None) -> None:
    """Run the packaged demo classifier and show what ran."""
    from xpuruntime.inference import InferenceSession
    from xpuruntime.inference.demo import DEMO_MODEL, demo_images
    from xpuruntime.inference.report import renderables

    console = _console()
    try:
        sess = InferenceSession(DEMO_MODEL, device=device, engine=engine)
        images = demo_images(batch)
        probabilities = sess.run({"image": images})["probabilities"]
    except XpuRuntimeError as exc:
        raise _fail(exc) from exc
    console.print(
        f"[bold]xpuruntime demo[/]: {DEMO_MODEL.name} "
        f"(conv + MLP classifier, input image{list(images.shape)}) on "
        f"{sess.engine}:{sess.device}"
    )
    table = Table(title="Predictions")
    for column in ("image", "class", "probability", "top-3"):
        table.add_column(column)
    labels = ["vertical bar", "horizontal bar", "diagonal", "box"]
    for i, p in enumerate(np.asarray(probabilities)):
        top = np.argsort(p)[::-1][:3]
        table.add_row(
            f"{i} ({labels[i % 4]})",
            str(int(top[0])),
            f"{p[top[0]]:.4f}",
            ", ".join(f"{int(k)}:{p[k]:.3f}" for k in top),
        )
    console.print(table)
    record = sess.record()
    console.print(*renderables(record))
    if json_path:
        Path(json_path).write_text(record.to_json())


def _mount_policy_commands() -> None:
    try:
        from xpuruntime.policies.cli import policy
    except ImportError:  # the policies CLI is optional for this command line
        return
    main.add_command(policy, name="policy")


_mount_policy_commands()
main.add_command(lock_commands, name="lock")

if __name__ == "__main__":
    main()
