#!/usr/bin/env python
"""The host's validation of the interactions, before a GPU call's first kernel.

Every calc_reco_metrics / evaluate call copies X_train and X_test into canonical CSR
(_validation.interactions: sorted, distinct, no stored zeros, int32 indices) and checks that no
test item is a training item of the same user (_validation.check_disjoint). On the GPU that is
host time before the first launch, while the GPU waits (bench_gpu_host.py: about 5 ms of the
12 ms of host work in a call at 10,000 users). This times both on bench_cpu.make_problem's
interactions (about 30 training and 10 test items a user), best of --repeats, and writes
<out>/validation_<date>.json and .md. No GPU needed: run it at two commits to compare.

    python benchmarks/bench_validation.py [--sizes 943x1682,10000x100000,10000x1000000]
"""
import argparse
import datetime as dt
import os
import platform
import shlex
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]
from bench_cpu import git_commit, make_problem, write_results  # noqa: E402

from gpureco import _validation  # noqa: E402


def best(fn, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="943x1682,10000x100000,10000x1000000", help="users x items, comma-separated")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    args = parser.parse_args(argv)
    rows = []
    for size in args.sizes.split(","):
        users, items = (int(x) for x in size.split("x"))
        X_train, X_test, _, _ = make_problem(users, items, 1)
        train, test = _validation.interactions(X_train, X_test)
        row = dict(users=users, items=items, train_nnz=int(X_train.nnz), test_nnz=int(X_test.nnz),
                   interactions_ms=best(lambda: _validation.interactions(X_train, X_test), args.repeats) * 1e3,
                   disjoint_ms=best(lambda: _validation.check_disjoint(train, test), args.repeats) * 1e3)
        rows.append(row)
        print(f"bench_validation: {users:,} x {items:,}: interactions {row['interactions_ms']:.3f} ms, "
              f"check_disjoint {row['disjoint_ms']:.3f} ms", flush=True)
    info = dict(date=dt.date.today().isoformat(), commit=git_commit(), platform=platform.platform(),
                cpus=os.cpu_count(), command="python " + " ".join(shlex.quote(a) for a in [sys.argv[0], *(argv or sys.argv[1:])]),
                rows=rows)
    lines = [f"# Validation of the interactions ({info['date']}, commit {info['commit']})", "",
             f"`{info['command']}`; {info['platform']}, {info['cpus']} CPUs; best of {args.repeats}.", "",
             "| users x items | training / test entries | interactions ms | check_disjoint ms | total ms |",
             "|---|---|---:|---:|---:|"]
    lines += [f"| {r['users']:,} x {r['items']:,} | {r['train_nnz']:,} / {r['test_nnz']:,} | {r['interactions_ms']:.3f} | "
              f"{r['disjoint_ms']:.3f} | {r['interactions_ms'] + r['disjoint_ms']:.3f} |" for r in rows]
    stem = write_results(args.out, f"validation_{info['date']}", info, "\n".join(lines))
    print(f"written: {stem}.json, {stem}.md")


if __name__ == "__main__":
    main()
