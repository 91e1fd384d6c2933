"""calc_reco_metrics and evaluate on a Dask cluster: the single-machine functions on each partition
of users, the per-user frames back in user order, the NaN counts summed."""
from __future__ import annotations

import operator

import numpy as np
import pandas as pd
import scipy.sparse as sp

from .. import _output as o
from .. import _validation as v
from .._evaluate import evaluate as evaluate_one
from .._recometrics import calc_reco_metrics as calc_reco_metrics_one
from . import _partitions as parts

OUTPUTS = ("pandas", "dask")


def calc_reco_metrics(X_train, X_test, A, B, k=5, item_biases=None, *, client=None, partition_size=None,
                      n_users=None, output="pandas", user_ids=None, **options):
    """:func:`gpureco.calc_reco_metrics` on a Dask cluster, one task per partition of users.

    Each worker evaluates its users with the single-machine engine (``device="auto"``: its
    GPU when it has one), so every number is the one :func:`gpureco.calc_reco_metrics` gives
    on one machine, for any number of workers and partitions. ``B`` and ``item_biases`` are
    sent to each worker once; only they must fit one worker.

    Parameters
    ----------
    X_train, X_test : sparse matrix, array, or Dask DataFrame
        The interactions, as in :func:`gpureco.calc_reco_metrics`; or Dask DataFrames (for
        example ``dask.dataframe.read_parquet``) with integer columns ``user`` (the row of
        ``A``) and ``item`` (the row of ``B``), and optionally ``value`` (1 when absent;
        duplicate pairs summed, as :func:`gpureco.to_csr` does). X_train may be None.
    A : array of shape (n_users, n_factors), Dask array, or None
        User factors; a Dask array is evaluated chunk by chunk on the workers.
    B : array of shape (n_items, n_factors), or None
        Item factors, on the client (a Dask array is computed first).
    k, item_biases
        As in :func:`gpureco.calc_reco_metrics`.
    client : distributed.Client, default=None
        The cluster; by default the current client.
    partition_size : int, default=None
        Users per partition; by default the row chunks of a Dask ``A``, else two partitions
        per worker. The numbers do not depend on it.
    n_users : int, default=None
        The number of users when no input says it (every user-side input a Dask DataFrame).
    output : {"pandas", "dask"}, default="pandas"
        A pandas DataFrame on the client, or a Dask DataFrame whose partitions stay on the
        workers (its index, the user row, has the partitions' divisions).
    user_ids : sequence, default=None
        The caller's id of each user (row): the pandas output's index, named ``user``, as in
        :func:`gpureco.calc_reco_metrics` (``output="pandas"`` only).
    **options
        Any other option of :func:`gpureco.calc_reco_metrics` (metric flags, ``cumulative``,
        ``min_pos_test``, ``gain``, ``device``, ``nthreads`` (default: the worker's threads),
        ``batch_size``, ``max_memory``, ...), applied on every worker.
        ``break_ties_with_noise=True`` is refused: its random keys follow the user's row
        within one call.

    Returns
    -------
    DataFrame or dask.dataframe.DataFrame
        One row per user, in user order; the pandas frame's ``attrs["nan_reasons"]`` holds
        the NaN counts summed over the partitions (one warning for the whole run, as on one
        machine).

    Notes
    -----
    Global options are checked on the client before any work is sent; an input error found
    inside a partition (a wrong user index, a test item also in training) fails the run
    with that partition named. A worker lost mid-run is replaced by Dask and its partitions
    run again; the result is the same.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp, gpureco, gpureco.dask
    >>> from distributed import Client, LocalCluster
    >>> X_train = sp.csr_array(np.array([[1, 0, 0, 0], [0, 1, 0, 0]]))
    >>> X_test = sp.csr_array(np.array([[0, 1, 0, 1], [0, 0, 1, 0]]))
    >>> A = np.array([[1.0], [1.0]]); B = np.array([[0.0], [4.0], [3.0], [2.0]])
    >>> with LocalCluster(n_workers=2, processes=False) as cluster, Client(cluster) as client:
    ...     gpureco.dask.calc_reco_metrics(X_train, X_test, A, B, k=2, average_precision=False,
    ...                                    partition_size=1)
       P@2    NDCG@2
    0  0.5  0.613147
    1  0.5  1.000000
    """
    client = parts.client_of(client)
    _check_options(options, "calc_reco_metrics")
    v.check_choice(output, "output", OUTPUTS)
    B, item_biases = (_on_client(x) for x in (B, item_biases))
    n_users = parts.n_users_of({"X_test": X_test, "X_train": X_train, "A": A}, n_users)
    ids = _user_ids(user_ids, n_users, output)
    n_items = _n_items(B, item_biases, X_test)
    # every global option, B and item_biases checked on the client, on zero users; the frame's columns
    nobody = sp.csr_array((0, n_items))
    none = None if A is None else np.zeros((0, A.shape[1]), dtype=getattr(A, "dtype", np.float64))
    meta = calc_reco_metrics_one(nobody, nobody, none, B, k=k, item_biases=item_biases, device="cpu",
                                 **_client_side(options))
    edges = parts.edges(n_users, partition_size, client, A)
    shared = [parts.broadcast(client, B), parts.broadcast(client, item_biases), n_items, k, options]
    delayed = parts.tasks(_metrics_of_partition, edges, *(parts.pieces(x, edges, name) for x, name in
                                                          ((X_train, "X_train"), (X_test, "X_test"), (A, "A"))),
                          shared=shared)
    return _assembled(client, delayed, edges, meta, output, ids)


