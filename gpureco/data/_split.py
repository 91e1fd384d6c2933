"""split_reco_train_test: recometrics' three train/test split modes, vectorised and seeded."""
from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp

from .. import _validation as v

SPLIT_TYPES = ("all", "separated", "joined")


def _n_test_items(nnz, items_test_fraction):
    """round(nnz * fraction), halves away from zero as C's round (recometrics) does."""
    return np.floor(nnz * items_test_fraction + 0.5).astype(np.int64)


def _eligible(nnz, n_test, n_items, min_items_pool, min_pos_test, consider_cold_start):
    """Users whose split honours every minimum (recometrics' criteria for test users; with
    min_pos_test=0, a user whose share of test items rounds to 0 is a test user too)."""
    return ((nnz > 0) & (n_test >= min_pos_test) & (n_items - (nnz - n_test) >= min_items_pool)
            & (consider_cold_start | (n_test < nnz)) & (nnz + 1 < n_items))


def _rows(X, rows):
    return X[rows] if rows.size else sp.csr_array((0, X.shape[1]), dtype=X.dtype)


def _split_rows(X, n_test, rng):
    """Per row, n_test[row] entries chosen uniformly at random go to test, the rest to train."""
    row = np.repeat(np.arange(X.shape[0], dtype=np.int64), np.diff(X.indptr))
    order = np.lexsort((rng.random(X.nnz), row))  # a random order of each row's entries
    position = np.empty(X.nnz, dtype=np.int64)
    position[order] = np.arange(X.nnz) - X.indptr[row[order]]
    is_test = position < n_test[row]

    def pick(mask):
        indptr = np.concatenate([[0], np.cumsum(np.bincount(row[mask], minlength=X.shape[0]))])
        return sp.csr_array((X.data[mask], X.indices[mask], indptr), shape=X.shape)

    return pick(~is_test), pick(is_test)


