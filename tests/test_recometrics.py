"""Agreement with the recometrics package itself, per user, on tie-free data; and the places
where gpureco differs on purpose (docs/metrics.md), each shown by its own test."""
import warnings

import numpy as np
import pytest

import gpureco
from conftest import random_problem, to_csr

recometrics = pytest.importorskip("recometrics")

ALL = ("P@K", "TP@K", "R@K", "AP@K", "TAP@K", "NDCG@K", "Hit@K", "RR@K", "ROC_AUC", "PR_AUC")


def both(X_train, X_test, A, B, **kw):
    kw = dict(as_df=False, break_ties_with_noise=False, nthreads=1, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = gpureco.calc_reco_metrics(to_csr(X_train), to_csr(X_test), A, B, **kw)
        theirs = recometrics.calc_reco_metrics(to_csr(X_train), to_csr(X_test), A, B, **kw)
    return ours, theirs


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("k", [1, 5, 10])
def test_all_metrics_agree_per_user(seed, k):
    rng = np.random.default_rng(seed)
    X_train, X_test, A, B = random_problem(rng, n_users=60, n_items=80, n_factors=8, graded=seed % 2 == 1)
    X_train[:3] = 0  # cold-start users are evaluated by both by default
    ours, theirs = both(X_train, X_test, A, B, k=k, all_metrics=True)
    assert np.sum(~np.isnan(ours["P@K"])) > 50
    for name in ALL:
        np.testing.assert_allclose(ours[name], theirs[name], rtol=1e-9, atol=1e-12, equal_nan=True, err_msg=name)


def test_cumulative_agrees_where_recometrics_is_right():
    rng = np.random.default_rng(7)
    X_train, X_test, A, B = random_problem(rng, n_users=60, n_items=80, n_factors=8, test_density=0.2)
    ours, theirs = both(X_train, X_test, A, B, k=6, all_metrics=True, cumulative=True)
    n_test = (X_test != 0).sum(axis=1)
    for name in ALL:
        if name == "NDCG@K":  # recometrics is wrong when |T| < K: compare only where |T| >= K
            np.testing.assert_allclose(ours[name][n_test >= 6], theirs[name][n_test >= 6], rtol=1e-9, equal_nan=True)
        else:
            np.testing.assert_allclose(ours[name], theirs[name], rtol=1e-9, atol=1e-12, equal_nan=True, err_msg=name)


def test_differs_on_purpose_cumulative_ndcg_with_few_test_items():
    rng = np.random.default_rng(8)
    X_train, X_test, A, B = random_problem(rng, n_users=60, n_items=80, n_factors=8, graded=True)
    ours, theirs = both(X_train, X_test, A, B, k=8, ndcg=True, cumulative=True)
    for k in (2, 5, 8):  # gpureco's cumulative column k equals its single-k value
        single = gpureco.calc_reco_metrics(to_csr(X_train), to_csr(X_test), A, B, k=k, ndcg=True,
                                           as_df=False)["NDCG@K"]
        np.testing.assert_allclose(ours["NDCG@K"][:, k - 1], single, rtol=1e-12, equal_nan=True)
    n_test = (X_test != 0).sum(axis=1)
    few = (n_test < 8) & ~np.isnan(ours["NDCG@K"][:, -1])
    assert not np.allclose(ours["NDCG@K"][few, -1], theirs["NDCG@K"][few, -1])


def test_differs_on_purpose_min_pos_test_above_one():
    rng = np.random.default_rng(9)
    X_train, X_test, A, B = random_problem(rng, n_users=60, n_items=80, n_factors=8, test_density=0.03)
    ours, theirs = both(X_train, X_test, A, B, k=5, min_pos_test=3)
    few = (X_test != 0).sum(axis=1) < 3
    assert few.any()
    assert np.all(np.isnan(ours["P@K"][few]))
    assert not np.all(np.isnan(theirs["P@K"][few]))  # recometrics ignores min_pos_test > 1
    np.testing.assert_allclose(ours["P@K"][~few], theirs["P@K"][~few], rtol=1e-9, equal_nan=True)


def test_differs_on_purpose_pool_smaller_than_k():
    rng = np.random.default_rng(10)
    X_train, X_test, A, B = random_problem(rng, n_users=30, n_items=12, n_factors=4, train_density=0.6,
                                           test_density=0.15)
    ours, theirs = both(X_train, X_test, A, B, k=6, all_metrics=True)
    n_pool, n_test = 12 - (X_train != 0).sum(axis=1), (X_test != 0).sum(axis=1)
    small = (n_pool < 6) & (n_test > 0) & (n_pool > n_test)  # excludes NaN rule 6 (no negatives)
    assert small.any()
    assert np.all(np.isnan(theirs["ROC_AUC"][small]))  # recometrics: every metric NaN
    assert not np.any(np.isnan(ours["ROC_AUC"][small]))  # gpureco: the AUCs do not depend on K
    assert np.all(np.isnan(ours["P@K"][small]))


def test_differs_on_purpose_pr_auc_alone():
    rng = np.random.default_rng(11)
    X_train, X_test, A, B = random_problem(rng, n_users=60, n_items=80, n_factors=8)
    # recometrics insists on one of P, AP, NDCG, Hit, RR, ROC: RR is the one that does not touch PR_AUC
    ours_alone, theirs_alone = both(X_train, X_test, A, B, k=5, pr_auc=True, rr=True, precision=False,
                                    average_precision=False, ndcg=False)
    ours_all, theirs_all = both(X_train, X_test, A, B, k=5, all_metrics=True)
    np.testing.assert_allclose(ours_alone["PR_AUC"], ours_all["PR_AUC"], rtol=1e-12, equal_nan=True)
    np.testing.assert_allclose(ours_all["PR_AUC"], theirs_all["PR_AUC"], rtol=1e-9, equal_nan=True)
    assert not np.allclose(theirs_alone["PR_AUC"], theirs_all["PR_AUC"], equal_nan=True)
