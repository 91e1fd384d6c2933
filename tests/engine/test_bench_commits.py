"""benchmarks/bench_commits.py: gpureco timed at several commits, their numbers compared.

End to end on the NumPy model of the device (tests/gpu_model.py), as a device session would
run it (--device gpu: results on the "device", synchronised), on a small problem, with the
checkout's HEAD (extracted by git archive, its compiled extension copied) and the checkout
as it is; and the comparison of numbers, which must flag a result that differs."""
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    return importlib.import_module("bench_commits")


def test_commits_run_on_the_model_and_give_the_same_numbers(tmp_path):
    calls = "fp32,tf32,fused,topk10,topk20-tf32"
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_commits.py"), "--commits", "HEAD,worktree",
                        "--device", "gpu", "--model", str(ROOT / "tests"), "--users", "40", "--items", "600",
                        "--factors", "8", "--calls", calls, "--rounds", "2", "--repeats", "2", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (record,) = [json.loads(p.read_text()) for p in tmp_path.glob("commits_*.json")]
    assert record["errors"] == [] and record["processes_skipped"] == 0
    labels = [t["label"] for t in record["trees"]]
    assert labels[0].startswith("HEAD (") and labels[1] == "worktree"
    assert record["extensions"] == {labels[0]: "copied"}  # HEAD's Cython sources are the checkout's
    for label in labels:
        runs = record["runs"][label]
        assert list(runs) == calls.split(",")
        for call, res in runs.items():
            assert len(res["seconds"]) == 4 and all(s > 0 for s in res["seconds"])
            assert res["digests"] == record["runs"][labels[0]][call]["digests"]
    assert set(record["runs"][labels[0]]["fp32"]["digests"]) >= {"P@K", "NDCG@K", "ROC_AUC"}
    text = next(tmp_path.glob("commits_*.md")).read_text()
    assert "bit for bit, in every call" in text and " *" not in text


def test_a_result_that_differs_is_flagged(bench):
    same = {"P@K": "a1", "K": "k"}
    assert bench.same_as(same, dict(same)) == []
    assert bench.same_as(same, {"P@K": "b2", "K": "k"}) == ["P@K"]
    assert bench.same_as(same, {"P@K": "a1"}) == ["K"]
    run = {"seconds": [0.2, 0.1, 0.3], "digests": same}
    info = dict(date="2026-11-27", device="CPU", commit="x", argv=[], extensions={}, errors=[], processes_skipped=0,
                trees=[dict(label="a", commit="1" * 40), dict(label="b", commit="2" * 40)],
                runs={"a": {"fp32": run}, "b": {"fp32": {"seconds": [0.4], "digests": {"P@K": "b2", "K": "k"}}}})
    text = bench.markdown(info, ["a", "b"], ["fp32"])
    assert "| fp32 | 0.1000 (0.2000) | 0.4000 (0.4000) * |" in text
    assert "- fp32 at b: P@K" in text


def test_digests_see_every_array_and_value(bench):
    import numpy as np
    a = {"P@K": np.array([0.5, np.nan]), "K": 5}
    d = bench.digests(a)
    assert d == bench.digests({"P@K": np.array([0.5, np.nan]), "K": 5})
    assert d["P@K"] != bench.digests({"P@K": np.array([0.5, 0.25]), "K": 5})["P@K"]
    assert d["P@K"] != bench.digests({"P@K": np.array([0.5, np.nan], dtype=np.float32), "K": 5})["P@K"]
    assert d["K"] != bench.digests({"P@K": a["P@K"], "K": 6})["K"]
    assert list(bench.digests((np.arange(3), np.zeros(2)))) == ["0", "1"]  # top_k's (items, scores)


@pytest.mark.parametrize("calls", ["", "fp64", "topk", "topk10-fp32", "fp32,,tf32x"])
def test_bad_calls_are_refused_by_name(bench, calls):
    with pytest.raises(ValueError, match=r"--calls: expected .* got"):
        bench.parse_calls(calls)


def test_gpu_check_runs_it_as_a_step_when_named(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--steps", "commits", "--out",
                        str(tmp_path), "--commits-args", "--commits HEAD --device cpu --users 30 --items 200 "
                        "--factors 4 --calls fp32,topk5 --rounds 1 --repeats 1"],
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (check,) = [json.loads(p.read_text()) for p in tmp_path.glob("gpu_check_*.json")]
    assert list(check["steps"]) == ["commits"] and check["steps"]["commits"]["ok"]
    assert "| topk5 |" in check["steps"]["commits"]["summary"]
    assert len(list(tmp_path.glob("commits_*.md"))) == 1
