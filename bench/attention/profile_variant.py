#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Where a generated variant's time goes: each CUDA kernel of one napkin call (block-summary
builders, chunk lists, the attention kernel) from torch.profiler, at the benchmark's shapes
(bench/attention/variants.py: b * s = 16384, h = 2048 / d, (b, s, h, d)).
  NAPKIN_KERNELS=/tmp/gen python3 bench/attention/profile_variant.py mask_tensor --dims 64 --seqlens 2048,8192
"""
import argparse
import os
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "python"))
import napkin_kernels  # noqa: E402
from variants import VARIANTS, napkin_tensors, problem  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("variant")
    ap.add_argument("--dims", default="128,64")
    ap.add_argument("--seqlens", default="2048,8192,16384")
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()
    if args.variant not in VARIANTS:
        sys.exit(f"unknown variant '{args.variant}': one of {', '.join(VARIANTS)}")
    root = pathlib.Path(os.environ.get("NAPKIN_KERNELS", "build/gen"))
    for d in map(int, args.dims.split(",")):
        kernel = napkin_kernels.load(root / f"{args.variant}_d{d}")
        for s in map(int, args.seqlens.split(",")):
            b, h, _, _, q, k, v, aux = problem(args.variant, s, d)
            o = torch.empty_like(q)
            tensors = napkin_tensors(kernel, args.variant, q, k, v, aux)
            for _ in range(3):
                kernel(out=o.transpose(1, 2), **tensors)
            torch.cuda.synchronize()
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                for _ in range(args.reps):
                    kernel(out=o.transpose(1, 2), **tensors)
                torch.cuda.synchronize()
            print(f"== {args.variant} d={d} s={s} (b={b}, h={h}); per call:")
            for e in sorted(prof.key_averages(), key=lambda e: -e.device_time_total):
                if e.device_time_total > 0:
                    print(f"  {e.device_time_total / args.reps:9.1f} us  x{e.count // args.reps}  {e.key[:110]}")


if __name__ == "__main__":
    main()
