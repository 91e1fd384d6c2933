"""The gpureco command line: demo, evaluate, split, compare.

Exit codes: 0 success; 2 usage or input error (bad arguments, a file that is missing, unreadable
or wrong, with the file and row named); 3 a feature this installation lacks (an optional package
such as pyarrow, or a GPU for --device gpu); 1 an unexpected error (a bug: please
report it with the traceback); 130 interrupted.
"""
from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from .. import _optional, __version__
from .._evaluate import evaluate
from .._lists import evaluate_lists
from .._recometrics import calc_reco_metrics
from ..analysis._report import metric_columns, model_summary, write_report
from ..analysis._stats import compare
from ..data import _io
from ..data._interactions import IdMap, RowError, from_csr, to_csr
from ..data._split import split_reco_train_test
from ..data._splitters import split_k_fold_users, split_last_per_user, split_leave_k_out, split_time_cutoff
from ..engine._backend import GpuUnavailable
from ..engine._registry import METRICS, NAN_REASONS, column_name, parse_metrics

OK, FAILED, USAGE, UNAVAILABLE, INTERRUPTED = 0, 1, 2, 3, 130
DEFAULT_METRICS = "P,TP,R,AP,TAP,NDCG,Hit,RR,ROC_AUC,PR_AUC"
DEFAULT_LIST_METRICS = "P,TP,R,AP,TAP,NDCG,Hit,RR"  # the AUCs need the whole pool, which a list does not hold
PROGRESS_MIN_USERS = 20_000  # below this a run takes seconds: no progress bar


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
        table = compare(*results.values(), names=list(results))
        brief = ["model_a", "model_b", "metric", "n_users", "mean_a", "mean_b", "mean_diff", "ci_low", "ci_high",
                 "p_ttest_holm", "p_permutation_holm"]
        _say(args, "", "Paired comparison (mean_diff = b - a; p-values Holm-adjusted over the metrics):",
             table[brief].to_string(index=False, float_format=lambda x: f"{x:.4g}"))


def _nan_note(args, counts, n_users):
    if counts and not args.quiet:
        lines = [f"  {rule}: {n} users ({NAN_REASONS[int(rule.split()[-1])]})" for rule, n in counts.items()]
        print(f"NaN metrics (docs/metrics.md, NaN rules), out of {n_users} users:", *lines, sep="\n", file=sys.stderr)


# --- demo -------------------------------------------------------------------------------------------

def cmd_demo(args):
    from ._demo import PURE_SVD_FACTORS, run_demo
    if min(args.users, args.items) <= PURE_SVD_FACTORS:
        raise UsageError(f"--users and --items must be at least {PURE_SVD_FACTORS + 1} (the demo's PureSVD fits "
                         f"{PURE_SVD_FACTORS} factors); got --users {args.users}, --items {args.items}.")
    started = time.perf_counter()
    headline, _, path = run_demo(args.users, args.items, k=args.k, seed=args.seed, device=args.device,
                                 report=None if args.no_report else args.report,
                                 echo=(lambda line: None) if args.quiet else print)
    _say(args, "")
    _print_summary(args, headline)
    if path is not None:
        _say(args, f"report written to {path.resolve()}")
        try:
            _optional.package("matplotlib", "plot")
        except _optional.Unavailable as missing:
            _note(args, f"the report has no plots: {missing}")
    _say(args, f"demo done in {time.perf_counter() - started:.1f} s")
    return OK


# --- evaluate ---------------------------------------------------------------------------------------

def _selection(args, lists=False):
    try:
        ks = [int(k) for k in args.k.split(",")] if args.k else None
    except ValueError:
        raise UsageError(f"'-k' must be a cut-off or a comma-separated list of them, such as 10 or 5,10; "
                         f"got {args.k!r}.") from None
    spec = args.metrics or (DEFAULT_LIST_METRICS if lists else DEFAULT_METRICS)
    allowed = [m.column for m in METRICS if not (lists and m.column in ("ROC_AUC", "PR_AUC"))]
    try:
        return parse_metrics([name.strip() for name in spec.split(",") if name.strip()], ks, allowed=allowed)
    except (TypeError, ValueError) as error:
        raise UsageError(f"--metrics {spec!r} -k {args.k!r}: {error}") from None


