#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Builds every example and test diagram at random sizes without compiling (`napkin build
--no-compile`, CPU only), looking for what the CLI fuzzer cannot reach (it skips `build`): a crash,
a failure without a reason, or a plan whose kernel its emitter then refuses (the planner and the
emitters disagreeing). Prints each such case and a count of exit codes.

    python3 tools/random_builds.py [SEED] [COUNT]        (from the repository root)
"""
import pathlib
import random
import re
import subprocess
import sys

NAPKIN = "build/release/bin/napkin"
MACHINES = ["h100-sxm5", "h200", "h100-pcie"]
SIZES = [1, 2, 3, 7, 8, 13, 64, 100, 127, 128, 1000, 4096, 65537, 1 << 20]


def main():
    rng = random.Random(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 100
    files = sorted(pathlib.Path("examples").glob("*.napkin")) + sorted(pathlib.Path("tests/diagrams").glob("*.napkin"))
    codes, bad = {}, 0
    for _ in range(count):
        f = rng.choice(files)
        axes = re.findall(r"(\w+)=(\d+)", next(l for l in f.read_text().splitlines() if l.startswith("axes")))
        sets = []
        for name, _size in axes:
            if rng.random() < 0.5:
                sets += ["--set", f"{name}={rng.choice(SIZES)}"]
        cmd = [NAPKIN, "build", str(f), "--machine", rng.choice(MACHINES), "-o", "/tmp/napkin_random_build", "--no-compile"] + sets
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        codes[r.returncode] = codes.get(r.returncode, 0) + 1
        crashed = r.returncode not in (0, 1, 2) or (r.returncode != 0 and not r.stderr.strip())
        # A refusal by an emitter of a plan the planner derived (attention_hopper_paper's fp8 part is
        # refused by design, with its reason).
        disagrees = (r.returncode == 1 and "no feasible plan" not in r.stderr and "hopper_paper" not in f.name)
        if crashed or disagrees:
            bad += 1
            print("CRASH" if crashed else "DISAGREE", " ".join(cmd[2:3] + sets), r.stderr.strip()[:300])
    print(f"{count} builds, exit codes {codes}, {bad} to look at")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
