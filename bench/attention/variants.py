#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The generated attention-family kernels against their peers, in one process on one GPU.

Each variant is an example diagram built by `napkin build` (for d = 64 and 128: --set d=...),
loaded from $NAPKIN_KERNELS/<example>_d<D> and called on (b, s, h, d) tensors (strided views; no
copies). Peers, where they support the variant: FlexAttention (the equivalent score_mod /
mask_mod and a block mask, compiled, warmed up), cuDNN through SDPA, FlashAttention-3 (the
fa3-fwd wheel: causal, softcap, GQA; no local windows). Every implementation is validated first
against a float64 reference on 128 sampled query rows with FlashAttention's rule (error at most
twice that of the same math in bf16, plus 1e-3); one that fails is reported INVALID and not
timed. Timing: CUDA events, L2 flushed before each call, calls interleaved in rounds of random
order, median. Shapes: FlashAttention-3's suite (b * s = 16384, h = 2048 / d), bf16.

    python3 bench/attention/variants.py --out $OUT/variants.jsonl [--variants a,b] [--dims 128,64]
"""
import argparse
import json
import math
import os
import pathlib
import random
import statistics
import subprocess
import sys
import time

import torch

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))
import napkin_kernels  # noqa: E402


# ------------------------------------------------------------------------------ variants
# score(s, b, h, q, k, aux): the logits from the scaled dot products s (torch ops only, so that
# the same function is FlexAttention's score_mod and the reference's); mask(b, h, q, k, aux): the
# visible pairs; epilogue(o, lse, aux): after P V. Index arguments broadcast.
def _none(s, b, h, q, k, a):
    return s


VARIANTS = {
    "attention": dict(fa3={}, sdpa={}),
    "causal": dict(mask=lambda b, h, q, k, a: q >= k, fa3={"causal": True}, sdpa={"is_causal": True}),
    "gqa": dict(groups=8, fa3={}, sdpa={"enable_gqa": True}),
    "sliding_window": dict(params={"w": 1024}, mask=lambda b, h, q, k, a: (q >= k) & ((q - k).abs() < 1024)),
    "softcap": dict(score=lambda s, b, h, q, k, a: 50.0 * torch.tanh(s / 50.0), mask=lambda b, h, q, k, a: q >= k,
                    fa3={"causal": True, "softcap": 50.0}, scale=0.0625),
    "alibi": dict(score=lambda s, b, h, q, k, a: s + a["slope"][h] * (k - q), mask=lambda b, h, q, k, a: q >= k),
    "sigmoid_attention": dict(normalise=False, score=lambda s, b, h, q, k, a: torch.sigmoid(s - 9.0)),
    "key_padding": dict(mask=lambda b, h, q, k, a: a["keep"][b, k]),
    "relative_bias": dict(score=lambda s, b, h, q, k, a: s + a["bias"][h, q, k], sdpa_bias=True),
    "document_mask": dict(mask=lambda b, h, q, k, a: (a["doc_q"][b, q] == a["doc_k"][b, k]) & (q >= k)),
    "mask_tensor": dict(mask=lambda b, h, q, k, a: a["allowed"][b, q, k]),
    "prefix_lm": dict(params={"p": 1024}, mask=lambda b, h, q, k, a: (k < 1024) | (q >= k)),
    "chunked_local": dict(params={"c": 1024}, mask=lambda b, h, q, k, a: (q >= k) & (q // 1024 == k // 1024)),
    "head_temperature": dict(score=lambda s, b, h, q, k, a: s / a["temp"][h]),
    "attention_sinks": dict(mask=lambda b, h, q, k, a: q >= k, sinks=True, scale=0.125),
    # DeepSeek-V3's prefill: V's head dim 128 whatever Q's (run at --dims 192).
    "mla_attention": dict(dv=128, mask=lambda b, h, q, k, a: q >= k, fa3={"causal": True}, sdpa={"is_causal": True},
                          scale=0.07216878364870322),
}


def aux_tensors(name, batch, heads, seqlen, gen):
    dev = "cuda"
    if name == "alibi":
        return {"slope": torch.tensor([2.0 ** (-8.0 * (i + 1) / heads) for i in range(heads)], device=dev)}
    if name == "key_padding":  # each sequence's last 0-25 % is padding
        lengths = (seqlen * (0.75 + 0.25 * torch.rand(batch, generator=gen))).long().to(dev)
        return {"keep": torch.arange(seqlen, device=dev)[None, :] < lengths[:, None]}
    if name == "relative_bias":
        return {"bias": (0.5 * torch.randn(heads, seqlen, seqlen, generator=gen)).to(torch.bfloat16).to(dev)}
    if name == "document_mask":  # documents of 256-2048 tokens, packed
        ids = []
        for _ in range(batch):
            row, doc = [], 0
            while len(row) < seqlen:
                row += [doc] * int(256 + torch.randint(0, 1793, (1,), generator=gen))
                doc += 1
            ids.append(row[:seqlen])
        t = torch.tensor(ids, dtype=torch.int32, device=dev)
        return {"doc_q": t, "doc_k": t.clone()}
    if name == "mask_tensor":  # block-sparse: 128 x 128 blocks kept with probability 0.3, the diagonal's always
        nb = (seqlen + 127) // 128
        blocks = (torch.rand(batch, nb, nb, generator=gen) < 0.3) | torch.eye(nb, dtype=torch.bool)[None]
        allowed = blocks.repeat_interleave(128, 1).repeat_interleave(128, 2)[:, :seqlen, :seqlen]
        return {"allowed": allowed.to(dev)}
    if name == "head_temperature":
        return {"temp": (0.5 + torch.rand(heads, generator=gen)).to(dev)}
    if name == "attention_sinks":
        return {"sink": torch.randn(heads, generator=gen).to(dev)}
    return {}


def problem(name, s, d):
    """The benchmark's shape at sequence length s and head dim d (b * s = 16384, h = 2048 / d)
    and its random inputs: (b, h, kv heads, generator, q, k, v in (b, s, h, d), aux); V's head
    dim is the variant's dv where it has one."""
    b, h = 16384 // s, 2048 // d
    hkv = h // VARIANTS[name].get("groups", 1)
    gen = torch.Generator().manual_seed(s + d)
    q = torch.randn(b, s, h, d, generator=gen).to(torch.bfloat16).cuda()
    k = torch.randn(b, s, hkv, d, generator=gen).to(torch.bfloat16).cuda()
    v = torch.randn(b, s, hkv, VARIANTS[name].get("dv", d), generator=gen).to(torch.bfloat16).cuda()
    return b, h, hkv, gen, q, k, v, aux_tensors(name, b, h, s, gen)


