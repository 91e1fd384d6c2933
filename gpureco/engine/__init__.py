"""The evaluation engine, below every front door.

- _registry: the metrics' names, flags and NaN rules (the single source of names).
- _engine: the validated Problem (data) and Request (what to compute); `run` ranks the test
  items on a backend and turns the ranks into metrics; `top_k` lists.
- _backend: which backend evaluates, and the one module that imports cupy.
- _scores: the definition of a score, its error bound under BLAS, shared ranking helpers.
- _cpu (+ the Cython _cpu_ranks): the CPU backend. _gpu (+ kernels/*.cu): the GPU backend.
- _metrics: ranks, pool sizes and gains -> every metric, in one arithmetic routine.

Nothing here imports from outside engine/ (docs/architecture.md).
"""
