"""The Optuna study: storage, sampler, resume, the objective that launches trials, and best.yaml."""

from __future__ import annotations

import datetime as dt
import os
import queue
import random
import signal
import socket
import threading
import statistics
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
import yaml
from optuna.trial import TrialState

from autotune import metrics
from autotune.config import Config
from autotune.errors import ConfigError, StudyError
from autotune.hardware import default_device, detect
from autotune.runner import STATUSES, model_spec, omp_env, record_of, run_trial, trial_spec
from autotune.space import ResolvedSpace, config_fingerprint, resolve_space

# Failed trials with these statuses did not measure their configuration: it may be launched again.
RERUN_STATUSES = ("interrupted", "worker_lost")
# Trials recorded without a launch; they never count toward the budget.
NOT_LAUNCHED = ("duplicate", "skipped")
# Outcomes that say the configuration itself cannot run (not the machine): stored as PRUNED, which Optuna's
# TPE sampler counts among the bad trials and steers away from; it ignores FAIL trials (seen on 2x H200: with
# NCCL refusing NCCL_ALGO=Tree, 6 of 16 DDP trials went to Tree while refusals were FAIL).
CONFIG_FAILURES = ("oom", "invalid_config", "nonfinite_loss")


class _NotLaunched(Exception):
    """A trial recorded without launching (duplicate, budget taken): stored as FAIL, not counted."""


class _TrialFailed(Exception):
    """A launched trial ended without a measurement for a reason outside its configuration (crash, timeout):
    stored as FAIL with its reason. Configuration failures end PRUNED (CONFIG_FAILURES)."""


class Observer:
    """What a search reports while it runs; the CLI's Rich view implements it. Methods are no-ops here."""

    def started(self, info: dict[str, Any]) -> None: ...

    def trial_started(self, number: int, index: int, knobs: dict[str, Any]) -> None: ...

    def poll(self) -> None: ...

    def trial_finished(self, record: dict[str, Any], history: History) -> None: ...

    def confirm_started(self, candidates: list[int], rounds: int, kept: int = 0) -> None: ...

    def confirm_sample(self, number: int, round_: int, value: float | None, status: str) -> None: ...


def mask_url(url: str) -> str:
    """A storage URL with its password hidden (postgresql://user:***@host/db)."""
    try:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return url


def storage_of(url: str) -> optuna.storages.BaseStorage:
    """An Optuna storage from a URL; journal:PATH is Optuna's JournalStorage on a file (shared file systems)."""
    if url.startswith("journal:"):
        path = Path(url.removeprefix("journal:"))
        path.parent.mkdir(parents=True, exist_ok=True)
        return optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(path)))
    sqlite = url.startswith("sqlite")
    for attempt in range(5):  # workers started together race to create the schema of a new database
        try:
            storage = optuna.storages.RDBStorage(
                url, engine_kwargs={"connect_args": {"timeout": 60}} if sqlite else None)
            if sqlite:
                _serialize_sqlite(storage)
            return storage
        except Exception as err:
            if attempt == 4 or not any(w in str(err) for w in ("UNIQUE", "unique", "already exists", "locked")):
                raise
            time.sleep(0.5 + random.random())
    raise AssertionError("unreachable")


def _serialize_sqlite(storage: optuna.storages.RDBStorage) -> None:
    """Make every SQLite transaction BEGIN IMMEDIATE (SQLAlchemy's pysqlite recipe).

    pysqlite's deferred transactions let two workers (threads or processes) both read a WAITING trial
    before either writes, so both run it; taking the write lock at BEGIN makes the pop atomic.
    """
    from sqlalchemy import event

    engine = storage.engine

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # let SQLAlchemy, not pysqlite, emit BEGIN

    @event.listens_for(engine, "begin")
    def _begin(connection: Any) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    engine.dispose()  # connections opened before the listeners existed


def heartbeat_interval(grace_s: float) -> float:
    return min(10.0, grace_s / 3)


