"""Sphinx configuration of the gpureco documentation site (Markdown pages through MyST).

Build: python -m sphinx -W --keep-going -b html docs docs/_build/html
"""
import gpureco

project = "gpureco"
release = version = gpureco.__version__
copyright = "gpureco authors"
extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon", "sphinx.ext.mathjax"]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build"]
# MathJax 3.2.2 (Apache-2.0, docs/_static/mathjax/LICENSE) served with the pages, so that the formulas render offline:
# the "full" TeX component (every TeX extension built in, nothing loaded later) and its CHTML fonts, 1.7 MB in all
html_static_path = ["_static"]
mathjax_path = "mathjax/tex-chtml-full.js"
myst_enable_extensions = ["dollarmath"]
myst_heading_anchors = 3  # GitHub-style anchors, so that links such as metrics.md#setting work here and there
napoleon_numpy_docstring = True
napoleon_google_docstring = False
# "a, b, c : bool" stays one entry (names joined, the text once): with the default, every flag of calc_reco_metrics
# repeated the same sentence
napoleon_use_param = False
autodoc_member_order = "bysource"
html_theme = "alabaster"
html_theme_options = {"description": "exactly-defined recommender evaluation", "page_width": "1100px"}
