#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One call on the GPU machine: the plans under build/pv3 compiled, validated by `napkin run`
# (the reference interpreter at sizes no tile divides), then bench/gemm/run.py against eager and
# torch.compile in one process. Carried: build/pv3, build/devbin, build/cutlass.tar.xz.
source bench/gemm/device_lib.sh
compile_plans build/pv3/*/
for d in build/pv3/*/; do
  echo "$(basename $d): $($B run $(plan_args $d) --machine h100-sxm5 --library $d/libkernel.so --iters 0 2>&1 | grep -E 'validation: [a-z]=|error' | cut -c1-150)"
done
timeout 500 python3 bench/gemm/run.py --kernels build/pv3 --cases $(ls build/pv3 | paste -sd,) --compile --reps 30 --out $OUT/gemm.jsonl 2>&1 | tail -5
