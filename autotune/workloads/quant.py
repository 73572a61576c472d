"""Weight quantization of a generate trial (torchao's quantize_, gemlite's int4 kernels) and the
drift guard's measurements: every linear's input and output recorded before, each layer's error and
the logits after.

Imported only inside a trial's process: torch and torchao.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

from autotune.knobs import QUANT_CONFIGS, int_of
from autotune.protocol import Knobs
from autotune.workloads.base import InvalidConfig

if TYPE_CHECKING:
    from torch import Tensor, nn

# bytes one stored weight takes, per weight_quant (plus the scales: quant_bytes)
WEIGHT_BITS = {
    "int8_weight_only": 8,
    "int4_weight_only": 4,
    "float8_weight_only": 8,
    "float8_dynamic": 8,
}


def capture_linears(
    torch: ModuleType, model: nn.Module, run: Callable[[], None], last: int
) -> dict[str, tuple[Tensor, Tensor]]:
    """Each nn.Linear's input and output on the last `last` positions while `run()` runs: the
    per-layer reference a quantized copy of the same weights is compared with."""
    seen: dict[str, tuple[Tensor, Tensor]] = {}
    hooks = []
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear):

            def keep(m: nn.Module, args: tuple[Tensor, ...], out: Tensor, name: str = name) -> None:
                seen[name] = (args[0][:, -last:].detach().clone(), out[:, -last:].detach().float())

            hooks.append(mod.register_forward_hook(keep))
    try:
        run()
    finally:
        for h in hooks:
            h.remove()
    return seen


def layer_errors(
    torch: ModuleType, model: nn.Module, seen: dict[str, tuple[Tensor, Tensor]]
) -> list[float]:
    """Relative output error ||W_q x - W x|| / ||W x|| of every quantized linear, on its recorded
    input."""
    mods = dict(model.named_modules())
    errs = []
    for name, (x, ref) in seen.items():
        out = mods[name](x).float()
        errs.append(((out - ref).norm() / ref.norm().clamp_min(1e-12)).item())
    return errs


def drift(torch: ModuleType, ref: Tensor, new: Tensor) -> dict[str, float]:
    """Greedy next-token agreement and mean KL(ref || new) in nats, over every compared position."""
    agree = (ref.argmax(-1) == new.argmax(-1)).float().mean().item()
    logp, logq = torch.log_softmax(ref, -1), torch.log_softmax(new, -1)
    kl = (logp.exp() * (logp - logq)).sum(-1).mean().item()
    return {"greedy_agreement": agree, "kl_nats": kl}


def apply_weight_quant(
    torch: ModuleType, model: nn.Module, knobs: Knobs, broken: bool = False
) -> str | None:
    """torchao quantize_ with the weight_quant's config on every nn.Linear; the call as applied, or
    None. broken (the test-only drift fault): a 1-bit sign quantizer instead, which must be
    caught."""
    quant = knobs["weight_quant"]
    if quant in (None, "none"):
        return None
    if broken:
        with torch.no_grad():
            for mod in model.modules():
                if isinstance(mod, torch.nn.Linear):
                    mod.weight.copy_(mod.weight.sign() * mod.weight.abs().mean())
        return "AUTOTUNE_FAULT=drift: a 1-bit sign quantizer"
    try:
        import torchao.quantization as tq
    except Exception as err:
        raise InvalidConfig(
            f"weight_quant {quant} needs torchao (pip install 'autotune-llm[generate]'): {err}",
            "weight_quant",
        ) from None
    name, config = QUANT_CONFIGS[str(quant)], None
    # int4: torch's own tinygemm kernel (tile-packed layout), as torchao's published Llama numbers
    # use; the plain layout needs fbgemm/mslk kernels that a stock torch lacks; or gemlite's Triton
    # kernels
    kwargs = (
        {"group_size": knobs["int4_group_size"], "int4_packing_format": "tile_packed_to_4d"}
        if quant == "int4_weight_only"
        else {}
    )
    if quant == "int4_weight_only" and knobs.get("int4_kernel") == "gemlite":
        config = gemlite_config(
            int_of(knobs, "int4_group_size"), next(model.parameters()).device.type
        )
        name, kwargs = (
            "UIntxWeightOnlyConfig",
            {"group_size": knobs["int4_group_size"], "bit_width": 4},
        )
    try:
        tq.quantize_(model, config or getattr(tq, name)(**kwargs))
    # torchao's own reason: kernel missing on this GPU, dtype not supported, ...
    except Exception as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:300]
        raise InvalidConfig(
            f"weight_quant {quant}: torchao cannot apply it here: {type(err).__name__}: {first}",
            "weight_quant",
            "precision",
        ) from None
    # torchao's configs default to set_inductor_config=True: its recommended Inductor flags
    # (coordinate-descent tuning among them) are set for every quantized trial, never for bf16's:
    # said where the trial says what ran
    return (
        f"quantize_(model, {name}({', '.join(f'{k}={v}' for k, v in kwargs.items())})); torchao "
        "set its recommended Inductor flags (set_inductor_config=True: coordinate_descent_tuning "
        "and others)"
    )


def gemlite_config(group: int, device: str) -> Any:
    """torchao's gemlite int4 config; InvalidConfig off the GPU or where gemlite is missing."""
    if device != "cuda":
        raise InvalidConfig(
            f"int4_kernel gemlite runs Triton kernels on NVIDIA GPUs only, not on {device}",
            "int4_kernel",
        )
    try:
        import gemlite
        import torchao
        from torchao.prototype.quantization.quant_api import UIntxWeightOnlyConfig
    except Exception as err:
        raise InvalidConfig(
            "int4_kernel gemlite needs the gemlite package (pip install 'autotune-llm[gemlite]') "
            f"and torchao's prototype UIntxWeightOnlyConfig: {type(err).__name__}: {err}",
            "int4_kernel",
        ) from None
    mismatch = gemlite_mismatch(gemlite.__version__, torchao.__version__)
    if mismatch:
        raise InvalidConfig(mismatch, "int4_kernel")
    return UIntxWeightOnlyConfig(group_size=group, bit_width=4)


