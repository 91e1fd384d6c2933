"""Builds the one compiled piece of the CPU engine (gpureco/engine/_cpu_ranks.pyx); the rest is pyproject.toml."""
from Cython.Build import cythonize
from setuptools import Extension, setup

setup(
    ext_modules=cythonize(
        [Extension("gpureco.engine._cpu_ranks", ["gpureco/engine/_cpu_ranks.pyx"], extra_compile_args=["-O3", "-ffp-contract=off"])],
        compiler_directives={"language_level": 3},
    )
)
