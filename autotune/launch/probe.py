"""Check user code and user configs in a throwaway process: the parent never imports them.

A module that calls sys.exit or os._exit, raises KeyboardInterrupt, loops forever, floods its output
or leaves a daemon behind at import would end, hang or exhaust autotune itself; in a child process
it only fails the check, with what it did, within a time limit. The child runs under the trial
supervisor (workloads/supervise.py), so nothing it starts outlives it or autotune; its output is
discarded and its answer comes back on a pipe of its own (a module cannot forge it by printing); it
writes no bytecode.
"""

from __future__ import annotations

import json
import math
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from autotune import yamlio
from autotune.errors import ConfigError
from autotune.launch import orphans

if TYPE_CHECKING:
    from autotune.config import ModelConfig

TIMEOUT_ENV = "AUTOTUNE_IMPORT_TIMEOUT_S"  # documented in README (Your own model)
_MAX_ANSWER = 1 << 16

_PRELUDE = f"""
import json, os, sys
answer = os.fdopen(int(os.environ.pop("AUTOTUNE_ANSWER_FD")), "w")
def reply(doc):
    answer.write(json.dumps(doc)[:{_MAX_ANSWER}]); answer.flush(); os._exit(0)
"""
_ENTRYPOINT = (
    _PRELUDE
    + """
import importlib
name, func, base = sys.argv[1:4]
if base:
    sys.path.insert(0, base)
try:
    module = importlib.import_module(name)
    reply({"found": callable(getattr(module, func, None)), "file": getattr(module, "__file__", None)})
except BaseException as err:  # SystemExit and KeyboardInterrupt too: all are the module's doing
    reply({"error": f"{type(err).__name__}: {err}"[:300]})
"""  # noqa: E501
)
_HF_CONFIG = (
    _PRELUDE
    + """
import math
try:
    with open(sys.argv[1]) as f:
        data = json.load(f)
    bad = [k for k, v in data.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
           and (not math.isfinite(v) or (v < 0 and k.endswith(("_size", "_layers", "_heads", "_embeddings", "_dim"))))]
    if bad:
        reply({"error": f"{bad[0]} is {data[bad[0]]!r}; sizes must be finite and not negative"})
    from transformers import AutoConfig
    AutoConfig.for_model(**data)
    reply({"found": True})
except BaseException as err:
    reply({"error": f"{type(err).__name__}: {err}"[:300]})
"""  # noqa: E501
)


def timeout_s() -> float:
    """AUTOTUNE_IMPORT_TIMEOUT_S (default 60): seconds a check of user code may take."""
    given = os.environ.get(TIMEOUT_ENV, "60")
    try:
        value = float(given)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or not 0 < value <= 3600:
        raise ConfigError(
            f"{TIMEOUT_ENV}: {given[:40]!r} is not a number of seconds from 0 to 3600"
        )
    return value


def _run(code: str, args: list[str], what: str) -> dict[str, object] | str:
    """Run `code` under the supervisor; its JSON answer, or why there is none."""
    limit = timeout_s()
    read, write = os.pipe()
    os.set_inheritable(write, True)
    env = {
        **os.environ,
        "PYTHONDONTWRITEBYTECODE": "1",
        "AUTOTUNE_PARENT_PID": str(os.getpid()),
        "AUTOTUNE_ANSWER_FD": str(write),
    }
    cmd = [sys.executable, "-m", "autotune.workloads.supervise", sys.executable, "-c", code, *args]
    proc = orphans.start(
        lambda: subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(write,),
            env=env,
            start_new_session=True,
        )
    )
    os.close(write)
    chunks: list[bytes] = []
    deadline = time.monotonic() + limit
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            ready, _, _ = select.select([read], [], [], 0.05)
            if ready and (chunk := os.read(read, _MAX_ANSWER)):
                chunks.append(chunk)
        if proc.poll() is None:
            return f"{what} did not finish within {limit:g} s ({TIMEOUT_ENV})"
        while select.select([read], [], [], 0)[0] and (chunk := os.read(read, _MAX_ANSWER)):
            # what it wrote before it ended; a daemon holding the pipe is not waited for
            chunks.append(chunk)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)  # the supervisor ends everything below it
            proc.wait()
        os.close(read)
    try:
        answer = json.loads(b"".join(chunks)[:_MAX_ANSWER])
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        code_ = proc.returncode
        how = f"killed by {signal.Signals(-code_).name}" if code_ < 0 else f"exit code {code_}"
        return f"{what} ended the process ({how}) before it finished"
    return answer


def check_entrypoint(module: str, func: str, base_dir: str | None) -> tuple[str | None, str | None]:
    """(problem, the module's file): problem None when `module` imports and has a callable
    `func`."""
    answer = _run(_ENTRYPOINT, [module, func, base_dir or ""], f"importing {module!r}")
    if isinstance(answer, str):
        return answer, None
    if "error" in answer:
        return f"cannot import {module!r}: {answer['error']}", None
    found_file = answer.get("file")
    file = found_file if isinstance(found_file, str) else None
    return (None if answer.get("found") is True else f"{module!r} has no function {func!r}"), file


def check_hf_config(path: str) -> str | None:
    """None when transformers builds a config from the file with finite, non-negative sizes; else
    why not."""
    answer = _run(_HF_CONFIG, [path], f"reading {path!r} with transformers")
    if isinstance(answer, str):
        return answer
    return None if answer.get("found") is True else str(answer.get("error", "unreadable"))[:300]


def check_model_code(model: ModelConfig, base_dir: Path | None) -> None:
    """hf_config and entrypoint fail here, before any trial: missing file, bad JSON, import errors
    (ValueError naming model.<field>). The entrypoint is imported in a throwaway process
    (this module's probe): the parent never runs user code. job.validate's pass only: the schema
    never starts the probe, so reading a best.yaml does not."""
    import importlib.util

    if model.family is not None:  # the built-in model: autotune's own code
        return
    if model.hf_config is not None:
        path = Path(model.hf_config)
        if not path.is_file():
            raise ValueError(f"model.hf_config: no such file: {model.hf_config!r}")
        try:
            if path.stat().st_size > yamlio.MAX_BYTES:
                raise ValueError(f"{path.stat().st_size:,} bytes; a config.json is a few kB")
            data = json.loads(path.read_text())
        except (OSError, ValueError, RecursionError) as err:
            raise ValueError(
                f"model.hf_config: {model.hf_config!r} is not valid JSON: {err}"
            ) from None
        if not isinstance(data, dict) or "model_type" not in data:
            raise ValueError(
                f"model.hf_config: {model.hf_config!r} has no model_type; is it a transformers "
                "config.json?"
            )
        if importlib.util.find_spec("transformers") is None:
            raise ValueError(
                "model.hf_config: needs transformers, which is not installed; pip install "
                "'autotune-llm[hf]'"
            )
        if (problem := check_hf_config(str(path))) is not None:
            raise ValueError(f"model.hf_config: {model.hf_config!r}: {problem}")
        return
    module_name, sep, func = (model.entrypoint or "").partition(":")
    if not sep or not module_name or not func.isidentifier():
        raise ValueError(
            f"model.entrypoint: {model.entrypoint!r} is not of the form 'package.module:function'"
        )
    problem, _ = check_entrypoint(
        module_name, func, str(base_dir) if base_dir is not None else None
    )
    if problem:
        raise ValueError(f"model.entrypoint: {problem}")
