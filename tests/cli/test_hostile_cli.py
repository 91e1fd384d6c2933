"""Every case of hostile_cli_cases.py through the command line, in-process: the exit code, exactly one line on
stderr that names the file, row or option at fault (and no traceback), no output left behind by a refused run,
and for accepted inputs the same numbers as the Python API on the clean data."""
import json
import re
import shlex
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.io
import scipy.sparse as sp

import gpureco
from conftest import GPU_MISSING, without
from gpureco.cli import main
from gpureco.data import _io

import hostile_cli_cases
from hostile_cli_cases import CASES

DOCS = Path(__file__).resolve().parents[2] / "docs" / "robustness-cli.md"


@pytest.fixture(scope="module")
def d(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hostile")
    hostile_cli_cases.write_files(folder)
    return folder


def _arrange(setup, monkeypatch, d, tmp_path):
    if setup == "copies":  # the data files copied to <tmp>/in, beside the case's output folder <tmp>/out
        shutil.copytree(d, tmp_path / "in")
    elif setup == "pyarrow":
        pytest.importorskip("pyarrow")
    elif setup == "no-pyarrow":
        without(monkeypatch, "pyarrow")
    elif setup == "no-matplotlib":
        without(monkeypatch, "matplotlib")
    elif setup == "no-gpu" and GPU_MISSING is None:
        pytest.skip("a GPU is usable here")
    elif setup == "unwritable":  # as root every folder is writable: say that none is
        monkeypatch.setattr(_io.os, "access", lambda path, mode, **kw: False)


def _frames(d, train="train.csv", test="test.csv"):
    ids = gpureco.IdMap(pd.RangeIndex(8), pd.RangeIndex(6))
    X_train, X_test, _ = gpureco.to_csr(pd.read_csv(d / train), pd.read_csv(d / test), ids=ids)
    return X_train, X_test


def _factors(d, B="B.npy", **files):
    X_train, X_test = _frames(d, **files)
    with pytest.warns(RuntimeWarning) if B != "B.npy" else _nothing():
        per_user = gpureco.calc_reco_metrics(X_train, X_test, np.load(d / "A.npy"), np.load(d / B), k=3,
                                             all_metrics=True)
    return per_user[["NDCG@3", "P@3"]]


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _scores(d, name):
    X_train, X_test = _frames(d)
    return gpureco.evaluate(np.load(d / name), X_test, X_train, metrics=["NDCG@3", "P@3", "ROC_AUC"])


EXPECTED = {  # the Python API on the clean data, for each `check` of an accepted case
    "factors": lambda d: _factors(d),
    "factors_text_ids": lambda d: _factors(d),  # (the users named u0 .. u7)
    "factors_duplicate_test": lambda d: _factors(d, test="test_duplicate_clean.csv"),
    "factors_empty_train": lambda d: _factors(d, train="header_only.csv"),
    "factors_nan": lambda d: _factors(d, B="B_nan.npy"),
    "scores": lambda d: _scores(d, "scores.npy"),
    "scores32": lambda d: _scores(d, "scores32.npy"),
}


def _count(path):
    if path.suffix == ".npz":
        return sp.load_npz(path).nnz
    if path.suffix == ".mtx":
        return scipy.io.mmread(path).nnz
    return len(pd.read_csv(path))


def _count_source(path):
    return len(_io.read_interactions(path)) if path.suffix in (".data", ".dat") else _count(path)


def _check(case, d, out, err):
    argv = case.argv.format(d=d, out=out)
    if case.check in EXPECTED:
        got = pd.read_csv(out / "r.csv")
        expected = EXPECTED[case.check](d)
        assert list(got["user"]) == ([f"u{u}" for u in range(8)] if case.check == "factors_text_ids" else list(range(8)))
        np.testing.assert_allclose(got[expected.columns].to_numpy(float), expected.to_numpy(float), rtol=1e-12)
    elif case.check in ("split", "split_deduplicated"):
        source = d / shlex.split(argv)[1]
        pairs = len(pd.read_csv(source).drop_duplicates(["user", "item"])) if case.check == "split_deduplicated" \
            else None
        folders = sorted({p.parent for p in (out / "s").rglob("train.*")})
        parts = {f: [p for p in f.iterdir() if p.name != "split.json"] for f in folders}
        assert folders and all(sum(_count(p) for p in parts[f]) == (pairs or _count_source(source)) for f in folders)
        assert all(_count(f / next(p.name for p in parts[f] if p.stem == "test")) > 0 for f in folders)
        record = json.loads((out / "s" / "split.json").read_text())
        assert record["input"]["sha256"] == _io.sha256(source)
        assert all(record["outputs"][str(p.relative_to(out / "s"))] == _io.sha256(p) for f in folders for p in parts[f])
    elif case.check == "compare":
        files = [Path(p) for p in shlex.split(argv)[1:3]]
        a, b = (pd.read_csv(p).set_index("user") for p in files)
        users = a.index.intersection(b.index, sort=False)
        columns = [c for c in a.columns if c in b.columns]
        expected = gpureco.compare(a.loc[users, columns].reset_index(drop=True),
                                   b.loc[users, columns].reset_index(drop=True), names=[p.stem for p in files])
        got = pd.read_csv(out / "c.csv")
        assert list(got["metric"]) == list(expected["metric"])
        for column in ("mean_a", "mean_b", "mean_diff", "ci_low", "ci_high", "p_ttest"):
            np.testing.assert_allclose(got[column], expected[column], rtol=1e-9)
    elif case.check in ("report", "report_no_plots"):
        report = next(p for p in out.iterdir() if p.suffix in (".md", ".html"))
        text = report.read_text()
        assert "Summary" in text
        if case.check == "report_no_plots":
            assert "matplotlib is not installed" in text and "gpureco[plot]" in text
            assert "the report has no plots" in err


@pytest.mark.parametrize("case", [pytest.param(c, id=f"{c.command}: {c.name}", marks=[pytest.mark.xfail(
    strict=True, reason=c.xfail)] if c.xfail else []) for c in CASES])
def test_case(case, d, tmp_path, capsys, monkeypatch):
    _arrange(case.setup, monkeypatch, d, tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    argv = [a.format(d=d, out=out) for a in shlex.split(case.argv)]
    code = main(argv + ([] if case.check and "report" in case.check else ["-q"]))
    _, err = capsys.readouterr()
    assert "Traceback" not in err
    assert code == case.code, err
    assert not list(out.rglob(".gpureco-partial-*")), "a temporary file was left behind"
    if case.code == 0:
        _check(case, d, out, err)
        return
    assert err.count("\n") == 1 and err.endswith("\n"), err
    assert re.match(rf"gpureco( {case.command})?: ", err), err  # argparse's own errors name the program
    assert re.search(case.error, err), err
    assert not [p for p in out.rglob("*") if p.is_file()], "a refused run left a file"


def test_no_library_wording_in_the_messages(d, tmp_path, capsys, monkeypatch):
    """The messages are ours: none quotes NumPy's, pandas' or SciPy's own text."""
    foreign = re.compile(r"C error|Error tokenizing|No columns to parse|allow_pickle|BadZipFile|File is not a zip|"
                         r"Invalid floating-point|Truncated file|could not convert|invalid literal|codec can't|"
                         r"np\.(int|float)64\(|Python int too large|passed to to_csr")  # (the API's name of a frame)
    for case in CASES:
        if case.code == 2 and not case.setup:
            out = tmp_path / str(CASES.index(case))
            out.mkdir()
            main([a.format(d=d, out=out) for a in shlex.split(case.argv)] + ["-q"])
            err = capsys.readouterr().err
            assert not foreign.search(err), (case.name, err)


def test_the_case_table_is_big_and_covers_every_command():
    commands = {c.command for c in CASES}
    assert commands == {"demo", "evaluate", "split", "compare"}
    assert len(CASES) >= 100
    assert {c.code for c in CASES} == {0, 2, 3}
    assert len({(c.command, c.name) for c in CASES}) == len(CASES), "two cases share a name"


def test_the_page_is_generated_from_the_table():
    assert DOCS.read_text(encoding="utf-8") == hostile_cli_cases.markdown(), (
        "regenerate it: python tests/cli/hostile_cli_cases.py > docs/robustness-cli.md")
