"""gpureco.dask on one machine: the CPU engine on a LocalCluster of 1 and 2 worker processes (one
thread each), against the single-machine call, at a 1M-item catalogue.

    python benchmarks/bench_dask.py --users 4000 --items 1000000 --factors 32

Every run is timed whole (the item factors broadcast to the workers, the partitions' transfers,
the ranking, the results gathered) and checked to give the single-machine numbers bit for bit.
Each run is the best of --repeat rounds, every run once
per round (the clusters stay up across rounds, as for a nightly evaluation; B is broadcast again by
every call). The time per 1M users is extrapolated linearly from --users (each user's ranking costs the same;
the fixed costs, such as broadcasting B, are then counted as if they grew with the users, so the
extrapolation errs on the slow side). Writes results/dask_<date>.json and .md.
"""
import argparse
import contextlib
import os
import platform
import sys
import time
import warnings

import numpy as np
import pandas as pd
import scipy.sparse as sp

import gpureco

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_cpu import git_commit, versions, write_results  # noqa: E402

TOP_K = dict(precision=True, trunc_precision=True, recall=True, average_precision=True,
             trunc_average_precision=True, ndcg=True, hit=True, rr=True)


def problem(n_users, n_items, n_factors, per_user):
    rng = np.random.default_rng(0)
    A = rng.standard_normal((n_users, n_factors), dtype=np.float32)
    B = rng.standard_normal((n_items, n_factors), dtype=np.float32)
    rows = np.repeat(np.arange(n_users), per_user)
    X = sp.csr_array((np.ones(rows.size), (rows, rng.integers(0, n_items, size=rows.size))), shape=(n_users, n_items))
    X_train, X_test = gpureco.split_reco_train_test(X, "all", seed=1)[:2]
    return X_train, X_test, A, B


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def seconds_of(function, *args, **kwargs):
    """(the result, its wall time)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        start = time.perf_counter()
        out = function(*args, **kwargs)
        return out, time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=4_000)
    parser.add_argument("--items", type=int, default=1_000_000)
    parser.add_argument("--factors", type=int, default=32)
    parser.add_argument("--per-user", type=int, default=40, help="interactions per user before the split")
    parser.add_argument("-k", type=int, default=10)
    parser.add_argument("--workers", default="1,2", help="LocalCluster sizes to time (worker processes, 1 thread each)")
    parser.add_argument("--metrics", choices=["all", "top-K"], default="top-K")
    parser.add_argument("--repeat", type=int, default=3, help="rounds of calls; each run's best time is kept")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    args = parser.parse_args()

    import gpureco.dask
    from distributed import Client, LocalCluster

    X_train, X_test, A, B = problem(args.users, args.items, args.factors, args.per_user)
    metrics = dict(all_metrics=True) if args.metrics == "all" else TOP_K
    per_million = 1_000_000 / args.users
    single = [(f"single machine, {t} thread{'s' * (t > 1)}", 0, t) for t in (1, 2)]
    clustered = [(f"LocalCluster, {w} worker{'s' * (w > 1)} x 1 thread", w, w) for w in map(int, args.workers.split(","))]
    rows = [{"run": run, "workers": workers, "threads": threads, "seconds": float("inf")}
            for run, workers, threads in single + clustered]
    with contextlib.ExitStack() as stack:
        clients = {workers: stack.enter_context(Client(stack.enter_context(LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0", memory_limit=None))))
            for _, workers, _ in clustered}
        # rounds: every run once per round, so that a busy moment of the machine does not fall on one run alone
        for _ in range(args.repeat):
            for row in rows:
                if row["workers"] == 0:
                    expected, seconds = seconds_of(gpureco.calc_reco_metrics, X_train, X_test, A, B, k=args.k,
                                                   nthreads=row["threads"], device="cpu", **metrics)
                else:
                    got, seconds = seconds_of(gpureco.dask.calc_reco_metrics, X_train, X_test, A, B, k=args.k,
                                              device="cpu", client=clients[row["workers"]], **metrics)
                    pd.testing.assert_frame_equal(got, expected, check_exact=True)  # bit for bit
                row["seconds"] = min(row["seconds"], seconds)
    for row in rows:
        row["users_per_second"] = args.users / row["seconds"]
        row["seconds_per_1M_users"] = row["seconds"] * per_million
    base = next(r for r in rows if r["workers"] == 1)["seconds"] if any(r["workers"] == 1 for r in rows) else None

    date = time.strftime("%Y-%m-%d")
    info = {
        "command": " ".join(["python"] + sys.argv),
        "commit": git_commit(),
        "date": date,
        "machine": f"{os.cpu_count()} CPUs, {cpu_model()}",
        "versions": versions(),
        "problem": f"{args.users} users x {args.items} items x {args.factors} factors (float32), k={args.k}, "
                   f"{X_train.nnz} train / {X_test.nnz} test interactions, metrics={args.metrics}",
        "extrapolation": f"seconds per 1M users = seconds x {per_million:g} (linear in the users)",
        "runs": [{k: (round(v, 2) if isinstance(v, float) else v) for k, v in row.items()} for row in rows],
    }
    lines = ["| run | seconds | users/s | seconds per 1M users (extrapolated) | speed-up over 1 worker |",
             "|---|---:|---:|---:|---:|"]
    for row in rows:
        speedup = f"{base / row['seconds']:.2f}x" if base and row["workers"] else ""
        lines.append(f"| {row['run']} | {row['seconds']:.1f} | {row['users_per_second']:,.0f} | "
                     f"{row['seconds_per_1M_users']:,.0f} ({row['seconds_per_1M_users'] / 3600:.2f} h) | {speedup} |")
    table = "\n".join(lines)
    text = (f"# gpureco.dask on one machine (CPU)\n\n"
            f"`{info['command']}`, commit {info['commit']}, {info['machine']}, {date}.\n\n"
            f"Problem: {info['problem']}. Every Dask run gave the single-machine numbers bit for bit.\n"
            f"Per 1M users: {info['extrapolation']}; the broadcast of B ({B.nbytes / 2**20:.0f} MiB) and the "
            f"cluster's per-call costs are then counted as if they grew with the users. Best of {args.repeat} rounds "
            f"(each run once per round). 'threads' are ranking threads: the single-machine runs' BLAS uses every core, while Dask "
            f"starts its workers with one BLAS thread each (OPENBLAS_NUM_THREADS=1).\n\n{table}\n")
    stem = write_results(args.out, f"dask_{date}", info, text)
    print(table)
    print(f"written: {stem}.json, {stem}.md")


if __name__ == "__main__":
    main()
