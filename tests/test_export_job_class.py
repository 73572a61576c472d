"""autotune export of a command study prints the job's own arguments class (command/source.py reads
it from the program without running it): the `trl sft` console command and a script importing
TRL (TRL is not installed: their text alone), TrainingArguments and Seq2SeqTrainingArguments with
transformers; the flags alone, saying why, where the class is not known; the HF form only for a
job known to build a Trainer."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
import yaml

from autotune import knobs as catalogue
from autotune.command import source
from autotune.export import Form, export

ROOT = Path(__file__).resolve().parent.parent
NANOGPT = ROOT / "tests" / "data" / "jobs" / "nanogpt_style.py"
KNOBS = {
    "micro_batch_size": {"flag": "--per_device_train_batch_size"},
    "activation_checkpointing": {
        "flag": "--gradient_checkpointing",
        "map": {"none": [], "full": ["--gradient_checkpointing", "true"]},
    },
}
TRL_SCRIPT = """\
from dataclasses import dataclass

from trl import ModelConfig, ScriptArguments, SFTConfig, SFTTrainer, TrlParser

parser = TrlParser((ScriptArguments, SFTConfig, ModelConfig))
script_args, training_args, model_args = parser.parse_args_and_config()
SFTTrainer(model=model_args.model_name_or_path, args=training_args).train()
"""
HF_PARSER_SCRIPT = """\
import transformers as tr
import trl

parser = tr.HfArgumentParser((MyArguments, trl.SFTConfig))
trainer = trl.SFTTrainer(args=parser.parse_args_into_dataclasses()[1])
"""
BUILT_SCRIPT = """\
import argparse
from transformers import Trainer, TrainingArguments

a = argparse.ArgumentParser()
a.add_argument("--per_device_train_batch_size", type=int)
args = TrainingArguments(output_dir="out", **vars(a.parse_known_args()[0]))
Trainer(model=None, args=args).train()
"""
SEQ2SEQ_SCRIPT = """\
from transformers import HfArgumentParser, Seq2SeqTrainer, Seq2SeqTrainingArguments

(args,) = HfArgumentParser(Seq2SeqTrainingArguments).parse_args_into_dataclasses()
"""
UNKNOWN_SCRIPT = """\
from transformers import Trainer
from my_project import arguments

