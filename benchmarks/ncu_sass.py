#!/usr/bin/env python
"""Where a kernel's instructions and stalls go, per machine instruction: a summary of Nsight
Compute's source page (`ncu --import R.ncu-rep --page source --csv --print-source sass > F.csv`,
from a report with the SourceCounters section), gzipped or not.

Prints markdown: warp instructions executed by opcode (the share of each), the warp-stall
samples by reason, and the instructions with the most samples (their top reasons).

    python benchmarks/ncu_sass.py rank_tile.csv.gz [--top 12]
"""
import argparse
import collections
import csv
import gzip
import io


def read(path):
    """(header, rows) of the CSV's table (its first line names the kernel)."""
    raw = gzip.open(path) if path.endswith(".gz") else open(path, "rb")
    with raw:
        rows = list(csv.reader(io.TextIOWrapper(raw, "utf-8")))
    start = next(i for i, row in enumerate(rows) if row and row[0] == "Address")
    return rows[start], rows[start + 1:]


def summary(header, rows, top=12):
    executed, samples, source = (header.index(name) for name in
                                 ("Instructions Executed", "Warp Stall Sampling (All Samples)", "Source"))
    stalls = [(name, i) for i, name in enumerate(header) if name.startswith("stall_") and "Not Issued" not in name]
    count = lambda row, i: int(row[i] or 0)  # noqa: E731
    total, sampled = sum(count(r, executed) for r in rows), sum(count(r, samples) for r in rows)
    by_opcode = collections.Counter()
    for r in rows:
        words = r[source].split()
        if words:
            by_opcode[(words[1] if words[0].startswith("@") else words[0]).split(".")[0]] += count(r, executed)
    lines = [f"{total:,} warp instructions executed, {sampled:,} warp-stall samples.", "",
             "| opcode | share of instructions |", "|---|---:|"]
    lines += [f"| {op} | {n / total:.1%} |" for op, n in by_opcode.most_common(top)]
    reasons = sorted(((name, sum(count(r, i) for r in rows)) for name, i in stalls), key=lambda kv: -kv[1])
    lines += ["", "| stall reason | share of samples |", "|---|---:|"]
    lines += [f"| {name[6:]} | {n / sampled:.1%} |" for name, n in reasons[:top] if n]
    lines += ["", "| instruction | share of samples | its top reasons |", "|---|---:|---|"]
    for r in sorted(rows, key=lambda r: -count(r, samples))[:top]:
        mine = sorted(((name[6:], count(r, i)) for name, i in stalls if count(r, i)), key=lambda kv: -kv[1])[:3]
        lines.append(f"| `{' '.join(r[source].split())}` | {count(r, samples) / sampled:.1%} | "
                     f"{', '.join(f'{name} {n}' for name, n in mine)} |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv")
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args(argv)
    print(summary(*read(args.csv), top=args.top))


if __name__ == "__main__":
    main()
