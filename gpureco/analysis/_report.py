"""Evaluation reports: summary tables and plots of per-user results, as self-contained HTML or Markdown."""
from __future__ import annotations

import base64
import html
import io
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.sparse as sp

from .. import _optional
from ._stats import compare, holm, summarize, to_markdown

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


def _shared_headlines(results):
    columns = {name: headline_columns(frame) for name, frame in results.items()}
    return [c for c in columns[next(iter(results))] if all(c in cols for cols in columns.values())]


def model_summary(results):
    """gpureco.summarize of each model's per-user frame, stacked with a 'model' level."""
    return pd.concat({name: summarize(frame) for name, frame in results.items()}, names=["model", "metric"])


ALPHA = 0.05  # the significance level of the models x metrics table's markers
HIGHER, LOWER = "▲", "▼"


def results_table(results, baseline=None):
    """The models x metrics table, long: one row per (model, metric) with the mean, its 95% t interval, and against
    the baseline (the first model by default) the paired mean difference and its 95% t interval, the paired t-test's
    p-value, that
    p-value Holm-adjusted over every (model, metric) test of the table, and the marker: HIGHER or LOWER where the
    adjusted p-value is below ALPHA."""
    names = list(results)
    baseline = names[0] if baseline is None else baseline
    if baseline not in results:
        raise ValueError(f"'baseline' must be one of the models {names}; got {baseline!r}.")
    heads = _shared_headlines(results)
    rows = []
    for name, frame in results.items():
        summary = summarize(frame[heads])
        for metric in heads:
            rows.append(dict(model=name, metric=metric, mean=summary.at[metric, "mean"],
                             ci_low=summary.at[metric, "ci_low"], ci_high=summary.at[metric, "ci_high"],
                             n_users=summary.at[metric, "n_users"]))
    table = pd.DataFrame(rows)
    paired_columns = {"mean_diff": "diff_vs_baseline", "ci_low": "diff_ci_low", "ci_high": "diff_ci_high",
                      "p_ttest": "p_ttest"}
    for column in paired_columns.values():
        table[column] = np.nan
    for name in names:
        if name != baseline:
            paired = compare(results[baseline][heads], results[name][heads], names=[baseline, name],
                             correction=None, n_permutations=1).set_index("metric")
            at = table["model"] == name
            for theirs, ours in paired_columns.items():
                table.loc[at, ours] = paired.loc[table.loc[at, "metric"], theirs].to_numpy()
    table["p_ttest_holm"] = holm(table["p_ttest"])
    significant = table["p_ttest_holm"] < ALPHA
    table["marker"] = np.where(significant & (table["diff_vs_baseline"] > 0), HIGHER,
                               np.where(significant & (table["diff_vs_baseline"] < 0), LOWER, ""))
    table.attrs["baseline"] = baseline
    return table


def _table_note(table):
    tests = int(table["p_ttest"].notna().sum())
    if not tests:
        return "Mean over users ± half-width of its 95% t confidence interval; the best mean of each metric in bold."
    return (f"Mean over users ± half-width of its 95% t confidence interval; the best mean of each metric in bold. "
            f"{HIGHER} / {LOWER}: higher / lower than the baseline {table.attrs['baseline']!r} (paired t-test, "
            f"p < {ALPHA} after Holm's adjustment over the table's {tests} tests).")


def _cells(table, bold, plus_minus=" ± ", marks=None):
    """The wide models x metrics frame of strings: bold(text) marks the best mean of each metric, `marks` maps the
    markers (default: as they are)."""
    best = table.groupby("metric")["mean"].transform("max")

    def cell(row):
        mean = f"{row['mean']:.4f}"
        half = (row["ci_high"] - row["ci_low"]) / 2
        text = (bold(mean) if row["mean"] == best[row.name] else mean) + (
            "" if np.isnan(half) else f"{plus_minus}{half:.4f}")
        return text + ((marks or {}).get(row["marker"], f" {row['marker']}") if row["marker"] else "")

    wide = table.assign(cell=table.apply(cell, axis=1)).pivot(index="model", columns="metric", values="cell")
    return wide.loc[list(dict.fromkeys(table["model"])), list(dict.fromkeys(table["metric"]))]


