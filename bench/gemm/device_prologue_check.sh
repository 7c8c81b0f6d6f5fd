#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One call on the GPU machine: prologue plans under build/pw3 edited by hand to other tiles with two
# consumer warpgroups, validated (napkin run's own check sizes and the sizes given in each
# directory's `sets` file) and under compute-sanitizer memcheck, racecheck and synccheck.
# Carried: build/pw3, build/devbin, build/cutlass.tar.xz.
source bench/gemm/device_lib.sh
compile_plans build/pw3/*/
for d in build/pw3/*/; do
  args=$(python3 -c "import json; m = json.load(open('$d/manifest.json'))['diagram']; print(m['file'])")
  for S in "" "$(cat $d/sets 2>/dev/null)"; do
    echo "$(basename $d) [$S]: $($B run $args --machine h100-sxm5 --library $d/libkernel.so --iters 0 $S 2>&1 | grep -E 'validation: [a-z]|error' | cut -c1-140 | tr '\n' ' ')"
  done
  S=$(cat $d/sets 2>/dev/null)
  for t in memcheck racecheck synccheck; do echo "$(basename $d) $t $(timeout 150 compute-sanitizer --tool $t $B run $args --machine h100-sxm5 --library $d/libkernel.so --iters 0 $S 2>&1 | tee $OUT/san_$(basename $d)_$t.log | grep -E 'ERROR SUMMARY|RACECHECK SUMMARY')"; done
done
