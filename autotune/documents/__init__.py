"""The files autotune writes and reads back, one typed, versioned owner each: best.yaml (best_file),
a trial's record (record), the study's confirmation (confirmation), what a study measures and its
name (identity), and history.jsonl, the nightly series of `autotune check` (nightly). They sit below
the search, check, export and report: nothing here imports those."""
