"""Optional dependencies (pyarrow, matplotlib): imported on use, with the pip command when missing."""
from __future__ import annotations

import importlib


class Unavailable(RuntimeError):
    """A feature needs an optional package that is not installed."""


def package(module, extra):
    """The module, or Unavailable with the pip command that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise Unavailable(f"{module} is not installed; install it with: pip install 'gpureco[{extra}]' "
                          f"(or pip install {module}).") from None
