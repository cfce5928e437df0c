"""Policy files: JSON, YAML and TOML, exact round trips, hashes, and every way a file is bad."""

from __future__ import annotations

import json
import pickle
from collections.abc import Callable
from pathlib import Path

import pytest

from xpuruntime.policies import (
    SCHEMA_VERSION,
    ExecutionPolicy,
    KernelPolicy,
    MemoryPolicy,
    OpPolicy,
    PolicyConflictError,
    PolicyDocument,
    PolicyError,
    PolicyFileError,
    PolicyParseError,
    PolicyValidationError,
    SchemaVersionError,
    UnknownEngineError,
    UnknownFieldError,
    UnknownKernelError,
    UnknownOpError,
    load_policy,
)

WriteFile = Callable[[str, str], Path]
FORMATS = ["json", "yaml", "toml"]

KERNELS = KernelPolicy(
    matmul="cublasLt",
    attention=OpPolicy(kernel="flash_v2", mode="prefer"),
    conv="auto",
    strategy="best_performance",
)
EXECUTION = ExecutionPolicy(
    precision="fp16",
    static_shape=True,
    input_shapes={"input.1": [1, 3, 224, 224], "mask": [1, 128]},
    fallback="error",
    engines=["tensorrt", "onnxruntime"],
    device="cuda:0",
    memory=MemoryPolicy(pool=True, limit_bytes=8 << 30),
    cache_dir="/var/cache/xrt",
    num_threads=4,
    engine_options={"tensorrt": {"builder_optimization_level": 5, "fp16_ratio": 0.5}},
)
DOCUMENT = PolicyDocument(kernel=KERNELS, execution=EXECUTION)

YAML_TEXT = """\
schema_version: 1
kernel:
  ops:
    matmul: cublasLt
execution:
  precision: fp16
"""


@pytest.mark.parametrize("fmt", FORMATS)
def test_round_trip_is_exact_in_every_format(tmp_path: Path, fmt: str) -> None:
    path = DOCUMENT.save(tmp_path / f"policy.{fmt}")
    loaded = load_policy(path)
    assert loaded == DOCUMENT
    assert loaded.content_hash() == DOCUMENT.content_hash()
    loaded.save(tmp_path / f"again.{fmt}")
    assert (tmp_path / f"again.{fmt}").read_text() == path.read_text()


@pytest.mark.parametrize("fmt", FORMATS)
def test_kernel_and_execution_policies_save_and_load(tmp_path: Path, fmt: str) -> None:
    assert KernelPolicy.load(KERNELS.save(tmp_path / f"k.{fmt}")) == KERNELS
    execution = EXECUTION.replace(kernel_policy=KERNELS)
    assert ExecutionPolicy.load(execution.save(tmp_path / f"e.{fmt}")) == execution


def test_yml_suffix_and_explicit_format(tmp_path: Path) -> None:
    yml = DOCUMENT.save(tmp_path / "policy.yml")
    assert load_policy(yml) == DOCUMENT
    odd = DOCUMENT.save(tmp_path / "policy.conf", format="toml")
    assert load_policy(odd, format="toml") == DOCUMENT


def test_document_layout(tmp_path: Path) -> None:
    data = json.loads(DOCUMENT.save(tmp_path / "p.json").read_text())
    assert list(data) == ["schema_version", "kernel", "execution"]
    assert data["schema_version"] == SCHEMA_VERSION
    assert data["kernel"] == {
        "strategy": "best_performance",
        "ops": {
            "attention": {"kernel": "flash_v2", "mode": "prefer"},
            "conv": "auto",
            "matmul": "cublasLt",
        },
    }
    assert "kernel_policy" not in data["execution"]
    assert "quantized_model" not in data["execution"]  # unset optional settings are omitted


def test_missing_sections_mean_defaults(write: WriteFile) -> None:
    only_kernel = write("k.yaml", "schema_version: 1\nkernel: {ops: {matmul: cublas}}\n")
    assert ExecutionPolicy.load(only_kernel) == ExecutionPolicy(
        kernel_policy=KernelPolicy(matmul="cublas")
    )
    empty = write("e.json", '{"schema_version": 1}')
    assert KernelPolicy.load(empty) == KernelPolicy()
    assert load_policy(empty) == PolicyDocument()


def test_schema_reference_is_accepted_and_ignored(write: WriteFile) -> None:
    plain = write("plain.json", '{"schema_version": 1, "kernel": {"ops": {"conv": "cudnn"}}}')
    pointed = write(
        "pointed.json",
        '{"$schema": "./policy.schema.json", "schema_version": 1, "kernel": {"ops": {"conv": "cudnn"}}}',
    )
    assert load_policy(pointed) == load_policy(plain)
    assert load_policy(pointed).content_hash() == load_policy(plain).content_hash()


