"""check's JUnit report: the file it may replace (checked before any repeat), its one test case."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import TYPE_CHECKING

from autotune import atomic, paths
from autotune.errors import excerpt

if TYPE_CHECKING:
    from autotune.check.verdict import Verdict
    from autotune.documents.best_file import BestFile

OPTION = "--junit"
# a check that decided nothing: an error for CI, no failure (any other outcome but a pass is too);
# "update-refused": a pass whose --update was refused (check/record.py), exit 3
ERRORS = ("unreliable", "unmeasured", "inconclusive", "interrupted", "update-refused")
PASSES = ("pass", "faster")


def check_target(junit: Path, best_path: Path, best: BestFile, model_yaml: Path | None) -> None:
    """--junit names a file autotune may replace, before anything is measured: a writable regular
    file, none of the study's own files, nothing check reads or the study keeps (wherever it is),
    and if it exists a JUnit report (paths.replaceable_report: anything else is someone's file)."""
    paths.writable_file(junit, OPTION)
    paths.not_a_study_file(junit, best_path.parent, OPTION)
    paths.not_owned(junit, _owned(best_path, best, model_yaml), OPTION)
    paths.replaceable_report(junit, OPTION)


def _owned(best_path: Path, best: BestFile, model_yaml: Path | None) -> dict[Path, str]:
    """The files check reads and the study's storage (a journal or an SQLite file and the files
    beside it, outside the study's folder too), each with what it is."""
    storage = best.study.storage if best.study else None
    files = paths.storage_files(storage)
    owned = {f: f"a file of the study's storage {excerpt(storage)}" for f in files[1:]}
    owned.update({f: f"the study's storage {excerpt(storage)}" for f in files[:1]})
    owned[best_path] = "the best.yaml being checked"
    if model_yaml is not None:
        owned[model_yaml] = "the --model YAML"
    return owned


def write(path: Path, name: str, seconds: float, outcome: str, message: str, details: str) -> None:
    """One JUnit test case for the checked configuration: a failure on a regression, passed on a
    pass or faster, else an error (unreliable, inconclusive, could not be measured, interrupted,
    --update refused: outcome); written whole, never through a link."""
    failed, passed = outcome == "regression", outcome in PASSES
    suite = ET.Element(
        "testsuite",
        name="autotune check",
        tests="1",
        failures="1" if failed else "0",
        errors="0" if failed or passed else "1",
        time=f"{seconds:.1f}",
    )
    attrs = {"classname": "autotune.check", "name": name, "time": f"{seconds:.1f}"}
    case = ET.SubElement(suite, "testcase", attrs)
    if not passed:
        tag = "failure" if failed else "error"
        ET.SubElement(case, tag, message=message, type=outcome).text = details
    ET.SubElement(case, "system-out").text = details
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_bytes(path, ET.tostring(suite, encoding="utf-8", xml_declaration=True))


def write_verdict(path: Path, name: str, verdict: Verdict, seconds: float) -> None:
    """The check's verdict (a regress.Verdict) as its test case: failure on a regression, error when
    unreliable or inconclusive or when --update refused to record a pass, the versions that
    changed beside it."""
    message, outcome = verdict.summary(), verdict.status
    if verdict.update_refused:
        message, outcome = f"{message}; --update: {verdict.update_refused}", "update-refused"
    details = message
    if verdict.version_changes:
        changes = verdict.version_changes.items()
        details += "; changed: " + ", ".join(f"{k} {a} -> {b}" for k, (a, b) in changes)
    write(path, name, seconds, outcome, message, details)
