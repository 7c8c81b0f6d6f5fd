# SPDX-License-Identifier: Apache-2.0
"""Attention forward benchmark: napkin against cuDNN and FlashAttention-2 (PyTorch SDPA
backends) and FlexAttention, in one process on one GPU, on FlashAttention-3's suite
(batch * seqlen = 16384, heads = 2048 / d, seqlen 512..16384, d in {64, 128, 256}, causal and
not, bf16 and fp16).

Every implementation is validated on the row's inputs before it is timed: its error against an
f64 reference on sampled query rows must be at most twice that of PyTorch's own low-precision
attention (FlashAttention's rule). Timing: CUDA events around each call, L2 flushed before
each, median of --reps, the implementations' calls taken in turns. Prints a table (TFLOP/s,
ratio to cuDNN, and napkin's own prediction for this GPU beside the measurement, from
bench/attention/predictions.json, which predict.py computes on the host) and appends one JSON
line per row and implementation to --out.

    python3 bench/attention/run.py --out /tmp/attention.jsonl  (appended to bench/results/attention.jsonl.gz)
"""
import argparse
import datetime
import json
import math
import pathlib
import random
import statistics
import subprocess
import sys
import uuid

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "python"))
import napkin_attention  # noqa: E402

SEQLENS = [512, 1024, 2048, 4096, 8192, 16384]


def flops(batch, heads, seqlen, d, causal):
    f = 4 * batch * heads * seqlen * seqlen * d
    return f / 2 if causal else f


def predict_machine(gpu_name):
    """napkin's machine file for this GPU (machines/*.toml), or None."""
    if "H100" in gpu_name:
        return "h100-pcie" if "PCIe" in gpu_name else "h100-sxm5"
    if "H200" in gpu_name:
        return "h200"
    return None


def load_predictions(path, machine):
    """{(d, causal, seqlen): predicted TFLOP/s or None (no feasible configuration)}."""
    p = pathlib.Path(path)
    if machine is None or not p.exists():
        return {}
    rows = json.loads(p.read_text())["machines"].get(machine, [])
    return {(r["d"], r["causal"], r["seqlen"]): r["predicted_tflops"] for r in rows}


def gpu_info():
    info = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version()}
    try:
        q = "driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit,temperature.gpu"
        out = subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.strip().splitlines()[0]
        vals = [x.strip() for x in out.split(",")]
        info.update(driver=vals[0], clocks={"sm_mhz_now": vals[1], "sm_mhz_max": vals[2], "mem_mhz": vals[3],
                                            "power_limit": vals[4], "temp_c": vals[5]})
    except Exception as e:  # noqa: BLE001
        info.update(driver="unknown", clocks={"error": str(e)})
    return info


class Timer:
    def __init__(self, reps, warmup):
        self.reps, self.warmup = reps, warmup
        self.rng = random.Random(0)
        self.flush = torch.empty(256 * 1024 * 1024, dtype=torch.int8, device="cuda")  # > L2 (50-60 MB)

    def median_ms(self, fn):
        return statistics.median(self.times_ms_interleaved({"fn": fn})["fn"])

    def times_ms_interleaved(self, fns):
        """The times (ms) of --reps calls of each function in `fns` (name -> fn), the calls taken
        in rounds (one call of each per round) so that every implementation sees the same clocks
        and temperature; the long rows heat the GPU, and timed one block after another the later
        blocks ran slower.
        Each round takes the functions in a fresh random order (seeded: the same orders every
        run), so none always runs first or always follows the same other one."""
        for fn in fns.values():
            for _ in range(self.warmup):
                fn()
        events = {name: [] for name in fns}
        order = list(fns)
        for _ in range(self.reps):
            self.rng.shuffle(order)
            for name in order:
                fn = fns[name]
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                self.flush.zero_()
                s.record()
                fn()
                e.record()
                events[name].append((s, e))
        torch.cuda.synchronize()
        return {name: [s.elapsed_time(e) for s, e in ev] for name, ev in events.items()}


