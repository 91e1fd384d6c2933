"""write_report: the tables and the plots, in HTML and Markdown, and without matplotlib."""
import numpy as np
import pandas as pd
import pytest

import gpureco
from gpureco import _optional
from gpureco.analysis import _report


@pytest.fixture(scope="module")
def results():
    rng = np.random.default_rng(0)
    n = 200
    good = pd.DataFrame({f"P@{k}": rng.random(n) * 0.5 + 0.1 for k in (1, 5, 10)} | {"ROC_AUC": rng.random(n)})
    bad = good * 0.5
    return {"good": good, "bad": bad}, rng.integers(1, 100, n)


def test_html_is_self_contained_with_tables_and_three_plots(results, tmp_path):
    pytest.importorskip("matplotlib")
    per_model, activity = results
    path = gpureco.write_report(per_model, tmp_path / "r.html", activity=activity, notes=["a note"])
    text = path.read_text()
    assert text.count("data:image/png;base64,") == 3
    assert "<h2>Summary</h2>" in text and "<h2>Paired comparison</h2>" in text and "a note" in text
    assert "ci_low" in text and "p_ttest" in text and "P@10" in text and "P@5</td>" not in text  # headline K only
    assert "src='http" not in text and "<link" not in text  # nothing outside the file


def test_markdown_with_images_beside_it(results, tmp_path):
    pytest.importorskip("matplotlib")
    per_model, _ = results
    path = gpureco.write_report(per_model, tmp_path / "r.md")  # no activity: two plots
    text = path.read_text()
    assert text.startswith("# gpureco evaluation report")
    assert "| model | metric | mean |" in text and "## Paired comparison" in text
    images = sorted((tmp_path / "r_files").glob("*.png"))
    assert len(images) == 2 and all(p.read_bytes()[:4] == b"\x89PNG" for p in images)
    assert "](r_files/figure1.png)" in text


def test_without_matplotlib_the_report_says_what_is_missing(results, tmp_path, monkeypatch):
    real = _optional.package

    def no_matplotlib(module, extra):
        if module == "matplotlib":
            raise _optional.Unavailable("matplotlib is not installed; install it with: pip install 'gpureco[plot]'")
        return real(module, extra)

    monkeypatch.setattr(_optional, "package", no_matplotlib)
    per_model, activity = results
    text = gpureco.write_report(per_model, tmp_path / "r.html", activity=activity).read_text()
    assert "No plots: matplotlib is not installed" in text and "pip install &#x27;gpureco[plot]&#x27;" in text
    assert "data:image/png" not in text and "<h2>Summary</h2>" in text


def test_activity_buckets_are_powers_of_two():
    buckets = _report._activity_buckets([1, 2, 3, 4, 7, 8, 100])
    assert list(buckets) == ["1", "2-3", "2-3", "4-7", "4-7", "8-15", "64-127"]
    assert list(buckets.categories) == ["1", "2-3", "4-7", "8-15", "64-127"]


def test_metric_columns_group_by_name_and_k():
    frame = pd.DataFrame({"user": [1], "P@10": [0.1], "P@2": [0.2], "ROC_AUC": [0.5], "note": ["x"]})
    assert _report.metric_columns(frame) == {"P": [(2, "P@2"), (10, "P@10")], "ROC_AUC": [(None, "ROC_AUC")]}
    assert _report.headline_columns(frame) == ["P@10", "ROC_AUC"]


@pytest.mark.parametrize("args, error, match", [
    (({}, "r.html"), TypeError, "'results' must be a non-empty dict"),
    (({"m": pd.DataFrame({"x y": [1]})}, "r.html"), ValueError, r"'results'\['m'\] must be a DataFrame with metric"),
    (({"m": pd.DataFrame({"P@1": [1.0]})}, "r.pdf"), ValueError, "'path' must end in .html or .md"),
])
def test_errors(args, error, match, tmp_path):
    with pytest.raises(error, match=match):
        gpureco.write_report(args[0], tmp_path / args[1])


def test_activity_buckets_keep_cold_start_users_apart():
    from gpureco.analysis._report import _activity_buckets
    buckets = _activity_buckets([0, 1, 2, 5, 0, 9])
    assert list(buckets) == ["0", "1", "2-3", "4-7", "0", "8-15"]
    assert list(buckets.categories) == ["0", "1", "2-3", "4-7", "8-15"]
