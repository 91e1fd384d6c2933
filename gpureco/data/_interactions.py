"""Interaction frames (user, item[, value][, timestamp]) to sparse matrices and back, with the id mapping."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd
import scipy.sparse as sp

from .. import _validation as v


class IdMap(NamedTuple):
    """Row and column labels of matrices built by :func:`to_csr`: ``users[row]`` is the id of that row."""
    users: pd.Index
    items: pd.Index


def _checked_ids(ids):
    """An IdMap of distinct labels (a label twice would name two rows)."""
    if not isinstance(ids, IdMap):
        raise TypeError(f"'ids' must be a gpureco.IdMap (as returned by to_csr); got {type(ids).__name__}.")
    ids = IdMap(*(labels if isinstance(labels, pd.Index) else pd.Index(labels) for labels in ids))
    for kind, labels in zip(("users", "items"), ids):
        if not labels.is_unique:
            raise ValueError(f"'ids' must hold distinct {kind}; {labels[labels.duplicated()].tolist()[0]!r} appears more than "
                             "once.")
    return ids


class RowError(ValueError):
    """An input error located at a row of a frame (0-based position), so that callers can name the line."""

    def __init__(self, message, frame, row):
        super().__init__(message)
        self.frame, self.row = frame, row


def check_columns(frame, name, required, optional=()):
    """`frame` must be a DataFrame holding the `required` columns."""
    if not isinstance(frame, pd.DataFrame):
        raise TypeError(f"{v.label(name)} must be a pandas DataFrame with columns {', '.join(required)}; "
                        f"got {type(frame).__name__}.")
    v.check_unique_columns(frame, name)
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise ValueError(f"{v.label(name)} must have the column(s) {', '.join(map(repr, missing))} "
                         f"(expected {', '.join(required + tuple(optional))}); got columns {list(frame.columns)}.")


def _check_ids(column, name, label):
    missing = column.isna().to_numpy()
    if missing.any():
        row = int(np.flatnonzero(missing)[0])
        raise RowError(f"{v.label(name)} has {int(missing.sum())} missing {label} ids, the first at row {row}.",
                       name, row)


def _values(frame, name, value):
    if value is None or value not in frame.columns:
        return np.ones(len(frame))
    dtype = frame[value].dtype  # (pd.to_numeric reads datetimes as nanoseconds, drops imaginary parts)
    if pd.api.types.is_complex_dtype(dtype) or dtype.kind in "mM" or isinstance(dtype, pd.DatetimeTZDtype):
        raise TypeError(f"{v.label(name)}: column {value!r} must hold real numbers; got dtype {dtype}.")
    values = pd.to_numeric(frame[value], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    bad = ~np.isfinite(values)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise RowError(f"{v.label(name)}: column {value!r} must hold finite numbers; row {row} has "
                       f"{frame[value].iloc[[row]].tolist()[0]!r}.", name, row)
    return values


DUPLICATES = ("error", "sum", "last", "max")


def combine_duplicates(frame, policy, name=None, *, user="user", item="item", value="value",
                       timestamp="timestamp"):
    """`frame` with one row per (user, item) pair, by `policy`.

    "error": a RowError at the second row of the first repeated pair. "sum": the values summed (without a value
    column, the rows counted into one), the latest timestamp. "last": the pair's last row (by timestamp when the
    frame has one, then by position). "max": the row with the largest value (ties: the last). The rows kept stay
    in the frame's order; the other columns come from the last row of the pair. `name` (a parameter's name or a
    description) starts the messages."""
    key = [user, item]
    if not frame.duplicated(key).any():
        return frame
    if policy == "error":
        row = int(np.flatnonzero(frame.duplicated(key))[0])
        u, i = frame[user].iloc[[row]].tolist()[0], frame[item].iloc[[row]].tolist()[0]
        first = int(np.flatnonzero((frame[user] == u) & (frame[item] == i))[0])
        raise RowError(f"{v.label(name) + ': ' if name else ''}user {u!r}, item {i!r} is in row {first} and again in "
                       f"row {row}; each (user, item) pair must appear once.", name, row)
    if policy == "sum" or (policy == "max" and value in frame.columns):  # numbers first: rows named as given
        frame = frame.assign(**{value: _values(frame, name or "the file", value if value in frame.columns else None)})
    ordered = frame.sort_values(timestamp, kind="stable") if timestamp in frame.columns else frame
    if policy == "max" and value in frame.columns:
        ordered = ordered.sort_values(value, kind="stable")
    out = ordered.drop_duplicates(key, keep="last")
    if policy == "sum":
        combined = ordered.groupby(key, sort=False).agg(
            **{value: (value, "sum")}, **({timestamp: (timestamp, "max")} if timestamp in frame.columns else {}))
        at = pd.MultiIndex.from_frame(out[key])
        out = out.assign(**{column: combined[column].reindex(at).to_numpy() for column in combined.columns})
    return out.sort_index(kind="stable")


_ORDINALS = ("first", "second", "third", "fourth", "fifth")


def to_csr(*frames, ids=None, user="user", item="item", value="value"):
    """Sparse matrices from interaction frames, with one id mapping shared by all of them.

    Parameters
    ----------
    *frames : DataFrame
        Each with columns ``user`` and ``item`` (any hashable id type) and optionally ``value``
        (the interaction's strength; 1 when the column is absent). Typically ``train, test``.
    ids : IdMap, default=None
        Use this mapping (rows and columns stay where they were, for instance the rows of a
        factor matrix); an id outside it is an error. By default the mapping is the sorted
        union of the ids in all the frames.
    user, item, value : str
        Column names.

    Returns
    -------
    tuple
        ``(X_1, ..., X_n, ids)``: one ``scipy.sparse.csr_array`` per frame, of shape
        (number of user ids, number of item ids), duplicate (user, item) pairs summed; and
        the :class:`IdMap`.
    """
    if not frames:
        raise TypeError("to_csr needs at least one frame; got none.")
    names = [f"the {_ORDINALS[i]} frame passed to to_csr" if i < len(_ORDINALS) else f"frame {i + 1} passed to to_csr"
             for i in range(len(frames))]
    for frame, name in zip(frames, names):
        check_columns(frame, name, (user, item), (value,))
        if value != "value" and value is not None and value not in frame.columns:  # a name given, and misspelled?
            raise ValueError(f"{v.label(name)} has no column {value!r} ('value'); got columns {list(frame.columns)} "
                             "(leave 'value' at its default for a frame without values: each one counts 1).")
        _check_ids(frame[user], name, "user")
        _check_ids(frame[item], name, "item")
    for column in (user, item):
        v.check_same_ids([(name, frame[column]) for frame, name in zip(frames, names)], column,
                         "the frames passed to to_csr")
    if ids is None:
        ids = IdMap(*(pd.Index(pd.unique(v.concat_ids([f[col] for f in frames]))).sort_values()
                      for col in (user, item)))
    else:
        ids = _checked_ids(ids)
    matrices = []
    for frame, name in zip(frames, names):
        rows, cols = ids.users.get_indexer(frame[user]), ids.items.get_indexer(frame[item])
        for codes, col, label in ((rows, user, "user"), (cols, item, "item")):
            unknown = codes < 0
            if unknown.any():
                row = int(np.flatnonzero(unknown)[0])
                raise RowError(f"{v.label(name)} has {int(unknown.sum())} {label} ids not in 'ids', the first "
                               f"{frame[col].iloc[[row]].tolist()[0]!r} at row {row}.", name, row)
        X = sp.csr_array((_values(frame, name, value), (rows, cols)), shape=(len(ids.users), len(ids.items)))
        X.sum_duplicates()
        matrices.append(X)
    return (*matrices, ids)


def from_csr(X, ids=None, *, user="user", item="item", value="value"):
    """The interaction frame of a sparse matrix (one row per stored entry, by row then column),
    with the ids of ``ids`` (an :class:`IdMap`) or the row and column numbers."""
    if sp.issparse(X):
        if X.dtype.kind not in "biuf":
            raise TypeError(f"'X' must hold real numbers; got a sparse matrix of dtype {X.dtype}.")
    else:
        X = v.real_array(X, "'X'")
    if X.ndim != 2:
        raise ValueError(f"'X' must be a 2-dimensional matrix; got shape {X.shape}.")
    if ids is not None:
        ids = _checked_ids(ids)
        if (len(ids.users), len(ids.items)) != X.shape:
            raise ValueError(f"'ids' must label the {X.shape[0]} rows and {X.shape[1]} columns of 'X'; got "
                             f"{len(ids.users)} users and {len(ids.items)} items.")
    X = sp.csr_array(X)
    X.sort_indices()
    rows = np.repeat(np.arange(X.shape[0], dtype=np.int64), np.diff(X.indptr))
    cols = X.indices.astype(np.int64)
    if ids is not None:
        rows, cols = ids.users[rows], ids.items[cols]
    return pd.DataFrame({user: rows, item: cols, value: X.data.astype(np.float64)})
