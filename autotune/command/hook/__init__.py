"""command.measure hf / lightning: the import hook (launch) that adds autotune's callback to an
unmodified job's Trainer, and the folder (_site) put on the job's PYTHONPATH whose sitecustomize
installs it. Runs in the job's processes: imports nothing."""
