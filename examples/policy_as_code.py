"""Policy as code: write a policy, keep it in git, load it back, hash and diff it.

python examples/policy_as_code.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import xpuruntime as xrt


def main() -> None:
    policy = xrt.KernelPolicy(matmul="cublasLt", attention="flash_v2")
    policy.set("layernorm", "auto").remove("attention")
    print(policy, policy.preferences)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernels.yaml"
        policy.save(path)
        print(path.read_text())
        again = xrt.KernelPolicy.load(path)
        assert again == policy
        assert again.content_hash() == policy.content_hash()
    print("content hash:", policy.content_hash())


if __name__ == "__main__":
    main()
