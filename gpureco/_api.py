"""calc_reco_metrics: recometrics' function of that name, with the definitions of docs/metrics.md."""
from __future__ import annotations

import numpy as np
import pandas as pd
import scipy.sparse as sp

from . import _backend, _cpu
from . import _validation as v
from ._engine import DEFAULT_MAX_MEMORY, Problem, evaluate, host_array, on_device, warn_nan
from ._metrics import GAINS, METRICS, column_name


def calc_reco_metrics(X_train, X_test, A, B, k=5, item_biases=None, as_df=True, precision=True,
                      trunc_precision=False, recall=False, average_precision=True,
                      trunc_average_precision=False, ndcg=True, hit=False, rr=False, roc_auc=False,
                      pr_auc=False, all_metrics=False, rename_k=True, break_ties_with_noise=False,
                      min_pos_test=1, min_items_pool=2, consider_cold_start=True, cumulative=False,
                      nthreads=-1, seed=1, device="auto", *, gain="linear", batch_size=None,
                      max_memory=None, output=None, tf32=False):
    r"""Per-user ranking metrics of a factor model, as recometrics computes them (with its bugs fixed).

    For every user (row of ``X_test``), every item not in that user's row of ``X_train`` (the
    *pool*) is ranked by descending score :math:`s_{ui} = a_u \cdot b_i (+ \text{bias}_i)`;
    ties go to the lower item index (or to a seeded random key per (user, item) with
    ``break_ties_with_noise=True``). The stored entries of ``X_test`` are the relevant items,
    their values the NDCG gains. With :math:`h_i = 1` when the item at rank *i* is relevant,
    :math:`T` the test items and :math:`P@i = \frac{1}{i}\sum_{j \le i} h_j`:

    .. math::
        P@K = \tfrac{1}{K}\sum_{i \le K} h_i,\quad TP@K = \tfrac{1}{\min(K,|T|)}\sum_{i \le K} h_i,\quad
        R@K = \tfrac{1}{|T|}\sum_{i \le K} h_i,\quad AP@K = \tfrac{1}{|T|}\sum_{i \le K} h_i P@i,\quad
        TAP@K = \tfrac{1}{\min(K,|T|)}\sum_{i \le K} h_i P@i,

        NDCG@K = \frac{\sum_{i \le K} g_i / \log_2(i+1)}{\text{IDCG@K}},\quad
        Hit@K = [\textstyle\sum_{i \le K} h_i > 0],\quad RR@K = 1/\text{rank of the first hit (0 if > K)},

        ROC\_AUC = 1 - \frac{\sum_{p \in T} \text{rank}_p - |T|(|T|+1)/2}{|T|\, n_{neg}},\quad
        PR\_AUC = \tfrac{1}{|T|}\sum_{p \in T} P@\text{rank}_p .

    IDCG@K sums the user's positive gains in descending order over the first K positions.

    Parameters
    ----------
    X_train : sparse matrix or array-like of shape (n_users, n_items), or None
        Training interactions; stored non-zero entries are excluded from the ranking.
        None means no training data (every user is cold-start and counted as such).
    X_test : sparse matrix or array-like of shape (n_users, n_items)
        Held-out interactions; values are the NDCG gains.
    A : ndarray of shape (n_users, n_factors), or None
    B : ndarray of shape (n_items, n_factors), or None
        Factors, float32 or float64 (any other real type becomes float64). The score of item i
        for user u is defined as the float64 sum of ``A[u, f] * B[i, f]`` in the order
        f = 0..F-1, plus ``item_biases[i]``; BLAS computes it fast and the few comparisons
        within BLAS's rounding error are settled with the defined score, so the results
        never depend on batching or threads. Both None with ``item_biases`` evaluates a
        non-personalised model.
    k : int, default=5
        The cut-off K, in [1, n_items].
    item_biases : ndarray of shape (n_items,), default=None
        Added to every user's scores.
    as_df : bool, default=True
        A DataFrame with one row per user, or (False) a dict of arrays keyed ``"P@K"``, ...,
        plus ``"K"``; 2-d arrays (n_users, k) with ``cumulative=True``.
    precision, trunc_precision, recall, average_precision, trunc_average_precision, ndcg, hit, rr, roc_auc, pr_auc : bool
        Which metrics (P@K, TP@K, R@K, AP@K, TAP@K, NDCG@K, Hit@K, RR@K, ROC_AUC, PR_AUC).
    all_metrics : bool, default=False
        All ten.
    rename_k : bool, default=True
        Name the DataFrame columns ``P@5`` rather than ``P@K``.
    break_ties_with_noise : bool, default=False
        Break score ties by a seeded counter-based random key per (user, item) instead of by
        item index; still independent of batching, threads and device.
    min_pos_test : int, default=1
        Users with fewer test items get NaN.
    min_items_pool : int, default=2
        Users with fewer pool items get NaN.
    consider_cold_start : bool, default=True
        Evaluate users without training items (else NaN).
    cumulative : bool, default=False
        Every @K metric at every cut-off 1..k (columns ``P@1`` ... ``P@k``); each equals the
        non-cumulative value at that cut-off.
    nthreads : int, default=-1
        Threads for the ranking (negative: as joblib, -1 = all cores).
    seed : int, Generator or RandomState, default=1
        Seed of the tie-breaking keys (used with ``break_ties_with_noise=True``).
    device : {"auto", "cpu", "gpu", "cuda:N"}, default="auto"
        Where to evaluate: "auto" takes the current CUDA device when CuPy can use one (see
        ``gpureco.gpu_available()``), else the CPU, with a warning when CuPy is installed but
        finds no usable GPU; "gpu" (the current device) and "cuda:N" raise without one. Both
        backends give the same numbers. Factors already in GPU memory (CuPy arrays, objects
        with ``__cuda_array_interface__`` or CUDA DLPack, such as torch CUDA tensors) are used
        there without a copy; host arrays are copied once. CuPy sparse matrices are copied to
        the host for validation.
    gain : {"linear", "exponential", "binary"}, default="linear"
        NDCG gain of a test value g: g, 2**g - 1, or [g > 0].
    batch_size : int, default=None
        Users per score block; by default as many as fit in ``max_memory``.
    max_memory : int, default=None
        Bytes of workspace. On the CPU (default 256 MiB): the block of batch_size users' scores
        (4 bytes per score for float32 factors, else 8) plus 8 rows per ranking thread. On the
        GPU (default 1 GiB): score tiles of up to 65,536 items per user of the batch, and the
        batch's test items; a CUDA out-of-memory error halves the batch and retries. At least
        one user per batch; the inputs and the per-user results come on top of it.
    output : {None, "cupy"}, default=None
        None: as ``as_df`` says (host arrays). "cupy": a dict of CuPy arrays that stay in GPU
        memory (for use inside a training loop); needs the GPU backend.
    tf32 : bool, default=False
        Let cuBLAS use TF32 tensor cores for float32 factors (GPU only). The score filter is
        then coarser (its error bound is about 2**-9 of the score scale instead of F * 2**-24),
        so more comparisons go to the exactly defined score: the results stay exactly the
        same, and whether TF32 is faster depends on how many scores are near-ties.

    Returns
    -------
    DataFrame of shape (n_users, n_columns), or dict of ndarrays
        float64 values; the DataFrame's ``attrs["nan_reasons"]`` holds the NaN counts by rule.

    Notes
    -----
    A user's metrics are NaN when (rules of docs/metrics.md): (1) it has fewer than
    max(1, min_pos_test) test items; (2) its pool is smaller than min_items_pool; (3) it has
    no training items and consider_cold_start=False; (4) a score in its pool is NaN or
    infinite; (5) every pool score is equal; (6) every pool item is a test item (all metrics
    but NDCG); (7) the pool holds at most K items (P, TP, R and Hit only); (8) no test value
    is positive (NDCG only). One RuntimeWarning gives the counts. Unlike recometrics,
    gpureco honours min_pos_test > 1, computes the AUCs, AP, NDCG and RR when the pool is
    smaller than K, and its cumulative NDCG equals the single-K value.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp, gpureco
    >>> X_train = sp.csr_array(np.array([[1, 0, 0, 0], [0, 1, 0, 0]]))
    >>> X_test = sp.csr_array(np.array([[0, 1, 0, 1], [0, 0, 1, 0]]))
    >>> A = np.array([[1.0], [1.0]]); B = np.array([[0.0], [4.0], [3.0], [2.0]])
    >>> gpureco.calc_reco_metrics(X_train, X_test, A, B, k=2, average_precision=False)
       P@2    NDCG@2
    0  0.5  0.613147
    1  0.5  1.000000
    """
    X_train, X_test = interactions(X_train, X_test)
    n_users, n_items = X_test.shape
    backend = _backend.resolve_device(device)
    problem = Problem(X_train, X_test, None, None, None, 0, False, backend, bool(tf32))
    with on_device(problem):
        if backend[0] == "gpu":
            A, B, item_biases = v.as_factors(A, B, item_biases, n_users, n_items, _backend.cupy(), _backend.to_device)
        else:
            A, B, item_biases = v.as_factors(*(None if x is None else _backend.to_host(x, name)
                                               for x, name in ((A, "A"), (B, "B"), (item_biases, "item_biases"))),
                                             n_users, n_items)
    k = v.check_int(k, "k", low=1, high=n_items)
    flags = dict(precision=precision, trunc_precision=trunc_precision, recall=recall,
                 average_precision=average_precision, trunc_average_precision=trunc_average_precision,
                 ndcg=ndcg, hit=hit, rr=rr, roc_auc=roc_auc, pr_auc=pr_auc)
    names = [m.column for m in METRICS if all_metrics or bool(flags[m.flag])]
    if not names:
        raise ValueError("No metric selected: set at least one of " + ", ".join(f"{f}=True" for f in flags)
                         + ", or all_metrics=True.")
    min_pos_test = v.check_int(min_pos_test, "min_pos_test", low=0)
    min_items_pool = v.check_int(min_items_pool, "min_items_pool", low=0)
    nthreads = v.resolve_nthreads(nthreads)
    seed = v.check_seed(seed)
    check_gain(gain, X_test)
    batch_size, max_memory = v.check_sizes(batch_size, max_memory)
    if output is not None:
        v.check_choice(output, "output", ("cupy",))
    if output == "cupy" and backend[0] != "gpu":
        raise ValueError(f"output='cupy' needs the GPU backend; device={device!r} evaluates on the CPU.")
    v.check_disjoint(X_train, X_test)

    problem = Problem(X_train, X_test, A, B, item_biases, seed, bool(break_ties_with_noise), backend, bool(tf32))
    cutoffs = np.arange(1, k + 1) if cumulative else np.array([k])
    values, counts = evaluate(problem, names, cutoffs, min_pos_test=min_pos_test, min_items_pool=min_items_pool,
                              consider_cold_start=bool(consider_cold_start), nthreads=nthreads, gain=gain,
                              batch_size=batch_size, max_memory=max_memory)
    warn_nan(counts, n_users)
    if output == "cupy":
        return _format(values, k, False, cumulative, rename_k, counts)
    values = {name: _backend.to_host(a, name) for name, a in values.items()}
    return _format(values, k, as_df, cumulative, rename_k, counts)


