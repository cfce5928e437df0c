"""JSON Schema export: describes exactly the file format, narrowed by the vocabulary."""

from __future__ import annotations

import re

import msgspec

from xpuruntime.policies import ExecutionPolicy, json_schema, vocabulary
from xpuruntime.policies.execution_policy import SECTION_FIELDS


def test_schema_shape() -> None:
    schema = json_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$ref"] == "#/$defs/PolicyFile"
    document = schema["$defs"]["PolicyFile"]
    assert document["required"] == ["schema_version"]
    assert document["properties"]["schema_version"] == {"enum": [1]}
    assert document["additionalProperties"] is False
    msgspec.json.encode(schema)  # plain JSON all the way down


def test_execution_settings_are_all_described() -> None:
    execution = json_schema()["$defs"]["ExecutionSection"]
    assert set(execution["properties"]) == set(SECTION_FIELDS)
    assert "kernel_policy" not in execution["properties"]
    assert execution["additionalProperties"] is False
    for name, prop in execution["properties"].items():
        assert prop.get("description"), f"{name} has no description for editors"
    assert execution["properties"]["precision"]["default"] == ExecutionPolicy().precision


def test_device_pattern_matches_the_checker() -> None:
    pattern = re.compile(
        json_schema()["$defs"]["ExecutionSection"]["properties"]["device"]["pattern"]
    )
    for device in ("auto", "cpu", "cuda", "cuda:3", "npu", "npu:0"):
        assert pattern.match(device)
        ExecutionPolicy(device=device)
    for device in ("gpu", "cuda:", "cpu:x", "CUDA"):
        assert not pattern.match(device)


def test_ops_list_their_kernels() -> None:
    ops = json_schema()["$defs"]["KernelSection"]["properties"]["ops"]
    assert set(ops["properties"]) == set(vocabulary.known_ops())
    assert ops["additionalProperties"] is False
    matmul = ops["properties"]["matmul"]["anyOf"]
    assert matmul[0]["enum"] == ["cublas", "cublasLt", "cpu", "torch", "aten", "auto"]
    assert matmul[1] == {"$ref": "#/$defs/OpPolicy"}
