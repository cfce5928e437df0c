#!/usr/bin/env bash
# GPU phase: xpuruntime-torch's native ops (csrc/) built against this machine's PyTorch, the
# norms', fused_linear's and fused_attention's suites (CPU and GPU) on them, and the
# host-overhead table of the torch ops beside PyTorch's with the xrt_flash training step
# beside its kernel sum.
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
    packages/xpuruntime-torch/tests/test_attention_native.py \
    packages/xpuruntime-torch/tests/test_attention_native_gpu.py \
    packages/xpuruntime-torch/tests/test_ops.py packages/xpuruntime-torch/tests/test_lock.py \
    "packages/xpuruntime-torch/tests/test_gpu.py::test_flash_v2_policy_runs_the_flash_kernel" \
    "packages/xpuruntime-torch/tests/test_gpu.py::test_flash_v2_pinned_raises_for_a_shape_it_cannot_serve" \
    "packages/xpuruntime-torch/tests/test_gpu.py::test_pinned_sdpa_backend_runs_its_aten_entry_point_as_sdpa_does" \
    "packages/xpuruntime-torch/tests/test_gpu.py::test_pinned_sdpa_backend_under_compile_and_with_dropout" \
    packages/xpuruntime-torch/tests/test_gpu.py::test_fused_linear_on_cublaslt_matches_pytorch_gradients \
    packages/xpuruntime-torch/tests/test_gpu.py::test_fused_linear_compiles_on_cuda}
python3 benchmarks/op_overhead.py --torch-ops ${TORCH_NATIVE_BENCH_ARGS:-} --json "$LOGS/torch_op_overhead.json"
