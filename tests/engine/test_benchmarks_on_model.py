"""The GPU benchmarks' own Python (benchmarks/bench_gpu.py, bench_gpu_sweep.py, bench_gpu_host.py)
run end to end on the NumPy model of the device (tests/gpu_model.py), on small problems.

A device session is rare and short (benchmarks/gpu_check.py runs these scripts there): a
benchmark that fails on the GPU loses the figures of every step after it. The model's CuPy is
as strict as CuPy where the scripts have tripped before: cupy.array_equal takes arrays only
(calc_reco_metrics' results hold K, a Python int), and bincount refuses an empty array (as
CuPy before 14.2 does). What only a GPU can tell: the timings, the memory hook's figures, and
the torch pipelines (skipped here: torch has no CUDA device)."""
import importlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from gpu_model import DeviceArray, model_device

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def device_results(function):
    """function, its arrays returned as the model's device arrays (cupy.ndarray: .get())."""
    def on_device(*args, **kwargs):
        out = function(*args, **kwargs)
        return out.view(DeviceArray) if type(out) is np.ndarray else out
    return on_device


@pytest.fixture
def on_model(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    with model_device(monkeypatch) as cupy:
        for name in ("concatenate", "argsort", "empty_like", "zeros", "arange", "take_along_axis", "matmul"):
            setattr(cupy, name, device_results(getattr(cupy, name)))
        monkeypatch.setitem(sys.modules, "cupy", cupy)
        yield cupy


def results(folder, prefix):
    files = sorted(Path(folder).glob(f"{prefix}_*.json"))
    assert len(files) == 1, files
    return json.loads(files[0].read_text())


def test_the_model_cupy_refuses_what_cupy_refuses(on_model):
    cp = on_model
    with pytest.raises(AttributeError, match="shape"):
        cp.array_equal(cp.zeros(2), 3)
    with pytest.raises(ValueError, match="zero-size"):
        cp.bincount(cp.zeros(0, dtype=cp.int64), minlength=3)


def test_same_results_compares_arrays_and_the_rest(on_model):
    same_results = importlib.import_module("bench_gpu").same_results
    cp = on_model
    a = {"P@K": cp.asarray([0.5, float("nan")]), "K": 5}
    assert same_results(cp, a, {"P@K": cp.asarray([0.5, float("nan")]), "K": 5})
    assert not same_results(cp, a, {"P@K": cp.asarray([0.5, 0.25]), "K": 5})
    assert not same_results(cp, a, {"P@K": cp.asarray([0.5, float("nan")]), "K": 6})
    assert not same_results(cp, a, {"P@K": cp.asarray([0.5, float("nan")])})


def test_bench_gpu_runs_on_the_model(on_model, tmp_path):
    importlib.import_module("bench_gpu").main(
        ["--users", "40", "--items", "2500", "--factors", "6", "-k", "5", "--repeats", "1",
         "--tile-shapes", "1024:auto,512:16", "--pipeline-batch", "16", "--out", str(tmp_path)])
    info = results(tmp_path, "gpu")
    assert info["device"] == "NumPy model of a GPU" and info["problem"]["users"] == 40
    assert info["tf32_identical_to_fp32"] is True and info["fused_identical_to_fp32"] is True
    assert [shape["identical"] for shape in info["tile_shapes"].values()] == [True, True]
    agreement = info["agreement_with_gpureco"]["CuPy"]  # the CuPy pipeline: the same P@K and ROC-AUC
    assert agreement["P@K max abs diff"] == 0 and agreement["ROC_AUC max abs diff"] < 1e-12
    assert set(info["seconds"]) >= {"gpureco", "gpureco, tf32=True", "gpureco, fused kernel", "cuBLAS A.B^T alone",
                                    "CuPy pipeline"}


def test_bench_gpu_sweep_runs_on_the_model(on_model, tmp_path):
    importlib.import_module("bench_gpu_sweep").main(
        ["--sizes", "30x2000x5", "--ks", "3,40", "--small", "20x300x4", "--topk-size", "30x2000x5",
         "--topk-ks", "3,20", "--repeats", "1", "--out", str(tmp_path)])
    info = results(tmp_path, "gpu_sweep")
    assert len(info["sweep"]) == 2 * 4 and all(row["identical"] for row in info["sweep"])
    assert len(info["top_k"]) == 2 * 4 and all(row["identical"] for row in info["top_k"])
    assert {row["users"] for row in info["small"]} == {20}
    assert info["targets"]["every mode's numbers identical to the default's"] is True
    assert info["targets"]["top_k twice as fast as torch at every K (best mode)"] is None  # no torch on the model


def test_bench_gpu_host_runs_on_the_model(on_model, tmp_path):
    importlib.import_module("bench_gpu_host").main(
        ["--sizes", "30x2000x5,20x500x4", "-k", "3", "--repeats", "1", "--calls", "2", "--out", str(tmp_path)])
    info = results(tmp_path, "gpu_host")
    assert [(row["users"], row["items"]) for row in info["rows"]] == [(30, 2000), (20, 500)]
    row = info["rows"][0]
    assert row["wall_ms"] > 0 and row["kernel_ms"] is None  # no torch with CUDA on the model: no kernel times
    assert any("calc_reco_metrics" in entry[0] for entry in row["profile"]["gpureco"])


def test_bench_gemm_runs_on_the_model(on_model, tmp_path):
    importlib.import_module("bench_gemm").main(
        ["--users", "7,12", "--items", "300", "--factors", "5", "--repeats", "1", "--out", str(tmp_path)])
    info = results(tmp_path, "gpu_gemm")
    assert [(row["users"], row["variant"]) for row in info["rows"]][:4] == [
        (7, "U B^T"), (7, "U (B^T)"), (7, "(B U^T)^T"), (7, "U B^T, TF32 3 passes")]
    assert len(info["rows"]) == 8 and all(row["ms"] > 0 and row["kernel"] is None for row in info["rows"])
    float32 = [row for row in info["rows"] if "TF32" not in row["variant"]]
    assert all(row["max_rel_diff"] < 1e-6 for row in float32)  # the same products
    tf32 = [row for row in info["rows"] if "TF32" in row["variant"]]
    assert all(0 < row["max_rel_diff"] < 1e-4 for row in tf32)  # the split's: within a few float32 units


def test_ncu_sass_summarises_a_source_page(tmp_path):
    """benchmarks/ncu_sass.py on a small source page as ncu writes it (a first line naming the
    kernel, then the table): shares by opcode, by stall reason, and the most-sampled lines."""
    sys.path.insert(0, str(BENCHMARKS))
    ncu_sass = importlib.import_module("ncu_sass")
    page = tmp_path / "page.csv"
    page.write_text('"Kernel Name","k",\n'
                    '"Address","Source","Warp Stall Sampling (All Samples)","Instructions Executed","stall_long_sb",'
                    '"stall_math","stall_math (Not Issued)"\n'
                    '"0x10","      FADD R1, R2, R3","6","30","5","1","9"\n'
                    '"0x20"," @P0   BRA 0x10","2","10","0","2","9"\n'
                    '"0x30","      FADD.FTZ R1, R1, R1","0","60","0","0","0"\n')
    text = ncu_sass.summary(*ncu_sass.read(str(page)), top=5)
    assert "100 warp instructions executed, 8 warp-stall samples." in text
    assert "| FADD | 90.0% |" in text and "| BRA | 10.0% |" in text
    assert "| long_sb | 62.5% |" in text and "| math | 37.5% |" in text
    assert "| `FADD R1, R2, R3` | 75.0% | long_sb 5, math 1 |" in text
