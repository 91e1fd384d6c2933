"""The documentation site builds with warnings as errors (as CI runs it), and a warning does fail it."""
import shutil
from pathlib import Path

import pytest

# a Python without Sphinx (or with a bare 'sphinx' namespace, as on some GPU images) cannot build the docs
build_main = pytest.importorskip("sphinx.cmd.build", reason="Sphinx is not installed (pip install -e '.[docs]')").build_main

# Sphinx and MyST announce their own API deprecations to Python's warnings; the build's warnings are -W's business
pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning"),
              pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")]

DOCS = Path(__file__).resolve().parent.parent / "docs"


def build(source, out):
    return build_main(["-W", "--keep-going", "-q", "-E", "-b", "html", str(source), str(out)])


def test_docs_build_with_warnings_as_errors(tmp_path):
    assert build(DOCS, tmp_path / "html") == 0
    api = (tmp_path / "html" / "api.html").read_text()
    for name in ("calc_reco_metrics", "split_leave_k_out", "make_interactions", "write_report", "summarize"):
        assert f"gpureco.{name}" in api or f"gpureco.datasets.{name}" in api
    assert 'id="when-metrics-are-nan"' in (tmp_path / "html" / "metrics.html").read_text()
    assert "Exit codes" in (tmp_path / "html" / "cli.html").read_text()
    # formulas work offline: MathJax is served with the docs, nothing is loaded from a CDN
    metrics = (tmp_path / "html" / "metrics.html").read_text()
    assert "_static/mathjax/tex-chtml-full.js" in metrics
    assert (tmp_path / "html" / "_static" / "mathjax" / "tex-chtml-full.js").is_file()
    for page in (tmp_path / "html").glob("*.html"):
        assert "cdn.jsdelivr" not in page.read_text() and "cdnjs" not in page.read_text(), page.name
    assert 'id="in-the-training-loop"' in (tmp_path / "html" / "training-loop.html").read_text()
    assert "gpureco.Evaluator" in api


def test_a_broken_link_fails_the_build(tmp_path):
    source = tmp_path / "docs"
    shutil.copytree(DOCS, source, ignore=shutil.ignore_patterns("_build"))
    (source / "broken.md").write_text("# Broken\n\nSee [nowhere](missing-page.md).\n")
    index = source / "index.md"
    index.write_text(index.read_text().replace("benchmarks\n```", "benchmarks\nbroken\n```"))
    assert build(source, tmp_path / "html") != 0
