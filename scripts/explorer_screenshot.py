"""A screenshot of Model Explorer showing a model with xpuruntime's node-data overlays, for the
docs (docs/visualize.md): Model Explorer served on loopback, drawn by headless Chromium
(Debian's ``chromium``; software WebGL), no network.

    python scripts/explorer_screenshot.py MODEL.onnx OVERLAY.json [OVERLAY.json ...] -o shot.png

Needs the ``explore`` extra (``ai-edge-model-explorer`` and ``model-explorer-onnx``). The
overlays come from ``xpuruntime explore MODEL --node-data-out DIR`` (on the GPU machine for a
CUDA record: scripts/gpu_phases/explore_cuda.sh).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path
from typing import Any

SERVE = """
import sys
import model_explorer, model_explorer_onnx
config = model_explorer.config().add_model_from_path(sys.argv[1])
for path in sys.argv[3:]:
    config = config.add_node_data_from_path(path)
model_explorer.visualize_from_config(config, host="127.0.0.1", port=int(sys.argv[2]),
    extensions=["model_explorer_onnx"], no_open_in_browser=True)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Chromium:
    """Headless Chromium driven over the DevTools protocol on a pipe (--remote-debugging-pipe:
    it reads commands on fd 3 and writes replies on fd 4, each a JSON text ending in NUL)."""

    def __init__(self, size: str, profile: str) -> None:
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()

        def plumb() -> None:
            # Through copies: os.pipe's descriptors close on exec, and dup2 onto the same
            # number (a pipe end that already is fd 3) would keep that flag.
            reads, writes = os.dup(to_chrome_r), os.dup(from_chrome_w)
            os.dup2(reads, 3)
            os.dup2(writes, 4)

        self._process = subprocess.Popen(
            [
                "chromium",
                "--headless=new",
                "--no-sandbox",
                "--remote-debugging-pipe",
                "--enable-unsafe-swiftshader",
                "--use-angle=swiftshader",
                f"--user-data-dir={profile}",
                f"--window-size={size}",
                "about:blank",
            ],
            preexec_fn=plumb,  # only dup2 runs between fork and exec
            close_fds=False,  # closing would run after plumb() and take fds 3 and 4 away
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buffer = b""
        self._next_id = 0
        self._session: str | None = None
        page = next(t for t in self.call("Target.getTargets")["targetInfos"] if t["type"] == "page")
        attached = self.call("Target.attachToTarget", targetId=page["targetId"], flatten=True)
        self._session = attached["sessionId"]

    def call(self, method: str, **params: object) -> dict[str, Any]:
        self._next_id += 1
        message: dict[str, object] = {"id": self._next_id, "method": method, "params": params}
        if self._session:
            message["sessionId"] = self._session
        os.write(self._to_chrome, json.dumps(message).encode() + b"\0")
        while True:
            while b"\0" not in self._buffer:
                chunk = os.read(self._from_chrome, 1 << 20)
                if not chunk:
                    raise RuntimeError("Chromium closed its DevTools pipe")
                self._buffer += chunk
            text, self._buffer = self._buffer.split(b"\0", 1)
            reply = json.loads(text)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return dict(reply.get("result", {}))

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result.get("result", {}).get("value")

    def close(self) -> None:
        self._process.terminate()
        self._process.wait(timeout=30)


def _wait_for_url(log: Path, port: int, server: subprocess.Popen[bytes]) -> str | None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and server.poll() is None:
        match = re.search(rf"http://127\.0\.0\.1:{port}/\S+", log.read_text())
        if match:
            return match.group(0)
        time.sleep(0.5)
    return None


def _with_selected_node(url: str, model: Path, node: str, layer: str | None) -> str:
    """The URL with Model Explorer's UI state selecting ``node`` (it centres the view on it)
    with ``layer`` expanded."""
    base, _, query = url.partition("?data=")
    data = json.loads(urllib.parse.unquote(query))
    data["uiState"] = {
        "paneStates": [
            {
                "deepestExpandedGroupNodeIds": [layer] if layer else [],
                "selectedNodeId": node,
                "selectedGraphId": "main_graph",
                "selectedCollectionLabel": model.name,
                "widthFraction": 1,
            }
        ]
    }
    return f"{base}?data={urllib.parse.quote(json.dumps(data))}"


def _draw(browser: _Chromium, url: str, out: Path, wait_s: float, expand_all: bool) -> None:
    """Open the graph, wait until Model Explorer has drawn it, expand every layer, capture."""
    browser.call("Page.navigate", url=url)
    deadline = time.monotonic() + wait_s
    settled = 0  # layout starts after the first frame: ready only once it stays so for 5 s
    while settled < 5:
        if time.monotonic() > deadline:
            raise RuntimeError(f"Model Explorer drew no graph within {wait_s} s")
        ready = browser.evaluate(
            "!!document.querySelector('canvas') && !/Converting|Processing/"
            ".test(document.body.innerText)"
        )
        settled = settled + 1 if ready else 0
        time.sleep(1)
    time.sleep(3)
    if not expand_all:
        shot = browser.call("Page.captureScreenshot", format="png")
        out.write_bytes(base64.b64decode(shot["data"]))
        return
    # The toolbar's "expand all layers" button, found by its tooltip or icon name.
    browser.evaluate(
        "[...document.querySelectorAll('[aria-label],[mattooltip],mat-icon')]"
        ".filter(e => /expand all|unfold_more/i.test((e.getAttribute('aria-label') || '') + "
        "(e.getAttribute('mattooltip') || '') + e.textContent))"
        ".slice(0, 1).forEach(e => (e.closest('button,[role=button],div') || e).click())"
    )
    time.sleep(5)
    shot = browser.call("Page.captureScreenshot", format="png")
    out.write_bytes(base64.b64decode(shot["data"]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("overlays", type=Path, nargs="+")
    parser.add_argument("-o", "--out", type=Path, required=True)
    parser.add_argument(
        "--select", metavar="NODE", help="select this node (centred, its data shown)"
    )
    parser.add_argument("--layer", help="with --select: the layer to expand (main_graph/NAME)")
    parser.add_argument("--expand-all", action="store_true", help="expand every layer")
    parser.add_argument("--size", default="1600,1000", help="window size W,H")
    parser.add_argument("--wait-s", type=float, default=120, help="how long drawing may take")
    args = parser.parse_args()
    port = _free_port()
    paths = [str(p.resolve()) for p in (args.model, *args.overlays)]
    with tempfile.TemporaryDirectory() as scratch:
        log = Path(scratch) / "server.log"
        with log.open("w") as sink:  # a file, not a pipe: the server logs every request
            server = subprocess.Popen(
                [sys.executable, "-u", "-c", SERVE, paths[0], str(port), *paths[1:]],
                stdout=sink,
                stderr=subprocess.STDOUT,
            )
        try:
            url = _wait_for_url(log, port, server)
            if url is None:
                print(f"Model Explorer did not start:\n{log.read_text()}", file=sys.stderr)
                return 1
            if args.select:
                url = _with_selected_node(url, args.model, args.select, args.layer)
            browser = _Chromium(args.size, f"{scratch}/profile")
            try:
                _draw(browser, url, args.out, args.wait_s, args.expand_all)
            finally:
                browser.close()
        finally:
            server.terminate()
            server.wait(timeout=30)
    print(f"screenshot: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
