"""A user's own Hugging Face Trainer job: a Qwen2-style causal LM of 1.1B parameters built from a
config (random weights: d_model 2048, 20 layers, 16 query heads over 4 key/value heads, SwiGLU MLP
5632, vocabulary 49,152 untied) trained on a mix of short chat turns and long documents, padded per
batch by its collator.

The data: 65% chat-like samples (log-normal, median 160 tokens) and 35% documents (log-normal,
median 1,500 tokens, many cut at --max_len), 32 to 2,048 tokens; random token ids (0 is the pad).
Every TrainingArguments flag works (--per_device_train_batch_size, --gradient_accumulation_steps,
--bf16, --tf32, --gradient_checkpointing, --torch_compile, --optim, --train_sampling_strategy
group_by_length, --dataloader_num_workers, ...), plus this script's own (ModelArguments): the
model's sizes, --attn_implementation sdpa | eager, the data's mix and --own_count_after N.

--own_count_after N: the job's own throughput, counted as a careful user would: the real tokens
(attention_mask.sum(), on the device) of every micro-batch of the optimizer steps after step N, over
the host's wall time from the end of step N to the end of the last step (torch.cuda.synchronize()
and time.perf_counter() at both), printed at the end of the training as one line:

    own count: STEPS steps, TOKENS tokens, SECONDS s, TOKENS_PER_S tokens/s (steps A-B; ...)

    python benchmarks/jobs/own_hf_job.py --output_dir /tmp/own --max_steps 20 --bf16 true \\
        --per_device_train_batch_size 8 --gradient_accumulation_steps 4 --own_count_after 5
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import torch
from transformers import (
    HfArgumentParser,
    Qwen2Config,
    Qwen2ForCausalLM,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)


@dataclass
class ModelArguments:
    """The model and the data (TrainingArguments holds the rest)."""

    hidden_size: int = field(default=2048)
    num_layers: int = field(default=20)
    num_heads: int = field(default=16)
    num_kv_heads: int = field(default=4)
    intermediate_size: int = field(default=5632)
    vocab_size: int = field(default=49152)
    attn_implementation: str = field(default="sdpa", metadata={"help": "sdpa | eager"})
    min_len: int = field(default=32, metadata={"help": "shortest sample, tokens"})
    max_len: int = field(default=2048, metadata={"help": "longest sample (longer ones are cut)"})
    chat_share: float = field(default=0.65, metadata={"help": "share of chat-like samples"})
    chat_median: float = field(default=160.0, metadata={"help": "median chat sample, tokens"})
    doc_median: float = field(default=1500.0, metadata={"help": "median document, tokens"})
    num_samples: int = field(default=20000, metadata={"help": "samples in the dataset"})
    pad_to_multiple_of: int = field(default=8, metadata={"help": "pad each batch to a multiple"})
    own_count_after: int = field(
        default=0, metadata={"help": "print the job's own tokens/s after step N (0: off)"}
    )


class ChatAndDocs(torch.utils.data.Dataset):
    """Synthetic samples of random token ids whose lengths mix two populations: chat turns and
    documents (seeded: every run sees the same data)."""

    def __init__(self, a: ModelArguments, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        chat = torch.rand(a.num_samples, generator=g) < a.chat_share
        median = torch.where(chat, a.chat_median, a.doc_median)
        sigma = torch.where(chat, 0.6, 0.45)
        z = torch.randn(a.num_samples, generator=g)
        lengths = (median.log() + sigma * z).exp().round().clamp(a.min_len, a.max_len).long()
        self.samples = [torch.randint(1, a.vocab_size, (int(n),), generator=g) for n in lengths]

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.samples[i]}


class PadCollator:
    """Dynamic padding: each batch padded to its longest sample (rounded up to a multiple), the
    attention mask, and labels that are the inputs with -100 on the padding."""

    def __init__(self, pad_id: int, multiple: int) -> None:
        self.pad_id, self.multiple = pad_id, multiple

    def __call__(self, features: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        rows = [f["input_ids"] for f in features]
        width = self.multiple * math.ceil(max(len(r) for r in rows) / self.multiple)
        input_ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            input_ids[i, : len(r)] = r
            attention_mask[i, : len(r)] = 1
        labels = input_ids.masked_fill(attention_mask == 0, -100)
        return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def build_model(a: ModelArguments) -> Qwen2ForCausalLM:
    config = Qwen2Config(
        vocab_size=a.vocab_size,
        hidden_size=a.hidden_size,
        intermediate_size=a.intermediate_size,
        num_hidden_layers=a.num_layers,
        num_attention_heads=a.num_heads,
        num_key_value_heads=a.num_kv_heads,
        max_position_embeddings=a.max_len,
        tie_word_embeddings=False,
        pad_token_id=0,
        use_cache=False,
        attn_implementation=a.attn_implementation,
    )
    # built where it trains: initialising 1.1B parameters on the host takes a while
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        return Qwen2ForCausalLM(config)


def _now() -> float:
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter()


class OwnCount(TrainerCallback):
    """The job's own tokens/s: the real tokens of the micro-batches of the optimizer steps after
    `after` (fed by OwnTrainer.compute_loss, summed on the device), over the wall time from the end
    of step `after` to the end of the last step."""

    def __init__(self, after: int) -> None:
        self.after = after
        self.tokens = self.all_tokens = None
        self.start = self.t0 = self.t1 = 0.0
        self.last = 0

    def add(self, step: int, attention_mask: torch.Tensor) -> None:
        real = attention_mask.sum()  # stays on the device: no synchronisation per micro-batch
        self.all_tokens = real if self.all_tokens is None else self.all_tokens + real
        if step >= self.after:  # `step` optimizer steps done: this micro-batch is of a later one
            self.tokens = real if self.tokens is None else self.tokens + real

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = _now()

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.after:
            self.t0 = _now()
        elif state.global_step == state.max_steps or control.should_training_stop:
            self.t1 = _now()
        self.last = state.global_step

    def on_train_end(self, args, state, control, **kwargs):
        if self.last <= self.after or self.tokens is None:
            print(f"own count: none (the training ended at step {self.last})", flush=True)
            return
        t1 = self.t1 or _now()
        tokens, all_tokens = int(self.tokens.item()), int(self.all_tokens.item())
        seconds, whole = t1 - self.t0, t1 - self.start
        print(
            f"own count: {self.last - self.after} steps, {tokens} tokens, {seconds:.3f} s, "
            f"{tokens / seconds:.1f} tokens/s (steps {self.after + 1}-{self.last}; from the "
            f"start: {all_tokens} tokens, {whole:.3f} s, {all_tokens / whole:.1f} tokens/s)",
            flush=True,
        )


class OwnTrainer(Trainer):
    """The Trainer, its micro-batches' real tokens handed to the own count."""

    def __init__(self, *args, own_count: OwnCount | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.own_count = own_count

    def compute_loss(self, model, inputs, *args, **kwargs):
        if self.own_count is not None and model.training:
            self.own_count.add(self.state.global_step, inputs["attention_mask"])
        return super().compute_loss(model, inputs, *args, **kwargs)


def main() -> None:
    parser = HfArgumentParser((ModelArguments, TrainingArguments))
    a, args = parser.parse_args_into_dataclasses()
    model = build_model(a)
    n = sum(p.numel() for p in model.parameters())
    data = ChatAndDocs(a, args.seed)
    lengths = torch.tensor([len(s) for s in data.samples], dtype=torch.float)
    print(
        f"model: Qwen2-style, {n / 1e6:.1f}M parameters, attention {a.attn_implementation}; "
        f"data: {len(data)} samples, mean {lengths.mean():.0f} tokens, "
        f"{(lengths >= a.max_len).float().mean():.1%} at {a.max_len}",
        flush=True,
    )
    own = OwnCount(a.own_count_after) if a.own_count_after > 0 else None
    trainer = OwnTrainer(
        model=model,
        args=args,
        train_dataset=data,
        data_collator=PadCollator(model.config.pad_token_id, a.pad_to_multiple_of),
        callbacks=[own] if own else None,
        own_count=own,
    )
    trainer.train()


if __name__ == "__main__":
    main()
