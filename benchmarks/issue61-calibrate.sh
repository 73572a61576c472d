#!/usr/bin/env bash
# Issue 61's calibration (one GPU): the own HF job at the proof's model sizes, 8 optimizer steps a setting, its peak
# memory and wall time (benchmarks/peak_probe.py), to choose a baseline that does not fit and a space that mostly does.
set -uo pipefail
OUT=${OUT:-bench-out}; mkdir -p "$OUT"
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__)'; } > "$OUT/hw.txt" 2>&1
M="--hidden_size 1024 --num_layers 16 --num_heads 16 --num_kv_heads 4 --intermediate_size 2816 --max_len 4096 --doc_median 3000"
T="--output_dir /tmp/p --report_to none --save_strategy no --disable_tqdm true --logging_steps 1000 --max_steps 8 --train_sampling_strategy group_by_length"
run() { python3 benchmarks/peak_probe.py benchmarks/jobs/own_hf_job.py $M $T "$@" 2>&1 | grep -E "^probe:|^model:|Error" | tail -3 | tee -a "$OUT/calibrate.log"; }
run --per_device_train_batch_size 16 --gradient_accumulation_steps 2 --bf16 true --tf32 true
run --per_device_train_batch_size 8 --gradient_accumulation_steps 4 --bf16 true --tf32 true
run --per_device_train_batch_size 8 --gradient_accumulation_steps 4 --tf32 true
run --per_device_train_batch_size 4 --gradient_accumulation_steps 8 --bf16 true --tf32 true --attn_implementation eager
run --per_device_train_batch_size 16 --gradient_accumulation_steps 2 --bf16 true --tf32 true --gradient_checkpointing true
run --per_device_train_batch_size 32 --gradient_accumulation_steps 1 --bf16 true --tf32 true --gradient_checkpointing true