def _release(version: str) -> tuple[int, ...]:
    """(major, minor) of a version string such as 0.6.0.post2 or 0.18.0+cu130."""
    parts = version.split("+")[0].split(".")[:2]
    return tuple(int("".join(ch for ch in p if ch.isdigit()) or 0) for p in parts)


def gemlite_mismatch(gemlite_version: str, torchao_version: str) -> str | None:
    """Why these two versions cannot quantize together, or None. torchao 0.18's
    UIntxBitPackedTensor.from_hp unpacks three tensors (`qdata, scale, zero_point =
    gemlite_linear.get_tensor_args()`); gemlite 0.6 added a fourth (meta_scale, for NVFP4), so every
    layer failed with 'too many values to unpack (expected 3)' (seen on an H200 with gemlite
    0.6.0.post2; gemlite 0.5.1.post1 returns the three)."""
    if _release(gemlite_version) >= (0, 6) and _release(torchao_version) <= (0, 18):
        return (
            f"int4_kernel gemlite: gemlite {gemlite_version} returns four tensors from "
            f"get_tensor_args where torchao {torchao_version} unpacks three; install gemlite<0.6 "
            "(0.5.1.post1 runs with torchao 0.18)"
        )
    return None


def linear_bytes(model: nn.Module, torch: ModuleType, quant: str | None, group: int) -> int:
    """Bytes a decode step reads for the linear layers' weights as stored: the quantized weights and
    their scales (int4: a bf16 scale and zero point per group; int8/float8: a scale per output
    row)."""
    total = 0
    for mod in model.modules():
        if isinstance(mod, torch.nn.Linear):
            out_f, in_f = mod.out_features, mod.in_features
            if quant in WEIGHT_BITS:
                total += out_f * in_f * WEIGHT_BITS[quant] // 8
                total += (out_f * (in_f // group) * 4) if quant == "int4_weight_only" else out_f * 4
            else:
                total += mod.weight.numel() * mod.weight.element_size()
            if mod.bias is not None:
                total += mod.bias.numel() * mod.bias.element_size()
    return total