def reap_lost_workers(study: optuna.Study, grace_s: float, own: int | None = None) -> list[int]:
    """Fail RUNNING trials whose worker stopped sending heartbeats (kill -9, node loss) as worker_lost.

    Written here rather than using Optuna's heartbeat because JournalStorage has none; this works the
    same on SQLite, PostgreSQL and journal files. A lost trial's configuration is measured again.
    """
    now = time.time()
    lost = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if t.number == own:
            continue
        beat = t.user_attrs.get("heartbeat") or (t.datetime_start.timestamp() if t.datetime_start else now)
        if now - beat > grace_s or _dead_here(t.user_attrs.get("worker")):
            try:
                optuna.trial.Trial(study, t._trial_id).set_user_attr("status", "worker_lost")
                study.tell(t.number, state=TrialState.FAIL)
                lost.append(t.number)
            except Exception:  # another worker reaped or finished it first
                continue
    return lost


def worker_id() -> dict[str, Any]:
    return {"host": socket.gethostname(), "pid": os.getpid()}


def _dead_here(worker: dict[str, Any] | None) -> bool:
    """A worker on this host whose process is gone (found at once, no need to wait for the grace)."""
    if not worker or worker.get("host") != socket.gethostname() or worker.get("pid") == os.getpid():
        return False
    try:
        os.kill(int(worker["pid"]), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, ValueError, TypeError):
        return False
    return False


def _key(params: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(params.items()))


@dataclass
class History:
    """What the study's storage says has been measured: read fresh before each decision."""

    seen: dict[tuple[tuple[str, Any], ...], optuna.trial.FrozenTrial] = field(default_factory=dict)
    ooms: list[optuna.trial.FrozenTrial] = field(default_factory=list)
    launched: int = 0
    completed: list[optuna.trial.FrozenTrial] = field(default_factory=list)
    running: dict[tuple[tuple[str, Any], ...], optuna.trial.FrozenTrial] = field(default_factory=dict)

    @classmethod
    def of(cls, study: optuna.Study, own: int | None = None) -> History:
        """own: this worker's trial. `running` holds other workers' trials that have claimed their
        configuration (passed this check) or were asked before this one: either way this one yields."""
        h = cls()
        if own is not None:
            for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
                a = t.user_attrs
                if (t.number != own and "knobs" in a and a.get("status") not in NOT_LAUNCHED
                        and (t.number < own or a.get("claimed"))):
                    h.running.setdefault(_key(a["knobs"]), t)
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED)):
            status = t.user_attrs.get("status")
            if status not in STATUSES:  # duplicates, interrupted, lost workers: nothing measured
                continue
            h.seen.setdefault(_key(t.user_attrs.get("knobs") or t.params), t)
            if t.user_attrs.get("predicted"):
                continue
            h.launched += 1
            if status == "oom":
                h.ooms.append(t)
            if t.state == TrialState.COMPLETE:
                h.completed.append(t)
        return h

    def oom_bound(self, knobs: dict[str, Any]) -> optuna.trial.FrozenTrial | None:
        """A trial that ran out of memory with the same knobs and a micro-batch no larger than this one's."""
        for t in self.ooms:
            other = t.user_attrs["knobs"]
            same = all(other[k] == v for k, v in knobs.items() if k not in ("micro_batch_size", "grad_accum_steps"))
            if same and knobs["micro_batch_size"] >= other["micro_batch_size"]:
                return t
        return None

    def best(self) -> optuna.trial.FrozenTrial | None:
        return max(self.completed, key=lambda t: t.value, default=None)


