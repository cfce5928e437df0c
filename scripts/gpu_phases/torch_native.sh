#!/usr/bin/env bash
# GPU phase: xpuruntime-torch's native ops (csrc/) built against this machine's PyTorch, the
# norms' and fused_linear's suites (CPU and GPU) on them, and the host-overhead table of the
# torch ops beside PyTorch's with the xrt_flash training step beside its kernel sum.
# Needs: the build phase (the CUDA core in $SITE) and setuptools >= 77 (a carried wheel).
set -uo pipefail
LOGS=${1:-.}
rm -rf /tmp/torch-wheel
python3 -m pip wheel -q --no-build-isolation --no-deps -w /tmp/torch-wheel \
  ./packages/xpuruntime-torch || exit 1
# Unpacked beside the core: a second `pip install --target` would replace the shared folder.
python3 -m zipfile -e /tmp/torch-wheel/xpuruntime_torch-*.whl "$SITE"
python3 -c "import torch, xpuruntime.pytorch.ops._C as c; \
print('native ops built for torch', c.TORCH_VERSION, '- running torch', torch.__version__)"
python3 -m pytest -p no:cacheprovider -q -rs --timeout 300 -m "gpu or not gpu" \
  ${TORCH_NATIVE_TESTS:-packages/xpuruntime-torch/tests/test_native_ops.py \
    packages/xpuruntime-torch/tests/test_norms.py packages/xpuruntime-torch/tests/test_norms_gpu.py \
    packages/xpuruntime-torch/tests/test_linear_op.py packages/xpuruntime-torch/tests/test_linear_gpu.py \
    packages/xpuruntime-torch/tests/test_gpu.py::test_fused_linear_on_cublaslt_matches_pytorch_gradients \
    packages/xpuruntime-torch/tests/test_gpu.py::test_fused_linear_compiles_on_cuda}
python3 benchmarks/op_overhead.py --torch-ops ${TORCH_NATIVE_BENCH_ARGS:-} --json "$LOGS/torch_op_overhead.json"
