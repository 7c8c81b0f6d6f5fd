#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs every fuzz target of BIN_DIR (bin/fuzz_KIND, tests/fuzz) for a bounded time: TOTAL
# seconds split evenly across them (default 120), each from a copy of its seeds
# (tests/fuzz/fuzz_seeds.txt) and its past crashes (tests/fuzz/regressions/KIND/), with its
# dictionary (tests/fuzz/dict/KIND.dict), under ASan and UBSan as built. A crash, a hang (an
# input over 10 s) or an input needing 2 GB fails the run and is saved under
# tests/fuzz/regressions/KIND/ to commit as a regression test; the other targets still run.
#   tools/run_fuzz.sh BIN_DIR [TOTAL_SECONDS] [KIND...]
set -euo pipefail
bin=$1
total=${2:-120}
shift $(( $# < 2 ? $# : 2 ))
kinds=("$@")
[ ${#kinds[@]} -gt 0 ] || kinds=(parser machine schedule npy trace cli)
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=$(( total / ${#kinds[@]} ))
[ "$seconds" -ge 5 ] || seconds=5
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0
for kind in "${kinds[@]}"; do
  corpus=$work/corpus/$kind artifacts=$work/artifacts/$kind
  mkdir -p "$corpus" "$artifacts"
  while read -r k glob; do
    [ "$k" = "$kind" ] || continue
    for f in "$root"/$glob; do [ -f "$f" ] && cp "$f" "$corpus/"; done
  done < "$root/tests/fuzz/fuzz_seeds.txt"
  for f in "$root/tests/fuzz/regressions/$kind"/*; do [ -f "$f" ] && cp "$f" "$corpus/"; done
  echo "fuzz: $kind for ${seconds}s on $(ls "$corpus" | wc -l) seed inputs"
  if ! "$bin/fuzz_$kind" -dict="$root/tests/fuzz/dict/$kind.dict" -max_total_time="$seconds" -max_len=4096 \
       -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$artifacts/" "$corpus" >"$work/$kind.log" 2>&1; then
    tail -n 40 "$work/$kind.log"
    mkdir -p "$root/tests/fuzz/regressions/$kind"
    for f in "$artifacts"/*; do
      [ -f "$f" ] || continue
      cp "$f" "$root/tests/fuzz/regressions/$kind/"
      echo "fuzz: $kind FAILED; the input was saved as tests/fuzz/regressions/$kind/$(basename "$f") (commit it)"
    done
    failed=1
    continue
  fi
  grep -E '^(Done|#[0-9]+ +DONE)' "$work/$kind.log" | tail -n 1 || true
  echo "fuzz: $kind: no crash in ${seconds}s"
done
exit $failed
