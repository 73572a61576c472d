"""task command: your own training command, its knobs rendered into it, measured by what it reports.

Imports nothing: the trial process imports its modules below and must need no more than they do.
The parts, by the process each runs in:

- the parent (autotune search, check, export): render (the trial's knob values in your argv,
  environment and config file), task (the section's rules and warnings, the trial's parameters and
  command, its figure, what counts as unmeasured), measure_only (the flags of a command that
  exist for its measurement only, which export marks) and source (what the job's program says, read
  with ast: its arguments class, its Trainer); the section's schema is config/command.py,
  and each measure mode (command.measure) a plug-in of autotune/modes;
- the trial process (standard library only; autotune/workloads' base and timing): trial (starts the
  job, watches its steps, stops it), report (the job's steps.jsonl read as it grows), log (a
  `measure: log` pattern read from its output), said (what the trial says of a job that ended
  early), window (the measured window of its steps), gpu_peak (the memory NVML saw it hold),
  bursts (its lines held back by a filter that buffers them);
- the job's own processes: hook (command.measure hf / lightning: autotune's callback added to an
  unmodified Trainer through a sitecustomize on the job's PYTHONPATH).

Registered where the plug-ins of their kind are (their packages import them, so they stay there):
the task plug-in tasks/_command.py (it calls task), the export forms of a command study
export/_measured.py and _hf_command.py (they import export's own modules).
"""
