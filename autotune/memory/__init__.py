"""Per-rank GPU memory of one training trial of the built-in model, estimated before launch, and its
calibration.

Standard library only (and scipy, lazily, to calibrate): the parent process (`autotune validate`,
the search loop) imports it, never torch.

What is counted: bytes per rank as `torch.cuda.max_memory_allocated` sees them, i.e. tensors (the
CUDA context, NCCL's own buffers and the caching allocator's free blocks are not in it), for the
trial train.py builds: fp32 master parameters, autocast (bf16, fp16; fp8 through torchao under bf16
autocast) or plain fp32, AdamW, one rank, DDP or FSDP2, activation checkpointing and chunked
cross-entropy as model.py applies them.

* Weights: fp32 parameters, fp32 gradients and AdamW's two fp32 moments, 16 bytes a parameter, each
  1/world_size of it with FSDP (FSDP2 shards every parameter on dim 0, padded to a multiple of the
  ranks).
* Weight copies (`gathered`): on one rank or with DDP, autocast caches a bf16 cast of every linear
  weight for the whole forward and the linears save them for backward; with FSDP2 the root
  (embedding, final norm, head), which FSDP2 never reshards after forward, the block being run (all
  blocks with reshard_after_forward false), the blocks prefetched explicitly (fsdp_forward_prefetch
  n: n more in forward; fsdp_backward_prefetch n: n - 1 more in backward) and, in backward, that
  block's unsharded gradients and their fp32 reduce-scatter input; DDP's gradient buckets are one
  more fp32 copy of all gradients unless gradient_as_bucket_view (PyTorch's DDP documentation says
  as much).
* Activations: every tensor autograd saves in forward, read op by op from model.py (the count
  Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models", section
  4, makes for Megatron's layer):
  the fp32 residual stream at each norm, the bf16 inputs of the linears, the fused qkv output
  (SDPA's V is a
  view of it, so all of it stays), RoPE'd Q and K, the attention output and its fp32 logsumexp
  (flash, cuDNN and
  memory-efficient SDPA save only those; math SDPA and eager attention save the seq x seq
  probabilities),
  SwiGLU's gate|up output, SiLU output and product, GELU's input and output. Checkpointing keeps
  each
  checkpointed block's input, plus one block recomputed at a time in backward; selective_op
  (torchtitan's
  per-op policy, `_save_list` in torchtitan's llama3 parallelize.py) keeps each block's input, the
  outputs of
  the first and third of its four matmuls (qkv, MLP up; every second mm is recomputed) and the
  attention
  kernel's output and logsumexp.
* The loss (`logits`): autocast runs the NLL in fp32; its peak is in backward, where what the loss
  saved and the NLL gradient are alive together: 10 bytes a token and vocabulary entry on CUDA (bf16
  log-softmax and its fp32 copy, the fp32 gradient), 12 on the CPU, whose autocast runs the
  log-softmax in fp32 (`loss_bytes`; the term that dominates Llama-3's 128k vocabulary), or the
  head's weight gradient as backward makes it.
  Chunked
  cross-entropy keeps one chunk's loss alive at a time. `estimate(..., device)` says whose autocast.

The peak: the parts are not all alive at once. `Estimate.total` is the largest of five moments: the
end of forward (autocast's cache holds every cast), the loss's backward (weights but gradients,
copies, every activation, the loss's peak), the last block's and the first block's backward (by then
the other blocks' activations are freed and their gradients made), and the optimizer step
(parameters, gradients, moments, and foreach AdamW's parameter-sized temporary; fused AdamW has
none). The fields of Estimate are each part at its own largest.

How it was checked (tests/test_memory.py): the saved bytes against every tensor autograd saves in a
real forward on the CPU (exact to 4 bytes for gpt and llama, every checkpointing mode, fp32,
chunked, eager); the peak against torch's MemTracker over whole optimizer steps on the CPU (gpt, one
rank: within 0.5%, each moment above). Once, outside the tests: FSDP2 on two gloo ranks of the CPU
within 5%, the CPU's own differences (bf16 norms under its autocast, composite RMSNorm) included. On
an H200 (2026-12-01, docs/BENCHMARKS.md): eager one-GPU trials +8.4% (gpt), +12.1% (gpt, full
checkpointing), +6.5% (llama), -0.3% (llama fp32): CUDA's bf16 loss backward holds about 10 bytes a
logit where the CPU's held 12; Llama-3.1-8B FSDP2 trials on two GPUs +2.0% to +7.9% as they ran
(after counting the sharded gradients of fsdp_grad_sync every, which had made one 13% low). The
CUDA-only facts used (the fused RMSNorm saves its input and rstd only; LayerNorm and RMSNorm run in
fp32 under CUDA autocast; flash SDPA takes grouped-query heads as they are) are PyTorch's.

torch.compile (with flash-type attention): each block's saved tensors as Inductor's partitioner
chose them on an H200 (compiled_block_activations: per block and whole-model compile, bf16 and fp8,
read tensor by tensor by benchmarks/compile_saved.py), the fused loss's logits (loss_bytes); 14
compiled trials within -0.4% to +3.1% (docs/BENCHMARKS.md, 2026-12-01).

Limits: hf_config and entrypoint models are not estimated (`estimate` returns None); compiled math
or eager attention is one factor (COMPILE_ACTIVATIONS), not measured on a GPU; eager fp8's
activations are counted as bf16's (torchao saves the high-precision inputs for backward); cuBLAS
workspaces (tens of MiB) and the token batches are left out; allocator fragmentation is outside
max_memory_allocated, so a configuration near the capacity may still fail (RESERVED_OVERHEAD_BYTES
is a rough allowance for what nvidia-smi shows beyond the estimate). `calibrate` fits what is left
from measured trials.
"""

from autotune.memory._activations import (
    CE_CHUNKS,
    COMPILE_ACTIVATIONS,
    activation_bytes,
    attention_kind,
    block_activations,
    checkpointed_blocks,
    compiled_block_activations,
    compute_bytes,
    loss_bytes,
    op_saved,
    residual_bytes,
)
from autotune.memory._calibrate import SCALE_RANGE, Calibration, calibrate, describe
from autotune.memory._model import (
    ADAMW_STATE,
    GIB,
    RESERVED_OVERHEAD_BYTES,
    Estimate,
    _knobs,
    estimate,
    weight_bytes,
)
from autotune.memory._shape import Param, Shape, block_params, n_params, root_params, shape

__all__ = [
    "ADAMW_STATE",
    "CE_CHUNKS",
    "COMPILE_ACTIVATIONS",
    "GIB",
    "RESERVED_OVERHEAD_BYTES",
    "SCALE_RANGE",
    "Calibration",
    "Estimate",
    "Param",
    "Shape",
    "activation_bytes",
    "attention_kind",
    "block_activations",
    "block_params",
    "calibrate",
    "checkpointed_blocks",
    "compiled_block_activations",
    "compute_bytes",
    "describe",
    "estimate",
    "loss_bytes",
    "n_params",
    "op_saved",
    "residual_bytes",
    "root_params",
    "shape",
    "weight_bytes",
    "_knobs",
]
