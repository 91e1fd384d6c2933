"""Analysis of per-user results: summaries, confidence intervals and paired tests (_stats),
and the HTML/Markdown report (_report)."""