def interactions(X_train, X_test):
    """Validated host CSR copies of the training and test interactions (X_train None: empty)."""
    if X_test is None:
        raise ValueError("'X_test' is required; got None.")
    X_test = v.as_csr(_backend.to_host(X_test, "X_test"), "X_test")
    if not np.all(np.isfinite(X_test.data)):
        raise ValueError(f"'X_test' values must be finite (they are NDCG gains); got "
                         f"{int(np.sum(~np.isfinite(X_test.data)))} NaN or infinite values.")
    if X_train is None:
        X_train = sp.csr_array(X_test.shape)
    return v.as_csr(_backend.to_host(X_train, "X_train"), "X_train", shape=X_test.shape), X_test


def check_gain(gain, X_test):
    v.check_choice(gain, "gain", GAINS)
    if gain == "exponential" and X_test.nnz and X_test.data.max() >= 1024:
        raise ValueError("gain='exponential' needs 'X_test' values below 1024 (2**v - 1 must be finite); "
                         f"got a maximum of {float(X_test.data.max())!r}.")


def _format(values, k, as_df, cumulative, rename_k, counts):
    """recometrics' output layouts: dict of arrays, or a DataFrame with its column names."""
    if not cumulative:
        values = {name: a[:, 0] if a.ndim == 2 else a for name, a in values.items()}
    if not as_df:
        return {**values, "K": k}
    if cumulative:
        columns = {}
        for name, a in values.items():
            if a.ndim == 1:
                columns[name] = a
            else:
                columns.update({column_name(name, i + 1): a[:, i] for i in range(a.shape[1])})
    else:
        columns = {column_name(name, k if rename_k and name.endswith("@K") else None): a for name, a in values.items()}
    df = pd.DataFrame(columns)
    df.attrs["nan_reasons"] = {f"rule {code}": n for code, n in counts.items()}
    return df


