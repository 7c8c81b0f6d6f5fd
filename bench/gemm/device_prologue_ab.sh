#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One call on the GPU machine: the prologue GEMM's variants of linear attention, A/B in one
# process. Compiles build/plans (the chosen plans) and every build/pv2/<variant>/<case>/, validates
# the first variant (napkin run at sizes no tile divides, compute-sanitizer), profiles it (ncu:
# per-kernel duration and DRAM throughput), and times every variant with bench/gemm/run.py.
# Carried: build/plans, build/pv2, build/devbin, build/cutlass.tar.xz. Logs under $OUT.
source bench/gemm/device_lib.sh
case=${CASE:-linear_attention}
compile_plans build/plans/$case/ build/pv2/*/$case/
variants=$(ls build/pv2); first=$(echo $variants | cut -d' ' -f1)
if [ -n "${SANITIZE:-}" ]; then  # the chosen plan's library, at sizes no tile divides
  L=build/plans/$case/libkernel.so
  for sets in "" "--check-set b=1 --check-set h=3 --check-set q=1000 --check-set k=4100"; do
    timeout 120 $NAPKIN_BIN run examples/$case.napkin --machine h100-sxm5 --library $L --iters 0 $sets 2>&1 | grep -E "validation: b|error" | cut -c1-160
  done | tee $OUT/run.txt
  for tool in memcheck racecheck synccheck; do
    timeout 120 compute-sanitizer --tool $tool $NAPKIN_BIN run examples/$case.napkin --machine h100-sxm5 --library $L --iters 0 --check-set b=1 --check-set h=2 --check-set q=197 --check-set k=1000 > $OUT/san_$tool.log 2>&1; echo "$tool $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/san_$tool.log)"
  done | tee $OUT/san.txt
fi
for v in $variants; do  # per-kernel duration and DRAM throughput (ncu, clocks not locked)
  timeout 120 ncu --section SpeedOfLight -k regex:prologue --launch-count 2 python3 bench/gemm/run.py --kernels build/pv2/$v --cases $case --reps 1 > $OUT/ncu_$v.txt 2>&1
  echo "$v: $(grep -E 'Duration|DRAM Throughput' $OUT/ncu_$v.txt | awk '{print $1, $(NF)}' | tr '\n' ' ')"
done | tee $OUT/ncu.txt
also=""; for v in $variants; do [ $v = $first ] || also="$also --also $v=build/pv2/$v"; done
timeout 300 python3 bench/gemm/run.py --kernels build/pv2/$first --cases $case --also base=build/plans $also --reps 50 --out $OUT/gemm.jsonl 2>&1 | tail -4 | tee $OUT/bench.txt
