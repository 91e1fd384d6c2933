"""top_k: each user's top-K list of a factor model, by the defined scores and the tie rule."""
from __future__ import annotations

import numpy as np
import pandas as pd
import scipy.sparse as sp

from . import _output as o
from . import _validation as v
from .engine import _backend
from .engine._engine import Problem, host_array, top_k as engine_top_k


def top_k(A, B, k, X_train=None, item_biases=None, users=None, *, break_ties_with_noise=False, seed=1,
          device="auto", output="numpy", user_ids=None, batch_size=None, max_memory=None, tf32=False):
    r"""Each user's top-K list: the K pool items (not in ``X_train``) of highest score.

    Scores and ties are those of :func:`calc_reco_metrics`: the score of item i for user u is
    the float64 sum of ``A[u, f] * B[i, f]`` in order f = 0..F-1 plus ``item_biases[i]``,
    ties go to the lower item index (or the seeded key with ``break_ties_with_noise``), and
    both backends return the same lists.

    Parameters
    ----------
    A : array of shape (n_users, n_factors), or None
    B : array of shape (n_items, n_factors), or None
        Factors (None and None with ``item_biases``: a non-personalised model). NumPy arrays,
        or GPU arrays (CuPy, ``__cuda_array_interface__``, CUDA DLPack) used without a copy.
    k : int
        List length, in [1, n_items]. On the GPU, K up to 1,024 runs in one pass over the
        scores; larger K (and users with more near-ties than the kernel's buffer) take a
        full-row path.
    X_train : sparse matrix of shape (n_users, n_items), default=None
        Items never recommended to the user (consumed in training).
    item_biases : array of shape (n_items,), default=None
    users : array of int, default=None
        Rows of A to list (default: every user), in the order wanted.
    break_ties_with_noise, seed, device, batch_size, max_memory, tf32
        As in :func:`calc_reco_metrics`.
    output : {"pandas", "numpy", "cupy", "torch"}, default="numpy"
        ``(items, scores)`` as NumPy arrays, CuPy arrays left in GPU memory (GPU backend
        only) or torch tensors on the device that ranked; or "pandas": one long DataFrame
        with the columns ``user``, ``item``, ``rank`` (1 = best) and ``score``, the input of
        :func:`evaluate_lists` and :func:`beyond_accuracy` (no row where items is -1).
    user_ids : sequence, default=None
        The caller's id of each row of ``A``: the ``user`` column of the pandas output.
        Default: the row numbers.

    Returns
    -------
    items : int64 array of shape (n_listed, k)
        Item indices, best first; -1 where the user's pool has fewer than k items whose
        score is not NaN (items with a NaN score are never listed).
    scores : float64 array of shape (n_listed, k)
        Their defined scores (NaN where items is -1).
    (or, with output="pandas", one DataFrame)

    Examples
    --------
    >>> import numpy as np, gpureco
    >>> B = np.array([[0.0], [4.0], [3.0], [4.0]])
    >>> items, scores = gpureco.top_k(np.ones((1, 1)), B, 2, device="cpu")
    >>> items.tolist(), scores.tolist()
    ([[1, 3]], [[4.0, 4.0]])
    """
    if A is None and B is None and item_biases is None:
        raise ValueError("No model given: pass factors 'A' and 'B', or 'item_biases' for a non-personalised model.")
    if (A is None) != (B is None):  # as_factors says so too, but the shapes are needed first
        raise ValueError("'A' and 'B' must both be given, or both be None (non-personalised model from "
                         f"'item_biases'); got A={'None' if A is None else 'an array'}, "
                         f"B={'None' if B is None else 'an array'}.")
    A, B, item_biases = (None if x is None else _dense(x, name, ndim) for x, name, ndim in
                         ((A, "A", (2,)), (B, "B", (2,)), (item_biases, "item_biases", (1, 2))))
    # (item_biases may be a row or a column: as_factors reads either as one entry per item)
    n_items = B.shape[0] if B is not None else item_biases.shape[0] if item_biases.ndim == 1 else max(item_biases.shape)
    if X_train is not None:
        X_train = v.as_csr(_backend.to_host(X_train, "X_train"), "X_train")
    n_users = A.shape[0] if A is not None else (1 if X_train is None else X_train.shape[0])
    rows_of = "'A'" if A is not None else "'X_train'" if X_train is not None else "the model of 'item_biases' alone"
    if X_train is None:  # canonical like any X_train: the kernels read int64 indptr
        X_train = v.as_csr(sp.csr_array((n_users, n_items)), "X_train")
    n_users = X_train.shape[0] if A is None else n_users
    if X_train.shape != (n_users, n_items):
        raise ValueError(f"'X_train' must have shape ({n_users}, {n_items}) (users of 'A', items of 'B'); "
                         f"got {X_train.shape}.")
    if n_items == 0:  # (else: "'k' must be an int in the range [1, 0]")
        raise ValueError(f"'{'B' if B is not None else 'item_biases'}' must hold at least one item to list; got "
                         f"shape {(B if B is not None else item_biases).shape}.")
    k = v.check_int(k, "k", low=1, high=n_items)  # a list longer than the catalogue says nothing more
    if users is None:
        users = np.arange(n_users, dtype=np.int64)
    else:
        users = v.user_rows(users, n_users, "users", of="A")
    seed = v.check_seed(seed)
    break_ties_with_noise, tf32 = v.check_flag(break_ties_with_noise, "break_ties_with_noise"), v.check_flag(tf32, "tf32")
    batch_size, max_memory = v.check_sizes(batch_size, max_memory)
    backend = o.backend_for(device, output)
    index = o.user_index(user_ids, n_users, "user_ids", of=rows_of)
    A, B, item_biases = v.factors_on(backend, A, B, item_biases, n_users, n_items, of="B" if B is not None else "item_biases")
    problem = Problem(X_train, X_train, A, B, item_biases, seed, break_ties_with_noise, backend, tf32)
    items, scores = engine_top_k(problem, users, k, batch_size, max_memory)
    if output in ("cupy", "torch"):  # on the device that ranked, without a copy
        return o.arrays((items, scores), output, backend)
    items, scores = host_array(items), host_array(scores)
    if output == "pandas":
        return _long_frame(users if index is None else index[users], items, scores)
    return items, scores


def _long_frame(users, items, scores):
    """One row per listed item: user, item, rank (1 = best), score."""
    listed = items >= 0
    row, position = np.nonzero(listed)
    return pd.DataFrame({"user": np.asarray(users)[row], "item": items[listed], "rank": position + 1,
                         "score": scores[listed]})


def _dense(value, name, ndims):
    """A host or device array of `ndims` dimensions, checked before its shape is read."""
    v.refuse_sparse(value, f"'{name}'")
    array = v.host_array_or_device(value, f"'{name}'")
    if array.ndim not in ndims:
        raise ValueError(f"'{name}' must be {' or '.join(map(str, ndims))}-dimensional; got shape {array.shape}.")
    return array
