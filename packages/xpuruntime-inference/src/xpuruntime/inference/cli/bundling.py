"""``xpuruntime bundle verify DIR``: does an engine reproduce a bundle's reference outputs?

Opens the bundle (written by ``xpuruntime.pytorch.export``) under its own policy on the
engine asked for, runs the reference inputs exported with it and compares the outputs with
the bundle's tolerances (or ``--rtol``/``--atol``). Exit 0 when every output is within them;
1 when one is not (the worst tensor is named) or the engine cannot run the bundle; 2 on a
usage error (no such folder, not a bundle, an unknown engine).
"""

from __future__ import annotations

from pathlib import Path

import click

from xpuruntime.inference.cli.app import EXIT_FAILURE, main
from xpuruntime.inference.cli.options import checked_engine
from xpuruntime.inference.cli.output import Output, json_option
from xpuruntime.policies.bundle import BundleError

__all__ = ["bundle"]


@main.group()
def bundle() -> None:
    """Model bundles: an ONNX model with its policy, lockfile and reference outputs."""


@bundle.command()
@click.argument("folder", type=click.Path(exists=True, file_okay=False))
@click.option(
    "--engine", default="auto", show_default=True, callback=checked_engine, help="auto or an engine"
)
@click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda:N, npu")
@click.option("--rtol", type=click.FloatRange(min=0), help="override the bundle's rtol")
@click.option("--atol", type=click.FloatRange(min=0), help="override the bundle's atol")
@json_option("the comparison")
def verify(
    folder: str,
    engine: str,
    device: str,
    rtol: float | None,
    atol: float | None,
    json_target: str | None,
) -> int:
    """Run FOLDER's reference inputs on an engine and compare with its reference outputs."""
    from xpuruntime.inference.bundle import open_bundle
    from xpuruntime.inference.session import InferenceSession

    try:
        open_bundle(Path(folder))
    except BundleError as exc:  # not a bundle, or a damaged one: the argument is wrong
        raise click.UsageError(f"{type(exc).__name__}: {exc}") from exc
    out = Output(json_target)
    with InferenceSession(folder, device=device, engine=engine) as session:
        report = session.verify(rtol=rtol, atol=atol, raise_on_failure=False)
    out.print(str(report))
    out.emit(report)
    if report.passed:
        return 0
    worst = max((c for c in report.outputs if not c.passed), key=lambda c: (c.max_abs, c.max_rel))
    click.echo(
        f"error: {worst.tensor} differs most: max abs {worst.max_abs:.3g}, max rel"
        f" {worst.max_rel:.3g} (rtol {report.rtol:g}, atol {report.atol:g})",
        err=True,
    )
    return EXIT_FAILURE
