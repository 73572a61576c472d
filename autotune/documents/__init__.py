"""The files autotune writes and reads back, one typed, versioned owner each: best.yaml (best_file).
They sit below the search, check, export and report: nothing here imports those."""
