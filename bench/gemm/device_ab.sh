#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One call on the GPU machine: an A/B of variants of the same plans, in one process.
# $PV/<variant>/<case>/ (default build/pv2) holds napkin build --no-compile output, edited by hand
# for the variant (a Config, a split count, a column kernel's lanes); a variant with its own
# include/ (e.g. `git archive <rev> runtime/include`) compiles against it. Where build/plans is
# carried too, its prologue plans are checked first (device_prologue_check.sh: validation at odd
# sizes, memcheck, racecheck, synccheck) and its column plans validated at odd sizes. Then run.py
# times every variant's cases (the first variant, alphabetical, is the base).
# Carried: $PV, build/devbin, build/cutlass.tar.xz (and build/plans). Logs under $OUT.
source bench/gemm/device_lib.sh
PV=${PV:-build/pv2}
compile_plans $(ls -d $PV/*/*/ | grep -v '/include/$')
if [ -d build/plans ]; then
  prologue=$(grep -l "napkin/gemm_prologue.h" build/plans/*/kernel*.cu | xargs -n1 dirname | sort -u)
  compile_plans $prologue build/plans/column_statistics build/plans/column_variance
  bash bench/gemm/device_prologue_check.sh $prologue 2>&1 | tee $OUT/checks.txt
  for sizes in "t=3001 c=520" "t=100000 c=40" "t=777 c=4100"; do
    set -- $sizes
    for c in column_statistics column_variance; do
      echo "$c $sizes: $($B run tests/diagrams/$c.napkin --machine h100-sxm5 --library build/plans/$c/libkernel.so --iters 0 --check-set $1 --check-set $2 2>&1 | grep -E 'validation: [a-z]|validation \(|error' | cut -c1-120 | tr '\n' ' ')"
    done
  done 2>&1 | tee -a $OUT/checks.txt
fi
variants=$(ls $PV); base=$(echo $variants | cut -d' ' -f1)
cases=$(ls $PV/$base | grep -v '^include$' | paste -sd,)
also=""; for v in $variants; do [ $v = $base ] || also="$also --also $v=$PV/$v"; done
timeout 300 python3 bench/gemm/run.py --kernels $PV/$base $also --cases $cases --reps 50 --out $OUT/ab.jsonl 2>&1 | tail -8