def test_long_form_pin_normalizes_to_the_short_form(write: WriteFile) -> None:
    path = write(
        "p.json",
        '{"schema_version": 1, "kernel": {"ops": {"matmul": {"kernel": "cublas"},'
        ' "conv": {"mode": "auto"}}}}',
    )
    assert load_policy(path).to_dict()["kernel"]["ops"] == {"conv": "auto", "matmul": "cublas"}


def test_hash_is_the_same_in_every_format_and_ignores_layout(write: WriteFile) -> None:
    a = write("a.yaml", YAML_TEXT)
    b = write(
        "b.json",
        '{"execution": {"precision": "fp16", "fallback": "warn"},'
        ' "kernel": {"ops": {"matmul": "cublasLt"}, "strategy": "first_supported"},'
        ' "schema_version": 1}',
    )
    c = write(
        "c.toml",
        'schema_version = 1\n[execution]\nprecision = "fp16"\n[kernel.ops]\nmatmul = "cublasLt"\n',
    )
    hashes = {load_policy(path).content_hash() for path in (a, b, c)}
    assert len(hashes) == 1
    assert len(hashes.pop()) == 64


def test_hash_is_stable_across_releases() -> None:
    # A cache key: it must not change unless the canonical form does (bump SCHEMA_VERSION).
    assert KernelPolicy(matmul="cublasLt").content_hash() == (
        PolicyDocument(kernel=KernelPolicy(matmul="cublasLt")).content_hash()
    )
    canonical = PolicyDocument(kernel=KernelPolicy(matmul="cublasLt")).canonical_json()
    assert canonical == (
        b'{"kernel":{"ops":{"matmul":"cublasLt"},"strategy":"first_supported"},"schema_version":1}'
    )


def test_dumps_and_loads_strings() -> None:
    for fmt in FORMATS:
        assert PolicyDocument.loads(DOCUMENT.dumps(fmt), fmt) == DOCUMENT  # type: ignore[arg-type]


def test_to_dict_from_dict() -> None:
    assert KernelPolicy.from_dict(KERNELS.to_dict()) == KERNELS
    assert ExecutionPolicy.from_dict(EXECUTION.to_dict()) == EXECUTION
    assert PolicyDocument.from_dict(DOCUMENT.to_dict()) == DOCUMENT


@pytest.mark.parametrize(
    ("execution", "kernel", "error"),
    [
        ({"device": "gpu"}, None, PolicyValidationError),
        ({"lock": "record"}, None, PolicyConflictError),
        ({"device": "cpu"}, {"ops": {"matmul": "cublasLt"}}, PolicyConflictError),
    ],
)
def test_every_reader_checks_the_whole_document(
    execution: dict[str, object], kernel: dict[str, object] | None, error: type[Exception]
) -> None:
    # KernelPolicy reads a document without building an ExecutionPolicy (no import cycle),
    # yet rejects what PolicyDocument rejects, the execution section included.
    data: dict[str, object] = {"schema_version": 1, "execution": execution}
    if kernel is not None:
        data["kernel"] = kernel
    for reader in (KernelPolicy, ExecutionPolicy, PolicyDocument):
        with pytest.raises(error) as caught:
            reader.from_dict(data, source="p.json")
        assert caught.value.source == "p.json"
    del data["execution"]
    assert KernelPolicy.from_dict(data) == PolicyDocument.from_dict(data).kernel_policy()


# -- malformed files: the parser's line and column, never a parser traceback ----------------


@pytest.mark.parametrize(
    ("name", "text", "line", "column", "message"),
    [
        (
            "p.json",
            '{"schema_version": 1,\n "kernel": {"ops": }}',
            2,
            20,
            "malformed JSON: Expecting value",
        ),
        ("p.json", '{"schema_version": 1}\n}', 2, 1, "malformed JSON: Extra data"),
        ("p.yaml", "schema_version: 1\nkernel:\n  ops: [matmul\n", 4, 1, "malformed YAML:"),
        ("p.yaml", "schema_version: 1\n\tkernel: {}\n", 2, 1, "malformed YAML:"),
        (
            "p.yaml",
            "schema_version: 1\nkernel: {}\nkernel: {}\n",
            3,
            1,
            "malformed YAML: while constructing a mapping found duplicate key 'kernel'",
        ),
        ("p.toml", "schema_version = 1\n[kernel\n", 2, 8, "malformed TOML:"),
        ("p.toml", "schema_version = 1\nschema_version = 1\n", 2, 19, "malformed TOML:"),
    ],
)
def test_malformed_files_report_line_and_column(
    write: WriteFile, name: str, text: str, line: int, column: int, message: str
) -> None:
    path = write(name, text)
    with pytest.raises(PolicyParseError) as caught:
        load_policy(path)
    error = caught.value
    assert (error.line, error.column) == (line, column)
    assert str(error).startswith(f"{path}:{line}:{column}: {message}")
    assert error.__cause__ is None  # no parser traceback chained on
    assert error.__suppress_context__


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"schema_version": 1, "schema_version": 1}', "duplicate key 'schema_version'"),
        ('{"schema_version": 1, "execution": {"num_threads": NaN}}', "NaN is not valid JSON"),
    ],
)
def test_json_the_stdlib_would_accept(write: WriteFile, text: str, message: str) -> None:
    with pytest.raises(PolicyParseError, match=message):
        load_policy(write("p.json", text))