def _metrics_of_partition(start, stop, train, test, A, B, item_biases, n_items, k, options):
    X_train = parts.interactions(train, start, stop, n_items, "X_train")
    X_test = parts.interactions(test, start, stop, n_items, "X_test")
    frame = calc_reco_metrics_one(X_train, X_test, parts.aligned(A), parts.aligned(B), k=k,
                                  item_biases=parts.aligned(item_biases), **_on_worker(options))
    return _indexed(frame, start)


def evaluate(scores, X_test, X_train=None, metrics=("P", "AP", "NDCG"), k=10, *, client=None, partition_size=None,
             n_users=None, n_items=None, output="pandas", user_ids=None, **options):
    """:func:`gpureco.evaluate` on a Dask cluster, one task per partition of users.

    Each worker evaluates its users with the single-machine engine, so every number is the
    one :func:`gpureco.evaluate` gives on one machine, for any number of workers and
    partitions.

    Parameters
    ----------
    scores : callable, array of shape (n_users, n_items), or Dask array
        A score function ``score_fn(user_ids) -> (len(user_ids), n_items)`` scores, sent to
        each worker once (it must pickle: a model and its weights) and called there with
        global user ids (int64, a CuPy array on a GPU worker); or a score matrix, sliced by
        partition (a Dask array chunk by chunk on the workers).
    X_test, X_train
        As in :func:`calc_reco_metrics` (sparse matrices or Dask DataFrames of interactions).
    metrics, k
        As in :func:`gpureco.evaluate`.
    client, partition_size, n_users, output, user_ids
        As in :func:`calc_reco_metrics` (partitions follow a Dask score matrix's chunks).
    n_items : int, default=None
        The number of items when no input says it (a score function with Dask DataFrames).
    **options
        Any other option of :func:`gpureco.evaluate` (``min_pos_test``, ``gain``, ``device``,
        ``nthreads``, ``batch_size``, ...); ``break_ties_with_noise=True`` is refused.

    Returns
    -------
    DataFrame or dask.dataframe.DataFrame
        One row per user, in user order, ``attrs["nan_reasons"]`` summed (pandas).

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp, gpureco.dask
    >>> from distributed import Client, LocalCluster
    >>> X_test = sp.csr_array(np.array([[0, 1, 0, 1], [0, 0, 1, 0]]))
    >>> item_scores = np.array([0.1, 0.9, 0.5, 0.3])
    >>> def score_fn(users):  # every user sees the same scores
    ...     return np.tile(item_scores, (len(users), 1))
    >>> with LocalCluster(n_workers=2, processes=False) as cluster, Client(cluster) as client:
    ...     gpureco.dask.evaluate(score_fn, X_test, metrics=["P@1", "R@2"], device="cpu")
       P@1  R@2
    0  1.0  0.5
    1  0.0  1.0
    """
    client = parts.client_of(client)
    _check_options(options, "evaluate")
    v.check_choice(output, "output", OUTPUTS)
    given = {"X_test": X_test, "X_train": X_train} if callable(scores) else {"scores": scores, "X_test": X_test,
                                                                             "X_train": X_train}
    n_users = parts.n_users_of(given, n_users)
    ids = _user_ids(user_ids, n_users, output)
    n_items = _n_columns({"scores": None if callable(scores) else scores, "X_test": X_test, "X_train": X_train},
                         n_items)
    nobody = sp.csr_array((0, n_items))
    meta = evaluate_one(np.zeros((0, n_items)), nobody, nobody, metrics=metrics, k=k, device="cpu",
                        **_client_side(options))
    edges = parts.edges(n_users, partition_size, client, None if callable(scores) else scores)
    score_pieces = [None] * (len(edges) - 1) if callable(scores) else parts.pieces(scores, edges, "scores")
    shared = [parts.broadcast(client, scores) if callable(scores) else None, n_items, metrics, k, options]
    delayed = parts.tasks(_evaluate_partition, edges, score_pieces, *(parts.pieces(x, edges, name) for x, name in
                                                                      ((X_train, "X_train"), (X_test, "X_test"))),
                          shared=shared)
    return _assembled(client, delayed, edges, meta, output, ids)


