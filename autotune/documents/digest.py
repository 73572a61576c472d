"""best.yaml's `measured` digests: a short hash of everything that decides what a check runs and how
it is judged, recorded beside each baseline (the search's numbers, check --update's samples). A
baseline is compared only with the configuration it measured; a file whose digest does not match,
or that carries none, is refused (check/bench.baseline_belongs).

What is covered, and why each part:
- what runs: the model, the workload (but how ranks are launched, LAUNCH_ONLY), the command (argv,
  cwd, env, config file, how it is measured: its interpreter is argv's first word), the knobs off
  their defaults, base_dir (where the code and the command's cwd are found, as written: relative to
  best.yaml, so a study moved with its code keeps its digest), apply.env (the job's environment);
- where and for how long: the fingerprint's device and GPU model, the trial time limit;
- how it is judged: the name (the nightly series is read by it) and the baseline's own numbers (the
  search's: the chosen trial, its tokens/s and time per output token, the confirmation's samples;
  a check baseline's: its samples and where its series starts).

Not covered, on purpose: the code the command or the model runs (a check is there to see it change),
the machine's software (versions are named beside the verdict), and the interpreter `{python}`
names (autotune's own, as the search's was)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from autotune import knobs as catalogue
from autotune.protocol import Knobs

# The first schema whose `measured` covers all of the above; an earlier file's digest covered only
# the model, workload, command and knobs (schema 2 and 3) or is absent (schema 1).
DIGEST_SCHEMA = 4

# how ranks are started may change; what they run may not
LAUNCH_ONLY = ("nnodes", "rdzv_endpoint", "launcher")


def measured_digest(doc: dict[str, Any]) -> str:
    """The digest of best.yaml's configuration and the search's numbers, as search/best.py writes
    it (doc: best.yaml as a mapping; a read one: BestFile.digest)."""
    return _hash({**configuration(doc), "numbers": search_numbers(doc)})


def baseline_digest(doc: dict[str, Any], baseline: dict[str, Any]) -> str:
    """The digest of best.yaml's configuration and a check baseline's numbers (baseline: its
    check_baseline section, record_check_baseline)."""
    numbers = {
        "tokens_per_s_samples": _floats(baseline.get("tokens_per_s_samples")),
        "tpot_ms_samples": _floats(baseline.get("tpot_ms_samples")),
        "series_from": baseline.get("series_from"),
    }
    return _hash({**configuration(doc), "numbers": numbers})


def configuration(doc: dict[str, Any]) -> dict[str, Any]:
    """What decides what runs, where and under which name: the sections as best.yaml has them (a
    field or knob at its default taken out: a release that adds one changes no digest)."""
    from autotune.documents.identity import non_default

    model, workload = doc.get("model"), dict(doc.get("workload") or {})
    fingerprint = doc.get("fingerprint") or {}
    measurement = doc.get("measurement") or {}
    return {
        "name": doc.get("name"),
        "model": non_default("model", model) if model else None,
        "workload": {
            k: v for k, v in non_default("workload", workload).items() if k not in LAUNCH_ONLY
        },
        "command": doc.get("command"),
        "knobs": _off_default(doc.get("knobs") or {}),
        "base_dir": doc.get("base_dir"),
        "env": (doc.get("apply") or {}).get("env"),
        "device": fingerprint.get("device"),
        "gpu_model": fingerprint.get("gpu_model"),
        "trial_timeout_min": _float(measurement.get("trial_timeout_min")),
    }


def search_numbers(doc: dict[str, Any]) -> dict[str, Any]:
    """The search's numbers a check compares with (check/bench.baseline_samples and the task's
    second gate read them)."""
    metrics = doc.get("metrics") or {}
    return {
        "trial": (doc.get("chosen") or {}).get("trial"),
        "tokens_per_s_per_gpu": _float(metrics.get("tokens_per_s_per_gpu")),
        "tpot_ms_median": _float(metrics.get("tpot_ms_median")),
        "confirmation": [
            [c.get("trial"), _floats(c.get("samples"))] for c in doc.get("confirmation") or []
        ],
    }


def knob_set(knobs: Knobs) -> str:
    """A short hash of the knob names a release writes: on read, the same hash says that the knobs a
    file lacks were added since (upgraded), another says the list was edited (refused)."""
    return hashlib.sha256(",".join(sorted(knobs)).encode()).hexdigest()[:12]


def _off_default(knobs: Knobs) -> dict[str, Any]:
    """The knobs acting with a value other than their default (a knob of the command's own: any)."""
    defaults = {k.name: k.default for k in catalogue.CATALOGUE}
    return {
        k: v for k, v in knobs.items() if v is not None and (k not in defaults or v != defaults[k])
    }


def _float(value: object) -> Any:
    """A number as a float (1000 in one file and 1000.0 in another are the same number)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return value


def _floats(values: object) -> Any:
    return [_float(v) for v in values] if isinstance(values, list) else values


def _hash(what: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()[:16]