# Where each role of a generated kernel's tensor lies in the (b, s, h, d) tensors.
_BSHD = {"batch": 0, "query": 1, "key": 1, "kv_head": 2, "head_dim": 3, "value_dim": 3}


def as_declared(t, spec):
    """The (b, s, h, d) tensor t viewed in the order the diagram declares it (manifest `spec`)."""
    return t.permute(*[_BSHD[a["role"]] for a in spec["axes"]])


def napkin_tensors(kernel, name, q, k, v, aux):
    """A generated kernel's inputs by name: Q, K, V as views in their declared orders, aux tensors, params."""
    tensors = {i["name"]: as_declared(t, i) for i, t in zip(kernel.inputs[:3], (q, k, v))}
    tensors.update(aux)
    tensors.update(VARIANTS[name].get("params", {}))
    return tensors


# ------------------------------------------------------------------------------ reference
def reference(v_spec, q, k, v, aux, rows, dtype, scale):
    """O for query rows `rows` in `dtype` (q, k, v in (b, s, h, d); GQA by repetition)."""
    g = q.shape[2] // k.shape[2]
    qh = q[:, rows].to(dtype).transpose(1, 2)                                   # b h r d
    kh = k.to(dtype).repeat_interleave(g, dim=2).transpose(1, 2)
    vh = v.to(dtype).repeat_interleave(g, dim=2).transpose(1, 2)
    s = (qh @ kh.transpose(-1, -2)) * scale
    dev = q.device
    bi = torch.arange(q.shape[0], device=dev)[:, None, None, None]
    hi = torch.arange(q.shape[2], device=dev)[None, :, None, None]
    qi = rows.to(dev)[None, None, :, None]
    ki = torch.arange(k.shape[1], device=dev)[None, None, None, :]
    s = v_spec.get("score", _none)(s, bi, hi, qi, ki, aux).to(dtype)
    if "mask" in v_spec:
        s = s.masked_fill(~v_spec["mask"](bi, hi, qi, ki, aux), float("-inf"))
    if v_spec.get("normalise", True):
        lse = torch.logsumexp(s, dim=-1, keepdim=True)
        p = torch.softmax(s, dim=-1).nan_to_num(0.0)
    else:
        p = s
    o = p.to(dtype) @ vh
    if v_spec.get("sinks"):
        o = o / (1 + torch.exp(aux["sink"].to(dtype)[None, :, None, None] - lse))
    return o.transpose(1, 2)                                                    # b r h d


