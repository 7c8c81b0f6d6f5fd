# SPDX-License-Identifier: Apache-2.0
"""Every generated attention-family kernel against napkin's reference interpreter (f64, `napkin
eval` on the same inputs): odd lengths, q != k, a single token, GQA, a second batch and head;
random inputs, the output poisoned with NaN first. The kernels are those `napkin build` wrote
under $NAPKIN_KERNELS (one directory per example), else built here."""
import math
import os
import pathlib
import subprocess
import sys
import tempfile

import pytest
from conftest import diagram

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))

# The attention-family examples (and test diagrams in tests/diagrams/) and the sizes each is
# tried at (axes a diagram lacks are ignored). Lengths that are not tile multiples, q != k both
# ways, one token.
EXAMPLES = ["attention", "causal", "gqa", "sliding_window", "softcap", "alibi", "sigmoid_attention",
            "key_padding", "relative_bias", "document_mask", "prefix_lm", "chunked_local",
            "head_temperature", "attention_sinks", "mask_tensor", "score_tables", "causal_bias", "score_factors",
            "key_inputs", "gqa_decode", "mask_fill", "value_axis", "shared_kv",
            "softcap_param", "latent_attention", "causal_d96", "mla_attention", "fractional_index",
            "mqa_sbhd", "written_softmax", "base_two_causal", "masked_fill_lse", "t5_bias", "squared_distance",
            "position_ids"]
CASES = [
    {"b": 1, "h": 2, "g": 2, "r": 2, "q": 197, "k": 263},
    {"b": 2, "h": 3, "g": 1, "r": 4, "q": 300, "k": 77},
    {"b": 1, "h": 1, "g": 1, "r": 1, "q": 1, "k": 1},
    {"b": 1, "h": 2, "g": 2, "r": 3, "q": 520, "k": 520},
    {"b": 2, "h": 2, "g": 2, "r": 1, "q": 323, "k": 560},  # keys in whole 16-byte vectors of a bool mask
    {"b": 2, "h": 2, "g": 2, "r": 2, "q": 5, "k": 700},    # decoding-like: the short-row schedules, keys split
    {"b": 3, "h": 2, "g": 2, "r": 6, "q": 1, "k": 1000},   # decoding: a GQA group's heads as the tile's rows
]
# Small params so the masks cut inside the tiles at these lengths (c not a power of two: the
# kernel's floor(q / c) must land exact multiples on their integer, as the reference does).
PARAMS = {"sliding_window": ["w=100"], "written_softmax": ["w=100"], "prefix_lm": ["p=70"], "chunked_local": ["c=100"], "softcap_param": ["cap=2", "temp=0.1"]}


def napkin_bin():
    return os.environ.get("NAPKIN_BIN", str(REPO / "build" / "release" / "bin" / "napkin"))


def kernel_for(name):
    import napkin_kernels
    root = os.environ.get("NAPKIN_KERNELS")
    if root:
        if not (pathlib.Path(root) / name).is_dir():
            pytest.skip(f"no kernel {name} under NAPKIN_KERNELS={root}")
        return napkin_kernels.load(pathlib.Path(root) / name)
    return napkin_kernels.build(diagram(name))