Trainer(model=None, args=arguments()).train()
"""


def _best(tmp_path: Path, argv: list[str], script: str | None = None, **command: Any) -> Path:
    """best.yaml of a command study of this command (knobs: micro-batch 4, full checkpointing),
    with the script it names written beside it (read, never run)."""
    if script is not None:
        (tmp_path / "train.py").write_text(script)
    knobs = {"micro_batch_size": 4, "activation_checkpointing": "full", "grad_accum_steps": 1}
    doc = {
        "name": "job",
        "knobs": knobs,
        "metrics": {"tokens_per_s_per_gpu": 1000.0},
        "apply": {"env": catalogue.env_of(knobs), "knobs": knobs},
        "workload": {"task": "command", "world_size": 1, "nnodes": 1},
        "command": {"argv": argv, "knobs": command.pop("knobs", KNOBS), **command},
    }
    path = tmp_path / "best.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _hf(best: Path) -> str:
    return export(best, ["hf"])[0].text


def _call(text: str, name: str) -> dict[str, Any]:
    lines = text.splitlines()
    start = lines.index(f"{name}(")
    code = "\n".join(lines[start : lines.index(")", start) + 1])
    return {k.arg: ast.literal_eval(k.value) for k in ast.parse(code).body[0].value.keywords}


def _formats(forms: list[Form]) -> list[str]:
    return [f.format for f in forms]


def test_the_trl_sft_console_command_exports_sft_config(tmp_path: Path) -> None:
    argv = ["trl", "sft", "--model_name_or_path", "Qwen/Qwen2-0.5B", "--max_length", "512"]
    best = _best(tmp_path, argv)
    assert _formats(export(best)) == ["command", "hf", "json"]  # it builds TRL's SFTTrainer
    text = _hf(best)
    assert text.startswith("# the chosen trial's command (trl ...; the command form has it whole)")
    assert "# its arguments class: trl.SFTConfig (the `trl sft` command parses it)" in text
    assert "TrainingArguments(" not in text
    # trl is not installed here: the TrainingArguments fields it extends are typed, the rest kept
    assert (
        "# trl is not importable here: the flags are typed as the TrainingArguments fields" in text
    )
    assert _call(text, "SFTConfig") == {
        "per_device_train_batch_size": 4,
        "gradient_checkpointing": True,
    }
    own = "--model_name_or_path Qwen/Qwen2-0.5B --max_length 512"
    assert (
        "# your script's own arguments (no TrainingArguments field), as the command has them\n"
        f"{own}\n" in text
    )


def test_a_script_parsing_trl_configs_exports_its_class(tmp_path: Path) -> None:
    for script in (TRL_SCRIPT, HF_PARSER_SCRIPT):
        best = _best(tmp_path, ["accelerate", "launch", "train.py", "--output_dir", "o"], script)
        assert _formats(export(best)) == ["command", "hf", "json"]
        text = _hf(best)
        said = "# its arguments class: trl.SFTConfig (train.py passes it to its argument parser)"
        assert said in text and "SFTConfig(" in text and "TrainingArguments(" not in text
        assert _call(text, "SFTConfig")["output_dir"] == "o"


def test_a_script_building_training_arguments_exports_them(tmp_path: Path) -> None:
    """With transformers installed: the class's real fields, and the kwargs build the same
    TrainingArguments as the flags."""
    from transformers import HfArgumentParser, TrainingArguments

    argv = ["python", "train.py", "--output_dir", "o", "--seed", "3"]
    best = _best(
        tmp_path, argv, BUILT_SCRIPT, knobs={"micro_batch_size": KNOBS["micro_batch_size"]}
    )
    text = _hf(best)
    assert "# its arguments class: transformers.TrainingArguments (train.py builds it)" in text
    kwargs = _call(text, "TrainingArguments")
    assert kwargs == {"output_dir": "o", "seed": 3, "per_device_train_batch_size": 4}
    flags = text.splitlines()[text.splitlines().index(")") + 2]
    parsed = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses(flags.split())[0]
    assert parsed.to_dict() == TrainingArguments(**kwargs).to_dict()


def test_seq2seq_training_arguments_keep_their_own_fields(tmp_path: Path) -> None:
    argv = ["python", "train.py", "--output_dir", "o", "--predict_with_generate", "true"]
    text = _hf(_best(tmp_path, argv, SEQ2SEQ_SCRIPT))
    kwargs = _call(text, "Seq2SeqTrainingArguments")
    assert kwargs["predict_with_generate"] is True and "your script's own" not in text


def test_an_unknown_class_exports_the_flags_alone_saying_why(tmp_path: Path) -> None:
    best = _best(tmp_path, ["python", "train.py", "--output_dir", "o"], UNKNOWN_SCRIPT)
    assert _formats(export(best)) == ["command", "hf", "json"]  # it builds a Trainer
    text = _hf(best)
    assert text.startswith("# the chosen trial's command (") and " as its flags\n" in text
    assert "\nTrainingArguments(" not in text
    assert (
        "# the job's arguments class is not known (train.py passes no arguments class autotune "
        "knows to HfArgumentParser or TrlParser and builds none): these are the command's flags "
        "only, not a TrainingArguments(...) call"
    ) in text
    assert "--output_dir o --per_device_train_batch_size 4 --gradient_checkpointing true" in text


def test_a_name_match_alone_offers_no_hf_form(tmp_path: Path) -> None:
    """nanoGPT's --gradient_accumulation_steps shares TrainingArguments' name; it builds no
    Trainer: the HF form is not offered, and asked for it says the class is not known."""
    knobs = {"grad_accum_steps": {"flag": "--gradient_accumulation_steps"}}
    best = _best(tmp_path, ["python", str(NANOGPT)], knobs=knobs)
    assert _formats(export(best)) == ["command", "json"]
    text = _hf(best)
    assert "the job's arguments class is not known" in text and "\nTrainingArguments(" not in text
    assert "\n--gradient_accumulation_steps 1\n" in text


def test_measure_hf_offers_the_hf_form_whatever_its_program(tmp_path: Path) -> None:
    best = _best(tmp_path, ["python", "-m", "my_project.train"], measure="hf")
    assert _formats(export(best)) == ["command", "hf", "json"]
    assert "not known (-m my_project.train is not there to read)" in _hf(best)


@pytest.mark.parametrize(
    ("text", "arguments", "trainer"),
    [
        ("import lightning as L\nL.Trainer().fit(m)\n", None, False),  # Lightning's: not HF's
        ("from transformers import Trainer as T\nT()\n", None, True),
        ("from trl import *\nSFTConfig(output_dir='o')\n", "trl.SFTConfig", False),
        ("def f(:\n", None, False),
    ],
)
def test_the_source_is_read_not_run(
    tmp_path: Path, text: str, arguments: str | None, trainer: bool
) -> None:
    (tmp_path / "job.py").write_text(text)
    found = source.read(["python", "job.py"], tmp_path)
    assert (found.arguments, found.trainer) == (arguments, trainer), found.said


def test_trls_own_sft_script_is_read_as_sft_config() -> None:
    """TRL's sft.py as TRL ships it (tests/data/jobs/third_party/trl): its classes bound to a name,
    then handed to TrlParser inside a function."""
    trl = Path(__file__).parent / "data" / "jobs" / "third_party" / "trl"
    found = source.read(["python", "sft.py", "--output_dir", "out"], trl)
    assert (found.arguments, found.trainer) == ("trl.SFTConfig", True), found.said
    assert found.said == "sft.py passes it to its argument parser"
