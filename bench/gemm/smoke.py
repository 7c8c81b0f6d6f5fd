# SPDX-License-Identifier: Apache-2.0
"""One call of each built plan on random inputs at the sizes given, against PyTorch, with a
deadline per case (a hung kernel is reported, not waited for).

    python3 bench/gemm/smoke.py DIR case [case...]
"""
import multiprocessing as mp, pathlib, sys, time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "python"))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))


def one(d, name, q):
    import torch
    import torch.nn.functional as F
    import napkin_kernels as nk
    from run import inputs_for, torch_impl
    k = nk.load(d)
    t = inputs_for(k, torch, 3)
    t0 = time.time()
    out = k(**t)
    torch.cuda.synchronize()
    ref = torch_impl(name, torch, F)(t, True).float()
    err = (out.float() - ref).abs().max().item()
    q.put(f"{name}: ran in {time.time() - t0:.2f} s, max error {err:.3g} (output scale {ref.abs().max().item():.3g})")


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