@pytest.mark.parametrize(
    "text",
    [
        "schema_version: 1\nexecution: {cache_dir: 2024-02-30}\n",  # impossible date
        "schema_version: 1\n? [a, b]\n: 1\n",  # unhashable key
        "schema_version: 1\nexecution: {num_threads: " + "9" * 5000 + "}\n",  # digit limit
    ],
)
def test_yaml_constructor_failures_are_parse_errors(write: WriteFile, text: str) -> None:
    with pytest.raises(PolicyParseError, match="malformed YAML"):
        load_policy(write("p.yaml", text))


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("p.json", '{"schema_version": 1, "execution": {"cache_dir": "\\ud800"}}'),
        ("p.yaml", 'schema_version: 1\nexecution: {input_shapes: {"\\ud800": [1]}}'),
        ("p.yaml", 'schema_version: 1\nkernel: {ops: {matmul: {kernel: "\\udc00x"}}}'),
    ],
)
def test_surrogate_escapes(write: WriteFile, name: str, text: str) -> None:
    with pytest.raises(PolicyValidationError) as caught:
        load_policy(write(name, text))
    str(caught.value).encode("utf-8")  # the message itself is printable


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("p.json", "[" * 100_000),
        ("p.yaml", "x: " + "[" * 100_000),
        ("p.toml", "x = " + "[" * 100_000),
    ],
)
def test_deep_nesting_is_a_parse_error_not_a_crash(write: WriteFile, name: str, text: str) -> None:
    with pytest.raises(PolicyParseError, match="malformed"):
        load_policy(write(name, text))


def test_deep_nesting_in_data() -> None:
    nested: list[object] = []
    for _ in range(100_000):
        nested = [nested]
    with pytest.raises(
        PolicyValidationError, match=r"execution.cache_dir: .*found \[\[\[\[\.\.\.\]\]\]\]"
    ):
        PolicyDocument.from_dict({"schema_version": 1, "execution": {"cache_dir": nested}})
    with pytest.raises(PolicyValidationError, match="execution: maximum recursion depth"):
        ExecutionPolicy(engine_options={"tensorrt": {"x": nested}})


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_bytes(b"schema_version: 1\nexecution: {cache_dir: caf\xe9}\n")
    with pytest.raises(PolicyParseError, match=r"p.yaml:2:27: not UTF-8 text"):
        load_policy(path)


