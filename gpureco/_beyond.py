"""Beyond-accuracy metrics of top-K lists, computed on the host with NumPy for any input device.

A list matrix has one row per user and the recommended item indices in list order; -1 marks
an empty position (a list shorter than its row). Lists given as a long frame (user, item,
rank or score) or as a dict, as RePlay's metrics take them, become such a matrix with one row
per user. The formulas are in docs/metrics.md ("Beyond accuracy") and in `beyond_accuracy`'s
docstring.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import scipy.sparse as sp

from . import _validation as v
from .engine import _backend
from .engine._registry import BEYOND_METRICS, parse_metrics

_CHUNK = 2**24  # floats of gathered item vectors held at once by intra_list_diversity
_CONVENTIONS = ("gpureco", "replay")


def beyond_accuracy(lists, metrics, k=None, *, n_items, popularity=None, n_train_users=None, item_vectors=None,
                    baseline=None, head_fraction=0.2, train=None, item_categories=None, convention="gpureco",
                    ties=None, user_col="user", item_col="item", score_col="score", rank_col="rank"):
    r"""Coverage, novelty, exposure and diversity of top-K lists.

    For each cut-off K, the list :math:`L_u` of user *u* is the non-empty entries among the
    first K of row *u* of ``lists`` (:math:`|L_u| \le K`). With :math:`e_i` the number of
    lists in which item *i* appears (its exposure), :math:`E = \sum_i e_i`,
    :math:`N_{items}` = ``n_items``, :math:`c_i` = ``popularity[i]``, :math:`N` =
    ``n_train_users``, :math:`R_u` the training items of user *u* (``train``) and
    :math:`\kappa_i` = ``item_categories[i]``:

    - ``Coverage@K`` (one number) :math:`= \#\{i : e_i > 0\} / N_{items}`.
    - ``Gini@K`` (one number): the Gini index of the exposure of all :math:`N_{items}` items
      (never-recommended items included), with :math:`e_{(1)} \le \dots \le e_{(N_{items})}`:
      :math:`\sum_j (2j - N_{items} - 1)\, e_{(j)} / (N_{items} E)`; 0 when every item is
      equally exposed, :math:`1 - 1/N_{items}` when a single item takes all exposure.
    - ``Entropy@K`` (one number): Shannon entropy of the exposure shares
      :math:`p_i = e_i / E`, in bits: :math:`-\sum_{e_i > 0} p_i \log_2 p_i`.
    - ``Surprisal@K`` (per list): mean normalised self-information of the listed items, as
      RePlay's Surprisal: :math:`\frac{1}{|L_u|}\sum_{i \in L_u} \log_2(N / \max(c_i, 1)) / \log_2 N`,
      in [0, 1]; an item nobody had in training counts as had by one user (surprisal 1).
    - ``ARP@K`` (per list): average recommendation popularity,
      :math:`\frac{1}{|L_u|}\sum_{i \in L_u} c_i`.
    - ``Tail@K`` (per list): fraction of :math:`L_u` outside the head, the
      :math:`\lceil h \cdot N_{items} \rceil` most popular items (:math:`h` =
      ``head_fraction``; equal popularity ordered by ascending item index).
    - ``ILD@K`` (per list): intra-list diversity, 1 minus the mean cosine similarity of the
      :math:`|L_u|(|L_u|-1)/2` pairs of listed items' vectors :math:`x_i`. With
      :math:`\hat x_i = x_i / \lVert x_i \rVert`, the pair sum is computed as
      :math:`\sum_{a<b} \hat x_a \cdot \hat x_b = (\lVert \sum_a \hat x_a \rVert^2 - \sum_a \lVert \hat x_a \rVert^2)/2`:
      O(K d) per list instead of O(K² d), batched over users.
    - ``Unexpectedness@K`` (per list): fraction of :math:`L_u` not in the baseline's list
      :math:`B_u` of the same user (cut at the same K): :math:`|L_u \setminus B_u| / |L_u|`.
    - ``Novelty@K`` (per list): fraction of :math:`L_u` the user did not have in training,
      :math:`|L_u \setminus R_u| / |L_u|` (RePlay's Novelty, Castells et al. 2011).
    - ``CategoricalDiversity@K`` (per list): distinct categories in the list,
      :math:`|\{\kappa_i : i \in L_u\}| / |L_u|`.

    ``convention="replay"`` computes these as RePlay (0.21) does, dividing by K where it does:
    Surprisal :math:`= \frac{1}{K}\sum_{i \in L_u} \ldots`, Unexpectedness :math:`= 1 - |L_u
    \cap B_u| / K` (0 when :math:`L_u` or :math:`B_u` is empty), CategoricalDiversity
    :math:`= |\{\kappa_i\}| / K`; Novelty keeps :math:`|L_u|` (RePlay's code divides by the
    list's length, although its docstring writes K) and is 1 for an empty list; equal scores
    are ordered by descending item. For lists of K items both conventions agree.

    Parameters
    ----------
    lists : int matrix, DataFrame or dict
        - An int array of shape (n_users, width), NumPy or CuPy: item indices in list order,
          -1 for an empty position; no item twice in a row. A row narrower than K is a list
          shorter than K.
        - A long DataFrame (pandas, or polars) with the columns ``user_col``, ``item_col`` and
          ``rank_col`` (1, 2, ..., n within each list) or ``score_col`` (ranked by descending
          score, equal scores by ``ties``), as RePlay's metrics take recommendations; where
          both are present (as in ``top_k(output="pandas")``), the ranks order each list, and
          its scores must not rise down it (else an error: one of the columns is stale).
        - A dict, as RePlay's: ``{user: [item, ...]}`` in list order, or
          ``{user: [(item, score), ...]}`` (ranked by descending score).

        Items of a frame or dict are item indices in [0, n_items); users are any labels.
    metrics : str or list of str
        Names such as ``"ILD@10"``, or without ``@K`` with ``k``: Coverage, Surprisal, Gini,
        Entropy, ARP, Tail, ILD, Unexpectedness, Novelty, CategoricalDiversity (case ignored).
    k : int or list of int, default=None
        Cut-offs of the names without ``@K``.
    n_items : int
        Size of the catalogue.
    popularity : array of shape (n_items,), default=None
        Number of training users of each item (for example
        ``np.bincount(X_train.indices, minlength=n_items)`` of a canonical CSR ``X_train``);
        needed by Surprisal, ARP and Tail (or ``train``). For Surprisal, at most
        ``n_train_users``. A pandas Series is read by its index, the item ids (as from
        ``train["item"].value_counts()``; an item it lacks has popularity 0); ``item_vectors``
        as a DataFrame and ``item_categories`` as a Series likewise, with a row for every item.
    n_train_users : int, default=None
        :math:`N`, the number of training users (at least 2); needed by Surprisal (or ``train``).
    item_vectors : float array of shape (n_items, d), default=None
        Needed by ILD; a listed item's vector must not be zero.
    baseline : same form as ``lists``, default=None
        Another model's lists; needed by Unexpectedness. A matrix has one row per row of
        ``lists``; a frame or dict is matched by user (a user it lacks has an empty list).
    head_fraction : float, default=0.2
        Share of the catalogue in the popularity head (Tail), in (0, 1).
    train : sparse matrix, DataFrame or dict, default=None
        The training interactions; needed by Novelty. With a matrix ``lists``: a matrix of
        shape (n_users, n_items), row *u* for row *u* of ``lists`` (stored non-zero entries
        are interactions). With a frame or dict ``lists``: a frame with ``user_col`` and
        ``item_col``, or ``{user: [item, ...]}``. Unless given, ``popularity`` is then the number
        of distinct training users of each item and ``n_train_users`` the number of users with a
        training item (RePlay's Surprisal weights).
    item_categories : array of shape (n_items,), default=None
        The category of each item (ints or labels); needed by CategoricalDiversity.
    convention : {"gpureco", "replay"}, default="gpureco"
        The definitions above, or RePlay's (see above and docs/peers.md).
    ties : {"first", "last"}, default=None
        The order of equal scores in a ``score_col`` or ``(item, score)`` input: by ascending
        ("first") or descending ("last") item; None: the convention's ("last" for RePlay).
    user_col, item_col, score_col, rank_col : str
        The column names of frame inputs (RePlay's are "query_id", "item_id", "rating").

    Returns
    -------
    dict
        ``{"ILD@10": per-list values, "Coverage@10": float, ...}`` in the order asked. Per-list
        values are float64 arrays of shape (n_users,), CuPy arrays when ``lists`` is one; for a
        frame or dict ``lists``, pandas Series indexed by user (named "user", sorted). Every value
        is computed on the host with NumPy, whatever the inputs' device (GPU inputs are copied),
        so the numbers never depend on the device (docs/architecture.md, the determinism rule).

    Notes
    -----
    Per-list values are NaN for an empty list (with ``convention="replay"``: Surprisal and
    Unexpectedness 0, Novelty 1, as RePlay), and ILD is NaN for a list of fewer than 2 items.
    Gini is NaN when no list holds an item (E = 0); Entropy is then 0.

    References
    ----------
    RePlay 0.21, ``replay/metrics`` (Surprisal, Unexpectedness, Novelty, CategoricalDiversity).
    P. Castells, S. Vargas and J. Wang, "Novelty and diversity metrics for recommender
    systems: choice, discovery and relevance", ECIR 2011.

    Examples
    --------
    >>> import numpy as np, gpureco
    >>> lists = np.array([[0, 1], [0, 2], [0, -1]])
    >>> out = gpureco.beyond_accuracy(lists, ["Coverage", "Gini", "ARP"], k=2, n_items=4,
    ...                               popularity=np.array([9, 3, 1, 0]))
    >>> out["Coverage@2"], round(out["Gini@2"], 4), out["ARP@2"].tolist()
    (0.75, 0.45, [6.0, 5.0, 9.0])

    RePlay's inputs, and its division by K for a list shorter than K:

    >>> recs = {"a": [0, 1, 2], "b": [3]}
    >>> train = {"a": [1], "b": [0, 1]}
    >>> out = gpureco.beyond_accuracy(recs, ["Novelty@3", "Surprisal@3"], n_items=4, train=train)
    >>> out["Novelty@3"].tolist(), out["Surprisal@3"].tolist()
    ([0.6666666666666666, 1.0], [0.6666666666666666, 1.0])
    >>> gpureco.beyond_accuracy(recs, "Surprisal@3", n_items=4, train=train,
    ...                         convention="replay")["Surprisal@3"].tolist()
    [0.6666666666666666, 0.3333333333333333]
    """
    if not isinstance(convention, str) or convention not in _CONVENTIONS:
        raise ValueError(f"'convention' must be one of {', '.join(map(repr, _CONVENTIONS))} (beyond_accuracy "
                         f"reproduces RePlay's definitions; the others define none of these metrics); got "
                         f"{convention!r}.")
    replay = convention == "replay"
    if ties is not None and (not isinstance(ties, str) or ties not in ("first", "last")):
        raise ValueError(f"'ties' must be 'first', 'last' or None (the convention's, {'last' if replay else 'first'!r} "
                         f"for {convention!r}); got {ties!r}.")
    descending_items = (ties or ("last" if replay else "first")) == "last"
    selection = parse_metrics(metrics, k, allowed=[m.column for m in BEYOND_METRICS])
    n_items = v.check_int(n_items, "n_items", low=1, high=np.iinfo(np.int32).max)  # (as many items as a matrix holds)
    users, train_rows = None, None
    if _is_keyed(lists):
        columns = _column_names(user_col, item_col, score_col, rank_col)
        users, lists = _keyed_lists(lists, "lists", None, n_items, columns, descending_items)
        if baseline is not None:
            baseline = _keyed_lists(baseline, "baseline", users, n_items, columns, descending_items)[1]
        if train is not None:
            train_rows, train_popularity, train_users = _keyed_train(train, users, n_items, columns)
        lists_on_gpu = False
    else:
        for name, x in (("baseline", baseline), ("train", train)):
            if x is not None and _is_keyed(x):
                raise TypeError(f"'{name}' must be a matrix like 'lists' (an int matrix, one row per user); got a "
                                f"{type(x).__name__}. Pass 'lists' as a frame or dict too to match users by label.")
        lists_on_gpu = _backend.array_module(lists) is not np
        lists, baseline, train = (None if x is None else _backend.to_host(x, name)
                                  for x, name in ((lists, "lists"), (baseline, "baseline"), (train, "train")))
        lists = _as_lists(lists, "lists", n_items)
        if baseline is not None:
            baseline = _as_lists(baseline, "baseline", n_items)
            if baseline.shape[0] != lists.shape[0]:
                raise ValueError(f"'baseline' must have one row per row of 'lists' ({lists.shape[0]}); "
                                 f"got shape {baseline.shape}.")
        if train is not None:
            train_rows = v.as_csr(train, "train", shape=(lists.shape[0], n_items))
            train_popularity = np.bincount(train_rows.indices, minlength=n_items)  # duplicates were summed
            train_users = int(np.count_nonzero(np.diff(train_rows.indptr)))
    popularity, item_vectors, item_categories = (
        None if x is None else _by_item(_backend.to_host(x, name), name, n_items, fill)
        for x, name, fill in ((popularity, "popularity", 0), (item_vectors, "item_vectors", None),
                              (item_categories, "item_categories", None)))
    if train is not None:
        popularity = train_popularity if popularity is None else popularity
        if n_train_users is None and train_users < 2 and "Surprisal@K" in selection.names:
            raise ValueError(f"Surprisal needs at least 2 training users (it divides by log2 of their number); "
                             f"'train' has {train_users}. Pass 'n_train_users' to set their number.")
        n_train_users = train_users if n_train_users is None and train_users >= 2 else n_train_users
    needs = {"Surprisal@K": ("popularity", "n_train_users"), "ARP@K": ("popularity",), "Tail@K": ("popularity",),
             "ILD@K": ("item_vectors",), "Unexpectedness@K": ("baseline",), "Novelty@K": ("train",),
             "CategoricalDiversity@K": ("item_categories",)}
    given = dict(popularity=popularity, n_train_users=n_train_users, item_vectors=item_vectors, baseline=baseline,
                 train=train, item_categories=item_categories)
    for name in selection.names:
        missing = [arg for arg in needs.get(name, ()) if given[arg] is None]
        if missing:
            instead = " (or 'train')" if set(missing) <= {"popularity", "n_train_users"} else ""
            raise ValueError(f"Metric {name} in 'metrics' needs {' and '.join(repr(a) for a in missing)}{instead}; "
                             "got None.")
    if popularity is not None:
        popularity = v.real_array(popularity, "'popularity'").astype(np.float64)
        if popularity.shape != (n_items,):
            raise ValueError(f"'popularity' must hold n_items={n_items} finite, non-negative counts; got shape "
                             f"{popularity.shape}.")
        bad = ~np.isfinite(popularity) | (popularity < 0)
        if np.any(bad):
            first = int(np.flatnonzero(bad)[0])
            raise ValueError(f"'popularity' must hold n_items={n_items} finite, non-negative counts; got "
                             f"{int(bad.sum())} that are not, for example {float(popularity[first])!r} for item {first}.")
    if n_train_users is not None:
        n_train_users = v.check_int(n_train_users, "n_train_users", low=2)
        if popularity is not None and "Surprisal@K" in selection.names and np.any(popularity > n_train_users):
            first = int(np.argmax(popularity > n_train_users))
            raise ValueError(f"'popularity' counts training users, at most n_train_users={n_train_users} (Surprisal "
                             f"is log2(n_train_users / popularity), scaled to [0, 1]); got "
                             f"{float(popularity[first])!r} for item {first}.")
    if item_vectors is not None:
        item_vectors = _unit_vectors(item_vectors, lists, n_items)
    if item_categories is not None:
        item_categories = _category_codes(item_categories, n_items)
    head_fraction = v.check_fraction(head_fraction, "head_fraction")

    out = {}
    for name, cutoff in selection.columns:
        top = lists[:, :cutoff]
        exposure = np.bincount(top[top >= 0], minlength=n_items)
        over = cutoff if replay else None  # RePlay divides by K where gpureco divides by |L_u|
        column = name[: -len("@K")] + f"@{cutoff}"
        if name == "Coverage@K":
            out[column] = item_coverage(exposure)
        elif name == "Gini@K":
            out[column] = gini_index(exposure)
        elif name == "Entropy@K":
            out[column] = exposure_entropy(exposure)
        elif name == "Surprisal@K":
            out[column] = surprisal(top, popularity, n_train_users, over)
        elif name == "ARP@K":
            out[column] = average_popularity(top, popularity)
        elif name == "Tail@K":
            out[column] = tail_percentage(top, popularity, head_fraction)
        elif name == "ILD@K":
            out[column] = intra_list_diversity(top, item_vectors)
        elif name == "Unexpectedness@K":
            out[column] = unexpectedness(top, baseline[:, :cutoff], n_items, over)
        elif name == "Novelty@K":
            out[column] = novelty(top, train_rows, n_items, empty=1.0 if replay else math.nan)
        elif name == "CategoricalDiversity@K":
            out[column] = categorical_diversity(top, item_categories, over)
    if users is not None:
        index = pd.Index(users, name="user")
        out = {column: pd.Series(a, index=index, name=column) if isinstance(a, np.ndarray) else a
               for column, a in out.items()}
    elif lists_on_gpu:
        out = {column: _backend.cupy().asarray(a) if isinstance(a, np.ndarray) else a for column, a in out.items()}
    return out


def item_coverage(exposure):
    """Share of the catalogue in at least one list."""
    return float(np.count_nonzero(exposure)) / exposure.shape[0]


def gini_index(exposure):
    """Gini index of the exposure counts of every item (zeros included); NaN without exposure."""
    e = np.sort(exposure).astype(np.float64)
    n, total = e.shape[0], float(e.sum())
    if total == 0:
        return math.nan
    j = np.arange(1, n + 1, dtype=np.float64)
    return float(((2 * j - n - 1) * e).sum()) / (n * total)


def exposure_entropy(exposure):
    """Shannon entropy (bits) of the exposure shares of the exposed items; 0 without exposure."""
    e = exposure[exposure > 0].astype(np.float64)
    p = e / e.sum()
    return 0.0 - float((p * np.log2(p)).sum())  # 0.0, not -0.0, without exposure


def surprisal(lists, popularity, n_train_users, over=None):
    """Per list: mean of log2(N / max(c_i, 1)) / log2(N) over its items (RePlay's normalisation);
    with `over` = K, their sum / K (RePlay's division)."""
    information = np.log2(n_train_users / np.maximum(popularity, 1.0)) / math.log2(n_train_users)
    return _list_mean(lists, information) if over is None else _list_sum(lists, information) / over


def average_popularity(lists, popularity):
    """Per list: mean training popularity of its items."""
    return _list_mean(lists, popularity)


def tail_percentage(lists, popularity, head_fraction):
    """Per list: fraction of its items outside the ceil(head_fraction * n_items) most popular."""
    n_items = popularity.shape[0]
    by_popularity = np.lexsort(np.stack([np.arange(n_items), -popularity]))  # ties: lower index first
    tail = np.ones(n_items, dtype=np.float64)
    tail[by_popularity[: math.ceil(round(head_fraction * n_items, 9))]] = 0.0  # 0.07 * 100 is 7.000...01
    return _list_mean(lists, tail)


def intra_list_diversity(lists, unit_vectors):
    """Per list of L >= 2 items: 1 - (sum over pairs a < b of cos(x_a, x_b)) / (L (L - 1) / 2)."""
    n_users, width = lists.shape
    out = np.full(n_users, np.nan)
    chunk = max(1, _CHUNK // max(1, width * unit_vectors.shape[1]))
    for start in range(0, n_users, chunk):
        top = lists[start: start + chunk]
        listed = top >= 0
        vectors = unit_vectors[np.where(listed, top, 0)] * listed[:, :, None]
        length = listed.sum(axis=1).astype(np.float64)
        total = vectors.sum(axis=1)
        pair_sum = ((total * total).sum(axis=1) - (vectors * vectors).sum(axis=(1, 2))) / 2.0
        with np.errstate(divide="ignore", invalid="ignore"):
            ild = 1.0 - pair_sum / (length * (length - 1.0) / 2.0)
        out[start: start + chunk] = np.where(length >= 2, ild, np.nan)
    return out


def unexpectedness(lists, baseline, n_items, over=None):
    """Per list: fraction of its items not in the same row of `baseline`; with `over` = K,
    RePlay's 1 - (its items in the baseline) / K, and 0 when either list is empty."""
    rows = np.arange(lists.shape[0], dtype=np.int64)[:, None] * (n_items + 1)
    outside = _outside(lists, np.sort((rows + baseline)[baseline >= 0]), n_items)
    length = (lists >= 0).sum(axis=1)
    if over is not None:
        value = 1.0 - (length - outside) / float(over)
        return np.where((length > 0) & (baseline >= 0).any(axis=1), value, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return outside / length.astype(np.float64)


def novelty(lists, train, n_items, empty=math.nan):
    """Per list: fraction of its items not among the training items of its user (row u of the
    CSR matrix `train`); `empty` for an empty list (RePlay: 1)."""
    rows = np.repeat(np.arange(train.shape[0], dtype=np.int64), np.diff(train.indptr))
    outside = _outside(lists, rows * (n_items + 1) + train.indices, n_items)  # CSR order: keys sorted
    length = (lists >= 0).sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(length > 0, outside / length.astype(np.float64), empty)


def categorical_diversity(lists, categories, over=None):
    """Per list: the number of distinct categories of its items over its length, or over
    `over` = K (RePlay's CategoricalDiversity); NaN for an empty list."""
    listed = lists >= 0
    ordered = np.sort(np.where(listed, categories[np.where(listed, lists, 0)], -1), axis=1)
    starts = ordered >= 0
    starts[:, 1:] &= ordered[:, 1:] != ordered[:, :-1]
    distinct = starts.sum(axis=1).astype(np.float64)
    length = listed.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(length > 0, distinct / (float(over) if over is not None else length), np.nan)


def _outside(lists, known, n_items):
    """Per row: how many listed items have no key row * (n_items + 1) + item in `known` (sorted)."""
    known = np.concatenate([np.asarray(known, dtype=np.int64), [np.iinfo(np.int64).max]])  # sentinel
    keys = np.arange(lists.shape[0], dtype=np.int64)[:, None] * (n_items + 1) + lists
    found = known[np.searchsorted(known, keys)] == keys
    return ((lists >= 0) & ~found).sum(axis=1)


def _list_mean(lists, item_values):
    """Per list: mean of item_values over its items; NaN for an empty list."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return _list_sum(lists, item_values) / (lists >= 0).sum(axis=1).astype(np.float64)


def _list_sum(lists, item_values):
    """Per list: sum of item_values over its items (0 for an empty list)."""
    listed = lists >= 0
    return np.where(listed, item_values[np.where(listed, lists, 0)], 0.0).sum(axis=1)


def _as_lists(lists, name, n_items):
    if sp.issparse(lists):
        raise TypeError(f"'{name}' must be a 2-dimensional int array (users x list positions); got a SciPy sparse "
                        f"{lists.format} matrix.")
    lists = v.host_array_or_device(lists, f"'{name}'")
    if lists.ndim != 2 or lists.dtype.kind not in "iu":
        raise TypeError(f"'{name}' must be a 2-dimensional int array (users x list positions); got "
                        f"shape {lists.shape} and dtype {lists.dtype}.")
    lists = lists.astype(np.int64)
    if lists.size and (int(lists.min()) < -1 or int(lists.max()) >= n_items):
        raise ValueError(f"'{name}' must hold item indices in [0, {n_items - 1}] or -1 (empty position); got "
                         f"values from {int(lists.min())} to {int(lists.max())}.")
    ordered = np.sort(lists, axis=1)
    repeated = (ordered[:, 1:] == ordered[:, :-1]) & (ordered[:, 1:] >= 0)
    if bool(repeated.any()):
        row = int(np.flatnonzero(repeated.any(axis=1))[0])
        raise ValueError(f"'{name}' must not hold an item twice in a list; row {row} does "
                         f"({int(repeated.any(axis=1).sum())} rows do).")
    return lists


def _unit_vectors(item_vectors, lists, n_items):
    vectors = v.real_array(item_vectors, "'item_vectors'").astype(np.float64)
    if vectors.ndim != 2 or vectors.shape[0] != n_items:
        raise ValueError(f"'item_vectors' must have shape (n_items={n_items}, d); got {vectors.shape}.")
    # each row scaled by a power of two that brings its largest component into [0.5, 1) (exact: the cosines are
    # those of the rows as given), so that the squares neither overflow nor underflow
    finite = np.isfinite(vectors).all(axis=1)
    peak = np.abs(vectors).max(axis=1, initial=0.0)
    vectors = np.ldexp(vectors, -np.frexp(np.where(finite, peak, 1.0))[1][:, None])
    norms = np.sqrt((vectors * vectors).sum(axis=1))
    used = np.zeros(n_items, dtype=bool)
    used[lists[lists >= 0]] = True
    bad = used & ~(finite & (peak > 0))
    if bool(bad.any()):
        raise ValueError(f"'item_vectors' of listed items must be finite and non-zero (cosine similarity is "
                         f"undefined otherwise); item {int(np.flatnonzero(bad)[0])} is not "
                         f"({int(bad.sum())} listed items are not).")
    return vectors / np.where(norms > 0, norms, 1.0)[:, None]


def _by_item(x, name, n_items, fill):
    """A pandas Series or DataFrame given per item, read by its index: the item ids 0 ..
    n_items - 1, items it lacks taking `fill` (popularity 0: a value_counts() has no row for
    an item nobody took) or refused where there is none; anything else as it is, by position."""
    if not isinstance(x, (pd.Series, pd.DataFrame)):
        return x
    what = f"'{name}' as a pandas {type(x).__name__} is read by its index, the item ids 0 .. n_items - 1 = {n_items - 1}"
    labels = x.index
    if isinstance(labels, pd.CategoricalIndex):  # (value_counts() of a categorical column: its categories)
        labels = pd.Index(np.asarray(labels))
    if not pd.api.types.is_integer_dtype(labels.dtype):
        raise TypeError(f"{what}; got an index of dtype {labels.dtype}. Pass an array to read it by position.")
    given = labels.to_numpy()
    outside = (given < 0) | (given >= n_items)
    if np.any(outside):
        raise ValueError(f"{what}; got {int(outside.sum())} outside that range, for example {int(given[outside][0])}.")
    x = x.set_axis(labels.astype(np.int64))
    if labels.has_duplicates:
        raise ValueError(f"{what}; got item {int(labels[labels.duplicated()][0])} more than once.")
    if labels.size < n_items and fill is None:
        lacking = np.setdiff1d(np.arange(n_items), given)
        raise ValueError(f"{what}, one row per item; got none for {lacking.size} items, for example item "
                         f"{int(lacking[0])}.")
    return x.reindex(range(n_items), fill_value=fill).to_numpy()


def _category_codes(item_categories, n_items):
    """item_categories as int codes (0, 1, ...: one per distinct label)."""
    categories = np.asarray(item_categories)
    if categories.shape != (n_items,):
        raise ValueError(f"'item_categories' must hold the category of each of the n_items={n_items} items; got "
                         f"shape {categories.shape}.")
    codes = pd.factorize(categories)[0]
    if np.any(codes < 0):
        first = int(np.flatnonzero(codes < 0)[0])
        raise ValueError(f"'item_categories' must give every item a category; got {int((codes < 0).sum())} missing "
                         f"(NaN or None), the first for item {first}.")
    return codes.astype(np.int64)


# --- lists as RePlay takes them: long frames (user, item, rank or score) and dicts ---------------

def _is_keyed(x):
    """Lists keyed by user label (a DataFrame, polars included, or a dict), not a matrix."""
    return isinstance(x, (dict, pd.DataFrame)) or (hasattr(x, "to_pandas") and not _backend.is_device_array(x))


def _column_names(user_col, item_col, score_col, rank_col):
    given = dict(user_col=user_col, item_col=item_col, score_col=score_col, rank_col=rank_col)
    for parameter, value in given.items():
        if not isinstance(value, str):
            raise TypeError(f"'{parameter}' must be a column name (str); got {value!r} of type "
                            f"{type(value).__name__}.")
    if len({user_col, item_col, score_col, rank_col}) < 4:
        raise ValueError(f"'user_col', 'item_col', 'score_col' and 'rank_col' must be different names; got {given}.")
    return given


def _long_form(x, name, columns, ordered):
    """(users, items, order column name or None, order values, users without items) of a frame or
    dict; `ordered`: the input ranks its items (lists, baseline), else it is a set (train)."""
    user_col, item_col, score_col, rank_col = (columns[c] for c in ("user_col", "item_col", "score_col", "rank_col"))
    if isinstance(x, dict) and not {user_col, item_col} <= set(x):
        return _dict_long_form(x, name, ordered)
    frame = v.as_pandas(pd.DataFrame(x) if isinstance(x, dict) else x, name,
                        "recommendations" if ordered else "training interactions")
    missing = [c for c in (user_col, item_col) if c not in frame.columns]
    if missing:
        raise ValueError(f"'{name}' must have the columns {[user_col, item_col]} ('user_col', 'item_col'); it lacks "
                         f"{missing} (got columns {list(frame.columns)}).")
    v.id_kind(frame[user_col], name, user_col)
    order = None
    if ordered:
        present = [c for c in (rank_col, score_col) if c in frame.columns]  # both (top_k's frame): the ranks
        if not present:
            raise ValueError(f"'{name}' must have a column {rank_col!r} ('rank_col') or {score_col!r} ('score_col'), "
                             f"to order each list; got columns {list(frame.columns)}.")
        if len(present) == 2:
            v.check_ranks_follow_scores(frame, [user_col], rank_col, score_col, name)
        order = present[0]
    values = None if order is None else v.numeric_column(frame, order, name, finite=True)
    kind = None if order is None else ("rank" if order == rank_col else "score")
    return frame[user_col].to_numpy(), _item_indices(frame[item_col], name, item_col), kind, values, []


def _dict_long_form(x, name, ordered):
    """RePlay's dicts: {user: [item, ...]} (in list order) or {user: [(item, score), ...]}."""
    users, items, scores, empty = [], [], [], []
    pairs = None
    for user, entries in x.items():
        if isinstance(entries, (str, bytes, dict)) or not hasattr(entries, "__len__"):
            raise TypeError(f"'{name}' as a dict must map each user to a list of items"
                            f"{' or of (item, score) pairs' if ordered else ''}; user {user!r} maps to "
                            f"{type(entries).__name__}.")
        entries = list(entries)
        if not entries:
            empty.append(user)
            continue
        is_pair = [isinstance(e, (tuple, list)) for e in entries]
        if pairs is None:
            pairs = is_pair[0]
        if any(p != pairs for p in is_pair) or (pairs and (not ordered or any(len(e) != 2 for e in entries))):
            raise TypeError(f"'{name}' as a dict must map each user to a list of items"
                            f"{' or (every user) to a list of (item, score) pairs' if ordered else ''}; user "
                            f"{user!r} maps to {entries[:3]!r}{' ...' if len(entries) > 3 else ''}.")
        users.extend([user] * len(entries))
        items.extend(e[0] for e in entries) if pairs else items.extend(entries)
        scores.extend(e[1] for e in entries) if pairs else scores.extend(range(1, len(entries) + 1))
    v.id_kind(pd.Series(list(x), dtype=object), name, "user")
    kind = ("score" if pairs else "rank") if ordered else None
    values = None
    if kind is not None:
        values = v.numeric_column(pd.DataFrame({kind: pd.to_numeric(pd.Series(scores, dtype=object), errors="coerce")
                                                if pairs else np.asarray(scores, dtype=np.int64)}), kind, name,
                                  finite=True, what=" (the second of each (item, score) pair)")
    return np.asarray(users, dtype=object), _item_indices(pd.Series(items, dtype=object), name, "item"), kind, values, empty


def _item_indices(column, name, column_name):
    """A column of item indices as int64, each in [0, n_items) (checked by the caller)."""
    values = column.to_numpy()
    if values.dtype.kind not in "iu":
        numbers = pd.to_numeric(column, errors="coerce").to_numpy(np.float64, na_value=np.nan)
        if np.any(~np.isfinite(numbers) | (numbers != np.floor(numbers))):
            bad = int(np.flatnonzero(~np.isfinite(numbers) | (numbers != np.floor(numbers)))[0])
            raise TypeError(f"{v.label(name)} column {column_name!r} must hold item indices (ints in [0, n_items), "
                            f"the rows of 'popularity', 'item_vectors' and 'item_categories'); got "
                            f"{column.iloc[bad]!r} at row {bad}.")
        values = numbers
    return values.astype(np.int64)


def _keyed_lists(x, name, users, n_items, columns, descending_items):
    """(users, int matrix with one row per user) of a frame or dict of lists. users=None: the
    sorted users of `x`; else the rows follow `users` (a user `x` lacks has an empty list)."""
    user, item, kind, values, empty = _long_form(x, name, columns, ordered=True)
    _check_range(item, name, n_items)
    if users is None:
        every = np.concatenate([user.astype(object), np.asarray(empty, dtype=object)]) if empty else user
        users = pd.Index(list(pd.unique(every)))  # (a list: the Index infers the users' dtype)
        try:
            users = users.sort_values()
        except TypeError:
            raise TypeError(f"'{name}' users must be labels of one kind that sort (numbers or strings); got "
                            f"{sorted({type(u).__name__ for u in users})}.") from None
    row = users.get_indexer(user)
    keep = row >= 0  # a baseline's users without a list of their own are not evaluated
    row, item, values = row[keep].astype(np.int64), item[keep], values[keep]
    key = row * n_items + item
    unique_keys, counts = np.unique(key, return_counts=True)
    if np.any(counts > 1):
        twice = int(unique_keys[np.argmax(counts > 1)])
        raise ValueError(f"'{name}' must not hold an item twice in a list; the list of user "
                         f"{_label(users, twice // n_items)!r} holds item {twice % n_items} {int(counts.max())} times.")
    if kind == "score":  # descending score, equal scores by item
        order = np.lexsort((-item if descending_items else item, -values, row))
    else:
        order = np.lexsort((values, row))
    row, item, values = row[order], item[order], values[order]
    starts = np.searchsorted(row, np.arange(len(users) + 1))
    position = np.arange(row.size) - starts[row]
    if kind == "rank" and np.any(values != position + 1):
        bad = row[np.flatnonzero(values != position + 1)[0]]
        given = values[starts[bad]: starts[bad + 1]]
        raise ValueError(f"'{name}' ranks must be 1, 2, ..., n within each list ('rank_col'); the list of user "
                         f"{_label(users, bad)!r} has ranks {[int(r) if r == int(r) else float(r) for r in given[:10]]}.")
    matrix = np.full((len(users), int(np.diff(starts).max(initial=0))), -1, dtype=np.int64)
    matrix[row, position] = item
    return users, matrix


def _label(users, row):
    """The user label of a row, as the caller wrote it (1, not np.int64(1))."""
    label = users[int(row)]
    return label.item() if isinstance(label, np.generic) else label


def _keyed_train(x, users, n_items, columns):
    """(CSR rows of the training items of `users`, distinct training users of each item, number of
    training users) of a frame or dict of training interactions."""
    user, item, _, _, _ = _long_form(x, "train", columns, ordered=False)
    _check_range(item, "train", n_items)
    codes, train_users = pd.factorize(pd.Series(user, dtype=object))
    pairs = np.unique(codes.astype(np.int64) * n_items + item)
    popularity = np.bincount(pairs % n_items, minlength=n_items)
    row = users.get_indexer(train_users)[pairs // n_items]
    keep = row >= 0
    rows = sp.csr_array((np.ones(int(keep.sum())), (row[keep], pairs[keep] % n_items)), shape=(len(users), n_items))
    rows.sum_duplicates()
    return rows, popularity, len(train_users)


def _check_range(item, name, n_items):
    if item.size and (int(item.min()) < 0 or int(item.max()) >= n_items):
        bad = item[(item < 0) | (item >= n_items)]
        raise ValueError(f"'{name}' must hold item indices in [0, {n_items - 1}] (n_items={n_items}); got "
                         f"{bad.size} outside, for example {int(bad[0])}.")
