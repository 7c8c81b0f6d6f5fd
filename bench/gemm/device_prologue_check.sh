#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# On the GPU machine: each plan directory given (default build/pw3/*/: units edited by hand, e.g.
# to other tiles or two consumer warpgroups) compiled where it has no libkernel.so, validated by
# `napkin run` at its own check sizes and at the sizes in the directory's `sets` file (--check-set
# flags: sizes no tile divides), and run under compute-sanitizer memcheck, racecheck and synccheck
# at the latter. Carried: the directories, build/devbin, build/cutlass.tar.xz.
#   bash bench/gemm/device_prologue_check.sh [DIR...]
source bench/gemm/device_lib.sh
dirs=("$@"); [[ ${#dirs[@]} -gt 0 ]] || dirs=(build/pw3/*/)
todo=(); for d in "${dirs[@]}"; do [ -f $d/libkernel.so ] || todo+=("$d"); done
[[ ${#todo[@]} -eq 0 ]] || compile_plans "${todo[@]}"
for d in "${dirs[@]}"; do
  n=$(basename $d); args=$(plan_args $d); S=$(cat $d/sets 2>/dev/null)
  for sizes in "" "$S"; do
    echo "$n [$sizes]: $($B run $args --machine h100-sxm5 --library $d/libkernel.so --iters 0 $sizes 2>&1 | grep -E 'validation: [a-z]|validation \(|error' | cut -c1-140 | tr '\n' ' ')"
  done
  for t in memcheck racecheck synccheck; do
    echo "$n $t $(timeout 150 compute-sanitizer --tool $t $B run $args --machine h100-sxm5 --library $d/libkernel.so --iters 0 $S 2>&1 | tee $OUT/san_${n}_$t.log | grep -E 'ERROR SUMMARY|RACECHECK SUMMARY')"
  done
done
