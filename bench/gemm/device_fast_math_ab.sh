#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One call on the GPU machine: generated epilogues and prologues with exp and division on the SFU
# (build/pv2/a_new) against the exact ones (build/pv2/b_old), in one process against eager and
# torch.compile; the two-warpgroup variants under build/pw2 through device_prologue_check.sh. Carried: build/pv2, build/pw2, build/devbin, build/cutlass.tar.xz.
source bench/gemm/device_lib.sh
compile_plans build/pv2/*/*/ build/pw2/*/
$B run $(plan_args build/pv2/a_new/swiglu_mlp_2048) --machine h100-sxm5 --library build/pv2/a_new/swiglu_mlp_2048/libkernel.so --iters 0 2>&1 | grep -E "validation|error" | cut -c1-200
for c in linear_attention normalised_linear_attention; do
  $B run $(plan_args build/pv2/a_new/$c) --machine h100-sxm5 --library build/pv2/a_new/$c/libkernel.so --iters 0 --check-set b=1 --check-set h=3 --check-set q=1000 --check-set k=1100 2>&1 | grep -E "validation: b|error" | cut -c1-160
  echo "--check-set b=1 --check-set h=3 --check-set q=1000 --check-set k=1100" > build/pw2/$c/sets
done
bash bench/gemm/device_prologue_check.sh build/pw2/*/
timeout 400 python3 bench/gemm/run.py --kernels build/pv2/a_new --also old=build/pv2/b_old --cases swiglu_mlp_2048,linear_attention,normalised_linear_attention --compile --reps 30 --out $OUT/ab.jsonl 2>&1 | tail -4
