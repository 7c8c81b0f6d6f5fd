set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
tar -xJf build/cutlass.tar.xz -C build
export LD_LIBRARY_PATH=$PWD/build/devbin:${LD_LIBRARY_PATH:-} NAPKIN_BIN=$PWD/build/devbin/napkin PYTHONUNBUFFERED=1
flags="-std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -Xptxas=-warn-spills -Xcompiler=-fPIC -diag-suppress=177 -Iruntime/include -Ibuild/cutlass"
t0=$(date +%s)
ls build/plans/*/kernel*.cu build/plans_base/*/kernel*.cu | xargs -P 16 -I{} sh -c "nvcc $flags -c {} -o {}.o > {}.log 2>&1 || echo 'FAILED {}'"
for d in build/plans/*/ build/plans_base/*/; do nvcc -shared -gencode=arch=compute_90a,code=sm_90a $d/kernel*.cu.o -o $d/libkernel.so 2> $d/link.log || echo "LINK FAILED $d"; done
echo "compiled in $(( $(date +%s) - t0 )) s"; cat build/plans/*/*.log | grep -E "error|spill" | head
L=build/plans/linear_attention/libkernel.so
for sets in "" "--check-set b=1 --check-set h=3 --check-set q=1000 --check-set k=4100" "--check-set b=2 --check-set h=2 --check-set q=130 --check-set k=70"; do
  timeout 120 $NAPKIN_BIN run examples/linear_attention.napkin --machine h100-sxm5 --library $L --iters 20 $sets 2>&1 | tail -6
done | tee $OUT/run.txt
NAPKIN_KERNELS=build/plans timeout 200 python3 -m pytest -x -q tests/gpu/test_plans.py -k linear_attention 2>&1 | tail -5 | tee $OUT/pytest.txt
for tool in memcheck racecheck synccheck; do
  timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 $NAPKIN_BIN run examples/linear_attention.napkin --machine h100-sxm5 --library $L --iters 0 --check-set b=1 --check-set h=2 --check-set q=197 --check-set k=1000 > $OUT/san_$tool.log 2>&1; echo "$tool exit $? $(grep -c 'ERROR SUMMARY: 0' $OUT/san_$tool.log)"
done | tee $OUT/san.txt
timeout 300 python3 bench/gemm/run.py --kernels build/plans --cases linear_attention --also base=build/plans_base --compile --reps 50 --out $OUT/gemm.jsonl 2>&1 | tail -25 | tee $OUT/bench.txt
