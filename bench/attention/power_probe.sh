#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Does what runs beside napkin and cuDNN change their clocks? Times one row of the suite with
# different sets of implementations in the rounds (run.py), while nvidia-smi samples the SM
# clock, board power and temperature every 20 ms; prints each phase's ratio and its mean clock,
# power and temperature over the samples taken under load. Run on the GPU machine with the
# kernel library built.
#   bench/attention/power_probe.sh [d causal seqlen dtype]   (default 128 0 512 bfloat16)
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
d=${1:-128} causal=${2:-0} seqlen=${3:-512} dtype=${4:-bfloat16}
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader,nounits -lms 20 \
  > "$OUT/smi.csv" 2>/dev/null &
smi=$!
: > "$OUT/phases.txt"
for impls in napkin,cudnn napkin,cudnn,fa2 napkin,cudnn napkin,cudnn,fa2; do
  start=$(date +%s.%N)
  python3 bench/attention/run.py --out "$OUT/probe.jsonl" --dtypes "$dtype" --dims "$d" --causal "$causal" \
    --seqlens "$seqlen" --impls "$impls" --reps 200 --note "power probe: $impls" > "$OUT/probe_$impls.log" 2>&1
  ratio=$(grep -E "^$dtype " "$OUT/probe_$impls.log" | awk -F'|' '{print $2, $3}')
  echo "$impls $start $(date +%s.%N) $ratio" >> "$OUT/phases.txt"
done
kill $smi
python3 - "$OUT/smi.csv" "$OUT/phases.txt" <<'EOF'
import datetime, sys
samples = []
for line in open(sys.argv[1]):
    f = [x.strip() for x in line.split(",")]
    try:
        t = datetime.datetime.strptime(f[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
        samples.append((t, float(f[1]), float(f[2]), float(f[3])))
    except (ValueError, IndexError):
        pass
print("impls in the rounds   | napkin  cudnn  fa2 (TFLOP/s) | ratio | SM MHz under load | W under load | deg C | samples")
for line in open(sys.argv[2]):
    parts = line.split()
    impls, t0, t1, rest = parts[0], float(parts[1]), float(parts[2]), " ".join(parts[3:])
    load = [s for s in samples if t0 <= s[0] <= t1 and s[2] > 250]  # under load: > 250 W
    if load:
        mhz = sum(s[1] for s in load) / len(load)
        watts = sum(s[2] for s in load) / len(load)
        temp = sum(s[3] for s in load) / len(load)
        print(f"{impls:21s} | {rest:40s} | {mhz:7.0f} | {watts:6.0f} | {temp:5.1f} | {len(load)}")
    else:
        print(f"{impls:21s} | {rest:40s} | no samples under load")
EOF
