"""ExecutionPolicy: defaults, checking at construction, coercion, replace, repr."""

from __future__ import annotations

import pytest

from xpuruntime.policies import (
    ExecutionPolicy,
    KernelPolicy,
    MemoryPolicy,
    PolicyConflictError,
    PolicyValidationError,
    UnknownEngineError,
    UnknownFieldError,
)


def test_documented_defaults() -> None:
    policy = ExecutionPolicy()
    assert policy.precision == "fp32"
    assert policy.fallback == "warn"
    assert policy.engines == ["tensorrt", "onnxruntime", "openvino", "qnn"]
    assert policy.device == "auto"
    assert policy.memory == MemoryPolicy(pool=True, limit_bytes=None)
    assert policy.graph_optimization == "all"
    assert policy.performance_hint == "latency"
    assert (policy.static_shape, policy.deterministic, policy.cuda_graphs) == (False,) * 3
    assert policy.kernel_policy is None
    assert repr(policy) == "ExecutionPolicy()"


def test_frozen_and_replace() -> None:
    policy = ExecutionPolicy(precision="fp16")
    with pytest.raises(AttributeError):
        policy.precision = "fp32"  # type: ignore[misc]
    changed = policy.replace(device="cuda:1", memory=MemoryPolicy(limit_bytes=1 << 30))
    assert (changed.precision, changed.device, changed.memory.limit_bytes) == (
        "fp16",
        "cuda:1",
        1 << 30,
    )
    assert policy.device == "auto"
    with pytest.raises(UnknownFieldError, match="Did you mean 'device'"):
        policy.replace(devise="cpu")


def test_coercion_of_plain_values() -> None:
    policy = ExecutionPolicy(
        engines=("onnxrt", "tensorrt"),  # type: ignore[arg-type]
        memory={"pool": False},  # type: ignore[arg-type]
        kernel_policy={"matmul": "cublas"},  # type: ignore[arg-type]
    )
    assert policy.engines == ["onnxruntime", "tensorrt"]  # alias resolved, list
    assert policy.memory == MemoryPolicy(pool=False)
    assert policy.kernel_policy == KernelPolicy(matmul="cublas")


def test_kernel_policy_is_copied_in() -> None:
    kernels = KernelPolicy(matmul="cublas")
    policy = ExecutionPolicy(kernel_policy=kernels)
    kernels.set("matmul", "cublasLt")
    assert policy.kernel_policy == KernelPolicy(matmul="cublas")


