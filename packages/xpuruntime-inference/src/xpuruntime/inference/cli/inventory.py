"""``devices`` and ``engines``: what this machine has and which engines can use it."""

from __future__ import annotations

import dataclasses
import platform

import click
from rich.text import Text

from xpuruntime.inference.cli.app import main
from xpuruntime.inference.cli.output import Output, json_option

_STATE_STYLES = {
    "available": "green",
    "unavailable": "red",
    "broken": "red",
    "not installed": "yellow",
}


@main.command()
@json_option("the devices")
def devices(json_target: str | None) -> None:
    """Devices this machine has: CPU, CUDA GPUs (core), and what each engine can reach."""
    from xpuruntime.inference.selection import engine_overview
    from xpuruntime.runtime.device import get_all_devices

    found = [
        {
            "device": "cpu",
            "name": platform.processor() or platform.machine(),
            "details": "",
            "via": "host",
        }
    ]
    for dev in get_all_devices():
        if dev.kind != "cuda":
            continue
        major, minor = dev.compute_capability
        found.append(
            {
                "device": f"cuda:{dev.id}",
                "name": dev.name,
                "details": f"cc {major}.{minor}, {dev.total_memory / 2**30:.1f} GiB, "
                f"{dev.sm_count} SMs",
                "via": "xpuruntime core",
            }
        )
    problems = []
    for engine in engine_overview():
        if engine.state == "broken":
            problems.append(f"{engine.name}: {engine.reason}")
        for device in engine.devices:
            if not device.startswith(("cpu", "cuda")):
                found.append(
                    {"device": device, "name": "", "details": "", "via": f"engine {engine.name}"}
                )
    out = Output(json_target)
    table = out.table("Devices", "device", "name", "details", "via")
    for row in found:
        table.add_row(row["device"], row["name"], row["details"], row["via"])
    out.print(table)
    if not any(d["device"].startswith("cuda") for d in found):
        out.print("no CUDA device visible to the xpuruntime core")
    for problem in problems:
        click.echo(f"warning: engine plugin problem: {problem}", err=True)
    out.emit({"devices": found, "problems": problems})


@main.command()
@json_option("the engines and their state")
def engines(json_target: str | None) -> None:
    """Engines: available here, installed but unusable (with why), or not installed (with
    the command that installs them)."""
    from xpuruntime.inference.selection import engine_overview, with_install_hint

    overview = engine_overview()
    out = Output(json_target)
    table = out.table("Engines", "engine", "aliases", "state", "devices", "versions", "notes")
    for e in overview:
        table.add_row(
            e.name,
            ", ".join(e.aliases),
            Text(e.state, style=_STATE_STYLES[e.state]),
            ", ".join(e.devices),
            ", ".join(f"{k} {v}" for k, v in e.versions.items()),
            with_install_hint(e.reason, e.install_hint),
        )
    out.print(table)
    out.emit({"engines": [dataclasses.asdict(e) for e in overview]})
