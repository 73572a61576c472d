"""Where a Python traceback in a process's output says its exception was raised, for a reason."""

from __future__ import annotations

import re

# a frame as Python prints it: `  File "/path/train.py", line 112, in <module>`
_FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+)')
# the markers under a source line (Python 3.11+): carets and tildes only
_MARKERS = re.compile(r"^\s*[\^~]+\s*$")
# an installed package's path: from the package on says which library it is
_INSTALLED = re.compile(r".*/(?:site|dist)-packages/")


def _where(path: str) -> str:
    """A frame's file as a reason names it: an installed package's from the package on
    (transformers/trainer.py), any other by its name (train.py)."""
    installed = _INSTALLED.sub("", path)
    return installed if installed != path else path.rsplit("/", 1)[-1]


def raised_at(text: str, exception: str) -> str:
    """Where the last traceback that ended in this exception line (`AssertionError`, as Python
    prints a bare `assert x`) was raised: `train.py:112: assert block_size <= cfg.block_size`,
    the last frame's file and line and the line of code Python printed under it (none where it
    printed none: `python -c`, a file gone); '' where no such traceback is in the text."""
    lines = text.splitlines()
    ends = [i for i, line in enumerate(lines) if line.strip() == exception and i > 0]
    for end in reversed(ends):
        frames = [i for i in range(end) if _FRAME.match(lines[i])]
        last = frames[-1] if frames else None
        if last is None or not all(x[:1].isspace() for x in lines[last:end]):
            continue  # the exception line ends no frames of a traceback
        found = _FRAME.match(lines[last])
        assert found is not None
        source = [x.strip() for x in lines[last + 1 : end] if not _MARKERS.match(x)]
        at = f"{_where(found['file'])}:{found['line']}"
        return f"{at}: {source[0]}" if source and source[0] else at
    return ""