def random_input(spec, shape, gen, keys=None):
    """Inputs as users pass them: N(0, 1) operands; positive scales and slopes; bool masks in runs
    (kept, dropped, or kept with probability 0.8) and sorted document ids of 1-400 tokens, so
    that the block summaries meet tiles wholly visible, wholly hidden and mixed; an i32 per
    sequence or head (a length) uniform in [0, keys]."""
    import torch
    dt = spec["dtype"]
    if dt == "i32" and keys and not any(a["role"] in ("query", "key") for a in spec["axes"]):
        return torch.randint(0, keys + 1, shape, generator=gen, dtype=torch.int32)
    if dt == "bool":
        # Runs of 97 along the last dim, shifted every 61 along the one before it (a [b q k] mask
        # then differs between groups of rows too).
        run = (torch.arange(shape[-1]) + int(torch.randint(0, 97, (1,), generator=gen))) // 97
        if len(shape) >= 2:
            run = run[None, :] + (torch.arange(shape[-2]) // 61)[:, None]
        run = run % 3
        mixed = torch.rand(shape, generator=gen) < 0.8
        return torch.where(run == 1, True, torch.where(run == 2, False, mixed))
    if dt == "i32":
        steps = (torch.rand(shape, generator=gen) < 0.006).to(torch.int32)
        return torch.cumsum(steps, dim=-1).to(torch.int32)
    x = torch.randn(shape, generator=gen, dtype=torch.float64)
    if spec["kind"] == "auxiliary" and len(shape) <= 2:
        x = 0.5 + torch.rand(shape, generator=gen, dtype=torch.float64)
    return x.to({"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32, "f64": torch.float64}[dt])


def reference(name, sets, inputs, tmp, low_precision=False):
    """napkin eval on the same inputs: the output in f64 (the output's axis order), or with
    low_precision FlashAttention's baseline (every node in its dtype, sums in f32)."""
    import numpy as np
    tmp.mkdir(parents=True, exist_ok=True)
    cmd = [napkin_bin(), "eval", str(diagram(name)), "-o", str(tmp)]
    if low_precision:
        cmd.append("--low-precision")
    for s in sets:
        cmd += ["--set", s]
    for n, t in inputs.items():
        path = tmp / f"{n}.in.npy"
        arr = t.cpu()
        arr = arr.numpy() if arr.dtype in (__import__("torch").bool, __import__("torch").int32) else arr.double().numpy()
        np.save(path, arr)
        cmd += ["--input", f"{n}={path}"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r


@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("name", EXAMPLES)
def test_generated_kernel_matches_reference(name, case):
    check_against_reference(name, case)


@pytest.mark.parametrize("layout", ["offset", "every_other"])
@pytest.mark.parametrize("name", EXAMPLES)
def test_generated_kernel_reads_strided_auxiliary_inputs(name, layout):
    """Auxiliary inputs as views that nothing in the kernel (the aux reads, the block summaries'
    vector loads, the key rows' bulk copies) may take for contiguous or aligned: "offset", one
    element into rows one element longer (odd strides, an odd base); "every_other", every other
    element of their last axis."""
    check_against_reference(name, 0, strided=layout)


def check_against_reference(name, case, strided=None):
    import numpy as np
    import torch
    kernel = kernel_for(name)
    if strided and not any(spec["kind"] == "auxiliary" and spec["axes"] for spec in kernel.inputs):
        pytest.skip("no auxiliary tensor input")
    # Every axis bound: the case's sizes, else those the kernel was built for (its head dims).
    sizes = {a["name"]: a["size"] for spec in kernel.inputs for a in spec["axes"]}
    sizes.update({a: n for a, n in CASES[case].items() if a in sizes})
    sets = [f"{a}={n}" for a, n in sizes.items()] + PARAMS.get(name, [])
    gen = torch.Generator().manual_seed(1000 * case + len(name))
    inputs = {}
    for spec in kernel.inputs:
        shape = [sizes.get(a["name"], a["size"]) for a in spec["axes"]]
        inputs[spec["name"]] = random_input(spec, shape, gen, keys=sizes.get("k"))
    compare_with_reference(kernel, name, sizes, sets, inputs, strided)


def compare_with_reference(kernel, name, sizes, sets, inputs, strided=None, rows_out=None):
    """The kernel on `inputs` (cpu tensors) against napkin eval's f64 reference, every output;
    `rows_out(output index, got, want)` may take rows out of the comparison first."""
    import numpy as np
    import torch
    with tempfile.TemporaryDirectory() as d:
        tmp = pathlib.Path(d)
        reference(name, sets, inputs, tmp / "f64")
        reference(name, sets, inputs, tmp / "low", low_precision=True)
        wants = [torch.from_numpy(np.load(tmp / "f64" / f"{o['name']}.npy")) for o in kernel.outputs]
        baselines = [torch.from_numpy(np.load(tmp / "low" / f"{o['name']}.npy")) for o in kernel.outputs]
    dev = {n: t.cuda() for n, t in inputs.items()}
    if strided:
        for spec in kernel.inputs:
            t = dev[spec["name"]]
            if spec["kind"] == "auxiliary" and t.dim() > 0 and strided == "offset":
                wide = torch.zeros(list(t.shape[:-1]) + [t.shape[-1] + 1], dtype=t.dtype, device="cuda")
                wide[..., 1:] = t
                dev[spec["name"]] = wide[..., 1:]
            elif spec["kind"] == "auxiliary" and t.dim() > 0:
                wide = torch.zeros(list(t.shape[:-1]) + [2 * t.shape[-1]], dtype=t.dtype, device="cuda")
                wide[..., ::2] = t
                dev[spec["name"]] = wide[..., ::2]
    torch_dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
    outs = [torch.full([sizes.get(a["name"], a["size"]) for a in o["axes"]], float("nan"),
                       dtype=torch_dtype[o["dtype"]], device="cuda") for o in kernel.outputs]
    params = {p.split("=")[0]: float(p.split("=")[1]) for p in PARAMS.get(name, [])}
    kernel(out=outs if len(outs) > 1 else outs[0], **dev, **params)
    torch.cuda.synchronize()
    for i, (spec, out, want, baseline) in enumerate(zip(kernel.outputs, outs, wants, baselines)):
        got = out.double().cpu()
        if rows_out:
            got, want, baseline = rows_out(i, got, want, baseline)
        check_output(name, sizes, spec, got, want, baseline)


def test_a_bias_of_the_dtypes_lowest_value_masks():
    """HF-style masks add finfo(dtype).min. Keys that get it are masked (p = 0, as in the
    reference); a row that gets it on every key is empty in the kernel (O = 0, as FlexAttention
    gives), where the reference's f64 sees every score equally far down (docs/kernels.md)."""
    import torch
    kernel = kernel_for("relative_bias")
    sizes = {a["name"]: a["size"] for spec in kernel.inputs for a in spec["axes"]}
    sizes.update({"b": 1, "h": 2, "q": 70, "k": 90})
    gen = torch.Generator().manual_seed(11)
    inputs = {spec["name"]: random_input(spec, [sizes[a["name"]] for a in spec["axes"]], gen) for spec in kernel.inputs}
    bias = inputs["bias"]
    bias[0, :10, :] = torch.finfo(bias.dtype).min
    bias[1, :, 40:] = torch.finfo(bias.dtype).min
    seen = {}

    def rows_out(i, got, want, baseline):
        # O [b h q e]: head 0's first 10 rows are empty in the kernel.
        seen["empty"] = got[0, 0, :10].clone()
        keep = torch.ones(got.shape[2], dtype=torch.bool)
        keep[:10] = False
        return got[:, :, keep], want[:, :, keep], baseline[:, :, keep]
    compare_with_reference(kernel, "relative_bias", sizes, [f"{a}={n}" for a, n in sizes.items()], inputs,
                           rows_out=rows_out)
    assert torch.equal(seen["empty"], torch.zeros_like(seen["empty"]))


def test_arithmetic_on_integer_inputs_is_exact():
    """position_ids subtracts i32 position ids: positions near +2^31 and -2^31 differ by ~2^32, which
    32-bit arithmetic would wrap; the kernel's 64-bit difference matches the reference's exact one
    (a small slope keeps the scores in range)."""
    import torch
    kernel = kernel_for("position_ids")
    sizes = {a["name"]: a["size"] for spec in kernel.inputs for a in spec["axes"]}
    sizes.update({"b": 1, "h": 2, "q": 70, "k": 90})
    gen = torch.Generator().manual_seed(5)
    inputs = {spec["name"]: random_input(spec, [sizes[a["name"]] for a in spec["axes"]], gen) for spec in kernel.inputs}
    top = 2 ** 31 - 1
    inputs["pos_q"] = (top - torch.randint(0, 50, (1, 70), generator=gen)).to(torch.int32)
    inputs["pos_k"] = (-top + torch.randint(0, 50, (1, 90), generator=gen)).to(torch.int32)
    inputs["pos_k"][0, ::3] = inputs["pos_q"][0, 0]  # some keys at the query's own position
    inputs["slope"] = torch.tensor([1e-9, 2e-9], dtype=torch.float32)
    compare_with_reference(kernel, "position_ids", sizes, [f"{a}={n}" for a, n in sizes.items()], inputs)


def test_lowest_values_without_a_scale_mask_too():
    """T5 adds its mask to unscaled scores: finfo(bf16).min times log2(e) overflows f32 in the
    kernel's exponent. Such keys are masked as above, and rows masked on every key are empty
    (O = 0), not NaN: batch 0 wholly padded, and head 0's first 10 rows of batch 1 biased away."""
    import torch
    kernel = kernel_for("t5_bias")
    sizes = {a["name"]: a["size"] for spec in kernel.inputs for a in spec["axes"]}
    sizes.update({"b": 2, "h": 2, "q": 70, "k": 90})
    gen = torch.Generator().manual_seed(12)
    inputs = {spec["name"]: random_input(spec, [sizes[a["name"]] for a in spec["axes"]], gen) for spec in kernel.inputs}
    lowest = torch.finfo(torch.bfloat16).min
    inputs["padding"] = torch.zeros(2, 90, dtype=torch.bfloat16)
    inputs["padding"][0, :] = lowest
    inputs["padding"][1, 40:] = lowest
    inputs["position_bias"][0, :10, :] = lowest
    seen = {}

    def rows_out(i, got, want, baseline):
        # O [b h q e]: only batch 1's heads 0 (rows 10 on) and 1 are compared.
        seen["empty"] = torch.cat([got[0].flatten(), got[1, 0, :10].flatten()])
        return got[1, :, 10:], want[1, :, 10:], baseline[1, :, 10:]
    compare_with_reference(kernel, "t5_bias", sizes, [f"{a}={n}" for a, n in sizes.items()], inputs,
                           rows_out=rows_out)
    assert torch.equal(seen["empty"], torch.zeros_like(seen["empty"]))


@pytest.mark.parametrize("fill", [-1e20, -1e30, -3e37])
def test_a_finite_fill_on_every_key_never_gives_nan(fill):
    """A row whose every key holds one large finite fill: the kernel's exponent rounds by up to
    half an ulp of the fill's product with the scale. The row averages V, as the reference does,
    or comes out empty (O = 0); never inf or NaN (docs/kernels.md)."""
    import numpy as np
    import torch
    kernel = kernel_for("t5_bias")
    sizes = {a["name"]: a["size"] for spec in kernel.inputs for a in spec["axes"]}
    sizes.update({"b": 2, "h": 2, "q": 70, "k": 90})
    gen = torch.Generator().manual_seed(13)
    inputs = {spec["name"]: random_input(spec, [sizes[a["name"]] for a in spec["axes"]], gen) for spec in kernel.inputs}
    inputs["padding"] = torch.zeros(2, 90, dtype=torch.bfloat16)
    inputs["padding"][0, :] = fill
    inputs["position_bias"] = torch.zeros_like(inputs["position_bias"])
    filled = {}

    def rows_out(i, got, want, baseline):
        filled["got"], filled["want"] = got[0], want[0]
        return got[1], want[1], baseline[1]
    compare_with_reference(kernel, "t5_bias", sizes, [f"{a}={n}" for a, n in sizes.items()], inputs,
                           rows_out=rows_out)
    got, want = filled["got"], filled["want"]  # [h q e]
    assert torch.isfinite(got).all()
    empty = (got == 0).all(dim=-1)
    close = ((got - want).norm(dim=-1) <= 2e-2 * want.norm(dim=-1))
    assert (empty | close).all(), f"rows neither empty nor V's average: {(~(empty | close)).nonzero()[:5]}"


def check_output(name, sizes, spec, got, want, baseline):
    """One output against the reference: -inf where the reference has it (a row logsumexp of
    no key), no NaN, a relative L2 error, and FlashAttention's rule: at most twice the
    baseline's max error, plus one ulp of the output dtype at the reference's largest |x| (an
    f32 output, a row logsumexp, is rounded far below its inputs' error: 1e-3 instead)."""
    import torch
    label = f"{name} {spec['name']} {sizes}"
    assert not torch.isnan(got).any(), f"{label}: unwritten or NaN outputs"
    finite = torch.isfinite(want)
    assert torch.equal(got[~finite], want[~finite]), f"{label}: infinities differ from the reference's"
    assert torch.isfinite(got[finite]).all(), f"{label}: infinite where the reference is finite"
    g, w = got[finite], want[finite]
    err = (g - w).norm() / w.norm().clamp_min(1e-30)
    tol = {"bf16": 2e-2, "f16": 5e-3, "f32": 1e-4}[spec["dtype"]]
    assert err <= tol, f"{label}: relative L2 error {err:.3g} > {tol}"
    largest = w.abs().max().item() if finite.any() else 0.0
    mantissa = {"bf16": 7, "f16": 10, "f32": 23}[spec["dtype"]]
    ulp = math.ldexp(1.0, math.frexp(largest)[1] - 1 - mantissa) if largest > 0 else 0.0
    if spec["dtype"] == "f32":
        ulp = 1e-3
    bound = 2 * (baseline[finite] - w).abs().max().item() + ulp if finite.any() else 0.0
    max_err = (g - w).abs().max().item() if finite.any() else 0.0
    assert max_err <= bound, f"{label}: max error {max_err:.3g} > 2 x baseline + ulp = {bound:.3g}"


def test_keys_shared_across_the_batch_at_stride_zero():
    """K and V expanded over the batch (stride 0, one copy for every sequence) against the same
    kernel on their contiguous copies."""
    import torch
    kernel = kernel_for("attention")
    built = next(a["size"] for a in kernel.inputs[0]["axes"] if a["role"] == "head_dim")
    gen = torch.Generator(device="cuda").manual_seed(5)
    q = torch.randn(3, 2, 150, built, generator=gen, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(1, 2, 170, built, generator=gen, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    shared = kernel(q, k.expand(3, -1, -1, -1), v.expand(3, -1, -1, -1))
    copied = kernel(q, k.expand(3, -1, -1, -1).contiguous(), v.expand(3, -1, -1, -1).contiguous())
    assert torch.equal(shared, copied)
    with pytest.raises(ValueError, match="both's or neither's"):
        kernel(q, k.expand(3, -1, -1, -1), v.expand(3, -1, -1, -1).contiguous())


def test_c_entry_refuses_names_it_does_not_take():
    """The C entry (napkin_kernel_launch, as C++ callers use it) refuses a misspelt param, which
    would otherwise keep the diagram's value, naming it and what the library takes."""
    import ctypes
    import torch
    import napkin_kernels
    kernel = kernel_for("sliding_window")
    built = next(a["size"] for a in kernel.inputs[0]["axes"] if a["role"] == "head_dim")
    q = torch.randn(1, 2, 64, built, device="cuda", dtype=torch.bfloat16)
    o = torch.empty_like(q)
    arr = (napkin_kernels._Tensor * 5)()
    for i, (n, t) in enumerate([("Q", q), ("K", q), ("V", q), ("O", o)]):
        arr[i].name, arr[i].data, arr[i].dtype, arr[i].rank = n.encode(), t.data_ptr(), 2, 4
        arr[i].shape[:4], arr[i].strides[:4] = t.shape, t.stride()
    window = ctypes.c_double(8.0)
    arr[4].name, arr[4].data, arr[4].dtype, arr[4].rank = b"W", ctypes.addressof(window), 5, 0
    err = ctypes.create_string_buffer(512)
    assert kernel._launch(arr, 5, None, err, 512) == 1
    assert "tensor 'W': the kernel has no input, output or param of that name (it takes Q, K, V, O, w)" in err.value.decode()
    arr[4].name = b"w"
    assert kernel._launch(arr, 5, None, err, 512) == 0, err.value.decode()


def test_wrong_inputs_are_named():
    import torch
    kernel = kernel_for("alibi")
    built = next(a["size"] for a in kernel.inputs[0]["axes"] if a["role"] == "head_dim")
    q = torch.randn(1, 2, 64, built, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="missing tensor 'slope'"):
        kernel(Q=q, K=q, V=q)
    with pytest.raises(ValueError, match="'slope' must be f32"):
        kernel(Q=q, K=q, V=q, slope=torch.ones(2, device="cuda", dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="'K' must have 4 dims"):
        kernel(Q=q, K=q[0], V=q, slope=torch.ones(2, device="cuda"))
    with pytest.raises(ValueError, match="tensor 'slope': dim 0"):
        kernel(Q=q, K=q, V=q, slope=torch.ones(3, device="cuda"))
    other = q[..., :64].contiguous() if built != 64 else torch.cat([q, q], dim=-1)
    with pytest.raises(ValueError, match="head dim"):
        kernel(Q=other, K=other, V=other, slope=torch.ones(2, device="cuda"))
    with pytest.raises(ValueError, match="contiguous"):
        kernel(Q=q.transpose(2, 3).contiguous().transpose(2, 3), K=q, V=q, slope=torch.ones(2, device="cuda"))


def test_kernel_as_a_torch_operator():
    """Kernel.op(): torch.ops.napkin.<name>, the same output as the direct call, checked by
    torch.library.opcheck, and traced whole by torch.compile (its fake gives the output)."""
    import torch
    kernel = kernel_for("sliding_window")
    op = kernel.op()
    built = next(a["size"] for a in kernel.inputs[0]["axes"] if a["role"] == "head_dim")
    gen = torch.Generator(device="cuda").manual_seed(3)
    q, k, v = (torch.randn(2, 3, 200, built, generator=gen, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    want = kernel(q, k, v, w=50.0)
    assert torch.equal(op(q, k, v, 50.0), want)
    assert torch.equal(torch.ops.napkin.sliding_window(q, k, v, 50.0), want)
    assert op(q, k, v).shape == want.shape  # the param's default: the diagram's value
    torch.library.opcheck(op, (q, k, v, 50.0))
    compiled = torch.compile(lambda a, b, c: op(a, b, c, 50.0) * 2, fullgraph=True)
    assert torch.equal(compiled(q, k, v), want * 2)


def napkin_run(name, sets, tmp_path):
    """`napkin run` of the example's kernel (from NAPKIN_KERNELS, else built here) at its head dim and
    `sets`, timed twice: its output, after checking both validations passed."""
    root = os.environ.get("NAPKIN_KERNELS")
    lib = pathlib.Path(root) / name / "libkernel.so" if root else None
    if lib is None or not lib.exists():
        lib = tmp_path / name / "libkernel.so"
        r = subprocess.run([napkin_bin(), "build", str(diagram(name)), "--machine", "h100-sxm5",
                            "-o", str(lib.parent)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    import json
    head_dim = json.loads((lib.parent / "manifest.json").read_text())["head_dim"]
    cmd = [napkin_bin(), "run", str(diagram(name)), "--machine", "h100-sxm5", "--library", str(lib),
           "--set", f"d={head_dim}", "--iters", "2"]
    for s in sets:
        cmd += ["--set", s]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count(": ok") == 2, r.stdout
    return r.stdout


@pytest.mark.parametrize("p", [0, 150, 5000])
def test_napkin_run_binds_the_params_it_is_given(p, tmp_path):
    """`napkin run --set p=...` validates and times the kernel at that param, not the diagram's
    default (prefix_lm: p = 0 is causal attention, 150 cuts inside the validation's 263 keys,
    5000 is past them)."""
    napkin_run("prefix_lm", [f"p={p}", "q=1000", "k=1000"], tmp_path)


def test_napkin_run_at_other_sizes_than_built(tmp_path):
    """gqa built at its own sizes (4096 queries over groups of 8: q the query axis, r the group)
    runs and validates at 5 queries, where a build would take r for the query axis (the larger
    of the two)."""
    napkin_run("gqa", ["q=5", "k=700"], tmp_path)


def test_index_arithmetic_past_its_exact_range_is_refused():
    """alibi converts k - q to a float without the SFU (napkin::device::index_float), exactly
    below 2^22: a call of 2^21 tokens (|k - q| up to 2 x 2^21 by the emitter's bound) is refused
    with the reason, never run inexactly; one token less runs."""
    check_refused_past("alibi", 1 << 21, 1.0, r"exactly below 2\^22")


def test_index_products_past_32_bits_are_refused():
    """squared_distance computes (q - k)^2 in 32-bit ints: 46,341 tokens reach 46,340^2 < 2^31
    and run; one more is refused at launch with the reason, never run wrapped."""
    check_refused_past("squared_distance", 46342, 1e-9, r"32-bit integers")


def check_refused_past(name, n, slope_value, reason):
    """`name` (Q, K, V and a per-head slope) refused at n tokens with `reason`; run at n - 1."""
    import torch
    kernel = kernel_for(name)
    d = next(a["size"] for spec in kernel.inputs for a in spec["axes"] if a["name"] == "d")
    q, k, v = (torch.randn(1, 1, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    slope = torch.full((1,), slope_value, device="cuda", dtype=torch.float32)
    out = torch.empty_like(q)
    with pytest.raises(ValueError, match=reason):
        kernel(q, k, v, slope, out=out)
    m = n - 1
    kernel(q[:, :, :m], k[:, :, :m], v[:, :, :m], slope, out=out[:, :, :m])
    torch.cuda.synchronize()
    assert torch.isfinite(out[:, :, :m].float()).all()


def test_attention_returns_its_logsumexp():
    """tests/diagrams/attention_lse writes O and the row logsumexp (f32, [b h g q]) in one kernel:
    both against PyTorch in f64 at lengths no tile divides (q != k), the first `lag` rows (no key)
    O = 0 and LSE = -inf; an LSE tensor of other strides is refused by name."""
    import torch
    kernel = kernel_for("attention_lse")
    d = next(a["size"] for a in kernel.inputs[0]["axes"] if a["role"] == "head_dim")
    gen = torch.Generator(device="cuda").manual_seed(7)
    # The second shape launches 32 tiles of up to 4000 keys: split along the keys, the LSE from the
    # combine kernel.
    for b, h, g, q, k in [(2, 2, 2, 333, 301), (1, 1, 1, 4000, 4000)]:
        Q, K, V, O = check_lse(kernel, gen, d, b, h, g, q, k)
    # L [b h g q] stored query-major within the group's heads (g > 1: not contiguous).
    Q, K, V, O = check_lse(kernel, gen, d, 1, 2, 2, 65, 70)
    with pytest.raises(ValueError, match="tensor 'L'"):
        kernel(Q, K, V, out=[torch.empty_like(O), torch.empty(1, 2, 65, 2, device="cuda").transpose(-1, -2)])


def check_lse(kernel, gen, d, b, h, g, q, k, lag=3):
    import torch
    Q = torch.randn(b, h, g, q, d, generator=gen, device="cuda").bfloat16()
    K, V = (torch.randn(b, h, k, d, generator=gen, device="cuda").bfloat16() for _ in range(2))
    O, L = kernel(Q, K, V)
    torch.cuda.synchronize()
    s = torch.einsum("bhgqd,bhkd->bhgqk", Q.double(), K.double()) * 0.08838834764831845
    visible = torch.arange(k, device="cuda")[None, :] + lag <= torch.arange(q, device="cuda")[:, None]
    s = s.masked_fill(~visible, float("-inf"))
    want_l = torch.logsumexp(s, -1)
    want_o = torch.einsum("bhgqk,bhkd->bhgqd", torch.softmax(s, -1).nan_to_num(0.0), V.double())
    assert L.dtype == torch.float32 and tuple(L.shape) == (b, h, g, q)
    assert (L[..., :lag] == float("-inf")).all() and torch.isfinite(L[..., lag:]).all()
    assert (L[..., lag:].double() - want_l[..., lag:]).abs().max().item() < 1e-3
    assert (O.double() - want_o).abs().max().item() < 3e-2
    assert (O[..., :lag, :] == 0).all()
    return Q, K, V, O
