#!/usr/bin/env bash
# Issue 3's H200 bar and issue 7's GPU crash check, as run through the device tool on nvidia-h200-x2
# (two H200s of one host; every trial uses ONE GPU, two trials run side by side with --gpus 0,1).
# Each stage resumes its studies, so a stage cut short is simply run again.
#   benchmarks/h200-bar.sh STAGE...     stages: info grid fp32 llama hopper gputests ddp nccl refactor
#                                       cheap-cold cheap-warm cold350 landscape cost (issue 13)
#                                       gen8b gen-int4 gen-slo gen-plain (issue 14) fsdp8b fsdp8b-2k memgpu (issue 15)
#                                       ddp-truth comm-hooks check3 (issue 16)
#                                       int4-kernels memcompile compile-saved check1 (issue 24: one H200)
#                                       hf-trainer hf-callback-cost (issue 26: one H200)
#                                       cheap-after cheap-before cheap-ref (issue 28: one H200)
#                                       numerics-gpu staged expert expert-in-autotune (issue 34: one H200; benchmarks/background.sh)
#                                       hf-smoke hf-padded hf-truth hf-variants hf-live hf-cost (issue 35: one H200)
#                                       issue38 (issue 38: one H200)
#                                       issue37 issue37b-tests issue37b issue37c-tests issue37c issue37d-tests issue37d (issue 37: one H200)
#                                       issue49-tests issue49 (issue 49: one H200)
#                                       issue50 expert50 compile-warm (issue 50: one GPU; benchmarks/background.sh)
#                                       issue51 expert51 (issue 51: one GPU; benchmarks/background.sh)
# GPUS: the --gpus of the stages that take it (default 0,1; GPUS=0 on one GPU)
# (ddp and nccl need two GPUs: issue 5's proof on nvidia-h200-x2; NCCL_NVLS_ENABLE is left as the machine has it)
# Results: trials/<name>/ (study.db, best.yaml, runs/); logs and a tarball under $OUT (default ./bench-out).
set -uo pipefail
OUT=${OUT:-bench-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 COLUMNS=160
at() { python3 -m autotune.cli "$@"; }
# timed_search TAG YAML NAME: a fresh search on one GPU between two wall-clock stamps ($OUT/TAG-wall.jsonl), then
# where its time went (trial_cost.py), its report, best.yaml and the study (issues 34 and 50)
timed_search() {
  local tag=$1 y=$2 n=$3
  echo "{\"stage\": \"$stage\", \"start\": $(date +%s.%N)}" >> "$OUT/$tag-wall.jsonl"
  at search "$y" --gpus "${GPUS%%,*}" --fresh 2>&1 | tee -a "$OUT/$tag.log"
  echo "{\"stage\": \"$stage\", \"end\": $(date +%s.%N)}" >> "$OUT/$tag-wall.jsonl"
  python3 benchmarks/trial_cost.py "trials/$n" > "$OUT/$tag-cost.md" 2>&1
  at report "trials/$n" --format json > "$OUT/$tag-report.json" 2>&1
  at report "trials/$n" --format markdown > "$OUT/$tag-report.md" 2>&1; cp "trials/$n/best.yaml" "$OUT/$tag-best.yaml"
  tar czf "$OUT/$tag-study.tgz" "trials/$n"/study.db* "trials/$n/best.yaml" "trials/$n"/runs/*/worker.log 2>/dev/null
}
# study51: issue 51's study name and its trial rule as job_truth.py's arguments, from its YAML ($Y51)
Y51=${Y51:-benchmarks/spaces/issue51-hf-1b.yaml}
study51() {
  python3 -c 'import sys, yaml; d = yaml.safe_load(open(sys.argv[1])); w, c = d["workload"], d["command"]
print(d["name"], "--warmup", w["warmup_steps"], "--measure", w["measure_steps"], "--max-steps", c["max_steps"], "--half-width", c.get("half_width_pct", 3.0))' "$Y51"
}
GPUS=${GPUS:-0,1}
for stage in "$@"; do
  echo "=== $stage $(date -u +%FT%TZ)" | tee -a "$OUT/stages.log"
  case $stage in
    info)
      { date -u; nvidia-smi; nvidia-smi topo -m; env | grep -E "NCCL|NVLS|MULTICAST|NVSHMEM"; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv
        python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(), "nccl", torch.cuda.nccl.version())'
        python3 -c 'import torchao, optuna; print("torchao", torchao.__version__, "optuna", optuna.__version__)'
        python3 -c 'import transformers, accelerate; print("transformers", transformers.__version__, "accelerate", accelerate.__version__)'; } > "$OUT/hw.txt" 2>&1 ;;
    hf-trainer) # issue 26: the HF Trainer job (examples/hf_trainer/train.py, 1.1B Llama, variable-length sequences) as
      # task command: the Trainer's defaults as a study of one trial, then the search whose baseline is the expert's setting
      # (search_spaces/hf-trainer-llama-1b.yaml); HF_MIN: minutes the search launches trials (it resumes)
      [ -d trials/hf-trainer-llama-1b ] || [ ! -f carry/trials-final.tgz ] || tar xzf carry/trials-final.tgz
      python3 -c 'import yaml; d = yaml.safe_load(open("search_spaces/hf-trainer-llama-1b.yaml")); d["name"] = "hf-trainer-defaults"
d["space"] = {"micro_batch_size": 8, "precision": "fp32", "compile": False, "activation_checkpointing": "none"}
for k, v in {"optim": "adamw_torch_fused", "attn_implementation": "sdpa", "sampling": "random", "packing": False}.items():
    d["command"]["knobs"][k]["values"] = [v]  # the Trainer defaults (fused AdamW since torch 2.8), SDPA, random order
d["baseline"], d["study"] = {}, {"trials": 1, "confirm_top": 0, "trial_timeout_min": 5}
yaml.safe_dump(d, open("search_spaces/hf-trainer-defaults.yaml", "w"), sort_keys=False)'
      at search search_spaces/hf-trainer-defaults.yaml --gpus 0 2>&1 | tee -a "$OUT/hf-trainer.log"
      at search search_spaces/hf-trainer-llama-1b.yaml --gpus 0 --timeout-min "${HF_MIN:-7}" 2>&1 | tee -a "$OUT/hf-trainer.log"
      for s in hf-trainer-defaults hf-trainer-llama-1b; do at report trials/$s --format markdown > "$OUT/$s-report.md" 2>&1
        cp trials/$s/best.yaml "$OUT/$s-best.yaml" 2>/dev/null; done
      at export trials/hf-trainer-llama-1b/best.yaml > "$OUT/hf-trainer-export.txt" 2>&1 ;;
    hf-callback-cost) # issue 26: the callback's own cost, timed from outside: the expert's setting for HF_STEPS optimizer steps,
      # HF_REPS times with the callback active (it never asks to stop) and without it, alternating; the Trainer's
      # train_runtime and the process's wall time of each run
      A="examples/hf_trainer/train.py --output_dir /tmp/hfcost --report_to none --save_strategy no --disable_tqdm true
         --logging_steps 1000 --d_model 2048 --n_layers 16 --n_heads 32 --n_kv_heads 8 --ffn_hidden 8192 --vocab_size 32000
         --min_len 32 --max_len 1024 --n_samples 20000 --per_device_train_batch_size 16 --gradient_accumulation_steps 2
         --bf16 true --tf32 true --sampling group_by_length --max_steps ${HF_STEPS:-40}"
      for i in $(seq "${HF_REPS:-3}"); do for with in 1 0; do rm -f /tmp/hfcost.jsonl; t0=$(date +%s.%N)
        if [ $with = 1 ]; then out=$(AUTOTUNE_REPORT=/tmp/hfcost.jsonl AUTOTUNE_STEPS=0,1000000 python3 $A 2>&1)
        else out=$(python3 $A 2>&1); fi
        t1=$(date +%s.%N); rt=$(echo "$out" | grep -oE "'train_runtime': '?[0-9.]+" | grep -oE "[0-9.]+$" | tail -1)
        echo "{\"rep\": $i, \"callback\": $with, \"train_runtime_s\": ${rt:-null}, \"wall_s\": $(python3 -c "print(round($t1 - $t0, 3))"), \"steps_reported\": $(cat /tmp/hfcost.jsonl 2>/dev/null | grep -c '"s"')}" | tee -a "$OUT/hf-callback-cost.jsonl"
      done; done ;;
    issue37) # issue 37: the GPU tests after the refactor (ask-and-tell, schedule, decoder, documents,
      # the formatting pass), then a real search on the GPU through the new loop, and check of its best.yaml
      python3 -m pytest -q -p no:cacheprovider --durations=15 tests/test_gpu.py tests/test_gpu_numerics.py \
        2>&1 | tail -30 | tee "$OUT/issue37-tests.log"
      t0=$(date +%s); at search search_spaces/tiny.yaml --fresh 2>&1 | tail -25 | tee "$OUT/issue37-search.log"
      echo "search wall: $(( $(date +%s) - t0 )) s" | tee -a "$OUT/issue37-search.log"
      at check trials/tiny/best.yaml --repeats 2 2>&1 | tail -15 | tee "$OUT/issue37-check.log"
      at report trials/tiny --format markdown > "$OUT/issue37-report.md" 2>&1
      tar czf "$OUT/issue37-trials.tgz" trials/tiny ;;
    issue37b-tests)
      python3 -m pytest -q -p no:cacheprovider --durations=15 tests/test_gpu.py tests/test_gpu_numerics.py \
        2>&1 | tail -30 | tee "$OUT/issue37b-tests.log" ;;
    issue37b) # issue 37, second session: the GPU tests after the typed best.yaml (Best), the task's Objective
      # and size knob, the prestart cold fallback and the refilled docstrings; a real training search, its check
      # (the typed reader and write-back), and a pareto generate search (the Objective's two directions) on the GPU;
      # issue37b-tests first (a call of its own: the device's 10-minute limit a command)
      t0=$(date +%s); at search search_spaces/tiny.yaml --fresh 2>&1 | tail -25 | tee "$OUT/issue37b-search.log"
      echo "search wall: $(( $(date +%s) - t0 )) s" | tee -a "$OUT/issue37b-search.log"
      at check trials/tiny/best.yaml --repeats 3 --update 2>&1 | tail -15 | tee "$OUT/issue37b-check.log"
      at check trials/tiny/best.yaml --repeats 3 2>&1 | tail -15 | tee -a "$OUT/issue37b-check.log"
      python3 -c 'import yaml; d = yaml.safe_load(open("search_spaces/tiny-generate.yaml")); d["name"] = "tiny-pareto"
d["study"].update(objective="pareto", trials=4, confirm_top=0); d["study"].pop("limits", None)
yaml.safe_dump(d, open("search_spaces/tiny-pareto.yaml", "w"), sort_keys=False)'
      at search search_spaces/tiny-pareto.yaml --fresh 2>&1 | tail -20 | tee "$OUT/issue37b-pareto.log"
      for s in tiny tiny-pareto; do at report trials/$s --format markdown > "$OUT/issue37b-$s-report.md" 2>&1
        cp trials/$s/best.yaml "$OUT/issue37b-$s-best.yaml"; done
      tar czf "$OUT/issue37b-trials.tgz" trials/tiny trials/tiny-pareto ;;
    issue37c-tests) # issue 37, third session: the GPU tests after the root's grouping (launch/, check/, documents/, config/)
      python3 -m pytest -q -p no:cacheprovider --durations=15 tests/test_gpu.py tests/test_gpu_numerics.py \
        2>&1 | tail -30 | tee "$OUT/issue37c-tests.log" ;;
    issue37c) # issue 37, third session: a real training search and its check after the grouping, then a real HF job
      # as task command (issue 38's 0.3B job, 4 trials) whose trial process imports no torch and is not started ahead:
      # each trial's start phase and its fingerprint's torch and CUDA (read from torch/version.py) printed
      t0=$(date +%s); at search search_spaces/tiny.yaml --fresh 2>&1 | tail -25 | tee "$OUT/issue37c-search.log"
      echo "search wall: $(( $(date +%s) - t0 )) s" | tee -a "$OUT/issue37c-search.log"
      at check trials/tiny/best.yaml --repeats 3 --update 2>&1 | tail -15 | tee "$OUT/issue37c-check.log"
      python3 -c 'import yaml; d = yaml.safe_load(open("benchmarks/spaces/issue38-hf-0.3b.yaml")); d["name"] = "issue37c-hf-0.3b"
d["study"]["trials"] = 4; yaml.safe_dump(d, open("benchmarks/spaces/issue37c-hf-0.3b.yaml", "w"), sort_keys=False)'
      t0=$(date +%s); ISSUE38_TOKEN=issue37c-not-a-real-token at search benchmarks/spaces/issue37c-hf-0.3b.yaml --gpus 0 \
        --fresh 2>&1 | tail -25 | tee "$OUT/issue37c-command.log"
      echo "search wall: $(( $(date +%s) - t0 )) s" | tee -a "$OUT/issue37c-command.log"
      python3 -c 'import optuna,json; s=optuna.load_study(study_name="issue37c-hf-0.3b", storage="sqlite:///trials/issue37c-hf-0.3b/study.db")
for t in s.trials: a=t.user_attrs; f=a.get("fingerprint") or {}; print(json.dumps({"n": t.number, "status": a.get("status"), "knobs": a.get("knobs"), "prestarted": a.get("prestarted"), "phases_s": a.get("phases_s"), "torch": f.get("torch"), "cuda": f.get("cuda"), "gpu": f.get("gpu_model"), "tps": (a.get("metrics") or {}).get("tokens_per_s_per_gpu")}))' \
        | tee "$OUT/issue37c-command-trials.jsonl"
      for s in tiny issue37c-hf-0.3b; do at report trials/$s --format markdown > "$OUT/issue37c-$s-report.md" 2>&1
        cp trials/$s/best.yaml "$OUT/issue37c-$s-best.yaml"; done
      tar czf "$OUT/issue37c-trials.tgz" --exclude='*/out/*' trials/tiny trials/issue37c-hf-0.3b ;;
    issue37d-tests) # issue 37, fourth session: the GPU tests after strict typing (knob values, torch modules, NVML)
      python3 -m pytest -q -p no:cacheprovider --durations=15 tests/test_gpu.py tests/test_gpu_numerics.py \
        2>&1 | tail -30 | tee "$OUT/issue37d-tests.log" ;;
    issue37d) # issue 37, fourth session: what the typing touched, on the GPU: `hw` (NVML, versions), `validate`
      # (the memory table), a training search with telemetry and its check, a generate search (decoder, quant)
      at hw 2>&1 | tail -20 | tee "$OUT/issue37d-hw.log"
      at validate search_spaces/tiny.yaml 2>&1 | tail -20 | tee "$OUT/issue37d-validate.log"
      t0=$(date +%s); at search search_spaces/tiny.yaml --fresh 2>&1 | tail -25 | tee "$OUT/issue37d-search.log"
      echo "search wall: $(( $(date +%s) - t0 )) s" | tee -a "$OUT/issue37d-search.log"
      at check trials/tiny/best.yaml --repeats 3 --update 2>&1 | tail -15 | tee "$OUT/issue37d-check.log"
      t0=$(date +%s); at search search_spaces/tiny-generate.yaml --fresh 2>&1 | tail -25 | tee "$OUT/issue37d-generate.log"
      echo "search wall: $(( $(date +%s) - t0 )) s" | tee -a "$OUT/issue37d-generate.log"
      python3 -c 'import optuna,json; s=optuna.load_study(study_name="tiny", storage="sqlite:///trials/tiny/study.db")
for t in s.trials: a=t.user_attrs; m=a.get("metrics") or {}; tel=a.get("telemetry") or {}; print(json.dumps({"n": t.number, "status": a.get("status"), "tps": m.get("tokens_per_s_per_gpu"), "power_w_mean": tel.get("power_w_mean"), "sm_clock_mhz_mean": tel.get("sm_clock_mhz_mean"), "samples": tel.get("samples")}))' \
        | tee "$OUT/issue37d-tiny-trials.jsonl"
      for s in tiny tiny-generate; do at report trials/$s --format markdown > "$OUT/issue37d-$s-report.md" 2>&1
        cp trials/$s/best.yaml "$OUT/issue37d-$s-best.yaml"; done
      tar czf "$OUT/issue37d-trials.tgz" --exclude='*/out/*' trials/tiny trials/tiny-generate ;;
    issue49-tests) # issue 49: the numerics check on the GPU after the median gap, the spikes and the clipped steps
      # (tests/test_gpu_numerics.py: fp8 both recipes on a Llama-style 1B and the GPT-style 1.3B, no spike, the gap
      # with the sign of the per-step gaps; fp16 broken two ways still rejected; every check's record in
      # issue49-numerics.jsonl); a call of its own (the device's 10-minute limit a command)
      AUTOTUNE_GPU_NUMERICS_OUT="$OUT/issue49-numerics.jsonl" python3 -m pytest -m gpu -s -v -p no:cacheprovider \
        tests/test_gpu_numerics.py 2>&1 | grep -vE "Warning|warnings.warn" | tail -40 | tee "$OUT/issue49-numerics.log" ;;
    issue49) # issue 49: a two-point search of the 1.3B (bf16 baseline, fp8 tensorwise with its check) whose report
      # shows the quality cost beside the gain and its interval, then the fail-closed check of its best.yaml
      t0=$(date +%s); at search benchmarks/spaces/issue49-gpt-1.3b.yaml --gpus 0 --fresh 2>&1 | tail -20 | tee "$OUT/issue49-search.log"
      echo "search wall: $(( $(date +%s) - t0 )) s" | tee -a "$OUT/issue49-search.log"
      at report trials/issue49-gpt-1.3b --format markdown > "$OUT/issue49-report.md" 2>&1
      at report trials/issue49-gpt-1.3b --format json > "$OUT/issue49-report.json" 2>&1
      timeout "${CHECK_S:-150}" python3 -m autotune.cli check trials/issue49-gpt-1.3b/best.yaml --repeats 3 --max-repeats 4 2>&1 | tail -15 | tee "$OUT/issue49-check.log"
      echo "check exit: ${PIPESTATUS[0]}" | tee -a "$OUT/issue49-check.log"
      tar czf "$OUT/issue49-trials.tgz" --exclude='*/out/*' --exclude='*/inductor-cache/*' trials/issue49-gpt-1.3b ;;
    issue50) # issue 50: the staged search of benchmarks/spaces/issue50-gpt-1.3b.yaml (20 trials, steps past the list's
      # edge, the raced confirmation) with a cold compile cache; its wall time between the stamps is its GPU time
      timed_search issue50 benchmarks/spaces/issue50-gpt-1.3b.yaml issue50-gpt-1.3b ;;
    expert50) # issue 50: the hand-set experts of the same model by a plain script (benchmarks/plain_train.py), each in its
      # own process: EXPERTS is a list of "precision:micro-batch" (whole-model compile, fused AdamW, vocabulary padded to 64)
      for e in ${EXPERTS:-fp8:8 fp8:16 bf16:16}; do IFS=: read -r prec mbs <<< "$e"
        timeout 300 python3 benchmarks/plain_train.py --yaml benchmarks/spaces/issue50-gpt-1.3b.yaml --precision "$prec" \
          --mbs "$mbs" --compile --fused --pad-vocab 64 --warmup 3 --steps 10 2>>"$OUT/expert50.err" | tee -a "$OUT/expert50.jsonl"
      done ;;
    issue51) # issue 51: an unseen user's HF Trainer job, unmodified (benchmarks/jobs/own_hf_job.py: a Qwen2-style 1.1B on
      # chat turns and documents, padded per batch) searched in 12 trials (benchmarks/spaces/issue51-hf-1b.yaml), then the
      # chosen setting's command for 200 steps: the job's own count (after step 10) against the study's figure, and the
      # trial's rule on its steps as they came (benchmarks/job_truth.py). Y51: another YAML (the CPU dry run:
      # Y51=benchmarks/spaces/issue51-hf-tiny-cpu.yaml)
      read -r n51 rule51 <<< "$(study51)"
      timed_search issue51 "$Y51" "$n51"
      python3 benchmarks/chosen_long_run.py "trials/$n51" --steps 200 --after 10 --out "$OUT/truth51" | tee "$OUT/issue51-truth.jsonl"
      python3 benchmarks/job_truth.py "$OUT/truth51/long-run-steps.jsonl" "$OUT/truth51/long-run.log" $rule51 \
        --label chosen-issue51 | tee -a "$OUT/issue51-truth.jsonl" ;;
    expert51) # issue 51: the expert's hand setting (the study's baseline, trial 0) as its user would run it: its own command
      # for 200 steps, its own count after step 10 (after stage issue51: it reads trials/issue51-hf-1b/runs/0000/spec.json)
      read -r n51 rule51 <<< "$(study51)"
      python3 benchmarks/chosen_long_run.py "trials/$n51" --trial 0 --steps 200 --after 10 --out "$OUT/expert51" | tee "$OUT/expert51.jsonl"
      python3 benchmarks/job_truth.py "$OUT/expert51/long-run-steps.jsonl" "$OUT/expert51/long-run.log" $rule51 \
        --label expert-issue51 | tee -a "$OUT/expert51.jsonl" ;;
    compile-warm) # issue 50: does a fresh process compile again what an earlier one compiled? (benchmarks/compile_warm.py)
      timeout "${WARM_S:-400}" python3 benchmarks/compile_warm.py --layers 6 --out "$OUT/compile-warm.jsonl" ${WARM_CASES:-} 2>&1 | tail -3 ;;
    issue38) # issue 38: the GPU tests and the hardening tests on the GPU machine, then a real HF job's search (the
      # figure's new bounds must fail no real CUDA-event job); {env:ISSUE38_TOKEN} reaches it and no file
      python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py tests/test_hardening_command.py \
        tests/test_hardening_secrets.py 2>&1 | tail -15 | tee "$OUT/issue38-tests.log"
      t0=$(date +%s); ISSUE38_TOKEN=issue38-not-a-real-token-0123 at search benchmarks/spaces/issue38-hf-0.3b.yaml --gpus 0 \
        --fresh 2>&1 | tee "$OUT/issue38-search.log"
      echo "search wall: $(( $(date +%s) - t0 )) s" | tee -a "$OUT/issue38-search.log"
      at report trials/issue38-hf-0.3b --format markdown > "$OUT/issue38-report.md" 2>&1
      python3 -c 'import optuna,json; s=optuna.load_study(study_name="issue38-hf-0.3b", storage="sqlite:///trials/issue38-hf-0.3b/study.db")
for t in s.trials: a=t.user_attrs; print(json.dumps({"n": t.number, "status": a.get("status"), "knobs": a.get("knobs"), "tps": (a.get("metrics") or {}).get("tokens_per_s_per_gpu"), "window": ((a.get("metrics") or {}).get("window") or {}).get("said"), "reason": a.get("reason")}))' \
        | tee "$OUT/issue38-trials.jsonl"
      echo "files holding the token: $(grep -rl issue38-not-a-real-token trials/issue38-hf-0.3b | wc -l)" | tee -a "$OUT/issue38-search.log"
      tar czf "$OUT/issue38-trials.tgz" --exclude='*/out/*' trials/issue38-hf-0.3b ;;
    hf-smoke) # issue 35: the tiny HF job on the GPU, its steps streamed by the callback (measure hf adds it)
      rm -f /tmp/smoke.jsonl; NO_AUTOTUNE_CALLBACK=1 AUTOTUNE_MEASURE=hf PYTHONPATH=$PWD/autotune/command/hook/_site:$PYTHONPATH \
        AUTOTUNE_REPORT=/tmp/smoke.jsonl AUTOTUNE_STEPS=2,4 AUTOTUNE_STOP=/tmp/smoke.stop AUTOTUNE_MAX_STEPS=12 \
        python3 examples/hf_trainer/train.py --output_dir /tmp/smoke --max_steps 50 --report_to none --save_strategy no \
        --disable_tqdm true --bf16 true --per_device_train_batch_size 8 > "$OUT/hf-smoke.log" 2>&1
      tail -3 "$OUT/hf-smoke.log"; cat /tmp/smoke.jsonl | tee "$OUT/hf-smoke.jsonl" ;;
    hf-padded) # issue 35: the 12-trial search of the padded 1.1B HF job (benchmarks/spaces/hf-padded-llama-1.1b.yaml)
      t0=$(date +%s); at search benchmarks/spaces/hf-padded-llama-1.1b.yaml --gpus 0 2>&1 | tee -a "$OUT/hf-padded.log"
      echo "search wall: $(( $(date +%s) - t0 )) s" | tee -a "$OUT/hf-padded.log"
      at report trials/hf-padded-llama-1.1b --format markdown > "$OUT/hf-padded-report.md" 2>&1
      cp trials/hf-padded-llama-1.1b/best.yaml "$OUT/hf-padded-best.yaml"
      python3 benchmarks/trial_cost.py trials/hf-padded-llama-1.1b > "$OUT/hf-padded-cost.md" 2>&1 ;;
    hf-truth) # issue 35: the chosen configuration for 200 steps, its own count against the study's figure
      python3 benchmarks/chosen_long_run.py trials/hf-padded-llama-1.1b --steps 200 --after 10 --out "$OUT/truth" | tee "$OUT/hf-truth.jsonl"
      python3 benchmarks/job_truth.py "$OUT/truth/long-run-steps.jsonl" "$OUT/truth/long-run.log" --warmup 3 --measure 8 \
        --max-steps 60 --label chosen-1.1b | tee -a "$OUT/hf-truth.jsonl" ;;
    hf-variants) # issue 35: padded (random order), length-grouped and packed variants of a 0.3B job, 200 steps each:
      # the trial's rule on the steps as they came against the job's own count (benchmarks/job_truth.py)
      S="examples/hf_trainer/train.py --output_dir /tmp/var --report_to none --save_strategy no --disable_tqdm true
         --logging_steps 1000 --d_model 1024 --n_layers 12 --n_heads 16 --n_kv_heads 4 --ffn_hidden 4096 --vocab_size 32000
         --lengths lognormal --mean_len 700 --min_len 16 --max_len 2048 --n_samples 20000 --per_device_train_batch_size 16
         --gradient_accumulation_steps 2 --bf16 true --tf32 true --max_steps 200 --own_count_after 10"
      for v in "padded:--sampling random" "grouped:--sampling group_by_length" "packed:--packing true"; do
        name=${v%%:*}; rm -f "$OUT/var-$name.jsonl"
        AUTOTUNE_REPORT="$OUT/var-$name.jsonl" AUTOTUNE_STEPS=0,1000000 python3 $S ${v#*:} > "$OUT/var-$name.log" 2>&1
        python3 benchmarks/job_truth.py "$OUT/var-$name.jsonl" "$OUT/var-$name.log" --warmup 3 --measure 8 --max-steps 60 \
          --label "$name" | tee -a "$OUT/hf-variants.jsonl"
      done ;;
    hf-live) # issue 35, after the cycle rule: the expert's setting (the search's choice) and its compile twin as one-trial
      # studies of the padded 1.1B job, live; LIVE_STEPS: command.max_steps (two cycles of the grouped order: 103)
      for c in chosen:false compile:default; do python3 -c 'import sys, yaml; name, comp = sys.argv[1].split(":")
d = yaml.safe_load(open("benchmarks/spaces/hf-padded-llama-1.1b.yaml")); d["name"] = f"hf-live-{name}"
d["space"] = {"micro_batch_size": 16, "precision": "bf16", "compile": comp != "false" and comp, "activation_checkpointing": "none"}
for k, v in {"optim": "adamw_torch_fused", "attn_implementation": "sdpa", "sampling": "group_by_length"}.items():
    d["command"]["knobs"][k]["values"] = [v]
d["command"]["max_steps"] = int(sys.argv[2]); d["baseline"] = {}
d["study"] = {"trials": 1, "confirm_top": 0, "trial_timeout_min": 1.5 if comp != "false" else 4}
yaml.safe_dump(d, open(f"benchmarks/spaces/hf-live-{name}.yaml", "w"), sort_keys=False)' "$c" "${LIVE_STEPS:-110}"
        at search "benchmarks/spaces/hf-live-${c%%:*}.yaml" --gpus 0 --fresh 2>&1 | tail -4 | tee -a "$OUT/hf-live.log"
        r=trials/hf-live-${c%%:*}/runs/0000; cp $r/steps.jsonl "$OUT/live-${c%%:*}-steps.jsonl"
        python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print(json.dumps({"status": d["status"], "reason": d["reason"], "window": d["output"].get("window"), "stop": d["applied"].get("stop")}))' $r/result.json | tee -a "$OUT/hf-live.jsonl"
      done ;;
    hf-cost) # issue 35: the callback's own cost: the packed 0.3B job, 100 steps, with the callback reporting every
      # step (never stopping) and without it, alternating HF_REPS times; the job's own count after step 10 each
      S="examples/hf_trainer/train.py --output_dir /tmp/cost --report_to none --save_strategy no --disable_tqdm true
         --logging_steps 1000 --d_model 1024 --n_layers 12 --n_heads 16 --n_kv_heads 4 --ffn_hidden 4096 --vocab_size 32000
         --max_len 2048 --n_samples 8000 --per_device_train_batch_size 16 --gradient_accumulation_steps 2 --bf16 true
         --tf32 true --packing true --max_steps ${COST_STEPS:-100} --own_count_after 10"
      for i in $(seq "${HF_REPS:-3}"); do for with in 1 0; do rm -f /tmp/cost.jsonl
        if [ $with = 1 ]; then AUTOTUNE_REPORT=/tmp/cost.jsonl AUTOTUNE_STEPS=0,1000000 python3 $S > /tmp/cost.log 2>&1
        else NO_AUTOTUNE_CALLBACK=1 python3 $S > /tmp/cost.log 2>&1; fi
        echo "{\"rep\": $i, \"callback\": $with, \"own\": $(grep '^own:' /tmp/cost.log | sed 's/^own: //'), \"steps_reported\": $(cat /tmp/cost.jsonl 2>/dev/null | grep -c '"s"')}" | tee -a "$OUT/hf-cost.jsonl"
      done; done ;;
    grid)   # the 48-point landscape, once each; stop launching after GRID_MIN minutes (resume finishes it)
      at search search_spaces/gpt2-small-grid.yaml --gpus 0,1 --timeout-min "${GRID_MIN:-60}" 2>&1 | tee -a "$OUT/grid.log" ;;
    fp32)   # the fp32 reference of the same workload
      at search search_spaces/gpt2-small-fp32.yaml --gpus 0 2>&1 | tee -a "$OUT/fp32.log" ;;
    llama)
      at search search_spaces/llama-1b.yaml --gpus 0,1 --timeout-min "${LLAMA_MIN:-30}" 2>&1 | tee -a "$OUT/llama.log" ;;
    hopper) # a fresh default-sampler (TPE) study of at most 24 trials; starts with the grid's compile cache
      # (wall time only: compilation happens in the warm-up, never inside the measured steps)
      mkdir -p trials/gpt2-small-hopper
      [ -d trials/gpt2-small-hopper/inductor-cache ] || cp -r trials/gpt2-small-grid/inductor-cache trials/gpt2-small-hopper/ 2>/dev/null
      at search search_spaces/gpt2-small-hopper.yaml --gpus 0,1 2>&1 | tee -a "$OUT/hopper.log" ;;
    ddp)    # 2-GPU DDP search with the NCCL knobs (one trial at a time: each takes both GPUs)
      at search search_spaces/gpt2-small-ddp.yaml --gpus 0,1 --timeout-min "${DDP_MIN:-30}" 2>&1 | tee -a "$OUT/ddp.log" ;;
    ddp-truth) # issue 16 part 1: the plain DDP script (benchmarks/plain_ddp.py) against autotune's trials of the same
      # configuration (GPT-2 small, bf16, compile, micro-batch 64, bucket 25 MB), one after the other: 1 GPU (accumulation
      # 4), 2 GPUs (accumulation 4) with Dynamo's DDP graph split and without, with torch.profiler traces of two steps of each (prof/)
      P="python3 -m torch.distributed.run --standalone"
      # both GPUs' SM clock and power every 0.5 s through the whole stage (the trials record their own: the DDP
      # trials of 2026-11-29 ran power-capped at 1,626-1,705 MHz against 1,894 on one GPU)
      nvidia-smi --query-gpu=timestamp,index,clocks.sm,power.draw,clocks_throttle_reasons.active --format=csv \
        -lms 500 > "$OUT/ddp-truth-clocks.csv" 2>&1 & smi=$!
      for graph in split whole; do $P --nproc-per-node 2 benchmarks/plain_ddp.py --compile $graph --profile "$OUT/prof" \
        2>>"$OUT/plain.err" | tee -a "$OUT/plain.jsonl"; done
      CUDA_VISIBLE_DEVICES=0 $P --nproc-per-node 1 benchmarks/plain_ddp.py --compile split 2>>"$OUT/plain.err" | tee -a "$OUT/plain.jsonl"
      python3 -c 'import yaml; d = yaml.safe_load(open("search_spaces/gpt2-small-ddp.yaml")); d["name"] = "ddp-truth"
d["workload"].update(global_batch_size=512, warmup_steps=3, measure_steps=8)
d["space"] = {"micro_batch_size": 64, "precision": "bf16", "compile": True, "parallel": "ddp", "bucket_cap_mb": 25,
              "fused_optimizer": True, "ddp_compile": ["split", "whole"]}  # fused AdamW: as the plain script
d["study"] = {"trials": 2, "sampler": "grid", "confirm_top": 0, "prune_below": 0, "trial_timeout_min": 5}
d["baseline"] = {"ddp_compile": "split"}; yaml.safe_dump(d, open("/tmp/ddp-truth.yaml", "w"))
d["name"], d["workload"]["world_size"], d["workload"]["global_batch_size"] = "ddp-truth-1gpu", 1, 256
d["space"] = {k: v for k, v in d["space"].items() if k not in ("parallel", "bucket_cap_mb", "ddp_compile")}
d["study"]["trials"], d["baseline"] = 1, {}; yaml.safe_dump(d, open("/tmp/ddp-truth-1gpu.yaml", "w"))'
      AUTOTUNE_PROFILE="$OUT/prof" at search /tmp/ddp-truth.yaml --gpus 0,1 --fresh 2>&1 | tee -a "$OUT/ddp-truth.log"
      at search /tmp/ddp-truth-1gpu.yaml --gpus 0 --fresh 2>&1 | tee -a "$OUT/ddp-truth.log"
      at report trials/ddp-truth --format markdown > "$OUT/ddp-truth-report.md" 2>&1
      $P --nproc-per-node 2 benchmarks/plain_ddp.py --compile split 2>>"$OUT/plain.err" | tee -a "$OUT/plain.jsonl"
      kill "$smi"; gzip -f "$OUT"/prof/*.json ;;
    comm-hooks) # issue 16 part 2: DDP gradient compression on 2x H200, the ddp-truth configuration (GPT-2 small, bf16,
      # compile, micro-batch 64, bucket 25 MB, fused AdamW): none, fp16/bf16 compress, PowerSGD rank 4, each compressed
      # trial with the loss check against the uncompressed run (study.loss_check); FSDP2's knobs: stage fsdp8b-2k
      python3 -c 'import yaml; d = yaml.safe_load(open("search_spaces/gpt2-small-ddp.yaml")); d["name"] = "comm-hooks"
d["workload"].update(global_batch_size=512, warmup_steps=3, measure_steps=8)
d["space"] = {"micro_batch_size": 64, "precision": "bf16", "compile": True, "parallel": "ddp", "bucket_cap_mb": 25,
              "fused_optimizer": True, "ddp_comm_hook": ["none", "fp16_compress", "bf16_compress", "powersgd"]}
d["study"] = {"trials": 4, "sampler": "grid", "confirm_top": 0, "prune_below": 0, "trial_timeout_min": 5}
d["baseline"] = {"ddp_comm_hook": "none"}; yaml.safe_dump(d, open("/tmp/comm-hooks.yaml", "w"))'
      at search /tmp/comm-hooks.yaml --gpus 0,1 --fresh 2>&1 | tee -a "$OUT/comm-hooks.log"
      at report trials/comm-hooks --format markdown > "$OUT/comm-hooks-report.md" 2>&1 ;;
    check3) # issue 16 part 3: the compiled GPT-2-small best.yaml of 2026-11-29, two chains side by side, each on its own GPU
      # with its own baseline and history.jsonl: GPU 0 a baseline of CHECK_N processes then CHECK_K unchanged checks; GPU 1
      # the same baseline (no fault) then CHECK_K checks slowed by 3% (AUTOTUNE_FAULT=slow:3); CHECK_R processes a check
      # (that best.yaml predates 21 knobs: they are added at their defaults, as the check's error message lists them)
      mkdir -p /tmp/check3/same /tmp/check3/slow && python3 -c 'import yaml; from autotune.search.best import _old_behaviour
from autotune import knobs as c; d = yaml.safe_load(open("benchmarks/results/2026-11-29-h200-gpt2-small/best.yaml"))
d["knobs"].update(_old_behaviour(d["knobs"], [k.name for k in c.CATALOGUE if "train" in k.tasks and k.name not in d["knobs"]], 1))
d.pop("check_baseline", None); [yaml.safe_dump(d, open(f"/tmp/check3/{w}/best.yaml", "w"), sort_keys=False) for w in ("same", "slow")]'
      chain() { # DIR GPU FAULT: a baseline, then the checks, each verdict's exit code on one line
        local ck="python3 -m autotune.cli check /tmp/check3/$1/best.yaml"
        CUDA_VISIBLE_DEVICES=$2 TORCHINDUCTOR_CACHE_DIR=/tmp/check3/inductor-$2 $ck --reset-baseline --repeats "${CHECK_N:-5}" 2>&1
        for i in $(seq "${CHECK_K:-5}"); do echo "$1 ${3:-unchanged} $i rc $(CUDA_VISIBLE_DEVICES=$2 AUTOTUNE_FAULT=$3 \
          TORCHINDUCTOR_CACHE_DIR=/tmp/check3/inductor-$2 $ck --repeats "${CHECK_R:-3}" >> "$OUT/check3-$1.log" 2>&1; echo $?)"; done; }
      chain same 0 "" > "$OUT/check3-same.out" 2>&1 & chain slow 1 slow:3 > "$OUT/check3-slow.out" 2>&1 & wait
      cat "$OUT"/check3-*.out | tee -a "$OUT/check3.log"
      cp /tmp/check3/same/history.jsonl "$OUT/history-same.jsonl"; cp /tmp/check3/slow/history.jsonl "$OUT/history-slow.jsonl"
      tar czf "$OUT/checks.tgz" -C /tmp/check3 --exclude='inductor-*' . ;;
    int4-kernels) # issue 24 part 1: each decode linear of the 8B shape at batch 1, bf16 / tinygemm / gemlite, as a
      # share of the measured copy bandwidth (benchmarks/int4_kernels.py)
      python3 benchmarks/int4_kernels.py --out "$OUT/int4-kernels.jsonl" 2>&1 | tee -a "$OUT/int4-kernels.log" ;;
    memcompile) # issue 24 part 3: compiled trials' measured peaks against the estimate (per block: 6 trials;
      # whole model: 2), then the table of benchmarks/memory_vs_peaks.py
      for f in ${MEM_STUDIES:-memory-compiled memory-compiled-model}; do
        at search "benchmarks/spaces/$f.yaml" --gpus "$GPUS" --fresh 2>&1 | tee -a "$OUT/memcompile.log"
        python3 benchmarks/memory_vs_peaks.py "trials/$f" 2>&1 | tee -a "$OUT/memcompile.log"; done ;;
    compile-saved) # issue 24 part 3: what autograd saves, tensor by tensor, eager against compiled (bf16, fp8,
      # each checkpointing choice; benchmarks/compile_saved.py), bounded by SAVED_S seconds
      timeout -s INT "${SAVED_S:-240}" python3 benchmarks/compile_saved.py --out "$OUT/compile-saved.jsonl" 2>&1 \
        | grep -v -e '^W1' -e 'context_fn' -e 'in-place ops' | tee -a "$OUT/compile-saved.log" ;;
    check1) # issue 24 part 2 on ONE GPU: the configuration of benchmarks/spaces/check-gpt2.yaml (CHECK_YAML), its
      # best.yaml from a one-trial search; a baseline of CHECK_N processes; then CHECK_K unchanged checks and CHECK_K
      # checks slowed by 3% (AUTOTUNE_FAULT=slow:3), interleaved, CHECK_R processes each, against that same baseline
      # (copied beside both best.yaml files, each with its own history.jsonl)
      y=${CHECK_YAML:-benchmarks/spaces/check-gpt2.yaml}; n=$(python3 -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["name"])' "$y")
      at search "$y" --gpus "$GPUS" --fresh > "$OUT/check1-search.log" 2>&1 || { tail -5 "$OUT/check1-search.log"; exit 1; }
      d=/tmp/check1; rm -rf $d; mkdir -p $d/same $d/slow; cp "trials/$n/best.yaml" $d/same/
      at check $d/same/best.yaml --reset-baseline --repeats "${CHECK_N:-5}" > "$OUT/check1-baseline.log" 2>&1
      tail -3 "$OUT/check1-baseline.log"; cp $d/same/best.yaml $d/slow/
      for i in $(seq "${CHECK_K:-5}"); do
        echo "unchanged $i rc $(at check $d/same/best.yaml --repeats "${CHECK_R:-3}" >> "$OUT/check1-same.log" 2>&1; echo $?)"
        echo "slow:3 $i rc $(AUTOTUNE_FAULT=slow:3 at check $d/slow/best.yaml --repeats "${CHECK_R:-3}" \
          >> "$OUT/check1-slow.log" 2>&1; echo $?)"; done | tee -a "$OUT/check1.log"
      cp $d/same/history.jsonl "$OUT/history-same.jsonl"; cp $d/slow/history.jsonl "$OUT/history-slow.jsonl"
      tar czf "$OUT/checks.tgz" -C $d . ;;
    nccl)   # all-reduce bus bandwidth by algorithm and protocol, 1 MB to 1 GB (NCCL_ARGS: extra options, e.g. --algos)
      at nccl --gpus 0,1 --out "trials/nccl${NCCL_TAG:-}" ${NCCL_ARGS:-} 2>&1 | tee -a "$OUT/nccl.log" ;;
    refactor) # issue 12's check: a fresh TPE study of the grid's space on ONE GPU, cold compile cache, compared
      # configuration by configuration with the recorded grid (benchmarks/compare_grid.py)
      timeout -s INT "${REFACTOR_S:-420}" python3 -m autotune.cli search search_spaces/gpt2-small-hopper.yaml --gpus 0 \
        --trials "${TRIALS:-12}" --fresh 2>&1 | tee -a "$OUT/refactor.log"
      python3 benchmarks/compare_grid.py trials/gpt2-small-hopper 2>&1 | tee -a "$OUT/refactor.log"
      at report trials/gpt2-small-hopper --format markdown > "$OUT/report.md" 2>&1 ;;
    cheap-cold|cheap-warm) # issue 13: the hopper search (24 trials + confirmation) with the faster trials, its
      # compile cache in trials/compile-cache (study.compile_cache): cheap-cold starts it empty, cheap-warm is a
      # second study of the same model after it (the re-tuning case). Wall time from start to best.yaml.
      [ "$stage" = cheap-cold ] && rm -rf trials/compile-cache
      python3 -c 'import sys, yaml; d = yaml.safe_load(open("search_spaces/gpt2-small-hopper.yaml")); d["name"] = sys.argv[1]
d["study"]["compile_cache"] = "trials/compile-cache"; yaml.safe_dump(d, open(f"/tmp/{sys.argv[1]}.yaml", "w"))' "$stage"
      t0=$(date +%s); at search "/tmp/$stage.yaml" --gpus 0,1 --fresh 2>&1 | tee -a "$OUT/$stage.log"
      echo "$stage wall_s $(( $(date +%s) - t0 ))" | tee -a "$OUT/stages.log"
      at report "trials/$stage" --format markdown > "$OUT/$stage-report.md" 2>&1 ;;
    cold350) # issue 13: a cold-shape trial of a 355M model (compile on, empty cache), two shapes side by side
      t0=$(date +%s); at search search_spaces/gpt2-medium-compile.yaml --gpus 0,1 --fresh 2>&1 | tee -a "$OUT/cold350.log"
      echo "cold350 wall_s $(( $(date +%s) - t0 ))" | tee -a "$OUT/stages.log" ;;
    landscape) # issue 13: the 96-point GPT-2-medium landscape (resumes); LANDSCAPE_MIN bounds one call
      at search search_spaces/gpt2-medium-landscape.yaml --gpus 0,1 --timeout-min "${LANDSCAPE_MIN:-60}" 2>&1 \
        | tee -a "$OUT/landscape.log" ;;
    gen8b)  # issue 14: the 8B generate grid (bf16/int8/int4 x eager/CUDA graphs, batch 1), both GPUs side by side
      at search search_spaces/llama3-8b-generate.yaml --gpus 0,1 2>&1 | tee -a "$OUT/gen8b.log"
      at report trials/llama3-8b-generate --format markdown > "$OUT/gen8b-report.md" 2>&1 ;;
    gen-int4) # issue 14: int4 kernels at batch 1 with CUDA graphs, reduce-overhead or max-autotune (which adds
      # Inductor's GEMM autotuning and coordinate-descent tuning, toward the 70% roofline): bf16, int4 tinygemm, int4
      # gemlite (a fresh study derived from llama3-8b-generate.yaml; gemlite must travel as a wheel in .whl)
      python3 -c 'import sys, yaml; d = yaml.safe_load(open("search_spaces/llama3-8b-generate.yaml")); d["name"] = "gen-int4"
d["space"].update(weight_quant=["none", "int4_weight_only"], compile=sys.argv[1].split(","))
d["study"]["trials"] = 4 * len(d["space"]["compile"])
d["baseline"] = {"weight_quant": "none"}; yaml.safe_dump(d, open("/tmp/gen-int4.yaml", "w"))' "${INT4_COMPILE:-reduce-overhead,max-autotune}"
      at search /tmp/gen-int4.yaml --gpus "$GPUS" --fresh 2>&1 | tee -a "$OUT/gen-int4.log"
      at report trials/gen-int4 --format markdown > "$OUT/gen-int4-report.md" 2>&1 ;;
    gen-slo) # issue 14: the SLO search (resumes; GENSLO_MIN bounds one call)
      at search search_spaces/llama3-8b-generate-slo.yaml --gpus 0,1 --timeout-min "${GENSLO_MIN:-9}" 2>&1 | tee -a "$OUT/gen-slo.log"
      at report trials/llama3-8b-generate-slo --format markdown > "$OUT/gen-slo-report.md" 2>&1 ;;
    gen-plain) # issue 14: the hand-written reference loop, same machine, right after (GPU 0)
      for q in ${PLAIN_QUANT:-none int8 int4}; do CUDA_VISIBLE_DEVICES=0 python3 benchmarks/plain_generate.py --compile --quant $q \
        2>>"$OUT/gen-plain.err" | tee -a "$OUT/gen-plain.jsonl"; done ;;
    fsdp8b|fsdp8b-2k) # issue 15: Llama-3.1-8B training, FSDP2 on both GPUs (seq 8192 / 2048); resumes; FSDP_MIN bounds one call
      f=search_spaces/llama3-8b-fsdp${stage#fsdp8b}.yaml
      at validate "$f" > "$OUT/$stage-validate.txt" 2>&1
      at search "$f" --gpus 0,1 --timeout-min "${FSDP_MIN:-8}" 2>&1 | tee -a "$OUT/$stage.log"
      at report "trials/$(basename "$f" .yaml)" --format markdown > "$OUT/$stage-report.md" 2>&1 ;;
    memgpu) # issue 15: the memory estimate against max_memory_allocated of real trials (tests/test_memory.py)
      python3 -m pytest -m gpu -s -v -p no:cacheprovider tests/test_memory.py 2>&1 | tee "$OUT/memgpu.log" ;;
    cheap-after|cheap-before|cheap-ref) # issue 28: benchmarks/spaces/cheap-llama-0.9b.yaml, 20 trials and the confirmation
      # (after: compile_scope and compile_dynamic in the space; before: whole-model static compile only, as before issue
      # 28; ref: 40 trials, the longer reference run the chosen configuration is compared with); the search's wall
      # time between the two stamps is its GPU time (one GPU); then where every trial's time went (trial_cost.py)
      python3 -c 'import sys, yaml; d = yaml.safe_load(open("benchmarks/spaces/cheap-llama-0.9b.yaml")); s = sys.argv[1]
d["name"] = "cheap-llama-0.9b-" + s.removeprefix("cheap-")
if s == "cheap-before": d["space"].update(compile_scope=["model"], compile_dynamic=["static"])
if s == "cheap-ref": d["study"].update(trials=40, confirm_top=3)
yaml.safe_dump(d, open(f"/tmp/{s}.yaml", "w"), sort_keys=False)' "$stage"
      n=cheap-llama-0.9b-${stage#cheap-}; echo "{\"stage\": \"$stage\", \"start\": $(date +%s.%N)}" >> "$OUT/cheap-wall.jsonl"
      at search /tmp/$stage.yaml --gpus "${GPUS%%,*}" --timeout-min "${CHEAP_MIN:-25}" 2>&1 | tee -a "$OUT/$stage.log"
      echo "{\"stage\": \"$stage\", \"end\": $(date +%s.%N)}" >> "$OUT/cheap-wall.jsonl"
      python3 benchmarks/trial_cost.py trials/$n > "$OUT/$stage-cost.md" 2>&1
      at report trials/$n --format json > "$OUT/$stage-report.json" 2>&1; cp trials/$n/best.yaml "$OUT/$stage-best.yaml" 2>/dev/null
      tar czf "$OUT/$stage-study.tgz" trials/$n/study.db* trials/$n/best.yaml 2>/dev/null ;;
    numerics-gpu) # issue 34: the numerics check on the GPU: fp8 tensorwise and rowwise on a Llama-style 1B and a GPT-style
      # 1.3B against bf16, and fp16 broken two ways (tests/test_gpu_numerics.py); every check's record in numerics-gpu.jsonl
      AUTOTUNE_GPU_NUMERICS_OUT="$OUT/numerics-gpu.jsonl" python3 -m pytest -m gpu -s -v -p no:cacheprovider \
        tests/test_gpu_numerics.py 2>&1 | tee "$OUT/numerics-gpu.log" ;;
    staged) # issue 34: the staged search of benchmarks/spaces/staged-llama-1.2b.yaml (20 trials and the confirmation),
      # cold compile cache, one GPU; its wall time between the two stamps is its GPU time; then where the time went
      timed_search staged benchmarks/spaces/staged-llama-1.2b.yaml staged-llama-1.2b ;;
    expert) # issue 34: the hand-set expert configurations of the same model by a plain script (benchmarks/plain_train.py),
      # each in its own process: EXPERTS is a list of "precision recipe micro-batch" (whole-model compile, fused AdamW)
      for e in ${EXPERTS:-fp8:tensorwise:16 bf16:-:16}; do IFS=: read -r prec recipe mbs <<< "$e"
        python3 benchmarks/plain_train.py --yaml benchmarks/spaces/staged-llama-1.2b.yaml --precision "$prec" \
          --recipe "${recipe/-/tensorwise}" --mbs "$mbs" --compile --fused 2>>"$OUT/expert.err" | tee -a "$OUT/expert.jsonl"
      done ;;
    expert-in-autotune) # issue 34: the expert's fp8 configuration (tensorwise, micro-batch 16, no checkpointing, fused
      # AdamW) as one autotune trial of each program: per block with a dynamic batch (the search's screening) and whole
      # model, static (its final twin), no numerics check (tests/test_gpu_numerics.py checks fp8), beside plain_train.py
      for prog in block:batch model:static; do IFS=: read -r scope dyn <<< "$prog"
        python3 -c 'import sys, yaml; d = yaml.safe_load(open("benchmarks/spaces/staged-llama-1.2b.yaml")); s, y = sys.argv[1:]
d["name"] = f"expert-{s}-{y}"; d["baseline"] = {}
d["space"] = {"micro_batch_size": 16, "grad_accum_steps": "auto", "precision": "fp8", "fp8_recipe": "tensorwise",
              "compile": True, "compile_scope": s, "compile_dynamic": y, "fused_optimizer": True}
d["study"] = {"trials": 1, "confirm_top": 0, "trial_timeout_min": 5, "loss_check": {"steps": 0}}
yaml.safe_dump(d, open(f"/tmp/expert-{s}.yaml", "w"), sort_keys=False)' "$scope" "$dyn"
        at search "/tmp/expert-$scope.yaml" --gpus "${GPUS%%,*}" --fresh 2>&1 | tee -a "$OUT/expert-in-autotune.log"
        python3 benchmarks/trial_cost.py "trials/expert-$scope-$dyn" >> "$OUT/expert-in-autotune-cost.md" 2>&1
      done ;;
    cost)   # where each trial's time went, for every study under trials/ (benchmarks/trial_cost.py)
      python3 benchmarks/trial_cost.py $(ls -d trials/*/ | grep -v -e compile-cache -e archived) > "$OUT/cost.md" 2>&1 ;;
    gputests)
      python3 -m pytest -m gpu -s -v -p no:cacheprovider tests/test_gpu.py tests/test_trial.py 2>&1 | tee "$OUT/gputests.log" ;;
    *) echo "unknown stage $stage"; exit 2 ;;
  esac
done
tar czf "$OUT/trials.tgz" --exclude=inductor-cache --exclude='*compile-cache*' --exclude='*.pt' trials 2>/dev/null
ls -la "$OUT"
