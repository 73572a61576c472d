"""Let AOTAutograd's cache serve torchao's float8 training programs (torch 2.11 to 2.13, torchao
0.18), so a fresh process of a compiled fp8 configuration starts warm instead of re-tracing it.

Why they miss today (autotune's bypass reasons record it): torchao marks its float8 autograd
Functions (the float8 matmul, the casts) allow_in_graph, and Dynamo writes each into the graph as a
closure, produce_trampoline_autograd_apply's trampoline_autograd_apply, which the cache key cannot
name as an import; and torchao's config objects (ScaledMMConfig, LinearMMConfig, CastConfig,
Float8GemmConfig, Float8LinearConfig) are built in the graph as calls outside the cache's
allowlist (torch/_functorch/_aot_autograd/autograd_cache.py: check_node_safe). Every fresh process
then re-ran Dynamo, the joint trace and the partitioner: ~100 s for a 1.3B whole-model program.

Here each trampoline becomes a module-level function of this module with its own importable name,
and those names and the config classes are allowlisted through Inductor's
unsafe_marked_cacheable_functions, under a tag of the torch and torchao versions and a digest of
torchao.float8's source (the key does not see the Functions' code: a changed torchao is another
key). torchao's own fix (pytorch/ao#4840: the Functions traced without allow_in_graph) is not in
0.18; once it is, install finds nothing to do. A torch without these hooks is left as it is.
"""

from __future__ import annotations

import hashlib
import importlib
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

# torchao's classes built inside a float8 graph (module, name)
CONFIG_CLASSES = (
    "torchao.float8.float8_training_tensor.ScaledMMConfig",
    "torchao.float8.float8_training_tensor.LinearMMConfig",
    "torchao.float8.config.CastConfig",
    "torchao.float8.config.Float8GemmConfig",
    "torchao.float8.config.Float8LinearConfig",
)
# torchao's allow_in_graph autograd Functions, named up front: the allowlist is part of every FX
# graph key, so it must be the same whichever of them a program reaches first
FUNCTIONS = (
    "torchao.float8.float8_linear:matmul_with_hp_or_float8_args",
    "torchao.float8.float8_scaling_utils:NoopFwToFloat8BwDynamic",
    "torchao.float8.float8_training_tensor:_ToFloat8ConstrFunc",
    "torchao.float8.float8_training_tensor:_FromFloat8ConstrFunc",
)
_MADE: dict[Any, Any] = {}  # Function class -> its named trampoline
_STATE: dict[str, Any] = {"tag": "", "original": None}


def install(torch: ModuleType) -> bool:
    """Make the float8 programs of this process cacheable (call before torch.compile). False where
    this torch or torchao has not the hooks it relies on (nothing is changed then)."""
    misc = _dynamo_misc()
    config = torch._inductor.config
    if misc is None or not hasattr(config, "unsafe_marked_cacheable_functions"):
        return False
    if misc.produce_trampoline_autograd_apply is _named:
        return True
    _STATE["tag"] = _tag(torch)
    _STATE["original"] = misc.produce_trampoline_autograd_apply
    setattr(misc, "produce_trampoline_autograd_apply", _named)  # looked up at each call
    _mark(torch, CONFIG_CLASSES)
    for where in FUNCTIONS:
        module, _, name = where.partition(":")
        _named(getattr(importlib.import_module(module), name))
    return True


def _dynamo_misc() -> ModuleType | None:
    """torch._dynamo.variables.misc where it has the trampoline factory; None elsewhere."""
    try:
        misc = importlib.import_module("torch._dynamo.variables.misc")
    except ImportError:
        return None
    return misc if hasattr(misc, "produce_trampoline_autograd_apply") else None


def _tag(torch: ModuleType) -> str:
    """The cache's tag for these functions: torch's and torchao's versions, torchao.float8's
    source."""
    import torchao.float8

    root = Path(torchao.float8.__file__).parent
    source = b"".join(path.read_bytes() for path in sorted(root.glob("*.py")))
    digest = hashlib.sha256(source).hexdigest()[:16]
    version = getattr(sys.modules["torchao"], "__version__", "?")
    return f"torch-{torch.__version__}-torchao-{version}-{digest}"


def _named(function_class: Any) -> Any:
    """The trampoline Dynamo puts in the graph for this Function, made once, as a function of this
    module with a name of its own (the cache key imports it by that name)."""
    made = _MADE.get(function_class)
    if made is not None:
        return made
    made = _STATE["original"](function_class)
    qualified = f"{function_class.__module__}.{function_class.__qualname__}"
    name = "trampoline__" + qualified.replace(".", "_")
    made.__name__ = made.__qualname__ = name
    made.__module__ = __name__
    made._origin = _named  # Dynamo knows a trampoline by `_origin is the factory`
    setattr(sys.modules[__name__], name, made)
    _MADE[function_class] = made
    _mark(sys.modules["torch"], [f"{__name__}.{name}"])
    return made


def _mark(torch: ModuleType, names: Any) -> None:
    """Allowlist these functions for the caches, under this torch and torchao's tag."""
    config = torch._inductor.config
    marked = dict(config.unsafe_marked_cacheable_functions)
    marked.update({name: _STATE["tag"] for name in names})
    config.unsafe_marked_cacheable_functions = marked