def test_repr_shows_only_changed_settings() -> None:
    policy = ExecutionPolicy(
        precision="int8", static_shape=True, kernel_policy=KernelPolicy(matmul="cpu")
    )
    assert repr(policy) == (
        "ExecutionPolicy(precision='int8', static_shape=True,"
        " kernel_policy=KernelPolicy(matmul='cpu'))"
    )


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (
            {"precision": "fp64"},
            PolicyValidationError,
            r"execution.precision: 'fp64' is not allowed\. Valid choices: bf16, fp16, fp32, fp8,"
            r" int8, tf32\.",
        ),
        (
            {"precision": 16},
            PolicyValidationError,
            r"execution.precision: Expected `str`, got `int` \(found 16\)",
        ),
        ({"fallback": "raise"}, PolicyValidationError, r"Valid choices: allow, error, warn"),
        (
            {"static_shape": "yes"},
            PolicyValidationError,
            r"execution.static_shape: Expected `bool`",
        ),
        ({"num_threads": 0}, PolicyValidationError, r"execution.num_threads: Expected `int` >= 1"),
        (
            {"memory": {"limit_bytes": -1}},
            PolicyValidationError,
            r"execution.memory.limit_bytes: Expected `int` >= 1 \(found -1\)",
        ),
        (
            {"input_shapes": {"input.1": [1, 0]}},
            PolicyValidationError,
            r'execution.input_shapes\["input.1"\]\[1\]: Expected `int` >= 1 \(found 0\)',
        ),
        (
            {"device": "gpu"},
            PolicyValidationError,
            r"execution.device: unknown device 'gpu': expected 'auto', 'cpu', 'cuda', 'cuda:N'",
        ),
        ({"device": "cuda:x"}, PolicyValidationError, r"Did you mean 'cuda'\?"),
        (
            {"engines": []},
            PolicyValidationError,
            r"execution.engines: Expected `array` of length >= 1",
        ),
        (
            {"engines": ["tensorrt", "tensorrt"]},
            PolicyValidationError,
            r"execution.engines\[1\]: engine 'tensorrt' is listed twice",
        ),
        ({"engines": ["onnxruntime", "onnxrt"]}, PolicyValidationError, r"listed twice"),
        (
            {"engines": ["tensorrtt"]},
            UnknownEngineError,
            r"execution.engines\[0\]: unknown engine 'tensorrtt'\. Valid choices: onnxruntime,"
            r" openvino, qnn, tensorrt\. Did you mean 'tensorrt'\?",
        ),
        (
            {"engine_options": {"openvno": {}}},
            UnknownEngineError,
            r"execution.engine_options.openvno: .*Did you mean 'openvino'",
        ),
        (
            {"engine_options": {"onnxrt": {"a": 1}, "onnxruntime": {"b": 2}}},
            PolicyConflictError,
            r"options for engine 'onnxruntime' are given twice",
        ),
        (
            {"engine_options": {"tensorrt": {"x": None}}},
            PolicyValidationError,
            r"execution.engine_options.tensorrt.x: engine options are strings",
        ),
        (
            {"engine_options": {"tensorrt": {"x": float("nan")}}},
            PolicyValidationError,
            r"finite numbers",
        ),
        ({"engine_options": {"tensorrt": {"x": 2**64}}}, PolicyValidationError, r"64-bit"),
        (
            {"engine_options": {"tensorrt": {"x": [1, {"a": 1}]}}},
            PolicyValidationError,
            r"lists of them; got \{'a': 1\}",
        ),
        (
            {"cache_dir": object()},
            PolicyValidationError,
            r"execution: Encoding objects of type object",
        ),
        ({"cache_dir": "\ud800"}, PolicyValidationError, r"surrogates not allowed"),
        ({"kernel_policy": 5}, PolicyValidationError, r"expected a KernelPolicy, 'auto', None"),
        (
            {"precison": "fp16"},
            UnknownFieldError,
            r"ExecutionPolicy has no setting 'precison'\. .*Did you mean 'precision'\?",
        ),
    ],
)
def test_bad_values(kwargs: dict[str, object], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        ExecutionPolicy(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("kwargs", [{"limit_bytes": -1}, {"limit_bytes": True}, {"pool": 1}])
def test_memory_policy_checks(kwargs: dict[str, object]) -> None:
    with pytest.raises(PolicyValidationError, match=r"memory\.(pool|limit_bytes): expected"):
        MemoryPolicy(**kwargs)  # type: ignore[arg-type]


def test_unknown_keyword_is_also_a_type_error() -> None:
    with pytest.raises(TypeError):
        MemoryPolicy(limit=3)  # type: ignore[call-arg]


def test_engine_options_pass_through() -> None:
    options = {
        "tensorrt": {"builder_optimization_level": 5, "timing_cache": True},
        "onnxrt": {"cudnn_conv_algo_search": "HEURISTIC", "ratios": [0.5, 1.5]},
    }
    policy = ExecutionPolicy(engine_options=options)
    assert policy.engine_options == {
        "tensorrt": {"builder_optimization_level": 5, "timing_cache": True},
        "onnxruntime": {"cudnn_conv_algo_search": "HEURISTIC", "ratios": [0.5, 1.5]},
    }


def test_hash_follows_content() -> None:
    a = ExecutionPolicy(engines=["onnxrt"], engine_options={"tensorrt": {"level": 3}})
    b = ExecutionPolicy(engines=["onnxruntime"], engine_options={"tensorrt": {"level": 3}})
    assert a == b
    assert hash(a) == hash(b)
    assert len({a, b, ExecutionPolicy()}) == 2


def test_lock_needs_a_lock_file() -> None:
    from xpuruntime.policies import PolicyConflictError

    with pytest.raises(PolicyConflictError, match="lock='replay' needs lock_file"):
        ExecutionPolicy(lock="replay")
    assert ExecutionPolicy(lock="record", lock_file="decisions.lock.json").lock == "record"


def test_nvlink_multicast_cannot_be_enabled() -> None:
    from xpuruntime.policies import CollectivePolicy, PolicyValidationError

    with pytest.raises(PolicyValidationError, match="shared host"):
        CollectivePolicy(nvls=True)
    with pytest.raises(PolicyValidationError, match="NVLS"):
        CollectivePolicy(algorithm="nvls")
    with pytest.raises(PolicyValidationError, match="NVLS"):
        ExecutionPolicy.from_dict(
            {"schema_version": 1, "execution": {"collectives": {"algorithm": "nvls_tree"}}}
        )
    with pytest.raises(PolicyValidationError, match="min_channels=8 exceeds"):
        CollectivePolicy(min_channels=8, max_channels=2)


def test_new_settings_round_trip_through_files(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from xpuruntime.policies import CollectivePolicy

    policy = ExecutionPolicy(
        host_shape_compute="forbid",
        engine_log_level="info",
        collectives=CollectivePolicy(protocol="ll128", p2p=False),
    )
    for suffix in (".json", ".yaml", ".toml"):
        assert ExecutionPolicy.load(policy.save(tmp_path / f"p{suffix}")) == policy
