"""`autotune hw`: what this machine has."""

from __future__ import annotations

from autotune.cli._app import command
from autotune.cli._console import console as out_console
from autotune.cli._errors import funnel


@command("autotune hw")
def hw() -> None:
    """Detected GPUs (pynvml), the peak FLOPs used for MFU, and software versions."""
    with funnel():
        import autotune
        from autotune.hardware import detect, software_versions
        from autotune.views import hw_tables

        console = out_console()
        for table in hw_tables(detect()):
            console.print(table)
        console.print(software_versions(autotune.__version__))
