"""evaluate and Evaluator: the metrics of any model, from its score matrix, its score function
or its factors; once (evaluate), or every epoch of a training loop (Evaluator)."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd

from . import _output as o
from . import _validation as v
from .engine._conventions import Options, reversed_items
from .engine import _backend
from .engine._engine import Problem, run, warn_nan
from .engine._registry import NAN_REASONS, RANK_METRICS, column_name, parse_metrics, select_columns


def evaluate(scores, X_test, X_train=None, metrics=("P", "AP", "NDCG"), k=10, *, break_ties_with_noise=False,
             seed=1, min_pos_test=1, min_items_pool=2, consider_cold_start=True, gain=None, device="auto",
             output="pandas", user_ids=None, batch_size=None, max_memory=None, nthreads=-1, convention="gpureco",
             ties=None, relevance_threshold=None, persistence=0.8):
    r"""Per-user metrics of any model, from its scores: a matrix, or a function of user ids.

    The same engine, definitions, tie rule and NaN rules as :func:`calc_reco_metrics`
    (docs/metrics.md), with the given scores as the scores: every item outside the user's
    row of ``X_train`` is ranked by descending score, ties by ascending item index (or the
    seeded key with ``break_ties_with_noise=True``), and every metric follows from the
    ranks of the test items. Scores are compared as float64 (float32, float16 and bfloat16
    scores convert exactly; integers beyond 2**53 and longdouble are rounded, and scores that
    round to one float64 tie), so both backends give the same numbers. To evaluate the same
    interactions again and again (every epoch), build an :class:`Evaluator` once instead.

    Parameters
    ----------
    scores : array of shape (n_users, n_items), or callable
        A dense score matrix: NumPy, CuPy, a torch tensor (on any device, requiring grad or
        not, any floating dtype), a JAX array, or any ``__cuda_array_interface__`` / DLPack
        array; GPU arrays are used in place on the GPU. Or a function
        ``score_fn(user_ids) -> (len(user_ids), n_items) scores`` that gpureco calls batch by
        batch with int64 user ids (a NumPy array on the CPU backend, a CuPy array on the GPU
        backend), for models that are not dot products (a two-tower net in a training loop).
        Only users that can be evaluated are asked for (see the NaN rules).
    X_test, X_train : sparse matrix of shape (n_users, n_items)
        As in :func:`calc_reco_metrics` (X_train None: no training items). The values of
        ``X_test`` are the NDCG gains, transformed by ``gain``.
    metrics : sequence of str, default=("P", "AP", "NDCG")
        Names from the registry: ``"P@10"``, ``"NDCG@5"``, ``"ROC_AUC"``, or bare ``"NDCG"``
        with the cut-offs of ``k``; an unknown name raises an error listing the valid ones.
    k : int or sequence of int, default=10
        Cut-off(s) for the metric names without ``@K``.
    output : {"pandas", "numpy", "cupy", "torch"}, default="pandas"
        A DataFrame (one row per user, ``attrs["nan_reasons"]`` with the NaN counts), or a dict
        keyed by the same column names of NumPy arrays, of CuPy arrays left in GPU memory (GPU
        backend only), or of torch tensors on the device that evaluated (docs/conventions.md).
    user_ids : sequence, default=None
        The caller's id of each row of ``X_test``: the DataFrame's index (named ``user``).
        Default: the row numbers.
    break_ties_with_noise, seed, min_pos_test, min_items_pool, consider_cold_start, gain, device, batch_size, max_memory, nthreads
        As in :func:`calc_reco_metrics`.
    convention : {"gpureco", "recometrics", "lenskit", "ranx", "replay", "recbole", "torchmetrics", "sklearn"}, default="gpureco"
        Compute P, R, AP and NDCG as that library defines them (discount, denominators,
        gain, which test entries are relevant, tie order): the table of docs/peers.md.
        ``gain`` left out (None) is the convention's: "linear", or "binary" for LensKit,
        RePlay and RecBole (LensKit's ``NDCG(gain="rating")`` is ``gain="linear"``).
    ties : {"first", "last", "optimistic", "pessimistic", "average"}, default=None
        Equal scores rank by ascending ("first") or descending ("last", RePlay's) item index;
        "optimistic" / "pessimistic" put every test item before / after the other pool items
        of its score (McSherry and Najork's bounds); "average" gives each metric's expected
        value over the random orders of tied items (scikit-learn's NDCG, DCG and ROC-AUC; its
        average precision for PR_AUC), for P, TP, R, F1, Hit, RR, NDCG, DCG, RBP, RPrec and the
        AUCs (others raise an error), at the cost of a second ranking pass. None: the
        convention's. docs/peers.md has the formulas.
    relevance_threshold : float, default=None
        Only test entries whose value is at least this are relevant (the others are ordinary
        pool items); None: every stored entry.
    persistence : float, default=0.8
        RBP's persistence p, in (0, 1): ``RBP@K = (1 - p) * sum_{i <= K} h_i p**(i - 1)``.

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
       P@1  R@2  ROC_AUC
    0  1.0  0.5     0.75
    1  0.0  0.0     0.00

    User 1's test item 2 ties with items 0 and 1 at 0.4; ties go to the lower item index, so
    it ranks last of the four and every negative item outranks it (ROC_AUC 0).
    """
    ev = Evaluator(X_test, X_train, metrics, k, user_ids=user_ids, gain=gain, min_pos_test=min_pos_test,
                   min_items_pool=min_items_pool, consider_cold_start=consider_cold_start,
                   break_ties_with_noise=break_ties_with_noise, seed=seed, device=device, output=output,
                   batch_size=batch_size, max_memory=max_memory, nthreads=nthreads, convention=convention, ties=ties,
                   relevance_threshold=relevance_threshold, persistence=persistence)
    columns, counts = ev._evaluate_all(scores)
    warn_nan(counts, ev.n_users, stacklevel=3)  # at the caller's call
    return ev._results(columns, counts, None)


class Evaluator:
    r"""The metrics of a model on fixed interactions, evaluated again and again: built once,
    called every epoch of a training loop.

    The interactions are checked, converted and (on the GPU) copied once, when the Evaluator
    is built; each call then only scores and ranks. Every number is the one
    :func:`evaluate` and :func:`calc_reco_metrics` give for the same scores (the same
    engine, definitions, tie rule and NaN rules of docs/metrics.md), for any batching of the
    users, any device and any number of processes.

    Three ways to use it:

    - ``ev(A, B)`` (factors, optionally ``item_biases=``), ``ev(scores)`` (a users x items
      matrix) or ``ev(score_fn)`` (a function of int64 user ids): every user at once; returns
      the per-user results.
    - ``ev.update(user_ids, scores)`` over batches of users, then ``ev.compute()``: the
      per-user results of the users updated since the last ``reset()``.
    - ``ev.summary()``: after either, a flat ``{"NDCG@10": mean, ...}`` dict of floats for a
      logger (TensorBoard, Lightning's ``log_dict``, Weights & Biases), the NaN users
      excluded from each mean and counted.

    For data-parallel training, each process updates its own users; ``state()`` is a dict of
    NumPy arrays that sum exactly across processes (``torch.distributed.all_reduce``), and
    ``load_state`` / ``merge`` take the sum (docs/training-loop.md has the recipe).

    Parameters
    ----------
    X_test : sparse matrix of shape (n_users, n_items)
        Held-out interactions; the stored values are the NDCG gains, transformed by ``gain``.
    X_train : sparse matrix of shape (n_users, n_items), default=None
        Training interactions, never ranked (None: no training items).
    metrics : sequence of str, default=("P", "AP", "NDCG")
        As in :func:`evaluate`.
    k : int or sequence of int, default=10
        Cut-off(s) for the metric names without ``@K``.
    user_ids : sequence, default=None
        The caller's id of each row of ``X_test``: the index (named ``user``) of the pandas
        results. Default: the row numbers.
    output : {"pandas", "numpy", "cupy", "torch"}, default="pandas"
        The form of the per-user results, as in :func:`evaluate`.
    gain, min_pos_test, min_items_pool, consider_cold_start, break_ties_with_noise, seed, device, batch_size, max_memory, nthreads, tf32
        As in :func:`calc_reco_metrics`.
    convention, ties, relevance_threshold, persistence
        As in :func:`evaluate`.

    Notes
    -----
    The Evaluator does not warn about NaN users (a training loop would warn every epoch):
    ``summary()`` counts them, and the pandas results' ``attrs["nan_reasons"]`` counts them
    by rule. A mean over no user (every user NaN for that metric) is NaN.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp, gpureco
    >>> X_train = sp.csr_array(np.array([[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 0, 0]]))
    >>> X_test = sp.csr_array(np.array([[0, 1, 0, 1], [0, 0, 1, 0], [0, 0, 0, 0]]))
    >>> ev = gpureco.Evaluator(X_test, X_train, metrics=["P@1", "NDCG@2"], device="cpu")
    >>> A = np.array([[1.0], [1.0], [1.0]]); B = np.array([[0.0], [4.0], [3.0], [2.0]])
    >>> ev(A, B)
       P@1    NDCG@2
    0  1.0  0.613147
    1  1.0  1.000000
    2  NaN       NaN
    >>> ev.summary()
    {'P@1': 1.0, 'NDCG@2': 0.8065735963827292, 'users': 3.0, 'nan_users': 1.0}

    Batch by batch (user 2 has no test item: NaN, counted, not in the means):

    >>> ev.reset()
    >>> ev.update([1, 2], np.array([[0.0, 4.0, 3.0, 2.0], [1.0, 2.0, 3.0, 4.0]]))
    >>> ev.update([0], np.array([[0.0, 4.0, 3.0, 2.0]]))
    >>> ev.compute()["P@1"].tolist()
    [1.0, 1.0, nan]
    """

    def __init__(self, X_test, X_train=None, metrics=("P", "AP", "NDCG"), k=10, *, user_ids=None, gain=None,
                 min_pos_test=1, min_items_pool=2, consider_cold_start=True, break_ties_with_noise=False, seed=1,
                 device="auto", output="pandas", batch_size=None, max_memory=None, nthreads=-1, tf32=False,
                 convention="gpureco", ties=None, relevance_threshold=None, persistence=0.8):
        X_train, X_test = v.interactions(X_train, X_test)
        self._selection = parse_metrics(metrics, k, allowed=[m.column for m in RANK_METRICS])
        break_ties_with_noise = v.check_flag(break_ties_with_noise, "break_ties_with_noise")
        tf32 = v.check_flag(tf32, "tf32")
        options = Options(convention, ties, gain, relevance_threshold, persistence)
        options.check_ties(self._selection.names, break_ties_with_noise)
        request = v.request(self._selection.names, self._selection.cutoffs, X_test, min_pos_test=min_pos_test,
                            min_items_pool=min_items_pool, consider_cold_start=consider_cold_start,
                            gain=options.gain, nthreads=nthreads, batch_size=batch_size, max_memory=max_memory)
        self._request = dataclasses.replace(request, convention=options.convention, persistence=options.persistence,
                                            tie_mode=options.tie_mode)
        self._reverse = options.reverse
        seed = v.check_seed(seed)
        self._backend = o.backend_for(device, output)
        self.output = output
        v.check_disjoint(X_train, X_test)
        X_test = options.relevant_matrix(X_test)
        if self._reverse:  # ties by descending item: rank the items in reverse order
            X_train, X_test = reversed_items(X_train), reversed_items(X_test)
        self._index = o.user_index(user_ids, X_test.shape[0])
        self._problem = Problem(X_train, X_test, None, None, None, seed, break_ties_with_noise, self._backend, tf32)
        self.columns = tuple(column_name(name, cut) for name, cut in self._selection.columns)
        self.reset()

    @property
    def n_users(self):
        return self._problem.n_users

    @property
    def n_items(self):
        return self._problem.n_items

    @property
    def device(self):
        """Where the Evaluator evaluates: "cpu", or "cuda:N"."""
        kind, index = self._backend
        return "cpu" if kind == "cpu" else f"cuda:{index}"

    def __repr__(self):
        return (f"Evaluator({self.n_users} users x {self.n_items} items, {', '.join(self.columns)}, "
                f"device={self.device!r}, output={self.output!r})")

    # --- every user at once ------------------------------------------------------------------

    def __call__(self, model, B=None, *, item_biases=None):
        """Evaluate every user and return the per-user results (the state is replaced by them).

        Parameters
        ----------
        model : array of shape (n_users, n_factors) with ``B``; array of shape (n_users, n_items);
            callable; or None with ``item_biases``
            User factors (with ``B``), a score matrix, or a score function, as in
            :func:`calc_reco_metrics` and :func:`evaluate`.
        B : array of shape (n_items, n_factors), default=None
            Item factors: scores ``model @ B.T`` (+ ``item_biases``) with the defined score of
            :func:`calc_reco_metrics`.
        item_biases : array of shape (n_items,), default=None
            Added to the factor scores; alone (``model`` and ``B`` None), a non-personalised model.
        """
        columns, counts = self._evaluate_all(model, B, item_biases)
        return self._results(columns, counts, None)

    def _evaluate_all(self, model, B=None, item_biases=None):
        if B is not None or item_biases is not None:
            A, B, item_biases = v.factors_on(self._backend, model, B, item_biases, self.n_users, self.n_items,
                                             reverse=self._reverse)
            problem = dataclasses.replace(self._problem, A=A, B=B, item_biases=item_biases)
        elif model is None:
            raise ValueError("Nothing to evaluate: pass a score matrix, a score function, or factors (A, B); "
                             "got None.")
        else:
            with _backend.device_context(self._backend):
                score_rows = self._reversed(_score_rows(model, self.n_users, self.n_items, self._backend[0] == "gpu"))
            problem = dataclasses.replace(self._problem, score_rows=score_rows)
        values, counts = run(problem, self._request, warn=False)
        columns = select_columns(values, self._selection)
        self.reset()
        self._store(np.arange(self.n_users), columns, counts)
        return columns, counts

    # --- batch by batch ----------------------------------------------------------------------

    def update(self, user_ids, scores):
        """Evaluate the users `user_ids` (rows of X_test) from their score rows, and add them to
        the state; each user at most once between resets.

        Parameters
        ----------
        user_ids : 1-d array of int
            Row numbers of X_test (NumPy, torch, CuPy, a list), distinct.
        scores : array of shape (len(user_ids), n_items)
            Their scores, in the order of ``user_ids``: any array :func:`evaluate` takes.
        """
        rows = self._rows(user_ids)
        order = np.argsort(rows, kind="stable")
        users = rows[order]
        twice = users[self._evaluated[users] > 0]
        if twice.size:
            raise ValueError(f"'user_ids' holds {twice.size} users already evaluated since the last reset(), for "
                             f"example {int(twice[0])}; each user is evaluated once (call reset() to start over).")
        if callable(scores):
            raise TypeError("'scores' of update() must be the batch's score rows (an array of shape "
                            f"({rows.shape[0]}, {self.n_items})); got a callable: call the Evaluator with a score "
                            "function to evaluate every user with it.")
        on_gpu = self._backend[0] == "gpu"
        with _backend.device_context(self._backend):
            batch_rows = _score_rows(scores, rows.shape[0], self.n_items, on_gpu)
            xp = _backend.cupy() if on_gpu else np
            sorted_users, positions = xp.asarray(users), xp.asarray(order)

        def score_rows(wanted):  # wanted: sorted rows of X_test among `users`
            return batch_rows(positions[xp.searchsorted(sorted_users, wanted)])

        problem = dataclasses.replace(self._problem, score_rows=self._reversed(score_rows))
        values, counts = run(problem, self._request, users=users, warn=False)
        self._store(users, select_columns(values, self._selection), counts)

    def compute(self):
        """The per-user results of the users evaluated since the last reset(), in row order
        (dict outputs also hold ``"user"``: their int64 row numbers)."""
        rows = np.flatnonzero(self._evaluated)
        columns = {name: self._values[rows, j] for j, name in enumerate(self.columns)}
        counts = {code: int(n) for code, n in enumerate(self._counts) if n}
        return self._results(columns, counts, rows)

    def reset(self):
        """Forget every evaluated user."""
        self._values = np.zeros((self.n_users, len(self.columns)))
        self._evaluated = np.zeros(self.n_users, dtype=np.int64)
        self._counts = np.zeros(len(NAN_REASONS) + 1, dtype=np.int64)

    # --- the state, and what a logger wants -------------------------------------------------------

    def summary(self, counts=False):
        """{column: mean over the evaluated users whose value is not NaN, ..., "users": the
        evaluated users, "nan_users": those with at least one NaN value} as floats. Each mean
        is the correctly rounded sum (math.fsum) divided by the count, so it does not depend
        on the order or batching of the users. With ``counts``, also ``"n_<column>"``: the
        users in each mean."""
        counts = v.check_flag(counts, "counts")
        evaluated = self._evaluated > 0
        values = self._values[evaluated]
        nan = np.isnan(values)
        out, n = {}, {}
        for j, name in enumerate(self.columns):
            kept = values[~nan[:, j], j]
            out[name] = math.fsum(kept.tolist()) / kept.size if kept.size else math.nan
            n[f"n_{name}"] = float(kept.size)
        out.update(users=float(values.shape[0]), nan_users=float(np.sum(nan.any(axis=1))))
        return {**out, **n} if counts else out

    def state(self):
        """The evaluated users' results as NumPy arrays that add up exactly across processes:
        ``values`` (n_users, n_columns) float64, 0 for users not evaluated here; ``evaluated``
        (n_users,) int64, 1 for users evaluated here; ``nan_counts`` (9,) int64, users per NaN
        rule. Each user is evaluated by one process, so a sum adds its values to zeros only."""
        return {"values": self._values.copy(), "evaluated": self._evaluated.copy(), "nan_counts": self._counts.copy()}

    def load_state(self, state):
        """Replace the state by `state` (for example the all-reduced sum of every process's
        state()); arrays may be NumPy arrays or tensors on any device."""
        values, evaluated, nan_counts = self._checked_state(state)
        self._check_once(evaluated)
        self._values, self._evaluated, self._counts = values, evaluated, nan_counts

    def merge(self, *states):
        """Add other states (from state(), or Evaluators on the same interactions) to this one."""
        for state in states:
            if isinstance(state, Evaluator):
                differ = "the metrics" if state.columns != self.columns else self._difference(state)
                if differ:
                    raise ValueError(f"merge() takes Evaluators of the same metrics, options and interactions "
                                     f"(X_test, X_train); {differ} differ: got {state!r} for {self!r}.")
                state = state.state()
            values, evaluated, nan_counts = self._checked_state(state)
            self._check_once(self._evaluated + evaluated)
            self._values = self._values + values
            self._evaluated = self._evaluated + evaluated
            self._counts = self._counts + nan_counts

    # --- helpers ----------------------------------------------------------------------------

    def _difference(self, other):
        """What differs between two Evaluators' problems: the interactions (as checked and stored: relevant entries,
        item order) or an option that changes a number (not the resources: threads, batch size, memory, device);
        None where nothing does."""
        mine, theirs = self._problem, other._problem
        if (mine.n_users, mine.n_items) != (theirs.n_users, theirs.n_items):
            return "the shapes of the interactions"
        for name in ("X_test", "X_train"):
            a, b = getattr(mine, name), getattr(theirs, name)
            if not all(np.array_equal(getattr(a, part), getattr(b, part)) for part in ("indptr", "indices", "data")):
                return f"the {name} matrices (after the relevance rule)"
        options = {o: getattr(self._request, o) == getattr(other._request, o) for o in (
            "names", "min_pos_test", "min_items_pool", "consider_cold_start", "gain", "convention", "persistence",
            "tie_mode")}
        options.update(cutoffs=np.array_equal(self._request.cutoffs, other._request.cutoffs),
                       ties=self._reverse == other._reverse,
                       break_ties_with_noise=mine.break_ties_with_noise == theirs.break_ties_with_noise,
                       seed=mine.seed == theirs.seed or not mine.break_ties_with_noise)  # (the seed: noise's only)
        differ = [o for o, same in options.items() if not same]
        return f"the options {', '.join(differ)}" if differ else None

    def _reversed(self, score_rows):
        """score_rows with the items in reverse order when ties go by descending item."""
        if not self._reverse:
            return score_rows
        xp = _backend.cupy() if self._backend[0] == "gpu" else np
        return lambda users: xp.ascontiguousarray(score_rows(users)[:, ::-1])

    def _store(self, rows, columns, counts):
        self._values[rows] = np.stack([np.asarray(columns[name], dtype=np.float64) for name in self.columns], axis=1)
        self._evaluated[rows] += 1
        for code, n in counts.items():
            self._counts[code] += n

    def _results(self, columns, counts, rows):
        if rows is None:
            index = self._index
        else:
            index = self._index[rows] if self._index is not None else pd.Index(rows)
            if self.output != "pandas":
                columns = {"user": rows, **columns}
        return o.results(columns, counts, self.output, self._backend, index)

    def _rows(self, user_ids):
        rows = v.user_rows(user_ids, self.n_users, "user_ids")
        if np.unique(rows).size != rows.size:
            raise ValueError("'user_ids' must be distinct; a user appears more than once in this batch.")
        return rows

    def _checked_state(self, state):
        expected = {"values": ((self.n_users, len(self.columns)), "f"), "evaluated": ((self.n_users,), "iu"),
                    "nan_counts": ((len(NAN_REASONS) + 1,), "iu")}
        if not isinstance(state, dict) or set(state) != set(expected):
            raise ValueError(f"'state' must be a dict with the keys {sorted(expected)} (from Evaluator.state()); "
                             f"got {sorted(state) if isinstance(state, dict) else type(state).__name__}.")
        arrays = []
        for key, (shape, kinds) in expected.items():
            array = np.asarray(_backend.to_host(v.plain_array(state[key]), f"state[{key!r}]"))
            if array.shape != shape or array.dtype.kind not in kinds:
                raise ValueError(f"state[{key!r}] must be {'a float' if kinds == 'f' else 'an int'} array of shape "
                                 f"{shape} for this Evaluator; got {array.dtype} of shape {array.shape}.")
            array = array.astype(np.float64 if kinds == "f" else np.int64)
            if kinds != "f" and np.any(array < 0):
                raise ValueError(f"state[{key!r}] must count users (0 or more); got {int(array.min())} at "
                                 f"{int(np.argmin(array))}.")
            arrays.append(array)
        return arrays

    @staticmethod
    def _check_once(evaluated):
        twice = np.flatnonzero(evaluated > 1)
        if twice.size:
            raise ValueError(f"{twice.size} users were evaluated more than once across the merged states, for "
                             f"example user {int(twice[0])} ({int(evaluated[twice[0]])} times); give each user to "
                             "one process (a DistributedSampler pads with repeated users: split the users with "
                             "range(rank, n_users, world_size) instead).")


def _score_rows(scores, n_users, n_items, on_gpu):
    """users (distinct) -> (len(users), n_items) score rows, on the backend's device:
    float64, or on the CPU float32 rows as they are (the ranking widens them exactly), and for
    consecutive users a view of the matrix rather than a copy."""
    xp = _backend.cupy() if on_gpu else np

    def as_rows(rows):
        return rows if not on_gpu and rows.dtype == np.float32 else xp.asarray(rows, dtype=xp.float64)

    def checked(rows, what, shape):
        if rows.dtype.kind not in "fiub":
            raise TypeError(f"{what} must be an array of real numbers; got dtype {rows.dtype}.")
        if tuple(rows.shape) != shape:
            raise ValueError(f"{what} must have shape {shape}; got {tuple(rows.shape)}.")
        return rows

    def on_backend(x, what, shape):
        v.refuse_sparse(x, what, " (a score for every item)")
        x = v.host_array_or_device(x, what)
        if isinstance(x, np.ndarray):  # checked on the host, before it moves
            checked(x, what, shape)
        return checked(_backend.to_device(x, what) if on_gpu else np.asarray(_backend.to_host(x, what)), what, shape)

    if callable(scores):
        def from_function(users):
            rows = on_backend(scores(users), f"score_fn's result for {users.shape[0]} users", (users.shape[0], n_items))
            return as_rows(rows)
        return from_function
    matrix = on_backend(scores, "'scores'", (n_users, n_items))

    def from_matrix(users):
        # consecutive rows (checked, not assumed: Evaluator.update asks for rows in the caller's order)
        if not on_gpu and users.shape[0] and np.all(np.diff(users) == 1):
            return as_rows(matrix[int(users[0]): int(users[-1]) + 1])
        return as_rows(matrix[users])
    return from_matrix