def top_k(A, B, k, X_train=None, item_biases=None, users=None, *, break_ties_with_noise=False, seed=1,
          device="auto", output=None, batch_size=None, max_memory=None, tf32=False):
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
        List length, >= 1. On the GPU, K up to 1,024 runs in one pass over the scores; larger
        K (and users with more near-ties than the kernel's buffer) take a full-row path.
    X_train : sparse matrix of shape (n_users, n_items), default=None
        Items never recommended to the user (consumed in training).
    item_biases : array of shape (n_items,), default=None
    users : array of int, default=None
        Rows of A to list (default: every user), in the order wanted.
    break_ties_with_noise, seed, device, batch_size, max_memory, tf32
        As in :func:`calc_reco_metrics`.
    output : {None, "cupy"}, default=None
        "cupy" keeps the lists in GPU memory (GPU backend only).

    Returns
    -------
    items : int64 array of shape (n_listed, k)
        Item indices, best first; -1 where the user's pool has fewer than k items whose
        score is not NaN (items with a NaN score are never listed).
    scores : float64 array of shape (n_listed, k)
        Their defined scores (NaN where items is -1).

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
    n_items = np.shape(B)[0] if B is not None else np.shape(item_biases)[0]
    n_users = np.shape(A)[0] if A is not None else (1 if X_train is None else X_train.shape[0])
    if X_train is None:
        X_train = sp.csr_array((n_users, n_items))
    X_train = v.as_csr(_backend.to_host(X_train, "X_train"), "X_train")
    n_users = X_train.shape[0] if A is None else n_users
    if X_train.shape != (n_users, n_items):
        raise ValueError(f"'X_train' must have shape ({n_users}, {n_items}) (users of 'A', items of 'B'); "
                         f"got {X_train.shape}.")
    k = v.check_int(k, "k", low=1)
    if users is None:
        users = np.arange(n_users, dtype=np.int64)
    else:
        users = np.asarray(_backend.to_host(users, "users"))
        if users.ndim != 1 or users.dtype.kind not in "iu" or (users.size and (users.min() < 0 or users.max() >= n_users)):
            raise ValueError(f"'users' must be a 1-d array of user indices in [0, {n_users - 1}]; got "
                             f"{users.dtype} values of shape {users.shape}.")
        users = users.astype(np.int64)
    seed = v.check_seed(seed)
    batch_size, max_memory = v.check_sizes(batch_size, max_memory)
    backend = _backend.resolve_device(device)
    if output is not None:
        v.check_choice(output, "output", ("cupy",))
        if backend[0] != "gpu":
            raise ValueError(f"output='cupy' needs the GPU backend; device={device!r} runs on the CPU.")
    problem = Problem(X_train, X_train, None, None, None, seed, bool(break_ties_with_noise), backend, bool(tf32))
    with on_device(problem):
        if backend[0] == "gpu":
            from . import _gpu
            A, B, item_biases = v.as_factors(A, B, item_biases, n_users, n_items, _backend.cupy(), _backend.to_device)
            scorer = _gpu.FactorScores(A, B, item_biases, tf32)
            items, scores = _gpu.top_k(X_train, users, scorer, k, seed, bool(break_ties_with_noise), batch_size,
                                       max_memory or _gpu.DEFAULT_MAX_MEMORY)
            if output == "cupy":
                return items, scores
            return host_array(items), host_array(scores)
        A, B, item_biases = v.as_factors(*(None if x is None else _backend.to_host(x, name)
                                           for x, name in ((A, "A"), (B, "B"), (item_biases, "item_biases"))),
                                         n_users, n_items)
        rows = batch_size or max(1, int((max_memory or DEFAULT_MAX_MEMORY) // (24 * max(1, n_items))))
        return _cpu.top_k(X_train, users, A, B, item_biases, k, seed, bool(break_ties_with_noise), rows)