def make_sampler(name: str, seed: int, budget: int) -> optuna.samplers.BaseSampler:
    """The Optuna sampler named in the YAML; every knob is categorical.

    grid: every point is enqueued (see run_search) and drawn in a seeded random order; Optuna's
    GridSampler is not used because it does not account for enqueued trials (the baseline).
    """
    startup = max(3, min(10, budget // 3))  # random exploration first, then the model of the sampler
    if name == "tpe":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.samplers.TPESampler(seed=seed, multivariate=True, n_startup_trials=startup)
    if name == "gp":
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=startup)
    return optuna.samplers.RandomSampler(seed=seed)


@dataclass
class SearchResult:
    study_dir: Path
    storage: str
    history: History
    best: optuna.trial.FrozenTrial | None
    baseline: optuna.trial.FrozenTrial | None
    best_yaml: Path | None
    new_trials: int
    stop_reason: str
    confirmation: dict[str, Any] | None = None

    @property
    def chosen_number(self) -> int | None:
        if self.confirmation:
            return self.confirmation["chosen"]
        return self.best.number if self.best else None


def _archive(study_dir: Path, storage: Any, name: str, default_storage: bool) -> Path | None:
    """--fresh: move the old study aside (nothing is deleted); return where it went."""
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    target = study_dir.with_name(f"{study_dir.name}.archived-{stamp}")
    if not default_storage:
        try:
            optuna.copy_study(from_study_name=name, from_storage=storage, to_storage=storage,
                              to_study_name=f"{name}.archived-{stamp}")
            optuna.delete_study(study_name=name, storage=storage)
        except KeyError:
            pass  # no such study yet
    if study_dir.exists():
        study_dir.rename(target)
        return target
    return None


def open_study(cfg: Config, *, out_root: Path, device: str, fresh: bool) -> tuple[optuna.Study, Path, str]:
    """Create or resume the study; refuse one made from a different model, workload, space or device."""
    study_dir = out_root / cfg.name
    default_storage = cfg.study.storage is None
    url = cfg.study.storage or f"sqlite:///{(study_dir / 'study.db').resolve()}"
    if fresh and default_storage:
        _archive(study_dir, None, cfg.name, default_storage)  # moves study.db aside with the folder
    if default_storage:
        study_dir.mkdir(parents=True, exist_ok=True)
    try:
        storage = storage_of(url)
    except Exception as err:
        raise StudyError(f"study.storage: cannot open {mask_url(url)}: {err}") from None
    if fresh and not default_storage:
        _archive(study_dir, storage, cfg.name, default_storage)  # copies the study aside in its storage
    want = {"config_fingerprint": config_fingerprint(cfg), "device": device}
    if not fresh:
        try:
            old = optuna.load_study(study_name=cfg.name, storage=storage)
        except KeyError:
            old = None
        except Exception as err:
            raise StudyError(f"study.storage: cannot open {mask_url(url)}: {err}") from None
        if old is not None and old.get_trials(deepcopy=False):
            for key, value in want.items():
                have = old.user_attrs.get(key)
                if have != value:
                    what = "model, workload or space" if key == "config_fingerprint" else f"device ({have})"
                    raise StudyError(
                        f"name: study {cfg.name!r} exists with a different {what}; "
                        "run with --fresh (the old study is archived, not deleted) or choose another name"
                    )
    study_dir.mkdir(parents=True, exist_ok=True)
    study = optuna.create_study(study_name=cfg.name, storage=storage, direction="maximize", load_if_exists=True)
    for key, value in want.items():
        study.set_user_attr(key, value)
    config = cfg.model_dump(mode="json")
    config["study"]["storage"] = mask_url(url)  # credentials are never stored
    study.set_user_attr("config", config)
    return study, study_dir, url


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
) -> SearchResult:
    """Run (or resume) the study until `trials` trials were launched, the timeout, or the space is exhausted.

    gpus: run one trial per listed GPU at once (each pinned with CUDA_VISIBLE_DEVICES); on the CPU the
    list only sets how many trials run at once.
    """
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # our own view reports trials
    if storage is not None:
        cfg = cfg.model_copy(update={"study": cfg.study.model_copy(update={"storage": storage})})
    device = device or default_device()
    space = resolve_space(cfg, device)
    world = cfg.workload.world_size // cfg.workload.nnodes  # ranks of a trial on this node
    if device == "cuda":
        visible = len(detect()["gpus"])
        if not visible:
            raise ConfigError("--device: cuda asked for, but pynvml sees no NVIDIA GPU; use --device cpu")
        if world > (len(gpus) if gpus else visible):
            raise ConfigError(f"workload.world_size: {cfg.workload.world_size} needs {world} GPUs on this node a "
                              f"trial, but {len(gpus) if gpus else visible} are available; lower world_size or list more --gpus")
    if gpus and len(gpus) % world:
        raise ConfigError(f"--gpus: {len(gpus)} GPUs cannot be split into trials of {world} (workload.world_size); "
                          f"list a multiple of {world}")
    # Each trial takes `world` GPUs of the list: --gpus 0,1,2,3 with world_size 2 runs trials on 0,1 and 2,3.
    groups = [",".join(gpus[i:i + world]) for i in range(0, len(gpus), world)] if gpus else None
    budget = trials or cfg.study.trials
    timeout_s = 60.0 * (timeout_min or cfg.study.timeout_min)
    observer = observer or Observer()

    study, study_dir, storage = open_study(cfg, out_root=out_root, device=device, fresh=fresh)
    grace = cfg.study.worker_grace_s
    reap_lost_workers(study, grace)
    study.sampler = make_sampler(cfg.study.sampler, cfg.study.seed, budget)
    model = model_spec(cfg.model)
    rng = random.Random(cfg.study.seed)
    points = space.points()
    order = [space.baseline]
    if cfg.study.sampler == "grid":
        order += rng.sample(points, len(points))
    _enqueue_unseen(study, space, order)
    new_trials = 0
    stop_reason = "budget reached"
    runs = study_dir / "runs"
    inductor_cache = (study_dir / "inductor-cache").resolve()

    def unseen(h: History) -> list[dict[str, Any]]:
        """Points neither measured nor being measured by another worker."""
        return [p for p in points if _key(space.knobs(p)) not in h.seen and _key(space.knobs(p)) not in h.running]

    def objective(trial: optuna.Trial) -> float:
        nonlocal new_trials
        params = space.suggest(trial)
        knobs = space.knobs(params)
        trial.set_user_attr("knobs", knobs)
        trial.set_user_attr("heartbeat", time.time())
        trial.set_user_attr("worker", worker_id())
        reap_lost_workers(study, grace, own=trial.number)
        h = History.of(study, own=trial.number)
        if h.launched + len(h.running) >= budget:  # other workers are measuring the rest of the budget
            trial.set_user_attr("status", "skipped")
            study.stop()
            raise _NotLaunched("budget taken by running trials")
        prev = h.seen.get(_key(knobs)) or h.running.get(_key(knobs))
        if prev is not None:
            trial.set_user_attr("status", "duplicate")
            trial.set_user_attr("duplicate_of", prev.number)
            left = unseen(h)
            if left:  # the sampler wants this region: measure its nearest unmeasured point next
                _enqueue_unseen(study, space, [space.nearest(params, left, rng)])
            else:  # every other point is measured or being measured elsewhere: this worker is done
                study.stop()
            raise _NotLaunched(f"same configuration as trial {prev.number}")
        if (bound := h.oom_bound(knobs)) is not None:
            reason = (f"predicted: needs at least the memory of trial {bound.number} "
                      f"(micro_batch_size {bound.user_attrs['knobs']['micro_batch_size']} ran out of memory)")
            record = {"number": trial.number, "knobs": knobs, "status": "oom", "reason": reason, "predicted": True}
            _store(trial, record)
            observer.trial_finished(record, h)
            raise optuna.TrialPruned(reason)  # not launched, not counted; the sampler learns from it

        trial.set_user_attr("claimed", True)  # other workers now leave this configuration to this one
        for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):  # a claim raced ours: lower number keeps it
            if t.number < trial.number and _key(t.user_attrs.get("knobs") or {}) == _key(knobs) \
                    and t.user_attrs.get("status") not in NOT_LAUNCHED:
                trial.set_user_attr("status", "duplicate")
                trial.set_user_attr("duplicate_of", t.number)
                raise _NotLaunched(f"same configuration as running trial {t.number}")
        slot = slots.get()  # a GPU list such as "0" or "2,3" (None: no --gpus)
        observer.trial_started(trial.number, h.launched + 1, knobs)
        spec = trial_spec(model, cfg.workload.model_dump(), knobs, device, cfg.base_dir)
        env = {"TORCHINDUCTOR_CACHE_DIR": str(inductor_cache), **space.env(knobs)}
        if slot is not None and device == "cuda":
            env["CUDA_VISIBLE_DEVICES"] = slot
        env.update(omp_env(n_jobs * world))  # trials and their ranks side by side
        trial.set_user_attr("gpu", slot)
        with spans_lock:
            spans[trial.number] = [time.time(), None]
        last_beat = [time.time()]

        def poll() -> None:
            observer.poll()
            if time.time() - last_beat[0] > heartbeat_interval(grace):
                last_beat[0] = time.time()
                trial.set_user_attr("heartbeat", last_beat[0])

        try:
            outcome = run_trial(spec, runs / f"{trial.number:04d}", timeout_s=60 * cfg.study.trial_timeout_min,
                                env=env, on_poll=poll, stop=stop,
                                gpu_index=int(slot.split(",")[0]) if slot is not None and device == "cuda" else None)
        except KeyboardInterrupt:
            stop.set()
            trial.set_user_attr("status", "interrupted")
            raise
        finally:
            slots.put(slot)
            with spans_lock:
                spans[trial.number][1] = time.time()
                start, end = spans[trial.number]
                overlapped = sorted(n for n, (s0, e0) in spans.items()
                                    if n != trial.number and s0 < end and (e0 is None or e0 > start))
        trial.set_user_attr("overlapped_with", overlapped)  # trials measured at the same time, on other GPUs
        new_trials += 1
        record = record_of(trial.number, knobs, outcome, model, cfg.workload.world_size)
        record["run_dir"] = str(runs / f"{trial.number:04d}")
        _store(trial, record)
        observer.trial_finished(record, History.of(study))
        if outcome.status in CONFIG_FAILURES:
            raise optuna.TrialPruned(f"{outcome.status}: {outcome.reason}")
        if outcome.status != "ok":
            raise _TrialFailed(f"{outcome.status}: {outcome.reason}")
        return record["metrics"]["tokens_per_s_per_gpu"]

    def stop_when_done(study: optuna.Study, _trial: optuna.trial.FrozenTrial) -> None:
        nonlocal stop_reason
        h = History.of(study)
        if h.launched >= budget:
            stop_reason = "budget reached"
            study.stop()
        elif not unseen(h):
            stop_reason = "space exhausted"
            study.stop()

    slots: queue.Queue[str | None] = queue.Queue()
    for slot in groups or [None]:
        slots.put(slot)
    n_jobs = len(groups) if groups else 1
    stop = threading.Event()
    spans: dict[int, list[float | None]] = {}  # trial -> [start, end]: which trials overlapped which
    spans_lock = threading.Lock()

    h = History.of(study)
    observer.started({"name": cfg.name, "device": device, "budget": budget, "done": h.launched,
                      "space_size": space.size, "sampler": cfg.study.sampler, "timeout_s": timeout_s,
                      "storage": mask_url(storage), "baseline": space.baseline})
    try:
        if h.launched >= budget:
            stop_reason = "budget already reached"
        elif not unseen(h):
            stop_reason = "space exhausted"
        else:
            t0 = dt.datetime.now()
            previous = None
            if n_jobs > 1 and threading.current_thread() is threading.main_thread():
                def on_sigint(signum: int, frame: Any) -> None:
                    stop.set()  # every thread ends its trial's process group, then the study stops
                    raise KeyboardInterrupt

                previous = signal.signal(signal.SIGINT, on_sigint)
            try:
                study.optimize(objective, timeout=timeout_s, n_jobs=n_jobs, catch=(_NotLaunched, _TrialFailed),
                               callbacks=[stop_when_done])
            finally:
                if previous is not None:
                    signal.signal(signal.SIGINT, previous)
            if (dt.datetime.now() - t0).total_seconds() >= timeout_s:
                stop_reason = "timeout"
        confirm(study, space, cfg, device=device, runs=runs, inductor_cache=inductor_cache, observer=observer)
    finally:  # also on Ctrl-C: what was measured is written out
        h = History.of(study)
        best_yaml = write_best(cfg, study, h, study_dir, storage, space) if h.completed else None
    return SearchResult(study_dir, storage, h, h.best(), baseline_trial(h, space), best_yaml, new_trials, stop_reason,
                        study.user_attrs.get("confirmation"))


