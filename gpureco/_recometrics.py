"""calc_reco_metrics: recometrics' function of that name, with the definitions of docs/metrics.md.

A translation of recometrics' flags and defaults into the engine's Request; recometrics'
defaults (k=5, P/AP/NDCG by flags, the as_df switch and its dict layout) live here and
nowhere else (docs/conventions.md).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from . import _output as o
from . import _validation as v
from .engine._conventions import Options, reversed_items
from .engine._engine import Problem, run
from .engine._registry import METRICS, column_name


def calc_reco_metrics(X_train, X_test, A, B, k=5, item_biases=None, as_df=True, precision=True,
                      trunc_precision=False, recall=False, average_precision=True,
                      trunc_average_precision=False, ndcg=True, hit=False, rr=False, roc_auc=False,
                      pr_auc=False, all_metrics=False, rename_k=True, break_ties_with_noise=False,
                      min_pos_test=1, min_items_pool=2, consider_cold_start=True, cumulative=False,
                      nthreads=-1, seed=1, device="auto", *, gain=None, batch_size=None,
                      max_memory=None, output=None, user_ids=None, tf32=False, convention="gpureco", ties=None,
                      relevance_threshold=None):
    r"""Per-user ranking metrics of a factor model, as recometrics computes them (with its bugs fixed).

    The recometrics-compatible front door: its signature and defaults (k=5, P, AP and NDCG
    selected by boolean flags, ``as_df``, the dict layout with ``"P@K"`` keys and ``"K"``) are
    recometrics' own, kept here for code written for recometrics. Everything else is gpureco's
    one set of conventions (docs/conventions.md), shared with :func:`evaluate`,
    :class:`Evaluator`, :func:`top_k` and :func:`evaluate_lists`: the ``gain`` option, the
    ``output`` choices, ``user_ids``, ``device``, and ``convention``, ``ties`` and
    ``relevance_threshold`` for another library's definitions (docs/peers.md).

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
    gain : {"linear", "exponential", "binary"}, default=None
        NDCG gain of a test value g: g, 2**g - 1, or [g > 0]; None: the convention's
        ("linear" for gpureco's and recometrics').
    batch_size : int, default=None
        Users per score block; by default as many as fit in ``max_memory``.
    max_memory : int, default=None
        Bytes of workspace. On the CPU (default 256 MiB, grown to one user's row for huge
        catalogues): blocks of batch_size users' scores (4 bytes per score for float32
        factors, else 8), by default about 48 MiB (at least 64 users) each, two where the budget
        holds them (one scored while the other is ranked), else one as large as it allows; a
        budget below one user's row is an error. On
        the GPU (default 1 GiB): score tiles of up to 65,536 items per user of the batch, and
        the batch's test items; a CUDA out-of-memory error halves the batch and retries. At
        least one user per batch; the inputs and the per-user results come on top of it.
    output : {None, "pandas", "numpy", "cupy", "torch"}, default=None
        None: as ``as_df`` says. "pandas": the DataFrame. "numpy", "cupy", "torch": the dict
        that ``as_df=False`` gives (recometrics' layout), of NumPy arrays, of CuPy arrays that
        stay in GPU memory (GPU backend only), or of torch tensors on the device that
        evaluated (no copy on the CPU; for use inside a training loop).
    user_ids : sequence, default=None
        The caller's id of each row of ``X_test``: the DataFrame's index (named ``user``).
        Default: the row numbers, as recometrics.
    tf32 : bool, default=False
        Score float32 factors on TF32 tensor cores (GPU only): each factor split into two
        TF32 parts, three products in two cuBLAS GEMMs, or inside the fused kernel where
        ``gpureco.engine._gpu.FUSED`` is set (docs/gpu.md); for models of fewer than 128
        factors the FP32 tiles, measured faster there. The score filter's
        error bound is then about 4 times FP32's (F * 2**-22 of the score scale instead of
        F * 2**-24), so a few more comparisons go to the exactly defined score: the results
        are exactly the same as with ``tf32=False``.
    convention : str, default="gpureco"
        The name of a peer library ("lenskit", "ranx", ...; every name in the table of
        docs/peers.md): P, R, AP and NDCG as that library defines them (discount,
        denominators, gain, which test entries are relevant, tie order), exactly as
        :func:`evaluate` computes them with the same option. The formulas above are
        gpureco's (and recometrics').
    ties : str, default=None
        The order of equal scores (docs/peers.md; ``"first"``, gpureco's, by ascending item
        index); None: the convention's. An unknown value raises an error naming the valid ones.
    relevance_threshold : float, default=None
        Only test entries whose value is at least this are relevant (the others are ordinary
        pool items); None: every stored entry.

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
    X_train, X_test = v.interactions(X_train, X_test)
    n_users, n_items = X_test.shape
    if n_items == 0:  # (else: "'k' must be an int in the range [1, 0]")
        raise ValueError(f"'X_test' must have at least one item (column) to rank; got shape {X_test.shape}.")
    k = v.check_int(k, "k", low=1, high=n_items)
    flags = dict(precision=precision, trunc_precision=trunc_precision, recall=recall,
                 average_precision=average_precision, trunc_average_precision=trunc_average_precision,
                 ndcg=ndcg, hit=hit, rr=rr, roc_auc=roc_auc, pr_auc=pr_auc)
    flags = {name: v.check_flag(value, name) for name, value in flags.items()}
    all_metrics, as_df, rename_k, cumulative, break_ties_with_noise, tf32 = (
        v.check_flag(value, name) for value, name in ((all_metrics, "all_metrics"), (as_df, "as_df"),
                                                      (rename_k, "rename_k"), (cumulative, "cumulative"),
                                                      (break_ties_with_noise, "break_ties_with_noise"),
                                                      (tf32, "tf32")))
    names = [m.column for m in METRICS if all_metrics or flags[m.flag]]
    if not names:
        raise ValueError("No metric selected: set at least one of " + ", ".join(f"{f}=True" for f in flags)
                         + ", or all_metrics=True.")
    # the options as evaluate reads them (engine._conventions), through the same steps
    options = Options(convention, ties, gain, relevance_threshold)
    options.check_ties(names, break_ties_with_noise)
    request = v.request(names, np.arange(1, k + 1) if cumulative else [k], X_test, min_pos_test=min_pos_test,
                        min_items_pool=min_items_pool, consider_cold_start=consider_cold_start, gain=options.gain,
                        nthreads=nthreads, batch_size=batch_size, max_memory=max_memory)
    request = dataclasses.replace(request, convention=options.convention, tie_mode=options.tie_mode)
    backend = o.backend_for(device, output or "pandas")
    A, B, item_biases = v.factors_on(backend, A, B, item_biases, n_users, n_items, reverse=options.reverse)
    seed = v.check_seed(seed)
    v.check_disjoint(X_train, X_test)
    X_test = options.relevant_matrix(X_test)
    if options.reverse:  # ties by descending item: the items in reverse order (B and item_biases above)
        X_train, X_test = reversed_items(X_train), reversed_items(X_test)
    problem = Problem(X_train, X_test, A, B, item_biases, seed, break_ties_with_noise, backend, tf32)
    index = o.user_index(user_ids, n_users)
    values, counts = run(problem, request)
    output = output or ("pandas" if as_df else "numpy")
    return _format(values, k, output, backend, cumulative, rename_k, counts, index)


def _format(values, k, output, backend, cumulative, rename_k, counts, index):
    """recometrics' output layouts: dict of arrays, or a DataFrame with its column names."""
    if not cumulative:
        values = {name: a[:, 0] if a.ndim == 2 else a for name, a in values.items()}
    if output != "pandas":
        return {**o.arrays(values, output, backend), "K": k}
    if cumulative:
        columns = {}
        for name, a in values.items():
            if a.ndim == 1:
                columns[name] = a
            else:
                columns.update({column_name(name, i + 1): a[:, i] for i in range(a.shape[1])})
    else:
        columns = {column_name(name, k if rename_k and name.endswith("@K") else None): a for name, a in values.items()}
    return o.frame(columns, counts, index)
