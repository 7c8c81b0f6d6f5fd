# SPDX-License-Identifier: Apache-2.0
"""The GEMM-family benchmark's cases: each a .napkin diagram with every size bound in its text.

    python3 bench/gemm/diagrams.py DIR [--cases PATTERNS]   # writes DIR/<case>.napkin; prints "<case> <path>"
    python3 bench/gemm/diagrams.py --list                   # case, family, shape, GFLOP, compulsory MB

Cases (bf16 operands, f32 accumulation):
  gemm_<s>              C = A B, m = k = n = s (4096, 8192)
  llama3_<proj>_<t>     Llama-3-8B's projections (hidden 4096): qkv 4096->6144, o 4096->4096,
                        gate_up 4096->14336, down 14336->4096, at t = 1k, 2k, 4k, 8k, 16k tokens
  swiglu_mlp_<t>        examples/swiglu_mlp.napkin       (e = 4096, f = 11008)
  rmsnorm_matmul_<t>    examples/rmsnorm_matmul.napkin   (e = f = 4096)
  layernorm_<t>         examples/layernorm.napkin        (e = 4096)
  matmul_chain_<t>      examples/matmul_chain.napkin: D = (A B) C, A B cast to bf16 (k = n = p = 4096)
the plans at t = 2k, 4k, 8k tokens (rows of A for the chain: at 4k it is 4096^3 twice).

FLOPs count the contractions only (2 per multiply-add), in the cheapest association (the chain
at 8k rows: A (B C), 412 GFLOP, not the 550 of (A B) C as written); the elementwise and
normalisation work is under 1 % of them wherever there is a contraction, and the row-only plan
(LayerNorm) is bandwidth-bound. Compulsory bytes: every input read once and the output written once, at their
dtypes (intermediates are not compulsory). Plain Python (no torch): run.py --dry-run uses it.
"""
import argparse
import fnmatch
import math
import pathlib
import re
import sys
from dataclasses import dataclass, field

REPO = pathlib.Path(__file__).resolve().parents[2]
DTYPE_BYTES = {"bf16": 2, "f16": 2, "f32": 4, "f64": 8, "i32": 4, "bool": 1}

GEMM_TEXT = """\
axes m={m} k={k} n={n}
in A[m k] bf16
in B[k n] bf16
C = contract(A, B over k) as bf16
out C
"""
SQUARE = (4096, 8192)
LLAMA3_8B = {"qkv": (4096, 6144), "o": (4096, 4096), "gate_up": (4096, 14336), "down": (14336, 4096)}  # (k, n)
GEMM_TOKENS = (1024, 2048, 4096, 8192, 16384)
PLAN_TOKENS = (2048, 4096, 8192)

# family -> the example it binds, the axis the token count binds, the output (name, axes, dtype),
# and its contractions: each way of computing it (several where a chain can be reassociated, as
# napkin's plans do), each a list of iteration spaces (2 x the product of their sizes FLOPs). The
# FLOPs of a case are the fewest over those ways: a floor, as the roofline needs.
FAMILIES = {
    "gemm": dict(example=None, tokens="m", output=("C", ("m", "n"), "bf16"), contractions=((("m", "k", "n"),),)),
    "swiglu_mlp": dict(example="swiglu_mlp", tokens="t", output=("Y", ("t", "e"), "bf16"),
                       contractions=((("t", "e", "f"),) * 3,)),
    "rmsnorm_matmul": dict(example="rmsnorm_matmul", tokens="t", output=("Y", ("t", "f"), "bf16"),
                           contractions=((("t", "e", "f"),),)),
    "layernorm": dict(example="layernorm", tokens="t", output=("Y", ("t", "e"), "bf16"), contractions=((),)),
    "matmul_chain": dict(example="matmul_chain", tokens="m", output=("D", ("m", "p"), "bf16"),
                         contractions=((("m", "k", "n"), ("m", "n", "p")),     # (A B) C, as written
                                       (("k", "n", "p"), ("m", "k", "p")))),   # A (B C)
}


@dataclass(frozen=True)
class Tensor:
    name: str
    axes: tuple   # axis names, in the diagram's order
    dtype: str


@dataclass(frozen=True)
class Case:
    name: str
    family: str
    text: str                      # the diagram, every size bound
    sizes: dict = field(hash=False)  # every axis of the diagram -> its size
    inputs: tuple = ()             # Tensor, in the diagram's input order (parsed from the text)
    output: Tensor = None

    @property
    def shape(self):
        return " ".join(f"{a}={s}" for a, s in self.sizes.items())

    def numel(self, t):
        return math.prod(self.sizes[a] for a in t.axes)

    def dims(self, t):
        return [self.sizes[a] for a in t.axes]

    @property
    def flops(self):
        return min(sum(2 * math.prod(self.sizes[a] for a in c) for c in way)
                   for way in FAMILIES[self.family]["contractions"])

    @property
    def compulsory_bytes(self):
        return sum(self.numel(t) * DTYPE_BYTES[t.dtype] for t in (*self.inputs, self.output))


