"""The item-side inputs of a report, from each model's top-K lists."""
from __future__ import annotations

import numpy as np
import pandas as pd

from .._beyond import beyond_accuracy


def item_views(lists, X_train, X_test, k):
    """write_report's keyword arguments for the item-side views: each model's lists (item indices, rows as in
    X_test), the items' training popularity, the test rows, and the popularity bias table (beyond_accuracy)."""
    popularity = np.bincount(X_train.indices, minlength=X_train.shape[1])
    bias = pd.DataFrame({name: {column: float(np.mean(value)) for column, value in beyond_accuracy(
        items, ["Coverage", "Gini", "ARP", "Tail"], k=k, n_items=X_train.shape[1], popularity=popularity).items()}
        for name, items in lists.items()}).T
    note = ("Coverage: share of the items in some list; Gini: of the items' exposure (0: equal, near 1: one item); "
            "ARP: mean training popularity of a listed item, averaged over the lists; Tail: share of the list slots "
            "outside the 20% most popular items (gpureco.beyond_accuracy).")
    return dict(lists=lists, popularity=popularity, X_test=X_test,
                tables=[(f"Popularity bias of the top-{k} lists", bias, note)])
