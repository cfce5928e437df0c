"""The execution record as one self-contained HTML file.

Tables (summary with each setting's source, settings, decisions with their lock status,
fallbacks with reasons, nodes) and Bokeh plots (placement counts, the latency distribution
of the record's runs, per-node time, per-layer difference, a training step's kernels). Bokeh's
JavaScript is inlined (``bokeh.resources.INLINE``), styles are inline, no font is fetched:
the file opens offline. Every value shown comes from the record or from the measurements
passed in, each labelled with its source; a section without data says so instead of drawing
an empty plot.

A small script counts the plots that drew pixels and writes the count to ``<body
data-plots-drawn>``, so a headless browser can check that the JavaScript ran.
"""

from __future__ import annotations

import html
import importlib.util
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from xpuruntime.inference.visual.overlays import PLACEMENT_COLOURS, UNKNOWN_COLOUR
from xpuruntime.policies.errors import XpuRuntimeError
from xpuruntime.runtime.record import ExecutionRecord

if TYPE_CHECKING:  # types only: drawing a record file must not import the engines
    from xpuruntime.inference.visual.layer_diff import LayerDifferences
    from xpuruntime.inference.visual.node_times import NodeTimes

#: The marker written into every report (``report -o`` overwrites only files carrying it).
GENERATOR = "xpuruntime report"
#: Per-node time plot: the slowest nodes shown.
TOP_NODES = 30


@dataclass
class ReportData:
    """What a report shows: a record and, where measured, more about the same run."""

    record: ExecutionRecord
    node_times: NodeTimes | None = None
    differences: LayerDifferences | None = None
    #: A training step's kernel events (Chrome trace ``X`` events with ``ts``/``dur``).
    kernel_events: list[dict[str, Any]] = field(default_factory=list)
    #: Where the record came from (a model run here, a bundle, a record file).
    origin: str = ""


def _e(value: Any) -> str:
    return html.escape("—" if value is None or value == "" else str(value))


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]], css: str = "") -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{css}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _setting_value(policy: dict[str, Any], path: str) -> Any:
    node: Any = policy
    for part in path.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


def _summary(data: ReportData) -> str:
    r = data.record
    rows = [
        (what, c.requested, c.chosen, c.reason)
        for what, c in (("engine", r.engine), ("device", r.device), ("precision", r.precision))
        if c is not None
    ]
    facts = [
        ("kind", r.kind),
        ("model", r.model),
        ("created", r.created_at),
        ("policy hash", r.policy_hash),
        ("environment hash", r.environment_hash),
        ("record from", data.origin),
    ]
    parts = [
        '<section id="summary"><h2>Summary</h2>',
        _table(("what", "value"), facts, "facts"),
        _table(("choice", "requested", "chosen", "reason"), rows),
    ]
    if r.policy_sources:
        sources = [
            (path, _setting_value(r.policy, path), source)
            for path, source in sorted(r.policy_sources.items())
        ]
        parts.append("<h3>Policy settings and who set them</h3>")
        parts.append(_table(("setting", "value", "set by"), sources))
    else:
        parts.append("<p>Every policy setting kept its default (no layer set one).</p>")
    if r.settings:
        parts.append("<h3>Settings (policy → engine)</h3>")
        parts.append(
            _table(
                ("setting", "requested", "applied", "honoured", "note"),
                [
                    (s.name, s.requested, s.applied, "yes" if s.honoured else "NO", s.note)
                    for s in r.settings
                ],
            )
        )
    parts.append("</section>")
    return "".join(parts)


def _decisions(record: ExecutionRecord) -> str:
    if not record.decisions:
        return (
            '<section id="decisions"><h2>Kernel decisions</h2><p>The record holds no kernel '
            "decisions (no kernel-policy entry applied to this run).</p></section>"
        )
    counts = Counter(d.status for d in record.decisions)
    status = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    return (
        f'<section id="decisions"><h2>Kernel decisions ({_e(status)})</h2>'
        + _table(
            ("op", "kernel", "mode", "lock status", "reason", "shape", "dtype", "device"),
            [
                (d.op, d.kernel, d.mode, d.status, d.reason, d.shape, d.dtype, d.device)
                for d in record.decisions
            ],
        )
        + "</section>"
    )


def _fallbacks(record: ExecutionRecord) -> str:
    if not record.fallbacks:
        return (
            '<section id="fallbacks"><h2>Fallbacks</h2><p>None: everything ran where the '
            "policy asked.</p></section>"
        )
    return (
        f'<section id="fallbacks"><h2>Fallbacks ({len(record.fallbacks)})</h2>'
        + _table(
            ("what", "requested", "chosen", "mode", "reason"),
            [(f.what, f.requested, f.chosen, f.mode, f.reason) for f in record.fallbacks],
            "fallbacks",
        )
        + "</section>"
    )


