"""``xpuruntime`` command line: devices, engines, run, bench, compare, explain, demo, inspect,
cache, lock, policy. Each command lives in its own module; importing this package registers them."""

from __future__ import annotations

from xpuruntime.inference.cli import (  # noqa: F401  (registers the commands)
    benching,
    bundling,
    caching,
    comparing,
    inspecting,
    inventory,
    running,
    visualizing,
)
from xpuruntime.inference.cli.app import main
from xpuruntime.inference.cli.locking import lock
from xpuruntime.policies.cli import policy

main.add_command(policy, name="policy")
main.add_command(lock, name="lock")

__all__ = ["main"]
