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

ATTENTION_FLASH: int
ATTENTION_EFFICIENT: int
ATTENTION_CUDNN: int
ATTENTION_SDPA: int

def set_attention_hooks(
    choose: Callable[..., str],
    forward_other: Callable[..., tuple[Tensor, Tensor, Tensor, Tensor]],
    backward_other: Callable[..., tuple[Tensor, Tensor, Tensor]],
    /,
) -> None: ...
def attention_forward(
    code: int,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None,
    dropout_p: float,
    is_causal: bool,
    scale: float | None,
    need_lse: bool,
    /,
) -> tuple[Tensor, Tensor, Tensor, Tensor]: ...
def attention_backward(
    code: int,
    grad: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    seed: Tensor,
    offset: Tensor,
    mask: Tensor | None,
    dropout_p: float,
    is_causal: bool,
    scale: float | None,
    /,
) -> tuple[Tensor, Tensor, Tensor]: ...
def attention_entry(
    slow: Callable[..., Tensor],
    state_module: dict[str, Any],
    state_name: str,
    names: list[str],
    doc: str,
    /,
) -> Callable[..., Tensor]: ...
def attention_decided(
    state: object,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None,
    dropout_p: float,
    is_causal: bool,
    scale: float | None,
    needs_grad: bool,
    code: int,
    /,
) -> Tensor: ...
