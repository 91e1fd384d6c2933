"""evaluate: the metrics of any model, from its score matrix or its score function."""
from __future__ import annotations

import numpy as np
import pandas as pd

from . import _validation as v
from .engine import _backend
from .engine._engine import Problem, run
from .engine._registry import parse_metrics, select_columns


def evaluate(scores, X_test, X_train=None, metrics=("P", "AP", "NDCG"), k=10, *, break_ties_with_noise=False,
             seed=1, min_pos_test=1, min_items_pool=2, consider_cold_start=True, gain="linear", device="auto",
             output="pandas", batch_size=None, max_memory=None, nthreads=-1):
    r"""Per-user metrics of any model, from its scores: a matrix, or a function of user ids.

    The same engine, definitions, tie rule and NaN rules as :func:`calc_reco_metrics`
    (docs/metrics.md), with the given scores as the scores: every item outside the user's
    row of ``X_train`` is ranked by descending score, ties by ascending item index (or the
    seeded key with ``break_ties_with_noise=True``), and every metric follows from the
    ranks of the test items. Scores are compared as float64 (float32 scores convert
    exactly), so both backends give the same numbers.

    Parameters
    ----------
    scores : array of shape (n_users, n_items), or callable
        A dense score matrix: NumPy, CuPy, or any ``__cuda_array_interface__`` / CUDA DLPack
        array (a torch CUDA tensor), used in place on the GPU; or a function
        ``score_fn(user_ids) -> (len(user_ids), n_items) scores`` that gpureco calls batch by
        batch with int64 user ids (a NumPy array on the CPU backend, a CuPy array on the GPU
        backend), for models that are not dot products (a two-tower net in a training loop).
        Only users that can be evaluated are asked for (see the NaN rules).
    X_test, X_train : sparse matrix of shape (n_users, n_items)
        As in :func:`calc_reco_metrics` (X_train None: no training items).
    metrics : sequence of str, default=("P", "AP", "NDCG")
        Names from the registry: ``"P@10"``, ``"NDCG@5"``, ``"ROC_AUC"``, or bare ``"NDCG"``
        with the cut-offs of ``k``; an unknown name raises an error listing the valid ones.
    k : int or sequence of int, default=10
        Cut-off(s) for the metric names without ``@K``.
    output : {"pandas", "numpy", "cupy"}, default="pandas"
        A DataFrame (one row per user, ``attrs["nan_reasons"]`` with the NaN counts), a dict
        of NumPy arrays, or a dict of CuPy arrays left in GPU memory (GPU backend only).
    break_ties_with_noise, seed, min_pos_test, min_items_pool, consider_cold_start, gain, device, batch_size, max_memory, nthreads
        As in :func:`calc_reco_metrics`.

    Returns
    -------
    DataFrame or dict
        One column per metric and cut-off (``"P@10"``, ...), float64, NaN as the rules say.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp, gpureco
    >>> X_test = sp.csr_array(np.array([[0, 1, 0, 1], [0, 0, 1, 0]]))
    >>> scores = np.array([[0.1, 0.9, 0.5, 0.3], [0.4, 0.4, 0.4, 0.8]])
    >>> gpureco.evaluate(scores, X_test, metrics=["P@1", "R@2", "ROC_AUC"], device="cpu")
       P@1  R@2   ROC_AUC
    0  1.0  0.5  0.750000
    1  0.0  0.0  0.333333
    """
    X_train, X_test = v.interactions(X_train, X_test)
    n_users, n_items = X_test.shape
    selection = parse_metrics(metrics, k)
    request = v.request(selection.names, selection.cutoffs, X_test, min_pos_test=min_pos_test,
                        min_items_pool=min_items_pool, consider_cold_start=consider_cold_start, gain=gain,
                        nthreads=nthreads, batch_size=batch_size, max_memory=max_memory)
    seed = v.check_seed(seed)
    backend = v.backend_for(device, output, ("pandas", "numpy", "cupy"))
    v.check_disjoint(X_train, X_test)
    with _backend.device_context(backend):
        score_rows = _score_rows(scores, n_users, n_items, backend[0] == "gpu")
    problem = Problem(X_train, X_test, None, None, None, seed, bool(break_ties_with_noise), backend,
                      score_rows=score_rows)
    values, counts = run(problem, request, on_device_output=output == "cupy")
    columns = select_columns(values, selection)
    if output != "pandas":
        return columns
    df = pd.DataFrame(columns)
    df.attrs["nan_reasons"] = {f"rule {code}": n for code, n in counts.items()}
    return df


def _score_rows(scores, n_users, n_items, on_gpu):
    """users -> float64 (len(users), n_items) score rows, on the backend's device."""
    xp = _backend.cupy() if on_gpu else np

    def checked(rows, what, shape):
        if rows.dtype.kind not in "fiub":
            raise TypeError(f"{what} must be an array of real numbers; got dtype {rows.dtype}.")
        if tuple(rows.shape) != shape:
            raise ValueError(f"{what} must have shape {shape}; got {tuple(rows.shape)}.")
        return rows

    def on_backend(x, what, shape):
        x = v.host_array_or_device(x, what)
        if isinstance(x, np.ndarray):  # checked on the host, before it moves
            checked(x, what, shape)
        return checked(_backend.to_device(x) if on_gpu else np.asarray(_backend.to_host(x, what)), what, shape)

    if callable(scores):
        def from_function(users):
            rows = on_backend(scores(users), f"score_fn's result for {users.shape[0]} users", (users.shape[0], n_items))
            return xp.asarray(rows, dtype=xp.float64)
        return from_function
    matrix = on_backend(scores, "'scores'", (n_users, n_items))
    return lambda users: xp.asarray(matrix[users], dtype=xp.float64)