def _matrices(args, n_users=None, n_items=None):
    """(X_train, X_test, ids) from the --train/--test files, on the rows/columns of the model's files."""
    train, test = _io.read_interactions(args.train), _io.read_interactions(args.test)
    if isinstance(train, pd.DataFrame) != isinstance(test, pd.DataFrame):
        raise UsageError(f"--train ({args.train}) and --test ({args.test}) must both be frames (CSV/Parquet) or "
                         "both be matrices (.npz/.mtx).")
    if isinstance(train, pd.DataFrame):
        ids = []  # the ids of the model's rows: from the files, else the row numbers
        for path, n, what in ((args.user_ids, n_users, "user"), (args.item_ids, n_items, "item")):
            found = _io.read_ids(path) if path else pd.RangeIndex(n)
            if len(found) != n:
                raise _io.InputError(f"{path}: {len(found)} {what} ids for a model of {n} {what}s (one id per row "
                                     f"of the model's {what} file).")
            ids.append(found)
        ids = IdMap(*ids)
        matrices = []
        for frame, path in ((train, args.train), (test, args.test)):
            try:
                matrices.append(to_csr(frame, ids=ids)[0])
            except RowError as error:
                hint = "" if args.user_ids and args.item_ids else (
                    " Without --user-ids/--item-ids, ids are the row numbers of the model's files.")
                raise _io.InputError(f"{_io.where(path, error.row)}: {error}{hint}") from None
        return matrices[0], matrices[1], ids
    for X, path in ((train, args.train), (test, args.test)):
        if X.shape != (n_users, n_items):
            raise _io.InputError(f"{path}: expected a matrix of shape ({n_users}, {n_items}) to match the model's "
                                 f"files; got {X.shape}.")
    return train, test, IdMap(pd.RangeIndex(n_users), pd.RangeIndex(n_items))


