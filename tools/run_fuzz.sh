#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs the parser fuzzer for a bounded time on a copy of the seed corpus (examples, golden
# and error inputs, past crashes). A crash fails the run and names the file to keep as a
# regression test under tests/fuzz/regressions/.
set -euo pipefail
fuzzer=$1
seconds=${2:-60}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus" "$work/artifacts"
cp "$root"/examples/*.napkin "$root"/tests/errors/*.napkin "$root"/tests/fuzz/regressions/* "$work/corpus/" 2>/dev/null || true
echo "fuzz: parser for ${seconds}s on $(ls "$work/corpus" | wc -l) seed inputs"
if ! "$fuzzer" -dict="$root/tests/fuzz/napkin.dict" -max_total_time="$seconds" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
     -artifact_prefix="$work/artifacts/" "$work/corpus" >"$work/log" 2>&1; then
  tail -n 40 "$work/log"
  mkdir -p "$root/tests/fuzz/regressions"
  for f in "$work"/artifacts/*; do
    cp "$f" "$root/tests/fuzz/regressions/"
    echo "fuzz: FAILED; the input was saved as tests/fuzz/regressions/$(basename "$f") (commit it)"
  done
  exit 1
fi
grep -E '^(Done|#[0-9]+ +DONE)' "$work/log" | tail -n 1 || true
echo "fuzz: no crash in ${seconds}s"
