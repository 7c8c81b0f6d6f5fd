#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The GEMM-family benchmark (bench/gemm/run.py says what it measures) in one call on the GPU
# machine, from the repository root:
#   bench/gemm/device_gemm.sh deps               HERE, on the CPU machine, before the first call: gathers
#                                                what the GPU machine lacks into .deps/device (git-ignored,
#                                                ~30 MB; carry it): napkin's build dependencies (fmt, CLI11,
#                                                nlohmann_json, toml++) and the pinned CuTe/CUTLASS headers
#   bench/gemm/device_gemm.sh build              THERE: configure and build napkin (cmake, ninja, 16 cores)
#                                                in build/device, write the cases' diagrams (diagrams.py) and
#                                                `napkin build` them in parallel into build/gemm/kernels/<case>
#   bench/gemm/device_gemm.sh bench [run.py args]   THERE, on the machine still warm from `build` (build/ is
#                                                kept between calls on one machine): run.py on those kernels
#   bench/gemm/device_gemm.sh all [run.py args]     build, then bench, in one call
#   bench/gemm/device_gemm.sh check              THERE, after build: napkin's own validation of each library
#                                                (napkin run --library --iters 0: the f64 reference interpreter
#                                                at sizes no tile divides), into $OUT/check.log
# A session's plan (not yet timed on the GPU machine): `deps` here, then calls with carry [".deps"]:
# `build`; `bench --cases 'gemm_*,llama3_*'` (cuBLAS only); `bench --cases 'swiglu*,layernorm*'` and
# `bench --cases 'rmsnorm*,matmul_chain*'` (torch.compile of each plan, max-autotune at 4096 tokens).
# A call cut short loses nothing built: napkin's cache and build/ stay while the machine is warm;
# run.py stops starting cases when its budget is spent and lists those it did not run.
# Environment: CASES (glob patterns: build only these), JOBS (parallel napkin builds, 10), MACHINE
# (napkin's machine; by default from the GPU's name), NAPKIN_BIN (a napkin binary to use instead of
# building one, e.g. one built here and carried with its libraries), LIMIT_S (the call ends within
# it: 570; bench gets what is left as run.py --budget-s).
# Under $OUT: env.txt, build.log, bench.log, gemm.jsonl (rows to append to bench/results/gemm.jsonl).
set -uo pipefail
mode=${1:-}; shift || true
T0=$(date +%s); LIMIT_S=${LIMIT_S:-570}
elapsed() { echo $(( $(date +%s) - T0 )); }
DEPS=$PWD/.deps/device

gather_deps() {  # on the CPU machine: Debian's packages (tools/install_deps.sh) and nvidia-cutlass
  local lib=/usr/lib/x86_64-linux-gnu
  for p in /usr/include/fmt /usr/include/toml++ /usr/include/CLI /usr/include/nlohmann $lib/cmake/fmt \
           $lib/cmake/tomlplusplus /usr/share/cmake/CLI11 /usr/share/cmake/nlohmann_json; do
    [ -e "$p" ] || { echo "deps: $p missing: run tools/install_deps.sh --cuda first" >&2; exit 1; }
  done
  local inc
  inc=$(python3 -c "import cutlass_library, os; print(os.path.join(os.path.dirname(cutlass_library.__file__), 'source', 'include'))") ||
    { echo "deps: no nvidia-cutlass package: run tools/install_deps.sh --cuda first" >&2; exit 1; }
  rm -rf "$DEPS" && mkdir -p "$DEPS/include" "$DEPS/lib/x86_64-linux-gnu/cmake" "$DEPS/share/cmake" "$DEPS/cutlass/include"
  cp -r /usr/include/fmt /usr/include/toml++ /usr/include/CLI /usr/include/nlohmann "$DEPS/include/"
  cp -a $lib/libfmt.so* $lib/libtomlplusplus.so* "$DEPS/lib/x86_64-linux-gnu/"
  cp -r $lib/cmake/fmt $lib/cmake/tomlplusplus "$DEPS/lib/x86_64-linux-gnu/cmake/"
  cp -r /usr/share/cmake/CLI11 /usr/share/cmake/nlohmann_json "$DEPS/share/cmake/"
  cp -r "$inc/cute" "$inc/cutlass" "$DEPS/cutlass/include/"
  git check-ignore -q "$DEPS" || echo "deps: WARNING: $DEPS is not ignored by git" >&2
  echo "deps: $(du -sh "$DEPS" | cut -f1) in $DEPS; name .deps in the device call's carry"
}

case $mode in
  deps) gather_deps; exit 0 ;;
  build|bench|all|check) ;;
  *) sed -n '3,27p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac

