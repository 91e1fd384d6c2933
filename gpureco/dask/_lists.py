"""evaluate_lists on a Dask cluster: lists and truth partitioned by user, each partition evaluated by
the single-machine function, the rows back in its order."""
from __future__ import annotations

import numpy as np
import pandas as pd

from .. import _validation as v
from .._lists import evaluate_lists as evaluate_lists_one
from . import _partitions as parts


def evaluate_lists(recs, truth, metrics=("P", "AP", "NDCG"), k=10, *, include_missing=False, group_by=None,
                   gain=None, convention="gpureco", ties=None, relevance_threshold=None, persistence=0.8,
                   client=None, npartitions=None):
    """:func:`gpureco.evaluate_lists` on Dask DataFrames of lists and held-out items.

    Both frames are partitioned by user (a hash of the ``user`` column), so every list of a
    user and every truth row of that user meet in one partition; each partition is
    evaluated by :func:`gpureco.evaluate_lists` on a worker, and the rows come back sorted as
    on one machine, with the same numbers.

    Parameters
    ----------
    recs : dask.dataframe.DataFrame or DataFrame
        Columns ``user``, ``item`` and ``rank`` or ``score`` (and the ``group_by`` columns), as
        in :func:`gpureco.evaluate_lists`.
    truth : dask.dataframe.DataFrame or DataFrame
        Columns ``user``, ``item`` and optionally ``rating``.
    metrics, k, include_missing, group_by, gain, convention, ties, relevance_threshold, persistence
        As in :func:`gpureco.evaluate_lists`; ``include_missing=True`` with ``group_by`` is
        refused (a partition does not see every run).
    client : distributed.Client, default=None
        The cluster; by default the current client.
    npartitions : int, default=None
        Partitions of users; by default that of ``recs``.

    Returns
    -------
    DataFrame
        As :func:`gpureco.evaluate_lists` returns it (indexed by the ``group_by`` columns and
        ``user``, sorted), ``attrs["nan_reasons"]`` and ``attrs["lists_without_truth"]``
        summed over the partitions.

    Examples
    --------
    >>> import pandas as pd, dask.dataframe as dd, gpureco.dask
    >>> from distributed import Client, LocalCluster
    >>> recs = dd.from_pandas(pd.DataFrame({"user": [1, 1, 1, 2, 2], "item": ["a", "b", "c", "a", "d"],
    ...                                     "rank": [1, 2, 3, 1, 2]}), npartitions=2)
    >>> truth = pd.DataFrame({"user": [1, 1, 2, 3], "item": ["b", "z", "a", "a"]})
    >>> with LocalCluster(n_workers=2, processes=False) as cluster, Client(cluster) as client:
    ...     gpureco.dask.evaluate_lists(recs, truth, metrics=["P@2", "R@2"], include_missing=True)
          P@2  R@2
    user
    1     0.5  0.5
    2     0.5  1.0
    3     0.0  0.0
    """
    import dask.dataframe as dd
    client = parts.client_of(client)
    include_missing = v.check_flag(include_missing, "include_missing")
    if include_missing and group_by is not None:
        raise ValueError("include_missing=True with 'group_by' is not supported on Dask: a partition of users does "
                         "not see every run. Evaluate each run on its own (filter recs by run), or on one machine.")
    frames = {}
    for name, frame in (("recs", recs), ("truth", truth)):
        if isinstance(frame, pd.DataFrame):
            frame = dd.from_pandas(frame, npartitions=1)
        if not parts.is_dask_frame(frame):
            raise TypeError(f"'{name}' must be a Dask or pandas DataFrame; got {type(frame).__name__}.")
        if "user" not in frame.columns:
            raise ValueError(f"'{name}' must have the columns user, item; got columns {list(frame.columns)}.")
        frames[name] = frame
    n = frames["recs"].npartitions if npartitions is None else v.check_int(npartitions, "npartitions", low=1)
    # every global option checked on the client, on the frames' empty heads
    options = dict(gain=gain, convention=convention, ties=ties, relevance_threshold=relevance_threshold,
                   persistence=persistence)
    meta = evaluate_lists_one(frames["recs"]._meta, frames["truth"]._meta, metrics, k, include_missing=include_missing,
                              group_by=group_by, **options)
    pieces = []
    for frame in frames.values():
        numbered = frame.map_partitions(_with_partition, n, meta=frame._meta.assign(_partition=np.int64(0)))
        pieces.append(numbered.set_index("_partition", divisions=tuple(range(n + 1)), sort=True).to_delayed())
    edges = np.arange(n + 1)
    delayed = parts.tasks(_lists_of_partition, edges, *pieces,
                          shared=[dict(metrics=metrics, k=k, include_missing=include_missing, group_by=group_by,
                                       **options)])
    results = parts.compute(client, delayed)
    out = pd.concat([r for r in results if len(r)] or [meta]).sort_index(kind="stable")
    out.attrs["nan_reasons"] = {}
    for r in results:
        for rule, count in r.attrs["nan_reasons"].items():
            out.attrs["nan_reasons"][rule] = out.attrs["nan_reasons"].get(rule, 0) + count
    out.attrs["lists_without_truth"] = sum(r.attrs["lists_without_truth"] for r in results)
    return out


def _with_partition(frame, n):
    """The frame with the partition of each row's user: a hash of the id (numbers as float64 values, -0.0 as 0.0, so
    that recs and truth of other number dtypes agree: user 1 and user 1.0 are one user, as evaluate_lists matches
    them; two large integers that round to one float share a partition, which is harmless)."""
    users = frame["user"]
    if users.dtype.kind in "iubf":
        users = users.astype(np.float64) + 0.0
    hashed = pd.util.hash_pandas_object(users, index=False).to_numpy()
    return frame.assign(_partition=(hashed % np.uint64(n)).astype(np.int64))


def _lists_of_partition(start, stop, recs, truth, options):
    return evaluate_lists_one(recs.reset_index(drop=True), truth.reset_index(drop=True), **options)
