# SPDX-License-Identifier: Apache-2.0
"""Runs a generated napkin kernel and FlashAttention-3 once each (after a warm-up) on the same
(b, s, h, d) tensors, for Nsight Compute side by side:
    ncu -k regex:'fmha_fwd|FlashAttnFwd' --section ... python3 bench/attention/ncu_fa3.py KERNEL_DIR d:causal:seqlen...
KERNEL_DIR holds a built kernel of examples/attention.napkin or causal.napkin (`napkin build`),
whose causality must match the rows'. Rows: bf16, batch = 16384 / seqlen, heads = 2048 / d.
Needs the fa3-fwd wheel on PYTHONPATH (bench/attention/device_generated.sh installs it)."""
import math
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "python"))
import napkin_kernels  # noqa: E402
import fa3_fwd_config  # noqa: E402

sys.modules.setdefault("flash_attn_config", fa3_fwd_config)
from fa3_fwd_interface import flash_attn_func  # noqa: E402

kernel = napkin_kernels.load(sys.argv[1])
for row in sys.argv[2:]:
    d, causal, s = (int(x) for x in row.split(":"))
    b, h = 16384 // s, 2048 // d
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    for _ in range(2):  # (the first call of each loads and sets up)
        o = kernel(Q=q.transpose(1, 2), K=k.transpose(1, 2), V=v.transpose(1, 2))
        ref = flash_attn_func(q, k, v, softmax_scale=1 / math.sqrt(d), causal=bool(causal))
        ref = ref[0] if isinstance(ref, tuple) else ref
    torch.cuda.synchronize()
    err = (o.transpose(1, 2).float() - ref.float()).abs().max().item()
    print(f"row d={d} causal={causal} s={s}: max |napkin - FA3| = {err:.3g}", flush=True)
