#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One call on the GPU machine: the prologue GEMM's two consumer
# warpgroups. Compiles the prologue plans under build/plans and the variants under build/pv2;
# the GPU plan tests of the prologue plans; sanitizers on normalised_projection (two warpgroups)
# at sizes no tile divides; run.py's A/B of build/pv2 (scaled_projection: fused with one or two
# warpgroups, or the plan) and the prologue plans' times.
# Carried: build/plans, build/pv2, build/devbin, build/cutlass.tar.xz. Logs under $OUT.
source bench/gemm/device_lib.sh
names="feature_projection feature_sums linear_attention normalised_linear_attention normalised_projection scaled_projection"
dirs="$(for n in $names; do echo build/plans/$n; done) $(ls -d build/pv2/*/*)"
compile_plans $dirs
sel=$(echo $names | sed 's/ / or /g')
NAPKIN_KERNELS=build/plans timeout 300 python3 -m pytest -q -rfE tests/gpu/test_plans.py -p no:cacheprovider -k "$sel" 2>&1 | tail -4
P=tests/diagrams/normalised_projection.napkin; L=build/plans/normalised_projection/libkernel.so
echo "--check-set t=1000 --check-set d=200 --check-set e=72" > build/plans/normalised_projection/sets
bash bench/gemm/device_prologue_check.sh build/plans/normalised_projection
for r in 1 2; do echo "normalised_projection: $($B run $P --machine h100-sxm5 --library $L --iters 30 2>&1 | grep -E 'timed|error' | cut -c1-160)"; done
timeout 240 python3 bench/gemm/run.py --kernels build/pv2/a_fused_w2 --also fused_w1=build/pv2/b_fused_w1 --also plan=build/pv2/c_plan --cases scaled_projection --reps 20 --out $OUT/ab.jsonl 2>&1 | tail -2
timeout 240 python3 bench/gemm/run.py --kernels build/plans --cases linear_attention,normalised_linear_attention,scaled_projection --reps 50 --out $OUT/gemm.jsonl 2>&1 | tail -4
