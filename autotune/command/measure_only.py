"""The flags of a command that exist only for its measurement (`--max_steps 1000`,
`--logging_steps 1`, `--report_to none`): the export marks them, with their values, as to remove
for the real run, never as part of the tuned setting. The HF Trainer's, Lightning's and
torchtitan's are known by name; a job's own are listed in command.measure_only. Parent side
(export); export/_measured.py writes the comment that marks them."""

from __future__ import annotations

from typing import Any

# TrainingArguments fields that bound, log, save or evaluate a run rather than train it
# (transformers' training_args.py); the token counts are what a `measure: log` pattern reads
HF_TRAINER = frozenset(
    {
        "max_steps",
        "logging_steps",
        "logging_strategy",
        "logging_first_step",
        "save_strategy",
        "save_steps",
        "save_total_limit",
        "report_to",
        "disable_tqdm",
        "eval_strategy",
        "evaluation_strategy",
        "eval_steps",
        "include_num_input_tokens_seen",
        "include_tokens_per_second",
    }
)
# Lightning Trainer arguments of the same kind (a LightningCLI spells them --trainer.<name>)
LIGHTNING = frozenset(
    {
        "limit_train_batches",
        "limit_val_batches",
        "val_check_interval",
        "log_every_n_steps",
        "enable_checkpointing",
        "enable_progress_bar",
        "enable_model_summary",
        "num_sanity_val_steps",
        "fast_dev_run",
    }
)
# torchtitan's command-line overrides of the same kind, by their whole dotted name
TORCHTITAN = frozenset({"training.steps", "metrics.log_freq", "checkpoint.enable_checkpoint"})
KNOWN = HF_TRAINER | LIGHTNING


def flag_groups(argv: list[str]) -> list[list[str]]:
    """The command's arguments after its program, each flag with its values (`--bf16 true`, a bare
    `--gradient_checkpointing`). The program ends at the script (the first `.py`: a launcher's own
    flags come before it), else at the first `--`; the script's positional arguments are a group
    without a flag."""
    script = next((i for i, a in enumerate(argv) if a.endswith(".py")), None)
    if script is None:
        script = next((i - 1 for i, a in enumerate(argv) if a.startswith("--")), len(argv))
    groups: list[list[str]] = []
    for token in argv[script + 1 :]:
        if token.startswith("--") or not groups:
            groups.append([token])
        else:
            groups[-1].append(token)
    return groups


def flag_name(flag: str) -> str:
    """A flag as a name: dashes and `=value` off, `-` as `_` (HfArgumentParser's aliases)."""
    return flag.lstrip("-").partition("=")[0].replace("-", "_")


def is_measure_only(flag: str, own: list[str]) -> bool:
    """Whether a flag is known to exist for the measurement only: listed in command.measure_only, a
    known name, or a known name under a dotted prefix (--trainer.max_steps)."""
    if not flag.startswith("-"):
        return False
    name = flag_name(flag)
    if name in {flag_name(f) for f in own} or name in KNOWN or name in TORCHTITAN:
        return True
    return "." in name and name.rsplit(".", 1)[1] in KNOWN


def measure_only(command: dict[str, Any], groups: list[list[str]]) -> list[list[str]]:
    """The groups (a flag with its values) that are for the measurement only; a flag a knob's
    mapping renders is the tuned setting's, never one of them."""
    own = [str(f) for f in command.get("measure_only") or []]
    mapped = {
        flag_name(str(m["flag"]))
        for m in (command.get("knobs") or {}).values()
        if isinstance(m, dict) and m.get("flag")
    }
    return [g for g in groups if is_measure_only(g[0], own) and flag_name(g[0]) not in mapped]
