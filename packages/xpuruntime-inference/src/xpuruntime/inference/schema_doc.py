"""Generate ``docs/record-schema.md`` from :func:`record_json_schema` (a test keeps it current).

python -m xpuruntime.inference.schema_doc > docs/record-schema.md
"""

from __future__ import annotations

import json
from typing import Any

from xpuruntime.runtime.record import RECORD_SCHEMA_VERSION, record_json_schema

_INTRO = """\
# Execution record schema

`InferenceSession.record()` (xpuruntime-inference) and the training package's records share
one JSON format: `ExecutionRecord` from `xpuruntime.runtime.record`. `kind` tells an
inference session from a training step. This page is generated from
`xpuruntime.runtime.record.record_json_schema()` by
`python -m xpuruntime.inference.schema_doc > docs/record-schema.md`; a test fails when it
is out of date.

Schema version: **{version}** (`schema_version` in every record). Read a record back with
`ExecutionRecord.from_json(text)`, which validates it.

Compatibility rule: the version is bumped whenever a field is added, removed or changes
meaning. A reader accepts its own version and every older one (fields added since have
defaults) and rejects a newer version or an unknown field with `RecordSchemaError` (an
`XpuRuntimeError`) saying to upgrade: a record is never read half-understood.

How an inference session fills it:

- `engine`, `device`, `precision`: what was requested, what was chosen, and why (for
  `engine="auto"`: the policy's engine order and why earlier engines were skipped).
- `settings`: one entry per policy setting mapped onto an engine option (`applied`), with
  `honoured` false and a `note` when the engine cannot do what the policy asks.
- `nodes`: per graph node its op type, the requested and the chosen execution provider
  (ONNX Runtime's own node-assignment information) or TensorRT layer, kernel/tactic where
  known, and precision where known; `placement` classifies a node off the requested device
  as `host_shape` (shape computation the engine keeps on the host by design) or `fallback`
  (no kernel there), with the `reason`.
- `policy_sources`: which layer (policy file or object, environment variable, argument) set
  each policy setting.
- `decisions`: per kernel-policy entry, the kernel the op resolved to, the mode and why;
  `status` is `decided`, `locked` (replayed from a lockfile) or `fallen_back`.
- `fallbacks`: everything that runs elsewhere than requested, with the fallback mode that
  allowed it (`fallback="error"` raises instead, so an error-mode record has none).
- `runs`: per `run` the latency, host<->device copies (count and bytes per direction),
  synchronisations and whether I/O binding was used (the last 1000 runs are kept).
- `cache`: per content-addressed cache (`onnxruntime-optimized-model`, `tensorrt-engine`)
  the key digest and components, hit or miss, and for a miss which component changed.

## Objects
"""


def _type_of(prop: dict[str, Any]) -> str:
    if "$ref" in prop:
        return f"`{prop['$ref'].rsplit('/', 1)[-1]}`"
    if "anyOf" in prop:
        return " or ".join(_type_of(p) for p in prop["anyOf"])
    if "enum" in prop:
        return " \\| ".join(f"`{json.dumps(v)}`" for v in prop["enum"])
    if prop.get("type") == "array":
        return f"list of {_type_of(prop.get('items', {}))}"
    if "type" in prop:
        return f"`{prop['type']}`"
    return "any"


def _canonical(node: Any) -> Any:
    """The schema with every anyOf in one order (null last): msgspec releases differ in the
    order they emit, and the committed document must not depend on which one is installed."""
    if isinstance(node, dict):
        out = {k: _canonical(v) for k, v in node.items()}
        if isinstance(out.get("anyOf"), list):
            out["anyOf"] = sorted(
                out["anyOf"],
                key=lambda alt: (alt == {"type": "null"}, json.dumps(alt, sort_keys=True)),
            )
        return out
    if isinstance(node, list):
        return [_canonical(v) for v in node]
    return node


def render_schema_doc() -> str:
    schema = _canonical(record_json_schema())
    lines = [_INTRO.format(version=RECORD_SCHEMA_VERSION)]
    for name, definition in sorted(schema.get("$defs", {}).items()):
        required = set(definition.get("required", []))
        lines.append(f"### {name}\n")
        if definition.get("description"):
            lines.append(definition["description"].strip() + "\n")
        lines.append("| field | type | required |")
        lines.append("|---|---|---|")
        for field, prop in definition.get("properties", {}).items():
            lines.append(
                f"| `{field}` | {_type_of(prop)} | {'yes' if field in required else 'no'} |"
            )
        lines.append("")
    lines.append("## JSON Schema (2020-12)\n")
    lines.append("```json")
    lines.append(json.dumps(schema, indent=2, sort_keys=True))
    lines.append("```")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(render_schema_doc(), end="")
