"""best.yaml, the file users keep: its schema (BestFile, a typed class a section), its reader
(read_best: validated, older layouts upgraded, returned typed as Best) and the check's write-back
(record_check_baseline). check and export read it from here; the search writes it (search/best.py).
Nothing here imports the search, Optuna or user code at import time."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Optional, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
    model_validator,
)

from autotune import knobs as catalogue
from autotune import yamlio
from autotune.documents import base_dir as base_dir_of
from autotune.documents.best_knobs import check_batch, check_knobs, check_own, user_knobs
from autotune.documents.digest import baseline_digest
from autotune.documents.digest import knob_set as knob_set  # read from here by search/best.py
from autotune.documents.digest import measured_digest as measured_digest
from autotune.errors import ConfigError
from autotune.protocol import Knobs

if TYPE_CHECKING:
    from collections.abc import Callable

    from autotune.config import ModelConfig, WorkloadConfig
    from autotune.config.command import CommandConfig, Scalar

# best.yaml's layout. 1: before it was versioned (2026-12-01 and earlier; every knob of its release
# listed); 2: schema_version and knob_set (the hash of the knob names written) added; 3: base_dir
# relative to best.yaml's folder (an absolute one, as 2 wrote, reads as before) and a command's
# secrets masked, so that an older release refuses a file whose relative base_dir it would resolve
# against its working folder; 4: `measured` covers all that decides what runs and how it is judged
# (documents/digest.py: base_dir, apply.env, the device, the name, the baseline's numbers too), so
# that a check refuses to compare an earlier file's baseline (its digest covers less); 5: a relative
# base_dir read against best.yaml's folder as named, no link resolved (documents/base_dir.py: a
# trials/ linked to a scratch disk stored the way from the link's target; a copy committed at the
# same depth measured what lay that way from the project), so that an older release refuses it.
# Older files are upgraded on read (read_best): the knobs added since, at their defaults; a 3 or 4
# keeps its base_dir's reading, and its schema when a check writes it back (base_dir.kept_schema).
SCHEMA_VERSION = 5


def write_yaml(path: Path, doc: dict[str, Any]) -> None:
    """best.yaml for people (no anchors), written atomically (yamlio.write)."""
    yamlio.write(path, doc)


class _Part(BaseModel):
    """A section of best.yaml: the keys its readers rely on checked and typed, the others kept.
    Dumped (model_dump(exclude_unset=True)) it is the section as read: its keys in their order, then
    those given since."""

    model_config = ConfigDict(extra="allow", strict=True, allow_inf_nan=False)

    _order: tuple[str, ...] = PrivateAttr(default=())

    @model_validator(mode="wrap")
    @classmethod
    def _keep_order(cls, data: Any, handler: ModelWrapValidatorHandler[Self]) -> Self:
        part = handler(data)
        if isinstance(data, dict):
            part._order = tuple(data)
        return part

    @model_serializer(mode="wrap")
    def _in_order(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        dumped: dict[str, Any] = handler(self)
        read = [k for k in self._order if k in dumped]
        return {k: dumped[k] for k in [*read, *(k for k in dumped if k not in self._order)]}


class Chosen(_Part):
    """The chosen trial, and why (confirmation, else the highest search value)."""

    trial: int = Field(ge=0)
    why: Optional[str] = None
    # the knob values it ran beyond the user's list (search/edges.py): absent where none
    beyond_list: Optional[dict[str, int]] = None


_Amount = Optional[Annotated[float, Field(ge=0)]]  # None: not measured (no GPU, no baseline)


class Metrics(_Part):
    """The chosen configuration's numbers: each one search/best.py writes typed (export prints them,
    check compares with them); another kept as it is."""

    tokens_per_s_per_gpu: float = Field(gt=0)
    tpot_ms_median: Optional[float] = Field(default=None, gt=0)  # generate: the check gates it too
    tokens_per_s: _Amount = None
    search_tokens_per_s_per_gpu: _Amount = None
    mfu: _Amount = None
    peak_mem_gib: _Amount = None
    peak_mem_kind: Optional[str] = None
    step_time_median_s: _Amount = None
    step_time_spread_pct: _Amount = None
    speedup_vs_baseline: _Amount = None
    speedup_ci95: Optional[list[float]] = None
    speedup_within_noise: Optional[bool] = None
    ttft_ms: _Amount = None
    tpot_ms_p99: _Amount = None
    roofline_share: _Amount = None
    tokens_per_joule: _Amount = None
    padding_pct: _Amount = None


class Fingerprint(_Part):
    """Where the numbers were measured (hardware.fingerprint); the versions beside them (driver,
    cuda, cudnn, torch, nccl: a string or a number as the library says it) are kept untyped."""

    device: Literal["cuda", "cpu"]
    gpu_model: str = Field(min_length=1)


class Measurement(_Part):
    """How the chosen trial was measured: steps, time limit (raw step times, timer: kept)."""

    warmup_steps: int = Field(ge=1)
    measure_steps: int = Field(ge=2)
    trial_timeout_min: Optional[float] = Field(default=None, gt=0, le=10_080)


class Candidate(_Part):
    """One configuration of the search's confirmation: its trial and per-process tokens/s."""

    trial: int = Field(ge=0)
    samples: list[Annotated[float, Field(gt=0)]]