def _evaluate_factors(args, selection, X_train, X_test, A, B, biases, users):
    flags = {m.flag: m.column in selection.names for m in METRICS}
    k = int(selection.cutoffs.max()) if selection.cutoffs.size else 1
    many = selection.cutoffs.size > 1
    progress = sys.stderr.isatty() and not args.quiet and users.size >= PROGRESS_MIN_USERS
    chunks = np.array_split(users, 20) if progress else [users]
    frames, counts = [], {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the NaN counts are reported once, below
        for i, rows in enumerate(chunks):
            frame = calc_reco_metrics(X_train[rows], X_test[rows], None if A is None else A[rows], B, k=k,
                                      item_biases=biases, cumulative=many, device=args.device, **flags)
            for code, n in frame.attrs["nan_reasons"].items():
                counts[code] = counts.get(code, 0) + n
            frames.append(frame)
            if progress:
                print(f"\revaluating: {100 * (i + 1) // len(chunks)}% of {users.size:,} users", end="",
                      file=sys.stderr, flush=True)
    if progress:
        print(file=sys.stderr)
    _nan_note(args, counts, users.size)
    frame = pd.concat(frames, ignore_index=True)
    return frame[[column_name(name, k) for name, k in selection.columns]]


def cmd_evaluate(args):
    selection = _selection(args, lists=args.recs is not None)
    models = [args.factors is not None, args.scores is not None, args.recs is not None]
    if sum(models) != 1:
        raise UsageError("give exactly one model: --factors USERS.npy ITEMS.npy, --scores SCORES.npy or --recs LISTS.")
    if args.recs is not None:
        return _evaluate_lists(args, selection)
    if args.factors:
        A = _io.read_array(args.factors[0], 2, "user factors")
        B = _io.read_array(args.factors[1], 2, "item factors")
        n_users, n_items = A.shape[0], B.shape[0]
    else:
        scores = _io.read_array(args.scores, 2, "a score matrix (users x items)")
        n_users, n_items = scores.shape
    biases = _io.read_array(args.item_biases, 1, "item biases") if args.item_biases else None
    X_train, X_test, ids = _matrices(args, n_users, n_items)
    users = np.flatnonzero(np.diff(X_test.indptr) > 0)  # users without test items have nothing to score
    if args.factors:
        per_user = _evaluate_factors(args, selection, X_train, X_test, A, B, biases, users)
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # the NaN counts are reported once, below
            per_user = evaluate(scores[users], X_test[users], X_train[users], metrics=_column_names(selection),
                                device=args.device)
        _nan_note(args, per_user.attrs["nan_reasons"], users.size)
    per_user.insert(0, "user", ids.users[users])
    return _finish(args, per_user, activity=np.diff(X_train.indptr)[users])


def _column_names(selection):
    return [column_name(name, k) for name, k in selection.columns]


def _evaluate_lists(args, selection):
    recs = _io.read_frame(args.recs)
    truth = _io.read_interactions(args.test)
    if not isinstance(truth, pd.DataFrame):
        truth = from_csr(truth)
    truth = truth.rename(columns={"value": "rating"})  # the NDCG gain
    truth = truth[[c for c in ("user", "item", "rating") if c in truth.columns]]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # the NaN counts are reported once, below
            per_user = evaluate_lists(recs, truth, metrics=_column_names(selection))  # indexed by user
    except (TypeError, ValueError) as error:
        raise _io.InputError(f"{args.recs} (against {args.test}): {error}") from None
    _nan_note(args, per_user.attrs["nan_reasons"], len(per_user))
    return _finish(args, per_user.reset_index())


def _finish(args, per_user, activity=None):
    metrics = per_user.drop(columns=[c for c in ("user",) if c in per_user.columns])
    _print_summary(args, {args.name: metrics})
    if args.out:
        _io.write_frame(per_user, args.out)
        _say(args, f"per-user results written to {Path(args.out).resolve()}")
    if args.report:
        path = write_report({args.name: metrics}, args.report, activity=activity,
                            title=f"gpureco evaluation: {args.name}")
        _say(args, f"report written to {path.resolve()}")
    return OK


# --- split ------------------------------------------------------------------------------------------

def _cutoff(value, column):
    if pd.api.types.is_numeric_dtype(column):
        try:
            return float(value)
        except ValueError:
            raise UsageError(f"'--cutoff' must be a number for a numeric timestamp column; got {value!r}.") from None
    return value


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
    data = _io.read_interactions(args.input)
    suffix = args.format or _io.suffix_of(args.input)
    if suffix in _io.MATRIX_SUFFIXES and isinstance(data, pd.DataFrame):
        raise UsageError(f"'--format' {suffix} holds a matrix; a split of a frame gives frames: use .csv or .parquet.")
    try:
        parts = _split_parts(args, data)
    except RowError as error:
        raise _io.InputError(f"{_io.where(args.input, error.row)}: {error}") from None
    for folder, files in parts.items():
        (Path(args.out_dir) / folder).mkdir(parents=True, exist_ok=True)
        for name, part in files.items():
            if suffix in _io.FRAME_SUFFIXES and not isinstance(part, pd.DataFrame):
                part = from_csr(part)
            path = _io.write_interactions(part, Path(args.out_dir) / folder / f"{name}{suffix}")
            _say(args, f"{path}: {part.nnz if hasattr(part, 'nnz') else len(part):,} interactions")
    return OK


def _recometrics_parts(mode, split, ids):
    """{file name: frame or matrix} of split_reco_train_test's outputs, rows named by user when ids exist."""
    users = ids.users if ids is not None else None
    if mode == "all":
        parts = {"train": (split[0], None), "test": (split[1], None)}
    elif mode == "separated":
        X_train, X_test, X_rem, test_users = split
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
    frames = [_io.read_frame(path) for path in args.results]
    if all("user" in f.columns for f in frames):  # pair the users by id
        common = frames[0]["user"]
        for frame in frames[1:]:
            common = common[common.isin(frame["user"])]
        if any(len(f) != len(common) for f in frames):
            _note(args, f"comparing the {len(common)} users present in every file")
        frames = [f.set_index("user").loc[common.to_numpy()] for f in frames]
    elif len({len(f) for f in frames}) > 1:
        raise UsageError("results files without a 'user' column must have the same users in the same order; got "
                         + ", ".join(f"{p}: {len(f)} rows" for p, f in zip(args.results, frames)) + ".")
    results = {name: f[[c for cols in metric_columns(f).values() for _, c in cols]].reset_index(drop=True)
               for name, f in zip(names, frames)}
    table = compare(*results.values(), names=names)
    _say(args, table.to_string(float_format=lambda x: f"{x:.4g}"))
    if args.out:
        _io.write_frame(table, args.out)
    if args.report:
        path = write_report(results, args.report, title="gpureco comparison")
        _say(args, f"report written to {path.resolve()}")
    return OK


# --- the parser -------------------------------------------------------------------------------------

def parser():
    top = argparse.ArgumentParser(prog="gpureco", description=__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    top.add_argument("--version", action="version", version=f"gpureco {__version__}")
    sub = top.add_subparsers(dest="command", required=True)

    def command(name, help):
        p = sub.add_parser(name, help=help, description=help)
        p.add_argument("--quiet", "-q", action="store_true", help="print nothing but errors")
        return p

    demo = command("demo", "evaluate PureSVD against most-popular on generated data, and write a report")
    demo.add_argument("--users", type=int, default=10_000)
    demo.add_argument("--items", type=int, default=3_000)
    demo.add_argument("-k", type=int, default=10, help="largest cut-off K (default 10)")
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--device", default="auto", help="auto, cpu, gpu or cuda:N (default auto)")
    demo.add_argument("--report", default="gpureco_demo_report.html", help="report path, .html or .md "
                      "(default gpureco_demo_report.html in the current directory)")
    demo.add_argument("--no-report", action="store_true", help="write no report")

    ev = command("evaluate", "evaluate a model (factors, a score matrix or top-K lists) on train/test files")
    ev.add_argument("--train", required=True, help="training interactions: .csv/.parquet (user,item[,value]) or "
                    ".npz/.mtx")
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
    ev.add_argument("--device", default="auto", help="auto, cpu, gpu or cuda:N (default auto)")
    ev.add_argument("--name", default="model", help="the model's name in tables and reports")
    ev.add_argument("--out", help="per-user results, .csv or .parquet")
    ev.add_argument("--report", help="report path, .html or .md")

    split = command("split", "split interactions into train and test files")
    split.add_argument("input", help="interactions: .csv/.parquet (user,item[,value][,timestamp]) or .npz/.mtx")
    split.add_argument("--method", required=True, choices=["leave-k-out", "last-n", "last-fraction", "time-cutoff",
                                                           "k-fold", "recometrics-all", "recometrics-separated",
                                                           "recometrics-joined"])
    split.add_argument("--out-dir", required=True, help="folder for train/test files (fold1/, fold2/, ... for k-fold)")
    split.add_argument("--format", choices=[".csv", ".parquet", ".npz", ".mtx"], help="output type (default: the "
                       "input's)")
    split.add_argument("-n", type=int, default=1, help="leave-k-out / last-n: test interactions per user (default 1)")
    split.add_argument("--fraction", type=float, default=0.2, help="last-fraction, time-cutoff, k-fold, recometrics-*: "
                       "fraction of interactions to test (default 0.2)")
    split.add_argument("--cutoff", help="time-cutoff: the first test timestamp (instead of --fraction)")
    split.add_argument("--folds", type=int, default=5, help="k-fold: number of folds (default 5)")
    split.add_argument("--users-fraction", type=float, default=0.1, help="recometrics-separated/joined: fraction of "
                       "users to test (default 0.1)")
    split.add_argument("--min-train", type=int, default=1, help="training interactions a test user keeps (default 1)")
    split.add_argument("--seed", type=int, default=1)

    cmp = command("compare", "compare models' per-user results (files written by evaluate --out)")
    cmp.add_argument("results", nargs="+", help="per-user results, .csv or .parquet")
    cmp.add_argument("--names", help="comma-separated model names (default: the file names)")
    cmp.add_argument("--out", help="the comparison table, .csv or .parquet")
    cmp.add_argument("--report", help="report path, .html or .md")
    return top


COMMANDS = {"demo": cmd_demo, "evaluate": cmd_evaluate, "split": cmd_split, "compare": cmd_compare}


def main(argv=None):
    """Run the command line; returns the exit code (see the module docstring)."""
    args = parser().parse_args(argv)  # exits with 2 on a usage error
    try:
        return COMMANDS[args.command](args)
    except (_optional.Unavailable, GpuUnavailable) as error:
        print(f"gpureco {args.command}: not available: {error}", file=sys.stderr)
        return UNAVAILABLE
    except (ValueError, TypeError, OSError) as error:  # every input check raises one of these, naming the input
        print(f"gpureco {args.command}: error: {error}", file=sys.stderr)
        return USAGE
    except KeyboardInterrupt:
        print(f"gpureco {args.command}: interrupted", file=sys.stderr)
        return INTERRUPTED

