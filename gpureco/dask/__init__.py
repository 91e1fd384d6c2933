"""gpureco on a Dask cluster: the same functions, users in partitions, one worker per GPU or CPUs.

``pip install "gpureco[dask]"``. Users are cut into partitions; the item side (``B``, the item
biases, a score function) is sent to every worker once; each worker runs the single-machine
engine on its users (on its GPU when it has one), and the per-user results come back in user
order, the numbers bit for bit those of one machine. See docs/dask.md.
"""
from .. import _optional

_optional.package("dask", "dask")
_optional.package("distributed", "dask")

from ._lists import evaluate_lists  # noqa: E402 - after the check that names the extra
from ._metrics import calc_reco_metrics, evaluate  # noqa: E402
from ._stats import summarize, summary  # noqa: E402
from ._top_k import top_k  # noqa: E402

__all__ = ["calc_reco_metrics", "evaluate", "top_k", "evaluate_lists", "summarize", "summary"]
