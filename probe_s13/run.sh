# Device call: compile the session's plans, validate each with napkin run (--iters 0, sizes no
# tile divides), pytest test_plans on the two test diagrams, memcheck of map_terms, then time.
source bench/gemm/device_lib.sh
P=build/plans_s13
time compile_plans $P/* > $OUT/compile.log 2>&1; grep -E "FAILED|error" $OUT/compile.log | head -20
declare -A SRC=([map_terms]=tests/diagrams/map_terms [heads_inner]=tests/diagrams/heads_inner [three_maps]=probe_s13/three_maps [map_input_bshd]=probe_s13/map_input_bshd [softmax_q_bshd]=probe_s13/softmax_q_bshd)
for n in "${!SRC[@]}"; do echo "== validate $n"; timeout 120 $B run ${SRC[$n]}.napkin --machine h100-sxm5 --library $P/$n/libkernel.so --iters 0 2>&1 | tail -6; done
NAPKIN_KERNELS=$P timeout 200 python3 -m pytest -q tests/gpu/test_plans.py -k "map_terms or heads_inner" 2>&1 | tail -3
timeout 150 compute-sanitizer --tool memcheck $B run tests/diagrams/map_terms.napkin --machine h100-sxm5 --library $P/map_terms/libkernel.so --iters 0 2>&1 | tail -3
for n in "${!SRC[@]}"; do echo "== time $n"; timeout 120 $B run ${SRC[$n]}.napkin --machine h100-sxm5 --library $P/$n/libkernel.so --iters 20 2>&1 | tail -4; done
