"""Evaluation reports: summary tables and plots of per-user results, as self-contained HTML or Markdown."""
from __future__ import annotations

import base64
import html
import io
import re
from pathlib import Path

import numpy as np
import pandas as pd

from .. import _optional
from ._stats import compare, summarize, to_markdown

_COLUMN = re.compile(r"^(?P<base>[A-Za-z_]+)(@(?P<k>\d+))?$")


def metric_columns(per_user):
    """{metric base name: [(K or None, column), ...] sorted by K} for the metric columns of a per-user frame."""
    found = {}
    for column in per_user.columns:
        match = _COLUMN.match(str(column))
        if match and column != "user" and pd.api.types.is_numeric_dtype(per_user[column]):
            k = match["k"]
            found.setdefault(match["base"], []).append((None if k is None else int(k), column))
    return {base: sorted(cols, key=lambda c: -1 if c[0] is None else c[0]) for base, cols in found.items()}


def headline_columns(per_user):
    """Each metric at its largest cut-off, and the metrics without one."""
    return [cols[-1][1] for cols in metric_columns(per_user).values()]


def _check_results(results):
    if not isinstance(results, dict) or not results:
        raise TypeError(f"'results' must be a non-empty dict {{model name: per-user DataFrame}}; got {results!r:.80}.")
    for name, frame in results.items():
        if not isinstance(frame, pd.DataFrame) or not metric_columns(frame):
            raise ValueError(f"'results'[{name!r}] must be a DataFrame with metric columns such as 'NDCG@10'; "
                             f"got {type(frame).__name__}.")


def summary_tables(results):
    """[(title, DataFrame, note)]: the summary of every model and, for two or more, the paired comparison."""
    tables = []
    columns = {name: headline_columns(frame) for name, frame in results.items()}
    tables.append(("Summary", model_summary({name: frame[columns[name]] for name, frame in results.items()}),
                   None))
    if len(results) >= 2:
        shared = [c for c in columns[next(iter(results))] if all(c in cols for cols in columns.values())]
        tables.append(("Paired comparison", compare(*(frame[shared] for frame in results.values()),
                                                     names=list(results)), None))
    return tables


def model_summary(results):
    """gpureco.summarize of each model's per-user frame, stacked with a 'model' level."""
    return pd.concat({name: summarize(frame) for name, frame in results.items()}, names=["model", "metric"])


def _activity_buckets(activity):
    """Power-of-two buckets of user activity: '0' (cold start), '1', '2-3', '4-7', ..."""
    activity = np.asarray(activity, dtype=np.int64)
    low = np.where(activity > 0, 2 ** np.floor(np.log2(np.maximum(activity, 1))).astype(np.int64), 0)
    labels = np.where(low <= 1, low.astype(str), pd.Series(low).astype(str) + "-" + pd.Series(2 * low - 1).astype(str))
    return pd.Categorical(labels, categories=list(dict.fromkeys(labels[np.argsort(low, kind="stable")])), ordered=True)


