"""Pydantic models of the YAML file: the model, workload and baseline here; the space (space), the
study (study) and the command (command) sections beside it; YAML to a Config its schema validated
(load). Schema only: each section's own fields and shapes. What a task asks of the
sections (tasks.check_config) and the model's files and code (the user-code probe) are checked once,
by job.validate, so that reading a best.yaml with these classes never runs user code."""

from __future__ import annotations

import re
from typing import Any, Literal, Optional

from pydantic import Field, PrivateAttr, field_validator, model_validator

from autotune import knobs as catalogue
from autotune import sizes
from autotune.config.command import CommandConfig
from autotune.config.space import SpaceConfig
from autotune.config.study import SEED_MAX, StudyConfig, _Section
from autotune.errors import excerpt

MAX_NAME = 200  # a study name names folders, OUT/<name>.archived-<time> too (NAME_MAX is 255)


class ModelConfig(_Section):
    """The model: the built-in transformer (family + sizes), a Hugging Face config, or your own
    entrypoint."""

    family: Optional[Literal["gpt", "llama"]] = Field(
        default=None,
        description=(
            "Built-in model. gpt: LayerNorm, GELU MLP, learned positions. llama: RMSNorm, SwiGLU, "
            "RoPE, GQA."
        ),
    )
    hf_config: Optional[str] = Field(
        default=None,
        description=(
            "Path to a Hugging Face config.json: a transformers causal LM built with "
            "AutoModelForCausalLM.from_config (random weights, nothing downloaded). Needs "
            "autotune-llm[hf]."
        ),
    )
    entrypoint: Optional[str] = Field(
        default=None,
        description=(
            "'package.module:function' returning your model and batch maker (docs/yaml.md: Your "
            "own model). Runs your code, by design."
        ),
    )
    n_layers: Optional[int] = Field(
        default=None, ge=1, le=1024, description="Transformer blocks (built-in model)."
    )
    d_model: Optional[int] = Field(
        default=None,
        ge=1,
        le=65536,
        description="Hidden size; a multiple of n_heads (built-in model).",
    )
    n_heads: Optional[int] = Field(
        default=None, ge=1, le=1024, description="Attention (query) heads (built-in model)."
    )
    n_kv_heads: int | None = Field(
        default=None,
        ge=1,
        le=1024,
        description="Key/value heads (grouped-query attention); llama only. Default n_heads.",
    )
    vocab_size: Optional[int] = Field(
        default=None,
        ge=1,
        le=2**24,
        description="Vocabulary size (built-in model; synthetic tokens are drawn from it).",
    )
    seq_len: Optional[int] = Field(
        default=None,
        ge=1,
        le=2**20,
        description="Tokens per sequence (built-in and hf_config models; required there).",
    )
    ffn_hidden: int | None = Field(
        default=None,
        ge=1,
        le=2**20,
        description=(
            "MLP hidden size. Default: 4*d_model for gpt; 8/3*d_model rounded up to 256 for llama."
        ),
    )
    tie_embeddings: bool = Field(
        default=True,
        description="Share the token embedding with the output head (GPT-2, Llama-3.2-1B do).",
    )
    rope_theta: float = Field(
        default=500000.0, gt=0, le=1e12, description="RoPE base; llama only (Llama 3 uses 500000)."
    )

    @model_validator(mode="after")
    def _check_shapes(self) -> ModelConfig:
        sources = [k for k in ("family", "hf_config", "entrypoint") if getattr(self, k) is not None]
        if len(sources) != 1:
            raise ValueError(
                "model: give exactly one of family (built-in), hf_config or entrypoint (got "
                f"{sources or 'none'})"
            )
        sizes = ("n_layers", "d_model", "n_heads", "vocab_size")
        if self.family is None:
            extra = [
                k for k in (*sizes, "n_kv_heads", "ffn_hidden") if getattr(self, k) is not None
            ]
            if extra:
                raise ValueError(
                    f"model.{extra[0]}: not used with {sources[0]}; the sizes come from the model "
                    "itself"
                )
            if self.hf_config is not None and self.seq_len is None:
                raise ValueError(
                    "model.seq_len: required with hf_config (tokens per synthetic sequence)"
                )
            return self  # its files and code: launch.probe.check_model_code (job.validate)
        missing = [k for k in (*sizes, "seq_len") if getattr(self, k) is None]
        if missing:
            raise ValueError(
                f"model.{missing[0]}: required for the built-in model (family {self.family})"
            )
        assert self.d_model is not None and self.n_heads is not None  # none missing (above)
        if self.d_model % self.n_heads:
            raise ValueError(
                f"model.d_model: {self.d_model} is not divisible by model.n_heads "
                f"({self.n_heads}); "
                "use a d_model that is a multiple of n_heads"
            )
        if self.n_kv_heads is not None:
            if self.family != "llama":
                raise ValueError(
                    f"model.n_kv_heads: {self.n_kv_heads} is only for family llama (family is "
                    f"{self.family}); remove it"
                )
            if self.n_heads % self.n_kv_heads:
                raise ValueError(
                    f"model.n_heads: {self.n_heads} is not divisible by model.n_kv_heads "
                    f"({self.n_kv_heads}); "
                    "use an n_kv_heads that divides n_heads"
                )
        if self.family == "llama" and (self.d_model // self.n_heads) % 2:
            raise ValueError(
                f"model.d_model: head size {self.d_model // self.n_heads} is odd; RoPE needs an "
                "even head size"
            )
        return self

    @property
    def kv_heads(self) -> int | None:
        return self.n_kv_heads or self.n_heads

    @property
    def ffn(self) -> int | None:
        if self.family is None:
            return None
        if self.ffn_hidden is not None:
            return self.ffn_hidden
        assert self.d_model is not None  # the built-in model's sizes are required (_check_shapes)
        return sizes.default_ffn(self.family, self.d_model)


class WorkloadConfig(_Section):
    """What one trial does."""

    task: catalogue.TaskName = Field(
        default="train",
        description="train: optimizer steps on synthetic tokens; "
        "generate: prefill a batch of prompts, then decode gen_len tokens each "
        "with a KV cache (inference); command: your own training command (the command section).",
    )
    prompt_len: Optional[int] = Field(
        default=None,
        ge=1,
        le=2**20,
        description="generate: prompt tokens per sequence (prefilled at once).",
    )
    gen_len: Optional[int] = Field(
        default=None,
        ge=1,
        le=2**20,
        description="generate: tokens decoded per sequence, one step each.",
    )
    global_batch_size: int | None = Field(
        default=None,
        ge=1,
        le=2**24,
        description=(
            "Sequences per optimizer step, kept exactly by every trial: "
            "micro_batch_size x grad_accum_steps x world_size. Absent: grad_accum_steps is "
            "searched instead."
        ),
    )
    world_size: int = Field(
        default=1,
        ge=1,
        le=4096,
        description=(
            "GPUs (ranks) per trial, over all nodes. Above 1 a trial is launched with torchrun "
            "(--standalone on one node) as one data-parallel training step; the slowest rank's "
            "step time counts."
        ),
    )
    nnodes: int = Field(
        default=1,
        ge=1,
        le=1024,
        description="Nodes per trial; world_size / nnodes ranks on each. Above 1 needs "
        "rdzv_endpoint and a launcher that starts the trial on every node (docs/multi-gpu.md: "
        "Many GPUs, many nodes).",
    )
    rdzv_endpoint: Optional[str] = Field(
        default=None,
        description="host:port of torchrun's c10d rendezvous (multi-node); on one node torchrun "
        "--standalone picks a free port itself.",
    )
    launcher: Optional[list[str]] = Field(
        default=None,
        description="Command prefix that starts the trial launcher (torchrun) on every node, e.g. "
        "[srun, --nodes=2, --ntasks-per-node=1]; an argument list, never a shell string.",
    )
    warmup_steps: int = Field(
        default=3,
        ge=1,
        le=10_000,
        description="Optimizer steps run before timing (include torch.compile); not measured.",
    )
    measure_steps: int = Field(
        default=10, ge=2, le=100_000, description="Timed optimizer steps; the median is reported."
    )
    seed: int = Field(
        default=0,
        ge=0,
        le=SEED_MAX,
        description="Seed of the model's weights and the synthetic tokens.",
    )

    @model_validator(mode="after")
    def _check_batch(self) -> WorkloadConfig:
        if self.world_size % self.nnodes:
            raise ValueError(
                f"workload.world_size: {self.world_size} is not divisible by workload.nnodes "
                f"({self.nnodes}); every node runs the same number of ranks"
            )
        if self.nnodes > 1 and not self.rdzv_endpoint:
            raise ValueError(
                f"workload.rdzv_endpoint: needed with nnodes {self.nnodes}; give host:port of the "
                "rendezvous (a port free on the first node)"
            )
        if self.rdzv_endpoint is not None and not re.fullmatch(
            r"[\w.\-\[\]:]+:\d+", self.rdzv_endpoint
        ):
            raise ValueError(f"workload.rdzv_endpoint: {self.rdzv_endpoint!r} is not host:port")
        if self.launcher is not None and (
            not self.launcher or not all(a.strip() for a in self.launcher)
        ):
            raise ValueError(
                "workload.launcher: give a non-empty list of arguments, e.g. [srun, --nodes=2]"
            )
        if self.global_batch_size is not None and self.global_batch_size % self.world_size:
            raise ValueError(
                f"workload.global_batch_size: {self.global_batch_size} is not divisible by "
                f"workload.world_size ({self.world_size}); use a multiple of world_size"
            )
        return self


class Config(_Section):
    """The whole YAML file."""

    name: str = Field(description="Study name; results go to trials/<name>/.")
    model: Optional[ModelConfig] = Field(
        default=None,
        description="The model to train (tasks train and generate; a command builds its own).",
    )
    workload: WorkloadConfig = Field(
        default_factory=WorkloadConfig, description="What one trial does."
    )
    space: SpaceConfig = Field(description="The search space (inline, or a path to a YAML file).")
    study: StudyConfig = Field(default_factory=StudyConfig, description="Optuna study settings.")
    command: Optional[CommandConfig] = Field(
        default=None,
        description="task command: your own training command and how each knob reaches it.",
    )
    baseline: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            "Knob values measured first as the reference (trial 0); absent knobs take their "
            "defaults."
        ),
    )
    # the YAML's folder: where an entrypoint module is found
    _base_dir: Optional[str] = PrivateAttr(default=None)

    @property
    def base_dir(self) -> Optional[str]:
        return self._base_dir

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", value) or len(value) > MAX_NAME:
            raise ValueError(
                f"{excerpt(value)} is not a valid study name; use at most {MAX_NAME} letters, "
                "digits, '.', '_' and '-' (it names a folder)"
            )
        return value
