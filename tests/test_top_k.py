"""Top-K lists against a slow reference (sort each user's pool), on both backends, across
the GPU kernel's limits (K = 1024 and above, tiles, near-ties)."""
import numpy as np
import pytest
import scipy.sparse as sp

import gpureco
from gpureco.engine._cpu_ranks import tie_keys
from conftest import BACKENDS, random_problem, to_csr
from reference import defined_scores


def reference_top_k(scores, X_train, k, noise=False, seed=1):
    """Each user's pool sorted by (score descending, tie key ascending), NaN scores left out."""
    n_users, n_items = scores.shape
    items = np.full((n_users, k), -1)
    values = np.full((n_users, k), np.nan)
    for u in range(n_users):
        keys = tie_keys(np.full(n_items, u, dtype=np.int64), np.arange(n_items, dtype=np.int64), seed, noise)
        pool = [j for j in range(n_items) if X_train[u, j] == 0 and not np.isnan(scores[u, j])]
        ranked = sorted(pool, key=lambda j: (-scores[u, j], int(keys[j])))[:k]
        items[u, :len(ranked)] = ranked
        values[u, :len(ranked)] = scores[u, ranked]
    return items, values


def assert_lists_equal(got, want):
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


@pytest.mark.parametrize("device", BACKENDS)
@pytest.mark.parametrize("case", range(6))
def test_matches_reference(device, case):
    rng = np.random.default_rng(case)
    X_train, _, A, B = random_problem(rng, n_users=25, n_items=int(rng.integers(5, 60)), integer_factors=case % 2 == 0,
                                      dtype=np.float32 if case % 3 == 0 else np.float64)
    X_train[0] = 1  # an empty pool
    X_train[1, 1:] = 1  # a pool of one item
    noise = case % 4 == 1
    bias = rng.integers(-2, 3, size=B.shape[0]).astype(np.float64) if case % 2 else None
    scores = defined_scores(A, B, bias)
    for k in (1, 3, B.shape[0]):
        got = gpureco.top_k(A, B, k, X_train=to_csr(X_train), item_biases=bias, break_ties_with_noise=noise,
                            seed=case + 7, device=device)
        assert_lists_equal(got, reference_top_k(scores, X_train, k, noise, case + 7))


@pytest.mark.parametrize("device", BACKENDS)
def test_non_personalised_users_subset_and_nan_scores(device, rng):
    bias = np.array([1.0, 3.0, np.nan, 3.0, -np.inf, 2.0])
    X_train = sp.csr_array(np.array([[0, 1, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 0]], dtype=float))
    items, scores = gpureco.top_k(None, None, 5, X_train=X_train, item_biases=bias, users=[2, 0], device=device)
    assert items.tolist() == [[5, -1, -1, -1, -1], [3, 5, 0, 4, -1]]
    np.testing.assert_array_equal(scores, [[2.0, np.nan, np.nan, np.nan, np.nan], [3.0, 2.0, 1.0, -np.inf, np.nan]])


@pytest.mark.parametrize("device", BACKENDS)
def test_a_row_or_column_of_biases_is_one_per_item(device):
    """item_biases of shape (1, n) or (n, 1), as calc_reco_metrics takes them: without factors, n items (the row's
    length was taken for its first dimension: one item, and k=2 refused)."""
    bias = np.array([1.0, 3.0, 2.0])
    expected = gpureco.top_k(None, None, 2, item_biases=bias, device=device)
    for shaped in (bias[None, :], bias[:, None]):
        got = gpureco.top_k(None, None, 2, item_biases=shaped, device=device)
        for a, b in zip(got, expected):
            np.testing.assert_array_equal(a, b)
    assert expected[0].tolist() == [[1, 2]]


@pytest.mark.parametrize("device", BACKENDS)
@pytest.mark.parametrize("k", [1023, 1024, 1025, 3000])
def test_large_k_and_many_tiles(device, k, rng):
    """K at and above the kernel's limit; more items than one score tile (65,536) and not a
    multiple of it or of the kernel's segment; many exact ties (integer factors)."""
    n_users, n_items = 6, 70_001
    A = rng.integers(-3, 4, size=(n_users, 3)).astype(np.float32)
    B = rng.integers(-3, 4, size=(n_items, 3)).astype(np.float32)
    X_train = sp.random(n_users, n_items, density=0.3, format="csr", random_state=3)
    X_train.data[:] = 1
    got = gpureco.top_k(A, B, k, X_train=X_train, device=device)
    scores = defined_scores(A, B)
    dense = X_train.toarray()
    want_items = np.full((n_users, k), -1)
    for u in range(n_users):  # ties by item index: a stable sort of the pool by -score
        pool = np.flatnonzero(dense[u] == 0)
        want_items[u] = pool[np.argsort(-scores[u, pool], kind="stable")][:k]
    np.testing.assert_array_equal(got[0], want_items)
    np.testing.assert_array_equal(got[1], np.take_along_axis(scores, want_items, axis=1))


@pytest.mark.parametrize("device", BACKENDS)
def test_lists_agree_with_the_metrics(device, rng):
    """P@K from the lists equals calc_reco_metrics' P@K (same ranking on the same backend)."""
    X_train, X_test, A, B = random_problem(rng, n_users=30, n_items=40, integer_factors=True)
    X_test[:, 0], X_train[:, 0] = 1, 0
    items, _ = gpureco.top_k(A, B, 5, X_train=to_csr(X_train), device=device)
    hits = np.take_along_axis(X_test > 0, items, axis=1).sum(axis=1)
    got = gpureco.calc_reco_metrics(to_csr(X_train), to_csr(X_test), A, B, k=5, device=device)
    np.testing.assert_allclose(got["P@5"], hits / 5)


@pytest.mark.parametrize("bad, error, match", [
    (dict(k=0), ValueError, "'k' must be"),
    (dict(k=5), ValueError, r"'k' must be an int in the range \[1, 4\]; got 5"),
    (dict(k=10**15), ValueError, r"'k' must be an int in the range \[1, 4\]; got 1000000000000000"),
    (dict(users=[0, 9]), ValueError, r"'users' must be rows of A, in \[0, 2\]; got 9"),
    (dict(X_train=sp.csr_array((2, 4))), ValueError, r"'X_train' must have shape \(3, 4\)"),
    (dict(A=None, B=None), ValueError, "No model given"),
    (dict(B=None), ValueError, "'A' and 'B' must both be given, or both be None"),
    (dict(A=None, item_biases=np.ones(4)), ValueError, "'A' and 'B' must both be given, or both be None"),
    (dict(device="tpu"), ValueError, "'device' must be one of"),
    (dict(item_biases=np.ones(3)), ValueError, r"'item_biases' must have one entry per item of 'B' \(4\); got "
                                               r"shape \(3,\)"),
    (dict(A=None, B=None, item_biases=np.ones((2, 3))), ValueError, r"'item_biases' must be 1-dimensional"),
])
def test_errors(bad, error, match):
    kw = dict(A=np.ones((3, 2)), B=np.ones((4, 2)), k=2)
    kw.update(bad)
    with pytest.raises(error, match=match):
        gpureco.top_k(**kw)
