"""gpureco: fast, exactly-defined evaluation of implicit-feedback recommender systems.

See docs/metrics.md for the definition of every metric, the tie rule and the NaN rules.
"""
from ._api import calc_reco_metrics, top_k
from ._backend import gpu_available
from ._beyond import beyond_accuracy
from ._evaluate import evaluate
from ._lists import evaluate_lists
from ._metrics import NAN_REASONS
from ._split import split_reco_train_test
from ._stats import compare, summarize, to_markdown

__all__ = ["calc_reco_metrics", "evaluate", "top_k", "split_reco_train_test", "gpu_available", "NAN_REASONS", "evaluate_lists",
           "beyond_accuracy", "summarize", "compare", "to_markdown"]
__version__ = "0.1.0"
