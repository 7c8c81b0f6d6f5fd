set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
tar -xJf build/cutlass.tar.xz -C build
export LD_LIBRARY_PATH=$PWD/build/devbin:${LD_LIBRARY_PATH:-} NAPKIN_BIN=$PWD/build/devbin/napkin PYTHONUNBUFFERED=1
flags="-std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -Xptxas=-warn-spills -Xcompiler=-fPIC -diag-suppress=177 -Iruntime/include -Ibuild/cutlass -lineinfo"
ls build/plans/*/kernel*.cu build/pv/*/kernel*.cu | xargs -P 16 -I{} sh -c "nvcc $flags -c {} -o {}.o > {}.log 2>&1 || echo 'FAILED {}'"
for d in build/plans/*/ build/pv/*/; do nvcc -shared -gencode=arch=compute_90a,code=sm_90a $d/kernel*.cu.o -o $d/libkernel.so 2> $d/link.log || echo "LINK FAILED $d"; done
L=build/plans/linear_attention/libkernel.so
timeout 120 ncu --section SpeedOfLight --section Occupancy --section LaunchStats -k regex:prologue $NAPKIN_BIN run examples/linear_attention.napkin --machine h100-sxm5 --library $L --iters 1 > $OUT/ncu.txt 2>&1
grep -E "prologue_gemm_kernel|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Grid Size|Registers Per|Compute \(SM\)" $OUT/ncu.txt | sed -E 's/^ +//' | cut -c1-120 | head -40
also=""; for v in build/pv/*/; do n=$(basename $v); also="$also --also $n=build/pv"; done
for v in s10 s20 o128 o64s2; do mkdir -p build/pvx/$v; ln -sf $PWD/build/pv/$v build/pvx/$v/linear_attention; done
timeout 300 python3 bench/gemm/run.py --kernels build/plans --cases linear_attention --also s10=build/pvx/s10 --also s20=build/pvx/s20 --also o128=build/pvx/o128 --also o64s2=build/pvx/o64s2 --reps 50 --out $OUT/gemm.jsonl 2>&1 | tail -8 | tee $OUT/bench.txt
