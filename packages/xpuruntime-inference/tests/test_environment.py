"""The environment layer: XPURUNTIME_POLICY_* and XPURUNTIME_POLICY_FILE reach InferenceSession
with the documented precedence (defaults < policy < environment < arguments), and the record
and explain() say which layer set each setting."""

from __future__ import annotations

from pathlib import Path

import pytest

from xpuruntime.inference import InferenceSession
from xpuruntime.policies import ExecutionPolicy, PolicyDocument
from xpuruntime.policies.errors import PolicyError
from xpuruntime.runtime.errors import FallbackError


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the variables a test sets: none inherited from the machine running the tests."""
    import os

    for name in list(os.environ):
        if name.startswith("XPURUNTIME_POLICY_"):
            monkeypatch.delenv(name)


@pytest.mark.usefixtures("without_cuda_ep")
def test_fallback_error_from_the_environment_makes_cuda_on_a_cpu_machine_raise(
    mlp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XPURUNTIME_POLICY_FALLBACK", "error")
    with pytest.raises(FallbackError, match="CUDAExecutionProvider"):
        InferenceSession(mlp, device="cuda")


def test_a_misspelled_variable_is_an_error_with_a_suggestion(
    mlp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XPURUNTIME_POLICY_PRECISON", "fp16")
    with pytest.raises(PolicyError, match="XPURUNTIME_POLICY_PRECISION"):
        InferenceSession(mlp, device="cpu")


def test_layers_and_their_sources(mlp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XPURUNTIME_POLICY_NUM_THREADS", "2")
    monkeypatch.setenv("XPURUNTIME_POLICY_GRAPH_OPTIMIZATION", "basic")
    policy = ExecutionPolicy(graph_optimization="disabled", deterministic=True, device="cuda")
    sess = InferenceSession(mlp, device="cpu", exec_policy=policy)
    assert sess.policy.num_threads == 2
    assert sess.policy.graph_optimization == "basic"  # the environment beats the policy
    assert sess.policy.deterministic is True
    assert sess.device == "cpu"  # the argument beats the policy
    sources = sess.record().policy_sources
    assert sources["execution.num_threads"] == "environment (XPURUNTIME_POLICY_NUM_THREADS)"
    assert sources["execution.graph_optimization"].startswith("environment")
    assert sources["execution.deterministic"] == "policy"
    assert sources["execution.device"] == "argument"
    text = sess.explain()
    assert "Policy sources" in text
    assert "XPURUNTIME_POLICY_NUM_THREADS" in text


def test_policy_file_from_the_environment_or_as_the_policy(
    mlp: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = PolicyDocument(execution=ExecutionPolicy(num_threads=3)).save(tmp_path / "p.toml")
    monkeypatch.setenv("XPURUNTIME_POLICY_FILE", str(path))
    from_env = InferenceSession(mlp, device="cpu")
    assert from_env.policy.num_threads == 3
    assert from_env.record().policy_sources["execution.num_threads"] == f"policy {path}"
    monkeypatch.delenv("XPURUNTIME_POLICY_FILE")
    given = InferenceSession(mlp, device="cpu", exec_policy=path)
    assert given.policy.num_threads == 3


def test_command_line_flags_are_arguments(mlp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # What a CLI does with --fallback allow: an argument, above the environment.
    monkeypatch.setenv("XPURUNTIME_POLICY_FALLBACK", "error")
    sess = InferenceSession(
        mlp, device="cpu", policy_arguments={"execution": {"fallback": "allow"}}
    )
    assert sess.policy.fallback == "allow"
    assert sess.record().policy_sources["execution.fallback"] == "argument"
