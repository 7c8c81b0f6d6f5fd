#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""ctest entry for the GPU tests: exit 77 (ctest reports SKIPPED) when this machine cannot run
them, else run pytest on tests/gpu and return its status."""
import pathlib
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from conftest import gpu_skip_reason  # noqa: E402

reason = gpu_skip_reason()
if reason:
    print(f"SKIPPED: GPU tests need an sm_90 GPU with torch: {reason}")
    sys.exit(77)
sys.exit(subprocess.call([sys.executable, "-m", "pytest", "-q", str(HERE)]))
