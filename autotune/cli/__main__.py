"""`python -m autotune.cli`."""

from autotune.cli import main

main()
