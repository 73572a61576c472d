"""The study section of the YAML (how the Optuna study runs: budget, sampler, storage, limits, the
numerics guards) and the base every section shares."""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# The most tokens a training run is taken to have (the largest trained so far are near 1e14):
# past it a value is a typo, and the report's hours would print in hundreds of digits
MAX_TRAIN_TOKENS = 1e18

SamplerName = Literal["tpe", "random", "grid", "gp"]
# study.objective's values: the names of tasks.OBJECTIVES (tasks/_objective.py imports it from here)
ObjectiveName = Literal["tokens_per_s", "pareto"]
SEED_MAX = 2**32 - 1  # numpy's and Optuna's seeds are 32-bit


class _Section(BaseModel):
    """Every section rejects unknown keys (a typo must never be silently ignored) and takes YAML's
    types as they are: strict, so `true` is no integer and "3" no number; floats finite."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class LimitsConfig(_Section):
    """Service-level limits of a generate study: a trial past one is recorded over_limit, with its
    numbers."""

    p99_tpot_ms: Optional[float] = Field(
        default=None,
        gt=0,
        le=1e7,
        description="Largest p99 time per output token (ms) over the decode steps.",
    )
    median_tpot_ms: Optional[float] = Field(
        default=None, gt=0, le=1e7, description="Largest median time per output token (ms)."
    )
    ttft_ms: Optional[float] = Field(
        default=None,
        gt=0,
        le=1e7,
        description="Largest time to first token (ms): the prefill of the batch.",
    )


class LossCheckConfig(_Section):
    """Training's numerics check: an fp8 or fp16 trial (or one that compresses gradients or reduces
    in bf16) that measured well also trains `steps` optimizer steps of its own model from fresh
    weights, and so does its bf16 reference built in the same process from the same weights, on the
    same fresh batches of a fixed random source whose loss levels off; eager, seconds, the trial's
    `check` phase. It fails breakage only: a loss that is not finite, learning less than
    `min_learned` of what the reference learned, gradients gone from a layer, a gap that keeps
    growing, and (only if set) a mean gap above `max_gap_nats`. A failed attempt is repeated once
    from other weights; a verdict covers the arithmetic it tested (precision, recipe, hook), not the
    micro-batch, compile or checkpointing, so each arithmetic is checked once a study. The gap in
    nats is recorded beside the speed-up with the study's noise floor (bf16 against fp32-class
    arithmetic)."""

    steps: int = Field(
        default=30,
        ge=0,
        le=1000,
        description="Optimizer steps of the check (0: off; else at least 8).",
    )
    min_learned: float = Field(
        default=0.5,
        gt=0,
        le=1,
        description="Fail a trial whose loss falls less than this share of what its reference's "
        "falls (first loss to the mean of the second half).",
    )
    max_gap_nats: Optional[float] = Field(
        default=None,
        gt=0,
        le=100,
        description="A stricter limit, off by default: fail a trial whose mean loss over the "
        "second half is more than this many nats above its reference's.",
    )

    @model_validator(mode="before")
    @classmethod
    def _removed_max_gap(cls, data: object) -> Any:
        if isinstance(data, dict) and "max_gap" in data:
            raise ValueError(
                "max_gap (a relative gap at any step) was removed: the check fails breakage only; "
                "for a limit on the quality cost use max_gap_nats, e.g. 0.05"
            )
        return data

    @field_validator("steps")
    @classmethod
    def _enough_steps(cls, value: int) -> int:
        if 0 < value < 8:
            raise ValueError(
                f"{value} steps are too few to judge a trend; use 0 (off) or at least 8"
            )
        return value


class DriftConfig(_Section):
    """How far a quantized generate trial's outputs may move from the unquantized model's (same
    weights, same prompts): past any limit the trial ends invalid_config: outputs drift. All
    three are measured and recorded in every quantized trial. On autotune's random-weight models
    the end-to-end measures say little (a random 32-layer network turns int4's 10% per-layer
    error into unrelated greedy tokens, seen on an H200), so the default limit is per layer; set
    the end-to-end ones for a model whose weights are trained."""

    max_layer_error: Optional[float] = Field(
        default=0.3,
        ge=0,
        le=100,
        description="Largest relative output error ||W_q x - W x|| / ||W x|| of any "
        "quantized linear on the prompts' activations (measured: int8 about 0.008, int4 group "
        "128 about 0.10, a broken 1-bit quantizer about 0.63). null: off.",
    )
    max_kl_nats: Optional[float] = Field(
        default=None,
        ge=0,
        le=100,
        description="Largest mean KL(unquantized || "
        "quantized) of the next-token distributions, in nats. null (default): off.",
    )
    min_greedy_agreement: Optional[float] = Field(
        default=None,
        ge=0,
        le=1,
        description=(
            "Smallest share of positions whose greedy next token is the unquantized model's. "
            "null: off."
        ),
    )


class MlflowConfig(_Section):
    """MLflow: one run per trial (optuna_integration.MLflowCallback), in one experiment per
    study."""

    tracking_uri: Optional[str] = Field(
        default=None,
        min_length=1,
        description="MLflow tracking URI: http(s)://host:5000, sqlite:///mlflow.db, databricks, or "
        "file:///path (MLflow 3 refuses a file store unless MLFLOW_ALLOW_FILE_STORE=true). "
        "Default: MLflow's own (MLFLOW_TRACKING_URI).",
    )
    experiment: Optional[str] = Field(
        default=None, min_length=1, description="MLflow experiment name. Default: the study's name."
    )

    @field_validator("tracking_uri")
    @classmethod
    def _remember_credentials(cls, value: str | None) -> str | None:
        from autotune.redact import remember

        remember(value)  # a URI may carry a password: masked wherever it would be shown
        return value


class WandbConfig(_Section):
    """Weights & Biases: one run per trial (optuna_integration.WeightsAndBiasesCallback,
    as_multirun), grouped by the study's name."""

    project: Optional[str] = Field(
        default=None, min_length=1, description="W&B project. Default: W&B's own (WANDB_PROJECT)."
    )
    entity: Optional[str] = Field(
        default=None,
        min_length=1,
        description="W&B entity (user or team). Default: W&B's own (WANDB_ENTITY).",
    )
    mode: Optional[Literal["online", "offline", "disabled"]] = Field(
        default=None,
        description=(
            "online | offline (written under dir, `wandb sync` later) | disabled. Default: W&B's "
            "own (WANDB_MODE, else online)."
        ),
    )
    dir: Optional[str] = Field(
        default=None,
        min_length=1,
        description="Folder of W&B's local files. Default: the study's folder.",
    )