def changed_knobs(knobs: dict[str, Any], baseline: dict[str, Any]) -> list[str]:
    """Knobs set differently from the baseline (derived grad_accum_steps not counted)."""
    return [k for k, v in knobs.items() if k != "grad_accum_steps" and baseline.get(k) != v]


def confirm(study: optuna.Study, space: ResolvedSpace, cfg: Config, *, device: str, runs: Path,
            inductor_cache: Path, observer: Observer) -> dict[str, Any] | None:
    """Re-measure the top configurations interleaved (A B C A B C ...), each in a fresh process, and choose.

    The choice is the best median of the confirmation samples; among configurations whose 95% intervals
    overlap the top one's, the one that changes fewest knobs from the baseline wins. Stored in the study
    (user attribute `confirmation`) after every sample: a resumed study does not confirm the same candidates
    again, and an interrupted confirmation goes on from the samples it kept.
    """
    top, rounds = cfg.study.confirm_top, cfg.study.confirm_rounds
    h = History.of(study)
    candidates = sorted(h.completed, key=lambda t: t.value, reverse=True)[:top]
    if len(candidates) < 2 or rounds < 1:
        return None
    numbers = [t.number for t in candidates]
    samples: dict[int, list[float]] = {n: [] for n in numbers}
    failures: dict[int, list[str]] = {n: [] for n in numbers}
    previous = study.user_attrs.get("confirmation")
    if previous and previous["candidates"] == numbers:  # an interrupted confirmation of the same top: go on from it
        if previous["rounds_done"] >= rounds:
            return previous
        for st in previous["stats"]:
            samples[st["trial"]], failures[st["trial"]] = list(st["samples"]), list(st["failures"])
    model = model_spec(cfg.model)
    base_knobs = space.knobs(space.baseline)

    def taken(n: int) -> int:  # confirmation runs of trial n so far, measured or failed
        return len(samples[n]) + len(failures[n])

    observer.confirm_started(numbers, rounds, sum(taken(n) for n in numbers))
    for r in range(min(taken(n) for n in numbers), rounds):
        for t in candidates:
            if taken(t.number) > r:  # measured in this round before the interruption
                continue
            knobs = t.user_attrs["knobs"]
            spec = trial_spec(model, cfg.workload.model_dump(), knobs, device, cfg.base_dir)
            env = {"TORCHINDUCTOR_CACHE_DIR": str(inductor_cache), **space.env(knobs)}
            outcome = run_trial(spec, runs / f"confirm-{t.number:04d}-{r}", timeout_s=60 * cfg.study.trial_timeout_min,
                                env=env, on_poll=observer.poll)
            value = None
            if outcome.status == "ok":
                value = record_of(t.number, knobs, outcome, model, cfg.workload.world_size)["metrics"]["tokens_per_s_per_gpu"]
                samples[t.number].append(value)
            else:
                failures[t.number].append(f"{outcome.status}: {outcome.reason.splitlines()[-1] if outcome.reason else ''}")
            # after every sample: an interruption keeps what was measured, and a resume goes on from there
            study.set_user_attr("confirmation", _choose(candidates, samples, failures, base_knobs,
                                                        min(taken(n) for n in numbers)))
            observer.confirm_sample(t.number, r, value, outcome.status)
    return study.user_attrs.get("confirmation")


