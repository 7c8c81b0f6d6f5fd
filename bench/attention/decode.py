#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Decoding: one query token a sequence against a long KV cache, GQA (32 query heads over 8 KV
heads, d = 128, bf16), in one process on one GPU:
  full     every sequence holds the whole cache: the generated kernel of examples/gqa.napkin
           (built at its prefill sizes) against cuDNN (SDPA) and FlashAttention-3's decoding
           entry (flash_attn_with_kvcache: its split and PackGQA heuristics);
  lengths  sequences of random lengths in [1, cache]: the generated kernel of
           tests/diagrams/gqa_decode.napkin (`k < kv_len`, bounded per tile) against
           FlashAttention-3 with cache_seqlens.
These launches have too few tiles to fill the GPU, so napkin splits the keys
(napkin/attention_schedule.h, fwd_num_splits), and a KV group's heads share a tile's rows
(Fusion::kQueryAxesInterchangeable). Every implementation is validated first against a float64
reference with FlashAttention's rule; timing as variants.py (CUDA events, L2 flushed, rounds in
random order, median).

    python3 bench/attention/decode.py --kernel DIR [--lengths-kernel DIR] [--also name=DIR] --out $OUT/decode.jsonl
"""
import argparse
import json
import pathlib
import sys
import time

import torch

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from variants import Timer, gpu_info, napkin_kernels  # noqa: E402

SHAPES = [(8, 8192), (64, 4096), (1, 131072), (1, 16384), (16, 2048)]  # (batch, cache length)
HEADS, KV_HEADS, D = 32, 8, 128


def reference(q, k, v, dtype, lengths=None):
    """softmax(q k^T / sqrt(d)) v in `dtype`; q (b, 1, h, d), k/v (b, s, hkv, d); keys from
    lengths[b] on masked."""
    g = q.shape[2] // k.shape[2]
    qt = q.to(dtype).transpose(1, 2)
    kt = k.to(dtype).repeat_interleave(g, dim=2).transpose(1, 2)
    vt = v.to(dtype).repeat_interleave(g, dim=2).transpose(1, 2)
    s = (qt @ kt.transpose(-1, -2)).float() * D ** -0.5
    if lengths is not None:
        hidden = torch.arange(k.shape[1], device=k.device)[None, :] >= lengths[:, None]
        s = s.masked_fill(hidden[:, None, None, :], float("-inf"))
    p = torch.softmax(s, dim=-1).to(dtype)
    return (p @ vt).transpose(1, 2)


def run_case(case, b, s, kernels, lengths_kernel, fa3, timer, info):
    gen = torch.Generator().manual_seed(b * 7 + s)
    q = torch.randn(b, 1, HEADS, D, generator=gen).to(torch.bfloat16).cuda()
    k = torch.randn(b, s, KV_HEADS, D, generator=gen).to(torch.bfloat16).cuda()
    v = torch.randn(b, s, KV_HEADS, D, generator=gen).to(torch.bfloat16).cuda()
    lengths = torch.randint(1, s + 1, (b,), generator=gen, dtype=torch.int32).cuda() if case == "lengths" else None
    want = reference(q, k, v, torch.float64, lengths)
    bound = 2 * (reference(q, k, v, torch.bfloat16, lengths).double() - want).abs().max().item() + 1e-3
    fns = {}
    if case == "full":
        for name, kernel in kernels.items():
            o = torch.empty_like(q)
            # Q[b g r q d], K/V[b g k d], O[b q g r d] as views of the (b, s, h, d) tensors.
            qn = q.view(b, 1, KV_HEADS, HEADS // KV_HEADS, D).permute(0, 2, 3, 1, 4)
            kn, vn = k.permute(0, 2, 1, 3), v.permute(0, 2, 1, 3)
            fns[name] = (lambda kernel=kernel, o=o, qn=qn, kn=kn, vn=vn:
                         (kernel(qn, kn, vn, out=o.view(b, 1, KV_HEADS, HEADS // KV_HEADS, D)), o)[1])
        fns["cudnn"] = lambda: torch.nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), enable_gqa=True).transpose(1, 2)
    else:
        # Q[b q g r d], K/V[b k g d], kv_len[b], O[b q g r d]: the (b, s, h, d) tensors as they are.
        o = torch.empty_like(q)
        q5 = q.view(b, 1, KV_HEADS, HEADS // KV_HEADS, D)
        fns["napkin"] = lambda: (lengths_kernel(q5, k, v, lengths, out=o.view(b, 1, KV_HEADS, HEADS // KV_HEADS, D)), o)[1]
    if fa3 is not None:
        fns["fa3"] = lambda: (lambda r: r[0] if isinstance(r, tuple) else r)(
            fa3(q, k, v, cache_seqlens=lengths, softmax_scale=D ** -0.5))
    errors, valid = {}, {}
    for name, fn in fns.items():
        try:
            got = fn()
            torch.cuda.synchronize()
            errors[name] = (got.double() - want).abs().max().item()
            if errors[name] <= bound:
                valid[name] = fn
        except Exception as e:  # noqa: BLE001
            errors[name] = f"failed: {str(e).splitlines()[0][:100]}"
    ms = timer.medians(valid)
    keys = int(lengths.sum().item()) if lengths is not None else b * s
    kv_bytes = 2 * keys * KV_HEADS * D * 2
    line = "  ".join(f"{n} {ms[n] * 1e3:8.1f} us ({kv_bytes / ms[n] / 1e6:5.0f} GB/s)" for n in ms)
    invalid = [f"{n} INVALID ({errors[n]})" for n in fns if n not in valid]
    print(f"{case:7s} b={b:3d} cache={s:6d}  {line}  {' '.join(invalid)}", flush=True)
    return {"run": info["run"], "case": f"decode_{case}", "batch": b, "cache": s, "heads": HEADS, "kv_heads": KV_HEADS,
            "d": D, "dtype": "bf16", "ms": ms, "max_error": errors, "bound": bound, "kv_bytes": kv_bytes,
            **{k2: v2 for k2, v2 in info.items() if k2 != "run"}}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernel", required=True, help="the built gqa example (napkin build examples/gqa.napkin)")
    ap.add_argument("--lengths-kernel", help="the built gqa_decode test diagram (sequences of their own lengths)")
    ap.add_argument("--also", action="append", default=[], metavar="NAME=DIR", help="another build of it, timed beside")
    ap.add_argument("--out", default="/tmp/decode.jsonl")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--shapes", default="", help="batch x cache pairs, e.g. 1x16384,16x2048 (default: all)")
    args = ap.parse_args()
    kernels = {"napkin": napkin_kernels.load(args.kernel)}
    kernels.update({f"napkin_{n}": napkin_kernels.load(d) for n, d in (a.split("=", 1) for a in args.also)})
    try:
        import fa3_fwd_config
        sys.modules.setdefault("flash_attn_config", fa3_fwd_config)
        from fa3_fwd_interface import flash_attn_with_kvcache
    except ImportError:
        flash_attn_with_kvcache = None
    lengths_kernel = napkin_kernels.load(args.lengths_kernel) if args.lengths_kernel else None
    info, timer = gpu_info(), Timer(args.reps)
    info["run"] = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    print(f"decode on {info['gpu']}: {HEADS} query heads over {KV_HEADS} KV heads, d = {D}, bf16", flush=True)
    rows = []
    shapes = [tuple(map(int, x.split("x"))) for x in args.shapes.split(",")] if args.shapes else SHAPES
    for b, s in shapes:
        for case in ("full", "lengths") if lengths_kernel else ("full",):
            rows.append(run_case(case, b, s, kernels, lengths_kernel, flash_attn_with_kvcache, timer, info))
    with open(args.out, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
