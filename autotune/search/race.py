"""The confirmation's race: which arms are still in it after a round, which configuration it
chooses, and the runner-up.

Racing (F-race, irace): every arm is measured once a round, interleaved; from round MIN_ROUNDS on,
an arm whose ratio to the leader has a 95% interval wholly below 1 is dropped, and further rounds
are spent only on the arms still tied with the leader, and on a lone winner until its own figure
has an interval (LEADER_SAMPLES). The baseline races as an arm like any other, changing no knob:
it may lead, its samples bound the gain, and once it separates from the leader it needs no more. A
fixed 3 x 3 confirmation spent nine fresh processes where two rounds settled every gap over about
4%.

Your setting (the arm that changes no knob) is kept wherever it is within noise of the fastest:
nothing measured beats it beyond the noise, and adopting it changes nothing. Otherwise, among the
arms within noise of the fastest and measured faster than your setting, the cheaper program is
chosen: no compile before per-block before whole-model, then the shorter compile its search trial
measured, then the fewest knobs changed from the baseline. The runner-up, the best other arm, is
always named with what it costs (issue 50: "#13 is 0.6% slower and compiles in 6 s instead of
131 s").
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from autotune import intervals
from autotune.documents.confirmation import Arm, RunnerUp

# A gap needs two samples a side before it has an interval (intervals.ratio_interval: two degrees of
# freedom, Student's t 4.30): with 1% process-to-process noise two rounds separate gaps over ~4%.
MIN_ROUNDS = 2
# the winner of a decided race is measured until its own figure has an interval
# (intervals.unbounded: three samples), which `check` later compares against
LEADER_SAMPLES = intervals.MIN_INTERVAL_SAMPLES
# the race's pooled noise decides from this many degrees of freedom (Student's t 3.18 at 3): the
# first round of four arms, each with its search trial, gives four
MIN_POOLED_DF = 3
# arms whose ratio to the leader lies within 1 +- this (95%) are as fast: the race has settled
TIE_BAND = 0.01
# compile seconds closer than this are the same cost (one process's start-up swings by seconds)
COMPILE_GRAIN_S = 10.0
# the cost order of programs: nothing compiled, per-block regions, the whole model
SCOPE_COST = {"none": 0, "block": 1, "model": 2}


def ratio(arm: list[float], leader: list[float]) -> tuple[float, list[float] | None]:
    """median(arm) / median(leader) and its 95% interval (None where it bounds nothing:
    intervals.unbounded)."""
    value = statistics.median(arm) / statistics.median(leader)
    ci = intervals.ratio_interval(arm, leader)
    why = intervals.unbounded(value, ci, len(arm) + len(leader))
    return value, None if why else list(ci)


def separated(arm: list[float], leader: list[float], spread: Spread | None = None) -> str | None:
    """Why `arm` is out of the race against `leader` (its ratio's 95% interval wholly below 1), or
    None while it is tied. spread: the race's pooled noise (pooled); without it the two arms' own
    (two samples a side at least)."""
    ci = pooled_interval(arm, leader, spread) if spread is not None else None
    if ci is None:
        if len(arm) < MIN_ROUNDS or len(leader) < MIN_ROUNDS:
            return None
        _, ci = ratio(arm, leader)
    if ci is None or ci[1] >= 1:
        return None
    value = statistics.median(arm) / statistics.median(leader)
    return (
        f"{(1 - value) * 100:.1f}% slower (ratio 95% interval {ci[0]:.3f} to {ci[1]:.3f}) "
        f"after {len(arm)} samples"
    )


class Spread(NamedTuple):
    """The race's noise between fresh processes: squared deviations of the log figures from each
    arm's mean, summed over the arms, and their degrees of freedom."""

    squares: float
    df: int


def pooled(groups: Iterable[list[float]]) -> Spread:
    """One noise for every arm (the same job on the same GPU: processes scatter alike, whatever
    the knobs), pooled over the groups of per-process figures (an arm's search trial and its
    confirmation samples): each group of n gives n - 1 degrees of freedom."""
    squares, df = 0.0, 0
    for group in groups:
        if len(group) < 2:
            continue
        logs = [math.log(x) for x in group]
        mean = statistics.fmean(logs)
        squares += sum((x - mean) ** 2 for x in logs)
        df += len(logs) - 1
    return Spread(squares, df)


def pooled_interval(arm: list[float], leader: list[float], spread: Spread) -> list[float] | None:
    """median(arm) / median(leader)'s 95% interval with the race's pooled noise (Student's t at its
    degrees of freedom, the two arms' confirmation sample counts); None below MIN_POOLED_DF."""
    if spread.df < MIN_POOLED_DF or not arm or not leader:
        return None
    from scipy.special import stdtrit  # Student's t quantile

    value = statistics.median(arm) / statistics.median(leader)
    se = math.sqrt(spread.squares / spread.df) * math.sqrt(1 / len(arm) + 1 / len(leader))
    half = float(stdtrit(spread.df, 0.975)) * se
    return [value * math.exp(-half), value * math.exp(half)]


def leader(samples: Mapping[int, list[float]], arms: list[int]) -> int | None:
    """The arm with the highest median so far (None: none has a sample)."""
    sampled = [n for n in arms if samples[n]]
    return max(sampled, key=lambda n: statistics.median(samples[n]), default=None)


def race_spread(
    samples: Mapping[int, list[float]], alive: list[int], searched: Mapping[int, float | None]
) -> Spread:
    """The noise the race decides with: every arm's confirmation samples with its search trial's
    figure (a fresh process of the same configuration: one more degree of freedom an arm, so a
    first round can already separate what is far apart). A search figure that ran off (a cold
    GPU, a first trial) widens the spread: the race then measures more, never less."""
    groups = [[*_searched(searched.get(n)), *samples[n]] for n in alive]
    return pooled(group for group in groups if all(x > 0 for x in group))


def _searched(figure: float | None) -> list[float]:
    """An arm's search figure as a sample (none where the search measured none)."""
    return [figure] if figure is not None and figure > 0 else []


def drops(
    samples: Mapping[int, list[float]],
    failures: Mapping[int, list[str]],
    alive: list[int],
    searched: Mapping[int, float | None] | None = None,
    baseline: int | None = None,
) -> dict[int, str]:
    """The arms of `alive` (candidates and the baseline) that leave the race after a complete
    round, and why: separated from the leader (any arm, the baseline too: with the race's pooled
    noise, race_spread, where searched gives the arms' search figures), or failed in MIN_ROUNDS
    processes without a sample. The baseline's arm bounds the chosen's gain (its own interval
    between the two): it leaves with MIN_ROUNDS samples at least."""
    top = leader(samples, alive)
    if top is None:  # no arm has a sample: no leader to leave behind, the rounds run out
        return {}
    spread = race_spread(samples, alive, searched) if searched is not None else None
    out = {}
    for n in alive:
        if n == top:
            continue
        if not samples[n] and len(failures[n]) >= MIN_ROUNDS:
            out[n] = f"failed in {len(failures[n])} processes"
            continue
        why = separated(samples[n], samples[top], spread) if samples[n] else None
        if n == baseline and len(samples[n]) < MIN_ROUNDS:
            why = None
        if why is not None:
            out[n] = why
    return out


def settled(
    samples: Mapping[int, list[float]], alive: list[int], searched: Mapping[int, float | None]
) -> bool:
    """Every arm still racing the leader is as fast as it within TIE_BAND (its ratio's pooled
    interval inside 1 +- TIE_BAND): more processes would only split a difference too small to act
    on, and the pick takes the cheaper program among them."""
    top = leader(samples, alive)
    if top is None or len(alive) < 2:
        return False
    spread = race_spread(samples, alive, searched)
    for n in alive:
        ci = pooled_interval(samples[n], samples[top], spread) if n != top else [1.0, 1.0]
        if ci is None or ci[0] < 1 - TIE_BAND or ci[1] > 1 + TIE_BAND:
            return False
    return True


def cost(st: Arm) -> tuple[int, int]:
    """How costly an arm's program is to start: its compile scope's rank (SCOPE_COST), then its
    search trial's compile seconds in COMPILE_GRAIN_S steps."""
    knobs = st.knobs
    scope = "none" if not knobs.get("compile") else knobs.get("compile_scope") or "model"
    compile_s = st.search_compile_s or 0.0
    return SCOPE_COST.get(str(scope), 2), int(compile_s // COMPILE_GRAIN_S)


def within_noise(st: Arm, top: Arm) -> bool:
    """st's ratio to the top one has an interval that bounds something and reaches 1."""
    if st is top:
        return True
    if not st.samples or not top.samples:
        return False
    _, ci = ratio(st.samples, top.samples)
    return ci is not None and ci[1] >= 1


def _median(st: Arm) -> float:
    """A measured arm's median (pick's arms are those with one: confirm.choose)."""
    assert st.median is not None, f"trial {st.trial} has no sample"
    return st.median


def pick(measured: list[Arm]) -> tuple[Arm, Arm, list[Arm]]:
    """(chosen, fastest, those within noise of the fastest). Your setting (the arm that changes no
    knob: the baseline's) where it is one of those; else, among those measured faster than it,
    the cheapest program (cost), then the fewest knobs changed, then the higher median."""
    top = max(measured, key=_median)
    close = [st for st in measured if within_noise(st, top)]
    mine = yours(measured)
    # never a configuration measured slower than your setting, nor one as fast
    ahead = [st for st in close if mine is None or _median(st) > _median(mine)]
    if mine is not None and (not ahead or any(st is mine for st in close)):
        return mine, top, close
    chosen = min(ahead, key=lambda st: (*cost(st), len(st.changed_knobs), -_median(st)))
    return chosen, top, close


def yours(measured: list[Arm]) -> Arm | None:
    """Your setting among the measured arms: the one that changes no knob from the baseline (the
    baseline's own arm, or its candidate where it was among the top); None where it has no
    sample."""
    return next((st for st in measured if not st.changed_knobs), None)


def runner_up(chosen: Arm, measured: list[Arm]) -> RunnerUp | None:
    """The best other confirmed arm, beside the chosen: how much slower or faster, whether within
    noise, and both compile times (their search trials')."""
    others = [st for st in measured if st is not chosen]
    if not others:
        return None
    other = max(others, key=_median)
    return RunnerUp(
        trial=other.trial,
        gap_pct=(_median(other) / _median(chosen) - 1) * 100,
        within_noise=within_noise(other, chosen),
        compile_s=other.search_compile_s,
        chosen_compile_s=chosen.search_compile_s,
        peak_mem_gib=other.peak_mem_gib,
        dropped=other.dropped,
    )
