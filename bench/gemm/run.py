# SPDX-License-Identifier: Apache-2.0
"""The GEMM-family benchmark: napkin's generated kernels (one GEMM, or a plan of several kernels
in one libkernel.so) against their peers, in one process on one GPU, on the same inputs.

    python3 bench/gemm/run.py --dry-run                 # the cases, their FLOPs and bytes; no GPU, no torch
    python3 bench/gemm/run.py --kernels DIR [--cases 'gemm_*,swiglu*'] [--reps 30] [--out X.jsonl]
                              [--compile-modes default,max-autotune] [--compile-timeout-s 150] [--budget-s 540]

DIR/<case>/ holds `napkin build`'s libkernel.so and manifest.json for each case of diagrams.py
(device_gemm.sh build); with --build-missing a missing one is built here (napkin and nvcc).

Per case:
1. Inputs: random normal, never zeros, scaled so that every output is O(1) (weights by
   1/sqrt(fan-in); norms' inputs shifted and scaled so that their statistics matter).
2. Validation first (FlashAttention's rule): the reference is the diagram's math done exactly in
   f64 by PyTorch (no intermediate rounding); the bound is twice the max error of the same math
   done by PyTorch in bf16 (cuBLAS for a GEMM, the eager code for a plan) plus 1e-3 of the
   reference's RMS. napkin writes into a NaN-poisoned buffer, so an unwritten element fails. A
   napkin that fails marks the row invalid, and the row is not timed; a peer that fails is not
   timed.
3. Timing: CUDA events around each call, L2 flushed before each (a 256 MB memset), the
   implementations' calls in rounds of fresh random order (seeded), median of --reps.
   Peers: torch.matmul (cuBLAS) for a GEMM; for a plan, PyTorch eager and torch.compile of the
   same code (inductor's default mode, and mode="max-autotune" on --autotune-cases, by default the
   4096-token plans, where it compiles within --compile-timeout-s; a failure or time-out is
   recorded, not fatal). max-autotune replays CUDA
   graphs: it runs on its own copies of the inputs, marked static, so a replay reads them in place.
   Dynamo is reset before each case (one compiled graph per case, no recompilation limit).
4. The GPU's two ceilings, measured in this process first: cuBLAS bf16 on 8192^3 (FLOP/s) and a
   1 GiB device-to-device copy ((bytes read + written) / time). Roofline of a case =
   max(FLOPs / GEMM rate, compulsory bytes / copy bandwidth), FLOPs (contractions, cheapest
   association) and bytes (inputs read once, output written once) from the shapes (diagrams.py);
   the fraction achieved = roofline / napkin's time. napkin's prediction
   (manifest predicted_time_us) is printed beside the measurement.
One JSON line per case is appended to --out (default bench/results/gemm.jsonl); a short table
comes last.
"""
import argparse
import json
import math
import os
import pathlib
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "python"))
import diagrams  # noqa: E402  (plain Python)

PEERS = {"gemm": ("cublas",)}            # per family; plans: the eager code and torch.compile modes
PLAN_PEERS = ("eager", "compile", "max-autotune")
ATOL_RMS = 1e-3                          # the bound's absolute part, in units of the reference's RMS
UNSTEADY = 1.25                          # p90 / p10 of a row's call times above this: flagged
# Ceilings assumed by --dry-run only (a real run measures its own): the H100 80GB HBM3 runs of
# bench/NOTES.md "GEMM-family plans" measured cuBLAS at 756-796 TFLOP/s and a copy at 3.00 TB/s.
DRY_GEMM_FLOP_S, DRY_COPY_B_S = 780e12, 3.0e12
DEVICE = "cuda"


# ------------------------------------------------------------------------------ pure logic
def peers_of(case):
    return PEERS.get(case.family, PLAN_PEERS)


def bf16_peer(case):
    """The peer whose error sets the bound: PyTorch's own bf16 version of the same math."""
    return "cublas" if case.family == "gemm" else "eager"


def bound(err_peer, ref_rms):
    return 2 * err_peer + ATOL_RMS * ref_rms


def passes(err, err_peer, ref_rms):
    return math.isfinite(err) and err <= bound(err_peer, ref_rms)


def roofline_s(flops, nbytes, flop_s, byte_s):
    """(roofline time, the bound term: 'compute' or 'memory')."""
    tc, tm = flops / flop_s, nbytes / byte_s
    return (tc, "compute") if tc >= tm else (tm, "memory")


