"""The HTML report in a real browser: headless Chromium (Debian's ``chromium`` package),
offline, after its JavaScript ran. Run by ``nox -s browser``; skipped where no Chromium is
installed unless ``XPURUNTIME_BROWSER=required``."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

pytest.importorskip("bokeh", reason="the report needs Bokeh: pip install 'xpuruntime[report]'")

from xpuruntime.inference import InferenceSession
from xpuruntime.inference.visual.html_report import ReportData, render_report

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
if CHROMIUM is None:
    if os.environ.get("XPURUNTIME_BROWSER") == "required":
        raise RuntimeError("XPURUNTIME_BROWSER=required but no chromium: apt-get install chromium")
    pytest.skip("no Chromium: apt-get install chromium", allow_module_level=True)

FALLBACK_REASON = "no CUDA kernel for Neg(double)"


def _chromium(page: Path, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(CHROMIUM),
            "--headless",
            "--no-sandbox",  # tests run as root in containers
            "--disable-gpu",
            f"--user-data-dir={profile}",
            # Offline: any host name fails to resolve, so a fetch could not succeed.
            "--host-resolver-rules=MAP * ~NOTFOUND",
            # Let the page's timers run (Bokeh draws after load; the check polls).
            "--virtual-time-budget=15000",
            *args,
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("browser")
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Neg", ["r"], ["y"], name="neg"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = folder / "m.onnx"
    path.write_bytes(model.SerializeToString())
    with InferenceSession(path, engine="onnxruntime", device="cpu") as sess:
        for _ in range(50):
            sess.run({"x": np.ones((1, 8), np.float32)})
        record = sess.record()
    record.fallback(
        what="node neg",
        requested="CUDAExecutionProvider",
        chosen="CPUExecutionProvider",
        reason=FALLBACK_REASON,
        mode="allow",
    )
    page = folder / "report.html"
    page.write_text(render_report(ReportData(record, origin="browser test")))
    return page


def test_chromium_shows_the_summary_the_fallback_and_drawn_plots(
    report: Path, tmp_path: Path
) -> None:
    dom = _chromium(report, tmp_path / "profile", "--dump-dom").stdout
    assert 'data-plots-expected="2"' in dom
    # Set by the page's script once each plot's canvas holds pixels: the JavaScript ran
    # and Bokeh drew, offline.
    assert 'data-plots-drawn="2"' in dom
    assert "<h2>Summary</h2>" in dom
    assert "onnxruntime" in dom
    fallbacks = dom[dom.index('<section id="fallbacks">') :]
    fallbacks = fallbacks[: fallbacks.index("</section>")]
    assert "node neg" in fallbacks
    assert FALLBACK_REASON in fallbacks


def test_chromium_screenshot_is_not_blank(report: Path, tmp_path: Path) -> None:
    from PIL import Image  # Bokeh's dependency

    shot = tmp_path / "report.png"
    _chromium(report, tmp_path / "profile", "--window-size=1200,1600", f"--screenshot={shot}")
    with Image.open(shot) as image:
        colours = image.convert("RGB").getcolors(maxcolors=1 << 20)
    # Text, tables and two coloured plots: far more than a blank page's one colour.
    assert colours is not None
    assert len(colours) > 50
