"""Test helper run by torchrun as a trial module: each rank writes an NCCL WARN line into an NCCL debug file
(the wording of the Tree refusal that issue 5 quotes from NCCL 2.28; a synthetic log, not one captured here),
then aborts as NCCL's watchdog does (no Python error)."""

import os
import sys
from pathlib import Path

rank = os.environ.get("RANK", "0")
(Path(sys.argv[2]).parent / f"nccl.host.{rank}.log").write_text(
    f"host:{rank}:{rank} [0] NCCL INFO NCCL version 2.28.9+cuda13.0\n"
    f"host:{rank}:{rank} [0] NCCL WARN Error : no algorithm/protocol available for function AllGather with datatype "
    "ncclInt8. NCCL_ALGO was set to Tree.\n")
os.abort()
