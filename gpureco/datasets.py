"""Generated implicit-feedback data sets, for demos, tests and benchmarks (no download).
The public face of gpureco/data/_datasets.py."""
from .data._datasets import make_interactions

__all__ = ["make_interactions"]
