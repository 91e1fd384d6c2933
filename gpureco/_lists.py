"""evaluate_lists: the accuracy metrics of recommendation lists already made (top-K-list input)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from . import _output as o
from . import _validation as v
from .engine._metrics import metrics_from_ranks
from .engine._conventions import Options
from .engine._registry import RANK_METRICS, WHOLE_POOL, parse_metrics, select_columns


def evaluate_lists(recs, truth, metrics=("P", "AP", "NDCG"), k=10, *, include_missing=False, group_by=None,
                   gain=None, output="pandas", user_col="user", item_col="item", score_col="score",
                   rank_col="rank", value_col="rating", convention="gpureco", ties=None, relevance_threshold=None,
                   persistence=0.8):
    r"""Per-list accuracy metrics of ranked recommendation lists against held-out items.

    Each list (one user, within one run) is the ranking: its positions are the ranks of
    docs/metrics.md, an item the truth frame does not hold for that user is not relevant,
    and the relevant items missing from the list rank beyond every cut-off. With
    :math:`h_i = 1` when the item at position *i* is relevant, :math:`T` the user's truth
    items and :math:`g_i` the gain at position *i*:

    .. math::
        P@K = \tfrac{1}{K}\sum_{i \le K} h_i,\quad TP@K = \tfrac{1}{\min(K,|T|)}\sum_{i \le K} h_i,\quad
        R@K = \tfrac{1}{|T|}\sum_{i \le K} h_i,\quad AP@K = \tfrac{1}{|T|}\sum_{i \le K} h_i P@i,

        TAP@K = \tfrac{1}{\min(K,|T|)}\sum_{i \le K} h_i P@i,\quad
        NDCG@K = \frac{\sum_{i \le K} g_i / \log_2(i+1)}{\text{IDCG@}K},\quad
        Hit@K = [\textstyle\sum_{i \le K} h_i > 0],\quad RR@K = 1/\text{first relevant position} \ (0 \text{ if} > K).

    IDCG@K sums the user's largest positive truth gains (all of them, listed or not) over
    the first K positions. A list shorter than K has no item at the missing positions
    (P@K still divides by K).

    Parameters
    ----------
    recs : DataFrame or dict
        Columns ``user``, ``item`` and ``rank`` (ints 1..n within each list) or ``score``
        (ranked by descending score, ties by ascending item); where both are present (as in
        ``top_k(output="pandas")``), the ranks order each list, whose scores must not rise down it
        (else an error: one of the columns is stale); plus the
        ``group_by`` columns. Other columns are ignored. pandas, or polars (converted with
        ``.to_pandas()``). Or, as RePlay's metrics take them, a dict ``{user: [item, ...]}`` of
        lists in rank order.
    truth : DataFrame or dict
        A dict ``{user: [item, ...]}`` (every gain 1) or ``{user: {item: rating}}``; or columns ``user``, ``item`` and optionally ``rating`` (the NDCG gain; 1 when absent),
        plus any of the ``group_by`` columns it is keyed by (for example ``fold``): a run's
        lists are matched with the truth rows that share its values of those columns.
    metrics : str or list of str, default=("P", "AP", "NDCG")
        Names as ``"NDCG@10"``, or without ``@K`` for every cut-off in ``k``; any of P, TP, R,
        AP, TAP, NDCG, Hit, RR, DCG, F1, RBP, RPrec, ListAUC (case ignored). ROC_AUC, PR_AUC and bpref are refused: they need the
        whole pool of candidate items, which a list does not hold.
    k : int or list of int, default=10
        Cut-offs of the names without ``@K`` (the same default as :func:`evaluate`; only
        :func:`calc_reco_metrics` keeps recometrics' 5).
    include_missing : bool, default=False
        Also give every truth user without a list (in each run) a row, with 0 for every
        metric (it was recommended nothing; gpureco's choice: LensKit gives no such row).
        By default such users are left out.
    group_by : str or list of str, default=None
        Columns of ``recs`` that identify a run (data set, algorithm, fold, ...): one call
        evaluates every run. A missing value (NaN, None) in these columns is a run value of
        its own, as with ``DataFrame.groupby(..., dropna=False)``: those lists form one run,
        matched with the truth rows that have a missing value in the shared columns.
    gain : {"linear", "exponential", "binary"}, default=None
        NDCG gain of a rating r: r, 2**r - 1, or [r > 0]; None: the convention's ("linear",
        LensKit's, RePlay's and RecBole's "binary").
    user_col, item_col, score_col, rank_col, value_col : str
        The names of the ``user``, ``item``, ``score``, ``rank`` and ``rating`` columns in
        ``recs`` and ``truth`` (the results keep the names ``user`` ...). A ``value_col`` other
        than its default must name a column of ``truth``.
    convention, ties, relevance_threshold, persistence
        As in :func:`evaluate` (docs/peers.md); a list is its own length (LensKit's
        denominators), and ``ties`` orders equal scores by item: "first" or "last" only (the
        other tie rules need the whole pool's scores: :func:`evaluate`).
    output : {"pandas", "numpy", "cupy", "torch"}, default="pandas"
        The DataFrame below; or a dict with the index columns (``user`` and the ``group_by``
        columns) as NumPy arrays and one entry per metric: NumPy arrays, CuPy arrays (on the
        current GPU; needs one) or torch tensors (on the CPU, where the lists are evaluated).

    Returns
    -------
    DataFrame
        One row per evaluated list, indexed by the ``group_by`` columns and ``user`` (call
        ``.reset_index()`` for columns), sorted by them; one float64 column per metric, in
        the order asked (``"P@10"``). ``attrs["nan_reasons"]`` counts NaN values by rule;
        ``attrs["lists_without_truth"]`` counts the lists left out because their user has no
        truth row (no metric is defined for them).

    Notes
    -----
    Every truth row is relevant, whatever its rating; the rating is only the NDCG gain.
    NDCG is NaN (rule 8 of docs/metrics.md) for a user without a positive gain, counted in
    ``attrs["nan_reasons"]``; no warning is issued. The only other NaN: a convention that
    divides by the list's length (LensKit's P and AP) gives NaN for an empty list
    (``include_missing=True``), not counted there. Items beyond the largest cut-off are never
    looked at.

    Examples
    --------
    >>> import pandas as pd, gpureco
    >>> recs = pd.DataFrame({"user": [1, 1, 1, 2, 2], "item": ["a", "b", "c", "a", "d"],
    ...                      "rank": [1, 2, 3, 1, 2]})
    >>> truth = pd.DataFrame({"user": [1, 1, 2, 3], "item": ["b", "z", "a", "a"]})
    >>> gpureco.evaluate_lists(recs, truth, metrics=["P@2", "R@2", "RR@2"], include_missing=True)
          P@2  R@2  RR@2
    user
    1     0.5  0.5   0.5
    2     0.5  1.0   1.0
    3     0.0  0.0   0.0
    """
    backend = o.backend_for("auto" if output == "cupy" else "cpu", output)
    include_missing = v.check_flag(include_missing, "include_missing")
    names = {user_col: "user", item_col: "item", score_col: "score", rank_col: "rank", value_col: "rating"}
    for given in names:
        if not isinstance(given, str):
            raise TypeError(f"Column names (user_col, item_col, score_col, rank_col, value_col) must be str; got "
                            f"{given!r}.")
    # a column that has a canonical name but is not the one named (a 'user' column beside user_col='u') is one of the
    # ignored others: dropped before the renaming, which would give two columns one name
    ignored = [target for given, target in names.items() if given != target and target not in names]
    recs, truth = (v.as_pandas(_from_dict(x, name), name, what) for x, name, what in (
        (recs, "recs", "recommendations"), (truth, "truth", "held-out items")))
    if value_col != "rating" and value_col not in truth.columns:  # named, and misspelled? (else: no gains, silently)
        raise ValueError(f"'truth' has no column {value_col!r} (value_col); got columns {list(truth.columns)} (leave "
                         "value_col at its default, 'rating', where there is none).")
    recs, truth = (x.drop(columns=[c for c in ignored if c in x.columns]).rename(columns=names) for x in (recs, truth))
    options = Options(convention, ties, gain, relevance_threshold, persistence)
    if options.tie_mode:
        raise ValueError(f"evaluate_lists ranks each list by its ranks or scores, ties by item: 'ties' must be "
                         f"'first' or 'last' here; got ties={options.ties!r}"
                         f"{'' if ties else f' (convention={convention!r} averages ties)'}. Pass ties='first', "
                         "or score the whole pool with gpureco.evaluate for the other tie rules.")
    gain = options.gain
    group_by = _group_by(group_by)
    selection = _selection(metrics, k)
    options.check_ties(selection.names, False)  # (ranx's RBP with another gain)
    by = _check_columns(recs, truth, group_by)
    if "rating" in truth.columns or options.threshold is not None or options.convention.relevant != "stored":
        keep, ratings = options.relevant(_gains(truth, "linear"))
        truth = truth.assign(rating=ratings)[keep]
    shared = [c for c in group_by if c in truth.columns]
    max_k = int(selection.cutoffs.max())

    # integer codes: lists (sorted by their keys), and items common to recs and truth (sorted: ties of
    # scores go by ascending item); the per-row arrays go as soon as they are used (1M lists of 10: 10M rows)
    keys = group_by + ["user"]
    list_id, n_lists = _list_ids(recs, keys)
    item_codes, item_values = pd.factorize(v.concat_ids([recs["item"], truth["item"]]), sort=True)
    n_codes = max(len(item_values), 1)
    item_codes = item_codes.astype(np.int32 if n_codes <= np.iinfo(np.int32).max else np.int64)  # half the bytes
    rec_item, truth_item = item_codes[: len(recs)], item_codes[len(recs):].astype(np.int64)
    rec_key = list_id * n_codes + rec_item
    by_key, sorted_key = _check_unique(rec_key, recs, "recs", keys)
    del rec_key
    rank = _ranks(recs, by, list_id, rec_item if not options.reverse else -rec_item, keys)
    list_length = np.bincount(list_id, minlength=n_lists)
    del rec_item, item_codes

    # the evaluated lists: (run, user) pairs with truth, and with include_missing the truth users without a list
    some_row = np.empty(n_lists, dtype=np.int64)
    some_row[list_id] = np.arange(list_id.size)  # a row of each list: they share the key columns
    del list_id
    lists = recs[keys].iloc[some_row].reset_index(drop=True).assign(_list=np.arange(n_lists))
    truth_users = truth[shared + ["user"]].drop_duplicates()
    if include_missing:
        if group_by:
            runs = lists[group_by].drop_duplicates()
            rows = runs.merge(truth_users, on=shared) if shared else runs.merge(truth_users, how="cross")
        else:
            rows = truth_users
        rows = rows.merge(lists, on=keys, how="left")
        rows["_list"] = rows["_list"].fillna(-1).astype(np.int64)
    else:
        rows = lists.merge(truth_users, on=shared + ["user"])
    rows = rows.sort_values(keys, kind="stable").reset_index(drop=True)

    # one entry per (evaluated list, truth item): its position in the list, or max_k + 1 if absent
    gains = _gains(truth, gain)
    truth_items = pd.DataFrame({**{c: truth[c] for c in shared + ["user"]}, "_item": truth_item, "_gain": gains})
    truth_lists = (truth.groupby(shared + ["user"], sort=False, dropna=False).ngroup().to_numpy(np.int64) if shared
                   else pd.factorize(truth["user"])[0].astype(np.int64))
    _check_unique(truth_lists * n_codes + truth_item, truth, "truth", shared + ["user"])
    entries = rows[shared + ["user", "_list"]].assign(_row=np.arange(len(rows))).merge(truth_items, on=shared + ["user"])
    del truth_items, truth_lists, truth_item, gains
    entry_row = entries["_row"].to_numpy()
    if np.any(entry_row[1:] < entry_row[:-1]):  # (pandas keeps the left frame's order: this is a safeguard)
        entries = entries.iloc[np.argsort(entry_row, kind="stable")]
    n_test = np.bincount(entries["_row"].to_numpy(np.int64), minlength=len(rows)).astype(np.int64)
    beyond = max(max_k, int(n_test.max(initial=0)) if "RPrec" in selection.names else 0) + 1  # RPrec: the top |T|
    entry_key = entries["_list"].to_numpy(np.int64) * n_codes + entries["_item"].to_numpy(np.int64)  # < 0: no list
    entry_rank = np.full(entry_key.size, beyond, dtype=np.int64)  # absent, or listed beyond every cut-off
    if sorted_key.size:
        at = np.minimum(np.searchsorted(sorted_key, entry_key), sorted_key.size - 1)
        found = sorted_key[at] == entry_key
        entry_rank[found] = np.minimum(rank[by_key[at[found]]], beyond)
    del sorted_key, by_key, rank

    listed = rows["_list"].to_numpy(np.int64)
    values = metrics_from_ranks(entry_rank, entries["_gain"].to_numpy(np.float64), n_test,
                                n_test + beyond,  # a pool larger than any cut-off, with negatives: rules 6, 7 never apply
                                selection.cutoffs, selection.names, np.ones(len(rows), bool), gain=gain,
                                length=np.where(listed >= 0, np.append(list_length, 0)[listed], 0),
                                convention=options.convention, persistence=options.persistence)
    index = pd.MultiIndex.from_frame(rows[keys]) if group_by else pd.Index(rows["user"], name="user")
    out = pd.DataFrame(select_columns(values, selection), index=index)
    out.attrs["nan_reasons"] = {"rule 8": int(np.isnan(values["NDCG@K"][:, 0]).sum())} if "NDCG@K" in values else {}
    out.attrs["nan_reasons"] = {rule: n for rule, n in out.attrs["nan_reasons"].items() if n}
    out.attrs["lists_without_truth"] = int(n_lists - (rows["_list"] >= 0).sum())
    if output == "pandas":
        return out
    keys = {name: out.index.get_level_values(name).to_numpy() for name in out.index.names}
    return {**keys, **o.arrays({name: out[name].to_numpy() for name in out.columns}, output, backend)}


def _from_dict(frame, name):
    """RePlay's dict inputs as a frame: {user: [item, ...]} (ranks 1, 2, ... in list order),
    {user: [(item, score), ...]} (recs: ranked by score) or {user: {item: rating}}; anything
    else as it is."""
    if not isinstance(frame, dict) or {"user", "item"} <= set(frame):  # {column: values}: a frame's columns
        return pd.DataFrame(frame) if isinstance(frame, dict) else frame
    users, items, values, scored = [], [], [], []
    for user, entries in frame.items():
        if isinstance(entries, dict):
            values.extend(entries.values())
            items.extend(entries)
        elif isinstance(entries, (list, tuple, np.ndarray, pd.Series)):
            entries = list(entries)
            pairs = name == "recs" and bool(entries) and all(isinstance(e, tuple) and len(e) == 2 for e in entries)
            scored.append(pairs)
            items.extend(e[0] for e in entries) if pairs else items.extend(entries)
            values.extend(e[1] for e in entries) if pairs else values.extend(range(1, len(entries) + 1))
        else:
            raise TypeError(f"'{name}' as a dict must map each user to a list of items, of (item, score) pairs "
                            f"(recs), or an {{item: rating}} dict; user {user!r} maps to {type(entries).__name__}.")
        users.extend([user] * len(entries))
    if any(scored) and not all(scored):
        raise TypeError(f"'{name}' as a dict must give every user a list of (item, score) pairs, or every user a "
                        "list of items; got both.")
    value = "score" if any(scored) else "rank" if name == "recs" else "rating"
    if name == "truth" and not any(isinstance(e, dict) for e in frame.values()):
        return pd.DataFrame({"user": users, "item": items})
    return pd.DataFrame({"user": users, "item": items, value: values})


def _group_by(group_by):
    """group_by as a list of distinct column names."""
    if group_by is None:
        return []
    if isinstance(group_by, str):
        return [group_by]
    if not isinstance(group_by, (list, tuple)) or not all(isinstance(c, str) for c in group_by):
        raise TypeError(f"'group_by' must be a column name or a list of column names (str); got {group_by!r}.")
    if len(set(group_by)) != len(group_by):
        raise ValueError(f"'group_by' must name each column once; got {list(group_by)}.")
    return list(group_by)


def _selection(metrics, k):
    selection = parse_metrics(metrics, k, allowed=[m.column for m in RANK_METRICS])
    asked = [name for name in WHOLE_POOL if name in selection.names]
    if asked:
        raise ValueError(f"{' and '.join(asked)} cannot be computed from top-K lists ('metrics'): it needs the "
                         "rank of every candidate item (the whole pool), which a list does not hold. Evaluate the "
                         "model's scores instead (calc_reco_metrics).")
    return selection


def _check_columns(recs, truth, group_by):
    """The ranking column of recs ("rank" or "score"), after checking every required column."""
    for name, frame, required in (("recs", recs, ["user", "item"] + group_by), ("truth", truth, ["user", "item"])):
        missing = [c for c in required if c not in frame.columns]
        if missing:
            raise ValueError(f"'{name}' must have the columns {required}; it lacks {missing} "
                             f"(got columns {list(frame.columns)}).")
    clash = [c for c in group_by if c in ("user", "item", "rank", "score", "rating")]
    if clash:
        raise ValueError(f"'group_by' must name run columns other than user, item, rank, score and rating; got {clash}.")
    for column in ["user", "item"] + [c for c in group_by if c in truth.columns]:
        v.check_same_ids([("recs", recs[column]), ("truth", truth[column])], column, "'recs' and 'truth'")
    for name, frame, ids in (("recs", recs, ["user", "item"]), ("truth", truth, ["user", "item"])):
        for column in ids:
            missing = frame[column].isna().to_numpy()
            if missing.any():
                raise ValueError(f"'{name}' column {column!r} has {int(missing.sum())} missing values (NaN/None), "
                                 f"the first at row {int(np.flatnonzero(missing)[0])}; ids must be present.")
    by = [c for c in ("rank", "score") if c in recs.columns]  # both (top_k's frame): the ranks order the lists
    if not by:
        raise ValueError("'recs' must have a column 'rank' (positions 1..n) or 'score' (ranked descending); got "
                         f"neither (columns {list(recs.columns)}).")
    if len(by) == 2:
        v.check_ranks_follow_scores(recs, ["user", *group_by], "rank", "score", "recs")
    return by[0]


def _list_ids(recs, keys):
    """(each row's list number, the number of lists): lists numbered in the order of their keys.
    Lists of one numeric user column already in order (the usual output of a recommender) are
    numbered in one pass; other keys are grouped by pandas."""
    users = recs["user"]
    if keys == ["user"] and pd.api.types.is_numeric_dtype(users) and not pd.api.types.is_bool_dtype(users):
        values = users.to_numpy()
        if values.size and bool(np.all(values[1:] >= values[:-1])):
            list_id = np.zeros(values.size, dtype=np.int64)
            np.cumsum(values[1:] != values[:-1], out=list_id[1:])
            return list_id, int(list_id[-1]) + 1
    groups = recs.groupby(keys, sort=True, dropna=False)
    return groups.ngroup().to_numpy(np.int64), groups.ngroups


def _check_unique(key, frame, name, keys):
    """No (list, item) pair twice: `key` numbers the pairs of `frame`'s rows. (the rows in key
    order (a stable argsort), the keys in that order)."""
    order = np.argsort(key, kind="stable")
    sorted_key = key[order]
    repeated = np.flatnonzero(sorted_key[1:] == sorted_key[:-1])
    if repeated.size:
        row = frame[keys + ["item"]].iloc[int(order[repeated[0] + 1])]
        raise ValueError(f"'{name}' has {repeated.size} duplicate ({', '.join(keys)}, item) rows, for example "
                         f"{_describe(row, keys + ['item'])}; an item can appear once per list.")
    return order, sorted_key


def _describe(row, columns):
    """'user 1, item 10': a row's values, as Python scalars."""
    return ", ".join(f"{c} {row[c].item() if isinstance(row[c], np.generic) else row[c]!r}" for c in columns)


def _ranks(recs, by, list_id, item, keys):
    """Each row's position in its list: the given rank (checked to be 1..n), or by descending score."""
    integers = by == "rank" and recs[by].dtype.kind in "iu"
    values = recs[by].to_numpy() if integers else v.numeric_column(recs, by, "recs", finite=True)
    if by == "rank":  # 1..n once in each list of n rows: every (list, rank) slot is filled, without a sort
        length = np.bincount(list_id)
        whole = True if integers else bool(np.all(values == np.floor(values)))
        if whole and np.all((values >= 1) & (values <= length[list_id])):
            slot = (np.cumsum(length) - length - 1)[list_id]
            slot += values.astype(np.int64, copy=False)
            filled = np.zeros(slot.size, dtype=bool)
            filled[slot] = True
            if filled.all():
                return values
        values = values.astype(np.float64)
    # ranks by sorting: by score, or to say which list's ranks are wrong
    order = np.lexsort((values, list_id)) if by == "rank" else np.lexsort((item, -values, list_id))
    sorted_list = list_id[order]
    starts = np.flatnonzero(np.r_[True, sorted_list[1:] != sorted_list[:-1]]) if order.size else np.zeros(0, int)
    position = np.arange(order.size) - np.repeat(starts, np.diff(np.r_[starts, order.size])) + 1
    rank = np.empty(order.size, dtype=np.int64)
    rank[order] = position
    if by == "rank":
        bad = np.flatnonzero(values != rank)
        if bad.size:
            given = np.sort(values[list_id == list_id[bad[0]]])
            shown = ", ".join(f"{r:g}" for r in given[:10]) + (", ..." if given.size > 10 else "")
            where = _describe(recs[keys].iloc[int(bad[0])], keys)
            raise ValueError(f"'recs' ranks must be 1, 2, ..., n within each list; the list of {where} has "
                             f"ranks [{shown}] ({int(np.unique(list_id[bad]).size)} lists are wrong).")
    return rank


def _gains(truth, gain):
    if "rating" not in truth.columns:
        return np.ones(len(truth))
    ratings = v.numeric_column(truth, "rating", "truth", finite=True)
    if gain == "exponential" and ratings.size and ratings.max() >= 1024:
        raise ValueError("gain='exponential' needs 'truth' ratings below 1024 (2**r - 1 must be finite); "
                         f"got a maximum of {float(ratings.max())!r}.")
    return ratings