def latex_table(results, baseline=None):
    """The models x metrics table of :func:`results_table` as a LaTeX tabular (booktabs), to paste in a paper."""
    table = results_table(results, baseline)

    special = {"\\": r"\textbackslash{}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
               **{c: "\\" + c for c in "_&%#${}"}}

    def escape(text):  # every character LaTeX reads as a command, in a name that is text
        return re.sub(r"[\\~^_&%#${}]", lambda m: special[m.group()], str(text))

    wide = _cells(table, lambda text: rf"\textbf{{{text}}}", r" $\pm$ ",
                  {HIGHER: r"$^{\uparrow}$", LOWER: r"$^{\downarrow}$"})
    note = _table_note(table).replace(HIGHER, "up arrow").replace(LOWER, "down arrow")
    lines = [r"% gpureco: " + " ".join(note.splitlines()),  # (one comment line, whatever the names hold)
             r"% needs \usepackage{booktabs}", r"\begin{tabular}{l" + "r" * wide.shape[1] + "}", r"\toprule",
             " & ".join(["Model", *map(escape, wide.columns)]) + r" \\", r"\midrule"]
    lines += [" & ".join([escape(model), *row]) + r" \\" for model, row in zip(wide.index, wide.to_numpy())]
    return "\n".join(lines + [r"\bottomrule", r"\end{tabular}"]) + "\n"


def _buckets(counts):
    """Power-of-two buckets of counts: '0', '1', '2-3', '4-7', ... (user activity, item popularity)."""
    counts = np.asarray(counts, dtype=np.int64)
    low = np.where(counts > 0, 2 ** np.floor(np.log2(np.maximum(counts, 1))).astype(np.int64), 0)
    labels = np.where(low <= 1, low.astype(str), pd.Series(low).astype(str) + "-" + pd.Series(2 * low - 1).astype(str))
    return pd.Categorical(labels, categories=list(dict.fromkeys(labels[np.argsort(low, kind="stable")])), ordered=True)


def activity_table(results, activity):
    """Users and each model's mean of each headline metric, by bucket of training interactions."""
    buckets = _buckets(activity)
    heads = _shared_headlines(results)
    out = pd.DataFrame({"users": pd.Series(buckets).value_counts(sort=False)})
    for name, frame in results.items():
        means = frame[heads].groupby(buckets, observed=False).mean()
        out = out.join(means.add_prefix(f"{name}: " if len(results) > 1 else ""))
    out.index.name = "training interactions"
    return out


def item_tables(lists, popularity, X_test):
    """(by bucket of item popularity: items, training and test interactions, each model's exposure share and the
    share of the bucket's test interactions its lists hold; the bucket of each item)."""
    popularity = np.asarray(popularity)
    n_items = popularity.size
    buckets = _buckets(popularity)
    test_items = sp.csr_array(X_test).indices
    out = pd.DataFrame({"items": pd.Series(buckets).value_counts(sort=False),
                        "training interactions": pd.Series(popularity).groupby(buckets, observed=False).sum()})
    out["test interactions"] = pd.Series(buckets[test_items]).value_counts(sort=False)
    out["share of training"] = out["training interactions"] / max(out["training interactions"].sum(), 1)
    X_test = sp.csr_array(X_test)
    for name, items in lists.items():
        items = np.asarray(items)
        listed = items >= 0
        exposure = np.bincount(items[listed], minlength=n_items)
        out[f"{name}: share of exposure"] = (pd.Series(exposure).groupby(buckets, observed=False).sum()
                                             / max(exposure.sum(), 1))
        rows = np.repeat(np.arange(items.shape[0]), listed.sum(axis=1))
        L = sp.csr_array((np.ones(rows.size), (rows, items[listed])), shape=X_test.shape)
        hits = sp.csr_array(X_test.astype(bool).multiply(L)).indices
        found = pd.Series(buckets[hits]).value_counts(sort=False).reindex(out.index, fill_value=0)
        out[f"{name}: test interactions listed"] = found / out["test interactions"].replace(0, np.nan)
    out.index.name = "item popularity (training interactions)"
    return out


