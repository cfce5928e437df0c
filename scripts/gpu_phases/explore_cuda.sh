#!/usr/bin/env bash
# GPU phase: the public models on ONNX Runtime's CUDA execution provider, as `xpuruntime
# explore --node-data-out` and `xpuruntime run --record` write them: the placement overlays
# (host-side shape nodes, fallbacks with their reasons) and the records behind them, for the
# docs' Model Explorer picture (rendered on the CPU machine, docs/visualize.md).
# Needs: the build phase, onnxruntime-gpu (setup from /tmp/parts) and .device/models/.
set -uo pipefail
LOGS=${1:-.}
python3 - "$LOGS" <<'PY'
import json, os, subprocess, sys
from pathlib import Path

import numpy as np

out = Path(sys.argv[1]) / "explore"
catalogue = json.loads(Path("scripts/public_models.json").read_text())["models"]
cli = [sys.executable, "-c", "from xpuruntime.inference.cli import main; main()"]
for name, entry in catalogue.items():
    model = Path(".device/models") / f"{name}.onnx"
    if not model.exists():
        continue
    shapes = ",".join(
        f"{feed}:{'x'.join(map(str, spec['shape'])) or '[]'}"
        for feed, spec in entry["feeds"].items() if spec["shape"]
    )
    common = ["--device", os.environ.get("EXPLORE_DEVICE", "cuda"), "--fallback", "allow"]
    common += ["--input-shapes", shapes] if shapes else []
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    for feed, spec in entry["feeds"].items():  # constants (a sample rate): a file, not noise
        if isinstance(spec["fill"], dict) and "value" in spec["fill"]:
            path = folder / f"{feed}.npy"
            np.save(path, np.full(spec["shape"], spec["fill"]["value"], spec["dtype"]))
            common += ["--input", f"{feed}={path}"]
    for args in (
        ["explore", str(model), *common, "--node-data-out", str(folder / "overlays")],
        ["run", str(model), *common, "--record", str(folder / "record.json")],
    ):
        done = subprocess.run(cli + args, capture_output=True, text=True, timeout=300)
        print(name, args[0], "rc", done.returncode, (done.stderr or done.stdout).strip()[-300:])
    record = folder / "record.json"
    if record.exists():
        placement = json.loads(record.read_text()).get("placement") or {}
        print(name, "placement:", json.dumps(placement)[:400])
PY
tar -C "$LOGS" -czf "$LOGS/explore.tar.gz" explore
