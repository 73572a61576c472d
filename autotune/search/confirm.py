"""The confirmation: re-measure the top configurations interleaved in fresh processes, then choose
within noise."""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna

from autotune import metrics
from autotune.documents.record import TrialRecord
from autotune.launch.runner import Bench, measure
from autotune.protocol import Knobs, reason_line, with_loss_check
from autotune.search.history import History, value_of
from autotune.search.observer import Observer


def changed_knobs(knobs: Knobs, baseline: dict[str, Any]) -> list[str]:
    """Knobs set differently from the baseline (derived grad_accum_steps not counted)."""
    return [k for k, v in knobs.items() if k != "grad_accum_steps" and baseline.get(k) != v]


def confirm(
    study: optuna.Study,
    bench: Bench,
    *,
    top: int,
    rounds: int,
    base_knobs: Knobs,
    runs: Path,
    observer: Observer,
    measure_fn: Callable[..., TrialRecord] = measure,
) -> dict[str, Any] | None:
    """Re-measure the top configurations and the baseline interleaved (A B C base A B C base ...),
    each in a fresh process, and choose.

    The choice is the best median of the confirmation samples; among configurations whose 95%
    intervals overlap the top one's, the one that changes fewest knobs from the baseline wins. The
    baseline is re-measured in the same rounds (an arm of its own where it is not among the top), so
    the gain is a ratio of confirmed medians measured side by side. Stored in the study (user
    attribute `confirmation`) after every sample, with the rounds asked, the rounds done, whether
    it is complete, and each process's wall time: a resumed study does not confirm the same
    candidates again, and an interrupted confirmation goes on from the samples it kept. bench: the
    search's; the confirmation re-measures speed only (the numerics check was made once, in the
    search). measure_fn: measures one sample, the search's own measurement (run_search's; default
    runner.measure, a fresh process a sample).
    """
    h = History.of(study)
    candidates = h.ranked()[:top]
    if len(candidates) < 2 or rounds < 1:
        return None
    bench = dataclasses.replace(bench, params=with_loss_check(bench.params, None))
    numbers = [t.number for t in candidates]
    base = h.baseline if h.baseline is not None and h.baseline.number not in numbers else None
    arms = [*candidates, *([base] if base is not None else [])]
    kept = _kept(study.user_attrs.get("confirmation"), numbers, arms, rounds)
    if kept is None:  # this top was confirmed in full already
        previous: dict[str, Any] = study.user_attrs["confirmation"]
        return previous
    observer.confirm_started([t.number for t in arms], rounds, sum(map(kept.taken, kept.numbers)))
    for r in range(min(map(kept.taken, kept.numbers)), rounds):
        for t in arms:
            if kept.taken(t.number) > r:  # measured in this round before the interruption
                continue
            record = measure_fn(
                bench,
                t.user_attrs["knobs"],
                runs / f"confirm-{t.number:04d}-{r}",
                number=t.number,
                on_poll=observer.poll,
            )
            value = kept.add(t.number, record)
            # after every sample: an interruption keeps what was measured, and a resume goes on from
            # there
            done = min(map(kept.taken, kept.numbers))
            doc = choose(candidates, kept.samples, kept.failures, base_knobs, done)
            study.set_user_attr("confirmation", _stored(doc, kept, base, rounds))
            observer.confirm_sample(t.number, r, value, record.status)
    return study.user_attrs.get("confirmation")


@dataclasses.dataclass
class _Arms:
    """The confirmation's samples so far, by trial: measured values, failures, and each process's
    wall time and compile seconds (None where the record had none)."""

    numbers: list[int]
    samples: dict[int, list[float]]
    failures: dict[int, list[str]]
    walls: dict[int, list[float | None]]
    compiles: dict[int, list[float | None]]

    @classmethod
    def empty(cls, numbers: list[int]) -> _Arms:
        return cls(
            numbers,
            {n: [] for n in numbers},
            {n: [] for n in numbers},
            {n: [] for n in numbers},
            {n: [] for n in numbers},
        )

    def taken(self, n: int) -> int:
        """Confirmation runs of trial n so far, measured or failed."""
        return len(self.samples[n]) + len(self.failures[n])

    def add(self, n: int, record: TrialRecord) -> float | None:
        """One run's record kept; its tokens/s per GPU (None: it failed)."""
        self.walls[n].append(record.wall_s)
        self.compiles[n].append((record.phases_s or {}).get("compile"))
        if record.status != "ok":
            self.failures[n].append(f"{record.status}: {reason_line(record.reason)}")
            return None
        value = record.tokens_per_gpu
        assert value is not None  # an ok record has its metrics (runner.record_of)
        self.samples[n].append(value)
        return value


