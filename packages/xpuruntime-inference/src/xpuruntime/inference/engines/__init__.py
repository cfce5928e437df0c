"""Engine plugins of xpuruntime-inference (advertised under the ``xpuruntime.engines``
entry-point group): :mod:`.onnxruntime` and :mod:`.tensorrt`. Each imports its backend
lazily, inside methods."""
