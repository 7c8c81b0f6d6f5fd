#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One call on the GPU machine for the generated kernels: compile those `napkin build
# --no-compile` wrote under build/gen/<name>_d<D>/kernel.cu into /tmp/gen (16 cores; kept while
# the machine stays up, so a second call reuses them), then
#   tests     the GPU tests of every generated kernel (tests/gpu/test_generated.py), at each head
#             dim built (the _d<D> of the directories' names)
#   sanitize  napkin run --library under compute-sanitizer memcheck, racecheck and synccheck
#   suite     FlashAttention-3's suite (bench/attention/run.py) timing the generated kernels of
#             bench/attention/suite_diagrams.py (carried: build/suite) against cuDNN
#   bench     bench/attention/variants.py (needs the fa3-fwd wheel in .peers for FlashAttention-3)
# Carried: build/gen, .cutlass (CuTe headers; or $CUTLASS_INC), .devbin (a napkin binary and its
# two libraries; or $DEVBIN), .peers for FlashAttention-3 in bench. Logs go to $OUT. TESTS_K: a
# pytest -k filter for tests (the kernels built); SANITIZE_K: the examples to sanitize (all built),
# SANITIZE_DIMS: at which head dims (128).
# BASE_GEN=dir BASE_RUNTIME=dir: a baseline's kernel.cu files (as build/gen) and the runtime/
# they compile against (e.g. `git archive <rev> runtime/include`), compiled beside the others
# and timed in the same process by bench (impl napkin_base): an A/B of an emitter or runtime change.
#   bench/attention/device_generated.sh "tests sanitize bench" [variants.py args...]
set -uo pipefail
what=${1:-tests}; shift || true
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
# The CuTe/CUTLASS headers may travel compressed (build/cutlass.tar.xz: 1 MB for 27 MB).
[[ -d build/cutlass || ! -f build/cutlass.tar.xz ]] || tar -xJf build/cutlass.tar.xz -C build
DEVBIN=${DEVBIN:-.devbin}
export PYTHONUNBUFFERED=1 LD_LIBRARY_PATH=$PWD/$DEVBIN:${LD_LIBRARY_PATH:-} NAPKIN_BIN=$PWD/$DEVBIN/napkin
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
GEN=/tmp/gen; mkdir -p $GEN
t0=$(date +%s)
flags="-std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -Xptxas=-warn-spills -Xcompiler=-fPIC -shared -diag-suppress=177 -Iruntime/include -I${CUTLASS_INC:-.cutlass/include}"
for d in build/gen/*/; do n=$(basename $d); mkdir -p $GEN/$n; cmp -s $d/kernel.cu $GEN/$n/kernel.cu || { cp $d/* $GEN/$n/; rm -f $GEN/$n/libkernel.so; }; done
if [[ -n ${BASE_GEN:-} ]]; then
  mkdir -p /tmp/gen_base; cp -r $BASE_GEN/* /tmp/gen_base/
  base_flags=${flags/-Iruntime\/include/-I$BASE_RUNTIME\/include}
  ls -d /tmp/gen_base/*/ | xargs -P 8 -I{} sh -c "test -f {}libkernel.so || nvcc $base_flags {}kernel.cu -o {}libkernel.so > {}nvcc.log 2>&1 || echo 'FAILED base {}'" &
