set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
[ -d build/cutlass ] || tar -xJf build/cutlass.tar.xz -C build
export LD_LIBRARY_PATH=$PWD/build/devbin PYTHONUNBUFFERED=1; B=$PWD/build/devbin/napkin
flags="-std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -Xcompiler=-fPIC -diag-suppress=177 -Iruntime/include -Ibuild/cutlass"
ls build/pv2/*/*/kernel*.cu build/pw2/*/kernel*.cu | xargs -P 16 -I{} sh -c "nvcc $flags -c {} -o {}.o > {}.log 2>&1 || echo 'FAILED {}'"
for d in build/pv2/*/*/ build/pw2/*/; do nvcc -shared -gencode=arch=compute_90a,code=sm_90a $d/kernel*.cu.o -o $d/libkernel.so || echo "LINK FAILED $d"; done
S="--check-set b=1 --check-set h=3 --check-set q=1000 --check-set k=1100"
$B run examples/swiglu_mlp.napkin --machine h100-sxm5 --library build/pv2/a_new/swiglu_mlp_2048/libkernel.so --iters 0 --set t=2048 2>&1 | grep -E "validation|error" | cut -c1-200
for c in linear_attention normalised_linear_attention; do
  $B run examples/$c.napkin --machine h100-sxm5 --library build/pv2/a_new/$c/libkernel.so --iters 0 $S 2>&1 | grep -E "validation: b|error" | cut -c1-160
  $B run examples/$c.napkin --machine h100-sxm5 --library build/pw2/$c/libkernel.so --iters 0 $S 2>&1 | grep -E "validation: b|error" | cut -c1-160
  for t in racecheck synccheck; do echo "$c two warpgroups $t $(timeout 120 compute-sanitizer --tool $t $B run examples/$c.napkin --machine h100-sxm5 --library build/pw2/$c/libkernel.so --iters 0 $S 2>&1 | tee $OUT/san_${c}_$t.log | grep -E 'ERROR SUMMARY|RACECHECK SUMMARY')"; done
done
timeout 400 python3 bench/gemm/run.py --kernels build/pv2/a_new --also old=build/pv2/b_old --cases swiglu_mlp_2048,linear_attention,normalised_linear_attention --compile --reps 30 --out $OUT/ab.jsonl 2>&1 | tail -4
