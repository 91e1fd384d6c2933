"""summarize of per-user results that live on a Dask cluster."""
from __future__ import annotations

from ..analysis._stats import summarize as summarize_one
from . import _partitions as parts


def summarize(per_user, **options):
    """:func:`gpureco.summarize` of a Dask DataFrame of per-user metrics, the same numbers.

    The per-user values are the state that merges exactly: the metric columns (8 bytes per
    user and metric) are gathered to the client in user order and summarised there, so the
    mean, the spread, the median and both intervals are bit for bit those of one machine,
    for any partitioning (merging per-partition means would round differently; a median or
    a bootstrap interval has no exact merge at all).

    Parameters
    ----------
    per_user : dask.dataframe.DataFrame or DataFrame
        One row per user, as :func:`gpureco.dask.calc_reco_metrics` returns it with
        ``output="dask"`` (or a pandas frame, summarised as it is).
    **options
        As in :func:`gpureco.summarize` (``confidence``, ``ci``, ``n_resamples``, ``seed``,
        ``by``).

    Returns
    -------
    DataFrame
        As :func:`gpureco.summarize` returns it.

    Examples
    --------
    >>> import pandas as pd, dask.dataframe as dd, gpureco.dask
    >>> per_user = dd.from_pandas(pd.DataFrame({"P@2": [0.5, 1.0, 0.0, float("nan")]}), npartitions=2)
    >>> gpureco.dask.summarize(per_user)[["mean", "n_users", "n_nan"]]
            mean  n_users  n_nan
    metric
    P@2      0.5        3      1
    """
    if parts.is_dask_frame(per_user):
        per_user = per_user.compute()
    return summarize_one(per_user, **options)
