"""Property: for every setting, the CLI's session policy takes the highest layer that sets it
(flag > XPURUNTIME_POLICY_* > --policy file > default), and the record names that layer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xpuruntime.inference.cli import main

# Settings each layer can set here without leaving the CPU: value choices per layer.
FALLBACKS = st.sampled_from(["error", "warn", "allow"])
DEVICES = st.sampled_from(["auto", "cpu"])
OPTIMIZATIONS = st.sampled_from(["disabled", "basic", "extended", "all"])
DEFAULTS = {"fallback": "warn", "device": "auto", "graph_optimization": "all"}
FLAGS = {"fallback": "--fallback", "device": "--device"}  # graph_optimization has no flag


def layer(values: st.SearchStrategy[str]) -> st.SearchStrategy[str | None]:
    return st.none() | values


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    file_values=st.fixed_dictionaries(
        {
            "fallback": layer(FALLBACKS),
            "device": layer(DEVICES),
            "graph_optimization": layer(OPTIMIZATIONS),
        }
    ),
    env_values=st.fixed_dictionaries(
        {
            "fallback": layer(FALLBACKS),
            "device": layer(DEVICES),
            "graph_optimization": layer(OPTIMIZATIONS),
        }
    ),
    flag_values=st.fixed_dictionaries({"fallback": layer(FALLBACKS), "device": layer(DEVICES)}),
)
def test_highest_layer_wins_and_is_recorded(
    mlp: Path,
    tmp_path: Path,
    file_values: dict[str, str | None],
    env_values: dict[str, str | None],
    flag_values: dict[str, str | None],
) -> None:
    policy = tmp_path / "policy.json"
    execution = {k: v for k, v in file_values.items() if v is not None}
    policy.write_text(json.dumps({"schema_version": 1, "execution": execution}))
    env = {f"XPURUNTIME_POLICY_{k.upper()}": v for k, v in env_values.items() if v is not None}
    args = ["explain", str(mlp), "--runs", "0", "--json", "--policy", str(policy)]
    for name, value in flag_values.items():
        if value is not None:
            args += [FLAGS[name], value]
    result = CliRunner().invoke(main, args, env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    record: dict[str, Any] = json.loads(result.stdout)
    for name, default in DEFAULTS.items():
        path = f"execution.{name}"
        layers = [
            (flag_values.get(name), "argument"),
            (env_values[name], f"environment (XPURUNTIME_POLICY_{name.upper()})"),
            (file_values[name], f"policy {policy}"),
        ]
        expected, source = next(((v, s) for v, s in layers if v is not None), (default, None))
        assert record["policy"]["execution"][name] == expected
        if source is None or (source.startswith("policy") and expected == default):
            # the file repeating a default sets nothing: the setting keeps its default
            assert path not in record["policy_sources"]
        else:
            assert record["policy_sources"][path] == source
