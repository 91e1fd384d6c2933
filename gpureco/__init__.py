"""gpureco: fast, exactly-defined evaluation of implicit-feedback recommender systems.

See docs/metrics.md for the definition of every metric, the tie rule and the NaN rules, and
docs/architecture.md for how the package is laid out.
"""
from . import datasets
from ._beyond import beyond_accuracy
from ._evaluate import Evaluator, evaluate
from ._lists import evaluate_lists
from ._recometrics import calc_reco_metrics
from ._top_k import top_k
from .analysis._report import write_report
from .analysis._stats import compare, summarize, to_markdown
from .data._interactions import IdMap, from_csr, to_csr
from .data._split import split_reco_train_test
from .data._splitters import split_k_fold_users, split_last_per_user, split_leave_k_out, split_time_cutoff
from .engine._backend import gpu_available
from .engine._registry import NAN_REASONS

__all__ = ["calc_reco_metrics", "evaluate", "Evaluator", "top_k", "evaluate_lists", "beyond_accuracy", "summarize", "compare",
           "to_markdown", "gpu_available", "NAN_REASONS", "split_reco_train_test", "split_leave_k_out",
           "split_last_per_user", "split_time_cutoff", "split_k_fold_users", "datasets", "to_csr", "from_csr",
           "IdMap", "write_report"]
__version__ = "0.1.0"
