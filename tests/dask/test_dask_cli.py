"""gpureco evaluate --scheduler ADDRESS: the same per-user file as on one machine, for factors, scores
and lists; without Dask, exit 3 naming the extra."""
import sys

import numpy as np
import pandas as pd
import pytest

from conftest import without
from dask_helpers import local_client

import gpureco
from gpureco.cli import main

pytest.importorskip("gpureco.dask")


@pytest.fixture(scope="module")
def scheduler():
    with local_client(processes=False) as client:
        yield client.scheduler.address


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("dask_cli")
    data = gpureco.datasets.make_interactions(90, 40, 8, seed=2)
    train, test = gpureco.split_leave_k_out(data, k=2, seed=1)
    train.to_csv(d / "train.csv", index=False)
    test.to_csv(d / "test.csv", index=False)
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((90, 4)), rng.standard_normal((40, 4))
    np.save(d / "A.npy", A)
    np.save(d / "B.npy", B)
    np.save(d / "scores.npy", A @ B.T)
    top = np.argsort(-(A @ B.T), axis=1, kind="stable")[:, :5]
    pd.DataFrame({"user": np.repeat(np.arange(90), 5), "item": top.ravel(),
                  "rank": np.tile(np.arange(1, 6), 90)}).to_csv(d / "recs.csv", index=False)
    return d


@pytest.mark.parametrize("model", [["--factors", "A.npy", "B.npy"], ["--scores", "scores.npy"], ["--recs", "recs.csv"]],
                         ids=["factors", "scores", "recs"])
def test_the_same_file_as_on_one_machine(files, scheduler, tmp_path, model, capsys):
    model = [str(files / m) if m.endswith((".npy", ".csv")) else m for m in model]
    common = ["evaluate", "--train", str(files / "train.csv"), "--test", str(files / "test.csv"), *model,
              "--metrics", "NDCG@5,P@3,R@5", "--quiet"]
    assert main([*common, "--out", str(tmp_path / "one.csv")]) == 0
    assert main([*common, "--out", str(tmp_path / "cluster.csv"), "--scheduler", scheduler]) == 0
    one, cluster = pd.read_csv(tmp_path / "one.csv"), pd.read_csv(tmp_path / "cluster.csv")
    pd.testing.assert_frame_equal(cluster, one, check_exact=True)
    assert len(one) > 80


def test_without_dask_exit_3_naming_the_extra(files, monkeypatch, capsys):
    without(monkeypatch, "distributed")
    monkeypatch.delitem(sys.modules, "gpureco.dask", raising=False)
    monkeypatch.delattr(gpureco, "dask", raising=False)
    code = main(["evaluate", "--train", str(files / "train.csv"), "--test", str(files / "test.csv"), "--scores",
                 str(files / "scores.npy"), "--scheduler", "tcp://127.0.0.1:8786"])
    err = capsys.readouterr().err
    assert code == 3
    assert "gpureco evaluate: not available: distributed is not installed; install it with: pip install " \
           "'gpureco[dask]'" in err


def test_a_scheduler_that_does_not_answer_is_named(files, capsys):
    import dask
    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):
        code = main(["evaluate", "--train", str(files / "train.csv"), "--test", str(files / "test.csv"), "--scores",
                     str(files / "scores.npy"), "--scheduler", "tcp://127.0.0.1:1", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("gpureco evaluate: error: --scheduler tcp://127.0.0.1:1: no Dask scheduler "
                                        "answered (") and err.count("\n") == 1, err
