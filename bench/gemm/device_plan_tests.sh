#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One call on the GPU machine: compile the plans of tests/gpu/test_plans.py's EXAMPLES under
# build/plans (napkin build --no-compile; 16 cores) and run those GPU tests (each plan against the
# reference interpreter at odd sizes). Carried: build/plans, build/devbin, build/cutlass.tar.xz.
source bench/gemm/device_lib.sh
t0=$(date +%s)
names=$(python3 -c "import ast; t=open('tests/gpu/test_plans.py').read(); print(' '.join(ast.literal_eval(t.split('EXAMPLES = ',1)[1].split(']',1)[0]+']')))")
compile_plans $(for n in $names; do echo build/plans/$n; done)
echo "compiled in $(( $(date +%s) - t0 )) s"
NAPKIN_KERNELS=build/plans timeout 300 python3 -m pytest -q -rfE tests/gpu/test_plans.py -p no:cacheprovider 2>&1 | tail -8 | tee $OUT/test_plans.txt
