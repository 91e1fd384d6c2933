"""The gpureco command line: demo, evaluate, split, compare.

Exit codes: 0 success; 2 usage or input error (bad arguments, a file that is missing, unreadable
or wrong, with the file and row named); 3 a feature this installation lacks (an optional package
such as pyarrow, or a GPU for --device gpu) or the command line does not offer (a metric of the
Python API's); 1 an unexpected error (a bug: please
report it with the traceback); 130 interrupted.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.sparse as sp

from .. import _optional, __version__
from .._evaluate import evaluate
from .._lists import evaluate_lists
from .._recometrics import calc_reco_metrics
from .._top_k import top_k
from ..analysis._report import files_folder_problem, latex_table, metric_columns, model_summary, write_report
from ..analysis._stats import compare
from ..data import _io
from ..data._interactions import DUPLICATES, IdMap, RowError, combine_duplicates, from_csr, to_csr
from . import _provenance
from ._progress import Progress, chunks
from ._views import item_views
from ..data._split import split_reco_train_test
from ..data._splitters import split_k_fold_users, split_last_per_user, split_leave_k_out, split_time_cutoff
from ..engine._backend import GpuUnavailable, is_device_name
from ..engine._conventions import Options
from ..engine._registry import (BEYOND_METRICS, CONVENTIONS, GAINS, METRICS, NAN_REASONS, NotAvailableHere,
                                column_name, parse_metrics)

_CUT_OFF = re.compile(r"^[A-Za-z_]+@\d+$")  # metric columns of a results file: NDCG@10, ..., and the AUCs
_WHOLE_POOL = {m.column for m in METRICS if m.column.endswith("AUC")}
OK, FAILED, USAGE, UNAVAILABLE, INTERRUPTED = 0, 1, 2, 3, 130
DEFAULT_METRICS = "P,TP,R,AP,TAP,NDCG,Hit,RR,ROC_AUC,PR_AUC"
DEFAULT_LIST_METRICS = "P,TP,R,AP,TAP,NDCG,Hit,RR"  # the AUCs need the whole pool, which a list does not hold
DEMO_MAX = 10_000_000  # --users and --items of the demo: beyond this, memory runs out long before the demo ends
FRAME_OUT = (".csv", ".parquet", ".pq")
REPORT_OUT = (".html", ".htm", ".md")
LATEX_OUT = (".tex",)
SEPARATORS = {"tab": "\t", "\\t": "\t", "comma": ",", "semicolon": ";", "space": " "}


class UsageError(ValueError):
    """Arguments that do not fit together."""


def _say(args, *lines):
    if not args.quiet:
        print(*lines, sep="\n")


def _note(args, line):
    if not args.quiet:
        print(line, file=sys.stderr)


def _print_summary(args, results):
    _say(args, "Summary over users (95% t confidence intervals of the mean):",
         model_summary(results).to_string(float_format=lambda x: f"{x:.4f}"))
    if len(results) > 1:
        _say(args, "", _comparison_text(compare(*results.values(), names=list(results))))


def _comparison_text(table):
    """The paired comparison, one block per pair of models and one short line per metric (the full table has 15
    columns: --out writes it)."""
    blocks = []
    for (a, b), rows in table.groupby(["model_a", "model_b"], sort=False):
        brief = pd.DataFrame({
            "metric": rows["metric"], "n_users": rows["n_users"], a: rows["mean_a"].map("{:.4f}".format),
            b: rows["mean_b"].map("{:.4f}".format), "b - a": rows["mean_diff"].map("{:+.4f}".format),
            "95% CI": [f"[{low:+.4f}, {high:+.4f}]" for low, high in zip(rows["ci_low"], rows["ci_high"])],
            "p (t, Holm)": rows["p_ttest_holm"].map(_p_value), "p (perm., Holm)": rows["p_permutation_holm"].map(_p_value)})
        blocks.append(f"Paired comparison, {b} - {a} (p-values Holm-adjusted over the {len(rows)} metrics):\n"
                      + brief.to_string(index=False))
    return "\n\n".join(blocks)


def _p_value(p):
    return "nan" if np.isnan(p) else "<0.0001" if p < 1e-4 else f"{p:.4f}"


def _report(args, results, **options):
    """Write args.report and args.latex (each whole or not at all), when given; says where, and on stderr when the
    report has no plots (no matplotlib)."""
    if getattr(args, "latex", None):
        path = _io.write_whole(args.latex, lambda tmp: tmp.write_text(latex_table(results), encoding="utf-8"))
        _say(args, f"LaTeX table written to {path.resolve()}")
    if args.report:
        _report_written(args, _io.write_whole(args.report, lambda tmp: write_report(results, tmp, **options)))


def _report_written(args, path):
    _say(args, f"report written to {path.resolve()}")
    try:
        _optional.package("matplotlib", "plot")
    except _optional.Unavailable as missing:
        _note(args, f"the report has no plots: {missing}")


def _nan_note(args, counts, n_users):
    if counts and not args.quiet:
        lines = [f"  {rule}: {n} users ({NAN_REASONS[int(rule.split()[-1])]})" for rule, n in counts.items()]
        print(f"NaN metrics (docs/metrics.md, NaN rules), out of {n_users} users:", *lines, sep="\n", file=sys.stderr)


# --- demo -------------------------------------------------------------------------------------------

def cmd_demo(args):
    from ._demo import PURE_SVD_FACTORS, run_demo
    if min(args.users, args.items) <= PURE_SVD_FACTORS or max(args.users, args.items) > DEMO_MAX:
        raise UsageError(f"--users and --items must be at least {PURE_SVD_FACTORS + 1} (the demo's PureSVD fits "
                         f"{PURE_SVD_FACTORS} factors) and at most {DEMO_MAX:,}; got --users {args.users}, "
                         f"--items {args.items}.")
    if not 1 <= args.k <= args.items:
        raise UsageError(f"'-k' must be a cut-off from 1 to --items ({args.items}); got {args.k}.")
    if args.seed < 0:
        raise UsageError(f"'--seed' must be 0 or more; got {args.seed}.")
    _check_device(args)
    if args.no_report and args.report is not None:
        raise UsageError(f"--report {args.report} and --no-report: give one of them.")
    report = None if args.no_report else "gpureco_demo_report.html" if args.report is None else args.report
    if report is not None:
        _check_outputs(args, ((report, REPORT_OUT, "report"),))
    started = time.perf_counter()
    headline, _, path = run_demo(args.users, args.items, k=args.k, seed=args.seed, device=args.device, report=report,
                                 echo=(lambda line: None) if args.quiet else print)
    _say(args, "")
    _print_summary(args, headline)
    if path is not None:
        _report_written(args, path)
    _say(args, f"demo done in {time.perf_counter() - started:.1f} s")
    return OK


# --- evaluate ---------------------------------------------------------------------------------------

def _selection(args, lists=False):
    try:
        ks = [int(k) for k in args.k.split(",")] if args.k is not None else None  # ('': an error)
    except ValueError:
        raise UsageError(f"'-k' must be a cut-off or a comma-separated list of them, such as 10 or 5,10; "
                         f"got {args.k!r}.") from None
    spec = args.metrics if args.metrics is not None else DEFAULT_LIST_METRICS if lists else DEFAULT_METRICS
    allowed = [m.column for m in METRICS if not (lists and m.column in ("ROC_AUC", "PR_AUC"))]
    try:
        return parse_metrics([name.strip() for name in spec.split(",") if name.strip()], ks, allowed=allowed)
    except OverflowError:  # a cut-off of 20 digits
        raise UsageError(f"--metrics {spec!r} -k {args.k!r}: a cut-off is too large.") from None
    except NotAvailableHere as error:  # exit 3: one of the Python API's metrics (exit 2: an AUC from lists)
        if error.name in [m.column for m in METRICS]:
            raise UsageError(f"--metrics {spec!r} -k {args.k!r}: {error}") from None
        api = "" if error.name in [m.column for m in BEYOND_METRICS] else \
            " The Python API computes it (docs/metrics.md)."  # (beyond_accuracy's: named by the error)
        raise NotAvailableHere(f"--metrics {spec!r}: {error}{api}", error.name) from None
    except (TypeError, ValueError) as error:
        raise UsageError(f"--metrics {spec!r} -k {args.k!r}: {error}") from None


def _conventions(args, selection):
    """The API options of --convention, --ties and --relevance-threshold ({name: value}), checked as the API checks
    them (with --gain and the metrics: engine._conventions.Options), before any file is read; and the Options (the
    tie rule and the gain applied, for the provenance)."""
    given = {"convention": args.convention, "ties": args.ties, "relevance_threshold": args.relevance_threshold}
    try:
        options = Options(args.convention, args.ties, args.gain, args.relevance_threshold)
        options.check_ties(selection.names, False)
    except (TypeError, ValueError) as error:
        shown = [f"--convention {args.convention}", f"--gain {args.gain}" if args.gain is not None else "",
                 f"--ties {args.ties}" if args.ties is not None else "",
                 f"--relevance-threshold {args.relevance_threshold}" if args.relevance_threshold is not None else ""]
        raise UsageError(f"{' '.join(filter(None, shown))}: {error}") from None
    return given, options


def _check_cutoffs(args, selection, n_items, source):
    largest = int(selection.cutoffs.max()) if selection.cutoffs.size else 0
    if largest > n_items:
        raise UsageError(f"--metrics {args.metrics or 'default'!r} -k {args.k!r}: the cut-off {largest} is more than "
                         f"the {n_items} items of {source}.")


def _id_kinds(frame):
    return tuple(pd.api.types.is_numeric_dtype(frame[c]) for c in ("user", "item"))


def _same_id_kinds(first, first_path, second, second_path):
    """Ids read as numbers in one file and as text in another can never match: say so, naming both files."""
    for column, a, b in zip(("user", "item"), _id_kinds(first), _id_kinds(second)):
        if a != b:
            kinds = {True: "numbers", False: "text"}
            raise _io.InputError(f"{first_path}: the {column} ids are {kinds[a]} but those of {second_path} are "
                                 f"{kinds[b]}; the same {column} must have the same id in both files.")


def _shown(value):
    """A value of a file in a message: strings quoted, numbers as numbers (not NumPy's repr)."""
    value = value.item() if isinstance(value, np.generic) else value
    return repr(value) if isinstance(value, str) else str(value)


def _has_rows(data, path, what):
    if (len(data) if isinstance(data, pd.DataFrame) else data.nnz) == 0:
        raise _io.InputError(f"{path}: no {what} (the file has a header or a shape but no data).")


def _separator(args):
    if args.sep == "":
        raise UsageError("'--sep' must be a separator (',', 'tab', ';', '::', ...); got an empty one.")
    return None if args.sep is None else SEPARATORS.get(args.sep, args.sep)


def _read_data(args, path):
    """Interactions of a file: columns found by name (--user-col, ..., or the layouts of docs/cli.md), duplicate
    (user, item) rows combined by --duplicates."""
    data = _io.read_interactions(path, _io.Columns(args.user_col, args.item_col, args.value_col, args.time_col),
                                 _separator(args))
    if isinstance(data, pd.DataFrame):
        _check_times(data, path)
        try:
            data = combine_duplicates(data, args.duplicates, None)
        except RowError as error:
            hint = " (--duplicates sum, last or max combines them)" if args.duplicates == "error" else ""
            raise _io.InputError(f"{_io.where(path, error.row)}: {error}{hint}") from None
    return data


def _check_times(frame, path):
    """A timestamp column of text is ordered as text (ISO dates order so); one that is partly numbers (10, 9, 100, 2a)
    would put 9 after 10 and 100: an error naming the first row that is not a number."""
    if "timestamp" not in frame.columns or pd.api.types.is_numeric_dtype(frame["timestamp"]):
        return
    numbers = pd.to_numeric(frame["timestamp"], errors="coerce").notna().to_numpy()
    if numbers.any() and not numbers.all():
        row = int(np.flatnonzero(~numbers)[0])
        raise _io.InputError(f"{_io.where(path, row)}: the timestamp {_shown(frame['timestamp'].iloc[row])} is not a "
                             f"number, where {int(numbers.sum())} other rows' are (text would be ordered as text: "
                             "'10' before '9').")


def _known_only(args, frame, path, ids, whose):
    """The rows of `frame` whose user and item are in `ids`; the others are an error naming the first, or with
    --unknown drop are left out and counted ({rows, users, items})."""
    known = [ids.users.get_indexer(frame["user"]) >= 0, ids.items.get_indexer(frame["item"]) >= 0]
    unknown = ~(known[0] & known[1])
    if not unknown.any():
        return frame, {"rows": 0, "users": 0, "items": 0}
    if args.unknown == "error":
        row = int(np.flatnonzero(unknown)[0])
        column = "user" if not known[0][row] else "item"
        _ids_read_as_text(frame, column, path, getattr(ids, f"{column}s"))
        raise _io.InputError(f"{_io.where(path, row)}: {column} {_shown(frame[column].iloc[row])} is not {whose} "
                             f"({int(unknown.sum())} rows have such ids); --unknown drop leaves those rows out.")
    left_out = {"rows": int(unknown.sum()), "users": int(frame["user"][~known[0]].nunique()),
                "items": int(frame["item"][~known[1]].nunique())}
    return frame[~unknown], left_out


def _ids_read_as_text(frame, column, path, model_ids):
    """Where the model's ids are numbers but a file's id column was read as text (_io: ids are numbers only where
    every one is written as it prints), the cell that made it text: an error naming it (else None)."""
    texts = frame[column]
    if pd.api.types.infer_dtype(texts) != "string" or not pd.api.types.is_numeric_dtype(model_ids.dtype):
        return  # (a Parquet column of decimals: objects, not text)
    numbers = pd.to_numeric(texts, errors="coerce").notna().to_numpy()
    if not numbers.any():
        return
    if not numbers.all():
        row = int(np.flatnonzero(~numbers)[0])
        raise _io.InputError(f"{_io.where(path, row)}: {column} {_shown(texts.iloc[row])} is not a number, where "
                             f"{int(numbers.sum())} other rows' are: the column's ids are read as text, and none "
                             f"matches the model's ids (numbers).")
    integers = texts.str.fullmatch(_io.CANONICAL_INT).to_numpy()
    if integers.any() and not integers.all():
        row, other = int(np.flatnonzero(~integers)[0]), int(np.flatnonzero(integers)[0])
        raise _io.InputError(f"{_io.where(path, row)}: {column} {_shown(texts.iloc[row])} is not written as an "
                             f"integer, where row {other}'s {_shown(texts.iloc[other])} is: ids written as numbers in "
                             f"two ways are read as text (kept as written), and none matches the model's ids.")


def _left_out_note(args, left_out, whose):
    said = [f"{n['rows']:,} {role} interactions ({n['users']:,} users and {n['items']:,} items)"
            for role, n in left_out.items() if n["rows"]]
    if said:
        _note(args, f"--unknown drop: left out {' and '.join(said)} with ids that are not {whose}")


def _model_ids(args, n_users, n_items):
    """The ids of the model's rows: from --user-ids/--item-ids, else the row numbers."""
    ids = []
    for path, n, what in ((args.user_ids, n_users, "user"), (args.item_ids, n_items, "item")):
        found = _io.read_ids(path) if path else pd.RangeIndex(n)
        if len(found) != n:
            raise _io.InputError(f"{path}: {len(found)} {what} ids for a model of {n} {what}s (one id per row "
                                 f"of the model's {what} file).")
        ids.append(found)
    return IdMap(*ids)


def _matrices(args, data, n_users=None, n_items=None):
    """(X_train, X_test, ids, rows left out) from the --train/--test data, on the rows/columns of the model's
    files."""
    train, test = data["train"], data["test"]
    if isinstance(train, pd.DataFrame):
        ids = _model_ids(args, n_users, n_items)
        whose = ("in the model (its ids are the row numbers of its files; --user-ids/--item-ids name them)"
                 if not (args.user_ids and args.item_ids) else "in the model's --user-ids/--item-ids")
        matrices, left_out = [], {}
        for role, frame, path in (("training", train, args.train), ("test", test, args.test)):
            frame, left_out[role] = _known_only(args, frame, path, ids, whose)
            try:
                matrices.append(to_csr(frame, ids=ids)[0])
            except RowError as error:  # (the file names the frame: not to_csr's name for it)
                message = str(error).removeprefix("the first frame passed to to_csr: ")
                raise _io.InputError(f"{_io.where(path, error.row)}: {message}") from None
        _left_out_note(args, left_out, whose)
        return (*_disjoint(args, *matrices, ids), left_out)
    for X, path in ((train, args.train), (test, args.test)):
        if X.shape != (n_users, n_items):
            raise _io.InputError(f"{path}: expected a matrix of shape ({n_users}, {n_items}) to match the model's "
                                 f"files; got {X.shape}.")
    return (*_disjoint(args, train, test, _model_ids(args, n_users, n_items)), {})  # (ids: the results' labels)


def _disjoint(args, X_train, X_test, ids):
    """A test item that is also a training item of the same user can never be ranked: name both files."""
    both = sp.coo_array(X_train.astype(bool).multiply(X_test.astype(bool)))
    if both.nnz:
        user, item = _shown(ids.users[both.row[0]]), _shown(ids.items[both.col[0]])
        raise _io.InputError(f"{args.test}: {both.nnz} (user, item) pairs are also in {args.train}, for example user "
                             f"{user}, item {item}; a test item must not be a training item of the same user.")
    return X_train, X_test, ids


def _evaluate_in_chunks(args, users, evaluate_rows):
    """evaluate_rows(rows) -> per-user frame, over `users` in pieces with a progress bar on a terminal (the same
    numbers: a metric depends on its user alone); the NaN counts reported once."""
    shown = not args.quiet and not args.scheduler
    progress = Progress(users.size, "evaluating", shown)
    frames, counts = [], {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the NaN counts are reported once, below
        try:
            for rows in chunks(users, shown):
                frame = evaluate_rows(rows)
                for code, n in frame.attrs["nan_reasons"].items():
                    counts[code] = counts.get(code, 0) + n
                frames.append(frame)
                progress.advance(rows.size)
        finally:
            progress.close()
    _nan_note(args, counts, users.size)
    return pd.concat(frames, ignore_index=True)


def _on_cluster(args, function):
    """`function`, or with --scheduler its gpureco.dask twin on that Dask cluster (the same numbers)."""
    if not args.scheduler:
        return function
    from .. import dask as on_dask  # without Dask: _optional.Unavailable (exit 3), naming the extra
    import distributed

    def on_cluster(*arguments, **options):
        try:
            client = distributed.Client(args.scheduler)
        except OSError as error:  # no scheduler answers there (Dask says so after its connect timeout)
            raise _io.InputError(f"--scheduler {args.scheduler}: no Dask scheduler answered ({error}).") from None
        with client:
            return getattr(on_dask, function.__name__)(*arguments, client=client, **options)
    return on_cluster


INPUT_OPTIONS = ("train", "test", "factors", "item_biases", "scores", "recs", "user_ids", "item_ids", "input",
                 "results")  # the files the commands read (input: split's, results: compare's)


def _check_not_an_input(args, path, what):
    """An output that would overwrite a file the command reads (`gpureco evaluate ... --out train.csv`) is refused."""
    target = Path(path).resolve()
    for option in INPUT_OPTIONS:
        value = getattr(args, option, None)
        for given in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(given, (str, Path)) and str(given) and Path(given).is_file() \
                    and Path(given).resolve() == target:
                source = option if option in ("input", "results") else "--" + option.replace("_", "-")
                raise _io.InputError(f"{path}: the {what} would overwrite an input of this command ({source}); "
                                     "write it elsewhere.")


def _check_outputs(args, outputs):
    """Every output path, before any work: (path, suffixes, what) for those given."""
    if getattr(args, "latex", None):
        outputs = (*outputs, (args.latex, LATEX_OUT, "LaTeX table (--latex)"))
    for path, suffixes, what in outputs:
        if path is not None:  # ('': an error, as any path without a suffix)
            _io.check_output(path, suffixes, what)
            _check_not_an_input(args, path, what)
            problem = files_folder_problem(path) if suffixes is REPORT_OUT else None
            if problem:
                raise UsageError(f"{path}: the {what}: {problem}")


def _check_device(args):
    """--device as the API takes it (auto, cpu, gpu, cuda:N), before any work."""
    if not is_device_name(args.device):
        raise UsageError(f"--device must be auto, cpu, gpu or cuda:N (N: a CUDA device number); got {args.device!r}.")


def cmd_evaluate(args):
    _check_device(args)
    selection = _selection(args, lists=args.recs is not None)
    models = [args.factors is not None, args.scores is not None, args.recs is not None]
    if sum(models) != 1:
        raise UsageError("give exactly one model: --factors USERS.npy ITEMS.npy, --scores SCORES.npy or --recs LISTS.")
    _check_outputs(args, ((args.out, FRAME_OUT, "per-user results (--out)"), (args.report, REPORT_OUT,
                                                                              "report (--report)")))
    conventions, options = _conventions(args, selection)
    provenance = {**_provenance.environment("evaluate"), "model": {
        "name": args.name, "kind": ("factors", "scores", "recs")[models.index(True)]}, "options": {
        "metrics": _column_names(selection), "gain": options.gain, "device": args.device, "scheduler": args.scheduler,
        "convention": args.convention, "ties": options.ties, "relevance_threshold": args.relevance_threshold}}
    if args.recs is not None:
        return _evaluate_lists(args, selection, provenance, conventions)
    if args.factors:
        A = _io.read_array(args.factors[0], 2, "user factors")
        B = _io.read_array(args.factors[1], 2, "item factors")
        n_users, n_items = A.shape[0], B.shape[0]
        if A.shape[1] != B.shape[1] and min(A.shape[1], B.shape[1]) > 0:  # (none: the API says so)
            raise _io.InputError(f"{args.factors[1]}: {B.shape[1]} factors an item, where {args.factors[0]} has "
                                 f"{A.shape[1]} a user (--factors USERS ITEMS: one factor space).")
    else:
        scores = _io.read_array(args.scores, 2, "a score matrix (users x items)")
        n_users, n_items = scores.shape
    biases = _io.read_array(args.item_biases, 1, "item biases") if args.item_biases else None
    if biases is not None and biases.shape[0] != n_items:
        raise _io.InputError(f"{args.item_biases}: {biases.shape[0]} item biases for a model of {n_items} items "
                             f"(--item-biases: one for each {'row' if args.factors else 'column'} of "
                             f"{args.factors[1] if args.factors else args.scores}).")
    _check_cutoffs(args, selection, n_items, args.factors[1] if args.factors else args.scores)
    data = _data(args, provenance)
    if isinstance(data["train"], pd.DataFrame) != isinstance(data["test"], pd.DataFrame):
        raise UsageError(f"--train ({args.train}) and --test ({args.test}) must both be frames (CSV/Parquet) or "
                         "both be matrices (.npz/.mtx).")
    X_train, X_test, ids, left_out = _matrices(args, data, n_users, n_items)
    _model_files(args, provenance)
    _data_counts(provenance, left_out, X_train.nnz, X_test.nnz)
    # users without test items have nothing to score (a row of value 0 is no interaction: docs/cli.md)
    users = np.unique(np.repeat(np.arange(X_test.shape[0]), np.diff(X_test.indptr))[X_test.data != 0])
    if users.size == 0:
        raise _io.InputError(f"{args.test}: no test interactions left to evaluate (--unknown drop left out all).")
    if args.factors:
        flags = {m.flag: m.column in selection.names for m in METRICS}
        k = int(selection.cutoffs.max()) if selection.cutoffs.size else 1
        per_user = _evaluate_in_chunks(args, users, lambda rows: _on_cluster(args, calc_reco_metrics)(
            X_train[rows], X_test[rows], A[rows], B, k=k, item_biases=biases, cumulative=selection.cutoffs.size > 1,
            device=args.device, gain=args.gain, **conventions, **flags))[_column_names(selection)]
    else:
        per_user = _evaluate_in_chunks(args, users, lambda rows: _on_cluster(args, evaluate)(
            scores[rows], X_test[rows], X_train[rows], metrics=_column_names(selection), device=args.device,
            gain=args.gain, **conventions).reset_index(drop=True))
    per_user.insert(0, "user", ids.users[users])
    items = None
    if args.report and args.factors:  # the item-side views need the lists
        k = int(selection.cutoffs.max()) if selection.cutoffs.size else 10
        lists, _ = top_k(A[users], B, k, X_train[users], item_biases=biases, device=args.device)
        items = item_views({args.name: lists}, X_train, X_test[users], k)
    return _finish(args, per_user, provenance, activity=np.diff(X_train.indptr)[users], items=items)


def _model_files(args, provenance):
    """The model's files (read already: they exist) in `provenance`, with their SHA-256."""
    paths = [*(args.factors or []), args.scores, args.recs, args.item_biases, args.user_ids, args.item_ids]
    provenance["model"]["files"] = [_provenance.file_record(path) for path in paths if path]


def _data(args, provenance):
    """{"train": ..., "test": ...} read by _read_data, with their files' records (and the split's) in
    `provenance`."""
    data = {"train": _read_data(args, args.train), "test": _read_data(args, args.test)}
    _has_rows(data["test"], args.test, "test interactions: nothing to evaluate")
    provenance["data"] = {"train": _provenance.file_record(args.train), "test": _provenance.file_record(args.test),
                          "columns": {name: given for name, given in zip(
                              ("user", "item", "value", "timestamp"),
                              (args.user_col, args.item_col, args.value_col, args.time_col)) if given},
                          "sep": _separator(args), "duplicates": args.duplicates, "unknown": args.unknown}
    provenance["split"] = _provenance.split_of(args.test)
    return data


def _data_counts(provenance, left_out, n_train, n_test):
    for role, key, n in (("training", "train", n_train), ("test", "test", n_test)):
        provenance["data"][key].update(interactions=int(n), left_out=left_out.get(role, {}).get("rows", 0))


def _column_names(selection):
    return [column_name(name, k) for name, k in selection.columns]


def _named(recs, path, ids, column):
    """The recs' `column` as ids: the values are row numbers of the model, named by --user-ids/--item-ids."""
    rows = pd.to_numeric(recs[column], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    bad = ~((rows >= 0) & (rows < len(ids)) & (rows == np.floor(rows)))
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise _io.InputError(f"{_io.where(path, row)}: {column} {_shown(recs[column].iloc[row])} is not a row number "
                             f"of the --{column}-ids file (0 to {len(ids) - 1}); with --{column}-ids, the lists name "
                             f"{column}s by row.")
    return ids[rows.astype(np.int64)]


def _evaluate_lists(args, selection, provenance, conventions):
    data = _data(args, provenance)  # --train says which ids are known (--unknown)
    recs = _io.read_frame(args.recs)
    missing = [c for c in ("user", "item") if c not in recs.columns]
    if missing:
        raise _io.InputError(f"{args.recs}: the columns {', '.join(missing)} are missing; expected user,item and "
                             f"rank or score; got columns {', '.join(map(repr, recs.columns))}.")
    _has_rows(recs, args.recs, "recommendations")
    for column, path in (("user", args.user_ids), ("item", args.item_ids)):
        if path:
            recs[column] = _named(recs, args.recs, _io.read_ids(path), column)
    _model_files(args, provenance)
    train, truth = ((X if isinstance(X, pd.DataFrame) else from_csr(X)) for X in (data["train"], data["test"]))
    _same_id_kinds(recs, args.recs, truth, args.test)
    whose = f"in --train ({args.train})"
    known = IdMap(pd.Index(pd.unique(train["user"])), pd.Index(pd.unique(train["item"])))
    truth, left_out = _known_only(args, truth, args.test, known, whose)
    _left_out_note(args, {"test": left_out}, whose)
    _data_counts(provenance, {"test": left_out}, len(train), len(truth))
    if truth.empty:
        raise _io.InputError(f"{args.test}: no test interactions left to evaluate (--unknown drop left out all).")
    truth = truth.rename(columns={"value": "rating"})  # the NDCG gain
    truth = truth[[c for c in ("user", "item", "rating") if c in truth.columns]]
    if "rating" in truth.columns:  # a row of value 0 is no interaction (docs/cli.md), as with --factors
        truth = truth[truth["rating"] != 0]
        if truth.empty:
            raise _io.InputError(f"{args.test}: no test interactions to evaluate (every row's value is 0).")
    recs = recs[recs["user"].isin(truth["user"])]  # a list of a user without test items has nothing to score
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # the NaN counts are reported once, below
            per_user = _on_cluster(args, evaluate_lists)(recs, truth, metrics=_column_names(selection), gain=args.gain,
                                                         **conventions)  # by user
    except (TypeError, ValueError) as error:
        raise _io.InputError(f"{args.recs} (against {args.test}): {error}") from None
    _nan_note(args, per_user.attrs["nan_reasons"], len(per_user))
    per_user = per_user.reset_index()
    activity = train["user"].value_counts().reindex(per_user["user"], fill_value=0).to_numpy()  # training rows
    return _finish(args, per_user, provenance, activity=activity)


def _finish(args, per_user, provenance, activity=None, items=None):
    metrics = per_user.drop(columns=[c for c in ("user",) if c in per_user.columns])
    _print_summary(args, {args.name: metrics})
    if args.out:
        path = _io.write_whole(args.out, lambda tmp: _io.write_results(per_user, tmp, provenance))
        _say(args, f"per-user results written to {path.resolve()}")
    _report(args, {args.name: metrics}, activity=activity, title=f"gpureco evaluation: {args.name}",
            provenance={args.name: provenance}, **(items or {}))
    return OK


# --- split ------------------------------------------------------------------------------------------

def _cutoff(value, column):
    if pd.api.types.is_numeric_dtype(column):
        try:
            number = float(value)
        except ValueError:
            number = np.nan
        if not np.isfinite(number):
            raise UsageError(f"'--cutoff' must be a finite number for a numeric timestamp column; got {value!r}.")
        return number
    return value


_SPLIT_OPTIONS = {"leave-k-out": ("n", "min_train", "seed"), "last-n": ("n", "min_train"),
                  "last-fraction": ("fraction", "min_train"), "time-cutoff": ("cutoff", "fraction"),
                  "k-fold": ("folds", "fraction", "min_train", "seed"), "recometrics-all": ("fraction", "seed"),
                  "recometrics-separated": ("fraction", "users_fraction", "seed"),
                  "recometrics-joined": ("fraction", "users_fraction", "seed")}
SPLIT_DEFAULTS = {"n": 1, "fraction": 0.2, "cutoff": None, "folds": 5, "users_fraction": 0.1, "min_train": 1,
                  "seed": 1}  # (an option away from its default that the method does not read is an error)


def _check_split_options(args):
    """The options in the command line's words, before the input is read."""
    checks = [("-n", args.n, args.n >= 1, "1 or more"), ("--min-train", args.min_train, args.min_train >= 0,
                                                          "0 or more"),
              ("--fraction", args.fraction, 0 < args.fraction < 1, "strictly between 0 and 1"),
              ("--users-fraction", args.users_fraction, 0 < args.users_fraction < 1, "strictly between 0 and 1"),
              ("--folds", args.folds, args.folds >= 2, "2 or more"), ("--seed", args.seed, args.seed >= 0, "0 or more")]
    for option, value, ok, rule in checks:
        if not ok:
            raise UsageError(f"'{option}' must be {rule}; got {value}.")
    if args.method == "time-cutoff" and args.cutoff is not None and args.fraction != SPLIT_DEFAULTS["fraction"]:
        raise UsageError(f"--method time-cutoff takes '--cutoff' or '--fraction', not both; got --cutoff "
                         f"{args.cutoff!r} and --fraction {args.fraction}.")
    takes = _SPLIT_OPTIONS[args.method]

    def flag(name):  # min_train: --min-train
        return ("-" if len(name) == 1 else "--") + name.replace("_", "-")
    for name, default in SPLIT_DEFAULTS.items():  # an option given that the method does not read
        if name not in takes and getattr(args, name) != default:
            raise UsageError(f"'{flag(name)}' does not apply to --method {args.method} (which takes "
                             f"{', '.join(map(flag, takes))}); got {flag(name)} {getattr(args, name)!r}.")


def _split_parts(args, data):
    """{sub-folder: {file name: frame or matrix}} of the split that args.method names."""
    if args.method == "leave-k-out":
        pairs = {"": split_leave_k_out(data, args.n, min_train=args.min_train, seed=args.seed)}
    elif args.method == "last-n":
        pairs = {"": split_last_per_user(data, args.n, min_train=args.min_train)}
    elif args.method == "last-fraction":
        pairs = {"": split_last_per_user(data, fraction=args.fraction, min_train=args.min_train)}
    elif args.method == "time-cutoff":
        cutoff = args.cutoff
        if cutoff is not None and isinstance(data, pd.DataFrame) and "timestamp" in data:
            cutoff = _cutoff(cutoff, data["timestamp"])
        pairs = {"": split_time_cutoff(data, cutoff, fraction=args.fraction if cutoff is None else None)}
    elif args.method == "k-fold":
        folds = split_k_fold_users(data, args.folds, items_test_fraction=args.fraction, min_train=args.min_train,
                                   seed=args.seed)
        pairs = {f"fold{i + 1}": fold for i, fold in enumerate(folds)}
    else:  # recometrics' modes work on a matrix: frames go through the id mapping and back
        X, ids = (data, None) if not isinstance(data, pd.DataFrame) else to_csr(data)
        mode = args.method.removeprefix("recometrics-")
        split = split_reco_train_test(X, mode, users_test_fraction=args.users_fraction,
                                      items_test_fraction=args.fraction, seed=args.seed)
        return {"": _recometrics_parts(mode, split, ids)}
    return {folder: dict(zip(("train", "test"), pair)) for folder, pair in pairs.items()}


def cmd_split(args):
    _check_split_options(args)
    _io.check_folder(args.out_dir, create=True)
    suffix = args.format or _io.suffix_of(args.input)
    if suffix not in (*FRAME_OUT, *_io.MATRIX_SUFFIXES):  # .tsv, .inter, .data, .dat are read, and split into CSV
        suffix = ".csv"
    if suffix in (".parquet", ".pq"):
        _optional.package("pyarrow", "parquet")
    data = _read_data(args, args.input)
    _has_rows(data, args.input, "interactions to split")
    if args.method in ("last-n", "last-fraction", "time-cutoff") and not isinstance(data, pd.DataFrame):
        raise UsageError(f"{args.input}: --method {args.method} splits by time, which a matrix (.npz, .mtx) does not "
                         "hold; give a frame (.csv, .parquet, ...) with a time column.")
    if suffix in _io.MATRIX_SUFFIXES and isinstance(data, pd.DataFrame):
        raise UsageError(f"'--format' {suffix} holds a matrix; a split of a frame gives frames: use .csv or .parquet.")
    try:
        parts = _split_parts(args, data)
    except RowError as error:
        raise _io.InputError(f"{_io.where(args.input, error.row)}: {error}") from None
    except (TypeError, ValueError) as error:  # the splitter's check of the data against the options: name the file
        raise _io.InputError(f"{args.input}: {error}") from None
    for folder, files in parts.items():
        for name in files:
            _check_not_an_input(args, Path(args.out_dir) / folder / f"{name}{suffix}", f"split's {name}{suffix}")
        test = files.get("test")
        if test is not None and (test.nnz if hasattr(test, "nnz") else len(test)) == 0:
            where = f" in {folder}" if folder else ""
            raise _io.InputError(f"{args.input}: the split gives no test interactions{where} (--method {args.method} "
                                 "with these options): there would be nothing to evaluate.")
    written, outputs = [], {}
    with _io.staged(args.out_dir) as staging:  # every file whole, or none
        for folder, files in parts.items():
            (staging / folder).mkdir(exist_ok=True)
            for name, part in files.items():
                if suffix in _io.FRAME_SUFFIXES and not isinstance(part, pd.DataFrame):
                    part = from_csr(part)
                _io.write_interactions(part, staging / folder / f"{name}{suffix}")
                outputs[str(Path(folder) / f"{name}{suffix}")] = _io.sha256(staging / folder / f"{name}{suffix}")
                written.append((Path(args.out_dir) / folder / f"{name}{suffix}",
                                part.nnz if hasattr(part, "nnz") else len(part)))
        record = {**_provenance.environment("split"), "method": args.method,
                  "seed": args.seed if "seed" in _SPLIT_OPTIONS[args.method] else None,
                  "options": {option: getattr(args, option) for option in _SPLIT_OPTIONS[args.method]},
                  "input": _provenance.file_record(args.input), "duplicates": args.duplicates, "outputs": outputs}
        (staging / _provenance.SPLIT_RECORD).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    for path, n in written:
        _say(args, f"{path}: {n:,} interactions")
    return OK


def _recometrics_parts(mode, split, ids):
    """{file name: frame or matrix} of split_reco_train_test's outputs, rows named by user when ids exist."""
    users = ids.users if ids is not None else None
    if mode == "all":
        parts = {"train": (split[0], None), "test": (split[1], None)}
    elif mode == "separated":
        X_rem, X_train, X_test, test_users = split
        rest = np.setdiff1d(np.arange(X_train.shape[0] + X_rem.shape[0]), test_users)
        parts = {"train": (X_train, test_users), "test": (X_test, test_users), "rest": (X_rem, rest)}
    else:
        X_train, X_test, test_users = split
        rest = np.setdiff1d(np.arange(X_train.shape[0]), test_users)
        parts = {"train": (X_train, np.concatenate([test_users, rest])), "test": (X_test, test_users)}
    if users is None:
        return {name: X for name, (X, _) in parts.items()}
    return {name: from_csr(X, IdMap(users if rows is None else users[rows], ids.items))
            for name, (X, rows) in parts.items()}


# --- compare ----------------------------------------------------------------------------------------

def cmd_compare(args):
    names = args.names.split(",") if args.names else [Path(p).stem for p in args.results]
    if len(args.results) < 2:
        raise UsageError(f"compare needs at least two results files; got {len(args.results)}.")
    if len(names) != len(args.results):
        raise UsageError(f"'--names' must give one name per results file ({len(args.results)}); got {len(names)}.")
    if any(not name.strip() for name in names) or len(set(names)) < len(names):
        raise UsageError(f"each results file needs its own non-empty name; got {','.join(names)!r} (give them with "
                         "--names a,b,...).")
    _check_outputs(args, ((args.out, FRAME_OUT, "comparison table (--out)"), (args.report, REPORT_OUT,
                                                                             "report (--report)")))
    frames = [_results_file(path) for path in args.results]
    provenances = [_io.read_provenance(path) for path in args.results]
    notes = _same_test_data(args, names, provenances)  # said once every check has passed: one line for an error
    no_user = [path for path, f in zip(args.results, frames) if "user" not in f.columns]
    if no_user:
        raise _io.InputError(f"{no_user[0]}: no 'user' column; compare pairs the users by id, never by position "
                             "(evaluate --out writes the column).")
    numeric = [pd.api.types.is_numeric_dtype(f["user"]) for f in frames]
    common = frames[0]["user"]
    for frame in frames[1:]:
        common = common[common.isin(frame["user"])]
    if common.empty:
        raise _io.InputError(f"{args.results[0]} and {', '.join(args.results[1:])}: no user is in every file"
                             + (" (the user ids are numbers in some files and text in others)."
                                if len(set(numeric)) > 1 else "."))
    if any(len(f) != len(common) for f in frames):
        notes.append(f"comparing the {len(common)} users present in every file")
    frames = [f.set_index("user").loc[common.to_numpy()] for f in frames]
    columns = [{c for cols in metric_columns(f).values() for _, c in cols} for f in frames]
    shared = [c for c in frames[0].columns if all(c in cols for cols in columns)]
    if not shared:
        raise _io.InputError(f"{', '.join(args.results)}: no metric column is in every file.")
    if any(len(cols) > len(shared) for cols in columns):
        notes.append(f"comparing the {len(shared)} metric columns present in every file: {', '.join(shared)}")
    for note in notes:
        _note(args, note)
    results = {name: f[shared].reset_index(drop=True) for name, f in zip(names, frames)}
    table = compare(*results.values(), names=names)
    _say(args, _comparison_text(table))
    if args.out:
        provenance = {**_provenance.environment("compare"), "results": {
            name: {**_provenance.file_record(path), "provenance": p}
            for name, path, p in zip(names, args.results, provenances)}}
        _io.write_whole(args.out, lambda tmp: _io.write_results(table, tmp, provenance))
    activity = None
    if args.train:  # each compared user's training interactions, for the by-activity views
        train = _read_data(args, args.train)
        counts = (train["user"].value_counts() if isinstance(train, pd.DataFrame)
                  else pd.Series(np.diff(train.indptr)))
        activity = counts.reindex(common.to_numpy(), fill_value=0).to_numpy()
    _report(args, results, title="gpureco comparison", activity=activity,
            provenance={name: p for name, p in zip(names, provenances) if p})
    return OK


def _same_test_data(args, names, provenances):
    """Results of different test data are not comparable: refuse them (unless --force), saying what differs; the
    notes to say (the other differences, and which files have no provenance)."""
    missing = [name for name, p in zip(names, provenances) if p is None]
    notes = [f"no provenance in {', '.join(missing)} (not written by gpureco evaluate --out): the test data cannot "
             "be checked"] if missing else []
    known = [(name, p) for name, p in zip(names, provenances) if p is not None]
    if len(known) < 2:
        return notes
    names, provenances = zip(*known)
    differ = _provenance.differences(provenances, names, _provenance.TEST_DATA)
    if differ and not args.force:
        raise _io.InputError("the results were computed on different test data, so their users' metrics are not "
                             "comparable: " + "; ".join(differ) + " (--force compares them anyway).")
    if differ:
        notes.append("--force: comparing results of different test data: " + "; ".join(differ))
    others = _provenance.differences(provenances, names, _provenance.NOTED)
    if others:
        notes.append("the results differ in: " + "; ".join(others))
    return notes


def _results_file(path):
    """A per-user results file: rows, unique users, and metric columns of finite numbers (or NaN)."""
    frame = _io.read_frame(path)
    _has_rows(frame, path, "per-user results")
    if "user" in frame.columns and frame["user"].duplicated().any():
        row = int(np.flatnonzero(frame["user"].duplicated())[0])
        raise _io.InputError(f"{_io.where(path, row)}: user {_shown(frame['user'].iloc[row])} appears twice; a results "
                             "file has one row per user.")
    for column in frame.columns:
        if not (_CUT_OFF.match(str(column)) or column in _WHOLE_POOL):
            continue
        values = pd.to_numeric(frame[column], errors="coerce")
        bad = (values.isna() & frame[column].notna()) | np.isinf(values.fillna(0))
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise _io.InputError(f"{_io.where(path, row)}: column {column!r} holds {_shown(frame[column].iloc[row])}; "
                                 "a metric must be a finite number (or empty for NaN).")
        frame[column] = values
    return frame


# --- the parser -------------------------------------------------------------------------------------

class _Parser(argparse.ArgumentParser):
    """argparse, with its usage errors in one line on stderr (exit 2) like every other error."""

    def error(self, message):
        self.exit(USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def parser():
    top = _Parser(prog="gpureco", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    top.add_argument("--version", action="version", version=f"gpureco {__version__}")
    sub = top.add_subparsers(dest="command", required=True)

    def command(name, help):
        p = sub.add_parser(name, help=help, description=help)
        p.add_argument("--quiet", "-q", action="store_true", help="print nothing but errors")
        return p

    def data_options(p):
        group = p.add_argument_group("interaction files", "Columns are found by name: user, user_id, userId, ...; "
                                     "item, item_id, movieId, ...; value, rating; timestamp, time (RecBole's typed "
                                     "headers such as user_id:token too). A file whose first line holds only "
                                     "numbers has none: user, item, value, timestamp in that order (ML-100k's "
                                     "u.data). Separators by suffix: .csv comma; .tsv, .inter, .data tab; .dat ::.")
        for name, option in _io.OPTIONS.items():
            group.add_argument(option, metavar="NAME", help=f"the {name} column's name")
        group.add_argument("--sep", help="the field separator of text files: a string, or tab, comma, semicolon, "
                           "space (default: by suffix)")
        group.add_argument("--duplicates", choices=DUPLICATES, default="error", help="repeated (user, item) rows: "
                           "an error naming them (default), or combined: sum of values (and latest timestamp), "
                           "last row (by timestamp), max value")
        return group

    demo = command("demo", "evaluate PureSVD against most-popular on generated data, and write a report")
    demo.add_argument("--users", type=int, default=10_000)
    demo.add_argument("--items", type=int, default=3_000)
    demo.add_argument("-k", type=int, default=10, help="largest cut-off K (default 10)")
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--device", default="auto", help="auto, cpu, gpu or cuda:N (default auto)")
    demo.add_argument("--report", default=None, help="report path, .html or .md "
                      "(default gpureco_demo_report.html in the current directory)")
    demo.add_argument("--no-report", action="store_true", help="write no report")

    ev = command("evaluate", "evaluate a model (factors, a score matrix or top-K lists) on train/test files")
    ev.add_argument("--train", required=True, help="training interactions: .csv/.tsv/.inter/.data/.dat/.parquet "
                    "(user,item[,value][,timestamp], see below) or .npz/.mtx")
    ev.add_argument("--test", required=True, help="test interactions, in the same kind of file")
    ev.add_argument("--factors", nargs=2, metavar=("USERS.npy", "ITEMS.npy"), help="user and item factor matrices")
    ev.add_argument("--item-biases", metavar="BIASES.npy", help="item biases added to the factor scores")
    ev.add_argument("--scores", metavar="SCORES.npy", help="a users x items score matrix")
    ev.add_argument("--recs", metavar="LISTS", help="top-K lists, .csv/.parquet with user,item[,rank|score]")
    ev.add_argument("--user-ids", help="the user id of each model row (.npy, or the first column of a CSV/Parquet "
                    "file); without it, user ids are row numbers")
    ev.add_argument("--item-ids", help="the item id of each model row, likewise")
    ev.add_argument("--metrics", help="comma-separated names: P@10,NDCG@5,ROC_AUC, or bare names with -k (default "
                    f"{DEFAULT_METRICS}; with --recs {DEFAULT_LIST_METRICS})")
    ev.add_argument("-k", default="10", help="cut-off(s) for bare metric names, such as 10 or 5,10 (default 10)")
    ev.add_argument("--gain", choices=GAINS,
                    help="NDCG gain of a test interaction's value v (the test file's value column; 1 without one): "
                         "linear v, exponential 2**v - 1, or binary [v > 0] (default: the convention's, linear for "
                         "gpureco), as the API's gain=")
    ev.add_argument("--convention", choices=tuple(CONVENTIONS), default="gpureco",
                    help="compute P, R, AP and NDCG as that library defines them (docs/peers.md; default gpureco), "
                         "as the API's convention=")
    ev.add_argument("--ties", metavar="RULE", help="the order of equal scores, as the API's ties= (docs/peers.md; "
                    "default: the convention's)")
    ev.add_argument("--relevance-threshold", type=float, metavar="T", help="only test interactions whose value is at "
                    "least T are relevant (default: every one), as the API's relevance_threshold=")
    ev.add_argument("--device", default="auto", help="auto, cpu, gpu or cuda:N (default auto)")
    ev.add_argument("--scheduler", metavar="ADDRESS", help="evaluate on a Dask cluster: its scheduler's address, "
                    "such as tcp://host:8786 (needs pip install 'gpureco[dask]'; docs/dask.md)")
    ev.add_argument("--name", default="model", help="the model's name in tables and reports")
    ev.add_argument("--out", help="per-user results, .csv (provenance in FILE.provenance.json) or .parquet "
                    "(provenance in its metadata)")
    ev.add_argument("--report", help="report path, .html or .md")
    ev.add_argument("--latex", metavar="FILE.tex", help="the models x metrics table (mean ± 95%% CI) as LaTeX")
    data_options(ev).add_argument("--unknown", choices=("error", "drop"), default="error", help="rows whose user or "
                                  "item the model has no row for (with --recs: ids not in --train): an error "
                                  "(default), or left out and counted")

    split = command("split", "split interactions into train and test files")
    split.add_argument("input", help="interactions: .csv/.parquet (user,item[,value][,timestamp]) or .npz/.mtx")
    split.add_argument("--method", required=True, choices=["leave-k-out", "last-n", "last-fraction", "time-cutoff",
                                                           "k-fold", "recometrics-all", "recometrics-separated",
                                                           "recometrics-joined"])
    split.add_argument("--out-dir", required=True, help="folder for train/test files (fold1/, fold2/, ... for k-fold)")
    split.add_argument("--format", choices=[".csv", ".parquet", ".npz", ".mtx"], help="output type (default: the "
                       "input's)")
    split.add_argument("-n", type=int, default=SPLIT_DEFAULTS["n"],
                       help="leave-k-out / last-n: test interactions per user (default 1)")
    split.add_argument("--fraction", type=float, default=SPLIT_DEFAULTS["fraction"],
                       help="last-fraction, time-cutoff, k-fold, recometrics-*: fraction of interactions to test "
                       "(default 0.2)")
    split.add_argument("--cutoff", help="time-cutoff: the first test timestamp (instead of --fraction)")
    split.add_argument("--folds", type=int, default=SPLIT_DEFAULTS["folds"], help="k-fold: number of folds (default 5)")
    split.add_argument("--users-fraction", type=float, default=SPLIT_DEFAULTS["users_fraction"],
                       help="recometrics-separated/joined: fraction of users to test (default 0.1)")
    split.add_argument("--min-train", type=int, default=SPLIT_DEFAULTS["min_train"],
                       help="training interactions a test user keeps (default 1)")
    split.add_argument("--seed", type=int, default=SPLIT_DEFAULTS["seed"])
    data_options(split)

    cmp = command("compare", "compare models' per-user results (files written by evaluate --out)")
    cmp.add_argument("results", nargs="+", help="per-user results, .csv or .parquet")
    cmp.add_argument("--names", help="comma-separated model names (default: the file names)")
    cmp.add_argument("--out", help="the comparison table, .csv or .parquet")
    cmp.add_argument("--report", help="report path, .html or .md")
    cmp.add_argument("--latex", metavar="FILE.tex", help="the models x metrics table (mean ± 95%% CI) as LaTeX")
    cmp.add_argument("--force", action="store_true", help="compare results of different test data (refused "
                     "otherwise)")
    cmp.add_argument("--train", help="the training interactions, for the report's views by user activity")
    data_options(cmp)
    return top


COMMANDS = {"demo": cmd_demo, "evaluate": cmd_evaluate, "split": cmd_split, "compare": cmd_compare}


def main(argv=None):
    """Run the command line; returns the exit code (see the module docstring). Every failure is one line on
    stderr; an output file is written whole or not at all."""
    argv = sys.argv[1:] if argv is None else [str(a) for a in argv]
    if argv and argv[0].startswith("-") and argv[0] not in ("-h", "--help", "--version"):
        # (argparse would say only that a command is required)
        print(f"gpureco: error: {argv[0]} is not an option of gpureco itself; the command comes first: gpureco "
              f"{'|'.join(COMMANDS)} [options] (see gpureco --help)", file=sys.stderr)
        return USAGE
    try:
        args = parser().parse_args(argv)
    except SystemExit as done:  # --help, --version (0) or a usage error (2, already said in one line)
        return done.code if isinstance(done.code, int) else USAGE
    try:
        return COMMANDS[args.command](args)
    except (_optional.Unavailable, GpuUnavailable, NotAvailableHere) as error:
        return _fail(args, "not available", error, UNAVAILABLE)
    except (ValueError, TypeError, OSError) as error:  # every input check raises one of these, naming the input
        return _fail(args, "error", error, USAGE)
    except KeyboardInterrupt:
        print(f"gpureco {args.command}: interrupted", file=sys.stderr)
        return INTERRUPTED


def _fail(args, kind, error, code):
    text = " ".join(str(error).split())  # one line, whatever the message holds
    print(f"gpureco {args.command}: {kind}: {text}", file=sys.stderr)
    return code