OUT=${OUT:-/tmp/out}; mkdir -p "$OUT" build/gemm
LOG=$OUT/build.log
export PYTHONUNBUFFERED=1
export NAPKIN_CUTLASS_INCLUDE=${NAPKIN_CUTLASS_INCLUDE:-$DEPS/cutlass/include}
export NAPKIN_CACHE=$PWD/build/gemm/cache   # napkin's build cache, kept with build/ while the machine is warm
export LD_LIBRARY_PATH=$DEPS/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
if [ -z "${MACHINE:-}" ]; then case $gpu in *H200*) MACHINE=h200 ;; *H100*PCIe*) MACHINE=h100-pcie ;; *) MACHINE=h100-sxm5 ;; esac; fi
export MACHINE
{
  echo "mode $mode, $(date -u +%Y-%m-%dT%H:%M:%SZ), machine file $MACHINE"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit,temperature.gpu --format=csv
  nvcc --version | tail -2; cmake --version | head -1; echo "ninja $(ninja --version)"; c++ --version | head -1
  python3 -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda, 'cuDNN', torch.backends.cudnn.version())"
  echo "git $(git rev-parse --short HEAD 2>/dev/null) $(git status --short 2>/dev/null | wc -l) changed files"
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

build_napkin() {
  if [ -n "${NAPKIN_BIN:-}" ]; then echo "napkin: $NAPKIN_BIN (given)"; return 0; fi
  [ -d "$DEPS" ] || echo "no $DEPS (bench/gemm/device_gemm.sh deps, then carry .deps): using the system's packages"
  local t=$(date +%s)
  { cmake -S . -B build/device -G Ninja -DCMAKE_BUILD_TYPE=Release -DNAPKIN_BUILD_TESTS=OFF -DNAPKIN_BUILD_BENCH=OFF \
      -DNAPKIN_CUDA=OFF -DCMAKE_PREFIX_PATH="$DEPS" -DNAPKIN_CUTLASS_INCLUDE_FOUND="$NAPKIN_CUTLASS_INCLUDE" &&
    ninja -C build/device -j 16 napkin; } >> "$LOG" 2>&1 ||
    { echo "napkin did not build: the end of $LOG:"; tail -30 "$LOG"; return 1; }
  export NAPKIN_BIN=$PWD/build/device/bin/napkin
  echo "napkin built in $(( $(date +%s) - t )) s: $NAPKIN_BIN"
}

build_kernels() {
  local t=$(date +%s) list=build/gemm/diagrams.txt
  python3 bench/gemm/diagrams.py build/gemm/diagrams --cases "${CASES:-}" > $list || return 1
  mkdir -p build/gemm/kernels
  # Each napkin build compiles its plan's translation units in parallel itself (2-5 per case).
  xargs -P "${JOBS:-10}" -L 1 sh -c 'd=build/gemm/kernels/$0; s=$(date +%s); rm -f $d/libkernel.so
    timeout 480 "$NAPKIN_BIN" build "$1" --machine "$MACHINE" -o $d > $d.log 2>&1; rc=$?
    if [ $rc = 0 ]; then echo "built $0 in $(( $(date +%s) - s )) s"; else echo "FAILED $0 (exit $rc, $(( $(date +%s) - s )) s)"; fi' \
    < $list | tee -a "$LOG"
  for f in $(grep -l -E "error|failed|spill" build/gemm/kernels/*.log 2>/dev/null); do
    echo "== $f"; tail -5 "$f"; n=${f%.log}; [ -f $n/nvcc.log ] && grep -E "error|spill" $n/nvcc.log | head -10
  done >> "$LOG"
  echo "kernels: $(ls build/gemm/kernels/*/libkernel.so 2>/dev/null | wc -l) of $(wc -l < $list) built in" \
       "$(( $(date +%s) - t )) s ($(grep -c FAILED "$LOG") failed; logs in build.log)"
}

if [[ $mode == build || $mode == all ]]; then
  build_napkin && build_kernels || { echo "build failed after $(elapsed) s"; exit 1; }
fi
if [[ $mode == check ]]; then
  NAPKIN_BIN=${NAPKIN_BIN:-$PWD/build/device/bin/napkin}
  while read -r name path; do
    lib=build/gemm/kernels/$name/libkernel.so
    [ -f $lib ] || { echo "$name: no library"; continue; }
    timeout 120 "$NAPKIN_BIN" run "$path" --machine "$MACHINE" --library $lib --iters 0 > build/gemm/check_$name.log 2>&1
    echo "$name exit $? $(grep -E 'validation:|error:' build/gemm/check_$name.log | sed -E 's/.*(relative L2)/\1/' | head -2 | tr '\n' ' ')"
  done < build/gemm/diagrams.txt | tee "$OUT/check.log"
  exit 0
fi
if [[ $mode == bench || $mode == all ]]; then
  left=$(( LIMIT_S - $(elapsed) ))
  if (( left < 60 )); then echo "bench: only $left s left of LIMIT_S=$LIMIT_S: run bench in a call of its own"; exit 1; fi
  timeout $(( left + 20 )) python3 bench/gemm/run.py --kernels build/gemm/kernels --out "$OUT/gemm.jsonl" \
    --budget-s $(( left - 15 )) "$@" 2>&1 | tee "$OUT/bench.log"
  rc=$?
  echo "bench exit $rc after $(elapsed) s; rows in \$OUT/gemm.jsonl (append to bench/results/gemm.jsonl)"
  exit $rc
fi
echo "done in $(elapsed) s"
