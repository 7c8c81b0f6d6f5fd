#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Writes the generated kernel of every attention example the GPU tests run
# (tests/gpu/test_generated.py's EXAMPLES) under build/gen/<name>_d<D>/ with
# `napkin build --no-compile`, at d = 128 and 64 (or DIMS="..."), for device_generated.sh to
# compile there.
#   [DIMS="96 40"] bench/attention/gen_examples.sh [name...]   (default: every example of the GPU tests)
set -euo pipefail
NAPKIN=${NAPKIN:-build/release/bin/napkin}
names=${*:-$(python3 -c "import ast; t=open('tests/gpu/test_generated.py').read(); print(' '.join(ast.literal_eval(t.split('EXAMPLES = ',1)[1].split(']',1)[0]+']')))")}
for n in $names; do
  for d in ${DIMS:-128 64}; do
    src=examples/$n.napkin
    [ -f "$src" ] || src=tests/diagrams/$n.napkin
    $NAPKIN build $src --machine h100-sxm5 --set d=$d -o build/gen/${n}_d$d --no-compile > /dev/null
  done
done
echo "$(ls build/gen | wc -l) kernels under build/gen ($(du -sh build/gen | cut -f1))"
