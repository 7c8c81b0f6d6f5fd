# SPDX-License-Identifier: Apache-2.0
"""A/B of folded-GEMM variants beside cuBLAS on one problem (one process, interleaved rounds,
L2 flushed): each directory a built library whose inputs are named X, W (and target); cuBLAS's
X W^T (bf16 out) and PyTorch's linear + cross_entropy as the references of time.

    python3 bench/gemm/fold_ab.py --t 8192 --e 4096 --v 128256 DIR...
"""
import argparse
import json
import pathlib
import statistics
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "python"))


def main():
    import torch
    import napkin_kernels as nk
    ap = argparse.ArgumentParser()
    ap.add_argument("dirs", nargs="+")
    ap.add_argument("--t", type=int, default=8192)
    ap.add_argument("--e", type=int, default=4096)
    ap.add_argument("--v", type=int, default=128256)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--out")
    a = ap.parse_args()
    g = torch.Generator(device="cuda").manual_seed(1)
    X = torch.randn(a.t, a.e, device="cuda", generator=g).bfloat16()
    W = (torch.randn(a.v, a.e, device="cuda", generator=g) / a.e ** 0.5).bfloat16()
    target = torch.randint(0, a.v, (a.t,), device="cuda", generator=g, dtype=torch.int32)
    fns = {"cublas_gemm": lambda: X @ W.t(),
           "torch_ce": lambda: torch.nn.functional.cross_entropy(X @ W.t(), target.long(), reduction="none")}
    for d in a.dirs:
        k = nk.load(d)
        names = [s["name"] for s in k.inputs]
        args = {n: {"X": X, "W": W, "target": target}[n] for n in names}
        fns[pathlib.Path(d).name] = (lambda kk, aa: lambda: kk(**aa))(k, args)
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    for f in fns.values():
        f()
    torch.cuda.synchronize()
    times = {n: [] for n in fns}
    for _ in range(a.reps):
        for n, f in fns.items():
            flush.zero_()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record(); f(); e.record(); torch.cuda.synchronize()
            times[n].append(s.elapsed_time(e) * 1e3)
    flops = 2 * a.t * a.e * a.v
    dev = torch.cuda.get_device_name()
    for n, ts in times.items():
        us = statistics.median(ts)
        row = {"gpu": dev, "variant": n, "t": a.t, "e": a.e, "v": a.v, "us": us, "tflops": flops / us / 1e6}
        print(f"{n:28s} {us:10.1f} us  {flops / us / 1e6:6.1f} TFLOP/s  {us / statistics.median(times['cublas_gemm']):.3f}x cuBLAS's GEMM")
        if a.out:
            with open(a.out, "a") as f:
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
