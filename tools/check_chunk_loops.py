#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks the SASS of the attention kernels' chunk loops: the WGMMA descriptors and ring indices
must stay in ptxas's uniform registers.

ptxas keeps a value in uniform registers only where it can prove it warp-uniform; when it cannot
(a value loaded from shared memory, a thread index, a search it gives up on), the whole chunk
loop computes its WGMMA descriptors in vector registers and moves them with R2UR before every
HGMMA, and puts WARPSYNC before its barriers. That cost 5-13 % (bench/NOTES.md, session of
2026-11-26, fifth) and hid for two days behind the spread of timings; it shows in the SASS
without a GPU.

For every fmha_fwd_kernel in the given libraries (or cubins) this finds the chunk loop (the
smallest loop holding the HGMMAs), prints its instruction mix, and with --check fails where the
loop has more than kMaxR2URPerHGMMA R2UR per HGMMA. (Its WARPSYNCs are printed, not judged: the
kernel's own __syncwarp compiles to the same instruction.) Needs cuobjdump and nvdisasm
(CUDA's, or PyPI's nvidia-cuda-cuobjdump and -nvdisasm: tools/install_deps.sh --cuda) and c++filt.

    tools/check_chunk_loops.py [--check] LIB.so|KERNEL.cubin...
"""
import argparse
import collections
import os
import pathlib
import re
import shutil
import subprocess
import sys

# Measured: uniform loops run 0.6-1.5 R2UR per HGMMA (the Q descriptors, which live in vector
# registers by design); the non-uniform ones 2.4-2.7 (two a step plus the address arithmetic).
kMaxR2URPerHGMMA = 1.6

# FwdConfig's template arguments, in order (runtime/include/napkin/device/fmha_fwd.h).
CONFIG_PARAMS = ["Element", "kHeadDim", "kBlockN", "kConsumerWGs", "kStages", "Fusion", "kCtasPerSM",
                 "kSkipIdleWarpgroups", "kSoftmaxOverlapsPV", "kQInRegisters", "kStaggerClocksPerChunk", "kHeadDimV"]

# Known exceptions, each with its reason: a loop listed here is reported, not failed.
KNOWN = {
    # d = 64 tiles whose idle warpgroups skip the tile (512-1k keys): the skip path's branch on the
    # warpgroup's rows keeps the ring states non-uniform; not fixed (bench/NOTES.md, 2026-11-26).
    "kSkipIdleWarpgroups": "true",
    # d = 256 (80-key chunks, O staged in the V ring, conditional rescaling): 2.27 R2UR a step,
    # found by this check when it was added; not yet located nor fixed (bench/NOTES.md).
    "kHeadDim": "256",
    # Head dims 129-192 on 112-key chunks (d = 256's schedule otherwise; DeepSeek's 192 / 128): 2.0 R2UR
    # a step, as d = 256's; the split instantiation of 192 / 128 stays uniform (bench/NOTES.md,
    # 2026-11-28 twelfth).
    "kBlockN": "112",
}


def find_cuobjdump():
    found = shutil.which("cuobjdump")
    if found:
        return found
    for entry in sys.path:
        candidate = pathlib.Path(entry) / "nvidia" / "cu13" / "bin" / "cuobjdump"
        if candidate.exists():
            return str(candidate)
    sys.exit("check_chunk_loops: no cuobjdump (install CUDA's, or tools/install_deps.sh --cuda)")


def split_top_level(args):
    """Splits 'a, b<c, d>, e' at the commas outside angle brackets and parentheses."""
    parts, depth, current = [], 0, ""
    for ch in args:
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    parts.append(current.strip())
    return parts


def config_of(mangled):
    demangled = subprocess.run(["c++filt", mangled], capture_output=True, text=True, check=True).stdout.strip()
    # fmha_fwd_kernel<FwdConfig<...>, kSplit>(FwdParams<...>)
    m = re.search(r"FwdConfig<(.*)>\s*,\s*(true|false)\s*>\s*\(", demangled)
    if not m:
        return {}
    config = dict(zip(CONFIG_PARAMS, split_top_level(m.group(1))))
    config["kSplit"] = m.group(2)
    return config


def chunk_loop(function_sass):
    """The smallest loop (a backward branch's span) holding an HGMMA: its opcode counts."""
    ins = [(int(a, 16), t.strip()) for a, t in re.findall(r"/\*([0-9a-f]{4,})\*/\s+(.*?);", function_sass)]
    best = None
    for addr, text in ins:
        m = re.search(r"\bBRA\b[^0-9x]*0x([0-9a-f]+)", text)
        if not m or int(m.group(1), 16) > addr:
            continue
        start = int(m.group(1), 16)
        body = [t for a, t in ins if start <= a <= addr]
        if any("HGMMA" in t for t in body) and (best is None or len(body) < len(best)):
            best = body
    if best is None:
        return None
    ops = collections.Counter(re.sub(r"^@!?U?P\w+\s+", "", t).split()[0].split(".")[0] for t in best)
    ops["instructions"] = len(best)
    return ops


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="fail on a chunk loop out of uniform registers")
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    cuobjdump = find_cuobjdump()
    failures, loops = [], 0
    for path in args.files:
        # (cuobjdump runs nvdisasm, which PyPI installs beside it.)
        env = dict(os.environ, PATH=str(pathlib.Path(cuobjdump).parent) + os.pathsep + os.environ.get("PATH", ""))
        sass = subprocess.run([cuobjdump, "-sass", path], capture_output=True, text=True, env=env)
        if sass.returncode != 0:
            sys.exit(f"check_chunk_loops: {path}: cuobjdump failed: {sass.stderr.strip()[:200]}")
        for function in re.split(r"\n\s+Function : ", sass.stdout)[1:]:
            name = function.split("\n", 1)[0].strip()
            if "fmha_fwd_kernel" not in name:
                continue
            ops = chunk_loop(function)
            if ops is None:
                failures.append(f"{path}: {name}: no chunk loop with HGMMA found")
                continue
            loops += 1
            cfg = config_of(name)
            label = ", ".join(f"{k}={cfg[k]}" for k in ("kHeadDim", "kBlockN", "kConsumerWGs", "kSkipIdleWarpgroups",
                                                        "kSoftmaxOverlapsPV", "kQInRegisters", "kSplit") if k in cfg)
            r2ur_per_step = ops["R2UR"] / max(ops["HGMMA"], 1)
            print(f"{pathlib.Path(path).parent.name or path}: {label}: {ops['instructions']} instructions, "
                  f"{ops['HGMMA']} HGMMA, {ops['R2UR']} R2UR ({r2ur_per_step:.2f} a step), {ops['WARPSYNC']} WARPSYNC, "
                  f"{ops['BSSY']} BSSY")
            bad = r2ur_per_step > kMaxR2URPerHGMMA
            known = [f"{k}={v}" for k, v in KNOWN.items() if cfg.get(k) == v]
            if bad and known:
                print(f"  (known: {', '.join(known)}; see KNOWN)")
            elif bad:
                failures.append(f"{path}: {label}: chunk loop out of uniform registers ({ops['R2UR']} R2UR for "
                                f"{ops['HGMMA']} HGMMA)")
    if loops == 0:
        failures.append("no fmha_fwd_kernel found in " + " ".join(args.files))
    if args.check and failures:
        print("\n".join(failures), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