_AXES = re.compile(r"^\s*axes\s+(.*?)\s*(#.*)?$")
_BINDING = re.compile(r"([A-Za-z_]\w*)=(\d+)")
_INPUT = re.compile(r"^\s*in\s+([A-Za-z_]\w*)\s*\[([^\]]*)\]\s*(\w+)")
_OUTPUT = re.compile(r"^\s*out\s+([A-Za-z_]\w*)")


def bind(text, sizes):
    """`text` with the `axes` lines' sizes replaced by `sizes` (a dict); every name in `sizes`
    must be an axis of the text."""
    seen = set()

    def sub(m):
        seen.add(m.group(1))
        return f"{m.group(1)}={sizes.get(m.group(1), m.group(2))}"
    lines = [_BINDING.sub(sub, ln) if _AXES.match(ln) else ln for ln in text.splitlines()]
    missing = set(sizes) - seen
    if missing:
        raise ValueError(f"no axis {sorted(missing)} in the diagram's axes lines")
    return "\n".join(lines) + "\n"


def parse(text):
    """(sizes, inputs, output name) of a diagram's text: its axes lines, in lines, out line."""
    sizes, inputs, out = {}, [], None
    for ln in text.splitlines():
        if m := _AXES.match(ln):
            sizes.update({a: int(s) for a, s in _BINDING.findall(m.group(1))})
        elif m := _INPUT.match(ln):
            inputs.append(Tensor(m.group(1), tuple(m.group(2).replace(",", " ").split()), m.group(3)))
        elif m := _OUTPUT.match(ln):
            out = m.group(1)
    return sizes, tuple(inputs), out


def make_case(name, family, bindings):
    spec = FAMILIES[family]
    if spec["example"] is None:
        text = GEMM_TEXT.format(**bindings)
        origin = "C = A B"
    else:
        path = REPO / "examples" / f"{spec['example']}.napkin"
        text = bind(path.read_text(), bindings)
        origin = f"examples/{spec['example']}.napkin"
    header = f"# bench/gemm/diagrams.py: {origin} with {' '.join(f'{a}={s}' for a, s in bindings.items())}\n"
    sizes, inputs, out = parse(text)
    o_name, o_axes, o_dtype = spec["output"]
    if out != o_name or not set(o_axes) <= set(sizes):
        raise ValueError(f"{name}: the diagram's output is {out}, the benchmark expects {o_name}{list(o_axes)}")
    return Case(name, family, header + text, sizes, inputs, Tensor(o_name, o_axes, o_dtype))


def all_cases():
    cases = []
    for s in SQUARE:
        cases.append(make_case(f"gemm_{s}", "gemm", dict(m=s, k=s, n=s)))
    for proj, (k, n) in LLAMA3_8B.items():
        for t in GEMM_TOKENS:
            cases.append(make_case(f"llama3_{proj}_{t}", "gemm", dict(m=t, k=k, n=n)))
    for family in ("swiglu_mlp", "rmsnorm_matmul", "layernorm", "matmul_chain"):
        for t in PLAN_TOKENS:
            cases.append(make_case(f"{family}_{t}", family, {FAMILIES[family]["tokens"]: t}))
    return cases


def select(cases, patterns):
    """The cases whose names match one of the comma-separated glob patterns (all if empty)."""
    pats = [p for p in (patterns or "").split(",") if p]
    return [c for c in cases if not pats or any(fnmatch.fnmatch(c.name, p) for p in pats)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", nargs="?", help="write DIR/<case>.napkin for every case")
    ap.add_argument("--cases", default="", help="comma-separated glob patterns of case names")
    ap.add_argument("--list", action="store_true", help="list the cases with their FLOPs and bytes")
    a = ap.parse_args()
    cases = select(all_cases(), a.cases)
    if a.list or not a.dir:
        for c in cases:
            print(f"{c.name:22s} {c.family:15s} {c.shape:28s} {c.flops / 1e9:10.1f} GFLOP {c.compulsory_bytes / 1e6:9.1f} MB")
        return 0
    out = pathlib.Path(a.dir)
    out.mkdir(parents=True, exist_ok=True)
    # Plans first: they have the most translation units, so a parallel build starts them first.
    for c in sorted(cases, key=lambda c: c.family == "gemm"):
        p = out / f"{c.name}.napkin"
        if not p.exists() or p.read_text() != c.text:
            p.write_text(c.text)
        print(c.name, p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
