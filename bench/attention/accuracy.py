# SPDX-License-Identifier: Apache-2.0
"""Accuracy of a generated attention kernel beside PyTorch's bf16 kernels at napkin run's
validation sizes (b=2 h=2 q=197 k=263, N(0, 1) inputs): relative L2 and max abs error against
an f64 reference. NAPKIN_KERNELS=<dir with attention_d128> python3 bench/attention/accuracy.py"""
import os
import pathlib
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "python"))
import napkin_kernels  # noqa: E402


def main():
    kernel = napkin_kernels.load(pathlib.Path(os.environ["NAPKIN_KERNELS"]) / "attention_d128")
    scale = 0.08838834764831845
    for seed, (b, h, q, k) in enumerate([(2, 2, 197, 263), (2, 2, 197, 2048), (1, 16, 2048, 2048)]):
        gen = torch.Generator().manual_seed(seed)
        Q, K, V = (torch.randn(b, h, n, 128, generator=gen).to(torch.bfloat16).cuda() for n in (q, k, k))
        ref = F.scaled_dot_product_attention(Q.double(), K.double(), V.double(), scale=scale)
        outs = {}
        o = torch.full((b, h, q, 128), float("nan"), dtype=torch.bfloat16, device="cuda")
        kernel(Q=Q, K=K, V=V, out=o)
        outs["napkin"] = o
        for name, backend in (("flash2", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
                              ("math_bf16", SDPBackend.MATH)):
            with sdpa_kernel(backend):
                outs[name] = F.scaled_dot_product_attention(Q, K, V, scale=scale)
        torch.cuda.synchronize()
        print(f"b={b} h={h} q={q} k={k}: max |ref| {ref.abs().max().item():.3g}")
        for name, out in outs.items():
            e = out.double() - ref
            print(f"  {name:10s} relative L2 {(e.norm() / ref.norm()).item():.3g}  max abs {e.abs().max().item():.3g}")


if __name__ == "__main__":
    main()
