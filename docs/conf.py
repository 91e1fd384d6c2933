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
myst_enable_extensions = ["dollarmath"]
myst_heading_anchors = 3  # GitHub-style anchors, so that links such as metrics.md#setting work here and there
napoleon_numpy_docstring = True
napoleon_google_docstring = False
autodoc_member_order = "bysource"
html_theme = "alabaster"
html_theme_options = {"description": "exactly-defined recommender evaluation", "page_width": "1100px"}