def _nodes(record: ExecutionRecord) -> str:
    if not record.nodes:
        return ""
    rows = [
        (
            n.name or "<unnamed>",
            n.op_type,
            n.requested,
            n.chosen,
            n.precision,
            n.placement,
            n.reason,
        )
        for n in record.nodes
    ]
    return (
        f'<section id="nodes"><details><summary>All {len(rows)} nodes</summary>'
        + _table(("node", "op", "requested", "chosen", "precision", "placement", "reason"), rows)
        + "</details></section>"
    )


def _notes(record: ExecutionRecord) -> str:
    items = "".join(f"<li>{_e(n)}</li>" for n in record.notes)
    return f'<section id="notes"><h2>Notes</h2><ul>{items}</ul></section>' if items else ""


class _Plots:
    """Bokeh figures keyed by section id, and the sections' HTML around them."""

    def __init__(self) -> None:
        self.figures: dict[str, Any] = {}
        self.sections: list[tuple[str, str, str]] = []  # (id, title, text)

    def add(self, key: str, title: str, text: str, figure: Any | None) -> None:
        if figure is not None:
            figure.toolbar.logo = None  # a link to bokeh.org: the report links nowhere
            self.figures[key] = figure
        self.sections.append((key, title, text))


def _placement_plot(plots: _Plots, record: ExecutionRecord) -> None:
    from bokeh.models import FactorRange
    from bokeh.plotting import figure

    counts: Counter[str] = Counter(n.placement or "not reported" for n in record.nodes)
    if not counts:
        plots.add("placement", "Placement", "The record holds no per-node placement.", None)
        return
    classes = [c for c in ("requested", "host_shape", "fallback", "not reported") if c in counts]
    fig = figure(
        x_range=FactorRange(factors=classes), height=260, width=520, title="nodes per placement class",
        tools="save", y_axis_label="nodes",
    )  # fmt: skip
    fig.vbar(
        x=classes,
        top=[counts[c] for c in classes],
        width=0.7,
        color=[PLACEMENT_COLOURS.get(c, UNKNOWN_COLOUR) for c in classes],
        line_color="#555",
    )
    text = ", ".join(f"{counts[c]} {c}" for c in classes)
    plots.add("placement", "Placement", f"{len(record.nodes)} nodes: {text}.", fig)


