"""Listings and engines cannot disagree: for every installed engine, the kernel listing
(``xpuruntime-policy kernels`` and the vocabulary) is exactly what that engine's own mapping
accepts, and the built-in declarations the policy pre-check uses match it.

Runs wherever the engines' packages are installed; an engine whose package is missing is
skipped with the reason (``nox -s "backends(backend='torch-cpu')"`` has all of them).
"""

from __future__ import annotations

import importlib.util
import re

import pytest
from click.testing import CliRunner

from xpuruntime.policies import vocabulary
from xpuruntime.policies.cli import policy as policy_cli

DEVICES = ("cpu", "cuda", "npu")
VOCABULARY = [(spec.op, spec.name) for spec in vocabulary.BUILTIN_KERNELS]


def _accepts_torch(op: str, kernel: str, device: str) -> bool:
    from xpuruntime.policies import KernelPolicy
    from xpuruntime.pytorch.mapping import plan

    planned = plan(KernelPolicy(**{op: kernel}), None, frozenset({device}))
    return not planned.unapplicable


def _accepts_onnxruntime(op: str, kernel: str, device: str) -> bool:
    from xpuruntime.inference.engines.ort_kernels import PROVIDER_DEVICES, kernel_support

    return any(
        (found := kernel_support(provider)(op, kernel)) is not None and found.enforced
        for provider, kind in PROVIDER_DEVICES.items()
        if kind == device
    )


def _accepts_tensorrt(op: str, kernel: str, device: str) -> bool:
    # TensorRT can restrict tactic sources but never guarantee a kernel: it enforces none.
    import tensorrt

    from xpuruntime.inference.engines.trt_build import kernel_support

    found = kernel_support(tensorrt)(op, kernel)
    return found is not None and found.enforced


def _accepts_npu(engine: str) -> object:
    def accepts(op: str, kernel: str, device: str) -> bool:
        from xpuruntime.npu.engines.kernels import kernel_support

        found = kernel_support(engine, device)(op, kernel)
        return found is not None and found.enforced

    return accepts


# engine -> (module its mapping needs, the mapping's answer for (op, kernel, device))
MAPPINGS = {
    "torch": ("xpuruntime.pytorch", _accepts_torch),
    "onnxruntime": ("xpuruntime.inference", _accepts_onnxruntime),
    "tensorrt": ("tensorrt", _accepts_tensorrt),
    "openvino": ("xpuruntime.npu", _accepts_npu("openvino")),
    "qnn": ("xpuruntime.npu", _accepts_npu("qnn")),
}


def _installed(engine: str) -> None:
    module, _ = MAPPINGS[engine]
    try:  # xpuruntime's missing members raise with the install hint rather than say None
        found = importlib.util.find_spec(module) is not None
    except ImportError as exc:
        pytest.skip(f"{engine}'s mapping needs {module}: {exc}")
    if not found:
        pytest.skip(f"{engine}'s mapping needs {module}, which is not installed here")


def _listing() -> dict[tuple[str, str], dict[str, set[str]]]:
    """(op, kernel) -> engine -> devices, as `xpuruntime-policy kernels` prints them."""
    result = CliRunner().invoke(policy_cli, ["kernels"])
    assert result.exit_code == 0, result.output
    listed: dict[tuple[str, str], dict[str, set[str]]] = {}
    op = ""
    for line in result.stdout.splitlines():
        if line.endswith(":") and not line.startswith(" "):
            op = line[:-1]
        elif line.startswith("  "):
            kernel = line.split()[0]
            engines = re.search(r"engines=(\S+)", line)
            assert engines is not None, line
            listed[(op, kernel)] = {
                name: set(devices.split(","))
                for name, devices in re.findall(r"(\w+)\*?\(([\w,]+)\)", engines.group(1))
            }
    return listed


@pytest.mark.parametrize("engine", sorted(MAPPINGS))
def test_the_listing_is_what_the_engines_mapping_accepts(engine: str) -> None:
    _installed(engine)
    _, accepts = MAPPINGS[engine]
    table = vocabulary.engine_tables()[engine]
    assert table.published, f"{engine}: {table.source}"
    listed = _listing()
    for op, kernel in VOCABULARY:
        for device in DEVICES:
            mapping = accepts(op, kernel, device)  # type: ignore[operator]
            shown = device in listed[(op, kernel)].get(engine, set())
            assert mapping == table.honours(op, kernel, device) == shown, (
                engine,
                op,
                kernel,
                device,
            )


@pytest.mark.parametrize("engine", sorted(MAPPINGS))
def test_the_built_in_declaration_matches_the_installed_table(engine: str) -> None:
    """The policy pre-check (conflicts) reads the declarations without importing engines."""
    _installed(engine)
    table = vocabulary.engine_tables()[engine]
    published = {(row.op, row.kernel): row.devices for row in table.kernels if row.enforced}
    declared = {(row.op, row.kernel): row.devices for row in vocabulary.declared_kernels(engine)}
    assert published == declared
    assert not vocabulary.table_problems()
