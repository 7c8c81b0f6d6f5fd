# SPDX-License-Identifier: Apache-2.0
"""compute-sanitizer memcheck, racecheck and synccheck on small launches of every kernel
instantiation (runtime/tests/sanitize_attention.cu, built by CMake next to the library)."""
import shutil
import subprocess

import pytest

from conftest import REPO


@pytest.mark.parametrize("tool", ["memcheck", "racecheck", "synccheck"])
def test_sanitizer_clean(tool):
    exe = REPO / "build" / "cuda" / "runtime" / "sanitize_attention"
    if not exe.exists():
        pytest.skip(f"{exe} not built")
    sanitizer = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
    if not shutil.which(sanitizer):
        pytest.skip("compute-sanitizer not found")
    r = subprocess.run([sanitizer, "--tool", tool, "--error-exitcode", "3", str(exe)],
                       capture_output=True, text=True, timeout=600)
    print(r.stdout[-4000:], r.stderr[-2000:])
    assert r.returncode == 0, f"{tool}: exit {r.returncode}\n{r.stdout[-3000:]}"
    assert "launches ok" in r.stdout
