"""gpureco.dask as an optional part: `import gpureco` never imports Dask, a missing Dask names the
extra, and a call without a cluster says how to get one."""
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp

from conftest import without

pytest.importorskip("distributed")


def test_import_gpureco_does_not_import_dask():
    code = "import sys, gpureco; print(sorted(m for m in ('dask', 'distributed') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("package", ["dask", "distributed"])
def test_a_missing_dask_names_the_extra(monkeypatch, package):
    import importlib

    from gpureco import _optional
    without(monkeypatch, package)
    monkeypatch.delitem(sys.modules, "gpureco.dask", raising=False)
    with pytest.raises(_optional.Unavailable, match=rf"{package} is not installed; install it with: pip install "
                                                    r"'gpureco\[dask\]'"):
        importlib.import_module("gpureco.dask")


def test_no_client_is_a_clear_error():
    import distributed

    import gpureco.dask
    with pytest.raises(ValueError):
        distributed.default_client()  # no cluster in this process
    X = sp.csr_array(np.eye(3))
    with pytest.raises(ValueError, match="gpureco.dask needs a Dask cluster: pass 'client'"):
        gpureco.dask.calc_reco_metrics(None, X, np.ones((3, 1)), np.ones((3, 1)))
