#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Differential attention (examples/differential_attention.napkin: O = (P1 - lam P2) V, causal,
d = 64 for the maps and 128 for V) as napkin's plan (two attention kernels, the second
subtracting in its epilogue) against the peers run as the DIFF Transformer's code runs it: two
attention calls and a subtraction in PyTorch. Peers: FlashAttention-3 (fa3-fwd; V split into
its two 64-wide halves where the wheel refuses V's own head dim), FlexAttention (compiled), cuDNN
through SDPA, and the whole formula under torch.compile. One process, one GPU; every
implementation validated first against a float64 reference on 128 sampled query rows
(FlashAttention's rule: at most twice the error of the same math in bf16, plus 1e-3).
(b, s, h, d) layouts; b * s = 16384 and 16 heads, as the example.

    python3 bench/attention/differential.py --kernel DIR --out $OUT/differential.jsonl
"""
import argparse
import json
import pathlib
import sys
import time

import torch

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(REPO / "bench" / "attention"))
import napkin_kernels  # noqa: E402
from variants import Timer, gpu_info  # noqa: E402

LAM, SCALE = 0.8, 0.125


def reference(q1, k1, q2, k2, v, rows, dtype):
    """O for query rows `rows` in `dtype`, causal (q, k, v in (b, s, h, d))."""
    def maps(q, k):
        s = (q[:, rows].to(dtype).transpose(1, 2) @ k.to(dtype).transpose(1, 2).transpose(-1, -2)) * SCALE
        visible = rows.to(q.device)[:, None] >= torch.arange(k.shape[1], device=q.device)[None, :]
        return torch.softmax(s.masked_fill(~visible, float("-inf")), dim=-1).to(dtype)
    p = maps(q1, k1) - LAM * maps(q2, k2)
    return (p @ v.to(dtype).transpose(1, 2)).transpose(1, 2)


def peers(q1, k1, q2, k2, v, cache):
    """Name -> (callable or None, why not)."""
    out = {}
    t = lambda x: x.transpose(1, 2)  # noqa: E731  (b, h, s, d) views
    try:
        import fa3_fwd_config
        sys.modules.setdefault("flash_attn_config", fa3_fwd_config)
        from fa3_fwd_interface import flash_attn_func

        def fa3(q, k, vv):
            o = flash_attn_func(q, k, vv, softmax_scale=SCALE, causal=True)
            return o[0] if isinstance(o, tuple) else o
        try:
            fa3(q1, k1, v)
            out["fa3"] = (lambda: fa3(q1, k1, v) - LAM * fa3(q2, k2, v), None)
        except Exception:  # noqa: BLE001  (V's own head dim refused: its halves, as the DIFF code does)
            va, vb = v[..., :64], v[..., 64:]
            out["fa3"] = (lambda: torch.cat([fa3(q1, k1, va) - LAM * fa3(q2, k2, va),
                                             fa3(q1, k1, vb) - LAM * fa3(q2, k2, vb)], dim=-1), "4 calls: V in halves")
    except Exception as e:  # noqa: BLE001
        out["fa3"] = (None, f"FlashAttention-3 unavailable: {e}")
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    flex = cache.setdefault("flex", torch.compile(flex_attention, dynamic=False))
    b, s = q1.shape[:2]
    mask = create_block_mask(lambda bb, hh, qq, kk: qq >= kk, b, None, s, s, device="cuda")
    out["flex"] = (lambda: (flex(t(q1), t(k1), t(v), block_mask=mask, scale=SCALE)
                            - LAM * flex(t(q2), t(k2), t(v), block_mask=mask, scale=SCALE)).transpose(1, 2), None)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def sdpa(q, k):
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            return torch.nn.functional.scaled_dot_product_attention(t(q), t(k), t(v), scale=SCALE, is_causal=True)
    try:
        sdpa(q1, k1)
        out["cudnn"] = (lambda: (sdpa(q1, k1) - LAM * sdpa(q2, k2)).transpose(1, 2), None)
    except Exception as e:  # noqa: BLE001
        out["cudnn"] = (None, f"cuDNN (SDPA) refused: {str(e).splitlines()[0][:80]}")

    def formula(a1, b1, a2, b2, vv):
        s = a1.shape[1]
        visible = torch.ones(s, s, dtype=torch.bool, device=a1.device).tril()
        def maps(a, bb):
            x = (t(a) @ t(bb).transpose(-1, -2)) * SCALE
            return torch.softmax(x.float().masked_fill(~visible, float("-inf")), dim=-1)
        return ((maps(a1, b1) - LAM * maps(a2, b2)).to(vv.dtype) @ t(vv)).transpose(1, 2)
    compiled = cache.setdefault("compiled", torch.compile(formula, dynamic=False))
    out["compile"] = (lambda: compiled(q1, k1, q2, k2, v), None)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernel", required=True, help="the directory napkin build wrote for examples/differential_attention")
    ap.add_argument("--out", default="/tmp/differential.jsonl")
    ap.add_argument("--seqlens", default="2048,8192")
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    info, run_id = gpu_info(), time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    kernel = napkin_kernels.load(pathlib.Path(args.kernel))
    timer, cache = Timer(args.reps), {}
    print(f"run {run_id} on {info['gpu']} (torch {info['torch']}, cuDNN {info['cudnn']})", flush=True)
    for s in map(int, args.seqlens.split(",")):
        b, h = 16384 // s, 16
        gen = torch.Generator().manual_seed(s)
        q1, k1, q2, k2 = (torch.randn(b, s, h, 64, generator=gen).to(torch.bfloat16).cuda() for _ in range(4))
        v = torch.randn(b, s, h, 128, generator=gen).to(torch.bfloat16).cuda()
        o = torch.empty(b, s, h, 128, dtype=torch.bfloat16, device="cuda")
        impls, notes = {"napkin": lambda: (kernel(Q1=q1, K1=k1, Q2=q2, K2=k2, V=v, out=o), o)[1]}, {}
        for name, (fn, why) in peers(q1, k1, q2, k2, v, cache).items():
            if fn is not None:
                impls[name] = fn
            if why:
                notes[name] = why
        rows = torch.randperm(s, generator=gen)[:128].sort().values
        ref = reference(q1, k1, q2, k2, v, rows, torch.float64)
        bound = 2 * (reference(q1, k1, q2, k2, v, rows, torch.bfloat16).double() - ref).abs().max().item() + 1e-3
        errors = {}
        for n, fn in list(impls.items()):
            try:
                got = fn()
                torch.cuda.synchronize()
                errors[n] = (got[:, rows.cuda()].double() - ref).abs().max().item()
            except Exception as e:  # noqa: BLE001
                errors[n], notes[n] = float("inf"), f"failed: {str(e).splitlines()[0][:100]}"
            if not errors[n] <= bound:
                notes.setdefault(n, f"INVALID: max error {errors[n]:.3g} > {bound:.3g}")
                del impls[n]
        ms = timer.medians(impls) if "napkin" in impls else {}
        row = {"run": run_id, "variant": "differential_attention", "diagram_hash": kernel.manifest["diagram"]["hash"],
               "seqlen": s, "batch": b, "heads": h, "d": 64, "dv": 128, "dtype": "bf16", "ms": ms, "max_error": errors,
               "bound": bound, "notes": notes, "reps": args.reps, **info}
        with open(args.out, "a") as f:
            f.write(json.dumps(row) + "\n")
        ratios = "  ".join(f"{p}/napkin {ms[p] / ms['napkin']:.2f}" for p in ms if p != "napkin")
        print(f"differential_attention s={s:5d}  napkin {ms.get('napkin', float('nan')):7.3f} ms  {ratios}  {notes}", flush=True)


if __name__ == "__main__":
    main()
