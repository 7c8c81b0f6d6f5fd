# SPDX-License-Identifier: Apache-2.0
"""napkin's attention forward against an f64 reference, with FlashAttention's rule: the
kernel's max error is at most twice that of PyTorch's own attention in the same low precision
(plus a small absolute slack). Fresh random inputs per case; outputs poisoned with NaN first."""
import math

import pytest

CASES = [
    # b, s_q, s_k, h_q, h_kv, d, causal
    (1, 1, 1, 1, 1, 64, False),
    (2, 17, 17, 4, 4, 128, False),
    (2, 17, 17, 4, 4, 128, True),
    (1, 1000, 1000, 2, 2, 64, True),
    (1, 4097, 4097, 2, 1, 128, False),   # GQA 2:1, partial last tiles
    (1, 4097, 4097, 2, 2, 256, True),
    (2, 17, 1000, 8, 2, 128, True),      # q shorter than k, GQA 4:1
    (2, 1000, 17, 4, 1, 64, True),       # q longer than k: fully masked rows, MQA
    (1, 700, 300, 4, 2, 128, True),      # fully masked tiles before and between visited ones
    (2, 1000, 17, 4, 4, 256, False),
    (1, 300, 700, 6, 3, 256, False),
    (3, 513, 513, 4, 1, 128, True),      # MQA
    (1, 1100, 2100, 4, 2, 128, True),    # d128 past 1024 keys: softmax overlapped with P V
    (2, 700, 1500, 4, 1, 128, False),    # the same, non-causal (up to 2048 keys), MQA
    (1, 128, 128, 16, 16, 64, False),
    (1, 2100, 2200, 4, 2, 64, True),     # d64 causal past the short-query schedule (2048)
    (2, 1000, 1000, 4, 2, 64, False),    # d64 non-causal, padded schedule: 2 of 18 warpgroups idle
    (1, 2100, 2100, 2, 1, 64, False),    # d64 non-causal, no warpgroup idle: the plain schedule
]
DTYPES = ["bfloat16", "float16"]


def reference(q, k, v, causal, scale, dtype):
    """Attention in `dtype` (torch.float64 for the reference). q (b,sq,hq,d), k/v (b,sk,hkv,d)."""
    import torch
    g = q.shape[2] // k.shape[2]
    qt = q.to(dtype).transpose(1, 2)                                 # b h sq d
    kt = k.to(dtype).repeat_interleave(g, dim=2).transpose(1, 2)
    vt = v.to(dtype).repeat_interleave(g, dim=2).transpose(1, 2)
    s = (qt @ kt.transpose(-1, -2)) * scale                          # b h sq sk
    sq, sk = q.shape[1], k.shape[1]
    if causal:
        i = torch.arange(sq, device=q.device)[:, None]
        j = torch.arange(sk, device=q.device)[None, :]
        s = s.masked_fill(j > i + sk - sq, float("-inf"))
    lse = torch.logsumexp(s.double(), dim=-1)                        # b h sq
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)                     # empty rows -> 0
    o = (p.to(dtype) @ vt).transpose(1, 2)                           # b sq h d
    return o, lse


def fa_reference(q, k, v, causal, scale):
    """The f64 reference (O, LSE) and FlashAttention's bound on O's max error: twice that of
    PyTorch's own attention in q's dtype against the same reference (+1e-5 for exact cases)."""
    import torch
    ref_o, ref_lse = reference(q, k, v, causal, scale, torch.float64)
    low_o, _ = reference(q, k, v, causal, scale, q.dtype)
    return ref_o, ref_lse, 2 * (low_o.double() - ref_o).abs().max().item() + 1e-5


def check_against_reference(q, k, v, causal, scale):
    """Runs napkin on (q, k, v), outputs poisoned with NaN, and checks O and LSE against the f64
    reference with FlashAttention's rule."""
    import torch
    import napkin_attention
    b, sq, hq, _ = q.shape
    out = torch.full_like(q, float("nan"))
    lse = torch.full((b, hq, sq), float("nan"), device="cuda", dtype=torch.float32)
    o, lse = napkin_attention.attention(q, k, v, causal=causal, softmax_scale=scale, out=out, lse=lse)
    torch.cuda.synchronize()
    assert not torch.isnan(o).any(), "unwritten (NaN-poisoned) or NaN output"
    ref_o, ref_lse, tol = fa_reference(q, k, v, causal, scale)
    err = (o.double() - ref_o).abs().max().item()
    assert err <= tol, f"max error {err:.3e} > {tol:.3e} (2 x PyTorch's {q.dtype} error)"
    empty = torch.isinf(ref_lse)
    assert torch.equal(torch.isinf(lse) & (lse > 0), empty), "LSE must be +inf exactly on fully masked rows"
    if empty.any():
        assert (o.transpose(1, 2)[empty] == 0).all(), "fully masked rows must give zeros"
    fin = ~empty
    lse_err = (lse.double()[fin] - ref_lse[fin]).abs().max().item() if fin.any() else 0.0
    assert lse_err <= 1e-3, f"LSE max error {lse_err:.3e}"


def case_id(c):
    return "b{}_q{}_k{}_h{}x{}_d{}_{}".format(*c[:6], "causal" if c[6] else "full")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_forward_matches_reference(case, dtype):
    import torch
    b, sq, sk, hq, hkv, d, causal = case
    dt = getattr(torch, dtype)
    torch.manual_seed(hash((case, dtype)) % (2**31))
    q = torch.randn(b, sq, hq, d, device="cuda", dtype=dt)
    k = torch.randn(b, sk, hkv, d, device="cuda", dtype=dt)
    v = torch.randn(b, sk, hkv, d, device="cuda", dtype=dt)
    check_against_reference(q, k, v, causal, 1.0 / math.sqrt(d))


