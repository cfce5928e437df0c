"""Execution records as pictures: Model Explorer overlays, a self-contained HTML report,
Chrome-trace timelines.

Each module has one job: :mod:`~.graph_ids` names nodes the way Model Explorer's ONNX
adapter does, :mod:`~.overlays` writes its node-data files, :mod:`~.node_times` reads
per-node times from the engines' own profilers, :mod:`~.layer_diff` compares every node's
output between two engines, :mod:`~.html_report` draws the record, :mod:`~.timeline` writes
Chrome traces and :mod:`~.explorer` starts Model Explorer. Plotting and Model Explorer are
optional dependencies (the ``report`` and ``explore`` extras), imported only where used.
"""
