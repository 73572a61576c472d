"""nccl.json (autotune nccl) -> nccl-busbw.csv: one row per message size, one column per
NCCL_ALGO/NCCL_PROTO setting.
Run here: python3 nccl_csv.py nccl.json > nccl-busbw.csv"""

import csv
import json
import sys

doc = json.load(open(sys.argv[1]))
ok = [c for c in doc["cells"] if c["status"] == "ok"]
w = csv.writer(sys.stdout)
w.writerow(["bytes"] + [f"{c['algo']}/{c['proto']} busbw GB/s" for c in ok])
for i, size in enumerate(doc["sizes"]):
    w.writerow([size] + [f"{c['rows'][i]['busbw_gbs']:.1f}" for c in ok])
w.writerow(["nccl_used"] + [c["nccl_used"] for c in ok])
for c in doc["cells"]:
    if c["status"] != "ok":
        w.writerow([f"{c['algo']}/{c['proto']}", c["status"], c["reason"].split(" | ")[0]])
