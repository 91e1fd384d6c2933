#!/usr/bin/env python
"""evaluate_lists at growing numbers of lists: time and peak memory, to show it is linear.

Lists of --length items (ranks 1..length) for N users over --items items, truth of 1 +
Poisson(2) items per user drawn so that about a third of them are listed; metrics P, R, AP,
NDCG, RR at k=--length. For each N: the median of --repeat runs, and the peak memory the call
allocates beyond its inputs (tracemalloc, which sees NumPy's and pandas' buffers; one extra
run). Writes results/lists_<date>.json and .md.

    python benchmarks/bench_lists.py                     # 100k and 1M lists of 10
    python benchmarks/bench_lists.py --lists 10000 100000 1000000
"""
import argparse
import datetime as dt
import os
import shlex
import sys
import time
import tracemalloc

import numpy as np
import pandas as pd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_cpu import git_commit, machine_info, versions, write_results  # noqa: E402


def make_lists(n_lists, length, n_items, seed=0):
    """(recs, truth): one list per user, ranks 1..length; truth partly among the listed items."""
    rng = np.random.default_rng(seed)
    users = np.repeat(np.arange(n_lists, dtype=np.int64), length)
    items = (rng.integers(0, n_items, n_lists)[:, None] + np.arange(length) * 7919) % n_items  # distinct per list
    recs = pd.DataFrame({"user": users, "item": items.ravel(), "rank": np.tile(np.arange(1, length + 1), n_lists)})
    n_truth = 1 + rng.poisson(2, n_lists)
    t_users = np.repeat(np.arange(n_lists, dtype=np.int64), n_truth)
    offset = np.arange(t_users.size) - np.repeat(np.cumsum(n_truth) - n_truth, n_truth)
    listed = items[t_users, np.minimum(offset, length - 1)]
    unlisted = (items[t_users, 0] + 1 + offset) % n_items  # never in the list: steps of 7919 skip it
    t_items = np.where(rng.random(t_users.size) < 0.35, listed, unlisted)
    truth = pd.DataFrame({"user": t_users, "item": t_items, "rating": rng.integers(1, 6, t_users.size)})
    return recs, truth.drop_duplicates(["user", "item"])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lists", type=int, nargs="+", default=[100_000, 1_000_000])
    p.add_argument("--length", type=int, default=10)
    p.add_argument("--items", type=int, default=100_000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    args = p.parse_args(argv)
    import gpureco

    command = "python " + " ".join(shlex.quote(a) for a in [os.path.relpath(os.path.abspath(__file__))] + sys.argv[1:])
    info = {"command": command, "date": dt.datetime.now().isoformat(timespec="seconds"), "git_commit": git_commit(),
            "machine": machine_info(), "versions": versions(), "args": vars(args), "runs": []}
    metrics = ["P", "R", "AP", "NDCG", "RR"]
    for n in args.lists:
        recs, truth = make_lists(n, args.length, args.items)
        gpureco.evaluate_lists(recs.head(1000), truth, metrics=metrics, k=args.length)  # warm-up
        times = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            out = gpureco.evaluate_lists(recs, truth, metrics=metrics, k=args.length)
            times.append(time.perf_counter() - start)
        tracemalloc.start()
        gpureco.evaluate_lists(recs, truth, metrics=metrics, k=args.length)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        run = {"lists": n, "rows": len(recs), "truth_rows": len(truth), "median_s": float(np.median(times)),
               "all_s": times, "peak_mib": peak / 2**20, "mean_ndcg": float(out[f"NDCG@{args.length}"].mean()),
               "loadavg_after": os.getloadavg()}
        info["runs"].append(run)
        print(f"{n:>9,} lists: {run['median_s']:.3f} s (median of {args.repeat}), peak {run['peak_mib']:.0f} MiB, "
              f"load {run['loadavg_after'][0]:.2f}", flush=True)
    first = info["runs"][0]
    for run in info["runs"]:
        run["time_per_list_vs_first"] = (run["median_s"] / run["lists"]) / (first["median_s"] / first["lists"])
    text = markdown(info)
    print(text)
    stem = write_results(args.out, f"lists_{dt.date.today().isoformat()}", info, text)
    print(f"wrote {stem}.json and .md")


def markdown(info):
    a, m = info["args"], info["machine"]
    lines = [f"# evaluate_lists at scale, {info['date']}", "", f"Command: `{info['command']}`", "",
             f"- git commit: {info['git_commit']}",
             f"- machine: {m['cpu_count']} CPUs, {m['cpu_model']}, Python {m['python']}, load average at start "
             f"{m['loadavg_at_start']}",
             "- versions: " + ", ".join(f"{k} {v}" for k, v in info["versions"].items()),
             f"- lists of {a['length']} items over {a['items']:,} items; metrics P, R, AP, NDCG, RR at k={a['length']}; "
             f"median of {a['repeat']} runs; peak: tracemalloc, beyond the inputs", "",
             "| lists | rec rows | truth rows | median s | time per list (vs first) | peak MiB | load after |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    for r in info["runs"]:
        lines.append(f"| {r['lists']:,} | {r['rows']:,} | {r['truth_rows']:,} | {r['median_s']:.3f} | "
                     f"{r['time_per_list_vs_first']:.2f}x | {r['peak_mib']:.0f} | {r['loadavg_after'][0]:.2f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
