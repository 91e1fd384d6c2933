"""Every example in the docs runs: each docstring's doctest (every module of gpureco), and each
Python block of docs/training-loop.md (PyTorch, torch.distributed, Lightning) as a script."""
import doctest
import importlib
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MODULES = sorted(".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
                 for p in (ROOT / "gpureco").rglob("*.py"))
MODULES = [m for m in MODULES if not m.startswith("gpureco.dask") or importlib.util.find_spec("distributed")]


def docstring_tests():
    finder = doctest.DocTestFinder()
    tests = {}
    for name in MODULES:
        for test in finder.find(importlib.import_module(name)):
            if test.examples and test.name not in tests:
                tests[test.name] = test
    return sorted(tests.values(), key=lambda t: t.name)


DOCSTRINGS = docstring_tests()


def test_the_front_doors_examples_are_collected():
    tested = {test.name.rsplit(".", 1)[-1] for test in DOCSTRINGS}
    assert {"calc_reco_metrics", "evaluate", "Evaluator", "top_k", "evaluate_lists", "beyond_accuracy",
            "summarize", "compare", "gpu_available"} <= tested


@pytest.mark.parametrize("test", DOCSTRINGS, ids=lambda t: t.name)
def test_docstring_example(test):
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the NaN-users warnings of the examples
        runner.run(test, out=lambda text: failures.append(text))
    assert runner.failures == 0, "".join(failures)


failures = []


def test_a_wrong_docstring_example_fails():
    parser = doctest.DocTestParser()
    test = parser.get_doctest(">>> 1 + 1\n3\n", {}, "wrong", "wrong.py", 0)
    runner = doctest.DocTestRunner()
    runner.run(test, out=lambda text: None)
    assert runner.failures == 1


BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "training-loop.md").read_text(), re.S)
EXPECTED = ["'NDCG@10'", "'NDCG@10'", "'NDCG@10'", "'NDCG@10'"]  # each block prints a summary


def test_the_training_loop_page_has_its_four_examples():
    assert len(BLOCKS) == len(EXPECTED)


@pytest.mark.parametrize("index", range(len(EXPECTED)), ids=["pytorch", "update", "distributed", "lightning"])
def test_training_loop_example_runs(index, tmp_path):
    pytest.importorskip("torch")
    if "lightning" in BLOCKS[index]:
        pytest.importorskip("lightning")
    script = tmp_path / f"example_{index}.py"
    script.write_text(BLOCKS[index])
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert EXPECTED[index] in done.stdout
