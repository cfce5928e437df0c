"""``compare``: one model on several engines/devices, outputs compared with the first."""

from __future__ import annotations

import sys
from typing import Any

import click
from rich.text import Text

from xpuruntime.inference.cli.app import main
from xpuruntime.inference.cli.options import (
    MODEL,
    InputFlags,
    PolicyFlags,
    bundle_of,
    checked_engine,
    input_options,
    model_file,
)
from xpuruntime.inference.cli.output import Output, json_option
from xpuruntime.policies import ExecutionPolicy
from xpuruntime.policies.errors import PolicyError


@main.command()
@click.argument("model", type=MODEL)
@click.option(
    "--engines",
    "engine_list",
    required=True,
    metavar="ENGINE:DEVICE,ENGINE:DEVICE[,...]",
    help="Two or more different targets; the first is the reference "
    "(onnxruntime:cpu,onnxruntime:cuda).",
)
@click.option(
    "--atol",
    default=1e-4,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Absolute tolerance.",
)
@click.option(
    "--rtol",
    default=1e-3,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Relative tolerance.",
)
@click.option(
    "--per-layer",
    is_flag=True,
    help="Also compare every intermediate tensor and name the first node that diverges.",
)
@click.option(
    "--allow-nonfinite",
    is_flag=True,
    help="Accept NaN/Inf where both sides have them at the same places (default: fail).",
)
@click.option(
    "--policy",
    "policy_file",
    type=click.Path(exists=True, dir_okay=False),
    help="ExecutionPolicy file for every target; default $XPURUNTIME_POLICY_FILE (a "
    "bundle's own policy for a bundle).",
)
@click.option(
    "--fallback",
    type=click.Choice(["error", "warn", "allow"]),
    help="What happens when a target cannot run as asked (policy setting 'fallback'; "
    "default: the policy's, 'warn'). Every fallback is listed with the target.",
)
@click.option(
    "--precision",
    type=click.Choice(["fp32", "tf32", "fp16", "bf16", "int8", "fp8"]),
    help="Numeric precision for every target (policy setting 'precision').",
)
@input_options
@json_option("the comparison report")
def compare(
    model: str,
    engine_list: str,
    atol: float,
    rtol: float,
    per_layer: bool,
    allow_nonfinite: bool,
    json_target: str | None,
    **options: Any,
) -> None:
    """Run MODEL (an ONNX file or a bundle) on several engines and compare outputs (exit 1
    when they differ or a target cannot run).

    Each target runs under the policy's fallback mode (--fallback, XPURUNTIME_POLICY_FALLBACK
    or the policy file; default 'warn'), and the targets table states what each side ran:
    engine, device, precision and every fallback it took. A target that cannot run is
    reported, never silently replaced. NaN or Inf on either side is reported and fails the
    comparison unless --allow-nonfinite.
    """
    from xpuruntime.inference.compare import compare_models, parse_targets
    from xpuruntime.inference.model_info import read_model_info

    try:
        targets = parse_targets(engine_list)
        for target in targets:  # unknown names are usage errors, not targets that "cannot run"
            checked_engine(None, None, target.engine)
            ExecutionPolicy(device=target.device)
    except (PolicyError, click.BadParameter) as exc:
        message = exc.message if isinstance(exc, click.BadParameter) else str(exc)
        raise click.BadParameter(message, param_hint="--engines") from exc
    bundle = bundle_of(model)
    layered = PolicyFlags.of(options).layered(bundle)
    path = model_file(model)
    flags = InputFlags.of(options)
    if bundle is not None and not (flags.inputs or flags.input_shapes or flags.dims):
        feeds = bundle.reference()[0]
    else:
        feeds = flags.feeds(read_model_info(path).tensor_infos(), layered.policy.input_shapes)
    report = compare_models(
        path,
        targets,
        feeds,
        atol=atol,
        rtol=rtol,
        per_layer=per_layer,
        policy=layered.policy,
        allow_nonfinite=allow_nonfinite,
    )
    out = Output(json_target)
    status = out.table("Targets", "target", "ran", "detail")
    for t in report.targets:
        ran = Text("yes", style="green") if t.ran else Text("no", style="red")
        status.add_row(t.target, ran, t.reason)
    table = out.table(
        f"Outputs vs {report.reference} (atol {atol}, rtol {rtol})",
        "output",
        "target",
        "max abs err",
        "max rel err",
        "result",
        "note",
    )
    for c in report.outputs:
        result = Text("pass", style="green") if c.passed else Text("FAIL", style="bold red")
        table.add_row(c.tensor, c.target, f"{c.max_abs:.3e}", f"{c.max_rel:.3e}", result, c.note)
    out.print(status, table)
    if per_layer:
        d = report.first_divergence
        out.print(
            "per-layer: no intermediate tensor diverges"
            if d is None
            else f"per-layer: first divergence at node {d.node!r} ({d.op_type}), tensor "
            f"{d.tensor!r} on {d.target}: max abs {d.max_abs:.3e}, max rel {d.max_rel:.3e}"
        )
    out.emit(report)
    if not report.passed:
        sys.exit(1)
