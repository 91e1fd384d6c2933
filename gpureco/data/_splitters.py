"""Train/test splits per user (leave-k-out, last by time), by a global time cut-off, and k-fold over users.

Every splitter takes an interaction frame (columns user, item[, value][, timestamp], any id
types) or a sparse matrix (rows are users), and returns the same kind of object: frames keep
their ids and index (rows are never renumbered), matrices keep their shape. Each interaction
goes to exactly one side. Splits by time need a frame with a timestamp column.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import scipy.sparse as sp

from .. import _validation as v
from ._interactions import RowError, check_columns
from ._split import _n_test_items


class _Data:
    """The rows of `data` as per-row user codes, with a way to split them by a boolean mask."""

    def __init__(self, data, user, item, timestamp=None, name="data"):
        self.frame = None
        if isinstance(data, pd.DataFrame):
            check_columns(data, name, (user, item) + ((timestamp,) if timestamp else ()))
            for col in (user, item) + ((timestamp,) if timestamp else ()):
                missing = data[col].isna().to_numpy()
                if missing.any():
                    row = int(np.flatnonzero(missing)[0])
                    raise RowError(f"'{name}' column {col!r} has {int(missing.sum())} missing values, the first "
                                   f"at row {row}.", name, row)
            duplicated = data.duplicated([user, item]).to_numpy()
            if duplicated.any():
                row = int(np.flatnonzero(duplicated)[0])
                raise RowError(f"'{name}' must hold each (user, item) pair once (a pair on both sides of a split "
                               f"could never be ranked); got {int(duplicated.sum())} repeated pairs, the first "
                               f"({data[user].iloc[[row]].tolist()[0]!r}, {data[item].iloc[[row]].tolist()[0]!r}) at row {row}. Aggregate "
                               f"them first, e.g. frame.groupby([{user!r}, {item!r}], as_index=False).agg(...).",
                               name, row)
            if timestamp:
                kind = pd.api.types.infer_dtype(data[timestamp], skipna=True)
                if kind in ("mixed", "mixed-integer"):  # sorted by type, or not at all: no order in time
                    kinds = sorted({type(x).__name__ for x in data[timestamp]})
                    raise TypeError(f"'{name}' column {timestamp!r} must hold times or numbers of one type, which "
                                    f"sort in time; got values of type{'s' * (len(kinds) > 1)} {', '.join(kinds)}.")
            self.frame = data
            self.codes = pd.factorize(data[user])[0].astype(np.int64)
            self.time = pd.factorize(data[timestamp], sort=True)[0] if timestamp else None
        elif not (sp.issparse(data) or isinstance(data, (np.ndarray, list, tuple))):
            module = type(data).__module__.split(".")[0]  # a polars DataFrame: .to_pandas()
            kind = type(data).__name__ if module == "builtins" else f"a {module} {type(data).__name__}"
            raise TypeError(f"'{name}' must be a pandas DataFrame (columns {user!r}, {item!r}, ...) or a sparse matrix; "
                            f"got {kind}{' (its .to_pandas() is one)' if hasattr(data, 'to_pandas') else ''}.")
        elif timestamp:
            raise TypeError(f"'{name}' must be a pandas DataFrame with a {timestamp!r} column for a split by time "
                            f"(a sparse matrix holds no time); got {type(data).__name__}.")
        else:
            self.X = v.check_finite(v.as_csr(data, name, values="float"), name)
            self.codes = np.repeat(np.arange(self.X.shape[0], dtype=np.int64), np.diff(self.X.indptr))
        self.n = self.codes.size
        self.counts = np.bincount(self.codes, minlength=int(self.codes.max()) + 1 if self.n else 0)

    def position(self, key):
        """0-based position of each row within its user's rows in ascending `key` order (ties: row order)."""
        order = np.lexsort((np.arange(self.n), key, self.codes))
        starts = np.concatenate([[0], np.cumsum(self.counts)[:-1]])
        position = np.empty(self.n, dtype=np.int64)
        position[order] = np.arange(self.n) - starts[self.codes[order]]
        return position

    def split(self, is_test):
        if self.frame is not None:
            return self.frame[~is_test], self.frame[is_test]
        return self._pick(~is_test), self._pick(is_test)

    def _pick(self, mask):
        X = self.X
        indptr = np.concatenate([[0], np.cumsum(np.bincount(self.codes[mask], minlength=X.shape[0]))])
        return sp.csr_array((X.data[mask], X.indices[mask], indptr), shape=X.shape)


def _n_test(counts, n_test, min_train):
    """n_test per user, or 0 for a user that would keep fewer than `min_train` training rows."""
    n_test = min(n_test, int(counts.max(initial=0)) + 1)  # (no user has more: 10**30 as 0 for all, not an overflow)
    return np.where(counts - n_test >= min_train, n_test, 0)


def split_leave_k_out(data, k=1, *, min_train=1, seed=1, user="user", item="item"):
    """Per user, ``k`` interactions chosen at random go to the test set, the rest to training.

    Parameters
    ----------
    data : DataFrame (columns ``user``, ``item``, ...) or sparse matrix of shape (n_users, n_items)
    k : int, default=1
    min_train : int, default=1
        A user with fewer than ``k + min_train`` interactions keeps them all in training.
    seed : int, default=1
    user, item : str
        Column names (frames only).

    Returns
    -------
    (train, test), of the type of ``data``.
    """
    k = v.check_int(k, "k", low=1)
    min_train = v.check_int(min_train, "min_train", low=0)
    rng = np.random.default_rng(v.check_seed(seed))
    d = _Data(data, user, item)
    n_test = _n_test(d.counts, k, min_train)
    return d.split(d.position(rng.random(d.n)) < n_test[d.codes])


