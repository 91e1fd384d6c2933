#!/usr/bin/env python
"""The cost of the determinism rule: the metric arithmetic on the host.

Both backends hand the host the integers that define every metric (the rank of each test
item, per user |T|, the pool size and the pool statistics); one compiled routine
(gpureco/engine/_metrics_loop.pyx) turns them into the metrics in an order gpureco defines.
On the GPU backend this costs a device-to-host copy of those integers plus the routine's
time; this script times the routine and counts the bytes copied, at the sizes the issue on
identical GPU numbers names:

1. 10,000 users with the test sets of bench_gpu.py's default problem (1,000,000 items);
2. 1,000,000 users x 10 test items each, 100,000 items.

Each with K=100 (all ten metrics) and with cumulative K=1..100. Best of --repeats runs.
Writes <out>/metrics_<date>.json and .md.

    python benchmarks/bench_metrics.py
"""
import argparse
import datetime as dt
import os
import platform
import shlex
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_cpu import git_commit, write_results  # noqa: E402

from gpureco.engine._metrics import metrics_from_ranks  # noqa: E402
from gpureco.engine._registry import METRICS  # noqa: E402

ALL = tuple(m.column for m in METRICS)


def ranks_of(rng, n_test, n_pool):
    """Distinct random ranks per user, in CSR (not rank) order: what a backend returns."""
    offsets = np.concatenate([[0], np.cumsum(n_test)])
    ranks = np.empty(int(offsets[-1]), dtype=np.int64)
    for u in range(n_test.shape[0]):  # fast enough: the cost measured is the routine's, not this
        ranks[offsets[u]: offsets[u + 1]] = rng.choice(int(n_pool[u]), int(n_test[u]), replace=False) + 1
    return ranks


def problem(name, n_users, n_items, n_test, rng):
    n_train = np.minimum(1 + rng.poisson(29, n_users), n_items // 2)
    n_pool = (n_items - n_train).astype(np.int64)
    return dict(name=name, n_users=n_users, n_items=n_items, n_test=n_test.astype(np.int64), n_pool=n_pool,
                ranks=ranks_of(rng, n_test, n_pool), gains=rng.integers(1, 6, int(n_test.sum())).astype(np.float64))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    args = parser.parse_args(argv)
    rng = np.random.default_rng(5)
    problems = [problem("10,000 users x 1M items (bench_gpu default)", 10_000, 1_000_000,
                        np.minimum(1 + rng.poisson(9, 10_000), 500_000), rng),
                problem("1,000,000 users x 10 test items, 100k items", 1_000_000, 100_000,
                        np.full(1_000_000, 10), rng)]
    rows = []
    for p in problems:
        valid = np.ones(p["n_users"], bool)
        # bytes the GPU backend copies to the host: ranks (int64 per test item), pool min and
        # max (float64 per user), non-finite flag (uint8 per user)
        copied = 8 * p["ranks"].shape[0] + 17 * p["n_users"]
        for label, cutoffs in (("K=100", np.array([100])), ("K=1..100", np.arange(1, 101))):
            times = []
            for _ in range(args.repeats):
                start = time.perf_counter()
                metrics_from_ranks(p["ranks"], p["gains"], p["n_test"], p["n_pool"], cutoffs, ALL, valid)
                times.append(time.perf_counter() - start)
            rows.append(dict(problem=p["name"], cutoffs=label, test_items=int(p["ranks"].shape[0]),
                             seconds=min(times), copied_bytes=int(copied)))
    info = {"date": dt.date.today().isoformat(), "machine": f"{platform.processor() or platform.machine()}, "
            f"{os.cpu_count()} cores", "commit": git_commit(),
            "command": "python " + " ".join(shlex.quote(a) for a in [sys.argv[0], *(argv or sys.argv[1:])]),
            "rows": rows}
    lines = [f"# Host metric arithmetic {info['date']}", "", f"Machine: {info['machine']}; commit {info['commit']}",
             f"Command: `{info['command']}`", "", "All ten metrics; best of {} runs.".format(args.repeats), "",
             "| problem | cut-offs | test items | seconds | device-to-host copy |", "|---|---|---:|---:|---:|"]
    for row in rows:
        lines.append(f"| {row['problem']} | {row['cutoffs']} | {row['test_items']:,} | {row['seconds']:.3f} | "
                     f"{row['copied_bytes'] / 2**20:.1f} MiB |")
    print("\n".join(lines))
    write_results(args.out, f"metrics_{info['date']}", info, "\n".join(lines))


if __name__ == "__main__":
    main()
