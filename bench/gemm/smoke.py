# SPDX-License-Identifier: Apache-2.0
"""One call of each built case's kernel on run.py's inputs, against run.py's f64 reference, with a
deadline per case (a hung kernel is reported, not waited for): for debugging before run.py.

    python3 bench/gemm/smoke.py DIR case [case...]      # DIR/<case>/libkernel.so (device_gemm.sh build)
"""
import multiprocessing as mp
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "python"))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))


def one(d, name, q):
    import torch
    import torch.nn.functional as F
    import napkin_kernels as nk
    import diagrams
    from run import make_inputs, math_of
    case = {c.name: c for c in diagrams.all_cases()}[name]
    k = nk.load(d)
    t = make_inputs(case, torch, 3)
    t0 = time.time()
    out = k(**t)
    torch.cuda.synchronize()
    ref = math_of(case, torch, F)[0](**t)
    err = (out.double() - ref).abs().max().item()
    q.put(f"{name}: ran in {time.time() - t0:.2f} s, max error {err:.3g} (output RMS {ref.pow(2).mean().sqrt().item():.3g})")


if __name__ == "__main__":
    mp.set_start_method("spawn")
    for name in sys.argv[2:]:
        q = mp.Queue()
        p = mp.Process(target=one, args=(pathlib.Path(sys.argv[1]) / name, name, q))
        p.start()
        p.join(60)
        if p.is_alive():
            p.kill()
            print(f"{name}: no result in 60 s (hung)", flush=True)
        else:
            print(q.get() if not q.empty() else f"{name}: failed (exit {p.exitcode})", flush=True)