class CheckBaseline(_Part):
    """What check --update / --reset-baseline recorded (record_check_baseline)."""

    tokens_per_s_samples: list[Annotated[float, Field(gt=0)]] = Field(min_length=1)
    recorded_at: str
    fingerprint: Optional[dict[str, Any]] = None  # where (hardware.fingerprint of the repeats)
    measured: Optional[str] = None  # measured_digest of what these samples measured
    # generate: per-process median TPOT
    tpot_ms_samples: Optional[list[Annotated[float, Field(gt=0)]]] = None
    # the last --reset-baseline: the nightly series is read from then on
    series_from: Optional[str] = None


_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"


class Apply(_Part):
    """How to apply the configuration: its environment (knobs and notes kept untyped)."""

    # None: not given (export sets the environment knobs' variables, catalogue.env_of)
    env: Optional[
        dict[
            Annotated[str, Field(pattern=_ENV_NAME, max_length=256)],
            Annotated[str, Field(max_length=4096, pattern=r"^[^\x00]*$")],
        ]
    ] = None


class StudyRun(_Part):
    """The search behind the file: its storage (masked, search/storage.mask_url), its trials."""

    storage: Optional[str] = None
    trials_launched: Optional[int] = None
    trials_completed: Optional[int] = None


class Upgraded(BaseModel):
    """What read_best filled in of an older release's best.yaml (_upgrade; check prints it): never
    written back."""

    from_schema: int
    knobs_added: dict[str, Any]


class Layout(_Part):
    """What every best.yaml has, a command study's written by hand included (export reads one):
    its schema and its knobs, typed (check_layout)."""

    schema_version: int = Field(default=1, ge=1)  # 1: written before best.yaml was versioned
    # every knob of the task, and a command's own: a value's type is its knob's (read_best checks
    # each against its catalogue entry or its values; None: not acting in this trial)
    knobs: Knobs


class BestFile(Layout):
    """best.yaml, section by section: write_best validates what it writes with it, and `autotune
    check` what it reads (read_best), before anything is measured. Sections not listed are kept as
    they are; record_check_baseline writes it back in the order read."""

    knob_set: Optional[str] = None  # the hash of the knob names written (knob_set)
    name: str = Field(min_length=1)
    chosen: Chosen
    metrics: Metrics
    fingerprint: Fingerprint
    # The YAML's own sections, kept as written (measured_digest hashes them so): read_best types
    # them as autotune.config does (Best.model, Best.workload, Best.command).
    model: Optional[dict[str, Any]]  # None: task command (the command builds its model)
    # task command: the command section (config.CommandConfig)
    command: Optional[dict[str, Any]] = None
    workload: dict[str, Any]
    measurement: Measurement
    confirmation: Optional[list[Candidate]] = None
    check_baseline: Optional[CheckBaseline] = None
    base_dir: Optional[str] = None  # relative to best.yaml's folder (absolute: Best.base_dir)
    apply: Optional[Apply] = None
    baseline: Optional[dict[str, Any]] = None  # the baseline trial: number, knobs, tokens/s
    # an objective of several values: the front of the completed trials (its keys the objective's)
    front: Optional[list[dict[str, Any]]] = None
    measured: Optional[str] = None  # measured_digest of what the search's numbers measured
    study: Optional[StudyRun] = None
    # said by read_best (_upgrade), never read from the file nor written to it
    upgraded: Optional[Upgraded] = Field(default=None, exclude=True)

    def digest(self) -> str:
        """measured_digest of the configuration and the search's numbers as this file says them."""
        return measured_digest(self.model_dump(exclude_unset=True))

    def baseline_digest(self) -> str | None:
        """baseline_digest of the configuration and check_baseline's numbers as this file says them
        (None: no check baseline)."""
        if self.check_baseline is None:
            return None
        return baseline_digest(
            self.model_dump(exclude_unset=True), self.check_baseline.model_dump()
        )


