#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The prologue plans of build/plans (compiled by an earlier call of the session, or here) timed by
# `napkin run --iters 30` at several sizes (measured beside predicted, validated first): data for
# the prologue estimate's start-up and epilogue terms. Carried: build/plans, build/devbin,
# build/cutlass.tar.xz.
#   bash bench/gemm/device_prologue_sizes.sh "CASE:AXIS:SIZE SIZE ..." ...
source bench/gemm/device_lib.sh
for spec in "$@"; do
  IFS=: read -r c axis sizes <<< "$spec"
  d=build/plans/$c
  [ -f $d/libkernel.so ] || compile_plans $d
  file=$(plan_args $d | cut -d' ' -f1)
  for n in $sizes; do
    echo "$c $axis=$n: $($B run $file --machine h100-sxm5 --library $d/libkernel.so --set $axis=$n --iters 30 2>&1 | grep -E 'timed|error' | sed -E 's/.*median of 30 launches //' | cut -c1-120)"
  done
done 2>&1 | tee $OUT/sizes.txt
