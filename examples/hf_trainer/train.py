"""A plain Hugging Face Trainer job: a Llama-shaped causal LM built from a config (random weights)
trained on variable-length sequences of random tokens, padded per batch (or packed). Every
TrainingArguments flag works (--per_device_train_batch_size, --bf16, --torch_compile,
--gradient_checkpointing, --optim, ...), plus the script's own: the model's sizes,
--attn_implementation, --sampling (random | group_by_length), --packing, the lengths' distribution
(--lengths loguniform | lognormal, --mean_len) and --own_count_after N: the job's own throughput,
all real tokens over all wall time from the end of step N to the end of the training, printed as
`own: {...}` (counted from its batches and the host's clock, synchronised at both ends: nothing of
autotune).

autotune tunes it as it is (search_spaces/hf-trainer-*.yaml, task command): the only line that knows
of autotune is the callback, which does nothing when the job runs outside autotune.

    python examples/hf_trainer/train.py --output_dir /tmp/out --max_steps 20 --bf16 true
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from dataclasses import dataclass, field

import torch
from transformers import (
    HfArgumentParser,
    LlamaConfig,
    LlamaForCausalLM,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

from autotune.callbacks.hf import AutotuneCallback


@dataclass
class ScriptArguments:
    """The model and the data (TrainingArguments holds the rest)."""

    d_model: int = field(default=64, metadata={"help": "hidden size"})
    n_layers: int = field(default=2, metadata={"help": "decoder layers"})
    n_heads: int = field(default=4, metadata={"help": "attention heads"})
    n_kv_heads: int = field(default=2, metadata={"help": "key/value heads"})
    ffn_hidden: int = field(default=128, metadata={"help": "MLP hidden size"})
    vocab_size: int = field(default=512, metadata={"help": "vocabulary"})
    min_len: int = field(default=8, metadata={"help": "shortest sequence"})
    max_len: int = field(default=64, metadata={"help": "longest sequence (and the packed length)"})
    n_samples: int = field(default=4096, metadata={"help": "sequences in the dataset"})
    attn_implementation: str = field(
        default="sdpa", metadata={"help": "sdpa | eager | flash_attention_2"}
    )
    sampling: str = field(
        default="random", metadata={"help": "random | group_by_length (less padding)"}
    )
    packing: bool = field(
        default=False, metadata={"help": "concatenate and cut into max_len blocks: no padding"}
    )
    pad_to_multiple_of: int = field(
        default=1, metadata={"help": "pad each batch to a multiple of this"}
    )
    lengths: str = field(default="loguniform", metadata={"help": "loguniform | lognormal"})
    mean_len: float = field(default=700.0, metadata={"help": "lognormal: mean length (sigma 0.8)"})
    own_count_after: int = field(default=0, metadata={"help": "own tokens/s after step N"})


class Sequences(torch.utils.data.Dataset):
    """Random token sequences of log-uniform lengths in [min_len, max_len] (seeded: every run sees
    the same)."""

    def __init__(self, a: ScriptArguments, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        if a.lengths == "lognormal":  # mean exp(mu + sigma^2 / 2) = mean_len
            mu = math.log(a.mean_len) - 0.8**2 / 2
            logs = torch.empty(a.n_samples).normal_(mu, 0.8, generator=g)
        else:
            low, high = math.log(a.min_len), math.log(a.max_len)
            logs = torch.empty(a.n_samples).uniform_(low, high, generator=g)
        self.lengths = logs.exp().round().long().clamp(a.min_len, a.max_len).tolist()
        self.rows = [torch.randint(1, a.vocab_size, (n,), generator=g) for n in self.lengths]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.rows[i]}


class Packed(torch.utils.data.Dataset):
    """The same tokens concatenated and cut into blocks of max_len (run_clm's group_texts): no
    padding."""

    def __init__(self, source: Sequences, block: int) -> None:
        flat = torch.cat(source.rows)
        n = flat.numel() // block
        self.blocks = flat[: n * block].view(n, block)

    def __len__(self) -> int:
        return len(self.blocks)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.blocks[i]}


def collate(multiple: int, counted: list[int]):
    """Pad to the batch's longest sequence (rounded up to `multiple`); labels -100 on the padding.
    Each batch's real tokens are appended to `counted`, in the order the batches are made (the job's
    own count)."""

    def pad(rows: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        counted.append(sum(len(r["input_ids"]) for r in rows))
        longest = max(len(r["input_ids"]) for r in rows)
        width = -(-longest // multiple) * multiple
        ids = torch.zeros(len(rows), width, dtype=torch.long)
        mask = torch.zeros(len(rows), width, dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, : len(r["input_ids"])] = r["input_ids"]
            mask[i, : len(r["input_ids"])] = 1
        labels = ids.masked_fill(mask == 0, -100)
        return {"input_ids": ids, "attention_mask": mask, "labels": labels}

    return pad


def build_model(a: ScriptArguments) -> LlamaForCausalLM:
    config = LlamaConfig(
        hidden_size=a.d_model,
        num_hidden_layers=a.n_layers,
        num_attention_heads=a.n_heads,
        num_key_value_heads=a.n_kv_heads,
        intermediate_size=a.ffn_hidden,
        vocab_size=a.vocab_size,
        max_position_embeddings=a.max_len,
        attn_implementation=a.attn_implementation,
    )
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.device(device):  # built in place: a 1B model is not initialised on the host first
        return LlamaForCausalLM(config)


class OwnCount(TrainerCallback):
    """The job's own throughput: the real tokens of the batches its steps after `after` consumed,
    over the wall time from that step's end to the training's end (the device synchronised at both).
    """

    def __init__(self, after: int, counted: list[int], accumulation: int) -> None:
        self.after, self.counted, self.accumulation = after, counted, accumulation
        self.t0 = self.t1 = 0.0
        self.steps = 0

    def _sync(self) -> float:
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        return time.perf_counter()

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = self._sync()

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.after:
            self.t0 = self._sync()
        self.steps = state.global_step

    def on_train_end(self, args, state, control, **kwargs):
        self.t1 = self._sync()
        first, last = self.after * self.accumulation, self.steps * self.accumulation
        tokens = sum(self.counted[first:last])
        own = {
            "steps": [self.after + 1, self.steps],
            "tokens": tokens,
            "seconds": round(self.t1 - self.t0, 4),
            "tokens_per_s": tokens / (self.t1 - self.t0),
            "all_tokens_per_s": sum(self.counted[:last]) / (self.t1 - self.start),
        }
        print("own:", json.dumps(own), flush=True)


def sampling_args(a: ScriptArguments, args: TrainingArguments) -> TrainingArguments:
    """--sampling on the installed transformers (train_sampling_strategy since 5, group_by_length
    before)."""
    names = {f.name for f in dataclasses.fields(args)}
    if "train_sampling_strategy" in names:
        return dataclasses.replace(args, train_sampling_strategy=a.sampling)
    return dataclasses.replace(args, group_by_length=a.sampling == "group_by_length")


def main() -> None:
    a, args = HfArgumentParser((ScriptArguments, TrainingArguments)).parse_args_into_dataclasses()
    args = sampling_args(a, args)
    print(
        "config:",
        json.dumps({**dataclasses.asdict(a), **_training(args)}, sort_keys=True),
        flush=True,
    )
    data = Sequences(a, args.seed)
    dataset = Packed(data, a.max_len) if a.packing else data
    counted: list[int] = []
    unmodified = bool(os.environ.get("NO_AUTOTUNE_CALLBACK"))  # as if without the callback line
    callbacks = [] if unmodified else [AutotuneCallback()]
    if a.own_count_after:
        callbacks.append(OwnCount(a.own_count_after, counted, args.gradient_accumulation_steps))
    trainer = Trainer(
        model=build_model(a),
        args=args,
        train_dataset=dataset,
        data_collator=collate(a.pad_to_multiple_of, counted),
        callbacks=callbacks,
    )
    trainer.train()


def _training(args: TrainingArguments) -> dict[str, object]:
    keys = (
        "per_device_train_batch_size",
        "gradient_accumulation_steps",
        "bf16",
        "fp16",
        "tf32",
        "torch_compile",
        "gradient_checkpointing",
        "optim",
        "max_steps",
    )
    return {k: str(getattr(args, k)) for k in keys}


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
