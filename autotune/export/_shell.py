"""The winner as shell lines: the command study's own command with its knob values (rendered by
command.render.render, as the trial rendered it), and a torchrun launch for a script of your own."""

from __future__ import annotations

import shlex

from autotune.command.measure_only import flag_groups, measure_only
from autotune.command.render import text_of
from autotune.export._form import Form, env_block, launcher, missing_lines
from autotune.export._measured import (
    RUN_DIR_NOTE,
    config_lines,
    declared_lines,
    lightning_lines,
    measure_only_line,
    measured,
    secret_lines,
    shell_word,
)
from autotune.export._winner import ENV_KNOBS, Winner
from autotune.redact import MASK


def command(w: Winner) -> Form:
    """`cd <folder> && VAR=... argv`: the command the chosen trial ran (its flags, variables and
    config file), its folder relative to the study's, so it runs from beside best.yaml."""
    m = measured(w)
    # a masked variable is not assigned: the pasted command takes it from your environment
    assignments = [
        f"{name}={shell_word(value, name)}" for name, value in m.env.items() if value != MASK
    ]
    words = [shell_word(a, f"SECRET_ARG_{i}") for i, a in enumerate(m.argv)]
    line = " ".join(["cd", shlex.quote(m.cwd), "&&", *assignments, *words])
    ran = f", as trial {w.trial} ran it" if w.trial is not None else ""
    only = measure_only(w.command or {}, flag_groups(m.argv))
    lines = [
        f"# the study's command with the winner's knob values{ran}; run it from beside best.yaml",
        *([m.program] if m.program else []),
        *config_lines(w, m),
        *secret_lines(m),
        *lightning_lines(w),
        *declared_lines(w),
        *([RUN_DIR_NOTE] if m.names_run_dir else []),
        *measure_only_line(only, [" ".join(shlex.quote(t) for t in g) for g in only]),
        line,
    ]
    return Form("command", "\n".join(lines) + "\n")


def torchrun(w: Winner) -> Form:
    """torchrun's prefix and the environment; every other knob is a setting of your script,
    named."""
    missing = [
        f"{name}={text_of(value)} (a setting of your script: torchrun only launches it)"
        for name, value in w.knobs.items()
        if value is not None and name not in ENV_KNOBS and w.differs(name)
    ]
    lines = [
        *env_block(w.env),
        "# your script's own flags are your script's (see the hf, lightning and torchtitan forms)",
        shlex.join(launcher(w)) + " your_script.py",
        *(["# on every node"] if w.nnodes > 1 else []),
        *missing_lines("torchrun", missing),
    ]
    return Form("torchrun", "\n".join(lines) + "\n", missing)
