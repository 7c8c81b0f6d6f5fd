#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One call on the GPU machine for examples/differential_attention: compile its plan (written by
# `napkin build --no-compile -o build/plans/differential_attention`), run its GPU test against the
# reference interpreter, `napkin run --iters 0` under compute-sanitizer (memcheck, racecheck,
# synccheck) at two sizes, then bench/attention/differential.py against its peers. Carried:
# build/plans, build/devbin, build/cutlass.tar.xz, .peers (FlashAttention-3's wheel).
source bench/gemm/device_lib.sh
dir=build/plans/differential_attention
t0=$(date +%s); compile_plans $dir; echo "compiled in $(( $(date +%s) - t0 )) s"
grep -h spill $dir/*.log | grep -v " 0 bytes spill" | head -4
NAPKIN_KERNELS=build/plans timeout 200 python3 -m pytest -q -rfE tests/gpu/test_plans.py -p no:cacheprovider -k differential 2>&1 | tail -4 | tee $OUT/test.txt
for tool in memcheck racecheck synccheck; do
  for sets in "" "--set q=300 --set k=2000 --set h=3"; do  # (the second splits the keys: the combine writes f32)
    timeout 200 compute-sanitizer --tool $tool --error-exitcode 9 $B run examples/differential_attention.napkin --machine h100-sxm5 \
      --library $dir/libkernel.so --iters 0 $sets > $OUT/san_$tool.log 2>&1
    echo "$tool [$sets] exit $? $(grep -h SUMMARY $OUT/san_$tool.log)"
  done
done | tee $OUT/sanitize.txt
if ls .peers/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/peers .peers/*.whl 2>&1 | tail -2; export PYTHONPATH=/tmp/peers
fi
timeout 300 python3 bench/attention/differential.py --kernel $dir --out $OUT/differential.jsonl "$@" 2>&1 | tee $OUT/bench.log | tail -12
