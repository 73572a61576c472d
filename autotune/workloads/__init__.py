"""What runs inside a trial's process: the model, the synthetic data, the knobs and the timing
(torch only)."""
