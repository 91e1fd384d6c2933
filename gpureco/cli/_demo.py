"""The demo: generated data, a split by time, two baselines, every metric, a summary and a report."""
from __future__ import annotations

import time
import warnings

import numpy as np
from scipy.sparse.linalg import svds

from .._recometrics import calc_reco_metrics
from .._top_k import top_k
from ..analysis._report import headline_columns, write_report
from ..data import _io
from ..data._datasets import make_interactions
from ..data._interactions import to_csr
from ..data._splitters import split_last_per_user
from ._views import item_views


def most_popular(X_train):
    """Item scores of the most-popular baseline: how many training interactions each item has."""
    return np.bincount(X_train.indices, minlength=X_train.shape[1]).astype(np.float64)


def pure_svd(X_train, n_factors, seed):
    """PureSVD (Cremonesi et al., 2010): scores X V Vᵀ from the top singular vectors of X_train,
    as factors (A = X V, B = V)."""
    _, _, vt = svds(X_train.astype(np.float64), k=n_factors, random_state=seed)
    B = np.ascontiguousarray(vt.T)
    return np.asarray(X_train @ B), B


PURE_SVD_FACTORS = 16


def run_demo(n_users=10_000, n_items=3_000, *, k=10, n_factors=PURE_SVD_FACTORS, seed=0, device="auto",
             report="gpureco_demo_report.html", echo=print):
    """Run the demo; returns ({model: per-user frame}, report path or None). `echo` prints progress."""
    data = make_interactions(n_users, n_items, seed=seed)
    train, test = split_last_per_user(data, fraction=0.2, min_train=1)
    X_train, X_test, ids = to_csr(train, test)
    echo(f"data: gpureco.datasets.make_interactions({n_users}, {n_items}, seed={seed}): {len(data):,} "
         f"interactions of {len(ids.users):,} users with {len(ids.items):,} items")
    echo(f"split: the latest 20% of each user's interactions are its test set ({len(train):,} train / "
         f"{len(test):,} test)")
    n_factors = min(n_factors, min(X_train.shape) - 1)
    # the baseline first: compare's differences are then "PureSVD - most popular"
    models = {"most popular": (None, None, most_popular(X_train)),
              "PureSVD": pure_svd(X_train, n_factors, seed)}
    results = {}
    for name, (A, B, *biases) in models.items():
        tick = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # the NaN counts are echoed below (none with -q)
            results[name] = calc_reco_metrics(X_train, X_test, A, B, k=k, item_biases=biases[0] if biases else None,
                                              all_metrics=True, cumulative=True, device=device)
        echo(f"evaluated {name}: {X_test.shape[0]:,} users, every metric at K=1..{k}, "
             f"in {time.perf_counter() - tick:.2f} s")
        reasons = results[name].attrs.get("nan_reasons", {})
        if reasons:
            echo(f"  users with NaN metrics, by rule of docs/metrics.md: "
                 f"{'; '.join(f'{rule}: {n:,}' for rule, n in reasons.items())}")
    path = None
    if report:  # written whole or not at all
        notes = [f"{len(data):,} generated interactions ({n_users:,} users x {n_items:,} items, seed {seed}); the "
                 f"latest 20% of each user's interactions held out; PureSVD with {n_factors} factors against "
                 f"most-popular; K=1..{k}."]
        lists = {name: top_k(A, B, k, X_train, item_biases=biases[0] if biases else None, device=device)[0]
                 for name, (A, B, *biases) in models.items()}
        path = _io.write_whole(report, lambda tmp: write_report(results, tmp, activity=np.diff(X_train.indptr),
                                                                 title="gpureco demo", notes=notes,
                                                                 **item_views(lists, X_train, X_test, k)))
    return {name: frame[headline_columns(frame)] for name, frame in results.items()}, results, path
