#!/usr/bin/env python
"""The machine code of the rank kernels' loops, read without a GPU.

A kernel that issues instructions as fast as the GPU can (rank_tile on the H100: compute
bound, DRAM 8%) takes time in proportion to the instructions it issues per score. This
compiles kernels/*.cu with nvcc for one architecture (default sm_90, the H100), disassembles
the cubin with cuobjdump, and lists for each kernel its registers, spills and shared memory
(ptxas) and every loop (a backward branch: the instructions from its target to the branch)
with its length and instruction mix. The lengths are static: a loop's body includes the
branches its common path jumps over, so read the listing for what one score costs; the
table is for comparing commits. Needs nvcc and cuobjdump (the CUDA toolkit, or PyPI's
nvidia-cuda-cuobjdump wheel: `--cuobjdump PATH`). Writes <out>/sass_<date>_<arch>.json and .md.

    python benchmarks/bench_sass.py [--arch sm_90] [--kernels rank_tile_f32,fused_rank_f32]
"""
import argparse
import collections
import datetime as dt
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [HERE, ROOT]
from bench_cpu import git_commit, write_results  # noqa: E402

FILES = {"rank_tile_f32": "rank_tile", "rank_tile_f64": "rank_tile", "fused_rank_f32": "fused_rank", "fused_rank_tf32": "fused_rank",
         "finish_batch_f32": "exact_scores", "topk_tile_f32": "topk_tile", "fused_topk_f32": "topk_tile", "fused_topk_tf32": "topk_tile",
         "topk_finish": "topk_tile"}
LINE = re.compile(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
PTXAS = re.compile(r"Compiling entry function '(\w+)'|Used (\d+) registers.*?(\d+) bytes smem|"
                   r"(\d+) bytes spill stores, (\d+) bytes spill loads")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--kernels", default="rank_tile_f32,fused_rank_f32")
    parser.add_argument("--cuobjdump", default=shutil.which("cuobjdump") or "cuobjdump")
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    args = parser.parse_args()
    from gpureco.engine import _gpu  # the compile options CuPy uses (RANK_SPAN, FUSED_SHARED_TESTS)

    kernels = args.kernels.split(",")
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for file in sorted({FILES[k] for k in kernels}):
            cubin = os.path.join(tmp, file + ".cubin")
            options = [o for o in _gpu.compile_options() if not o.startswith("-DGPURECO_KERNELS_HASH")]
            built = subprocess.run(["nvcc", f"-arch={args.arch}", "-cubin", "-Xptxas", "-v", *options, "-o", cubin,
                                    os.path.join(ROOT, "kernels", file + ".cu")], capture_output=True, text=True)
            if built.returncode:
                sys.exit(built.stderr)
            resources = ptxas_resources(built.stderr)
            sass = subprocess.run([args.cuobjdump, "-sass", cubin], capture_output=True, text=True, check=True).stdout
            for name, code in functions(sass).items():
                if name in kernels:
                    rows[name] = {**resources.get(name, {}), "instructions": len(code), "loops": loops(code)}
    info = {"date": dt.date.today().isoformat(), "commit": git_commit(), "arch": args.arch,
            "command": "python benchmarks/bench_sass.py " + " ".join(sys.argv[1:]), "kernels": rows}
    text = markdown(info)
    print(text)
    stem = write_results(args.out, f"sass_{info['date']}_{args.arch}", info, text)
    print(f"written: {stem}.json, {stem}.md")


def ptxas_resources(log):
    found, name = {}, None
    for m in PTXAS.finditer(log):
        if m.group(1):
            name = m.group(1)
            found[name] = {}
        elif m.group(2) and name:
            found[name].update(registers=int(m.group(2)), shared_bytes=int(m.group(3)))
        elif m.group(4) and name and "spill_stores" not in found[name]:
            found[name].update(spill_stores=int(m.group(4)), spill_loads=int(m.group(5)))
    return found


def functions(sass):
    """{function name: [(address, instruction)]} from cuobjdump -sass."""
    out, name = {}, None
    for line in sass.splitlines():
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            name = m.group(1)
            out[name] = []
            continue
        m = LINE.match(line)
        if m and name:
            out[name].append((int(m.group(1), 16), m.group(2)))
    return out


def opcode(text):
    words = text.split()
    word = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
    return word.split(".")[0]


def loops(code):
    """Every backward branch: its body [target, branch], length and the commonest opcodes."""
    found = []
    for address, text in code:
        m = re.search(r"\bBRA\s+(?:`\(\.L_x_\d+\)\s*)?0x([0-9a-f]+)", text) if "BRA" in text else None
        if not m or int(m.group(1), 16) >= address:
            continue
        target = int(m.group(1), 16)
        body = [t for a, t in code if target <= a <= address]
        mix = collections.Counter(opcode(t) for t in body)
        found.append({"start": hex(target), "end": hex(address), "instructions": len(body),
                      "mix": dict(mix.most_common(8))})
    return found


def markdown(info):
    lines = [f"# Rank kernels' machine code ({info['arch']}, commit {info['commit']}, {info['date']})", "",
             f"`{info['command']}`. Static counts (no GPU): a loop's instructions include the paths its common "
             "case jumps over.", ""]
    for name, row in info["kernels"].items():
        lines += [f"## {name}", "",
                  f"{row.get('registers', '?')} registers, {row.get('spill_stores', '?')} bytes spilled, "
                  f"{row.get('shared_bytes', '?')} bytes of static shared memory, {row['instructions']} instructions.",
                  "", "| loop | instructions | commonest |", "|---|---:|---|"]
        for loop in row["loops"]:
            mix = ", ".join(f"{op} {n}" for op, n in loop["mix"].items())
            lines.append(f"| {loop['start']}-{loop['end']} | {loop['instructions']} | {mix} |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