def figures(results, activity=None, items=None, baseline=None):
    """[(title, PNG bytes)]: metric vs K, per-user distributions, the forest plot of paired differences against
    the baseline, metric by activity bucket, exposure and test interactions listed by item popularity.

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

    heads = _shared_headlines(results)
    fig, axes = grid(len(heads))
    for ax, column in zip(axes, heads):
        for name, frame in results.items():
            ax.hist(frame[column].dropna(), bins=20, range=(0, 1), histtype="step", label=name)
        ax.set_title(column)
    axes[0].legend(fontsize=8)
    out.append(("Per-user distribution of each metric", png(fig)))

    if len(results) > 1:
        table = results_table(results, baseline)
        others = [name for name in results if name != table.attrs["baseline"]]
        fig, ax = plt.subplots(figsize=(7, 0.9 + 0.45 * len(heads) * len(others)))
        for i, name in enumerate(others):
            mine = table[table["model"] == name].set_index("metric").loc[heads]
            y = np.arange(len(heads)) + (i - (len(others) - 1) / 2) * 0.8 / len(others)
            ax.errorbar(mine["diff_vs_baseline"], y, xerr=[mine["diff_vs_baseline"] - mine["diff_ci_low"],
                                                           mine["diff_ci_high"] - mine["diff_vs_baseline"]],
                        fmt="o", ms=4, capsize=3, label=f"{name} - {table.attrs['baseline']}")
            for yy, x, marker in zip(y, mine["diff_ci_high"], mine["marker"]):
                ax.annotate(marker, (x, yy), xytext=(4, -3), textcoords="offset points", fontsize=8)
        ax.axvline(0, color="grey", lw=1)
        ax.set_yticks(np.arange(len(heads)), heads)
        ax.invert_yaxis()
        ax.set_xlabel("paired mean difference over users (95% t CI)")
        ax.legend(fontsize=8)
        out.append((f"Paired differences against {table.attrs['baseline']}", png(fig)))

    if activity is not None:
        counts = pd.Series(_buckets(activity)).value_counts(sort=False)
        fig, axes = grid(len(heads))
        for ax, column in zip(axes, heads):
            means = pd.DataFrame({name: frame[column].to_numpy() for name, frame in results.items()})
            means.groupby(_buckets(activity), observed=False).mean().plot.bar(ax=ax, legend=False, rot=45)
            ax.set_xticks(range(len(counts)), [f"{b}\nn={n:,}" for b, n in counts.items()], fontsize=7)
            ax.set_title(column)
            ax.set_xlabel("training interactions", fontsize=8)
        axes[0].legend(fontsize=8)
        out.append(("Each metric by user activity", png(fig)))

    if items is not None:
        table = items["table"]
        models = list(items["lists"])
        fig, (left, right) = plt.subplots(1, 2, figsize=(12, 3.6))
        shares = table[["share of training"] + [f"{m}: share of exposure" for m in models]]
        shares.set_axis(["training interactions"] + models, axis=1).plot.bar(ax=left, rot=45)
        left.set_ylabel("share")
        left.set_title("Exposure in the lists against popularity in training")
        found = table[[f"{m}: test interactions listed" for m in models]].set_axis(models, axis=1)
        found.plot.bar(ax=right, rot=45, legend=False)
        right.set_title("Share of test interactions in the lists")
        for ax in (left, right):
            ax.set_xticks(range(len(table)), [f"{b}\nn={n:,}" for b, n in table["items"].items()], fontsize=7)
            ax.set_xlabel("item popularity (training interactions); n = items", fontsize=8)
        out.append(("Item popularity: exposure and test interactions listed", png(fig)))
    return out


def write_report(results, path="gpureco_report.html", *, activity=None, title="gpureco evaluation report", notes=(),
                 baseline=None, lists=None, popularity=None, X_test=None, tables=(), provenance=None):
    """Write an evaluation report: the models x metrics table, summary tables, plots and provenance.

    The report holds: the models x metrics table (mean ± half-width of the 95% t interval,
    the best mean in bold, and against the baseline a marker where the paired t-test's
    p-value, Holm-adjusted over every test of the table, is below 0.05), with CSV and LaTeX
    copies; each model's summary; the paired comparison of every two models; plots (each
    metric against K, the per-user distributions, the forest plot of paired differences
    against the baseline, each metric by user activity beside the users per bucket, and with
    the lists the exposure and the test interactions listed by item popularity beside the
    items per bucket); extra tables; and the provenance of each model's results.

    Parameters
    ----------
    results : dict {model name: DataFrame}
        Per-user metrics of each model, as returned by :func:`gpureco.calc_reco_metrics`
        (``cumulative=True`` gives the metric-against-K plot its points), one row per user,
        the same users in the same order for every model.
    path : str or Path, default="gpureco_report.html"
        ``.html``: one self-contained file (images and the CSV/LaTeX copies embedded).
        ``.md``: Markdown, with the images and the copies in the folder ``<name>_files``
        beside it.
    activity : array-like of shape (n_users,), default=None
        Each user's number of training interactions, for the views by user activity.
    title : str
    notes : sequence of str
        Lines shown under the title (data set, split, models).
    baseline : str, default=None
        The model the others are tested against; the first model by default.
    lists : dict {model name: int array of shape (n_users, K)}, default=None
        Each model's top-K lists (item indices, -1 for an empty position; the rows of
        ``results``), as :func:`gpureco.top_k` returns them: the item-side views need them,
        ``popularity`` and ``X_test``.
    popularity : array-like of shape (n_items,), default=None
        Each item's number of training interactions.
    X_test : sparse matrix of shape (n_users, n_items), default=None
        The test interactions of the users of ``results``.
    tables : sequence of (title, DataFrame, note)
        More tables to show (note may be None).
    provenance : dict {model name: dict}, default=None
        What produced each model's results (data, split, model files, options, versions), shown as JSON.

    Returns
    -------
    Path of the report. Without matplotlib the report says so, and how to install it, instead of showing plots.
    """
    _check_results(results)
    path = Path(path)
    if path.suffix.lower() not in (".html", ".htm", ".md"):
        raise ValueError(f"'path' must end in .html or .md; got {str(path)!r}.")
    problem = files_folder_problem(path)
    if problem:
        raise ValueError(f"'path' {str(path)!r}: {problem}")
    items = None
    if lists is not None:
        if popularity is None or X_test is None:
            raise ValueError("'lists' needs 'popularity' and 'X_test' (the item-side views); got "
                             f"popularity={type(popularity).__name__}, X_test={type(X_test).__name__}.")
        items = dict(lists=lists, table=item_tables(lists, popularity, X_test))
    main = results_table(results, baseline)
    blocks = [("p", line) for line in notes]
    blocks += [("h2", "Models x metrics"), _table("Models x metrics", _cells(main, lambda text: f"**{text}**"),
                                                  latex_table(results, baseline), main), ("p", _table_note(main))]
    for heading, frame in [("Summary", model_summary(results))] + (
            [("Paired comparison", compare(*(f[_shared_headlines(results)] for f in results.values()),
                                           names=list(results)))] if len(results) > 1 else []):
        blocks += [("h2", heading), _table(heading, frame)]
    for heading, frame, note in tables:
        blocks += [("h2", heading), _table(heading, frame)]
        blocks += [("p", note)] if note else []
    blocks.append(("h2", "Plots"))
    try:
        images = dict(figures(results, activity, items, baseline))
    except _optional.Unavailable as error:
        images = {}
        blocks.append(("p", f"No plots: {error}"))
    beside = {"Each metric by user activity": (None if activity is None else activity_table(results, activity)),
              "Item popularity: exposure and test interactions listed": None if items is None else items["table"]}
    for heading, data in images.items():
        blocks += [("h3", heading), ("image", heading, data)]
        if beside.get(heading) is not None:
            blocks.append(_table(heading, beside[heading]))
    if not images:
        for heading, table in beside.items():
            if table is not None:
                blocks += [("h3", heading), _table(heading, table)]
    if provenance:
        blocks.append(("h2", "Provenance"))
        for name, record in provenance.items():
            blocks += [("details", name, json.dumps(record, indent=1, default=str))]
    text = _markdown(title, blocks, path) if path.suffix.lower() == ".md" else _html(title, blocks)
    path.write_text(text, encoding="utf-8")
    return path


def _table(heading, frame, latex=None, numbers=None):
    """A table block: shown as `frame`, its CSV copy (named after the heading) from `numbers` (default: `frame`),
    and a LaTeX copy when given."""
    name = re.sub(r"\W+", "_", heading.lower()).strip("_")
    return ("table", frame, name, latex, frame if numbers is None else numbers)


def _number(x):
    return f"{x:.4g}"


def files_folder(path):
    """The folder of a Markdown report's images and table copies: <name>_files beside it."""
    return Path(path).with_name(Path(path).stem + "_files")