@dataclass(frozen=True)
class Best:
    """best.yaml as read_best read it: the document, each section typed (doc; an older layout
    upgraded), and its model, workload and command as the YAML schema types them (autotune.config;
    the schema only: the model's code is not probed, that is job.validate's pass)."""

    doc: BestFile
    model: ModelConfig | None  # None: task command (the command builds its model)
    workload: WorkloadConfig
    command: CommandConfig | None  # task command: the command section
    base_dir: str | None  # the study YAML's folder, absolute (base_dir.absolute)


def read_best(path: Path, check_workload: Callable[[WorkloadConfig], None]) -> Best:
    """A best.yaml written by `autotune search`, every part check uses validated (the model and
    workload as the YAML schema says, each knob as its catalogue entry says, the workload against
    its task: check_workload, tasks.check_workload for its readers) and typed; ConfigError (exit 2)
    naming the bad part."""
    if not path.is_file():
        raise ConfigError(missing_best(path))
    raw = yamlio.read(path, "BEST_YAML")
    if not isinstance(raw, dict) or "knobs" not in raw or "fingerprint" not in raw:
        raise ConfigError(
            f"{path}: knobs, fingerprint: missing; is this a best.yaml written by autotune search?"
        )
    best = _validated(path, raw, check_workload)
    _upgrade(path, best)
    knobs = best.doc.knobs
    check_knobs(path, knobs, best.workload.task, user_knobs(best.command))
    if "micro_batch_size" in knobs:
        check_batch(path, knobs, best.workload)
    return best


def missing_best(path: Path) -> str:
    """What a missing best.yaml means and what to run: beside a study, its search has not written
    it yet (still running, or stopped before it did: the study keeps every trial and sample)."""
    folder = path.parent
    if any((folder / name).exists() for name in ("study.db", "runs")):
        return (
            f"BEST_YAML: no such file: {path}; the study in {folder} has not written it yet (its "
            "search is still running, or stopped before it did): run the same `autotune search` "
            f"command to finish and write it; `autotune report {folder}` shows where it stands"
        )
    return (
        f"BEST_YAML: no such file: {path}; `autotune search MODEL_YAML` writes "
        "trials/<name>/best.yaml"
    )


def _validated(
    path: Path, raw: dict[str, Any], check_workload: Callable[[WorkloadConfig], None]
) -> Best:
    """The document (BestFile) and its YAML sections (autotune.config's classes: the schema, no user
    code probed) validated; ConfigError naming the first bad part."""
    from autotune.config import ModelConfig, WorkloadConfig
    from autotune.config.command import CommandConfig
    from autotune.config.load import describe_error

    try:
        # upgraded: said by this read, never by the file
        doc = BestFile.model_validate({k: v for k, v in raw.items() if k != "upgraded"})
        base_dir = base_dir_of.absolute(path, doc.base_dir, doc.schema_version)
        model = None
        if doc.model is not None:
            model = ModelConfig.model_validate(doc.model)
        command = None if doc.command is None else CommandConfig.model_validate(doc.command)
        workload = WorkloadConfig.model_validate(doc.workload)
    except ValidationError as err:
        section = next(
            (k for k in ("model", "workload") if err.title == f"{k.capitalize()}Config"), None
        )
        raise ConfigError(f"{path}: {describe_error(err, section)}") from None
    try:
        check_workload(workload)  # the workload against its task (the schema reads it alone)
    except ValueError as err:
        raise ConfigError(f"{path}: {err}") from None
    return Best(doc, model, workload, command, base_dir)


