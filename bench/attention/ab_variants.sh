#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A/B of kernel variants in one GPU-machine call: builds libnapkin_attention.so once per
# variant, runs the GPU tests on each, then the benchmark on each (same arguments, one process
# per variant, cuDNN re-measured in each), and prints the tables last. Full logs in $OUT.
#   bench/attention/ab_variants.sh "name=nvcc flags[@git-rev]" ... -- [run.py args]
# A variant with @dir builds the runtime/ found in dir (a baseline, e.g. from
# `git archive HEAD runtime | tar -x -C dir`; carry dir). Needs the CuTe headers in
# .cutlass/include (carry .cutlass).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
variants=()
while [[ $# -gt 0 && $1 != -- ]]; do variants+=("$1"); shift; done
shift || true
build() {  # name flags src
  local name=$1 flags=$2 src=${3:-runtime}
  # shellcheck disable=SC2086  # flags are words
  bench/attention/build_kernels.sh "$src" "build/ab/$name" "$OUT/ptxas_$name.log" $flags
}
t0=$(date +%s)
for v in "${variants[@]}"; do
  name=${v%%=*}; rest=${v#*=}; flags=${rest%@*}; rev=""; [[ $rest == *@* ]] && rev=${rest##*@}
  build "$name" "$flags" "${rev:+$rev/runtime}" > "$OUT/build_$name.log" 2>&1 &
done
wait
echo "builds: $(( $(date +%s) - t0 )) s"
mkdir -p build/cuda/lib
for v in "${variants[@]}"; do
  name=${v%%=*}
  if [[ ! -f build/ab/$name/lib/libnapkin_attention.so ]]; then echo "$name: build failed"; tail -20 "$OUT/build_$name.log"; continue; fi
  cp build/ab/$name/lib/libnapkin_attention.so build/cuda/lib/
  timeout 150 python3 -m pytest -q tests/gpu/test_attention.py -p no:cacheprovider > "$OUT/tests_$name.log" 2>&1
  echo "$name tests: $(tail -1 "$OUT/tests_$name.log")"
  timeout 300 python3 bench/attention/run.py --out "$OUT/attention.jsonl" --note "variant $name: $v" "$@" > "$OUT/bench_$name.log" 2>&1
done
for v in "${variants[@]}"; do
  name=${v%%=*}; echo "== $name ($v)"; grep -E "^(bfloat16|float16) |geomean" "$OUT/bench_$name.log"
done
