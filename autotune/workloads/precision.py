"""The arithmetic a trial's steps run in (train and generate): the matmul precision and autocast
dtype of the precision knob, and the SDPA backend the attention knob forces."""

from __future__ import annotations

import contextlib
from types import ModuleType
from typing import TYPE_CHECKING

from autotune.knobs import SDPA_BACKENDS
from autotune.workloads.base import InvalidConfig
from autotune.workloads.steps import Context

if TYPE_CHECKING:
    import torch as torch_types


def apply_precision(torch: ModuleType, precision: str, device: str) -> torch_types.dtype | None:
    """Set matmul precision; return the autocast dtype (None for fp32/tf32). fp8 runs under bf16
    autocast."""
    if device == "cuda" and precision in ("bf16", "fp8") and not torch.cuda.is_bf16_supported():
        raise InvalidConfig(f"{precision} needs bf16, which this GPU does not support", "precision")
    if precision == "fp8":
        if device != "cuda" or torch.cuda.get_device_capability(torch.cuda.current_device()) < (
            8,
            9,
        ):
            raise InvalidConfig(
                "fp8 needs an NVIDIA GPU of compute capability 8.9 or newer (Ada, Hopper, "
                "Blackwell)",
                "precision",
            )
        try:
            import torchao.float8  # noqa: F401
        except Exception as err:
            raise InvalidConfig(
                f"fp8 needs torchao (pip install 'autotune-llm[fp8]'): {err}", "precision"
            ) from None
    if device == "cpu" and precision == "tf32":
        raise InvalidConfig(
            "tf32 needs an NVIDIA GPU (Ampere or newer); on the CPU it is fp32", "precision"
        )
    mode = "tf32" if precision == "tf32" else "ieee"  # fp32 means true fp32: TF32 off
    torch.backends.cuda.matmul.fp32_precision = mode
    torch.backends.cudnn.conv.fp32_precision = mode
    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp8": torch.bfloat16}.get(precision)


def apply_attention(
    torch: ModuleType, attention: str, device: str, dtype: torch_types.dtype | None
) -> Context:
    """A context that forces the SDPA backend; InvalidConfig when that backend cannot run here."""
    if attention not in SDPA_BACKENDS:
        return contextlib.nullcontext
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = getattr(SDPBackend, SDPA_BACKENDS[attention])
    probe = torch.randn(1, 2, 16, 64, device=device, dtype=dtype or torch.float32)
    try:
        with sdpa_kernel([backend]):
            torch.nn.functional.scaled_dot_product_attention(probe, probe, probe, is_causal=True)
    except RuntimeError as err:
        first = str(err).strip().splitlines()[0][:200]
        # the probe runs in the precision's dtype: cudnn, for one, needs fp16 or bf16
        raise InvalidConfig(
            f"attention {attention}: the SDPA backend is not available here: {first}",
            "attention",
            "precision",
        ) from None
    return lambda: sdpa_kernel([backend])
