# SPDX-License-Identifier: Apache-2.0
"""GPU tests: every test here is SKIPPED (never passed) without torch, a CUDA GPU of compute
capability 9.0, or the built kernel library."""
import pathlib
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))


def diagram(name):
    """examples/NAME.napkin, else tests/diagrams/NAME.napkin (test diagrams: ones the CPU tests do
    not all take, as attention_projection, whose closed form does not converge (bench/NOTES.md),
    and ones written for a kernel path, as score_tables and causal_bias)."""
    path = REPO / "examples" / f"{name}.napkin"
    return path if path.exists() else REPO / "tests" / "diagrams" / f"{name}.napkin"


def gpu_skip_reason(hand_library=True):
    try:
        import torch
    except ImportError:
        return "no torch"
    if not torch.cuda.is_available():
        return "no CUDA GPU"
    if torch.cuda.get_device_capability() != (9, 0):
        return f"needs an sm_90 GPU, found {torch.cuda.get_device_name()}"
    if not hand_library:
        return None
    import napkin_attention
    if not (napkin_attention.library_dir() / "libnapkin_attention.so").exists():
        return f"libnapkin_attention.so not built in {napkin_attention.library_dir()}"
    return None


def pytest_collection_modifyitems(config, items):
    import pytest

    # The generated kernels' tests need no hand-written library (they build or load their own).
    reasons = {True: gpu_skip_reason(True), False: gpu_skip_reason(False)}
    for item in items:
        reason = reasons[not item.fspath.basename.startswith(("test_generated", "test_plans"))]
        if reason:
            item.add_marker(pytest.mark.skip(reason=f"GPU test skipped: {reason}"))