def spread(times):
    """p90 / p10 of a list of call times (1 with fewer than 4)."""
    if len(times) < 4:
        return 1.0
    deciles = statistics.quantiles(times, n=10)
    return deciles[-1] / deciles[0]


def sig(x, n=4):
    """x to n significant digits (compact JSON)."""
    if isinstance(x, float) and math.isfinite(x) and x != 0:
        return round(x, n - 1 - int(math.floor(math.log10(abs(x)))))
    return x


def compact(obj):
    if isinstance(obj, dict):
        return {k: compact(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [compact(v) for v in obj]
    return sig(obj)


def summary_table(rows, peers):
    """The closing table: case, shape, napkin ms, peer time / napkin time per peer, % of roofline,
    predicted / measured. `rows`: dicts with case, shape, valid, ms {impl: ms}, roofline_ms,
    predicted_ms, note."""
    head = f"{'case':22s} {'shape':28s} {'napkin ms':>9s} " + " ".join(f"{p:>12s}" for p in peers) + \
           f" {'% roofline':>10s} {'pred/meas':>9s}"
    lines = [head, "-" * len(head)]
    for r in rows:
        ms = r.get("ms") or {}
        t = ms.get("napkin")
        if not t:
            why = r.get("note") or ("INVALID" if r.get("valid") is False else "not timed")
            lines.append(f"{r['case']:22s} {r['shape']:28s} {'-':>9s}  {why[:90]}")
            continue
        ratios = " ".join(f"{ms[p] / t:11.2f}x" if ms.get(p) else f"{'-':>12s}" for p in peers)
        roof = f"{100 * r['roofline_ms'] / t:9.1f}%" if r.get("roofline_ms") else f"{'-':>10s}"
        pred = f"{r['predicted_ms'] / t:9.2f}" if r.get("predicted_ms") else f"{'-':>9s}"
        lines.append(f"{r['case']:22s} {r['shape']:28s} {t:9.3f} {ratios} {roof} {pred}")
    for p in peers:
        rs = [r["ms"][p] / r["ms"]["napkin"] for r in rows if (r.get("ms") or {}).get(p) and r["ms"].get("napkin")]
        if rs:
            lines.append(f"geomean {p} / napkin over {len(rs)} rows: {math.exp(sum(map(math.log, rs)) / len(rs)):.3f}")
    return "\n".join(lines)


def dry_run(cases, args):
    """Lists the cases with their FLOPs, bytes and the roofline at the assumed ceilings, checks the
    script's own logic on synthetic numbers, and `napkin check`s every diagram where a napkin binary
    is at hand. No torch, no GPU."""
    print(f"{len(cases)} cases; roofline at {DRY_GEMM_FLOP_S / 1e12:.0f} TFLOP/s and {DRY_COPY_B_S / 1e12:.2f} TB/s "
          "(assumed for the listing; a run measures its own)")
    print(f"{'case':22s} {'family':15s} {'shape':28s} {'GFLOP':>9s} {'MB':>8s} {'FLOP/B':>7s} {'roofline ms':>11s}  inputs")
    names = set()
    for c in cases:
        assert c.name not in names, f"two cases named {c.name}"
        names.add(c.name)
        assert c.compulsory_bytes > 0 and c.flops >= 0
        assert c.inputs and all(all(a in c.sizes for a in t.axes) for t in c.inputs), c.name
        assert set(init_table(c)) <= {t.name for t in c.inputs}, f"{c.name}: init names an unknown input"
        r, which = roofline_s(c.flops, c.compulsory_bytes, DRY_GEMM_FLOP_S, DRY_COPY_B_S)
        ins = " ".join(f"{t.name}[{' '.join(t.axes)}]{t.dtype}" for t in c.inputs)
        print(f"{c.name:22s} {c.family:15s} {c.shape:28s} {c.flops / 1e9:9.1f} {c.compulsory_bytes / 1e6:8.1f} "
              f"{c.flops / c.compulsory_bytes:7.0f} {r * 1e3:11.3f}  {which:7s} {ins}")
    # The validation rule and the table on synthetic numbers.
    assert passes(0.010, 0.006, 1.0) and not passes(0.0131, 0.006, 1.0) and not passes(float("nan"), 0.1, 1.0)
    assert roofline_s(2e12, 1e9, 1e15, 1e12) == (2e-3, "compute") and roofline_s(1, 3e9, 1e15, 1e12)[1] == "memory"
    assert sig(0.000123456) == 0.0001235 and sig(123456.0) == 123500.0 and compact({"a": [1.23456]}) == {"a": [1.235]}
    rows, peers = [], []
    for i, c in enumerate(cases):
        roof = roofline_s(c.flops, c.compulsory_bytes, DRY_GEMM_FLOP_S, DRY_COPY_B_S)[0] * 1e3
        ms = {"napkin": roof * 1.25}
        for j, p in enumerate(peers_of(c)):
            ms[p] = roof * (1.1 + 0.1 * j)
            peers += [p] if p not in peers else []
        rows.append({"case": c.name, "shape": c.shape, "valid": i % 7 != 3, "ms": ms if i % 7 != 3 else {},
                     "roofline_ms": roof, "predicted_ms": roof * 1.05})
    table = summary_table(rows, peers)
    assert len(table.splitlines()) >= len(cases) + 2 and "INVALID" in table
    print(f"\nself-check: validation rule, roofline, JSON rounding and the summary table "
          f"({len(table.splitlines())} lines on synthetic rows): ok")
    # Every diagram through napkin's own parser, if a binary is at hand (none is built here).
    napkin = pathlib.Path(os.environ.get("NAPKIN_BIN", REPO / "build" / "release" / "bin" / "napkin"))
    if not napkin.exists():
        print(f"napkin check: skipped ({napkin} not found; NAPKIN_BIN names another)")
    else:
        bad = 0
        with tempfile.TemporaryDirectory() as d:
            for c in cases:
                p = pathlib.Path(d) / f"{c.name}.napkin"
                p.write_text(c.text)
                r = subprocess.run([str(napkin), "check", str(p)], capture_output=True, text=True, timeout=60)
                if r.returncode != 0:
                    bad += 1
                    print(f"napkin check {c.name}: FAILED\n{r.stdout}{r.stderr}")
        print(f"napkin check: {len(cases) - bad} of {len(cases)} diagrams ok ({napkin})")
        if bad:
            return 1
    assert "torch" not in sys.modules
    return 0


# ------------------------------------------------------------------------------ inputs and math
def init_table(case):
    """{input name: (std, mean)} of the inputs that are not N(0, 1): weights by 1/sqrt(fan-in) so
    outputs are O(1); the norms' inputs off zero mean and unit variance, and their gains near 1."""
    s = case.sizes
    return {
        "gemm": {"B": (s.get("k", 1) ** -0.5, 0.0)},
        "swiglu_mlp": {"Wg": (s.get("e", 1) ** -0.5, 0.0), "Wu": (s.get("e", 1) ** -0.5, 0.0),
                       "Wd": (s.get("f", 1) ** -0.5, 0.0)},
        "rmsnorm_matmul": {"X": (2.0, 0.5), "gamma": (0.1, 1.0), "W": (s.get("e", 1) ** -0.5, 0.0)},
        "layernorm": {"X": (3.0, 1.0), "gamma": (0.1, 1.0), "beta": (0.1, 0.0)},
        "matmul_chain": {"B": (s.get("k", 1) ** -0.5, 0.0), "C": (s.get("n", 1) ** -0.5, 0.0)},
    }[case.family]


def make_inputs(case, torch, seed):
    dtypes = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    init = init_table(case)
    out = {}
    for t in case.inputs:
        std, mean = init.get(t.name, (1.0, 0.0))
        x = torch.randn(case.dims(t), generator=g, device=DEVICE, dtype=torch.float32)
        out[t.name] = (x * std + mean).to(dtypes[t.dtype])
    return out


def math_of(case, torch, F):
    """(reference, eager): the diagram's math exactly in f64 (no intermediate rounding), and the
    same math as PyTorch code on the diagram's dtypes (what a user would write). Both take the
    inputs by name."""
    fam = case.family
    if fam == "gemm":
        return (lambda A, B: A.double() @ B.double()), (lambda A, B: torch.matmul(A, B))
    if fam == "swiglu_mlp":  # silu(a) = a / (1 + exp(-a)) = a * sigmoid(a)
        def ref(X, Wg, Wu, Wd):
            X, Wg, Wu, Wd = X.double(), Wg.double(), Wu.double(), Wd.double()
            G, U = X @ Wg, X @ Wu
            return (G * torch.sigmoid(G) * U) @ Wd
        return ref, (lambda X, Wg, Wu, Wd: (F.silu(X @ Wg) * (X @ Wu)) @ Wd)
    if fam == "rmsnorm_matmul":  # eps as in examples/rmsnorm_matmul.napkin
        def ref(X, gamma, W):
            X = X.double()
            return (X * torch.rsqrt(X.pow(2).mean(-1, keepdim=True) + 1e-6) * gamma.double()) @ W.double()

        def eager(X, gamma, W):
            return F.rms_norm(X, (X.shape[-1],), gamma, 1e-6) @ W
        return ref, eager
    if fam == "layernorm":  # eps as in examples/layernorm.napkin; gamma and beta f32, X and Y bf16
        def ref(X, gamma, beta):
            X = X.double()
            mu = X.mean(-1, keepdim=True)
            var = (X - mu).pow(2).mean(-1, keepdim=True)
            return (X - mu) * torch.rsqrt(var + 1e-5) * gamma.double() + beta.double()

        def eager(X, gamma, beta):  # layer_norm of bf16 X with f32 gamma and beta (mixed types): bf16 out
            return F.layer_norm(X, (X.shape[-1],), gamma, beta, 1e-5).to(X.dtype)
        try:
            x = torch.ones(2, 8, dtype=torch.bfloat16, device=DEVICE)
            eager(x, torch.ones(8, device=DEVICE), torch.zeros(8, device=DEVICE))
        except RuntimeError:  # no mixed-type kernel: the same math through f32 (more traffic)
            def eager(X, gamma, beta):
                return F.layer_norm(X.float(), (X.shape[-1],), gamma, beta, 1e-5).to(X.dtype)
        return ref, eager
    if fam == "matmul_chain":
        return (lambda A, B, C: (A.double() @ B.double()) @ C.double()), (lambda A, B, C: (A @ B) @ C)
    raise KeyError(fam)


# ------------------------------------------------------------------------------ the GPU side
def sync(torch):
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def nvidia_smi(fields):
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20).stdout.strip().splitlines()[0]
        return dict(zip(fields, (v.strip() for v in out.split(","))))
    except Exception:  # noqa: BLE001
        return {}


def cublas_version():
    """cuBLAS's version as loaded in this process (after a matmul), from cublasGetProperty."""
    import ctypes
    try:
        paths = {ln.split()[-1] for ln in open("/proc/self/maps") if re.search(r"/libcublas\.so[.\d]*$", ln.strip())}
        for p in paths:
            lib, v = ctypes.CDLL(p), [ctypes.c_int(-1) for _ in range(3)]
            for i in range(3):  # MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL
                lib.cublasGetProperty(i, ctypes.byref(v[i]))
            return ".".join(str(x.value) for x in v)
    except Exception as e:  # noqa: BLE001
        return f"unknown ({type(e).__name__})"
    return "unknown (libcublas not loaded)"


def gpu_env(torch):
    smi = nvidia_smi(["name", "driver_version", "clocks.sm", "clocks.max.sm", "clocks.mem", "power.limit"])
    env = {"gpu": torch.cuda.get_device_name(), "driver": smi.get("driver_version"),
           "sm_mhz": smi.get("clocks.sm"), "sm_mhz_max": smi.get("clocks.max.sm"), "mem_mhz": smi.get("clocks.mem"),
           "power_limit_w": smi.get("power.limit"), "cuda": torch.version.cuda, "torch": torch.__version__,
           "cudnn": torch.backends.cudnn.version(), "sms": torch.cuda.get_device_properties(0).multi_processor_count}
    try:
        import triton
        env["triton"] = triton.__version__
    except Exception:  # noqa: BLE001
        pass
    return env


class Timer:
    """Medians of CUDA-event times, L2 flushed before each call, calls interleaved in rounds."""

    def __init__(self, torch, reps, warmup, seed=0):
        self.torch, self.reps, self.warmup = torch, reps, warmup
        self.rng = random.Random(seed)
        self.flush = torch.empty(256 << 20, dtype=torch.uint8, device=DEVICE)  # > L2 (50 MB H100, 60 MB H200)

    def times_ms(self, fns):
        """{name: [ms of each call]} for --reps calls of each of `fns`, one call of each per round,
        in a fresh random order each round (seeded: the same orders every run)."""
        torch = self.torch
        for fn in fns.values():
            for _ in range(self.warmup):
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
        return {n: [s.elapsed_time(e) for s, e in ev] for n, ev in events.items()}


def ceilings(torch, timer):
    """(bf16 GEMM FLOP/s through cuBLAS on 8192^3, device-to-device copy bytes/s (read + written))."""
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda").fill_(7)
    dst = torch.empty_like(src)
    t = timer.times_ms({"gemm": lambda: torch.matmul(a, b), "copy": lambda: dst.copy_(src)})
    gemm_s, copy_s = statistics.median(t["gemm"]) * 1e-3, statistics.median(t["copy"]) * 1e-3
    return 2 * n ** 3 / gemm_s, 2 * (1 << 30) / copy_s


def compile_peer(torch, fn, tensors, mode, timeout_s):
    """torch.compile(fn) in `mode`, compiled and warmed up on `tensors` within `timeout_s` (SIGALRM
    interrupts a compilation that runs past it). Returns (callable, seconds) or raises."""
    import signal
    kw = {} if mode == "default" else {"mode": mode}
    c = torch.compile(fn, dynamic=False, **kw)
    if mode in ("max-autotune", "reduce-overhead"):
        # max-autotune replays CUDA graphs: mark the inputs static so a replay reads them in place
        # rather than copying them into the graph's own buffers first.
        for t in tensors.values():
            torch._dynamo.mark_static_address(t)

        def call():
            torch.compiler.cudagraph_mark_step_begin()
            return c(**tensors)
    else:
        def call():
            return c(**tensors)

    fired = []

    def expired(signum, frame):
        fired.append(time.time())
        raise TimeoutError(f"not compiled within {timeout_s:.0f} s")
    old = signal.signal(signal.SIGALRM, expired)
    # Raised again every second past the limit: inductor catches and logs some exceptions and
    # goes on (a compilation may then even return); one that saw the alarm is refused below.
    signal.setitimer(signal.ITIMER_REAL, max(timeout_s, 0.1), 1.0)
    t0 = time.time()
    try:
        for _ in range(3):
            call()
        sync(torch)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    if fired:
        raise TimeoutError(f"not compiled within {timeout_s:.0f} s (it went on to {time.time() - t0:.0f} s)")
    return call, time.time() - t0


def load_kernel(nk, case, args):
    d = pathlib.Path(args.kernels) / case.name
    if (d / "libkernel.so").exists():
        return nk.load(d)
    if not args.build_missing:
        raise FileNotFoundError(f"no {d}/libkernel.so (device_gemm.sh build, or --build-missing)")
    src = pathlib.Path(args.kernels) / f"{case.name}.napkin"
    src.parent.mkdir(parents=True, exist_ok=True)
    src.write_text(case.text)
    return nk.build(str(src), machine=args.machine, out_dir=str(d))


def manifest_mismatch(case, manifest):
    """Why the library was not built from this case's diagram (stale build), or None."""
    file = (manifest.get("diagram") or {}).get("file")
    if file and pathlib.Path(file).stem != case.name:
        return f"library built from {file}, not from {case.name}.napkin"
    have = {i.get("name"): ([a.get("size") for a in i.get("axes", [])], i.get("dtype")) for i in manifest.get("inputs", [])}
    want = {t.name: (case.dims(t), t.dtype) for t in case.inputs}
    if have != want:
        return f"library's inputs {have} are not the diagram's {want}: rebuild"
    return None


def plan_summary(manifest):
    """(predicted ms or None, [kernel lines]) from a manifest, read defensively."""
    pred = manifest.get("predicted_time_us")
    plan = manifest.get("plan") or {}
    lines = []
    for k in plan.get("kernels") or []:
        p = k.get("predicted_us")
        lines.append(f"{k.get('kind', '?')}: {k.get('name', '?')} [{k.get('schedule', '?')}] "
                     f"predicted {p:.1f} us, {k.get('bound', '?')}" if isinstance(p, (int, float)) else
                     f"{k.get('kind', '?')}: {k.get('name', '?')} [{k.get('schedule', '?')}]")
    if plan.get("materialised"):
        lines.append("materialised: " + ", ".join(map(str, plan["materialised"])))
    if plan.get("moves"):
        lines.append("moves: " + "; ".join(map(str, plan["moves"])))
    return (pred / 1e3 if isinstance(pred, (int, float)) else None), lines


def run_case(case, args, ctx):
    """Validates and times one case; returns its row (also when invalid or failed)."""
    torch, F, nk, timer = ctx["torch"], ctx["F"], ctx["nk"], ctx["timer"]
    row = {"case": case.name, "family": case.family, "shape": case.shape, "valid": False, "ms": {}, "err": {},
           "rel_l2": {}, "notes": {}}
    roof_s, which = roofline_s(case.flops, case.compulsory_bytes, ctx["gemm_flop_s"], ctx["copy_b_s"])
    row.update(flops=case.flops, bytes=case.compulsory_bytes, roofline_ms=roof_s * 1e3, roofline_bound=which)
    torch._dynamo.reset()  # one compiled graph per case: dynamo's recompile limit never bites
    kernel = load_kernel(nk, case, args)
    m = kernel.manifest
    row.update(diagram_hash=(m.get("diagram") or {}).get("hash"), diagram_key=(m.get("diagram") or {}).get("key"),
               machine=m.get("machine"), kernels=[k.get("kind") for k in (m.get("plan") or {}).get("kernels") or []])
    pred_ms, plan_lines = plan_summary(m)
    row["predicted_ms"] = pred_ms
    why = manifest_mismatch(case, m)
    if why:
        row["note"] = why
        return row
    t = make_inputs(case, torch, seed=args.seed + sum(map(ord, case.name)))
    ref_fn, eager_fn = math_of(case, torch, F)
    ref = ref_fn(**t)
    ref_rms = ref.pow(2).mean().sqrt().item()
    ref_norm = ref.norm().item()
    out_dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[case.output.dtype]
    out = torch.empty(case.dims(case.output), dtype=out_dtype, device=DEVICE)
    impls = {"napkin": lambda: kernel(out=out, **t)}
    peer = bf16_peer(case)  # PyTorch's bf16 version: its error sets the bound (run even when not timed)
    impls[peer] = lambda: eager_fn(**t)

    def check(n):
        """Validates implementation n against the reference; drops it from impls if it fails."""
        try:
            if n == "napkin":
                out.fill_(float("nan"))
            y = impls[n]()
            sync(torch)
            d = y.double() - ref
            err = d.abs().max().item()
            row["rel_l2"][n] = d.norm().item() / ref_norm
            del d, y
        except Exception as e:  # noqa: BLE001
            err = float("inf")
            row["notes"][n] = f"failed: {type(e).__name__}: {str(e).strip().splitlines()[0][:160] if str(e).strip() else ''}"
        row["err"][n] = err if math.isfinite(err) else str(err)
        if n != peer and not (math.isfinite(err) and passes(err, row["err"][peer], ref_rms)):
            row["notes"].setdefault(n, f"INVALID: max error {err:.3g} > {row['bound']:.3g}")
            del impls[n]

    # Validation first: the bf16 peer (the bound), then napkin; an invalid napkin ends the case.
    check(peer)
    if not isinstance(row["err"][peer], float):
        row["note"] = f"no bound: the bf16 peer ({peer}) failed"
        return row
    row["bound"] = bound(row["err"][peer], ref_rms)
    check("napkin")
    row["valid"] = "napkin" in impls
    if not row["valid"]:
        row["note"] = row["notes"]["napkin"]
        return row
    if case.family != "gemm":  # torch.compile of the same eager code, validated like the others
        for mode, name in (("default", "compile"), ("max-autotune", "max-autotune")):
            if name not in args.peers or mode not in args.compile_modes:
                continue
            if name == "max-autotune" and not diagrams.select([case], args.autotune_cases):
                row["notes"][name] = f"not compiled: not in --autotune-cases {args.autotune_cases}"
                continue
            left = ctx["deadline"] - time.time() - 30
            if left < 20:
                row["notes"][name] = "not compiled: the run's budget is spent"
                continue
            targs = t if name == "compile" else {k: v.clone() for k, v in t.items()}  # static addresses: own copies
            try:
                impls[name], secs = compile_peer(torch, eager_fn, targs, mode, min(args.compile_timeout_s, left))
                row.setdefault("compile_s", {})[name] = secs
            except BaseException as e:  # noqa: BLE001  (TimeoutError arrives wrapped by dynamo)
                if isinstance(e, KeyboardInterrupt):
                    raise
                text = str(e).strip()
                if isinstance(e, TimeoutError) or "TimeoutError" in text:
                    row["notes"][name] = f"timed out: {next((ln for ln in text.splitlines() if 'not compiled' in ln), text)[:160]}"
                else:
                    row["notes"][name] = f"failed: {type(e).__name__}: {text.splitlines()[0][:160] if text else ''}"
                continue
            check(name)
    ref = None  # the f64 reference: freed before timing
    # Timing.
    times = timer.times_ms({n: f for n, f in impls.items() if n == "napkin" or n in args.peers})
    row["ms"] = {n: statistics.median(ts) for n, ts in times.items()}
    row["spread"] = {n: spread(ts) for n, ts in times.items()}
    unsteady = [n for n, s in row["spread"].items() if s > UNSTEADY]
    if unsteady:
        row["notes"]["unsteady"] = f"p90/p10 > {UNSTEADY}: {', '.join(unsteady)}"
    row["sm_mhz_after"] = nvidia_smi(["clocks.sm"]).get("clocks.sm")
    row["plan_lines"] = plan_lines
    return row


def print_row(row, ctx):
    ms = row["ms"]
    t = ms.get("napkin")
    if not t:
        print(f"{row['case']:22s} {row['shape']:28s} not timed: {row.get('note')}", flush=True)
        return
    peers = "  ".join(f"{n} {ms[n]:.3f} ms ({ms[n] / t:.2f}x)" for n in ms if n != "napkin")
    rate = f"{row['flops'] / (t * 1e-3) / 1e12:.0f} TFLOP/s, {row['bytes'] / (t * 1e-3) / 1e12:.2f} TB/s compulsory"
    pred = f"predicted {row['predicted_ms']:.3f} ms ({row['predicted_ms'] / t:.2f} of measured)" if row.get("predicted_ms") else "no prediction"
    print(f"{row['case']:22s} {row['shape']:28s} napkin {t:.3f} ms ({rate})  {peers}", flush=True)
    print(f"    roofline max({row['flops'] / 1e9:.1f} GFLOP / {ctx['gemm_flop_s'] / 1e12:.0f} TFLOP/s = "
          f"{row['flops'] / ctx['gemm_flop_s'] * 1e3:.3f} ms, {row['bytes'] / 1e6:.1f} MB / {ctx['copy_b_s'] / 1e12:.2f} TB/s = "
          f"{row['bytes'] / ctx['copy_b_s'] * 1e3:.3f} ms) = {row['roofline_ms']:.3f} ms ({row['roofline_bound']}): "
          f"{100 * row['roofline_ms'] / t:.1f}% of it;  {pred}", flush=True)
    errs = "  ".join(f"{n} {e:.3g}" if isinstance(e, float) else f"{n} {e}" for n, e in row["err"].items())
    print(f"    max error {errs} (bound {row['bound']:.3g}); diagram #{row.get('diagram_hash')}", flush=True)
    for ln in row.get("plan_lines", []) if row["family"] != "gemm" else []:
        print(f"    {ln}", flush=True)
    for n, why in row["notes"].items():
        print(f"    {n}: {why}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true", help="list the cases and check the logic; no torch, no GPU")
    ap.add_argument("--kernels", default=str(REPO / "build" / "gemm" / "kernels"), help="DIR/<case>/libkernel.so")
    ap.add_argument("--build-missing", action="store_true", help="build a missing library here (napkin, nvcc)")
    ap.add_argument("--machine", default="h100-sxm5", help="napkin's machine for --build-missing")
    ap.add_argument("--cases", default="", help="comma-separated glob patterns of case names (default: all)")
    ap.add_argument("--peers", default="cublas,eager,compile,max-autotune")
    ap.add_argument("--compile-modes", default="default,max-autotune", help="torch.compile modes of the plans")
    ap.add_argument("--compile-timeout-s", type=float, default=150, help="per case and mode")
    ap.add_argument("--autotune-cases", default="*_4096",
                    help="glob patterns of the plans that get mode=max-autotune too (its autotuning takes minutes "
                         "per shape; default: the middle token count; '*' for all)")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget-s", type=float, default=0, help="start no case past this many seconds (0: no limit)")
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "gemm.jsonl"), help="JSON lines, appended")
    args = ap.parse_args()
    args.peers = set(args.peers.split(","))
    args.compile_modes = set(args.compile_modes.split(","))
    cases = diagrams.select(diagrams.all_cases(), args.cases)
    if not cases:
        print(f"no case matches --cases {args.cases!r}", file=sys.stderr)
        return 2
    if args.dry_run:
        return dry_run(cases, args)

    import torch
    import torch.nn.functional as F
    import napkin_kernels as nk
    t0 = time.time()
    torch._dynamo.config.recompile_limit = 1000  # reset per case; this is only a guard
    torch.backends.cuda.matmul.allow_tf32 = False
    run_id = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:6]
    timer = Timer(torch, args.reps, args.warmup, args.seed)
    env = gpu_env(torch)
    gemm_flop_s, copy_b_s = ceilings(torch, timer)
    env.update(cublas=cublas_version(), sm_mhz_loaded=nvidia_smi(["clocks.sm"]).get("clocks.sm"),
               bf16_reduced_precision_reduction=torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction)
    ctx = dict(torch=torch, F=F, nk=nk, timer=timer, gemm_flop_s=gemm_flop_s, copy_b_s=copy_b_s,
               deadline=t0 + args.budget_s if args.budget_s > 0 else float("inf"))
    print(f"run {run_id}: {env['gpu']} ({env['sms']} SMs, SM clock {env['sm_mhz']} MHz idle, {env['sm_mhz_loaded']} MHz "
          f"after the ceilings, max {env['sm_mhz_max']} MHz), driver {env['driver']}, CUDA {env['cuda']}, torch "
          f"{env['torch']}, cuBLAS {env['cublas']}, cuDNN {env['cudnn']}", flush=True)
    print(f"ceilings measured here: cuBLAS bf16 8192^3 {gemm_flop_s / 1e12:.0f} TFLOP/s; device copy "
          f"{copy_b_s / 1e12:.2f} TB/s (1 GiB, read + written)", flush=True)
    print(f"{len(cases)} cases, median of {args.reps} calls (L2 flushed, interleaved); ratios = peer time / napkin time\n",
          flush=True)
    rows = []
    out_path = pathlib.Path(args.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    lost = None  # a fault (an illegal address, say) leaves the CUDA context unusable: the run stops
    for case in cases:
        if lost or time.time() > ctx["deadline"] - 15:
            row = {"case": case.name, "family": case.family, "shape": case.shape, "valid": None, "ms": {},
                   "note": "not run: " + (lost or "the run's --budget-s was spent")}
            rows.append(row)
            print_row(row, ctx)
            continue
        try:
            row = run_case(case, args, ctx)
        except Exception as e:  # noqa: BLE001
            row = {"case": case.name, "family": case.family, "shape": case.shape, "valid": False, "ms": {},
                   "note": f"failed: {type(e).__name__}: {str(e).strip().splitlines()[0][:200] if str(e).strip() else ''}"}
        try:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        except Exception as e:  # noqa: BLE001
            lost = f"the CUDA context was lost in {case.name} ({type(e).__name__}: {str(e).strip()[:120]})"
            row["note"] = row.get("note") or lost
        rows.append(row)
        print_row(row, ctx)
        rec = {"run": run_id, "suite": "gemm", **{k: v for k, v in row.items() if k != "plan_lines"}, "reps": args.reps,
               "gemm_tflops": gemm_flop_s / 1e12, "copy_tbs": copy_b_s / 1e12, **env}
        with out_path.open("a") as f:
            f.write(json.dumps(compact(rec), separators=(",", ":")) + "\n")
    peers = [p for p in ("cublas", "eager", "compile", "max-autotune") if any(p in r.get("ms", {}) for r in rows)]
    print(f"\nrun {run_id}, {env['gpu']}: GEMM {gemm_flop_s / 1e12:.0f} TFLOP/s, copy {copy_b_s / 1e12:.2f} TB/s; "
          f"median ms of {args.reps} (L2 flushed); columns: peer time / napkin time; rows in {out_path}")
    print(summary_table(rows, peers))
    print(f"({time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