def _latency_plot(plots: _Plots, record: ExecutionRecord) -> None:
    import numpy as np
    from bokeh.plotting import figure

    latencies = np.asarray([r.latency_ms for r in record.runs], dtype=np.float64)
    if latencies.size == 0:
        plots.add("latency", "Latency", "The record holds no runs.", None)
        return
    p50, p90, p99 = np.percentile(latencies, [50, 90, 99])
    hist, edges = np.histogram(latencies, bins=min(50, max(5, latencies.size // 5)))
    fig = figure(
        height=260, width=720, title=f"latency of {latencies.size} runs (record.runs)",
        tools="xpan,xwheel_zoom,reset,save", x_axis_label="ms", y_axis_label="runs",
    )  # fmt: skip
    fig.quad(top=hist, bottom=0, left=edges[:-1], right=edges[1:], color="#6baed6")
    for value, colour in ((p50, "#08519c"), (p99, "#d94801")):
        fig.ray(x=[value], y=[0], length=0, angle=np.pi / 2, color=colour, line_dash="dashed")
    text = (
        f"{latencies.size} runs: p50 {p50:.4f} ms, p90 {p90:.4f} ms, p99 {p99:.4f} ms, "
        f"max {latencies.max():.4f} ms (dashed: p50, p99)."
    )
    plots.add("latency", "Latency distribution", text, fig)


def _time_plot(plots: _Plots, times: NodeTimes | None) -> None:
    from bokeh.models import ColumnDataSource, FactorRange
    from bokeh.plotting import figure

    if times is None:
        return
    top = sorted(times.mean_us.items(), key=lambda kv: kv[1], reverse=True)[:TOP_NODES]
    if not top:
        plots.add("node-time", "Per-node time", f"{times.source}: no node matched.", None)
        return
    names = [k for k, _ in reversed(top)]
    source = ColumnDataSource({"node": names, "us": [v for _, v in reversed(top)]})
    fig = figure(
        y_range=FactorRange(factors=names), height=max(240, 18 * len(names)), width=720, tools="save,hover",
        tooltips=[("node", "@node"), ("µs", "@us{0.0}")], x_axis_label="µs per run",
        title=f"slowest {len(names)} nodes on {times.engine}:{times.device}",
    )  # fmt: skip
    fig.hbar(y="node", right="us", height=0.7, source=source, color="#fd8d3c")
    total = sum(times.mean_us.values())
    unmatched = sum(times.unmatched_us.values())
    text = (
        f"Source: {times.source}. {len(times.mean_us)} graph nodes, {total:.1f} µs per run; "
        f"{len(times.unmatched_us)} engine nodes that are no graph node (fused or inserted by "
        f"the engine): {unmatched:.1f} µs."
    )
    plots.add("node-time", "Per-node time", text, fig)


def _difference_plot(plots: _Plots, diff: LayerDifferences | None) -> None:
    from bokeh.models import ColumnDataSource
    from bokeh.models.annotations.geometry import Span
    from bokeh.plotting import figure

    if diff is None:
        return
    finite = [o for o in diff.outputs if o.max_abs == o.max_abs and o.max_abs != float("inf")]
    if not finite:
        plots.add("difference", "Per-layer difference", "No comparable node output.", None)
        return
    floor = 1e-12  # a log axis has no zero: exact agreement is drawn at the floor
    source = ColumnDataSource(
        {
            "position": list(range(len(finite))),
            "abs": [max(o.max_abs, floor) for o in finite],
            "node": [o.node for o in finite],
            "op": [o.op_type for o in finite],
            "colour": ["#2b8cbe" if o.passed else "#e6550d" for o in finite],
        }
    )
    fig = figure(
        height=300, width=900, y_axis_type="log", tools="xpan,xwheel_zoom,reset,save,hover",
        tooltips=[("node", "@node (@op)"), ("max abs", "@abs{0.000e}")],
        title=f"max |{diff.target} − {diff.reference}| per node output, in graph order",
        x_axis_label="node output (graph order)", y_axis_label="max abs difference",
    )  # fmt: skip
    fig.scatter("position", "abs", source=source, color="colour", size=5)
    fig.add_layout(Span(location=diff.atol, dimension="width", line_dash="dashed"))
    first = diff.first_divergence
    text = (
        f"{len(diff.outputs)} node outputs of {diff.target} against {diff.reference} "
        f"(atol {diff.atol:g}, rtol {diff.rtol:g}; dashed: atol; orange: beyond tolerance). "
        + (
            "No node output diverges."
            if first is None
            else f"First divergence: {first.node} ({first.op_type}), tensor {first.tensor}: "
            f"max abs {first.max_abs:.3e}, max rel {first.max_rel:.3e}."
        )
    )
    plots.add("difference", "Per-layer difference", text, fig)


def _kernel_plot(plots: _Plots, data: ReportData) -> None:
    from bokeh.models import ColumnDataSource, FactorRange
    from bokeh.plotting import figure

    record = data.record
    if record.kind != "training" and not data.kernel_events:
        return
    events = [e for e in data.kernel_events if e.get("ph") == "X" and "dur" in e]
    if events:
        start = min(float(e["ts"]) for e in events)
        lanes = sorted({str(e.get("tid", "")) for e in events})
        source = ColumnDataSource(
            {
                "lane": [str(e.get("tid", "")) for e in events],
                "left": [(float(e["ts"]) - start) / 1000.0 for e in events],
                "right": [(float(e["ts"]) + float(e["dur"]) - start) / 1000.0 for e in events],
                "name": [str(e.get("name", "")) for e in events],
            }
        )
        fig = figure(
            y_range=FactorRange(factors=lanes), height=max(200, 40 * len(lanes) + 80), width=900,
            tools="xpan,xwheel_zoom,reset,save,hover", tooltips=[("kernel", "@name")],
            title="kernels of the training step", x_axis_label="ms from the first kernel",
        )  # fmt: skip
        fig.hbar(y="lane", left="left", right="right", height=0.6, source=source, color="#74c476")
        text = f"{len(events)} kernel launches from the step's profiler trace, per stream."
        plots.add("kernels", "Kernels on a timeline", text, fig)
        return
    if not record.kernels:
        plots.add("kernels", "Kernels", "The record holds no kernels.", None)
        return
    names = [k.name for k in record.kernels]
    source = ColumnDataSource(
        {
            "kernel": names,
            "us": [k.total_us for k in record.kernels],
            "op": [k.op or "" for k in record.kernels],
            "count": [k.count for k in record.kernels],
        }
    )
    fig = figure(
        y_range=FactorRange(factors=names[::-1]), height=max(200, 18 * len(names) + 80), width=900,
        tools="save,hover", tooltips=[("kernel", "@kernel"), ("op", "@op"), ("launches", "@count")],
        title="total time per kernel (record.kernels)", x_axis_label="µs",
    )  # fmt: skip
    fig.hbar(y="kernel", right="us", height=0.6, source=source, color="#74c476")
    text = (
        "The record keeps each kernel's launches and total time, not when it ran; give the "
        "step's profiler trace (xpuruntime.pytorch.profile(export_chrome_trace=...)) to draw "
        "the kernels on a timeline."
    )
    plots.add("kernels", "Kernels", text, fig)


_STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;margin:24px;
color:#1d1d1f;max-width:1100px}
h1{font-size:22px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ddd}
h3{font-size:15px}table{border-collapse:collapse;margin:8px 0;font-size:13px}
td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f4f4f6}table.facts td:first-child{font-weight:600}
table.fallbacks td{background:#fff1e6}.plot-text{font-size:13px;color:#333}
"""

# Counts the plots that drew: Bokeh draws into canvases inside shadow roots; a plot counts
# once one of its canvases holds a non-transparent pixel.
_DRAWN_CHECK = """
(function(){
 function canvases(root,out){root.querySelectorAll('*').forEach(function(el){
  if(el.tagName==='CANVAS'){out.push(el);} if(el.shadowRoot){canvases(el.shadowRoot,out);}});
  return out;}
 function painted(c){try{var w=c.width,h=c.height;if(!w||!h){return false;}
  var d=c.getContext('2d').getImageData(0,0,w,h).data;
  for(var i=3;i<d.length;i+=4){if(d[i]!==0){return true;}}}catch(e){}return false;}
 var tries=0;
 function check(){var n=0;document.querySelectorAll('.plot').forEach(function(p){
   if(canvases(p,[]).some(painted)){n+=1;}});
  document.body.setAttribute('data-plots-drawn',String(n));
  if(n<Number(document.body.getAttribute('data-plots-expected'))&&tries++<100){
   setTimeout(check,100);}}
 window.addEventListener('load',function(){setTimeout(check,100);});
})();
"""


class ReportMissingError(XpuRuntimeError, ImportError):
    """Bokeh, which draws the report's plots, is not installed."""


def require_bokeh() -> None:
    """Refuse up front (before a session is opened or benchmarked) when Bokeh is missing."""
    if importlib.util.find_spec("bokeh") is None:
        raise ReportMissingError(
            "the HTML report draws its plots with Bokeh, which is not installed; install it"
            " with: pip install 'xpuruntime[report]'"
        )


def render_report(data: ReportData) -> str:
    """The report as one HTML document."""
    require_bokeh()
    from bokeh.embed import components
    from bokeh.embed.bundle import bundle_for_objs_and_resources
    from bokeh.resources import INLINE

    record = data.record
    plots = _Plots()
    _placement_plot(plots, record)
    _latency_plot(plots, record)
    _time_plot(plots, data.node_times)
    _difference_plot(plots, data.differences)
    _kernel_plot(plots, data)
    script, divs = components(plots.figures) if plots.figures else ("", {})
    # Only the BokehJS parts these plots use (not widgets, tables, MathJax): about 1.3 MB.
    bundle = bundle_for_objs_and_resources(list(plots.figures.values()), INLINE)
    if bundle.js_files or bundle.css_files:
        raise RuntimeError(f"Bokeh wants to load files, the report must not: {bundle.js_files}")
    sections = []
    for key, title, text in plots.sections:
        div = f'<div class="plot" id="plot-{key}">{divs[key]}</div>' if key in divs else ""
        sections.append(
            f'<section id="{key}"><h2>{_e(title)}</h2><p class="plot-text">{_e(text)}</p>'
            f"{div}</section>"
        )
    engine = record.engine.chosen if record.engine else None
    device = record.device.chosen if record.device else None
    title = f"{record.model or 'execution record'} on {engine}:{device}"
    return "".join(
        [
            "<!DOCTYPE html>\n",
            f'<html lang="en"><head><meta charset="utf-8"><meta name="generator" '
            f'content="{GENERATOR}"><title>{_e(title)}</title>',
            f"<style>{_STYLE}</style>",
            bundle.scripts(),
            "".join(f"<style>{css}</style>" for css in bundle.css_raw),
            f'</head><body data-plots-expected="{len(plots.figures)}" data-plots-drawn="0">',
            f"<h1>{_e(title)}</h1>",
            _summary(data),
            _fallbacks(record),
            _decisions(record),
            *sections,
            _nodes(record),
            _notes(record),
            f"<script>{_DRAWN_CHECK}</script>",
            script,
            "</body></html>\n",
        ]
    )
