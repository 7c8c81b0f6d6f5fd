# SPDX-License-Identifier: Apache-2.0
"""napkin's own predictions for the attention benchmark suite, computed on the host (no GPU):
`napkin derive --json --row-layout quad` (WGMMA's row layout, as the kernel uses) on
examples/attention.napkin and examples/causal.napkin with the suite's sizes bound by --set,
per machine. run.py prints them beside the measurements.

    python3 bench/attention/predict.py --napkin build/release/bin/napkin \
        --machines h100-sxm5,h200 --out bench/attention/predictions.json

FLOPs follow run.py's convention (4 b h s^2 d, halved when causal), so predicted and measured
TFLOP/s compare directly. The solver skips the blocks the causal mask makes all -inf
(docs/configuration.md, section 5). A row with no feasible configuration in napkin's model
keeps napkin's reason instead of a number."""
import argparse
import json
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
SEQLENS = [512, 1024, 2048, 4096, 8192, 16384]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--napkin", default=str(REPO / "build" / "release" / "bin" / "napkin"))
    ap.add_argument("--machines", default="h100-sxm5,h200")
    ap.add_argument("--dims", default="64,128,256")
    ap.add_argument("--out", default=str(REPO / "bench" / "attention" / "predictions.json"))
    args = ap.parse_args()
    out = {"source": "napkin derive --json (configuration solver)", "machines": {}}
    for machine in args.machines.split(","):
        rows = []
        for d in map(int, args.dims.split(",")):
            for causal in (False, True):
                diagram = REPO / "examples" / ("causal.napkin" if causal else "attention.napkin")
                for s in SEQLENS:
                    b, h = 16384 // s, 2048 // d
                    cmd = [args.napkin, "derive", str(diagram), "--machine", machine, "--json",
                           "--set", f"b={b}", "--set", f"h={h}", "--set", f"q={s}", "--set", f"k={s}",
                           "--set", f"d={d}", "--row-layout", "quad"]
                    r = subprocess.run(cmd, capture_output=True, text=True)
                    row = {"d": d, "causal": causal, "seqlen": s, "batch": b, "heads": h}
                    if r.returncode != 0:
                        # No feasible configuration is an answer (kept, with napkin's reason);
                        # anything else is a failure of this script.
                        if "no feasible configuration" not in r.stderr:
                            sys.exit(f"predict.py: {' '.join(cmd)} failed:\n{r.stderr}")
                        row.update(predicted_s=None, predicted_tflops=None, infeasible=r.stderr.strip())
                    else:
                        j = json.loads(r.stdout)
                        flops = 4 * b * h * s * s * d / (2 if causal else 1)
                        row.update(predicted_s=j["predicted_time_s"],
                                   predicted_tflops=round(flops / j["predicted_time_s"] / 1e12, 1),
                                   bound=j["bound"], schedule=j["schedule"])
                    rows.append(row)
        out["machines"][machine] = rows
    pathlib.Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}: {sum(len(v) for v in out['machines'].values())} rows")


if __name__ == "__main__":
    main()
