"""Developer and CI sessions for the xpuruntime workspace.

`nox` (no arguments) runs every session marked ``default=True``: that is exactly what CI
runs (`.ci/run`). The native core is compiled once, by the `build` session, into `dist/`;
every test session installs those wheels instead of building again (compiling CUDA code on
a 2-core CI machine is the slowest step we have). Sessions tagged ``gpu`` need an NVIDIA
GPU and are not default.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import zipfile
from pathlib import Path

import nox
import tomllib

nox.needs_version = ">=2024.10.9"
nox.options.default_venv_backend = "uv"
nox.options.reuse_existing_virtualenvs = False
nox.options.error_on_external_run = True

ROOT = Path(__file__).parent
DIST = ROOT / "dist"
PYTHON = os.environ.get("XPURUNTIME_NOX_PYTHON", "3.11")
# uv as a module of the interpreter running nox: works whether or not `uv` is on PATH.
UV = (sys.executable, "-m", "uv")

MEMBERS = {
    "policies": "xpuruntime-policies",
    "core": "xpuruntime-core",
    "inference": "xpuruntime-inference",
    "npu": "xpuruntime-npu",
    "torch": "xpuruntime-torch",
    "xpuruntime": "xpuruntime",
}
PURE_PYTHON = ["policies", "inference", "npu", "torch", "xpuruntime"]
TORCH_CPU = "torch==2.13.0"
TEST_DEPS = ["pytest>=8.3", "hypothesis>=6.100", "onnx>=1.16", "numpy>=1.24", "jsonschema>=4"]


def _pyproject(dist: str) -> dict:
    return tomllib.loads((ROOT / "packages" / dist / "pyproject.toml").read_text())


def _version(dist: str) -> str:
    return str(_pyproject(dist)["project"]["version"])


def _wheel(dist: str) -> Path:
    """The wheel of ``dist`` built by the `build` session (exactly one must exist)."""
    stem = dist.replace("-", "_")
    found = sorted(DIST.glob(f"{stem}-{_version(dist)}-*.whl"))
    if len(found) != 1:
        raise RuntimeError(
            f"expected one wheel of {dist} {_version(dist)} in {DIST}, found {found}: "
            "run `nox -s build` first"
        )
    return found[0]


def _ensure_wheels(session: nox.Session) -> None:
    """Build the wheels once per checkout; later sessions reuse them."""
    try:
        for dist in MEMBERS.values():
            _wheel(dist)
    except RuntimeError:
        session.log("wheels missing in dist/: building them now")
        _build_all(session)


def _torch_find_links() -> list[str]:
    """Where uv finds a CPU build of torch: PIP_FIND_LINKS where the machine provides one
    (these machines keep a torch wheel on disk), else PyTorch's CPU index, which uv ranks
    above PyPI so the multi-GB CUDA build is never pulled in by accident."""
    links = os.environ.get("PIP_FIND_LINKS", "").split()
    if links:
        return [arg for link in links for arg in ("--find-links", link)]
    return ["--extra-index-url", "https://download.pytorch.org/whl/cpu"]


def _install_wheels(session: nox.Session, *specs: str) -> None:
    """Install member wheels from dist/ (``"inference[cpu]"`` style specs) plus test deps."""
    _ensure_wheels(session)
    requirements = []
    for spec in specs:
        key, _, extra = spec.partition("[")
        wheel = str(_wheel(MEMBERS[key]))
        requirements.append(f"{wheel}[{extra}" if extra else wheel)
    # Members resolve each other from dist/ (they are not on any index).
    torch_source = _torch_find_links() if any(s.startswith("torch") for s in specs) else []
    session.install("--find-links", str(DIST), *torch_source, *requirements, *TEST_DEPS)


def _pytest(session: nox.Session, *paths: str) -> None:
    session.run(
        "pytest",
        *paths,
        "-m",
        "not gpu and not tensorrt",
        *session.posargs,
        env={"XPURUNTIME_DIST": str(DIST)},
    )


def _build_all(session: nox.Session) -> None:
    shutil.rmtree(DIST, ignore_errors=True)
    session.run_install(
        *UV, "build", "--all-packages", "--wheel", "--out-dir", str(DIST), external=True
    )


@nox.session(python=PYTHON, default=True)
def lint(session: nox.Session) -> None:
    """ruff lint and format check over the whole workspace."""
    session.install("ruff>=0.14,<0.15")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session(python=PYTHON, default=True)
def typecheck(session: nox.Session) -> None:
    """mypy --strict on the pure-Python distributions."""
    # The backends' own type information matters for strict checking of the engines and the
    # PyTorch extension, so they are installed here (CPU builds).
    session.install(*_torch_find_links(), TORCH_CPU)
    session.install(
        "mypy>=1.11", "types-PyYAML", "msgspec", "click", "rich", "numpy", "PyYAML", "tomli-w",
        "onnx", "onnxruntime-qnn", "openvino", "nncf", "onnxscript",
    )  # fmt: skip
    paths = [f"packages/{MEMBERS[m]}/src" for m in PURE_PYTHON]
    paths.append("packages/xpuruntime-core/src/xpuruntime/runtime")
    env = {"MYPYPATH": os.pathsep.join(f"packages/{d}/src" for d in MEMBERS.values())}
    session.run("mypy", "--strict", *paths, env=env)


@nox.session(python=PYTHON, default=True)
def build(session: nox.Session) -> None:
    """Build all six wheels into dist/ and check their metadata."""
    _build_all(session)
    _check_distributions(session)


def _check_distributions(session: nox.Session) -> None:
    wheels = {dist: _wheel(dist) for dist in MEMBERS.values()}
    meta = _wheel_metadata(wheels["xpuruntime"])
    requires = meta.get_all("Requires-Dist") or []
    for key in ("policies", "core", "inference", "npu"):
        dist = MEMBERS[key]
        pin = f"{dist}=={_version(dist)}"
        if not any(r.replace(" ", "").startswith(pin) for r in requires):
            session.error(f"meta-package does not pin {pin}; it requires {requires}")
    extras = set(meta.get_all("Provides-Extra") or [])
    expected = {"cpu", "cuda", "tensorrt", "openvino", "qnn", "torch", "all"}
    if not expected <= extras:
        session.error(f"meta-package extras {sorted(extras)} miss {sorted(expected - extras)}")
    with zipfile.ZipFile(wheels["xpuruntime-core"]) as zf:
        native = [n for n in zf.namelist() if re.search(r"runtime/_core\..*(so|pyd)$", n)]
    if not native:
        session.error("the xpuruntime-core wheel holds no compiled xpuruntime/runtime/_core module")
    for dist, wheel in wheels.items():
        with zipfile.ZipFile(wheel) as zf:
            if dist != "xpuruntime" and "xpuruntime/__init__.py" in zf.namelist():
                session.error(f"{dist} ships xpuruntime/__init__.py; only the meta-package may")
    session.log(
        json.dumps({"wheels": [w.name for w in wheels.values()], "native": native}, indent=1)
    )


def _wheel_metadata(wheel: Path):  # -> email.message.Message
    from email.parser import Parser

    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        return Parser().parsestr(zf.read(name).decode())


@nox.session(python=False, default=True)
def pins(session: nox.Session) -> None:
    """The meta-package pins exactly the members' current versions (and ranges admit them)."""
    meta = _pyproject("xpuruntime")["project"]
    pinned = [
        *meta["dependencies"],
        *(r for rs in meta["optional-dependencies"].values() for r in rs),
    ]
    problems = []
    for req in pinned:
        m = re.match(r"^([A-Za-z0-9_.-]+)(\[[^\]]*\])?==([^;\s]+)", req)
        if not m or not m.group(1).startswith("xpuruntime"):
            continue
        name, pinned_version = m.group(1), m.group(3)
        if _version(name) != pinned_version:
            problems.append(f"{req}: member {name} is at {_version(name)}")
    if problems:
        session.error("meta-package pins drifted from member versions:\n  " + "\n  ".join(problems))
    session.log(f"{len(pinned)} meta-package requirements agree with the member versions")


