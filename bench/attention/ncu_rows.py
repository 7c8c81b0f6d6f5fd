# SPDX-License-Identifier: Apache-2.0
"""Runs napkin and cuDNN once (after a warm-up) on a few rows of the suite, for Nsight Compute:
(Not named profile.py: that would shadow the standard library module of that name, which torch._dynamo imports.)
    ncu --clock-control none -k regex:'fmha_fwd|sdpa' --launch-skip 0 --section ... python3 bench/attention/ncu_rows.py
Rows: d:causal:seqlen, bf16, batch = 16384 / seqlen, heads = 2048 / d."""
import math
import pathlib
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "python"))
import napkin_attention  # noqa: E402

rows = sys.argv[1:] or ["128:0:512", "128:1:512", "256:1:512", "128:0:8192"]
for row in rows:
    d, causal, s = (int(x) for x in row.split(":"))
    b, h = 16384 // s, 2048 // d
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    qv, kv, vv = (t.transpose(1, 2) for t in (q, k, v))
    napkin_attention.attention(qv, kv, vv, causal=bool(causal))
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal), scale=1 / math.sqrt(d))
    torch.cuda.synchronize()
    print(f"row d={d} causal={causal} s={s} done", flush=True)