def _kept(
    previous: dict[str, Any] | None,
    numbers: list[int],
    arms: list[optuna.trial.FrozenTrial],
    rounds: int,
) -> _Arms | None:
    """What an interrupted confirmation of the same top kept (empty arms for a new one); None when
    it was complete."""
    every = [t.number for t in arms]
    kept = _Arms.empty(every)
    if not previous or previous.get("candidates") != numbers:
        return kept
    stored = [*previous["stats"], *([previous["baseline"]] if previous.get("baseline") else [])]
    for st in stored:
        if st["trial"] in kept.samples:
            kept.samples[st["trial"]] = list(st["samples"])
            kept.failures[st["trial"]] = list(st["failures"])
            runs = len(st["samples"]) + len(st["failures"])
            kept.walls[st["trial"]] = list(st.get("walls_s") or [None] * runs)
            kept.compiles[st["trial"]] = list(st.get("compile_s") or [None] * runs)
    if min(map(kept.taken, every)) >= rounds:
        return None
    return kept


def _stored(
    doc: dict[str, Any], kept: _Arms, base: optuna.trial.FrozenTrial | None, rounds: int
) -> dict[str, Any]:
    """The confirmation as the study stores it: the choice, the rounds asked and whether they were
    all done, each arm's wall times, and the baseline's own arm."""
    for st in doc["stats"]:
        st["walls_s"], st["compile_s"] = kept.walls[st["trial"]], kept.compiles[st["trial"]]
    doc.update(rounds=rounds, complete=doc["rounds_done"] >= rounds)
    if base is not None:
        n = base.number
        doc["baseline"] = {
            "trial": n,
            "knobs": base.user_attrs["knobs"],
            "samples": kept.samples[n],
            "failures": kept.failures[n],
            "walls_s": kept.walls[n],
            "compile_s": kept.compiles[n],
            "median": statistics.median(kept.samples[n]) if kept.samples[n] else None,
        }
    return doc


def choose(
    candidates: list[optuna.trial.FrozenTrial],
    samples: dict[int, list[float]],
    failures: dict[int, list[str]],
    base_knobs: Knobs,
    rounds_done: int,
) -> dict[str, Any]:
    """The confirmed choice: best median; within its noise, the fewest knobs changed from the
    baseline."""
    stats = {}
    for t in candidates:
        s = samples[t.number]
        stats[t.number] = {
            "trial": t.number,
            "knobs": t.user_attrs["knobs"],
            "changed_knobs": changed_knobs(t.user_attrs["knobs"], base_knobs),
            "samples": s,
            "search_value": value_of(t),
            "failures": failures[t.number],
            "median": statistics.median(s) if s else None,
        }
        # None where the samples bound nothing (metrics.unbounded), and why: never "0 to
        # 1,108,731,079,831"
        stats[t.number]["ci95"], stats[t.number]["ci95_why"] = metrics.bounded_interval(s)
    doc = {
        "candidates": [t.number for t in candidates],
        "rounds_done": rounds_done,
        "stats": list(stats.values()),
    }
    measured = [st for st in stats.values() if st["median"] is not None]
    if not measured:
        return {
            **doc,
            "chosen": candidates[0].number,
            "why": "no confirmation sample succeeded; the search's best is kept",
        }
    top = max(measured, key=lambda st: st["median"])
    # within noise: intervals that overlap the top one's; samples that bound nothing (fewer than 3,
    # or spread far apart: metrics.unbounded) have no interval, so they are never "within noise" of
    # anything, and the higher median decides
    close = [st for st in measured if st is top or _overlap(st, top)]
    chosen = min(close, key=lambda st: (len(st["changed_knobs"]), -st["median"]))
    if chosen is top:
        why = (
            f"highest confirmed median ({top['median']:,.0f} tokens/s/GPU over "
            f"{len(top['samples'])} processes)"
        )
        if len(close) > 1:
            why += (
                "; within noise of trial(s) "
                f"{', '.join(str(st['trial']) for st in close if st is not top)}, "
                "and it changes no more knobs from the baseline"
            )
    else:
        why = (
            f"within the measured noise of trial {top['trial']} (confirmed median "
            f"{top['median']:,.0f}, "
            f"95% interval {top['ci95'][0]:,.0f} to {top['ci95'][1]:,.0f}) and changes fewer "
            f"knobs from the baseline ({len(chosen['changed_knobs'])} against "
            f"{len(top['changed_knobs'])})"
        )
    return {**doc, "chosen": chosen["trial"], "why": why}


def _overlap(st: dict[str, Any], top: dict[str, Any]) -> bool:
    """Both intervals bound something and st's reaches the top one's."""
    return st["ci95"] is not None and top["ci95"] is not None and st["ci95"][1] >= top["ci95"][0]