# -- well-formed but invalid --------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "error", "message"),
    [
        ("[1, 2]", PolicyValidationError, "a policy document is a mapping"),
        ("", PolicyValidationError, "got NoneType None"),
        ("kernel: {}", PolicyValidationError, "missing schema_version; add `schema_version: 1`"),
        (
            "schema_version: 2",
            SchemaVersionError,
            "schema_version: schema_version 2 is not readable here .*upgrade xpuruntime-policies",
        ),
        ("schema_version: 0", SchemaVersionError, "rewrite the file for this version"),
        (
            "schema_version: '1'",
            PolicyValidationError,
            r"schema_version: Expected `int`, got `str` \(found '1'\)",
        ),
        (
            "schema_version: 1\nkernels: {}",
            UnknownFieldError,
            r"unknown setting 'kernels'\. Valid choices: \$schema, execution, kernel, schema_version\."
            r" Did you mean 'kernel'\?",
        ),
        (
            "schema_version: 1\nexecution: {precison: fp16}",
            UnknownFieldError,
            r"execution: unknown setting 'precison'\. .*Did you mean 'precision'\?",
        ),
        (
            "schema_version: 1\nexecution: {memory: {limit: 5}}",
            UnknownFieldError,
            r"execution.memory: unknown setting 'limit'\. Valid choices: limit_bytes, pool\.",
        ),
        (
            "schema_version: 1\nexecution: {kernel_policy: {}}",
            UnknownFieldError,
            r"unknown setting 'kernel_policy'",
        ),
        (
            "schema_version: 1\nkernel: {ops: {matmull: cublas}}",
            UnknownOpError,
            r"kernel.ops.matmull: unknown op 'matmull'",
        ),
        (
            "schema_version: 1\nkernel: {ops: {matmul: cublaslt}}",
            UnknownKernelError,
            r"kernel.ops.matmul: unknown kernel 'cublaslt' .*Did you mean 'cublasLt'\?",
        ),
        (
            "schema_version: 1\nkernel: {ops: {matmul: 5}}",
            PolicyValidationError,
            r"kernel.ops.matmul: Expected `str \| object`, got `int` \(found 5\)",
        ),
        (
            "schema_version: 1\nkernel: {ops: {conv: {kernel: cudnn, mode: auto}}}",
            PolicyValidationError,
            r"kernel.ops.conv: mode 'auto' takes no kernel",
        ),
        (
            "schema_version: 1\nkernel: {ops: {conv: {kernel: cudnn, mode: always}}}",
            PolicyValidationError,
            r"kernel.ops.conv.mode: 'always' is not allowed",
        ),
        (
            "schema_version: 1\nkernel: {strategy: fastest}",
            PolicyValidationError,
            r"kernel.strategy: 'fastest' is not allowed\. Valid choices: best_performance,"
            r" first_supported\.",
        ),
        (
            "schema_version: 1\nexecution: {engines: tensorrt}",
            PolicyValidationError,
            r"execution.engines: Expected `array`, got `str` \(found 'tensorrt'\)",
        ),
        (
            "schema_version: 1\nexecution: {engines: [tensorrt, onnx]}",
            UnknownEngineError,
            r"execution.engines\[1\]: unknown engine 'onnx'\. .* Did you mean 'onnxruntime'\?",
        ),
        (
            "schema_version: 1\nexecution: {cache_dir: 2024-01-01}",
            PolicyValidationError,
            r"execution.cache_dir: Expected `str \| null`, got `date`",
        ),
        (
            "schema_version: 1\nexecution: {static_shape: yes, device: cpu, cuda_graphs: on}",
            PolicyConflictError,
            r"cuda_graphs=True needs a CUDA device",
        ),
    ],
)
def test_invalid_documents(
    write: WriteFile, text: str, error: type[PolicyError], message: str
) -> None:
    path = write("p.yaml", text)
    with pytest.raises(error, match=message) as caught:
        load_policy(path)
    assert str(caught.value).startswith(f"{path}: ")
    assert type(caught.value) is error  # exactly one class per kind of mistake


def test_file_errors(tmp_path: Path) -> None:
    with pytest.raises(PolicyFileError, match="no such policy file"):
        load_policy(tmp_path / "missing.json")
    with pytest.raises(PolicyFileError, match="cannot read"):
        load_policy(_directory(tmp_path))
    with pytest.raises(PolicyFileError, match=r"cannot tell the format from suffix '\.ini'"):
        load_policy(tmp_path / "policy.ini")
    with pytest.raises(PolicyFileError, match=r"unknown format 'yml'\..* Did you mean 'yaml'"):
        load_policy(tmp_path / "policy.ini", format="yml")  # type: ignore[arg-type]
    with pytest.raises(PolicyError, match="cannot write"):
        DOCUMENT.save(tmp_path / "no-such-dir" / "p.json")


def _directory(tmp_path: Path) -> Path:
    folder = tmp_path / "folder.json"
    folder.mkdir()
    return folder


def test_errors_pickle() -> None:
    errors: list[PolicyError] = [
        PolicyParseError("bad", source="p.json", line=1, column=2),
        UnknownOpError("unknown op", location="kernel.ops.x", source="p.yaml"),
    ]
    for error in errors:
        assert str(pickle.loads(pickle.dumps(error))) == str(error)


def test_document_identity() -> None:
    same = PolicyDocument(kernel=KERNELS.copy(), execution=EXECUTION.replace())
    assert same == DOCUMENT
    assert hash(same) == hash(DOCUMENT)
    with pytest.raises(UnknownFieldError, match="Did you mean 'kernel'"):
        PolicyDocument(kernal=KERNELS)  # type: ignore[call-arg]
    with pytest.raises(PolicyValidationError, match="expected a KernelPolicy, got dict"):
        PolicyDocument(kernel={"matmul": "cublas"})  # type: ignore[arg-type]


def test_execution_kernel_policy_moves_into_the_kernel_section() -> None:
    attached = PolicyDocument(execution=EXECUTION.replace(kernel_policy=KERNELS))
    assert attached == DOCUMENT
    assert attached.execution is not None
    assert attached.execution.kernel_policy is None
    with pytest.raises(PolicyConflictError, match="give the kernel policy once"):
        PolicyDocument(kernel=KernelPolicy(), execution=EXECUTION.replace(kernel_policy=KERNELS))