def split_last_per_user(data, n=None, *, fraction=None, min_train=1, user="user", item="item",
                        timestamp="timestamp"):
    """Per user, the latest interactions go to the test set: the last ``n``, or the last ``fraction``.

    With ``fraction``, a user's test count is round(count * fraction) (halves up), at least 1 and
    at most ``count - min_train``. Equal timestamps keep the frame's row order (the later row is
    the later interaction).

    Parameters
    ----------
    data : DataFrame with columns ``user``, ``item`` and ``timestamp`` (any ordered type)
    n : int, default=None
    fraction : float in (0, 1), default=None
        Give exactly one of ``n`` and ``fraction``.
    min_train : int, default=1
        Every user keeps at least this many training interactions; a user that cannot keeps
        them all in training.

    Returns
    -------
    (train, test) frames: every test interaction of a user is no earlier than its training ones.
    """
    if (n is None) == (fraction is None):
        raise ValueError(f"Give exactly one of 'n' and 'fraction'; got n={n!r}, fraction={fraction!r}.")
    min_train = v.check_int(min_train, "min_train", low=0)
    d = _Data(data, user, item, timestamp)
    if n is not None:
        n_test = _n_test(d.counts, v.check_int(n, "n", low=1), min_train)
    else:
        wanted = np.maximum(1, _n_test_items(d.counts, v.check_fraction(fraction, "fraction")))
        n_test = np.clip(np.minimum(wanted, d.counts - min_train), 0, None)
    return d.split(d.position(d.time) >= (d.counts - n_test)[d.codes])


def split_time_cutoff(data, cutoff=None, *, fraction=None, user="user", item="item", timestamp="timestamp"):
    """One cut-off time for everybody: interactions at or after ``cutoff`` are the test set.

    Parameters
    ----------
    data : DataFrame with columns ``user``, ``item`` and ``timestamp``
    cutoff : a value comparable with the timestamps, default=None
    fraction : float in (0, 1), default=None
        Instead of ``cutoff``: the cut-off is the timestamp of the row at position
        ceil(n * (1 - fraction)) in time order, so that about ``fraction`` of the rows (more
        when timestamps tie at the cut-off) are test rows. Give exactly one of the two.

    Returns
    -------
    (train, test) frames. Every test timestamp is >= every training timestamp. A test user may
    have no training rows (a cold-start user) and a test item may never occur in training:
    evaluate with ``consider_cold_start`` as you intend, or filter them.
    """
    if (cutoff is None) == (fraction is None):
        raise ValueError(f"Give exactly one of 'cutoff' and 'fraction'; got cutoff={cutoff!r}, fraction={fraction!r}.")
    if cutoff is not None and np.ndim(cutoff) != 0:  # (a column would be compared row by row)
        raise TypeError(f"'cutoff' must be one time or number, for every user; got {type(cutoff).__name__} of shape "
                        f"{np.shape(cutoff)}.")
    if cutoff is not None and pd.isna(cutoff):  # (every row would compare False: no test)
        raise ValueError(f"'cutoff' must be a time or number; got {cutoff!r}.")
    d = _Data(data, user, item, timestamp)
    times = data[timestamp]
    if fraction is not None:
        fraction = v.check_fraction(fraction, "fraction")
        if d.n == 0:  # no rows: two empty frames, as with a cutoff
            return d.split(np.zeros(0, dtype=bool))
        position = min(d.n - 1, int(np.ceil(round(d.n * (1 - fraction), 9))))  # 100 * 0.58 is 58.000...01
        cutoff = times.sort_values(kind="stable").iloc[position]
    try:
        is_test = (times >= cutoff).to_numpy(dtype=bool)
    except TypeError:
        raise TypeError(f"'cutoff' must be comparable with the {timestamp!r} column (dtype {times.dtype}); "
                        f"got {cutoff!r} of type {type(cutoff).__name__}.") from None
    return d.split(is_test)


def split_k_fold_users(data, n_folds=5, *, items_test_fraction=0.3, min_train=1, seed=1, user="user", item="item"):
    """k-fold cross-validation over users: each user is a test user in exactly one fold.

    Users with more than ``min_train`` interactions are dealt at random into ``n_folds`` folds
    of equal size (within one). In fold f, each of fold f's users sends round(count *
    items_test_fraction) of its interactions (halves up; at least 1, at most ``count -
    min_train``), chosen at random, to the test set; everything else, the other users' rows
    included, is training data.

    Returns
    -------
    list of ``n_folds`` (train, test) pairs, of the type of ``data``.
    """
    n_folds = v.check_int(n_folds, "n_folds", low=2)
    items_test_fraction = v.check_fraction(items_test_fraction, "items_test_fraction")
    min_train = v.check_int(min_train, "min_train", low=0)
    rng = np.random.default_rng(v.check_seed(seed))
    d = _Data(data, user, item)
    eligible = np.flatnonzero(d.counts > min_train)
    if eligible.size < n_folds:
        raise ValueError(f"'n_folds' must be at most the number of users with more than min_train={min_train} "
                         f"interactions ({eligible.size}); got {n_folds}.")
    fold = np.full(d.counts.size, -1)
    fold[rng.permutation(eligible)] = np.arange(eligible.size) % n_folds
    n_test = np.clip(_n_test_items(d.counts, items_test_fraction), 1, np.maximum(d.counts - min_train, 0))
    first = d.position(rng.random(d.n)) < n_test[d.codes]
    return [d.split(first & (fold[d.codes] == f)) for f in range(n_folds)]