# Each member's own suite, in the environment that member needs on a CPU machine.
TEST_ENVIRONMENTS = {
    "policies": ["policies"],
    "core": ["policies", "core"],
    "inference": ["policies", "core", "inference[cpu]"],
    # No backend: the npu suite's missing-package paths; backends-openvino/-qnn run the rest.
    "npu": ["policies", "core", "inference[cpu]", "npu"],
    "torch": ["policies", "core", "torch"],
    "xpuruntime": ["policies", "core", "inference", "npu", "xpuruntime"],
}


@nox.session(python=PYTHON, default=True)
@nox.parametrize("member", list(TEST_ENVIRONMENTS))
def tests(session: nox.Session, member: str) -> None:
    """Run one member's test suite against the built wheels."""
    if member == "torch":
        session.install(*_torch_find_links(), TORCH_CPU)
    _install_wheels(session, *TEST_ENVIRONMENTS[member])
    if member in ("policies", "xpuruntime"):
        session.install("uv")  # their packaging tests make clean venvs with uv
    _pytest(session, f"packages/{MEMBERS[member]}/tests")


# Backend matrix: the meta-package installed with that backend's extra, the backend's
# conformance tests, then the suites of the members that drive that backend.
BACKENDS: dict[str, dict[str, list[str]]] = {
    "cpu": {"install": ["xpuruntime[cpu]"], "suites": []},
    "openvino": {"install": ["xpuruntime[cpu,openvino]"], "suites": ["npu"]},  # [openvino] has nncf
    "qnn": {"install": ["xpuruntime[qnn]"], "suites": ["npu"]},
    "torch-cpu": {"install": ["xpuruntime[cpu]", "torch[export]"], "suites": []},
    "cuda": {"install": ["xpuruntime[cuda]", "torch"], "suites": ["core", "inference", "torch"]},
    "tensorrt": {"install": ["xpuruntime[tensorrt]"], "suites": ["inference"]},
}
GPU_BACKENDS = {"cuda", "tensorrt"}


