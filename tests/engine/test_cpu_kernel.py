"""The CPU kernel's fast paths give the numbers of the slow reference: the vector pass
(counting GR_CHUNK test items at a time, the masked tail of each segment), users whose factors
are all zero, constant rows of given scores, overflowing filter scores; and the score-block
plan (the ranking threads hold no rows of their own)."""
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import gpureco
from gpureco.engine import _engine
from reference import defined_scores, reference_metrics

ALL = dict(all_metrics=True)


def _problem(rng, n_users, n_items, n_factors, n_train, n_test, dtype=np.float32):
    A = rng.standard_normal((n_users, n_factors)).astype(dtype)
    B = rng.standard_normal((n_items, n_factors)).astype(dtype)
    train, test = [], []
    for u in range(n_users):
        items = rng.permutation(n_items)[: n_train + n_test]
        train.append(items[:n_train])
        test.append(items[n_train:])
    def csr(parts):
        r = np.repeat(np.arange(n_users), [len(p) for p in parts])
        X = sp.csr_array((np.ones(r.size), (r, np.concatenate(parts))), shape=(n_users, n_items))
        X.sort_indices()
        return X
    return csr(train), csr(test), A, B


def _same(got, want):
    assert list(got.columns) == list(want.columns)
    for column in got:
        np.testing.assert_array_equal(got[column].to_numpy(), want[column].to_numpy(), err_msg=column)


def _as_reference(X_train, X_test, A, B, k, item_biases=None, **metrics):
    """The engine against the slow reference (tests/reference.py), every metric it computed."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # rule 5 where every score is equal
        got = gpureco.calc_reco_metrics(X_train, X_test, A, B, item_biases=item_biases, k=k, device="cpu",
                                        nthreads=2, **metrics)
    want = reference_metrics(X_train.toarray(), X_test.toarray(), defined_scores(A, B, item_biases), k)
    for column in got:
        name = column.split("@")[0] + ("@K" if "@" in column else "")
        np.testing.assert_allclose(got[column].to_numpy(), want[name], rtol=1e-12, atol=1e-15, equal_nan=True,
                                   err_msg=column)
    return got


@pytest.mark.parametrize("n_test", [1, 7, 8, 9, 17, 40])  # below, at and past a chunk of 8 test items
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_vector_pass_for_any_number_of_test_items(rng, n_test, dtype):
    X_train, X_test, A, B = _problem(rng, 12, 301, 5, 23, n_test, dtype)  # segments of every length mod 8
    for metrics in (ALL, dict()):
        got = _as_reference(X_train, X_test, A, B, 5, **metrics)
        # any batch gives the same numbers
        _same(gpureco.calc_reco_metrics(X_train, X_test, A, B, k=5, device="cpu", batch_size=5, **metrics), got)


def test_near_ties_are_settled_by_the_defined_score(rng):
    """Items whose scores differ by less than the filter's error: every comparison goes exact."""
    X_train, X_test, A, B = _problem(rng, 10, 400, 3, 10, 12)
    B = np.repeat(B[:20], 20, axis=0) * (1 + 1e-7 * rng.standard_normal((400, 1))).astype(np.float32)
    _as_reference(X_train, X_test, A, B, 10, **ALL)


@pytest.mark.parametrize("biases", [False, True])
def test_users_with_zero_factors(rng, biases):
    X_train, X_test, A, B = _problem(rng, 20, 150, 4, 5, 6)
    A[::2] = 0
    A[1::4] = -0.0
    item_biases = rng.standard_normal(150) if biases else None
    got = _as_reference(X_train, X_test, A, B, 5, item_biases, **ALL)
    assert np.isnan(got["ROC_AUC"].to_numpy()[::2]).all() != biases


def test_a_zero_user_with_a_non_finite_item_factor_scores_nan(rng):
    """0 * inf is NaN: the shortcut for zero users holds only where every item factor is finite."""
    X_train, X_test, A, B = _problem(rng, 6, 50, 3, 4, 3)
    A[0] = 0
    B[7, 1] = np.inf
    got = _as_reference(X_train, X_test, A, B, 5, **ALL)
    assert np.isnan(got.to_numpy()[0]).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_constant_and_tied_rows_of_given_scores(rng, dtype):
    X_train, X_test, _, _ = _problem(rng, 9, 120, 1, 5, 4)
    scores = rng.integers(0, 4, size=(9, 120)).astype(dtype)  # many ties
    scores[3] = 2.5
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        got = gpureco.evaluate(scores, X_test, X_train, metrics=["P", "NDCG", "ROC_AUC", "PR_AUC"], k=5, device="cpu")
        as64 = gpureco.evaluate(scores.astype(np.float64), X_test, X_train, metrics=["P", "NDCG", "ROC_AUC", "PR_AUC"],
                                k=5, device="cpu")
        by_function = gpureco.evaluate(lambda users: scores[users], X_test, X_train,
                                       metrics=["P", "NDCG", "ROC_AUC", "PR_AUC"], k=5, device="cpu")
    _same(got, as64)
    _same(got, by_function)
    assert np.isnan(got.to_numpy()[3]).all()