def _choose(candidates: list[optuna.trial.FrozenTrial], samples: dict[int, list[float]],
            failures: dict[int, list[str]], base_knobs: dict[str, Any], rounds_done: int) -> dict[str, Any]:
    stats = {}
    for t in candidates:
        s = samples[t.number]
        changed = changed_knobs(t.user_attrs["knobs"], base_knobs)
        stats[t.number] = {
            "trial": t.number, "knobs": t.user_attrs["knobs"], "changed_knobs": changed, "samples": s,
            "search_value": t.value, "failures": failures[t.number],
            "median": statistics.median(s) if s else None,
            "ci95": list(metrics.median_interval(s)) if s else None,
        }
    measured = [st for st in stats.values() if st["median"] is not None]
    if not measured:
        return {"candidates": [t.number for t in candidates], "rounds_done": rounds_done, "chosen": candidates[0].number,
                "why": "no confirmation sample succeeded; the search's best is kept", "stats": list(stats.values())}
    top = max(measured, key=lambda st: st["median"])
    close = [st for st in measured if st["ci95"][1] >= top["ci95"][0]]  # intervals overlap the top one's
    chosen = min(close, key=lambda st: (len(st["changed_knobs"]), -st["median"]))
    if chosen is top:
        why = f"highest confirmed median ({top['median']:,.0f} tokens/s/GPU over {len(top['samples'])} processes)"
        if len(close) > 1:
            why += f"; within noise of trial(s) {', '.join(str(st['trial']) for st in close if st is not top)}, "                    "and it changes no more knobs from the baseline"
    else:
        why = (f"within the measured noise of trial {top['trial']} (confirmed median {top['median']:,.0f}, "
               f"95% interval {top['ci95'][0]:,.0f} to {top['ci95'][1]:,.0f}) and changes fewer knobs from the "
               f"baseline ({len(chosen['changed_knobs'])} against {len(top['changed_knobs'])})")
    return {"candidates": [t.number for t in candidates], "rounds_done": rounds_done, "chosen": chosen["trial"],
            "why": why, "stats": list(stats.values())}