fi
ls -d $GEN/*/ | xargs -P 16 -I{} sh -c "test -f {}libkernel.so || nvcc $flags {}kernel.cu -o {}libkernel.so > {}nvcc.log 2>&1 || echo 'FAILED {}'"
echo "kernels ready in $(( $(date +%s) - t0 )) s: $(ls $GEN/*/libkernel.so | wc -l)"
grep -c spill $GEN/*/nvcc.log | grep -v ":0" | tee "$OUT/spills.txt"
if [[ $what == *tests* ]]; then
  for dim in $(ls -d $GEN/*_d* | sed 's/.*_d//' | sort -un); do
    mkdir -p /tmp/k$dim; for d in $GEN/*_d$dim; do ln -sfn $d /tmp/k$dim/$(basename $d _d$dim); done
    NAPKIN_KERNELS=/tmp/k$dim timeout 300 python3 -m pytest -q -rfE tests/gpu/test_generated.py -p no:cacheprovider ${TESTS_K:+-k "$TESTS_K"} 2>&1 | tee "$OUT/tests_d$dim.log" | tail -8
  done
fi
if [[ $what == *sanitize* ]]; then
  # Validation only (--iters 0), at napkin run's small default sizes (batch and heads 2, q 197,
  # k 263), then at 560 keys (whole 16-byte vectors of a bool mask: the summaries' vector loads).
  for tool in memcheck racecheck synccheck; do
    for d in $(for dim in ${SANITIZE_DIMS:-128}; do ls -d $GEN/*_d$dim; done); do
      dim=${d##*_d}; n=$(basename $d _d$dim); [[ -z ${SANITIZE_K:-} || " $SANITIZE_K " == *" $n "* ]] || continue
      src=examples/$n.napkin; [[ -f $src ]] || src=tests/diagrams/$n.napkin
      # The GPU tests' params (PARAMS in tests/gpu/test_generated.py): masks that cut inside tiles.
      params=$(python3 -c "import ast; t=open('tests/gpu/test_generated.py').read(); print(' '.join('--set ' + x for x in ast.literal_eval(t.split('PARAMS = ', 1)[1].split(chr(10), 1)[0]).get('$n', [])))")
      # (q = 384: whole 192-row tiles, so that d = 64 runs its 192-key schedule; q = 5: the short-row
      # schedules, their keys split; q = 1: decoding, a GQA group the rows.)
      for sets in "" "--set k=560" "--set q=384 --set k=560" "--set q=5 --set k=700" "--set q=1 --set k=1000"; do tag=$(echo "$sets" | tr -d ' =-' | sed 's/set/_/g')
        echo "timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 $NAPKIN_BIN run $src --machine h100-sxm5 --library $d/libkernel.so --set d=$dim --iters 0 $params $sets > $OUT/san_${tool}_${n}_d$dim$tag.log 2>&1; echo \"$tool ${n}_d$dim$tag exit \$?\""
      done
    done
  done | xargs -P 6 -I{} sh -c "{}" | sort | tee "$OUT/sanitize.txt" | awk '{print $3, $4}' | sort | uniq -c
  grep -v "exit 0" "$OUT/sanitize.txt" | head
  grep -H "SUMMARY" $OUT/san_*.log | sed "s|$OUT/||" | tee -a "$OUT/sanitize.txt" | grep -v " 0 errors\| 0 hazards" | head
  tar -czf "$OUT/sanitize_logs.tar.gz" -C "$OUT" $(cd "$OUT" && ls san_*.log) && rm -f $OUT/san_*.log  # one file back, not dozens
fi
if [[ $what == *suite* ]]; then  # FlashAttention-3's suite on generated kernels (bench/attention/suite_diagrams.py)
  mkdir -p /tmp/suite; t0=$(date +%s)
  for d in build/suite/*/; do n=$(basename $d); mkdir -p /tmp/suite/$n; cp $d/* /tmp/suite/$n/; done
  ls -d /tmp/suite/*/ | xargs -P 16 -I{} sh -c "test -f {}libkernel.so || nvcc $flags {}kernel.cu -o {}libkernel.so > {}nvcc.log 2>&1 || echo 'FAILED {}'"
  echo "suite kernels ready in $(( $(date +%s) - t0 )) s: $(ls /tmp/suite/*/libkernel.so | wc -l)"
  timeout 420 python3 bench/attention/run.py --napkin-kernels /tmp/suite --impls napkin,cudnn --out "$OUT/suite.jsonl" "$@" 2>&1 | tee "$OUT/suite.log" | grep -v "^  INVALID" | tail -60
fi
if [[ $what == *bench* ]]; then
  if ls .peers/*.whl > /dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/peers .peers/*.whl 2>&1 | tail -2; export PYTHONPATH=/tmp/peers
  fi
  wait  # (the baseline's compiles)
  NAPKIN_KERNELS=$GEN timeout 560 python3 bench/attention/variants.py --out "$OUT/variants.jsonl" ${BASE_GEN:+--also base=/tmp/gen_base} "$@" 2>&1 | tee "$OUT/bench.log" | tail -100
fi
