"""Test helper run by torchrun as a trial module.

Default: each rank writes an NCCL WARN line into an NCCL debug file (the Tree refusal's wording, as
NCCL 2.28.9 logged it on 2x H200), then aborts as NCCL's watchdog does (no Python error; not seen on
the H200, where the refusal came as a Python error: the replay below).
With FAKE_NCCL_REPLAY=<folder>: each rank copies the NCCL logs and rank failure files captured there
(on 2x H200, NCCL 2.28.9: tests/data/h200x2-nccl-2.28.9/) into the trial folder and exits 1, as
those ranks did.
"""

import os
import shutil
import sys
from pathlib import Path

rank = os.environ.get("RANK", "0")
run_dir = Path(sys.argv[2]).parent
replay = os.environ.get("FAKE_NCCL_REPLAY")
if replay:
    for path in Path(replay).iterdir():
        if path.name.startswith("nccl.") or path.name == f"result.rank{rank}.json":
            shutil.copy(path, run_dir / path.name)
    sys.exit(1)
(run_dir / f"nccl.host.{rank}.log").write_text(
    f"host:{rank}:{rank} [0] NCCL INFO NCCL version 2.28.9+cuda13.0\n"
    f"host:{rank}:{rank} [0] NCCL WARN Error : no algorithm/protocol available for function "
    "AllGather with datatype ncclInt8. NCCL_ALGO was set to Tree.\n"
)
os.abort()
