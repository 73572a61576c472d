"""Run autotune as a release without the knob fsdp_backward_prefetch would (the catalogue before it
existed)."""

import sys

import autotune.knobs as k

k.CATALOGUE = tuple(x for x in k.CATALOGUE if x.name != "fsdp_backward_prefetch")
k.BY_NAME.pop("fsdp_backward_prefetch")
from autotune.cli import main  # noqa: E402

sys.argv = ["autotune", *sys.argv[1:]]
main()