def _evaluate_partition(start, stop, scores, train, test, score_fn, n_items, metrics, k, options):
    X_train = parts.interactions(train, start, stop, n_items, "X_train")
    X_test = parts.interactions(test, start, stop, n_items, "X_test")
    if score_fn is not None:
        def scores(users):  # the engine asks for the partition's rows; the model knows the global ids
            return score_fn(users + start)
    else:
        scores = parts.aligned(scores)
    frame = evaluate_one(scores, X_test, X_train, metrics=metrics, k=k, **_on_worker(options))
    return _indexed(frame, start)


def _check_options(options, name):
    """Refuse the options that the partitions cannot honour, before any work."""
    for refused in ("as_df", "output") + (("user_ids",) if name == "top_k" else ()):
        if refused in options:
            raise TypeError(f"gpureco.dask.{name} has no option {refused!r}: its 'output' is "
                            f"'{'numpy' if name == 'top_k' else 'pandas'}' or 'dask' (one row per user, in user order).")
    if options.get("break_ties_with_noise"):
        raise ValueError("break_ties_with_noise=True is not supported on Dask: its random tie keys follow each user's "
                         "row within one call, so they would change with the partitions. Break ties by item index "
                         "(the default), or evaluate on one machine.")


def _user_ids(user_ids, n_users, output):
    """The index of the pandas output (None: the rows), checked as on one machine."""
    if user_ids is not None and output != "pandas":
        raise ValueError("'user_ids' needs output='pandas': the Dask output is indexed by user row, with the "
                         "partitions' divisions (join the ids to it by row).")
    return o.user_index(user_ids, n_users)


def _client_side(options):
    """The options for the check on the client (which may lack the workers' GPU)."""
    return {name: value for name, value in options.items() if name != "device"}


def _on_worker(options):
    """The options on a worker: by default as many ranking threads as the worker has."""
    if "nthreads" in options:
        return options
    import distributed
    try:
        nthreads = distributed.get_worker().state.nthreads
    except ValueError:  # not on a worker (a synchronous scheduler): the engine's default
        return options
    return {**options, "nthreads": nthreads}


def _on_client(x):
    """The item side on the client: a Dask array computed."""
    return x.compute() if parts.is_dask_array(x) else x


def _n_items(B, item_biases, X_test):
    if B is not None:
        return int(np.shape(B)[0])
    if item_biases is not None:
        return int(np.shape(item_biases)[-1])
    return _n_columns({"X_test": X_test}, None)


def _n_columns(values, n_items):
    """The number of items the matrix inputs agree on (or `n_items` when given)."""
    found = {name: int(x.shape[1]) for name, x in values.items()
             if x is not None and not parts.is_dask_frame(x) and len(getattr(x, "shape", ())) == 2}
    if n_items is not None:
        found["n_items"] = v.check_int(n_items, "n_items", low=1)
    return parts.agreed(found, "The number of items is unknown: pass 'n_items' (items are the column indices "
                               "0..n_items-1 of the interactions).",
                        "The inputs must have the same number of items (columns)")


def _indexed(frame, start):
    """(frame indexed by the global user rows, its NaN counts)."""
    counts = frame.attrs.pop("nan_reasons")
    frame.index = pd.RangeIndex(start, start + len(frame))
    return frame, counts


def _assembled(client, delayed, edges, meta, output, ids=None):
    """The partitions' frames in user order (pandas with the summed NaN counts, indexed by `ids` or
    the rows; or Dask)."""
    n_users = int(edges[-1])
    meta.attrs.pop("nan_reasons", None)
    if output == "pandas":
        results = parts.compute(client, delayed)
        counts = parts.merged_counts([r[1] for r in results], n_users, stacklevel=3)
        frame = pd.concat([r[0] for r in results]) if results else meta
        frame.index = pd.RangeIndex(n_users) if ids is None else ids
        frame.attrs["nan_reasons"] = counts
        return frame
    import dask.dataframe as dd
    futures = client.compute(delayed)
    try:
        counts = client.gather([client.submit(operator.getitem, f, 1) for f in futures])
    except BaseException:
        client.cancel(futures)
        raise
    parts.merged_counts(counts, n_users, stacklevel=3)
    frames = [client.submit(operator.getitem, f, 0) for f in futures]
    return dd.from_delayed(frames, meta=meta, divisions=tuple(int(e) for e in edges[:-1]) + (n_users - 1,))