def _backend_session(session: nox.Session, backend: str) -> None:
    spec = BACKENDS[backend]
    if backend == "torch-cpu":
        session.install(*_torch_find_links(), TORCH_CPU)
    _install_wheels(session, "policies", "core", "inference", "npu", *spec["install"])
    suites = [f"packages/{MEMBERS[s]}/tests" for s in spec["suites"]]
    marker = "gpu or tensorrt" if backend in GPU_BACKENDS else "not gpu and not tensorrt"
    session.run(
        "pytest",
        "packages/xpuruntime/tests/backends",
        *suites,
        "-m",
        marker,
        *session.posargs,
        env={"XPURUNTIME_BACKEND": backend, "XPURUNTIME_DIST": str(DIST)},
    )


@nox.session(python=PYTHON, default=True)
@nox.parametrize("backend", [b for b in BACKENDS if b not in GPU_BACKENDS])
def backends(session: nox.Session, backend: str) -> None:
    """The CPU backend matrix: cpu, openvino, qnn, torch-cpu."""
    _backend_session(session, backend)


@nox.session(python=PYTHON, default=False, tags=["gpu"])
@nox.parametrize("backend", sorted(GPU_BACKENDS))
def gpu_backends(session: nox.Session, backend: str) -> None:
    """The GPU backend matrix (cuda, tensorrt): needs an NVIDIA GPU, never run by CI here."""
    _backend_session(session, backend)


@nox.session(python=PYTHON, default=True)
def native(session: nox.Session) -> None:
    """Configure, build and run the C++ unit tests of native/ with CMake and ctest."""
    session.install("cmake>=3.25", "ninja")
    build_dir = ROOT / "build" / "native-tests"
    cuda = os.environ.get("XPURUNTIME_CUDA", "OFF")  # CI has no GPU: test the CPU build
    session.run(
        "cmake", "-S", "native", "-B", str(build_dir), "-G", "Ninja",
        f"-DXPURUNTIME_CUDA={cuda}", "-DXPURUNTIME_BUILD_TESTS=ON", "-DCMAKE_BUILD_TYPE=Release",
    )  # fmt: skip
    session.run("cmake", "--build", str(build_dir), "--parallel")
    session.run("ctest", "--test-dir", str(build_dir), "--output-on-failure")


@nox.session(python=PYTHON, default=True)
def docs(session: nox.Session) -> None:
    """Build the documentation site (mkdocs, API reference from docstrings) with --strict."""
    session.install("mkdocs>=1.6", "mkdocs-material>=9.5", "mkdocstrings[python]>=0.26")
    session.run(
        "mkdocs", "build", "--strict", "--site-dir", str(ROOT / "site"),
        env={"NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit("run `nox` (or `uvx nox`) instead")
