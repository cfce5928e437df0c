"""The distributions as users install them: real wheels into clean virtual environments.

The wheels come from the `build` nox session (``XPURUNTIME_DIST``); each test makes its own
venv with uv and checks one installation case of DESIGN.md §2.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
HEAVY = ("torch", "onnxruntime", "openvino", "tensorrt")
TORCH_MESSAGE = "xpuruntime.pytorch requires PyTorch. Install with: pip install xpuruntime[torch]"


def _dist_dir() -> Path:
    dist = Path(os.environ.get("XPURUNTIME_DIST", ROOT / "dist"))
    if not any(dist.glob("xpuruntime_core-*.whl")):
        pytest.skip(f"no built wheels in {dist}: run `nox -s build` (or nox -s tests) first")
    return dist


def _wheel(name: str) -> str:
    (wheel,) = _dist_dir().glob(f"{name.replace('-', '_')}-*.whl")
    return str(wheel)


def _uv(*args: str, cwd: Path | None = None) -> None:
    subprocess.run([sys.executable, "-m", "uv", *args], check=True, cwd=cwd)


def _venv(tmp_path: Path, *requirements: str, no_deps: tuple[str, ...] = ()) -> Path:
    venv = tmp_path / "venv"
    _uv("venv", "--quiet", "--python", sys.executable, str(venv))
    python = venv / "bin" / "python"
    _uv("pip", "install", "--quiet", "--python", str(python),
        "--find-links", str(_dist_dir()), *requirements)  # fmt: skip
    if no_deps:
        _uv("pip", "install", "--quiet", "--no-deps", "--python", str(python), *no_deps)
    return python


def _run(python: Path, code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(python), "-c", textwrap.dedent(code)], capture_output=True, text=True, check=False
    )


def test_policies_wheel_alone_is_light_and_works(tmp_path: Path) -> None:
    python = _venv(tmp_path, _wheel("xpuruntime-policies"))
    result = _run(
        python,
        """
        import importlib.util, sys
        from xpuruntime.policies import KernelPolicy
        p = KernelPolicy(matmul="cublasLt", attention="flash_v2")
        assert p.get("matmul") == "cublasLt", p
        for name in ("numpy", "torch", "onnxruntime", "openvino", "xpuruntime.runtime"):
            assert importlib.util.find_spec(name) is None, f"{name} got installed"
        print("ok", repr(p))
        """,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ok KernelPolicy(")


def test_facade_imports_no_heavy_backend(tmp_path: Path) -> None:
    python = _venv(
        tmp_path,
        _wheel("xpuruntime"),
        _wheel("xpuruntime-policies"),
        _wheel("xpuruntime-core"),
        _wheel("xpuruntime-inference") + "[cpu]",
        _wheel("xpuruntime-npu"),
    )
    result = _run(
        python,
        f"""
        import sys
        import xpuruntime as xrt
        policy = xrt.KernelPolicy(matmul="cublasLt")
        xrt.ExecutionPolicy(precision="fp16")
        assert xrt.InferenceSession.__module__.startswith("xpuruntime.inference")
        loaded = [m for m in {HEAVY!r} if m in sys.modules]
        assert not loaded, f"import xpuruntime imported {{loaded}}"
        try:
            import xpuruntime.pytorch
        except ImportError as exc:
            assert str(exc) == {TORCH_MESSAGE!r}, str(exc)
        else:
            raise AssertionError("xpuruntime.pytorch imported without xpuruntime-torch")
        print("ok")
        """,
    )
    assert result.returncode == 0, result.stderr + result.stdout
    assert result.stdout.strip() == "ok"


def test_torch_member_without_torch_gives_install_hint(tmp_path: Path) -> None:
    # xpuruntime-torch present but torch absent (installed --no-deps): the exact message.
    python = _venv(
        tmp_path,
        _wheel("xpuruntime"),
        _wheel("xpuruntime-policies"),
        _wheel("xpuruntime-core"),
        _wheel("xpuruntime-inference"),
        _wheel("xpuruntime-npu"),
        no_deps=(_wheel("xpuruntime-torch"),),
    )
    for statement in ("import xpuruntime.pytorch", "import xpuruntime as x; x.pytorch"):
        result = _run(python, statement)
        assert result.returncode != 0
        assert f"ImportError: {TORCH_MESSAGE}" in result.stderr, result.stderr


def test_abi_mismatch_names_both_versions(tmp_path: Path) -> None:
    python = _venv(tmp_path, _wheel("xpuruntime-policies"), _wheel("xpuruntime-core"))
    result = _run(
        python,
        """
        from xpuruntime.runtime.abi import core_abi_version, require_abi
        provided = core_abi_version()
        require_abi(provided, "probe")
        try:
            require_abi(provided + 1, "xpuruntime-probe 9.9")
        except ImportError as exc:
            print(exc)
        """,
    )
    assert result.returncode == 0, result.stderr
    message = result.stdout
    assert "xpuruntime-probe 9.9 needs xpuruntime-core ABI" in message
    assert "provides ABI" in message


def test_namespace_across_editable_members(tmp_path: Path) -> None:
    # The workspace layout: each member's src/ on its own sys.path entry, the meta-package
    # holding the only __init__.py. extend_path must still find the members' subpackages.
    python = _venv(tmp_path, "msgspec", "PyYAML", "tomli-w", "click")
    _uv("pip", "install", "--quiet", "--no-deps", "--python", str(python),
        "-e", str(ROOT / "packages" / "xpuruntime-policies"),
        "-e", str(ROOT / "packages" / "xpuruntime"))  # fmt: skip
    result = _run(
        python,
        """
        import xpuruntime
        from xpuruntime.policies import KernelPolicy
        assert xpuruntime.KernelPolicy is KernelPolicy
        print(len(xpuruntime.__path__))
        """,
    )
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) >= 2


def test_readme_main_command_in_the_editable_workspace(tmp_path: Path) -> None:
    # The README's main job, `uv run --package xpuruntime --extra cpu xpuruntime demo`, in the
    # uv workspace itself (members editable, the native core built into the environment).
    env = {**os.environ, "UV_PROJECT_ENVIRONMENT": str(tmp_path / "workspace-venv")}
    env.pop("VIRTUAL_ENV", None)
    result = subprocess.run(
        [sys.executable, "-m", "uv", "run", "--locked", "--quiet", "--package", "xpuruntime",
         "--extra", "cpu", "xpuruntime", "demo"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    assert "CPUExecutionProvider" in result.stdout


def test_core_wheel_is_a_repaired_manylinux_wheel(tmp_path: Path) -> None:
    # A package index accepts only manylinux wheels: `nox -s build` repairs the core wheel
    # with auditwheel (manylinux_2_34 on these Debian 12 machines); the release job builds in
    # cibuildwheel's manylinux_2_28 image. A wheel built some other way is skipped.
    import re
    import shutil
    import zipfile

    wheel = Path(_wheel("xpuruntime-core"))
    tags = wheel.stem.split("-")[-1].split(".")
    if not any(tag.startswith("manylinux") for tag in tags):
        pytest.skip(f"{wheel.name} is not repaired (auditwheel repair / cibuildwheel makes it)")
    for tag in tags:  # the release's image makes manylinux_2_28; a local repair may differ
        assert re.fullmatch(r"manylinux_\d+_\d+_x86_64|manylinux(2014|2010|1)_x86_64", tag), (
            f"{wheel.name}: platform tag {tag} is not a manylinux tag"
        )
    with zipfile.ZipFile(wheel) as zf:
        wheel_file = next(n for n in zf.namelist() if n.endswith(".dist-info/WHEEL"))
        declared = {
            line.split(": ", 1)[1]
            for line in zf.read(wheel_file).decode().splitlines()
            if line.startswith("Tag: ")
        }
        assert all(t.split("-")[-1] in tags for t in declared), declared
        (native,) = [n for n in zf.namelist() if re.search(r"runtime/_core\..*so$", n)]
        zf.extract(native, tmp_path)
    readelf = shutil.which("readelf")
    if readelf is None:
        return
    needed = subprocess.run(
        [readelf, "-d", str(tmp_path / native)], capture_output=True, text=True, check=True
    ).stdout
    for library in ("libcuda.so", "libcudart.so", "libcublas"):
        assert library not in needed, f"the core must open {library} at run time, not link it"
