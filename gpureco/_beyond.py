"""Beyond-accuracy metrics of top-K lists, computed on the host with NumPy for any input device.

A list matrix has one row per user and the recommended item indices in list order; -1 marks
an empty position (a list shorter than its row). The formulas are in docs/metrics.md
("Beyond accuracy") and in `beyond_accuracy`'s docstring.
"""
from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

from . import _validation as v
from .engine import _backend
from .engine._registry import BEYOND_METRICS, parse_metrics

_CHUNK = 2**24  # floats of gathered item vectors held at once by intra_list_diversity


def beyond_accuracy(lists, metrics, k=None, *, n_items, popularity=None, n_train_users=None, item_vectors=None,
                    baseline=None, head_fraction=0.2):
    r"""Coverage, novelty, exposure and diversity of top-K lists.

    For each cut-off K, the list :math:`L_u` of user *u* is the non-empty entries among the
    first K of row *u* of ``lists`` (:math:`|L_u| \le K`). With :math:`e_i` the number of
    lists in which item *i* appears (its exposure), :math:`E = \sum_i e_i`,
    :math:`N_{items}` = ``n_items``, :math:`c_i` = ``popularity[i]`` and :math:`N` =
    ``n_train_users``:

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
      RePlay divides by K instead of :math:`|L_u|`: the same for full lists.
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
    - ``Unexpectedness@K`` (per list): fraction of :math:`L_u` not in the baseline's list of
      the same user (row *u* of ``baseline``, cut at the same K).

    Parameters
    ----------
    lists : int array of shape (n_users, width), numpy or cupy
        Item indices in [0, n_items) in list order, -1 for an empty position; no item twice
        in a row. A row narrower than K is a list shorter than K.
    metrics : str or list of str
        Names such as ``"ILD@10"``, or without ``@K`` with ``k``: Coverage, Surprisal, Gini,
        Entropy, ARP, Tail, ILD, Unexpectedness (case ignored).
    k : int or list of int, default=None
        Cut-offs of the names without ``@K``.
    n_items : int
        Size of the catalogue.
    popularity : array of shape (n_items,), default=None
        Number of training users of each item (for example ``X_train.getnnz(axis=0)``);
        needed by Surprisal, ARP and Tail.
    n_train_users : int, default=None
        :math:`N`, the number of training users (at least 2); needed by Surprisal.
    item_vectors : float array of shape (n_items, d), default=None
        Needed by ILD; a listed item's vector must not be zero.
    baseline : int array of shape (n_users, width_b), default=None
        Another model's lists, in the same form; needed by Unexpectedness.
    head_fraction : float, default=0.2
        Share of the catalogue in the popularity head (Tail), in (0, 1).

    Returns
    -------
    dict
        ``{"ILD@10": array of shape (n_users,), "Coverage@10": float, ...}`` in the order asked;
        per-list arrays are float64, CuPy arrays when ``lists`` is one. Every value is computed
        on the host with NumPy, whatever the inputs' device (GPU inputs are copied), so the
        numbers never depend on the device (docs/architecture.md, the determinism rule).

    Notes
    -----
    Per-list values are NaN for an empty list, and ILD is NaN for a list of fewer than 2
    items. Gini is NaN when no list holds an item (E = 0); Entropy is then 0.

    Examples
    --------
    >>> import numpy as np, gpureco
    >>> lists = np.array([[0, 1], [0, 2], [0, -1]])
    >>> out = gpureco.beyond_accuracy(lists, ["Coverage", "Gini", "ARP"], k=2, n_items=4,
    ...                               popularity=np.array([9, 3, 1, 0]))
    >>> out["Coverage@2"], round(out["Gini@2"], 4), out["ARP@2"].tolist()
    (0.75, 0.45, [6.0, 5.0, 9.0])
    """
    lists_on_gpu = _backend.array_module(lists) is not np
    lists, popularity, item_vectors, baseline = (
        None if x is None else _backend.to_host(x, name)
        for x, name in ((lists, "lists"), (popularity, "popularity"), (item_vectors, "item_vectors"),
                        (baseline, "baseline")))
    selection = parse_metrics(metrics, k, allowed=[m.column for m in BEYOND_METRICS])
    n_items = v.check_int(n_items, "n_items", low=1)
    lists = _as_lists(lists, "lists", n_items)
    needs = {"Surprisal@K": ("popularity", "n_train_users"), "ARP@K": ("popularity",), "Tail@K": ("popularity",),
             "ILD@K": ("item_vectors",), "Unexpectedness@K": ("baseline",)}
    given = dict(popularity=popularity, n_train_users=n_train_users, item_vectors=item_vectors, baseline=baseline)
    for name in selection.names:
        missing = [arg for arg in needs.get(name, ()) if given[arg] is None]
        if missing:
            raise ValueError(f"Metric {name} in 'metrics' needs {' and '.join(repr(a) for a in missing)}; got None.")
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
    if baseline is not None:
        baseline = _as_lists(baseline, "baseline", n_items)
        if baseline.shape[0] != lists.shape[0]:
            raise ValueError(f"'baseline' must have one row per row of 'lists' ({lists.shape[0]}); "
                             f"got shape {baseline.shape}.")
    if item_vectors is not None:
        item_vectors = _unit_vectors(item_vectors, lists, n_items)
    head_fraction = v.check_fraction(head_fraction, "head_fraction")

    out = {}
    for name, cutoff in selection.columns:
        top = lists[:, :cutoff]
        exposure = np.bincount(top[top >= 0], minlength=n_items)
        column = name[: -len("@K")] + f"@{cutoff}"
        if name == "Coverage@K":
            out[column] = item_coverage(exposure)
        elif name == "Gini@K":
            out[column] = gini_index(exposure)
        elif name == "Entropy@K":
            out[column] = exposure_entropy(exposure)
        elif name == "Surprisal@K":
            out[column] = surprisal(top, popularity, n_train_users)
        elif name == "ARP@K":
            out[column] = average_popularity(top, popularity)
        elif name == "Tail@K":
            out[column] = tail_percentage(top, popularity, head_fraction)
        elif name == "ILD@K":
            out[column] = intra_list_diversity(top, item_vectors)
        elif name == "Unexpectedness@K":
            out[column] = unexpectedness(top, baseline[:, :cutoff], n_items)
    if lists_on_gpu:
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