def _old_behaviour(knobs: Knobs, missing: list[str], world: int) -> dict[str, Any]:
    """The missing knobs' values a search would have written: the default, or None where the knob
    cannot act (one rank: no parallel; an only_with knob whose owner has another value), as
    Space.knobs decides."""
    full = {**{n: catalogue.BY_NAME[n].default for n in missing}, **knobs}
    if world == 1 and "parallel" in missing:
        full["parallel"] = None
    for k in catalogue.CATALOGUE:
        if (
            k.name in missing
            and k.only_with
            and (full.get(k.only_with[0]) is None or not k.acts_with(full[k.only_with[0]]))
        ):
            full[k.name] = None
    return {n: full[n] for n in missing}


def _upgrade(path: Path, best: Best) -> None:
    """A best.yaml of an older release, read as this one: the knobs added since are filled in as a
    search would have written them (_old_behaviour), and doc.upgraded says which (check prints it).
    A knob this release does not know is left for best_knobs.check_knobs to refuse."""
    doc, version = best.doc, best.doc.schema_version
    check_schema(path, version)
    task, knobs = best.workload.task, doc.knobs
    names = [k.name for k in catalogue.CATALOGUE if task in k.tasks] + list(
        user_knobs(best.command)
    )
    missing = [n for n in names if n not in knobs]
    intact = version == 1 or doc.knob_set == knob_set(knobs)  # version 1 wrote no knob_set
    if missing and intact and not set(knobs) - set(names):
        added = _old_behaviour(knobs, missing, best.workload.world_size)
        doc.knobs = {n: {**knobs, **added}[n] for n in names}
        doc.upgraded = Upgraded(from_schema=version, knobs_added=added)


def check_schema(path: Path, version: int) -> None:
    """A schema this release reads (up to SCHEMA_VERSION); ConfigError naming schema_version."""
    if version > SCHEMA_VERSION:
        raise ConfigError(
            f"{path}: schema_version: {version!r} is newer than this autotune reads (up to "
            f"{SCHEMA_VERSION}); upgrade autotune"
        )


def check_layout(path: Path, raw: dict[str, Any], own: dict[str, list[Scalar]]) -> None:
    """A best.yaml that read_best does not read whole (a command study's, export's) checked as it
    checks every file: its schema_version and knobs typed (Layout), the schema one this release
    reads, a command's own knob one of its values; ConfigError in read_best's words."""
    from autotune.config.load import describe_error

    try:
        layout = Layout.model_validate({k: raw[k] for k in ("schema_version", "knobs") if k in raw})
    except ValidationError as err:
        raise ConfigError(f"{path}: {describe_error(err, None)}") from None
    check_schema(path, layout.schema_version)
    check_own(path, layout.knobs, {n: v for n, v in own.items() if n in layout.knobs})


def record_check_baseline(
    path: Path,
    doc: BestFile,
    samples: list[float],
    recorded_at: str,
    fingerprint: dict[str, Any],
    tpot_ms: list[float] | None = None,
    reset: bool = False,
) -> None:
    """check --update / --reset-baseline: these samples become the recorded baseline in best.yaml
    (atomically); doc is best.yaml as read_best read it, written back as read (its keys in their
    order, the unknown ones too) in this release's layout: an upgraded file keeps its filled-in
    knobs, not the note, and a relative base_dir of schema 3 or 4 its schema (kept_schema).
    reset: the nightly series starts again from here (an --update keeps the series: a slow drift
    absorbed by nightly updates is what the series is read for)."""
    recorded = doc.check_baseline
    since = recorded_at if reset else recorded.series_from if recorded else None
    numbers = {
        "tokens_per_s_samples": samples,
        **({"tpot_ms_samples": tpot_ms} if tpot_ms else {}),
        **({"series_from": since} if since else {}),
    }
    measured = baseline_digest(doc.model_dump(exclude_unset=True), numbers)
    baseline = CheckBaseline.model_validate(
        {
            "tokens_per_s_samples": samples,
            "recorded_at": recorded_at,
            "fingerprint": fingerprint,
            "measured": measured,
            **{k: v for k, v in numbers.items() if k != "tokens_per_s_samples"},
        }
    )
    version = base_dir_of.kept_schema(doc.schema_version, doc.base_dir, SCHEMA_VERSION)
    update = {"schema_version": version, "knob_set": knob_set(doc.knobs)}
    written = doc.model_copy(update={**update, "check_baseline": baseline})
    write_yaml(path, written.model_dump(exclude_unset=True))
