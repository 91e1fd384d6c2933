"""top_k on a Dask cluster: each partition's lists by the single-machine engine, in user order."""
from __future__ import annotations

import operator

import numpy as np
import scipy.sparse as sp

from .. import _validation as v
from .._top_k import top_k as top_k_one
from . import _partitions as parts
from ._metrics import _check_options, _client_side, _n_items, _on_client


def top_k(A, B, k, X_train=None, item_biases=None, *, client=None, partition_size=None, n_users=None,
          output="numpy", **options):
    """:func:`gpureco.top_k` for every user, on a Dask cluster, one task per partition of users.

    The lists are those :func:`gpureco.top_k` gives on one machine (same scores, same tie
    rule), for any number of workers and partitions.

    Parameters
    ----------
    A : array of shape (n_users, n_factors), Dask array, or None
    B : array of shape (n_items, n_factors), or None
    k, item_biases
        As in :func:`gpureco.top_k`; ``B`` and ``item_biases`` are sent to each worker once.
    X_train : sparse matrix or Dask DataFrame, default=None
        Items never recommended to the user; a Dask DataFrame as in
        :func:`gpureco.dask.calc_reco_metrics` (integer ``user`` and ``item`` rows).
    client, partition_size, n_users
        As in :func:`gpureco.dask.calc_reco_metrics`.
    output : {"numpy", "dask"}, default="numpy"
        NumPy arrays on the client, or Dask arrays whose chunks (the partitions) stay on the
        workers.
    **options
        ``device``, ``batch_size``, ``max_memory``, ``tf32``, ``seed``;
        ``break_ties_with_noise=True`` is refused.

    Returns
    -------
    items : int64 array of shape (n_users, k)
    scores : float64 array of shape (n_users, k)
        As :func:`gpureco.top_k` returns them, one row per user in user order.

    Examples
    --------
    >>> import numpy as np, gpureco.dask
    >>> from distributed import Client, LocalCluster
    >>> B = np.array([[0.0], [4.0], [3.0], [4.0]])
    >>> with LocalCluster(n_workers=2, processes=False) as cluster, Client(cluster) as client:
    ...     items, scores = gpureco.dask.top_k(np.ones((3, 1)), B, 2, device="cpu")
    >>> items.tolist()
    [[1, 3], [1, 3], [1, 3]]
    """
    client = parts.client_of(client)
    _check_options(options, "top_k")
    v.check_choice(output, "output", ("numpy", "dask"))
    B, item_biases = (_on_client(x) for x in (B, item_biases))
    n_users = parts.n_users_of({"A": A, "X_train": X_train}, n_users)
    n_items = _n_items(B, item_biases, None if X_train is None or parts.is_dask_frame(X_train) else X_train)
    none = None if A is None else np.zeros((0, A.shape[1]), dtype=getattr(A, "dtype", np.float64))
    top_k_one(none, B, k, sp.csr_array((0, n_items)), item_biases, device="cpu", **_client_side(options))
    edges = parts.edges(n_users, partition_size, client, A)
    shared = [parts.broadcast(client, B), parts.broadcast(client, item_biases), n_items, k, options]
    delayed = parts.tasks(_top_k_of_partition, edges, parts.pieces(A, edges, "A"),
                          parts.pieces(X_train, edges, "X_train"), shared=shared)
    if output == "numpy":
        results = parts.compute(client, delayed)
        return tuple(np.concatenate([r[i] for r in results]) for i in (0, 1))
    import dask.array as da
    futures = client.compute(delayed)
    sizes = np.diff(edges)
    return tuple(da.concatenate([da.from_delayed(client.submit(operator.getitem, f, i), shape=(int(n), k), dtype=dtype)
                                 for f, n in zip(futures, sizes)])
                 for i, dtype in ((0, np.int64), (1, np.float64)))


def _top_k_of_partition(start, stop, A, train, B, item_biases, n_items, k, options):
    X_train = parts.interactions(train, start, stop, n_items, "X_train")
    if X_train is None:  # without A, the rows of X_train are the users
        X_train = sp.csr_array((stop - start, n_items))
    return top_k_one(parts.aligned(A), parts.aligned(B), k, X_train, parts.aligned(item_biases), **options)
