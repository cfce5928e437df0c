# Types of the native ops extension (csrc/).
from collections.abc import Callable
from typing import Any

from torch import Tensor

TORCH_VERSION: str
KERNEL_TABLE_VERSION: int
CHOICE_TORCH: int
CHOICE_CORE: int

def load_kernel_table(capsule: Any, /) -> None: ...
def set_resolver(resolve: Callable[..., int], /) -> None: ...
def norm_forward(
    rms: bool,
    x: Tensor,
    residual: Tensor | None,
    normalized_shape: list[int],
    weight: Tensor | None,
    bias: Tensor | None,
    eps: float,
    choice: int,
    /,
) -> Any: ...
def set_linear_hooks(
    resolve: Callable[..., int], fall_back: Callable[[str, str, str, str, str], None], /
) -> None: ...
def linear_forward(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    activation: str,
    kernel: str,
    mode: str,
    choice: int,
    report: bool,
    /,
) -> Any: ...
