#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds libnapkin_attention.so from a runtime/ tree with nvcc (sm_90a), one object per .cu in
# parallel, and refuses ptxas's C75xx diagnostics (WGMMAs serialised or setmaxnreg ignored: a
# silent 25-30 % loss; bench/NOTES.md, v8). With BUILD_SANITIZER=1 also builds the
# compute-sanitizer driver (runtime/tests/sanitize_attention.cu) against that library.
# Used by device_run.sh and ab_variants.sh on the GPU machine (16 cores; this one has 2).
#   bench/attention/build_kernels.sh RUNTIME_DIR OUT_DIR PTXAS_LOG [extra nvcc flags...]
# Leaves OUT_DIR/lib/libnapkin_attention.so, OUT_DIR/obj/*.log and, with the sanitizer,
# OUT_DIR/runtime/sanitize_attention. Needs the CuTe headers in .cutlass/include.
set -uo pipefail
src=$1 out=$2 ptxas_log=$3
shift 3
flags="-std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -I$src/include -I.cutlass/include --expt-relaxed-constexpr -Xcompiler -fPIC -Xptxas -v $*"
mkdir -p "$out/lib" "$out/obj"
export flags out
ls "$src"/src/*.cu | xargs -P "${JOBS:-16}" -I{} sh -c \
  'b=$(basename {} .cu); nvcc $flags -c {} -o "$out/obj/$b.o" > "$out/obj/$b.log" 2>&1 || { cat "$out/obj/$b.log"; exit 1; }' || exit 1
nvcc -shared -o "$out/lib/libnapkin_attention.so" "$out"/obj/*.o || exit 1
cat "$out"/obj/*.log | grep -E "Compiling entry|spill|Used|C75[0-9][0-9]" > "$ptxas_log"
if grep -q "C75[0-9][0-9]" "$ptxas_log"; then
  grep "C75" "$ptxas_log" | head -5
  echo "ERROR: ptxas serialised WGMMA (C75xx)"
  exit 1
fi
if [[ ${BUILD_SANITIZER:-0} == 1 ]]; then
  mkdir -p "$out/runtime"
  lib=$(cd "$out/lib" && pwd)
  nvcc $flags "$src/tests/sanitize_attention.cu" -L"$lib" -lnapkin_attention -Xlinker -rpath -Xlinker "$lib" \
    -o "$out/runtime/sanitize_attention" || exit 1
fi
