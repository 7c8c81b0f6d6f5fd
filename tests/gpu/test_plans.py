# SPDX-License-Identifier: Apache-2.0
"""Every GEMM-family example's generated plan on the GPU: `napkin build` writes its units (CUTLASS
GEMMs with the diagram's epilogue, aux loads included; row and elementwise kernels) and `napkin
run --iters 0` validates the library against the reference interpreter at sizes no tile divides,
outputs poisoned first (src/launch). The libraries are those under $NAPKIN_KERNELS (one
directory per example), else built here."""
import os
import pathlib
import subprocess

import pytest
from conftest import diagram

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = ["matmul", "batched_matmul", "gelu_mlp", "swiglu_mlp", "rmsnorm_matmul", "matmul_rmsnorm", "layernorm",
            "matmul_chain", "linear_attention", "softmax_over_q", "normalised_linear_attention", "attention_projection",
            "geglu_linear", "expert_swiglu", "residual_projection", "feature_projection",
            "column_statistics", "column_variance", "feature_sums",
            "normalised_projection", "scaled_projection", "gated_softplus", "mask_output", "long_rows",
            "token_norm", "batch_statistics", "linear_cross_entropy", "folded_logits", "differential_attention",
            "map_terms", "heads_inner", "biased_swiglu", "nchw_statistics", "grouped_bmm", "squared_error_loss",
            "soft_argmax", "flat_index", "batchnorm_nchw", "weight_gradient", "permuted_bmm", "group_norm", "channel_rmsnorm",
            "long_k_product", "global_norm", "image_keys", "masked_mean_pool", "flat_softmax", "long_k_epilogue"]


def napkin_bin():
    return os.environ.get("NAPKIN_BIN", str(REPO / "build" / "release" / "bin" / "napkin"))


