"""Users in partitions on a Dask cluster: the user side of a problem cut at the same rows, the item
side sent to every worker once, one task per partition, the results back in user order.

Client-side inputs (NumPy, SciPy) go into the task graph slice by slice, never scattered to one
worker: the scheduler can then run a partition again on another worker when its worker dies
(data scattered to a single worker would be lost with it). The item side is scattered with
``broadcast=True``, so every worker holds a copy and a lost worker loses none.
"""
from __future__ import annotations

import math
import sys
import warnings

import dask
import distributed
import numpy as np
import pandas as pd
import scipy.sparse as sp

from ..engine._engine import warn_nan

NAN_WARNING = "gpureco: .* users have every metric NaN"  # the engine's warning; merged over partitions


def client_of(client):
    """The given distributed.Client, or the current one."""
    if client is None:
        try:
            return distributed.default_client()
        except ValueError:
            raise ValueError("gpureco.dask needs a Dask cluster: pass 'client' (a distributed.Client), or create one "
                             "first, e.g. Client('tcp://scheduler:8786') or Client(LocalCluster()); got no client "
                             "and none is running.") from None
    if not isinstance(client, distributed.Client):
        raise TypeError(f"'client' must be a distributed.Client; got {type(client).__name__}.")
    return client


def is_dask_array(x):
    """Whether x is a Dask array (never importing dask.array to say no)."""
    module = sys.modules.get("dask.array")
    return module is not None and isinstance(x, module.Array)


def is_dask_frame(x):
    """Whether x is a Dask DataFrame (never importing dask.dataframe to say no)."""
    module = sys.modules.get("dask.dataframe")
    return module is not None and isinstance(x, module.DataFrame)