def test_the_plan_sizes_blocks_for_the_cache_within_the_budget():
    row = 200_000 * 4  # 60 rows make CPU_BLOCK_BYTES: a block holds CPU_BLOCK_USERS (64) users
    assert _engine.cpu_plan(200_000, 4, 200 * row) == (64, 2)  # two blocks: one scored, one ranked
    assert _engine.cpu_plan(200_000, 4, 100 * row) == (64, 1)  # one full block rather than two small ones
    assert _engine.cpu_plan(200_000, 4, 41 * row) == (41, 1)  # the budget first
    assert _engine.cpu_plan(200_000, 4, row) == (1, 1)
    assert _engine.cpu_plan(200_000, 4) == (64, 2)
    assert _engine.cpu_plan(50_000, 4) == (_engine.CPU_BLOCK_BYTES // (50_000 * 4), 2)
    assert _engine.cpu_plan(1_000_000, 4) == (64, 1)
    assert _engine.cpu_plan(200_000, 4, 100 * row, batch_size=3) == (3, 2)
    assert _engine.cpu_plan(200_000, 4, 5 * row, batch_size=3) == (3, 1)
    with pytest.raises(ValueError, match=r"'max_memory' must be at least 800000 bytes for 200000 items \(one user's "
                                         r"row of 4-byte scores\); got 799999"):
        _engine.cpu_plan(200_000, 4, row - 1)


def test_the_default_budget_grows_for_huge_catalogues(monkeypatch):
    monkeypatch.setattr(_engine, "DEFAULT_MAX_MEMORY", 1000)  # as if the catalogue were huge
    assert _engine.cpu_plan(200_000, 4) == (1, 1)


WIDTH_SCRIPT = """
import hashlib, sys, warnings
import numpy as np, scipy.sparse as sp, gpureco
from gpureco.engine._cpu_ranks import vector_bytes
rng = np.random.default_rng(3)
digest = hashlib.sha256()
for dtype in (np.float32, np.float64):
    A = rng.standard_normal((40, 6)).astype(dtype)
    A[::7] = 0
    B = rng.standard_normal((333, 6)).astype(dtype)
    B[5] = B[9]  # exact ties
    X_train = sp.random(40, 333, density=0.05, format="csr", random_state=1)
    X_test = sp.random(40, 333, density=0.04, format="csr", random_state=2)
    X_test = sp.csr_array(X_test - X_test.multiply(X_train > 0))
    X_test.eliminate_zeros()
    for metrics in (dict(all_metrics=True), dict()):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            out = gpureco.calc_reco_metrics(X_train, X_test, A, B, k=7, device="cpu", as_df=False, **metrics)
        for name in sorted(out):
            digest.update(np.ascontiguousarray(out[name]).tobytes())
print(vector_bytes(), digest.hexdigest())
"""


def test_every_vector_width_gives_the_same_numbers():
    """The pass built for 16-, 32- and 64-byte vectors (the CPU's best is used; narrower ones when asked)."""
    import os
    import subprocess
    import sys
    results = {}
    for width in ("16", "32", "64"):
        env = dict(os.environ, GPURECO_VECTOR_BYTES=width)
        out = subprocess.run([sys.executable, "-c", WIDTH_SCRIPT], env=env, capture_output=True, text=True, check=True)
        used, digest = out.stdout.split()
        results[used] = digest
    assert "16" in results
    assert len(set(results.values())) == 1, results


@pytest.mark.parametrize("seed", range(6))
def test_shared_entries_equal_the_set_intersection(seed):
    """check_disjoint's count (_cpu_ranks.shared_entries) against sets of (row, column) pairs:
    empty rows, rows of very unequal lengths, an entry shared in the last column, entries in
    the first, nothing shared, columns set by earlier rows (dense rows: each row's bits must be
    cleared before the next)."""
    from gpureco._validation import as_csr
    from gpureco.engine._cpu_ranks import shared_entries
    rng = np.random.default_rng(seed)
    n_rows, n_cols = int(rng.integers(1, 40)), int(rng.integers(1, 3000))
    dense = [rng.random((n_rows, n_cols)) < p for p in rng.choice([0.0, 0.002, 0.05, 0.5], 2)]
    row = rng.integers(n_rows)
    dense[0][row, n_cols - 1] = dense[1][row, n_cols - 1] = True
    dense[0][rng.integers(n_rows), 0] = dense[1][rng.integers(n_rows), 0] = True
    if seed % 3 == 0:  # the second the first's complement: nothing shared
        dense[1] = ~dense[0]
    a, b = (as_csr(sp.csr_array(d.astype(float)), name) for d, name in zip(dense, "ab"))
    pairs = sorted(zip(*np.nonzero(dense[0] & dense[1])))
    n, row, column = shared_entries(a.indptr, a.indices, b.indptr, b.indices, n_cols)
    assert n == len(pairs)
    assert (row, column) == (tuple(int(x) for x in pairs[0]) if pairs else (-1, -1))
