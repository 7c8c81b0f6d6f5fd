#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Side-by-side napkin/cuDNN ratios of the runs in one JSON-lines file (ab_variants.sh writes one
run per variant, each noted "variant NAME: ..."): one line per suite row, one column per run,
then each run's geomean and rows at or above cuDNN. Short enough for a device call's tail.
    bench/attention/ab_compare.py $OUT/attention.jsonl"""
import json
import math
import sys
from collections import defaultdict


def main(path):
    runs = {}  # run_id -> label, in file order
    tflops = defaultdict(dict)  # (run_id, row) -> impl -> tflops
    for line in open(path):
        r = json.loads(line)
        label = r.get("note", "").removeprefix("variant ").split(":")[0] or r["run_id"]
        runs.setdefault(r["run_id"], label)
        row = (r["dtype"], r["d"], r["causal"], r["seqlen"])
        tflops[(r["run_id"], row)][r["impl"]] = r["tflops"]
    rows = sorted({row for (_, row) in tflops})
    ratio = {}
    for (run, row), t in tflops.items():
        if "napkin" in t and "cudnn" in t:
            ratio[(run, row)] = t["napkin"] / t["cudnn"]
    print("row" + "".join(f"{runs[r][:14]:>16}" for r in runs))
    for row in rows:
        dtype, d, causal, s = row
        cells = []
        for run in runs:
            t = tflops.get((run, row), {})
            cells.append(f"{t.get('napkin', 0):6.0f} {ratio[(run, row)]:.3f}" if (run, row) in ratio else "-")
        print(f"{dtype[:4]} d{d} {'c ' if causal else 'nc'} {s:5d}" + "".join(f"{c:>16}" for c in cells))
    for run in runs:
        rs = [v for (r, _), v in ratio.items() if r == run]
        if rs:
            geo = math.exp(sum(map(math.log, rs)) / len(rs))
            print(f"{runs[run]}: geomean {geo:.3f}, {sum(v >= 1 for v in rs)}/{len(rs)} rows >= cuDNN ({run})")


if __name__ == "__main__":
    main(sys.argv[1])
