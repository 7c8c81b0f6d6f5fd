#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Where small launches wait, instruction by instruction: ncu's warp-state sampling (SourceCounters,
# the finest interval) of one full-size launch of each named kernel, summarised by
# bench/attention/ncu_source_summary.py.
#   bash bench/gemm/device_small_profile.sh KERNELS_DIR:CASE:KERNEL_REGEX ...
# Plans not yet compiled are compiled here. Carried: the plan directories, build/devbin,
# build/cutlass.tar.xz. Logs under $OUT.
source bench/gemm/device_lib.sh
for spec in "$@"; do
  IFS=: read -r dir c k <<< "$spec"
  [ -f $dir/$c/libkernel.so ] || compile_plans $dir/$c
  tag=$(basename $dir)_$c
  timeout 200 ncu --clock-control none -k regex:$k -c 1 --import-source no --warp-sampling-interval 0 \
      --section SourceCounters --section WarpStateStats --section LaunchStats --section SpeedOfLight -f -o $OUT/src_$tag \
      python3 bench/gemm/run.py --kernels $dir --cases $c --reps 1 > $OUT/ncu_$tag.log 2>&1 || tail -5 $OUT/ncu_$tag.log
  ncu -i $OUT/src_$tag.ncu-rep --page source --csv --print-source sass > $OUT/src_$tag.csv 2> $OUT/src_$tag.err
  ncu -i $OUT/src_$tag.ncu-rep --page details --print-units base > $OUT/det_$tag.txt 2>&1
  echo "== $tag ($k)"
  grep -E "Duration|Elapsed Cycles|SM Active Cycles|Grid Size|Registers Per|Warp Cycles Per Issued|DRAM Throughput" $OUT/det_$tag.txt | sed -E 's/ +/ /g' | paste -sd';' | cut -c1-400
  python3 bench/attention/ncu_source_summary.py $OUT/src_$tag.csv 22 | cut -c1-230
done 2>&1 | tee $OUT/summary.txt
cd $OUT && tar -czf profiles.tgz src_*.csv det_*.txt && rm -f src_*.csv src_*.ncu-rep det_*.txt