# ------------------------------------------------------------------------------ peers
def flex_call(v_spec, q, k, v, aux, scale, cache):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    if not v_spec.get("normalise", True):
        return None, "FlexAttention normalises with a softmax: no plain-sum form"
    if "flex" not in cache:
        # One compiled graph per variant and shape: past dynamo's default limit (8) it falls back
        # to eager mode, 10-400x slower, which would make the comparison meaningless. Static
        # shapes (dynamic=False): after a second shape, automatic dynamic shapes compiled a
        # kernel that ran relative_bias 6x slower (bench/NOTES.md, 2026-11-26).
        torch._dynamo.config.recompile_limit = 10000
        torch._dynamo.config.accumulated_recompile_limit = 100000
        cache["flex"] = torch.compile(flex_attention, dynamic=False)
    fn = cache["flex"]
    if "bias" in aux and aux["bias"].numel() >= 2 ** 31:  # as cuDNN below: an illegal address at 16k
        return None, "FlexAttention not run on a bias of 2^31 elements or more (it faulted: illegal address)"
    b, s, h, d = q.shape
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    block_mask = None
    if "mask" in v_spec:
        m = v_spec["mask"]
        block_mask = create_block_mask(lambda bb, hh, qq, kk: m(bb, hh, qq, kk, aux), b, None, s, s, device="cuda")
    score = v_spec.get("score")
    score_mod = (lambda sc, bb, hh, qq, kk: score(sc, bb, hh, qq, kk, aux)) if score else None
    gqa = q.shape[2] != k.shape[2]
    if v_spec.get("sinks"):
        sink = aux["sink"]

        def call():
            o, lse = fn(qt, kt, vt, score_mod=score_mod, block_mask=block_mask, scale=scale, enable_gqa=gqa,
                        return_lse=True)
            return (o / (1 + torch.exp(sink[None, :, None, None] - lse[..., None].float())).to(o.dtype)).transpose(1, 2)
        return call, None
    return (lambda: fn(qt, kt, vt, score_mod=score_mod, block_mask=block_mask, scale=scale,
                       enable_gqa=gqa).transpose(1, 2)), None


def fa3_call(v_spec, q, k, v, aux, scale):
    if "fa3" not in v_spec:
        return None, "not supported by FlashAttention-3 (fa3-fwd)"
    try:
        import fa3_fwd_config
        sys.modules.setdefault("flash_attn_config", fa3_fwd_config)
        from fa3_fwd_interface import flash_attn_func
    except Exception as e:  # noqa: BLE001
        return None, f"FlashAttention-3 unavailable: {e}"
    kw = dict(v_spec["fa3"])

    def call():
        out = flash_attn_func(q, k, v, softmax_scale=scale, **kw)
        return out[0] if isinstance(out, tuple) else out
    return call, None


def sdpa_call(v_spec, q, k, v, aux, scale):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    if "sdpa" not in v_spec and not v_spec.get("sdpa_bias"):
        return None, "no cuDNN (SDPA) form"
    kw = dict(v_spec.get("sdpa", {}))
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    if v_spec.get("sdpa_bias"):
        if aux["bias"].numel() >= 2 ** 31:  # seen at 16k: an illegal address, which poisons the process
            return None, "cuDNN (SDPA) not run on a bias of 2^31 elements or more (it faulted: illegal address)"
        kw["attn_mask"] = aux["bias"][None]

    def call():
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            return torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, scale=scale, **kw).transpose(1, 2)
    try:
        call()
    except Exception as e:  # noqa: BLE001
        return None, f"cuDNN (SDPA) refused: {str(e).splitlines()[0][:80]}"
    return call, None


# ------------------------------------------------------------------------------ timing
class Timer:
    def __init__(self, reps):
        self.reps = reps
        self.rng = random.Random(0)
        self.flush = torch.empty(256 * 1024 * 1024, dtype=torch.int8, device="cuda")

    def medians(self, fns):
        for fn in fns.values():
            for _ in range(3):
                fn()
        events = {n: [] for n in fns}
        order = list(fns)
        for _ in range(self.reps):
            self.rng.shuffle(order)
            for n in order:
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                self.flush.zero_()
                s.record()
                fns[n]()
                e.record()
                events[n].append((s, e))
        torch.cuda.synchronize()
        return {n: statistics.median([s.elapsed_time(e) for s, e in ev]) for n, ev in events.items()}


def napkin_call(kernel, name, q, k, v, aux, o):
    """A call of a generated kernel on the (b, s, h, d) tensors, writing and returning o."""
    tensors = napkin_tensors(kernel, name, q, k, v, aux)
    return lambda: (kernel(out=as_declared(o, kernel.output), **tensors), o)[1]


