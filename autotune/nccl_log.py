"""What NCCL says: its refusals of a setting and its INFO log read back (standard library only; both
sides use it)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from autotune.protocol import Knobs

# Words of NCCL's message when it cannot honour NCCL_ALGO/NCCL_PROTO (a setting, not a fault), in a
# rank's exception and in NCCL's WARN log lines alike.
REFUSAL_MARKS = ("NCCL_ALGO", "NCCL_PROTO", "no algorithm/protocol available")
# The NCCL environment a rank records as applied (NCCL_NVLS_ENABLE only read, never set).
ENV = ("NCCL_ALGO", "NCCL_PROTO", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS", "NCCL_NVLS_ENABLE")
# NCCL_DEBUG settings of GPU rank groups: NCCL's own account of the algorithm and protocol it used
# (it may ignore NCCL_ALGO silently). %h.%p: one file per host and process.
DEBUG_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV,TUNING"}
DEBUG_FILE = "nccl.%h.%p.log"

_ALGOS = {
    "0": "TREE",
    "1": "RING",
    "2": "COLLNET_DIRECT",
    "3": "COLLNET_CHAIN",
    "4": "NVLS",
    "5": "NVLS_TREE",
    "6": "PAT",
}
_PROTOS = {"0": "LL", "1": "LL128", "2": "SIMPLE"}


def is_refusal(text: str) -> bool:
    """NCCL saying it cannot honour NCCL_ALGO / NCCL_PROTO (a setting, not a fault)."""
    return any(mark in text for mark in REFUSAL_MARKS)


def cause(knobs: Knobs) -> dict[str, Any] | None:
    """The knob values NCCL refused: the NCCL settings the trial set (None when it set none)."""
    given = {
        k: knobs.get(k)
        for k in ("nccl_algo", "nccl_proto", "nccl_nchannels")
        if knobs.get(k) not in (None, "default")
    }
    return given or None


def refusal_of(err: BaseException) -> str | None:
    """NCCL's own message when an exception is its refusal of a setting, else None."""
    text = str(err)
    if "ncclInvalidUsage" not in text and not is_refusal(text):
        return None
    last = (
        text.split("Last error:", 1)[1].strip()
        if "Last error:" in text
        else text.strip().splitlines()[0]
    )
    return "NCCL refused this setting: " + " ".join(last.split())[:400]


def report(run_dir: Path) -> dict[str, Any] | None:
    """What NCCL says it did (its NCCL_DEBUG=INFO files of the ranks): the algorithm/protocol chosen
    per collective, counted, and its warnings. None when no NCCL log was written (gloo, one
    rank)."""
    files = sorted(run_dir.glob("nccl.*.log"))
    if not files:
        return None
    used: dict[str, int] = {}
    warnings: list[str] = []
    version = None
    for path in files:
        for line in path.read_text(errors="replace").splitlines():
            m = re.search(r"(?:(\w+): )?\d+ Bytes -> Algo (\S+) proto (\S+)", line) or re.search(
                r"()algorithm, (\w+), protocol, (\w+)", line
            )
            # counted per collective: AllReduce of the gradients apart from start-up Broadcasts
            if m:
                key = (
                    f"{m[1] or 'collective'} "
                    f"{_ALGOS.get(m[2], m[2]).upper()}/{_PROTOS.get(m[3], m[3]).upper()}"
                )
                used[key] = used.get(key, 0) + 1
            elif " NCCL WARN " in line and len(warnings) < 5:
                text = line.split(" NCCL WARN ", 1)[1].strip()
                if text not in warnings:
                    warnings.append(text)
            elif version is None and (v := re.search(r"NCCL version (\S+)", line)):
                version = v[1]
    return {
        "algo_proto_used": used or "not reported by NCCL (no tuning lines in its INFO log)",
        "warnings": warnings,
        "version": version,
        "logs": len(files),
    }


def used(report: dict[str, Any] | None) -> str | None:
    """What NCCL reported for the all-reduces, most frequent first, e.g. 'RING/SIMPLE' (None:
    nothing reported)."""
    counted = (report or {}).get("algo_proto_used")
    if not isinstance(counted, dict) or not counted:
        return None
    reduces = {k: v for k, v in counted.items() if k.startswith("AllReduce ")} or counted
    return ", ".join(k.split(" ", 1)[-1] for k, _ in sorted(reduces.items(), key=lambda kv: -kv[1]))
