#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the diagrams of FlashAttention-3's suite (plain and causal attention, bf16 and fp16,
d = 64, 128, 256 or --dims, scale 1/sqrt(d)) and builds their kernels with `napkin build` (--no-compile
unless --compile): DIR/<attention|causal>_<bf16|f16>_d<D>/. bench/attention/run.py
--napkin-kernels DIR times these generated kernels as "napkin".

    python3 bench/attention/suite_diagrams.py build/suite [--napkin build/release/bin/napkin] [--dims 96,192]
"""
import argparse
import math
import pathlib
import subprocess

TEXT = """# FlashAttention-3's suite: {what}, {dt}, d = {d} (bench/attention/suite_diagrams.py)
axes b=2 h=16 q=8192 k=8192 d={d}
in Q[b h q d] {dt}
in K[b h k d] {dt}
in V[b h k d] {dt}
S = contract(Q, K over d) * {scale}
{masked}P = softmax({p_in} over k)
O = contract(P, V over k) as {dt}
out O
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--napkin", default="build/release/bin/napkin")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--dims", default="64,128,256", help="head dims (any multiple of 8 up to 256)")
    args = ap.parse_args()
    root = pathlib.Path(args.dir)
    root.mkdir(parents=True, exist_ok=True)
    for causal in (False, True):
        for dt in ("bf16", "f16"):
            for d in map(int, args.dims.split(",")):
                name = f"{'causal' if causal else 'attention'}_{dt}_d{d}"
                text = TEXT.format(what="causal" if causal else "plain", dt=dt, d=d, scale=repr(1 / math.sqrt(d)),
                                   masked="M = select(q >= k, S, -inf)\n" if causal else "", p_in="M" if causal else "S")
                path = root / f"{name}.napkin"
                path.write_text(text)
                cmd = [args.napkin, "build", str(path), "--machine", "h100-sxm5", "-o", str(root / name)]
                if not args.compile:
                    cmd.append("--no-compile")
                subprocess.run(cmd, check=True, capture_output=True)
                print(name)


if __name__ == "__main__":
    main()
