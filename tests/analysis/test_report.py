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


def test_html_is_self_contained_with_tables_and_four_plots(results, tmp_path):
    pytest.importorskip("matplotlib")
    per_model, activity = results
    path = gpureco.write_report(per_model, tmp_path / "r.html", activity=activity, notes=["a note"],
                                provenance={"good": {"data": {"test": {"sha256": "ab" * 32}}}})
    text = path.read_text()
    assert text.count("data:image/png;base64,") == 4  # against K, distributions, forest plot, by activity
    assert "<h2>Models x metrics</h2>" in text and "▼" in text and "<b>0.3" in text  # bad < good: marked
    assert "download='models_x_metrics.csv'" in text and "download='models_x_metrics.tex'" in text
    assert "<h2>Provenance</h2>" in text and "ab" * 32 in text and "Paired differences against good" in text
    assert "<th>users</th>" in text  # the users per activity bucket, beside the plot
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
    assert len(images) == 3 and all(p.read_bytes()[:4] == b"\x89PNG" for p in images)  # with the forest plot
    assert (tmp_path / "r_files" / "models_x_metrics.tex").read_text().startswith("% gpureco: Mean over users")
    copy = pd.read_csv(tmp_path / "r_files" / "models_x_metrics.csv")
    assert list(copy["model"]) == ["good"] * 2 + ["bad"] * 2 and "p_ttest_holm" in copy  # numbers, not text
    assert "](r_files/figure1.png)" in text


def test_a_file_where_the_markdown_folder_goes_is_refused_before_any_work(results, tmp_path, monkeypatch):
    (tmp_path / "r_files").write_text("in the way")
    monkeypatch.setattr(_report, "results_table", lambda *a: pytest.fail("the report was begun"))
    with pytest.raises(ValueError, match=r"^'path' '.*r\.md': a Markdown report puts its images and tables in "
                                         r"'.*r_files', which is a file"):
        gpureco.write_report(results[0], tmp_path / "r.md")
    assert (tmp_path / "r_files").read_text() == "in the way" and not (tmp_path / "r.md").exists()


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
    buckets = _report._buckets([1, 2, 3, 4, 7, 8, 100])
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
    buckets = _report._buckets([0, 1, 2, 5, 0, 9])
    assert list(buckets) == ["0", "1", "2-3", "4-7", "0", "8-15"]
    assert list(buckets.categories) == ["0", "1", "2-3", "4-7", "8-15"]


def test_results_table_markers_are_holm_adjusted_over_the_table():
    rng = np.random.default_rng(1)
    base = pd.DataFrame({"P@5": rng.random(60), "R@5": rng.random(60)})
    better = base.assign(**{"P@5": base["P@5"] + 0.2, "R@5": base["R@5"] + rng.normal(0, 0.3, 60) * 0.1})
    worse = base - 0.2
    table = _report.results_table({"base": base, "better": better, "worse": worse})
    assert table.attrs["baseline"] == "base" and table.loc[table["model"] == "base", "marker"].eq("").all()
    tested = table.dropna(subset=["p_ttest"])
    np.testing.assert_allclose(tested["p_ttest_holm"], gpureco.analysis._stats.holm(tested["p_ttest"]))
    marks = table.set_index(["model", "metric"])["marker"]
    assert marks["better", "P@5"] == _report.HIGHER and marks["worse", "P@5"] == _report.LOWER
    assert marks["better", "R@5"] == ("" if table.set_index(["model", "metric"]).at[("better", "R@5"), "p_ttest_holm"]
                                      >= 0.05 else _report.HIGHER)
    with pytest.raises(ValueError, match="'baseline' must be one of the models"):
        _report.results_table({"base": base}, baseline="nope")


def test_latex_table_escapes_and_bolds_the_best():
    a = pd.DataFrame({"ROC_AUC": [0.5, 0.7, 0.6], "P@5": [0.2, 0.4, 0.0]})
    text = _report.latex_table({"pop_1": a, "b&c": a + 0.1})
    assert r"Model & ROC\_AUC & P@5 \\" in text and r"pop\_1 & " in text and r"b\&c & \textbf{0.7000}" in text
    assert r"$\pm$" in text and text.rstrip().endswith(r"\end{tabular}")
    # every character LaTeX reads as a command, in a model's name; the comment line stays one line
    text = _report.latex_table({"50% $z^2\\ {k}~\nnew": a, "b": a + 0.1})
    assert r"50\% \$z\textasciicircum{}2\textbackslash{} \{k\}\textasciitilde{}" in text
    assert text.splitlines()[0].startswith("% gpureco: ") and text.splitlines()[1].startswith("% needs")


def test_item_tables_count_exposure_and_listed_test_interactions():
    import scipy.sparse as sp
    popularity = np.array([8, 8, 2, 1, 0])  # buckets 8-15, 8-15, 2-3, 1, 0
    lists = {"m": np.array([[0, 1], [0, 3]])}
    X_test = sp.csr_array(np.array([[0, 1, 1, 0, 0], [0, 0, 0, 1, 1]]))
    table = _report.item_tables(lists, popularity, X_test)
    assert table.index.tolist() == ["0", "1", "2-3", "8-15"]
    assert table["items"].tolist() == [1, 1, 1, 2] and table["test interactions"].tolist() == [1, 1, 1, 1]
    assert table["m: share of exposure"].tolist() == [0, 0.25, 0, 0.75]
    assert table["m: test interactions listed"].tolist() == [0, 1, 0, 1]  # item 3 for user 1, item 1 for user 0


def test_report_with_item_side_views(results, tmp_path):
    pytest.importorskip("matplotlib")
    import scipy.sparse as sp
    per_model, activity = results
    rng = np.random.default_rng(2)
    lists = {name: np.argsort(rng.random((200, 30)), axis=1)[:, :5] for name in per_model}
    X_test = sp.random(200, 30, density=0.1, format="csr", random_state=3)
    text = gpureco.write_report(per_model, tmp_path / "r.html", lists=lists, popularity=rng.integers(0, 50, 30),
                                X_test=X_test).read_text()
    assert "Item popularity: exposure and test interactions listed" in text and "good: share of exposure" in text
    with pytest.raises(ValueError, match="'lists' needs 'popularity' and 'X_test'"):
        gpureco.write_report(per_model, tmp_path / "r.html", lists=lists)
