"""evaluate's --convention, --ties and --relevance-threshold: the API's options, the API's numbers, the API's
checks (exit 2), and the provenance that says which definitions made a results file."""
import warnings

import numpy as np
import pandas as pd
import pytest

import gpureco
from gpureco.cli import main
from gpureco.data import _io

pytest.importorskip("pyarrow")  # the Parquet results file


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Train/test frames with graded values, integer factors (many tied scores, all exact) and lists with
    tied scores."""
    d = tmp_path_factory.mktemp("conventions")
    data = gpureco.datasets.make_interactions(80, 50, 10, seed=5)
    train, test = gpureco.split_leave_k_out(data, k=3, seed=2)
    train.to_csv(d / "train.csv", index=False)
    test.to_csv(d / "test.csv", index=False)
    ids = gpureco.IdMap(pd.RangeIndex(80), pd.RangeIndex(50))
    X_train, X_test, _ = gpureco.to_csr(train, test, ids=ids)
    rng = np.random.default_rng(0)
    A, B = rng.integers(-2, 3, (80, 3)).astype(np.float64), rng.integers(-2, 3, (50, 3)).astype(np.float64)
    np.save(d / "A.npy", A)
    np.save(d / "B.npy", B)
    np.save(d / "scores.npy", A @ B.T)
    scores = A @ B.T - 1e9 * X_train.toarray()
    top = np.argsort(-scores, axis=1, kind="stable")[:, :10]
    pd.DataFrame({"user": np.repeat(np.arange(80), 10), "item": top.ravel(),
                  "score": np.take_along_axis(scores, top, axis=1).ravel()}).to_csv(d / "recs.csv", index=False)
    assert len(set(test["value"])) > 1  # graded: a threshold keeps some
    return d, X_train, X_test, A, B


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


METRICS = ["P@5", "R@5", "AP@5", "NDCG@5", "RR@5"]


def _cli(capsys, d, out, model, *options, metrics=METRICS):
    argv = ["evaluate", "--train", d / "train.csv", "--test", d / "test.csv", *model, "--metrics", ",".join(metrics),
            "--out", out, "-q", *options]
    code, _, err = run(capsys, *argv)
    assert code == 0, err
    return (pd.read_parquet(out) if out.suffix == ".parquet" else pd.read_csv(out)).set_index("user")


def _api(files, kind, metrics=METRICS, **options):
    """The Python API's numbers for the users with test items, by user."""
    d, X_train, X_test, A, B = files
    users = np.flatnonzero(np.diff(X_test.indptr))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        if kind == "factors":
            flags = {m.flag: any(name.startswith(m.column.removesuffix("K")) for name in metrics)
                     for m in gpureco.engine._registry.METRICS}
            got = gpureco.calc_reco_metrics(X_train, X_test, A, B, k=5, **flags, **options)
        elif kind == "scores":
            got = gpureco.evaluate(A @ B.T, X_test, X_train, metrics=metrics, **options)
        else:
            truth = pd.read_csv(d / "test.csv").rename(columns={"value": "rating"})
            got = gpureco.evaluate_lists(pd.read_csv(d / "recs.csv"), truth, metrics=metrics, **options)
            return got[metrics]
    return got[metrics].iloc[users].set_axis(pd.Index(users, name="user"))


MODELS = {"factors": lambda d: ["--factors", d / "A.npy", d / "B.npy"],
          "scores": lambda d: ["--scores", d / "scores.npy"], "recs": lambda d: ["--recs", d / "recs.csv"]}


@pytest.mark.parametrize("kind", list(MODELS))
@pytest.mark.parametrize("options", [{"convention": "lenskit"}, {"convention": "recbole"},
                                     {"convention": "replay", "ties": "first"}, {"ties": "last"},
                                     {"convention": "ranx", "relevance_threshold": 2.0}])
def test_the_cli_gives_the_apis_numbers(kind, options, files, capsys, tmp_path):
    d = files[0]
    argv = [x for name, value in options.items() for x in (f"--{name.replace('_', '-')}", value)]
    got = _cli(capsys, d, tmp_path / "out.csv", MODELS[kind](d), *argv)
    want = _api(files, kind, **options)
    pd.testing.assert_frame_equal(got, want, check_exact=True, check_index_type=False)
    default = _cli(capsys, d, tmp_path / "default.csv", MODELS[kind](d))
    assert not got.equals(default)  # the option changed the numbers


def test_provenance_says_which_definitions_made_the_file(files, capsys, tmp_path):
    d = files[0]
    for out in (tmp_path / "r.csv", tmp_path / "r.parquet"):
        _cli(capsys, d, out, MODELS["factors"](d), "--convention", "replay", "--relevance-threshold", "2")
        options = _io.read_provenance(out)["options"]
        # ties: the rule applied (RePlay's by default), not only what was typed
        assert (options["convention"], options["ties"], options["relevance_threshold"]) == ("replay", "last", 2.0)
    _cli(capsys, d, tmp_path / "plain.csv", MODELS["scores"](d))
    options = _io.read_provenance(tmp_path / "plain.csv")["options"]
    assert (options["convention"], options["ties"], options["relevance_threshold"]) == ("gpureco", "first", None)
    code, _, err = run(capsys, "compare", tmp_path / "r.csv", tmp_path / "plain.csv", "--names", "a,b")
    assert code == 0
    assert "options.convention: a replay, b gpureco" in err and "options.ties: a last, b first" in err


@pytest.mark.parametrize("options, message", [
    (["--convention", "trec"], "argument --convention: invalid choice: 'trec'"),
    (["--ties", "sideways"], "'ties' must be one of 'first'"),
    (["--ties", ""], "'ties' must be one of"),
    (["--relevance-threshold", "high"], "argument --relevance-threshold: invalid float value: 'high'"),
    (["--relevance-threshold", "nan"], "--relevance-threshold nan: 'relevance_threshold' must be a finite number"),
    (["--convention", "recbole", "--gain", "exponential"], "convention='recbole' uses gain='binary'"),
    (["--ties", "average"], "ties='average'"),  # the default metrics hold AP, which it does not define
])
def test_bad_values_exit_2_in_one_line_naming_the_option(options, message, files, capsys):
    d = files[0]
    code, _, err = run(capsys, "evaluate", "--train", d / "train.csv", "--test", d / "test.csv",
                       *MODELS["factors"](d), *options)
    assert code == 2 and err.count("\n") == 1 and message in err, err
    assert err.startswith("gpureco evaluate: error: ")


def test_bad_values_are_refused_before_any_file_is_read(capsys, tmp_path):
    code, _, err = run(capsys, "evaluate", "--train", tmp_path / "missing.csv", "--test", tmp_path / "missing.csv",
                       "--scores", tmp_path / "missing.npy", "--ties", "sideways")
    assert code == 2 and "--ties sideways: 'ties' must be one of" in err
