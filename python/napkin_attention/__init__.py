# SPDX-License-Identifier: Apache-2.0
"""Thin PyTorch binding of napkin's fused attention forward kernel (Hopper, sm_90a).

The kernels live in libnapkin_attention.so, built by CMake (NAPKIN_CUDA=ON, build/cuda/lib by
default; override with NAPKIN_ATTENTION_LIB). This package compiles only the small binding
(torch.utils.cpp_extension, on first use) and links that library.

    from napkin_attention import attention
    o, lse = attention(q, k, v, causal=True)   # q (b, s_q, h_q, d); k, v (b, s_k, h_kv, d)
"""
import math
import os
import pathlib

_REPO = pathlib.Path(__file__).resolve().parents[2]
_ext = None


def library_dir() -> pathlib.Path:
    return pathlib.Path(os.environ.get("NAPKIN_ATTENTION_LIB", _REPO / "build" / "cuda" / "lib"))


def _load():
    global _ext
    if _ext is None:
        from torch.utils.cpp_extension import load

        lib = library_dir()
        if not (lib / "libnapkin_attention.so").exists():
            raise RuntimeError(f"napkin_attention: {lib}/libnapkin_attention.so not found; "
                               "build it with cmake -DNAPKIN_CUDA=ON (see docs/runtime.md)")
        _ext = load(
            name="napkin_attention_ext",
            sources=[str(pathlib.Path(__file__).with_name("binding.cpp"))],
            extra_include_paths=[str(_REPO / "runtime" / "include")],
            extra_ldflags=[f"-L{lib}", "-lnapkin_attention", f"-Wl,-rpath,{lib}"],
            extra_cflags=["-O2"],
            with_cuda=True,
            verbose=False,
        )
    return _ext


def attention(q, k, v, causal=False, softmax_scale=None, out=None, lse=None, pingpong=True):
    """Returns (o, lse). Causal masks are bottom-right aligned (FlashAttention's convention);
    rows that see no key give o = 0 and lse = +inf."""
    if softmax_scale is None:
        softmax_scale = 1.0 / math.sqrt(q.shape[-1])
    return tuple(_load().attention_fwd(q, k, v, float(softmax_scale), bool(causal), out, lse, bool(pingpong)))
