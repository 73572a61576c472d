"""Check a user's entrypoint module in a throwaway process: the parent never imports user code.

A module that calls sys.exit or os._exit, raises KeyboardInterrupt, or loops forever at import would end or
hang autotune itself; in a child process it only fails the check, with what it did and a time limit.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

TIMEOUT_S = float(os.environ.get("AUTOTUNE_IMPORT_TIMEOUT_S", "60"))  # documented in README (Your own model)
_MARK = "AUTOTUNE-PROBE:"

# Runs in the child: import the module, look up the function, print one marked JSON line.
_CHILD = f"""
import importlib, json, sys
name, func, base = sys.argv[1:4]
if base:
    sys.path.insert(0, base)
try:
    module = importlib.import_module(name)
    found = callable(getattr(module, func, None))
    print({_MARK!r} + json.dumps({{"found": found}}), flush=True)
except BaseException as err:  # SystemExit and KeyboardInterrupt too: all are the module's doing
    print({_MARK!r} + json.dumps({{"error": f"{{type(err).__name__}}: {{err}}"[:300]}}), flush=True)
"""


def check_entrypoint(module: str, func: str, base_dir: str | None, timeout_s: float = TIMEOUT_S) -> str | None:
    """None when `module` imports and has a callable `func`; else why not, as the end of a one-line message."""
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, module, func, base_dir or ""], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return f"importing {module!r} did not finish within {timeout_s:g} s (AUTOTUNE_IMPORT_TIMEOUT_S)"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    lines = [line[len(_MARK):] for line in out.splitlines() if line.startswith(_MARK)]
    if not lines:
        how = f"killed by {signal.Signals(-proc.returncode).name}" if proc.returncode < 0 else f"exit code {proc.returncode}"
        return f"importing {module!r} ended the process ({how}) before it finished"
    answer = json.loads(lines[-1])
    if "error" in answer:
        return f"cannot import {module!r}: {answer['error']}"
    return None if answer["found"] else f"{module!r} has no function {func!r}"
