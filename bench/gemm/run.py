# SPDX-License-Identifier: Apache-2.0
"""The GEMM-family benchmark (GPU): napkin's generated plans against cuBLAS (torch.matmul),
PyTorch eager and torch.compile, on the same inputs in one process. Every implementation is
validated first against an f32 reference of the same math (FlashAttention's rule: the error at
most twice PyTorch's own bf16 error, plus 1e-3 of the output's scale); then timed with CUDA
events, L2 flushed before each call, implementations interleaved in random order, median; the
GPU's queue runs ahead of the host, so host time per call is not counted (as in
bench/attention/variants.py; bench/gemm/device_host.sh measures it).

    python3 bench/gemm/run.py --kernels DIR [--cases a,b] [--reps 20] [--compile] [--out X.jsonl]

DIR/<case>/libkernel.so and manifest.json come from `napkin build` of bench/gemm/cases.py.
"""
import argparse, json, math, pathlib, random, statistics, sys, time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "python"))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from cases import CASES  # noqa: E402


def inputs_for(kernel, torch, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    out = {}
    sizes = {a["name"]: a["size"] for spec in kernel.inputs for a in spec["axes"]}
    for spec in kernel.inputs:
        shape = [a["size"] for a in spec["axes"]]
        if spec["dtype"] == "i32":  # class indices (a cross-entropy's targets) over the vocabulary
            out[spec["name"]] = torch.randint(0, sizes.get("v", 1000), shape, generator=g, device="cuda", dtype=torch.int32)
            continue
        if spec["dtype"] == "bool":  # a mask keeping about 80 % (padding masks, dropped tokens)
            out[spec["name"]] = torch.rand(shape, generator=g, device="cuda") < 0.8
            continue
        dt = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[spec["dtype"]]
        x = torch.randn(shape, generator=g, device="cuda", dtype=torch.float32)
        name = spec["name"]
        if len(shape) == 2 and name not in ("X", "A", "T") and not name.startswith(("Q", "K", "V")):
            x = x / math.sqrt(shape[0])  # weights: outputs of unit scale
        if name in ("gamma",):
            x = 1 + 0.1 * x
        if name in ("beta", "b1"):
            x = 0.1 * x
        if name in ("Q", "K"):
            x = 0.1 * x
        if name in ("B", "C") and len(shape) == 2:
            pass
        out[name] = x.to(dt)
    return out


def torch_impl(case, torch, F):
    """The same math in PyTorch, given f32 (reference) or native (eager) tensors."""
    if case.startswith("weight_gradient"):
        return lambda t, f32: (t["X"].float().t() @ t["dY"].float()) if f32 else t["X"].t() @ t["dY"]
    if case.startswith("long_k_product"):
        return lambda t, f32: (t["A"].float() @ t["B"].float().t()) if f32 else t["A"] @ t["B"].t()
    if case.startswith("global_norm"):
        return lambda t, f32: (t["g"].double() * t["g"].double()).sum().float() if f32 else (t["g"] * t["g"]).sum()
    if case.startswith("masked_mean_pool"):
        def f(t, f32):
            X, m = (t["X"].float() if f32 else t["X"]), t["m"]
            w = m.to(X.dtype).unsqueeze(-1)
            return (X * w).sum(1) / w.sum(1)
        return f
    if case.startswith(("gemm", "llama3")):
        return lambda t, f32: (t["A"].float() @ t["B"].float()) if f32 else t["A"] @ t["B"]
    if case.startswith("biased_swiglu"):
        def f(t, f32):
            X, Wg, Wu, bg, bu = (t[n].float() if f32 else t[n] for n in ("X", "Wg", "Wu", "bg", "bu"))
            G, U = X @ Wg + bg.unsqueeze(1), X @ Wu + bu.unsqueeze(1)
            return F.silu(G) * U
        return f
    if case.startswith("swiglu"):
        def f(t, f32):
            X, Wg, Wu, Wd = (t[n].float() if f32 else t[n] for n in ("X", "Wg", "Wu", "Wd"))
            G, U = X @ Wg, X @ Wu
            H = (G * torch.sigmoid(G) * U)
            return (H.bfloat16().float() if f32 else H) @ Wd
        return f
    if case.startswith("rmsnorm_matmul"):
        def f(t, f32):
            X = t["X"].float()
            N = X * torch.rsqrt(X.pow(2).mean(-1, keepdim=True) + 1e-6) * t["gamma"].float()
            return N.bfloat16().float() @ t["W"].float() if f32 else N.bfloat16() @ t["W"]
        return f
    if case.startswith("layernorm"):
        def f(t, f32):
            y = F.layer_norm(t["X"].float(), (t["X"].shape[-1],), eps=1e-5) * t["gamma"] + t["beta"]
            return y if f32 else y.bfloat16()
        return f
    if case.startswith("gelu_mlp"):
        def f(t, f32):
            X, W1, W2 = (t[n].float() if f32 else t[n] for n in ("X", "W1", "W2"))
            H = X @ W1 + t["b1"]
            G = F.gelu(H.float(), approximate="tanh")
            return G.bfloat16().float() @ W2 if f32 else G.bfloat16() @ W2
        return f
    if case.startswith("matmul_chain"):
        def f(t, f32):
            if f32:
                return (t["A"].float() @ t["B"].float()).bfloat16().float() @ t["C"].float()
            return (t["A"] @ t["B"]) @ t["C"]
        return f
    if case.startswith("linear_attention"):
        def f(t, f32):
            Q, K, V = (t[n].float() if f32 else t[n] for n in ("Q", "K", "V"))
            FQ, FK = torch.exp(Q), torch.exp(K)
            return FQ @ (FK.transpose(-1, -2) @ V) if f32 else (FQ @ FK.transpose(-1, -2)) @ V
        return f
    if case.startswith("normalised_linear_attention"):
        def f(t, f32):
            # As a PyTorch user writes it: the state K^T V and the normaliser's sum of phi(K) per
            # head, never the q x k scores.
            Q, K, V = (t[n].float() if f32 else t[n] for n in ("Q", "K", "V"))
            FQ, FK = torch.where(Q > 0, Q + 1, torch.exp(Q)), torch.where(K > 0, K + 1, torch.exp(K))
            state = FK.transpose(-1, -2) @ V
            Z = FQ @ FK.sum(-2).unsqueeze(-1)
            return (FQ @ state) / Z
        return f
    if case.startswith("scaled_projection"):
        def f(t, f32):
            F_ = (t["X"] * 0.5).bfloat16()
            return F_.float() @ t["W"].float() if f32 else F_ @ t["W"]
        return f
    if case.startswith("normalised_projection"):
        def f(t, f32):
            X, W = (t[n].float() if f32 else t[n] for n in ("X", "W"))
            n = (t["X"].float() ** 2).sum(-1, keepdim=True) + 1e-6
            return (X @ W) / n if f32 else ((X @ W).float() / n).bfloat16()
        return f
    if case.startswith("gated_softplus"):
        def f(t, f32):
            F_ = torch.log(torch.exp(t["X"].float() * 0.5) + 1)
            z = F_.sum(-1, keepdim=True)
            gate = torch.sigmoid(t["b"])
            if f32:
                return (F_ @ t["W"].float()) / z * gate
            return ((F_.half() @ t["W"]).float() / z * gate).half()
        return f
    if case.startswith("linear_cross_entropy"):
        def f(t, f32):
            # As a PyTorch user writes it: the logits of nn.Linear (bf16), then cross_entropy.
            X, W = (t[n].float() if f32 else t[n] for n in ("X", "W"))
            return F.cross_entropy(X @ W.t(), t["target"].long(), reduction="none")
        return f
    if case.startswith("squared_error_loss"):
        def f(t, f32):
            X, Y = (t[n].float() if f32 else t[n] for n in ("X", "Y"))
            E = (X - Y).float()
            return (E * E).sum() / E.numel(), X.max().float()
        return f
    if case.startswith("soft_argmax"):
        def f(t, f32):
            H = t["H"]
            P = torch.softmax(H.flatten(-2), -1).view(H.shape)
            ys = torch.arange(H.shape[-2], device=H.device, dtype=H.dtype).view(-1, 1)
            xs = torch.arange(H.shape[-1], device=H.device, dtype=H.dtype)
            return (P * xs).sum((-2, -1)), (P * ys).sum((-2, -1))
        return f
    if case.startswith("batchnorm_nchw"):
        def f(t, f32):
            X = t["X"].float()
            m = X.mean((0, 2, 3), keepdim=True)
            d = X - m
            v = (d * d).mean((0, 2, 3), keepdim=True)
            Y = d / (v + 1e-5) * t["w"].view(1, -1, 1, 1) + t["bb"].view(1, -1, 1, 1)
            return Y if f32 else Y.bfloat16()
        return f
    if case.startswith("column_variance"):
        def f(t, f32):
            if f32:
                return t["X"].float().var(0, unbiased=False)
            return torch.var_mean(t["X"], dim=0, correction=0)[0]
        return f
    raise KeyError(case)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernels", required=True)
    ap.add_argument("--cases", default="")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--compile", action="store_true", help="also torch.compile (inductor) of the eager code")
    ap.add_argument("--out", default="")
    ap.add_argument("--also", action="append", default=[], metavar="NAME=DIR",
                    help="also time the kernels of another build (impl napkin_NAME), in this process: an A/B")
    a = ap.parse_args()
    import torch
    import torch.nn.functional as F
    import napkin_kernels as nk
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    dev = torch.cuda.get_device_name()
    env = {"gpu": dev, "torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
           "run": time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())}
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    # The GPU's measured ceilings: cuBLAS on 8192^3 bf16, and a device-to-device copy.
    x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    def timed_rounds(fns, reps):
        """Median seconds of each fn: `reps` rounds of every fn in random order, each call after an
        L2 flush between its own events. Nothing waits for the GPU until the end, so the queue
        runs ahead and the host's time per call (measured apart: device_host.sh) is not counted."""
        events = {n: [] for n in fns}
        order = list(fns)
        for _ in range(reps):
            random.shuffle(order)
            for n in order:
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                torch.cuda._sleep(300_000)  # ~150 us of GPU time: the host's launches queue up behind it
                flush.zero_()
                s.record(); fns[n](); e.record()
                events[n].append((s, e))
        torch.cuda.synchronize()
        return {n: statistics.median(s.elapsed_time(e) * 1e-3 for s, e in ev) for n, ev in events.items()}
    def timed(fn, reps):
        return timed_rounds({"fn": fn}, reps)["fn"]
    for _ in range(3): x @ x
    gemm_rate = 2 * 8192 ** 3 / timed(lambda: x @ x, 10)
    big = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    big2 = torch.empty_like(big)
    copy_bw = 2 * big.numel() / timed(lambda: big2.copy_(big), 10)
    del big, big2, x
    print(f"{dev}: cuBLAS bf16 8192^3 {gemm_rate / 1e12:.0f} TFLOP/s, copy {copy_bw / 1e12:.2f} TB/s", flush=True)
    env.update(gemm_rate=gemm_rate, copy_bw=copy_bw)
    wanted = set(a.cases.split(",")) if a.cases else None
    rows = []
    for name, path, sets, family in CASES:
        if wanted and name not in wanted:
            continue
        d = pathlib.Path(a.kernels) / name
        if not (d / "libkernel.so").exists():
            print(f"{name}: no kernel ({d})", flush=True)
            continue
        k = nk.load(d)
        t = inputs_for(k, torch, 7)
        impl = torch_impl(name, torch, F)
        def flat(x):  # several outputs as one vector (each of like scale)
            return torch.cat([y.float().reshape(-1) for y in x]) if isinstance(x, (tuple, list)) else x.float()
        ref = flat(impl(t, True))
        eager = lambda: impl(t, False)
        ours = lambda: k(**t)
        impls = {"napkin": ours, "torch": eager}
        for spec in a.also:
            tag, root = spec.split("=", 1)
            other = pathlib.Path(root) / name
            if (other / "libkernel.so").exists():
                impls[f"napkin_{tag}"] = (lambda kk: lambda: kk(**t))(nk.load(other))
        if a.compile and family == "plan" and not name.endswith("8192"):  # compile time: one token count
            try:
                c = torch.compile(lambda: impl(t, False))
                c(); impls["compile"] = c
            except Exception as ex:  # noqa: BLE001
                print(f"  torch.compile failed: {type(ex).__name__}", flush=True)
        scale = ref.abs().max().item()
        err_torch = (flat(eager()) - ref).abs().max().item()
        row = {"case": name, "diagram": k.manifest["diagram"]["hash"], "sets": sets, **env,
               "predicted_us": k.manifest.get("predicted_time_us"), "kernels": [x["kind"] for x in k.manifest.get("plan", {}).get("kernels", [])]}
        valid = {}
        for n, fn in impls.items():
            err = (flat(fn()) - ref).abs().max().item()
            valid[n] = err <= 2 * err_torch + 1e-3 * scale and math.isfinite(err)
            row[f"err_{n}"] = err
        torch.cuda.synchronize()
        for _ in range(3):
            for fn in impls.values():
                fn()
        times = timed_rounds(impls, a.reps)
        for n in impls:
            row[f"{n}_s"] = times[n]
            row[f"{n}_valid"] = valid[n]
        plan = k.manifest.get("plan", {})
        flops, hbm = plan.get("flops", 0), 0
        for spec in k.inputs + k.manifest["outputs"]:
            hbm += math.prod(x["size"] for x in spec["axes"]) * {"bf16": 2, "f16": 2, "f32": 4, "i32": 4, "bool": 1}[spec["dtype"]]
        roof = max(flops / gemm_rate, hbm / copy_bw)
        row.update(flops=flops, compulsory_bytes=hbm, roofline_s=roof)
        if hbm / copy_bw > flops / gemm_rate:
            # A memory-bound plan beside a device copy of its own bytes (half read, half written):
            # the copy rate at this size, where the 1 GiB copy's rate is out of reach of any kernel.
            src = torch.empty(hbm // 2, dtype=torch.uint8, device="cuda")
            dst = torch.empty_like(src)
            row["copy_same_s"] = timed(lambda: dst.copy_(src), a.reps)
            del src, dst
        rows.append(row)
        if a.out:
            with open(a.out, "a") as f:
                f.write(json.dumps(row) + "\n")
        peers = " ".join(f"{n} {row[n + '_s'] / row['napkin_s']:.3f}x" for n in impls if n != "napkin")
        pred = row["predicted_us"] or 0
        print(f"{name:24s} napkin {row['napkin_s'] * 1e6:9.1f} us {'ok' if valid['napkin'] else 'INVALID'}  {peers}  "
              f"roofline {roof / row['napkin_s'] * 100:5.1f}%  predicted/measured {pred / 1e6 / row['napkin_s']:.2f}"
              + (f"  copy of its bytes / napkin {row['copy_same_s'] / row['napkin_s']:.2f}" if "copy_same_s" in row else ""), flush=True)


if __name__ == "__main__":
    main()
