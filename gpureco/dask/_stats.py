"""Summaries of per-user results that live on a Dask cluster: gpureco.summarize's table, and the
Evaluator's summary() dict from per-partition states that merge exactly."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pandas as pd

from .. import _validation as v
from ..analysis._stats import summarize as summarize_one
from . import _partitions as parts

_HALF = 26  # a 53-bit mantissa summed as two halves: int64 sums of 2**27-bit values cannot overflow
_SCALE = 1074 + 53  # every float64 is an integer multiple of 2**-1074; m * 2**(exponent - 53) with exponent >= -1073


def summarize(per_user, **options):
    """:func:`gpureco.summarize` of a Dask DataFrame of per-user metrics, the same numbers.

    The per-user values are the state that merges exactly: the metric columns (8 bytes per
    user and metric) are gathered to the client in user order and summarised there, so the
    mean, the spread, the median and both intervals are bit for bit those of one machine,
    for any partitioning (merging per-partition means would round differently; a median or
    a bootstrap interval has no exact merge at all). For the means alone, without gathering
    the values, see :func:`summary`.

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


def summary(per_user, counts=False):
    r"""The :meth:`gpureco.Evaluator.summary` dict of per-user results on a Dask cluster.

    ``{column: mean, ..., "users": n, "nan_users": users with a NaN value}`` as floats, each
    mean over the column's non-NaN values: the correctly rounded sum divided by their count,
    as the Evaluator computes it (``math.fsum(values) / n``), so the numbers are the
    Evaluator's for the same users, for any partitioning. Each partition reduces its rows to
    an exact state on its worker (per column: the count and the sum as an exact integer
    multiple of :math:`2^{-1127}`), and the client adds the states: exact sums merge without
    rounding, unlike means or float sums.

    Parameters
    ----------
    per_user : dask.dataframe.DataFrame or DataFrame
        One row per user and one float column per metric, as
        :func:`gpureco.dask.evaluate` returns it (``output="dask"`` keeps it on the workers).
    counts : bool, default=False
        Also ``"n_<column>"``: the users in each mean.

    Returns
    -------
    dict of str to float

    Examples
    --------
    >>> import pandas as pd, dask.dataframe as dd, gpureco.dask
    >>> per_user = dd.from_pandas(pd.DataFrame({"P@1": [1.0, 0.0, float("nan")],
    ...                                         "NDCG@2": [0.5, 0.25, float("nan")]}), npartitions=2)
    >>> gpureco.dask.summary(per_user)
    {'P@1': 0.5, 'NDCG@2': 0.375, 'users': 3.0, 'nan_users': 1.0}
    """
    counts = v.check_flag(counts, "counts")
    if parts.is_dask_frame(per_user):
        states = per_user.map_partitions(_state_of_partition, meta=(None, object)).compute()
    elif isinstance(per_user, pd.DataFrame):
        states = [_state(per_user)]
    else:
        raise TypeError(f"'per_user' must be a Dask or pandas DataFrame of per-user metrics; got "
                        f"{type(per_user).__name__}.")
    columns = list(per_user.columns)
    total = {"users": 0, "nan_users": 0, **{name: (0, 0) for name in columns}}
    for state in states:
        total["users"] += state["users"]
        total["nan_users"] += state["nan_users"]
        for name in columns:
            n, scaled = total[name]
            total[name] = (n + state[name][0], scaled + state[name][1])
    out, n_users = {}, {}
    for name in columns:
        n, scaled = total[name]
        out[name] = float(Fraction(scaled, 2**_SCALE)) / n if n else math.nan  # float(Fraction): correctly rounded
        n_users[f"n_{name}"] = float(n)
    out.update(users=float(total["users"]), nan_users=float(total["nan_users"]))
    return {**out, **n_users} if counts else out


def _state_of_partition(frame):
    return pd.Series([_state(frame)])


def _state(frame):
    """{column: (non-NaN values, their exact sum * 2**_SCALE as an int), "users", "nan_users"}."""
    state = {"users": len(frame), "nan_users": int(frame.isna().any(axis=1).sum())}
    for name in frame.columns:
        values = pd.to_numeric(frame[name], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        kept = values[~np.isnan(values)]
        if not np.isfinite(kept).all():
            raise ValueError(f"'per_user' column {name!r} holds an infinite value; per-user metrics are finite or NaN.")
        state[name] = (int(kept.size), _exact_sum(kept))
    return state


def _exact_sum(x):
    """The exact sum of float64 values, times 2**_SCALE, as a Python int (vectorised per exponent)."""
    mantissa, exponent = np.frexp(x)  # x = mantissa * 2**exponent, 0.5 <= |mantissa| < 1
    m = np.ldexp(mantissa, 53).astype(np.int64)  # exact: x = m * 2**(exponent - 53)
    order = np.argsort(exponent, kind="stable")
    exponent, m = exponent[order], m[order]
    starts = np.flatnonzero(np.r_[True, exponent[1:] != exponent[:-1]]) if x.size else np.zeros(0, np.int64)
    high = np.add.reduceat(m >> _HALF, starts) if x.size else []
    low = np.add.reduceat(m & (2**_HALF - 1), starts) if x.size else []
    total = 0
    for e, h, lo in zip(exponent[starts].tolist(), np.asarray(high).tolist(), np.asarray(low).tolist()):
        total += ((h << _HALF) + lo) << (e - 53 + _SCALE)
    return total
