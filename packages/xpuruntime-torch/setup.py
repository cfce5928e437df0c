"""Builds xpuruntime-torch's native ops (``xpuruntime.pytorch.ops._C``) against the PyTorch
installed at build time: PyTorch's C++ API has no stable ABI for autograd kernels, so the
wheel is built per PyTorch release (docs/packages/torch.md, "How the native ops ship")."""

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

setup(
    ext_modules=[
        CppExtension(
            "xpuruntime.pytorch.ops._C",
            [
                "csrc/module.cpp",
                "csrc/core_table.cpp",
                "csrc/norm_ops.cpp",
                "csrc/linear_ops.cpp",
                "csrc/attention_ops.cpp",
            ],
            extra_compile_args=["-O2", "-g0"],
        )
    ],
    cmdclass={"build_ext": BuildExtension},
)
