#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Writes every case of bench/gemm/cases.py with `napkin build --no-compile` under build/plans/,
# and what the GPU machine needs beside them (build/cutlass, build/devbin) for device_gemm.sh.
set -euo pipefail
NAPKIN=${NAPKIN:-build/release/bin/napkin}
mkdir -p build/plans build/devbin
python3 bench/gemm/cases.py | while read -r name path sets; do
  args=""; for s in $sets; do args="$args --set $s"; done
  $NAPKIN build $path --machine h100-sxm5 -o build/plans/$name --no-compile $args > /dev/null
done
# The GEMM-family examples at their own sizes, for tests/gpu/test_plans.py (NAPKIN_KERNELS=build/plans).
for name in $(python3 -c "import ast,sys; t=open('tests/gpu/test_plans.py').read(); print(' '.join(ast.literal_eval(t.split('EXAMPLES = ',1)[1].split(']',1)[0]+']')))"); do
  path=examples/$name.napkin; [ -f $path ] || path=tests/diagrams/$name.napkin
  $NAPKIN build $path --machine h100-sxm5 -o build/plans/$name --no-compile > /dev/null
done
inc=$(python3 -c "import cutlass_library, os; print(os.path.join(os.path.dirname(cutlass_library.__file__), 'source', 'include'))")
rm -rf build/cutlass && mkdir -p build/cutlass && cp -r "$inc/cute" "$inc/cutlass" build/cutlass/
tar -cJf build/cutlass.tar.xz -C build cutlass  # carry this one (1 MB): the device scripts unpack it
cp "$NAPKIN" build/devbin/napkin && strip build/devbin/napkin
for l in $(ldd "$NAPKIN" | awk '/fmt|toml/ {print $3}'); do cp "$l" build/devbin/; done
echo "$(ls build/plans | wc -l) plans under build/plans; $(du -sh build/plans build/cutlass.tar.xz build/devbin | tr '\n' ' ')"
# Sizes no tile divides for the prologue plans' checks (device_prologue_check.sh reads `sets`).
while read -r name sets; do
  [ -d build/plans/$name ] && echo "$sets" > build/plans/$name/sets
done <<'SETS'
gated_softplus --check-set t=1001 --check-set d=200 --check-set e=72
normalised_projection --check-set t=3001 --check-set d=200 --check-set e=136
feature_sums --check-set t=3001 --check-set d=200 --check-set e=136
feature_projection --check-set t=3001 --check-set d=72 --check-set e=136
linear_attention --check-set b=1 --check-set h=3 --check-set q=1000 --check-set k=1100
normalised_linear_attention --check-set b=1 --check-set h=3 --check-set q=1000 --check-set k=1100
SETS