def files_folder_problem(path):
    """What is wrong where a Markdown report's folder would be a file of that name (checked before any work), else
    None."""
    folder = files_folder(path)
    if Path(path).suffix.lower() != ".md" or not folder.exists() or folder.is_dir():
        return None
    return (f"a Markdown report puts its images and tables in {str(folder)!r}, which is a file; move it, or choose "
            "another name or an .html report.")


def _markdown(title, blocks, path):
    folder = files_folder(path)
    parts, figure = [f"# {title}"], 0
    for kind, *content in blocks:
        if kind in ("h2", "h3"):
            parts.append(f"{'#' * int(kind[1])} {content[0]}")
        elif kind == "p":
            parts.append(content[0])
        elif kind == "table":
            frame, name, latex, numbers = content
            folder.mkdir(exist_ok=True)
            numbers.to_csv(folder / f"{name}.csv", index=not isinstance(numbers.index, pd.RangeIndex))
            links = [f"[CSV]({folder.name}/{name}.csv)"]
            if latex:
                (folder / f"{name}.tex").write_text(latex, encoding="utf-8")
                links.append(f"[LaTeX]({folder.name}/{name}.tex)")
            parts += [to_markdown(frame), " · ".join(links)]
        elif kind == "image":
            figure += 1
            folder.mkdir(exist_ok=True)
            (folder / f"figure{figure}.png").write_bytes(content[1])
            parts.append(f"![{content[0]}]({folder.name}/figure{figure}.png)")
        else:  # details
            parts += [f"### {content[0]}", f"```json\n{content[1]}\n```"]
    return "\n\n".join(parts) + "\n"