# A row's timing is flagged unsteady when an implementation's 90th-percentile call took more than
# this times its 10th: its median then says little (seen: cuDNN at half speed for most of a
# row's calls while napkin's, in the same rounds, were steady; bench/NOTES.md, v30-v32).
UNSTEADY_SPREAD = 1.25


def spread(times):
    """p90 / p10 of a list of call times."""
    deciles = statistics.quantiles(times, n=10)
    return deciles[-1] / deciles[0]


def sampled_reference(q, k, v, causal, scale, rows, dtype):
    """Attention for the query rows `rows` only, computed in `dtype`. Layout (b, h, s, d)."""
    qs = q[:, :, rows].to(dtype)
    s = (qs @ k.to(dtype).transpose(-1, -2)) * scale
    if causal:
        sk, sq = k.shape[2], q.shape[2]
        j = torch.arange(sk, device=q.device)[None, :]
        s = s.masked_fill(j > rows[:, None] + sk - sq, float("-inf"))
    p = torch.softmax(s, dim=-1)
    return p.to(dtype) @ v.to(dtype)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="/tmp/attention.jsonl")  # then appended to bench/results/attention.jsonl.gz
    ap.add_argument("--dtypes", default="bfloat16,float16")
    ap.add_argument("--dims", default="64,128,256")
    ap.add_argument("--seqlens", default=",".join(map(str, SEQLENS)))
    ap.add_argument("--causal", default="0,1")
    ap.add_argument("--impls", default="napkin,cudnn,fa2,flex")
    ap.add_argument("--napkin-kernels", default="",
                    help="time the kernels napkin generated (bench/attention/suite_diagrams.py) as napkin, "
                         "not the hand API (napkin_attention)")
    ap.add_argument("--flex-seqlens", default="1024,4096,16384",
                    help="FlexAttention compiles per shape; it is timed on these seqlens only")
    ap.add_argument("--reps", type=int, default=50,
                    help="timed calls per implementation and row (the median is reported); at 30 the "
                         "rows at parity moved by +-0.5 %% between processes")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--note", default="")
    ap.add_argument("--predictions", default=str(pathlib.Path(__file__).with_name("predictions.json")),
                    help="napkin's predictions (predict.py); missing file: no prediction column")
    ap.add_argument("--predict-machine", default="auto",
                    help="machine file whose predictions to show (auto: from the GPU's name)")
    args = ap.parse_args()

    torch.backends.cuda.matmul.allow_tf32 = False
    info = gpu_info()
    run_id = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:6]
    timer = Timer(args.reps, args.warmup)
    pmachine = predict_machine(info["gpu"]) if args.predict_machine == "auto" else args.predict_machine
    predictions = load_predictions(args.predictions, pmachine)

    # The two ceilings of this GPU, measured in this run (METHOD.md): a bf16 GEMM and a copy.
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    gemm_tflops = 2 * 8192**3 / timer.median_ms(lambda: a @ a) / 1e9
    x = torch.randn(512 * 1024 * 1024 // 2, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    copy_tbps = 2 * x.numel() * 2 / timer.median_ms(lambda: y.copy_(x)) / 1e9
    del a, x, y
    print(f"run {run_id} on {info['gpu']} driver {info.get('driver')} torch {info['torch']} CUDA {info['cuda']} "
          f"cuDNN {info['cudnn']}; clocks {info.get('clocks')}")
    print(f"ceilings: bf16 GEMM 8192^3 {gemm_tflops:.0f} TFLOP/s, copy {copy_tbps:.2f} TB/s")

    flex = None
    if "flex" in args.impls:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        # One compiled kernel per shape and mask: lift dynamo's recompile limit (default 8), past
        # which flex_attention silently falls back to an unfused eager path (~10 TFLOP/s).
        import torch._dynamo as dynamo
        for knob in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit", "accumulated_cache_size_limit"):
            if hasattr(dynamo.config, knob):
                setattr(dynamo.config, knob, 4096)
        flex = torch.compile(flex_attention, dynamic=False)

    impls = args.impls.split(",")
    rows_out = []
    out_path = pathlib.Path(args.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    for dtype_name in args.dtypes.split(","):
        dt = getattr(torch, dtype_name)
        for d in map(int, args.dims.split(",")):
            for causal in (bool(int(c)) for c in args.causal.split(",")):
                for seqlen in map(int, args.seqlens.split(",")):
                    batch, heads = 16384 // seqlen, 2048 // d
                    scale = 1 / math.sqrt(d)
                    torch.manual_seed(seqlen * 1000 + d + causal)
                    # (b, h, s, d) storage, as SDPA wants; napkin reads the (b, s, h, d) view.
                    q, k, v = (torch.randn(batch, heads, seqlen, d, device="cuda", dtype=dt) for _ in range(3))
                    fns = {}
                    if "napkin" in impls and args.napkin_kernels:
                        # The generated kernel of this row's diagram: Q[b h q d] is run.py's (b, h, s, d) storage.
                        import napkin_kernels
                        kernel = napkin_kernels.load(pathlib.Path(args.napkin_kernels) /
                                                     f"{'causal' if causal else 'attention'}_{'bf16' if dt == torch.bfloat16 else 'f16'}_d{d}")
                        o_gen = torch.empty_like(q)
                        fns["napkin"] = lambda kernel=kernel, o_gen=o_gen, q=q, k=k, v=v: kernel(q, k, v, out=o_gen)
                    elif "napkin" in impls:
                        qv, kv, vv = (t.transpose(1, 2) for t in (q, k, v))
                        o_nap = torch.empty_like(q).transpose(1, 2)
                        lse_nap = torch.empty(batch, heads, seqlen, device="cuda", dtype=torch.float32)
                        fns["napkin"] = lambda: napkin_attention.attention(qv, kv, vv, causal=causal, softmax_scale=scale,
                                                                           out=o_nap, lse=lse_nap)[0].transpose(1, 2)
                    if "napkin_nopp" in impls:  # ablation: no ping-pong between consumer warpgroups
                        qv, kv, vv = (t.transpose(1, 2) for t in (q, k, v))
                        o_np = torch.empty_like(q).transpose(1, 2)
                        lse_np = torch.empty(batch, heads, seqlen, device="cuda", dtype=torch.float32)
                        fns["napkin_nopp"] = lambda: napkin_attention.attention(
                            qv, kv, vv, causal=causal, softmax_scale=scale, out=o_np, lse=lse_np,
                            pingpong=False)[0].transpose(1, 2)
                    for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("fa2", SDPBackend.FLASH_ATTENTION)):
                        if name in impls:
                            def f(backend=backend):
                                with sdpa_kernel([backend]):
                                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
                            fns[name] = f
                    if flex is not None and str(seqlen) in args.flex_seqlens.split(","):
                        bm = None
                        if causal:
                            bm = create_block_mask(lambda b_, h_, qi, ki: qi >= ki, None, None, seqlen, seqlen)
                        fns["flex"] = lambda bm=bm: flex(q, k, v, block_mask=bm, scale=scale)

                    # Validate on sampled rows (first, last and random ones) of every batch and head.
                    g = torch.Generator(device="cpu").manual_seed(seqlen)
                    rows = torch.cat([torch.tensor([0, seqlen - 1]), torch.randint(0, seqlen, (62,), generator=g)]).cuda()
                    ref = sampled_reference(q, k, v, causal, scale, rows, torch.float64)
                    low = sampled_reference(q, k, v, causal, scale, rows, dt)
                    err_low = (low.double() - ref).abs().max().item()
                    valid = {}
                    for name, fn in list(fns.items()):
                        try:
                            o = fn()
                            torch.cuda.synchronize()
                            err = (o[:, :, rows].double() - ref).abs().max().item()
                            valid[name] = (err <= 2 * err_low + 1e-5, err)
                        except Exception as e:  # noqa: BLE001
                            valid[name] = (False, f"{type(e).__name__}: {e}"[:200])
                    result = {}
                    for name in fns:
                        if not valid[name][0]:
                            print(f"  INVALID {name} {dtype_name} d={d} causal={causal} s={seqlen}: err {valid[name][1]} "
                                  f"(bound {2 * err_low + 1e-5:.3e}); not timed")
                    samples = timer.times_ms_interleaved({n: fn for n, fn in fns.items() if valid[n][0]})
                    spreads = {}
                    for name, times in samples.items():
                        ms = statistics.median(times)
                        spreads[name] = spread(times)
                        err = valid[name][1]
                        tf = flops(batch, heads, seqlen, d, causal) / ms / 1e9
                        result[name] = tf
                        rec = {"run_id": run_id, "gpu": info["gpu"], "impl": name, "dtype": dtype_name, "d": d,
                               "causal": causal, "seqlen": seqlen, "batch": batch, "heads": heads,
                               "tflops": round(tf, 2), "time_ms": round(ms, 5),
                               "time_spread_p90_p10": round(spreads[name], 4), "max_err": err,
                               "ref_err_lowprec": err_low, "clocks": info.get("clocks"), "driver": info.get("driver"),
                               "cuda": info["cuda"], "cudnn": info["cudnn"], "torch": info["torch"],
                               "gemm_tflops_ceiling": round(gemm_tflops, 1), "copy_tbps_ceiling": round(copy_tbps, 3),
                               "note": args.note}
                        if name == "napkin" and predictions:
                            rec.update(predicted_machine=pmachine,
                                       predicted_tflops=predictions.get((d, causal, seqlen)))
                        with out_path.open("a") as fh:
                            fh.write(json.dumps(rec) + "\n")
                    unsteady = [n for n in ("napkin", "cudnn") if spreads.get(n, 1.0) > UNSTEADY_SPREAD]
                    rows_out.append((dtype_name, d, causal, seqlen, result, unsteady))
                    del q, k, v, fns
                    torch.cuda.empty_cache()
                    sys.stdout.flush()

    # Table last, so it lands at the end of the log.
    print(f"\nrun {run_id}, {info['gpu']}, TFLOP/s (median of {args.reps}, L2 flushed); ratio = napkin / cuDNN")
    if predictions:
        print(f"pred: napkin's prediction for {pmachine} (napkin derive, masked blocks skipped; '-': no "
              f"feasible configuration in napkin's model); meas/pred = napkin measured / predicted")
    extra = [n for n in impls if n not in ("napkin", "cudnn", "fa2", "flex")]
    print(f"{'dtype':9} {'d':>4} {'causal':>6} {'seqlen':>6} | {'napkin':>7} {'cudnn':>7} {'fa2':>7} {'flex':>7} | ratio"
          + (f" | {'pred':>7} meas/pred" if predictions else "") + "".join(f" | {n}" for n in extra))
    ratios, unsteady_rows = [], []
    for dtype_name, d, causal, seqlen, r, unsteady in rows_out:
        cell = lambda n: f"{r[n]:7.1f}" if n in r else f"{'-':>7}"  # noqa: E731
        ratio = r["napkin"] / r["cudnn"] if "napkin" in r and "cudnn" in r else float("nan")
        if ratio == ratio:
            ratios.append(ratio)
        pred = ""
        if predictions:
            pt = predictions.get((d, causal, seqlen))
            pred = (f" | {pt:7.1f} {r['napkin'] / pt:9.2f}" if pt and "napkin" in r
                    else f" | {(f'{pt:7.1f}' if pt else '-'):>7} {'-':>9}")
        if unsteady:
            unsteady_rows.append(f"{dtype_name} d={d} causal={causal} s={seqlen} ({', '.join(unsteady)})")
        print(f"{dtype_name:9} {d:>4} {str(causal):>6} {seqlen:>6} | {cell('napkin')} {cell('cudnn')} {cell('fa2')} "
              f"{cell('flex')} | {ratio:5.3f}{'?' if unsteady else ' '}" + pred + "".join(f" | {cell(n)}" for n in extra))
    if ratios:
        gm = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
        print(f"geomean napkin/cuDNN over {len(ratios)} rows: {gm:.3f}; rows with napkin >= cuDNN: "
              f"{sum(x >= 1 for x in ratios)}/{len(ratios)}")
    if unsteady_rows:
        print(f"unsteady rows ('?': an implementation's p90/p10 call time > {UNSTEADY_SPREAD}; re-time them): "
              + "; ".join(unsteady_rows))


if __name__ == "__main__":
    main()