def library_for(name, tmp_path):
    root = os.environ.get("NAPKIN_KERNELS")
    if root and (pathlib.Path(root) / name / "libkernel.so").exists():
        return pathlib.Path(root) / name / "libkernel.so"
    out = tmp_path / name
    r = subprocess.run([napkin_bin(), "build", str(diagram(name)), "--machine", "h100-sxm5",
                        "-o", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return out / "libkernel.so"


@pytest.mark.parametrize("name", EXAMPLES)
def test_plan_matches_the_reference(name, tmp_path):
    lib = library_for(name, tmp_path)
    r = subprocess.run([napkin_bin(), "run", str(diagram(name)), "--machine", "h100-sxm5",
                        "--library", str(lib), "--iters", "0"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "validation" in r.stdout and " ok" in r.stdout, r.stdout


def test_axes_taken_as_one_must_be_contiguous(tmp_path):
    """token_norm's kernel reduces over h and d as one axis: a view of X whose h and d are not
    contiguous with each other is refused, naming the tensor and the axes; a contiguous one
    matches PyTorch."""
    torch = pytest.importorskip("torch")
    import sys
    sys.path.insert(0, str(REPO / "python"))
    import napkin_kernels as nk
    k = nk.load(library_for("token_norm", tmp_path).parent)
    g = torch.Generator(device="cuda").manual_seed(9)
    X = torch.randn(300, 32, 128, device="cuda", generator=g).bfloat16()
    w = torch.randn(32, 128, device="cuda", generator=g).bfloat16()
    Y = k(X, w)
    x = X.float()
    want = (x / torch.sqrt((x * x).mean(dim=(1, 2), keepdim=True) + 1e-6) * w.float()).bfloat16()
    assert (Y.float() - want.float()).abs().max().item() <= 2 * 2 ** -7 * want.float().abs().max().item()
    apart = torch.randn(300, 128, 32, device="cuda", generator=g).bfloat16().transpose(1, 2)
    with pytest.raises(ValueError, match="tensor 'X': dims 1..2 \\(axes h..d\\) must be contiguous"):
        k(apart, w)


def test_dual_gemm_takes_its_b_operands_from_anywhere(tmp_path):
    """swiglu_mlp's dual GEMM reads Wg and Wu through one TMA descriptor where they allow it and
    through a copy where not (another stride, the same memory), in either address order, with N
    and M that no tile divides: each call matches PyTorch by FlashAttention's rule."""
    torch = pytest.importorskip("torch")
    import sys
    sys.path.insert(0, str(REPO / "python"))
    import napkin_kernels as nk
    lib = library_for("swiglu_mlp", tmp_path)
    k = nk.load(lib.parent)
    t, e, f = 300, 512, 1000
    g = torch.Generator(device="cuda").manual_seed(5)
    def rand(*shape):
        return (torch.randn(*shape, device="cuda", generator=g) / shape[0] ** 0.5).bfloat16()
    X = torch.randn(t, e, device="cuda", generator=g).bfloat16()
    Wd = rand(f, e)
    Wa, Wb = rand(e, f), rand(e, f)          # Wa at the lower address
    wide = rand(e, f + 24)[:, :f]            # another row stride: copied
    for Wg, Wu in [(Wa, Wb), (Wb, Wa), (Wa, wide), (Wa, Wa)]:
        G, U = (X.float() @ Wg.float()).bfloat16().float(), (X.float() @ Wu.float()).bfloat16().float()
        ref = (G * torch.sigmoid(G) * U).bfloat16().float() @ Wd.float()
        eager = (torch.nn.functional.silu(X @ Wg) * (X @ Wu)) @ Wd
        Y = k(X=X, Wg=Wg, Wu=Wu, Wd=Wd)
        err, err_eager = (Y.float() - ref).abs().max().item(), (eager.float() - ref).abs().max().item()
        assert err <= 2 * err_eager + 1e-3 * ref.abs().max().item(), (err, err_eager, Wg.stride(), Wu.stride())


def test_several_outputs_from_python(tmp_path):
    """column_statistics writes M and R (one column kernel): from Python the call returns both, in
    the diagram's order, at sizes the build did not see (t = 5003, c = 40: splits of t across
    CTAs, a vector tail), matching float64 PyTorch; `out=` takes a tuple and names what it needs."""
    torch = pytest.importorskip("torch")
    import sys
    sys.path.insert(0, str(REPO / "python"))
    import napkin_kernels as nk
    k = nk.load(library_for("column_statistics", tmp_path).parent)
    assert [o["name"] for o in k.outputs] == ["M", "R"]
    g = torch.Generator(device="cuda").manual_seed(3)
    t, c = 5003, 40
    X = torch.randn(t, c, device="cuda", generator=g).bfloat16()
    w = torch.randn(t, device="cuda", generator=g)
    gamma = 1 + 0.1 * torch.randn(c, device="cuda", generator=g)
    M, R = k(X=X, w=w, gamma=gamma)
    Xd = X.double()
    want_m = (Xd * w.double()[:, None]).sum(0)
    want_r = gamma.double() * torch.rsqrt((Xd * Xd).sum(0) / 8192 + 1e-5)
    assert torch.allclose(M.double(), want_m, rtol=1e-4, atol=1e-3)
    assert torch.allclose(R.double(), want_r, rtol=2e-2, atol=1e-3)
    outs = (torch.full_like(M, float("nan")), torch.full_like(R, float("nan")))
    got = k(X, w, gamma, out=outs)
    assert got[0].data_ptr() == outs[0].data_ptr() and torch.equal(got[0], M) and torch.equal(got[1], R)
    with pytest.raises(ValueError, match="out must hold 2 tensors"):
        k(X, w, gamma, out=outs[0])


def test_scalar_outputs_from_python(tmp_path):
    """squared_error_loss writes two scalars (a loss and a max over every axis, each two row kernels:
    the first over d fills the GPU): from Python they are 0-dim CUDA tensors matching float64
    PyTorch; `napkin run` (test_plan_matches_the_reference) takes them through host memory."""
    torch = pytest.importorskip("torch")
    import sys
    sys.path.insert(0, str(REPO / "python"))
    import napkin_kernels as nk
    k = nk.load(library_for("squared_error_loss", tmp_path).parent)
    assert [len(o["axes"]) for o in k.outputs] == [0, 0]
    g = torch.Generator(device="cuda").manual_seed(5)
    X = torch.randn(8, 4096, 4096, device="cuda", generator=g).bfloat16()
    Y = torch.randn(8, 4096, 4096, device="cuda", generator=g).bfloat16()
    L, M = k(X, Y)
    assert L.dim() == 0 and M.dim() == 0 and L.is_cuda
    E = (X - Y).double()  # (X - Y rounded to bf16, as the diagram's E)
    assert torch.allclose(L.double(), (E * E).sum() / E.numel(), rtol=1e-4)
    assert M.double().item() == X.double().max().item()


def test_a_norm_as_its_statistics_refuses_other_sizes(tmp_path):
    """channel_rmsnorm divides by its channel count as a number: the manifest marks c fixed, a call
    at the built sizes matches float64 PyTorch, one at another c is refused naming the axis."""
    torch = pytest.importorskip("torch")
    import sys
    sys.path.insert(0, str(REPO / "python"))
    import napkin_kernels as nk
    k = nk.load(library_for("channel_rmsnorm", tmp_path).parent)
    assert {a["name"]: a["role"] for a in k.inputs[0]["axes"]}["c"] == "fixed"
    g = torch.Generator(device="cuda").manual_seed(4)
    X = torch.randn(3, 512, 1000, device="cuda", generator=g).bfloat16()
    w = 1 + 0.1 * torch.randn(512, device="cuda", generator=g)
    Y = k(X, w)
    want = X.double() * torch.rsqrt((X.double() ** 2).mean(1, keepdim=True) + 1e-6) * w.double()[:, None]
    assert torch.allclose(Y.double(), want, rtol=2e-2, atol=2e-2)
    with pytest.raises(ValueError, match="axis c has size 72; the plan was built for 512"):
        k(X[:, :72].contiguous(), w[:72])


def test_a_cut_axis_asks_for_a_multiple_of_its_inner_part(tmp_path):
    """long_k_product cuts k (1M) into 256 x 4096 for split-K: the manifest says so, a call at
    another multiple of 4096 matches float64 PyTorch (the partial products added in a fixed
    order: two calls agree to the bit), and one at a k that is not a multiple is refused naming
    the axis."""
    torch = pytest.importorskip("torch")
    import sys
    sys.path.insert(0, str(REPO / "python"))
    import napkin_kernels as nk
    k = nk.load(library_for("long_k_product", tmp_path).parent)
    axis = {a["name"]: a for a in k.inputs[0]["axes"]}["k"]
    assert axis["role"] == "free" and axis["multiple_of"] == 4096, axis
    g = torch.Generator(device="cuda").manual_seed(5)
    A = torch.randn(64, 5 * 4096, device="cuda", generator=g).bfloat16()
    B = torch.randn(64, 5 * 4096, device="cuda", generator=g).bfloat16()
    C = k(A, B)
    want = A.double() @ B.double().t()
    assert torch.allclose(C.double(), want, rtol=2e-2, atol=2e-2 * want.abs().max().item())
    assert torch.equal(C, k(A, B))
    with pytest.raises(ValueError, match="axis k has size 20000; the plan takes it as k_outer x k_inner"):
        k(A[:, :20000].contiguous(), B[:, :20000].contiguous())


def test_folded_cross_entropy_matches_pytorch(tmp_path):
    """linear_cross_entropy's GEMM folds the logits over the vocabulary in its epilogue: at sizes
    no tile divides, targets spread over the whole vocabulary (every N tile picks some), its loss
    matches PyTorch's cross_entropy of the f32 logits; a logit of +inf-scale magnitude stays
    finite (the tile's max is taken before the exp), and a wrong target dtype is refused by name."""
    torch = pytest.importorskip("torch")
    import sys
    sys.path.insert(0, str(REPO / "python"))
    import napkin_kernels as nk
    k = nk.load(library_for("linear_cross_entropy", tmp_path).parent)
    g = torch.Generator(device="cuda").manual_seed(3)
    t, e, v = 1001, 264, 50000
    X = torch.randn(t, e, device="cuda", generator=g).bfloat16()
    W = (torch.randn(v, e, device="cuda", generator=g) / e ** 0.5).bfloat16()
    X[7] *= 400  # logits in the thousands: exp overflows f32 without the max
    target = torch.randint(0, v, (t,), device="cuda", generator=g, dtype=torch.int32)
    loss = k(X, W, target)
    want = torch.nn.functional.cross_entropy(X.float() @ W.float().t(), target.long(), reduction="none")
    assert torch.isfinite(loss).all()
    assert (loss - want).abs().max().item() <= 1e-3 * want.abs().max().item() + 1e-3
    with pytest.raises(ValueError, match="target"):
        k(X, W, target.long())
