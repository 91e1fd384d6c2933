#!/usr/bin/env python
"""Evaluation on heavily tied scores: many test items a user of the same defined score.

A model with few distinct scores (integer factors in {0, 1}, two of them: scores 0, 1 or 2)
puts thousands of a user's test items, and most of the pool, in three tie groups. Every pool
item then lies inside a test item's band and is settled by its defined score and its place
among the tied test items (gr_count_outranking / the CPU engine's count_outranking; speed log
change 19: a bisection, where it was a scan of the tie group: n/2 reads for n tied test items).
Times calc_reco_metrics (P, AP, NDCG at K = 10) with ties broken by item and by noise, on the
CPU and, where one is seen, on the GPU (tiles, and fused with --fused). Writes
<out>/ties_<date>_<device>.json and .md.

    python benchmarks/bench_ties.py            # 20 users x 200,000 items, 5,000 test items each
"""
import argparse
import datetime as dt
import os
import platform
import shlex
import sys
import time
import warnings

import numpy as np
import scipy.sparse as sp

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_cpu import git_commit, write_results  # noqa: E402


def make_problem(n_users, n_items, n_test, n_train, seed=0):
    rng = np.random.default_rng(seed)
    A = rng.integers(0, 2, size=(n_users, 2)).astype(np.float32)
    A[:, 0] = 1
    B = rng.integers(0, 2, size=(n_items, 2)).astype(np.float32)  # scores in {0, 1, 2}
    test, train = [], []
    for _ in range(n_users):
        items = rng.choice(n_items, n_test + n_train, replace=False)
        test.append(items[:n_test])
        train.append(items[n_test:])

    def csr(cols):
        rows = np.repeat(np.arange(n_users), [len(c) for c in cols])
        return sp.csr_matrix((np.ones(rows.shape[0], np.float32), (rows, np.concatenate(cols))),
                             shape=(n_users, n_items))
    return csr(train), csr(test), A, B


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--items", type=int, default=200_000)
    parser.add_argument("--test", type=int, default=5_000, help="test items a user")
    parser.add_argument("--train", type=int, default=1_000, help="training items a user")
    parser.add_argument("--fused", action="store_true", help="also the GPU's fused kernels (_gpu.FUSED)")
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    args = parser.parse_args()
    warnings.simplefilter("ignore", RuntimeWarning)
    import gpureco
    from gpureco.engine import _gpu
    X_train, X_test, A, B = make_problem(args.users, args.items, args.test, args.train)
    devices = ["cpu"] + (["gpu"] + (["gpu-fused"] if args.fused else []) if gpureco.gpu_available() else [])
    rows, first = [], {}
    for device in devices:
        _gpu.FUSED = device == "gpu-fused"
        for noise in (False, True):
            kw = dict(k=10, device=device.split("-")[0], break_ties_with_noise=noise, as_df=False)
            gpureco.calc_reco_metrics(X_train[:1], X_test[:1], A[:1], B, **kw)  # warm-up (compilation)
            start = time.perf_counter()
            out = gpureco.calc_reco_metrics(X_train, X_test, A, B, **kw)
            seconds = time.perf_counter() - start
            same = first.setdefault(noise, out) is out or all(
                np.array_equal(out[name], first[noise][name], equal_nan=True) for name in out)
            rows.append(dict(device=device, noise=noise, seconds=seconds, ndcg=float(np.nanmean(out["NDCG@K"])),
                             identical_to_cpu=bool(same)))
            print(f"{device:>9} noise={noise!s:>5}: {seconds:.3f} s, identical to the CPU: {same}", flush=True)
    info = {"date": dt.date.today().isoformat(), "commit": git_commit(), "machine": platform.platform(),
            "cpus": os.cpu_count(), "command": "python " + " ".join(map(shlex.quote, sys.argv)),
            "problem": dict(users=args.users, items=args.items, test=args.test, train=args.train), "results": rows}
    lines = [f"# Heavily tied scores ({info['date']}, commit {info['commit']})", "",
             f"`{info['command']}`; {info['machine']}, {info['cpus']} CPUs. {args.users} users x {args.items:,} items, "
             f"{args.test:,} test and {args.train:,} training items a user, scores in {{0, 1, 2}}; calc_reco_metrics "
             "(P, AP, NDCG at K = 10).", "",
             "| device | ties broken by | seconds | mean NDCG@10 | identical to the CPU |", "|---|---|---:|---:|---|"]
    lines += [f"| {r['device']} | {'noise' if r['noise'] else 'item'} | {r['seconds']:.3f} | {r['ndcg']:.6f} | "
              f"{r['identical_to_cpu']} |" for r in rows]
    text = "\n".join(lines) + "\n"
    print(text)
    stem = write_results(args.out, f"ties_{info['date']}_{'gpu' if len(devices) > 1 else 'cpu'}", info, text)
    print(f"written: {stem}.json, {stem}.md")


if __name__ == "__main__":
    main()
