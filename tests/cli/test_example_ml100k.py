"""The ML-100k example of docs/getting-started.md, run as written on a generated file in the u.data layout
(tab-separated user, item, rating, timestamp, no header): split, train, evaluate two models, compare, report."""
import os
import re
import runpy
import shlex
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import gpureco
from gpureco.cli import main

DOC = Path(__file__).resolve().parents[2] / "docs" / "getting-started.md"
SECTION = DOC.read_text().split("## An example on MovieLens 100k")[1]
COMMANDS = re.search(r"```shell\n(.*?)```", SECTION, re.S)[1].strip().splitlines()
TRAIN = re.search(r"```python\n(.*?)```", SECTION, re.S)[1]


def write_u_data(path, n_users=300, n_items=200, seed=0):
    """ML-100k's layout: ids from 1, ratings 1-5, Unix timestamps, one row per (user, item)."""
    data = gpureco.datasets.make_interactions(n_users, n_items, 20, seed=seed)
    rating = np.random.default_rng(seed).integers(1, 6, len(data))
    pd.DataFrame({"user": data["user"] + 1, "item": data["item"] + 1, "rating": rating,
                  "timestamp": data["timestamp"].astype(np.int64)}).to_csv(path, sep="\t", header=False, index=False)


def test_the_ml100k_example_runs_as_written(tmp_path, monkeypatch, capsys):
    pytest.importorskip("matplotlib")
    monkeypatch.chdir(tmp_path)
    write_u_data(tmp_path / "u.data")
    assert not (tmp_path / "u.data").read_text().splitlines()[0][0].isalpha()  # no header, as ML-100k's
    for line in COMMANDS:
        if line == "python train.py":
            (tmp_path / "train.py").write_text(TRAIN)
            runpy.run_path(str(tmp_path / "train.py"))
            continue
        argv = shlex.split(line)
        assert argv[0] == "gpureco"
        code = main(argv[1:])
        assert code == 0, capsys.readouterr().err
    err = capsys.readouterr().err
    assert "--unknown drop: left out" in err  # the time split's new users
    html = (tmp_path / "comparison.html").read_text()
    for part in ("Models x metrics", "Paired differences against popular", "Each metric by user activity",
                 "Provenance", "split.json"):
        assert part in html
    single = (tmp_path / "svd.html").read_text()
    assert single.count("data:image/png") == 3 and "Item popularity: exposure and test interactions" in single
    record = gpureco.data._io.read_provenance(tmp_path / "svd.csv")
    assert record["split"]["method"] == "time-cutoff" and record["data"]["test"]["left_out"] > 0
    assert (tmp_path / "comparison.tex").read_text().startswith("% gpureco")
    if os.environ.get("GPURECO_EXAMPLE_REPORT"):  # refresh docs/_static/example_report.html
        Path(os.environ["GPURECO_EXAMPLE_REPORT"]).write_text(html)
