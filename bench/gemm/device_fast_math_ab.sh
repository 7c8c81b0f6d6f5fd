#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One call on the GPU machine: generated epilogues and prologues with exp and division on the SFU
# (build/pv2/a_new) against the exact ones (build/pv2/b_old), in one process against eager and
# torch.compile; the two-warpgroup variants under build/pw2 validated and under racecheck and
# synccheck. Carried: build/pv2, build/pw2, build/devbin, build/cutlass.tar.xz.
source bench/gemm/device_lib.sh
compile_plans build/pv2/*/*/ build/pw2/*/
S="--check-set b=1 --check-set h=3 --check-set q=1000 --check-set k=1100"
$B run examples/swiglu_mlp.napkin --machine h100-sxm5 --library build/pv2/a_new/swiglu_mlp_2048/libkernel.so --iters 0 --set t=2048 2>&1 | grep -E "validation|error" | cut -c1-200
for c in linear_attention normalised_linear_attention; do
  $B run examples/$c.napkin --machine h100-sxm5 --library build/pv2/a_new/$c/libkernel.so --iters 0 $S 2>&1 | grep -E "validation: b|error" | cut -c1-160
  $B run examples/$c.napkin --machine h100-sxm5 --library build/pw2/$c/libkernel.so --iters 0 $S 2>&1 | grep -E "validation: b|error" | cut -c1-160
  for t in racecheck synccheck; do echo "$c two warpgroups $t $(timeout 120 compute-sanitizer --tool $t $B run examples/$c.napkin --machine h100-sxm5 --library build/pw2/$c/libkernel.so --iters 0 $S 2>&1 | tee $OUT/san_${c}_$t.log | grep -E 'ERROR SUMMARY|RACECHECK SUMMARY')"; done
done
timeout 400 python3 bench/gemm/run.py --kernels build/pv2/a_new --also old=build/pv2/b_old --cases swiglu_mlp_2048,linear_attention,normalised_linear_attention --compile --reps 30 --out $OUT/ab.jsonl 2>&1 | tail -4
