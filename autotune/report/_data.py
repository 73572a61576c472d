"""The report's data: what `collect` gathers of a study, one typed attribute a top-level section.

A Report is the dict that `autotune report --format json` writes (`to_dict`), read by attribute
(`data.chosen`, typed) where a renderer has moved to it, and by key (`data["chosen"]`) during the
transition. Each section's rows stay plain data (a Row is one trial's line of the table)."""

from __future__ import annotations

from typing import Any, cast

# one trial's line of the table (report/_table.py row_of)
Row = dict[str, Any]


class Report(dict[str, Any]):
    """Everything the report shows of one study, as plain data with typed sections."""

    @classmethod
    def of(cls, data: dict[str, Any]) -> Report:
        """data as a Report: itself where it is one, else its sections (a report's JSON, read
        back)."""
        return data if isinstance(data, Report) else cls(data)

    def to_dict(self) -> dict[str, Any]:
        """The plain dict that the JSON form writes (`autotune report --format json`,
        autotune.read_report)."""
        return dict(self)

    @property
    def study(self) -> str:
        """The study's name."""
        return cast("str", self.get("study"))

    @property
    def device(self) -> str | None:
        """The device its trials ran on (cuda, cpu), as the study recorded it."""
        return cast("str | None", self.get("device"))

    @property
    def task(self) -> str:
        """The workload's task (train, generate, command)."""
        return cast("str", self.get("task"))

    @property
    def model(self) -> dict[str, Any] | None:
        """The YAML's model section, as the study stored it."""
        return cast("dict[str, Any] | None", self.get("model"))

    @property
    def workload(self) -> dict[str, Any] | None:
        """The YAML's workload section, as the study stored it."""
        return cast("dict[str, Any] | None", self.get("workload"))

    @property
    def searched(self) -> list[str]:
        """The knobs the search varied, the catalogue's order first."""
        return cast("list[str]", self.get("searched"))

    @property
    def counts(self) -> dict[str, int]:
        """Trials by state (ok, failed kinds, running, ...)."""
        return cast("dict[str, int]", self.get("counts"))

    @property
    def baseline(self) -> Row | None:
        """The baseline's row (your setting); None where it did not complete."""
        return cast("Row | None", self.get("baseline"))

    @property
    def baseline_steadiness(self) -> dict[str, Any] | None:
        """How steady the baseline's steps were."""
        return cast("dict[str, Any] | None", self.get("baseline_steadiness"))

    @property
    def best(self) -> Row | None:
        """The search's best row (its single measurement)."""
        return cast("Row | None", self.get("best"))

    @property
    def mfu_flops(self) -> str | None:
        """How MFU's FLOPs per token were had: counted, or 6N + 12LdT."""
        return cast("str | None", self.get("mfu_flops"))

    @property
    def chosen(self) -> dict[str, Any] | None:
        """Best.yaml's choice with its row's figures (_summary.headline)."""
        return cast("dict[str, Any] | None", self.get("chosen"))

    @property
    def confirmation(self) -> dict[str, Any] | None:
        """The confirmation's rounds and its arms' statistics."""
        return cast("dict[str, Any] | None", self.get("confirmation"))

    @property
    def step_spread_pct_median(self) -> float | None:
        """The median step-time spread of the completed rows."""
        return cast("float | None", self.get("step_spread_pct_median"))

    @property
    def trials(self) -> list[Row]:
        """Every listed trial's row: the completed best first, then the others."""
        return cast("list[Row]", self.get("trials"))

    @property
    def failures(self) -> dict[str, dict[str, Any]]:
        """The trials that did not complete, by kind, with their reasons."""
        return cast("dict[str, dict[str, Any]]", self.get("failures"))

    @property
    def excluded(self) -> list[dict[str, Any]]:
        """What the study ruled out and why (report/_excluded.py)."""
        return cast("list[dict[str, Any]]", self.get("excluded"))

    @property
    def noise(self) -> dict[str, Any]:
        """The run-to-run noise the effects are judged against."""
        return cast("dict[str, Any]", self.get("noise"))

    @property
    def time(self) -> dict[str, Any]:
        """Where the study's time went, by phase."""
        return cast("dict[str, Any]", self.get("time"))

    @property
    def best_telemetry(self) -> dict[str, Any] | None:
        """The best trial's power and clocks, with power_cap."""
        return cast("dict[str, Any] | None", self.get("best_telemetry"))

    @property
    def check_history(self) -> list[dict[str, Any]]:
        """History.jsonl's nights of autotune check, as written."""
        return cast("list[dict[str, Any]]", self.get("check_history"))

    @property
    def check_history_skipped(self) -> list[str]:
        """History.jsonl's lines that could not be read."""
        return cast("list[str]", self.get("check_history_skipped"))

    @property
    def front(self) -> list[Row]:
        """The rows on the Pareto front of speed and memory."""
        return cast("list[Row]", self.get("front"))

    @property
    def gpus(self) -> int:
        """The GPUs of one trial (workload.world_size)."""
        return cast("int", self.get("gpus"))

    @property
    def best_yaml(self) -> int | None:
        """The trial best.yaml names (None: no best.yaml beside the study)."""
        return cast("int | None", self.get("best_yaml"))

    @property
    def edges(self) -> dict[str, Any] | None:
        """What became of the steps past the edge of the list."""
        return cast("dict[str, Any] | None", self.get("edges"))

    @property
    def bound(self) -> dict[str, Any] | None:
        """The gain found over your setting, or a bound on any gain."""
        return cast("dict[str, Any] | None", self.get("bound"))

    @property
    def alloc_offer(self) -> str | None:
        """Expandable segments offered to a job that ran out of memory."""
        return cast("str | None", self.get("alloc_offer"))

    @property
    def numerics_checked(self) -> list[dict[str, Any]]:
        """The numerics checks of the rows."""
        return cast("list[dict[str, Any]]", self.get("numerics_checked"))

    @property
    def effects(self) -> dict[str, Any]:
        """Each knob's effect on the figure, judged against the noise."""
        return cast("dict[str, Any]", self.get("effects"))

    @property
    def cost(self) -> dict[str, Any]:
        """The study's GPU time: search and confirmation."""
        return cast("dict[str, Any]", self.get("cost"))

    @property
    def projection(self) -> dict[str, Any] | None:
        """The chosen configuration's time and saving on a full run."""
        return cast("dict[str, Any] | None", self.get("projection"))