def surprisal(lists, popularity, n_train_users):
    """Per list: mean of log2(N / max(c_i, 1)) / log2(N) over its items (RePlay's normalisation)."""
    information = np.log2(n_train_users / np.maximum(popularity, 1.0)) / math.log2(n_train_users)
    return _list_mean(lists, information)


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


def unexpectedness(lists, baseline, n_items):
    """Per list: fraction of its items not in the same row of `baseline`."""
    rows = np.arange(lists.shape[0], dtype=np.int64)[:, None] * (n_items + 1)
    known = np.sort((rows + baseline)[baseline >= 0])  # one key per (row, item) of the baseline
    known = np.concatenate([known, np.asarray([np.iinfo(np.int64).max], dtype=np.int64)])  # sentinel
    keys = rows + lists
    found = known[np.searchsorted(known, keys)] == keys
    listed = lists >= 0
    with np.errstate(divide="ignore", invalid="ignore"):
        return (listed & ~found).sum(axis=1) / listed.sum(axis=1).astype(np.float64)


def _list_mean(lists, item_values):
    """Per list: mean of item_values over its items; NaN for an empty list."""
    listed = lists >= 0
    values = np.where(listed, item_values[np.where(listed, lists, 0)], 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return values.sum(axis=1) / listed.sum(axis=1).astype(np.float64)


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
    norms = np.sqrt((vectors * vectors).sum(axis=1))
    used = np.zeros(n_items, dtype=bool)
    used[lists[lists >= 0]] = True
    bad = used & ~(np.isfinite(norms) & (norms > 0))
    if bool(bad.any()):
        raise ValueError(f"'item_vectors' of listed items must be finite and non-zero (cosine similarity is "
                         f"undefined otherwise); item {int(np.flatnonzero(bad)[0])} is not "
                         f"({int(bad.sum())} listed items are not).")
    return vectors / np.where(norms > 0, norms, 1.0)[:, None]