# One shape per schedule (napkin/attention_schedule.h): d64 short causal, d64 padded, d64 plain,
# d128 plain, overlapped (causal and not) and long keys, d256.
RESCALE_CASES = [
    (1, 1000, 1000, 2, 2, 64, True),
    (2, 1000, 1000, 4, 2, 64, False),
    (1, 2100, 2100, 2, 1, 64, False),
    (1, 1000, 1000, 2, 2, 128, True),
    (1, 2100, 2100, 2, 2, 128, True),
    (1, 2000, 2000, 2, 2, 128, False),
    (1, 1000, 1000, 2, 2, 128, False),
    (1, 4097, 4097, 2, 1, 128, False),
    (1, 700, 700, 2, 2, 256, True),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("ramp", ["rising", "falling"])
@pytest.mark.parametrize("case", RESCALE_CASES, ids=case_id)
def test_scores_that_rise_or_fall_along_the_keys(case, ramp, dtype):
    """Keys scaled from 0.25 to 6 along the sequence (rising) or back (falling), so a row's
    running max grows by far more than 2^8 from chunk to chunk, or is set by the first chunk
    and never moves: the softmax's conditional rescaling (fragment.h) takes its rescaling and
    its stale-max paths in the middle of rows. Scores reach about +-50 (in units of the scale)."""
    import torch
    b, sq, sk, hq, hkv, d, causal = case
    dt = getattr(torch, dtype)
    torch.manual_seed(hash((case, ramp, dtype)) % (2**31))
    gain = torch.linspace(0.25, 6.0, sk, device="cuda")
    if ramp == "falling":
        gain = gain.flip(0)
    q = (2 * torch.randn(b, sq, hq, d, device="cuda")).to(dt)
    k = (torch.randn(b, sk, hkv, d, device="cuda") * gain[None, :, None, None]).to(dt)
    v = torch.randn(b, sk, hkv, d, device="cuda", dtype=dt)
    check_against_reference(q, k, v, causal, 1.0 / math.sqrt(d))


@pytest.mark.parametrize("causal", [False, True])
def test_bhsd_layout(causal):
    """(b, h, s, d) storage passed as a (b, s, h, d) view: strides are honoured, output too."""
    import torch
    import napkin_attention
    b, h, s, d = 2, 4, 333, 128
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2) for _ in range(3))
    out = torch.full((b, h, s, d), float("nan"), device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    o, _ = napkin_attention.attention(q, k, v, causal=causal, out=out)
    ref_o, _, tol = fa_reference(q, k, v, causal, 1 / math.sqrt(d))
    assert (o.double() - ref_o).abs().max().item() <= tol


def test_rejects_unsupported():
    import torch
    import napkin_attention
    q = torch.randn(1, 16, 2, 96, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="the prebuilt kernels take head_dim 64, 128 or 256, got 96"):
        napkin_attention.attention(q, q, q)
    q = torch.randn(1, 16, 2, 64, device="cuda", dtype=torch.float32)
    with pytest.raises(RuntimeError, match="dtype must be bfloat16 or float16"):
        napkin_attention.attention(q, q, q)
    q = torch.randn(1, 16, 3, 64, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, 16, 2, 64, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match=r"heads_q \(3\) must be a multiple of heads_kv \(2\)"):
        napkin_attention.attention(q, k, k)


@pytest.mark.parametrize("case", [(2, 1000, 1000, 4, 2, 128, True), (1, 300, 700, 2, 2, 64, False),
                                  (1, 777, 777, 2, 1, 256, True)])
def test_without_pingpong(case):
    """The schedule knob pingpong=False (warpgroups issue independently) computes the same function."""
    import torch
    import napkin_attention
    b, sq, sk, hq, hkv, d, causal = case
    q = torch.randn(b, sq, hq, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(b, sk, hkv, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(b, sk, hkv, d, device="cuda", dtype=torch.bfloat16)
    out = torch.full_like(q, float("nan"))
    o, _ = napkin_attention.attention(q, k, v, causal=causal, out=out, pingpong=False)
    ref_o, _, tol = fa_reference(q, k, v, causal, 1 / math.sqrt(d))
    assert (o.double() - ref_o).abs().max().item() <= tol


def test_repeated_launches_on_streams():
    """The scheduler's tile counter is reset by each launch itself: launches of different sizes,
    back to back on one stream and interleaved on two streams, all give the right answer. Two
    shapes have more tiles than the grid, not a multiple of it (288 and 160 tiles on an H100),
    so the non-causal CTAs that take a tile fewer start late (FwdConfig::kStaggerClocksPerChunk)."""
    import torch
    import napkin_attention
    shapes = [(4, 1000, 4, 128, False), (1, 130, 2, 128, True), (8, 513, 2, 64, True), (2, 2048, 2, 256, False),
              (9, 1000, 4, 128, False), (5, 1000, 4, 256, False)]
    inputs = []
    for b, s, h, d, causal in shapes:
        q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        ref_o, _, tol = fa_reference(q, k, v, causal, 1 / math.sqrt(d))
        inputs.append((q, k, v, causal, ref_o, tol))
    streams = [torch.cuda.current_stream(), torch.cuda.Stream(), torch.cuda.Stream()]
    for rep in range(3):
        outs = []
        for i, (q, k, v, causal, _, _) in enumerate(inputs):
            stream = streams[(i + rep) % len(streams)]
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                out = torch.full_like(q, float("nan"))
                outs.append(napkin_attention.attention(q, k, v, causal=causal, out=out)[0])
        torch.cuda.synchronize()
        for o, (_, _, _, _, ref_o, tol) in zip(outs, inputs):
            err = (o.double() - ref_o).abs().max().item()
            assert err <= tol, f"repeat {rep}: max error {err:.3e} > {tol:.3e}"
