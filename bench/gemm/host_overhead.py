# SPDX-License-Identifier: Apache-2.0
"""Host time of one call of a generated kernel from Python (napkin_kernels), beside torch.matmul:
the time the CPU spends before the launch is queued, which a GPU idle between calls shows.

    python3 bench/gemm/host_overhead.py DIR     # DIR: a napkin build of examples/matmul.napkin
"""
import pathlib, sys, time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "python"))
import torch  # noqa: E402
import napkin_kernels as nk  # noqa: E402


def host_us(fn, iters=300):
    fn(); torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / iters * 1e6


k = nk.load(sys.argv[1])
shape = {a["name"]: a["size"] for s in k.inputs for a in s["axes"]}
A = torch.randn(shape["m"], shape["k"], device="cuda", dtype=torch.bfloat16)
B = torch.randn(shape["k"], shape["n"], device="cuda", dtype=torch.bfloat16)
out = torch.empty(shape["m"], shape["n"], device="cuda", dtype=torch.bfloat16)
print(f"python: torch.matmul {host_us(lambda: A @ B):.1f} us per call")
print(f"python: napkin k(A=, B=) {host_us(lambda: k(A=A, B=B)):.1f} us per call")
print(f"python: napkin k(A=, B=, out=) {host_us(lambda: k(A=A, B=B, out=out)):.1f} us per call")
lib_call = k._lib.napkin_kernel_launch
k._lib.napkin_kernel_launch = lambda *a: 0  # the Python side alone
print(f"python: napkin k(A=, B=) without the library call {host_us(lambda: k(A=A, B=B)):.1f} us per call")
k._lib.napkin_kernel_launch = lib_call
