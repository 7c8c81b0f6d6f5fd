# Device call 2: the generated attention kernels changed this session (fractional index
# arithmetic, MQA in [s b h d], attention_lse's float mask) through the GPU tests and the
# sanitizers; then per-kernel times (ncu) of the plans whose measured time was 3-5x the estimate.
export CUTLASS_INC=build/cutlass DEVBIN=build/devbin SANITIZE_K="fractional_index mqa_sbhd attention_lse" SANITIZE_DIMS="128 64"
TESTS_K="fractional_index or mqa_sbhd or logsumexp" bash bench/attention/device_generated.sh "tests sanitize" 2>&1 | tail -30
source bench/gemm/device_lib.sh
P=build/plans_s13
compile_plans $P/heads_inner $P/softmax_q_bshd $P/softmax_over_q > $OUT/compile2.log 2>&1; grep -E "FAILED" $OUT/compile2.log | head
for n in heads_inner softmax_q_bshd softmax_over_q; do
  src=$(python3 -c "import json; print(json.load(open('$P/$n/manifest.json'))['diagram']['file'])")
  echo "== $n ($src)"
  timeout 200 ncu --metrics gpu__time_duration.sum --csv $B run $src --machine h100-sxm5 --library $P/$n/libkernel.so --iters 1 > $OUT/ncu_$n.csv 2>&1
  python3 - "$OUT/ncu_$n.csv" <<'PY'
import csv, sys
rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
hdr, rows = rows[0], rows[1:]
ki, vi = hdr.index("Kernel Name"), hdr.index("Metric Value")
last = rows[-12:]
for r in last: print(f"{float(r[vi].replace(',',''))/1000:9.1f} us  {r[ki][:110]}")
PY
done
