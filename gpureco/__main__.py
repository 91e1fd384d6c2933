"""`python -m gpureco demo` (or `gpureco demo`): a small end-to-end evaluation on generated data."""
from __future__ import annotations

import argparse
import time

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import svds

from . import calc_reco_metrics, split_reco_train_test


def generate_interactions(n_users, n_items, n_factors, per_user, seed):
    """Implicit feedback from low-rank tastes and power-law item popularity (deterministic)."""
    rng = np.random.default_rng(seed)
    tastes = rng.standard_normal((n_users, n_factors))
    traits = rng.standard_normal((n_items, n_factors))
    popularity = np.log(1.0 / np.arange(1, n_items + 1) ** 0.8)
    rows, cols = [], []
    for begin in range(0, n_users, 1000):
        logits = tastes[begin: begin + 1000] @ traits.T + popularity
        logits += rng.gumbel(size=logits.shape)  # Gumbel top-k: sampling without replacement
        counts = rng.poisson(per_user, size=logits.shape[0]).clip(1, n_items - 1)
        chosen = np.argsort(-logits, axis=1)
        for u, c in enumerate(counts):
            rows.append(np.full(c, begin + u))
            cols.append(chosen[u, :c])
    rows, cols = np.concatenate(rows), np.concatenate(cols)
    values = rng.integers(1, 6, size=rows.size).astype(np.float64)
    return sp.csr_array((values, (rows, cols)), shape=(n_users, n_items))


def demo(n_users=5000, n_items=2000, k=10, seed=1):
    X = generate_interactions(n_users, n_items, 16, 30, seed)
    X_train, X_test, X_rem, users = split_reco_train_test(X, "separated",
                                                          users_test_fraction=0.2, seed=seed)
    # PureSVD fitted on the other users; test users are folded in from their training rows
    _, _, vt = svds(X_rem.astype(np.float64), k=32, random_state=seed)
    B = vt.T
    A = X_train @ B
    start = time.perf_counter()
    per_user = calc_reco_metrics(X_train, X_test, A, B, k=k, all_metrics=True)
    seconds = time.perf_counter() - start
    popular = np.asarray(X_rem.sum(axis=0)).ravel()
    baseline = calc_reco_metrics(X_train, X_test, None, None, k=k, item_biases=popular, all_metrics=True)
    table = (per_user.mean().to_frame("PureSVD").join(baseline.mean().to_frame("most popular")))
    print(f"gpureco demo: {X.shape[0]} users x {X.shape[1]} items, {X.nnz} interactions; "
          f"{len(users)} test users, K={k}")
    print(table.round(4).to_string())
    print(f"evaluated {len(users)} users in {seconds:.3f} s on the CPU")
    return table


def main(argv=None):
    parser = argparse.ArgumentParser(prog="gpureco", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("demo", help="evaluate two baselines on generated data")
    run.add_argument("--users", type=int, default=5000)
    run.add_argument("--items", type=int, default=2000)
    run.add_argument("-k", type=int, default=10)
    run.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    demo(args.users, args.items, args.k, args.seed)


if __name__ == "__main__":
    main()