class TrackingConfig(_Section):
    """Experiment tracking: every trial this process measures, logged as it ends (knobs as params;
    tokens/s, MFU, peak memory as metrics; a pruned or failed trial with its state and reason, no
    value). Logging runs in a background thread: a tracking server that is down or slow never
    stops or slows the study."""

    mlflow: Optional[MlflowConfig] = Field(
        default=None,
        description="Log to MLflow (tracking_uri, experiment); needs `autotune-llm[mlflow]`.",
    )
    wandb: Optional[WandbConfig] = Field(
        default=None,
        description=(
            "Log to Weights & Biases (project, entity, mode, dir); needs `autotune-llm[wandb]`."
        ),
    )
    flush_s: float = Field(
        default=10.0,
        ge=0,
        le=3600,
        description="At the study's end, wait at most this many seconds for the trials still being "
        "logged; past it they are counted as not logged and the search ends.",
    )


class StudyConfig(_Section):
    """How the Optuna study runs."""

    trials: int = Field(
        default=30,
        ge=1,
        le=100_000,
        description="Trials to measure to their end (ok or over_limit; resumed ones count). "
        "Failed, pruned and lost trials are not counted: others run in their place, up to twice "
        "this many launched.",
    )
    timeout_min: float = Field(
        default=60.0,
        gt=0,
        le=525_600,
        description="Stop launching trials after this many minutes (at most a year).",
    )
    sampler: SamplerName = Field(
        default="tpe", description="Optuna sampler: tpe | random | grid | gp."
    )
    seed: int = Field(default=0, ge=0, le=SEED_MAX, description="Sampler seed (0 to 2^32 - 1).")
    storage: str | None = Field(
        default=None,
        description="Optuna storage: an RDB URL (sqlite:///..., postgresql://user@host/db) or "
        "journal:PATH (JournalStorage on a shared file system). Default: sqlite:///<out>/<name>/study.db.",
    )
    worker_grace_s: float = Field(
        default=60.0,
        ge=3,
        le=86_400,
        description="A running trial whose worker sent no heartbeat for this long "
        "(killed, node lost) is failed as worker_lost and its configuration measured again.",
    )
    trial_timeout_min: float = Field(
        default=10.0,
        gt=0,
        le=10_080,
        description=(
            "Hard limit for one trial's process; past it the trial ends as timeout (at most a "
            "week)."
        ),
    )
    confirm_top: int = Field(
        default=3,
        ge=0,
        le=100,
        description="At the end, re-measure this many best configurations (0: no confirmation).",
    )
    confirm_rounds: int = Field(
        default=3,
        ge=0,
        le=100,
        description=(
            "Interleaved rounds of the confirmation (A B C A B C ...), each a fresh process."
        ),
    )
    prune_below: float = Field(
        default=0.8,
        ge=0,
        lt=1,
        description="Stop a one-rank trial once its fastest measured step so far is below "
        "this fraction of the best measured median (Optuna pruner; recorded as pruned with "
        "what it measured). 0: never prune. The confirmation and `check` are never pruned.",
    )
    staged: bool = Field(
        default=True,
        description="Screen cheap, compile what can win (search/stages.py): the sampler's points "
        "run with per-block compile and a dynamic batch dimension where the space has them, and "
        "in bf16 where it has fp8 or fp16; each leader of an arithmetic gets its fp8 (fp16, "
        "other recipe) variant; the last trials measure the leaders' whole-model, static "
        "programs. false: the sampler alone over the whole space.",
    )
    extend_edges: bool = Field(
        default=True,
        description="Past the edge of your list: when the best trial sits at the largest (or "
        "smallest) listed micro-batch, padding multiple or bucket size and the memory estimate "
        "(or the measured peaks) does not rule the next value out, measure the next value (for "
        "the micro-batch the next that divides the global batch per rank) as a trial beyond the "
        "list, marked so, and go on while it gains. false: only your values.",
    )
    start: Literal["auto", "neighbours", "sampler"] = Field(
        default="auto",
        description="What the search measures after the baseline (your setting). neighbours: its "
        "one-knob neighbours first (the micro-batch one size down, then up, then each other "
        "knob's other values), then the sampler (search/neighbours.py); sampler: the sampler at "
        "once. auto: neighbours for task command (your own job), sampler otherwise.",
    )
    patience: Optional[int] = Field(
        default=None,
        ge=0,
        le=100_000,
        description="Stop after this many launched trials in a row without a gain over 1% (the "
        "leaders' final twins measured first). null: half the budget, at least 8; 0: never. A "
        "grid measures every point.",
    )
    prestart: Optional[bool] = Field(
        default=None,
        description="Start each one-rank trial's process ahead, while the previous trial runs: it "
        "imports torch and torch.compile's stack, then waits for its configuration (still a "
        "fresh process per trial). Default: on with --device cuda; off on the CPU, where that "
        "import would share the cores with the trial being measured, and for task command, whose "
        "trial process imports no torch (the job imports its own).",
    )
    fork_server: Optional[bool] = Field(
        default=None,
        description="Fork each one-rank trial's process (and each confirmation and check "
        "process) from a server that imported torch and torch.compile's stack once, never "
        "touching CUDA: a trial starts in milliseconds instead of paying those imports (seconds "
        "of CPU). Each fork is as alone as a fresh process: a session of its own, its "
        "environment, nothing carried from an earlier trial. Where it is on, prestart is not "
        "needed and is off. Default: off (opt-in while it is new); never for task command (the "
        "job imports its own).",
    )
    objective: ObjectiveName = Field(
        default="tokens_per_s",
        description=(
            "tokens_per_s: maximise tokens/s per GPU. pareto (task generate): an "
            "Optuna multi-objective study, tokens/s (maximised) against p99 time per output token "
            "(minimised); best.yaml keeps the fastest configuration within study.limits and lists "
            "the front."
        ),
    )
    limits: Optional[LimitsConfig] = Field(
        default=None,
        description=(
            "generate: latency limits (p99_tpot_ms, median_tpot_ms, ttft_ms); a trial past one "
            "is recorded over_limit with its numbers and never chosen."
        ),
    )
    drift: DriftConfig = Field(
        default_factory=DriftConfig,
        description="generate: how far quantized outputs may "
        "drift from the unquantized model's (max_kl_nats, min_greedy_agreement).",
    )
    loss_check: LossCheckConfig = Field(
        default_factory=LossCheckConfig,
        description="train: the numerics check of fp8, fp16 and compressed-gradient trials "
        "against their bf16 reference (steps, min_learned, max_gap_nats).",
    )
    tracking: TrackingConfig = Field(
        default_factory=TrackingConfig,
        description="Experiment tracking of the trials: mlflow (tracking_uri, experiment), wandb "
        "(project, entity, mode, dir), flush_s. Off unless a tracker is named.",
    )
    train_tokens: Optional[float] = Field(
        default=None,
        ge=1,
        le=MAX_TRAIN_TOKENS,
        description="Tokens of the full training run this search tunes (e.g. 2e12): the report "
        "projects its hours and GPU-hours at the baseline and at the chosen configuration, and "
        "what the search cost against the saving (autotune report --train-tokens overrides it).",
    )
    compile_cache: Optional[str] = Field(
        default=None,
        description=(
            "A folder for torch.compile's caches (Inductor, Triton) that outlives one study: a "
            "second study of the same model on the same GPU starts warm. Each GPU model and torch "
            "version gets its own subfolder. Default: the study's own inductor-cache/."
        ),
    )

    @field_validator("storage")
    @classmethod
    def _remember_credentials(cls, value: str | None) -> str | None:
        from autotune.redact import remember

        remember(value)  # masked wherever it would be shown from now on
        return value
