# SPDX-License-Identifier: Apache-2.0
"""Summarises Nsight Compute's per-SASS-instruction export (`ncu -i R --page source --csv
--print-source sass`): warp-state samples by opcode and stall reason, and the instructions with
the most samples, with their neighbours' opcodes so the place in the kernel can be found.
    python3 bench/attention/ncu_source_summary.py src.csv [top]"""
import collections
import csv
import sys


def number(x):
    try:
        return float(x.replace(",", ""))
    except (AttributeError, ValueError):
        return 0.0


def opcode(source):
    """The instruction's opcode, past a predicate guard (`@!P0 BRA ...` -> BRA)."""
    return next((t for t in source.split() if not t.startswith("@")), "?")


def main():
    path = sys.argv[1]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    with open(path, newline="") as f:
        lines = [l for l in f if l.strip()]
    # ncu may print notes before the table: the header is the first line naming the source.
    start = next((i for i, l in enumerate(lines) if "Source" in l and "," in l), 0)
    rows = list(csv.DictReader(lines[start:]))
    if not rows:
        print("no rows in", path)
        return
    cols = list(rows[0])
    all_col = next((c for c in cols if "Warp Stall Sampling (All" in c), None)
    if all_col is None:
        print("no sampling column; columns:", cols)
        return
    # One column per stall reason (ncu also gives each a "(Not Issued)" subset: left out).
    stall_cols = [c for c in cols if c.startswith("stall_") and "Not Issued" not in c]
    total = sum(number(r[all_col]) for r in rows)
    print(f"{len(rows)} instructions, {total:.0f} samples; columns used: {all_col!r}")
    by_op = collections.Counter()
    for r in rows:
        by_op[opcode(r["Source"])] += number(r[all_col])
    print("by opcode (top 15):", ", ".join(f"{op} {100 * n / total:.1f}%" for op, n in by_op.most_common(15)))
    by_reason = collections.Counter()
    for r in rows:
        for c in stall_cols:
            by_reason[c] += number(r[c])
    if by_reason:
        print("by reason (top 10):", ", ".join(f"{c} {100 * n / total:.1f}%" for c, n in by_reason.most_common(10)))
    order = sorted(range(len(rows)), key=lambda i: -number(rows[i][all_col]))[:top]
    for i in order:
        r = rows[i]
        reasons = sorted(((number(r[c]), c) for c in stall_cols), reverse=True)[:2]
        context = " | ".join(opcode(rows[j]["Source"]) for j in range(max(0, i - 2), min(len(rows), i + 3)))
        print(f"{100 * number(r[all_col]) / total:5.1f}%  {r.get('Address', i)!s:>6}  {r['Source'][:60]:60s}  "
              + ", ".join(f"{c}={v:.0f}" for v, c in reasons if v) + f"   [{context}]")


if __name__ == "__main__":
    main()
