"""task command: your own training command, its knobs rendered into it, measured by what it reports.

Imports nothing: the trial process imports its modules below and must need no more than they do.
The parts, by the process each runs in:

- the parent (autotune search, check, export): config (the command section of the YAML, pydantic)
  and render (the trial's knob values in your argv, environment and config file);
- the trial process (standard library only; autotune/workloads' base and timing): trial (starts the
  job, watches its steps, stops it), report (the job's steps.jsonl read as it grows), log (a
  `measure: log` pattern read from its output), said (what the trial says of a job that ended
  early), window (the measured window of its steps), gpu_peak (the memory NVML saw it hold);
- the job's own processes: hook (command.measure hf / lightning: autotune's callback added to an
  unmodified Trainer through a sitecustomize on the job's PYTHONPATH).

The parent's task plug-in is tasks/_command.py, the export forms of a command study
export/_measured.py, _hf_command.py and _measure_only.py.
"""
