# SPDX-License-Identifier: Apache-2.0
# Sourced by the GPU machine's scripts: $OUT, the CUTLASS headers unpacked from
# build/cutlass.tar.xz, napkin and its libraries from build/devbin ($B), and compile_plans DIR...:
# every kernel*.cu of each plan directory compiled for sm_90a (16 at a time) and linked into its
# libkernel.so; a failure is printed with the head of its log.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
[ -d build/cutlass ] || tar -xJf build/cutlass.tar.xz -C build
export LD_LIBRARY_PATH=$PWD/build/devbin:${LD_LIBRARY_PATH:-} NAPKIN_BIN=$PWD/build/devbin/napkin PYTHONUNBUFFERED=1
B=$NAPKIN_BIN
NVCC_FLAGS="-std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -Xptxas=-warn-spills -Xcompiler=-fPIC -diag-suppress=177 -Iruntime/include -Ibuild/cutlass -lineinfo"
compile_plans() {
  # A variant's directory (<variant>/<case>) beside an include/ (another runtime, e.g. `git archive
  # <rev> runtime/include`) compiles against it.
  for d in "$@"; do ls $d/kernel*.cu; done | xargs -P 16 -I{} sh -c 'inc=$(dirname $(dirname {}))/include; [ -d $inc ] && inc="-I$inc" || inc=""; nvcc $inc '"$NVCC_FLAGS"' -c {} -o {}.o > {}.log 2>&1 || { echo "FAILED {}"; head -20 {}.log; }'
  for d in "$@"; do nvcc -shared -gencode=arch=compute_90a,code=sm_90a $d/kernel*.cu.o -o $d/libkernel.so || echo "LINK FAILED $d"; done
}
# The diagram and the sizes a plan directory was built for (its manifest), as napkin run takes them.
plan_args() {
  python3 -c "import json, sys; m = json.load(open(sys.argv[1] + '/manifest.json'))['diagram']; print(m['file'], ' '.join('--set ' + x for x in m['key'].split('#')[0].split()))" "$1"
}
