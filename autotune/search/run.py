"""A search from start to end: the study made or resumed (a warm start copied in), the loop run
until its budget, timeout or space ends it, the top configurations confirmed, and what was measured
written out (best.yaml), also when interrupted. The loop itself is search/loop.py."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import optuna

from autotune import paths
from autotune.config import Config
from autotune.documents import confirmation
from autotune.documents.confirmation import Confirmation
from autotune.documents.record import TrialRecord
from autotune.hardware import default_device
from autotune.launch import forkserver, prestart
from autotune.launch.runner import measure, preflight
from autotune.search import tracking, warm
from autotune.search.best import write_best
from autotune.search.confirm import confirm
from autotune.search.host import Watch
from autotune.search.loop import Search
from autotune.search.observer import Observer
from autotune.search.slots import gpu_groups
from autotune.search.storage import open_study
from autotune.space import ResolvedSpace, resolve_space
from autotune.study.history import History


@dataclass
class SearchResult:
    study_dir: Path
    storage: str
    history: History
    best_yaml: Path | None
    new_trials: int
    stop_reason: str
    # the study's confirmation (documents/confirmation.py; None: none ran)
    confirmation: Confirmation | None = None

    @property
    def best(self) -> optuna.trial.FrozenTrial | None:
        return self.history.best()

    @property
    def baseline(self) -> optuna.trial.FrozenTrial | None:
        return self.history.baseline

    @property
    def chosen_number(self) -> int | None:
        if self.confirmation:
            return self.confirmation.chosen
        return self.best.number if self.best else None


def run_search(
    cfg: Config,
    *,
    out_root: Path = Path("trials"),
    device: str | None = None,
    trials: int | None = None,
    timeout_min: float | None = None,
    fresh: bool = False,
    storage: str | None = None,
    gpus: list[str] | None = None,
    observer: Observer | None = None,
    warm_start_from: Path | None = None,
    space: ResolvedSpace | None = None,
    measure_fn: Callable[..., TrialRecord] = measure,
    watch: Watch | None = None,
) -> SearchResult:
    """Run (or resume) the study until `trials` trials were measured (history.MEASURED: failed and
    pruned ones are not counted, up to history.launch_cap launches), the timeout, or the space is
    exhausted; then confirm the top configurations and write best.yaml (also when interrupted).

    gpus: run one trial per listed GPU at once (each pinned with CUDA_VISIBLE_DEVICES); on the CPU
    the list only sets how many trials run at once. warm_start_from: another study's folder whose
    measured trials of this model start the study (search/warm.py). space: cfg's space as
    job.validate resolved it for `device` (resolved here when not given). measure_fn: how
    one configuration is measured, by the search and its confirmation alike (runner.measure's
    signature and TrialRecord; default runner.measure, a fresh process a trial); tests put a fake
    landscape there to run the whole loop in their own process. watch: samples the host's load and
    the other GPU processes around each measurement, as `check` does, and marks the trials and
    confirmation processes measured while disturbed (search/host.py); by default the host is watched
    around runner.measure's processes, and not around a measure_fn of the caller's.
    """
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # our own view reports trials
    if storage is not None:
        cfg = cfg.model_copy(update={"study": cfg.study.model_copy(update={"storage": storage})})
    preflight()
    # before the study is made
    tracker = tracking.start(cfg.study.tracking, cfg.name, out_root / cfg.name)
    device = device or default_device()
    space = space if space is not None else resolve_space(cfg, device)
    groups = gpu_groups(cfg, device, gpus)
    study, study_dir, url = _open(cfg, space, out_root, device, fresh, warm_start_from)
    budget = trials or cfg.study.trials
    if watch is None and measure_fn is measure:
        watch = Watch(device)
    search = Search(
        cfg,
        space,
        study,
        study_dir,
        device,
        groups,
        budget,
        observer or Observer(),
        measure_fn=measure_fn,
        watch=watch,
    )
    try:
        stop_reason = _search_and_confirm(
            search, 60.0 * (timeout_min or cfg.study.timeout_min), url, tracker
        )
    finally:  # also on Ctrl-C: what was measured is written out
        h, best_yaml = _write_out(search, study_dir, url, tracker)
    return SearchResult(
        study_dir,
        url,
        h,
        best_yaml,
        search.new_trials,
        stop_reason,
        confirmation.of(study),
    )


def _open(
    cfg: Config,
    space: ResolvedSpace,
    out_root: Path,
    device: str,
    fresh: bool,
    warm_start_from: Path | None,
) -> tuple[optuna.Study, Path, str]:
    """The study, made or resumed, its folder and storage URL; everything that can refuse the
    search (the compile cache's folder, the warm start's source) is checked before it is made."""
    if cfg.study.compile_cache:
        paths.writable_dir(Path(cfg.study.compile_cache), "study.compile_cache")
    source = None
    if warm_start_from is not None:
        source = warm.source_study(cfg, warm_start_from, device)
    baseline = space.knobs(space.baseline)
    study, study_dir, url = open_study(
        cfg, out_root=out_root, device=device, fresh=fresh, baseline=baseline
    )
    if source is not None:
        warm.copy_trials(study, space, source)
    return study, study_dir, url


def _search_and_confirm(
    search: Search, timeout_s: float, url: str, tracker: tracking.Tracker
) -> str:
    """Measure until the budget, the timeout or the space ends the search (its reason returned),
    then confirm the top configurations against the baseline."""
    stop_reason = search.optimize(timeout_s, url, tracker)
    confirm(
        search.study,
        search.bench,
        top=search.cfg.study.confirm_top,
        rounds=search.cfg.study.confirm_rounds,
        base_knobs=search.space.knobs(search.space.baseline),
        runs=search.runs,
        observer=search.observer,
        measure_fn=search.measure,
    )
    return stop_reason


def _write_out(
    search: Search, study_dir: Path, url: str, tracker: tracking.Tracker
) -> tuple[History, Path | None]:
    """What was measured, written out (best.yaml when a trial completed), also on Ctrl-C; the
    tracker closed (no wait when interrupted)."""
    prestart.dismiss_all()
    forkserver.close_all()
    h = History.of(search.study)
    best_yaml = None
    if h.completed:
        best_yaml = write_best(search.cfg, search.study, h, study_dir, url)
    tracker.close(wait=not isinstance(sys.exc_info()[1], KeyboardInterrupt))
    return h, best_yaml
