"""The command line end to end on small files: every command, every input format, the error paths."""
import json
import subprocess
import warnings
import sys

import numpy as np
import pandas as pd
import pytest
import scipy.io
import scipy.sparse as sp

import gpureco
from conftest import GPU_MISSING, without
from gpureco.cli import main
from gpureco.cli._demo import pure_svd
from reference import defined_scores

pytest.importorskip("pyarrow")  # the test extra installs it; Parquet is optional for users


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Train/test interactions in every format, factors, scores and top-K lists of one small model."""
    d = tmp_path_factory.mktemp("cli")
    data = gpureco.datasets.make_interactions(120, 60, 10, seed=3)
    data.to_csv(d / "all.csv", index=False)
    train, test = gpureco.split_leave_k_out(data, k=2, seed=1)
    ids = gpureco.IdMap(pd.RangeIndex(120), pd.RangeIndex(60))
    X_train, X_test, _ = gpureco.to_csr(train, test, ids=ids)
    for name, frame, X in (("train", train, X_train), ("test", test, X_test)):
        frame.to_csv(d / f"{name}.csv", index=False)
        frame.to_parquet(d / f"{name}.parquet", index=False)
        sp.save_npz(d / f"{name}.npz", sp.csr_matrix(X))
        scipy.io.mmwrite(d / f"{name}.mtx", sp.coo_matrix(X))
        # string ids: the model's rows are named by the id files
        frame.assign(user="u" + frame["user"].astype(str), item="i" + frame["item"].astype(str)).to_csv(
            d / f"{name}_named.csv", index=False)
    pd.DataFrame({"id": "u" + pd.Series(range(120)).astype(str)}).to_csv(d / "user_ids.csv", index=False)
    pd.DataFrame({"id": "i" + pd.Series(range(60)).astype(str)}).to_csv(d / "item_ids.csv", index=False)
    A, B = pure_svd(X_train, 6, 0)
    np.save(d / "A.npy", A)
    np.save(d / "B.npy", B)
    np.save(d / "scores.npy", A @ B.T)
    scores = A @ B.T - 1e9 * X_train.toarray()
    top = np.argsort(-scores, axis=1, kind="stable")[:, :10]
    pd.DataFrame({"user": np.repeat(np.arange(120), 10), "item": top.ravel(),
                  "rank": np.tile(np.arange(1, 11), 120)}).to_csv(d / "recs.csv", index=False)
    expected = gpureco.calc_reco_metrics(X_train, X_test, A, B, k=5, ndcg=True, average_precision=False,
                                         precision=False)["NDCG@5"].to_numpy()
    return d, expected


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_an_option_before_the_command_is_named(capsys):
    code, _, err = run(capsys, "--bogus", "evaluate")
    assert code == 2 and err == ("gpureco: error: --bogus is not an option of gpureco itself; the command comes first: "
                                 "gpureco demo|evaluate|split|compare [options] (see gpureco --help)\n")
    code, out, _ = run(capsys, "--version")
    assert code == 0 and out.startswith("gpureco ")


@pytest.mark.parametrize("suffix", [".csv", ".parquet", ".npz", ".mtx"])
def test_evaluate_factors_every_input_format(suffix, files, capsys, tmp_path):
    d, expected = files
    out = tmp_path / "per_user.csv"
    code, text, _ = run(capsys, "evaluate", "--train", d / f"train{suffix}", "--test", d / f"test{suffix}",
                        "--factors", d / "A.npy", d / "B.npy", "--metrics", "NDCG@5,P", "-k", "3,5", "--out", out)
    assert code == 0
    per_user = pd.read_csv(out)
    assert list(per_user.columns) == ["user", "NDCG@5", "P@3", "P@5"]
    np.testing.assert_allclose(per_user["NDCG@5"], expected)  # every user has test items here
    assert "NDCG@5" in text and "ci_low" in text and "per-user results written to" in text


def test_evaluate_named_ids_parquet_out_and_report(files, capsys, tmp_path):
    d, expected = files
    code, text, _ = run(capsys, "evaluate", "--train", d / "train_named.csv", "--test", d / "test_named.csv",
                        "--factors", d / "A.npy", d / "B.npy", "--user-ids", d / "user_ids.csv",
                        "--item-ids", d / "item_ids.csv", "--metrics", "NDCG@5", "--out", tmp_path / "p.parquet",
                        "--report", tmp_path / "r.html", "--name", "svd")
    assert code == 0
    per_user = pd.read_parquet(tmp_path / "p.parquet")
    assert per_user["user"].iloc[0] == "u0"
    np.testing.assert_allclose(per_user["NDCG@5"], expected)
    report = (tmp_path / "r.html").read_text()
    assert "<h2>Summary</h2>" in report and "Each metric by user activity" in report


def test_evaluate_top_k_lists(files, capsys, tmp_path):
    d, expected = files
    code, _, _ = run(capsys, "evaluate", "--train", d / "train.csv", "--test", d / "test.csv", "--recs", d / "recs.csv",
                     "--metrics", "NDCG@5", "--out", tmp_path / "lists.csv", "-q")
    assert code == 0
    per_user = pd.read_csv(tmp_path / "lists.csv")
    np.testing.assert_allclose(per_user["NDCG@5"], expected)  # the lists are the factor model's rankings


def test_evaluate_scores_equals_the_factors(files, capsys, tmp_path):
    d, _ = files
    common = ["evaluate", "--train", d / "train.csv", "--test", d / "test.csv", "-q"]
    A, B = np.load(d / "A.npy"), np.load(d / "B.npy")
    np.save(tmp_path / "defined.npy", defined_scores(A, B))  # the factor model's defined scores
    assert run(capsys, *common, "--scores", tmp_path / "defined.npy", "--out", tmp_path / "s.csv")[0] == 0
    assert run(capsys, *common, "--factors", d / "A.npy", d / "B.npy", "--out", tmp_path / "f.csv")[0] == 0
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "s.csv"), pd.read_csv(tmp_path / "f.csv"))


def test_id_files_must_match_the_model(files, capsys, tmp_path):
    d, _ = files
    pd.DataFrame({"id": "u" + pd.Series(range(119)).astype(str)}).to_csv(tmp_path / "short.csv", index=False)
    code, _, err = run(capsys, "evaluate", "--train", d / "train_named.csv", "--test", d / "test_named.csv",
                       "--factors", d / "A.npy", d / "B.npy", "--user-ids", tmp_path / "short.csv",
                       "--item-ids", d / "item_ids.csv")
    assert code == 2 and "short.csv: 119 user ids for a model of 120 users" in err


def test_scores_report_nan_users_once_and_quiet_means_quiet(files, capsys, tmp_path):
    d, _ = files
    scores = np.load(d / "scores.npy")
    scores[5, 0] = np.nan  # user 5: rule 4
    np.save(tmp_path / "nan.npy", scores)
    argv = ["evaluate", "--train", d / "train.csv", "--test", d / "test.csv", "--scores", tmp_path / "nan.npy",
            "--metrics", "ROC_AUC"]
    code, _, err = run(capsys, *argv)
    assert code == 0 and "rule 4: 1 users" in err and "RuntimeWarning" not in err
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code, out, err = run(capsys, *argv, "-q")
    assert code == 0 and out == "" and err == "" and not caught


def test_recs_errors_name_the_file(files, capsys, tmp_path):
    d, _ = files
    recs = pd.read_csv(d / "recs.csv")
    recs.loc[1, "rank"] = 5  # ranks 1, 5, 3, ... in user 0's list
    recs.to_csv(tmp_path / "bad_recs.csv", index=False)
    code, _, err = run(capsys, "evaluate", "--train", d / "train.csv", "--test", d / "test.csv", "--recs",
                       tmp_path / "bad_recs.csv")
    assert code == 2 and "bad_recs.csv (against" in err and "ranks must be 1, 2, ..., n" in err


def test_quiet_prints_nothing(files, capsys):
    d, _ = files
    code, out, err = run(capsys, "evaluate", "--train", d / "train.npz", "--test", d / "test.npz",
                         "--factors", d / "A.npy", d / "B.npy", "--quiet")
    assert code == 0 and out == "" and err == ""


@pytest.mark.parametrize("args, message", [
    (["--test", "{d}/missing.csv"], "missing.csv: no such file"),
    (["--test", "{d}/A.npy"], "expected interactions in a .csv, .tsv, .inter, .data, .dat, .parquet, .pq, .npz or "
                              ".mtx file; got .npy"),
    (["--test", "{d}/test.npz"], "must both be frames (CSV/Parquet) or both be matrices"),
    (["--metrics", "FOO@3"], "Unknown metric 'FOO@3'"),
    (["-k", "five"], "'-k' must be a cut-off"),
    (["--test", "{d}/bad_row.csv"], "bad_row.csv, row 2 (line 4): item 999 is not in the model (its ids are the row "
                                    "numbers of its files; --user-ids/--item-ids name them) (1 rows have such ids); "
                                    "--unknown drop leaves those rows out."),
    (["--test", "{d}/no_item.csv"], "no_item.csv: no item column; expected user,item[,value][,timestamp] (or "
                                    "MovieLens' userId,movieId,rating, RecBole's user_id:token, ...), or name them "
                                    "with --item-col; got columns 'user'."),
    (["--test", "{d}/nan_value.csv"], "nan_value.csv, row 1 (line 3)"),
    (["--factors", "{d}/A.npy", "{d}/B3.npy"], "B3.npy: 3 factors an item, where"),
    (["--factors", "{d}/A.npy", "{d}/ids.npy"], "expected item factors with 2 dimension(s)"),
    (["--user-ids", "{d}/dup_ids.csv"], "dup_ids.csv, row 1 (line 3): id 'a' appears twice"),
    (["--recs", "{d}/recs.csv"], "give exactly one model"),
    (["--out", "{d}/out.txt"], "out.txt: the per-user results (--out) must be a .csv, .parquet or .pq file"),
])
def test_evaluate_errors_exit_2_and_name_the_file_and_row(args, message, files, capsys):
    d, _ = files
    pd.DataFrame({"user": [0, 1, 2], "item": [1, 2, 999]}).to_csv(d / "bad_row.csv", index=False)
    pd.DataFrame({"user": [0, 1]}).to_csv(d / "no_item.csv", index=False)
    pd.DataFrame({"user": [0, 1], "item": [1, 2], "value": [1.0, "x"]}).to_csv(d / "nan_value.csv", index=False)
    pd.DataFrame({"id": ["a", "a"]}).to_csv(d / "dup_ids.csv", index=False)
    np.save(d / "ids.npy", np.arange(60))
    np.save(d / "B3.npy", np.ones((60, 3)))
    base = {"--train": [f"{d}/train.csv"], "--test": [f"{d}/test.csv"], "--factors": [f"{d}/A.npy", f"{d}/B.npy"]}
    given = {}
    flag = None
    for a in args:
        if a.startswith("-"):
            flag = a
            given[flag] = []
        else:
            given[flag].append(a.format(d=d))
    argv = ["evaluate"] + [x for flag, values in {**base, **given}.items() for x in [flag, *values]]
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert message in err


def test_usage_errors_exit_2_in_one_line(capsys):
    for argv, message in ((["evaluate", "--test", "x.csv"], "the following arguments are required: --train"),
                          (["nonsense"], "invalid choice: 'nonsense'"),
                          (["demo", "--users", "many"], "argument --users: invalid int value: 'many'")):
        code, _, err = run(capsys, *argv)
        assert code == 2 and err.count("\n") == 1 and message in err and "--help" in err
    code, out, _ = run(capsys, "--version")
    assert code == 0 and out.startswith("gpureco ")


def test_entry_point_exit_code_in_a_real_process(tmp_path):
    result = subprocess.run([sys.executable, "-m", "gpureco", "split", str(tmp_path / "none.csv"), "--method",
                             "last-n", "--out-dir", str(tmp_path)], capture_output=True, text=True)
    assert result.returncode == 2 and "none.csv: no such file" in result.stderr


def test_missing_pyarrow_is_exit_3_with_the_install_command(files, capsys, monkeypatch):
    d, _ = files
    without(monkeypatch, "pyarrow")
    code, _, err = run(capsys, "evaluate", "--train", d / "train.parquet", "--test", d / "test.parquet",
                       "--factors", d / "A.npy", d / "B.npy")
    assert code == 3 and "pip install 'gpureco[parquet]'" in err
    code, _, _ = run(capsys, "evaluate", "--train", d / "train.csv", "--test", d / "test.csv",
                     "--factors", d / "A.npy", d / "B.npy", "-q")
    assert code == 0  # CSV needs no optional package


@pytest.mark.parametrize("method, extra, folders, names", [
    ("leave-k-out", ["-n", "2"], [""], ["train", "test"]),
    ("last-n", [], [""], ["train", "test"]),
    ("last-fraction", ["--fraction", "0.3"], [""], ["train", "test"]),
    ("time-cutoff", ["--fraction", "0.25"], [""], ["train", "test"]),
    ("time-cutoff", ["--cutoff", "1710000000"], [""], ["train", "test"]),
    ("k-fold", ["--folds", "3"], ["fold1", "fold2", "fold3"], ["train", "test"]),
    ("recometrics-all", [], [""], ["train", "test"]),
    ("recometrics-separated", ["--users-fraction", "0.5"], [""], ["train", "test", "rest"]),
    ("recometrics-joined", ["--users-fraction", "0.5"], [""], ["train", "test"]),
])
def test_split_every_method(method, extra, folders, names, files, capsys, tmp_path):
    d, _ = files
    code, out, _ = run(capsys, "split", d / "all.csv", "--method", method, "--out-dir", tmp_path, *extra)
    assert code == 0
    data = pd.read_csv(d / "all.csv")
    for folder in folders:
        parts = {name: pd.read_csv(tmp_path / folder / f"{name}.csv") for name in names}
        together = pd.concat(parts.values())
        assert len(together) == len(data)  # every interaction once
        assert not together.duplicated(["user", "item"]).any()
        assert len(parts["test"]) > 0
    assert "interactions" in out


def test_split_matrix_and_parquet_outputs(files, capsys, tmp_path):
    d, _ = files
    code, _, _ = run(capsys, "split", d / "train.npz", "--method", "leave-k-out", "--out-dir", tmp_path / "m", "-q")
    assert code == 0
    X = sp.load_npz(d / "train.npz")
    parts = [sp.load_npz(tmp_path / "m" / f"{n}.npz") for n in ("train", "test")]
    assert (parts[0] + parts[1] != X).nnz == 0 and parts[1].nnz > 0
    code, _, _ = run(capsys, "split", d / "all.csv", "--method", "last-n", "--out-dir", tmp_path / "p",
                     "--format", ".parquet", "-q")
    assert code == 0 and len(pd.read_parquet(tmp_path / "p" / "test.parquet")) == 120


@pytest.mark.parametrize("argv, message", [
    (["--method", "last-n"], "--method last-n splits by time, which a matrix (.npz, .mtx) does not hold"),
    (["--method", "leave-k-out", "--format", ".npz"], "a split of a frame gives frames"),
    (["--method", "time-cutoff", "--cutoff", "soon"], "'--cutoff' must be a finite number"),
    (["--method", "k-fold", "--folds", "1"], "'--folds' must be 2 or more; got 1"),
])
def test_split_errors(argv, message, files, capsys, tmp_path):
    d, _ = files
    source = d / ("train.npz" if "matrix" in message else "all.csv")
    code, _, err = run(capsys, "split", source, "--out-dir", tmp_path, *argv)
    assert code == 2 and message in err


def test_compare(files, capsys, tmp_path):
    d, _ = files
    for name, factors in (("svd", ["A.npy", "B.npy"]), ("flat", ["A.npy", "B.npy"])):
        A = np.load(d / "A.npy")
        if name == "flat":
            np.save(tmp_path / "A0.npy", np.zeros_like(A) + 1.0)
            factors = [tmp_path / "A0.npy", d / "B.npy"]
        else:
            factors = [d / f for f in factors]
        assert run(capsys, "evaluate", "--train", d / "train.csv", "--test", d / "test.csv", "--factors", *factors,
                   "--metrics", "NDCG,P", "-k", "5", "--out", tmp_path / f"{name}.csv", "-q")[0] == 0
    code, out, _ = run(capsys, "compare", tmp_path / "svd.csv", tmp_path / "flat.csv", "--out", tmp_path / "cmp.csv",
                       "--report", tmp_path / "cmp.md")
    assert code == 0 and "NDCG@5" in out
    table = pd.read_csv(tmp_path / "cmp.csv")
    assert set(table["metric"]) == {"NDCG@5", "P@5"} and list(table["model_a"].unique()) == ["svd"]
    assert table.columns[0] == "model_a"  # no index column
    assert "## Paired comparison" in (tmp_path / "cmp.md").read_text()
    code, _, err = run(capsys, "compare", tmp_path / "svd.csv", "--names", "a,b")
    assert code == 2 and "at least two results files" in err
    code, _, err = run(capsys, "compare", tmp_path / "svd.csv", tmp_path / "flat.csv", "--names", "a")
    assert code == 2 and "one name per results file" in err


def test_demo_small(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, _ = run(capsys, "demo", "--users", "400", "--items", "150")
    assert code == 0
    assert (tmp_path / "gpureco_demo_report.html").is_file()
    assert f"report written to {tmp_path / 'gpureco_demo_report.html'}" in out
    for text in ("PureSVD", "most popular", "ci_low", "Paired comparison", "NDCG@10", "ROC_AUC"):
        assert text in out
    code, out, _ = run(capsys, "demo", "--users", "300", "--items", "100", "--report", tmp_path / "d.md", "-k", "5")
    assert code == 0 and (tmp_path / "d.md").is_file() and "NDCG@5" in out
    code, _, err = run(capsys, "demo", "--users", "300", "--items", "100", "--device", "tpu")
    assert code == 2 and "--device must be auto, cpu, gpu or cuda:N" in err


def test_progress_bar_on_a_terminal_gives_the_same_results(files, capsys, monkeypatch, tmp_path):
    d, expected = files
    from gpureco.cli import _progress
    monkeypatch.setattr(_progress, "DELAY", 0.0)  # a run longer than DELAY seconds shows the bar
    evaluate = ["evaluate", "--train", d / "train.csv", "--test", d / "test.csv", "--factors", d / "A.npy",
                d / "B.npy", "--metrics", "NDCG@5", "--out", tmp_path / "p.csv"]
    code, _, err = run(capsys, *evaluate)
    assert code == 0 and "evaluating" not in err  # stderr is not a terminal: no bar
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    code, _, err = run(capsys, *evaluate)
    assert code == 0 and "evaluating [########################] 100% 120/120 users" in err and err.count("\r") >= 1
    np.testing.assert_allclose(pd.read_csv(tmp_path / "p.csv")["NDCG@5"], expected)
    code, _, err = run(capsys, *evaluate, "-q")
    assert code == 0 and err == ""  # --quiet: no bar


def test_progress_bar_waits_a_second(monkeypatch, capsys):
    from gpureco.cli._progress import Progress
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    bar = Progress(10, "evaluating", True)
    bar.advance(10)
    bar.close()
    assert capsys.readouterr().err == ""  # done within a second: nothing drawn


def test_nan_users_reported_once(files, capsys, tmp_path):
    d, _ = files
    test = pd.read_csv(d / "test.csv")
    test.assign(value=np.where(test["user"] < 5, -1.0, test["value"])).to_csv(tmp_path / "t.csv", index=False)
    code, _, err = run(capsys, "evaluate", "--train", d / "train.csv", "--test", tmp_path / "t.csv", "--factors",
                       d / "A.npy", d / "B.npy", "--metrics", "NDCG@5")
    assert code == 0 and "\n  rule 8: 5 users (no test item with a positive value" in err
    assert "rule rule" not in err


@pytest.mark.skipif(GPU_MISSING is None, reason="a GPU is usable here")
def test_no_gpu_for_device_gpu_is_exit_3_in_one_line(capsys):
    code, _, err = run(capsys, "demo", "--users", "60", "--items", "40", "--device", "gpu", "--no-report", "-q")
    assert code == 3
    assert err.count("\n") == 1 and err.startswith("gpureco demo: not available: device='gpu' needs a usable GPU")
    assert "Traceback" not in err


@pytest.mark.parametrize("size", [["--users", "1"], ["--items", "16"]])
def test_demo_too_small_is_a_usage_error(capsys, size):
    code, _, err = run(capsys, "demo", *size, "--no-report")
    assert code == 2 and err.count("\n") == 1
    assert "--users and --items must be at least 17 (the demo's PureSVD fits 16 factors)" in err


# --- outputs: whole or not at all, and checked before the work ------------------------------------------

def _half_then(error):
    """A DataFrame.to_csv that writes half of the text, then fails with `error` (a full disk, an interrupt)."""
    real = pd.DataFrame.to_csv

    def to_csv(frame, path, **kw):
        text = real(frame, None, **kw)
        with open(path, "w") as file:
            file.write(text[:len(text) // 2])
        raise error

    return to_csv


def _files(folder):
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


@pytest.mark.parametrize("error, code", [(OSError(28, "No space left on device"), 2), (KeyboardInterrupt(), 130)])
def test_a_failed_or_interrupted_write_leaves_no_partial_file(error, code, files, capsys, tmp_path, monkeypatch):
    d, _ = files
    (tmp_path / "old.csv").write_text("the previous results\n")
    monkeypatch.setattr(pd.DataFrame, "to_csv", _half_then(error))
    evaluate = ["evaluate", "--train", d / "train.csv", "--test", d / "test.csv", "--factors", d / "A.npy",
                d / "B.npy", "--metrics", "NDCG@5", "-q"]
    for argv in (evaluate + ["--out", tmp_path / "r.csv"], evaluate + ["--out", tmp_path / "old.csv"],
                 ["split", d / "all.csv", "--method", "last-n", "--out-dir", tmp_path / "split", "-q"],
                 ["split", d / "all.csv", "--method", "k-fold", "--folds", "2", "--out-dir", tmp_path, "-q"]):
        got, _, err = run(capsys, *argv)
        assert got == code and err.count("\n") == 1
        assert ("interrupted" in err) == (code == 130)
        assert _files(tmp_path) == ["old.csv"]  # no partial file, no temporary file, no first fold
        assert (tmp_path / "old.csv").read_text() == "the previous results\n"  # not clobbered


@pytest.mark.parametrize("error, code", [(OSError(5, "Input/output error"), 2), (KeyboardInterrupt(), 130)])
def test_an_interrupted_report_or_comparison_leaves_no_partial_file(error, code, files, capsys, tmp_path, monkeypatch):
    d, _ = files
    import gpureco.cli._commands as commands
    import gpureco.cli._demo as demo

    def half_report(results, path, **kw):
        path.write_text("<html><body>half")
        path.with_name(path.stem + "_files").mkdir()
        (path.with_name(path.stem + "_files") / "figure1.png").write_bytes(b"\x89PNG")
        raise error

    monkeypatch.setattr(commands, "write_report", half_report)
    monkeypatch.setattr(demo, "write_report", half_report)
    results = tmp_path / "in"
    results.mkdir()
    pd.DataFrame({"user": range(5), "P@3": np.linspace(0, 1, 5)}).to_csv(results / "a.csv", index=False)
    pd.DataFrame({"user": range(5), "P@3": np.linspace(1, 0, 5)}).to_csv(results / "b.csv", index=False)
    out = tmp_path / "out"
    out.mkdir()
    for argv in (["compare", results / "a.csv", results / "b.csv", "--report", out / "c.md"],
                 ["evaluate", "--train", d / "train.csv", "--test", d / "test.csv", "--factors", d / "A.npy",
                  d / "B.npy", "--metrics", "NDCG@5", "--report", out / "r.html"],
                 ["demo", "--users", "40", "--items", "30", "-k", "3", "--report", out / "d.md"]):
        got, _, err = run(capsys, *argv, "-q")
        assert got == code and err.count("\n") == 1 and "Traceback" not in err
        assert _files(out) == []
    monkeypatch.setattr(pd.DataFrame, "to_csv", _half_then(error))
    got, _, _ = run(capsys, "compare", results / "a.csv", results / "b.csv", "--out", out / "c.csv", "-q")
    assert got == code and _files(out) == []


def test_outputs_are_checked_before_the_work(files, capsys, tmp_path, monkeypatch):
    d, _ = files
    import gpureco.cli._commands as commands

    def never(*args, **kw):
        raise AssertionError("the evaluation ran before the output was checked")

    monkeypatch.setattr(commands, "calc_reco_metrics", never)
    monkeypatch.setattr(commands, "split_last_per_user", never)
    evaluate = ["evaluate", "--train", d / "train.csv", "--test", d / "test.csv", "--factors", d / "A.npy", d / "B.npy"]
    for argv, message in ((evaluate + ["--out", tmp_path / "none" / "r.csv"], f"{tmp_path / 'none'}: no such folder"),
                          (evaluate + ["--report", tmp_path / "none" / "r.md"], f"{tmp_path / 'none'}: no such folder"),
                          (evaluate + ["--out", d / "A.npy" / "r.csv"], "A.npy: no such folder (a file has that name)"),
                          (evaluate + ["--out", tmp_path], "must be a .csv, .parquet or .pq file; got no suffix"),
                          (["split", d / "all.csv", "--method", "last-n", "--out-dir", tmp_path / "a" / "b"],
                           f"{tmp_path / 'a'}: no such folder"),
                          (["demo", "--users", "40", "--items", "30", "--report", tmp_path / "none" / "d.html"],
                           "no such folder")):
        code, _, err = run(capsys, *argv)
        assert code == 2 and message in err and err.count("\n") == 1
    assert _files(tmp_path) == []


@pytest.mark.skipif(not hasattr(__import__("os"), "geteuid") or __import__("os").geteuid() == 0,
                    reason="root can write into a read-only folder")
def test_a_read_only_folder_is_refused_at_once(files, capsys, tmp_path):
    d, _ = files
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        code, _, err = run(capsys, "evaluate", "--train", d / "train.csv", "--test", d / "test.csv", "--factors",
                           d / "A.npy", d / "B.npy", "--out", locked / "r.csv")
        assert code == 2 and f"{locked}: the folder is not writable" in err
    finally:
        locked.chmod(0o700)


def test_without_matplotlib_every_report_says_plots_need_it(files, capsys, tmp_path, monkeypatch):
    d, _ = files
    without(monkeypatch, "matplotlib")
    for report in ("r.md", "r.html"):
        code, _, err = run(capsys, "evaluate", "--train", d / "train.csv", "--test", d / "test.csv", "--factors",
                           d / "A.npy", d / "B.npy", "--metrics", "NDCG@5", "--report", tmp_path / report)
        assert code == 0 and "the report has no plots: matplotlib is not installed" in err
        text = (tmp_path / report).read_text().replace("&#x27;", "'")
        assert "No plots: matplotlib is not installed; install it with: pip install 'gpureco[plot]'" in text
    assert not list((tmp_path / "r_files").glob("*.png"))  # no images without matplotlib, the tables' CSV copies


@pytest.mark.parametrize("gain", ["linear", "exponential", "binary"])
def test_gain_option_gives_the_api_numbers_for_every_model_kind(gain, files, capsys, tmp_path):
    """--gain is the API's gain=, applied to the test file's value column (one rule everywhere)."""
    d, _ = files
    X_train, X_test, _ = gpureco.to_csr(pd.read_csv(d / "train.csv"), pd.read_csv(d / "test.csv"),
                                        ids=gpureco.IdMap(pd.RangeIndex(120), pd.RangeIndex(60)))
    A, B = np.load(d / "A.npy"), np.load(d / "B.npy")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        want = gpureco.calc_reco_metrics(X_train, X_test, A, B, k=5, gain=gain, ndcg=True, precision=False,
                                         average_precision=False)["NDCG@5"].to_numpy()
    common = ["evaluate", "--train", d / "train.csv", "--test", d / "test.csv", "--metrics", "NDCG@5", "-q",
              "--gain", gain]
    for model in (["--factors", d / "A.npy", d / "B.npy"], ["--recs", d / "recs.csv"]):
        assert run(capsys, *common, *model, "--out", tmp_path / "out.csv")[0] == 0
        got = pd.read_csv(tmp_path / "out.csv").set_index("user")["NDCG@5"]
        users = np.flatnonzero(np.diff(X_test.indptr))
        np.testing.assert_allclose(got.loc[users].to_numpy(), want[users], rtol=0, atol=1e-15)
    assert len(set(pd.read_csv(d / "test.csv")["value"])) > 1  # graded values: the gains differ by rule
    code, _, err = run(capsys, *common[:-1], "quadratic", "--factors", d / "A.npy", d / "B.npy")
    assert code == 2 and "--gain" in err and "quadratic" in err


# --- provenance, honest comparisons, data options -------------------------------------------------------------

def _evaluate(capsys, d, out, *extra, test="test.csv", factors=("A.npy", "B.npy")):
    code, _, err = run(capsys, "evaluate", "--train", d / "train.csv", "--test", d / test, "--factors",
                       *(d / f for f in factors), "--metrics", "NDCG@5,P@5", "--out", out, "-q", *extra)
    assert code == 0, err
    return out


def test_results_files_carry_their_provenance(files, capsys, tmp_path):
    d, _ = files
    csv = _evaluate(capsys, d, tmp_path / "r.csv", "--gain", "binary")
    parquet = _evaluate(capsys, d, tmp_path / "r.parquet")
    for path in (csv, parquet):
        record = gpureco.data._io.read_provenance(path)
        assert record["gpureco"] == gpureco.__version__ and record["command"] == "evaluate"
        assert record["data"]["test"]["sha256"] == gpureco.data._io.sha256(d / "test.csv")
        assert record["data"]["train"]["sha256"] == gpureco.data._io.sha256(d / "train.csv")
        assert [f["sha256"] for f in record["model"]["files"]] == [gpureco.data._io.sha256(d / f)
                                                                    for f in ("A.npy", "B.npy")]
        assert record["options"]["metrics"] == ["NDCG@5", "P@5"] and record["data"]["duplicates"] == "error"
    assert gpureco.data._io.read_provenance(csv)["options"]["gain"] == "binary"
    assert (tmp_path / "r.csv.provenance.json").is_file() and not (tmp_path / "r.parquet.provenance.json").exists()


def test_split_records_itself_and_evaluate_finds_the_split(files, capsys, tmp_path):
    d, _ = files
    code, _, _ = run(capsys, "split", d / "all.csv", "--method", "leave-k-out", "-n", "2", "--seed", "7",
                     "--out-dir", tmp_path / "s", "-q")
    assert code == 0
    record = json.loads((tmp_path / "s" / "split.json").read_text())
    assert record["method"] == "leave-k-out" and record["seed"] == 7 and record["options"]["n"] == 2
    _evaluate(capsys, tmp_path / "s", tmp_path / "r.csv", "--unknown", "drop", factors=(d / "A.npy", d / "B.npy"))
    split = gpureco.data._io.read_provenance(tmp_path / "r.csv")["split"]
    assert split["method"] == "leave-k-out" and split["seed"] == 7


def test_compare_refuses_different_test_data_unless_forced(files, capsys, tmp_path):
    d, _ = files
    test = pd.read_csv(d / "test.csv")
    test.iloc[:-3].to_csv(tmp_path / "other_test.csv", index=False)
    (tmp_path / "train.csv").write_bytes((d / "train.csv").read_bytes())
    a = _evaluate(capsys, d, tmp_path / "a.csv")
    b = _evaluate(capsys, d, tmp_path / "b.csv", "--gain", "binary")
    c = _evaluate(capsys, tmp_path, tmp_path / "c.csv", test="other_test.csv", factors=(d / "A.npy", d / "B.npy"))
    code, _, err = run(capsys, "compare", a, b)
    assert code == 0 and "the results differ in: options.gain: a linear, b binary" in err
    code, _, err = run(capsys, "compare", a, c, "--out", tmp_path / "cmp.csv")
    assert code == 2 and err.count("\n") == 1 and not (tmp_path / "cmp.csv").exists()
    digest = gpureco.data._io.sha256
    assert (f"different test data, so their users' metrics are not comparable: data.test.sha256: a "
            f"{digest(d / 'test.csv')[:12]}, c {digest(tmp_path / 'other_test.csv')[:12]}") in err
    assert "(--force compares them anyway)" in err
    code, _, err = run(capsys, "compare", a, c, "--force", "--out", tmp_path / "cmp.csv")
    assert code == 0 and "--force: comparing results of different test data" in err
    record = gpureco.data._io.read_provenance(tmp_path / "cmp.csv")
    assert record["command"] == "compare" and record["results"]["c"]["provenance"]["data"]["test"]["path"].endswith(
        "other_test.csv")


def test_compare_text_is_one_short_line_per_metric(files, capsys, tmp_path):
    d, _ = files
    code, _, _ = run(capsys, "evaluate", "--train", d / "train.csv", "--test", d / "test.csv", "--factors", d / "A.npy",
                     d / "B.npy", "--out", tmp_path / "a.csv", "-q")  # all ten metrics
    np.save(tmp_path / "A2.npy", np.load(d / "A.npy")[:, ::-1].copy())
    run(capsys, "evaluate", "--train", d / "train.csv", "--test", d / "test.csv", "--factors", tmp_path / "A2.npy",
        d / "B.npy", "--out", tmp_path / "b.csv", "-q")
    code, out, _ = run(capsys, "compare", tmp_path / "a.csv", tmp_path / "b.csv")
    lines = out.splitlines()
    assert code == 0 and lines[0].startswith("Paired comparison, b - a (p-values Holm-adjusted over the 10 metrics)")
    assert len(lines) == 12 and max(map(len, lines)) < 110  # a header and ten rows, narrow enough for a terminal


def test_user_ids_and_item_ids_name_the_rows_of_the_lists(files, capsys, tmp_path):
    d, expected = files
    recs = pd.read_csv(d / "recs.csv")  # users and items by row number of the model
    code, _, _ = run(capsys, "evaluate", "--train", d / "train_named.csv", "--test", d / "test_named.csv", "--recs",
                     d / "recs.csv", "--user-ids", d / "user_ids.csv", "--item-ids", d / "item_ids.csv", "--metrics",
                     "NDCG@5", "--out", tmp_path / "r.csv", "-q")
    assert code == 0
    got = pd.read_csv(tmp_path / "r.csv").set_index("user")
    np.testing.assert_allclose(got.loc[[f"u{i}" for i in range(120)], "NDCG@5"], expected)
    recs.assign(user=recs["user"] + 1000).to_csv(tmp_path / "far.csv", index=False)
    code, _, err = run(capsys, "evaluate", "--train", d / "train_named.csv", "--test", d / "test_named.csv", "--recs",
                       tmp_path / "far.csv", "--user-ids", d / "user_ids.csv")
    assert code == 2 and "far.csv, row 0 (line 2): user 1000 is not a row number of the --user-ids file (0 to 119)" in err


def test_lists_of_users_without_test_items_make_no_nan_note(files, capsys, tmp_path):
    d, _ = files
    test = pd.read_csv(d / "test.csv")
    test[test["user"] >= 10].to_csv(tmp_path / "t.csv", index=False)  # users 0-9 have lists but no test items
    code, _, err = run(capsys, "evaluate", "--train", d / "train.csv", "--test", tmp_path / "t.csv", "--recs",
                       d / "recs.csv", "--metrics", "NDCG@5", "--out", tmp_path / "r.csv")
    assert code == 0 and "NaN" not in err and len(pd.read_csv(tmp_path / "r.csv")) == 110


def test_unknown_drop_counts_what_it_leaves_out(files, capsys, tmp_path):
    d, expected = files
    test = pd.read_csv(d / "test.csv")
    pd.concat([test, pd.DataFrame({"user": [500, 500, 3], "item": [1, 2, 999], "value": 1.0})]).to_csv(
        tmp_path / "t.csv", index=False)
    code, _, err = run(capsys, "evaluate", "--train", d / "train.csv", "--test", tmp_path / "t.csv", "--factors",
                       d / "A.npy", d / "B.npy", "--metrics", "NDCG@5", "--unknown", "drop", "--out", tmp_path / "r.csv")
    assert code == 0
    assert ("--unknown drop: left out 3 test interactions (1 users and 1 items) with ids that are not in the model "
            "(its ids are the row numbers of its files; --user-ids/--item-ids name them)") in err
    np.testing.assert_allclose(pd.read_csv(tmp_path / "r.csv")["NDCG@5"], expected)
    assert gpureco.data._io.read_provenance(tmp_path / "r.csv")["data"]["test"]["left_out"] == 3


def test_latex_and_report_of_a_comparison_with_training_data(files, capsys, tmp_path):
    pytest.importorskip("matplotlib")
    d, _ = files
    a = _evaluate(capsys, d, tmp_path / "a.csv")
    np.save(tmp_path / "A2.npy", np.load(d / "A.npy")[:, ::-1].copy())
    b = _evaluate(capsys, d, tmp_path / "b.csv", factors=(tmp_path / "A2.npy", d / "B.npy"))
    code, out, _ = run(capsys, "compare", a, b, "--train", d / "train.csv", "--report", tmp_path / "c.html",
                       "--latex", tmp_path / "c.tex")
    assert code == 0 and "LaTeX table written to" in out
    assert (tmp_path / "c.tex").read_text().count(r"\\") == 3  # the header and two models
    html = (tmp_path / "c.html").read_text()
    for part in ("Paired differences against a", "Each metric by user activity", "<h2>Provenance</h2>"):
        assert part in html
    code, _, err = run(capsys, "compare", a, b, "--latex", tmp_path / "none" / "c.tex")
    assert code == 2 and "no such folder" in err


def test_demo_reports_nan_users_on_a_line_of_its_own(capsys):
    """K as large as the catalogue (NaN rule 7 for every user): the demo says so in one line of its output, and
    nothing at all with -q; no RuntimeWarning leaves it (a raw warning with its source line was printed)."""
    argv = ["demo", "--users", "40", "--items", "17", "-k", "17", "--no-report"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert main(argv + ["-q"]) == 0
        out, err = capsys.readouterr()
        assert out == err == ""
        assert main(argv) == 0
    out, _ = capsys.readouterr()
    assert out.count("users with NaN metrics, by rule of docs/metrics.md: rule 7: 40") == 2


def test_test_rows_of_value_0_are_no_interaction_with_factors_and_with_lists(tmp_path, capsys):
    """A test row of value 0 is no interaction (docs/cli.md): not relevant in --recs' lists (it was), and a user
    whose test rows are all 0 is left out, from the results and the NaN note (the user was kept: all NaN, rule 1)."""
    (tmp_path / "tr.csv").write_text("user,item,value\n0,0,1\n1,1,1\n2,2,1\n1,3,1\n")
    (tmp_path / "te.csv").write_text("user,item,value\n0,1,0\n0,2,1\n1,2,0\n2,3,1\n")
    np.save(tmp_path / "A.npy", np.ones((3, 1)))
    np.save(tmp_path / "B.npy", np.array([[0.0], [3.0], [2.0], [1.0]]))
    # each user's top 2 of its pool (items by B: 1, 2, 3, 0)
    (tmp_path / "recs.csv").write_text("user,item,rank\n0,1,1\n0,2,2\n1,2,1\n1,0,2\n2,1,1\n2,3,2\n")
    common = ["evaluate", "--train", str(tmp_path / "tr.csv"), "--test", str(tmp_path / "te.csv"), "--metrics",
              "P@2,NDCG@2", "-q"]
    assert main(common + ["--factors", str(tmp_path / "A.npy"), str(tmp_path / "B.npy"), "--out",
                          str(tmp_path / "f.csv")]) == 0
    assert main(common + ["--recs", str(tmp_path / "recs.csv"), "--out", str(tmp_path / "r.csv")]) == 0
    assert capsys.readouterr().err == ""  # no NaN note: no user is evaluated without a test item
    by_factors, by_lists = (pd.read_csv(tmp_path / name) for name in ("f.csv", "r.csv"))
    assert by_factors["user"].tolist() == by_lists["user"].tolist() == [0, 2]
    pd.testing.assert_frame_equal(by_factors, by_lists)
    assert by_lists["P@2"].tolist() == [0.5, 0.5]
