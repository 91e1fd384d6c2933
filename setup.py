"""Builds the compiled pieces of the engine (gpureco/engine/_cpu_ranks.pyx: the CPU ranking;
_metrics_loop.pyx: the metric arithmetic); the rest is pyproject.toml."""
from Cython.Build import cythonize
from setuptools import Extension, setup

setup(
    ext_modules=cythonize(
        [Extension(f"gpureco.engine.{name}", [f"gpureco/engine/{name}.pyx"], extra_compile_args=["-O3", "-ffp-contract=off"])
         for name in ("_cpu_ranks", "_metrics_loop")],
        compiler_directives={"language_level": 3},
    )
)