def _store(trial: optuna.Trial, record: dict[str, Any]) -> None:
    """A trial's record becomes its Optuna user attributes (what report and check read back)."""
    for k, v in record.items():
        if k != "number":
            trial.set_user_attr(k, v)


def _enqueue_unseen(study: optuna.Study, space: ResolvedSpace, points: list[dict[str, Any]]) -> None:
    """Enqueue the points not yet measured and not already waiting (resume-safe, unlike skip_if_exists,
    which would also skip a point whose trial was interrupted)."""
    h = History.of(study)
    waiting = {_key(t.system_attrs.get("fixed_params", {}))
               for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING,))}
    for p in points:
        if _key(space.knobs(p)) not in h.seen and _key(p) not in waiting:
            study.enqueue_trial(p)
            waiting.add(_key(p))


def baseline_trial(h: History, space: ResolvedSpace) -> optuna.trial.FrozenTrial | None:
    key = _key(space.knobs(space.baseline))
    return next((t for t in h.completed if _key(t.user_attrs["knobs"]) == key), None)


def apply_notes(knobs: dict[str, Any], device: str) -> list[str]:
    """How to reproduce each knob's value in a training script (best.yaml's apply.notes)."""
    notes = {
        "fp32": "torch.backends.cuda.matmul.fp32_precision = 'ieee' (no TF32)",
        "tf32": "torch.backends.cuda.matmul.fp32_precision = 'tf32'",
        "bf16": f"with torch.autocast({device!r}, dtype=torch.bfloat16): forward and loss",
        "fp16": f"with torch.autocast({device!r}, dtype=torch.float16): forward and loss; torch.amp.GradScaler({device!r})",
        "fp8": "torchao.float8.convert_to_float8_training(model, config=Float8LinearConfig.from_recipe_name("
               f"{knobs.get('fp8_recipe')!r}), module_filter_fn=lambda m, fqn: fqn != 'head'); bf16 autocast",
    }
    out = [notes[knobs["precision"]]]
    mode = knobs["compile"]
    out.append("no torch.compile" if not mode else
               "model = torch.compile(model)" if mode in (True, "default") else f"model = torch.compile(model, mode={mode!r})")
    attention = knobs.get("attention", "auto")
    if attention == "eager":
        out.append("attention as softmax(QK^T)V, materialised")
    elif attention != "auto":
        from autotune.workloads.worker import SDPA_BACKENDS  # torch-free at import

        backend = SDPA_BACKENDS[attention]
        out.append(f"with torch.nn.attention.sdpa_kernel(SDPBackend.{backend}): forward")
    if knobs.get("pad_vocab_multiple"):
        out.append(f"pad embedding and head to a multiple of {knobs['pad_vocab_multiple']}; cut logits to the vocab before the loss")
    if knobs.get("activation_checkpointing", "none") != "none":
        which = "every block" if knobs["activation_checkpointing"] == "full" else "every other block"
        out.append(f"torch.utils.checkpoint.checkpoint(block, ..., use_reentrant=False) on {which}")
    if knobs.get("fused_optimizer"):
        out.append("torch.optim.AdamW(..., fused=True)")
    if knobs.get("parallel") == "ddp":
        out.append(f"DistributedDataParallel(model, bucket_cap_mb={knobs['bucket_cap_mb']}, gradient_as_bucket_view="
                   f"{knobs['gradient_as_bucket_view']}, static_graph={knobs['static_graph']}); no_sync() on all but the "
                   "last micro-batch of a step")
    elif knobs.get("parallel") == "fsdp":
        out.append(f"fully_shard(block, reshard_after_forward={knobs['reshard_after_forward']}) on every block, then on "
                   "the model, MixedPrecisionPolicy(param_dtype=<precision>, reduce_dtype=float32); "
                   "set_requires_gradient_sync(False) on all but the last micro-batch")
    if knobs.get("parallel"):
        out.append("launch: torchrun --nproc-per-node <GPUs> your_script.py, with apply.env set for every rank")
    return out


