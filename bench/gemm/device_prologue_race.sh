#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One call on the GPU machine: the prologue GEMM's plans under build/pw2 (edited by hand to two
# consumer warpgroups) validated at sizes no tile divides and under compute-sanitizer racecheck,
# synccheck and memcheck. Carried: build/pw2, build/devbin, build/cutlass.tar.xz.
source bench/gemm/device_lib.sh
compile_plans build/pw2/*/
for c in $(ls build/pw2); do
  for S in "--check-set b=1 --check-set h=3 --check-set q=1000 --check-set k=1100" "--check-set b=2 --check-set h=2 --check-set q=3000 --check-set k=2500"; do
    $B run examples/$c.napkin --machine h100-sxm5 --library build/pw2/$c/libkernel.so --iters 0 $S 2>&1 | grep -E "validation: b|error" | cut -c1-150
    for t in racecheck synccheck memcheck; do echo "$c $t $(timeout 150 compute-sanitizer --tool $t $B run examples/$c.napkin --machine h100-sxm5 --library build/pw2/$c/libkernel.so --iters 0 $S 2>&1 | tee $OUT/san_${c}_$t.log | grep -E 'ERROR SUMMARY|RACECHECK SUMMARY')"; done
  done
done
