"""A worker process killed in the middle of a run: Dask runs its partitions again on a replacement
worker, and the result is complete and the single-machine result, bit for bit."""
import os
import signal

import pandas as pd
import pytest

from dask_helpers import local_client, problem, quietly

import gpureco

gdask = pytest.importorskip("gpureco.dask")


def test_a_worker_killed_mid_run(tmp_path):
    X_train, X_test, A, B, biases = problem(n_users=200)
    calls, killed = tmp_path / "calls", tmp_path / "killed"
    calls.mkdir()
    calls, killed = str(calls), str(killed)

    def model(users):
        return A[users] @ B.T + biases

    def score_fn(users):
        """The model; the worker that makes the 5th call kills its own process (SIGKILL), once."""
        open(os.path.join(calls, f"{os.getpid()}-{int(users[0])}"), "w").close()
        if len(os.listdir(calls)) >= 5:
            try:
                marker = os.open(killed, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                pass
            else:
                os.write(marker, str(os.getpid()).encode())
                os.close(marker)
                os.kill(os.getpid(), signal.SIGKILL)
        return model(users)

    metrics = ["NDCG@5", "AP@5", "ROC_AUC"]
    expected = quietly(gpureco.evaluate, model, X_test, X_train, metrics=metrics)
    with local_client() as client:
        before = set(client.run(os.getpid).values())
        got = quietly(gdask.evaluate, score_fn, X_test, X_train, metrics=metrics, partition_size=20)
        client.wait_for_workers(2, timeout=60)
        after = set(client.run(os.getpid).values())
    victim = int(open(killed).read())
    assert victim in before and victim not in after and len(after) == 2  # killed, and replaced by its nanny
    pd.testing.assert_frame_equal(got, expected, check_exact=True)
    assert len(got) == 200 and len(os.listdir(calls)) > 10  # 10 partitions, one of them (at least) run twice