def edges(n_users, partition_size, client, A=None):
    """[0, s_1, ..., n_users]: partition i holds the users edges[i] <= u < edges[i + 1]. By
    default the row chunks of a Dask array A, else two partitions per worker."""
    if partition_size is None:
        if A is not None and is_dask_array(A) and not any(math.isnan(c) for c in A.chunks[0]):
            # (an empty chunk adds no partition: a repeated edge is no division of a frame's set_index)
            return np.unique(np.concatenate([[0], np.cumsum(A.chunks[0])])).astype(np.int64)
        n_workers = max(1, len(client.nthreads()))
        partition_size = max(1, -(-n_users // (2 * n_workers)))
    elif isinstance(partition_size, bool) or not isinstance(partition_size, (int, np.integer)) or partition_size < 1:
        raise ValueError(f"'partition_size' must be an int >= 1 (users per partition) or None; got {partition_size!r}.")
    return np.unique(np.r_[np.arange(0, n_users, int(partition_size)), n_users]).astype(np.int64)


def label(i, edges):
    """'partition 3 (users 300 to 399)'."""
    return f"partition {i} (users {edges[i]} to {edges[i + 1] - 1})"


def n_rows(value, name):
    """The number of users (rows) of a user-side input, None when it cannot say (a frame)."""
    if value is None or is_dask_frame(value):
        return None
    shape = getattr(value, "shape", None)
    if shape is None or len(shape) < 1 or (isinstance(shape[0], float) and math.isnan(shape[0])):
        raise TypeError(f"'{name}' must be a matrix with a known number of rows (NumPy, SciPy sparse, a Dask array "
                        f"with known chunks) or a Dask DataFrame of interactions; got {type(value).__name__}.")
    return int(shape[0])


def n_users_of(values, n_users):
    """The number of users that the user-side inputs {name: value} agree on (or `n_users` when given)."""
    found = {name: n_rows(value, name) for name, value in values.items()}
    found = {name: n for name, n in found.items() if n is not None}
    if n_users is not None:
        if isinstance(n_users, bool) or not isinstance(n_users, (int, np.integer)) or n_users < 1:
            raise ValueError(f"'n_users' must be an int >= 1; got {n_users!r}.")
        found["n_users"] = int(n_users)
    return agreed(found, "The number of users is unknown: every user-side input is a Dask DataFrame; pass "
                         "'n_users' (users are the row indices 0..n_users-1).",
                  "The user-side inputs must have the same number of users (rows)")


def agreed(found, unknown, differ):
    """The one size in {name: size} (the inputs' and the caller's); `unknown`: the message when
    there is none, `differ`: the start of the message when they disagree."""
    if not found:
        raise ValueError(unknown)
    if len(set(found.values())) > 1:
        raise ValueError(f"{differ}; got " + ", ".join(f"{name}: {n}" for name, n in found.items()) + ".")
    return next(iter(found.values()))


def pieces(value, edges, name):
    """One piece per partition: rows edges[i]:edges[i + 1] of `value` (None, NumPy/SciPy on the
    client, a Dask array, or a Dask DataFrame of interactions with integer 'user' rows)."""
    n = len(edges) - 1
    if value is None:
        return [None] * n
    if is_dask_frame(value):
        if "user" not in value.columns:
            raise ValueError(f"'{name}' (a Dask DataFrame of interactions) must have the columns user, item[, value]; "
                             f"got columns {list(value.columns)}.")
        # range partitioning: partition i holds edges[i] <= user < edges[i + 1] (the last one also user == n_users,
        # and values outside [0, n_users] land in the first or last: the partition's own check names them)
        ranged = value.set_index("user", divisions=tuple(int(e) for e in edges), sort=True)
        return ranged.to_delayed()
    if is_dask_array(value):
        chunks = {0: tuple(np.diff(edges).tolist())}
        if value.ndim == 2:
            chunks[1] = -1
        blocks = value.rechunk(chunks).to_delayed()
        return [blocks[i, 0] if value.ndim == 2 else blocks[i] for i in range(n)]
    if sp.issparse(value):
        value = sp.csr_array(value)  # row slices of COO or CSC matrices
    elif not hasattr(value, "__getitem__") or callable(value):
        raise TypeError(f"'{name}' must be an array, a sparse matrix, a Dask array or a Dask DataFrame; got "
                        f"{type(value).__name__}.")
    return [value[edges[i]:edges[i + 1]] for i in range(n)]


def interactions(piece, start, stop, n_items, name):
    """A partition's interactions as a CSR matrix of shape (stop - start, n_items): a matrix
    piece as it is, a frame piece (indexed by 'user', columns item[, value]) converted."""
    if not isinstance(piece, pd.DataFrame):
        return piece
    if "item" not in piece.columns:
        raise ValueError(f"'{name}' must have the columns user, item[, value]; got columns "
                         f"{['user'] + list(piece.columns)}.")
    users, items = piece.index.to_numpy(), piece["item"].to_numpy()
    for ids, column, high in ((users, "user", stop), (items, "item", n_items)):
        low = start if column == "user" else 0
        if ids.dtype.kind not in "iu":
            raise TypeError(f"'{name}' column {column!r} must hold integer row indices (of the user and item "
                            f"factors); got dtype {ids.dtype}. Map ids to rows first (gpureco.IdMap).")
        bad = (ids < low) | (ids >= high)
        if bad.any():
            raise ValueError(f"'{name}' has {int(bad.sum())} {column} indices outside [{low}, {high - 1}], for "
                             f"example {ids[bad][0]}; a {column} must be a row of the "
                             f"{'user' if column == 'user' else 'item'} factors.")
    if "value" in piece.columns:
        values = pd.to_numeric(piece["value"], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    else:
        values = np.ones(len(piece))
    X = sp.csr_array((values, (users - start, items)), shape=(stop - start, n_items))
    X.sum_duplicates()
    return X


def in_partition(i, edges, work, *args):
    """work(*args), its input errors re-raised with the partition named."""
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=NAN_WARNING, category=RuntimeWarning)
            return work(*args)
    except ValueError as error:  # subclasses too (their constructors differ): a ValueError naming the partition
        raise ValueError(f"{label(i, edges)}: {error}") from error
    except TypeError as error:
        raise TypeError(f"{label(i, edges)}: {error}") from error


def aligned(array):
    """`array` with its items aligned in memory: an array scattered to a worker may arrive at any byte
    offset of its message, and the engine ranks about 3x slower from unaligned factors (one copy fixes it)."""
    return array if array is None or not isinstance(array, np.ndarray) else np.require(array, requirements="A")


def broadcast(client, value):
    """`value` on every worker (one copy each), as a future; None stays None."""
    if value is None:
        return None
    return client.scatter(value, broadcast=True, hash=False)


def tasks(work, edges, *per_partition, shared=()):
    """One Delayed per partition: in_partition(i, edges, work, start, stop, pieces..., *shared)."""
    call = dask.delayed(in_partition, pure=False)
    return [call(i, edges, work, int(edges[i]), int(edges[i + 1]), *(p[i] for p in per_partition), *shared)
            for i in range(len(edges) - 1)]


def compute(client, delayed):
    """The results of a list of Delayed, in order; on an error the remaining work is cancelled."""
    futures = client.compute(delayed)
    try:
        return client.gather(futures)
    finally:
        client.cancel(futures)


def merged_counts(attrs, n_users, stacklevel):
    """The NaN counts {"rule N": users} summed over the partitions, with one warning as the engine gives
    (stacklevel: as warnings.warn's, counted from the caller of merged_counts)."""
    total = {}
    for counts in attrs:
        for rule, n in counts.items():
            total[rule] = total.get(rule, 0) + int(n)
    total = {rule: total[rule] for rule in sorted(total, key=lambda r: int(r.split()[-1]))}
    warn_nan({int(rule.split()[-1]): n for rule, n in total.items()}, n_users, stacklevel=stacklevel + 2)
    return total
