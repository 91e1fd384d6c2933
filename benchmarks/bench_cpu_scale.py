"""gpureco's CPU engine on a large catalogue: time and peak memory (RSS) for one problem.

    python benchmarks/bench_cpu_scale.py --users 50000 --items 1000000 --factors 32

Shows that memory stays bounded by the inputs plus `max_memory` (the score block) whatever
the number of users. Writes results/cpu_scale_<users>x<items>.json and .md.
"""
import argparse
import os
import platform
import resource
import subprocess
import sys
import time

import numpy as np
import scipy.sparse as sp

import gpureco

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_cpu import write_results  # noqa: E402


def peak_rss_gib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=50_000)
    parser.add_argument("--items", type=int, default=1_000_000)
    parser.add_argument("--factors", type=int, default=32)
    parser.add_argument("--per-user", type=int, default=40, help="interactions per user before the split")
    parser.add_argument("-k", type=int, default=10)
    parser.add_argument("--nthreads", type=int, default=2)
    parser.add_argument("--max-memory-mib", type=int, default=256)
    parser.add_argument("--metrics", choices=["all", "top-K"], default="top-K")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    A = rng.standard_normal((args.users, args.factors), dtype=np.float32)
    B = rng.standard_normal((args.items, args.factors), dtype=np.float32)
    rows = np.repeat(np.arange(args.users), args.per_user)
    X = sp.csr_array((np.ones(rows.size), (rows, rng.integers(0, args.items, size=rows.size))),
                     shape=(args.users, args.items))
    X_train, X_test = gpureco.split_reco_train_test(X, "all", seed=1)
    rss_inputs = peak_rss_gib()
    metrics = dict(all_metrics=True) if args.metrics == "all" else dict(
        precision=True, trunc_precision=True, recall=True, average_precision=True,
        trunc_average_precision=True, ndcg=True, hit=True, rr=True)
    start = time.perf_counter()
    df = gpureco.calc_reco_metrics(X_train, X_test, A, B, k=args.k, nthreads=args.nthreads,
                                   max_memory=args.max_memory_mib * 2**20, **metrics)
    seconds = time.perf_counter() - start
    result = {
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
        "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip(),
        "machine": f"{os.cpu_count()} CPUs, {platform.processor() or platform.machine()}",
        "problem": f"{args.users} users x {args.items} items x {args.factors} factors, k={args.k}, "
                   f"{X_train.nnz} train / {X_test.nnz} test interactions, metrics={args.metrics}",
        "seconds": round(seconds, 2), "users_per_second": round(args.users / seconds, 1),
        "peak_rss_gib_after_inputs": round(rss_inputs, 2), "peak_rss_gib_after_evaluation": round(peak_rss_gib(), 2),
        "max_memory_mib": args.max_memory_mib, "mean": {c: round(float(v), 6) for c, v in df.mean().items()},
    }
    name = f"cpu_scale_{args.users}x{args.items}_{args.metrics}"
    table = "\n".join(f"| {key} | {value} |" for key, value in result.items() if key != "mean")
    write_results(args.out, name, result, f"# gpureco CPU engine at scale\n\n| | |\n|---|---|\n{table}\n")
    print(table)


if __name__ == "__main__":
    main()