def split_reco_train_test(X, split_type="separated", users_test_fraction=0.1, max_test_users=10000,
                          items_test_fraction=0.3, min_items_pool=2, min_pos_test=1,
                          consider_cold_start=False, seed=1):
    """Split implicit-feedback data into train and test sets, as recometrics does.

    Each test user's stored entries are split at random: round(nnz * items_test_fraction)
    of them (halves rounded up) go to the test set, the rest to the training set. The
    outputs, their order and their types are those of recometrics' code (0.1.6), which its
    docstring describes otherwise for "separated": code that unpacks recometrics' result
    unpacks gpureco's the same way.

    Parameters
    ----------
    X : sparse matrix or array-like of shape (n_users, n_items)
        Interactions; float32 values are kept, other types become float64. Not modified.
    split_type : {"all", "separated", "joined"}, default="separated"
        "all": split every user (outputs keep X's rows); the minimums below do not apply, as
        in recometrics (a user with one item and items_test_fraction >= 0.5 has it in test).
        "separated": choose test users at random among those that meet the minimums and
        split only them; the other users' rows are returned untouched in X_rem.
        "joined": as "separated", but X_train is the test users' training rows followed by
        the remaining users' rows.
    users_test_fraction : float in (0, 1), or None, default=0.1
        Fraction of users to test: round(n_users * fraction), halves to even as Python's
        round (recometrics), at least 1, at most max_test_users; None: take
        max_test_users. Ignored for "all".
    max_test_users : int or None, default=10000
        Cap on the number of test users (None or 0: no cap). Ignored for "all".
    items_test_fraction : float in (0, 1), default=0.3
    min_items_pool : int, default=2
        A test user keeps at least this many items outside its training set.
    min_pos_test : int, default=1
        A test user gets at least this many test items; with 0, a user with interactions
        whose share rounds to no test item may be a test user (with an empty test row).
    consider_cold_start : bool, default=False
        Allow test users whose every item goes to test (no training items).
    seed : int, default=1

    Returns
    -------
    "all": (X_train, X_test); "separated": (X_rem, X_train, X_test, users_test);
    "joined": (X_train, X_test, users_test). Sparse ``csr_array`` matrices with sorted
    indices; users_test is the sorted int32 array of the test users' rows in X, which are the
    rows of X_train and X_test ("separated"; with "joined", the first rows of X_train);
    X_rem keeps the other users in their original order.

    Notes
    -----
    As recometrics: besides the minimums, a test user also needs at least two items outside
    its row of X. Unlike recometrics: the random choices come from another generator, so
    the same seed gives a split of the same kind, not the same split; X is never modified
    (recometrics sorts its indices in place); every argument error is a ValueError or
    TypeError that names the argument (recometrics asserts).

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp, gpureco
    >>> X = sp.random(100, 50, density=0.2, format="csr", random_state=1)
    >>> X_rem, X_train, X_test, users_test = gpureco.split_reco_train_test(X, users_test_fraction=0.1)
    >>> X_rem.shape, X_train.shape, X_test.shape, users_test.dtype
    ((90, 50), (10, 50), (10, 50), dtype('int32'))
    """
    split_type = v.check_choice(split_type, "split_type", SPLIT_TYPES)
    items_test_fraction = v.check_fraction(items_test_fraction, "items_test_fraction")
    if users_test_fraction is not None:
        users_test_fraction = v.check_fraction(users_test_fraction, "users_test_fraction")
    if max_test_users is not None:
        max_test_users = v.check_int(max_test_users, "max_test_users", low=0)
    min_items_pool = v.check_int(min_items_pool, "min_items_pool", low=0)
    min_pos_test = v.check_int(min_pos_test, "min_pos_test", low=0)
    seed = v.check_seed(seed)
    X = v.check_finite(v.as_csr(X, "X", values="float"), "X")
    n_users, n_items = X.shape
    if n_users == 0 or n_items == 0 or X.nnz == 0:
        raise ValueError(f"'X' must have stored non-zero entries; got shape {X.shape} with {X.nnz} entries.")
    if min_pos_test >= n_items:
        raise ValueError(f"'min_pos_test' must be smaller than the number of items ({n_items}); got {min_pos_test}.")
    if min_items_pool >= n_items:
        raise ValueError(f"'min_items_pool' must be smaller than the number of items ({n_items}); got {min_items_pool}.")

    rng = np.random.default_rng(seed)
    nnz = np.diff(X.indptr)
    n_test = _n_test_items(nnz, items_test_fraction)
    eligible = _eligible(nnz, n_test, n_items, min_items_pool, min_pos_test,
                         v.check_flag(consider_cold_start, "consider_cold_start"))
    if split_type == "all":
        return _split_rows(X, n_test, rng)

    if n_users < 2:
        raise ValueError(f"'X' must have at least 2 rows for split_type={split_type!r}; got {n_users}.")
    cap = n_users if not max_test_users else max_test_users
    if users_test_fraction is None:
        if cap > n_users:
            warnings.warn("'max_test_users' is larger than the number of users; taking all.", stacklevel=2)
        n_take = min(cap, n_users)
    else:
        n_take = n_users * users_test_fraction
        if n_take < 1:
            warnings.warn("'users_test_fraction' implies less than one test user; taking 1.", stacklevel=2)
        n_take = min(max(1, round(n_take)), cap)  # Python's round, halves to even: recometrics
    shuffled = rng.permutation(n_users)
    candidates = shuffled[eligible[shuffled]]
    if candidates.size == 0:
        raise ValueError("No user meets the criteria for test inclusion (min_pos_test, min_items_pool, "
                         "consider_cold_start, items_test_fraction); relax them.")
    users_test = np.sort(candidates[:n_take]).astype(np.int32)
    rest = np.setdiff1d(np.arange(n_users, dtype=np.int64), users_test)
    X_train, X_test = _split_rows(_rows(X, users_test), n_test[users_test], rng)
    X_rem = _rows(X, rest)
    if split_type == "separated":
        return X_rem, X_train, X_test, users_test
    return sp.vstack([X_train, X_rem], format="csr"), X_test, users_test
