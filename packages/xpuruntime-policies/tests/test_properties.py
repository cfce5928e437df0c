"""Properties (hypothesis): exact round trips in every format, and bad input of any shape
raises PolicyError and nothing else."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xpuruntime.policies import (
    ExecutionPolicy,
    KernelPolicy,
    MemoryPolicy,
    OpPolicy,
    PolicyConflictError,
    PolicyDocument,
    PolicyError,
    diff,
    resolve_policy,
    vocabulary,
)
from xpuruntime.policies.execution_policy import SECTION_FIELDS

FORMATS = ("json", "yaml", "toml")
PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Text as people write it in files; lone surrogates cannot be written in any format and are
# rejected at construction (test_execution_policy covers that).
text = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
scalar = st.one_of(
    text,
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
)


@st.composite
def kernel_policies(draw: st.DrawFn) -> KernelPolicy:
    policy = KernelPolicy(strategy=draw(st.sampled_from(["first_supported", "best_performance"])))
    for op in draw(st.lists(st.sampled_from(vocabulary.known_ops()), unique=True)):
        kernel = draw(
            st.sampled_from([spec.name for spec in vocabulary.kernels_for(op)] + ["auto"])
        )
        mode = "pin" if kernel == "auto" else draw(st.sampled_from(["pin", "prefer"]))
        policy.set(op, kernel, mode=mode)  # type: ignore[arg-type]
    return policy


def _execution_settings() -> st.SearchStrategy[dict[str, Any]]:
    engines = list(vocabulary.DEFAULT_ENGINE_ORDER)
    return st.fixed_dictionaries(
        {},
        optional={
            "precision": st.sampled_from(["fp32", "tf32", "fp16", "bf16", "int8", "fp8"]),
            "static_shape": st.booleans(),
            "input_shapes": st.none()
            | st.dictionaries(text, st.lists(st.integers(1, 4096), max_size=4), max_size=3),
            "fallback": st.sampled_from(["error", "warn", "allow"]),
            "deterministic": st.booleans(),
            "engines": st.permutations(engines).flatmap(
                lambda p: st.integers(1, len(p)).map(lambda n: p[:n])
            ),
            "device": st.sampled_from(["auto", "cpu", "cuda", "cuda:1", "npu", "npu:0"]),
            "cuda_graphs": st.booleans(),
            "memory": st.builds(
                MemoryPolicy, pool=st.booleans(), limit_bytes=st.none() | st.integers(1, 2**40)
            ),
            "cache_dir": st.none() | text,
            "profiling": st.booleans(),
            "performance_hint": st.sampled_from(["latency", "throughput"]),
            "num_threads": st.none() | st.integers(1, 256),
            "graph_optimization": st.sampled_from(["disabled", "basic", "extended", "all"]),
            "quantized_model": st.none() | text,
            "engine_options": st.dictionaries(
                st.sampled_from(engines),
                st.dictionaries(text, scalar | st.lists(scalar, max_size=3), max_size=3),
                max_size=2,
            ),
        },
    )


@st.composite
def documents(draw: st.DrawFn) -> PolicyDocument:
    kernel = draw(st.none() | kernel_policies())
    execution_settings = draw(st.none() | _execution_settings())
    try:
        execution = None if execution_settings is None else ExecutionPolicy(**execution_settings)
        return PolicyDocument(kernel=kernel, execution=execution)
    except PolicyConflictError:
        return PolicyDocument(kernel=kernel)  # contradictory draws are tested elsewhere


@pytest.mark.parametrize("cache_dir", ["a\x85b", "\u2028", "x\u2029"])
def test_unicode_line_breaks_round_trip_in_yaml(cache_dir: str) -> None:
    """YAML folds NEL/LS/PS in single-quoted scalars; the dumper must double-quote them."""
    document = PolicyDocument(execution=ExecutionPolicy(cache_dir=cache_dir))
    loaded = PolicyDocument.loads(document.dumps("yaml"), "yaml")
    assert loaded.execution is not None
    assert loaded.execution.cache_dir == cache_dir


@PROPERTY
@given(documents(), st.sampled_from(FORMATS))
def test_round_trip_is_exact(document: PolicyDocument, fmt: str) -> None:
    text_form = document.dumps(fmt)  # type: ignore[arg-type]
    loaded = PolicyDocument.loads(text_form, fmt)  # type: ignore[arg-type]
    assert loaded == document
    assert loaded.dumps(fmt) == text_form  # type: ignore[arg-type]
    assert loaded.content_hash() == document.content_hash()
    assert not diff(loaded, document)


@PROPERTY
@given(documents(), documents())
def test_diff_is_empty_exactly_when_hashes_agree(a: PolicyDocument, b: PolicyDocument) -> None:
    assert bool(diff(a, b)) == (a.content_hash() != b.content_hash())


@PROPERTY
@given(kernel_policies())
def test_kernel_policy_dict_round_trip(policy: KernelPolicy) -> None:
    assert KernelPolicy.from_dict(policy.to_dict()) == policy
    assert KernelPolicy(**policy.entries, strategy=policy.strategy) == policy


# -- anything malformed raises PolicyError, and only PolicyError --------------------------

KEYS = (
    st.sampled_from(
        [
            "schema_version",
            "kernel",
            "execution",
            "ops",
            "strategy",
            "kernel",
            "mode",
            "memory",
            "pool",
            "limit_bytes",
            *SECTION_FIELDS,
            *vocabulary.known_ops(),
        ]
    )
    | text
)
LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    text,
    st.sampled_from([1, "auto", "cublasLt", "fp16", "cuda", "tensorrt", "first_supported"]),
)
JSONISH = st.recursive(
    LEAVES,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(KEYS, children, max_size=5),
    max_leaves=25,
)


@st.composite
def near_documents(draw: st.DrawFn) -> Any:
    """Mostly well-shaped documents with random parts: deeper paths get exercised."""
    base: dict[str, Any] = {"schema_version": draw(st.sampled_from([1, 1, 1, 2, "1", None]))}
    if draw(st.booleans()):
        base["kernel"] = draw(st.dictionaries(st.sampled_from(["ops", "strategy", "x"]), JSONISH))
    if draw(st.booleans()):
        base["execution"] = draw(st.dictionaries(KEYS, JSONISH, max_size=6))
    return base


def _outcome(call: Any) -> str:
    """ "ok", or the message of the PolicyError ``call`` raised; any other exception escapes."""
    try:
        call()
    except PolicyError as error:
        return str(error)
    return "ok"


def _only_policy_errors(call: Any) -> None:
    assert _outcome(call).strip()  # and every error message says something


@PROPERTY
@given(JSONISH | near_documents())
def test_random_data_raises_only_policy_errors(data: Any) -> None:
    _only_policy_errors(lambda: PolicyDocument.from_dict(data))


@PROPERTY
@given(st.text(max_size=200), st.sampled_from(FORMATS))
def test_random_text_raises_only_policy_errors(text_form: str, fmt: str) -> None:
    _only_policy_errors(lambda: PolicyDocument.loads(text_form, fmt))  # type: ignore[arg-type]


@PROPERTY
@given(documents(), st.sampled_from(FORMATS), st.data())
def test_damaged_files_raise_only_policy_errors(
    document: PolicyDocument, fmt: str, data: st.DataObject
) -> None:
    text_form = document.dumps(fmt)  # type: ignore[arg-type]
    start = data.draw(st.integers(0, len(text_form)))
    end = data.draw(st.integers(start, min(len(text_form), start + 8)))
    insert = data.draw(st.sampled_from(["", "{", "]", ":", "\t", "- ", '"', "=", "\n  x", "~"]))
    damaged = text_form[:start] + insert + text_form[end:]
    _only_policy_errors(lambda: PolicyDocument.loads(damaged, fmt))  # type: ignore[arg-type]


@PROPERTY
@given(near_documents())
def test_random_documents_in_every_format(data: Any) -> None:
    # Through the parsers too: what json/yaml/toml make of the same document.
    try:
        as_json = json.dumps(data)
    except (TypeError, ValueError):
        return
    _only_policy_errors(lambda: PolicyDocument.loads(as_json, "json"))
    _only_policy_errors(lambda: PolicyDocument.loads(as_json, "yaml"))  # YAML is a JSON superset


ENV_NAMES = st.sampled_from(
    [f"XPURUNTIME_POLICY_{name.upper()}" for name in SECTION_FIELDS if name != "memory"]
    + ["XPURUNTIME_POLICY_MEMORY_POOL", "XPURUNTIME_POLICY_MEMORY_LIMIT_BYTES"]
    + [f"XPURUNTIME_POLICY_KERNEL_{op.upper()}" for op in vocabulary.known_ops()]
    + ["XPURUNTIME_POLICY_KERNEL_STRATEGY", "XPURUNTIME_POLICY_TYPO"]
)
ENV_VALUES = st.sampled_from(
    [
        "",
        "1",
        "0",
        "yes",
        "fp16",
        "cuda:0",
        "cpu",
        "tensorrt,onnxrt",
        "prefer:cublas",
        "auto",
        '{"x": [1, 2]}',
        "[" * 5000,
        "9" * 5000,
        "-3",
        "best_performance",
    ]
) | st.text(max_size=20)


@PROPERTY
@given(st.dictionaries(ENV_NAMES, ENV_VALUES, max_size=4))
def test_random_environment_raises_only_policy_errors(environ: dict[str, str]) -> None:
    _only_policy_errors(lambda: resolve_policy(environ=environ))


@pytest.mark.parametrize("fmt", FORMATS)
def test_op_policy_object_form_survives(fmt: str) -> None:
    document = PolicyDocument(kernel=KernelPolicy(matmul=OpPolicy(kernel="cublas", mode="prefer")))
    assert PolicyDocument.loads(document.dumps(fmt), fmt) == document  # type: ignore[arg-type]
