#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks that module dependencies under src/ point one way (docs/architecture.md) and that
the core never includes CUDA or runtime/ headers. Exit 1 with one line per violation."""
import pathlib
import re
import sys

# module -> modules it may include (directly); the relation is acyclic by construction.
ALLOWED = {
    "support": set(),
    "ir": {"support"},
    "reference": {"support", "ir"},
    "arch": {"support"},
    "sched": {"support", "ir"},
    "cost": {"support", "ir", "sched", "arch"},
    "search": {"support", "ir", "sched", "arch", "cost"},
    "plan": {"support", "ir", "sched", "arch", "cost", "search", "reference"},
    "exec": {"support", "ir", "sched", "reference", "plan"},
    "emit": {"support", "ir", "sched", "arch", "cost", "plan"},
    "driver": {"support", "ir", "reference", "arch", "sched", "cost", "search", "plan", "exec", "emit"},
    "launch": {"support", "ir", "reference", "arch", "sched", "cost", "search", "plan", "exec", "emit", "driver"},
}
CUDA_HEADERS = re.compile(r'#include\s*[<"](cuda|cute/|cutlass/|napkin/runtime|runtime/)')
INCLUDE = re.compile(r'#include\s*"([a-z_]+)/')


def main(root: pathlib.Path) -> int:
    errors = []
    src = root / "src"
    for module_dir in sorted(p for p in src.iterdir() if p.is_dir()):
        module = module_dir.name
        if module not in ALLOWED:
            errors.append(f"src/{module}: unknown module; add it to tools/check_layering.py and docs/architecture.md")
            continue
        for f in sorted(module_dir.rglob("*")):
            if f.suffix not in (".h", ".cpp"):
                continue
            for lineno, line in enumerate(f.read_text().splitlines(), 1):
                rel = f.relative_to(root)
                if module != "launch" and CUDA_HEADERS.search(line):
                    errors.append(f"{rel}:{lineno}: the core must not include CUDA or runtime headers: {line.strip()}")
                m = INCLUDE.search(line)
                if m and m.group(1) != module and m.group(1) in ALLOWED and m.group(1) not in ALLOWED[module]:
                    errors.append(f"{rel}:{lineno}: {module} may not depend on {m.group(1)}: {line.strip()}")
    for e in errors:
        print(e)
    print(f"layering: {len(errors)} violation(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")))