class _PlainDumper(yaml.SafeDumper):
    """Safe YAML without anchors/aliases: best.yaml is read by people."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def write_yaml(path: Path, doc: dict[str, Any]) -> None:
    """Write YAML for people (no anchors) atomically: a reader never sees a half-written file."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(yaml.dump(doc, Dumper=_PlainDumper, sort_keys=False))
    tmp.replace(path)


def current_confirmation(study: optuna.Study, completed: list[optuna.trial.FrozenTrial]) -> dict[str, Any] | None:
    """The study's stored confirmation, or None when trials measured since then changed the top it confirmed."""
    conf = study.user_attrs.get("confirmation")
    ranked = [t.number for t in sorted(completed, key=lambda t: t.value, reverse=True)]
    if conf and conf["candidates"] != ranked[: len(conf["candidates"])]:
        return None
    return conf


def write_best(cfg: Config, study: optuna.Study, h: History, study_dir: Path, storage: str,
               space: ResolvedSpace) -> Path:
    """trials/<name>/best.yaml: the best measured configuration, its metrics, where and how it was measured."""
    best = h.best()
    assert best is not None
    base = baseline_trial(h, space)
    conf = current_confirmation(study, h.completed)
    if conf:
        best = next(t for t in h.completed if t.number == conf["chosen"])
        chosen_stats = next(st for st in conf["stats"] if st["trial"] == best.number)
        why = f"confirmation ({conf['rounds_done']} interleaved rounds of the top {len(conf['candidates'])}): {conf['why']}"
    else:
        chosen_stats = None
        why = f"highest median tokens/s per GPU of {len(h.completed)} completed trials (not confirmed)"
    m = best.user_attrs["metrics"]
    knobs = best.user_attrs["knobs"]
    # With a confirmation, the confirmed median (several fresh processes) is the number; the search's
    # single measurement of the winner is kept beside it (it is the best of many, so optimistic).
    value = chosen_stats["median"] if chosen_stats and chosen_stats["median"] else best.value
    scale = value / best.value
    doc = {
        "name": cfg.name,
        "chosen": {"trial": best.number, "why": why},
        "knobs": knobs,
        "metrics": {
            "tokens_per_s_per_gpu": round(value, 1),
            "tokens_per_s": round(m["tokens_per_s"] * scale, 1),
            "search_tokens_per_s_per_gpu": round(best.value, 1),
            "mfu": None if m["mfu"] is None else round(m["mfu"] * scale, 4),
            "peak_mem_gib": round(m["peak_mem_gib"], 3),
            "peak_mem_kind": m["peak_mem_kind"],
            "step_time_median_s": m["step_time"]["median_s"],
            "step_time_spread_pct": round(m["step_time"]["spread_pct"], 2),
            "speedup_vs_baseline": round(value / base.value, 3) if base else None,
        },
        "confirmation": None if not conf else [
            {"trial": st["trial"], "changed_knobs": st["changed_knobs"], "median": st["median"],
             "ci95": st["ci95"], "samples": st["samples"], "search_value": st["search_value"], "failures": st["failures"]}
            for st in conf["stats"]],
        "baseline": {"trial": base.number if base else None, "knobs": base.user_attrs["knobs"] if base else None,
                     "tokens_per_s_per_gpu": round(base.value, 1) if base else None},
        "fingerprint": best.user_attrs["fingerprint"],
        "apply": {
            "env": space.env(knobs),
            "knobs": knobs,
            "notes": apply_notes(knobs, best.user_attrs["fingerprint"]["device"]),
        },
        "measurement": {
            "warmup_steps": cfg.workload.warmup_steps,
            "measure_steps": cfg.workload.measure_steps,
            "step_times_s": best.user_attrs["raw"]["step_times_s"],
            "timing": "CUDA events around each optimizer step" if best.user_attrs["fingerprint"]["device"] == "cuda"
            else "time.perf_counter around each optimizer step",
            "measured_at": best.datetime_complete.isoformat() if best.datetime_complete else None,
        },
        "model": cfg.model.model_dump(mode="json"),
        "base_dir": cfg.base_dir,
        "workload": cfg.workload.model_dump(mode="json"),
        "study": {"storage": mask_url(storage), "trials_launched": h.launched, "trials_completed": len(h.completed)},
    }
    path = study_dir / "best.yaml"
    write_yaml(path, doc)
    return path


__all__ = ["run_search", "open_study", "History", "Observer", "SearchResult", "mask_url"]