_STYLE = ("body{font-family:sans-serif;max-width:1150px;margin:2em auto;color:#222}"
          "table{border-collapse:collapse;font-size:13px;margin:0.5em 0}td,th{border:1px solid #ccc;padding:3px 8px;"
          "text-align:right}img{max-width:100%}.downloads{font-size:12px}pre{font-size:12px;background:#f6f6f6;"
          "padding:0.5em;overflow-x:auto}details{margin:0.3em 0}")


def _download(name, text, mime):
    return (f"<a download='{html.escape(name)}' href='data:{mime};base64,"
            f"{base64.b64encode(text.encode()).decode()}'>{html.escape(name.rsplit('.', 1)[-1].upper())}</a>")


def _html(title, blocks):
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
             f"<style>{_STYLE}</style></head><body><h1>{html.escape(title)}</h1>"]
    for kind, *content in blocks:
        if kind in ("h2", "h3"):
            parts.append(f"<{kind}>{html.escape(content[0])}</{kind}>")
        elif kind == "p":
            css = " class='missing'" if content[0].startswith("No plots:") else ""
            parts.append(f"<p{css}>{html.escape(content[0])}</p>")
        elif kind == "table":
            frame, name, latex, numbers = content
            shown = frame.to_html(float_format=_number, escape=True)
            shown = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", shown)  # the best means
            csv = numbers.to_csv(index=not isinstance(numbers.index, pd.RangeIndex))
            links = [_download(f"{name}.csv", csv, "text/csv")]
            links += [_download(f"{name}.tex", latex, "application/x-tex")] if latex else []
            parts.append(f"{shown}<p class='downloads'>Download: {' · '.join(links)}</p>")
        elif kind == "image":
            parts.append(f"<img alt='{html.escape(content[0])}' "
                         f"src='data:image/png;base64,{base64.b64encode(content[1]).decode()}'>")
        else:  # details
            parts.append(f"<details><summary>{html.escape(content[0])}</summary>"
                         f"<pre>{html.escape(content[1])}</pre></details>")
    return "".join(parts) + "</body></html>\n"