def figures(results, activity=None):
    """[(title, PNG bytes)]: metric vs K, per-user distributions, metric by activity bucket.

    Raises gpureco._optional.Unavailable without matplotlib."""
    matplotlib = _optional.package("matplotlib", "plot")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def png(fig):
        buffer = io.BytesIO()
        fig.tight_layout()
        fig.savefig(buffer, format="png", dpi=80)
        plt.close(fig)
        return buffer.getvalue()

    def grid(n):
        columns = min(5, n)
        rows = -(-n // columns)
        fig, axes = plt.subplots(rows, columns, figsize=(3.2 * columns, 2.9 * rows), squeeze=False)
        for ax in axes.flat[n:]:
            ax.set_visible(False)
        return fig, axes.flat

    out = []
    layout = metric_columns(next(iter(results.values())))
    curves = [base for base, cols in layout.items() if len(cols) > 1]
    if curves:
        fig, axes = grid(len(curves))
        for ax, base in zip(axes, curves):
            for name, frame in results.items():
                cols = metric_columns(frame).get(base, [])
                ax.plot([k for k, _ in cols], [frame[c].mean() for _, c in cols], marker="o", ms=3, label=name)
            ax.set_title(base)
            ax.set_xlabel("K")
        axes[0].legend(fontsize=8)
        out.append(("Each metric against K (mean over users)", png(fig)))

    heads = headline_columns(next(iter(results.values())))
    fig, axes = grid(len(heads))
    for ax, column in zip(axes, heads):
        for name, frame in results.items():
            if column in frame:
                values = frame[column].dropna()
                ax.hist(values, bins=20, range=(0, 1), histtype="step", label=name)
        ax.set_title(column)
    axes[0].legend(fontsize=8)
    out.append(("Per-user distribution of each metric", png(fig)))

    if activity is not None:
        buckets = _activity_buckets(activity)
        fig, axes = grid(len(heads))
        for ax, column in zip(axes, heads):
            means = pd.DataFrame({name: frame[column].to_numpy() for name, frame in results.items() if column in frame})
            means = means.groupby(buckets, observed=True).mean()
            means.plot.bar(ax=ax, legend=False, rot=45)
            ax.set_title(column)
            ax.set_xlabel("training interactions", fontsize=8)
        axes[0].legend(fontsize=8)
        out.append(("Each metric by user activity", png(fig)))
    return out


def write_report(results, path="gpureco_report.html", *, activity=None, title="gpureco evaluation report", notes=()):
    """Write an evaluation report: summary tables and plots of per-user results.

    Parameters
    ----------
    results : dict {model name: DataFrame}
        Per-user metrics of each model, as returned by :func:`gpureco.calc_reco_metrics`
        (``cumulative=True`` gives the metric-against-K plot its points), one row per user,
        the same users in the same order for every model.
    path : str or Path, default="gpureco_report.html"
        ``.html``: one self-contained file (images embedded). ``.md``: Markdown, with the
        images as PNG files in the folder ``<name>_files`` beside it.
    activity : array-like of shape (n_users,), default=None
        Each user's number of training interactions, for the metric-by-activity plot.
    title : str
    notes : sequence of str
        Lines shown under the title (data set, split, models).

    Returns
    -------
    Path of the report. Without matplotlib the report says so instead of showing plots.
    """
    _check_results(results)
    path = Path(path)
    if path.suffix.lower() not in (".html", ".htm", ".md"):
        raise ValueError(f"'path' must end in .html or .md; got {str(path)!r}.")
    tables = summary_tables(results)
    try:
        images = figures(results, activity)
        missing = None
    except _optional.Unavailable as error:
        images, missing = [], f"No plots: {error}"
    if path.suffix.lower() == ".md":
        text = _markdown(title, notes, tables, images, missing, path)
    else:
        text = _html(title, notes, tables, images, missing)
    path.write_text(text, encoding="utf-8")
    return path


def _markdown(title, notes, tables, images, missing, path):
    parts = [f"# {title}", *notes]
    for heading, frame, note in tables:
        parts += [f"## {heading}"] + ([] if frame is None else [to_markdown(frame)]) + ([note] if note else [])
    parts.append("## Plots")
    if missing:
        parts.append(missing)
    folder = path.with_name(path.stem + "_files")
    for i, (heading, data) in enumerate(images):
        folder.mkdir(exist_ok=True)
        (folder / f"figure{i + 1}.png").write_bytes(data)
        parts += [f"### {heading}", f"![{heading}]({folder.name}/figure{i + 1}.png)"]
    return "\n\n".join(parts) + "\n"


def _html(title, notes, tables, images, missing):
    style = ("body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
             "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 8px;"
             "text-align:right}img{max-width:100%}")
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
             f"<style>{style}</style></head><body><h1>{html.escape(title)}</h1>"]
    parts += [f"<p>{html.escape(line)}</p>" for line in notes]
    for heading, frame, note in tables:
        parts.append(f"<h2>{html.escape(heading)}</h2>")
        if frame is not None:
            parts.append(frame.to_html(float_format=lambda x: f"{x:.4g}"))
        if note:
            parts.append(f"<p>{html.escape(note)}</p>")
    parts.append("<h2>Plots</h2>")
    if missing:
        parts.append(f"<p class='missing'>{html.escape(missing)}</p>")
    for heading, data in images:
        parts.append(f"<h3>{html.escape(heading)}</h3><img alt='{html.escape(heading)}' "
                     f"src='data:image/png;base64,{base64.b64encode(data).decode()}'>")
    return "".join(parts) + "</body></html>\n"
