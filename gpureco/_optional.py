"""What may be missing: optional dependencies (pyarrow, matplotlib) and functions of gpureco that a
given version may not have yet (statistics, score-matrix and top-K-list evaluation)."""
from __future__ import annotations

import importlib

import pandas as pd


class Unavailable(RuntimeError):
    """A feature needs an optional package, or a part of gpureco this version does not have."""


def function(name):
    """gpureco.<name>, or Unavailable naming what is missing."""
    import gpureco
    found = getattr(gpureco, name, None)
    if found is None:
        raise Unavailable(f"gpureco.{name} is not available in this version of gpureco ({gpureco.__version__}).")
    return found


def package(module, extra):
    """The module, or Unavailable with the pip command that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise Unavailable(f"{module} is not installed; install it with: pip install 'gpureco[{extra}]' "
                          f"(or pip install {module}).") from None


def summarize_models(results):
    """(table, note): gpureco.summarize of each model's per-user frame, stacked with a 'model' level;
    without gpureco.summarize, the means and user counts and a note saying what is missing."""
    try:
        summarize = function("summarize")
    except Unavailable as missing:
        table = pd.DataFrame({name: frame.mean() for name, frame in results.items()})
        table.index.name = "metric (mean over users)"
        return table, f"No confidence intervals: {missing}"
    return pd.concat({name: summarize(frame) for name, frame in results.items()}, names=["model", "metric"]), None


def compare_models(results):
    """(table or None, note): gpureco.compare's paired comparison of the models."""
    try:
        compare = function("compare")
    except Unavailable as missing:
        return None, f"No paired comparison: {missing}"
    return compare(*results.values(), names=list(results)), None
