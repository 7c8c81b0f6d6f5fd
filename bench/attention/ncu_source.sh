#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Where napkin's kernel waits, instruction by instruction: Nsight Compute's warp-state sampling
# (SourceCounters) of napkin's kernel on one row of the suite, exported per SASS instruction
# (CSV) and summarised by ncu_source_summary.py. Run on the GPU machine with the kernel
# library built (build/cuda/lib). Full CSV and report under $OUT.
#   bench/attention/ncu_source.sh [d:causal:seqlen ...]   (default 128:0:512)
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
rows=("$@"); [[ ${#rows[@]} -gt 0 ]] || rows=(128:0:512)
for row in "${rows[@]}"; do
  tag=${row//:/_}
  ncu --clock-control none -k regex:fmha_fwd -c 1 --import-source no \
      --section SourceCounters --section WarpStateStats -f -o "$OUT/src_$tag" \
      python3 bench/attention/ncu_rows.py "$row" > "$OUT/ncu_$tag.log" 2>&1 || { tail -20 "$OUT/ncu_$tag.log"; continue; }
  ncu -i "$OUT/src_$tag.ncu-rep" --page source --csv --print-source sass > "$OUT/src_$tag.csv" 2> "$OUT/src_$tag.err" ||
    { echo "source page export failed:"; head -5 "$OUT/src_$tag.err"; }
  echo "== napkin, row $row: warp-state samples by SASS instruction"
  python3 bench/attention/ncu_source_summary.py "$OUT/src_$tag.csv"
done
