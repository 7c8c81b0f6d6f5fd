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
            "matmul_chain", "linear_attention", "softmax_over_q", "normalised_linear_attention", "attention_projection"]


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