def gpu_info():
    q = "name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit"
    out = subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader"], capture_output=True,
                         text=True).stdout.strip().split(", ")
    return {"gpu": out[0], "driver": out[1], "sm_mhz_now": out[2], "sm_mhz_max": out[3], "mem_mhz": out[4],
            "power_limit": out[5], "torch": torch.__version__, "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="/tmp/variants.jsonl")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--dims", default="128,64")
    ap.add_argument("--seqlens", default="2048,8192,16384")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--also", action="append", default=[], metavar="NAME=ROOT",
                    help="also time the kernels under ROOT (an A/B in one process: another runtime or "
                         "emitter), as impl napkin_NAME")
    args = ap.parse_args()
    also = dict(a.split("=", 1) for a in args.also)
    info = gpu_info()
    run_id = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    timer = Timer(args.reps)
    cache = {}
    rows_out = []
    kernels_root = pathlib.Path(os.environ.get("NAPKIN_KERNELS", "build/gen"))
    print(f"run {run_id} on {info['gpu']} (torch {info['torch']}, cuDNN {info['cudnn']})", flush=True)
    for name in args.variants.split(","):
        spec = VARIANTS[name]
        for d in map(int, args.dims.split(",")):
            kernel = napkin_kernels.load(kernels_root / f"{name}_d{d}")
            scale = spec.get("scale", 0.08838834764831845)  # the diagram's literal
            for s in map(int, args.seqlens.split(",")):
                b, h, hkv, gen, q, k, v, aux = problem(name, s, d)
                o = q.new_empty(b, s, h, v.shape[-1])
                if name == "gqa":  # Q[b g r q d], K[b g k d], O[b q g r d]
                    qn, kn, vn = q.view(b, s, hkv, h // hkv, d).permute(0, 2, 3, 1, 4), k.permute(0, 2, 1, 3), v.permute(0, 2, 1, 3)
                    napkin_fn = lambda: (kernel(qn, kn, vn, out=o.view(b, s, hkv, h // hkv, d)), o)[1]  # noqa: E731
                else:
                    napkin_fn = napkin_call(kernel, name, q, k, v, aux, o)
                impls, notes = {"napkin": napkin_fn}, {}
                for alt, root in also.items():  # (not for gqa's own layout; where ROOT has this kernel)
                    if (pathlib.Path(root) / f"{name}_d{d}" / "libkernel.so").exists():
                        alt_kernel = napkin_kernels.load(pathlib.Path(root) / f"{name}_d{d}")
                        impls[f"napkin_{alt}"] = napkin_call(alt_kernel, name, q, k, v, aux, torch.empty_like(o))
                for peer, make in (("flex", lambda: flex_call(spec, q, k, v, aux, scale, cache)),
                                   ("fa3", lambda: fa3_call(spec, q, k, v, aux, scale)),
                                   ("cudnn", lambda: sdpa_call(spec, q, k, v, aux, scale))):
                    try:
                        fn, why = make()
                    except Exception as e:  # noqa: BLE001
                        fn, why = None, f"failed: {str(e).splitlines()[0][:100]}"
                    if fn is None:
                        notes[peer] = why
                    else:
                        impls[peer] = fn
                # Validation on sampled rows (FlashAttention's rule).
                rows = torch.randperm(s, generator=gen)[:128].sort().values
                ref = reference(spec, q, k, v, aux, rows, torch.float64, scale)
                low = reference(spec, q, k, v, aux, rows, torch.bfloat16, scale)
                bound = 2 * (low.double() - ref).abs().max().item() + 1e-3
                valid = {}
                for n, fn in list(impls.items()):
                    try:
                        out = fn()
                        torch.cuda.synchronize()
                        err = (out[:, rows.cuda()].double() - ref).abs().max().item()
                    except Exception as e:  # noqa: BLE001
                        err, notes[n] = float("inf"), f"failed: {str(e).splitlines()[0][:100]}"
                    valid[n] = err
                    if not (err <= bound):
                        notes.setdefault(n, f"INVALID: max error {err:.3g} > {bound:.3g}")
                        del impls[n]
                ms = timer.medians(impls) if "napkin" in impls else {}
                row = {"run": run_id, "variant": name, "diagram_hash": kernel.manifest["diagram"]["hash"], "d": d,
                       "seqlen": s, "batch": b, "heads": h, "kv_heads": hkv, "dtype": "bf16", "ms": ms,
                       "max_error": valid, "bound": bound, "notes": notes, "reps": args.reps, **info}
                rows_out.append(row)
                with open(args.out, "a") as f:
                    f.write(json.dumps(row) + "\n")
                ratios = "  ".join(f"{p}/napkin {ms[p] / ms['napkin']:.2f}"
                                   for p in ("flex", "fa3", "cudnn", *(f"napkin_{a}" for a in also)) if p in ms)
                print(f"{name:18s} d={d:3d} s={s:5d}  napkin {ms.get('napkin', float('nan')):7.3f} ms  {ratios}"
                      + ("" if "napkin" in ms else f"  napkin: {notes.get('napkin')}"), flush=True)
                del q, k, v, aux, o
                torch.cuda.empty_cache()
    print("\nnotes:")
    seen = set()
    for r in rows_out:
        for p, why in r["notes"].items():
            if (r["variant"], p, why) not in seen:
                seen.add((r["variant"], p, why))
                print(f"  {r['variant']}: {p}: {why}")


if __name__ == "__main__":
    main()
