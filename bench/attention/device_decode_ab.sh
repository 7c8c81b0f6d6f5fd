#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One call on the GPU machine: the decoding A/B of a runtime change. Compiles build/gen's kernels
# against this tree's runtime and against build/abase/runtime (`git archive <rev> runtime/include`),
# runs the GPU tests and compute-sanitizer on the split path (one query, 1000 keys), then
# bench/attention/decode.py with both builds in one process.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
[ -d build/cutlass ] || tar -xJf build/cutlass.tar.xz -C build
export CUTLASS_INC=build/cutlass DEVBIN=build/devbin BASE_GEN=build/gen BASE_RUNTIME=build/abase/runtime
TESTS_K=${TESTS_K:-gqa} SANITIZE_K=${SANITIZE_K:-gqa gqa_decode} bash bench/attention/device_generated.sh "compile tests sanitize" > $OUT/generated.log 2>&1
grep -E "passed|failed|exit [1-9]|FAILED" $OUT/generated.log | head; grep -c "exit 0" $OUT/sanitize.txt
for i in $(seq 200); do [ -f /tmp/gen_base/gqa_d128/libkernel.so ] && break; sleep 1; done  # (compiled in the background)
export LD_LIBRARY_PATH=$PWD/build/devbin:${LD_LIBRARY_PATH:-}
PYTHONPATH=$PWD/python timeout 300 python3 bench/attention/decode.py --kernel /tmp/gen/gqa_d128 --also base=/tmp/gen_base/gqa_d128 --reps 50 --out $OUT/decode.jsonl 2>&1 | tail -12
