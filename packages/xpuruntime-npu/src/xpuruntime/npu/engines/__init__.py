"""Engine plugins of xpuruntime-npu (entry points in the ``xpuruntime.engines`` group).

Each module imports its backend (openvino, onnxruntime + onnxruntime_qnn) inside methods only.
"""
