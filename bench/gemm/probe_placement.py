# SPDX-License-Identifier: Apache-2.0
"""Probe (GPU): does where an input sits in memory change a plan's time? Times each kernel
directory's <case> on the same values with V placed (a) as the allocator puts it, (b) at an
offset of 1 MiB + 4 KiB into a larger buffer, and (c) with K and V interleaved per head. The
outputs are checked equal across placements. L2 flushed before each call, median of --reps.

    python3 bench/gemm/probe_placement.py --case linear_attention DIR [DIR...]
"""
import argparse, pathlib, statistics, sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "python"))
import torch  # noqa: E402
import napkin_kernels as nk  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("dirs", nargs="+")
ap.add_argument("--case", default="linear_attention")
ap.add_argument("--reps", type=int, default=50)
a = ap.parse_args()
flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
g = torch.Generator(device="cuda").manual_seed(7)
b, h, s, d = 4, 16, 4096, 64
Q, K, V = (0.1 * torch.randn(b, h, s, d, generator=g, device="cuda")).bfloat16(), None, None
K = (0.1 * torch.randn(b, h, s, d, generator=g, device="cuda")).bfloat16()
V = torch.randn(b, h, s, d, generator=g, device="cuda").bfloat16()
big = torch.empty(V.numel() + (1 << 19) + 2048, dtype=torch.bfloat16, device="cuda")
V_off = big[(1 << 19) + 2048:].view(b, h, s, d)
V_off.copy_(V)
KV = torch.empty(b, h, 2, s, d, dtype=torch.bfloat16, device="cuda")
KV[:, :, 0].copy_(K)
KV[:, :, 1].copy_(V)
placements = {"default": dict(Q=Q, K=K, V=V), "V offset": dict(Q=Q, K=K, V=V_off),
              "KV per head": dict(Q=Q, K=KV[:, :, 0], V=KV[:, :, 1])}
print("K-V distance (bytes):", V.data_ptr() - K.data_ptr(), V_off.data_ptr() - K.data_ptr())


def timed(fn, reps):
    ev = []
    for _ in range(reps):
        s0, e0 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(300_000)
        flush.zero_()
        s0.record(); fn(); e0.record()
        ev.append((s0, e0))
    torch.cuda.synchronize()
    return statistics.median(x.elapsed_time(y) * 1e3 for x, y in ev)


# cuBLAS on the state GEMM alone (K^T V per head, no feature map): the same bytes read.
Kt = K.transpose(-1, -2)
for _ in range(3):
    Kt @ V
print(f"cuBLAS K^T V {timed(lambda: Kt @ V, a.reps):7.1f} us", flush=True)

for d_ in a.dirs:
    k = nk.load(pathlib.Path(d_) / a.case)
    ref = None
    row = []
    for name, t in placements.items():
        try:
            out = k(**t)
        except Exception as ex:  # noqa: BLE001
            row.append(f"{name}: {type(ex).__name__} {ex}"[:100])
            continue
        ref = out if ref is None else ref
        same = torch.equal(out, ref)
        for _ in range(3):
            k(**t)
        row.append(f"{name} {timed(lambda: k(**t), a.reps):7.1f} us{'' if same else ' (DIFFERS)'}")
    print(f"{d_:28s} " + " | ".join(row), flush=True)
