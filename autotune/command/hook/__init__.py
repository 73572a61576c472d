"""command.measure hf / lightning: the import hook (launch) that adds autotune's callback to an
unmodified job's Trainer, the folder (_site) put on the job's PYTHONPATH whose sitecustomize
installs it, and the notes of the trainings it does not measure (unmeasured: a child's Trainer, a
second Trainer after the stop). Runs in the job's processes: imports nothing."""
